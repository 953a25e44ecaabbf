"""The findings: what the overview's numbers say about where the two papers' claims meet,
generated from the data (findings.md / findings.html), nothing written in advance; its
paragraphs, and its tables as Markdown (the declared claims, most against fewest heads), which
docs/results.md shows too."""

from __future__ import annotations

import math

import pandas as pd

from .stats import MIN_N_INTERVAL, fmt_ci, resolve, rho_interval, signed
from .tables import SUPPORTS

ONE_CONFIG = ["study", "depth", "heads", "rank", "params", "qk_scale"]  # what tells two configurations apart


def findings(configs: pd.DataFrame, effects: pd.DataFrame, corr: pd.DataFrame,
             within: pd.DataFrame | None = None) -> list[str]:
    """The summary paragraphs, each sentence computed from the tables (`within`: the P1 studies'
    kappa_within rows, a `study` column added)."""
    studies = list(dict.fromkeys(configs["study"]))
    paras = [f"{len(configs.drop_duplicates([k for k in ONE_CONFIG if k in configs]))} configurations of "
             f"{len(studies)} studies ({', '.join(studies)}). Error is 1 - accuracy (classification), the loss "
             f"(language modelling, P2's MSE) or 1 - GLUE average; intervals are 95% over seeds, and a difference "
             f"is called one only when its interval clears zero by a quarter of its half-width (else it is "
             f"unresolved: a re-run on another machine could reverse it)."]
    for family, label in (("P1", "P1's tasks (more heads at equal or lower head rank)"),
                          ("P2", "P2's nearest-point task (rank d/h)")):
        e = effects[effects["family"] == family] if len(effects) else effects
        if not len(e):
            continue
        counts = e["verdict"].where(~e["verdict"].str.startswith("did not learn"), "did not learn").value_counts()
        kinds = ("more heads help", "more heads hurt", "inconclusive", "unresolved", "n/a (one seed)",
                 "did not learn")
        parts = [f"{counts.get(v, 0)} {v}" for v in kinds if counts.get(v, 0)]
        paras.append(f"{label}: of {len(e)} comparison{'s' if len(e) > 1 else ''} of most against fewest heads, "
                     + ", ".join(parts) + ".")
    if "not_learned" in configs and configs["not_learned"].notna().any():
        stuck = configs[configs["not_learned"] > 0].drop_duplicates([k for k in ONE_CONFIG if k in configs])
        paras.append("Did not learn (final metric no better than ignoring the input: the majority label, the "
                     "unigram for a language model; for P2, a best training MSE at 0.95 of the zero predictor's "
                     "or above), counted and kept out of every mean and verdict: "
                     + ("; ".join(f"{r['study']} L{r['depth']}/H{r['heads']} ({r['not_learned']:.0f} of "
                                  f"{r['n'] if r.get('learned_none', False) else r['n'] + r['not_learned']:.0f} seeds)"
                                  for _, r in stuck.iterrows()) if len(stuck) else "none") + ".")
    if len(effects):
        hurt = effects[effects["verdict"] == "more heads hurt"]
        fine = effects[effects["verdict"] == "more heads help"]  # an interval across zero shows nothing either way
        if len(hurt) and len(fine):
            hurt_rf, fine_rf = hurt["rank_fraction_many"], fine["rank_fraction_many"]
            text = (f"Where they meet: more heads hurt in {', '.join(sorted(set(hurt['study'])))} (head rank "
                    f"{hurt_rf.min():.3g}-{hurt_rf.max():.3g} of the width after the split) and helped in "
                    f"{', '.join(sorted(set(fine['study'])))} (head rank {fine_rf.min():.3g}-{fine_rf.max():.3g} of "
                    f"the width). ")
            if fine_rf.min() < hurt_rf.max():
                text += (f"Head rank alone does not divide them: models that kept only {fine_rf.min():.3g} of the "
                         f"width per head gained where others lost at {hurt_rf.max():.3g}. ")
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
            paras.append("More heads hurt in no comparison with an interval; P2's failure mode did not show "
                         "in these studies (which, without a margin, does not say it is absent).")
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
                families.append(f"{family}'s tasks ({_pooled_over(studies_only, family)}) "
                                f"{fmt_ci(row['rho_kappa_error'], row['lo'], row['hi'])}: "
                                f"{_association(row['lo'], row['hi'])}")
        paras.append(f"kappa after training against error, Spearman over configurations (a positive rho: better-"
                     f"conditioned configurations have lower error; configurations that also differ in parameters "
                     f"and heads, so this marks the architecture and shows no cause: the test within a configuration "
                     f"follows). Pooled by family: {'; '.join(families) or 'n/a'}. "
                     f"All studies pooled: {fmt_ci(pooled['rho_kappa_error'], pooled['lo'], pooled['hi'])}. "
                     f"Per study: {per} (no interval below {MIN_N_INTERVAL} configurations; pooling uses the "
                     f"studies with an interval).")
        if "rho_jacobian_error" in pooled and not math.isnan(pooled["rho_jacobian_error"]):
            jac = []
            for family in ("P1", "P2"):
                row = corr[corr["study"] == f"pooled {family}"]
                if len(row):
                    r = row.iloc[0]
                    jac.append(f"{family}'s tasks ({_pooled_over(studies_only, family)}) "
                               f"{fmt_ci(r['rho_jacobian_error'], r['lo_jacobian'], r['hi_jacobian'])}"
                               f": {_association(r['lo_jacobian'], r['hi_jacobian'])}")
            paras.append(f"The same for kappa of the attention block's Jacobian (P1's revised wording), by family: "
                         f"{'; '.join(jac) or 'n/a'}; all studies pooled: "
                         f"{fmt_ci(pooled['rho_jacobian_error'], pooled['lo_jacobian'], pooled['hi_jacobian'])}.")
        if within is not None and len(within):
            paras.append(_within_paragraph(within))
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


