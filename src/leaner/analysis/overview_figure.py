"""The overview figure: both papers in one view, every configuration of every study on common
axes (relative error against heads, head rank and depth; kappa against error)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .plots import log2_axis, log_x, log_y, offscale, pyplot, save
from .stats import fmt_ci


def overview_figure(configs: pd.DataFrame, corr: pd.DataFrame, prefix: str | Path) -> list[Path]:
    plt, sns = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5))
    studies = list(dict.fromkeys(configs["study"]))
    palette = dict(zip(studies, sns.color_palette("tab10", len(studies))))
    markers = {"P1": "o", "P2": "s"}
    panels = ((axes[0][0], "heads", "group", "relative_error", "heads (all heads of a layer)",
               "error / error with the fewest heads", "more heads: below the line helps, above hurts"),
              (axes[0][1], "rank_fraction", "group", "relative_error",
               "head rank / model width (1 = one full-rank head)", "error / error with the fewest heads",
               "the same against head rank"),
              (axes[1][0], "depth", "depth_group", "relative_error_depth", "depth (layers)",
               "error / error of the shallowest", "more layers, heads and rank fixed"))
    for ax, x, group, y, xlabel, ylabel, title in panels:
        drawn = []  # the studies with a line here, for the legend
        for _, g in configs.groupby(["study", group], sort=False):
            g = g.dropna(subset=[y]).sort_values(x)
            if g[x].nunique() < 2:
                continue
            drawn.append((g["study"].iloc[0], g["family"].iloc[0]))
            lo = (g[y] - g[f"{y}_lo"]).clip(lower=0).fillna(0)
            hi = (g[f"{y}_hi"] - g[y]).clip(lower=0).fillna(0)
            ax.errorbar(g[x], g[y], yerr=[lo, hi], color=palette[g["study"].iloc[0]],
                        marker=markers[g["family"].iloc[0]], markersize=4, linewidth=1, alpha=0.8, capsize=2)
            if x == "depth":  # a study has a line per model it deepens: each says which at its end
                heads = int(g["heads"].iloc[-1])
                ax.annotate(f"{heads} head{'s' * (heads > 1)}, rank {g['rank'].iloc[-1]}",
                            (g[x].iloc[-1], g[y].iloc[-1]), textcoords="offset points", xytext=(4, 0),
                            fontsize=6, va="center", color=palette[g["study"].iloc[0]])
        ax.axhline(1, color="grey", linestyle="--", linewidth=1)
        if x == "heads":
            log2_axis(ax, configs[x], powers=True)
        elif x == "rank_fraction":
            log2_axis(ax, configs[x], powers=True, fractions=True)
        else:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        log_y(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if drawn:
            ax.legend(handles=_study_handles(dict.fromkeys(drawn), palette, markers), fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no study varies {xlabel.split(' (')[0]} at fixed settings", ha="center",
                    va="center", transform=ax.transAxes, fontsize=9, color="grey")
    ax = axes[1][1]
    singular = False
    for study, g in configs.groupby("study", sort=False):
        g = g.drop_duplicates([k for k in ("depth", "heads", "rank", "model_width", "params", "qk_scale") if k in g])
        scaled = g["error_mean"] / g["error_mean"].median()
        r = corr[corr["study"] == study]
        tag = fmt_ci(*r[["rho_kappa_error", "lo", "hi"]].iloc[0]) if len(r) else "n/a"
        tag_j = fmt_ci(*r[["rho_jacobian_error", "lo_jacobian", "hi_jacobian"]].iloc[0]) \
            if len(r) and "rho_jacobian_error" in r else "n/a"
        color, marker = palette[study], markers[g["family"].iloc[0]]
        for col, filled in (("kappa_final", True), ("kappa_jac_final", False)):
            if col not in g or g[col].isna().all():
                continue
            finite = np.isfinite(g[col])
            ax.scatter(g.loc[finite, col], scaled[finite], marker=marker, s=22, linewidths=1.2,
                       facecolors=color if filled else "none", edgecolors=color,
                       label=f"{study}: rho {tag}" + ("" if tag_j == "n/a" else f"; Jacobian {tag_j}")
                       if filled else None)
            singular |= offscale(ax, scaled[~finite], color, axis="x")
    log_x(ax)
    log_y(ax)
    ax.set_xlabel("kappa after training (geometric mean over layers and seeds)")
    ax.set_ylabel("error / the study's median error")
    pooled = corr[corr["study"] == "pooled"]
    ax.set_title("kappa vs error, Spearman rho [95% CI]; pooled " +
                 (fmt_ci(*pooled[["rho_kappa_error", "lo", "hi"]].iloc[0]) if len(pooled) else "n/a") +
                 ("; Jacobian " + fmt_ci(*pooled[["rho_jacobian_error", "lo_jacobian", "hi_jacobian"]].iloc[0])
                  if len(pooled) and "rho_jacobian_error" in pooled else ""), fontsize=9)
    from matplotlib.lines import Line2D

    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="grey", marker="o", linestyle="none", label="filled: head outputs before W_O"),
                Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="none",
                       label="open: the block's Jacobian")]
    if singular:
        handles.append(Line2D([], [], color="grey", marker=">", markerfacecolor="none", linestyle="none",
                              label="singular (off scale, right edge)"))
    # below the panel: off the points
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.suptitle("Both papers in one view: every configuration of every study (circles: P1's tasks, squares: P2's)")
    fig.tight_layout()
    return save(fig, prefix)


def _study_handles(drawn: dict, palette: dict, markers: dict) -> list:
    """Legend entries: each study's colour with its family's marker (P1 circles, P2 squares)."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=palette[study], marker=markers[family], markersize=5, linewidth=1,
                   label=f"{study} ({family})") for study, family in drawn]
