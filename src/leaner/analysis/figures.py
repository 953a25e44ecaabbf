"""Summaries -> P1's figures of a study (kappa and a metric against heads or the MLP ratio, kappa
through training, the Pareto view) and the theory check's figure, as PNG and PDF. Every point is
what the tables report (figure_parts.seed_agg)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .figure_parts import METRIC_LABELS, METRIC_NAMES, errorbars, panel_axes, panel_grid, seed_agg, spread_note
from .plots import SINGULAR_NOTE, log2_axis, log_y, offscale, pyplot, save, singular_handle
from .summary import explode_protocols

KAPPA_NOTE = ("kappa on a log scale. At timm's initialisation attention is near-uniform, so the head-output "
              "matrix is nearly rank one and kappa is orders of magnitude above the Gaussian prediction; "
              "only the trend with heads is comparable to Theorem 3.2.")


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


def metric_vs_heads(summary: pd.DataFrame, prefix: str | Path, study: str, metric: str = "eval_acc") -> list[Path]:
    """P1 Fig. 3: accuracy vs heads at each depth, every point annotated with its parameter count."""
    fig, panels, depths, palette = _heads_figure(summary)
    for ax, title, sub in panels:
        for depth in depths:
            agg = seed_agg(sub[sub["depth"] == depth], ["heads"], metric)
            if not len(agg):
                continue
            errorbars(ax, agg["heads"], agg, palette[depth], f"depth {depth}")
            for _, r in agg.iterrows():
                ax.annotate(_fmt_params(r["params"]), (r["heads"], r["mean"]), textcoords="offset points",
                            xytext=(5, -12 if depth == depths[0] else 6), fontsize=7, color=palette[depth])
        log2_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(metric, metric)} vs heads per depth "
                 f"(labels: parameters; {spread_note(summary)})")
    fig.tight_layout()
    return save(fig, prefix)


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


def pareto(summary: pd.DataFrame, prefix: str | Path, study: str, claims: list[dict]) -> list[Path]:
    """P1's Fig. 1 view of each declared claim (a row each; left every configuration, right the
    same zoomed on the baseline): the metric against parameters for every configuration of the
    study (mean over its seeds with a 95% interval; colour: heads, marker: depth), the
    configurations no other beats with fewer parameters joined as the Pareto front, the baseline's
    mean with its band of +-margin, and the claim's lean models ringed and labelled with their
    verdict (tables.claims_table: the declared seeds only)."""
    from .curves import MARKERS, config_id, line_styles
    from .tables import claims_table

    plt, _ = pyplot()
    verdicts = claims_table(summary, claims)
    fig, grid = panel_grid(plt, max(1, len(claims)), 2, width=5.4, height=4.6)
    configs = summary.assign(config=summary["variant"].map(config_id))
    colours = {c: style["color"] for c, style in line_styles(sorted(configs["config"].unique())).items()}
    depths = sorted(configs["depth"].unique())
    markers = dict(zip(depths, MARKERS * len(depths)))
    for (full, zoom), claim in zip(grid, claims):
        metric, margin, better = claim["metric"], claim["margin"], claim.get("mode", "max")
        points = _dodged(seed_agg(configs, ["config", "depth"], metric))
        rows = verdicts[verdicts["claim"] == claim["name"]]
        base, leans = rows[rows["role"] == "baseline"].iloc[0], rows[rows["role"] == "lean"]
        at = points.set_index("config")[["x", "mean"]]  # star and rings sit on their own points
        ring = at.loc[[_config_of(configs, point) for point in claim["lean"]]]
        star = at.loc[_config_of(configs, claim["baseline"])]
        control = at.loc[[_config_of(configs, claim["control"])]] if claim.get("control") else at.iloc[:0]
        for ax in (full, zoom):
            for _, p in points.iterrows():
                lo = max(p["mean"] - p["lo"], 0) if not math.isnan(p["lo"]) else 0
                hi = max(p["hi"] - p["mean"], 0) if not math.isnan(p["hi"]) else 0
                ax.errorbar(p["x"], p["mean"], yerr=[[lo], [hi]], color=colours[p["config"]],
                            marker=markers[p["depth"]], markersize=6, capsize=2, linewidth=1, linestyle="none",
                            label=f"{p['config']} (n = {p['n']})")
            front = _pareto_front(points, better)
            ax.step(front["params"], front["mean"], where="post", color="grey", linewidth=1, alpha=0.6,
                    label="Pareto front: no model beats it with fewer parameters")
            ax.axhspan(base["mean"] - margin, base["mean"] + margin, color="0.5", alpha=0.15, linewidth=0,
                       label=f"baseline's mean +- margin {margin:g}")
            ax.axhline(base["mean"], color="0.3", linestyle="--", linewidth=1)
            ax.scatter([star["x"]], [star["mean"]], marker="*", s=240, facecolors="none", edgecolors="black",
                       linewidths=1.2, zorder=6, label=f"baseline {base['configuration']}")
            ax.scatter(ring["x"], ring["mean"], marker="o", s=280, facecolors="none", edgecolors="black",
                       linewidths=1.2, zorder=6, label="lean models of the claim")
            if len(control):
                ax.scatter(control["x"], control["mean"], marker="s", s=200, facecolors="none", edgecolors="black",
                           linewidths=1.2, zorder=6, label="control: the lean depth at the baseline's heads")
            ax.set_xscale("log")
            ax.set_xlabel("parameters")
            ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        near = points[points["params"].between(0.5 * min(leans["params"].min(), base["params"]), 2 * base["params"])]
        span = 3 * margin + float(np.nanmax(np.abs(near["hi"].fillna(near["mean"]) - base["mean"]), initial=0))
        zoom.set_ylim(base["mean"] - span, base["mean"] + span)
        zoom.set_xlim(0.6 * min(leans["params"].min(), base["params"]), 1.6 * base["params"])
        lines = [f"{lean['configuration']}: {lean['verdict']}, {_signed(lean['lean_advantage'])}"
                 + ("" if math.isnan(lean["bound_lo"]) else f" [{lean['bound_lo']:+.3f}, {lean['bound_hi']:+.3f}]")
                 + f", {lean['param_reduction_pct']:.0f}% fewer parameters"
                 for _, lean in rows[rows["role"] != "baseline"].iterrows()]
        zoom.text(0.02, 0.02, "\n".join(lines), transform=zoom.transAxes, fontsize=7, va="bottom",
                  bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "0.7"})
        seeds = len(claim["seeds"])
        full.set_title(f"claim {claim['name']}: every configuration", fontsize=9)
        zoom.set_title(f"near the baseline: {seeds} declared seed{'s' * (seeds > 1)}, margin {margin:g}, "
                       f"{'higher' if better == 'max' else 'lower'} is better", fontsize=9)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(claims[0]['metric'], claims[0]['metric']) if claims else ''} against "
                 f"parameters ({spread_note(summary)}); star: baseline, rings: lean models, square: control, "
                 "band: +- margin")
    fig.tight_layout()
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper left", frameon=False,
               bbox_to_anchor=(grid[0][-1].get_position().x1 + 0.01, grid[0][-1].get_position().y1))
    return save(fig, prefix)


def _dodged(points: pd.DataFrame, step: float = 1.035) -> pd.DataFrame:
    """x: the parameter count, configurations of equal count spread by factors of `step` around
    it (on the log axis) so that none hides another."""
    x = points["params"].astype(float).copy()
    for _, same in points.groupby("params"):
        for k, i in enumerate(same.index):
            x[i] *= step ** (k - (len(same) - 1) / 2)
    return points.assign(x=x)


def _config_of(configs: pd.DataFrame, point: dict) -> str:
    """The configuration id (curves.config_id) of a claim's grid point."""
    mask = np.ones(len(configs), bool)
    for key, value in point.items():
        mask &= (configs[key] == value).to_numpy()
    return configs.loc[mask, "config"].iloc[0]


def _signed(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.3f}"


def _pareto_front(points: pd.DataFrame, better: str) -> pd.DataFrame:
    """The points that no point with as few parameters or fewer beats, by parameters."""
    ordered = points[np.isfinite(points["mean"])].sort_values(["params", "mean"], ascending=[True, better == "min"])
    best, keep = None, []
    for i, p in ordered.iterrows():
        if best is None or (p["mean"] > best if better == "max" else p["mean"] < best):
            best = p["mean"]
            keep.append(i)
    return ordered.loc[keep]
