"""What the figure modules share. Every point of a metric is what the tables report: the
arithmetic mean over seeds with its Student-t 95% interval cut to the metric's range
(stats.ci95_cut: an accuracy in [0, 1], a loss at least 0); a kappa's is the geometric mean with
its interval taken on the log scale and cut at 1, as the tables' geometric means (`seed_agg`).
Also: error bars, the seeds note, panel layouts and the metrics' names."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .stats import KAPPA_FLOOR, ci95_cut, ci95_on

METRIC_NAMES = {"eval_acc": "accuracy", "eval_loss": "loss", "glue_avg": "GLUE average"}


METRIC_LABELS = {"eval_acc": "accuracy (evaluation split)", "eval_loss": "loss (evaluation split, nats/token)",
                 "glue_avg": "GLUE average score (evaluation splits)"}


def seed_agg(frame: pd.DataFrame, keys: list[str], value: str, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per key: the value's mean with its 95% interval over the rows, as the tables report it: a
    metric's arithmetic mean with its t-interval cut to the metric's range (stats.ci95_cut); a
    kappa's geometric mean with its interval on the log scale, cut at 1. A +inf value (a singular
    kappa) makes the point +inf, drawn as an off-scale marker (`offscale`); NaN is left out. Its
    `diverged` counts the diverged runs of `runs` (default: the rows) per key: its red x."""
    kappa = "kappa" in value
    runs = frame if runs is None else runs
    bad = runs[runs["status"] != "ok"].groupby(keys).size().items() if "status" in runs else ()
    diverged = {k if isinstance(k, tuple) else (k,): int(n) for k, n in bad}  # per configuration
    rows = []
    for key, g in frame.groupby(keys, sort=True):
        vals = g[value].to_numpy(float)
        vals = vals[~np.isnan(vals)]
        if np.isposinf(vals).any():
            mean, lo, hi, n = math.inf, math.nan, math.nan, len(vals)
        else:
            mean, lo, hi, n = ci95_on(vals, "log", KAPPA_FLOOR) if kappa else ci95_cut(vals, value)
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({"mean": mean, "lo": lo, "hi": hi, "n": n,
                    "params": g["params_total"].iloc[0] if "params_total" in g else None,
                    "diverged": diverged.get(key if isinstance(key, tuple) else (key,), 0)})
        rows.append(row)
    return pd.DataFrame(rows)


def errorbars(ax, x, agg: pd.DataFrame, color, label, linestyle="-", marker="o"):
    """Mean with its interval; +inf points (singular) are left to `offscale`."""
    finite = np.isfinite(agg["mean"].to_numpy(float))
    x, agg = x[finite], agg[finite]
    lo = (agg["mean"] - agg["lo"]).fillna(0).clip(lower=0)
    hi = (agg["hi"] - agg["mean"]).fillna(0).clip(lower=0)
    ax.errorbar(x, agg["mean"], yerr=[lo, hi], color=color, label=label, linestyle=linestyle, marker=marker,
                capsize=3, markersize=5, linewidth=1.6)
    dv = agg[agg["diverged"] > 0]
    if len(dv):
        ax.scatter(dv[x.name] if hasattr(x, "name") else dv.index, dv["mean"], marker="x", s=80, color="red",
                   zorder=5, label="diverged run(s)")


NOT_LEARNED_LABEL = "a run that did not learn (left out of the mean where others did)"


def split_learned(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the runs a point's mean is over, the runs that did not learn): per configuration (`keys`),
    as the tables count them, the runs that learned, or all of them where none did (the point
    then shows what it scored); every run that did not learn (`learned` False) is marked."""
    if "learned" not in frame or frame["learned"].isna().all() or not len(frame):
        return frame, frame.iloc[:0]
    failed = frame["learned"].astype("boolean") == False  # noqa: E712
    every = frame.groupby(keys)["learned"].transform(lambda s: (s.astype("boolean") == False).all())  # noqa: E712
    return frame[~failed | every.astype(bool)], frame[failed]


def mark_not_learned(ax, runs: pd.DataFrame, x: str, y: str, color, label: str = NOT_LEARNED_LABEL) -> None:
    """Each run that did not learn at its own value: a hollow marker of its line's colour."""
    if len(runs):
        ax.scatter(runs[x], runs[y], marker="o", s=110, facecolors="none", edgecolors=color, linewidths=1.3,
                   zorder=4, label=label)


def dedupe_legend(ax, **kwargs) -> None:
    """The axis's legend with each label once (a marker drawn for several lines says it once)."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    ax.legend(seen.values(), seen.keys(), **kwargs)


def spread_note(summary: pd.DataFrame) -> str:
    """Seeds per configuration: '3 seeds', or '3-10 seeds' where configurations have more."""
    axes = [c for c in ("depth", "heads", "width", "head_dim", "mlp_hidden") if c in summary]
    per = summary.groupby(axes)["seed"].nunique() if axes else pd.Series([summary["seed"].nunique()])
    lo, hi = int(per.min()), int(per.max())
    if hi <= 1:
        return "one seed: no interval"
    return f"mean and 95% CI over {lo if lo == hi else f'{lo}-{hi}'} seeds"


def panel_grid(plt, nrows: int, ncols: int, width=5.0, height=3.8):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def panel_axes(plt, n: int, width=5.2, height=4.0):
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = panel_grid(plt, nrows, ncols, width, height)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]
