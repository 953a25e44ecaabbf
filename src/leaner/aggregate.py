"""Per-variant outputs -> tidy tables: one row per variant (summary.csv), then per-configuration
means with 95% intervals over seeds, and the lean-vs-baseline table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .config import ACCEPTANCE_CHECKS, STUDY_TABLES, grid_points, study_outputs
from .io import atomic_path, read_json, write_csv

ARCH = ["depth", "heads", "width", "head_dim", "mlp_hidden"]
# The architecture axes of each task's variants: one configuration = one value of each.
AXES = {"image_classification": ARCH, "listops": ARCH, "language_model": ARCH, "glue": ARCH,
        "nearest_point": ["depth", "heads", "modules", "head_dim", "dim", "tokens", "posn"]}
# Each task's headline metric in the summary (its per-run value) and which way is better.
METRIC = {"image_classification": ("eval_acc", "max"), "listops": ("eval_acc", "max"),
          "language_model": ("eval_loss", "min"), "glue": ("glue_avg", "max"),
          "nearest_point": ("best_train_loss", "min")}


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


def welch(a, b) -> tuple[float, float, float]:
    """mean(a) - mean(b) with a Welch 95% interval; NaN bounds when either side has one value."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    if not len(a) or not len(b):
        return math.nan, math.nan, math.nan
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, dof) * se)
    return diff, diff - half, diff + half


# A difference is called only when its 95% interval clears zero by a quarter of its half-width,
# and "no difference" only when the interval reaches that far past zero on both sides. In between
# the comparison is unresolved: a re-run on another CPU type (same seeds, different floating-point
# path) moved the headline interval by 6.5% of its half-width, enough to flip a verdict that sat
# on zero; the margin leaves four times that.
RESOLVE_MARGIN = 0.25


def resolve(lo: float, hi: float, margin: float = RESOLVE_MARGIN) -> str:
    """'above' / 'below' zero, 'includes zero', 'unresolved' (within the margin) or 'n/a' (no interval)."""
    if math.isnan(lo) or math.isnan(hi):
        return "n/a"
    room = margin * (hi - lo) / 2
    if lo > room:
        return "above"
    if hi < -room:
        return "below"
    if lo < -room and hi > room:
        return "includes zero"
    return "unresolved"


