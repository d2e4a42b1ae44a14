from __future__ import annotations

import pytest

from autodiscovery.toolkit.expr import ExprError, evaluate
from harnesses.hopper_gemm.manifest import ManifestError, parse, resolve

NAMES = {"M": 4096, "N": 2048, "K": 512}


def test_expressions():
    assert evaluate("cdiv(N, 128) * 2", NAMES) == 32
    assert evaluate("M % 128 == 0 and K >= 64", NAMES) is True
    assert evaluate("min(M, N) // 2", NAMES) == 1024
    assert evaluate(7, NAMES) == 7
    assert evaluate("D == 'M' or K > 1", {**NAMES, "D": "M"}) is True
    assert evaluate("D != 'M'", {**NAMES, "D": "N"}) is True


@pytest.mark.parametrize("bad", ["D + 1", "D * 10", "D < 'N'", "D == 1", "-D", "2 ** 10 ** 9", "2 ** -1"])
def test_strings_compare_only_and_powers_stay_small(bad):
    with pytest.raises(ExprError):
        evaluate(bad, {**NAMES, "D": "M"})


@pytest.mark.parametrize("bad", ["__import__('os')", "M.bit_length()", "open('x')", "[1][0]", "M / 2", "Q + 1", "M //"])
def test_expressions_refuse_anything_else(bad):
    with pytest.raises(ExprError):
        evaluate(bad, NAMES)


def source(manifest: str) -> str:
    return f"/* @manifest\n{manifest}\n*/\nextern \"C\" __global__ void gemm() {{}}\n"


GOOD = """kernel: gemm
grid: ["cdiv(N, 128)", "cdiv(M, 128)", 1]
block: [256, 1, 1]
smem: "2 * 128 * 64 * 2 * 4"
args: [A, B, C, M, N, K]
requires: ["K % 64 == 0"]"""


def test_resolve_a_good_manifest():
    launch = resolve(parse(source(GOOD)), 4096, 2048, 512)
    assert launch.grid == (16, 32, 1) and launch.block == (256, 1, 1) and launch.smem == 131072


