"""P1's Theorem 3.2 held against the real heads: per configuration, the closed form's kappa and
Gaussian heads' for the same shape beside the measured kappa and the head structure the theorem
assumes (measure/heads.py writes both into conditioning.csv; summary.py keeps layer 1's)."""

from __future__ import annotations

import pandas as pd

from .stats import gmean
from .summary import ARCH, learned_rows
from .tables import arch_label

THEOREM_COLUMNS = ["configuration", "heads", "head_dim", "cols", "tokens", "n", "theorem_kappa", "gauss_kappa",
                   "kappa_init", "kappa_final", "init_over_gauss", "gauss_isotropy", "isotropy_init", "isotropy_final",
                   "gauss_alignment", "alignment_init", "alignment_final"]


def theorem_vs_real(summary: pd.DataFrame) -> pd.DataFrame:
    """Theorem 3.2 against the real heads, per configuration (layer 1, its runs that learned): the
    closed form's kappa and Gaussian heads' for the same (N, h, d), the measured kappa at init
    and after training (geometric means over seeds of the per-run medians), and what the theorem
    assumes of the heads, measured (medians over seeds) beside the Gaussian heads': isotropy (mean
    stable rank over min(N, d)) and alignment (mean |cos| between heads' top token directions)."""
    if "theorem_kappa_l1" not in summary:
        return pd.DataFrame(columns=THEOREM_COLUMNS)
    rows = []
    for _, g in learned_rows(summary).groupby(ARCH, sort=True):
        first = g.iloc[0]
        kappa_init, kappa_final = gmean(g["kappa_init_l1"]), gmean(g["kappa_final_l1"])
        rows.append({"configuration": arch_label(first), "heads": int(first["heads"]),
                     "head_dim": int(first["head_dim"]), "cols": int(first["heads"] * first["head_dim"]),
                     "tokens": int(first["probe_tokens"]), "n": len(g), "theorem_kappa": first["theorem_kappa_l1"],
                     "gauss_kappa": first["gauss_kappa_l1"], "kappa_init": kappa_init, "kappa_final": kappa_final,
                     "init_over_gauss": kappa_init / first["gauss_kappa_l1"],
                     "gauss_isotropy": first["gauss_isotropy_l1"],
                     "isotropy_init": g["heads_isotropy_init_l1"].median(),
                     "isotropy_final": g["heads_isotropy_final_l1"].median(),
                     "gauss_alignment": first["gauss_alignment_l1"],
                     "alignment_init": g["heads_alignment_init_l1"].median(),
                     "alignment_final": g["heads_alignment_final_l1"].median()})
    return pd.DataFrame(rows, columns=THEOREM_COLUMNS)
