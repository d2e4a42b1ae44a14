"""One process drives a run at a time: the run's lease, and a request to stop at a safe point."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import CursorResult, update
from sqlalchemy.orm import Session

from autodiscovery import AutoDiscoveryError
from autodiscovery.store import Run
from autodiscovery.store.models import utcnow

STALE = timedelta(minutes=15)  # a lease held from another host without a heartbeat for this long is free


class LeaseError(AutoDiscoveryError):
    pass


class Stop:
    """A request to stop at the next safe point (between two candidates), e.g. from a first Ctrl-C."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True


def owner() -> str:
    """This process, named so that a later process can tell whether it still lives: host:pid:start."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def alive(holder: str, heartbeat: datetime | None) -> bool:
    """Whether the process named `holder` still lives (on another host: whether it beat lately)."""
    host, _, rest = holder.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname():
        return heartbeat is not None and utcnow() - heartbeat < STALE
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return started in ("?", _start_time(int(pid)))


def claim(s: Session, run: Run, me: str) -> None:
    """Take the run's lease, unless a live process holds it (two drivers would evaluate twice)."""
    held = run.owner
    if held and held != me and alive(held, run.heartbeat_at):
        host, _, rest = held.partition(":")
        raise LeaseError(f"run {run.id} is being driven by process {rest.split(':')[0]} on {host} (last "
                         f"heartbeat {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC); wait for it or stop it first")
    taken = update(Run).where(Run.id == run.id, Run.owner.is_(None) if held is None else Run.owner == held)
    # cast: an UPDATE's result is a CursorResult (its rowcount); SQLAlchemy types execute() as Result
    won = cast(CursorResult, s.execute(taken.values(owner=me, heartbeat_at=utcnow())))
    if won.rowcount != 1:
        raise LeaseError(f"run {run.id} was taken by another process just now")
    s.refresh(run)
