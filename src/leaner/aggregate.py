"""Per-variant outputs -> tidy tables: one row per variant (summary.csv), then per-configuration
means with 95% intervals over seeds, and the lean-vs-baseline table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .config import STUDY_TABLES
from .io import atomic_path, read_json, write_csv

ARCH = ["depth", "heads", "width", "head_dim", "mlp_hidden"]


def ci95(values) -> tuple[float, float, float, int]:
    """Mean and Student-t 95% interval over seeds: (mean, lo, hi, n); NaNs are dropped."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))], float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(v.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    half = float(stats.t.ppf(0.975, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half, n


def _gmean(values) -> float:
    v = np.asarray(values, float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


def _kappa_columns(cond: pd.DataFrame) -> dict:
    """Summary kappa columns from one variant's conditioning.csv: layer-1 median and the
    geometric mean over layers of the per-layer medians, per checkpoint and matrix."""
    out = {}
    short = {"heads_concat": "", "attn_proj_out": "out_"}
    for (ckpt, matrix), g in cond.groupby(["checkpoint", "matrix"]):
        if ckpt not in ("init", "final"):
            continue
        prefix = f"kappa_{short[matrix]}{ckpt}"
        out[f"{prefix}_l1"] = float(g.loc[g["layer"] == 1, "kappa_median"].iloc[0]) if (g["layer"] == 1).any() else math.nan
        out[f"{prefix}_gmean"] = _gmean(g["kappa_median"])
    return out


def summarize_study(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                    protocols: dict[str, list[str]]) -> pd.DataFrame:
    """One tidy row per variant."""
    cond_by_dir = {str(Path(p).parent): p for p in conditioning_paths}
    rows = []
    for mpath in metrics_paths:
        m = read_json(mpath)
        model = m["spec"]["model"]
        row = {"study": study, "variant": m["variant"], **{k: model[k] for k in ARCH},
               "mlp_ratio": model["mlp_hidden"] / model["width"], "seed": m["seed"],
               "protocols": ";".join(protocols.get(m["variant"], [])), "status": m["status"],
               **{f"params_{k}": v for k, v in m["params"].items()},
               **{k: v for k, v in m["final"].items()},
               f"best_{m['primary_metric']}": m["best"][m["primary_metric"]],
               "steps": m["steps"], "wall_time_s": m["wall_time_s"],
               "throughput_samples_per_s": m["throughput_samples_per_s"], "peak_memory_mb": m["peak_memory_mb"],
               "device": m["device"]}
        cpath = cond_by_dir.get(str(Path(mpath).parent))
        if cpath:
            row.update(_kappa_columns(pd.read_csv(cpath)))
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.sort_values(ARCH + ["seed"]).reset_index(drop=True) if len(frame) else frame


def by_config(summary: pd.DataFrame, metric: str = "eval_acc") -> pd.DataFrame:
    """Mean, 95% interval and n over seeds for each architecture; kappa as geometric means."""
    rows = []
    for key, g in summary.groupby(ARCH, sort=True):
        mean, lo, hi, n = ci95(g[metric])
        row = dict(zip(ARCH, key))
        row.update({"protocols": g["protocols"].iloc[0], "params": int(g["params_total"].iloc[0]),
                    f"{metric}_mean": mean, f"{metric}_lo": lo, f"{metric}_hi": hi, "n": n,
                    "diverged": int((g["status"] != "ok").sum())})
        for col in ("kappa_init_gmean", "kappa_final_gmean"):
            if col in g:
                row[col] = _gmean(g[col])
        rows.append(row)
    return pd.DataFrame(rows)


def pick_baseline(configs: pd.DataFrame, baseline: dict) -> pd.Series:
    """The configured baseline, else the deepest model with the fewest heads, widest, largest MLP."""
    cand = configs
    for key, value in baseline.items():
        cand = cand[cand[key] == value]
    if cand.empty:
        raise ValueError(f"baseline {baseline} matches no configuration of the study")
    cand = cand.sort_values(["depth", "heads", "width", "mlp_hidden"], ascending=[False, True, False, False])
    return cand.iloc[0]


def lean_vs_baseline(summary: pd.DataFrame, baseline: dict, metric: str = "eval_acc") -> pd.DataFrame:
    """Each shallower configuration against the baseline: accuracy, its difference with a Welch
    95% interval, and the parameter reduction."""
    from scipy import stats

    configs = by_config(summary, metric)
    base = pick_baseline(configs, baseline)
    base_vals = _values(summary, base, metric)
    rows = []
    for _, cfg in configs[configs["depth"] < base["depth"]].iterrows():
        vals = _values(summary, cfg, metric)
        diff = float(np.mean(vals) - np.mean(base_vals)) if len(vals) and len(base_vals) else math.nan
        lo = hi = math.nan
        if len(vals) > 1 and len(base_vals) > 1:
            va, vb = np.var(vals, ddof=1) / len(vals), np.var(base_vals, ddof=1) / len(base_vals)
            se = math.sqrt(va + vb)
            dof = (va + vb) ** 2 / (va**2 / (len(vals) - 1) + vb**2 / (len(base_vals) - 1)) if se > 0 else 1
            half = stats.t.ppf(0.975, dof) * se
            lo, hi = diff - half, diff + half
        verdict = "n/a" if math.isnan(lo) else ("better" if lo > 0 else "worse" if hi < 0 else "no difference")
        rows.append({**{k: cfg[k] for k in ARCH}, "protocols": cfg["protocols"], "params": cfg["params"],
                     "param_reduction_pct": 100.0 * (1 - cfg["params"] / base["params"]),
                     f"{metric}_mean": cfg[f"{metric}_mean"], "n": cfg["n"],
                     f"delta_{metric}": diff, "delta_lo": lo, "delta_hi": hi, "verdict": verdict,
                     "baseline": _arch_label(base), f"baseline_{metric}": base[f"{metric}_mean"],
                     "baseline_params": base["params"]})
    return pd.DataFrame(rows)


def _values(summary: pd.DataFrame, cfg: pd.Series, metric: str) -> np.ndarray:
    mask = np.ones(len(summary), bool)
    for k in ARCH:
        mask &= summary[k].to_numpy() == cfg[k]
    v = summary.loc[mask, metric].to_numpy(float)
    return v[np.isfinite(v)]


def _arch_label(cfg) -> str:
    return f"L{cfg['depth']}-H{cfg['heads']}-D{cfg['width']}-mlp{cfg['mlp_hidden']}"


def write_table(frame: pd.DataFrame, prefix: str | Path, caption: str = "") -> list[Path]:
    """The same table as CSV, Markdown and LaTeX: prefix.csv, prefix.md, prefix.tex."""
    prefix = Path(prefix)
    write_csv(prefix.with_suffix(".csv"), frame)
    shown = frame.copy()
    for col in shown.columns:
        if shown[col].dtype.kind == "f":
            shown[col] = shown[col].map(lambda x: "" if pd.isna(x) else f"{x:.4g}")
    md = (f"{caption}\n\n" if caption else "") + shown.to_markdown(index=False) + "\n"
    with atomic_path(prefix.with_suffix(".md")) as tmp:
        tmp.write_text(md)
    tex = shown.to_latex(index=False, caption=caption or None, escape=True)
    with atomic_path(prefix.with_suffix(".tex")) as tmp:
        tmp.write_text(tex)
    return [prefix.with_suffix(s) for s in (".csv", ".md", ".tex")]


def write_summary(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                  protocols: dict[str, list[str]], out_csv: str) -> pd.DataFrame:
    frame = summarize_study(study, metrics_paths, conditioning_paths, protocols)
    write_csv(out_csv, frame)
    return frame


def write_study_tables(summary_csv: str, study: str, baseline: dict, table_dir: str,
                       metric: str = "eval_acc") -> list[Path]:
    """results/tables/{study}-{by_config,lean_vs_baseline}.{csv,md,tex}"""
    summary = pd.read_csv(summary_csv)
    tables = {
        "by_config": (by_config(summary, metric),
                      f"{study}: mean and 95% interval of {metric} over seeds per configuration"),
        "lean_vs_baseline": (lean_vs_baseline(summary, baseline, metric),
                             f"{study}: shallower variants against the deepest baseline "
                             f"(difference with Welch 95% interval; parameter reduction)"),
    }
    return [p for name in STUDY_TABLES for p in write_table(*tables[name][:1], Path(table_dir) / f"{study}-{name}",
                                                            tables[name][1])]


def write_theory_table(theory_csv: str, table_dir: str) -> list[Path]:
    frame = pd.read_csv(theory_csv)
    frame["mc_over_formula"] = frame["kappa_mean"] / frame["kappa_formula"]
    return write_table(frame, Path(table_dir) / "theory-gaussian_conditioning",
                       "Theorem 3.2: Monte Carlo kappa of N x (h*d) Gaussian blocks against the closed form")
