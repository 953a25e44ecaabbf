"""Summaries -> P1's figures of a study (kappa and a metric against heads or the MLP ratio; kappa
through training is in curves.py, the Pareto view in pareto.py) and the theory check's figure, as
PNG and PDF. Every point is what the tables report (figure_parts.seed_agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .figure_parts import (
    METRIC_LABELS,
    METRIC_NAMES,
    dedupe_legend,
    errorbars,
    mark_not_learned,
    panel_axes,
    panel_grid,
    seed_agg,
    split_learned,
    spread_note,
)
from .plots import SINGULAR_NOTE, captioned, log2_axis, log_y, offscale, pyplot, save, singular_handle
from .summary import explode_protocols

KAPPA_NOTE = ("kappa on a log scale. At timm's initialisation attention is near-uniform, so the head-output "
              "matrix is nearly rank one and kappa is orders of magnitude above the Gaussian prediction; "
              "only the trend with heads is comparable to Theorem 3.2.")


def _vs_heads_caption(what: str) -> str:
    return (f"**{{{{ snakemake.wildcards.study }}}}**: P1's Fig. 3. The {what} against the number of heads, "
            "one line per\n"
            "depth and one panel per head-scaling protocol (and MLP ratio); each point is labelled with its\n"
            "parameter count, computed from the built model. Mean over seeds with a Student-t 95% interval; a\n"
            "red cross marks a configuration with a diverged run. The question: does a shallower model with\n"
            "more heads match a deeper one at fewer parameters?\n")


def _vs_mlp_caption(what: str) -> str:
    return (f"**{{{{ snakemake.wildcards.study }}}}**: P1's Fig. 4, the confound. Half of P1's lean rows also shrink\n"
            f"the MLP; here the {what} against the MLP hidden width at fixed depth and heads separates the two\n"
            "effects. Labels: parameter counts. Mean over seeds with a 95% interval.\n")


def _mlp_label(ratio: float) -> str:
    return f"MLP ratio {ratio:g}"


def _fmt_params(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _heads_panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per (protocol, MLP ratio) that sweeps heads (at least two head counts);
    every combination if none does."""
    groups = list(frame.groupby(["protocol", "mlp_ratio"], sort=True))
    sweeping = [(key, g) for key, g in groups if g["heads"].nunique() >= 2] or groups
    several_ratios = len({ratio for (_, ratio), _ in sweeping}) > 1
    return [(proto + (f", {_mlp_label(ratio)}" if several_ratios else ""), g) for (proto, ratio), g in sweeping]


def _label_place(ax, x: float, y: float, placed: list, below: bool) -> dict:
    """Where a point's label goes (annotate's xytext and ha): right of the point, below it for the
    first line and above for the others; left of it where a label already drawn at that x is
    within 30 points of it (two depths' points close together would overprint)."""
    span = float(np.diff(ax.get_ylim())[0]) or 1.0
    per_point = span / (ax.bbox.height * 72 / ax.figure.dpi)  # data units a typographic point
    crowded = any(px == x and abs(py - y) / per_point < 30 for px, py in placed)
    placed.append((x, y))
    dy = -12 if below else 6
    return {"xytext": (-5, dy), "ha": "right"} if crowded else {"xytext": (5, dy), "ha": "left"}


def _heads_figure(summary: pd.DataFrame):
    """Figure, (axis, title, panel frame) triples and a colour per depth for a vs-heads figure."""
    plt, sns = pyplot()
    frame = explode_protocols(summary)
    panels = _heads_panels(frame)
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(depths, sns.color_palette("viridis", len(depths))))
    fig, axes = panel_axes(plt, len(panels))
    return fig, [(ax, title, sub) for ax, (title, sub) in zip(axes, panels)], depths, palette


# The three measurements (conditioning.MATRICES) and their summary column prefixes.
KAPPA_SERIES = (("", "head outputs [A_1 ... A_h] before W_O"), ("out_", "attention block output after W_O"),
                ("jac_", "Jacobian of the attention block"))


