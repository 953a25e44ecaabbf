"""What the figures rules write: a study's figures (the names its plan gives, outputs.study_outputs)
and the theory figure. Each figure of the catalogue (outputs.FIGURES) names its function here:
(StudyData, path prefix) -> the files written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..entry import resolve
from ..outputs import CLAIMS_OUTPUTS, FIGURES
from ..tasks import task_info
from . import curves, figures, figures_p2
from .study_data import StudyData


def write_study_figures(summary_csv: str, study: str, fig_dir: str, names: list[str], kappa_csv: str | None = None,
                        histories: list[str] | None = None, claims: list[dict] | None = None) -> list[Path]:
    """results/figures/{study}-{name}.{png,pdf} for each of `names` (the plan's: plan.Study.outputs).
    `histories`: every variant's history.csv, for the training curves; `claims`: the study's
    declared claims (plan), for the Pareto view."""
    data = StudyData(study, pd.read_csv(summary_csv), claims=claims or [], histories=histories or [],
                     kappa=pd.read_csv(kappa_csv) if kappa_csv else pd.DataFrame())
    known = task_info(data.task).figures + (CLAIMS_OUTPUTS[:1] if claims else ())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no figure {', '.join(unknown)} for task {data.task} (allowed: {', '.join(known)})")
    return [p for name in names for p in resolve(FIGURES[name].make)(data, Path(fig_dir) / f"{study}-{name}")]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return figures.theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")


# The catalogue's figures (outputs.FIGURES).

def _of_summary(draw, **options):
    """A figure drawn from the study's summary: draw(summary, prefix, study, **options)."""
    return lambda d, prefix: draw(d.summary, prefix, d.study, **options)


kappa_vs_heads = _of_summary(figures.kappa_vs_heads)
accuracy_vs_heads = _of_summary(figures.metric_vs_heads)
loss_vs_heads = _of_summary(figures.metric_vs_heads, metric="eval_loss")
glue_vs_heads = _of_summary(figures.metric_vs_heads, metric="glue_avg")
accuracy_vs_mlp = _of_summary(figures.metric_vs_mlp)
loss_vs_mlp = _of_summary(figures.metric_vs_mlp, metric="eval_loss")
glue_vs_mlp = _of_summary(figures.metric_vs_mlp, metric="glue_avg")
mse_vs_rank = _of_summary(figures_p2.mse_vs_rank, hue="modules")
mse_vs_rank_by_tokens = _of_summary(figures_p2.mse_vs_rank, hue="tokens", log=False)
mse_vs_rank_by_dim = _of_summary(figures_p2.mse_vs_rank, hue="dim")
mse_vs_rank_by_posn = _of_summary(figures_p2.mse_vs_rank, hue="posn")
perfect_angle = _of_summary(figures_p2.perfect_angle)
kappa_vs_rank = _of_summary(figures_p2.kappa_vs_rank)


def kappa_through_training(d: StudyData, prefix: Path) -> list[Path]:
    return figures.kappa_through_training(d.kappa, prefix, d.study)


def training_curves(d: StudyData, prefix: Path) -> list[Path]:
    return curves.training_curves(curves.read_histories(d.histories), prefix, d.study, d.task)


def pareto(d: StudyData, prefix: Path) -> list[Path]:
    return figures.pareto(d.summary, prefix, d.study, d.claims)
