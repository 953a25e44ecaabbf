"""The README states what its source run wrote (tests/reference/default_study) and nothing else: its
claims and heads-effect tables and its findings are rendered from that run's files, and that run
was made under pinned numerics, so a pinned re-run anywhere on x86-64 with AVX2 gives its bytes
(test_default_study.py re-runs it)."""

from __future__ import annotations

import pandas as pd

from reference_run import FIGURE, README, REFERENCE, REPO, marked, provenance, readme_blocks


def test_the_readmes_tables_and_findings_are_rendered_from_the_reference_run():
    text = README.read_text()
    for name, block in readme_blocks().items():
        start, end = marked(text, name)
        assert text[start:end] == block, f"README block {name!r}: run tests/reference_run.py to render it again"


def test_the_readme_shows_the_headline_figure_drawn_from_the_reference_run():
    """docs/headline.png is committed and shown; `tests/reference_run.py --figure` draws it again."""
    assert FIGURE.is_file() and FIGURE.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({FIGURE.relative_to(REPO).as_posix()})" in README.read_text()


def test_the_reference_run_was_made_under_pinned_numerics_and_committed_code():
    made = provenance()
    assert "COMPATIBLE" in made["numerics"] and "oneDNN off" in made["numerics"] and "/AVX2," in made["numerics"]
    assert made["dirty"] is False and len(made["commit"]) == 40
    for summary in (REFERENCE / "summaries").glob("*.csv"):
        frame = pd.read_csv(summary)
        assert set(frame["numerics"]) == set(frame["kappa_numerics"]) == {made["numerics"]}, summary.name
