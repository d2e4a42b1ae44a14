"""The evaluation child's protocol (`toolkit/child.py`), both sides, with real processes: a worker that
answers, one that raises what it knows and what it does not, one that exits without a result, one
killed by a signal, one past its time limit, one whose result is not JSON. Each ends as the Outcome
the harnesses record, with the messages users see, whether a child started for the job or a spare
started ahead of it (`child.Spares`) did it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from autodiscovery.status import EvalStatus
from autodiscovery.toolkit import child

HERE = Path(__file__).parent


def env() -> dict[str, str]:
    """The child's environment, less what pytest changes from a test's set-up to its call (a spare is
    the environment's it was started in)."""
    base = {k: v for k, v in child.environment().items() if k != "PYTEST_CURRENT_TEST"}
    return base | {"PYTHONPATH": os.pathsep.join([str(HERE), base["PYTHONPATH"]])}


def run(job: dict, timeout_s: float = 60, **kw):
    return child.run("standin_worker", job, timeout_s, env(), **kw)


def stocked() -> child.Spare:
    """The spare started for the standin worker's next job, once it is ready to take it: its Python
    started and waiting (a job given to it before then waits for that)."""
    key = ("standin_worker", str(child.ROOT), tuple(sorted(env().items())))
    spare = child.SPARES_POOL._spares[key].result(timeout=30)
    end = time.time() + 30
    while spare.proc.poll() is None and not spare.waiting():
        assert time.time() < end, "the spare never came to wait for its job"
        time.sleep(0.05)
    return spare


@pytest.fixture(autouse=True, params=["started for the job", "a spare"])
def spares(request, monkeypatch):
    """Every test of the protocol twice: with a child started for each job, and with spares, one of them
    waiting already."""
    monkeypatch.setenv(child.SPARES, "1" if request.param == "a spare" else "0")
    if request.param == "a spare":
        run({"do": "answer", "x": 0})  # the first job asks for a spare for the next
        stocked()
    yield request.param
    child.SPARES_POOL.close()


def test_the_job_is_done_by_a_spare_where_one_waits(spares):
    out = run({"do": "where"})
    assert out.status == EvalStatus.ok and out.metrics["spare"] == (spares == "a spare")
    if spares == "a spare":
        assert out.metrics["waited_s"] > 0  # it was given the job after it started, and counts from then
        assert run({"do": "where"}).metrics["spare"]  # and another was started for the next


def test_a_spare_that_died_before_its_job_hands_it_to_a_child_started_for_it(spares):
    if spares != "a spare":
        pytest.skip("spares only")
    spare = stocked()
    spare.proc.kill()
    spare.proc.wait()
    out = run({"do": "where"})
    assert out.status == EvalStatus.ok and out.metrics["spare"] is False
    assert not spare.folder.exists()


def test_an_answer_is_the_outcome_with_the_childs_log_then_what_it_printed():
    out = run({"do": "answer", "x": 21})
    assert out.status == EvalStatus.ok and out.metrics == {"seen": 42}
    assert out.log == "the child's own log\na line the child printed"
    assert out.seconds > 0 and out.device == "" and out.score is None
    quiet = run({"do": "answer", "x": 1}, lines=10, quiet_ok=True)
    assert quiet.log == "the child's own log"  # an ok answer, told to keep its output to itself
    bad = run({"do": "answer", "x": 1, "status": "incorrect"}, lines=10, quiet_ok=True)
    assert bad.status == EvalStatus.incorrect and bad.log.endswith("a line the child printed")


def test_an_exception_the_worker_knows_is_its_status_any_other_a_crash_with_its_frames():
    refused = run({"do": "refuse"})
    assert refused.status == EvalStatus.rejected
    assert refused.log.startswith("the launch asks for more than the device has\n")
    crashed = run({"do": "fail"})
    assert crashed.status == EvalStatus.crashed
    assert crashed.log.startswith("the GPU reported a fault\nRuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS\nTraceback")


@pytest.mark.parametrize("job, why", [({"do": "exit", "code": 3}, "exit code 3"),
                                      ({"do": "exit", "code": 0}, "exit code 0"), ({"do": "kill"}, "signal 9")])
def test_a_child_that_ends_without_a_result_crashed(job, why):
    out = run(job)
    assert out.status == EvalStatus.crashed and out.metrics == {}
    assert out.log == f"evaluation child died ({why})\na line the child printed"


def test_a_child_past_its_limit_is_killed_and_timed_out():
    out = run({"do": "sleep"}, timeout_s=1)
    assert out.status == EvalStatus.timeout
    assert out.log == "killed after 1 s without progress\na line the child printed"
    assert 1 <= out.seconds < 30


def test_a_result_that_does_not_read_is_a_crash():
    out = run({"do": "garbage"})
    assert out.status == EvalStatus.crashed
    assert out.log.startswith("evaluation child's result does not read (")
    assert out.log.endswith("\na line the child printed")


def test_a_result_is_written_whole_and_read_only_with_a_status(tmp_path):
    path = tmp_path / "result.json"
    child.write_result(path, child.result(EvalStatus.ok, metrics={"a": 1}))
    assert child.read_result(path) == {"status": "ok", "metrics": {"a": 1}, "log": ""}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # nothing left beside it
    path.write_text('{"metrics": {}}')
    with pytest.raises(ValueError, match="names no status"):
        child.read_result(path)
    with pytest.raises(FileNotFoundError):
        child.read_result(tmp_path / "none.json")


def test_a_child_pinned_to_a_gpu_sees_that_one_alone(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert child.environment(1)["CUDA_VISIBLE_DEVICES"] == "5"  # an index among the GPUs this process sees
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert child.environment(1)["CUDA_VISIBLE_DEVICES"] == "1"
    assert child.environment(None, TRITON_CACHE_DIR="/x")["TRITON_CACHE_DIR"] == "/x"
    assert child.environment()["PYTHONPATH"].split(os.pathsep)[0] == str(child.ROOT)
