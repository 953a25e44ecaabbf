"""Declared claims: a lean configuration against a baseline at a margin fixed in the config,
judged by one-sided Welch bounds (superior, equivalent, non-inferior, inferior, inconclusive),
checked against the grid before anything runs, and tabled from the declared seeds only."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from leaner.analysis.stats import claim_verdict
from leaner.analysis.tables import claims_table
from leaner.grid import grid_points
from leaner.workflow.config import ConfigError, load_yaml
from leaner.workflow.plan import build_plan

from conftest import TINY, planned_outputs, snakemake

pytestmark = pytest.mark.fast

CLAIM = {"name": "two_heads", "baseline": {"depth": 1, "heads": 1}, "lean": [{"depth": 1, "heads": 2}],
         "margin": 0.05, "seeds": [0, 1]}


def tiny(claims: list[dict] | None = None) -> dict:
    """The tiny config, its ViT study declaring `claims` (default: two heads against one at depth 1,
    seeds 0 and 1)."""
    cfg = load_yaml(TINY)
    cfg["studies"]["tiny"]["claims"] = [CLAIM] if claims is None else claims
    return cfg


def _around(mean: float, spread: float = 0.01, n: int = 5) -> np.ndarray:
    return mean + spread * np.linspace(-1, 1, n)


@pytest.mark.parametrize("lean,verdict", [
    (_around(0.95), "superior"),          # clears zero
    (_around(0.90, 0.002), "equivalent"),  # both bounds inside +-0.01
    (_around(0.905, 0.012), "non-inferior"),  # above -0.01, reaches past +0.01
    (_around(0.80), "inferior"),          # below -0.01 entirely
    (_around(0.90, 0.2), "inconclusive"),  # straddles zero and both margins: not "no difference"
])
def test_each_verdict_follows_from_the_one_sided_bounds(lean, verdict):
    base = _around(0.90, 0.002)
    v = claim_verdict(lean, base, margin=0.01)
    assert v["verdict"] == verdict, v
    lo, hi = stats.ttest_ind(lean, base, equal_var=False).confidence_interval(0.90)
    assert math.isclose(v["lo"], lo) and math.isclose(v["hi"], hi)
    # the one-sided 95% lower bound is the two-sided 90% interval's
    one_sided = stats.ttest_ind(lean, base, equal_var=False, alternative="greater").confidence_interval(0.95)
    assert math.isclose(v["lo"], one_sided.low)


def test_for_a_loss_positive_means_the_lean_model_is_lower():
    worse = claim_verdict(lean=_around(1.80), base=_around(1.06), margin=0.02, mode="min")
    assert worse["verdict"] == "inferior" and math.isclose(worse["diff"], -0.74)
    better = claim_verdict(lean=_around(1.00), base=_around(1.06), margin=0.02, mode="min")
    assert better["verdict"] == "superior" and better["diff"] > 0


def test_one_seed_gives_no_interval_and_a_margin_must_be_positive():
    assert claim_verdict([0.9], _around(0.9), 0.01)["verdict"] == "one seed, no interval"
    with pytest.raises(ValueError, match="margin 0: must be > 0"):
        claim_verdict(_around(0.9), _around(0.9), 0)


def _plan_problems(claims: list[dict]) -> list[str]:
    cfg = tiny(claims)
    with pytest.raises(ConfigError) as exc:
        build_plan(cfg)
    return exc.value.problems


def test_a_claim_names_configurations_of_the_grid_and_its_seeds():
    plan = build_plan(tiny())
    claim = plan.studies["tiny"].claims[0]
    assert claim["baseline"] == {"depth": 1, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32,
                                 "qk_scale": 1.0}
    assert claim["metric"] == "eval_acc" and claim["mode"] == "max" and claim["seeds"] == [0, 1]
    figs, tabs = planned_outputs(plan.studies["tiny"])
    assert "claims" in tabs and "pareto" in figs
    assert "pareto" not in planned_outputs(build_plan(tiny([])).studies["tiny"])[0]

    good = {"name": "c", "baseline": {"depth": 2, "heads": 1}, "lean": [{"depth": 1, "heads": 2}],
            "margin": 0.01, "seeds": [0]}
    assert _plan_problems([{**good, "lean": [{"depth": 3}]}]) == [
        'config error: studies.tiny.claims[0].lean[0]: {"depth": 3} matches no configurations of the grid '
        "(allowed: depth=1,heads=1,width=16,head_dim=16,mlp_hidden=32; depth=1,heads=2,width=16,head_dim=8,"
        "mlp_hidden=32; depth=2,heads=1,width=16,head_dim=16,mlp_hidden=32; depth=2,heads=2,width=16,head_dim=8,"
        "mlp_hidden=32)"]
    assert _plan_problems([{**good, "baseline": {"depth": 2}}])[0].startswith(
        'config error: studies.tiny.claims[0].baseline: {"depth": 2} matches 2 configurations of the grid, '
        "name more axes (allowed: ")
    assert _plan_problems([{**good, "seeds": [0, 7]}]) == [
        "config error: studies.tiny.claims[0].seeds: [7] not in the study's grid (allowed: [0, 1])"]
    assert _plan_problems([{**good, "metric": "eval_loss"}]) == [
        "config error: studies.tiny.claims[0].metric: 'eval_loss' is not a metric of task image_classification "
        "(allowed: eval_acc)"]
    assert _plan_problems([good, good]) == [
        "config error: studies.tiny.claims: the name 'c' is declared twice (allowed: one claim a name)"]
    assert _plan_problems([{**good, "margin": 0}])[0].startswith(
        "config error: studies.tiny.claims[0].margin: 0 is not allowed")


def _summary() -> pd.DataFrame:
    rows = []
    arch = {"width": 16, "mlp_hidden": 32}
    for seed in range(4):
        rows.append({"depth": 2, "heads": 1, "head_dim": 16, **arch, "seed": seed, "params_total": 1000,
                     "eval_acc": 0.90 + 0.002 * seed, "claims_digest": "d1"})
        rows.append({"depth": 1, "heads": 2, "head_dim": 8, **arch, "seed": seed, "params_total": 600,
                     "eval_acc": [0.95, 0.96, 0.97, 0.20][seed], "claims_digest": "d1"})  # seed 3 is not declared
        rows.append({"depth": 1, "heads": 1, "head_dim": 16, **arch, "seed": seed, "params_total": 600,
                     "eval_acc": 0.80 + 0.01 * seed, "claims_digest": "d1"})  # the control
    return pd.DataFrame(rows)


def test_the_table_uses_the_declared_seeds_only_and_puts_the_baseline_first():
    claim = {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.01, "seeds": [0, 1, 2],
             "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
             "lean": [{"depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32}]}
    table = claims_table(_summary(), [claim])
    assert list(table["role"]) == ["baseline", "lean"]
    base, lean = table.iloc[0], table.iloc[1]
    assert base["n"] == lean["n"] == 3 and lean["seeds_missing"] == 0
    assert math.isclose(lean["param_reduction_pct"], 40.0) and lean["verdict"] == "superior"
    assert math.isclose(lean["lean_advantage"], 0.96 - 0.902)
    declared_4 = claims_table(_summary(), [{**claim, "seeds": [0, 1, 2, 3, 4]}]).iloc[1]
    assert declared_4["n"] == 4 and declared_4["seeds_missing"] == 1 and declared_4["verdict"] == "inconclusive"


def test_the_report_reads_the_claims_from_the_run_config_not_from_its_command_line(tmp_path):
    """One channel: the report job's claims are its study's, as the plan resolves them from the
    configuration the run resolved (its input), never an argument of its own; and the config the
    run resolved rebuilds the same plan."""
    path = tmp_path / "claimed.yaml"
    path.write_text(yaml.safe_dump(tiny()))
    out = snakemake(tmp_path, "-n", "-p", "results/tables", "--cores", "1", configfile=path).stdout
    command = out[out.index("rule report:"):]
    assert "leaner report --config results/overview/config.yaml" in command and "--claims" not in command
    snakemake(tmp_path, "results/overview/config.yaml", "--cores", "1", configfile=path)
    resolved = build_plan(load_yaml(tmp_path / "results" / "overview" / "config.yaml")).studies["tiny"]
    assert resolved.declared() == build_plan(tiny()).studies["tiny"].declared()
    assert resolved.declared()["claims"] == json.loads(json.dumps(build_plan(tiny()).studies["tiny"].claims))
    proc = snakemake(tmp_path, "-n", "results/tables/tiny-claims.csv", "--cores", "1", configfile=path, check=False)
    assert proc.returncode != 0 and "the report job makes results/tables/ whole; target results/tables" in proc.stderr


def test_the_report_writes_the_claims_table_people_read(tmp_path):
    summary = _summary().assign(task="image_classification", protocols="fixed_width", status="ok",
                                variant="v")
    summary.to_csv(tmp_path / "summary.csv", index=False)
    claim = {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.01, "seeds": [0, 1, 2],
             "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
             "lean": [{"depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32}], "rationale": ""}
    from leaner.analysis import report

    points = grid_points(summary.to_dict("records"))
    declared = report.StudyData("s", summary, claims=[claim], points=points)
    tables = dict(report.study_outputs(declared)[1])
    report.write_tables(declared, tmp_path / "t", [("claims", tables["claims"])])
    md = (tmp_path / "t" / "s-claims.md").read_text()
    assert "difference (+: lean better)" in md and "superior" in md and "one-sided 95% lower bound" in md
    body = md.split("else inconclusive")[1]
    assert body.index("L2-H1-D16-mlp32") < body.index("L1-H2-D16-mlp32") < body.index("superior")
    # a study that declares no claims gets no claims table
    assert "claims" not in dict(report.study_outputs(report.StudyData("u", summary, points=points))[1])


def test_the_headline_is_every_studys_declared_claims_baseline_first():
    from leaner.analysis.findings import headline_markdown
    from leaner.analysis.overview import headline

    claim = {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.01, "seeds": [0, 1, 2],
             "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
             "lean": [{"depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32}], "declaration": "d1"}
    table = claims_table(_summary(), [claim]).assign(study="s")
    head = headline([table.iloc[:0], table])
    assert list(head["role"]) == ["baseline", "lean"] and list(head["study"]) == ["s", "s"]
    md = headline_markdown(head).splitlines()
    assert md[2].startswith("| `s` | lean | baseline | L2-H1-D16-mlp32 | 1.0k | eval_acc | 0.902 | 3 |  |")
    lean = md[3]
    assert "| 0.6k (-40%) |" in lean and "| +0.058 [" in lean
    assert lean.endswith("| 0.01 | superior | non-inferior: yes | the same |  |")
    assert headline([]).empty
    # a claim whose declaration changed after its runs, or was never recorded with them, stays out
    changed = claims_table(_summary(), [{**claim, "name": "changed", "declaration": "d2"}]).assign(study="s")
    unknown = claims_table(_summary().drop(columns="claims_digest"), [claim]).assign(study="t")
    assert list(headline([changed, table, unknown])["claim"]) == ["lean", "lean"]


def _claim(**extra) -> dict:
    return {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.01, "seeds": [0, 1, 2],
            "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
            "lean": [{"depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32}], "declaration": "d1",
            **extra}


def test_the_control_is_judged_against_the_baseline_and_each_lean_row_against_the_hypothesis():
    control = {"depth": 1, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32}
    table = claims_table(_summary(), [_claim(control=control)])
    assert list(table["role"]) == ["baseline", "lean", "control"]
    lean, ctrl = table.iloc[1], table.iloc[2]
    assert lean["hypothesis"] == "non-inferior" and lean["supported"] == "yes" and lean["verdict"] == "superior"
    v = claim_verdict([0.80, 0.81, 0.82], [0.90, 0.902, 0.904], 0.01)
    assert ctrl["verdict"] == v["verdict"] == "inferior" and math.isclose(ctrl["bound_lo"], v["lo"])
    assert ctrl["configuration"] == "L1-H1-D16-mlp32" and ctrl["hypothesis"] == ctrl["supported"] == ""
    assert (table["declaration"] == "as declared").all()
    # the margin anchored on the control: (lean - control) / (baseline - control) of the means
    assert math.isclose(lean["control_cost"], ctrl["control_cost"]) and math.isclose(ctrl["control_cost"], -0.092)
    assert math.isclose(lean["margin_share"], 0.01 / 0.092)
    assert math.isclose(lean["kept_share"], (0.96 - 0.81) / (0.902 - 0.81))
    assert lean["kept_lo"] < lean["kept_share"] < lean["kept_hi"]
    assert math.isnan(ctrl["kept_share"]) and math.isnan(table.iloc[0]["kept_share"])
    # superior declared: a non-inferior verdict does not support it
    superior = claims_table(_summary().assign(eval_acc=lambda f: f["eval_acc"].where(f["heads"] != 2, 0.901)),
                            [_claim(hypothesis="superior")]).iloc[1]
    assert superior["verdict"] == "equivalent" and superior["supported"] == "no"


def test_a_changed_declaration_and_other_seeds_are_said_and_seeds_get_no_verdict():
    from leaner.analysis.tables import declaration

    runs = _summary()
    assert declaration(_claim(), runs) == "as declared"
    assert declaration(_claim(declaration="d2"), runs) == "declared after the runs"
    assert declaration(_claim(), runs.assign(claims_digest=[None] + ["d1"] * (len(runs) - 1))) == \
        "not recorded with the runs"
    # an every_study overlay runs the claim on other seeds: the plan keeps the declared ones
    overlay = tiny([{**CLAIM, "seeds": [0]}])
    overlay["every_study"] = {"seeds": [0, 1]}
    plan = build_plan(overlay)
    claim = plan.studies["tiny"].claims[0]
    assert claim["seeds"] == [0, 1] and claim["declared_seeds"] == [0]
    assert claim["declaration"] == plan.studies["tiny"].claims_digest == build_plan(tiny([{**CLAIM, "seeds": [0]}])) \
        .studies["tiny"].claims_digest
    table = claims_table(_summary(), [_claim(declared_seeds=[0, 1, 2, 3])])
    assert (table["declaration"] == "seeds differ from the declaration").all()
    assert table.iloc[1]["verdict"] == "seeds differ from the declaration" and table.iloc[1]["supported"] == ""


def test_what_another_platform_could_read_moves_the_bounds_by_the_platform_reach():
    """stats.verdicts_elsewhere: the interval moved by up to PLATFORM_REACH standard errors either
    way, each verdict it crosses in order; interval_se inverts a t interval."""
    import functools

    from scipy import stats as sps

    from leaner.analysis.stats import PLATFORM_REACH, bounds_verdict, interval_se, verdicts_elsewhere

    se = interval_se(-1.0, 1.0, 10, 10, 0.90)
    assert math.isclose(se, 1.0 / sps.t.ppf(0.95, 18))
    assert math.isnan(interval_se(float("nan"), 1.0, 10, 10, 0.9))
    verdict = functools.partial(bounds_verdict, margin=0.02)
    # the lower bound -0.001 sits next to 0, the upper +0.025 next to the margin: each crossing in turn
    assert verdicts_elsewhere(-0.001, 0.025, 0.0075, verdict) == ("inconclusive", "equivalent", "non-inferior",
                                                                   "superior")
    assert verdicts_elsewhere(-0.001, 0.025, 0.0002, verdict) == ("non-inferior",)  # too far from any threshold
    assert PLATFORM_REACH * 0.0075 > 0.019  # what moved the lower bound past -margin above
    assert verdicts_elsewhere(0.0, 1.0, float("nan"), verdict) == ()


def test_a_run_that_never_beat_chance_is_counted_and_left_out_of_the_verdict():
    """summary.learned: an accuracy must clear the majority rate by 1.645 binomial standard errors,
    a loss must fall below the unigram's, P2's best MSE below 0.95 of the zero predictor's. A claim's
    run that did not learn is counted (`not_learned`) and left out of its arm's mean and verdict; an
    arm none of whose runs learned gets "did not learn"."""
    from leaner.analysis.summary import learned, nearest_learned

    acc = {"metric": "eval_acc", "value": 0.12, "n": 500}
    # 0.12 + 1.645 * sqrt(0.12 * 0.88 / 500) = 0.1439
    assert not learned(0.13, acc) and not learned(0.143, acc) and learned(0.145, acc) and not learned(None, acc)
    loss = {"metric": "eval_loss", "value": 2.9, "n": 4096}
    assert learned(1.2, loss) and not learned(2.895, loss) and not learned(float("nan"), loss)
    assert nearest_learned(0.94) and not nearest_learned(0.95) and not nearest_learned(1.0) \
        and not nearest_learned(float("nan"))
    claim = {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.01, "seeds": [0, 1, 2],
             "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
             "lean": [{"depth": 1, "heads": 2, "width": 16, "head_dim": 8, "mlp_hidden": 32}]}
    summary = _summary().assign(learned=lambda f: ~((f["depth"] == 2) & (f["seed"] == 1)))
    table = claims_table(summary, [claim])
    base, lean = table.iloc[0], table.iloc[1]
    kept = summary[(summary["depth"] == 2) & summary["seed"].isin([0, 2])]["eval_acc"]
    assert (base["n"], base["not_learned"], base["seeds_missing"]) == (2, 1, 0)
    assert math.isclose(base["mean"], kept.mean()) and lean["not_learned"] == 0
    assert math.isclose(lean["lean_advantage"], 0.96 - kept.mean())
    assert lean["verdict"] == claim_verdict([0.95, 0.96, 0.97], list(kept), 0.01)["verdict"] == "superior"
    none = claims_table(_summary().assign(learned=lambda f: f["depth"] != 2), [claim]).iloc[1]
    assert none["verdict"] == "did not learn (baseline)"
    assert claims_table(_summary().assign(learned=True), [claim]).iloc[1]["verdict"] == "superior"


@pytest.mark.slow
def test_each_run_records_the_declaration_and_a_later_change_is_said_without_retraining(tmp_path):
    """Through Snakemake: every run's metrics.json carries its study's claims digest; the claims
    table reads "as declared"; a rationale edited afterwards re-runs the tables only, which then
    read "declared after the runs", and the headline leaves the claim out."""
    cfg = tiny([{**CLAIM, "baseline": {"depth": 2, "heads": 1}, "lean": [{"depth": 1, "heads": 2}],
                 "control": {"depth": 1, "heads": 1}, "seeds": [0], "rationale": "first"}])
    del cfg["studies"]["tiny_nearest"]
    cfg["studies"]["tiny"]["grid"] = [{"protocol": ["fixed_width"], "width": [16], "depth": [1, 2], "heads": [1],
                                       "mlp_ratio": [2], "seeds": [0]},
                                      {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2],
                                       "mlp_ratio": [2], "seeds": [0]}]
    path = tmp_path / "claimed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    targets = ["results/tables"]
    snakemake(tmp_path, *targets, "--cores", "2", configfile=path)
    digest = build_plan(cfg).studies["tiny"].claims_digest
    metrics = sorted((tmp_path / "results" / "tiny").glob("*/metrics.json"))
    assert len(metrics) == 3 and all(json.loads(m.read_text())["claims_digest"] == digest for m in metrics)
    from leaner.io import unpack_outcomes

    for m in map(lambda path: json.loads(path.read_text()), metrics):  # the final model, example by example
        right = unpack_outcomes(m["eval_outcomes"])
        assert len(right) == 359 and right.sum() / len(right) == m["final"]["eval_acc"]
    table = pd.read_csv(tmp_path / "results" / "tables" / "tiny-claims.csv")
    assert list(table["role"]) == ["baseline", "lean", "control"] and (table["declaration"] == "as declared").all()
    assert len(pd.read_csv(tmp_path / "results" / "tables" / "all_studies-headline.csv")) == 3
    trade = pd.read_csv(tmp_path / "results" / "tables" / "all_studies-where_trade_holds.csv")
    assert trade[["study", "kind", "changed"]].values.tolist() == [
        ["tiny", "depth trade", "layers 2 -> 1, heads 1 -> 2"]]
    verdicts = set(table["verdict"].dropna())  # one seed a side: no verdict, or none where a side did not learn
    assert trade["reading"].iloc[0] == ("descriptive (one seed)" if verdicts == {"one seed, no interval"} else
                                        f"no verdict ({table['verdict'].dropna().iloc[0]})")
    trained = {m: m.stat().st_mtime_ns for m in metrics}

    cfg["studies"]["tiny"]["claims"][0]["rationale"] = "rewritten after the runs"
    path.write_text(yaml.safe_dump(cfg))
    out = snakemake(tmp_path, *targets, "--cores", "2", configfile=path)
    assert "rule train" not in out.stdout + out.stderr
    assert all(m.stat().st_mtime_ns == t for m, t in trained.items())
    table = pd.read_csv(tmp_path / "results" / "tables" / "tiny-claims.csv")
    assert (table["declaration"] == "declared after the runs").all()
    assert pd.read_csv(tmp_path / "results" / "tables" / "all_studies-headline.csv").empty


def test_the_findings_say_what_the_control_shows():
    """A control that matches the baseline too: the lost layer alone costs nothing measurable; one
    that falls short: the heads carry the match; one seed a side: no verdict."""
    from leaner.analysis.findings import claim_findings

    control = {"depth": 1, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32}
    falls_short = claims_table(_summary(), [_claim(control=control)]).assign(study="s")
    said = claim_findings(falls_short)[0]
    assert "so what the lean models add carries the match, not the control's change alone" in said
    # the margin anchored on the control: its cost, the margin's share of it, the share kept
    assert ("Anchored on the control (-0.092 against the baseline): the margin 0.01 is 11% of that; "
            "L1-H2-D16-mlp32 keeps 163% [") in said
    matches = claims_table(_summary().assign(eval_acc=lambda f: f["eval_acc"].where(f["heads"] != 1, 0.90)
                                             .where(f["depth"] != 1, 0.95)),
                           [_claim(control=control)]).assign(study="s")
    assert matches.iloc[2]["verdict"] in ("superior", "equivalent", "non-inferior")
    assert "so what it lacks costs nothing measurable here" in claim_findings(matches)[0]
    one = claims_table(_summary(), [_claim(control=control, seeds=[0])]).assign(study="s")
    assert claim_findings(one) == ["Claim lean (s, eval_acc, one seed) against L2-H1-D16-mlp32: L1-H2-D16-mlp32 "
                                   "+0.050; control L1-H1-D16-mlp32 -0.100 (+: better); one run a side, no verdict."]
    assert (one.loc[one["role"] == "lean", "supported"] == "n/a").all()


def test_the_share_kept_is_the_lean_models_place_between_control_and_baseline():
    from leaner.analysis.stats import kept_share

    rng = np.random.default_rng(5)
    base, control = 0.90 + 0.01 * rng.standard_normal(20), 0.80 + 0.01 * rng.standard_normal(20)
    halfway = (base + control) / 2 + 0.003 * rng.standard_normal(20)
    share, lo, hi = kept_share(halfway, base, control)
    assert math.isclose(share, (halfway.mean() - control.mean()) / (base.mean() - control.mean()))
    assert 0.4 < lo < share < hi < 0.6
    assert kept_share(halfway, base, control) == (share, lo, hi)  # a fixed seed: the same bits
    # the ratio has no sign of its own: a loss (mode min) reads the same share
    assert kept_share(-halfway, -base, -control, mode="min") == (share, lo, hi)
    assert kept_share(base, base, control)[0] == 1.0 and kept_share(control, base, control)[0] == 0.0
    # the interval widens with the runs' spread, and a control with no effect has no share
    assert np.ptp(kept_share(halfway + 0.02 * rng.standard_normal(20), base, control)[1:]) > hi - lo
    assert math.isnan(kept_share(halfway, base, base)[0])
    assert all(math.isnan(x) for x in kept_share(halfway[:1], base, control))


def test_the_bootstrap_over_seeds_and_examples_is_paired_and_adds_what_each_source_adds():
    from leaner.analysis.stats import paired_bootstrap

    rng = np.random.default_rng(3)
    lean = (rng.random((6, 200)) < 0.9).astype(np.uint8)
    base = (rng.random((5, 200)) < 0.85).astype(np.uint8)
    lo, hi = paired_bootstrap(lean, base)
    diff = lean.mean() - base.mean()
    assert lo < diff < hi and (lo, hi) == paired_bootstrap(lean, base)  # fixed seed: the same bits
    # every run of an arm the same: resampling the seeds adds nothing, only the examples count;
    # an independent bootstrap over the examples alone, written here, gives the same spread
    one_a, one_b = np.repeat(lean[:1], 6, 0), np.repeat(base[:1], 5, 0)
    lo1, hi1 = paired_bootstrap(one_a, one_b, resamples=20_000)
    d = lean[0].astype(float) - base[0]
    draws = np.random.default_rng(9).integers(0, 200, (20_000, 200))
    ref_lo, ref_hi = np.percentile(d[draws].mean(1), [5, 95])
    assert lo1 == pytest.approx(ref_lo, abs=0.006) and hi1 == pytest.approx(ref_hi, abs=0.006)
    # paired: where both arms get the same examples right (hard examples shared), one common
    # resample of the examples cancels them; resampling each arm's examples apart would not
    hard = rng.random(200) < 0.3
    base_p = np.repeat((~hard)[None].astype(np.uint8), 5, 0)
    lean_p = np.repeat(base_p[:1], 6, 0)
    lean_p[:, np.flatnonzero(hard)[:6]] = 1  # 6 hard examples more, in every lean run
    plo, phi = paired_bootstrap(lean_p, base_p)
    draws = np.random.default_rng(7).integers(0, 200, (2, 20_000, 200))
    apart = np.percentile(lean_p[0][draws[0]].mean(1) - base_p[0][draws[1]].mean(1), [5, 95])
    assert plo == pytest.approx(0.03, abs=0.02) and (phi - plo) < 0.3 * (apart[1] - apart[0])
    # the examples alone: one distinct example column each, seeds vary: the spread is the seeds'
    col_a, col_b = lean[:, :1].repeat(200, 1), base[:, :1].repeat(200, 1)
    lo2, hi2 = paired_bootstrap(col_a, col_b)
    seeds = np.random.default_rng(5)
    ref = [col_a[seeds.integers(0, 6, 6), 0].mean() - col_b[seeds.integers(0, 5, 5), 0].mean() for _ in range(20_000)]
    assert lo2 == pytest.approx(np.percentile(ref, 5), abs=0.05) and hi2 == pytest.approx(np.percentile(ref, 95),
                                                                                          abs=0.05)
    assert math.isnan(paired_bootstrap(lean, base[:, :10])[0]) and math.isnan(paired_bootstrap(lean[:0], base)[0])
    assert paired_bootstrap(lean, base, mode="min") == (-hi, -lo)


def test_the_claims_table_bounds_the_difference_over_the_test_split_too():
    from leaner.io import pack_outcomes, unpack_outcomes

    rng = np.random.default_rng(4)
    summary = _summary()
    summary["eval_outcomes"] = [pack_outcomes(rng.random(120) < acc) for acc in summary["eval_acc"].clip(0, 1)]
    assert (unpack_outcomes(summary["eval_outcomes"].iloc[0]) <= 1).all() and \
        len(unpack_outcomes(summary["eval_outcomes"].iloc[0])) == 120
    lean = claims_table(summary, [_claim()]).iloc[1]
    assert lean["split_lo"] < lean["lean_advantage"] < lean["split_hi"]
    assert lean["split_verdict"] in ("superior", "equivalent", "non-inferior", "inferior", "inconclusive")
    # over seeds alone the bounds are narrower than with the split's share (the Welch bounds)
    assert lean["split_hi"] - lean["split_lo"] > lean["bound_hi"] - lean["bound_lo"]
    none = claims_table(_summary(), [_claim()]).iloc[1]
    assert math.isnan(none["split_lo"]) and none["split_verdict"] == "n/a (no per-example results)"


def _runs(r_within: float, seeds: int = 40, seed: int = 0) -> pd.DataFrame:
    """Three configurations whose means put kappa and accuracy in lockstep across them (as size
    does), while within each the runs' log kappa and accuracy correlate by `r_within`."""
    rng = np.random.default_rng(seed)
    rows = []
    for heads, params, log_kappa, acc in [(4, 100, 5.0, 0.80), (8, 200, 4.0, 0.85), (16, 400, 3.0, 0.9)]:
        z = rng.multivariate_normal([0, 0], [[1, r_within], [r_within, 1]], seeds)
        for j, (zk, za) in enumerate(z):
            rows.append({"depth": 1, "heads": heads, "width": 64, "head_dim": 64 // heads, "mlp_hidden": 128,
                         "qk_scale": 1.0, "seed": j, "params_total": params, "learned": True,
                         "eval_acc": acc + 0.01 * za,
                         "kappa_final_gmean": 10 ** (log_kappa + 0.3 * zk), "kappa_init_gmean": math.inf})
    return pd.DataFrame(rows)


