"""Harnesses evaluate candidates: build, correctness gate, measurement. One folder a harness."""

from __future__ import annotations

import importlib

from autodiscovery import AutoDiscoveryError

REGISTRY = {
    "hopper_gemm": "harnesses.hopper_gemm:HopperGemmHarness",
    "accelsim": "harnesses.accelsim:AccelsimHarness",
}


def get(name: str):
    """The harness class registered under `name`."""
    if name not in REGISTRY:
        raise AutoDiscoveryError(f"unknown harness '{name}' (available: {', '.join(REGISTRY)})")
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)
