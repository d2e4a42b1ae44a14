"""The launch manifest a candidate declares in a leading `/* @manifest ... */` YAML comment (a Triton
candidate, a Python file: in its docstring, `\"\"\"@manifest ... \"\"\"`), read into a harness's own pydantic
model (each harness says what its launches are)."""

from __future__ import annotations

import copy
import difflib
import functools
import re
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

MANIFEST_RE = re.compile(r"/\*\s*@manifest\b(.*?)\*/|^\"\"\"\s*@manifest\b(.*?)\"\"\"", re.S | re.M)
M = TypeVar("M", bound=BaseModel)
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the same data as `safe_load`, some ten times faster: the
search reads hundreds of manifests a proposal)."""


def is_triton(source: str) -> bool:
    """Whether a candidate is a Triton file, Python and not CUDA C++: its manifest a docstring, or it imports
    triton, with no `__global__` in it (a kernel of other decorators than @triton.jit is still Python, and
    the Triton rule says what is wrong with it)."""
    if "__global__" in source:
        return False
    found = MANIFEST_RE.search(source)
    return (found is not None and found.group(2) is not None) or bool(re.search(r"^\s*(import|from) triton\b", source, re.M))


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
        loc, msg = mistake(exc.errors(), data)
        where = ".".join(str(p) for p in loc)
        line = _line_of(yaml.compose(text), loc)
        raise error(f"line {first + line + 1}: manifest: {where}: {msg}") from None


def mistake(errors: list[Any], data: object) -> tuple[tuple, str]:
    """The one mistake a validation's errors are best said by, as a location in the manifest's own keys
    and words: a key misspelt rather than the key it stands for missing ('blcok': did you mean block?);
    of the forms a value may take (a name, a number, a typed scalar), the error of the one it came
    nearest, at its own keys, never the schema's names for the forms."""
    said = [(_in_data(e["loc"], data), e) for e in errors]
    unknown = {(loc[:-1], loc[-1]): e for loc, e in said if e["type"] == "extra_forbidden" and loc}
    for loc, e in said:
        if e["type"] == "missing" and loc:
            for (parent, key), _ in unknown.items():
                if parent == loc[:-1] and difflib.get_close_matches(str(key), [str(loc[-1])], 1, 0.6):
                    return (*parent, key), f"no such key: did you mean {loc[-1]}?"
    first = said[0][0]
    alike = [(loc, e) for loc, e in said if loc[:len(first)] == first]  # one value's forms, the first mistake's
    loc, e = max(alike, key=lambda le: len(le[0]))
    return loc, "no such key" if e["type"] == "extra_forbidden" else e["msg"]


def _in_data(loc: tuple, data: object) -> tuple:
    """The parts of an error's location that are the data's own keys and indices (a union's member, a
    dict's '[key]', are the schema's), and a missing key the last."""
    out, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not part.startswith(("[", "dict[", "list[")) \
                and part not in ("str", "int", "float", "bool") and not any(c in part for c in "[],'"):
            out.append(part)  # a key the data lacks (a required one), or a key's name
            break
    return tuple(out)


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
