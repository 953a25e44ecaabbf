"""Tables from summary.csv: per configuration over seeds, lean against baseline, P2's acceptance
checks, the claims, GLUE per task. Each is a data frame; table_render writes it. (What the jobs
cost: job_costs.py.)"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from ..io import unpack_outcomes
from ..models.config import AXIS_DEFAULTS
from ..tasks import task_info
from .stats import (
    CLAIM_VERDICTS,
    bounds_verdict,
    ci95,
    ci95_cut,
    claim_verdict,
    gmean,
    interval_se,
    kept_share,
    paired_bootstrap,
    resolve,
    verdicts_elsewhere,
    welch,
)
from .summary import ARCH, axes, config_values, independent_replicates, is_arch, learned_rows, not_learned


def by_config(summary: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Per architecture: mean with its 95% interval cut to the metric's range (stats.ci95_cut, as
    the figures draw it), min, max and n over seeds (P2 reports the min over seeds and the range);
    kappa as geometric means. Over the seeds that learned (summary.learned_rows): `not_learned`
    counts the others (NaN where the task has no chance level), and n does not."""
    task = summary["task"].iloc[0]
    keys, metric = axes(task), metric or task_info(task).metric[0]
    rows = []
    independent = independent_replicates(summary)
    for key, g in summary.groupby(keys, sort=True):
        stuck, diverged, g = not_learned(g), int((g["status"] != "ok").sum()), learned_rows(g)
        mean, lo, hi, n = ci95_cut(g[metric], metric)
        if not independent:  # P2's seeds share init and streams: no interval across them
            lo = hi = math.nan
        row = dict(zip(keys, key))
        if "protocols" in g and is_arch(task):
            row["protocols"] = g["protocols"].iloc[0]
        row.update({"params": int(g["params_total"].iloc[0]), f"{metric}_mean": mean, f"{metric}_lo": lo,
                    f"{metric}_hi": hi, f"{metric}_min": g[metric].min(), f"{metric}_max": g[metric].max(),
                    "n": n, "not_learned": stuck, "diverged": diverged})  # every run, learned or not
        if not is_arch(task) and "eval_mse" in g:  # P2: the fresh-point MSE beside the training metric
            row["eval_mse_min"], row["eval_mse_mean"] = g["eval_mse"].min(), g["eval_mse"].mean()
        if "train_loss_last_quarter_fall" in g:  # flat at the end (a plateau), or still falling
            row["last_quarter_fall_max"] = g["train_loss_last_quarter_fall"].max()
        for col in ("kappa_init_gmean", "kappa_final_gmean", "kappa_jac_init_gmean", "kappa_jac_final_gmean"):
            if col in g:
                row[col] = gmean(g[col])
        rows.append(row)
    return pd.DataFrame(rows)


