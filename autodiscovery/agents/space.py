"""Search spaces: families of kernels rendered from Jinja2 templates with declared knobs.

`search_spaces/<space>/families.yaml` lists the families (a rung of the ladder each), their knobs
with allowed values, a known-good default, and constraints that reject a combination before it is
compiled, each with the reason in words. A template may include the shipped partials in `seeds/_shared/`
by name (`{% include "_hopper.cuh.j2" %}`); a file of that name beside the template comes first.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autodiscovery import AutoDiscoveryError
from autodiscovery.campaign import SEARCH_SPACES, SEEDS
from autodiscovery.toolkit.expr import ExprError, compiled, run
from autodiscovery.toolkit.manifest import MANIFEST_RE

if TYPE_CHECKING:
    from autodiscovery.roles import Shown


class SpaceError(AutoDiscoveryError):
    pass


PARTIALS = SEEDS / "_shared"
"""Partials every space's templates find by name: PTX helpers for Hopper, vector loads for the reference ops."""

_CODE: dict[str, Any] = {}  # a constraint's text -> its checked bytecode
_ALL: dict[tuple[str, ...], Any] = {}  # a family's constraints -> one bytecode giving the tuple of their values
_NAMED: dict[tuple[tuple[str, ...], str], frozenset[str]] = {}  # (a family's knobs, a constraint) -> those it names


