"""The statistics every table and finding uses: intervals over seeds, differences between two
configurations, rank correlations, when a difference counts as resolved, a claim's verdict and the
power its seeds give. scipy does the arithmetic; this module decides what is reported."""

from __future__ import annotations

import math

import numpy as np


def _finite(values) -> np.ndarray:
    v = np.asarray([x for x in values if x is not None], float)
    return v[~np.isnan(v)]


def ci95(values) -> tuple[float, float, float, int]:
    """Mean and Student-t 95% interval over seeds: (mean, lo, hi, n); NaNs are dropped; no
    interval from one value."""
    from scipy import stats

    v = _finite(values)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(v.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    if np.ptp(v) == 0:
        return mean, mean, mean, n
    lo, hi = stats.ttest_1samp(v, 0.0).confidence_interval(0.95)
    return mean, float(lo), float(hi), n


# The scale an interval is taken on, so that it stays inside what the quantity can take: a loss
# (positive) on a log scale, an accuracy (0 to 1) on the logit scale; the mean and bounds are
# mapped back. A condition number (>= 1) is taken on the log scale and its interval cut at 1: a
# confidence interval intersected with the parameter space keeps its coverage.
SCALES = {"log": (np.log10, lambda v: 10 ** v),
          "logit": (lambda v: np.log(v / (1 - v)), lambda v: 1 / (1 + np.exp(-v))),
          "linear": (lambda v: v, lambda v: v)}
LOGIT_EPS = 1e-4  # accuracies of exactly 0 or 1 are held this far inside before the logit
KAPPA_FLOOR = 1.0


def scale_of(column: str) -> str:
    """The scale a column's interval is taken on: log for a loss or a kappa, logit for an
    accuracy, linear otherwise."""
    if "loss" in column or "kappa" in column:
        return "log"
    return "logit" if column.endswith("_acc") else "linear"


def onto_scale(values, scale: str) -> np.ndarray:
    """`values` (NaNs dropped) mapped onto `scale`: log keeps the positive ones, logit holds 0 and
    1 LOGIT_EPS inside."""
    v = _finite(values)
    if scale == "log":
        v = v[v > 0]
    if scale == "logit":
        v = np.clip(v, LOGIT_EPS, 1 - LOGIT_EPS)
    return SCALES[scale][0](v)


def ci95_on(values, scale: str = "linear", floor: float | None = None) -> tuple[float, float, float, int]:
    """ci95 taken on `scale` and mapped back (log: the geometric mean and its interval); `floor`:
    the least value the quantity can take, where the interval is cut."""
    mean, lo, hi, n = ci95(onto_scale(values, scale))
    mean, lo, hi = (float(SCALES[scale][1](x)) if not math.isnan(x) else x for x in (mean, lo, hi))
    if floor is not None and not math.isnan(lo):
        lo = max(lo, floor)
    return mean, lo, hi, n


def metric_range(column: str) -> tuple[float, float]:
    """The values a metric can take: an accuracy or a score in [0, 1] (a GLUE average too), a loss
    or an MSE at least 0, anything else unbounded."""
    if column.endswith("_acc") or column == "glue_avg" or column.startswith("glue_"):
        return 0.0, 1.0
    if "loss" in column or "mse" in column:
        return 0.0, math.inf
    return -math.inf, math.inf


def ci95_cut(values, column: str) -> tuple[float, float, float, int]:
    """ci95 (the arithmetic mean and its Student-t 95% interval) with the interval cut to what
    `column` can take (metric_range): a confidence interval intersected with the parameter space
    keeps its coverage. What every table and figure reports for a metric over seeds."""
    mean, lo, hi, n = ci95(values)
    low, high = metric_range(column)
    return mean, lo if math.isnan(lo) else max(lo, low), hi if math.isnan(hi) else min(hi, high), n


def welch(a, b) -> tuple[float, float, float]:
    """mean(a) - mean(b) with a Welch 95% interval; NaN bounds when either side has one value."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    if not len(a) or not len(b):
        return math.nan, math.nan, math.nan
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return diff, diff, diff
    lo, hi = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return diff, float(lo), float(hi)


# A difference is called only when its 95% interval clears zero by a quarter of its half-width,
# and "includes zero" (inconclusive, never "no difference": that takes a declared margin, see
# claim_verdict) only when the interval reaches that far past zero on both sides. In between
# the comparison is unresolved: a re-run on another CPU type (same seeds, different floating-point
# path) moved the headline interval by 6.5% of its half-width, enough to flip a verdict that sat
# on zero; the margin leaves four times that.
RESOLVE_MARGIN = 0.25


def resolve(lo: float, hi: float, margin: float = RESOLVE_MARGIN) -> str:
    """'above' / 'below' zero, 'includes zero', 'unresolved' (within the margin) or 'n/a' (no interval)."""
    if math.isnan(lo) or math.isnan(hi):
        return "n/a"
    room = margin * (hi - lo) / 2
    if lo > room:
        return "above"
    if hi < -room:
        return "below"
    if lo < -room and hi > room:
        return "includes zero"
    return "unresolved"


# Off the pinned platform (another CPU type, BLAS or GPU: docs/numerics.md) the same experiment
# gives another draw of the floating-point noise, which training amplifies as it would a change of
# seed: a number with standard error se moves by a normal variable of sd sqrt(2) se between two
# platforms. PLATFORM_REACH, in se, bounds that move: sqrt(2) x 3.29, the two-sided 99.9% bound,
# declared before the runs that measured the move across platforms (docs/numerics.md: the largest
# measured was well inside it).
PLATFORM_REACH = 4.65


def interval_se(lo: float, hi: float, n_a: int, n_b: int, confidence: float) -> float:
    """The standard error behind a t interval [lo, hi] of `confidence` on a difference of two means
    of n_a and n_b values. Welch's degrees of freedom are at most n_a + n_b - 2; taken at that, the
    t quantile is the smallest and the standard error the largest the interval allows."""
    from scipy import stats

    if math.isnan(lo) or math.isnan(hi) or n_a + n_b < 3:
        return math.nan
    return (hi - lo) / (2 * float(stats.t.ppf(0.5 + confidence / 2, n_a + n_b - 2)))


def verdicts_elsewhere(lo: float, hi: float, se: float, verdict_of, reach: float = PLATFORM_REACH) -> tuple:
    """The verdicts `verdict_of(lo, hi)` gives with the interval moved by up to `reach` x `se` either
    way, ordered from the lowest move to the highest: what another platform could read. Empty
    where there is no interval."""
    if math.isnan(se) or math.isnan(lo) or math.isnan(hi):
        return ()
    moves = np.linspace(-reach * se, reach * se, 2001)
    return tuple(dict.fromkeys(verdict_of(lo + d, hi + d) for d in moves))


def gmean(values) -> float:
    """Geometric mean of positive kappas; +inf (a singular matrix) makes it +inf, NaN is left out."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v) & (v > 0)]
    if not len(v):
        return math.nan
    return math.inf if np.isinf(v).any() else float(np.exp(np.log(v).mean()))


MIN_N_INTERVAL = 5  # below this, Fisher's z gives no usable interval (at n = 4 a rho of 1 is a 1-in-24 chance)


def spearman_ci(x, y) -> tuple[float, float, float, int]:
    """Spearman's rho with a Fisher-z 95% interval (SE sqrt(1.06 / (n - 3)), Fieller et al.;
    |rho| capped at 0.99 for the interval, which is degenerate at 1); no interval below 5 points.
    +inf (a singular kappa) takes part as the largest rank; NaN is left out."""
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = ~np.isnan(x) & ~np.isnan(y)
    x, y = stats.rankdata(x[ok]), stats.rankdata(y[ok])
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan, n
    rho = float(stats.spearmanr(x, y).statistic)
    return (rho, *rho_interval(rho, n), n)


def rho_interval(rho: float, n: int, partialled: int = 0) -> tuple[float, float]:
    """The Fisher-z 95% interval of a Spearman rho over n points, `partialled` variables partialled
    out (SE sqrt(1.06 / (n - 3 - partialled)), Fieller et al.; |rho| capped at 0.99, where the
    interval is degenerate); NaN where n - partialled is below MIN_N_INTERVAL or rho is NaN."""
    if not math.isfinite(rho) or n - partialled < MIN_N_INTERVAL:
        return math.nan, math.nan
    z, se = math.atanh(max(min(rho, 0.99), -0.99)), math.sqrt(1.06 / (n - 3 - partialled))
    return math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)


