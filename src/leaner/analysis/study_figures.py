"""What the figures rules write: a study's figures (the names its plan gives, outputs.study_outputs)
and the theory figure. Each figure of the catalogue (outputs.FIGURES) registers its function here, under its name
(`draws`): (StudyData, path prefix) -> the files written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..outputs import CLAIMS_OUTPUTS, FIGURES
from ..registry import Registry
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
    return [p for name in names for p in FIGURE_CODE[name](data, Path(fig_dir) / f"{study}-{name}")]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return figures.theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")


# The catalogue's figures (outputs.FIGURES), each registered under its name.
FIGURE_CODE = Registry("figure", lambda: FIGURES)
draws = FIGURE_CODE.register


def _of_summary(name: str, draw, **options) -> None:
    """Figure `name`, drawn from the study's summary: draw(summary, prefix, study, **options)."""
    draws(name)(lambda d, prefix: draw(d.summary, prefix, d.study, **options))


_of_summary("kappa_vs_heads", figures.kappa_vs_heads)
_of_summary("accuracy_vs_heads", figures.metric_vs_heads)
_of_summary("loss_vs_heads", figures.metric_vs_heads, metric="eval_loss")
_of_summary("glue_vs_heads", figures.metric_vs_heads, metric="glue_avg")
_of_summary("accuracy_vs_mlp", figures.metric_vs_mlp)
_of_summary("loss_vs_mlp", figures.metric_vs_mlp, metric="eval_loss")
_of_summary("glue_vs_mlp", figures.metric_vs_mlp, metric="glue_avg")
_of_summary("mse_vs_rank", figures_p2.mse_vs_rank, hue="modules")
_of_summary("mse_vs_rank_by_tokens", figures_p2.mse_vs_rank, hue="tokens", log=False)
_of_summary("mse_vs_rank_by_dim", figures_p2.mse_vs_rank, hue="dim")
_of_summary("mse_vs_rank_by_posn", figures_p2.mse_vs_rank, hue="posn")
_of_summary("perfect_angle", figures_p2.perfect_angle)
_of_summary("kappa_vs_rank", figures_p2.kappa_vs_rank)


@draws("kappa_through_training")
def kappa_through_training(d: StudyData, prefix: Path) -> list[Path]:
    return figures.kappa_through_training(d.kappa, prefix, d.study)


@draws("training_curves")
def training_curves(d: StudyData, prefix: Path) -> list[Path]:
    return curves.training_curves(curves.read_histories(d.histories), prefix, d.study, d.task)


@draws("pareto")
def pareto(d: StudyData, prefix: Path) -> list[Path]:
    return figures.pareto(d.summary, prefix, d.study, d.claims)
