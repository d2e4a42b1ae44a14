"""The launch manifest a candidate declares in a leading `/* @manifest ... */` YAML comment (a Triton
candidate, a Python file: in its docstring, `\"\"\"@manifest ... \"\"\"`), read into a harness's own pydantic
model (each harness says what its launches are)."""

from __future__ import annotations

import copy
import functools
import re
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

MANIFEST_RE = re.compile(r"/\*\s*@manifest\b(.*?)\*/|^\"\"\"\s*@manifest\b(.*?)\"\"\"", re.S | re.M)
M = TypeVar("M", bound=BaseModel)
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the same data as `safe_load`, some ten times faster: the
search reads hundreds of manifests a proposal)."""


def is_triton(source: str) -> bool:
    """Whether a candidate is a Triton file: Python that imports triton, not CUDA C++."""
    return "@triton.jit" in source and "import triton" in source and "__global__" not in source


def read(source: str, model: type[M], error: type[Exception]) -> M:
    """The manifest of `source` as `model`; `error` (one line) where there is none or it does not fit,
    naming the line of the source where the YAML breaks or the offending key is."""
    match = MANIFEST_RE.search(source)
    if not match:
        raise error("no /* @manifest ... */ block in the source (in a Triton file: a \"\"\"@manifest ... \"\"\" docstring)")
    group = 1 if match.group(1) is not None else 2
    text = match.group(group)
    first = source[:match.start(group)].count("\n")  # the source line (0-based) the YAML's first line is on
    try:
        data = _fresh(_loaded(text))  # a copy: the caller's model may keep and change what it is given
    except yaml.YAMLError:
        data = _pure(text, first, error)
    if not isinstance(data, dict):
        raise error(f"line {first + 1}: manifest must be a YAML mapping")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        line = _line_of(yaml.compose(text), err["loc"])
        raise error(f"line {first + line + 1}: manifest: {where}: {err['msg']}") from None


@functools.lru_cache(maxsize=4096)
def _loaded(text: str) -> object:
    """A manifest's YAML, read once: a search renders the same manifest for many settings of knobs it does
    not state (nine in ten of the fits a proposal asks for)."""
    return yaml.load(text, Loader=FAST_LOADER)


def _fresh(data: object) -> object:
    """YAML's data with mappings and lists of its own (the scalars it reads are immutable)."""
    if isinstance(data, dict):
        return {k: _fresh(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_fresh(v) for v in data]
    return copy.deepcopy(data) if isinstance(data, set) else data


def _pure(text: str, first: int, error: type[Exception]) -> object:
    """The manifest read again by PyYAML's own parser, whose errors say where and what the same way on
    every machine (libyaml's words differ)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)  # where it began
        at = f"line {first + mark.line + 1}: " if mark else ""
        raise error(f"{at}manifest is not valid YAML: {getattr(exc, 'problem', None) or exc}") from None


def _line_of(node: yaml.Node, loc: tuple) -> int:
    """The line (0-based, in the YAML) of the deepest node along a validation error's location: the key's
    own, or the mapping that lacks it."""
    line = node.start_mark.line
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if found is None:
                return line
            line, node = found[0].start_mark.line, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            return line
    return line
