"""What each study, and the run as a whole, produces besides summary.csv: its task's figures
and tables that its grid gives something to show (REQUIRES), and the run's overview and theory
tables. Light (no torch, no pandas): the Snakefile lists outputs from here."""

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
class BelowBaseline:
    """Met where some point has a smaller `axis` than the baseline: the deepest point matching
    the study's baseline settings (all points when none is set or none matches)."""

    axis: str = "depth"

    def met(self, points: list[dict], baseline: dict) -> bool:
        base = [p for p in points if all(p.get(k) == v for k, v in (baseline or {}).items())] or points
        return bool(base) and any(p[self.axis] < max(b[self.axis] for b in base) for p in points)


# What a figure or table needs from its study's grid to show something: every requirement met,
# else it is neither made nor listed as an output. Names not here need nothing.
P1_CURVE = ("protocol", "mlp_ratio", "depth")  # a vs-heads line: one depth in one panel


P2_LINE = ("depth", "modules", "dim", "tokens", "posn")  # a vs-rank line


RANK_VARIES = Varies("head_dim", P2_LINE)


def _p2_lines_by(axis: str) -> tuple:
    return RANK_VARIES, Varies(axis, tuple(a for a in P2_LINE if a != axis))


REQUIRES: dict[str, tuple] = {
    **{name: (Varies("heads", P1_CURVE),)
       for name in ("kappa_vs_heads", "accuracy_vs_heads", "loss_vs_heads", "glue_vs_heads")},
    **{name: (Varies("mlp_hidden", ("protocol", "depth", "heads")),)
       for name in ("accuracy_vs_mlp", "loss_vs_mlp", "glue_vs_mlp")},
    "mse_vs_rank": (RANK_VARIES,),
    "kappa_vs_rank": (RANK_VARIES,),
    "mse_vs_rank_by_tokens": _p2_lines_by("tokens"),
    "mse_vs_rank_by_dim": _p2_lines_by("dim"),
    "mse_vs_rank_by_posn": _p2_lines_by("posn"),
    "perfect_angle": (Has((("depth", 1), ("heads", 1))),),
    "lean_vs_baseline": (BelowBaseline("depth"),),
}


POINT_AXES = ("protocol", "depth", "heads", "width", "head_dim", "mlp_hidden", "modules", "dim", "tokens", "posn")


def grid_points(rows: Iterable[dict]) -> list[dict]:
    """A study's points from its variants' models or its summary rows: one per (architecture,
    protocol), seeds merged; `protocols` a list or a ';'-joined string."""
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
    """(figure names, table names) of a study: its task's candidates (the catalogue's figures, tables)
    whose REQUIRES the grid's points meet, and the claims' figure and table where the study declares claims.
    The Snakefile's outputs, its targets and the figures and tables commands all take their names
    from here."""
    def shown(names):
        return tuple(n for n in names if all(r.met(points, baseline or {}) for r in REQUIRES.get(n, ())))

    info = task_info(task)
    return shown(info.figures) + (("pareto",) if claims else ()), shown(info.tables) + (("claims",) if claims else ())


# Across every study (results/tables/all_studies-{name}.*, the overview rule).
OVERVIEW_TABLES = ("kappa_rank_error", "heads_effect", "kappa_error_correlation", "headline")


THEORY_TABLES = ("gaussian_conditioning", "paper_comparison")
