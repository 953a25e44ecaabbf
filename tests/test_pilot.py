"""`leaner pilot` and the power behind a claim's seeds: the noncentral t against simulated Welch
tests, a real pilot of a claim's arms on seeds it never uses, and the default study's rationales
quoting what the kept pilot (pilots/vit_digits.csv) reports."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from leaner.analysis.stats import seeds_for, welch_power
from leaner.workflow.config import load_yaml
from leaner.workflow.kept import variant_identity
from leaner.workflow.plan import load_plan

from conftest import BIN, REPO, TINY, run

pytestmark = pytest.mark.fast


def test_the_issues_figures_for_ten_seeds():
    """At the pooled sd 0.015 a non-inferiority test at margin 0.02 with 10 seeds a side has 88.9%
    power; at 0.020 in both arms 69%; 8 seeds give 80% at 0.015."""
    assert welch_power(0.015, 0.015, 10, 10, 0.02) == pytest.approx(0.889, abs=5e-4)
    assert welch_power(0.020, 0.020, 10, 10, 0.02) == pytest.approx(0.69, abs=5e-3)
    assert seeds_for(0.015, 0.015, 0.02) == 8 and welch_power(0.015, 0.015, 7, 7, 0.02) < 0.8
    assert np.isnan(welch_power(0.01, 0.01, 1, 5, 0.02)) and seeds_for(1.0, 1.0, 1e-3) is None


@pytest.mark.parametrize("sd_a,sd_b,n_a,n_b,shift", [(0.015, 0.015, 10, 10, 0.02), (0.010, 0.020, 10, 10, 0.02),
                                                      (0.017, 0.012, 6, 12, 0.015), (0.02, 0.02, 5, 5, 0.01)])
def test_the_power_is_the_share_of_simulated_welch_tests_that_reject(sd_a, sd_b, n_a, n_b, shift):
    """scipy's one-sided Welch test on 20,000 simulated pilots at the true difference: the share that
    rejects equals the noncentral-t power within 1.5 points (binomial sd at 0.8: 0.3 points; the
    noncentral t takes Welch's df from the true sds, the test from the sample's)."""
    rng = np.random.default_rng(0)
    a = rng.normal(shift, sd_a, (20_000, n_a))
    b = rng.normal(0.0, sd_b, (20_000, n_b))
    rejects = stats.ttest_ind(a, b, axis=1, equal_var=False, alternative="greater").pvalue < 0.05
    assert rejects.mean() == pytest.approx(welch_power(sd_a, sd_b, n_a, n_b, shift), abs=0.015)


def _claimed(tmp_path):
    cfg = load_yaml(TINY)
    del cfg["studies"]["tiny_nearest"]
    cfg["studies"]["tiny"]["claims"] = [{
        "name": "lean", "baseline": {"depth": 2, "heads": 1}, "lean": [{"depth": 1, "heads": 2, "width": 16}],
        "control": {"depth": 1, "heads": 1, "width": 16}, "margin": 0.05, "seeds": [0]}]
    path = tmp_path / "claimed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_a_pilot_trains_the_claims_arms_on_its_own_seeds_and_reports_their_power(tmp_path):
    config = _claimed(tmp_path)
    leaner = [str(BIN / "leaner"), "pilot", "tiny", "--claim", "lean", "--config", str(config), "--cores", "2"]
    out = run([*leaner, "--seeds", "100-101"], cwd=tmp_path).stdout.splitlines()
    pilot = pd.read_csv(tmp_path / "pilots" / "tiny.csv")
    assert list(pilot.columns) == ["study", "configuration", "variant", "seed", "metric", "value", "identity"]
    # each run's identity (workflow/kept.py) is the one a claim of the study on that seed would have
    plan = load_plan(config)
    for row in pilot.itertuples():
        stem = row.variant.rpartition("-s")[0]
        like = next(v for v in plan.studies["tiny"].variants.values() if v.id.rpartition("-s")[0] == stem)
        assert row.identity == variant_identity(plan, dataclasses.replace(like, seed=row.seed))
    assert sorted(pilot["configuration"].unique()) == ["L1-H1-D16-mlp32", "L1-H2-D16-mlp32", "L2-H1-D16-mlp32"]
    assert sorted(pilot["seed"]) == [100, 100, 100, 101, 101, 101] and (pilot["metric"] == "eval_acc").all()
    for _, row in pilot.iterrows():  # each value is the run's own final accuracy, trained on the pilot seed
        metrics = yaml.safe_load((tmp_path / "pilot_runs" / "tiny" / "results" / "tiny" / row["variant"] /
                                  "metrics.json").read_text())
        assert metrics["seed"] == row["seed"] and metrics["final"]["eval_acc"] == pytest.approx(row["value"])
    assert not (tmp_path / "results").exists()  # the study's own results are not touched
    base = pilot[pilot["configuration"] == "L2-H1-D16-mlp32"]["value"]
    assert f"  baseline  L2-H1-D16-mlp32        mean {base.mean():.3f} (sd {base.std():.3f}), n 2" in out
    lean = pilot[pilot["configuration"] == "L1-H2-D16-mlp32"]["value"]
    need = seeds_for(lean.std(), base.std(), 0.05)
    powers = [line for line in out if " against " in line]
    assert [p.split(":")[0].strip() for p in powers] == ["L1-H2-D16-mlp32 against L2-H1-D16-mlp32",
                                                          "control L1-H1-D16-mlp32 against L2-H1-D16-mlp32"]
    assert powers[0].endswith(f": seen {lean.mean() - base.mean():+.3f}; no test at the declared one seed; 80% "
                              f"needs {need if need else 'over 200'} seeds")
    again = run([*leaner, "--from-csv"], cwd=tmp_path).stdout.splitlines()
    assert out[0] == "leaner pilot: 6 runs of claim lean in pilot_runs/tiny" and out[1] == "wrote pilots/tiny.csv"
    assert again == out[2:]

    bad = run([*leaner, "--seeds", "0-1"], cwd=tmp_path, check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "leaner pilot: error: --seeds: [0] are seeds claim lean declares (allowed: seeds it never uses, not [0])")
    bad = run([*leaner[:4], "nope", *leaner[5:]], cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "--claim nope: study tiny declares no such claim (allowed: lean)" in bad.stderr
    bad = run([*leaner, "--seeds", "1-x"], cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "'1-x' is not a seed or a range" in bad.stderr


def test_the_default_studys_rationales_quote_the_kept_pilot():
    """Every claim whose rationale cites the pilot: each power the command prints from pilots/ (and,
    for a superiority claim, each difference seen) is in the rationale; each arm's mean and sd is
    in the study's rationales."""
    config = load_yaml(REPO / "config.yaml")
    checked = 0
    for study, st in config["studies"].items():
        cites = [c for c in st.get("claims") or [] if "pilot" in c.get("rationale", "")]
        quoted = " ".join(" ".join(c["rationale"].split()) for c in cites)
        for claim in cites:
            text = " ".join(claim["rationale"].split())
            out = run([str(BIN / "leaner"), "pilot", study, "--claim", claim["name"], "--from-csv",
                       "--config", str(REPO / "config.yaml")], cwd=REPO).stdout
            for mean, sd in re.findall(r"mean (\d\.\d{3}) \(sd (\d\.\d{3})\)", out):
                assert f"{mean} (sd {sd})" in quoted, (claim["name"], mean, sd)
            powers = re.findall(r"power (\d+%) at", out)
            assert powers and all(p in text for p in powers), (claim["name"], powers, text)
            if claim.get("hypothesis") == "superior":
                assert all(seen in text for seen in re.findall(r"seen ([+-]\d\.\d{3})", out)), (out, text)
            checked += 1
    assert checked == 4


