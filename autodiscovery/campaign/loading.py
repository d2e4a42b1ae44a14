"""Loading a campaign: the file found (by name among those that ship, or by path), its YAML read, the
`--set` overrides applied, the paths it names located, and every section validated by the part that
owns it, each error at its file and line (or the `--set` that caused it)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from autodiscovery import ROOT, AutoDiscoveryError
from autodiscovery.campaign.models import (
    SEARCH_SPACES,
    SEEDS,
    AgentSettings,
    Campaign,
    CampaignError,
    HarnessSettings,
    section_of,
)
from autodiscovery.yaml_lines import Source, key_lines, yaml_error


def available() -> list[Path]:
    """The campaign files that ship."""
    return sorted(SEARCH_SPACES.glob("*.yaml"))


PATHS: tuple[tuple[tuple[str, ...], Path, str], ...] = (
    (("problem", "file"), ROOT, "file"),
    (("seed",), SEEDS, "file"),
    (("agent", "search", "space"), SEARCH_SPACES, "search space"),
)
"""The fields of a campaign that name a file or a folder: where a relative one is looked for after the
campaign file's folder (the project's own place for it), and what it is (a file; a search space is a
folder holding families.yaml)."""


def _found(path: Path, kind: str) -> bool:
    return (path / "families.yaml").is_file() if kind == "search space" else path.is_file()


def locate(value: str, kind: str, project: Path, base: Path | None) -> tuple[str | None, list[Path]]:
    """Where a relative path of a campaign is: `base` (the campaign file's folder, or the current one for
    a `--set`) first, then `project`. Returns the value to keep (unchanged where it was found in the
    project, so that shipped campaigns record what they always did; else the absolute path) and every
    place looked, or (None, places) where it is in none."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return (value if _found(p, kind) else None), [p]
    places = [*([base / p] if base is not None else []), project / p]
    for place in places:
        if _found(place, kind):
            same = place.resolve() == (project / p).resolve()
            return (value if same else str(place.resolve())), places
    return None, places


def _locate_paths(data: dict[str, Any], folder: Path | None, source: str, overrides: Sequence[str]) -> None:
    """Every path field of `data` (`PATHS`) made one that is found from anywhere, or a CampaignError naming
    every place it was looked for."""
    for keys, project, kind in PATHS:
        node: Any = data
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        value = node.get(keys[-1]) if isinstance(node, dict) else None
        if not isinstance(value, str) or not value:
            continue
        where = ".".join(keys)
        by = blame(where, source, overrides)
        kept, places = locate(value, kind, project, Path.cwd() if by.startswith("--set") else folder)
        if kept is None:
            looked = ", ".join(str(p / "families.yaml" if kind == "search space" else p) for p in places)
            raise CampaignError(f"{by}: {where}: {kind} not found: {value} (looked for {looked})")
        node[keys[-1]] = kept


