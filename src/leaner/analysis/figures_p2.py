"""P2's figures: MSE and kappa against head rank (one line per W, N, d or positions), and the
angle between QK^T and the identity of one-head models (fig_perfect)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .plots import (
    captioned,
    dedupe_legend,
    errorbars,
    log2_axis,
    log_y,
    mark_not_learned,
    offscale,
    panel_axes,
    pyplot,
    save,
    seed_agg,
    split_learned,
)

HUE_LABELS = {"modules": "W={} modules", "tokens": "N={}", "dim": "d={}", "posn": "positions: {}"}


P2_AXES = ("modules", "dim", "tokens", "posn")


def _line_label(key: tuple, names: list[str]) -> str:
    return ", ".join(HUE_LABELS[n].format(v) for n, v in zip(names, key))


def _rank_panels(summary: pd.DataFrame, hue: str):
    """P2 figures: one panel per depth; one line per value of `hue` (and of any other P2 axis the
    study varies, so that no line mixes two settings)."""
    plt, sns = pyplot()
    names = [hue] + [a for a in P2_AXES if a != hue and summary[a].nunique() > 1]
    depths = sorted(summary["depth"].unique())
    fig, axes = panel_axes(plt, len(depths), width=4.6, height=3.8)
    lines = list(summary.groupby(names, sort=True))
    palette = sns.color_palette("viridis" if len(lines) > 3 else "tab10", len(lines))
    return fig, list(zip(axes, depths)), names, [(key if isinstance(key, tuple) else (key,), g, c)
                                                   for (key, g), c in zip(lines, palette)]


def _rank_axis(ax, ranks):
    log2_axis(ax, ranks)
    ax.set_xlabel("rank (head dim = d_model / heads)")


@captioned("mse_vs_rank", (
        "**{{ snakemake.wildcards.study }}**: P2's fig1. Farthest-point MSE (per-token squared error "
        "summed\n"
        "over coordinates; the zero predictor scores 1) against head rank r = d/heads, one line per\n"
        "attention-parameter budget W (W averaged attention modules per layer), one panel per depth. As "
        "P2\n"
        "plots it: the minimum over data seeds of each run's best epoch, the band the seeds' range. P2's\n"
        "headline: one full-rank head solves the task; every halving of the rank costs orders of "
        "magnitude.\n"
    ))
@captioned("mse_vs_rank_by_tokens", (
        "**{{ snakemake.wildcards.study }}**: farthest-point MSE against head rank, one line per "
        "sequence length N (P2's figN: depth rescues low rank only for short sequences).\n"
        "Minimum over data seeds, band: the seeds' range. Made only for a study whose grid varies that "
        "axis.\n"
        "P2's own figN ran each job under a 4-hour Slurm limit on one V100-class GPU, without requeue, "
        "and reports the best epoch reached (`paper_experiments/figN/figN.slurm`).\n"
        "By the plan's step times (`leaner cost configs/paper.yaml --wall-budget 4 --study "
        "nearest_figN`), 8 of its 20 configurations cannot finish their 2,000 epochs in 4 hours on a "
        "V100: every rank at N = 256 (the largest, rank 1, about 10 epochs), ranks 8 and 1 at N = 64, "
        "rank 1 at N = 16.\n"
        "The paper's points there rest on truncated training; this pipeline trains the full schedule "
        "unless a study's `recipe.wall_budget_minutes` sets the authors' regime.\n"
    ))
@captioned("mse_vs_rank_by_dim", (
        "**{{ snakemake.wildcards.study }}**: farthest-point MSE against head rank, one line per input "
        "dimension d (P2's fig_d grid).\n"
        "Minimum over data seeds, band: the seeds' range. Made only for a study whose grid varies that "
        "axis.\n"
    ))
@captioned("mse_vs_rank_by_posn", (
        "**{{ snakemake.wildcards.study }}**: farthest-point MSE against head rank, one line per "
        "positional encoding (P2's fig3: concatenated positions let depth compensate for low rank).\n"
        "Minimum over data seeds, band: the seeds' range. Made only for a study whose grid varies that "
        "axis.\n"
    ))
def mse_vs_rank(summary: pd.DataFrame, prefix: str | Path, study: str, hue: str = "modules",
                log: bool = True) -> list[Path]:
    """P2 fig1 / figN / fig_d / fig3: MSE (min over seeds, band: the seeds' range) vs rank."""
    fig, panels, names, lines = _rank_panels(summary, hue)
    for ax, depth in panels:
        for key, g, color in lines:
            g = g[g["depth"] == depth]
            if not len(g):
                continue
            agg = g.groupby("head_dim")["best_train_loss"].agg(["min", "max"]).reset_index()
            ax.plot(agg["head_dim"], agg["min"], marker="o", color=color, label=_line_label(key, names))
            ax.fill_between(agg["head_dim"], agg["min"], agg["max"], color=color, alpha=0.2)
            mark_not_learned(ax, split_learned(g, ["head_dim"])[1], "head_dim", "best_train_loss", color,
                             label="a run that did not learn (inside the band: min and range over every seed)")
            dv = g[g["status"] != "ok"]
            if len(dv):
                ax.scatter(dv["head_dim"], dv["best_train_loss"].fillna(1.0), marker="x", color="red", s=70,
                           zorder=5, label="diverged")
        if log:
            log_y(ax)
        _rank_axis(ax, summary["head_dim"])
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        ax.set_ylabel("MSE (min over epochs; zero predictor = 1)")
        ax.set_title(f"{depth} layer{'s' if depth > 1 else ''}")
        dedupe_legend(ax, fontsize=7)
    by = {"modules": "attention budget W", "tokens": "sequence length N", "dim": "dimension d",
          "posn": "positional encoding"}[hue]
    fig.suptitle(f"{study}: farthest-point MSE vs head rank, by {by} (line: min over seeds; band: range)")
    fig.tight_layout()
    return save(fig, prefix)


@captioned("perfect_angle", (
        "**{{ snakemake.wildcards.study }}**: P2's fig_perfect. For trained 1-layer models with one "
        "full-rank\n"
        "head per module, the angle between W_Q^T W_K and the identity, acos(tr(M) / (||M||_F sqrt(d))):\n"
        "180 degrees is the construction Q K^T = -c I that attends to the farthest point. Acceptance\n"
        "(papers.md 2.7): above 165 degrees for every head. One dot per data seed.\n"
    ))
def perfect_angle(summary: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """P2 fig_perfect: angle between Q K^T and the identity for 1-layer, 1-head models (180 deg is
    the construction Q K^T = -c I: hard attention to the farthest point)."""
    plt, sns = pyplot()
    fig, (ax,) = panel_axes(plt, 1, width=5.5)
    single = summary[(summary["depth"] == 1) & (summary["heads"] == 1)]
    if not len(single) or "qk_angle_deg_min" not in single:
        ax.text(0.5, 0.5, "no 1-layer, 1-head model in this study", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    else:
        state = np.random.get_state()  # seaborn jitters from numpy's global generator: seeded here, so that
        np.random.seed(0)  # the same summary draws the same figure, and restored after
        try:
            sns.stripplot(data=single, x="modules", y="qk_angle_deg_min", hue="seed", ax=ax, size=7, jitter=0.1)
        finally:
            np.random.set_state(state)
        ax.axhline(180, color="grey", linestyle="--", linewidth=1)
        ax.axhline(165, color="red", linestyle=":", linewidth=1, label="acceptance: 165")
        ax.set_xlabel("attention modules W (each with one full-rank head)")
        ax.set_ylabel("angle(W_Q^T W_K, I), least of all heads (deg)")
        ax.legend(fontsize=8, title="data seed")
    fig.suptitle(f"{study}: trained 1-head models learn Q K^T = -c I")
    fig.tight_layout()
    return save(fig, prefix)


@captioned("kappa_vs_rank", (
        "**{{ snakemake.wildcards.study }}**: P1's conditioning measure on P2's models: kappa of the\n"
        "concatenated head outputs against head rank, at initialisation (dashed) and after training\n"
        "(solid), one line per budget W, one panel per depth. Mean over seeds with a 95% interval (log\n"
        "space). Singular points (sigma_min within float64 rounding of zero: kappa above 1/(eps*max(N, "
        "C))) are open triangles on the edge of the axes, off the scale: ranks above every drawn value, "
        "not magnitudes.\n"
    ))
def kappa_vs_rank(summary: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """The conditioning rule on P2's models: kappa of the concatenated head outputs vs rank."""
    from matplotlib.lines import Line2D

    fig, panels, names, lines = _rank_panels(summary, "modules")
    for ax, depth in panels:
        for _key, g, color in lines:
            g = g[g["depth"] == depth]
            for ckpt, ls in (("init", "--"), ("final", "-")):
                col = f"kappa_{ckpt}_gmean"
                if len(g) and col in g:
                    agg = seed_agg(g.assign(kappa=g[col]), ["head_dim"], "kappa")
                    errorbars(ax, agg["head_dim"], agg, color, None, ls)
                    offscale(ax, agg.loc[np.isinf(agg["mean"]), "head_dim"], color)
        log_y(ax)
        _rank_axis(ax, summary["head_dim"])
        ax.set_ylabel("kappa (geometric mean over layers)")
        ax.set_title(f"{depth} layer{'s' if depth > 1 else ''}")
        handles = [Line2D([], [], color=c, marker="o", label=_line_label(k, names)) for k, _, c in lines]
        handles += [Line2D([], [], color="grey", linestyle="--", label="at init"),
                    Line2D([], [], color="grey", linestyle="-", label="trained")]
        ax.legend(handles=handles, fontsize=7)
    fig.suptitle(f"{study}: condition number of the concatenated head outputs vs rank")
    fig.tight_layout()
    return save(fig, prefix)
