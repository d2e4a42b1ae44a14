"""A failure in an optional part is said, never swallowed: the token counter without its tables, the power
sampler without NVML. (The GPU-side ones, the SM clock and the flop counter, are said in the facts the
probes return: tests/test_gpu.py and tests/test_reference_gpu.py run them.)"""

from __future__ import annotations

import sys
import types
import warnings

import pytest

from autodiscovery.agents import prompting


def test_a_token_counter_without_its_tables_warns_once_and_estimates(monkeypatch):
    fake = types.ModuleType("tiktoken")

    def get_encoding(name):
        raise OSError(f"could not fetch {name}: network unreachable")

    fake.get_encoding = get_encoding
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    prompting._encoding.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"o200k_base tables could not be loaded \(OSError: could not fetch"):
            assert prompting.tokens("x" * 35) == 11  # 3.5 characters a token, rounded up
        with warnings.catch_warnings(record=True) as later:
            warnings.simplefilter("always")
            assert prompting.tokens("x" * 7) == 3
        assert later == []  # looked up once a process: said once
    finally:
        prompting._encoding.cache_clear()


def test_without_tiktoken_tokens_are_estimated_without_a_word(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import fails: the documented estimate, nothing to say
    prompting._encoding.cache_clear()
    try:
        assert prompting.tokens("y" * 70) == 21
    finally:
        prompting._encoding.cache_clear()


def test_a_power_sampler_without_nvml_says_why_it_has_no_samples(monkeypatch):
    from harnesses.hopper_gemm.power import PowerSampler

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with PowerSampler("0000:00:00.0") as sampler:
        pass
    summary = sampler.summary()
    assert set(summary) == {"unavailable"} and summary["unavailable"].startswith("NVML: ")
    assert "pynvml" in summary["unavailable"]
