"""The figure and table catalogue, and what each study and the run as a whole produce besides
summary.csv: every figure and table a study may show is registered once (FIGURES, TABLES: the
function that makes it, what it needs from the grid, its caption); a study shows its task's that
its grid gives something to show. Also the run's overview and theory tables. Light (no torch,
no pandas): the Snakefile lists outputs from here.

To add a figure or table: one `Shown` below, its function registered under its name where it is
defined (`@draws("name")` in analysis/study_figures.py, `@makes("name")` in study_tables.py), its
caption in report/, and its name in the tasks' `figures` or `tables` (tasks/__init__.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .grid import split_protocols
from .tasks import task_info

ACCEPTANCE_CHECKS = ("full_rank_gap", "short_sequences", "perfect_angle")


@dataclass(frozen=True)
class Varies:
    """Met where `axis` takes two values or more among points equal on every axis of `within`
    (a curve along `axis`, or two lines told apart by it)."""

    axis: str
    within: tuple[str, ...] = ()

    def met(self, points: list[dict], baseline: dict) -> bool:
        seen: dict[tuple, set] = {}
        for p in points:
            seen.setdefault(tuple(p.get(k) for k in self.within), set()).add(p.get(self.axis))
        return any(len(values) > 1 for values in seen.values())


@dataclass(frozen=True)
class Has:
    """Met where some point has every one of these values."""

    values: tuple[tuple[str, Any], ...]

    def met(self, points: list[dict], baseline: dict) -> bool:
        return any(all(p.get(k) == v for k, v in self.values) for p in points)


@dataclass(frozen=True)
class Architectures:
    """The grid's points are P1's architectures (a width each): parameters trade against depth and
    heads, which P2's nearest-point grid (equal parameters across ranks) does not."""

    def met(self, points: list[dict], baseline: dict) -> bool:
        return any("width" in p for p in points)


@dataclass(frozen=True)
class BelowBaseline:
    """Met where some point has a smaller `axis` than the baseline: the deepest point matching
    the study's baseline settings (all points when none is set or none matches)."""

    axis: str = "depth"

    def met(self, points: list[dict], baseline: dict) -> bool:
        base = [p for p in points if all(p.get(k) == v for k, v in (baseline or {}).items())] or points
        return bool(base) and any(p[self.axis] < max(b[self.axis] for b in base) for p in points)


# What a figure or table needs from its study's grid to show something: every requirement met,
# else it is neither made nor listed as an output.
P1_CURVE = ("protocol", "mlp_ratio", "depth")  # a vs-heads line: one depth in one panel


P2_LINE = ("depth", "modules", "dim", "tokens", "posn")  # a vs-rank line


RANK_VARIES = Varies("head_dim", P2_LINE)


def _p2_lines_by(axis: str) -> tuple:
    return RANK_VARIES, Varies(axis, tuple(a for a in P2_LINE if a != axis))


HEADS_VARY = (Varies("heads", P1_CURVE),)
MLP_VARIES = (Varies("mlp_hidden", ("protocol", "depth", "heads")),)


@dataclass(frozen=True)
class Shown:
    """A figure or table a study may show, registered once: its name, what it needs from the grid,
    and the caption of the report's entry. The function that makes it registers under its name
    where it is defined (analysis/study_figures.py `draws`: (StudyData, path prefix) -> the files
    written; analysis/study_tables.py `makes`: (StudyData) -> (data frame, caption line))."""

    name: str
    requires: tuple = ()
    caption: str = ""  # the report's caption file, relative to rules/ (default: ../report/<figures|tables>/<name>.rst)

    def shown(self, points: list[dict], baseline: dict) -> bool:
        return all(r.met(points, baseline) for r in self.requires)


def _figure(name: str, requires: tuple = ()) -> Shown:
    """A built-in figure (drawn in analysis/study_figures.py), captioned in report/figures/."""
    return Shown(name, requires, f"../report/figures/{name}.rst")


