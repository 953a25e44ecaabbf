"""Does conditioning carry the gain, or only mark the architecture? kappa against the metric with
the architecture removed.

Across configurations kappa and accuracy move together (P1's Fig. 2 reading), but so do the
parameter count and the head count: a correlation over configurations cannot tell kappa from
size. Two readings remove the architecture:

- *within a configuration*, over its seeds: each run's log10 kappa and metric less its
  configuration's means, pooled over configurations (the partial correlation given the
  configuration, as an ANCOVA reads it). P1's direction is declared: lower kappa, better metric
  (r < 0 for an accuracy, r > 0 for a loss); the test is one-sided at 5% (Student t on
  n - k - 1 degrees of freedom, k configurations), its interval two-sided 95% (Fisher z,
  standard error 1/sqrt(n - k - 2)), and `r_detectable` is the |r| it finds 80% of the time.
- *across configurations*, over their means: Spearman's rho of kappa against the metric beside
  the partial rho given log parameters and log heads (ranks residualised on theirs), so that the
  cross-configuration figure never stands alone.

A run that did not learn (summary.learned) is left out; a kappa that is infinite (a singular
matrix) or missing drops that run from that kappa's row only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from .stats import ALPHA, TARGET_POWER
from .summary import ARCH, learned_rows

KAPPAS = {  # summary column -> what it is
    "kappa_init_gmean": "head outputs, at initialisation",
    "kappa_final_gmean": "head outputs, after training",
    "kappa_jac_init_gmean": "block Jacobian, at initialisation",
    "kappa_jac_final_gmean": "block Jacobian, after training",
}

COLUMNS = ["kappa", "matrix", "runs", "configurations", "within_r", "within_r_lo", "within_r_hi",
           "slope_per_decade", "slope_lo", "slope_hi", "p_declared", "r_detectable", "verdict",
           "across_rho", "across_partial_rho", "across_n"]


def _within(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xd, yd = x.astype(float).copy(), y.astype(float).copy()
    for g in np.unique(groups):
        m = groups == g
        xd[m] -= xd[m].mean()
        yd[m] -= yd[m].mean()
    return xd, yd


def within_test(x, y, groups, mode: str) -> dict:
    """The pooled within-group correlation of `x` (log10 kappa) with `y` (the metric), its
    interval, slope (metric per decade of kappa) with its 95% interval, the one-sided p in P1's
    direction (`mode` "max": r < 0 predicted; "min": r > 0) and the verdict."""
    x, y, groups = np.asarray(x, float), np.asarray(y, float), np.asarray(groups)
    n, k = len(x), len(np.unique(groups))
    nan = {"within_r": math.nan, "within_r_lo": math.nan, "within_r_hi": math.nan,
           "slope_per_decade": math.nan, "slope_lo": math.nan, "slope_hi": math.nan, "p_declared": math.nan,
           "r_detectable": math.nan, "verdict": "n/a (too few runs: needs n - k > 3)", "runs": n, "configurations": k}
    df = n - k - 1
    if df < 3:
        return nan
    xd, yd = _within(x, y, groups)
    sxx, syy = float(xd @ xd), float(yd @ yd)
    if sxx == 0 or syy == 0:
        return {**nan, "verdict": "n/a (no spread within a configuration)"}
    r = float(np.clip((xd @ yd) / math.sqrt(sxx * syy), -1 + 1e-15, 1 - 1e-15))
    t = r * math.sqrt(df / (1 - r * r))
    predicted = -1 if mode == "max" else 1
    p = float(sps.t.sf(predicted * t, df))  # one-sided, in P1's direction
    se_z = 1 / math.sqrt(n - k - 2) if n - k - 2 > 0 else math.inf
    z, q = math.atanh(r), sps.norm.ppf(0.975)
    lo, hi = math.tanh(z - q * se_z), math.tanh(z + q * se_z)
    slope = float((xd @ yd) / sxx)
    resid = yd - slope * xd
    se_b = math.sqrt(float(resid @ resid) / df / sxx)
    qt = sps.t.ppf(0.975, df)
    detectable = math.tanh((sps.norm.ppf(1 - ALPHA) + sps.norm.ppf(TARGET_POWER)) * se_z)
    if p < ALPHA:
        verdict = "lower kappa, better (P1's direction): shown"
    elif (predicted < 0 and lo > 0) or (predicted > 0 and hi < 0):
        verdict = "the opposite of P1's direction"
    else:
        verdict = "inconclusive: no relation shown"
    return {"within_r": r, "within_r_lo": lo, "within_r_hi": hi, "slope_per_decade": slope,
            "slope_lo": slope - qt * se_b, "slope_hi": slope + qt * se_b, "p_declared": p,
            "r_detectable": detectable, "verdict": verdict, "runs": n, "configurations": k}


def partial_spearman(x, y, controls: list) -> float:
    """Spearman's rho of x and y given `controls`: their ranks residualised (least squares) on
    the controls' ranks; NaN with fewer than len(controls) + 3 points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < len(controls) + 3:
        return math.nan
    design = np.column_stack([np.ones(len(x)), *(sps.rankdata(c) for c in controls)])
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    ex = rx - design @ np.linalg.lstsq(design, rx, rcond=None)[0]
    ey = ry - design @ np.linalg.lstsq(design, ry, rcond=None)[0]
    if not (ex @ ex) or not (ey @ ey):
        return math.nan
    return float((ex @ ey) / math.sqrt((ex @ ex) * (ey @ ey)))


def kappa_within_table(summary: pd.DataFrame, metric: str, mode: str) -> pd.DataFrame:
    """One row per kappa the summary holds: the within-configuration test and, beside it, the
    across-configuration rho with and without the architecture (parameters, heads) removed."""
    runs = learned_rows(summary, fallback=False)
    rows = []
    for column, matrix in KAPPAS.items():
        if column not in runs:
            continue
        kappa = runs[column].to_numpy(float)
        ok = np.isfinite(kappa) & (kappa > 0) & np.isfinite(runs[metric].to_numpy(float))
        sub = runs[ok].assign(log_kappa=np.log10(kappa[ok]))
        groups = sub[ARCH].astype(str).agg("-".join, axis=1).to_numpy()
        test = within_test(sub["log_kappa"].to_numpy(), sub[metric].to_numpy(float), groups, mode)
        means = sub.groupby(ARCH, sort=True).agg(
            log_kappa=("log_kappa", "mean"), value=(metric, "mean"), params=("params_total", "first"),
            heads=("heads", "first"))
        across = sps.spearmanr(means["log_kappa"], means["value"]).statistic if len(means) > 2 else math.nan
        rows.append({"kappa": column, "matrix": matrix, **test, "across_rho": float(across),
                     "across_partial_rho": partial_spearman(means["log_kappa"], means["value"],
                                                            [np.log(means["params"]), np.log(means["heads"])]),
                     "across_n": len(means)})
    return pd.DataFrame(rows).reindex(columns=COLUMNS)
