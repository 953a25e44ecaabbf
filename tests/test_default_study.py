"""The default study (config.yaml) end to end, as `make study` runs it: the README's claims and
heads-effect tables must be what this run writes (verdicts exactly, every number within the margin
that protects its verdict), and every variant's conditioning.csv must agree with an independent float64
recomputation. This is the re-run on another machine that the README's findings have to survive."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from conftest import REPO, snakemake
from reference_kappa import check_study_outputs

pytestmark = [pytest.mark.workflow, pytest.mark.study]

CLAIMS = "<!-- claims table: begin -->", "<!-- claims table: end -->"
EFFECTS = "<!-- heads effect table: begin -->", "<!-- heads effect table: end -->"
SIGNED = r"[+-]\d+\.\d+"


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("default")
    snakemake(work, "--cores", "2", configfile=REPO / "config.yaml", timeout=1800)
    return work


def readme_rows(markers: tuple[str, str]) -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text[text.index(markers[0]) + len(markers[0]):text.index(markers[1])]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()[2:]]


def _close(ours: float, written: float, tol: float, what) -> None:
    assert abs(ours - written) <= tol, (what, ours, written)


def test_the_readme_claims_are_what_the_pipeline_writes(default_run):
    """The declared claims, row for row: configurations and verdicts exactly; means, differences
    and bounds within 0.01 (0.03 for a one-seed row, which carries no interval)."""
    from leaner.analysis.overview import headline_markdown

    written = pd.read_csv(default_run / "results" / "tables" / "all_studies-headline.csv",
                          keep_default_na=False, na_values=[""])
    ours = readme_rows(CLAIMS)
    shown = headline_markdown(written)
    assert [(r[0].strip("`"), r[1], r[2], r[3]) for r in ours] == \
        list(zip(written["study"], written["claim"], written["role"], written["configuration"])), shown
    for r, (_, w) in zip(ours, written.iterrows()):
        assert r[10] == (w["verdict"] if w["role"] == "lean" else ""), shown
        assert int(r[7]) == w["n"], shown
        tol = 0.01 if w["n"] > 1 else 0.03
        _close(float(r[6]), w["mean"], tol, (r[3], "mean"))
        if w["role"] == "lean":
            nums = [float(x) for x in re.findall(SIGNED, r[8])]
            for value, col in zip(nums, ("lean_advantage", "bound_lo", "bound_hi")):
                _close(value, w[col], tol, (r[3], col))
            assert len(nums) == (1 if math.isnan(w["bound_lo"]) else 3), shown
    assert written["verdict"].notna().any()


def test_the_readme_heads_effects_are_what_the_pipeline_writes(default_run):
    """Most against fewest heads, row for row: verdicts exactly, every number within the margin that
    protects its verdict (at least 0.01); one-seed rows carry no verdict: 0.03."""
    from leaner.analysis.overview import effects_markdown
    from leaner.analysis.stats import RESOLVE_MARGIN

    written = pd.read_csv(default_run / "results" / "tables" / "all_studies-heads_effect.csv",
                          keep_default_na=False, na_values=[""])  # the verdict "n/a (one seed)" is words
    shown = effects_markdown(written)
    ours = readme_rows(EFFECTS)
    assert [(r[0].strip("`"), r[1]) for r in ours] == \
        [(w["study"], f"{w['group']}: heads {w['heads']}") for _, w in written.iterrows()], shown
    for r, (_, w) in zip(ours, written.iterrows()):
        assert r[4] == w["verdict"], shown
        tol = 0.03 if math.isnan(w["delta_lo"]) else max(0.01, RESOLVE_MARGIN * (w["delta_hi"] - w["delta_lo"]) / 2)
        nums = [float(x) for x in re.findall(SIGNED, r[2])]
        for value, col in zip(nums, ("delta_error", "delta_lo", "delta_hi")):
            _close(value, w[col], tol, (r[1], col))
    assert not (written["verdict"] == "unresolved").all()


def test_every_variant_agrees_with_an_independent_float64_recomputation(default_run):
    assert check_study_outputs(default_run / "results") > 100