@captioned("kappa_vs_heads", (
        "**{{ snakemake.wildcards.study }}**: P1's Fig. 2, for three measurements (rows): the "
        "concatenated head\n"
        "outputs A = [A_1 ... A_h] before W_O (Theorem 3.2's matrix), the attention block's output after\n"
        "W_O, and the Jacobian of the attention block with respect to its input (P1's revised abstract;\n"
        "exact on these sizes, a Lanczos lower bound where the README says so). Each is kappa per layer "
        "and\n"
        "input from a float64 forward pass and SVD, the geometric mean over layers of the per-layer "
        "median\n"
        "over the fixed probe batch, against the number of heads; one column per head-scaling protocol\n"
        "(``fixed_width``: D fixed, head dim D/h; ``fixed_head_dim``: D = h*d). Which row falls with the\n"
        "heads is which measurement follows the theorem.\n"
        "Dashed: at initialisation; solid: after training. Points: mean over seeds with a 95% interval\n"
        "(in log space). At timm's initialisation attention is near-uniform, so kappa starts far above "
        "the\n"
        "Gaussian prediction; only the trend with heads is comparable to Theorem 3.2. Singular points "
        "(sigma_min within float64 rounding of zero: kappa above 1/(eps*max(N, C))) are open triangles "
        "on the edge of the axes, off the scale: ranks above every drawn value, not magnitudes.\n"
    ))
def kappa_vs_heads(summary: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """P1 Fig. 2, for each of the three measurements (a row each: the head-output concat, the
    block output after W_O, the block's Jacobian): kappa vs heads, a column per protocol; init
    dashed, trained solid; singular points as open triangles on the top edge."""
    from matplotlib.lines import Line2D

    plt, sns = pyplot()
    frame = explode_protocols(summary)
    panels = _heads_panels(frame)
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(depths, sns.color_palette("viridis", len(depths))))
    series = [(p, name) for p, name in KAPPA_SERIES if f"kappa_{p}final_gmean" in summary]
    fig, axes = panel_grid(plt, len(series), len(panels), width=5.2, height=3.9)
    styles = {"init": "--", "final": "-"}
    any_singular = False
    for row, (col_prefix, name) in enumerate(series):
        for ax, (title, sub) in zip(axes[row], panels):
            for depth in depths:
                for ckpt, ls in styles.items():
                    col = f"kappa_{col_prefix}{ckpt}_gmean"
                    if col not in sub:
                        continue
                    agg = seed_agg(sub[sub["depth"] == depth].assign(kappa=sub[col]), ["heads"], "kappa")
                    if len(agg):
                        errorbars(ax, agg["heads"], agg, palette[depth], None, ls)
                        any_singular |= offscale(ax, agg.loc[np.isinf(agg["mean"]), "heads"], palette[depth])
            log_y(ax)
            log2_axis(ax, sub["heads"])
            ax.set_xlabel("heads h")
            ax.set_ylabel("kappa (geo. mean over layers)")
            method = sub.get(f"kappa_{col_prefix}final_method", pd.Series(dtype=str)).astype(str)
            bound = " (Lanczos: a lower bound)" if method.str.contains("lanczos").any() else ""
            ax.set_title(f"{title}\n{name}{bound}", fontsize=9)
    # one legend for the figure: every panel draws the same depths and checkpoints
    handles = [Line2D([], [], color=palette[d], marker="o", label=f"depth {d}") for d in depths]
    handles += [Line2D([], [], color="grey", linestyle=ls, label="at init" if c == "init" else "trained")
                for c, ls in styles.items()]
    fig.suptitle(f"{study}: condition number vs heads, three measurements (rows)")
    fig.text(0.01, -0.01, KAPPA_NOTE + (" " + SINGULAR_NOTE if any_singular else ""), fontsize=8, wrap=True,
             ha="left", va="top")
    fig.tight_layout()
    fig.legend(handles=handles + ([singular_handle()] if any_singular else []), fontsize=8, loc="upper left",
               bbox_to_anchor=(axes[0][-1].get_position().x1 + 0.01, axes[0][-1].get_position().y1), frameon=False)
    return save(fig, prefix)


