"""Tables -> the papers' figures, as PNG and PDF. Every point is the mean over seeds with a
Student-t 95% interval (kappa: in log space, i.e. a geometric mean with its interval)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..outputs import grid_points, study_outputs
from ..tasks import task_info
from .plots import SINGULAR_NOTE, log2_axis, log_y, offscale, pyplot, save, singular_handle
from .stats import ci95
from .summary import explode_protocols

KAPPA_NOTE = ("kappa on a log scale. At timm's initialisation attention is near-uniform, so the head-output "
              "matrix is nearly rank one and kappa is orders of magnitude above the Gaussian prediction; "
              "only the trend with heads is comparable to Theorem 3.2.")

METRIC_NAMES = {"eval_acc": "accuracy", "eval_loss": "loss", "glue_avg": "GLUE average"}

METRIC_LABELS = {"eval_acc": "accuracy (evaluation split)", "eval_loss": "loss (evaluation split, nats/token)",
                 "glue_avg": "GLUE average score (evaluation splits)"}


def _agg(frame: pd.DataFrame, keys: list[str], value: str, log: bool = False) -> pd.DataFrame:
    """Per key: mean with its 95% interval over the rows (log: geometric). A +inf value (a singular
    kappa) makes the point +inf, drawn as an off-scale marker (`offscale`); NaN is left out."""
    rows = []
    for key, g in frame.groupby(keys, sort=True):
        vals = g[value].to_numpy(float)
        vals = vals[~np.isnan(vals)]
        if np.isposinf(vals).any():
            mean, lo, hi, n = math.inf, math.nan, math.nan, len(vals)
        else:
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


def _mlp_label(ratio: float) -> str:
    return f"MLP ratio {ratio:g}"


def _spread_note(summary: pd.DataFrame) -> str:
    """Seeds per configuration: '3 seeds', or '3-10 seeds' where configurations have more."""
    axes = [c for c in ("depth", "heads", "width", "head_dim", "mlp_hidden") if c in summary]
    per = summary.groupby(axes)["seed"].nunique() if axes else pd.Series([summary["seed"].nunique()])
    lo, hi = int(per.min()), int(per.max())
    if hi <= 1:
        return "one seed: no interval"
    return f"mean and 95% CI over {lo if lo == hi else f'{lo}-{hi}'} seeds"


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
    plt, sns = pyplot()
    frame = explode_protocols(summary)
    panels = _heads_panels(frame)
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(depths, sns.color_palette("viridis", len(depths))))
    fig, axes = _panel_axes(plt, len(panels))
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
    fig, axes = _grid(plt, len(series), len(panels), width=5.2, height=3.9)
    styles = {"init": "--", "final": "-"}
    any_singular = False
    for row, (col_prefix, name) in enumerate(series):
        for ax, (title, sub) in zip(axes[row], panels):
            for depth in depths:
                for ckpt, ls in styles.items():
                    col = f"kappa_{col_prefix}{ckpt}_gmean"
                    if col not in sub:
                        continue
                    agg = _agg(sub[sub["depth"] == depth].assign(kappa=sub[col]), ["heads"], "kappa", log=True)
                    if len(agg):
                        _errorbars(ax, agg["heads"], agg, palette[depth], None, ls)
                        any_singular |= offscale(ax, agg.loc[np.isinf(agg["mean"]), "heads"], palette[depth])
            log_y(ax)
            log2_axis(ax, sub["heads"])
            ax.set_xlabel("heads h")
            ax.set_ylabel("kappa (geo. mean over layers)")
            method = sub.get(f"kappa_{col_prefix}final_method", pd.Series(dtype=str)).astype(str)
            bound = " (Lanczos: a lower bound)" if method.str.contains("lanczos").any() else ""
            ax.set_title(f"{title}\n{name}{bound}", fontsize=9)
            handles = [Line2D([], [], color=palette[d], marker="o", label=f"depth {d}") for d in depths
                       if (sub["depth"] == d).any()]
            handles += [Line2D([], [], color="grey", linestyle=ls, label="at init" if c == "init" else "trained")
                        for c, ls in styles.items()]
            ax.legend(handles=handles + ([singular_handle()] if any_singular else []), fontsize=7)
    fig.suptitle(f"{study}: condition number vs heads, three measurements (rows)")
    fig.text(0.01, -0.01, KAPPA_NOTE + (" " + SINGULAR_NOTE if any_singular else ""), fontsize=8, wrap=True,
             ha="left", va="top")
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
        log2_axis(ax, sub["heads"])
        ax.set_xlabel("heads h")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(metric, metric)} vs heads per depth "
                 f"(labels: parameters; {_spread_note(summary)})")
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
        log2_axis(ax, widths)
        ax.set_xlabel("MLP hidden width")
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        ax.set_title(proto)
        ax.legend(fontsize=8)
    fig.suptitle(f"{study}: {METRIC_NAMES.get(metric, metric)} vs MLP width "
                 f"(labels: parameters; {_spread_note(summary)})")
    fig.tight_layout()
    return save(fig, prefix)


def theory_curves(theory: pd.DataFrame, prefix: str | Path) -> list[Path]:
    """Theorem 3.2: Monte Carlo kappa of Gaussian head blocks vs heads, against the closed form."""
    plt, sns = pyplot()
    from matplotlib.lines import Line2D

    fig, axes = _grid(plt, 1, 2, height=4.8)  # the legends sit below the panels
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
    fig, axes = _panel_axes(plt, len(depths), width=4.6, height=3.8)
    lines = list(summary.groupby(names, sort=True))
    palette = sns.color_palette("viridis" if len(lines) > 3 else "tab10", len(lines))
    return fig, list(zip(axes, depths)), names, [(key if isinstance(key, tuple) else (key,), g, c)
                                                   for (key, g), c in zip(lines, palette)]


def _rank_axis(ax, ranks):
    log2_axis(ax, ranks)
    ax.set_xlabel("rank (head dim = d_model / heads)")


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
        ax.legend(fontsize=7)
    by = {"modules": "attention budget W", "tokens": "sequence length N", "dim": "dimension d",
          "posn": "positional encoding"}[hue]
    fig.suptitle(f"{study}: farthest-point MSE vs head rank, by {by} (line: min over seeds; band: range)")
    fig.tight_layout()
    return save(fig, prefix)


def perfect_angle(summary: pd.DataFrame, prefix: str | Path, study: str) -> list[Path]:
    """P2 fig_perfect: angle between Q K^T and the identity for 1-layer, 1-head models (180 deg is
    the construction Q K^T = -c I: hard attention to the farthest point)."""
    plt, sns = pyplot()
    fig, (ax,) = _panel_axes(plt, 1, width=5.5)
    single = summary[(summary["depth"] == 1) & (summary["heads"] == 1)]
    if not len(single) or "qk_angle_deg_min" not in single:
        ax.text(0.5, 0.5, "no 1-layer, 1-head model in this study", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    else:
        sns.stripplot(data=single, x="modules", y="qk_angle_deg_min", hue="seed", ax=ax, size=7, jitter=0.1)
        ax.axhline(180, color="grey", linestyle="--", linewidth=1)
        ax.axhline(165, color="red", linestyle=":", linewidth=1, label="acceptance: 165")
        ax.set_xlabel("attention modules W (each with one full-rank head)")
        ax.set_ylabel("angle(W_Q^T W_K, I), least of all heads (deg)")
        ax.legend(fontsize=8, title="data seed")
    fig.suptitle(f"{study}: trained 1-head models learn Q K^T = -c I")
    fig.tight_layout()
    return save(fig, prefix)


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
                    agg = _agg(g.assign(kappa=g[col]), ["head_dim"], "kappa", log=True)
                    _errorbars(ax, agg["head_dim"], agg, color, None, ls)
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
    fig, axes = _panel_axes(plt, max(1, len(panels)))
    if not panels:
        axes[0].text(0.5, 0.5, "no conditioning rows", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return save(fig, prefix)
    heads = sorted(frame["total_heads"].unique())
    depths = sorted(frame["depth"].unique())
    palette = dict(zip(heads, sns.color_palette("plasma", len(heads) + 1)))
    styles = dict(zip(depths, ["-", "--", ":", "-."] * len(depths)))
    for ax, panel in zip(axes, panels):
        sub = frame[frame["panel"] == panel]
        for (h, depth), g in sub.groupby(["total_heads", "depth"], sort=True):
            agg = _agg(g.assign(x=g["fraction"].round(4)), ["x"], "kappa_gmean", log=True)
            ax.plot(agg["x"], agg["mean"].where(np.isfinite(agg["mean"])), color=palette[h], linestyle=styles[depth],
                    marker="o", markersize=4, label=f"{h} head{'s' if h > 1 else ''}, depth {depth}")
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


def write_study_figures(summary_csv: str, study: str, fig_dir: str, kappa_csv: str | None = None,
                        names: list[str] | None = None) -> list[Path]:
    """results/figures/{study}-{name}.{png,pdf} for each of `names`; by default the task's
    figures (the task catalogue's) that the study's grid gives something to show (outputs.study_outputs)."""
    summary = pd.read_csv(summary_csv)
    task = summary["task"].iloc[0]
    if names is None:
        names = study_outputs(task, grid_points(summary.to_dict("records")))[0]
    kappa = pd.read_csv(kappa_csv) if kappa_csv else pd.DataFrame()
    makers = {
        "kappa_through_training": lambda s, p, n: kappa_through_training(kappa, p, n),
        "kappa_vs_heads": kappa_vs_heads, "accuracy_vs_heads": metric_vs_heads, "accuracy_vs_mlp": metric_vs_mlp,
        "loss_vs_heads": lambda s, p, n: metric_vs_heads(s, p, n, "eval_loss"),
        "loss_vs_mlp": lambda s, p, n: metric_vs_mlp(s, p, n, "eval_loss"),
        "glue_vs_heads": lambda s, p, n: metric_vs_heads(s, p, n, "glue_avg"),
        "glue_vs_mlp": lambda s, p, n: metric_vs_mlp(s, p, n, "glue_avg"),
        "mse_vs_rank": lambda s, p, n: mse_vs_rank(s, p, n, "modules"),
        "mse_vs_rank_by_tokens": lambda s, p, n: mse_vs_rank(s, p, n, "tokens", log=False),
        "mse_vs_rank_by_dim": lambda s, p, n: mse_vs_rank(s, p, n, "dim"),
        "mse_vs_rank_by_posn": lambda s, p, n: mse_vs_rank(s, p, n, "posn"),
        "perfect_angle": perfect_angle, "kappa_vs_rank": kappa_vs_rank,
    }
    out = Path(fig_dir)
    known = task_info(task).figures
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no figure {', '.join(unknown)} for task {task} (allowed: {', '.join(known)})")
    return [p for name in names for p in makers[name](summary, out / f"{study}-{name}", study)]


def write_theory_figure(theory_csv: str, fig_dir: str) -> list[Path]:
    return theory_curves(pd.read_csv(theory_csv), Path(fig_dir) / "theory-gaussian_conditioning")
