"""Tables -> the papers' figures, as PNG and PDF. Every point is the mean over seeds with a
Student-t 95% interval (kappa: in log space, i.e. a geometric mean with its interval)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .aggregate import ci95
from .config import STUDY_FIGURES
from .io import atomic_path

KAPPA_NOTE = ("kappa on a log scale. At timm's initialisation attention is near-uniform, so the head-output "
              "matrix is nearly rank one and kappa is orders of magnitude above the Gaussian prediction; "
              "only the trend with heads is comparable to Theorem 3.2.")


def _plt():
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


def _explode_protocols(summary: pd.DataFrame) -> pd.DataFrame:
    frame = summary.assign(protocol=summary["protocols"].fillna("").str.split(";")).explode("protocol")
    return frame[frame["protocol"] != ""]


def _agg(frame: pd.DataFrame, keys: list[str], value: str, log: bool = False) -> pd.DataFrame:
    rows = []
    for key, g in frame.groupby(keys, sort=True):
        vals = g[value].to_numpy(float)
        vals = vals[np.isfinite(vals)]
        if log:
            vals = np.log10(vals[vals > 0])
        mean, lo, hi, n = ci95(vals)
        if log:
            mean, lo, hi = (10**x if not math.isnan(x) else x for x in (mean, lo, hi))
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({"mean": mean, "lo": lo, "hi": hi, "n": n, "params": g["params_total"].iloc[0]
                    if "params_total" in g else None, "diverged": int((g.get("status", "ok") != "ok").sum())})
        rows.append(row)
    return pd.DataFrame(rows)


def _errorbars(ax, x, agg: pd.DataFrame, color, label, linestyle="-", marker="o"):
    lo = (agg["mean"] - agg["lo"]).fillna(0).clip(lower=0)
    hi = (agg["hi"] - agg["mean"]).fillna(0).clip(lower=0)
    ax.errorbar(x, agg["mean"], yerr=[lo, hi], color=color, label=label, linestyle=linestyle, marker=marker,
                capsize=3, markersize=5, linewidth=1.6)
    dv = agg[agg["diverged"] > 0]
    if len(dv):
        ax.scatter(dv[x.name] if hasattr(x, "name") else dv.index, dv["mean"], marker="x", s=80, color="red",
                   zorder=5, label="diverged run(s)")


def _mlp_label(ratio: float) -> str:
    return f"MLP ratio {ratio:g}"


def _log_y(ax):
    """Log y axis with plain-number labels, also when it spans less than a decade."""
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))


def _heads_axis(ax, heads):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(heads)))
    ax.set_xticklabels([str(h) for h in sorted(set(heads))])
    ax.minorticks_off()


def _fmt_params(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _grid(plt, nrows: int, ncols: int, width=5.0, height=3.8):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def _heads_panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per (protocol, MLP ratio) that sweeps heads (at least two head counts);
    every combination if none does."""
    groups = list(frame.groupby(["protocol", "mlp_ratio"], sort=True))
    sweeping = [(key, g) for key, g in groups if g["heads"].nunique() >= 2] or groups
    several_ratios = len({ratio for (_, ratio), _ in sweeping}) > 1
    return [(proto + (f", {_mlp_label(ratio)}" if several_ratios else ""), g) for (proto, ratio), g in sweeping]


def _panel_axes(plt, n: int, width=5.2, height=4.0):
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = _grid(plt, nrows, ncols, width, height)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _heads_figure(summary: pd.DataFrame):
    """Figure, (axis, title, panel frame) triples and a colour per depth for a vs-heads figure."""
    plt, sns = _plt()
    frame = _explode_protocols(summary)
    panels = _heads_panels(frame)
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(depths, sns.color_palette("viridis", len(depths))))
    fig, axes = _panel_axes(plt, len(panels))
    return fig, [(ax, title, sub) for ax, (title, sub) in zip(axes, panels)], depths, palette


def kappa_vs_heads(summary: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """P1 Fig. 2: kappa of the head-output concat vs heads, per protocol; init dashed, trained solid."""
    from matplotlib.lines import Line2D

    fig, panels, depths, palette = _heads_figure(summary)
    styles = {"init": "--", "final": "-"}
    for ax, title, sub in panels:
        for depth in depths:
            for ckpt, ls in styles.items():
                col = f"kappa_{ckpt}_gmean"
                if col not in sub:
                    continue
                agg = _agg(sub[sub["depth"] == depth].assign(kappa=sub[col]), ["heads"], "kappa", log=True)
                if len(agg):
                    _errorbars(ax, agg["heads"], agg, palette[depth], None, ls)
        _log_y(ax)
        _heads_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel("kappa (geometric mean over layers)")
        ax.set_title(title)
        handles = [Line2D([], [], color=palette[d], marker="o", label=f"depth {d}") for d in depths
                   if (sub["depth"] == d).any()]
        handles += [Line2D([], [], color="grey", linestyle=ls, label="at init" if c == "init" else "trained")
                    for c, ls in styles.items()]
        ax.legend(handles=handles, fontsize=8)
    fig.suptitle(f"{study}: condition number of the concatenated head outputs vs heads")
    fig.text(0.01, -0.01, KAPPA_NOTE, fontsize=8, wrap=True, ha="left", va="top")
    fig.tight_layout()
    return save(fig, prefix)


def metric_vs_heads(summary: pd.DataFrame, prefix: str | Path, study: str, metric: str = "eval_acc") -> list[Path]:
    """P1 Fig. 3: accuracy vs heads at each depth, every point annotated with its parameter count."""
    fig, panels, depths, palette = _heads_figure(summary)
    for ax, title, sub in panels:
        for depth in depths:
            agg = _agg(sub[sub["depth"] == depth], ["heads"], metric)
            if not len(agg):
                continue
            _errorbars(ax, agg["heads"], agg, palette[depth], f"depth {depth}")
            for _, r in agg.iterrows():
                ax.annotate(_fmt_params(r["params"]), (r["heads"], r["mean"]), textcoords="offset points",
                            xytext=(5, -12 if depth == depths[0] else 6), fontsize=7, color=palette[depth])
        _heads_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {metric.replace('_', ' ')} vs heads per depth "
                 f"(labels: parameters; mean and 95% CI over seeds)")
    fig.tight_layout()
    return save(fig, prefix)


