"""One view of both papers: every trained variant of every study on common axes.

P1 says more heads help (better conditioned attention, so depth can go); P2 says more heads hurt
(at head rank D/h a nearest-point task that one full-rank head solves breaks). Both are about the
same knob, so every study is put on the same footing here:

- a *comparison* holds everything but the head count fixed (study, depth, protocol, MLP ratio;
  for P2 also W, d, N, positions) and sets the configuration with the most heads against the one
  with the fewest: the error difference with a Welch 95% interval over seeds, and a verdict
  (help / hurt) only when the interval says so with a margin, inconclusive when it spans zero,
  else unresolved;
- the *relative error* of each configuration is its error over the error of the fewest-heads
  configuration of its comparison group, plotted against heads, head rank as a fraction of the
  model width (1 = a single full-rank head), and depth;
- kappa after training against error: a Spearman correlation per study over configurations with
  a Fisher-z 95% interval, and their pooled (inverse-variance) estimate.

The numbers feed a generated paragraph (findings.md / findings.html) that says where the two
papers' claims meet, from the data, with nothing written in advance; and the overview figure
(`overview_figure`): relative error against heads, head rank and depth, and kappa against error.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..compute.numerics import UNRECORDED, describe_mix, is_mixed, join_labels, split_labels
from ..io import atomic_path
from ..models.config import AXIS_DEFAULTS
from ..tasks import task_info
from .findings import CLAIM_WORDS, claim_findings, effects_markdown, findings, headline_markdown
from .kappa_within import kappa_within_table
from .plots import captioned, log2_axis, log_x, log_y, offscale, pyplot, save
from .stats import MIN_N_INTERVAL, ci95, fmt_ci, gmean, interval_se, resolve, spearman_ci, verdicts_elsewhere, welch
from .summary import (
    complete_axes,
    explode_protocols,
    independent_replicates,
    learned_rows,
    not_learned,
    read_summary,
    replicates_of,
)
from .table_render import write_table
from .tables import AS_DECLARED, CLAIMS_COLUMNS
from .trade import trade_paragraph, trade_table

P2_GROUP = ["depth", "modules", "dim", "tokens", "posn"]


ARCH_GROUP = ["depth", "protocol", "mlp_ratio", "qk_scale"]


def _configs(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (and protocol, for P1's tasks): error values over seeds, kappa, rank."""
    task = summary["task"].iloc[0]
    frame = complete_axes(summary).copy()
    if task_info(task).family == "P1":
        frame = explode_protocols(frame)
        frame["model_width"] = frame["width"]
    else:
        frame["model_width"] = frame["head_dim"] * frame["heads"]
        frame["heads"] = frame["heads"] * frame["modules"]  # every head of the layer
    group = ARCH_GROUP if task_info(task).family == "P1" else P2_GROUP
    rows = []
    for key, g in frame.groupby(group + ["heads", "head_dim"], sort=True, dropna=False):
        # seeds that did not beat chance (summary.learned) are counted, and left out of the error and
        # kappa (all kept where none learned: its verdicts say so); NaN where the task has no chance level
        stuck, runs = not_learned(g), len(g)
        g = learned_rows(g)
        errors = g["error"].to_numpy(float)
        mean, lo, hi, n = ci95(errors)
        replicate = replicates_of(g.assign(task=task))
        if not independent_replicates(g.assign(task=task)):  # P2's seeds share init 613 and 6 of 7 streams
            lo = hi = math.nan
        # an axis at its default (a logit scale of 1) is left out of the group's name
        named = [(k, v) for k, v in zip(group, key[:len(group)]) if AXIS_DEFAULTS.get(k, object()) != v]
        rows.append({"study": summary["study"].iloc[0], "task": task, "family": task_info(task).family,
                     "group": ", ".join(f"{k}={v}" for k, v in named),
                     # the same model but for its depth: the group of a depth sweep
                     "depth_group": ", ".join(f"{k}={v}" for k, v in named if k != "depth") +
                     f", heads={g['heads'].iloc[0]}, rank={g['head_dim'].iloc[0]}",
                     "depth": int(g["depth"].iloc[0]), "heads": int(g["heads"].iloc[0]),
                     "rank": int(g["head_dim"].iloc[0]), "model_width": int(g["model_width"].iloc[0]),
                     "qk_scale": float(g["qk_scale"].iloc[0]) if "qk_scale" in g else math.nan,
                     "rank_fraction": float(g["head_dim"].iloc[0] / g["model_width"].iloc[0]),
                     "params": int(g["params_total"].iloc[0]), "error_mean": mean, "error_lo": lo, "error_hi": hi,
                     "n": n, "errors": errors[np.isfinite(errors)],
                     "not_learned": stuck, "learned_none": stuck == runs,
                     "kappa_init": gmean(g.get("kappa_init_gmean", [])),
                     "kappa_final": gmean(g.get("kappa_final_gmean", [])),
                     "kappa_jac_final": gmean(g.get("kappa_jac_final_gmean", [])),
                     "numerics": join_labels(g.get("numerics", pd.Series([UNRECORDED] * len(g)))),
                     "replicate": REPLICATE_LABELS.get(replicate, replicate)})
    return pd.DataFrame(rows)


