"""Views of a study's declared claims against parameters: the Pareto view (each claim's baseline
and lean configurations, the metric against parameters, with the claim's margin and verdict beside
them) and the exchange of heads for a layer (each ladder claim's share of the lost layer's cost won
back, against heads and against parameters)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .plots import (
    METRIC_LABELS,
    METRIC_NAMES,
    captioned,
    log2_axis,
    log_x,
    panel_grid,
    pyplot,
    save,
    seed_agg,
    spread_note,
)
from .stats import signed


@captioned("pareto", (
        "**{{ snakemake.wildcards.study }}**: P1's Fig. 1 view of each claim the config declared before "
        "the\n"
        "run. Left: every configuration of the study, its metric against its parameter count (mean over\n"
        "its seeds with a 95% interval; colour: heads, marker: depth), the configurations that no model\n"
        "with fewer parameters beats joined as the Pareto front. Right: the same near the baseline. The\n"
        "star is the claim's baseline, with its mean dashed and a grey band of plus or minus the "
        "declared\n"
        "margin; the rings are the lean models, each listed with its verdict, the difference (positive:\n"
        "lean better) with its one-sided 95% bounds over the declared seeds, and its parameter saving.\n"
    ))
def pareto(summary: pd.DataFrame, prefix: str | Path, study: str, claims: list[dict]) -> list[Path]:
    """P1's Fig. 1 view of each declared claim (a row each; left every configuration, right the
    same zoomed on the baseline): the metric against parameters for every configuration of the
    study (mean over its seeds with a 95% interval; colour: heads, marker: depth), the
    configurations no other beats with fewer parameters joined as the Pareto front, the baseline's
    mean with its band of +-margin, and the claim's lean models ringed and labelled with their
    verdict (tables.claims_table: the declared seeds only)."""
    from .figures import MARKERS, config_id, line_styles
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
                           linewidths=1.2, zorder=6, label="the claim's control")
            ax.set_xscale("log")
            ax.set_xlabel("parameters")
            ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        smallest = float(np.nanmin([leans["params"].min(), base["params"]]))
        if math.isfinite(base["mean"]) and math.isfinite(smallest):  # else the baseline did not learn: no zoom
            near = points[points["params"].between(0.5 * smallest, 2 * base["params"])]
            span = 3 * margin + float(np.nanmax(np.abs(near["hi"].fillna(near["mean"]) - base["mean"]), initial=0))
            zoom.set_ylim(base["mean"] - span, base["mean"] + span)
            zoom.set_xlim(0.6 * smallest, 1.6 * base["params"])
        lines = [f"{lean['configuration']}: {lean['verdict']}, {signed(lean['lean_advantage'], missing='n/a')}"
                 + ("" if math.isnan(lean["bound_lo"]) else f" [{lean['bound_lo']:+.3f}, {lean['bound_hi']:+.3f}]")
                 + ("" if math.isnan(lean["param_reduction_pct"]) else
                    f", {lean['param_reduction_pct']:.0f}% fewer parameters")
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
    """The configuration id (figures.config_id) of a claim's grid point."""
    mask = np.ones(len(configs), bool)
    for key, value in point.items():
        mask &= (configs[key] == value).to_numpy()
    return configs.loc[mask, "config"].iloc[0]


def _pareto_front(points: pd.DataFrame, better: str) -> pd.DataFrame:
    """The points that no point with as few parameters or fewer beats, by parameters."""
    ordered = points[np.isfinite(points["mean"])].sort_values(["params", "mean"], ascending=[True, better == "min"])
    best, keep = None, []
    for i, p in ordered.iterrows():
        if best is None or (p["mean"] > best if better == "max" else p["mean"] < best):
            best = p["mean"]
            keep.append(i)
    return ordered.loc[keep]


EXCHANGE_COLUMNS = ["claim", "role", "configuration", "heads", "head_dim", "width", "params", "params_ratio", "mean",
                    "n", "lean_advantage", "bound_lo", "bound_hi", "verdict", "supported", "control_cost",
                    "kept_share", "kept_lo", "kept_hi"]


def is_ladder(claim: dict, rungs: int = 3) -> bool:
    """A claim with a control and lean models at `rungs` head counts or more: a ladder of heads,
    each rung's share of the control's cost won back."""
    return bool(claim.get("control")) and len({p.get("heads") for p in claim["lean"]}) >= rungs


