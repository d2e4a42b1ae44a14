"""A user's first op from a folder of their own, outside the project: the campaign's relative paths
resolve against the campaign file (a missing one names every place looked), a space of the user's own
is named by path, a space of another harness is refused in one line, and a run records paths that a
resume finds from anywhere."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autodiscovery import ROOT
from autodiscovery import campaign as campaigns
from autodiscovery.agents.search import SearchAgent
from autodiscovery.agents.space import SpaceError
from autodiscovery.campaign import CampaignError
from autodiscovery.cli import app

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
    assert str(exc.value) == (f"my-op.yaml: problem.file: file not found: problems/my_sm.py (looked for "
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


def test_a_reference_campaign_gets_no_gemm_space(tmp_path):
    c = campaigns.load(str(my_op(tmp_path / "none", space=None)))
    with pytest.raises(SpaceError) as exc:
        SearchAgent(c)
    assert str(exc.value).startswith("agent.search.space: the reference harness has no search space of its own")
    c = campaigns.load(str(my_op(tmp_path / "gemm", space="hopper_gemm")))
    with pytest.raises(SpaceError) as exc:
        SearchAgent(c)
    assert str(exc.value) == (f"search space {ROOT}/search_spaces/hopper_gemm/families.yaml does not fit the "
                              "reference harness: its family naive: manifest: launches: Field required")
    # and the GEMM campaign, which names its space, or names none, keeps its own
    assert SearchAgent(campaigns.load("hopper-gemm", ["agent.search.space=null"])).space.name == "hopper_gemm"
