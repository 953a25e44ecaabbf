"""What the figures rules write: a study's figures (the names its plan gives, outputs.study_outputs)
and the theory figure. Each figure a study may show is defined with its record where it is drawn
(`@figure`, shown.py: figures.py, figures_p2.py, curves.py, pareto.py); importing this module loads them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..shown import FIGURE_CODE, outputs_for
from ..tasks import task_info
from . import curves, figures, figures_p2, pareto  # noqa: F401  (each defines its figures)
from .study_data import StudyData
from .summary import read_summary


def write_study_figures(summary_csv: str, study: str, fig_dir: str, names: list[str], kappa_csv: str | None = None,
                        histories: list[str] | None = None, claims: list[dict] | None = None) -> list[Path]:
    """results/figures/{study}-{name}.{png,pdf} for each of `names` (the plan's: plan.Study.outputs).
    `histories`: every variant's history.csv, for the training curves; `claims`: the study's
    declared claims (plan), for the Pareto view."""
    data = StudyData(study, read_summary(summary_csv), claims=claims or [], histories=histories or [],
                     kappa=pd.read_csv(kappa_csv) if kappa_csv else pd.DataFrame())
    known = outputs_for("figures", task_info(data.task), bool(claims))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no figure {', '.join(unknown)} for task {data.task} (allowed: {', '.join(known)})")
    return [p for name in names for p in FIGURE_CODE[name](data, Path(fig_dir) / f"{study}-{name}")]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return figures.theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")
