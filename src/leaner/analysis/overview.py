"""One view of both papers: every trained variant of every study on common axes.

P1 says more heads help (better conditioned attention, so depth can go); P2 says more heads hurt
(at head rank D/h a nearest-point task that one full-rank head solves breaks). Both are about the
same knob, so every study is put on the same footing here:

- a *comparison* holds everything but the head count fixed (study, depth, protocol, MLP ratio;
  for P2 also W, d, N, positions) and sets the configuration with the most heads against the one
  with the fewest: the error difference with a Welch 95% interval over seeds, and a verdict
  (help / hurt / no difference) only when the interval says so with a margin, else unresolved;
- the *relative error* of each configuration is its error over the error of the fewest-heads
  configuration of its comparison group, plotted against heads, head rank as a fraction of the
  model width (1 = a single full-rank head), and depth;
- kappa after training against error: a Spearman correlation per study over configurations with
  a Fisher-z 95% interval, and their pooled (inverse-variance) estimate.

The numbers feed a generated paragraph (findings.md / findings.html) that says where the two
papers' claims meet, from the data, with nothing written in advance.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import atomic_path
from ..tasks import task_info
from .plots import log2_axis, log_x, log_y, offscale, pyplot, save
from .stats import MIN_N_INTERVAL, ci95, fmt_ci, gmean, resolve, spearman_ci, welch
from .summary import explode_protocols
from .tables import lean_vs_baseline, write_table

P2_GROUP = ["depth", "modules", "dim", "tokens", "posn"]

ARCH_GROUP = ["depth", "protocol", "mlp_ratio"]


def _configs(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (and protocol, for P1's tasks): error values over seeds, kappa, rank."""
    task = summary["task"].iloc[0]
    frame = summary.copy()
    if task_info(task).family == "P1":
        frame = explode_protocols(frame)
        frame["model_width"] = frame["width"]
    else:
        frame["model_width"] = frame["head_dim"] * frame["heads"]
        frame["heads"] = frame["heads"] * frame["modules"]  # every head of the layer
    group = ARCH_GROUP if task_info(task).family == "P1" else P2_GROUP
    rows = []
    for key, g in frame.groupby(group + ["heads", "head_dim"], sort=True, dropna=False):
        errors = g["error"].to_numpy(float)
        mean, lo, hi, n = ci95(errors)
        named = list(zip(group, key[:len(group)]))
        rows.append({"study": summary["study"].iloc[0], "task": task, "family": task_info(task).family,
                     "group": ", ".join(f"{k}={v}" for k, v in named),
                     # the same model but for its depth: the group of a depth sweep
                     "depth_group": ", ".join(f"{k}={v}" for k, v in named if k != "depth") +
                     f", heads={g['heads'].iloc[0]}, rank={g['head_dim'].iloc[0]}",
                     "depth": int(g["depth"].iloc[0]), "heads": int(g["heads"].iloc[0]),
                     "rank": int(g["head_dim"].iloc[0]), "model_width": int(g["model_width"].iloc[0]),
                     "rank_fraction": float(g["head_dim"].iloc[0] / g["model_width"].iloc[0]),
                     "params": int(g["params_total"].iloc[0]), "error_mean": mean, "error_lo": lo, "error_hi": hi,
                     "n": n, "errors": errors[np.isfinite(errors)],
                     "kappa_init": gmean(g.get("kappa_init_gmean", [])),
                     "kappa_final": gmean(g.get("kappa_final_gmean", [])),
                     "kappa_jac_final": gmean(g.get("kappa_jac_final_gmean", []))})
    return pd.DataFrame(rows)


def configurations(summaries: list[pd.DataFrame]) -> pd.DataFrame:
    """Every configuration of every study, with its error relative to the fewest-heads
    configuration of its comparison group (NaN where the group has one head count)."""
    frames = [_configs(s) for s in summaries if len(s)]
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    for name, group, axis in (("relative_error", "group", "heads"), ("relative_error_depth", "depth_group", "depth")):
        for col, src in (("", "error_mean"), ("_lo", "error_lo"), ("_hi", "error_hi")):
            out[name + col] = _relative_to(out, group, axis, src)
    return out


