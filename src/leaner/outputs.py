"""What each study and the run as a whole produce besides summary.csv: a study shows the figures
and tables of the catalogue (shown.py) for its task that its grid gives something to show; the
run adds its overview and theory tables. Light (no torch, no pandas): the Snakefile lists outputs
from here.

To add a figure or table: define it where its code is, `@figure(...)` on its drawing function or
`@table(...)` on its function (shown.py says how), and run `leaner catalogue`."""

from __future__ import annotations

from collections.abc import Iterable

from .grid import split_protocols
from .shown import FIGURES, TABLES, outputs_for
from .tasks import task_info

ACCEPTANCE_CHECKS = ("full_rank_gap", "short_sequences", "perfect_angle")


POINT_AXES = ("protocol", "depth", "heads", "width", "head_dim", "mlp_hidden", "qk_scale", "modules", "dim", "tokens",
              "posn")


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
                  claims=()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(figure names, table names) of a study: the catalogue's for its task (those of a study with
    claims too, where it declares them: `claims`, the plan's) whose requirements the grid's points
    and the claims meet. The plan
    decides a study's outputs here (plan.Study.outputs), once: the Snakefile's outputs and targets,
    and the names the figures and tables commands are given, are those."""
    info, claims = task_info(task), tuple(claims or ())
    return tuple(n for n in outputs_for("figures", info, bool(claims))
                 if FIGURES[n].shown(points, baseline or {}, claims)), \
        tuple(n for n in outputs_for("tables", info, bool(claims)) if TABLES[n].shown(points, baseline or {}, claims))


# Across every study (results/tables/all_studies-{name}.*, the overview rule).
OVERVIEW_TABLES = ("kappa_rank_error", "heads_effect", "kappa_error_correlation", "headline", "where_trade_holds")


THEORY_TABLES = ("gaussian_conditioning", "paper_comparison")
