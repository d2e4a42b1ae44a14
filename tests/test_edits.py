from autodiscovery.agents.edits import apply, parse

KERNEL = """#include <cuda_bf16.h>
extern "C" __global__ void gemm(int M) {
    int row = blockIdx.y * 16 + threadIdx.y;
    if (row >= M) return;
    float acc = 0.0f;
}
"""


def reply(*blocks, prose="Hypothesis: wider tiles raise arithmetic intensity.\n"):
    return prose + "".join(f"<<<<<<< SEARCH\n{s}=======\n{r}>>>>>>> REPLACE\n" for s, r in blocks)


def test_exact_block_applies():
    r = parse(reply(("    float acc = 0.0f;\n", "    float acc = 1.0f;\n")))
    assert r.hypothesis == "wider tiles raise arithmetic intensity."
    out = apply(KERNEL, r)
    assert out.ok and "float acc = 1.0f;" in out.source and out.source.count("acc") == 1


def test_relaxed_leading_whitespace_keeps_the_kernels_indentation():
    r = parse(reply(("int row = blockIdx.y * 16 + threadIdx.y;\nif (row >= M) return;\n",
                     "int row = blockIdx.y * 32 + threadIdx.y;\nif (row >= M) return;\n")))
    out = apply(KERNEL, r)
    assert out.ok
    assert "    int row = blockIdx.y * 32 + threadIdx.y;\n    if (row >= M) return;\n" in out.source


def test_a_block_that_does_not_match_is_reported_with_the_nearest_lines():
    r = parse(reply(("    float acc = 0.0f;\n", "    float acc = 2.0f;\n"),
                    ("    int row = blockIdx.x * 16;\n", "    int row = 0;\n")))
    out = apply(KERNEL, r)
    assert not out.ok and out.failed == [2] and out.applied == [1]
    assert "SEARCH block 2 does not match" in out.message
    assert "int row = blockIdx.y * 16 + threadIdx.y;" in out.message  # the nearest real lines
    assert "Blocks 1 applied" in out.message
    assert "float acc = 2.0f;" in out.source  # what applied stays applied


def test_whole_kernel_in_a_fence():
    text = "Hypothesis: rewrite.\n```cuda\n__global__ void gemm() {}\n```\n"
    r = parse(text)
    assert r.whole is not None and apply(KERNEL, r).source == "__global__ void gemm() {}\n"


def test_no_usable_edit_and_unchanged_edits_are_failures():
    out = apply(KERNEL, parse("I think we should use tensor cores."))
    assert not out.ok and "no usable edit" in out.message
    same = apply(KERNEL, parse(reply(("    float acc = 0.0f;\n", "    float acc = 0.0f;\n"))))
    assert not same.ok and "unchanged" in same.message


def test_hypothesis_falls_back_to_the_first_line_of_prose():
    r = parse("Use a 4-stage pipeline\n\n" + reply(("a\n", "b\n"), prose=""))
    assert r.hypothesis == "Use a 4-stage pipeline"


def test_thinking_is_never_parsed_for_edits():
    """A reasoning model behind a server without a reasoning parser puts its drafts in <think>: a block
    drafted there is never applied, nor its hypothesis taken; an unterminated <think> hides the rest."""
    source = "int main() {\n  int x = 1;\n  return x;\n}\n"
    draft = "<<<<<<< SEARCH\n  int x = 1;\n=======\n  int x = 2;\n>>>>>>> REPLACE\n"
    answer = "<<<<<<< SEARCH\n  int x = 1;\n=======\n  int x = 3;\n>>>>>>> REPLACE\n"
    reply = f"<think>\nHypothesis: two\n{draft}</think>\nHypothesis: three is better.\n{answer}"
    parsed = parse(reply)
    assert parsed.hypothesis == "three is better." and len(parsed.edits) == 1
    assert "int x = 3;" in apply(source, parsed).source
    only_thinking = parse(f"<think>\nHypothesis: two\n{draft}")
    assert only_thinking.edits == [] and only_thinking.whole is None
    assert not apply(source, only_thinking).ok