def metric_vs_mlp(summary: pd.DataFrame, prefix: str | Path, study: str, metric: str = "eval_acc") -> list[Path]:
    """P1 Fig. 4: accuracy vs MLP width, one line per (depth, heads) that sweeps the MLP width."""
    plt, sns = _plt()
    frame = _explode_protocols(summary)
    panels = []
    for proto, sub in frame.groupby("protocol", sort=True):
        lines = [(key, g) for key, g in sub.groupby(["depth", "heads"]) if g["mlp_hidden"].nunique() >= 2]
        if lines:
            panels.append((proto, lines))
    fig, axes = _panel_axes(plt, max(len(panels), 1))
    if not panels:
        axes[0].text(0.5, 0.5, "no (depth, heads) point of this study varies the MLP width",
                     ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
    for ax, (proto, lines) in zip(axes, panels):
        colors = sns.color_palette("tab10", len(lines))
        widths = set()
        for color, ((depth, heads), g) in zip(colors, lines):
            agg = _agg(g, ["mlp_hidden"], metric)
            widths |= set(agg["mlp_hidden"])
            _errorbars(ax, agg["mlp_hidden"], agg, color, f"depth {depth}, {heads} heads")
            for _, r in agg.iterrows():
                ax.annotate(_fmt_params(r["params"]), (r["mlp_hidden"], r["mean"]), textcoords="offset points",
                            xytext=(5, 6), fontsize=7, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(widths))
        ax.set_xticklabels([str(int(w)) for w in sorted(widths)])
        ax.minorticks_off()
        ax.set_xlabel("MLP hidden width")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(proto)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {metric.replace('_', ' ')} vs MLP width (labels: parameters; mean and 95% CI over seeds)")
    fig.tight_layout()
    return save(fig, prefix)


def theory_curves(theory: pd.DataFrame, prefix: str | Path) -> list[Path]:
    """Theorem 3.2: Monte Carlo kappa of Gaussian head blocks vs heads, against the closed form."""
    plt, sns = _plt()
    from matplotlib.lines import Line2D

    fig, axes = _grid(plt, 1, 2)
    for ax, proto, fixed, title in ((axes[0][0], "fixed_head_dim", "head_dim", "head dim d fixed, D = h*d"),
                                    (axes[0][1], "fixed_width", "width", "width D fixed, d = D/h (control)")):
        sub = theory[(theory["protocol"] == proto) & (theory["width"] > theory["tokens"])]
        groups = sub.groupby(["tokens", fixed])
        colors = sns.color_palette("tab10", max(groups.ngroups, 1))
        for color, ((n, f), g) in zip(colors, groups):
            g = g.sort_values("heads")
            ax.errorbar(g["heads"], g["kappa_mean"], yerr=g["kappa_std"], color=color, marker="o", capsize=3,
                        linestyle="none", label=f"N={n}, {'d' if fixed == 'head_dim' else 'D'}={f}: Monte Carlo")
            ax.plot(g["heads"], g["kappa_formula"], color=color, linestyle="--")
        _log_y(ax)
        _heads_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel("kappa of N x D Gaussian block")
        ax.set_title(title)
        handles, _ = ax.get_legend_handles_labels()
        handles.append(Line2D([], [], color="grey", linestyle="--", label="closed form (√D+√N)/(√D−√N)"))
        ax.legend(handles=handles, fontsize=7)
    fig.suptitle("Theorem 3.2: conditioning of concatenated Gaussian heads (mean ± sd over draws; "
                 "only D > N, the theorem's regime)")
    fig.tight_layout()
    return save(fig, prefix)



def write_study_figures(summary_csv: str, study: str, fig_dir: str) -> list[Path]:
    """results/figures/{study}-{kappa_vs_heads,accuracy_vs_heads,accuracy_vs_mlp}.{png,pdf}"""
    summary = pd.read_csv(summary_csv)
    out = Path(fig_dir)
    makers = dict(zip(STUDY_FIGURES, (kappa_vs_heads, metric_vs_heads, metric_vs_mlp)))
    return [p for name, make in makers.items() for p in make(summary, out / f"{study}-{name}", study)]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")
