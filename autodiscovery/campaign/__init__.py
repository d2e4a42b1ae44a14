"""Campaigns: a YAML file validated by pydantic, plus `key.path=value` overrides. The models are in
`models.py`; how a file is found, read, overridden and validated, in `loading.py`."""

from autodiscovery.campaign.loading import (
    DEFAULT_CAMPAIGN,
    DEFAULT_HARNESS,
    apply_override,
    available,
    blame,
    load,
    locate,
    resolve_path,
    validate,
)
from autodiscovery.campaign.models import (
    SEARCH_SPACES,
    SEEDS,
    AgentSettings,
    Budget,
    Campaign,
    CampaignError,
    ExecutorSettings,
    HarnessSettings,
    ProblemBase,
    StopRules,
    Strict,
    SuiteEntry,
    Sweep,
    section_of,
    validated,
)

__all__ = [
    "SEARCH_SPACES", "SEEDS", "AgentSettings", "Budget", "Campaign", "CampaignError", "ExecutorSettings",
    "HarnessSettings", "ProblemBase", "StopRules", "Strict", "SuiteEntry", "Sweep", "section_of", "validated",
    "DEFAULT_CAMPAIGN", "DEFAULT_HARNESS", "apply_override", "available", "blame", "load", "locate",
    "resolve_path", "validate",
]