@functools.lru_cache(maxsize=64)
def _environment(seeds: Path, files: tuple[str, ...]) -> jinja2.Environment:
    """The templates of a seed folder (and the shared partials), one environment a folder and its list of
    files for the process: compiled templates are kept (compiling a space's templates takes longer than
    rendering them); a template changed on disk is compiled again (Jinja's auto-reload), and a file added
    beside the templates (one that shadows a shared partial) makes a new environment for a new Space."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader([seeds, PARTIALS]), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


class Constraint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expr: str
    why: str


class Family(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    rung: int
    summary: str
    source: str | None = None
    """A fixed source file (no knobs), relative to the space's seed folder."""
    template: str | None = None
    """A Jinja2 template rendered with the knob values."""
    knobs: dict[str, list[int | str]] = {}
    default: dict[str, int | str] = {}
    constraints: list[Constraint] = []
    shape_knobs: list[str] = []
    """Knobs whose best value depends on the problem's shape (tile sizes, CTA count, K split): a structural
    move sets them where the harness's fit of the shape is best, the others at their default."""
    absent: dict[str, int | str] = {}
    """Knobs added after configurations were recorded, each with the value a configuration without it has
    (what the template renders when it is not given): a recorded configuration lacking them is that one."""
    tflops: float | None = Field(None, gt=0)
    """About how fast the family's kernels run, in TFLOP/s of the problem's work, where a run must know it
    before anything launches: a seed's (`agent.search.start: auto`)."""

    @model_validator(mode="after")
    def _consistent(self) -> Family:
        if (self.source is None) == (self.template is None):
            raise ValueError("give exactly one of source or template")
        if self.template and set(self.default) != set(self.knobs):
            raise ValueError(f"default must set every knob ({', '.join(self.knobs)})")
        if unknown := [k for k in self.shape_knobs if k not in self.knobs]:
            raise ValueError(f"shape_knobs names {', '.join(unknown)}, not among the knobs ({', '.join(self.knobs)})")
        for k, v in self.default.items():
            if v not in self.knobs[k]:
                raise ValueError(f"default {k}={v} is not among its values {self.knobs[k]}")
        for k, v in self.absent.items():
            if v not in self.knobs.get(k, []):
                raise ValueError(f"absent {k}={v} is not one of the knobs' values")
        return self

    def complete(self, knobs: dict[str, Any]) -> dict[str, Any]:
        """A recorded configuration with the knobs added since it was recorded at their `absent` values
        (unchanged where it lacks any other knob, or lacks none)."""
        missing = [k for k in self.knobs if k not in knobs]
        if not missing or any(k not in self.absent for k in missing):
            return knobs
        return {**knobs, **{k: self.absent[k] for k in missing}}

    def violations(self, knobs: dict[str, Any], shape: dict[str, int]) -> list[str]:
        """The reasons this configuration is invalid (empty when it is valid). All the constraints are
        evaluated at once (a walk asks hundreds of thousands of times); where one of them cannot be, each
        is evaluated on its own, to say which and why."""
        names = {**shape, **knobs}
        values = self._values(names)
        if values is not None:
            return [f"{c.why} ({c.expr})" for c, ok in zip(self.constraints, values, strict=True) if not ok]
        out = []
        for c in self.constraints:
            try:
                if not run(self._code(c.expr), c.expr, names):
                    out.append(f"{c.why} ({c.expr})")
            except ExprError as exc:
                out.append(str(exc))
        return out

    def refusing(self, knobs: dict[str, Any], shape: dict[str, int]) -> list[frozenset[str]] | None:
        """The knobs each constraint this configuration violates names (empty when it is valid; None
        where the constraints cannot be evaluated at once). A change of knobs that a violated constraint
        does not name leaves it violated: a repair must move at least one knob of each."""
        values = self._values({**shape, **knobs})
        if values is None:
            return None
        return [self._named(c.expr) for c, ok in zip(self.constraints, values, strict=True) if not ok]

    def _values(self, names: dict[str, Any]) -> tuple | None:
        """Every constraint's value, evaluated at once; None where one of them cannot be."""
        try:
            values = run(self._all(), "", names)
        except ExprError:
            return None
        return values if isinstance(values, tuple) else None

    def _named(self, text: str) -> frozenset[str]:
        key = (tuple(self.knobs), text)
        named = _NAMED.get(key)
        if named is None:
            named = _NAMED[key] = frozenset(k for k in self.knobs if k in self._code(text).co_names)
        return named

    def _all(self) -> CodeType:
        exprs = tuple(c.expr for c in self.constraints)
        code = _ALL.get(exprs)
        if code is None:
            for text in exprs:  # each checked as the single ones are
                self._code(text)
            code = _ALL[exprs] = compile("(" + "".join(f"({e}), " for e in exprs) + ")", "<constraints>", "eval")
        return code

    @staticmethod
    def _code(text: str) -> CodeType:
        code = _CODE.get(text)
        if code is None:
            code = _CODE[text] = compiled(text)
        return code

    def configurations(self) -> Iterator[dict[str, Any]]:
        """Every setting of the knobs, one at a time (a family's product runs to millions)."""
        keys = list(self.knobs)
        return (dict(zip(keys, vals)) for vals in itertools.product(*(self.knobs[k] for k in keys)))

    def valid_configurations(self, shape: dict[str, int]) -> Iterator[dict[str, Any]]:
        """The configurations `violations` passes at `shape`, in the order of `configurations`: each
        constraint is checked as soon as the knobs it names are set, so a refused prefix is not expanded
        (the cluster family's product is tens of millions; most of it is refused by its first few knobs)."""
        keys = list(self.knobs)
        at: list[list] = [[] for _ in keys]  # the constraints to check once knob i is set
        first: list = []  # those that name no knob
        for c in self.constraints:
            code = self._code(c.expr)
            named = [i for i, k in enumerate(keys) if k in code.co_names]
            (at[max(named)] if named else first).append((code, c.expr))

        def holds(checks: list[tuple[CodeType, str]], names: dict[str, Any]) -> bool:
            try:
                return all(run(code, text, names) for code, text in checks)
            except ExprError:
                return False

        names: dict[str, Any] = dict(shape)
        if not holds(first, names):
            return

        def walk(i: int) -> Iterator[dict[str, Any]]:
            if i == len(keys):
                yield {k: names[k] for k in keys}
                return
            for v in self.knobs[keys[i]]:
                names[keys[i]] = v
                if holds(at[i], names):
                    yield from walk(i + 1)
            del names[keys[i]]

        yield from walk(0)


