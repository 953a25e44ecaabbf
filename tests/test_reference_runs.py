"""The default study (config.yaml) end to end, as `make study` runs it, against the README's source
run (tests/reference/default_study, reference_run.py): under the same numerics (the label every
run records: pinned x86-64 with AVX2 gives one), every table, summary and the findings byte for
byte; under other numerics, what the README claims there: configurations and one-seed verdicts
exactly, every number with an interval within PLATFORM_REACH standard errors of the reference's,
every verdict one the reference's interval reaches when moved that far (docs/numerics.md). And
every variant's conditioning.csv must agree with an independent float64 recomputation."""

from __future__ import annotations

import functools
import math

import pandas as pd
import pytest

from conftest import REPO, snakemake
from reference_kappa import check_study_outputs
from reference_run import comparable, numerics_labels, provenance, reference_files

pytestmark = [pytest.mark.workflow, pytest.mark.study]

READ = {"keep_default_na": False, "na_values": [""]}  # the verdict "n/a (one seed)" is words


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("default")
    snakemake(work, "--cores", "2", configfile=REPO / "config.yaml", timeout=2700)
    return work


def _same_numerics(run) -> bool:
    return numerics_labels(run) == {provenance()["numerics"]}


def test_under_the_readmes_numerics_every_table_is_the_same_bytes(default_run):
    """The pinned numerics promise: the same label, the same bytes, file for file."""
    if not _same_numerics(default_run):
        pytest.skip(f"this machine computes under {sorted(numerics_labels(default_run))}, the README's source "
                    f"under {provenance()['numerics']}: held to the platform tolerance instead")
    ours, reference = comparable(default_run), reference_files()
    assert sorted(ours) == sorted(reference)
    differ = [name for name in reference if ours[name] != reference[name]]
    assert not differ, differ


def _tables(run) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    tables, ref = run / "results" / "tables", REPO / "tests" / "reference" / "default_study" / "tables"
    return tuple(pd.read_csv(folder / f"all_studies-{name}.csv", **READ)
                 for name in ("headline", "heads_effect") for folder in (tables, ref))


def _within(ours: float, theirs: float, se: float, what) -> None:
    from leaner.analysis.stats import PLATFORM_REACH

    assert abs(ours - theirs) <= PLATFORM_REACH * se, (what, ours, theirs, se)


def test_the_readmes_claims_hold_within_the_platform_tolerance(default_run):
    """Wherever it runs: each claim's rows and configurations exactly; a one-seed claim's "no
    interval" exactly; with an interval, means, difference and bounds within PLATFORM_REACH standard
    errors of the reference's, and a verdict the reference's bounds reach moved that far (the
    README's `another platform could read`)."""
    from leaner.analysis.stats import bounds_verdict, interval_se, verdicts_elsewhere

    ours, ref, _, _ = _tables(default_run)
    assert list(zip(ours["study"], ours["claim"], ours["role"], ours["configuration"], ours["n"])) == \
        list(zip(ref["study"], ref["claim"], ref["role"], ref["configuration"], ref["n"]))
    for _, rows in ref.groupby(["study", "claim"], sort=False):
        base = rows[rows["role"] == "baseline"].iloc[0]
        for i, r in rows[rows["role"] != "baseline"].iterrows():  # the lean models and the control
            o = ours.loc[i]
            if math.isnan(r["bound_lo"]) or str(r["verdict"]).startswith("did not learn"):
                assert o["verdict"] == r["verdict"], (r["configuration"], o["verdict"])
                continue
            se = interval_se(r["bound_lo"], r["bound_hi"], int(r["n"]), int(base["n"]), 0.90)
            for col in ("lean_advantage", "bound_lo", "bound_hi"):
                _within(o[col], r[col], se, (r["configuration"], col))
            for j in (i, base.name):  # each mean: about 1/sqrt(2) of the difference's standard error
                _within(ours.loc[j, "mean"], ref.loc[j, "mean"], se / math.sqrt(2),
                        (ref.loc[j, "configuration"], "mean"))
            reach = verdicts_elsewhere(r["bound_lo"], r["bound_hi"], se,
                                       functools.partial(bounds_verdict, margin=r["margin"]))
            assert " / ".join(reach) == r["elsewhere"]
            assert o["verdict"] in reach, (r["configuration"], o["verdict"], reach)


def test_the_readmes_heads_effects_hold_within_the_platform_tolerance(default_run):
    """Most against fewest heads, row for row: comparisons exactly; a one-seed row's "n/a" exactly
    and its number held to nothing (one run on one platform); with an interval, the difference
    and its bounds within PLATFORM_REACH standard errors, and a verdict the reference's interval
    reaches moved that far."""
    from leaner.analysis.overview import verdict
    from leaner.analysis.stats import interval_se, verdicts_elsewhere

    _, _, ours, ref = _tables(default_run)
    assert list(zip(ours["study"], ours["group"], ours["heads"], ours["n"])) == \
        list(zip(ref["study"], ref["group"], ref["heads"], ref["n"]))
    for (_, o), (_, r) in zip(ours.iterrows(), ref.iterrows()):
        if math.isnan(r["delta_lo"]) or r["verdict"].startswith("did not learn"):
            assert o["verdict"] == r["verdict"], (r["group"], o["verdict"])
            continue
        n_many, n_few = (int(x) for x in r["n"].split(", "))
        se = interval_se(r["delta_lo"], r["delta_hi"], n_many, n_few, 0.95)
        for col in ("delta_error", "delta_lo", "delta_hi"):
            _within(o[col], r[col], se, (r["group"], col))
        reach = verdicts_elsewhere(r["delta_lo"], r["delta_hi"], se, verdict)
        assert o["verdict"] in reach, (r["group"], o["verdict"], reach)


def test_every_variant_agrees_with_an_independent_float64_recomputation(default_run):
    assert check_study_outputs(default_run / "results") > 100
