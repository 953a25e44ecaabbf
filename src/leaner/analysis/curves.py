"""Training curves: every variant's history.csv of a study, one line per configuration (its seeds
pooled: the mean with a 95% band where there are several), loss and the study's tracked metric
against the step. Bands stay inside what the quantity can take: a loss's is taken on a log scale,
an accuracy's on the logit scale. Colour says the heads, line style the depth."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ..tasks import task_info
from .plots import log_y, pyplot, save
from .stats import SCALES, onto_scale, scale_of


def config_id(variant: str) -> str:
    """A variant's configuration: its id without the seed (L2-H8-D64-hd8-mlp128-s3 -> L2-H8-D64-hd8-mlp128)."""
    return variant.rpartition("-s")[0]


def read_histories(paths: list[str]) -> pd.DataFrame:
    """The history rows of every variant (folder name = variant id), with its configuration (the
    id without its seed) and seed."""
    frames = []
    for path in paths:
        variant = Path(path).parent.name
        frames.append(pd.read_csv(path).assign(variant=variant, config=config_id(variant),
                                               seed=int(variant.rpartition("-s")[2])))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def band(frame: pd.DataFrame, column: str, scale: str = "linear") -> pd.DataFrame:
    """Per (config, step): the mean over seeds and its 95% t-interval, both taken on `scale` (log:
    a geometric mean; logit: the interval stays in (0, 1)) and mapped back."""
    values = frame[["config", "step", column]].dropna()
    if scale == "log":
        values = values[values[column] > 0]
    values = values.assign(**{column: onto_scale(values[column], scale)})
    agg = values.groupby(["config", "step"])[column].agg(["mean", "std", "count"]).reset_index()
    half = stats.t.ppf(0.975, np.maximum(agg["count"] - 1, 1)) * agg["std"] / np.sqrt(agg["count"])
    agg["lo"], agg["hi"] = agg["mean"] - half.where(agg["count"] > 1), agg["mean"] + half.where(agg["count"] > 1)
    agg[["mean", "lo", "hi"]] = SCALES[scale][1](agg[["mean", "lo", "hi"]])
    return agg


LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def line_styles(configs: list[str]) -> dict[str, dict]:
    """Per configuration id (L{depth}-H{heads}-...): its colour from the number of heads (one
    sequential palette, few heads light, many dark), its line style from the depth, and a marker
    where several configurations share heads and depth (widths, modules)."""
    from matplotlib import colormaps

    def axis(config: str, letter: str) -> int:
        found = re.search(rf"(?:^|-){letter}(\d+)", config)
        return int(found.group(1)) if found else 0

    heads = sorted({axis(c, "H") for c in configs})
    depths = sorted({axis(c, "L") for c in configs})
    cmap = colormaps["viridis"]
    colour = {h: cmap(0.85 - 0.75 * i / max(1, len(heads) - 1)) for i, h in enumerate(heads)}
    keys = {c: (axis(c, "L"), axis(c, "H")) for c in configs}
    out, nth = {}, {}
    for config, (depth, head) in keys.items():
        shared = sum(k == (depth, head) for k in keys.values()) > 1
        nth[depth, head] = nth.get((depth, head), -1) + 1
        out[config] = {"color": colour[head], "linestyle": LINESTYLES[depths.index(depth) % len(LINESTYLES)],
                       "marker": MARKERS[nth[depth, head] % len(MARKERS)] if shared else None}
    return out


def panels_for(history: pd.DataFrame, task: str) -> list[str]:
    """The training loss, then the study's tracked metric (its evaluation loss where that is the
    training loss itself), each only where the histories hold it."""
    metric = task_info(task).train_metric[0]
    second = "eval_loss" if metric == "train_loss" else metric
    return [c for c in dict.fromkeys(["train_loss", second]) if c in history and history[c].notna().any()]


LABELS = {"train_loss": "training loss (epoch mean)", "eval_loss": "evaluation loss", "eval_acc": "evaluation accuracy"}


def training_curves(history: pd.DataFrame, prefix: str | Path, study: str, task: str) -> list[Path]:
    plt, _ = pyplot()
    columns = panels_for(history, task) if len(history) else []
    fig, axes = plt.subplots(1, max(1, len(columns)), figsize=(6.2 * max(1, len(columns)) + 2.2, 4.4), squeeze=False)
    axes = axes[0]
    if not columns:
        axes[0].text(0.5, 0.5, "no training history", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return save(fig, prefix)
    configs = sorted(history["config"].unique())
    styles = line_styles(configs)
    several = history.groupby("config")["seed"].nunique().max() > 1
    for ax, column in zip(axes, columns):
        log = scale_of(column) == "log"
        agg = band(history, column, scale_of(column))
        for config in configs:
            g = agg[agg["config"] == config]
            if not len(g):
                continue
            seeds = history.loc[history["config"] == config, "seed"].nunique()
            style = styles[config]
            ax.plot(g["step"], g["mean"], color=style["color"], linestyle=style["linestyle"], linewidth=1.4,
                    marker=style["marker"], markevery=max(1, len(g) // 8), markersize=4,
                    label=f"{config} ({seeds} seed{'s' * (seeds > 1)})")
            if g["lo"].notna().any():
                ax.fill_between(g["step"], g["lo"], g["hi"], color=style["color"], alpha=0.12, linewidth=0)
        if log:
            log_y(ax)
        ax.set_xlabel("training step")
        ax.set_ylabel(LABELS.get(column, column.replace("_", " ")))
        ax.grid(alpha=0.3)
    what = "mean over seeds, 95% band" if several else "one seed each: no band"
    fig.suptitle(f"{study}: training curves, one line per configuration ({what}); colour: heads, line: depth")
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()  # one legend for the panels, which share their lines
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(axes[-1].get_position().x1 + 0.01, 0.9),
               ncol=1 if len(configs) <= 16 else 2, frameon=False)
    return save(fig, prefix)
