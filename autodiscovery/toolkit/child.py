"""The evaluation child: a harness's GPU work runs in a process of its own, so that a hang, a crash or a
corrupted context costs that process alone.

The protocol, both sides. The parent writes the job as `job.json` in a folder of its own and runs the
harness's worker module, `python -m WORKER JOB RESULT`, tethered and under a hard timeout
(`proc.run_child`). The worker reads the job, does it, and writes its result (status, metrics, log)
whole or not at all. The parent turns what happened into an `Outcome`: the result as written, or
`timeout` (killed at the limit), or `crashed` (it ended without a result, or with one that does not
read), each with the tail of what the child printed.

A child is started ahead of its job where it can be (`Spares`): while one evaluation runs, the next
child starts Python and imports what its worker needs (`serve`'s `warm`: CUDA's libraries, not the GPU),
then waits for its job on its standard input. It is still one job a process: a spare does the job it is
given and ends, as a child started for it would, and a spare that died meanwhile is replaced by one
started then.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from autodiscovery import ROOT
from autodiscovery.interfaces import Outcome
from autodiscovery.status import EvalStatus
from autodiscovery.toolkit.proc import Finished, finish_child, run_child, start_child
from autodiscovery.toolkit.text import tail

JOB, RESULT, PROGRESS = "job.json", "result.json", "progress"
GRACE_S = 30.0
"""How long a child outlives its limit by its own deadline, should the parent never kill it."""
BEAT = "AUTODISCOVERY_PROGRESS"
"""The environment variable that names the file a child touches as it makes progress (`beat`), and its
own deadline after each: `PATH:SECONDS`."""
WAIT = "--wait"
"""A worker's third argument where it is a spare: it waits for its job on its standard input."""
SPARES = "AUTODISCOVERY_SPARES"
"""Set to 0, no child is started ahead of its job (`Spares`)."""


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
    said `ok` and `quiet_ok`). The outcome has no device: the harness knows where it ran. Without a
    prefix, a spare started ahead does the job where there is one (`Spares`), and another is started."""
    spare = SPARES_POOL.take(worker, env, ROOT) if not prefix else None
    if spare is not None:
        try:
            done = spare.run(job, timeout_s)
            return outcome(done, spare.folder, timeout_s, lines, quiet_ok)
        except SpareGone:
            pass
        finally:
            spare.close()
    with posted(job) as folder:
        progress = folder / PROGRESS
        beat = {BEAT: f"{progress}:{math.ceil(timeout_s + GRACE_S)}"}
        done = run_child([*prefix, *command(worker, folder)], ROOT, dict(env) | beat, timeout_s, grace_s=GRACE_S,
                         progress=progress)
        return outcome(done, folder, timeout_s, lines, quiet_ok)


def outcome(done: Finished, folder: Path, timeout_s: float, lines: int, quiet_ok: bool) -> Outcome:
    """What a finished child did, from how it ended and the result it wrote in `folder`."""
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


class SpareGone(Exception):
    """The spare ended before it took its job (nothing of the job ran): a child started for it does it."""


class Spare:
    """A worker started ahead of its job, waiting for it on its standard input (`serve` with WAIT)."""

    def __init__(self, worker: str, env: Mapping[str, str], cwd: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="autodiscovery-"))
        self.progress = self.folder / PROGRESS
        # The deadline is the job's, sent with it; the one here is never used before.
        self.proc = start_child([*command(worker, self.folder), WAIT], cwd, dict(env) | {BEAT: f"{self.progress}:0"},
                                None, stdin=True)

    def waiting(self) -> bool:
        """Whether it has loaded what it needs and waits for its job."""
        return self.progress.exists()

    def run(self, job: dict, timeout_s: float) -> Finished:
        """The job, done by this spare under `run`'s limit; SpareGone where it died before it took it."""
        start = time.perf_counter()
        (self.folder / JOB).write_text(json.dumps(job))
        stdin = self.proc.stdin
        if self.proc.poll() is not None or stdin is None:
            raise SpareGone
        try:
            stdin.write(f"{math.ceil(timeout_s + GRACE_S)}\n")
            stdin.close()
        except OSError:  # a broken pipe: it ended as the job was sent
            raise SpareGone from None
        self.proc.stdin = None  # sent and closed: what follows reads its output alone
        return finish_child(self.proc, timeout_s, self.progress, start)

    def close(self) -> None:
        """Its process group ended (if it still runs) and its folder removed."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended meanwhile
                pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # killed, but not yet reaped by the system: it goes on its own
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


class Spares:
    """One spare a worker and environment (a GPU's), started once a child of theirs was asked for. Spares
    are started from a thread of their own that lasts as long as this process: a child dies with the
    thread that started it (`proc.tethered`), and the threads that ask for evaluations come and go."""

    def __init__(self) -> None:
        self._spares: dict[tuple, Future[Spare]] = {}
        self._lock = threading.Lock()
        self._starter: ThreadPoolExecutor | None = None

    @staticmethod
    def enabled() -> bool:
        return os.environ.get(SPARES, "1") != "0"

    def take(self, worker: str, env: Mapping[str, str], cwd: Path) -> Spare | None:
        """The spare started for this worker and environment, if one is (another is started for the next
        job); None where there is none yet, or spares are off."""
        if not self.enabled():
            return None
        key = (worker, str(cwd), tuple(sorted(env.items())))
        with self._lock:
            taken = self._spares.pop(key, None)
            if self._starter is None:
                self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare")
            self._spares[key] = self._starter.submit(Spare, worker, env, cwd)
        try:
            return taken.result(timeout=30) if taken is not None else None
        except Exception:  # it could not be started (no such worker, say): a child started for the job says why
            return None

    def close(self) -> None:
        """Every spare ended (at exit: none outlives the run)."""
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
            starter, self._starter = self._starter, None
        if starter is not None:
            starter.shutdown(wait=True)
        for future in spares:
            if future.exception() is None:
                future.result().close()


SPARES_POOL = Spares()
atexit.register(SPARES_POOL.close)


def read_result(path: Path) -> dict:
    """A child's result; FileNotFoundError where it wrote none, ValueError where it is no result."""
    wrote = json.loads(Path(path).read_text())
    status = wrote.get("status") if isinstance(wrote, dict) else None
    if not status or not isinstance(status, str):
        raise ValueError("it names no status")
    return wrote


# ---- the child's side -------------------------------------------------------------------------------
_STARTED = [time.perf_counter()]


def job_started() -> float:
    """When this child was given its job (a perf_counter reading): where it was a spare, not its start."""
    return _STARTED[0]


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
          crashed: Callable[[dict, Exception], str] = lambda job, exc: crash_log(exc),
          warm: Callable[[], None] | None = None) -> NoReturn:
    """A worker's `main`: the job named first on the command line, done by `work`, its result written
    to the file named second. An exception of a `known` type is a result of its status, its message the
    log; any other is `crashed`, with the log `crashed` writes. `started`: when the worker began (the
    result's `child_s`). The exit skips the libraries' exit handlers: after a CUDA fault they only add
    noise.

    A spare (WAIT third on the command line) runs `warm` (imports: nothing that touches the GPU), then
    waits for its job: a line on its standard input that gives its deadline in seconds (none: it ends)."""
    job_path, result_path = sys.argv[1], sys.argv[2]
    if sys.argv[3:4] == [WAIT]:
        started = _wait_for_job(warm)
    _STARTED[0] = started
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


def _wait_for_job(warm: Callable[[], None] | None) -> float:
    """A spare's wait: `warm` first, then the job's deadline from standard input (its own, from then on,
    and `beat`'s after each sign of progress); when the job came."""
    if warm is not None:
        try:
            warm()
        except Exception:  # noqa: S110 - the job imports the same again, and its failure is recorded there
            pass
    path = os.environ.get(BEAT, "").rpartition(":")[0]
    if path:  # ready: the parent may see it waits (`Spare.waiting`)
        Path(path).touch()
    line = sys.stdin.readline()
    if not line.strip():  # the parent ended without a job for it
        os._exit(0)
    deadline = int(line)
    signal.alarm(deadline)
    if path:
        os.environ[BEAT] = f"{path}:{deadline}"
    return time.perf_counter()


def write_result(path: Path, out: dict) -> None:
    """Whole or not at all: written beside, then renamed (a child killed mid-write leaves no result)."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(out))
    os.replace(part, path)