CLAIM_WORDS = ("How the claims read (each declared in its config before its runs): a verdict judges lean - baseline "
               "(+: lean better) by its one-sided 95% Welch bounds. Superior: the lower bound above 0. Non-inferior: "
               "above -margin. Equivalent: both bounds within +-margin (a stronger verdict with its own, lower "
               "power). Inferior: the upper bound below -margin (a cost beyond the margin). The margin is fixed "
               "before the runs: how much worse still counts as a match, or counts as a cost; for a superior "
               "claim it is the gain the test's power is sized for, not a threshold. A run is new data when no run "
               "of its identity (task, data, model, recipe and seed) was kept before the claim was declared, in a "
               "reference or a pilot.")
NON_INFERIOR = SUPPORTS["non-inferior"]  # the verdicts that mean a match: superior, equivalent, non-inferior


def _one_run(r: pd.Series) -> str:
    """A one-seed comparison's difference, or why there is none (a side that did not learn)."""
    if math.isnan(r["lean_advantage"]):
        return str(r["verdict"]) if isinstance(r.get("verdict"), str) else "no difference"
    return f"{r['lean_advantage']:+.3f}"


def claim_findings(heads: pd.DataFrame) -> list[str]:
    """A paragraph per declared claim judged as declared (overview.headline): each comparison's
    verdict and whether it supports the declared hypothesis; where the claim has a control, what it
    says: if the control matches the baseline too, depth alone explains the lean models' match."""
    paras = []
    for (study, name), rows in heads.groupby(["study", "claim"], sort=False):
        base = rows[rows["role"] == "baseline"].iloc[0]
        leans, control = rows[rows["role"] == "lean"], rows[rows["role"] == "control"]
        if rows.loc[rows["role"] != "baseline", "bound_lo"].isna().all():
            compared = "; ".join(f"{r['role'] if r['role'] == 'control' else ''} {r['configuration']} "
                                 f"{_one_run(r)}".strip() for _, r in rows.iterrows() if r["role"] != "baseline")
            paras.append(f"Claim {name} ({study}, {base['metric']}, one seed) against {base['configuration']}: "
                         f"{compared} (+: better); one run a side, no verdict.")
            continue
        parts = [f"{r['configuration']} {_judged(r)}, declared {r['hypothesis']}: "
                 f"{'supported' if r['supported'] == 'yes' else 'not supported'}" for _, r in leans.iterrows()]
        stuck = rows["not_learned"].fillna(0).sum() if "not_learned" in rows else 0
        new = f"; new data: {base['runs_new']} runs" if isinstance(base.get("runs_new"), str) else ""
        text = (f"Claim {name} ({study}, {base['metric']}, margin {base['margin']:g}, "
                f"{int(base['n'] + (base.get('not_learned') or 0))} seeds{new}"
                + (f"; {stuck:.0f} run{'' if stuck == 1 else 's'} did not learn, left out" if stuck else "")
                + f") against "
                f"{base['configuration']}: " + "; ".join(parts) + ".")
        if len(leans) > 1:
            held = (leans["supported"] == "yes").all()
            text += (f" Read together (each lean model its own test at 5%; the claim holds only where every one "
                     f"does, an intersection-union reading that needs no correction): "
                     f"{'holds' if held else 'does not hold'}.")
        if len(control):
            c = control.iloc[0]
            matched = leans["verdict"].isin(NON_INFERIOR).all()
            text += f" The control {c['configuration']} (without what the lean models add) {_judged(c)}: "
            if not matched:
                text += ("the lean models do not all match the baseline, so there is no match for the control "
                         "to explain.")
            elif c["verdict"] in NON_INFERIOR:
                text += ("it matches the baseline too, so what it lacks costs nothing measurable here: the match "
                         "does not need what the lean models add.")
            elif c["verdict"] == "inferior":
                text += ("it falls short where the lean models match, so what the lean models add carries the match, "
                         "not the control's change alone.")
            else:
                text += ("it neither matches nor falls short, so whether the control's change alone explains "
                         "the match is open.")
            text += _anchored(leans, c, base["margin"])
        paras.append(text)
    return paras