def _table(name: str, requires: tuple = ()) -> Shown:
    """A built-in table (made in analysis/study_tables.py), captioned in report/tables/."""
    return Shown(name, requires, f"../report/tables/{name}.rst")


FIGURES: dict[str, Shown] = {f.name: f for f in (
    _figure("kappa_vs_heads", HEADS_VARY),
    _figure("accuracy_vs_heads", HEADS_VARY),
    _figure("loss_vs_heads", HEADS_VARY),
    _figure("glue_vs_heads", HEADS_VARY),
    _figure("accuracy_vs_mlp", MLP_VARIES),
    _figure("loss_vs_mlp", MLP_VARIES),
    _figure("glue_vs_mlp", MLP_VARIES),
    _figure("kappa_through_training"),
    _figure("training_curves"),
    _figure("mse_vs_rank", (RANK_VARIES,)),
    _figure("kappa_vs_rank", (RANK_VARIES,)),
    _figure("mse_vs_rank_by_tokens", _p2_lines_by("tokens")),
    _figure("mse_vs_rank_by_dim", _p2_lines_by("dim")),
    _figure("mse_vs_rank_by_posn", _p2_lines_by("posn")),
    _figure("perfect_angle", (Has((("depth", 1), ("heads", 1))),)),
    _figure("pareto", (Architectures(),)),  # a P1 study's with claims
)}
TABLES: dict[str, Shown] = {t.name: t for t in (
    _table("by_config"),
    _table("lean_vs_baseline", (BelowBaseline("depth"),)),
    _table("glue_tasks"),
    _table("acceptance"),
    _table("paper_comparison"),
    _table("claims"),  # a study's with claims
)}
CLAIMS_OUTPUTS = ("pareto", "claims")  # (figure, table) of a study that declares claims


def caption(kind: str, name: str) -> str:
    """The report's caption file of figure or table `name` (`kind` "figures" or "tables"), relative
    to rules/: the catalogue's, else report/<kind>/<name>.rst (the run's own: overview, theory)."""
    registered = {"figures": FIGURES, "tables": TABLES}[kind].get(name)
    return registered.caption if registered else f"../report/{kind}/{name}.rst"


POINT_AXES = ("protocol", "depth", "heads", "width", "head_dim", "mlp_hidden", "modules", "dim", "tokens", "posn")


def grid_points(rows: Iterable[dict]) -> list[dict]:
    """A study's points from its variants' models: one per (architecture, protocol), seeds merged;
    `protocols` a list or a ';'-joined string."""
    points = {}
    for row in rows:
        for protocol in split_protocols(row.get("protocols")) or [None]:
            p = {k: row[k] for k in POINT_AXES if k in row and k != "protocol"}
            p["protocol"] = protocol
            if "width" in p and "mlp_hidden" in p:
                p["mlp_ratio"] = round(p["mlp_hidden"] / p["width"], 6)
            points[tuple(sorted(p.items(), key=lambda kv: kv[0]))] = p
    return list(points.values())


def study_outputs(task: str, points: list[dict], baseline: dict | None = None,
                  claims: bool = False) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(figure names, table names) of a study: its task's (the catalogue's figures, tables) whose
    requirements the grid's points meet, and the claims' figure and table where the study declares
    claims. The plan decides a study's outputs here (plan.Study.outputs), once: the Snakefile's
    outputs and targets, and the names the figures and tables commands are given, are those."""
    info = task_info(task)
    figure, table = CLAIMS_OUTPUTS
    extra = ((figure,), (table,)) if claims else ((), ())
    return tuple(n for n in info.figures + extra[0] if FIGURES[n].shown(points, baseline or {})), \
        tuple(n for n in info.tables + extra[1] if TABLES[n].shown(points, baseline or {}))


# Across every study (results/tables/all_studies-{name}.*, the overview rule).
OVERVIEW_TABLES = ("kappa_rank_error", "heads_effect", "kappa_error_correlation", "headline")


THEORY_TABLES = ("gaussian_conditioning", "paper_comparison")