def _relative_to(configs: pd.DataFrame, group: str, axis: str, column: str = "error_mean") -> pd.Series:
    """`column` of each configuration over the mean error of the smallest `axis` value in its
    group (for the interval bounds: the configuration's interval, the reference's mean)."""
    rel = {}
    for _, g in configs.groupby(["study", group], sort=False):
        ref = g.loc[g[axis].idxmin(), "error_mean"]
        for idx, value in g[column].items():
            rel[idx] = value / ref if ref > 0 else math.nan
    return pd.Series(rel)


def verdict(lo: float, hi: float) -> str:
    """On an error difference (more heads minus fewer heads): lower error is better; called only
    with the margin of `aggregate.resolve`, else unresolved."""
    return {"n/a": "n/a (one seed)", "below": "more heads help", "above": "more heads hurt",
            "includes zero": "no difference", "unresolved": "unresolved"}[resolve(lo, hi)]


def heads_effect(configs: pd.DataFrame) -> pd.DataFrame:
    """Per comparison group with two head counts or more: most heads against fewest."""
    rows = []
    for (study, group), g in configs.groupby(["study", "group"], sort=False):
        if g["heads"].nunique() < 2:
            continue
        few, many = g.loc[g["heads"].idxmin()], g.loc[g["heads"].idxmax()]
        diff, lo, hi = welch(many["errors"], few["errors"])
        rows.append({"study": study, "family": few["family"], "group": group,
                     "heads": f"{few['heads']} -> {many['heads']}", "rank": f"{few['rank']} -> {many['rank']}",
                     "rank_fraction_many": many["rank_fraction"],
                     "params": f"{few['params']} -> {many['params']}",
                     "error_few": few["error_mean"], "error_many": many["error_mean"],
                     "delta_error": diff, "delta_lo": lo, "delta_hi": hi,
                     "n": f"{len(few['errors'])}, {len(many['errors'])}", "verdict": verdict(lo, hi)})
    return pd.DataFrame(rows)


def kappa_error_correlation(configs: pd.DataFrame) -> pd.DataFrame:
    """Per study: Spearman(kappa after training, error) and Spearman(kappa at init, kappa after
    training) over its configurations; a pooled row for each (inverse-variance on Fisher z)."""
    rows = []
    for study, g in configs.groupby("study", sort=False):
        configs_once = g.drop_duplicates(["depth", "heads", "rank", "model_width", "params"])
        rho, lo, hi, n = spearman_ci(configs_once["kappa_final"], configs_once["error_mean"])
        rho_t, lo_t, hi_t, _ = spearman_ci(configs_once["kappa_init"], configs_once["kappa_final"])
        jac = configs_once.get("kappa_jac_final", pd.Series(math.nan, index=configs_once.index))
        rho_j, lo_j, hi_j, _ = spearman_ci(jac, configs_once["error_mean"])
        rows.append({"study": study, "family": g["family"].iloc[0], "configurations": n,
                     "rho_kappa_error": rho, "lo": lo, "hi": hi,
                     "rho_init_final": rho_t, "lo_init_final": lo_t, "hi_init_final": hi_t,
                     "rho_jacobian_error": rho_j, "lo_jacobian": lo_j, "hi_jacobian": hi_j})
    frame = pd.DataFrame(rows)
    if len(frame):
        pooled_rows = []
        for family, part in [*((f, frame[frame["family"] == f]) for f in ("P1", "P2")), ("all", frame)]:
            usable = part[part["configurations"] >= MIN_N_INTERVAL]
            if family != "all" and len(usable) == len(frame[frame["configurations"] >= MIN_N_INTERVAL]):
                continue  # one family only: the "all" row says it
            pooled = {"study": "pooled" if family == "all" else f"pooled {family}", "family": family,
                      "configurations": int(usable["configurations"].sum())}
            for col, lo_col, hi_col in (("rho_kappa_error", "lo", "hi"),
                                        ("rho_init_final", "lo_init_final", "hi_init_final"),
                                        ("rho_jacobian_error", "lo_jacobian", "hi_jacobian")):
                pooled.update(zip((col, lo_col, hi_col), _pool(usable[col], usable["configurations"])))
            pooled_rows.append(pooled)
        frame = pd.concat([frame, pd.DataFrame(pooled_rows)], ignore_index=True)
    return frame


