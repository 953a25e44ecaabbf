"""The studies end to end, as `make study` runs them, against their committed reference runs
(tests/reference, reference_run.py): every study at a small budget (config.yaml with
configs/quick.yaml, in `make test`: any change to the numbers fails CI) and the default study
itself (config.yaml, the README's source run: `make reproduce`). Under the same numerics (the
label every run records: pinned x86-64 with AVX2 gives one), every table, summary and the
findings byte for byte; under other numerics, what the README claims there: configurations and
one-seed verdicts exactly, every number with an interval within PLATFORM_REACH standard errors of
the reference's, every verdict one the reference's interval reaches when moved that far
(docs/numerics.md). And every variant's conditioning.csv must agree with an independent float64
recomputation."""

from __future__ import annotations

import functools
import math

import pandas as pd
import pytest

from conftest import REPO, snakemake
from reference_kappa import check_study_outputs
from reference_run import CONFIGS, QUICK, REFERENCE, comparable, numerics_labels, provenance, reference_files

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

READ = {"keep_default_na": False, "na_values": [""]}  # the verdict "n/a (one seed)" is words


@pytest.fixture(scope="module", params=[pytest.param(QUICK, id="quick", marks=pytest.mark.slow),
                                        pytest.param(REFERENCE, id="default", marks=pytest.mark.reproduce)])
def study_run(request, tmp_path_factory):
    """(a finished run of what the reference is a run of, the reference's folder)."""
    work = tmp_path_factory.mktemp(request.param.name)
    configs = [str(REPO / name) for name in CONFIGS[request.param]]
    snakemake(work, "--cores", "2", "--configfile", *configs, configfile=None, timeout=2700)
    return work, request.param


def _same_numerics(run, reference) -> bool:
    return numerics_labels(run) == {provenance(reference)["numerics"]}


def test_under_the_references_numerics_every_table_is_the_same_bytes(study_run):
    """The pinned numerics promise: the same label, the same bytes, file for file."""
    run, reference = study_run
    if not _same_numerics(run, reference):
        pytest.skip(f"this machine computes under {sorted(numerics_labels(run))}, the reference under "
                    f"{provenance(reference)['numerics']}: held to the platform tolerance instead")
    ours, theirs = comparable(run, CONFIGS[reference]), reference_files(reference)
    assert sorted(ours) == sorted(theirs)
    differ = [name for name in theirs if ours[name] != theirs[name]]
    assert not differ, (f"{differ} differ from {reference.relative_to(REPO)}; where a change moves the numbers on "
                        "purpose, make the reference again (tests/reference_run.py)")


def _tables(study_run) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    run, reference = study_run
    tables, ref = run / "results" / "tables", reference / "tables"
    return tuple(pd.read_csv(folder / f"all_studies-{name}.csv", **READ)
                 for name in ("headline", "heads_effect") for folder in (tables, ref))


def _within(ours: float, theirs: float, se: float, what) -> None:
    from leaner.analysis.stats import PLATFORM_REACH

    assert abs(ours - theirs) <= PLATFORM_REACH * se, (what, ours, theirs, se)


def test_the_claims_hold_within_the_platform_tolerance(study_run):
    """Wherever it runs: each claim's rows and configurations exactly; a one-seed claim's "no
    interval" exactly; with an interval, means, difference and bounds within PLATFORM_REACH standard
    errors of the reference's, and a verdict the reference's bounds reach moved that far (the
    README's `another platform could read`)."""
    from leaner.analysis.stats import bounds_verdict, interval_se, verdicts_elsewhere

    ours, ref, _, _ = _tables(study_run)
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


def test_the_heads_effects_hold_within_the_platform_tolerance(study_run):
    """Most against fewest heads, row for row: comparisons exactly; a one-seed row's "n/a" exactly
    and its number held to nothing (one run on one platform); with an interval, the difference
    and its bounds within PLATFORM_REACH standard errors, and a verdict the reference's interval
    reaches moved that far."""
    from leaner.analysis.overview import verdict
    from leaner.analysis.stats import interval_se, verdicts_elsewhere

    _, _, ours, ref = _tables(study_run)
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


def test_every_variant_agrees_with_an_independent_float64_recomputation(study_run):
    run, _ = study_run
    variants = len(list((run / "results").glob("*/*/metrics.json")))
    assert variants > 20 and check_study_outputs(run / "results") >= 2 * variants  # every layer at init and final