class Space:
    """A search space: by name, `search_spaces/<name>/families.yaml` with its templates in `seeds/<name>/`;
    by path (a campaign's own, `my_space/` or an absolute path), a folder holding families.yaml and the
    templates and sources it names."""

    def __init__(self, name: str, seeds_dir: Path | None = None) -> None:
        self.name = name
        own = Path(name).expanduser()
        by_path = own.is_absolute() or "/" in name
        self.folder = own if by_path else SEARCH_SPACES / name
        path = self.folder / "families.yaml"
        if not path.is_file():
            raise SpaceError(f"search space '{name}' not found (no {path})")
        self.path = path
        from autodiscovery.yaml_lines import key_lines, yaml_error

        text = path.read_text()
        try:
            raw = yaml.safe_load(text)["families"]
        except yaml.YAMLError as exc:
            raise SpaceError(f"{path}: {yaml_error(exc)}") from None
        except (KeyError, TypeError):
            raise SpaceError(f"{path}: not a families file (a mapping `families:` of families by name)") from None
        if not isinstance(raw, dict):
            raise SpaceError(f"{path}: not a families file (a mapping `families:` of families by name)")
        self.families = {}
        for n, f in raw.items():
            try:
                self.families[n] = Family.model_validate({**(f if isinstance(f, dict) else {}), "name": n})
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ("families", n, *err["loc"])
                lines = key_lines(text)
                line = next((lines[where[:i]] for i in range(len(where), 0, -1) if where[:i] in lines), None)
                at = f": line {line}" if line else ""
                raise SpaceError(f"{path}{at}: families.{n}.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        self.seeds = seeds_dir or (self.folder if by_path else SEEDS / name)

    @classmethod
    def of_seed(cls, seed: Path) -> Space:
        """The space of a campaign that names none where its harness has none of its own: the seed alone
        (a run measures it, and says how to go further)."""
        space = cls.__new__(cls)
        space.name = f"the seed {seed.name}"
        space.folder = space.seeds = seed.parent
        space.path = seed
        stem = seed.name.split(".")[0]
        space.families = {stem: Family(name=stem, rung=1, summary="the campaign's seed", source=seed.name)}
        return space

    def fits(self, harness: Shown) -> None:
        """Raise a SpaceError in one line where a family's kernel is not one `harness` (its class) can
        launch (its default rendered, its manifest read by the harness: `Inspecting`): the space of another
        harness. A harness that reads no manifest is not asked."""
        from autodiscovery.roles import Inspecting

        if not isinstance(harness, Inspecting):
            return
        for fam in self.ladder():
            try:
                source = self.render(fam.name, fam.default)
                harness.manifest(source)
            except (AutoDiscoveryError, OSError) as exc:
                raise SpaceError(f"search space {self.path} does not fit the {harness.name} harness: its family "
                                 f"{fam.name}: {' '.join(str(exc).split())}") from None

    def __getstate__(self) -> dict:
        """Picklable (an executor sends the agent or a harness holding it to its workers): the template
        environment and the templates cut at their manifests are made again where they are needed."""
        return {k: v for k, v in self.__dict__.items() if k not in ("env", "_heads")}

    @cached_property
    def _heads(self) -> dict[str, jinja2.Template | None]:
        """Each template's text up to the end of its manifest, compiled (None: it cannot be rendered alone)."""
        return {}

    @cached_property
    def env(self) -> jinja2.Environment:
        seeds = Path(self.seeds)
        return _environment(seeds, tuple(sorted(p.name for p in seeds.iterdir())) if seeds.is_dir() else ())

    def ladder(self) -> list[Family]:
        return sorted(self.families.values(), key=lambda f: f.rung)

    def render(self, family: str, knobs: dict[str, Any]) -> str:
        fam = self.families[family]
        if fam.source:
            return (self.seeds / fam.source).read_text()
        if fam.template is None:
            raise SpaceError(f"{family}: neither a source nor a template")
        try:
            return self.env.get_template(fam.template).render(**knobs)
        except jinja2.TemplateError as exc:
            raise SpaceError(f"{family}: template {fam.template} failed to render: {exc}") from None

    def head(self, family: str, knobs: dict[str, Any]) -> str:
        """The source rendered up to the end of its manifest: what a harness's fit reads, at a fraction of
        a whole kernel's rendering (a search asks for hundreds of fits a proposal). The whole source where
        the template's manifest cannot be rendered alone."""
        fam = self.families[family]
        tpl = self._head(fam.template) if fam.template else None
        if tpl is None:
            return self.render(family, knobs)
        try:
            return tpl.render(**knobs)
        except jinja2.TemplateError:
            return self.render(family, knobs)

    def _head(self, name: str) -> jinja2.Template | None:
        if name not in self._heads:
            self._heads[name] = None
            text, _, _ = self.env.loader.get_source(self.env, name)  # type: ignore[union-attr]
            if (found := MANIFEST_RE.search(text)) is not None:
                try:
                    self._heads[name] = self.env.from_string(text[:found.end()])
                except jinja2.TemplateSyntaxError:  # a manifest inside a block the cut leaves open
                    pass
        return self._heads[name]

    def configuration_of_source(self, source: str) -> tuple[str, dict[str, Any]] | None:
        """(family, knobs) of `source` where it is a fixed-source family's file or a template's default
        rendered (a Triton seed written as the Triton family's default, say): a run from it then tunes that
        family's knobs from there."""
        for fam in self.families.values():
            if fam.source and (self.seeds / fam.source).read_text() == source:
                return fam.name, {}
        for fam in self.families.values():
            if fam.template and self.render(fam.name, dict(fam.default)) == source:
                return fam.name, dict(fam.default)
        return None
