"""The GPUs a hopper_gemm run measures on (`harness.gpus`): every one the model the run is measured on,
one evaluation a GPU at a time, and a GPU that stops answering taken out, its evaluation done again on
another."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from autodiscovery.interfaces import Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit.preflight import HarnessError
from autodiscovery.toolkit.text import first_line

Ask = Callable[..., Outcome]
"""The harness's evaluation child: (job, timeout_s, gpu=...) -> Outcome."""


class DeviceLost(HarnessError):
    """The GPU stopped answering: no evaluation can be trusted until it is back."""


def where(name: str, gpu: int | None) -> str:
    """The device an evaluation ran on, as recorded: its name, and its index in a pool."""
    return f"{name} (GPU {gpu})" if gpu is not None else name


def choose(want: int | list[int] | str, ask: Ask) -> list[int]:
    """The indices `harness.gpus` names, checked against the GPUs this machine has."""
    out = ask({"mode": "count"}, timeout_s=120)
    if out.status != EvalStatus.ok:
        raise HarnessError(f"no usable NVIDIA GPU: {first_line(out.log) or 'unknown error'}")
    have = out.metrics["device_count"]
    if want == "all":
        return list(range(have))
    chosen: list[int] = list(range(want)) if isinstance(want, int) else [int(g) for g in want]
    if max(chosen) >= have:
        raise HarnessError(f"harness.gpus asks for GPU {max(chosen)}, this machine has {have} "
                           f"(indices 0 to {have - 1})")
    return chosen


class GpuPool:
    """The GPU indices evaluations are pinned to, one evaluation a GPU at a time (none: the default
    device), and those taken out, with why."""

    def __init__(self, gpus: list[int] | None = None) -> None:
        self.gpus = list(gpus) if gpus else None
        self.lost: dict[int, str] = {}
        self._free: queue.Queue[int] = queue.Queue()
        for g in self.gpus or []:
            self._free.put(g)

    @classmethod
    def of(cls, gpus: list[int], fp: dict, ask: Ask) -> GpuPool:
        """The pool of `gpus`, each asked what it is: every one must be the model the run is measured on
        (`fp`, the first's fingerprint): a run mixes no devices."""
        with ThreadPoolExecutor(len(gpus)) as ex:
            outs = list(ex.map(lambda g: ask({"mode": "fingerprint"}, timeout_s=180, gpu=g), gpus))
        for g, o in zip(gpus, outs):
            if o.status != EvalStatus.ok:
                raise HarnessError(f"GPU {g} does not answer: {first_line(o.log) or 'unknown error'}")
            if (o.metrics.get("gpu"), o.metrics.get("sms")) != (fp.get("gpu"), fp.get("sms")):
                raise HarnessError(f"harness.gpus mixes GPU models: GPU {gpus[0]} is {fp.get('gpu')}, GPU {g} is "
                                   f"{o.metrics.get('gpu')}; a run is measured on one model (name the same ones)")
        return cls(gpus)

    @property
    def parallel(self) -> int:
        """Evaluations at once: one per GPU still answering."""
        return max(1, len(self.gpus or []) - len(self.lost))

    def some_left(self) -> None:
        if self.gpus and len(self.lost) == len(self.gpus):
            raise DeviceLost("every GPU of harness.gpus stopped answering: "
                             + "; ".join(f"GPU {g}: {why}" for g, why in self.lost.items()))

    @contextmanager
    def pinned(self) -> Iterator[int | None]:
        """A free GPU of the pool (waited for), given back afterwards unless it was lost meanwhile; None
        where there is no pool."""
        gpu = None
        while self.gpus and gpu is None:
            self.some_left()
            try:
                gpu = self._free.get(timeout=1.0)
            except queue.Empty:
                continue
        try:
            yield gpu
        finally:
            if gpu is not None and gpu not in self.lost:
                self._free.put(gpu)

    def measure(self, evaluate: Callable[[int | None], Outcome],
                healthy: Callable[[int | None], str | None]) -> Outcome:
        """`evaluate` on a free GPU. A GPU that no longer answers after a crash or a timeout (`healthy` says
        why) leaves the pool and the evaluation is done once more on another: a second GPU lost to the
        same kernel makes it the kernel's, recorded as what it did. Without a pool, DeviceLost."""
        notes = []
        for attempt in range(2):
            with self.pinned() as gpu:
                out = evaluate(gpu)
                if out.status in (EvalStatus.crashed, EvalStatus.timeout) and (why := healthy(gpu)) is not None:
                    if gpu is None:
                        raise DeviceLost(f"the GPU stopped answering after a {out.status} evaluation: {why}")
                    self.lost[gpu] = why
                    notes.append(f"GPU {gpu} stopped answering after this {out.status} evaluation ({why}); "
                                 "it is out of the pool")
                    self.some_left()
                    if attempt == 0:
                        continue
            break
        if notes:
            out.log = "\n".join([*notes, out.log])
        return out
