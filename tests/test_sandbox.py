"""A candidate cannot read the host: directives that reach files are refused before any build, builds
see nothing of the user's, logs keep only the candidate's own diagnostics, the API key is never kept."""

from __future__ import annotations

import json
import random

import pytest
from conftest import needs_nvcc
from llm_server import ScriptedServer, fail, say
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery.agents.space import Space
from autodiscovery.cli import app
from autodiscovery.toolkit import sandbox

KERNEL = 'extern "C" __global__ void gemm(float* c) { c[0] = 1.0f; }\n'
REFUSED = [  # (what a candidate tries, its snippet, words of the reason it gets)
    ("an absolute path", '#include "/etc/passwd"\n', "a quoted #include"),
    ("a quoted relative path", '#include "../../.env"\n', "a quoted #include"),
    ("a path in angle brackets", "#include </home/user/.netrc>\n", "a path, not a header name"),
    ("climbing out in angle brackets", "#include <cuda/../../../../etc/passwd>\n", "a path, not a header name"),
    ("a header not on the list", "#include <fstream>\n", "not one of the headers"),
    ("a macro naming the file", '#define F "/etc/passwd"\n#include F\n', "#include F is refused"),
    ("#include_next", "#include_next <cuda.h>\n", "#include_next is refused"),
    ("#import", '#import "secret.h"\n', "#import is refused"),
    ("#embed", '#embed "/etc/passwd"\n', "#embed is refused"),
    ("#line naming a file", '#line 1 "/etc/passwd"\n', "#line is refused"),
    ("a line continuation", '#inc\\\nlude "/etc/passwd"\n', "a quoted #include"),
    ("a continuation with trailing blanks", '#  \\  \ninclude "/etc/passwd"\n', "a quoted #include"),
    ("a comment inside the directive", '#/* hidden */include "/etc/passwd"\n', "a quoted #include"),
    ("the %: digraph", '%:include "/etc/passwd"\n', "a quoted #include"),
    ("a trigraph", '??=include "/etc/passwd"\n', "trigraphs"),
    ("the _Pragma operator", '_Pragma("GCC dependency \\"/etc/passwd\\"")\n', "_Pragma is refused"),
    ("a pragma that reads a file", '#pragma GCC dependency "/etc/passwd"\n', "#pragma GCC is refused"),
    ("a pragma with an include alias", '#pragma include_alias("a.h", "/etc/passwd")\n', "#pragma include_alias"),
    ("__has_include", '#if __has_include("/home/user/.ssh/id_rsa")\n#endif\n', "__has_include is refused"),
    (".incbin in inline assembly", 'asm(".incbin \\"/etc/passwd\\"");\n', ".incbin is refused"),
]


@pytest.mark.parametrize("what,snippet,reason", REFUSED, ids=[r[0] for r in REFUSED])
def test_each_way_to_read_a_host_file_is_refused(what, snippet, reason):
    why = sandbox.refusal(snippet + KERNEL)
    assert why is not None and reason in why and "\n" not in why, (what, why)


def test_what_kernels_need_passes():
    ok = ("#include <cuda.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n#define BM 128\n#if BM > 64\n#endif\n"
          "#pragma unroll 4\n#pragma nv_diag_suppress 177\n// #include \"/etc/passwd\" in a comment\n"
          'const char* s = "#include \\"not a directive\\"";\n' + KERNEL)
    assert sandbox.refusal(ok) is None


@pytest.mark.long
def test_every_shipped_kernel_passes_the_check():
    space = Space("hopper_gemm")
    rng = random.Random(0)
    for fam in space.families.values():
        valid = list(fam.valid_configurations({"M": 4096, "N": 4096, "K": 4096})) if fam.template else [{}]
        for knobs in [fam.default, *rng.sample(valid, min(20, len(valid)))] if fam.template else [{}]:
            src = space.render(fam.name, knobs) if fam.template else campaigns.load("hopper-gemm").seed_path().read_text()
            assert sandbox.refusal(src) is None, (fam.name, knobs, sandbox.refusal(src))
    from harnesses.hopper_gemm import HELPERS

    assert sandbox.refusal(HELPERS.read_text()) is None
    codesign = campaigns.load("edge-codesign")
    from harnesses.accelsim.agent import CodesignAgent

    program = CodesignAgent(codesign).seed_proposal(codesign).source
    from harnesses.accelsim.arch import split

    assert sandbox.refusal(split(program)[0], sandbox.HOST_HEADERS) is None


