"""Where P1's rule holds: one row per test of the trade, read from the declared claims as judged
(overview.headline), so that every study says in the same words whether the trade held, failed,
or could not be tested.

A *depth trade* is a claim with a control whose lean models have fewer layers than its baseline:
lean models of more heads and fewer layers against the conventional baseline, the control the
lean models without their added heads (the lost layer alone). It is read:
- held: the control is inferior (the lost layer costs) and every lean model is non-inferior;
- failed: a lean model is inferior (its heads do not make up for the layer it lost: the trade
  fails at that step whatever the control shows, and where the control's cost is not shown the
  reading says so);
- not testable: the control is not inferior, so a match says nothing about heads: the lost layer
  costs nothing measurable (the control non-inferior) or its cost is not shown (inconclusive);
- descriptive: a side has one run (no interval, no verdict); no verdict where a side has none
  (its runs did not learn, or there are none);
- inconclusive: otherwise.
A depth trade whose lean models are one model at three head counts or more (a *ladder*, the
exchange table's) is read rung by rung, as the exchange rate: held from the fewest heads from
which every rung holds ("held from 16 heads; 8: failed"), else failed where every rung is inferior
(no head count buys the layer back: a floor), else inconclusive, each rung's reading named.
A claim of a P2 study (P2's task) is a *heads test* where its lean models have more heads in all
(heads x attention modules) than the baseline, a *rank test* where the count is not higher and the
head rank lower: either held where the lean models are non-inferior, failed where one is
inferior; a P2 claim of neither (a module taken away at one rank) tests neither reading and is
left out. `changed` says what moved, from the configurations' names."""

from __future__ import annotations

import re

import pandas as pd

from ..tasks import task_info
from .findings import NON_INFERIOR
from .stats import CLAIM_VERDICTS, ONE_SEED

TRADE_COLUMNS = ["study", "task", "claim", "kind", "changed", "baseline", "lean", "control", "lean_verdicts",
                 "control_verdict", "reading"]


def _reading(leans: pd.Series, control: str | None) -> str:
    odd = [v for v in [*leans, *([control] if control is not None else [])] if v not in CLAIM_VERDICTS]
    if odd:
        return f"no verdict ({odd[0]})"
    if (leans == ONE_SEED).any() or control == ONE_SEED:
        return "descriptive (one seed)"
    if (leans == "inferior").any():
        shown = control in (None, "inferior")
        return "failed" if shown else f"failed (a lean model is inferior; the control {control})"
    if control in NON_INFERIOR:
        return "not testable (the lost layer costs nothing measurable)"
    if control is not None and control != "inferior":
        return "not testable (the lost layer's cost not shown)"
    if leans.isin(NON_INFERIOR).all():
        return "held"
    return "inconclusive"


def _ladder_reading(leans: pd.DataFrame, control: str | None) -> str:
    """The rung-by-rung reading of a ladder (leans: its lean rows, by configuration and verdict)."""
    rungs = sorted(((_shape(c)[1], _reading(pd.Series([v]), control))
                    for c, v in zip(leans["configuration"], leans["verdict"])))
    readings = [r for _, r in rungs]
    if any(not r.startswith(("held", "failed", "inconclusive")) for r in readings) or len(set(readings)) == 1:
        return _reading(leans["verdict"], control) + (" at every head count" if len(set(readings)) == 1
                                                      and readings[0] in ("failed", "held") else "")
    held_from = next((h for i, (h, _) in enumerate(rungs) if all(r == "held" for _, r in rungs[i:])), None)
    named = "; ".join(f"{h}: {r}" for h, r in rungs if held_from is None or h < held_from)
    if held_from is not None:
        return f"held from {held_from} heads ({named})"
    return f"inconclusive ({named})"


def _is_ladder(leans: pd.Series) -> bool:
    """One model at three head counts or more (pareto.is_ladder's rungs) and nothing else moved."""
    shapes = [_shape(c) for c in leans]
    return len({h for _, h, _ in shapes}) >= 3 and len({d for d, _, _ in shapes}) == 1


def _shape(label: str) -> tuple[int, int, int]:
    """(depth, heads in all, head rank) of a configuration's name (L1-H4-W1-r4-d16-N8, L2-H4-D64-mlp128)."""
    got = {k: int(v) for k, v in re.findall(r"(?:^|-)(L|H|W|r)(\d+)", label)}
    return got.get("L", 0), got.get("H", 0) * got.get("W", 1), got.get("r", 0)


def _changed(base: str, lean: str) -> str:
    names = ("layers", "heads", "rank")
    moved = [f"{n} {a} -> {b}" for n, a, b in zip(names, _shape(base), _shape(lean)) if a != b and a and b]
    return ", ".join(moved)


def _more_heads(base: str, leans: pd.Series) -> bool:
    return all(_shape(x)[1] > _shape(base)[1] for x in leans)


def _lower_rank(base: str, leans: pd.Series) -> bool:
    return all(0 < _shape(x)[2] < _shape(base)[2] for x in leans)


def _kind(base: str, leans: pd.Series, control: bool) -> str:
    if control:
        return "depth trade, a ladder of heads" if _is_ladder(leans) else "depth trade"
    return "P2 heads test" if _more_heads(base, leans) else "P2 rank test"


def trade_table(heads: pd.DataFrame, tasks: dict[str, str]) -> pd.DataFrame:
    """The trade's tests among `heads` (overview.headline's rows), `tasks` each study's task."""
    rows = []
    for (study, name), part in heads.groupby(["study", "claim"], sort=False):
        family = task_info(tasks[study]).family
        leans, control = part[part["role"] == "lean"], part[part["role"] == "control"]
        base = part[part["role"] == "baseline"]["configuration"].iloc[0]
        shallower = len(leans) and all(_shape(x)[0] < _shape(base)[0] for x in leans["configuration"])
        if family != "P2" and not (len(control) and shallower):
            continue
        configs = leans["configuration"]
        if family == "P2" and not (_more_heads(base, configs) or _lower_rank(base, configs)):
            continue  # neither more heads nor a lower rank (e.g. a module taken away): no test of either reading
        ctrl = control["verdict"].iloc[0] if len(control) else None
        reading = _ladder_reading(leans, ctrl) if ctrl and _is_ladder(configs) else _reading(leans["verdict"], ctrl)
        rows.append({
            "study": study, "task": tasks[study], "claim": name,
            "kind": _kind(base, leans["configuration"], ctrl is not None),
            "changed": "; ".join(_changed(base, x) for x in leans["configuration"]), "baseline": base,
            "lean": "; ".join(leans["configuration"]), "control": control["configuration"].iloc[0] if ctrl else "",
            "lean_verdicts": "; ".join(leans["verdict"]), "control_verdict": ctrl or "",
            "reading": reading})
    return pd.DataFrame(rows, columns=TRADE_COLUMNS)


def trade_paragraph(table: pd.DataFrame) -> list[str]:
    """The findings' sentence: each test of the trade and how it reads."""
    if not len(table):
        return []
    parts = [f"{r['study']} {r['claim']} ({r['lean']} against {r['baseline']}): {r['reading']}"
             for _, r in table.iterrows()]
    return ["Where P1's rule holds (table where_trade_holds; a depth trade holds where the lost layer costs "
            "and the lean models of more heads win it back; a P2 heads or rank test holds where the model with "
            "more heads, or a lower rank, does not fall short): "
            + "; ".join(parts) + "."]
