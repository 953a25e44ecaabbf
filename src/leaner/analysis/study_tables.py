"""What the tables rules write: a study's tables (its task's, as far as its grid gives them
something to show) and the theory tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..outputs import ACCEPTANCE_CHECKS, grid_points, study_outputs
from ..tasks import task_info
from .papers import paper_comparison, theorem_comparison
from .table_render import write_table
from .tables import acceptance_checks, by_config, claims_table, glue_tasks_table, lean_vs_baseline


def write_study_tables(summary_csv: str, study: str, baseline: dict, table_dir: str,
                       checks=None, names: list[str] | None = None,
                       claims: list[dict] | None = None) -> list[Path]:
    """results/tables/{study}-{name}.{csv,md,tex,html} for each of `names`; by default the task's
    tables (the task catalogue's) that the study's grid gives something to show (outputs.study_outputs).
    `checks`: P2's acceptance checks to run, as the plan resolved them (None: every one, as a study
    that names none)."""
    summary = pd.read_csv(summary_csv)
    task = summary["task"].iloc[0]
    if names is None:
        names = study_outputs(task, grid_points(summary.to_dict("records")), baseline, bool(claims))[1]
    known = task_info(task).tables + (("claims",) if claims else ())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no table {', '.join(unknown)} for task {task} (allowed: {', '.join(known)})")
    metric, mode = task_info(task).metric
    checks = ACCEPTANCE_CHECKS if checks is None else checks
    makers = {
        "by_config": lambda: (by_config(summary), f"{study}: {metric} per configuration over seeds "
                                                  f"(mean, 95% interval, min, max, n)"),
        "lean_vs_baseline": lambda: (lean_vs_baseline(summary, baseline, metric, mode),
                                     f"{study}: shallower variants against the deepest baseline "
                                     f"(difference with Welch 95% interval; parameter reduction)"),
        "glue_tasks": lambda: (glue_tasks_table(summary),
                               f"{study}: GLUE score per task after fine-tuning, and the average (mean over seeds, "
                               f"with the average's 95% interval)"),
        "acceptance": lambda: (acceptance_checks(summary, checks),
                               f"{study}: P2's acceptance checks (min over seeds)"),
        "paper_comparison": lambda: (paper_comparison(summary, baseline, checks),
                                     f"{study}: the paper's reported numbers beside ours, with the setting of each"),
        "claims": lambda: (claims_table(summary, claims),
                           f"{study}: the claims declared in the config, baseline first; difference positive where "
                           f"the lean model is better, with its one-sided 95% Welch bounds; superior: lower bound "
                           f"above 0; equivalent: both bounds within the margin; non-inferior: lower bound above "
                           f"-margin; inferior: upper bound below -margin; else inconclusive"),
    }
    paths = []
    for name in names:
        frame, caption = makers[name]()
        paths += write_table(frame, Path(table_dir) / f"{study}-{name}", caption)
    return paths


def write_theory_table(theory_csv: str, table_dir: str) -> list[Path]:
    frame = pd.read_csv(theory_csv)
    frame["mc_over_formula"] = frame["kappa_mean"] / frame["kappa_formula"]
    return write_table(frame, Path(table_dir) / "theory-gaussian_conditioning",
                       "Theorem 3.2: Monte Carlo kappa of N x (h*d) Gaussian blocks against the closed form") + \
        write_table(theorem_comparison(frame), Path(table_dir) / "theory-paper_comparison",
                    "Theorem 3.2: our Monte Carlo against papers.md 1.1 (N = 197, d = 64); pass within 10%")
