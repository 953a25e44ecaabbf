"""What every figure shares: the plotting style, saving (PNG and PDF, atomically), readable log
axes, the marks for singular (off-scale) points, the caption a figure's (or a table's) function
carries, error bars, the seeds note, panel layouts and the metrics' names.

Every point of a metric is what the tables report: the arithmetic mean over seeds with its
Student-t 95% interval cut to the metric's range (stats.ci95_cut: an accuracy in [0, 1], a loss at
least 0); a kappa's is the geometric mean with its interval taken on the log scale and cut at 1, as
the tables' geometric means (`seed_agg`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import atomic_path
from .stats import KAPPA_FLOOR, ci95_cut, ci95_on


def captioned(name: str, text: str) -> Callable:
    """Decorator: `text` is the report's caption of output `name`, which the decorated function
    draws or makes (reStructuredText; ``{{ snakemake.wildcards.study }}`` is the study's name, as
    in Snakemake's captions). Stacked where one function makes several outputs; the function keeps
    them in its `captions`."""

    def add(fn: Callable) -> Callable:
        fn.captions = {name: text, **getattr(fn, "captions", {})}
        return fn

    return add


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    return plt, sns


def save(fig, prefix: str | Path) -> list[Path]:
    prefix = Path(prefix)
    paths = []
    for ext in ("png", "pdf"):
        path = prefix.with_suffix(f".{ext}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
        paths.append(path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


SINGULAR_NOTE = ("Open triangles on the top edge: singular (sigma_min within float64 rounding of zero, "
                 "kappa above 1/(eps*max(N, C))); they are ranks above every drawn value, not magnitudes.")


def offscale(ax, xs, color, axis: str = "y") -> bool:
    """Open triangles on the top (or right) edge of the axes at `xs`: points whose kappa is +inf."""
    from matplotlib.transforms import blended_transform_factory

    xs = list(xs)
    if not xs:
        return False
    if axis == "y":
        ax.scatter(xs, [0.97] * len(xs), transform=blended_transform_factory(ax.transData, ax.transAxes),
                   marker="^", s=60, facecolors="none", edgecolors=[color], linewidths=1.5, zorder=6, clip_on=False)
    else:
        ax.scatter([0.97] * len(xs), xs, transform=blended_transform_factory(ax.transAxes, ax.transData),
                   marker=">", s=60, facecolors="none", edgecolors=[color], linewidths=1.5, zorder=6, clip_on=False)
    return True


def singular_handle():
    from matplotlib.lines import Line2D

    return Line2D([], [], color="grey", marker="^", markerfacecolor="none", linestyle="none",
                  label="singular (off scale)")


WIDE_DECADES = 2.0  # a log axis spanning more than this many decades is labelled at powers of ten only


def decades(axis) -> tuple[float, float, float]:
    lo, hi = sorted(axis.get_view_interval())
    lo = lo if lo > 0 else hi / 10
    return lo, hi, math.log10(hi / lo) if hi > lo > 0 else 0.0


def _sci(value: float) -> str:
    """2e+06 -> 2×10⁶ and 1e+06 -> 10⁶, as math text."""
    exp = math.floor(math.log10(abs(value)) + 1e-9)
    mant = round(value / 10**exp, 3)
    power = rf"10^{{{exp}}}"
    return rf"$\mathdefault{{{power}}}$" if mant == 1 else rf"$\mathdefault{{{mant:g}\times{power}}}$"


def _plain(value: float) -> str:
    return np.format_float_positional(float(f"{value:.4g}"), trim="-")


def log_ticks(lo: float, hi: float) -> np.ndarray:
    """Tick values of a log axis over [lo, hi]: over more than WIDE_DECADES, powers of ten; else
    1-2-5 steps, or evenly spaced round numbers where those leave fewer than three ticks."""
    from matplotlib import ticker

    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if last - first > 0 and math.log10(hi / lo) > WIDE_DECADES:
        stride = math.ceil((last - first + 1) / 8)  # at most 8 labels
        return np.array([10.0**e for e in range(first - first % stride, last + 1, stride)])
    ticks = np.array([m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5)])
    if ((ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))).sum() >= 3:
        return ticks
    ticks = ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    return ticks[ticks > 0]


def log_label(value: float, lo: float, hi: float, shown) -> str:
    """One style per axis: 10^k over more than WIDE_DECADES; below, plain numbers, or a×10^k for
    every label when one of them would need an exponent."""
    if value <= 0:
        return ""
    if math.log10(hi / lo) <= WIDE_DECADES and all(1e-3 <= t < 1e5 for t in shown):
        return _plain(value)
    return _sci(value)


def readable_log(axis):
    """Readable labels on a log axis (ax.xaxis or ax.yaxis), chosen when the figure is drawn, so
    from its final limits: log_ticks, log_label; minor ticks unlabelled."""
    from matplotlib import ticker

    class Locator(ticker.Locator):
        def __call__(self):
            return self.tick_values(*decades(self.axis)[:2])

        def tick_values(self, vmin, vmax):
            return log_ticks(min(vmin, vmax), max(vmin, vmax))

    class Formatter(ticker.Formatter):
        ticks: tuple = ()

        def set_locs(self, locs):
            self.ticks = tuple(locs)

        def __call__(self, x, pos=None):
            lo, hi, _ = decades(self.axis)
            shown = [t for t in self.ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)] or [x]
            return log_label(x, lo, hi, shown)

    axis.set_major_locator(Locator())
    axis.set_major_formatter(Formatter())
    axis.set_minor_locator(ticker.LogLocator(base=10, subs=tuple(range(2, 10)), numticks=40))
    axis.set_minor_formatter(ticker.NullFormatter())


def log2_axis(ax, values, powers: bool = False, fractions: bool = False) -> None:
    """Log-2 x axis ticked at each value drawn (heads, ranks, widths), or (powers) at the powers of
    two the values span, at most 8 labels, those below 1 written 1/2^k when `fractions`."""
    ax.set_xscale("log", base=2)
    drawn = sorted({float(x) for x in values if x > 0})
    if not drawn:
        return
    if powers:
        lo, hi = math.floor(math.log2(drawn[0])), math.ceil(math.log2(drawn[-1]))
        exps = range(lo, hi + 1, math.ceil((hi - lo + 1) / 8))
        ticks = [2.0**e for e in exps]
        labels = [f"1/{2**-e}" if fractions and e < 0 else f"{2**e:g}" for e in exps]
    else:
        ticks, labels = drawn, [f"{x:g}" for x in drawn]
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels)
    ax.minorticks_off()


def log_y(ax):
    """Log y axis with readable labels: 10^k over more than two decades, plain numbers below."""
    ax.set_yscale("log")
    readable_log(ax.yaxis)


def log_x(ax):
    ax.set_xscale("log")
    readable_log(ax.xaxis)


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
