"""Without a GPU: the reference harness's hostile suite (tests/test_reference_hostile.py) is sound. Every
kernel passes the sandbox (a Triton file, the static rule), has a manifest that parses and builds with the harness's flags; every hostile
kernel states a status the harness can give and evidence that is a regular expression; and those the
manifest alone gives away are refused as their first line says, against a recorded probe of the problem."""

from __future__ import annotations

import re

import pytest
from conftest import needs_nvcc
from test_reference_hostile import HONEST, HONEST_TRITON, HOSTILE, STATUSES, campaign_file, expectation

from autodiscovery import AutoDiscoveryError
from autodiscovery import campaign as campaigns
from autodiscovery.toolkit import sandbox, triton_rule
from harnesses.reference import ReferenceHarness, manifest

PROBED = {  # what preflight records for problem_rowsum.py on an H100: the machine's facts, the probe's under "problem"
    "gpu": "NVIDIA H100 80GB HBM3", "sms": 132, "l2_bytes": 52428800, "smem_per_block": 232448, "peak_gbps": 3352.3,
    "peak_tflops": {"float16": 1070.5, "bfloat16": 1070.5, "float32": 535.2, "float64": 33.4},
    "problem": {"sizes": {"batch_size": 2048, "dim": 4096}, "params": [], "outputs": [{"shape": [2048], "dtype": "float32"}],
                "inputs": [{"name": "x", "shape": [2048, 4096], "dtype": "float32", "kind": "float"}],
                "bytes_read": 2048 * 4096 * 4, "bytes_written": 2048 * 4, "flops": 0, "compute_dtype": "float32",
                "dists": ["own", "normal", "uniform", "wide", "offset", "ties"]},
}
KERNELS = [pytest.param(k, id=k.name) for k in [HONEST, HONEST_TRITON, *HOSTILE]]


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> ReferenceHarness:
    tmp = tmp_path_factory.mktemp("reference")
    h = ReferenceHarness(campaigns.load(str(campaign_file(tmp, tmp / "cache"))))
    h.adopt(PROBED)
    return h


def test_the_suite_has_kernels_of_every_status():
    assert {s for k in HOSTILE for s in expectation(k)[0].split("|")} == set(STATUSES)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_passes_the_sandbox_and_states_its_expectation(kernel):
    source = kernel.read_text()
    if manifest.is_triton(source):
        assert triton_rule.check(source)  # device code only: the @triton.jit functions it defines
    else:
        sandbox.check(source)
    manifest.parse(source)
    if kernel not in (HONEST, HONEST_TRITON):
        status, evidence = expectation(kernel)
        assert set(status.split("|")) <= set(STATUSES)
        re.compile(evidence)


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_builds(harness, kernel):
    build = harness.build(kernel.read_text())
    assert build.ok, build.log


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_kernel_refused_by_its_manifest_is_refused_as_it_expects(harness, kernel):
    """check() resolves a manifest against the probe; where it refuses one, that is the kernel's expectation."""
    try:
        harness.check(kernel.read_text())
    except AutoDiscoveryError as exc:
        assert kernel not in (HONEST, HONEST_TRITON), str(exc)
        status, evidence = expectation(kernel)
        assert status == "rejected" and re.search(evidence, str(exc)), f"{kernel.name}: refused: {exc}"


def test_the_manifest_refusals_need_no_gpu(harness):
    refused = set()
    for kernel in HOSTILE:
        try:
            harness.check(kernel.read_text())
        except AutoDiscoveryError:
            refused.add(kernel.name)
    assert refused == {"block_too_large.cu", "wrong_output_shape.cu"}
