"""The statistics behind the overview and the tables: Welch and Spearman intervals, pooling, verdicts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from leaner.analysis.overview import heads_effect, kappa_error_correlation, verdict
from leaner.analysis.stats import spearman_ci, welch

pytestmark = pytest.mark.fast


def test_welch_interval_is_scipys():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 7), rng.normal(0.2, 2.0, 5)
    diff, lo, hi = welch(a, b)
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert diff == pytest.approx(a.mean() - b.mean())
    assert (lo, hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    d1, lo1, hi1 = welch([0.3], [0.1, 0.2])
    assert d1 == pytest.approx(0.15) and math.isnan(lo1) and math.isnan(hi1)


def test_verdicts_follow_the_interval_only():
    assert verdict(-0.3, -0.1) == "more heads help"  # error fell
    assert verdict(0.1, 0.4) == "more heads hurt"
    assert verdict(-0.1, 0.2) == "inconclusive"
    assert verdict(math.nan, math.nan) == "n/a (one seed)"


def test_an_interval_that_sits_on_zero_is_unresolved():
    """The README's old headline: [+0.001, +0.067] on one machine, [-0.00115, +0.066] on another;
    both are within a quarter of the half-width of zero, so neither is called."""
    from leaner.analysis.stats import resolve

    assert resolve(0.001, 0.067) == "unresolved" and resolve(-0.00115, 0.066) == "unresolved"
    assert verdict(-0.067, -0.001) == "unresolved"
    assert resolve(0.009, 0.067) == "above" and resolve(-0.02, 0.067) == "includes zero"
    assert resolve(-0.067, -0.009) == "below"


def test_spearman_interval_covers_the_truth_and_refuses_tiny_samples():
    x = np.arange(12.0)
    rho, lo, hi, n = spearman_ci(x, x**3)
    assert rho == pytest.approx(1.0) and n == 12 and 0.9 < lo < hi <= 1
    rng = np.random.default_rng(1)
    rho, lo, hi, _ = spearman_ci(rng.normal(size=200), rng.normal(size=200))
    assert lo < 0 < hi and hi - lo < 0.4
    rho, lo, hi, n = spearman_ci([1, 2, 3, 4], [1, 3, 2, 4])
    assert n == 4 and rho == pytest.approx(0.8) and math.isnan(lo)


def _configs(study, family, kappas, errors):
    return pd.DataFrame({"study": study, "family": family, "group": "g", "depth": 1,
                         "heads": range(1, len(kappas) + 1), "rank": 1, "model_width": 8, "params": 100,
                         "kappa_init": kappas, "kappa_final": kappas, "error_mean": errors,
                         "rank_fraction": 1.0, "errors": [np.array([e]) for e in errors]})


def test_pooling_by_family_and_overall():
    up = _configs("a", "P1", [1, 2, 3, 4, 5, 6, 7, 8], [0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.65, 0.9])
    down = _configs("b", "P2", [1, 2, 3, 4, 5, 6], [0.9, 0.8, 0.5, 0.4, 0.2, 0.1])
    corr = kappa_error_correlation(pd.concat([up, down], ignore_index=True)).set_index("study")
    assert corr.loc["a", "rho_kappa_error"] == pytest.approx(1.0)
    assert corr.loc["b", "rho_kappa_error"] == pytest.approx(-1.0)
    assert corr.loc["pooled P1", "lo"] > 0 and corr.loc["pooled P2", "hi"] < 0
    w_a, w_b = (8 - 3) / 1.06, (6 - 3) / 1.06  # inverse variances of Fisher's z, |rho| capped at 0.99
    z = (w_a * np.arctanh(0.99) + w_b * np.arctanh(-0.99)) / (w_a + w_b)
    assert corr.loc["pooled", "rho_kappa_error"] == pytest.approx(np.tanh(z))
    assert corr.loc["pooled", "configurations"] == 14
    effects = heads_effect(pd.concat([up, down], ignore_index=True))
    assert list(effects["verdict"]) == ["n/a (one seed)", "n/a (one seed)"]
    assert list(effects["heads"]) == ["1 -> 8", "1 -> 6"]


def test_a_comparison_with_a_model_that_did_not_learn_has_no_verdict():
    """A configuration none of whose runs learned gives its comparison no verdict; one with some
    runs that did not learn is compared over the rest, and the comparison's n and the findings
    count them."""
    from leaner.analysis.findings import findings

    rng = np.random.default_rng(1)

    def configs_with(stuck_counts, learned_none):
        return pd.DataFrame([{"study": "s", "family": "P1", "group": "depth=2", "depth": 2, "heads": h,
                              "rank": 16 // h, "params": 100, "error_mean": err, "n": 5,
                              "errors": err + rng.normal(0, 0.01, 5), "rank_fraction": 1 / h, "not_learned": stuck,
                              "learned_none": none}
                             for (h, err), stuck, none in zip(((1, 0.88), (4, 0.5)), stuck_counts, learned_none)])

    configs = configs_with((5.0, 0.0), (True, False))
    effect = heads_effect(configs).iloc[0]
    assert effect["verdict"] == "did not learn: L2/H1" and effect["delta_error"] < -0.3
    text = " ".join(findings(configs.assign(kappa_final=1.0), heads_effect(configs), pd.DataFrame()))
    assert "1 did not learn" in text and "kept out of every mean and verdict: s L2/H1 (5 of 5 seeds)" in text
    some = configs_with((2.0, 0.0), (False, False))  # 2 of 7 runs of L2/H1 did not learn: 5 compared
    effect = heads_effect(some).iloc[0]
    assert effect["verdict"] == "more heads help" and effect["n"] == "5, 5 (did not learn: 2, 0)"
    text = " ".join(findings(some.assign(kappa_final=1.0), heads_effect(some), pd.DataFrame()))
    assert "kept out of every mean and verdict: s L2/H1 (2 of 7 seeds)" in text
    learned = heads_effect(configs.assign(not_learned=[0.0, 0.0], learned_none=False)).iloc[0]
    assert learned["verdict"] == "more heads help"


def test_the_findings_give_the_across_configuration_rho_its_interval_or_say_why_it_has_none():
    """rho over configurations carries its Fisher-z interval, the partial one with the two variables
    partialled out taken from its degrees of freedom; below 5 points left, no interval and why."""
    from leaner.analysis.findings import _across
    from leaner.analysis.stats import rho_interval, spearman_ci

    row = pd.Series({"across_n": 8, "metric": "eval_acc", "across_rho": -0.98, "across_partial_rho": -0.71})
    assert _across(row) == ("across 8 configurations (kappa against eval_acc) rho -0.98 [-1.00, -0.88]; with "
                            "parameters and heads partialled out -0.71 [-0.97, +0.27]")
    five = _across(row.replace({8: 5}))
    assert "rho -0.98 [" in five
    assert five.endswith("-0.71 (no interval from 5 configurations less the 2 partialled out)")
    x = [1.0, 2.0, 3.0, 5.0, 4.0, 6.0]
    rho, lo, hi, n = spearman_ci(x, [2.0, 1.0, 4.0, 3.0, 6.0, 5.0])
    assert (lo, hi) == rho_interval(rho, n) and lo < rho < hi
    assert all(map(math.isnan, rho_interval(0.5, 6, partialled=2))) and all(map(math.isnan, rho_interval(0.5, 4)))