def test_the_pilots_help_names_the_paths_it_uses():
    """`leaner pilot --help` names the CSV and the run folder the code writes (planning/pilot.py)."""
    from leaner.cli import build_parser
    from leaner.planning.pilot import PILOT_CSV, PILOT_RUNS

    pilot = build_parser()._subparsers._group_actions[0].choices["pilot"]
    helps = {a.dest: a.help for a in pilot._actions}
    assert PILOT_CSV.format(study="STUDY") in helps["out"] and PILOT_RUNS.format(study="STUDY") in helps["work"]


@pytest.mark.slow
def test_tuning_trains_each_arm_at_each_rate_on_a_validation_split_and_keeps_the_best_rate(tmp_path):
    """`leaner tune`: every arm of the claim at every rate on a copy of digits whose eval split is a
    fifth of the training rows (the test rows never written), each value the run's own final
    validation accuracy at its own rate, and per arm the rate of the best mean marked chosen."""
    from leaner.planning.pilot import PilotError
    from leaner.planning.tune import TUNE_COLUMNS, tune_config

    config = _claimed(tmp_path)
    leaner = [str(BIN / "leaner"), "tune", "tiny", "--claim", "lean", "--config", str(config), "--cores", "2"]
    out = run([*leaner, "--lrs", "1e-3,3e-2", "--seeds", "100"], cwd=tmp_path).stdout.splitlines()
    tuned = pd.read_csv(tmp_path / "pilots" / "tiny_lr.csv")
    assert list(tuned.columns) == TUNE_COLUMNS and len(tuned) == 6 and (tuned["seed"] == 100).all()
    work = tmp_path / "pilot_runs" / "tiny_lr"
    manifest = yaml.safe_load((work / "results" / "data" / "digits_validation" / "manifest.json").read_text())
    assert manifest["eval_split"] == "validation" and manifest["n_eval"] == 288
    assert manifest["n_train"] == 1438 - 288
    with np.load(work / "results" / "data" / "digits_validation" / "digits.npz") as z:
        held = set(z["test_idx"].tolist()) | set(z["train_idx"].tolist())
    perm = np.random.default_rng(0).permutation(1797)
    assert held == set(perm[359:].tolist())  # the validation and training rows are the training rows; no test row
    for _, row in tuned.iterrows():
        i = [1e-3, 3e-2].index(row["lr"])
        folder = work / "results" / f"tiny_lr{i}"
        metrics = yaml.safe_load((folder / row["variant"] / "metrics.json").read_text())
        assert metrics["final"]["eval_acc"] == pytest.approx(row["value"])
        assert metrics["spec"]["recipe"]["lr"] == row["lr"] and metrics["spec"]["dataset"] == "digits_validation"
    for _, part in tuned.groupby("configuration"):
        assert part["chosen"].sum() == 1
        assert part[part["chosen"]]["value"].iloc[0] == part["value"].max()
    assert out[1] == "wrote pilots/tiny_lr.csv" and "overrides (each arm at its chosen rate):" in out
    assert not (tmp_path / "results").exists()

    bad = run([*leaner, "--lrs", "1e-3"], cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "--lrs: [0.001] (allowed: two or more positive learning rates)" in bad.stderr
    with pytest.raises(PilotError, match=r"^study tiny_nearest: dataset nearest_point \(kind nearest_point\) cannot "
                       r"carve a validation split from its training data \(allowed kinds: digits\)$"):
        tune_config(load_yaml(TINY), "tiny_nearest", [1e-3, 1e-2], [100], 0.2)
