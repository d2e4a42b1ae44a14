"""doctor without --campaign checks the main job (hopper-gemm), and ends with a line for each shipped
campaign: ready, or what this machine lacks for it (each harness's tools checked once)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autodiscovery import campaign as campaigns
from autodiscovery import registry
from autodiscovery.cli import app

ROWS = {  # what each harness's doctor finds on a machine with nvcc and the simulator but no GPU
    "hopper_gemm": [("nvcc (CUDA 12.8+)", "nvcc 13.0.88", "", True), ("NVIDIA driver (libcuda)", None, "x", True),
                    ("Hopper GPU (sm_90a)", None, "y", True)],
    "reference": [("nvcc (CUDA 12.8+)", "nvcc 13.0.88", "", True), ("NVIDIA driver (libcuda)", None, "x", True),
                  ("PyTorch", None, "pip install torch", True), ("GPU (the problem probed on it)", None, "y", True)],
    "accelsim": [("GPGPU-Sim", "/opt/gpgpu-sim", "", True), ("accel-sim.out (trace mode)", None, "z", False)],
}


@pytest.fixture
def machine(monkeypatch):
    from autodiscovery import cli as cli_module

    monkeypatch.setattr(cli_module.console, "_width", 200)  # a line a campaign (at 80 columns they wrap)
    asked = []
    for name, rows in ROWS.items():
        def doctor(campaign, rows=rows, name=name):
            asked.append(name)
            return rows
        monkeypatch.setattr(registry.harness(name), "doctor", staticmethod(doctor))
    return asked


def test_doctor_checks_the_main_job_and_says_which_campaigns_are_ready(machine):
    res = CliRunner().invoke(app, ["doctor"])
    assert res.exit_code == 1  # hopper-gemm needs a GPU this machine lacks
    out = res.output.splitlines()
    assert out[0].strip() == "what hopper-gemm needs"
    at = out.index("the shipped campaigns on this machine:")
    said = {line.split()[0]: " ".join(line.split()[1:]) for line in out[at + 1:]}
    assert said["hopper-gemm"] == "not ready, needs NVIDIA driver (libcuda), Hopper GPU (sm_90a)"
    assert said["softmax"] == "not ready, needs NVIDIA driver (libcuda), PyTorch, GPU (the problem probed on it)"
    assert said["edge-codesign"] == "ready"  # what it does not need (trace mode) does not count
    assert len(said) == len(campaigns.available()) > 9 and sorted(machine) == ["accelsim", "hopper_gemm", "reference"]  # once a harness


def test_doctor_json_is_the_campaigns_tools(machine):
    rows = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).output)
    assert [r["tool"] for r in rows] == ["nvcc (CUDA 12.8+)", "NVIDIA driver (libcuda)", "Hopper GPU (sm_90a)"]
    assert machine == ["hopper_gemm"]
