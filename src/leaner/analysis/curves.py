"""A study's figures through training. Training curves: every variant's history.csv, one line per
configuration (its seeds pooled: the mean with a 95% band where there are several), loss and the
study's tracked metric against the step. Bands stay inside what the quantity can take: a loss's is
taken on a log scale, an accuracy's on the logit scale. Colour says the heads, line style the
depth. And kappa through training, from the checkpoints the conditioning stage measured."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ..tasks import task_info
from .figure_parts import panel_axes, seed_agg
from .plots import captioned, log_y, offscale, pyplot, save
from .stats import SCALES, onto_scale, scale_of
from .summary import explode_protocols


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


@captioned("training_curves", (
        "**{{ snakemake.wildcards.study }}**: how every configuration trained. The training loss (the\n"
        "epoch's mean) and the metric the runs track (evaluation accuracy or loss) against the training\n"
        "step, one line per configuration (the variant id without its seed), the mean over seeds with a "
        "95%\n"
        "band (losses averaged in log space). A diverged run's curve stops at its last finite epoch. The\n"
        "numbers: each variant's ``results/{{ snakemake.wildcards.study }}/<variant>/history.csv``, "
        "written\n"
        "at every epoch while it trains; the same curves, live, in TensorBoard (``tensorboard --logdir "
        "results/``).\n"
    ))
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


@captioned("kappa_through_training", (
        "**{{ snakemake.wildcards.study }}**: does the conditioning seen at initialisation survive "
        "training?\n"
        "(P1's reviewers asked.) kappa of the concatenated head outputs at initialisation, at each step\n"
        "whose weights training kept (the study's ``conditioning.steps``: steps, or fractions of the "
        "run),\n"
        "and after training, against the fraction of training done. One line per (heads, depth), one "
        "panel\n"
        "per protocol (P1's tasks) or per number of attention modules W (P2's); mean over seeds with a "
        "95%\n"
        "band in log space. Singular points (sigma_min within float64 rounding of zero: kappa above "
        "1/(eps*max(N, C))) are open triangles on the edge of the axes, off the scale: ranks above every "
        "drawn value, not magnitudes. The numbers: ``results/{{ snakemake.wildcards.study "
        "}}/kappa_through_training.csv``.\n"
    ))
def kappa_through_training(kappa: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """Does the conditioning seen at initialisation survive training? kappa of the concatenated
    head outputs at every kept checkpoint (init, conditioning.steps, final) against the fraction
    of training done: a line per (heads, depth), mean over seeds with its 95% band (log space);
    a panel per head-scaling protocol (P1's tasks) or per number of attention modules W (P2)."""
    plt, sns = pyplot()
    frame = kappa[kappa["matrix"] == "heads_concat"] if len(kappa) else kappa
    if len(frame) and "protocols" in frame and frame["protocols"].notna().any():
        frame = explode_protocols(frame).assign(panel=lambda f: f["protocol"])
    elif len(frame):
        frame = frame.assign(panel=[f"W = {w}" for w in frame["modules"]] if "modules" in frame else study)
    panels = sorted(frame["panel"].unique()) if len(frame) else []
    fig, axes = panel_axes(plt, max(1, len(panels)))
    if not panels:
        axes[0].text(0.5, 0.5, "no conditioning rows", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return save(fig, prefix)
    heads = sorted(frame["total_heads"].unique())
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(heads, sns.color_palette("plasma", len(heads) + 1)))
    styles = dict(zip(depths, ["-", "--", ":", "-."] * len(depths)))
    dim_word = "rank" if "modules" in frame else "dim"  # P2 counts every head of the layer, each of rank d/h
    for ax, panel in zip(axes, panels):
        sub = frame[frame["panel"] == panel]
        for (h, r, depth), g in sub.groupby(["total_heads", "head_dim", "depth"], sort=True):
            agg = seed_agg(g.assign(x=g["fraction"].round(4)), ["x"], "kappa_gmean")
            ax.plot(agg["x"], agg["mean"].where(np.isfinite(agg["mean"])), color=palette[h], linestyle=styles[depth],
                    marker="o", markersize=4, label=f"{h} head{'s' if h > 1 else ''} of {dim_word} {r}, depth {depth}")
            offscale(ax, agg.loc[np.isinf(agg["mean"]), "x"], palette[h])
            if (agg["n"] > 1).any():
                ax.fill_between(agg["x"], agg["lo"].fillna(agg["mean"]), agg["hi"].fillna(agg["mean"]),
                                color=palette[h], alpha=0.15, linewidth=0)
        log_y(ax)
        ax.set_xlabel("fraction of training (0 = initialisation)")
        ax.set_ylabel("kappa (geometric mean over layers)")
        ax.set_title(str(panel))
        ax.legend(fontsize=7, ncol=2 if len(heads) * len(depths) > 6 else 1)
    per_line = frame.groupby(["panel", "total_heads", "depth"])["seed"].nunique()
    lo, hi = int(per_line.min()), int(per_line.max())
    seeds = f"{lo}" if lo == hi else f"{lo}-{hi}"
    fig.suptitle(f"{study}: kappa of the concatenated head outputs through training "
                 f"({'mean and 95% band over ' + seeds + ' seeds' if hi > 1 else 'one seed'})")
    fig.tight_layout()
    return save(fig, prefix)
