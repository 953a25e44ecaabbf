"""Readable column headers for the tables people read (Markdown, HTML, LaTeX); the CSV keeps the
raw names. `column_label("kappa_final_gmean")` is "κ final (geo. mean)": a name of its own
(LABELS), else its words (WORDS) with the statistic it ends in (STATS) in brackets."""

from __future__ import annotations

# whole names whose label is not their words
LABELS = {
    "n": "seeds",
    "params": "parameters",
    "params_total": "parameters",
    "param_reduction_pct": "parameter reduction (%)",
    "delta": "difference",
    "delta_lo": "Δ (95% CI low)",
    "delta_hi": "Δ (95% CI high)",
    "lo": "95% CI low",
    "hi": "95% CI high",
    "rho_kappa_error": "ρ(κ final, error)",
    "rho_init_final": "ρ(κ init, κ final)",
    "lo_init_final": "ρ(κ init, κ final) 95% CI low",
    "hi_init_final": "ρ(κ init, κ final) 95% CI high",
    "rho_jacobian_error": "ρ(κ Jacobian, error)",
    "lo_jacobian": "ρ(κ Jacobian, error) 95% CI low",
    "hi_jacobian": "ρ(κ Jacobian, error) 95% CI high",
    "rank_fraction_many": "rank fraction (most heads)",
    "error_few": "error (fewest heads)",
    "error_many": "error (most heads)",
    "mc_over_formula": "Monte Carlo / formula",
    "glue_avg": "GLUE average",
    "warm_jobs": "jobs run warm",
    "wall_s_median": "wall time (s, median)",
    "wall_s_max": "wall time (s, max)",
    "wall_s_total": "wall time (s, total)",
    "max_rss_mb": "peak memory (MB)",
    "cpu_time_s_total": "CPU time (s, total)",
    "mean_load_pct": "CPU load (%, mean)",
    "posn": "positions",
    "eval_mse_min": "fresh-point MSE (min)",
    "eval_mse_mean": "fresh-point MSE (mean)",
    "last_quarter_fall_max": "best train loss's fall over the last quarter (max)",
    "kept_share": "share of the control's cost kept",
    "margin_share": "margin / control's cost",
    "qk_angle_deg_min": "angle(QKᵀ, I) (deg, min)",
    "lean_advantage": "difference (+: lean better)",
    "bound_lo": "one-sided 95% lower bound",
    "bound_hi": "one-sided 95% upper bound",
    "seeds_missing": "declared seeds missing",
}

# one word of a name
WORDS = {
    "kappa": "κ", "rho": "ρ", "jac": "Jacobian", "params": "parameters", "param": "parameter", "pct": "%",
    "mlp": "MLP", "posn": "positions", "glue": "GLUE", "cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC",
    "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI", "rss": "RSS",
    "cpu": "CPU", "mb": "MB", "qk": "QK", "mse": "MSE", "acc": "acc", "dim": "dim",
}

# the statistic a name ends in, shown in brackets after the quantity
STATS = {
    "gmean": "geo. mean", "mean": "mean", "median": "median", "std": "std", "min": "min", "max": "max",
    "total": "total", "lo": "95% CI low", "hi": "95% CI high",
}


def column_label(name: str) -> str:
    """The header shown for column `name`; names with a space are labels already."""
    name = str(name)
    if name in LABELS or " " in name:
        return LABELS.get(name, name)
    parts = name.split("_")
    stat = STATS.get(parts[-1]) if len(parts) > 1 else None
    if stat:
        parts = parts[:-1]
    delta = len(parts) > 1 and parts[0] == "delta"
    if delta:
        parts = parts[1:]
    head = "_".join(parts)
    words = LABELS[head] if head in LABELS else " ".join(WORDS.get(p, p) for p in parts if p)
    label = ("Δ " if delta else "") + words
    return f"{label} ({stat})" if stat else label