def test_kappa_within_a_configuration_is_tested_in_p1s_direction_apart_from_the_architecture():
    from leaner.analysis.kappa_within import kappa_within_table, partial_spearman, within_test

    # across the three configurations kappa falls as accuracy rises (rho -1), but within them it
    # tells nothing: the test says so and does not inherit the architecture's correlation
    none = kappa_within_table(_runs(0.0), "eval_acc", "max").set_index("kappa")
    assert none.loc["kappa_final_gmean", "across_rho"] == pytest.approx(-1.0)
    assert none.loc["kappa_final_gmean", "verdict"] == "inconclusive: no relation shown"
    assert none.loc["kappa_final_gmean", "within_r_lo"] < 0 < none.loc["kappa_final_gmean", "within_r_hi"]
    assert none.loc["kappa_init_gmean", "runs"] == 0  # an infinite kappa drops the run, never counts as large
    # a real within-configuration relation in P1's direction is found, and the opposite one is named
    shown = within_test(*_xy(_runs(-0.6)), mode="max")
    assert shown["verdict"] == "lower kappa, better (P1's direction): shown" and shown["p_declared"] < 1e-6
    assert shown["within_r_lo"] < -0.6 < shown["within_r_hi"] and shown["slope_per_decade"] < 0
    assert within_test(*_xy(_runs(0.6)), mode="max")["verdict"] == "the opposite of P1's direction"
    # for a loss, P1's direction is the other sign
    assert within_test(*_xy(_runs(0.6)), mode="min")["verdict"] == "lower kappa, better (P1's direction): shown"
    # r against the t test's closed form on the same data (scipy's Pearson on the centred values)
    x, y, g = _xy(_runs(-0.3, seed=3))
    xd = x - pd.Series(x).groupby(g).transform("mean").to_numpy()
    yd = y - pd.Series(y).groupby(g).transform("mean").to_numpy()
    assert within_test(x, y, g, "max")["within_r"] == pytest.approx(stats.pearsonr(xd, yd).statistic)
    # 80% power at 5% one-sided for |r| >= r_detectable: 120 runs in 6 configurations detect 0.23
    assert within_test(np.arange(120.0) % 7, np.arange(120.0) % 5, np.arange(120) % 6, "max")["r_detectable"] == (
        pytest.approx(0.231, abs=0.001))
    # the partial rho removes what the controls explain: kappa that is only a proxy for size
    rng = np.random.default_rng(1)
    size = np.arange(40.0)
    x, y = -size + 3 * rng.standard_normal(40), size + 3 * rng.standard_normal(40)
    assert stats.spearmanr(x, y).statistic < -0.9  # across sizes: a strong "relation"
    assert abs(partial_spearman(x, y, [size])) < 0.35  # with size removed: about nothing
    assert partial_spearman(x, y, []) == pytest.approx(stats.spearmanr(x, y).statistic)


def _xy(frame: pd.DataFrame):
    return (np.log10(frame["kappa_final_gmean"].to_numpy()), frame["eval_acc"].to_numpy(),
            frame["heads"].to_numpy())


def test_a_crossed_configuration_is_named_by_its_head_dim_where_heads_do_not_fill_the_width():
    from leaner.analysis.summary import explode_protocols
    from leaner.analysis.tables import arch_label

    point = {"depth": 1, "heads": 4, "width": 64, "mlp_hidden": 128}
    assert arch_label({**point, "head_dim": 16}) == "L1-H4-D64-mlp128"  # D/h: as every table named it
    assert arch_label({**point, "head_dim": 4}) == "L1-H4-D64-hd4-mlp128"
    frame = pd.DataFrame([{**point, "head_dim": d, "protocols": p} for d, p in
                          ((16, "crossed;fixed_width"), (4, "crossed"))])
    # a crossed point is on its head dim's curve, so that any grouping by protocol holds the rank
    assert sorted(explode_protocols(frame)["protocol"]) == ["crossed_hd16", "crossed_hd4", "fixed_width"]