def numerics_paragraph(summaries: list[pd.DataFrame]) -> str:
    """What findings.md says of the numerics its results were computed under: one line, and each
    study whose comparisons mix results made under different numerics."""
    labels = [v for s in summaries if len(s) for v in s.get("numerics", pd.Series([UNRECORDED] * len(s)))]
    text = f"Numerics: {describe_mix(labels)}."
    mixed = [s["study"].iloc[0] for s in summaries if len(s) and is_mixed(s.get("numerics", []))]
    if mixed:
        text += (f" Within {', '.join(mixed)}, results computed under different numerics are compared with each "
                 f"other: their differences mix the effect studied with the platform's (docs/numerics.md).")
    return text


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


# what the n of a comparison counts (summary.REPLICATES); only independent ones get an interval
REPLICATE_LABELS = {"P1": "seed", "independent": "independent seed",
                    "paper": "P2 data seed (shared init 613 and streams)"}
NOT_INDEPENDENT = "n/a (replicates not independent)"


def verdict(lo: float, hi: float) -> str:
    """On an error difference (more heads minus fewer heads): lower error is better; called only
    with the margin of `aggregate.resolve`, else unresolved."""
    return {"n/a": "n/a (one seed)", "below": "more heads help", "above": "more heads hurt",
            "includes zero": "inconclusive", "unresolved": "unresolved"}[resolve(lo, hi)]


def heads_effect(configs: pd.DataFrame) -> pd.DataFrame:
    """Per comparison group with two head counts or more: most heads against fewest."""
    rows = []
    for (study, group), g in configs.groupby(["study", "group"], sort=False):
        if g["heads"].nunique() < 2:
            continue
        few, many = g.loc[g["heads"].idxmin()], g.loc[g["heads"].idxmax()]
        diff, lo, hi = welch(many["errors"], few["errors"])
        shared = REPLICATE_LABELS["paper"] in (few.get("replicate"), many.get("replicate"))
        if shared:  # P2's data seeds share one init and most streams: no interval across them
            lo = hi = math.nan
        se = interval_se(lo, hi, len(many["errors"]), len(few["errors"]), 0.95)
        stuck = [f"L{r['depth']}/H{r['heads']}" for r in (few, many) if r.get("learned_none", False)]
        left_out = [r.get("not_learned", 0) for r in (few, many)]
        rows.append({"study": study, "family": few["family"], "group": group,
                     "heads": f"{few['heads']} -> {many['heads']}", "rank": f"{few['rank']} -> {many['rank']}",
                     "rank_fraction_many": many["rank_fraction"],
                     "params": f"{few['params']} -> {many['params']}",
                     "error_few": few["error_mean"], "error_many": many["error_mean"],
                     "delta_error": diff, "delta_lo": lo, "delta_hi": hi,
                     "n": f"{len(few['errors'])}, {len(many['errors'])}" + (
                         f" (did not learn: {left_out[0]:.0f}, {left_out[1]:.0f})" if np.nansum(left_out) else ""),
                     "replicate": many.get("replicate", REPLICATE_LABELS["P1"]),
                     "verdict": f"did not learn: {', '.join(stuck)}" if stuck else
                     NOT_INDEPENDENT if shared and len(many["errors"]) > 1 else verdict(lo, hi),
                     # what another platform could read (stats.verdicts_elsewhere); empty without an interval
                     "elsewhere": "" if stuck else " / ".join(verdicts_elsewhere(lo, hi, se, verdict)),
                     # the two sides' results were computed under different numerics (the caption names them)
                     "numerics_mixed": is_mixed(split_labels(few.get("numerics", UNRECORDED))
                                                + split_labels(many.get("numerics", UNRECORDED)))})
    return pd.DataFrame(rows)


def kappa_error_correlation(configs: pd.DataFrame) -> pd.DataFrame:
    """Per study: Spearman(kappa after training, error) and Spearman(kappa at init, kappa after
    training) over its configurations; a pooled row for each (inverse-variance on Fisher z)."""
    rows = []
    for study, g in configs.groupby("study", sort=False):
        configs_once = g.drop_duplicates([k for k in ("depth", "heads", "rank", "model_width", "params", "qk_scale")
                                          if k in g])
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


