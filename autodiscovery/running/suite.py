"""Suites: one campaign over several problems (a model's linear layers at several token counts, say),
each tuned in turn by a run of its own, all under the suite's run.

The suite's run holds no candidates: its problems' runs point at it (`runs.parent_id`), and its dispatch
table (`rows`) is read from them: each problem's best kernel, its objective and the harness's suite
figures. Each problem's run is an ordinary run (review, replay and export work on it), started with the
suite's campaign and that problem's fields; the search agent's warm start lets it begin from the bests
recorded at the problems tuned before it, in the order that puts the nearest tuned problem before each
(`order`). A resumed suite resumes the run left unfinished and goes on with the problems not yet tuned.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlalchemy.orm import Session

from autodiscovery import AutoDiscoveryError, provenance
from autodiscovery.campaign import Campaign, validate
from autodiscovery.roles import Checking, Evaluating
from autodiscovery.running.lease import Stop
from autodiscovery.running.lifecycle import Display
from autodiscovery.store import Run, RunStatus, Store
from autodiscovery.store.models import row, utcnow
from autodiscovery.toolkit.text import first_line, plural

MakeHarness = Callable[[Campaign], Evaluating]
"""A campaign -> its harness (the registry's, or a stand-in a test gives)."""


def runs_of(s: Session, parent: Run) -> dict[str, Run]:
    """The runs of a suite (in a session) by their problem's label: their campaign name after the suite's."""
    runs = s.query(Run).filter(Run.parent_id == parent.id).order_by(Run.id)
    return {r.campaign.removeprefix(f"{parent.campaign}/"): r for r in runs}


def children(store: Store, parent_id: int) -> dict[str, int]:
    """The run ids of a suite by their problem's label."""
    with store.session() as s:
        return {label: r.id for label, r in runs_of(s, row(s, Run, parent_id)).items()}


def start(campaign: Campaign, overrides: list[str], store: Store, display: Display, stop: Stop,
          started: Callable[[int], None] | None = None, dry_run: bool = False,
          progress: Callable[[str], None] = lambda _: None, make_harness: MakeHarness | None = None,
          problems: int | None = None) -> int:
    """A new suite's run, then each problem's run in turn (`problems` of them at most, this time); returns
    the suite's run id."""
    with store.session() as s:
        run = Run(campaign=campaign.name, agent=f"suite of {campaign.agent.kind}",
                  config=campaign.model_dump(mode="json"),
                  fingerprint=provenance.stamped({"dry_run": True} if dry_run else {}))
        s.add(run)
        s.flush()
        parent_id = run.id
    if started:
        started(parent_id)
    return drive(parent_id, overrides, store, display, stop, dry_run=dry_run, progress=progress,
                 make_harness=make_harness, problems=problems)


def resume(parent_id: int, overrides: list[str], store: Store, display: Display, stop: Stop,
           started: Callable[[int], None] | None = None, allow_new_toolchain: bool = False,
           progress: Callable[[str], None] = lambda _: None, make_harness: MakeHarness | None = None,
           problems: int | None = None) -> int:
    with store.session() as s:
        run = row(s, Run, parent_id)
        dry_run = bool(run.fingerprint.get("dry_run"))
    if started:
        started(parent_id)
    return drive(parent_id, overrides, store, display, stop, dry_run=dry_run,
                 allow_new_toolchain=allow_new_toolchain, progress=progress, make_harness=make_harness,
                 problems=problems)


def is_suite(store: Store, run_id: int) -> bool:
    with store.session() as s:
        run = Run.find(s, run_id)
        return run is not None and bool((run.config or {}).get("suite"))


def drive(parent_id: int, overrides: list[str], store: Store, display: Display, stop: Stop, dry_run: bool = False,
          allow_new_toolchain: bool = False, progress: Callable[[str], None] = lambda _: None,
          make_harness: MakeHarness | None = None, problems: int | None = None) -> int:
    """Each problem's run in turn, from the first not finished, `problems` of them at most this time (the
    suite then stops between two problems, to be resumed); `make_harness` (a campaign -> its harness)
    stands in for the registry's."""
    from autodiscovery import registry
    from autodiscovery.running import runner

    make_harness = make_harness or registry.make_harness

    with store.session() as s:
        run = row(s, Run, parent_id)
        campaign = validate(run.config, f"campaign of run {parent_id}")
        run.status, run.stop_reason = RunStatus.running, None
    entries = order(campaign, campaign.suite or [])
    done = tuned = 0
    try:
        for i, entry in enumerate(entries):
            if stop.requested or (problems is not None and tuned >= problems):
                break
            have = children(store, parent_id)
            progress(f"{entry.label} ({i + 1} of {len(entries)})")
            child_id = have.get(entry.label)
            if child_id is not None:
                with store.session() as s:
                    status = row(s, Run, child_id).status
                if status in (RunStatus.finished, RunStatus.failed):
                    done += 1
                    continue
                with store.session() as s:
                    child = validate(row(s, Run, child_id).config, f"campaign of run {child_id}")
                runner.resume_run(child_id, _own(overrides), store, display, harness=make_harness(child), stop=stop,
                              allow_new_toolchain=allow_new_toolchain)
                tuned += 1
            else:
                child = campaign.entry(entry, f"suite {parent_id}")
                harness = make_harness(child)
                if (why := _refuses(child, harness)) is not None:
                    _refused(store, parent_id, child, why)
                else:
                    runner.run_campaign(None, [], store, display, harness=harness, dry_run=dry_run, stop=stop,
                                 campaign=child, parent_id=parent_id)
                    tuned += 1
            done += 1
            if not dry_run and i == 0:
                _adopt_device(store, parent_id)
    except BaseException:
        _close(store, parent_id, RunStatus.interrupted, "interrupted")
        raise
    if done < len(entries):
        _close(store, parent_id, RunStatus.interrupted, f"stopped after {done} of {len(entries)} problems")
    else:
        _close(store, parent_id, RunStatus.finished, f"suite: {plural(len(entries), 'problem')} tuned")
    return parent_id


def order(campaign: Campaign, entries: list) -> list:
    """The problems in the order each warms the next at the least cost: the first as listed, then, again
    and again, the problem nearest any tuned before it (the sum of |log| of its sizes' ratios), so that
    every run's warm start has the nearest recorded bests (a minimum spanning tree, grown from the
    first). Ties keep the listed order; the order depends on the entries alone, so a resumed suite goes
    on in it."""
    sizes = [campaign.entry(e, "suite").problem.names() for e in entries]

    def distance(a: dict[str, int], b: dict[str, int]) -> float:
        return sum(abs(math.log(a[k] / b[k])) for k in a.keys() & b.keys() if a[k] > 0 and b[k] > 0)

    if not entries:
        return []
    done, left = [0], list(range(1, len(entries)))
    while left:
        nearest = min(left, key=lambda j: (min(distance(sizes[j], sizes[i]) for i in done), j))
        done.append(nearest)
        left.remove(nearest)
    return [entries[i] for i in done]


def _own(overrides: list[str]) -> list[str]:
    """The overrides a resumed problem's run may take: how long and how it goes on."""
    return [o for o in overrides if o.startswith(("budget.", "stop.", "agent.", "executor."))]


def _refuses(child: Campaign, harness: Evaluating) -> str | None:
    """Why the seed cannot take this problem (its manifest refuses the shape), or None."""
    from autodiscovery import registry

    if not isinstance(harness, Checking):
        return None
    try:
        harness.check(registry.agent(child.agent.kind)(child).seed_proposal(child).source)
    except AutoDiscoveryError as exc:
        return first_line(str(exc))
    return None


def _refused(store: Store, parent_id: int, child: Campaign, why: str) -> None:
    """A problem whose run could not begin, recorded as a failed run with the reason (the table says it)."""
    with store.session() as s:
        s.add(Run(campaign=child.name, agent=child.agent.kind, config=child.model_dump(mode="json"),
                  fingerprint=provenance.stamped({}), status=RunStatus.failed, stop_reason=f"failed: the seed refuses the problem: {why}",
                  parent_id=parent_id))


def _adopt_device(store: Store, parent_id: int) -> None:
    """The suite's fingerprint: its first problem's machine (the device and toolchain, not its baseline)."""
    with store.session() as s:
        first = s.query(Run).filter(Run.parent_id == parent_id).order_by(Run.id).first()
        if first is not None and first.fingerprint:
            run = row(s, Run, parent_id)
            run.fingerprint = {k: v for k, v in first.fingerprint.items()
                               if k not in ("baseline", "best_lt", "problem")}


def _close(store: Store, parent_id: int, status: RunStatus, reason: str) -> None:
    with store.session() as s:
        run = row(s, Run, parent_id)
        kids = s.query(Run).filter(Run.parent_id == parent_id).all()
        run.status, run.stop_reason = status, reason
        run.elapsed_s, run.updated_at = sum(k.elapsed_s for k in kids), utcnow()
