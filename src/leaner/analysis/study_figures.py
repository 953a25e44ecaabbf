"""What the figures rules write: a study's figures (its task's, as far as its grid gives them
something to show) and the theory figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..outputs import grid_points, study_outputs
from ..tasks import task_info
from .curves import read_histories, training_curves
from .figures import kappa_through_training, kappa_vs_heads, metric_vs_heads, metric_vs_mlp, pareto, theory_curves
from .figures_p2 import kappa_vs_rank, mse_vs_rank, perfect_angle


def write_study_figures(summary_csv: str, study: str, fig_dir: str, kappa_csv: str | None = None,
                        names: list[str] | None = None, histories: list[str] | None = None,
                        claims: list[dict] | None = None) -> list[Path]:
    """results/figures/{study}-{name}.{png,pdf} for each of `names`; by default the task's
    figures (the task catalogue's) that the study's grid gives something to show (outputs.study_outputs).
    `histories`: every variant's history.csv, for the training curves; `claims`: the study's
    declared claims (plan), for the Pareto view."""
    summary = pd.read_csv(summary_csv)
    task = summary["task"].iloc[0]
    if names is None:
        names = study_outputs(task, grid_points(summary.to_dict("records")), claims=bool(claims))[0]
    kappa = pd.read_csv(kappa_csv) if kappa_csv else pd.DataFrame()
    makers = {
        "kappa_through_training": lambda s, p, n: kappa_through_training(kappa, p, n),
        "training_curves": lambda s, p, n: training_curves(read_histories(histories or []), p, n, task),
        "kappa_vs_heads": kappa_vs_heads, "accuracy_vs_heads": metric_vs_heads, "accuracy_vs_mlp": metric_vs_mlp,
        "loss_vs_heads": lambda s, p, n: metric_vs_heads(s, p, n, "eval_loss"),
        "loss_vs_mlp": lambda s, p, n: metric_vs_mlp(s, p, n, "eval_loss"),
        "glue_vs_heads": lambda s, p, n: metric_vs_heads(s, p, n, "glue_avg"),
        "glue_vs_mlp": lambda s, p, n: metric_vs_mlp(s, p, n, "glue_avg"),
        "mse_vs_rank": lambda s, p, n: mse_vs_rank(s, p, n, "modules"),
        "mse_vs_rank_by_tokens": lambda s, p, n: mse_vs_rank(s, p, n, "tokens", log=False),
        "mse_vs_rank_by_dim": lambda s, p, n: mse_vs_rank(s, p, n, "dim"),
        "mse_vs_rank_by_posn": lambda s, p, n: mse_vs_rank(s, p, n, "posn"),
        "perfect_angle": perfect_angle, "kappa_vs_rank": kappa_vs_rank,
        "pareto": lambda s, p, n: pareto(s, p, n, claims or []),
    }
    out = Path(fig_dir)
    known = task_info(task).figures + (("pareto",) if claims else ())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no figure {', '.join(unknown)} for task {task} (allowed: {', '.join(known)})")
    return [p for name in names for p in makers[name](summary, out / f"{study}-{name}", study)]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")
