"""Summaries -> P1's figures of a study (kappa and a metric against heads or the MLP ratio; the
Pareto view is in pareto.py) and the theory check's figure, as PNG and PDF. Every point is what the
tables report (plots.seed_agg).

And a study's figures through training. Training curves: every variant's history.csv, one line per
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
from .plots import (
    METRIC_LABELS,
    METRIC_NAMES,
    SINGULAR_NOTE,
    captioned,
    dedupe_legend,
    errorbars,
    log2_axis,
    log_y,
    mark_not_learned,
    offscale,
    panel_axes,
    panel_grid,
    pyplot,
    save,
    seed_agg,
    singular_handle,
    split_learned,
    spread_note,
)
from .stats import SCALES, onto_scale, scale_of
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