@captioned("accuracy_vs_heads", _vs_heads_caption("evaluation accuracy"))
@captioned("loss_vs_heads", _vs_heads_caption("validation loss (nats per byte)"))
@captioned("glue_vs_heads", _vs_heads_caption("GLUE average after fine-tuning"))
def metric_vs_heads(summary: pd.DataFrame, prefix: str | Path, study: str, metric: str = "eval_acc") -> list[Path]:
    """P1 Fig. 3: accuracy vs heads at each depth, every point annotated with its parameter count."""
    fig, panels, depths, palette = _heads_figure(summary)
    for ax, title, sub in panels:
        placed: list[tuple[float, float]] = []  # the labels drawn so far (data coordinates), kept apart
        for depth in depths:
            runs = sub[sub["depth"] == depth]
            kept, failed = split_learned(runs, ["heads"])
            # a diverged run is a red x on its configuration's point, whether or not the mean counts it
            agg = seed_agg(kept, ["heads"], metric, runs=runs)
            if not len(agg):
                continue
            errorbars(ax, agg["heads"], agg, palette[depth], f"depth {depth}")
            mark_not_learned(ax, failed[failed["status"] == "ok"] if "status" in failed else failed, "heads", metric,
                             palette[depth])
            for _, r in agg.iterrows():
                ax.annotate(_fmt_params(r["params"]), (r["heads"], r["mean"]), textcoords="offset points",
                            fontsize=7, color=palette[depth],
                            **_label_place(ax, r["heads"], r["mean"], placed, depth == depths[0]))
        log2_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.set_title(title)
        dedupe_legend(ax, fontsize=8)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(metric, metric)} vs heads per depth "
                 f"(labels: parameters; {spread_note(summary)})")
    fig.tight_layout()
    return save(fig, prefix)


@captioned("accuracy_vs_mlp", _vs_mlp_caption("evaluation accuracy"))
@captioned("loss_vs_mlp", _vs_mlp_caption("validation loss"))
@captioned("glue_vs_mlp", _vs_mlp_caption("GLUE average"))
def metric_vs_mlp(summary: pd.DataFrame, prefix: str | Path, study: str, metric: str = "eval_acc") -> list[Path]:
    """P1 Fig. 4: accuracy vs MLP width, one line per (depth, heads) that sweeps the MLP width."""
    plt, sns = pyplot()
    frame = explode_protocols(summary)
    panels = []
    for proto, sub in frame.groupby("protocol", sort=True):
        lines = [(key, g) for key, g in sub.groupby(["depth", "heads"]) if g["mlp_hidden"].nunique() >= 2]
        if lines:
            panels.append((proto, lines))
    fig, axes = panel_axes(plt, max(len(panels), 1))
    if not panels:
        axes[0].text(0.5, 0.5, "no (depth, heads) point of this study varies the MLP width",
                     ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
    for ax, (proto, lines) in zip(axes, panels):
        colors = sns.color_palette("tab10", len(lines))
        widths = set()
        for color, ((depth, heads), g) in zip(colors, lines):
            agg = seed_agg(g, ["mlp_hidden"], metric)
            widths |= set(agg["mlp_hidden"])
            errorbars(ax, agg["mlp_hidden"], agg, color, f"depth {depth}, {heads} heads")
            for _, r in agg.iterrows():
                ax.annotate(_fmt_params(r["params"]), (r["mlp_hidden"], r["mean"]), textcoords="offset points",
                            xytext=(5, 6), fontsize=7, color=color)
        log2_axis(ax, widths)
        ax.set_xlabel("MLP hidden width")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.set_title(proto)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(metric, metric)} vs MLP width "
                 f"(labels: parameters; {spread_note(summary)})")
    fig.tight_layout()
    return save(fig, prefix)


@captioned("gaussian_conditioning", (
        "Theorem 3.2 by Monte Carlo: kappa of N x (h*d) blocks of i.i.d. Gaussian heads against the closed\n"
        "form (sqrt(D) + sqrt(N)) / (sqrt(D) - sqrt(N)), D = h*d, only where D > N (the theorem's regime).\n"
        "Left: head dim d fixed, so D grows with h and kappa falls toward 1 (case b). Right: width D fixed,\n"
        "the control: kappa stays flat, because under Gaussian heads kappa depends only on (N, D).\n"
        "Mean and standard deviation over draws.\n"
    ))
def theory_curves(theory: pd.DataFrame, prefix: str | Path) -> list[Path]:
    """Theorem 3.2: Monte Carlo kappa of Gaussian head blocks vs heads, against the closed form."""
    plt, sns = pyplot()
    from matplotlib.lines import Line2D

    fig, axes = panel_grid(plt, 1, 2, height=4.8)  # the legends sit below the panels
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
        log_y(ax)
        log2_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel("kappa of N x D Gaussian block")
        ax.set_title(title)
        handles, _ = ax.get_legend_handles_labels()
        handles.append(Line2D([], [], color="grey", linestyle="--", label="closed form (√D+√N)/(√D−√N)"))
        # below the panel: the curves fill it
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.19), ncol=2)
    fig.suptitle("Theorem 3.2: conditioning of concatenated Gaussian heads (mean ± sd over draws; "
                 "only D > N, the theorem's regime)")
    fig.tight_layout()
    return save(fig, prefix)