def acceptance_checks(summary: pd.DataFrame, checks) -> pd.DataFrame:
    """P2's acceptance checks (papers.md 2.7) named in `checks`, wherever the study's grid holds
    the points a check needs; per configuration the min over seeds, as in P2's plots, over the
    seeds that learned (`runs`: how many of them, of how many)."""
    configs = by_config(summary)
    metric = "best_train_loss_min"
    rows = []
    one_layer = configs[configs["depth"] == 1] if "full_rank_gap" in checks else configs.iloc[:0]
    for (w, d, n, posn), g in one_layer.groupby(["modules", "dim", "tokens", "posn"]):
        full = g[g["head_dim"] == g["head_dim"].max()]
        half = g[g["head_dim"] == full["head_dim"].iloc[0] // 2]
        if len(full) and len(half) and full["heads"].iloc[0] == 1:
            ratio = float(half[metric].iloc[0] / full[metric].iloc[0])
            rows.append({"check": f"1 layer, W={w}, d={d}, N={n}, posn={posn}: MSE(rank d/2) / MSE(rank d)",
                         "expected": ">= 10", "observed": ratio, "pass": ratio >= 10,
                         "runs": f"rank d/2 {_runs(_rows_of(summary, half))}; rank d {_runs(_rows_of(summary, full))}"})
    for (depth, w, d, posn), g in configs.groupby(["depth", "modules", "dim", "posn"]):
        low = g[g["head_dim"] == g["head_dim"].min()]
        short, long_ = low[low["tokens"] == 4], low[low["tokens"] >= 64]
        if len(short) and len(long_) and g["head_dim"].nunique() > 1 and "short_sequences" in checks:
            r = int(low["head_dim"].iloc[0])
            s_mse, l_mse = float(short[metric].iloc[0]), float(long_[metric].min())
            rows.append({"check": f"{depth} layers, W={w}, d={d}, posn={posn}, rank {r}: MSE at N=4",
                         "expected": "<= 0.05", "observed": s_mse, "pass": s_mse <= 0.05,
                         "runs": _runs(_rows_of(summary, short))})
            rows.append({"check": f"{depth} layers, W={w}, d={d}, posn={posn}, rank {r}: MSE at N >= 64",
                         "expected": "> 0.5", "observed": l_mse, "pass": l_mse > 0.5,
                         "runs": _runs(_rows_of(summary, long_))})
    if "qk_angle_deg_min" in summary and "perfect_angle" in checks:
        single = summary[(summary["depth"] == 1) & (summary["heads"] == 1)]
        for (w, d, n), g in single.groupby(["modules", "dim", "tokens"]):
            angle = float(learned_rows(g)["qk_angle_deg_min"].min())
            rows.append({"check": f"fig_perfect: 1 layer, 1 head, W={w}, d={d}, N={n}: angle(QK^T, I), every head",
                         "expected": "> 165 deg", "observed": angle, "pass": angle > 165,
                         "runs": _runs(g)})
    return pd.DataFrame(rows, columns=["check", "expected", "observed", "pass", "runs"])


def _rows_of(summary: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """The summary's runs of these by_config rows."""
    keys = axes(summary["task"].iloc[0])
    return summary.merge(configs[keys].drop_duplicates(), on=keys)


def _runs(runs: pd.DataFrame) -> str:
    """'learned 5 of 8 runs' for the summary rows a check reads (summary.learned)."""
    stuck = not_learned(runs)
    return f"learned {len(runs) - (0 if math.isnan(stuck) else int(stuck))} of {len(runs)} runs"


def pick_baseline(configs: pd.DataFrame, baseline: dict) -> pd.Series:
    """The configured baseline, else the deepest model with the fewest heads, widest, largest MLP."""
    cand = configs
    for key, value in baseline.items():
        cand = cand[cand[key] == value]
    if cand.empty:
        raise ValueError(f"baseline {baseline} matches no configuration of the study")
    cand = cand.sort_values(["depth", "heads", "width", "mlp_hidden"], ascending=[False, True, False, False])
    return cand.iloc[0]


def lean_vs_baseline(summary: pd.DataFrame, baseline: dict, metric: str = "eval_acc",
                     mode: str = "max") -> pd.DataFrame:
    """Each shallower configuration against the baseline: the metric, its difference with a Welch
    95% interval, and the parameter reduction. `mode` says which way is better (max: accuracy,
    min: a loss); a difference is called one only when its interval clears 0 by the margin
    (`resolve`), else it is "inconclusive" (the interval spans zero: absence of evidence, not
    evidence of no difference; that needs a margin, see `claims_table`) or "unresolved"."""
    configs = by_config(summary, metric)
    base = pick_baseline(configs, baseline)
    base_vals = config_values(summary, base, metric)
    rows = []
    for _, cfg in configs[configs["depth"] < base["depth"]].iterrows():
        vals = config_values(summary, cfg, metric)
        diff, lo, hi = welch(vals, base_vals)
        side = resolve(lo, hi)
        verdict = {"above": "better" if mode == "max" else "worse", "below": "worse" if mode == "max" else "better",
                   "includes zero": "inconclusive"}.get(side, side)
        rows.append({**{k: cfg[k] for k in ARCH}, "protocols": cfg["protocols"], "params": cfg["params"],
                     "param_reduction_pct": 100.0 * (1 - cfg["params"] / base["params"]),
                     f"{metric}_mean": cfg[f"{metric}_mean"], f"{metric}_lo": cfg[f"{metric}_lo"],
                     f"{metric}_hi": cfg[f"{metric}_hi"], "n": cfg["n"],
                     f"delta_{metric}": diff, "delta_lo": lo, "delta_hi": hi, "verdict": verdict,
                     "baseline": arch_label(base), f"baseline_{metric}": base[f"{metric}_mean"],
                     "baseline_params": base["params"]})
    return pd.DataFrame(rows)


def with_claim_verdicts(frame: pd.DataFrame, summary: pd.DataFrame, claims: list[dict]) -> pd.DataFrame:
    """lean_vs_baseline's rows with `claim_verdict`: for a pair a claim declares (this lean model
    against that claim's baseline), the claim's verdict ("name: verdict"), else empty."""
    if not len(frame) or not claims:
        return frame.assign(claim_verdict="")
    baselines = {claim["name"]: arch_label(claim["baseline"]) for claim in claims}
    table = claims_table(summary, claims)
    judged = {(baselines[row["claim"]], row["configuration"]): f"{row['claim']}: {row['verdict']}"
              for _, row in table[table["role"] != "baseline"].iterrows()}
    return frame.assign(claim_verdict=[judged.get((r["baseline"], arch_label(r)), "") for _, r in frame.iterrows()])


def arch_label(cfg) -> str:
    """L{depth}-H{heads}-D{width}-mlp{hidden}; the head dim named too where it is not D/h (a
    crossed or fixed-head-dim point whose heads do not fill the width), and a logit scale other
    than 1 (-qk8)."""
    hd = cfg.get("head_dim")  # a dict or a table's row; NaN where the row has none
    shown = f"-hd{hd}" if hd is not None and hd == hd and int(hd) * int(cfg["heads"]) != int(cfg["width"]) else ""
    qk = cfg.get("qk_scale")
    scale = f"-qk{float(qk):g}" if qk is not None and qk == qk and float(qk) != AXIS_DEFAULTS["qk_scale"] else ""
    return f"L{cfg['depth']}-H{cfg['heads']}-D{cfg['width']}{shown}-mlp{cfg['mlp_hidden']}{scale}"


def claim_label(point: dict) -> str:
    """A claim point's configuration as the tables name it: arch_label for P1's, P2's by depth,
    heads, modules (W), head rank, dim and tokens."""
    if {"depth", "heads", "width", "mlp_hidden"} <= set(point):
        return arch_label(point)
    if {"depth", "heads", "modules", "head_dim", "dim", "tokens"} <= set(point):
        return "L{depth}-H{heads}-W{modules}-r{head_dim}-d{dim}-N{tokens}".format(**point)
    return ",".join(f"{k}={v}" for k, v in sorted(point.items()))


def _claim_rows(summary: pd.DataFrame, point: dict, seeds: list[int]) -> pd.DataFrame:
    mask = summary["seed"].isin(seeds)
    for key, value in point.items():
        mask &= summary[key] == value
    return summary[mask]


def _seen(runs: pd.DataFrame, claim: dict) -> np.ndarray:
    """Which of a claim's runs were seen before it (its `seen`: a seed's every arm, or one arm's
    seeds): the others are new data."""
    mask = np.zeros(len(runs), dtype=bool)
    for entry in claim.get("seen_runs") or []:
        hit = runs["seed"].isin(entry["seeds"]).to_numpy()
        for key, value in (entry["point"] or {}).items():
            hit = hit & (runs[key] == value).to_numpy()
        mask |= hit
    return mask


CLAIMS_COLUMNS = ["claim", "role", "configuration", "params", "param_reduction_pct", "metric", "mean", "n",
                  "not_learned", "seeds_missing", "lean_advantage", "bound_lo", "bound_hi", "margin", "verdict",
                  "elsewhere", "hypothesis", "supported", "declaration", "runs_new", "split_lo", "split_hi",
                  "split_verdict", "control_cost", "margin_share", "kept_share", "kept_lo", "kept_hi"]

# What a claim's declaration was, checked after its runs (`declaration` in the claims table): only
# AS_DECLARED claims make the headline. A run records its study's claims digest when it trains
# (metrics.json `claims_digest`, from its declared.json: rule declare); a claim run on other seeds than it
# declared (an `every_study` overlay) gets no verdict.
AS_DECLARED = "as declared"
DECLARED_AFTER = "declared after the runs"
NOT_RECORDED = "not recorded with the runs"
SEEDS_DIFFER = "seeds differ from the declaration"
SUPPORTS = {"non-inferior": ("superior", "equivalent", "non-inferior"), "superior": ("superior",),
            "inferior": ("inferior",)}


def _supported(verdict: str, hypothesis: str) -> str:
    """yes / no where the verdict decides the declared hypothesis; n/a where there is no verdict
    (one seed, a model that did not learn); empty for a row that declares nothing (the control)."""
    if not hypothesis:
        return ""
    return ("yes" if verdict in SUPPORTS[hypothesis] else "no") if verdict in CLAIM_VERDICTS[:5] else "n/a"


NO_OUTCOMES = "n/a (no per-example results)"


def split_interval(lean: pd.DataFrame, base: pd.DataFrame, claim: dict) -> tuple[float, float]:
    """The claim's difference bounded over retraining and the test split together
    (stats.paired_bootstrap over the runs' per-example outcomes, metrics.json `eval_outcomes`);
    NaN for a metric other than eval_acc, a run without outcomes, or fewer than two runs an arm."""
    if claim["metric"] != "eval_acc" or "eval_outcomes" not in lean or "eval_outcomes" not in base:
        return math.nan, math.nan
    runs = [lean["eval_outcomes"], base["eval_outcomes"]]
    if any(r.isna().any() or len(r) < 2 for r in runs):
        return math.nan, math.nan
    arms = [np.stack([unpack_outcomes(text) for text in r]) for r in runs]
    return paired_bootstrap(*arms, mode=claim["mode"])


def declaration(claim: dict, runs: pd.DataFrame) -> str:
    """Whether `claim` is judged as it was declared before `runs` (its arms' runs) trained."""
    if claim.get("declared_seeds", claim["seeds"]) != claim["seeds"]:
        return SEEDS_DIFFER
    recorded = runs["claims_digest"] if "claims_digest" in runs else pd.Series([None] * len(runs), dtype=object)
    if recorded.isna().any() or not claim.get("declaration"):
        return NOT_RECORDED
    return AS_DECLARED if (recorded == claim["declaration"]).all() else DECLARED_AFTER


def _compared(summary: pd.DataFrame, claim: dict, point: dict, base: pd.DataFrame, role: str,
              base_params: int | None) -> dict:
    """A lean model's (or the control's) row of the claims table: lean - baseline with its
    one-sided bounds and verdict, and whether the verdict supports the declared hypothesis."""
    every = _claim_rows(summary, point, claim["seeds"])
    lean, learned_base = learned_rows(every, fallback=False), learned_rows(base, fallback=False)
    vals, base_vals = lean[claim["metric"]].to_numpy(float), learned_base[claim["metric"]].to_numpy(float)
    v = claim_verdict(vals, base_vals, claim["margin"], claim["mode"])
    se = interval_se(v["lo"], v["hi"], len(vals), len(base_vals), 0.90)
    elsewhere = verdicts_elsewhere(v["lo"], v["hi"], se, functools.partial(bounds_verdict, margin=claim["margin"]))
    stuck = [name for name, rows in (("baseline", learned_base), (role, lean)) if not len(rows) and len(
        every if name == role else base)]
    if stuck:  # no verdict on a model none of whose runs beat chance (summary.learned)
        v = {**v, "verdict": f"did not learn ({' and '.join(stuck)})"}
    params = int(lean["params_total"].iloc[0]) if len(lean) else None
    mean, _, _, n = ci95(vals)
    hypothesis = claim.get("hypothesis", "non-inferior") if role == "lean" else ""
    split_lo, split_hi = split_interval(lean, base, claim)
    return {"role": role, "configuration": claim_label(point), "params": params,
            "param_reduction_pct": 100.0 * (1 - params / base_params) if params and base_params else math.nan,
            "mean": mean, "n": n, "not_learned": len(every) - len(lean),
            "seeds_missing": len(claim["seeds"]) - len(every), "lean_advantage": v["diff"],
            "bound_lo": v["lo"], "bound_hi": v["hi"], "verdict": v["verdict"],
            "elsewhere": " / ".join(elsewhere) if not stuck else "", "hypothesis": hypothesis,
            "supported": _supported(v["verdict"], hypothesis), "split_lo": split_lo, "split_hi": split_hi,
            "split_verdict": NO_OUTCOMES if math.isnan(split_lo) else bounds_verdict(split_lo, split_hi,
                                                                                     claim["margin"]),
            "_runs": every, "_values": vals}


def _anchor(arms: list[dict], values: list[np.ndarray], base: np.ndarray, claim: dict) -> None:
    """The margin anchored on the control (the last arm): what the control costs against the
    baseline (`control_cost`, signed as lean_advantage: negative where it is worse), the margin as a
    share of that cost, and each lean arm's share of it kept (stats.kept_share, with its bounds)."""
    control, cost = values[-1], arms[-1]["lean_advantage"]
    arms[-1]["control_cost"] = cost
    for arm, vals in zip(arms[:-1], values[:-1]):
        share, lo, hi = kept_share(vals, base, control, claim["mode"])
        arm.update(control_cost=cost, margin_share=claim["margin"] / abs(cost) if cost else math.nan,
                   kept_share=share, kept_lo=lo, kept_hi=hi)


def claims_table(summary: pd.DataFrame, claims: list[dict]) -> pd.DataFrame:
    """The study's declared claims (workflow/claims.py), baseline first: per claim its baseline row,
    then one row per lean configuration with the difference (positive: lean better), its one-sided
    95% bounds, the margin, the verdict (stats.claim_verdict), the verdicts another platform
    could read (`elsewhere`, stats.verdicts_elsewhere; empty without an interval), the declared
    hypothesis and whether the verdict supports it; then the control (where the claim declares one:
    the model without what the lean one adds, e.g. the lean depth at the baseline's heads), judged
    against the baseline the same way, which tells whether that alone explains a match, and
    anchors the margin: its cost, the margin's share of it and the share each lean model keeps.
    Only the declared seeds count; a declared seed without a finished run is counted as missing,
    never replaced. `declaration` (every row of a claim): whether the claim
    is judged as declared before its runs (`declaration()`); one that is not gets no verdict
    when its seeds differ, and stays out of the headline otherwise."""
    rows = []
    for claim in claims:
        base = _claim_rows(summary, claim["baseline"], claim["seeds"])
        base_params = int(base["params_total"].iloc[0]) if len(base) else None
        common = {"claim": claim["name"], "metric": claim["metric"], "margin": claim["margin"]}
        mean, _, _, n = ci95(learned_rows(base, fallback=False)[claim["metric"]].to_numpy(float))
        arms = [_compared(summary, claim, point, base, "lean", base_params) for point in claim["lean"]]
        if claim.get("control"):
            arms.append(_compared(summary, claim, claim["control"], base, "control", base_params))
        runs = pd.concat([base, *(a.pop("_runs") for a in arms)])
        values = [a.pop("_values") for a in arms]
        if claim.get("control"):
            _anchor(arms, values, learned_rows(base, fallback=False)[claim["metric"]].to_numpy(float), claim)
        stated = declaration(claim, runs)
        new = f"{len(runs) - int(_seen(runs, claim).sum())} of {len(runs)}"
        rows.append({**common, "role": "baseline", "configuration": claim_label(claim["baseline"]),
                     "params": base_params, "param_reduction_pct": 0.0, "mean": mean, "n": n,
                     "not_learned": len(base) - n, "seeds_missing": len(claim["seeds"]) - len(base),
                     "declaration": stated, "runs_new": new})
        for arm in arms:
            if stated == SEEDS_DIFFER:
                arm.update(verdict=SEEDS_DIFFER, elsewhere="", supported="")
            rows.append({**common, **arm, "declaration": stated, "runs_new": new})
    return pd.DataFrame(rows).reindex(columns=CLAIMS_COLUMNS)


def glue_tasks_table(summary: pd.DataFrame) -> pd.DataFrame:
    """P1's GLUE table: per configuration, each task's score and the GLUE average (means over seeds)."""
    cols = [c for c in summary.columns if c.startswith("glue_") and c != "glue_avg"] + ["glue_avg"]
    rows = []
    for key, g in summary.groupby(ARCH, sort=True):
        mean, lo, hi, n = ci95(g["glue_avg"]) if "glue_avg" in g else (math.nan, math.nan, math.nan, len(g))
        rows.append({**dict(zip(ARCH, key)), "params": int(g["params_total"].iloc[0]), "n": len(g),
                     **{c: float(g[c].mean()) for c in cols if c in g}, "glue_avg_lo": lo, "glue_avg_hi": hi})
    return pd.DataFrame(rows)
