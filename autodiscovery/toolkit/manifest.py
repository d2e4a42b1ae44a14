"""The launch manifest a candidate declares in a leading `/* @manifest ... */` YAML comment, read into a
harness's own pydantic model (each harness says what its launches are)."""

from __future__ import annotations

import re
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

MANIFEST_RE = re.compile(r"/\*\s*@manifest\b(.*?)\*/", re.S)
M = TypeVar("M", bound=BaseModel)


def read(source: str, model: type[M], error: type[Exception]) -> M:
    """The manifest of `source` as `model`; `error` (one line) where there is none or it does not fit."""
    match = MANIFEST_RE.search(source)
    if not match:
        raise error("no /* @manifest ... */ block in the source")
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise error(f"manifest is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise error("manifest must be a YAML mapping")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise error(f"manifest: {where}: {err['msg']}") from None