def exchange_table(summary: pd.DataFrame, claims: list[dict]) -> pd.DataFrame:
    """How many heads buy back a layer: for each ladder claim (is_ladder), the control (the lean
    depth at the baseline's heads: share 0) and each lean model by heads, its heads, head dim,
    width and parameters (params_ratio: against the baseline's), its difference from the baseline
    with the claim's bounds and verdict, and the share of the control's cost it wins back with
    its interval (the claims table's kept_share, kept_lo, kept_hi)."""
    from .tables import claims_table

    rows = []
    for claim in filter(is_ladder, claims):
        table = claims_table(summary, [claim])
        base = table[table["role"] == "baseline"].iloc[0]
        points = [*claim["lean"], claim["control"]]
        arms, ladder = table[table["role"] != "baseline"], []
        for point, (_, arm) in zip(points, arms.iterrows()):
            width = int(point["width"]) if "width" in point else None
            head_dim = point.get("head_dim") or (width // int(point["heads"]) if width else None)
            share = (0.0, math.nan, math.nan) if arm["role"] == "control" else \
                (arm["kept_share"], arm["kept_lo"], arm["kept_hi"])
            ladder.append({**arm.to_dict(), "heads": int(point["heads"]), "head_dim": head_dim, "width": width,
                           "params_ratio": arm["params"] / base["params"] if base["params"] else math.nan,
                           "kept_share": share[0], "kept_lo": share[1], "kept_hi": share[2]})
        rows += sorted(ladder, key=lambda row: row["heads"])  # the control first: the fewest heads
    return pd.DataFrame(rows).reindex(columns=EXCHANGE_COLUMNS)


@captioned("layer_won_back", (
        "**{{ snakemake.wildcards.study }}**: how many heads buy back a layer. For each claim that puts\n"
        "one-layer models with more and more heads against a deeper baseline, with a control (the\n"
        "shallower model at the baseline's heads), the share of the control's cost each model wins\n"
        "back: (model - control) / (baseline - control), 0 at the control, 1 where the model matches\n"
        "the baseline (the layer bought back), with its 90% interval over the runs resampled. Left:\n"
        "against heads; right: against parameters (the baseline at share 1). The dotted line is the\n"
        "share that puts a model within the claim's margin of the baseline; each point is labelled\n"
        "with its declared verdict (table exchange: the numbers).\n"
    ))
def layer_won_back(summary: pd.DataFrame, prefix: str | Path, study: str, claims: list[dict]) -> list[Path]:
    """Each ladder claim (is_ladder) as a line: its control and lean models' share of the
    control's cost won back (exchange_table) with their 90% intervals, against heads (log 2)
    and against parameters (log), with the baseline's share 1, the control's 0 and the share at
    which a model comes within the margin of the baseline."""
    plt, sns = pyplot()
    table = exchange_table(summary, claims)
    fig, ((by_heads, by_params),) = panel_grid(plt, 1, 2, width=5.6, height=4.4)
    names = list(dict.fromkeys(table["claim"]))
    colours = dict(zip(names, sns.color_palette("colorblind", max(len(names), 1))))
    base_params = []
    stacked = {by_heads: {}, by_params: {}}  # labels drawn at each x of a panel, stacked apart
    for name in names:
        rows = table[table["claim"] == name]
        claim = next(c for c in claims if c["name"] == name)
        colour = colours[name]
        cost = rows["control_cost"].iloc[0]
        shares = rows["kept_share"].to_numpy(float)
        lo = np.nan_to_num(shares - rows["kept_lo"].to_numpy(float)).clip(min=0)
        hi = np.nan_to_num(rows["kept_hi"].to_numpy(float) - shares).clip(min=0)
        label = (f"{name}: the control costs {signed(cost, missing='n/a')} "
                 f"({METRIC_NAMES.get(claim['metric'], claim['metric'])})")
        for ax, x in ((by_heads, rows["heads"]), (by_params, rows["params"])):
            drawn = ax.errorbar(x, shares, yerr=[lo, hi], color=colour, marker="o", capsize=3, markersize=5,
                                linewidth=1.6, label=label)
            drawn.lines[0].set_gid(name)
            for xi, yi, verdict, role, heads in zip(x, shares, rows["verdict"], rows["role"], rows["heads"]):
                if np.isfinite(yi) and role == "lean":  # rungs at one parameter count: a column of lines
                    k = stacked[ax].get(xi, 0)
                    stacked[ax][xi] = k + 1
                    column = shares[(np.asarray(x) == xi) & np.isfinite(shares)]
                    text = str(verdict) if len(column) < 2 else f"{heads} heads: {verdict}"
                    ax.annotate(text, (xi, column.max() if len(column) > 1 else yi), textcoords="offset points",
                                xytext=(4, 4 + 8 * k), fontsize=6, color=colour)
        if cost and math.isfinite(cost):
            within = 1 - claim["margin"] / abs(cost)
            for ax in (by_heads, by_params):
                ax.axhline(within, color=colour, linestyle=":", linewidth=1,
                           label=f"{name}: within the margin {claim['margin']:g} of the baseline")
        params = table.loc[table["claim"] == name, "params"] / table.loc[table["claim"] == name, "params_ratio"]
        base_params += [float(params.iloc[0])]
    for ax in (by_heads, by_params):
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1, label="the baseline (the layer bought back)")
        ax.axhline(0.0, color="0.6", linestyle="-", linewidth=1, label="the control (the layer lost)")
        ax.set_ylabel("share of the lost layer's cost won back")
    if base_params:
        by_params.scatter(base_params[:1], [1.0], marker="*", s=200, facecolors="none", edgecolors="black",
                          zorder=6, label="the baseline's parameters")
    log2_axis(by_heads, table["heads"])
    by_heads.set_xlabel("heads (one layer)")
    log_x(by_params)
    by_params.set_xlabel("parameters")
    by_heads.set_title("against heads", fontsize=9)
    by_params.set_title("against parameters", fontsize=9)
    seeds = sorted({len(c["seeds"]) for c in claims if c["name"] in names})
    fig.suptitle(f"{study}: the share of a layer's cost that heads win back ("
                 f"{'-'.join(map(str, seeds))} declared seeds; bars: 90% intervals over the runs resampled; "
                 "labels: the declared verdicts)", fontsize=10)
    fig.tight_layout()
    handles, labels = by_params.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", frameon=False, ncol=2,
               bbox_to_anchor=(0.5, 0.0))
    return save(fig, prefix)