def _pool(rhos: pd.Series, ns: pd.Series) -> tuple[float, float, float]:
    """Inverse-variance pooling of Fisher's z over studies with at least MIN_N_INTERVAL points."""
    ok = rhos.notna() & (ns >= MIN_N_INTERVAL)
    if not ok.any():
        return math.nan, math.nan, math.nan
    z = np.arctanh(np.clip(rhos[ok].to_numpy(float), -0.99, 0.99))
    w = (ns[ok].to_numpy(float) - 3) / 1.06
    zbar, se = float((w * z).sum() / w.sum()), math.sqrt(1 / w.sum())
    return math.tanh(zbar), math.tanh(zbar - 1.96 * se), math.tanh(zbar + 1.96 * se)


def headline(summaries: list[pd.DataFrame], effects: pd.DataFrame) -> pd.DataFrame:
    """The findings the README states, one row each, all with a verdict under the margin of
    `aggregate.resolve`: every most-vs-fewest-heads comparison (error, more heads minus fewer) and,
    for each P1 study that varies depth, P1's trade: the shallowest model with the most heads
    against the deepest with the fewest at the same width and MLP (the study's metric, shallow
    minus deep; `lean_vs_baseline` with its default baseline)."""
    rows = [{"study": r["study"], "comparison": f"{r['group']}: heads {r['heads']}", "measure": "error",
             "delta": r["delta_error"], "lo": r["delta_lo"], "hi": r["delta_hi"], "n": r["n"],
             "verdict": r["verdict"]} for _, r in effects.iterrows()]
    for summary in summaries:
        task = summary["task"].iloc[0] if len(summary) else None
        if task is None or task_info(task).family != "P1" or summary["depth"].nunique() < 2:
            continue
        metric, mode = task_info(task).metric
        lean = lean_vs_baseline(summary, {}, metric, mode)
        if not len(lean):
            continue
        same = lean[(lean["width"] == summary["width"].max()) & (lean["depth"] == lean["depth"].min())]
        same = same[same["mlp_hidden"] == same["mlp_hidden"].min()]
        if not len(same):
            continue
        r = same.loc[same["heads"].idxmax()]
        rows.append({"study": summary["study"].iloc[0],
                     "comparison": f"L{r['depth']}/H{r['heads']} ({r['params'] / 1e3:.1f}k params) against "
                                   f"{r['baseline'].split('-D')[0].replace('-', '/')} "
                                   f"({r['baseline_params'] / 1e3:.1f}k)",
                     "measure": metric, "delta": r[f"delta_{metric}"], "lo": r["delta_lo"], "hi": r["delta_hi"],
                     "n": str(r["n"]), "verdict": r["verdict"]})
    return pd.DataFrame(rows, columns=["study", "comparison", "measure", "delta", "lo", "hi", "n", "verdict"])


