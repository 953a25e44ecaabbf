"""How many seeds a declared claim needs: the power of its one-sided Welch test from a pilot's
per-arm standard deviations, by the noncentral t distribution, and the pilot's report that a
claim's rationale quotes (`leaner pilot`).

A claim (stats.claim_verdict) judges lean - baseline by its one-sided 95% Welch bound. For
`non-inferior` the bound must clear -margin: the power is taken at a true difference of zero. For
`superior` it must clear 0: the power is taken at a true difference of one margin, the smallest
effect the claim cares about. Either way the test must detect a shift of one margin."""

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
    does): configuration, n, mean, sd. An arm the pilot did not run is left out."""
    rows = []
    for role, point in claim_arms(claim):
        runs = pilot[(pilot["configuration"] == label(point)) & (pilot["metric"] == claim["metric"])]["value"]
        if len(runs):
            rows.append({"role": role, "configuration": label(point), "n": len(runs), "mean": runs.mean(),
                         "sd": runs.std()})
    return pd.DataFrame(rows, columns=["role", "configuration", "n", "mean", "sd"])


def claim_arms(claim: dict) -> list[tuple[str, dict]]:
    """(role, grid point) of every arm of a claim: the baseline, each lean model, the control."""
    out = [("baseline", claim["baseline"])] + [(f"lean[{j}]", p) for j, p in enumerate(claim["lean"])]
    return out + ([("control", claim["control"])] if claim.get("control") else [])


def comparisons(claim: dict) -> list[tuple[str, str]]:
    """(arm, against) pairs a claim's report covers: each lean model against the baseline, and the
    control against the baseline where the claim names one."""
    return [(role, "baseline") for role, _ in claim_arms(claim)[1:]]


def report(pilot: pd.DataFrame, claim: dict, label) -> list[str]:
    """What a claim's rationale needs, from the pilot's per-run values: each arm's mean and sd, then
    per comparison the difference seen, the power of the declared test at the declared margin for
    the declared seeds (each arm with its own sd) and the seeds 80% power needs."""
    per_arm = arms(pilot, claim, label).set_index("role")
    n = len(claim["seeds"])
    hypothesis = claim.get("hypothesis", "non-inferior")
    sign = 1.0 if claim.get("mode", "max") == "max" else -1.0
    seeds = sorted(pilot[pilot["configuration"].isin(per_arm["configuration"])]["seed"].unique())
    lines = [f"pilot of claim {claim['name']} ({claim['metric']}, {len(seeds)} seeds: "
             f"{', '.join(str(s) for s in seeds)})"]
    for role, arm in per_arm.iterrows():
        lines.append(f"  {role:<9} {arm['configuration']:<22} mean {arm['mean']:.3f} (sd {arm['sd']:.3f}), "
                     f"n {arm['n']}")
    truth = "a true difference of 0" if hypothesis == "non-inferior" else f"a true difference of {claim['margin']:g}"
    lines.append(f"  the declared test: {hypothesis}, margin {claim['margin']:g}, one-sided {ALPHA:.0%} Welch; "
                 f"power at {truth}, each arm at its own pilot sd:")
    for role, against in comparisons(claim):
        if role not in per_arm.index or against not in per_arm.index:
            continue
        a, b = per_arm.loc[role], per_arm.loc[against]
        seen = sign * (a["mean"] - b["mean"])
        power = welch_power(a["sd"], b["sd"], n, n, claim["margin"])
        need = seeds_for(a["sd"], b["sd"], claim["margin"])
        at_seen = welch_power(a["sd"], b["sd"], n, n, seen + (claim["margin"] if hypothesis == "non-inferior" else 0))
        power_text = (f"power {power:.0%} at {n} seeds ({at_seen:.0%} if the difference seen were true)" if n > 1
                      else "no test at the declared one seed")
        lines.append(f"  {a['configuration']} against {b['configuration']}: seen {seen:+.3f}; {power_text}; "
                     f"{TARGET_POWER:.0%} needs {need if need else f'over {MAX_SEEDS}'} seeds")
    return lines


PILOT_COLUMNS = ["study", "configuration", "variant", "seed", "metric", "value"]


def merged(old: pd.DataFrame | None, new: list[dict]) -> pd.DataFrame:
    """A study's pilot CSV with `new` runs laid over the `old` ones (a run measured again replaces
    its row), ordered by configuration, seed and metric."""
    frame = pd.DataFrame(new, columns=PILOT_COLUMNS)
    if old is not None and len(old):
        keep = ~old.set_index(["variant", "metric"]).index.isin(frame.set_index(["variant", "metric"]).index)
        frame = pd.concat([old[keep].reindex(columns=PILOT_COLUMNS), frame], ignore_index=True)
    return frame.sort_values(["configuration", "seed", "metric"], kind="stable").reset_index(drop=True)