def signed(x: float | None, digits: int = 3, missing: str = "") -> str:
    """A difference with its sign ('+0.041'); `missing` where there is none (None or NaN)."""
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def fmt_ci(value: float, lo: float, hi: float) -> str:
    """'+0.41 [-0.37, +0.85]', or without the interval when there is none, or 'n/a'."""
    if math.isnan(value):
        return "n/a"
    return f"{value:+.2f}" + ("" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]")


# Declared claims (a study's `claims:`): a lean configuration against a baseline on one metric,
# at a margin fixed before the run. The difference is oriented so that positive means the lean
# model is better (accuracy up, or a loss down), and judged by one-sided Welch bounds at 95%.
ONE_SEED = "one seed, no interval"  # the verdict where a side has fewer than two values
CLAIM_VERDICTS = ("superior", "equivalent", "non-inferior", "inferior", "inconclusive", ONE_SEED)


def claim_verdict(lean, base, margin: float, mode: str = "max") -> dict:
    """{diff, lo, hi, verdict}: diff = lean - baseline (baseline - lean for `mode` min), lo and hi
    its one-sided 95% Welch bounds (together the two-sided 90% interval). The verdict is the
    strongest that holds:
      superior       lo > 0
      equivalent     -margin < lo and hi < +margin (two one-sided tests, TOST)
      non-inferior   lo > -margin
      inferior       hi < -margin
      inconclusive   otherwise; an interval straddling zero is not "no difference"
    and 'one seed, no interval' where a side has fewer than two values."""
    from scipy import stats

    if margin <= 0:
        raise ValueError(f"margin {margin}: must be > 0 (allowed: a positive number in the metric's units)")
    sign = 1.0 if mode == "max" else -1.0
    a, b = sign * _finite(lean), sign * _finite(base)
    if not len(a) or not len(b):
        return {"diff": math.nan, "lo": math.nan, "hi": math.nan, "verdict": "no data"}
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "lo": math.nan, "hi": math.nan, "verdict": ONE_SEED}
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        lo = hi = diff
    else:
        test = stats.ttest_ind(a, b, equal_var=False)
        lo, hi = (float(x) for x in test.confidence_interval(0.90))
    return {"diff": diff, "lo": lo, "hi": hi, "verdict": bounds_verdict(lo, hi, margin)}


