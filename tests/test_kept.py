"""New data by identity (workflow/kept.py): the project keeps the identity of every run it keeps
(each reference's identities.csv, each pilot's identity column), a claim whose runs repeat one kept
before it is refused unless its `seen` names them, and the claims table counts what is new."""

from __future__ import annotations

import copy
import csv
import dataclasses
import re

import pandas as pd
import pytest
import yaml

from leaner.analysis.tables import claims_table
from leaner.workflow.claims import claims_digest
from leaner.workflow.config import ConfigError, load_yaml
from leaner.workflow.kept import IDENTITIES, kept_runs, reference_identities, variant_identity
from leaner.workflow.plan import build_plan, load_plan

from conftest import REPO
from reference_run import CONFIGS

pytestmark = pytest.mark.fast

WHY_HEADS = REPO / "configs" / "why_heads.yaml"


def _without_seen(config: dict) -> dict:
    out = copy.deepcopy(config)
    for claim in out["studies"]["why_heads_digits"]["claims"]:
        claim.pop("seen", None)
    return out


def test_the_old_why_heads_is_refused_for_the_default_studys_runs_and_the_named_one_counts_20_of_40():
    """why_heads as first declared (no `seen`) repeats the default study's L1/H16/hd4 and L1/H4/hd16
    runs at seeds 10-29 (kept three days before): five of its six claims are refused, each naming
    the configuration, the seeds and the reference. As committed, naming them, it plans, its digest
    is the one its runs recorded, and its table counts 20 of 40 runs new where it named 20 seen."""
    config = load_yaml(WHY_HEADS)
    with pytest.raises(ConfigError) as err:
        build_plan(_without_seen(config))
    lines = str(err.value).splitlines()
    assert len(lines) == 5 and all("not new data" in line for line in lines)
    assert [re.search(r"claims\[(\d)\]", line).group(1) for line in lines] == ["0", "1", "2", "4", "5"]
    assert ("config error: studies.why_heads_digits.claims[0] (count_helps_at_rank4): its runs repeat runs the "
            "project keeps, so they are not new data: L1-H16-D64-hd4-mlp128 seeds 10-29 (reference default_study: "
            "e.g. vit_digits/L1-H16-D64-hd4-mlp128-s10)") in lines[0]

    plan = build_plan(config)
    st = plan.studies["why_heads_digits"]
    summary = pd.read_csv(REPO / "tests" / "reference" / "why_heads" / "summaries" / "why_heads_digits.csv")
    assert set(summary["claims_digest"]) == {st.claims_digest}  # naming what was seen changes no declaration
    table = claims_table(summary, list(st.claims))
    new = dict(zip(table["claim"], table["runs_new"]))
    assert new == {"count_helps_at_rank4": "20 of 40", "count_helps_at_rank16": "20 of 40",
                   "count_not_parameters_rank4": "20 of 40", "count_not_parameters_rank16": "40 of 40",
                   "rank_hurts_at_count4": "20 of 40", "rank_hurts_at_count16": "20 of 40"}
    assert set(table["declaration"]) == {"as declared"}


def test_a_seen_entry_names_the_claims_seeds_and_arms_and_stays_out_of_the_digest():
    config = load_yaml(WHY_HEADS)
    claims = config["studies"]["why_heads_digits"]["claims"]
    assert claims_digest(claims) == claims_digest(_without_seen(config)["studies"]["why_heads_digits"]["claims"])
    bad = copy.deepcopy(config)
    bad["studies"]["why_heads_digits"]["claims"][0]["seen"] = [
        {"heads": 16, "head_dim": 4, "mlp_hidden": 128, "seeds": [10, 99]},
        {"heads": 4, "head_dim": 4, "mlp_hidden": 224, "seeds": [10]}]
    with pytest.raises(ConfigError) as err:
        build_plan(bad)
    assert str(err.value).splitlines()[:2] == [
        "config error: studies.why_heads_digits.claims[0].seen[0]: [99] are not seeds of the claim (allowed: "
        "[10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])",
        'config error: studies.why_heads_digits.claims[0].seen[1]: {"heads": 4, "head_dim": 4, "mlp_hidden": 224} '
        "is not one of the claim's configurations (allowed: its baseline, lean and control points)"]
    # a seed names every arm at it; half the repeats named leave the other half refused
    half = _without_seen(config)
    half["studies"]["why_heads_digits"]["claims"] = half["studies"]["why_heads_digits"]["claims"][:1]
    half["studies"]["why_heads_digits"]["claims"][0]["seen"] = list(range(10, 20))
    with pytest.raises(ConfigError, match=r"L1-H16-D64-hd4-mlp128 seeds 20-29 \(reference default_study"):
        build_plan(half)
    half["studies"]["why_heads_digits"]["claims"][0]["seen"] = list(range(10, 30))
    table = claims_table(pd.read_csv(REPO / "tests/reference/why_heads/summaries/why_heads_digits.csv"),
                         list(build_plan(half).studies["why_heads_digits"].claims))
    assert list(table["runs_new"]) == ["0 of 40", "0 of 40"]