def _rho(value: float) -> str:
    return f"{value:+.2f}" if math.isfinite(value) else "n/a (too few configurations)"


def _across(r: pd.Series) -> str:
    """'across 8 configurations (kappa against eval_acc) rho -0.98 [-1.00, -0.86]; with parameters
    and heads partialled out -0.71 [-0.97, +0.28]': each with its 95% interval (stats.rho_interval),
    or why it has none (too few configurations)."""
    n = int(r["across_n"]) if math.isfinite(r.get("across_n", math.nan)) else 0

    def said(rho: float, partialled: int) -> str:
        if not math.isfinite(rho):
            return _rho(rho)
        lo, hi = rho_interval(rho, n, partialled)
        less = f" less the {partialled} partialled out" if partialled else ""
        return fmt_ci(rho, lo, hi) if math.isfinite(lo) else f"{rho:+.2f} (no interval from {n} configurations{less})"

    return (f"across {n} configurations (kappa against {r['metric']}) rho {said(r['across_rho'], 0)}; with "
            f"parameters and heads partialled out {said(r['across_partial_rho'], 2)}")


def _within_paragraph(within: pd.DataFrame) -> str:
    """kappa against the metric with the architecture removed (analysis/kappa_within.py), per P1
    study whose configurations have seeds enough: after training and at initialisation, the
    pooled within-configuration r with its interval and verdict, and the across-configuration rho
    beside its partial on parameters and heads."""
    parts = []
    for study, g in within.groupby("study", sort=False):
        rows = g.set_index("kappa")
        said = []
        for column, when in (("kappa_final_gmean", "after training"), ("kappa_init_gmean", "at init")):
            if column not in rows.index or not math.isfinite(rows.loc[column, "within_r"]):
                continue
            r = rows.loc[column]
            said.append(f"{when} r {fmt_ci(r['within_r'], r['within_r_lo'], r['within_r_hi'])} "
                        f"(p {r['p_declared']:.2g}): {r['verdict']}")
        if not said:
            continue
        r = rows.loc["kappa_final_gmean"] if "kappa_final_gmean" in rows.index else rows.iloc[0]
        parts.append(f"{study} ({int(r['runs'])} runs in {int(r['configurations'])} configurations; it detects |r| "
                     f"{r['r_detectable']:.2f} 80% of the time): " + "; ".join(said) + "; " + _across(r))
    if not parts:
        return ("kappa within a configuration: no P1 study has seeds enough in its configurations to test it "
                "(each study's kappa_within table).")
    return ("kappa within a configuration, over its seeds (each run less its configuration's means, pooled; "
            "declared direction P1's: lower kappa, better metric, one-sided at 5%), the architecture held: "
            + ". ".join(parts) + ". A relation after training can run from training to kappa (a run that learned "
            "more may end better conditioned); kappa at initialisation is set before training, and an intervention "
            "that moves kappa with the architecture fixed (configs/why_kappa.yaml) is the test of a cause.")


def _anchored(leans: pd.DataFrame, control: pd.Series, margin: float) -> str:
    """' Anchored on the control (-0.037 against the baseline): the margin 0.02 is 54% of that; L1-H8
    keeps 96% [69%, 138%] of it.'
    (the claims table's kept_share and its 5th and 95th percentiles), or nothing without a cost."""
    cost = control.get("control_cost")
    if cost is None or not math.isfinite(cost) or "kept_share" not in leans:
        return ""
    kept = "; ".join(f"{r['configuration']} keeps {r['kept_share']:.0%}"
                     + (f" [{r['kept_lo']:.0%}, {r['kept_hi']:.0%}]" if math.isfinite(r["kept_lo"]) else "")
                     for _, r in leans.iterrows() if math.isfinite(r["kept_share"]))
    share = f": the margin {margin:g} is {margin / abs(cost):.0%} of that" if cost else ""
    return (f" Anchored on the control ({signed(cost)} against the baseline){share}"
            + (f"; {kept} of it." if kept else "."))


def _judged(r: pd.Series) -> str:
    """'non-inferior (+0.012 [-0.004, +0.029])': a compared row's verdict with its one-sided bounds."""
    bounds = "" if math.isnan(r["bound_lo"]) else f" [{r['bound_lo']:+.3f}, {r['bound_hi']:+.3f}]"
    return f"{r['verdict']} ({r['lean_advantage']:+.3f}{bounds})"