def bounds_verdict(lo: float, hi: float, margin: float) -> str:
    """A claim's verdict from its one-sided 95% bounds on lean - baseline (claim_verdict's rule)."""
    if lo > 0:
        return "superior"
    if -margin < lo and hi < margin:
        return "equivalent"
    if lo > -margin:
        return "non-inferior"
    if hi < -margin:
        return "inferior"
    return "inconclusive"


# The claims' second interval (tables.claims_table `split_lo`/`split_hi`): a bootstrap over seeds
# and over the shared test examples, declared with the claims: 10,000 resamples from a fixed seed,
# so that a table is the same bytes on every run.
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def paired_bootstrap(lean, base, mode: str = "max", resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Two-sided 90% percentile interval (the claim's one-sided 95% bounds) of mean accuracy lean -
    baseline (baseline - lean for `mode` min), over both sources of uncertainty: each resample
    draws each arm's runs with replacement (retraining) and one common resample of the examples
    for both arms (the split they share: paired). `lean`, `base`: runs x examples of 0/1 outcomes.
    Counted in integers and divided once, so the interval is the same bits on every CPU (no BLAS).
    NaN where an arm has no run or the arms' splits differ in size."""
    a, b = np.asarray(lean, np.int64), np.asarray(base, np.int64)
    if a.ndim != 2 or b.ndim != 2 or not len(a) or not len(b) or a.shape[1] != b.shape[1] or not a.shape[1]:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).T  # examples x resamples: the split drawn
    right_a, right_b = a @ counts, b @ counts  # each run's correct answers on each resampled split
    cols = np.arange(resamples)[:, None]
    sum_a = right_a[rng.integers(0, len(a), (resamples, len(a))), cols].sum(1)  # the runs drawn, per arm
    sum_b = right_b[rng.integers(0, len(b), (resamples, len(b))), cols].sum(1)
    diff = sum_a / (len(a) * n) - sum_b / (len(b) * n)
    diff = diff if mode == "max" else -diff
    lo, hi = np.percentile(diff, [5.0, 95.0])
    return float(lo), float(hi)


def kept_share(lean, base, control, mode: str = "max", resamples: int = BOOTSTRAP_RESAMPLES,
               seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(share, lo, hi): the share of the control's effect that the lean model keeps, (lean -
    control) / (baseline - control) of the arms' means (1: the lean model matches the baseline,
    0: it does no better than the control), with its two-sided 90% percentile interval (the
    one-sided 95% bounds the claims read) over resampled runs, each arm drawn with replacement.
    Sums are exactly rounded (math.fsum), so the interval is the same bits on every CPU. NaN where
    an arm has fewer than two runs, or for the share where the control's effect is 0; the sign
    of `mode` cancels in the ratio."""
    arms = [_finite(v) for v in (lean, base, control)]
    if any(len(a) < 2 for a in arms):
        return math.nan, math.nan, math.nan

    def share(m_lean: float, m_base: float, m_ctrl: float) -> float:
        gap = m_base - m_ctrl
        return (m_lean - m_ctrl) / gap if gap else math.nan

    point = share(*(math.fsum(a) / len(a) for a in arms))
    rng = np.random.default_rng(seed)
    draws = [a[rng.integers(0, len(a), (resamples, len(a)))] for a in arms]
    means = [np.array([math.fsum(row) for row in d]) / d.shape[1] for d in draws]
    gap = means[1] - means[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(gap != 0, (means[0] - means[2]) / np.where(gap != 0, gap, 1.0), np.nan)
    shares = shares[np.isfinite(shares)]
    if not len(shares):
        return point, math.nan, math.nan
    lo, hi = np.percentile(shares, [5.0, 95.0])
    return float(point), float(lo), float(hi)


# How many seeds a declared claim needs: the power of its one-sided Welch test from a pilot's
# per-arm standard deviations, by the noncentral t distribution (`leaner pilot` reports it:
# planning/pilot.py).
#
# A claim (claim_verdict above) judges lean - baseline by its one-sided 95% Welch bound. For
# `non-inferior` the bound must clear -margin: the power is taken at a true difference of zero. For
# `superior` it must clear 0: the power is taken at a true gain of one margin (the margin is the gain
# the test is sized for, not a threshold: any gain whose bound clears 0 counts). For `inferior` (a
# cost declared, e.g. "depth matters") the upper bound must fall below -margin: the power is taken at
# the pilot's difference. A non-inferiority claim's report adds the power of equivalence (two
# one-sided tests within +-margin), simulated: a stronger verdict than non-inferiority (it also
# bounds the gain), so at the same seeds its power is lower.

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