def headline_markdown(frame: pd.DataFrame) -> str:
    """The README's findings table: the difference and its 95% interval to 3 decimals, the verdict."""
    lines = ["| study | comparison | measure | difference [95% CI] | n | verdict |", "|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        ci = "" if math.isnan(r["lo"]) else f" [{r['lo']:+.3f}, {r['hi']:+.3f}]"
        lines.append(f"| `{r['study']}` | {r['comparison']} | {r['measure']} | {r['delta']:+.3f}{ci} | {r['n']} | "
                     f"{r['verdict']} |")
    return "\n".join(lines) + "\n"


def findings(configs: pd.DataFrame, effects: pd.DataFrame, corr: pd.DataFrame) -> list[str]:
    """The summary paragraphs, each sentence computed from the tables."""
    studies = list(dict.fromkeys(configs["study"]))
    paras = [f"{len(configs.drop_duplicates(['study', 'depth', 'heads', 'rank', 'params']))} configurations of "
             f"{len(studies)} studies ({', '.join(studies)}). Error is 1 - accuracy (classification), the loss "
             f"(language modelling, P2's MSE) or 1 - GLUE average; intervals are 95% over seeds, and a difference "
             f"is called one only when its interval clears zero by a quarter of its half-width (else it is "
             f"unresolved: a re-run on another machine could reverse it)."]
    for family, label in (("P1", "P1's tasks (more heads at equal or lower head rank)"),
                          ("P2", "P2's nearest-point task (rank d/h)")):
        e = effects[effects["family"] == family] if len(effects) else effects
        if not len(e):
            continue
        counts = e["verdict"].value_counts()
        kinds = ("more heads help", "more heads hurt", "no difference", "unresolved", "n/a (one seed)")
        parts = [f"{counts.get(v, 0)} {v}" for v in kinds if counts.get(v, 0)]
        paras.append(f"{label}: of {len(e)} comparison{'s' if len(e) > 1 else ''} of most against fewest heads, "
                     + ", ".join(parts) + ".")
    if len(effects):
        hurt = effects[effects["verdict"] == "more heads hurt"]
        fine = effects[effects["verdict"].isin(["more heads help", "no difference"])]
        if len(hurt) and len(fine):
            hurt_rf, fine_rf = hurt["rank_fraction_many"], fine["rank_fraction_many"]
            text = (f"Where they meet: more heads hurt in {', '.join(sorted(set(hurt['study'])))} (head rank "
                    f"{hurt_rf.min():.3g}-{hurt_rf.max():.3g} of the width after the split) and did not hurt in "
                    f"{', '.join(sorted(set(fine['study'])))} (head rank {fine_rf.min():.3g}-{fine_rf.max():.3g} of "
                    f"the width). ")
            if fine_rf.min() < hurt_rf.max():
                text += (f"Head rank alone does not divide them: models that kept only {fine_rf.min():.3g} of the "
                         f"width per head did not suffer where others lost at {hurt_rf.max():.3g}. ")
            else:
                text += "Here the head rank divides them: every loss came at a higher rank fraction than every gain. "
            if set(hurt["family"]) == {"P2"} and set(fine["family"]) == {"P1"}:
                text += ("Every loss is on P2's nearest-point task, which one full-rank head solves, and no P1 "
                         "comparison with an interval lost: what decides is whether the task needs full-rank "
                         "attention, as P2 argues.")
            paras.append(text)
        elif len(hurt):
            paras.append(f"More heads hurt in {', '.join(sorted(set(hurt['study'])))} and helped nowhere with an "
                         f"interval excluding zero.")
        elif len(fine):
            paras.append("More heads hurt in no comparison with an interval; P2's failure mode did not appear "
                         "in these studies.")
    if len(corr):
        pooled = corr[corr["study"] == "pooled"].iloc[0]
        studies_only = corr[~corr["study"].str.startswith("pooled")]
        per = "; ".join(f"{r['study']} {fmt_ci(r['rho_kappa_error'], r['lo'], r['hi'])} (n={r['configurations']})"
                        for _, r in studies_only.iterrows())
        families = []
        for family in ("P1", "P2"):
            row = corr[corr["study"] == f"pooled {family}"]
            row = row.iloc[0] if len(row) else (pooled if set(studies_only["family"]) == {family} else None)
            if row is not None and not math.isnan(row["rho_kappa_error"]):
                families.append(f"{family}'s tasks {fmt_ci(row['rho_kappa_error'], row['lo'], row['hi'])}: "
                                f"{_association(row['lo'], row['hi'])}")
        paras.append(f"kappa after training against error, Spearman over configurations (a positive rho: better-"
                     f"conditioned attention goes with lower error). Pooled by family: {'; '.join(families) or 'n/a'}. "
                     f"All studies pooled: {fmt_ci(pooled['rho_kappa_error'], pooled['lo'], pooled['hi'])}. "
                     f"Per study: {per} (no interval below {MIN_N_INTERVAL} configurations; pooling uses the "
                     f"studies with an interval).")
        if "rho_jacobian_error" in pooled and not math.isnan(pooled["rho_jacobian_error"]):
            jac = []
            for family in ("P1", "P2"):
                row = corr[corr["study"] == f"pooled {family}"]
                if len(row):
                    r = row.iloc[0]
                    jac.append(f"{family}'s tasks {fmt_ci(r['rho_jacobian_error'], r['lo_jacobian'], r['hi_jacobian'])}"
                               f": {_association(r['lo_jacobian'], r['hi_jacobian'])}")
            paras.append(f"The same for kappa of the attention block's Jacobian (P1's revised wording), by family: "
                         f"{'; '.join(jac) or 'n/a'}; all studies pooled: "
                         f"{fmt_ci(pooled['rho_jacobian_error'], pooled['lo_jacobian'], pooled['hi_jacobian'])}.")
        init = fmt_ci(pooled["rho_init_final"], pooled["lo_init_final"], pooled["hi_init_final"])
        lo_t, hi_t = pooled["lo_init_final"], pooled["hi_init_final"]
        survives = {"n/a": "too few configurations to say whether the ordering by kappa at initialisation survives",
                    "above": "the ordering of configurations by kappa at initialisation survives training",
                    "below": "training reverses the ordering by kappa at initialisation",
                    "includes zero": "the interval cannot tell whether the ordering by kappa at initialisation "
                                     "survives",
                    "unresolved": "unresolved: the interval comes within the margin of zero"}[resolve(lo_t, hi_t)]
        paras.append(f"Does conditioning at initialisation survive training? Spearman(kappa at init, kappa after "
                     f"training), pooled: {init}: {survives} (the kappa_through_training figures show each path).")
    return paras


def _association(lo: float, hi: float) -> str:
    return {"n/a": "too few configurations for an interval",
            "above": "better-conditioned attention goes with lower error",
            "below": "better-conditioned attention goes with higher error",
            "includes zero": "the interval includes zero",
            "unresolved": "unresolved (the interval comes within the margin of zero)"}[resolve(lo, hi)]


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
        g = g.drop_duplicates(["depth", "heads", "rank", "model_width", "params"])
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


def _html_page(title: str, paras: list[str], tables: list[tuple[str, pd.DataFrame]]) -> str:
    body = [f"<h2>{html.escape(title)}</h2>"] + [f"<p>{html.escape(p)}</p>" for p in paras]
    for caption, frame in tables:
        body.append(f"<h3>{html.escape(caption)}</h3>")
        body.append(frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="", border=0))
    style = ("body{font-family:sans-serif;max-width:70em;margin:1em auto;line-height:1.45}"
             "table{border-collapse:collapse;font-size:0.85em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_overview(summary_csvs: list[str], fig_dir: str, table_dir: str, findings_prefix: str) -> list[Path]:
    summaries = [pd.read_csv(p) for p in summary_csvs]
    configs = configurations(summaries)
    effects = heads_effect(configs)
    corr = kappa_error_correlation(configs)
    heads = headline(summaries, effects)
    paths = overview_figure(configs, corr, Path(fig_dir) / "all_studies-overview")
    shown = configs.drop(columns=["errors"])
    paths += write_table(shown, Path(table_dir) / "all_studies-kappa_rank_error",
                         "Every study: heads, rank, depth, error (mean, 95% interval, n) and kappa per configuration")
    paths += write_table(effects, Path(table_dir) / "all_studies-heads_effect",
                         "Most against fewest heads in each comparison group: error difference, Welch 95% interval")
    paths += write_table(corr, Path(table_dir) / "all_studies-kappa_error_correlation",
                         "Spearman rho of kappa after training with error, and of kappa at init with after "
                         "training, per study over configurations (Fisher-z 95% interval), and pooled")
    paths += write_table(heads, Path(table_dir) / "all_studies-headline",
                         "The headline comparisons: difference with its Welch 95% interval and a verdict only where "
                         "the interval clears zero by a quarter of its half-width (else unresolved)")
    paras = findings(configs, effects, corr)
    prefix = Path(findings_prefix)
    with atomic_path(prefix.with_suffix(".md")) as tmp:
        tmp.write_text("# Both papers in one view\n\n" + "\n\n".join(paras) + "\n\n## Headline comparisons\n\n"
                       + headline_markdown(heads))
    with atomic_path(prefix.with_suffix(".html")) as tmp:
        tmp.write_text(_html_page("Both papers in one view", paras,
                                  [("Most against fewest heads", effects), ("kappa and error", corr)]))
    return paths + [prefix.with_suffix(".md"), prefix.with_suffix(".html")]
