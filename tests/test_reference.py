"""The reference harness on CPU, with no PyTorch: problem files read and refused, manifests resolved
against what a probe found (recorded), the roofline arithmetic, the prompt an LLM agent gets, and the
errors a user meets, each one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery import registry
from autodiscovery.cli import app
from harnesses.reference import manifest, problem
from harnesses.reference.worker import roofline

ROWSUM = '''\
"""The row sum of a matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1) * self.scale


batch_size = 2048
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.0]
'''
PROBED = {  # what a probe of ROWSUM reports on an H100 (the machine's facts with the problem's)
    "sizes": {"batch_size": 2048, "dim": 4096},
    "inputs": [{"name": "x", "shape": [2048, 4096], "dtype": "float32", "kind": "float"}],
    "params": [], "outputs": [{"shape": [2048], "dtype": "float32"}],
    "bytes_read": 2048 * 4096 * 4, "bytes_written": 2048 * 4, "flops": 0, "compute_dtype": "float32",
    "l2_bytes": 52428800, "smem_per_block": 232448, "peak_gbps": 3352.3, "gpu": "NVIDIA H100 80GB HBM3",
    "peak_tflops": {"float16": 1070.5, "bfloat16": 1070.5, "float32": 535.2, "float64": 33.4},
}
KERNEL = '''\
/* @manifest
launches:
  - kernel: rowsum
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    smem: "256 * 4"
    args: [x, out, dim, {f32: 1.0}]
outputs: {out: {shape: [batch_size], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
extern "C" __global__ void rowsum(const float* x, float* out, int dim, float scale) {}
'''


def write(tmp_path: Path, text: str = ROWSUM, name: str = "rowsum.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def campaign_file(tmp_path: Path, problem_file: Path, extra: str = "") -> Path:
    seed = tmp_path / "seed.cu"
    seed.write_text(KERNEL)
    path = tmp_path / "rowsum.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: rowsum
        problem: {{file: {problem_file}{extra}}}
        harness: {{name: reference}}
        seed: {seed}
        """))
    return path


def test_a_problem_file_is_read_without_running_it(tmp_path):
    static = problem.read(str(write(tmp_path)), {"batch_size": 8192})
    assert static.sizes == {"batch_size": 8192, "dim": 4096} and static.inputs == ["x"]
    assert "def get_inputs" in static.source


def test_problem_errors_are_one_line_naming_the_file(tmp_path):
    cases = [
        ("import torch\nclass Model(:\n", "broken.py: line 2: not valid Python"),
        ("def get_inputs():\n    return []\n", "broken.py: not a problem in KernelBench's format: no class Model, "
                                                 "get_init_inputs()"),
        (ROWSUM.replace("def forward", "def backward"), "broken.py: class Model has no forward()"),
    ]
    for text, said in cases:
        path = write(tmp_path, text, "broken.py")
        res = CliRunner().invoke(app, ["run", "--campaign", str(campaign_file(tmp_path, path)), "--dry-run"])
        assert res.exit_code == 2 and said in res.output and len(res.output.strip().splitlines()) == 1, res.output
    res = CliRunner().invoke(app, ["run", "--campaign", str(campaign_file(tmp_path, tmp_path / "nowhere.py"))])
    assert res.exit_code == 2 and "problem.file: file not found" in res.output
    good = write(tmp_path)
    res = CliRunner().invoke(app, ["run", "--campaign", str(campaign_file(tmp_path, good)), "--dry-run",
                                   "--set", "problem.sizes={rows: 4}"])
    assert res.exit_code == 2 and "--set problem.sizes={rows: 4}" in res.output
    assert "sets rows, which the file does not define at module level (its sizes: batch_size, dim)" in res.output


def test_a_manifest_is_resolved_against_the_reference(tmp_path):
    plan = manifest.resolve(manifest.parse(KERNEL), PROBED)
    (launch,) = plan["launches"]
    assert launch["grid"] == [2048, 1, 1] and launch["smem"] == 1024
    assert launch["args"] == [["tensor", "x"], ["tensor", "out"], ["i32", 4096], ["f32", 1.0]]
    assert plan["outputs"] == [{"name": "out", "kind": "output", "shape": [2048], "dtype": "float32"}]


@pytest.mark.parametrize("change, said", [
    (("dtype: float32}}", "dtype: float16}}"), "output 'out': the manifest declares float16 [2048], the reference "
                                               "returns float32 [2048]"),
    (("shape: [batch_size]", "shape: [batch_size, 1]"), "declares float32 [2048, 1]"),
    (('"dim % 4 == 0"', '"dim % 3 == 0"'), "does not satisfy the kernel's requires 'dim % 3 == 0'"),
    (("block: [256, 1, 1]", "block: [2048, 1, 1]"), "a block of 2048 threads (at most 1024)"),
    (("args: [x, out, dim", "args: [x, y, dim"), "'y' names nothing this problem has (inputs: x; parameters: none"),
    (("args: [x, out, dim", "args: [x, x, dim"), "output(s) out are passed to no kernel"),
    (("{f32: 1.0}", "{i32: 2147483648}"), "does not fit an int32"),
    (("outputs: {out:", "outputs: {x:"), "output 'x' takes a name already in use"),
    (("kernel: rowsum", "kernel: 'row sum'"), "manifest: launches.0.kernel: String should match pattern"),
])
def test_a_manifest_that_cannot_work_is_refused_with_the_reason(change, said):
    with pytest.raises(manifest.ManifestError) as exc:
        manifest.resolve(manifest.parse(KERNEL.replace(*change)), PROBED)
    assert said in str(exc.value) and "\n" not in str(exc.value)


def test_before_a_probe_names_are_taken_on_trust_and_sizes_still_checked():
    static = {"sizes": {"batch_size": 2048, "dim": 4096}, "input_names": ["x"]}
    plan = manifest.resolve(manifest.parse(KERNEL), static)
    assert plan["launches"][0]["args"][1] == ["tensor", "out"]
    with pytest.raises(manifest.ManifestError, match="requires"):
        manifest.resolve(manifest.parse(KERNEL.replace("% 4 ==", "% 3 ==")), static)


def test_the_roofline():
    seconds = 12e-6
    r = roofline(PROBED, seconds)
    moved = PROBED["bytes_read"] + PROBED["bytes_written"]
    floor = PROBED["bytes_read"] / (PROBED["peak_gbps"] * 1e9)  # the 8 KB of sums fit in L2
    line = moved / (PROBED["peak_gbps"] * 1e9)
    assert r["floor_ms"] == pytest.approx(floor * 1e3) and r["bound"] == "memory"
    assert r["roofline_ms"] == pytest.approx(line * 1e3) and r["roofline_pct"] == pytest.approx(100 * line / seconds)
    assert r["gbps"] == pytest.approx(moved / seconds / 1e9)
    big_out = PROBED | {"bytes_written": 10**9}
    assert roofline(big_out, 1.0)["floor_ms"] == pytest.approx(
        (PROBED["bytes_read"] + 10**9 - PROBED["l2_bytes"]) / (PROBED["peak_gbps"] * 1e9) * 1e3)
    matmul = PROBED | {"flops": 2 * 8192**3, "compute_dtype": "bfloat16", "bytes_read": 3 * 2 * 8192**2}
    r = roofline(matmul, 1e-3)
    assert r["bound"] == "compute" and r["floor_ms"] == pytest.approx(2 * 8192**3 / 1070.5e12 * 1e3)
    assert r["tflops"] == pytest.approx(2 * 8192**3 / 1e-3 / 1e12)


def test_the_llm_agent_reads_the_reference_and_its_roofline(tmp_path):
    from autodiscovery.agents.prompting import PromptBuilder
    from autodiscovery.interfaces import History, Record
    from harnesses.reference import ReferenceHarness

    c = campaigns.load(str(campaign_file(tmp_path, write(tmp_path))))
    h = ReferenceHarness(c)
    fp = {k: PROBED[k] for k in ("gpu", "l2_bytes", "smem_per_block", "peak_gbps", "peak_tflops")}
    fp |= {"sms": 132, "torch": "2.11.0", "problem": {k: v for k, v in PROBED.items() if k not in fp}}
    h.adopt(fp)
    metrics = {"speedup": {"eager": {"median": 1.2}, "compile": {"median": 0.9}}, "gbps": 2700.0,
               "roofline_pct": 80.5, "ms": {"candidate": 0.0125, "eager": 0.015, "compile": 0.0113}}
    seed = Record(seq=0, family="naive", knobs={}, status="kept", score=1.2, kept=True, source_hash="h",
                  source=KERNEL, hypothesis="The seed.", metrics=metrics)
    history = History([seed], seed, h.objective)
    import random

    from autodiscovery.agents.programs import Programs

    draw = Programs.of(history).draws(random.Random(0), 1, exploit=1.0)[0]
    builder = PromptBuilder(h, fp)
    system, user = builder.system(), builder.fit(history, draw, None)
    assert "return x.sum(dim=1) * self.scale" in system and "- input `x`: float32 [2048, 4096]" in system
    assert "- output 0: float32 [2048]" in system and "sizes: batch_size = 2048, dim = 4096" in system
    assert "no kernel can take less than 10.0 µs on this GPU" in system
    assert "interleaved with PyTorch eager" in system and "Reply format:" in system
    assert "NVIDIA H100 80GB HBM3: 132 SMs, 50 MiB of L2" in user and "3352 GB/s peak memory bandwidth" in user
    assert "about 15.0 µs in PyTorch eager and 11.3 µs compiled" in user
    assert "#0, the incumbent (naive): 1.200× eager, 0.900× compile, 2700 GB/s, 80.5% roofline\n\n```cuda" in user
    assert "TFLOP" not in user and "cuBLAS" not in user + system


def test_the_objective_is_the_baseline_the_campaign_chose(tmp_path):
    from harnesses.reference import ReferenceHarness

    path = campaign_file(tmp_path, write(tmp_path))
    eager = ReferenceHarness(campaigns.load(str(path)))
    compiled = registry.make_harness(campaigns.load(str(path), ["harness.baseline=compile"]))
    assert eager.objective.name == "× eager" and compiled.objective.name == "× compile"
    assert [c.label for c in compiled.columns][:1] == ["× eager"]
    config = campaigns.load(str(path), ["harness.baseline=compile"]).model_dump(mode="json")
    assert ReferenceHarness.for_config(config).objective.name == "× compile"
    assert json.loads(json.dumps(config))["harness"]["baseline"] == "compile"


# ---- on the recorded H100 runs of the shipped campaigns (docs/reference-runs) ----------------------
RUNS = Path(__file__).resolve().parents[1] / "docs" / "reference-runs"


def recorded(tmp_path: Path, name: str) -> Path:
    import shutil

    path = tmp_path / f"{name}.db"
    shutil.copy(RUNS / f"{name}.db", path)  # opening a store may migrate it: never the original
    return path


def test_the_prompt_of_a_recorded_reference_run(tmp_path):
    """The whole request an LLM agent would send to change the softmax run's best (a snapshot): the
    reference's source, its tensors and roofline as the probe found them, the machine, the module's own
    times, the kernel with its figures and ptxas facts."""
    from test_llm_prompt import snapshot

    res = CliRunner().invoke(app, ["--db", str(recorded(tmp_path, "softmax")), "prompt", "1", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    snapshot("reference_prompt_system.txt", data["system"])
    snapshot("reference_prompt_user.txt", data["user"])
    assert "- input `x`: float32 [4096, 16384]" in data["system"] and "160.1 µs" in data["system"]
    assert "about 213.7 µs in PyTorch eager and 181.3 µs compiled" in data["user"]


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "sum_reduction", "bias_gelu"])
def test_the_recorded_runs_read_as_every_run_does(tmp_path, name):
    """Each shipped campaign's H100 run: its lineage climbs from the naive seed to the tuned family,
    faster than PyTorch eager, with the figures every result states, and its report renders."""
    db = recorded(tmp_path, name)
    chain = json.loads(CliRunner().invoke(app, ["--db", str(db), "lineage", "1", "--json"]).output)
    assert [r["family"] for r in chain] == ["naive", "tuned"]
    best = chain[-1]
    assert best["score"] > 1.0 and best["score_text"].endswith("× eager")
    assert set(best["figures"]) >= {"x_compile", "gbps", "roofline_pct", "us"}
    assert best["figures"]["gbps"] > 2500 and best["ci_low"] <= best["score"] <= best["ci_high"]
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["--db", str(db), "report", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "<th>× compile</th>" in page and 'id="chart-bandwidth"' in page and "memory peak" in page


def test_a_search_over_a_templated_seed_driven_by_recorded_evaluations(tmp_path):
    """The search agent on the softmax space, every evaluation the H100 run recorded (a stand-in for the
    configurations it did not reach): the structural move to the tuned family first, then knob moves
    within the family's constraints at the problem's sizes, no configuration twice, and the recorded
    best kept."""
    from replay import RecordedRuns

    from autodiscovery.agents.space import Space
    from autodiscovery.running import runner
    from autodiscovery.store import Store

    harness = RecordedRuns(recorded(tmp_path, "softmax"))
    db = Store(tmp_path / "search.db")
    run_id = runner.run_campaign("softmax", ["budget.candidates=12", "stop.patience=20"], db, harness=harness)
    rows = json.loads(CliRunner().invoke(app, ["--db", str(tmp_path / "search.db"), "show", str(run_id),
                                               "--json"]).output)["candidates"]
    assert [r["family"] for r in rows[:2]] == ["naive", "tuned"] and len(rows) == 12
    tuned = Space("softmax").families["tuned"]
    sizes = campaigns.load("softmax").problem.names()
    knobs = [json.dumps(r["knobs"], sort_keys=True) for r in rows if r["family"] == "tuned"]
    assert len(knobs) == len(set(knobs))
    assert all(not tuned.violations(r["knobs"], sizes) for r in rows if r["family"] == "tuned")
    best = next(r for r in rows if r["status"] == "kept" and r["family"] == "tuned")
    assert best["knobs"] == tuned.default and best["score"] == pytest.approx(1.211, abs=1e-3)