@pytest.mark.parametrize(
    "change, message",
    [
        (("K % 64 == 0", "K % 1024 == 0"), "requires K % 1024 == 0"),
        (("[256, 1, 1]", "[2048, 1, 1]"), "must have 1 to 1024 threads"),
        (('"2 * 128 * 64 * 2 * 4"', "300000"), "exceeds the 232448-byte limit"),
        (("[A, B, C, M, N, K]", "[A, B, C, M, N, K, D]"), "unknown argument 'D'"),
        (("[A, B, C, M, N, K]", "[A, B, C, M, N, K, W]"), "W needs a workspace"),
        (("requires:", 'workspace: "M * N * 4"\nrequires:'), "passed as argument W"),
        (("[A, B, C, M, N, K]", "[A, B, C, M, N, K, W]\nworkspace: \"M * N * 64\""), "outside 0 to 268435456"),
        (("kernel: gemm", "kernel: 9bad"), "manifest: kernel"),
        (("grid:", "gird:"), "manifest: gird: no such key: did you mean grid?"),
    ],
)
def test_bad_manifests_are_refused_with_a_reason(change, message):
    with pytest.raises(ManifestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(parse(source(GOOD.replace(*change))), 4096, 2048, 512)


def test_cluster_must_divide_the_grid_and_maps_fit_the_swizzle():
    cluster = GOOD + "\ncluster: [2, 1, 1]"
    with pytest.raises(ManifestError, match="not a multiple of cluster"):
        resolve(parse(source(cluster.replace('"cdiv(N, 128)"', "3"))), 4096, 2048, 512)
    maps = GOOD.replace("args: [A, B, C, M, N, K]", "args: [tA, C]") + "\ntensor_maps: {tA: {tensor: A, box: [64, 128]}}"
    with pytest.raises(ManifestError, match="exceeds the 128-byte swizzle"):
        resolve(parse(source(maps)), 4096, 2048, 512)
    ok = maps.replace("box: [64, 128]", "box: [64, 64]")
    assert resolve(parse(source(ok)), 4096, 2048, 512).tensor_maps["tA"]["box"] == [64, 64]


def test_missing_manifest():
    with pytest.raises(ManifestError, match="no /\\* @manifest"):
        parse("__global__ void f() {}")


@pytest.mark.parametrize("bad", ["__import__('os')", "M.bit_length()", "[1][0]", "open(1)", "M if K else N", "M / 2"])
def test_compiled_constraints_take_the_same_grammar(bad):
    from autodiscovery.toolkit.expr import compiled

    with pytest.raises(ExprError):
        compiled(bad)


def test_compiled_constraints_agree_with_the_evaluator():
    from autodiscovery.toolkit.expr import compiled, run

    names = {**NAMES, "D": "M"}
    for text in ["cdiv(N, 128) * 2", "M % 128 == 0 and K >= 64", "D == 'M' or K > 1", "min(M, N) // 2 + (D != 'N')"]:
        assert run(compiled(text), text, names) == evaluate(text, names)
    with pytest.raises(ExprError):
        run(compiled("M // (K - 512)"), "M // (K - 512)", names)


def test_a_workspace_is_resolved_at_the_shape():
    ws = (GOOD.replace("[A, B, C, M, N, K]", "[A, B, C, M, N, K, W]")
          + '\nworkspace: "min(SMS, cdiv(M, 128)) * 128 * 128 * 4"\nstream_k: true')
    launch = resolve(parse(source(ws)), 4096, 2048, 512, sms=132)
    assert launch.workspace == 32 * 128 * 128 * 4 and launch.stream_k and launch.args[-1] == "W"
    assert resolve(parse(source(GOOD)), 4096, 2048, 512).workspace == 0


def test_a_dependent_launch_is_declared_and_the_families_declare_it_with_the_wait():
    assert resolve(parse(source(GOOD)), 4096, 2048, 512).pdl is False
    assert resolve(parse(source(GOOD + "\npdl: true")), 4096, 2048, 512).pdl is True
    from autodiscovery.agents.space import Space

    space = Space("hopper_gemm")
    for family in ("wgmma_cluster", "wgmma_splitk"):
        knobs = space.families[family].default
        on, off = (space.render(family, {**knobs, "PDL": p}) for p in (1, 0))
        assert resolve(parse(on), 4096, 2048, 512).pdl and not resolve(parse(off), 4096, 2048, 512).pdl
        body = on[on.index("extern \"C\" __global__"):]
        # every thread waits before any global memory: the wait comes before the roles split
        assert body.index("griddep_wait();") < body.index("const int wg = threadIdx.x / 128;") < body.index("tma_load")
        assert "griddep_wait();" not in off[off.index("extern \"C\" __global__"):]


def test_the_fast_parser_reads_every_shipped_manifest_as_pyyamls_own_does():
    """Manifests are read with libyaml's parser where PyYAML has it: the same data as `yaml.safe_load`, for
    every seed and every family's default of every shipped space; a broken one is said by PyYAML's own."""
    import yaml

    from autodiscovery.agents.space import Space
    from autodiscovery.campaign import SEARCH_SPACES, SEEDS
    from autodiscovery.toolkit import manifest

    sources = [p.read_text() for p in sorted(SEEDS.rglob("*")) if p.suffix in (".cu", ".py")]
    for folder in sorted(p.parent for p in SEARCH_SPACES.rglob("families.yaml")):
        space = Space(folder.name)
        sources += [space.render(f.name, f.default) for f in space.families.values() if f.template]
    texts = [m.group(1) or m.group(2) for s in sources if (m := manifest.MANIFEST_RE.search(s))]
    assert len(texts) > 25
    for text in texts:
        assert yaml.load(text, Loader=manifest.FAST_LOADER) == yaml.safe_load(text)
    with pytest.raises(ManifestError, match=r"line 3: manifest is not valid YAML: "):
        parse("/* @manifest\nkernel: gemm\nblock: [128, 1\n*/\n")
