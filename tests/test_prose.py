"""The results prose says only what the references hold (prose_check.py): every decimal number a
number of the references its paragraph cites, every interval one of their rows, every italic
verdict beside an interval that row's verdict."""

from __future__ import annotations

import pytest
from prose_check import CAUSES, PROSE, intervention, problems

from conftest import REPO

pytestmark = pytest.mark.fast


def test_the_results_prose_quotes_only_the_references_numbers_intervals_and_verdicts():
    pools = {}
    found = [line for path in PROSE for line in problems((REPO / path).read_text(), path, pools)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("written,changed,said", [
    # an interval no row holds (the count claim's gain one unit off)
    ("(+0.106 [+0.092, +0.121])", "(+0.107 [+0.092, +0.121])", "+0.107 [+0.092, +0.121] is no row of"),
    # a verdict that is not the row's
    ("+0.011 [+0.003, +0.020], *superior*", "+0.011 [+0.003, +0.020], *equivalent*",
     "+0.011 [+0.003, +0.020] is superior in tests/reference/why_kappa, the prose says *equivalent*"),
    # a number none of the cited references holds
    ("P2's rank-4 model is flat (0.4%): its MSE 0.676", "P2's rank-4 model is flat (0.4%): its MSE 0.671",
     "0.671 is no number of tests/reference/default_study"),
    # an interval quoted from another study's reference than the paragraph cites
    ("against 8 costs\n0.218 [0.210, 0.226]", "against 8 costs\n0.037 [0.051, 0.024]",
     "0.037 [0.051, 0.024] is no row of tests/reference/why_rank_p2"),
])
def test_the_check_fails_on_a_number_an_interval_or_a_verdict_the_references_do_not_hold(written, changed, said):
    text = (REPO / "docs" / "results.md").read_text()  # the results prose, which the README links
    assert written in text and problems(text, "docs/results.md") == []
    found = problems(text.replace(written, changed, 1), "docs/results.md")
    assert any(said in line for line in found), found


def test_every_sentence_allowed_a_word_of_cause_rests_on_an_intervention():
    assert [why for ref, claim in CAUSES.values() if (why := intervention(ref, claim))] == []
    # a claim with no control whose lean arm moves the parameters is no such intervention
    assert "no control" in intervention("default_study", "depth_costs")


@pytest.mark.parametrize("written,changed", [
    # a word of cause where no intervention stands (a correlation read as a cause)
    ("a relation that can run\nfrom training to kappa", "a relation that shows kappa\ndrives accuracy"),
    ("as they must where timm's small initialisation", "because timm's small initialisation"),
])
def test_the_check_fails_on_a_word_of_cause_beside_no_intervention(written, changed):
    text = (REPO / "docs" / "results.md").read_text()  # the results prose, which the README links
    assert written in text and problems(text, "docs/results.md") == []
    found = problems(text.replace(written, changed, 1), "docs/results.md")
    assert any("a word of cause" in line for line in found), found
