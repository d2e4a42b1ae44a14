"""Child processes that cannot outlive the run: they die with their parent, kill -9 included, and by a
deadline of their own should the parent's timeout never come."""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PR_SET_PDEATHSIG = 1

_prctl: Callable[..., int] | None
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved now: the child only calls it
except (OSError, AttributeError):  # not Linux: the deadline still holds
    _prctl = None


def tethered(deadline_s: float | None) -> Callable[[], None]:
    """A `preexec_fn` for Popen: SIGKILL when the parent dies, and SIGALRM (which ends the process, its
    default action survives exec) after `deadline_s`."""
    parent = os.getpid()

    def preexec() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)
        if deadline_s:
            signal.alarm(max(1, math.ceil(deadline_s)))

    return preexec


@dataclass
class Finished:
    """How a child ended: its exit code (None when it was killed at its time limit), what it printed
    (stdout and stderr together), how long it ran."""

    returncode: int | None
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_child(cmd: list[str], cwd: str | Path, env: dict[str, str], timeout_s: float,
              grace_s: float = 60.0, progress: Path | None = None) -> Finished:
    """Run a command in a process group of its own, tethered to this process (it dies with it, and by
    itself `grace_s` after the limit should this process never kill it), and killed whole at `timeout_s`;
    if this process is interrupted meanwhile, the child's group is killed before the interruption goes on.

    With `progress` (a file the child touches as it makes progress, `child.beat`), the limit counts from
    the child's last sign of progress, not from its start: a child that keeps making progress runs as long
    as it needs, one that stops is killed `timeout_s` after its last sign."""
    start = time.perf_counter()
    return finish_child(start_child(cmd, cwd, env, timeout_s + grace_s), timeout_s, progress, start)


def start_child(cmd: list[str], cwd: str | Path, env: dict[str, str], deadline_s: float | None,
                stdin: bool = False) -> subprocess.Popen:
    """A command started in a process group of its own, tethered to this thread (it dies with it) and, with
    `deadline_s`, to a deadline of its own; with `stdin`, a pipe to write to it (a spare child waits on it
    for its job: `child.Spares`)."""
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if stdin else None,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True, preexec_fn=tethered(deadline_s))


def finish_child(proc: subprocess.Popen, timeout_s: float, progress: Path | None, start: float) -> Finished:
    """A started child waited for under `run_child`'s limit (from `start`, a perf_counter reading), its
    group killed if this process is interrupted meanwhile."""
    try:
        output, code = _wait(proc, timeout_s, progress)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return Finished(code, output or "", round(time.perf_counter() - start, 3))


def _wait(proc: subprocess.Popen, timeout_s: float, progress: Path | None) -> tuple[str, int | None]:
    """What the child printed and its exit code, or None where it was killed at its limit."""
    last = time.time()
    while True:
        last = max(last, _touched(progress))
        left = timeout_s - (time.time() - last)
        if left <= 0:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            return output, None
        try:
            output, _ = proc.communicate(timeout=min(left, 1.0) if progress is not None else left)
            return output, proc.returncode
        except subprocess.TimeoutExpired:  # retried: no output is lost
            continue


def _touched(progress: Path | None) -> float:
    """When the child last showed progress (0: never, or no file to show it in)."""
    try:
        return progress.stat().st_mtime if progress is not None else 0.0
    except FileNotFoundError:
        return 0.0