def _gmean(values) -> float:
    """Geometric mean of positive kappas; +inf (a singular matrix) makes it +inf, NaN is left out."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v) & (v > 0)]
    if not len(v):
        return math.nan
    return math.inf if np.isinf(v).any() else float(np.exp(np.log(v).mean()))


# Summary column prefix of each measured matrix (conditioning.MATRICES): kappa_{prefix}{checkpoint}_...
KAPPA_PREFIX = {"heads_concat": "", "attn_proj_out": "out_", "jacobian": "jac_"}


def _kappa_columns(cond: pd.DataFrame) -> dict:
    """Summary kappa columns from one variant's conditioning.csv, per checkpoint (init, final) and
    matrix: layer-1 median, the geometric mean over layers of the per-layer medians (+inf when a
    layer's median is singular) and the fraction of singular samples over all layers."""
    out = {}
    for (ckpt, matrix), g in cond.groupby(["checkpoint", "matrix"]):
        if ckpt not in ("init", "final") or matrix not in KAPPA_PREFIX:
            continue
        prefix = f"kappa_{KAPPA_PREFIX[matrix]}{ckpt}"
        out[f"{prefix}_l1"] = float(g.loc[g["layer"] == 1, "kappa_median"].iloc[0]) if (g["layer"] == 1).any() else math.nan
        out[f"{prefix}_gmean"] = _gmean(g["kappa_median"])
        if "singular_fraction" in g:
            out[f"{prefix}_singular"] = float(g["singular_fraction"].mean())
        if matrix == "jacobian" and "method" in g:
            out[f"{prefix}_method"] = "+".join(sorted(set(g["method"])))  # exact | lanczos (a lower bound)
    return out


def kappa_through_training(summary: pd.DataFrame, conditioning_paths: list[str]) -> pd.DataFrame:
    """One row per (variant, checkpoint, matrix): the step, its fraction of the run, layer-1
    median kappa and the geometric mean over layers of the per-layer medians, with the variant's
    architecture, seed and protocols from the summary."""
    if not len(summary):
        return pd.DataFrame()
    task = summary["task"].iloc[0]
    keep = ["variant", *AXES[task], "seed", "protocols", "status", "steps",
            *(["total_heads"] if "total_heads" in summary else [])]
    info = summary[keep].set_index("variant")
    rows = []
    for path in conditioning_paths:
        cond = pd.read_csv(path)
        for (variant, ckpt, step, matrix), g in cond.groupby(["variant", "checkpoint", "step", "matrix"], sort=False):
            if variant not in info.index:
                continue
            v = info.loc[variant]
            l1 = g.loc[g["layer"] == 1, "kappa_median"]
            rows.append({"variant": variant, **v.to_dict(), "checkpoint": ckpt, "step": int(step),
                         "fraction": step / v["steps"] if v["steps"] else math.nan, "matrix": matrix,
                         "kappa_l1": float(l1.iloc[0]) if len(l1) else math.nan,
                         "kappa_gmean": _gmean(g["kappa_median"]),
                         "singular_fraction": float(g["singular_fraction"].mean()) if "singular_fraction" in g
                         else math.nan})
    frame = pd.DataFrame(rows)
    if "total_heads" not in frame and len(frame):
        frame["total_heads"] = frame["heads"]
    return frame.sort_values(["variant", "matrix", "step"]).reset_index(drop=True) if len(frame) else frame


def glue_scores(metrics_paths: list[str]) -> dict:
    """One pretrained variant's fine-tuning runs -> each task's score (its GLUE metric at the end
    of fine-tuning, on the evaluation split) and their unweighted mean, the GLUE average."""
    tasks = {}
    for path in metrics_paths:
        m = read_json(path)
        task = m["spec"]["glue_task"]
        tasks[task] = {"score": m["final"].get("eval_score"), "status": m["status"],
                       **{k[len("eval_"):]: v for k, v in m["final"].items() if k.startswith("eval_")}}
    scores = [t["score"] for t in tasks.values() if t["score"] is not None]
    return {"tasks": tasks, "glue_avg": float(np.mean(scores)) if scores else math.nan, "n_tasks": len(scores)}


def write_glue_scores(metrics_paths: list[str], out_json: str) -> dict:
    from .io import write_json

    scores = glue_scores(metrics_paths)
    write_json(out_json, scores)
    return scores


def summarize_study(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                    protocols: dict[str, list[str]], glue_paths: list[str] = ()) -> pd.DataFrame:
    """One tidy row per variant."""
    cond_by_dir = {str(Path(p).parent): p for p in conditioning_paths}
    glue_by_dir = {str(Path(p).parent): p for p in glue_paths}
    rows = []
    for mpath in metrics_paths:
        m = read_json(mpath)
        model, task = m["spec"]["model"], m["spec"]["task"]
        row = {"study": study, "task": task, "dataset": m["spec"].get("dataset"), "variant": m["variant"],
               **{k: model[k] for k in AXES[task]},
               "seed": m["seed"], "protocols": ";".join(protocols.get(m["variant"], [])), "status": m["status"],
               **{f"params_{k}": v for k, v in m["params"].items()},
               **{k: v for k, v in m["final"].items()},
               f"best_{m['primary_metric']}": m["best"][m["primary_metric"]],
               "steps": m["steps"], "wall_time_s": m["wall_time_s"],
               "throughput_samples_per_s": m["throughput_samples_per_s"], "peak_memory_mb": m["peak_memory_mb"],
               "device": m["device"]}
        gpath = glue_by_dir.get(str(Path(mpath).parent))
        if gpath:
            glue = read_json(gpath)
            row.update({f"glue_{t}": v["score"] for t, v in glue["tasks"].items()})
            row["glue_avg"] = glue["glue_avg"]
        if AXES[task] is ARCH:
            row["mlp_ratio"] = model["mlp_hidden"] / model["width"]
            metric, mode = METRIC[task]
            value = row.get(metric)
            # error: lower is better for every task (1 - accuracy, or the loss itself)
            row["error"] = math.nan if value is None else (1.0 - value if mode == "max" else value)
        else:
            row["total_heads"] = model["heads"] * model["modules"]
            row["error"] = row["best_train_loss"]
        for key, values in (m.get("diagnostics") or {}).items():
            if values:
                row[f"{key}_mean"], row[f"{key}_min"] = float(np.mean(values)), float(np.min(values))
        cpath = cond_by_dir.get(str(Path(mpath).parent))
        if cpath:
            row.update(_kappa_columns(pd.read_csv(cpath)))
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.sort_values(AXES[frame["task"].iloc[0]] + ["seed"]).reset_index(drop=True) if len(frame) else frame


def by_config(summary: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Per architecture: mean with its 95% interval, min, max and n over seeds (P2 reports the
    min over seeds and the range); kappa as geometric means."""
    task = summary["task"].iloc[0]
    axes, metric = AXES[task], metric or METRIC[task][0]
    rows = []
    for key, g in summary.groupby(axes, sort=True):
        mean, lo, hi, n = ci95(g[metric])
        row = dict(zip(axes, key))
        if "protocols" in g and AXES[task] is ARCH:
            row["protocols"] = g["protocols"].iloc[0]
        row.update({"params": int(g["params_total"].iloc[0]), f"{metric}_mean": mean, f"{metric}_lo": lo,
                    f"{metric}_hi": hi, f"{metric}_min": g[metric].min(), f"{metric}_max": g[metric].max(),
                    "n": n, "diverged": int((g["status"] != "ok").sum())})
        for col in ("kappa_init_gmean", "kappa_final_gmean", "kappa_jac_init_gmean", "kappa_jac_final_gmean"):
            if col in g:
                row[col] = _gmean(g[col])
        rows.append(row)
    return pd.DataFrame(rows)


def acceptance_checks(summary: pd.DataFrame, checks=ACCEPTANCE_CHECKS) -> pd.DataFrame:
    """P2's acceptance checks (papers.md 2.7) named in `checks`, wherever the study's grid holds
    the points a check needs; per configuration the min over seeds, as in P2's plots."""
    configs = by_config(summary)
    metric = "best_train_loss_min"
    rows = []
    one_layer = configs[configs["depth"] == 1] if "full_rank_gap" in checks else configs.iloc[:0]
    for (w, d, n, posn), g in one_layer.groupby(["modules", "dim", "tokens", "posn"]):
        full = g[g["head_dim"] == g["head_dim"].max()]
        half = g[g["head_dim"] == full["head_dim"].iloc[0] // 2]
        if len(full) and len(half) and full["heads"].iloc[0] == 1:
            ratio = float(half[metric].iloc[0] / full[metric].iloc[0])
            rows.append({"check": f"1 layer, W={w}, d={d}, N={n}, posn={posn}: MSE(rank d/2) / MSE(rank d)",
                         "expected": ">= 10", "observed": ratio, "pass": ratio >= 10})
    for (depth, w, d, posn), g in configs.groupby(["depth", "modules", "dim", "posn"]):
        low = g[g["head_dim"] == g["head_dim"].min()]
        short, long_ = low[low["tokens"] == 4], low[low["tokens"] >= 64]
        if len(short) and len(long_) and g["head_dim"].nunique() > 1 and "short_sequences" in checks:
            r = int(low["head_dim"].iloc[0])
            s_mse, l_mse = float(short[metric].iloc[0]), float(long_[metric].min())
            rows.append({"check": f"{depth} layers, W={w}, d={d}, posn={posn}, rank {r}: MSE at N=4",
                         "expected": "<= 0.05", "observed": s_mse, "pass": s_mse <= 0.05})
            rows.append({"check": f"{depth} layers, W={w}, d={d}, posn={posn}, rank {r}: MSE at N >= 64",
                         "expected": "> 0.5", "observed": l_mse, "pass": l_mse > 0.5})
    if "qk_angle_deg_min" in summary and "perfect_angle" in checks:
        single = summary[(summary["depth"] == 1) & (summary["heads"] == 1)]
        for (w, d, n), g in single.groupby(["modules", "dim", "tokens"]):
            angle = float(g["qk_angle_deg_min"].min())
            rows.append({"check": f"fig_perfect: 1 layer, 1 head, W={w}, d={d}, N={n}: angle(QK^T, I), every head",
                         "expected": "> 165 deg", "observed": angle, "pass": angle > 165})
    return pd.DataFrame(rows, columns=["check", "expected", "observed", "pass"])


def pick_baseline(configs: pd.DataFrame, baseline: dict) -> pd.Series:
    """The configured baseline, else the deepest model with the fewest heads, widest, largest MLP."""
    cand = configs
    for key, value in baseline.items():
        cand = cand[cand[key] == value]
    if cand.empty:
        raise ValueError(f"baseline {baseline} matches no configuration of the study")
    cand = cand.sort_values(["depth", "heads", "width", "mlp_hidden"], ascending=[False, True, False, False])
    return cand.iloc[0]


def lean_vs_baseline(summary: pd.DataFrame, baseline: dict, metric: str = "eval_acc",
                     mode: str = "max") -> pd.DataFrame:
    """Each shallower configuration against the baseline: the metric, its difference with a Welch
    95% interval, and the parameter reduction. `mode` says which way is better (max: accuracy,
    min: a loss); a difference is called one only when its interval clears 0 by the margin
    (`resolve`), else it is "no difference" or "unresolved"."""
    configs = by_config(summary, metric)
    base = pick_baseline(configs, baseline)
    base_vals = _values(summary, base, metric)
    rows = []
    for _, cfg in configs[configs["depth"] < base["depth"]].iterrows():
        vals = _values(summary, cfg, metric)
        diff, lo, hi = welch(vals, base_vals)
        side = resolve(lo, hi)
        verdict = {"above": "better" if mode == "max" else "worse", "below": "worse" if mode == "max" else "better",
                   "includes zero": "no difference"}.get(side, side)
        rows.append({**{k: cfg[k] for k in ARCH}, "protocols": cfg["protocols"], "params": cfg["params"],
                     "param_reduction_pct": 100.0 * (1 - cfg["params"] / base["params"]),
                     f"{metric}_mean": cfg[f"{metric}_mean"], f"{metric}_lo": cfg[f"{metric}_lo"],
                     f"{metric}_hi": cfg[f"{metric}_hi"], "n": cfg["n"],
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


TABLE_STYLE = ("body{font-family:sans-serif;font-size:0.9em}table{border-collapse:collapse}"
               "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}th{background:#f4f4f4}")


def write_table(frame: pd.DataFrame, prefix: str | Path, caption: str = "") -> list[Path]:
    """The same table as CSV, Markdown, LaTeX and HTML (the report shows the HTML)."""
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
    import html

    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{TABLE_STYLE}</style></head><body>"
            f"<p>{html.escape(caption)}</p>{shown.to_html(index=False, border=0, na_rep='')}</body></html>\n")
    with atomic_path(prefix.with_suffix(".html")) as tmp:
        tmp.write_text(page)
    return [prefix.with_suffix(s) for s in (".csv", ".md", ".tex", ".html")]


def glue_tasks_table(summary: pd.DataFrame) -> pd.DataFrame:
    """P1's GLUE table: per configuration, each task's score and the GLUE average (means over seeds)."""
    cols = [c for c in summary.columns if c.startswith("glue_") and c != "glue_avg"] + ["glue_avg"]
    rows = []
    for key, g in summary.groupby(ARCH, sort=True):
        mean, lo, hi, n = ci95(g["glue_avg"]) if "glue_avg" in g else (math.nan, math.nan, math.nan, len(g))
        rows.append({**dict(zip(ARCH, key)), "params": int(g["params_total"].iloc[0]), "n": len(g),
                     **{c: float(g[c].mean()) for c in cols if c in g}, "glue_avg_lo": lo, "glue_avg_hi": hi})
    return pd.DataFrame(rows)


def write_summary(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                  protocols: dict[str, list[str]], out_csv: str, glue_paths: list[str] = (),
                  kappa_csv: str | None = None) -> pd.DataFrame:
    """summary.csv, and (kappa_csv) every variant's kappa at each kept checkpoint."""
    frame = summarize_study(study, metrics_paths, conditioning_paths, protocols, glue_paths)
    if kappa_csv:
        write_csv(kappa_csv, kappa_through_training(frame, conditioning_paths))
    write_csv(out_csv, frame)
    return frame


def write_study_tables(summary_csv: str, study: str, baseline: dict, table_dir: str,
                       checks=ACCEPTANCE_CHECKS, names: list[str] | None = None) -> list[Path]:
    """results/tables/{study}-{name}.{csv,md,tex,html} for each of `names`; by default the task's
    STUDY_TABLES that the study's grid gives something to show (config.study_outputs)."""
    summary = pd.read_csv(summary_csv)
    task = summary["task"].iloc[0]
    if names is None:
        names = study_outputs(task, grid_points(summary.to_dict("records")), baseline)[1]
    unknown = [name for name in names if name not in STUDY_TABLES[task]]
    if unknown:
        raise ValueError(f"no table {', '.join(unknown)} for task {task} (allowed: {', '.join(STUDY_TABLES[task])})")
    metric, mode = METRIC[task]
    checks = ACCEPTANCE_CHECKS if checks is None else checks
    makers = {
        "by_config": lambda: (by_config(summary), f"{study}: {metric} per configuration over seeds "
                                                  f"(mean, 95% interval, min, max, n)"),
        "lean_vs_baseline": lambda: (lean_vs_baseline(summary, baseline, metric, mode),
                                     f"{study}: shallower variants against the deepest baseline "
                                     f"(difference with Welch 95% interval; parameter reduction)"),
        "glue_tasks": lambda: (glue_tasks_table(summary),
                               f"{study}: GLUE score per task after fine-tuning, and the average (mean over seeds, "
                               f"with the average's 95% interval)"),
        "acceptance": lambda: (acceptance_checks(summary, checks),
                               f"{study}: P2's acceptance checks (min over seeds)"),
        "paper_comparison": lambda: (_paper_comparison(summary, baseline, checks),
                                     f"{study}: the paper's reported numbers beside ours, with the setting of each"),
    }
    paths = []
    for name in names:
        frame, caption = makers[name]()
        paths += write_table(frame, Path(table_dir) / f"{study}-{name}", caption)
    return paths


def job_costs(benchmark_paths: list[str]) -> pd.DataFrame:
    """Snakemake's per-job benchmark files (benchmarks/{rule}/{study}/...tsv) -> per rule and study:
    jobs, wall time (median, max, total), peak RSS, CPU time and mean load; a total row last."""
    rows = []
    for path in benchmark_paths:
        parts = Path(path).parts
        i = len(parts) - 1 - parts[::-1].index("benchmarks") if "benchmarks" in parts else 0
        bench = pd.read_csv(path, sep="\t")
        rows.append({"rule": parts[i + 1], "study": parts[i + 2] if len(parts) > i + 3 else "-",
                     "s": float(bench["s"].iloc[-1]), "max_rss_mb": float(pd.to_numeric(bench["max_rss"], errors="coerce").iloc[-1]),
                     "cpu_time_s": float(pd.to_numeric(bench["cpu_time"], errors="coerce").iloc[-1]),
                     "mean_load": float(pd.to_numeric(bench["mean_load"], errors="coerce").iloc[-1])})
    jobs = pd.DataFrame(rows, columns=["rule", "study", "s", "max_rss_mb", "cpu_time_s", "mean_load"])

    def cost(rule: str, study: str, g: pd.DataFrame) -> dict:
        return {"rule": rule, "study": study, "jobs": len(g), "wall_s_median": g["s"].median(),
                "wall_s_max": g["s"].max(), "wall_s_total": g["s"].sum(), "max_rss_mb": g["max_rss_mb"].max(),
                "cpu_time_s_total": g["cpu_time_s"].sum(), "mean_load_pct": g["mean_load"].mean()}

    out = [cost(rule, study, g) for (rule, study), g in jobs.groupby(["rule", "study"], sort=True)]
    return pd.DataFrame(out + ([cost("all", "-", jobs)] if len(jobs) else []))


def write_job_costs(benchmark_paths: list[str], table_dir: str) -> list[Path]:
    return write_table(job_costs(benchmark_paths), Path(table_dir) / "all_studies-job_costs",
                       "What each stage cost, from Snakemake's per-job benchmark files: wall time (s), peak "
                       "resident memory (MB), CPU time (s) and mean CPU load (%)")


def _paper_comparison(summary: pd.DataFrame, baseline: dict, checks) -> pd.DataFrame:
    from .papers import paper_comparison

    return paper_comparison(summary, baseline, checks)


def write_theory_table(theory_csv: str, table_dir: str) -> list[Path]:
    from .papers import theorem_comparison

    frame = pd.read_csv(theory_csv)
    frame["mc_over_formula"] = frame["kappa_mean"] / frame["kappa_formula"]
    return write_table(frame, Path(table_dir) / "theory-gaussian_conditioning",
                       "Theorem 3.2: Monte Carlo kappa of N x (h*d) Gaussian blocks against the closed form") + \
        write_table(theorem_comparison(frame), Path(table_dir) / "theory-paper_comparison",
                    "Theorem 3.2: our Monte Carlo against papers.md 1.1 (N = 197, d = 64); pass within 10%")
