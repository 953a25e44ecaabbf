"""Training curves: every variant's history.csv of a study, one line per configuration (its seeds
pooled: the mean with a 95% band), loss and the study's tracked metric against the step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ..tasks import task_info
from .plots import log_y, pyplot, save


def read_histories(paths: list[str]) -> pd.DataFrame:
    """The history rows of every variant (folder name = variant id), with its configuration (the
    id without its seed) and seed."""
    frames = []
    for path in paths:
        variant = Path(path).parent.name
        config, _, seed = variant.rpartition("-s")
        frames.append(pd.read_csv(path).assign(variant=variant, config=config, seed=int(seed)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def band(frame: pd.DataFrame, column: str, log: bool) -> pd.DataFrame:
    """Per (config, step): mean over seeds and its 95% t-interval (in log space when `log`)."""
    values = frame[["config", "step", column]].dropna()
    if log:
        values = values[values[column] > 0].assign(**{column: lambda f: np.log10(f[column])})
    agg = values.groupby(["config", "step"])[column].agg(["mean", "std", "count"]).reset_index()
    half = stats.t.ppf(0.975, np.maximum(agg["count"] - 1, 1)) * agg["std"] / np.sqrt(agg["count"])
    agg["lo"], agg["hi"] = agg["mean"] - half.where(agg["count"] > 1), agg["mean"] + half.where(agg["count"] > 1)
    if log:
        agg[["mean", "lo", "hi"]] = 10 ** agg[["mean", "lo", "hi"]]
    return agg


def panels_for(history: pd.DataFrame, task: str) -> list[str]:
    """The training loss, then the study's tracked metric (its evaluation loss where that is the
    training loss itself), each only where the histories hold it."""
    metric = task_info(task).train_metric[0]
    second = "eval_loss" if metric == "train_loss" else metric
    return [c for c in dict.fromkeys(["train_loss", second]) if c in history and history[c].notna().any()]


LABELS = {"train_loss": "training loss (epoch mean)", "eval_loss": "evaluation loss", "eval_acc": "evaluation accuracy"}


def training_curves(history: pd.DataFrame, prefix: str | Path, study: str, task: str) -> list[Path]:
    plt, sns = pyplot()
    columns = panels_for(history, task) if len(history) else []
    fig, axes = plt.subplots(1, max(1, len(columns)), figsize=(6.2 * max(1, len(columns)) + 2.2, 4.4), squeeze=False)
    axes = axes[0]
    if not columns:
        axes[0].text(0.5, 0.5, "no training history", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return save(fig, prefix)
    configs = sorted(history["config"].unique())
    palette = dict(zip(configs, sns.color_palette("viridis" if len(configs) > 10 else "tab10", len(configs))))
    for ax, column in zip(axes, columns):
        log = "loss" in column
        agg = band(history, column, log)
        for config in configs:
            g = agg[agg["config"] == config]
            if not len(g):
                continue
            seeds = history.loc[history["config"] == config, "seed"].nunique()
            ax.plot(g["step"], g["mean"], color=palette[config], linewidth=1.4, marker="o" if len(g) < 12 else None,
                    markersize=3, label=f"{config} ({seeds} seed{'s' * (seeds > 1)})")
            if g["lo"].notna().any():
                ax.fill_between(g["step"], g["lo"], g["hi"], color=palette[config], alpha=0.15, linewidth=0)
        if log:
            log_y(ax)
        ax.set_xlabel("training step")
        ax.set_ylabel(LABELS.get(column, column.replace("_", " ")))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{study}: training curves, one line per configuration (mean over seeds, 95% band)")
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()  # one legend for the panels, which share their lines
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(axes[-1].get_position().x1 + 0.01, 0.9),
               ncol=1 if len(configs) <= 16 else 2, frameon=False)
    return save(fig, prefix)
