"""The evaluation child: a harness's GPU work runs in a process of its own, so that a hang, a crash or a
corrupted context costs that process alone.

The protocol, both sides. The parent writes the job as `job.json` in a folder of its own and runs the
harness's worker module, `python -m WORKER JOB RESULT`, tethered and under a hard timeout
(`proc.run_child`). The worker reads the job, does it, and writes its result (status, metrics, log)
whole or not at all. The parent turns what happened into an `Outcome`: the result as written, or
`timeout` (killed at the limit), or `crashed` (it ended without a result, or with one that does not
read), each with the tail of what the child printed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from autodiscovery import ROOT
from autodiscovery.interfaces import Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit.proc import run_child
from autodiscovery.toolkit.text import tail

JOB, RESULT, PROGRESS = "job.json", "result.json", "progress"
GRACE_S = 30.0
"""How long a child outlives its limit by its own deadline, should the parent never kill it."""
BEAT = "AUTODISCOVERY_PROGRESS"
"""The environment variable that names the file a child touches as it makes progress (`beat`), and its
own deadline after each: `PATH:SECONDS`."""


# ---- the parent's side ------------------------------------------------------------------------------
def environment(gpu: int | None = None, **extra: str) -> dict[str, str]:
    """This process's environment for a child: the checkout first on PYTHONPATH (the child imports its
    harness from it), `extra` on top; with `gpu` (an index among the GPUs this process sees) the child
    sees that GPU alone."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if gpu is not None:
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if gpu < len(visible) else str(gpu)
    return env | extra


@contextmanager
def posted(job: dict) -> Iterator[Path]:
    """A folder of its own with the job written in it, removed afterwards with whatever the child left."""
    with tempfile.TemporaryDirectory(prefix="autodiscovery-") as tmp:
        (Path(tmp) / JOB).write_text(json.dumps(job))
        yield Path(tmp)


def command(worker: str, folder: Path, result: str = RESULT) -> list[str]:
    """The child's command line: the worker module on the job posted in `folder`, its result to `result`
    there (compute-sanitizer's runs name one a tool, `{tool}.json`)."""
    return [sys.executable, "-m", worker, str(folder / JOB), str(folder / result)]


def run(worker: str, job: dict, timeout_s: float, env: Mapping[str, str], prefix: Sequence[str] = (),
        lines: int = 40, quiet_ok: bool = False) -> Outcome:
    """One child of `worker` on `job`, killed after `timeout_s`; `prefix` runs it under a tool (a
    profiler). An answering child's log is its own, then the last `lines` it printed (none where it
    said `ok` and `quiet_ok`). The outcome has no device: the harness knows where it ran."""
    with posted(job) as folder:
        progress = folder / PROGRESS
        beat = {BEAT: f"{progress}:{math.ceil(timeout_s + GRACE_S)}"}
        done = run_child([*prefix, *command(worker, folder)], ROOT, dict(env) | beat, timeout_s, grace_s=GRACE_S,
                         progress=progress)
        printed = tail(done.output)
        if done.timed_out:
            since = "" if done.seconds < timeout_s + 1 else f" ({done.seconds:.0f} s in all)"
            return Outcome(EvalStatus.timeout, log=f"killed after {timeout_s:g} s without progress{since}\n{printed}",
                           seconds=done.seconds)
        try:
            wrote = read_result(folder / RESULT)
        except FileNotFoundError:
            code = done.returncode
            why = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            return Outcome(EvalStatus.crashed, log=f"evaluation child died ({why})\n{printed}", seconds=done.seconds)
        except ValueError as exc:
            return Outcome(EvalStatus.crashed, log=f"evaluation child's result does not read ({exc})\n{printed}",
                           seconds=done.seconds)
    said = "" if quiet_ok and wrote["status"] == EvalStatus.ok else tail(done.output, lines)
    return Outcome(wrote["status"], wrote.get("metrics", {}), "\n".join(filter(None, [wrote.get("log", ""), said])),
                   done.seconds)


def read_result(path: Path) -> dict:
    """A child's result; FileNotFoundError where it wrote none, ValueError where it is no result."""
    wrote = json.loads(Path(path).read_text())
    status = wrote.get("status") if isinstance(wrote, dict) else None
    if not status or not isinstance(status, str):
        raise ValueError("it names no status")
    return wrote


# ---- the child's side -------------------------------------------------------------------------------
def beat() -> None:
    """A sign of progress to the parent (a launch finished, say): its limit, and this process's own
    deadline, count from now. Nothing where the parent watches for none."""
    where = os.environ.get(BEAT)
    if not where:
        return
    path, _, deadline = where.rpartition(":")
    Path(path).touch()
    signal.alarm(int(deadline))


def result(status: str, log: str = "", metrics: dict | None = None) -> dict:
    """A result as a worker writes it."""
    return {"status": status, "metrics": metrics or {}, "log": log}


def crash_log(exc: BaseException, what: str | None = None) -> str:
    """An exception as a crashed result says it: its type, `what` (its message by default), the
    innermost frames."""
    return f"{type(exc).__name__}: {exc if what is None else what}\n{traceback.format_exc(limit=4)}"


def serve(work: Callable[[dict], dict], started: float, known: Mapping[type[Exception], str] | None = None,
          crashed: Callable[[dict, Exception], str] = lambda job, exc: crash_log(exc)) -> NoReturn:
    """A worker's `main`: the job named first on the command line, done by `work`, its result written
    to the file named second. An exception of a `known` type is a result of its status, its message the
    log; any other is `crashed`, with the log `crashed` writes. `started`: when the worker began (the
    result's `child_s`). The exit skips the libraries' exit handlers: after a CUDA fault they only add
    noise."""
    job_path, result_path = sys.argv[1], sys.argv[2]
    job = json.loads(Path(job_path).read_text())
    try:
        out = work(job)
    except Exception as exc:
        status = next((s for kind, s in (known or {}).items() if isinstance(exc, kind)), None)
        out = result(status, str(exc)) if status else result(EvalStatus.crashed, crashed(job, exc))
    out["child_s"] = round(time.perf_counter() - started, 4)
    write_result(Path(result_path), out)
    sys.stdout.flush()
    os._exit(0)


def write_result(path: Path, out: dict) -> None:
    """Whole or not at all: written beside, then renamed (a child killed mid-write leaves no result)."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(out))
    os.replace(part, path)
