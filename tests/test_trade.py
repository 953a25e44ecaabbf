"""Where P1's rule holds (analysis/trade.py): each declared test of the trade read in the same words,
from claims rows as the headline holds them."""

from __future__ import annotations

import pandas as pd
import pytest

from leaner.analysis.trade import trade_paragraph, trade_table

pytestmark = pytest.mark.fast


def _claim(study, name, base, leans, control=None):
    rows = [{"study": study, "claim": name, "role": "baseline", "configuration": base, "verdict": None}]
    rows += [{"study": study, "claim": name, "role": "lean", "configuration": c, "verdict": v} for c, v in leans]
    if control:
        rows.append({"study": study, "claim": name, "role": "control", "configuration": control[0],
                     "verdict": control[1]})
    return rows


@pytest.mark.parametrize("leans,control,reading", [
    (["equivalent", "superior"], "inferior", "held"),
    (["non-inferior", "inferior"], "inferior", "failed"),
    (["equivalent"], "non-inferior", "not testable (the lost layer costs nothing measurable)"),
    (["superior"], "inconclusive", "not testable (the lost layer's cost not shown)"),
    # more heads at fewer layers shown to fall short: the trade fails whatever the control shows
    (["inferior"], "inconclusive", "failed (a lean model is inferior; the control inconclusive)"),
    (["inferior"], "equivalent", "failed (a lean model is inferior; the control equivalent)"),
    (["inconclusive"], "inferior", "inconclusive"),
    (["one seed, no interval"], "one seed, no interval", "descriptive (one seed)"),
    (["did not learn (lean)"], "did not learn (control)", "no verdict (did not learn (lean))"),
])
def test_a_depth_trade_reads_from_its_control_and_its_lean_models(leans, control, reading):
    configs = ["L1-H8-D64-mlp128", "L1-H16-D64-mlp128"][:len(leans)]
    heads = pd.DataFrame(_claim("s", "c", "L2-H4-D64-mlp128", list(zip(configs, leans)),
                                ("L1-H4-D64-mlp128", control)))
    table = trade_table(heads, {"s": "image_classification"})
    assert table[["kind", "reading"]].values.tolist() == [["depth trade", reading]]
    assert table["changed"].iloc[0].startswith("layers 2 -> 1, heads 4 -> 8")
    assert trade_paragraph(table)[0].endswith(f"s c ({'; '.join(configs)} against L2-H4-D64-mlp128): {reading}.")


def test_only_depth_trades_and_p2s_claims_are_tests_of_the_trade():
    """A P1 claim without a control, or whose lean model keeps its depth, is not a trade; a P2 claim
    is a heads test where the count grows, a rank test where only the rank falls, and neither where
    a module is taken away at one rank."""
    heads = pd.DataFrame(
        _claim("v", "depth_costs", "L2-H4-D64-mlp128", [("L1-H4-D64-mlp128", "inferior")])
        + _claim("v", "conditioned", "L1-H16-D64-mlp128", [("L1-H4-D64-mlp128-qk8", "inferior")],
                 ("L1-H4-D64-mlp128", "inferior"))
        + _claim("p", "count", "L1-H1-W1-r16-d16-N8", [("L1-H1-W2-r16-d16-N8", "superior")])
        + _claim("p", "rank", "L1-H1-W2-r16-d16-N8", [("L1-H2-W1-r8-d16-N8", "inferior")])
        # a module taken away at one rank: fewer heads, the same rank, a test of neither reading
        + _claim("p", "module", "L1-H4-W2-r4-d16-N8", [("L1-H4-W1-r4-d16-N8", "equivalent")]))
    table = trade_table(heads, {"v": "image_classification", "p": "nearest_point"})
    assert table[["claim", "kind", "changed", "reading"]].values.tolist() == [
        ["count", "P2 heads test", "heads 1 -> 2", "held"], ["rank", "P2 rank test", "rank 16 -> 8", "failed"]]
    assert trade_paragraph(table.iloc[:0]) == []


@pytest.mark.parametrize("verdicts,control,reading", [
    (["inferior", "equivalent", "superior"], "inferior", "held from 16 heads (8: failed)"),
    (["inconclusive", "non-inferior", "equivalent"], "inferior", "held from 16 heads (8: inconclusive)"),
    (["inferior", "inferior", "inferior"], "inferior", "failed at every head count"),
    (["equivalent", "superior", "equivalent"], "inferior", "held at every head count"),
    (["inferior", "inconclusive", "inferior"], "inferior", "inconclusive (8: failed; 16: inconclusive; 32: failed)"),
    (["inferior", "equivalent", "equivalent"], "equivalent",
     "failed (a lean model is inferior; the control equivalent)"),
    (["equivalent", "equivalent", "superior"], "inconclusive", "not testable (the lost layer's cost not shown)"),
])
def test_a_ladder_of_heads_reads_as_an_exchange_rate(verdicts, control, reading):
    """One layer at 8, 16 and 32 heads against two of 4: the count from which every rung wins the
    layer back, or a floor where none does."""
    by_heads = dict(zip((8, 16, 32), verdicts))
    leans = [(f"L1-H{h}-D64-mlp128", by_heads[h]) for h in (32, 8, 16)]  # read by heads, not by order
    heads = pd.DataFrame(_claim("s", "c", "L2-H4-D64-mlp128", leans, ("L1-H4-D64-mlp128", control)))
    table = trade_table(heads, {"s": "language_model"})
    assert table[["kind", "reading"]].values.tolist() == [["depth trade, a ladder of heads", reading]]