def test_a_refused_candidate_is_rejected_never_compiled(tmp_path):
    from harnesses.hopper_gemm import HopperGemmHarness

    secret = tmp_path / "secret.env"
    secret.write_text("SECRET_TOKEN=abc123\n")
    seed = campaigns.load("hopper-gemm").seed_path().read_text()
    source = seed.replace("#include <cuda_bf16.h>", f'#include <cuda_bf16.h>\n#include "{secret}"')
    h = HopperGemmHarness(campaigns.load("hopper-gemm", [f"harness.cache_dir={tmp_path / 'cache'}"]))
    build = h.build(source)
    assert not build.ok and build.log.startswith("refused before compiling: a quoted #include")
    assert "abc123" not in build.log and not (tmp_path / "cache").exists()  # nvcc never ran
    from autodiscovery.running.evaluate import screen

    out = screen(h, source)
    assert out.status == "rejected" and "a quoted #include" in out.log


def test_compile_logs_keep_only_the_candidates_own_diagnostics():
    log = "\n".join([
        '/home/user/secret.env(1): error: identifier "abc123" is undefined',
        "  SECRET_TOKEN=abc123",
        "  ^",
        "",
        'kernel.cu(7): error: identifier "undefined" is undefined',
        "    undefined();",
        "    ^",
        "",
        "In file included from kernel.cu:3:",
        "ptxas info    : Used 32 registers",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        '2 errors detected in the compilation of "kernel.cu".',
    ])
    kept = sandbox.own_diagnostics(log, "kernel.cu")
    assert "abc123" not in kept and "secret.env" not in kept
    assert 'kernel.cu(7): error: identifier "undefined" is undefined\n    undefined();' in kept
    assert "0 bytes spill stores" in kept and "errors detected" in kept
    assert "2 compiler message(s) about other files left out" in kept


@needs_nvcc
def test_a_real_build_keeps_its_errors_and_sees_no_user_environment(tmp_path, monkeypatch):
    from harnesses.hopper_gemm.build import Builder

    monkeypatch.setenv("CPATH", str(tmp_path))  # an include path of the user's the build must not see
    (tmp_path / "cuda_bf16.h").write_text("#error the user's CPATH was searched\n")
    b = Builder(tmp_path / "cache")
    bad = b.build('#include <cuda_bf16.h>\nextern "C" __global__ void k(float* c) { c[0] = nope; }\n')
    assert not bad.ok and 'kernel.cu(2): error: identifier "nope" is undefined' in bad.log
    assert "CPATH was searched" not in bad.log


KEY = "sk-test-9f8e7d6c5b4a3f2e1d0c"


@needs_nvcc
def test_the_api_key_leaves_no_trace(tmp_path):
    """A scripted session whose key is a known string, with an endpoint that echoes it in an error and a
    model that repeats it: nothing in the database, the output or `show` holds it."""
    edit = ("Hypothesis: unroll.\n\n<<<<<<< SEARCH\n  for (int k = 0; k < K; ++k) {\n=======\n"
            "  #pragma unroll 2\n  for (int k = 0; k < K; ++k) {\n>>>>>>> REPLACE\n")
    script = [fail(500, f"Incorrect API key provided: {KEY}. You can find your key at ..."),
              say(f"Hypothesis: the key is {KEY}, nothing else."), say(edit)]
    db = tmp_path / "k.db"
    cli = CliRunner()
    with ScriptedServer(script) as server:
        res = cli.invoke(app, ["run", "--model", "scripted", "--base-url", server.url, "--dry-run", "--db", str(db),
                               "--set", "budget.candidates=2", "--set", "agent.llm.batch=1",
                               "--set", "agent.llm.concurrency=1", "--set", "agent.llm.overlap=false", "--set", "agent.llm.backoff_s=0.01",
                               "--set", f"harness.cache_dir={tmp_path / 'cache'}"], env={"OPENAI_API_KEY": KEY})
    shown = cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("k.db*"))
    assert res.exit_code == 0, res.output
    assert KEY not in res.output and KEY not in shown and KEY.encode() not in raw
    assert json.loads(shown)["llm_calls"] and "[redacted key]" in raw.decode(errors="replace")


def test_the_codesign_program_is_held_to_the_same_rules(tmp_path):
    from harnesses.accelsim import AccelsimHarness
    from harnesses.accelsim.agent import CodesignAgent

    c = campaigns.load("edge-codesign", [f"harness.cache_dir={tmp_path / 'cache'}"])
    source = CodesignAgent(c).seed_proposal(c).source
    h = AccelsimHarness(c)
    h.check(source)  # the shipped program passes
    bad = source.replace("#include <cstdio>", '#include <cstdio>\n#include "/etc/passwd"', 1)
    assert bad != source
    with pytest.raises(sandbox.RefusedSource, match="a quoted #include"):
        h.check(bad)
    out = h.build(bad)
    assert not out.ok and out.log.startswith("refused before compiling")
