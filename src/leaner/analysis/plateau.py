"""Whether a run stopped on a plateau or was cut short: how far its best training loss fell over
its last quarter of steps (summary.csv's train_loss_last_quarter_fall; by_config keeps the largest
over a configuration's runs). Near 0 the curve is flat at the end, and more steps at the same
recipe would not move it: P2's "cannot represent" told from "did not optimise"."""

from __future__ import annotations

import math

import pandas as pd

LAST_QUARTER = 0.75  # a run's plateau is read over its steps past this fraction


def last_quarter_fall(history: pd.DataFrame, column: str = "train_loss") -> float:
    """How far the best `column` (a loss) fell over the last quarter of a run's steps, as a share of
    the best before it: (best up to 3/4 - best overall) / best up to 3/4. Near 0: the curve is flat
    at the end (a plateau: more steps would not move it); NaN without a point on each side."""
    if column not in history or "step" not in history:
        return math.nan
    h = history[["step", column]].dropna()
    if not len(h):
        return math.nan
    before = h.loc[h["step"] <= LAST_QUARTER * h["step"].max(), column]
    if not len(before) or len(before) == len(h) or not before.min() > 0:
        return math.nan
    return float((before.min() - h[column].min()) / before.min())
