"""Start or resume a run: validate the campaign, check the machine, then hand over to the loop."""

from __future__ import annotations

import os

import harnesses
from autodiscovery import AutoDiscoveryError, agents
from autodiscovery.campaign import Campaign, apply_override, load, validate
from autodiscovery.loop import Display, Loop, Quiet
from autodiscovery.store import Run, Store


def prepare(campaign: Campaign, harness=None):
    harness = harness or harnesses.get(campaign.harness.name)(campaign)
    agent = agents.get(campaign.agent.kind)(campaign)
    return harness, agent


def workers(campaign: Campaign) -> int:
    return campaign.harness.build_workers or os.cpu_count() or 2


def start(name_or_path: str, overrides: list[str], store: Store, display: Display = Quiet(), harness=None) -> int:
    campaign = load(name_or_path, overrides)  # validated before anything else happens
    harness, agent = prepare(campaign, harness)
    fingerprint = harness.preflight()
    loop = Loop(campaign, store, harness, agent, display, workers(campaign))
    return loop.start(fingerprint)


def resume(run_id: int, overrides: list[str], store: Store, display: Display = Quiet(), harness=None) -> int:
    with store.session() as s:
        run = Run.find(s, run_id)
        if run is None:
            raise AutoDiscoveryError(f"no run {run_id} in this database")
        config, recorded = dict(run.config), dict(run.fingerprint)
    for assignment in overrides:
        apply_override(config, assignment)
    campaign = validate(config, f"run {run_id} config")
    harness, agent = prepare(campaign, harness)
    fingerprint = harness.preflight()
    if recorded.get("gpu") and fingerprint.get("gpu") != recorded.get("gpu"):
        raise AutoDiscoveryError(
            f"run {run_id} was measured on {recorded['gpu']}, this machine has {fingerprint.get('gpu')}: "
            "start a new run instead of mixing devices"
        )
    with store.session() as s:
        Run.find(s, run_id).config = campaign.model_dump(mode="json")
    loop = Loop(campaign, store, harness, agent, display, workers(campaign))
    return loop.drive(run_id)


def measure(kernel: str, name_or_path: str, overrides: list[str], repeat: int = 1, harness=None) -> list:
    """Gate and time one kernel file against cuBLAS, `repeat` times, each in a fresh child process."""
    from pathlib import Path

    path = Path(kernel)
    if not path.is_file():
        raise AutoDiscoveryError(f"kernel file not found: {kernel}")
    campaign = load(name_or_path, overrides)
    harness = harness or harnesses.get(campaign.harness.name)(campaign)
    harness.preflight()
    source = path.read_text()
    harness.check(source)
    build = harness.build(source)
    if not build.ok:
        raise AutoDiscoveryError(f"{kernel} does not compile: {build.log.splitlines()[0] if build.log else ''}")
    return [harness.evaluate(source, build) for _ in range(repeat)]
