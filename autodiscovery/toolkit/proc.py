"""Child processes that cannot outlive the run: they die with their parent, kill -9 included, and by a
deadline of their own should the parent's timeout never come."""

from __future__ import annotations

import ctypes
import math
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

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