def _pooled_over(per_study: pd.DataFrame, family: str) -> str:
    """What a family's pooled rho pools: its studies with an interval (MIN_N_INTERVAL configurations)."""
    names = per_study[(per_study["family"] == family) & (per_study["configurations"] >= MIN_N_INTERVAL)]["study"]
    return "pooled over " + ", ".join(names) if len(names) > 1 else f"{names.iloc[0]} alone" if len(names) else "none"


def _association(lo: float, hi: float) -> str:
    return {"n/a": "too few configurations for an interval",
            "above": "better-conditioned attention goes with lower error",
            "below": "better-conditioned attention goes with higher error",
            "includes zero": "the interval includes zero",
            "unresolved": "unresolved (the interval comes within the margin of zero)"}[resolve(lo, hi)]


# ---------------------------------------------------------------- findings.md's tables

ONE_RUN = " (one run)"  # a number without an interval: what one run on one platform gave, not a finding


def headline_markdown(frame: pd.DataFrame) -> str:
    """The full claims table (docs/results.md): each claim's baseline row, then its lean rows and its control with
    the difference (against the baseline, signed so that + is the compared model better) and its
    one-sided 95% bounds, the verdict and whether it supports the declared hypothesis. A claim over
    one seed has no interval: its numbers are marked as one run's."""
    lines = ["| study | claim | role | configuration | params | metric | mean | n | difference (+: better than "
             "the baseline) [one-sided 95% bounds] | margin | verdict | declared: supported? | another platform "
             "could read | with the test split's share [bounds]: verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        compared, one = r["role"] != "baseline", int(r["n"]) == 1
        if math.isnan(r["params"]):  # no run of it learned: neither its size nor its mean is in the table
            params = "n/a"
        else:
            fewer = compared and round(r["param_reduction_pct"]) != 0
            params = f"{r['params'] / 1e3:.1f}k" + (f" ({-r['param_reduction_pct']:+.0f}%)" if fewer else "")
        mean = "n/a" if math.isnan(r["mean"]) else f"{r['mean']:.3f}{ONE_RUN * one}"
        bounds = ("" if not compared or math.isnan(r["bound_lo"])
                  else f" [{signed(r['bound_lo'])}, {signed(r['bound_hi'])}]")
        declared = f"{r['hypothesis']}: {r['supported']}" if isinstance(r.get("hypothesis"), str) else ""
        lines.append(f"| `{r['study']}` | {r['claim']} | {r['role']} | {r['configuration']} | {params} | "
                     f"{r['metric']} | {mean} | {int(r['n'])}{_stuck(r)} | "
                     f"{signed(r['lean_advantage']) + bounds + ONE_RUN * one if compared else ''} | "
                     f"{r['margin']:g} | {r['verdict'] if compared else ''} | {declared} | "
                     f"{_elsewhere(r) if compared else ''} | {_split(r) if compared else ''} |")
    return "\n".join(lines) + "\n"


def _stuck(r: pd.Series) -> str:
    """A README cell's note of the runs of an arm that did not learn (counted, left out of n)."""
    k = r.get("not_learned")
    return f" (+{k:.0f} did not learn)" if isinstance(k, float) and k > 0 else ""


def _split(r: pd.Series) -> str:
    """A README cell: the bounds over seeds and test examples together, and what they would read."""
    lo, hi = r.get("split_lo", math.nan), r.get("split_hi", math.nan)
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return ""
    return f"[{signed(lo)}, {signed(hi)}]: {r['split_verdict']}"


def _elsewhere(r: pd.Series) -> str:
    """A README cell: the verdicts another platform could read, 'the same' where only this one."""
    text = r.get("elsewhere")
    if not isinstance(text, str) or not text:
        return ""
    return "the same" if text == r["verdict"] else text


def effects_markdown(frame: pd.DataFrame) -> str:
    """Most against fewest heads per comparison group: the error difference (more heads minus fewer:
    + is worse) and its 95% interval to 3 decimals, the verdict; a difference of one seed a side,
    without an interval, marked as one run's."""
    lines = ["| study | comparison | error difference (more - fewer heads) [95% CI] | n | verdict | "
             "another platform could read |", "|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        ci = ONE_RUN if math.isnan(r["delta_lo"]) else f" [{r['delta_lo']:+.3f}, {r['delta_hi']:+.3f}]"
        lines.append(f"| `{r['study']}` | {r['group']}: heads {r['heads']} | {r['delta_error']:+.3f}{ci} | {r['n']} | "
                     f"{r['verdict']} | {_elsewhere(r)} |")
    return "\n".join(lines) + "\n"
