"""What every figure shares: the plotting style, saving (PNG and PDF, atomically), readable log
axes, the marks for singular (off-scale) points, and the caption a figure's (or a table's) function
carries."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..io import atomic_path


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
