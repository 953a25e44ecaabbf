"""What a study may show: every figure and table, each one record where the code that makes it is
defined (`@figure(...)` on a drawing function, `@table(...)` on a table's function), carrying its
name, what it needs from the study's grid, which tasks show it, and its caption.

Light (no torch, no pandas): the Snakefile decides a study's outputs from here before any drawing
code can be imported. So the records are also kept as an index, catalogue.json beside this module,
and the report's captions as report/<figures|tables>/<name>.rst, both written from the
definitions by `leaner catalogue` (a test fails where they are stale). A process that imports the
drawing code holds the definitions' own records in place of the index's, and a record the index
lacks (a test's toy) is added after the others. A task's figures and tables are those whose
`tasks` its record matches, in the index's order."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .registry import Registry, scoped_catalogue
from .tasks import TaskInfo

INDEX = Path(__file__).with_name("catalogue.json")
KINDS = ("figures", "tables")


@dataclass(frozen=True)
class Varies:
    """Met where `axis` takes two values or more among points equal on every axis of `within`
    (a curve along `axis`, or two lines told apart by it)."""

    axis: str
    within: tuple[str, ...] = ()

    def met(self, points: list[dict], baseline: dict, claims=()) -> bool:
        seen: dict[tuple, set] = {}
        for p in points:
            seen.setdefault(tuple(p.get(k) for k in self.within), set()).add(p.get(self.axis))
        return any(len(values) > 1 for values in seen.values())


@dataclass(frozen=True)
class Has:
    """Met where some point has every one of these values."""

    values: tuple[tuple[str, Any], ...]

    def met(self, points: list[dict], baseline: dict, claims=()) -> bool:
        return any(all(p.get(k) == v for k, v in self.values) for p in points)


@dataclass(frozen=True)
class Architectures:
    """The grid's points are P1's architectures (a width each): parameters trade against depth and
    heads, which P2's nearest-point grid (equal parameters across ranks) does not."""

    def met(self, points: list[dict], baseline: dict, claims=()) -> bool:
        return any("width" in p for p in points)


@dataclass(frozen=True)
class BelowBaseline:
    """Met where some point has a smaller `axis` than the baseline: the deepest point matching
    the study's baseline settings (all points when none is set or none matches)."""

    axis: str = "depth"

    def met(self, points: list[dict], baseline: dict, claims=()) -> bool:
        base = [p for p in points if all(p.get(k) == v for k, v in (baseline or {}).items())] or points
        return bool(base) and any(p[self.axis] < max(b[self.axis] for b in base) for p in points)


@dataclass(frozen=True)
class Ladder:
    """Met where a declared claim has a control and lean models at `rungs` head counts or more:
    a ladder of heads, each rung's share of the control's cost won back."""

    rungs: int = 3

    def is_ladder(self, claim: dict) -> bool:
        return bool(claim.get("control")) and len({p.get("heads") for p in claim["lean"]}) >= self.rungs

    def met(self, points: list[dict], baseline: dict, claims=()) -> bool:
        return any(map(self.is_ladder, claims))


REQUIREMENTS = {r.__name__: r for r in (Varies, Has, Architectures, BelowBaseline, Ladder)}


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list | tuple) else value


def _task_fields(info: TaskInfo) -> dict[str, str]:
    """What a record's `tasks` may select on."""
    return {"name": info.name, "family": info.family, "grid": info.grid, "metric": info.metric[0]}


@dataclass(frozen=True)
class Shown:
    """A figure or table a study may show (`kind` "figures" or "tables"): shown where the study's
    task matches `tasks` (each task field among its values; none: every task), the study declares
    claims if `claims`, and the grid meets every requirement."""

    name: str
    kind: str
    requires: tuple = ()
    tasks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    claims: bool = False
    caption: str = ""  # the report's caption (reStructuredText with Snakemake's Jinja); "" read from the index

    def shown(self, points: list[dict], baseline: dict, claims=()) -> bool:
        return all(r.met(points, baseline, claims) for r in self.requires)

    def for_task(self, info: TaskInfo) -> bool:
        have = _task_fields(info)
        return all(have[key] in values for key, values in self.tasks)

    def entry(self) -> dict:
        """The record as the index keeps it (the caption is its file)."""
        return {"name": self.name, "tasks": {k: list(v) for k, v in self.tasks}, "claims": self.claims,
                "requires": [{"is": type(r).__name__, **{f.name: getattr(r, f.name) for f in fields(r)}}
                             for r in self.requires]}

    @classmethod
    def of_entry(cls, kind: str, entry: dict) -> Shown:
        requires = tuple(REQUIREMENTS[r["is"]](**{k: _tuples(v) for k, v in r.items() if k != "is"})
                         for r in entry["requires"])
        return cls(entry["name"], kind, requires, _selector(entry["tasks"]), entry["claims"])


