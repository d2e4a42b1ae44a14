"""The reference gate's acceptance rule on recorded errors (no GPU, no PyTorch): an output judged against
the float64 truth, within its dtype's tolerance or a multiple of PyTorch's own error, whichever is
larger; judged against PyTorch's output where the truth could not be had; and nothing that passed the
comparison with PyTorch's output fails."""

from __future__ import annotations

import random

import pytest

from harnesses.reference.gate import FAR, TRUTH_MULTIPLE, Errors, accept

TOL = 1e-5  # float32


def test_a_kernel_more_accurate_than_pytorch_passes():
    """The LayerNorm over rows of 4,194,304 elements: 2.01e-5 from PyTorch's output (over the
    tolerance), 6e-6 from the truth, where PyTorch's own error is 2.0e-5."""
    e = Errors(rel_ref=2.01e-5, far_ref=3e-5, rel_truth=6e-6, far_truth=1e-5, rel_torch=2.0e-5, far_torch=3e-5)
    ok, why = accept(e, TOL)
    assert ok and why == "within the tolerance of the truth"
    assert not accept(Errors(rel_ref=2.01e-5, far_ref=3e-5), TOL)[0]  # the comparison with PyTorch alone refused it


def test_a_multiple_of_pytorchs_own_error_is_allowed_where_it_exceeds_the_tolerance():
    e = Errors(rel_ref=5e-5, far_ref=1e-4, rel_truth=6e-5, far_truth=1e-4, rel_torch=2.5e-5, far_torch=4e-5)
    ok, why = accept(e, TOL)
    assert ok and why == f"within {TRUTH_MULTIPLE:g}× PyTorch's own error against the truth"


@pytest.mark.parametrize("rel_truth, what", [(2.8e-4, "fp16 inputs"), (4e-3, "bf16 accumulation"),
                                             (1e-3, "every 1000th term skipped")])
def test_cut_precision_fails_even_where_pytorch_errs_over_the_tolerance(rel_truth, what):
    e = Errors(rel_ref=rel_truth, far_ref=rel_truth, rel_truth=rel_truth, far_truth=rel_truth,
               rel_torch=2.0e-5, far_torch=3e-5)
    ok, why = accept(e, TOL)
    assert not ok, what
    assert why.startswith(f"relative error {rel_truth:.3g} against the float64 truth")
    assert "PyTorch's own error 2e-05" in why and "8e-05" in why  # both errors and the bound, in words


def test_one_element_far_off_fails_against_the_truth():
    e = Errors(rel_ref=1e-3, far_ref=0.5, rel_truth=1e-6, far_truth=0.5, rel_torch=1e-7, far_torch=1e-6)
    ok, why = accept(e, TOL)
    assert not ok and why.startswith("an element off by 0.5 of the largest against the float64 truth")


def test_without_the_truth_the_verdict_is_the_comparison_with_pytorch():
    assert accept(Errors(rel_ref=9e-6, far_ref=1e-5), TOL) == (True, "within the tolerance of PyTorch's output")
    ok, why = accept(Errors(rel_ref=2e-5, far_ref=1e-5), TOL)
    assert not ok and why == "relative error 2e-05 over the tolerance 1e-05"
    ok, why = accept(Errors(rel_ref=1e-6, far_ref=FAR * TOL * 2), TOL)
    assert not ok and why.startswith("an element off by")


def test_nothing_that_passes_against_pytorchs_output_fails_against_the_truth():
    rng = random.Random(7)
    for _ in range(20000):
        rel_ref, far_ref = rng.uniform(0, TOL), rng.uniform(0, FAR * TOL)
        rel_torch, far_torch = 10 ** rng.uniform(-9, -3), 10 ** rng.uniform(-9, -2)
        rel_truth, far_truth = rel_ref + rel_torch * rng.uniform(0, 3), far_ref + far_torch * rng.uniform(0, 3)
        e = Errors(rel_ref, far_ref, rel_truth, far_truth, rel_torch, far_torch)
        assert accept(e, TOL)[0], e


def test_the_llm_agent_is_told_the_rule():
    from autodiscovery import campaign as campaigns
    from harnesses.reference import ReferenceHarness

    brief = " ".join(ReferenceHarness(campaigns.load("softmax")).brief({}).split())
    assert "judged against the truth: the module evaluated in float64 on the same inputs" in brief
    assert f"within {TRUTH_MULTIPLE:g}× PyTorch's own float32 error against that truth" in brief
    assert "guard zones" in brief and "compute-sanitizer" in brief