HEADLINE_COLUMNS = ["study", *(c for c in CLAIMS_COLUMNS if c != "seeds_missing")]


def headline(claims: list[pd.DataFrame]) -> pd.DataFrame:
    """The findings the README states: every study's declared claims (tables.claims_table, one CSV
    per study that declares any) judged as declared before their runs (tables.AS_DECLARED),
    baseline first within each claim; positive difference = lean better, whatever the metric."""
    parts = [c[c["declaration"] == AS_DECLARED] if "declaration" in c else c.iloc[:0] for c in claims]
    parts = [c for c in parts if len(c)]
    if not parts:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    return pd.concat(parts, ignore_index=True).reindex(columns=HEADLINE_COLUMNS)


def _html_page(title: str, paras: list[str], tables: list[tuple[str, pd.DataFrame]]) -> str:
    body = [f"<h2>{html.escape(title)}</h2>"] + [f"<p>{html.escape(p)}</p>" for p in paras]
    for caption, frame in tables:
        body.append(f"<h3>{html.escape(caption)}</h3>")
        body.append(frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="", border=0))
    style = ("body{font-family:sans-serif;max-width:70em;margin:1em auto;line-height:1.45}"
             "table{border-collapse:collapse;font-size:0.85em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def kappa_within_rows(summaries: list[pd.DataFrame]) -> pd.DataFrame:
    """Every P1 study's kappa_within table (kappa against its metric within a configuration), with
    its study."""
    parts = [kappa_within_table(s, *task_info(s["task"].iloc[0]).metric).assign(
                 study=s["study"].iloc[0], metric=task_info(s["task"].iloc[0]).metric[0])
             for s in summaries if len(s) and task_info(s["task"].iloc[0]).family == "P1"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


@captioned("overview", (
        "Both papers in one view: every configuration of every study (circles: P1's tasks, squares: P2's).\n"
        "Top left: error relative to the fewest-heads configuration of its comparison group (everything\n"
        "but the head count fixed) against the number of heads: below the dashed line more heads help,\n"
        "above they hurt. Top right: the same against head rank as a fraction of the model width (1 = one\n"
        "full-rank head). Bottom left: error relative to the shallowest model with the same heads and\n"
        "rank, against depth. Bottom right: kappa after training against error (scaled by each study's\n"
        "median), filled markers for the head outputs before W_O and open ones for the attention block's\n"
        "Jacobian, with each study's Spearman rho and its Fisher-z 95% interval for each, and the pooled\n"
        "estimates. A singular kappa is an open triangle on the right edge (ranked above every finite\n"
        "value in rho, not plotted as a magnitude).\n"
        "Error bars: the configuration's 95% interval over seeds divided by the reference's mean.\n"
        "The generated findings say what these show.\n"
    ))
@captioned("kappa_rank_error", (
        "Every configuration of every study: heads (all heads of a layer), head rank and its fraction of\n"
        "the model width, depth, parameters, error (mean, 95% interval, n over seeds; 1 - accuracy, the\n"
        "loss, or P2's MSE), kappa at initialisation and after training, and the error relative to the\n"
        "fewest-heads and to the shallowest configuration of its group.\n"
    ))
@captioned("heads_effect", (
        "The heads comparisons behind the findings: in each group with everything but the head count\n"
        "fixed, the configuration with the most heads against the one with the fewest: head rank, error of\n"
        "each, the difference with a Welch 95% interval over seeds, and the verdict (more heads help /\n"
        "hurt, inconclusive where the interval spans zero, or unresolved where the interval comes within a "
        "quarter of its half-width of zero; n/a with one seed).\n"
    ))
@captioned("kappa_error_correlation", (
        "Per study, over its configurations: Spearman's rho of kappa after training with error, and of\n"
        "kappa at initialisation with kappa after training, each with a Fisher-z 95% interval\n"
        "(SE sqrt(1.06 / (n - 3))); the pooled row combines the studies by inverse-variance weighting of\n"
        "Fisher's z. A positive rho of kappa with error means better-conditioned attention goes with lower\n"
        "error.\n"
    ))
@captioned("headline", (
        "The findings the README states, regenerated by every run: the claims each study declared in its\n"
        "config before the run (``claims:``), baseline first. Each lean configuration's difference from the\n"
        "baseline is signed so that positive means the lean model is better (for a loss as for an\n"
        "accuracy), with its one-sided 95% Welch bounds over the declared seeds and the declared margin:\n"
        "superior, equivalent (two one-sided tests within the margin), non-inferior, inferior, or\n"
        "inconclusive; a one-seed claim gives direction and size only. The heads comparisons are in\n"
        "``all_studies-heads_effect``.\n"
    ))
@captioned("where_trade_holds", (
        "Where P1's rule holds, regenerated by every run: each declared test of the trade as judged. A\n"
        "depth trade (lean models of more heads and fewer layers against the conventional baseline, with\n"
        "a control: the lean depth without the added heads) held where the control is inferior and every\n"
        "lean model non-inferior, failed where a lean model is inferior too, and is not testable where the\n"
        "control is not shown to cost. A claim of P2's task is a heads test (more heads in all) or a rank\n"
        "test (the same count at a lower rank): held where the lean models are non-inferior, failed where\n"
        "one is inferior. One-seed claims are descriptive.\n"
    ))
def write_overview(summary_csvs: list[str], fig_dir: str, table_dir: str, findings_prefix: str,
                   claim_csvs: list[str] = ()) -> list[Path]:
    summaries = [read_summary(p) for p in summary_csvs]
    configs = configurations(summaries)
    effects = heads_effect(configs)
    corr = kappa_error_correlation(configs)
    words = {"keep_default_na": False, "na_values": [""]}  # verdicts and "n/a" are words, not missing values
    heads = headline([pd.read_csv(p, **words).assign(study=_study_of(p)) for p in claim_csvs])
    paths = overview_figure(configs, corr, Path(fig_dir) / "all_studies-overview")
    shown = configs.drop(columns=["errors", "numerics"], errors="ignore")
    note = numerics_paragraph(summaries)
    paths += write_table(shown, Path(table_dir) / "all_studies-kappa_rank_error",
                         "Every study: heads, rank, depth, error (mean, 95% interval over replicates, n) and kappa per "
                         "configuration (`replicate`: what n counts; P2's data seeds under its code's shared init and "
                         "streams are not independent and get no interval). "
                         + note)
    paths += write_table(effects, Path(table_dir) / "all_studies-heads_effect",
                         "Most against fewest heads in each comparison group: error difference, Welch 95% interval "
                         "over replicates (`replicate`: what n counts; P2's data seeds under its code's shared init "
                         "and streams are not independent and get no interval); "
                         "numerics_mixed: its two sides were computed under different numerics. " + note)
    paths += write_table(corr, Path(table_dir) / "all_studies-kappa_error_correlation",
                         "Spearman rho of kappa after training with error, and of kappa at init with after "
                         "training, per study over configurations (Fisher-z 95% interval), and pooled")
    paths += write_table(heads, Path(table_dir) / "all_studies-headline",
                         "The claims each study declared before its run and judged as declared (a claim changed "
                         "after its runs, or run on other seeds, is left out: its study's claims table says which), "
                         "baseline first, then the lean models and the control: the difference from the baseline "
                         "(+: better), its one-sided 95% bounds, the margin, the verdict and whether it supports "
                         "the declared hypothesis")
    trade = trade_table(heads, {s["study"].iloc[0]: s["task"].iloc[0] for s in summaries if len(s)})
    paths += write_table(trade, Path(table_dir) / "all_studies-where_trade_holds",
                         "Where P1's rule holds: each declared test of the trade as judged. A depth trade (lean "
                         "models of more heads and fewer layers, with a control) held where the control is inferior "
                         "and every lean model non-inferior, failed where a lean model is inferior too, is not "
                         "testable where the control is not inferior; a P2 heads or rank test held where the lean "
                         "models are non-inferior, failed where one is inferior (analysis/trade.py)")
    paras = (findings(configs, effects, corr, kappa_within_rows(summaries)) + [CLAIM_WORDS] * bool(len(heads))
             + claim_findings(heads) + trade_paragraph(trade) + [note])
    sections = [("Declared claims", heads, headline_markdown(heads) if len(heads) else "No study declares claims.\n"),
                ("Most against fewest heads", effects, effects_markdown(effects))]
    prefix = Path(findings_prefix)
    with atomic_path(prefix.with_suffix(".md")) as tmp:
        tmp.write_text("# Both papers in one view\n\n" + "\n\n".join(paras) + "\n"
                       + "".join(f"\n## {title}\n\n{text}" for title, _, text in sections))
    with atomic_path(prefix.with_suffix(".html")) as tmp:
        tmp.write_text(_html_page("Both papers in one view", paras,
                                  [*((title, frame) for title, frame, _ in sections), ("kappa and error", corr)]))
    return paths + [prefix.with_suffix(".md"), prefix.with_suffix(".html")]


def _study_of(claims_csv: str) -> str:
    """The study of results/tables/{study}-claims.csv."""
    return Path(claims_csv).name.removesuffix("-claims.csv")


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