def test_a_pilots_runs_are_seen_by_a_claim_on_its_seeds():
    """The default study's pilot ran vit_digits on seeds 0-2: a claim declared on them is refused
    (configs/seeds5.yaml moved to seeds 30-34 for it)."""
    config = load_yaml(REPO / "config.yaml")
    config["every_study"] = {"seeds": [0, 1, 2, 3]}
    with pytest.raises(ConfigError, match=r"depth_costs\): .*L2-H4-D64-hd16-mlp128 seeds 0-2 \(pilot "
                                          r"pilots/vit_digits.csv"):
        build_plan(config)
    load_plan(REPO / "configs" / "seeds5.yaml", default=REPO / "config.yaml")


def _check_tuning(frame: pd.DataFrame, path) -> None:
    from leaner.planning.tune import tune_config
    from leaner.workflow.config import load_configs

    lrs = sorted(float(lr) for lr in frame["lr"].unique())
    study = frame["study"].iloc[0]
    config = load_configs([path], None if path.name == "config.yaml" else REPO / "config.yaml")
    plan = build_plan(tune_config(config, study, lrs, sorted(int(s) for s in frame["seed"].unique()), 0.2))
    for row in frame.itertuples():
        variant = plan.studies[f"{study}_lr{lrs.index(row.lr)}"].variants[row.variant]
        assert row.identity == variant_identity(plan, variant), (row.variant, row.lr)


@pytest.mark.slow
def test_the_identities_the_project_keeps_are_those_a_fresh_plan_of_their_configs_gives():
    """Each reference's identities.csv is its summaries' runs planned from the configs its
    provenance names; each pilot row's identity is its configuration's in the config defining
    its study, at the row's seed. A run kept twice is kept under one identity in both places."""
    for folder, configs in CONFIGS.items():
        paths = [REPO / c for c in configs]
        plan = load_plan(*paths, default=None if len(paths) > 1 or configs == ["config.yaml"] else REPO / "config.yaml")
        rows = reference_identities(plan, sorted((folder / "summaries").glob("*.csv")))
        with open(folder / IDENTITIES, newline="") as fh:
            assert list(csv.DictReader(fh)) == rows, folder.name
        assert "kept_since" in yaml.safe_load((folder / "provenance.json").read_text())
    defining = {}
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        for name in (load_yaml(path).get("studies") or {}):
            defining.setdefault(name, []).append(path)
    without = set()
    for pilot in sorted((REPO / "pilots").glob("*.csv")):
        frame = pd.read_csv(pilot, dtype={"identity": str}, keep_default_na=False)
        if "identity" not in frame:
            continue
        (path,) = defining[frame["study"].iloc[0]]
        plan = load_plan(path, default=None if path.name == "config.yaml" else REPO / "config.yaml")
        if pilot.stem.endswith("_lr"):  # `leaner tune`'s: each rate a copy of the study on the validation split
            _check_tuning(frame, path)
            continue
        for row in frame.itertuples():
            variants = plan.studies[row.study].variants.values()
            like = next((v for v in variants if v.id.rpartition("-s")[0] == row.variant.rpartition("-s")[0]), None)
            expected = variant_identity(plan, dataclasses.replace(like, seed=int(row.seed))) if like else ""
            assert row.identity == expected, (pilot.name, row.variant)
            if not expected:
                without.add(row.configuration)
    # only the rows of a design no config holds any more (the default study's earlier depth step)
    assert without == {"L2-H16-D64-mlp128", "L2-H8-D64-mlp128", "L3-H4-D64-mlp128"}
    kept = kept_runs(REPO)
    twice = [runs for runs in kept.values() if len({k.where for k in runs}) > 1]
    assert {tuple(sorted({k.where for k in runs})) for runs in twice if not any(k.pilot for k in runs)} == {
        ("reference default_study", "reference why_heads")}
