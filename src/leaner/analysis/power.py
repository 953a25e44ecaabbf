"""How many seeds a declared claim needs: the power of its one-sided Welch test from a pilot's
per-arm standard deviations, by the noncentral t distribution, and the pilot's report that a
claim's rationale quotes (`leaner pilot`).

A claim (stats.claim_verdict) judges lean - baseline by its one-sided 95% Welch bound. For
`non-inferior` the bound must clear -margin: the power is taken at a true difference of zero. For
`superior` it must clear 0: the power is taken at a true gain of one margin (the margin is the gain
the test is sized for, not a threshold: any gain whose bound clears 0 counts). For `inferior` (a
cost declared, e.g. "depth matters") the upper bound must fall below -margin: the power is taken at
the pilot's difference. A non-inferiority claim's report adds the power of equivalence (two
one-sided tests within +-margin), simulated: a stronger verdict than non-inferiority (it also
bounds the gain), so at the same seeds its power is lower."""

from __future__ import annotations

import math

import pandas as pd

ALPHA = 0.05  # one-sided, as the claims' bounds
TARGET_POWER = 0.80
MAX_SEEDS = 200  # the search for the seeds a target power needs stops here


def welch_df(sd_a: float, sd_b: float, n_a: int, n_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means."""
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    return (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def welch_power(sd_a: float, sd_b: float, n_a: int, n_b: int, shift: float, alpha: float = ALPHA) -> float:
    """The chance that a one-sided Welch t test at level `alpha` rejects when the true difference
    sits `shift` beyond the null (a margin, for a non-inferiority test at a true difference of 0):
    1 - F(t_{1-alpha}) under the noncentral t with the Welch degrees of freedom and noncentrality
    shift / sqrt(sd_a^2/n_a + sd_b^2/n_b)."""
    from scipy import stats

    if min(n_a, n_b) < 2:
        return math.nan
    se = math.sqrt(sd_a**2 / n_a + sd_b**2 / n_b)
    if se == 0:
        return 1.0 if shift > 0 else 0.0
    df = welch_df(sd_a, sd_b, n_a, n_b)
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, shift / se))


def seeds_for(sd_a: float, sd_b: float, shift: float, target: float = TARGET_POWER) -> int | None:
    """The fewest seeds an arm (both arms alike) for `target` power; None beyond MAX_SEEDS."""
    for n in range(2, MAX_SEEDS + 1):
        if welch_power(sd_a, sd_b, n, n, shift) >= target:
            return n
    return None


def arms(pilot: pd.DataFrame, claim: dict, label) -> pd.DataFrame:
    """Per arm of `claim` (role: baseline, lean[j], control), from a pilot's per-run rows (its CSV:
    configuration, seed, metric, value; `label` names a claim point's configuration as the CSV
    does): configuration, runs, n (the runs that learned: summary.nearest_learned for P2's MSE,
    every run otherwise), mean and sd over those. An arm the pilot did not run is left out."""
    from .summary import nearest_learned

    rows = []
    for role, point in claim_arms(claim):
        runs = pilot[(pilot["configuration"] == label(point)) & (pilot["metric"] == claim["metric"])]["value"]
        kept = runs[runs.map(nearest_learned)] if claim["metric"] == "best_train_loss" else runs
        if len(runs):
            rows.append({"role": role, "configuration": label(point), "runs": len(runs), "n": len(kept),
                         "mean": kept.mean(), "sd": kept.std()})
    return pd.DataFrame(rows, columns=["role", "configuration", "runs", "n", "mean", "sd"])


def claim_arms(claim: dict) -> list[tuple[str, dict]]:
    """(role, grid point) of every arm of a claim: the baseline, each lean model, the control."""
    out = [("baseline", claim["baseline"])] + [(f"lean[{j}]", p) for j, p in enumerate(claim["lean"])]
    return out + ([("control", claim["control"])] if claim.get("control") else [])


def comparisons(claim: dict) -> list[tuple[str, str]]:
    """(arm, against) pairs a claim's report covers: each lean model against the baseline, and the
    control against the baseline where the claim names one."""
    return [(role, "baseline") for role, _ in claim_arms(claim)[1:]]


def shift_of(hypothesis: str, margin: float, seen: float) -> tuple[float, str]:
    """The shift beyond the null a declared test's power is taken at, and the truth it assumes:
    non-inferior at a true difference of 0 (the bound must clear -margin); superior at a true gain
    of one margin (the bound must clear 0); inferior at the pilot's difference (the upper bound
    must fall below -margin: the cost the pilot saw, less the margin)."""
    if hypothesis == "non-inferior":
        return margin, "a true difference of 0"
    if hypothesis == "superior":
        return margin, f"a true gain of {margin:g}"
    return -seen - margin, f"the pilot's difference {seen:+.3f}"


EQUIVALENCE_DRAWS = 20_000  # simulated replications of the equivalence test, from a fixed seed


def equivalence_power(sd_a: float, sd_b: float, n: int, margin: float, truth: float = 0.0) -> float:
    """The chance that two one-sided tests (TOST: both one-sided 95% Welch bounds of a - b inside
    +-margin) call two arms of n runs each equivalent at a true difference `truth`, by simulation
    (EQUIVALENCE_DRAWS normal replications from seed 0)."""
    import numpy as np
    from scipy import stats

    if n < 2:
        return math.nan
    rng = np.random.default_rng(0)
    a = rng.normal(truth, sd_a, (EQUIVALENCE_DRAWS, n))
    b = rng.normal(0.0, sd_b, (EQUIVALENCE_DRAWS, n))
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    half = stats.t.ppf(1 - ALPHA, df) * np.sqrt(va + vb)
    diff = a.mean(axis=1) - b.mean(axis=1)
    return float(np.mean((diff - half > -margin) & (diff + half < margin)))


def report(pilot: pd.DataFrame, claim: dict, label) -> list[str]:
    """What a claim's rationale needs, from the pilot's per-run values: each arm's mean and sd (over
    the runs that learned, with how many did not), then per comparison the difference seen, the
    power of the declared test at the declared margin for the declared seeds (each arm with its own
    sd; where runs did not learn, at the learned runs the collapse rate leaves of the declared seeds)
    and the seeds 80% power needs; for a non-inferiority claim, the power of equivalence too."""
    per_arm = arms(pilot, claim, label).set_index("role")
    declared = len(claim["seeds"])
    hypothesis = claim.get("hypothesis", "non-inferior")
    sign = 1.0 if claim.get("mode", "max") == "max" else -1.0
    seeds = sorted(pilot[pilot["configuration"].isin(per_arm["configuration"])]["seed"].unique())
    lines = [f"pilot of claim {claim['name']} ({claim['metric']}, {len(seeds)} seeds: "
             f"{', '.join(str(s) for s in seeds)})"]
    for role, arm in per_arm.iterrows():
        stuck = f", {arm['runs'] - arm['n']} of {arm['runs']} did not learn" if arm["runs"] > arm["n"] else ""
        lines.append(f"  {role:<9} {arm['configuration']:<22} mean {arm['mean']:.3f} (sd {arm['sd']:.3f}), "
                     f"n {arm['n']}{stuck}")
    lines.append(f"  the declared test: {hypothesis}, margin {claim['margin']:g}, one-sided {ALPHA:.0%} Welch; "
                 f"each arm at its own pilot sd:")
    for role, against in comparisons(claim):
        if role not in per_arm.index or against not in per_arm.index:
            continue
        a, b = per_arm.loc[role], per_arm.loc[against]
        seen = sign * (a["mean"] - b["mean"])
        if role == "control":  # compared, not claimed: a test of it is a claim of its own (e.g. depth_costs)
            lines.append(f"  control {a['configuration']} against {b['configuration']}: seen {seen:+.3f}")
            continue
        shift, truth = shift_of(hypothesis, claim["margin"], seen)
        # the runs a declared seed count leaves, at the pilot's rate of learning (both arms' least)
        rate = min(a["n"] / a["runs"], b["n"] / b["runs"])
        n = int(declared * rate)
        power = welch_power(a["sd"], b["sd"], n, n, shift)
        need = seeds_for(a["sd"], b["sd"], shift)
        need_text = f"over {MAX_SEEDS}" if need is None else str(math.ceil(need / rate)) if rate else "n/a"
        learned = f" ({n} that learn at the pilot's rate)" if rate < 1 else ""
        power_text = (f"power {power:.0%} at {declared} seeds{learned}, at {truth}" if n > 1
                      else f"no test at the declared {'one seed' if declared == 1 else 'seeds'}")
        lines.append(f"  {a['configuration']} against {b['configuration']}: seen {seen:+.3f}; {power_text}; "
                     f"{TARGET_POWER:.0%} needs {need_text} seeds")
        if hypothesis == "non-inferior" and n > 1:
            lines.append(f"    equivalence (both bounds within +-{claim['margin']:g}) at a true difference of 0: "
                         f"power {equivalence_power(a['sd'], b['sd'], n, claim['margin']):.0%} (simulated)")
    return lines


PILOT_COLUMNS = ["study", "configuration", "variant", "seed", "metric", "value", "identity"]  # workflow/kept.py


def merged(old: pd.DataFrame | None, new: list[dict]) -> pd.DataFrame:
    """A study's pilot CSV with `new` runs laid over the `old` ones (a run measured again replaces
    its row), ordered by configuration, seed and metric."""
    frame = pd.DataFrame(new, columns=PILOT_COLUMNS)
    if old is not None and len(old):
        keep = ~old.set_index(["variant", "metric"]).index.isin(frame.set_index(["variant", "metric"]).index)
        frame = pd.concat([old[keep].reindex(columns=PILOT_COLUMNS), frame], ignore_index=True)
    return frame.sort_values(["configuration", "seed", "metric"], kind="stable").reset_index(drop=True)