def _selector(tasks: dict[str, str | Iterable[str]] | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    allowed = ("name", "family", "grid", "metric")
    out = []
    for key, values in (tasks or {}).items():
        if key not in allowed:
            raise ValueError(f"tasks: {key!r} is not a task field (allowed: {', '.join(allowed)})")
        out.append((key, (values,) if isinstance(values, str) else tuple(values)))
    return tuple(out)


def _load(kind: str) -> dict[str, Shown]:
    try:
        entries = json.loads(INDEX.read_text())[kind]
    except FileNotFoundError:
        return {}
    return {e["name"]: Shown.of_entry(kind, e) for e in entries}


FIGURES: dict[str, Shown] = scoped_catalogue(_load("figures"))
TABLES: dict[str, Shown] = scoped_catalogue(_load("tables"))
CATALOGUES = {"figures": FIGURES, "tables": TABLES}
# The code of each record: a figure's (StudyData, path prefix) -> the files written; a table's
# (StudyData) -> (data frame, caption line).
FIGURE_CODE = Registry("figure", lambda: FIGURES)
TABLE_CODE = Registry("table", lambda: TABLES)
CODE = {"figures": FIGURE_CODE, "tables": TABLE_CODE}


def _define(kind: str, name: str, caption: str, requires: Iterable, tasks: dict | None, claims: bool) -> None:
    if name in CODE[kind]:
        raise ValueError(f"{kind[:-1]} {name!r}: defined twice ({CODE[kind][name].__qualname__} first)")
    if not caption.strip():
        raise ValueError(f"{kind[:-1]} {name!r}: no caption (the report's text under it)")
    CATALOGUES[kind][name] = Shown(name, kind, tuple(requires), _selector(tasks), claims, caption)


def figure(name: str, *, caption: str, requires: Iterable = (), tasks: dict | None = None, claims: bool = False,
           reads: str = "summary", passes: tuple[str, ...] = (), **options: Any) -> Callable:
    """Decorator: figure `name` (its record: caption, requirements, tasks, whether only a study with
    claims shows it), drawn by the decorated function as fn(data.<reads>, prefix, data.study,
    **{key: data.<key> for key in passes}, **options) for a study's StudyData; it returns the files
    written. Stack it to draw several figures with one function."""
    _define("figures", name, caption, requires, tasks, claims)

    def add(fn: Callable) -> Callable:
        def draw(data: Any, prefix: Path) -> list[Path]:
            return fn(getattr(data, reads), prefix, data.study, **{k: getattr(data, k) for k in passes}, **options)

        draw.__qualname__ = fn.__qualname__
        FIGURE_CODE.register(name)(draw)
        return fn

    return add


def table(name: str, *, caption: str, requires: Iterable = (), tasks: dict | None = None,
          claims: bool = False) -> Callable:
    """Decorator: table `name` (its record, as `figure`'s), made by the decorated function:
    (StudyData) -> (data frame, the caption line of its files)."""
    _define("tables", name, caption, requires, tasks, claims)
    return TABLE_CODE.register(name)


def outputs_for(kind: str, info: TaskInfo, claims: bool = False) -> tuple[str, ...]:
    """The names of `kind` a study of task `info` may show (before its grid is asked)."""
    return tuple(name for name, r in CATALOGUES[kind].items() if r.for_task(info) and (claims or not r.claims))


def caption(kind: str, name: str) -> str:
    """The report's caption file of figure or table `name` (`kind` "figures" or "tables"), relative
    to rules/: report/<kind>/<name>.rst (the catalogue's written by `leaner catalogue`)."""
    return f"../report/{kind}/{name}.rst"


def index_files() -> dict[str, str]:
    """What `leaner catalogue` writes, relative to the source tree's root, from every record whose
    code is registered (import the drawing code first): the index and each record's caption."""
    kinds = [f'"{kind}": [\n' + ",\n".join(json.dumps(r.entry()) for name, r in CATALOGUES[kind].items()
                                            if name in CODE[kind]) + "\n]" for kind in KINDS]
    files = {f"src/leaner/{INDEX.name}": "{\n" + ",\n".join(kinds) + "\n}\n"}
    for kind in KINDS:
        for name, record in CATALOGUES[kind].items():
            if name in CODE[kind]:
                files[f"report/{kind}/{name}.rst"] = record.caption
    return files