def resolve_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise CampaignError(f"campaign file not found: {p}")
        return p
    p = SEARCH_SPACES / f"{name_or_path}.yaml"
    if not p.is_file():
        names = ", ".join(f.stem for f in available()) or "none"
        raise CampaignError(f"unknown campaign '{name_or_path}' (available: {names})")
    return p


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `a.b.c=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise CampaignError(f"override '{assignment}' is not of the form key.path=value")
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise CampaignError(f"override '{assignment}': {'.'.join(parts[: i + 1])} is not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise CampaignError(f"--set {assignment}: the value is not valid YAML: {getattr(exc, 'problem', exc)}") from None


def blame(where: str, source: str, overrides: Sequence[str] = ()) -> str:
    """Who set the field at `where`: the last `--set` that touched it, else the campaign's source (at the
    key's line, where the source is a file)."""
    for assignment in reversed(overrides):
        key = assignment.partition("=")[0].strip()
        if where == key or where.startswith(key + ".") or key.startswith(where + "."):
            return f"--set {assignment}"
    return source.at(where) if isinstance(source, Source) else source


def _error(exc: ValidationError, source: str, prefix: tuple = (), overrides: Sequence[str] = ()) -> CampaignError:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *err["loc"])) or "(top level)"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    msg = err["msg"].removeprefix("Value error, ")
    return CampaignError(f"{blame(where, source, overrides)}: {where}: {msg}{more}")


DEFAULT_HARNESS = "hopper_gemm"
"""The harness of a campaign that names none."""
DEFAULT_CAMPAIGN = "hopper-gemm"
"""The campaign of the commands that name none."""


def _section(data: dict[str, Any], key: str, where: str, source: str, overrides: Sequence[str]) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CampaignError(f"{blame(where, source, overrides)}: {where}: must be a mapping")
    return value


def _model(model: type[BaseModel], value: dict, prefix: tuple, source: str, overrides: Sequence[str]) -> BaseModel:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise _error(exc, source, prefix, overrides) from None


def validate(data: dict[str, Any], source: str = "campaign", overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    """The campaign, with the sections its parts own validated by them: `harness:` and `problem:` by the
    harness it names, each section of `agent:` by the agent it is named after. An error names the
    `--set` (of `overrides`) that gave the bad value, else `source`."""
    from autodiscovery import registry
    from autodiscovery.roles import declared

    harness_data = _section(data, "harness", "harness", source, overrides)
    try:
        harness = registry.harness(harness_data.get("name", DEFAULT_HARNESS))
    except AutoDiscoveryError as exc:
        raise CampaignError(f"{blame('harness.name', source, overrides)}: harness.name: {exc}") from None
    own = declared(harness)
    if not (isinstance(own.Settings, type) and issubclass(own.Settings, HarnessSettings)):
        named = getattr(harness, "__name__", harness.name)  # the class, as its author wrote it
        raise CampaignError(f"{blame('harness.name', source, overrides)}: harness.name: {named}.Settings "
                            "must be a subclass of autodiscovery.campaign.HarnessSettings (which holds its name)")
    settings = _model(own.Settings, harness_data, ("harness",), source, overrides)
    problem = _model(own.Problem,
                     _section(data, "problem", "problem", source, overrides), ("problem",), source, overrides)
    agent = _agent(_section(data, "agent", "agent", source, overrides), source, overrides)
    try:
        return Campaign.model_validate({**data, "harness": settings, "problem": problem, "agent": agent})
    except ValidationError as exc:
        raise _error(exc, source, (), overrides) from None


def _agent(data: dict[str, Any], source: str, overrides: Sequence[str]) -> AgentSettings:
    """`agent:`: the agent `kind` names, and every section validated by the agent it is named after."""
    from autodiscovery import registry

    kind = data.get("kind", "search")
    try:
        named = registry.agent(str(kind))
    except AutoDiscoveryError as exc:
        raise CampaignError(f"{blame('agent.kind', source, overrides)}: agent.kind: {exc}") from None
    sections: dict[str, BaseModel] = {}
    for key, value in data.items():
        if key == "kind":
            continue
        where = f"agent.{key}"
        try:
            owner = named if key == section_of(named) else registry.agent_of_section(key)
        except AutoDiscoveryError as exc:
            raise CampaignError(f"{blame(where, source, overrides)}: {where}: {exc}") from None
        if not isinstance(value, dict):
            raise CampaignError(f"{blame(where, source, overrides)}: {where}: must be a mapping")
        sections[key] = _model(owner.Settings, value, ("agent", key), source, overrides)
    mine = section_of(named)
    sections.setdefault(mine, named.Settings())
    try:
        named.check(sections[mine])
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        where = f"agent.{mine}.{field}" if why else f"agent.{mine}"
        raise CampaignError(f"{blame(where, source, overrides)}: {where}: {why or exc}") from None
    return AgentSettings(kind=str(kind), **sections)


def load(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Campaign:
    path = resolve_path(name_or_path)
    text = path.read_text()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CampaignError(f"{path.name}: {yaml_error(exc)}") from None
    if not isinstance(data, dict):
        raise CampaignError(f"{path.name}: the top level must be a mapping of sections")
    source = Source(path.name, key_lines(text))
    data = copy.deepcopy(data)
    for assignment in overrides:
        apply_override(data, assignment)
    _locate_paths(data, path.resolve().parent, source, overrides)
    campaign = validate(data, source, overrides)
    for entry in campaign.suite or []:  # every problem of a suite is checked before anything runs
        campaign.entry(entry, path.name)
    if not campaign.seed_path().is_file():
        raise CampaignError(f"{blame('seed', source, overrides)}: seed: file not found: {campaign.seed_path()}")
    return campaign
