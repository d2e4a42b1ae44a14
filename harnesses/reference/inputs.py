"""The user's problem built in the evaluation child (PyTorch): its module on the GPU, its inputs' names,
shapes and dtypes, and fresh draws of them from the distributions the gate uses."""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DISTRIBUTIONS = ("own", "normal", "uniform", "wide", "offset", "ties")
"""The problem's own (its sample's range and moments), normal, uniform, wide exponents, a large offset, ties."""


class ProblemFailure(Exception):
    """The problem itself fails (its file, its Model, its inputs): nothing a candidate did."""



def input_names(forward: Callable[..., Any], n: int) -> list[str]:
    """The names of a module's `n` inputs: `forward`'s parameters, else input0, input1, ..."""
    try:
        ps = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        ps = []
    if len(ps) == n and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps):
        return [p.name for p in ps]
    return [f"input{i}" for i in range(n)]

class Problem:
    """The user's module, built on the GPU: the model, its inputs' shapes and how to draw them."""

    def __init__(self, job: dict) -> None:
        import torch

        self.torch = torch
        self.path = job["problem"]["path"]
        name = os.path.basename(self.path)
        self.name = name
        spec = importlib.util.spec_from_file_location("autodiscovery_problem", self.path)
        if spec is None or spec.loader is None:
            raise ProblemFailure(f"{name}: not a Python file that can be imported")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ProblemFailure(f"{name}: importing it raised {type(exc).__name__}: {_one(exc)}") from None
        for k, v in job["problem"].get("sizes", {}).items():
            setattr(module, k, v)
        self.module = module
        self.dtype = getattr(torch, job["problem"]["dtype"]) if job["problem"].get("dtype") else None
        torch.manual_seed(job.get("seed", 0))
        self.device = torch.device("cuda")
        try:
            init = list(module.get_init_inputs())
        except Exception as exc:
            raise ProblemFailure(f"{name}: get_init_inputs() raised {type(exc).__name__}: {_one(exc)}") from None
        try:
            model = module.Model(*init)
        except Exception as exc:
            raise ProblemFailure(f"{name}: Model(*get_init_inputs()) raised {type(exc).__name__}: {_one(exc)}") from None
        self.model = model.to(self.device).eval()
        if self.dtype is not None:
            self.model = self.model.to(self.dtype)
        try:
            sample = module.get_inputs()
        except Exception as exc:
            raise ProblemFailure(f"{name}: get_inputs() raised {type(exc).__name__}: {_one(exc)}") from None
        if not isinstance(sample, (list, tuple)) or not sample:
            raise ProblemFailure(f"{name}: get_inputs() returned {type(sample).__name__}, not a list of tensors")
        for i, x in enumerate(sample):
            if not isinstance(x, torch.Tensor):
                raise ProblemFailure(f"{name}: get_inputs() returned a {type(x).__name__} at position {i}: "
                                     "the inputs must be tensors")
        names = self._names(len(sample))
        self.inputs = []
        for n, x in zip(names, sample):
            x = x.to(self.device)
            if self.dtype is not None and x.is_floating_point():
                x = x.to(self.dtype)
            self.inputs.append({"name": n, "tensor": x.contiguous(), **self._stats(x)})
        named = dict(self.model.named_parameters()) | dict(self.model.named_buffers())
        self.params = {k: v.detach() for k, v in named.items()}
        """The module's parameters and buffers (non-persistent ones too), by name: arguments a kernel may
        take, checked unchanged after every launch."""

    def _names(self, n: int) -> list[str]:
        return input_names(self.model.forward, n)

    def _stats(self, x: torch.Tensor) -> dict:
        torch = self.torch
        kind = "float" if x.is_floating_point() else "bool" if x.dtype == torch.bool else "int"
        out: dict[str, Any] = {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch."), "kind": kind}
        if x.numel():
            v = x.double() if kind != "bool" else x.to(torch.float64)
            out |= {"low": float(v.min()), "high": float(v.max()), "mean": float(v.mean()),
                    "std": float(v.std()) if x.numel() > 1 else 0.0}
        return out

    def forward(self, tensors: list) -> list:
        with self.torch.no_grad():
            out = self.model(*tensors)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def fill(self, x: torch.Tensor, spec: dict, dist: str, gen: torch.Generator) -> None:
        """Draw fresh content into input `x` (in place) from `dist`, in its shape and dtype."""
        torch = self.torch
        if spec["kind"] == "bool":
            x.copy_(torch.randint(0, 2, x.shape, generator=gen, device=x.device).bool())
            return
        if spec["kind"] == "int":
            lo, hi = int(spec.get("low", 0)), int(spec.get("high", 1))
            x.copy_(torch.randint(lo, hi + 1, x.shape, generator=gen, device=x.device, dtype=x.dtype))
            return
        if dist == "own":  # the problem's own distribution, by its sample's moments: fresh content
            if spec.get("low", 0.0) >= 0.0:
                x.uniform_(spec.get("low", 0.0), max(spec.get("high", 1.0), spec.get("low", 0.0) + 1e-6), generator=gen)
            else:
                x.normal_(spec.get("mean", 0.0), spec.get("std", 1.0) or 1.0, generator=gen)
        elif dist == "normal":
            x.normal_(0.0, 1.0, generator=gen)
        elif dist == "uniform":
            x.uniform_(-1.0, 1.0, generator=gen)
        elif dist == "wide":  # exponents spread over 2^±e: sums of lost magnitudes, overflow in low precision
            e = 4.0 if x.dtype == torch.float16 else 8.0
            scale = torch.empty(x.shape, device=x.device, dtype=torch.float32).uniform_(-e, e, generator=gen)
            x.copy_(torch.randn(x.shape, generator=gen, device=x.device) * torch.exp2(scale))
        elif dist == "offset":  # a large common offset: cancellation, and exp() of large values
            x.normal_(0.0, 1.0, generator=gen).add_(100.0)
        elif dist == "ties":  # few distinct values: ties for max/argmax, exact sums
            x.copy_(torch.randint(-1, 3, x.shape, generator=gen, device=x.device).to(x.dtype))
        else:
            raise ValueError(dist)


def _one(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
