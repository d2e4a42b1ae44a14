"""The GPU pool of `--gpus`: the evaluation children are pinned one per GPU, a GPU that stops answering
leaves the pool and the evaluation is done again on another, a mix of GPU models is refused. The
children (which need GPUs) are stood in for by a function that answers as they do, per pinned GPU."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from autodiscovery import campaign as campaigns
from autodiscovery.interfaces import Outcome
from harnesses.hopper_gemm import DeviceLost, HarnessError, HopperGemmHarness
from harnesses.hopper_gemm.build import BuildReport

H200 = {"gpu": "NVIDIA H200", "sms": 132, "cc": "9.0", "l2_bytes": 52428800}


class Gpus:
    """What the evaluation children would answer on a host with these GPUs."""

    def __init__(self, names: list[str], dies: dict[int, int] | None = None) -> None:
        self.names, self.dies = names, dict(dies or {})
        self.dead: set[int] = set()
        self.ran: list[tuple[int | None, str, float, float]] = []  # (gpu, mode, start, end)
        self.lock = threading.Lock()

    def child(self, job: dict, timeout_s: float, prefix=(), gpu: int | None = None) -> Outcome:
        mode, start = job["mode"], time.monotonic()
        if mode == "count":
            return Outcome("ok", {"device_count": len(self.names)})
        if gpu in self.dead:
            return Outcome("crashed", log="CUDA_ERROR_ILLEGAL_ADDRESS")
        if mode == "fingerprint":
            return Outcome("ok", dict(H200, gpu=self.names[gpu or 0]))
        time.sleep(0.05)
        with self.lock:
            self.ran.append((gpu, mode, start, time.monotonic()))
            if gpu in self.dies and len([r for r in self.ran if r[0] == gpu]) >= self.dies[gpu]:
                self.dead.add(gpu)
                return Outcome("crashed", log="the device fell off the bus")
        return Outcome("ok", {"ratio": {"median": 0.9}, "gpu_index": gpu}, score=0.9,
                       device=f"{self.names[gpu or 0]} (GPU {gpu})")


def harness(monkeypatch, gpus: Gpus, setting) -> HopperGemmHarness:
    h = HopperGemmHarness(campaigns.load("hopper-gemm", [f"harness.gpus={setting}"]))
    monkeypatch.setattr(h, "_child", gpus.child)
    monkeypatch.setattr("autodiscovery.toolkit.nvcc.version", lambda nvcc: "nvcc 13.0.88")
    monkeypatch.setattr("ctypes.CDLL", lambda name: None)
    monkeypatch.setattr("autodiscovery.toolkit.sanitize.locate", lambda nvcc: "/usr/local/cuda/bin/compute-sanitizer")
    h._helpers = "helpers.cubin"
    return h


SEED = campaigns.load("hopper-gemm").seed_path().read_text()
BUILD = BuildReport(ok=True, cache_key="k", artifact="kernel.cubin", registers=32)


def test_evaluations_spread_over_the_pool_one_per_gpu(monkeypatch):
    gpus = Gpus(["NVIDIA H200"] * 2)
    h = harness(monkeypatch, gpus, "all")
    fp = h.preflight()
    assert fp["gpus"] == [0, 1] and h.parallel == 2
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda _: h.evaluate(SEED, BUILD), range(8)))
    assert {o.metrics["gpu_index"] for o in outs} == {0, 1}
    assert all(o.device.endswith(f"(GPU {o.metrics['gpu_index']})") for o in outs)
    for g in (0, 1):  # never two evaluations on one GPU at once
        spans = sorted((s, e) for gpu, _, s, e in gpus.ran if gpu == g)
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


def test_a_gpu_that_stops_answering_leaves_the_pool_and_the_run_goes_on(monkeypatch):
    gpus = Gpus(["NVIDIA H200"] * 2, dies={1: 1})
    h = harness(monkeypatch, gpus, "[0, 1]")
    h.preflight()
    outs = [h.evaluate(SEED, BUILD) for _ in range(4)]
    assert all(o.status == "ok" for o in outs), [o.log for o in outs]
    assert list(h.pool.lost) == [1] and h.parallel == 1
    redone = next(o for o in outs if "GPU 1 stopped answering" in o.log)
    assert redone.metrics["gpu_index"] == 0  # evaluated again on the GPU that answers
    assert all(g == 0 for g, *_ in gpus.ran[2:])


def test_losing_every_gpu_stops_the_run(monkeypatch):
    gpus = Gpus(["NVIDIA H200"] * 2, dies={0: 1, 1: 1})
    h = harness(monkeypatch, gpus, "2")
    h.preflight()
    with pytest.raises(DeviceLost, match="every GPU of harness.gpus"):
        h.evaluate(SEED, BUILD)


def test_a_mix_of_models_or_a_missing_gpu_is_refused(monkeypatch):
    with pytest.raises(HarnessError, match="mixes GPU models"):
        harness(monkeypatch, Gpus(["NVIDIA H200", "NVIDIA H100 80GB HBM3"]), "all").preflight()
    with pytest.raises(HarnessError, match="asks for GPU 3, this machine has 2"):
        harness(monkeypatch, Gpus(["NVIDIA H200"] * 2), "[0, 3]").preflight()


def test_gpus_on_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from autodiscovery.cli import app

    res = CliRunner().invoke(app, ["run", "--gpus", "0,0", "--dry-run", "--db", str(tmp_path / "x.db")])
    assert res.exit_code == 2 and "harness.gpus" in res.output and "repeats" in res.output
