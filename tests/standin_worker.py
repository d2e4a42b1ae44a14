"""An evaluation child that does what its job says, to test the child protocol (`toolkit/child.py`) with
a real process: `python -m standin_worker JOB RESULT`, with tests/ on PYTHONPATH.

`do`: `answer` (a result through the protocol), `refuse` and `fail` (an exception the worker knows and
one it does not), `exit` (ends with a code and no result), `sleep` (past any limit), `garbage` (a
result that is not JSON), `where` (whether a spare did the job: `child.Spares`)."""

from __future__ import annotations

import os
import signal
import sys
import time

from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child

STARTED = time.perf_counter()


class Refused(Exception):
    pass


def work(job: dict) -> dict:
    print("a line the child printed")
    do = job["do"]
    if do == "refuse":
        raise Refused("the launch asks for more than the device has")
    if do == "fail":
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
    if do == "exit":
        sys.stdout.flush()
        os._exit(job["code"])
    if do == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if do == "sleep":
        time.sleep(60)
    if do == "garbage":
        with open(sys.argv[2], "w") as f:
            f.write('{"status": "ok", "metr')
        sys.stdout.flush()
        os._exit(0)
    if do == "where":  # whether a spare did the job, and how long it had waited for it
        return child.result(EvalStatus.ok, metrics={"spare": sys.argv[3:4] == [child.WAIT],
                                                    "waited_s": child.job_started() - STARTED})
    return child.result(job.get("status", EvalStatus.ok), "the child's own log", {"seen": job["x"] * 2})


if __name__ == "__main__":
    child.serve(work, STARTED, known={Refused: EvalStatus.rejected},
                crashed=lambda job, exc: "the GPU reported a fault\n" + child.crash_log(exc))
