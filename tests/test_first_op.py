"""A user's first op from a folder of their own, outside the project: the campaign's relative paths
resolve against the campaign file (a missing one names every place looked), a space of the user's own
is named by path, a space of another harness is refused in one line, and a run records paths that a
resume finds from anywhere. Then the kernel checked without a GPU (`check`, and `measure` and
`run --dry-run` first): manifest mistakes name the file and line, the cubin's kernels and their
arguments are compared with what the manifest launches."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from conftest import needs_nvcc
from typer.testing import CliRunner

from autodiscovery import ROOT
from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.agents.space import SpaceError
from autodiscovery.campaign import CampaignError
from autodiscovery.cli import app
from autodiscovery.interfaces import History, Record

TORCH = importlib.util.find_spec("torch") is not None

PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 1024
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
KERNEL = '''\
/* @manifest
launches:
  - kernel: my_softmax
    grid: [batch_size, 1, 1]
    block: [256, 1, 1]
    args: [x, out, dim]
outputs: {out: {shape: [batch_size, dim], dtype: float32}}
requires: ["dim % 4 == 0"]
*/
extern "C" __global__ void my_softmax(const float* x, float* out, int dim) {
    const float* row = x + (size_t)blockIdx.x * dim;
    float* o = out + (size_t)blockIdx.x * dim;
    float m = -INFINITY, s = 0.f;
    for (int i = 0; i < dim; ++i) m = fmaxf(m, row[i]);
    for (int i = 0; i < dim; ++i) s += expf(row[i] - m);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = expf(row[i] - m) / s;
}
'''
FAMILIES = '''\
families:
  naive:
    rung: 1
    source: my_sm.cu
    summary: the user's own kernel
'''


def my_op(folder: Path, space: str | None = "my_space", kernel: str = KERNEL) -> Path:
    """A user's folder: problems/my_sm.py, kernels/my_sm.cu, a space of their own, and my-op.yaml naming
    them relative to itself."""
    (folder / "problems").mkdir(parents=True)
    (folder / "problems" / "my_sm.py").write_text(PROBLEM)
    (folder / "kernels").mkdir()
    (folder / "kernels" / "my_sm.cu").write_text(kernel)
    (folder / "my_space").mkdir()
    (folder / "my_space" / "families.yaml").write_text(FAMILIES)
    (folder / "my_space" / "my_sm.cu").write_text(kernel)
    agent = f"agent: {{kind: search, search: {{space: {space}}}}}\n" if space else ""
    path = folder / "my-op.yaml"
    path.write_text(textwrap.dedent("""\
        name: my-op
        problem: {file: problems/my_sm.py}
        harness: {name: reference}
        seed: kernels/my_sm.cu
        """) + agent)
    return path


def test_relative_paths_resolve_against_the_campaign_file(tmp_path, monkeypatch):
    path = my_op(tmp_path / "mine")
    monkeypatch.chdir(tmp_path)  # neither the campaign's folder nor the project
    c = campaigns.load(str(path))
    assert c.problem.file == str(tmp_path / "mine" / "problems" / "my_sm.py")
    assert c.seed_path() == tmp_path / "mine" / "kernels" / "my_sm.cu"
    assert c.agent.search.space == str(tmp_path / "mine" / "my_space")
    assert SearchAgent(c).space.families["naive"].source == "my_sm.cu"  # the space of the user's own folder
    # What a run records is found again from anywhere (a resume validates the recorded config).
    monkeypatch.chdir(ROOT)
    again = campaigns.validate(c.model_dump(mode="json"), "campaign of run 1")
    assert again.problem.names() == {"batch_size": 1024, "dim": 4096} and again.seed_path().is_file()


def test_shipped_campaigns_record_what_they_always_did():
    c = campaigns.load("softmax")
    assert (c.problem.file, c.seed, c.agent.search.space) == ("problems/softmax.py", "softmax/naive.cu", "softmax")


def test_a_missing_file_names_every_place_looked(tmp_path):
    path = my_op(tmp_path)
    (tmp_path / "problems" / "my_sm.py").unlink()
    with pytest.raises(CampaignError) as exc:
        campaigns.load(str(path))
    assert str(exc.value) == (f"my-op.yaml: line 2: problem.file: file not found: problems/my_sm.py (looked for "
                              f"{tmp_path}/problems/my_sm.py, {ROOT}/problems/my_sm.py)")
    res = CliRunner().invoke(app, ["run", "--campaign", str(path), "--dry-run"])
    assert res.exit_code == 2 and f"looked for {tmp_path}/problems/my_sm.py" in " ".join(res.output.split())
    path = my_op(tmp_path / "b", space="elsewhere")
    with pytest.raises(CampaignError, match=r"agent\.search\.space: search space not found: elsewhere \(looked for "
                                            rf"{tmp_path}/b/elsewhere/families\.yaml, {ROOT}/search_spaces/"):
        campaigns.load(str(path))


def test_a_set_path_resolves_against_the_current_folder(tmp_path, monkeypatch):
    path = my_op(tmp_path / "mine")
    (tmp_path / "other.py").write_text(PROBLEM)
    monkeypatch.chdir(tmp_path)
    c = campaigns.load(str(path), ["problem.file=other.py"])
    assert c.problem.file == str(tmp_path / "other.py")


def agent_objective():
    from harnesses.reference import ReferenceHarness

    return ReferenceHarness.objective


def test_a_reference_campaign_gets_no_gemm_space(tmp_path):
    c = campaigns.load(str(my_op(tmp_path / "none", space=None)))
    agent = SearchAgent(c)  # the reference harness has no space of its own: the seed alone, and what next
    assert list(agent.space.families) == ["my_sm"] and agent.space.families["my_sm"].source == "my_sm.cu"
    seed = Record(seq=0, family="my_sm", knobs={}, status="kept", score=1.0, kept=True, source_hash="s")
    assert agent.seed_proposal(c).family == "my_sm" and agent.propose(History([seed], seed, agent_objective()), 4) == []
    assert agent.exhausted_reason.startswith("nothing to propose beyond the seed: to improve it, name a search space")
    c = campaigns.load(str(my_op(tmp_path / "gemm", space="hopper_gemm")))
    with pytest.raises(SpaceError) as exc:
        SearchAgent(c)
    assert str(exc.value) == (f"search space {ROOT}/search_spaces/hopper_gemm/families.yaml does not fit the "
                              "reference harness: its family naive: line 2: manifest: launches: Field required")
    # and the GEMM campaign, which names its space, or names none, keeps its own
    assert SearchAgent(campaigns.load("hopper-gemm", ["agent.search.space=null"])).space.name == "hopper_gemm"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("change, said", [
    (("args: [x, out, dim]", "args: [x, out, dim"), "kernels/my_sm.cu: line 6: manifest is not valid YAML: expected ',' or ']'"),
    (("    block: [256, 1, 1]\n", ""), "kernels/my_sm.cu: line 3: manifest: launches.0.block: Field required"),
    (("block:", "blcok:"), "kernels/my_sm.cu: line 5: manifest: launches.0.blcok: no such key: did you mean block?"),
    (("args: [x, out, dim]", "args: [x, out, {f23: 0.5}]"),  # a scalar's type misspelt: said in the manifest's words
     "kernels/my_sm.cu: line 6: manifest: launches.0.args.2.f23: Input should be 'i32', 'i64', 'f32' or 'f64'"),
    (("dim % 4", "dim % 3"), ("kernels/my_sm.cu: at my_sm: this problem (batch_size=1024, dim=4096) does not "
                              "satisfy the kernel's requires 'dim % 3 == 0'")),
])
def test_manifest_mistakes_name_file_and_line_before_any_build(tmp_path, monkeypatch, change, said):
    path = my_op(tmp_path, kernel=KERNEL.replace(*change))
    monkeypatch.chdir(tmp_path)
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path))
    assert res.exit_code == 1 and "FAIL" in res.output and "build" not in res.output, res.output
    # measure says the same in one line, before it asks for a GPU (this machine has none)
    res = invoke("measure", "kernels/my_sm.cu", "--campaign", str(path))
    assert res.exit_code == 2 and one_line(res.output).startswith(f"error: {said}"), res.output


@needs_nvcc
@pytest.mark.parametrize("change, said", [
    (("kernel: my_softmax", "kernel: my_softmx"),
     "launches[0] (my_softmx): the cubin defines no kernel 'my_softmx' (it defines my_softmax)"),
    (('extern "C" ', ""), ("the cubin defines no kernel 'my_softmax' (it defines _Z10my_softmaxPKfPfi: declare "
                           'the kernel extern "C")')),
    (("args: [x, out, dim]", "args: [x, out]"),
     "launches[0] (my_softmax): the manifest passes 2 arguments (8, 8 bytes), the kernel takes 3 arguments (8, 8, 4 bytes)"),
    (("args: [x, out, dim]", "args: [x, out, {i64: dim}]"),
     "launches[0] (my_softmax): argument 3 of 3 is passed as 8 bytes, the kernel's parameter is 4 bytes"),
    (("/ s;", "/ t;"), 'does not compile: my_sm.cu(16): error: identifier "t" is undefined'),
])
def test_the_cubin_is_checked_against_the_manifest(tmp_path, monkeypatch, change, said):
    path = my_op(tmp_path, kernel=KERNEL.replace(*change))
    monkeypatch.chdir(tmp_path)
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path), "--set", f"harness.cache_dir={tmp_path}/c")
    assert res.exit_code == 1 and said in one_line(res.output), res.output
    # a dry run checks its seed the same way, before any run is recorded
    res = invoke("--db", str(tmp_path / "x.db"), "run", "--campaign", str(path), "--dry-run", "--quiet",
                 "--set", f"harness.cache_dir={tmp_path}/c")
    assert res.exit_code == 2 and said in one_line(res.output) and "run 1" not in res.output, res.output


@needs_nvcc
def test_the_first_op_walk(tmp_path, monkeypatch):
    """From an empty folder outside the project: the problem, the campaign, the kernel, the check, a dry run."""
    my_op(tmp_path)
    monkeypatch.chdir(tmp_path)
    cache = f"harness.cache_dir={tmp_path}/c"
    res = invoke("check", "kernels/my_sm.cu", "--campaign", "my-op.yaml", "--set", cache)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    module = ["ok" if TORCH else "note", "module:"]
    assert [line.split()[:2] for line in lines[1:6]] == [["ok", "manifest:"], ["ok", "plan:"], module, ["ok", "build:"],
                                                         ["ok", "kernels:"]]
    assert "requires dim % 4 == 0 holds" in lines[2] and "the cubin defines my_softmax" in lines[5]
    res = invoke("run", "--campaign", "my-op.yaml", "--dry-run", "--quiet", "--db", "my.db", "--set", cache)
    assert res.exit_code == 0 and "1 candidate built" in one_line(res.output), res.output
    assert "`autodiscovery show 1 --db my.db`" in one_line(res.output)


@needs_nvcc
def test_a_dry_run_says_which_candidates_were_not_built(tmp_path, monkeypatch):
    my_op(tmp_path)
    (tmp_path / "my_space" / "bad.cu.j2").write_text(KERNEL.replace("args: [x, out, dim]", 'args: [x, out, "dim / {{ D }}"]'))
    (tmp_path / "my_space" / "families.yaml").write_text(
        FAMILIES + "  bad:\n    rung: 2\n    template: bad.cu.j2\n    summary: a size divided with /, which a manifest "
                   "refuses\n    knobs: {D: [1]}\n    default: {D: 1}\n")
    monkeypatch.chdir(tmp_path)
    res = invoke("run", "--campaign", "my-op.yaml", "--dry-run", "--quiet", "--db", "my.db", "--set",
                 f"harness.cache_dir={tmp_path}/c")
    assert res.exit_code == 0 and ("2 candidates: 1 built, 1 rejected. Why #1 was not built: "
                                   "`autodiscovery show 1/1 --db my.db`") in one_line(res.output), res.output


@needs_nvcc
def test_a_name_the_check_cannot_place_is_noted(tmp_path, monkeypatch):
    """Before the GPU runs the module, and without PyTorch here, its parameters are unknown: a name that is no
    input, output or scratch buffer is taken on trust, and the check says so (a misspelt input shows here);
    with PyTorch the module on the meta device says what it has, and the name is refused."""
    path = my_op(tmp_path, kernel=KERNEL.replace("args: [x, out, dim]", "args: [xx, out, dim]"))
    monkeypatch.chdir(tmp_path)
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path), "--set", f"harness.cache_dir={tmp_path}/c")
    if TORCH:  # the module, run on the meta device, has no xx
        assert res.exit_code == 1 and "args: 'xx' names nothing this problem has" in one_line(res.output), res.output
    else:
        assert res.exit_code == 0 and "note names: xx: neither an input, an output nor a scratch buffer" in \
            one_line(res.output)
    res = invoke("check", "b/kernels/my_sm.cu", "--campaign", str(my_op(tmp_path / "b")), "--set",
                 f"harness.cache_dir={tmp_path}/c")
    assert res.exit_code == 0 and "note names" not in one_line(res.output)


@pytest.mark.skipif(TORCH, reason="PyTorch is installed here: the module is checked")
def test_without_pytorch_check_says_the_outputs_were_not_checked(tmp_path, monkeypatch):
    path = my_op(tmp_path, kernel=KERNEL.replace("dtype: float32", "dtype: float16"))
    monkeypatch.chdir(tmp_path)
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path), "--set", f"harness.cache_dir={tmp_path}/c")
    said = one_line(res.output)
    assert "note module: outputs not checked: PyTorch is not installed here (pip install torch)" in said, res.output
    assert "FAIL plan" not in said


@pytest.mark.skipif(not TORCH, reason="PyTorch is not installed here")
@pytest.mark.parametrize("change, said", [
    (("shape: [batch_size, dim]", "shape: [dim, batch_size]"),
     "output 'out': the manifest declares float32 [4096, 1024], the reference returns float32 [1024, 4096]"),
    (("shape: [batch_size, dim]", "shape: [batch_size]"),
     "output 'out': the manifest declares float32 [1024], the reference returns float32 [1024, 4096]"),
    (("dtype: float32", "dtype: float16"),
     "output 'out': the manifest declares float16 [1024, 4096], the reference returns float32 [1024, 4096]"),
    (("args: [x, out, dim]", "args: [x, out, weight, dim]"),
     "launches[0] (my_softmax) args: 'weight' names nothing this problem has (inputs: x; parameters: none; "
     "outputs and scratch: out; sizes: batch_size, dim)"),
], ids=["transposed", "short", "half", "a name of nothing"])
def test_check_holds_the_manifest_to_what_the_module_returns(tmp_path, monkeypatch, change, said):
    """Without a GPU, on PyTorch's meta device: the outputs' shapes and dtypes and the names the launches pass."""
    path = my_op(tmp_path, kernel=KERNEL.replace(*change))
    monkeypatch.chdir(tmp_path)
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path))
    assert res.exit_code == 1 and f"FAIL plan: at my_sm: {said}" in one_line(res.output), res.output
    res = invoke("check", "b/kernels/my_sm.cu", "--campaign", str(my_op(tmp_path / "b")), "--set",
                 f"harness.cache_dir={tmp_path}/c")
    assert "ok module: outputs and argument names checked against the module on PyTorch's meta device (it " \
           "returns float32 [1024, 4096])" in one_line(res.output)


def test_without_nvcc_check_does_all_it_can_and_says_what_it_skipped(tmp_path, monkeypatch):
    """nvcc off the PATH: the manifest, the plan, the module's outputs (where PyTorch is here) and the names
    are checked, the build and the cubin's kernels skipped, each said; a mistake before the build still
    fails the check."""
    path = my_op(tmp_path, kernel=KERNEL.replace("args: [x, out, dim]", "args: [xx, out, dim]"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    res = invoke("check", "kernels/my_sm.cu", "--campaign", str(path), "--set", f"harness.cache_dir={tmp_path}/c")
    said = one_line(res.output)
    if TORCH:
        assert res.exit_code == 1 and "args: 'xx' names nothing this problem has" in said, res.output
    else:
        assert res.exit_code == 0, res.output
        assert "ok manifest:" in said and "ok plan:" in said and "note names: xx:" in said
        assert "note build: skipped: nvcc not found ('nvcc' is not on PATH)" in said
        assert "note kernels: skipped: no cubin to read without a build" in said
        assert said.endswith("checked all it could here; build and kernels skipped: check again where the compiler is")
    bad = my_op(tmp_path / "b", kernel=KERNEL.replace("grid: [batch_size, 1, 1]", "grid: [batch_size, 1]"))
    res = invoke("check", "b/kernels/my_sm.cu", "--campaign", str(bad), "--set", f"harness.cache_dir={tmp_path}/c")
    assert res.exit_code == 1 and "FAIL manifest" in one_line(res.output), res.output


@needs_nvcc
def test_a_dry_run_of_a_seed_alone_does_not_say_it_measured_it(tmp_path, monkeypatch):
    my_op(tmp_path, space=None)
    monkeypatch.chdir(tmp_path)
    res = invoke("--db", "x.db", "run", "--campaign", "my-op.yaml", "--dry-run", "--quiet", "--set",
                 f"harness.cache_dir={tmp_path}/c")
    said = one_line(res.output)
    assert res.exit_code == 0 and "nothing to propose beyond the seed" in said and "measured" not in said, said


def test_a_build_error_of_one_line_is_said_once(tmp_path, monkeypatch):
    """Triton says why a file does not compile in one line: `check` says it once (the compiler's whole
    output goes below the line only where it says more, as nvcc's does)."""
    from autodiscovery.toolkit.build import BuildReport
    from harnesses.reference import ReferenceHarness

    said = "Triton could not compile softmax_rows: unsupported tensor index"
    monkeypatch.setattr(ReferenceHarness, "build",
                        lambda self, source: BuildReport(ok=False, cache_key="k", log=said, compiler="triton"))
    path = ROOT / "seeds" / "softmax" / "triton.py"
    res = invoke("check", str(path), "--campaign", "softmax")
    assert res.exit_code == 1 and res.output.count(said) == 1, res.output
