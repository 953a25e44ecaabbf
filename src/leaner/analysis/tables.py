"""Tables from summary.csv: per configuration over seeds, lean against baseline, P2's acceptance
checks, GLUE per task, the jobs' costs; and the one writer of every table (CSV, Markdown, LaTeX,
HTML)."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import atomic_path, write_csv
from ..outputs import ACCEPTANCE_CHECKS
from ..tasks import task_info
from .labels import column_label
from .stats import ci95, claim_verdict, gmean, resolve, welch
from .summary import ARCH, axes, config_values, is_arch, not_learned


def by_config(summary: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Per architecture: mean with its 95% interval, min, max and n over seeds (P2 reports the
    min over seeds and the range); kappa as geometric means."""
    task = summary["task"].iloc[0]
    keys, metric = axes(task), metric or task_info(task).metric[0]
    rows = []
    for key, g in summary.groupby(keys, sort=True):
        mean, lo, hi, n = ci95(g[metric])
        row = dict(zip(keys, key))
        if "protocols" in g and is_arch(task):
            row["protocols"] = g["protocols"].iloc[0]
        row.update({"params": int(g["params_total"].iloc[0]), f"{metric}_mean": mean, f"{metric}_lo": lo,
                    f"{metric}_hi": hi, f"{metric}_min": g[metric].min(), f"{metric}_max": g[metric].max(),
                    "n": n, "diverged": int((g["status"] != "ok").sum())})
        if not is_arch(task) and "eval_mse" in g:  # P2: the fresh-point MSE beside the training metric
            row["eval_mse_min"] = g["eval_mse"].min()
        for col in ("kappa_init_gmean", "kappa_final_gmean", "kappa_jac_init_gmean", "kappa_jac_final_gmean"):
            if col in g:
                row[col] = gmean(g[col])
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
    (`resolve`), else it is "inconclusive" (the interval spans zero: absence of evidence, not
    evidence of no difference; that needs a margin, see `claims_table`) or "unresolved"."""
    configs = by_config(summary, metric)
    base = pick_baseline(configs, baseline)
    base_vals = config_values(summary, base, metric)
    rows = []
    for _, cfg in configs[configs["depth"] < base["depth"]].iterrows():
        vals = config_values(summary, cfg, metric)
        diff, lo, hi = welch(vals, base_vals)
        side = resolve(lo, hi)
        verdict = {"above": "better" if mode == "max" else "worse", "below": "worse" if mode == "max" else "better",
                   "includes zero": "inconclusive"}.get(side, side)
        rows.append({**{k: cfg[k] for k in ARCH}, "protocols": cfg["protocols"], "params": cfg["params"],
                     "param_reduction_pct": 100.0 * (1 - cfg["params"] / base["params"]),
                     f"{metric}_mean": cfg[f"{metric}_mean"], f"{metric}_lo": cfg[f"{metric}_lo"],
                     f"{metric}_hi": cfg[f"{metric}_hi"], "n": cfg["n"],
                     f"delta_{metric}": diff, "delta_lo": lo, "delta_hi": hi, "verdict": verdict,
                     "baseline": arch_label(base), f"baseline_{metric}": base[f"{metric}_mean"],
                     "baseline_params": base["params"]})
    return pd.DataFrame(rows)


def arch_label(cfg) -> str:
    return f"L{cfg['depth']}-H{cfg['heads']}-D{cfg['width']}-mlp{cfg['mlp_hidden']}"


def _claim_rows(summary: pd.DataFrame, point: dict, seeds: list[int]) -> pd.DataFrame:
    mask = summary["seed"].isin(seeds)
    for key, value in point.items():
        mask &= summary[key] == value
    return summary[mask]


CLAIMS_COLUMNS = ["claim", "role", "configuration", "params", "param_reduction_pct", "metric", "mean", "n",
                  "seeds_missing", "lean_advantage", "bound_lo", "bound_hi", "margin", "verdict"]


def claims_table(summary: pd.DataFrame, claims: list[dict]) -> pd.DataFrame:
    """The study's declared claims (plan._claims), baseline first: per claim its baseline row,
    then one row per lean configuration with the difference (positive: lean better), its one-sided
    95% bounds, the margin and the verdict (stats.claim_verdict). Only the declared seeds count; a
    declared seed without a finished run is counted as missing, never replaced."""
    rows = []
    for claim in claims:
        metric, seeds = claim["metric"], claim["seeds"]
        base = _claim_rows(summary, claim["baseline"], seeds)
        base_vals = base[metric].to_numpy(float)
        base_params = int(base["params_total"].iloc[0]) if len(base) else None
        common = {"claim": claim["name"], "metric": metric, "margin": claim["margin"]}
        mean, lo, hi, n = ci95(base_vals)
        rows.append({**common, "role": "baseline", "configuration": arch_label(claim["baseline"]),
                     "params": base_params, "param_reduction_pct": 0.0, "mean": mean, "n": n,
                     "seeds_missing": len(seeds) - n})
        for point in claim["lean"]:
            lean = _claim_rows(summary, point, seeds)
            vals = lean[metric].to_numpy(float)
            v = claim_verdict(vals, base_vals, claim["margin"], claim["mode"])
            stuck = [name for name, rows in (("baseline", base), ("lean", lean)) if not_learned(rows) > 0]
            if stuck:  # no verdict on a model that never beat chance (summary.learned)
                v = {**v, "verdict": f"did not learn ({' and '.join(stuck)})"}
            params = int(lean["params_total"].iloc[0]) if len(lean) else None
            reduction = 100.0 * (1 - params / base_params) if params and base_params else math.nan
            mean, _, _, n = ci95(vals)
            rows.append({**common, "role": "lean", "configuration": arch_label(point), "params": params,
                         "param_reduction_pct": reduction, "mean": mean, "n": n, "seeds_missing": len(seeds) - n,
                         "lean_advantage": v["diff"], "bound_lo": v["lo"], "bound_hi": v["hi"],
                         "verdict": v["verdict"]})
    return pd.DataFrame(rows).reindex(columns=CLAIMS_COLUMNS)


# ---------------------------------------------------------------------------------------------
# The one writer of every table. The CSV is for machines: raw column names, full precision. The
# Markdown, LaTeX and HTML are for people: readable headers (labels.column_label), numbers with
# the same decimals down a column (about SIG significant figures for the column's typical value,
# scientific notation for a whole column that spans too many orders of magnitude), numbers
# right-aligned and text left-aligned; the LaTeX needs no package, the HTML fits 1400 px.

SIG = 4  # significant figures of a column's typical value (fixed notation)
SCI_SIG = 3  # significant figures in scientific notation
LONG_TEXT = 30  # LaTeX: a text column with a longer cell is a ragged paragraph column
SHORT_TEXT = 16  # HTML: a text cell up to this long stays on one line, a longer one wraps
COMPACT_COLUMNS = 14  # HTML: a table of more columns is set in a smaller font, tighter
DENSE_COLUMNS = 20  # HTML: and of more than this, smaller still

TABLE_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;font-size:14px;color:#222;
 margin:8px;line-height:1.35}
p.caption{max-width:60em;margin:0 0 8px}
div.table-scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:13px}
th,td{padding:3px 7px;border-bottom:1px solid #ddd;vertical-align:top;text-align:left}
th{background:#f2f2f2;vertical-align:bottom;font-weight:600;white-space:normal;border-bottom:2px solid #bbb}
tbody tr:nth-child(even){background:#fafafa}
tbody tr:hover{background:#eef4fb}
.num{text-align:right}
td.num{white-space:nowrap;font-variant-numeric:tabular-nums}
td.short{white-space:nowrap}
td.long{white-space:normal;max-width:22em;overflow-wrap:break-word}
table.compact{font-size:12px}
table.compact th,table.compact td{padding:2px 4px}
table.dense{font-size:11px}
table.dense th,table.dense td{padding:2px 3px}
""".strip()

LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                 "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}", '"': "''"}
# characters pdflatex's default (OT1/T1) fonts lack: math symbols; anything else beyond Latin-1 is "?"
LATEX_UNICODE = {"κ": r"$\kappa$", "ρ": r"$\rho$", "Δ": r"$\Delta$", "σ": r"$\sigma$", "μ": r"$\mu$",
                 "µ": r"$\mu$", "∞": r"$\infty$", "ᵀ": r"$^{\top}$", "×": r"$\times$", "±": r"$\pm$",
                 "≥": r"$\geq$", "≤": r"$\leq$", "→": r"$\rightarrow$", "−": r"$-$", "–": "--", "—": "---",
                 "…": r"\ldots{}", "°": r"$^{\circ}$", "≈": r"$\approx$", "≠": r"$\neq$", "“": "``", "”": "''",
                 "‘": "`", "’": "'"}


def latex_escape(text: str) -> str:
    """`text` as LaTeX prints it literally, in any document (no package needed): its special
    characters escaped, -- kept two hyphens, Greek and other symbols in math mode."""
    text = str(text)
    return "".join(LATEX_SPECIAL.get(ch) or LATEX_UNICODE.get(ch)
                   or ("-{}" if ch == "-" and text[i + 1:i + 2] == "-" else ch if ord(ch) < 256 else "?")
                   for i, ch in enumerate(text))


def _is_whole(values: np.ndarray) -> bool:
    return bool(len(values)) and bool(np.all(values == np.round(values))) and bool(np.all(np.abs(values) < 2**53))


def number_format(values) -> Callable[[float], str]:
    """How one numeric column is shown: integers with thousands separators; floats with the same
    decimals down the column, chosen for SIG significant figures of the column's median magnitude
    (at most SIG + 1 for its largest), or all in scientific notation (SCI_SIG figures) when the
    column reaches 1e6, stays below 1e-3, or (one sign) spans 5 orders of magnitude."""
    integer = pd.Series(values).dtype.kind in "iu"
    values = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype=float)
    finite = values[np.isfinite(values)]
    nonzero = np.abs(finite[finite != 0])
    whole = integer or (_is_whole(finite) and bool(np.isnan(values).any()))
    if whole or not len(nonzero):
        fmt = (lambda v: f"{v:,.0f}") if whole or not len(finite) else (lambda v: f"{v:.{SIG - 1}f}")
    else:
        big, small, typical = nonzero.max(), nonzero.min(), float(np.median(nonzero))
        one_sign = bool((finite >= 0).all() or (finite <= 0).all())
        if big >= 1e6 or big < 1e-3 or (one_sign and big / small >= 1e5):
            def fmt(v: float) -> str:
                return "0" if v == 0 else re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{v:.{SCI_SIG - 1}e}")
        else:
            exp = lambda x: math.floor(math.log10(x))  # noqa: E731
            decimals = min(max(min(SIG - 1 - exp(typical), SIG - exp(big)), 0), 6)
            fmt = lambda v: f"{v:,.{decimals}f}"  # noqa: E731

    def show(v) -> str:
        if v is None or pd.isna(v):
            return ""
        v = float(v)
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        return fmt(v)
    return show


def _latex_number(text: str) -> str:
    """A shown number in LaTeX: a true minus sign, x 10^k for scientific notation."""
    if not text:
        return ""
    if text.endswith("∞"):
        return r"$-\infty$" if text.startswith("-") else r"$\infty$"
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"${mantissa}\\times10^{{{int(exponent)}}}$"
    return f"${text.replace(',', '{,}')}$" if text.startswith("-") else text


def _columns(frame: pd.DataFrame) -> list[dict]:
    """Per column: its label, whether numeric (right-aligned), whether long text, its shown cells."""
    def is_numeric(series: pd.Series) -> bool:
        non_null = series.dropna()
        return series.dtype.kind in "iuf" or (series.dtype.kind == "O" and len(non_null) > 0 and non_null.map(
            lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)).all())

    # an interval's bounds (lo, hi, x_lo, lo_x, ...) are shown like the estimate before them
    groups, owner = {}, None
    for name in frame.columns:
        if not is_numeric(frame[name]):
            continue
        bound = any(part in ("lo", "hi") for part in str(name).split("_"))
        if not bound or owner is None or frame[name].dtype.kind in "iu":
            owner = name
        groups.setdefault(owner, []).append(name)
    shows = {name: number_format(pd.concat([frame[m] for m in members], ignore_index=True))
             for members in groups.values() for name in members}
    cols = []
    for name in frame.columns:
        series = frame[name]
        kind = series.dtype.kind
        numeric = name in shows
        if numeric:
            cells = [shows[name](v) for v in series]
        elif kind == "b":
            cells = ["yes" if v else "no" for v in series]
        else:
            cells = ["" if v is None or (isinstance(v, float) and math.isnan(v))
                     else ("yes" if v else "no") if isinstance(v, (bool, np.bool_)) else " ".join(str(v).split())
                     for v in series]
        cols.append({"name": str(name), "label": column_label(name), "numeric": bool(numeric), "cells": cells,
                     "long": not numeric and max((len(c) for c in cells), default=0) > LONG_TEXT})
    return cols


def table_markdown(cols: list[dict], caption: str = "") -> str:
    """A GitHub-flavoured Markdown table, padded so that the plain text lines up too."""
    def esc(text: str) -> str:  # a | ends a cell, a <tag is HTML: both backslash-escaped
        return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", text.replace("\\", "\\\\").replace("|", "\\|"))

    heads = [esc(c["label"]) for c in cols]
    body = [[esc(cell) for cell in c["cells"]] for c in cols]
    widths = [max([3, len(h), *(len(x) for x in cells)]) for h, cells in zip(heads, body)]
    pads = [(str.rjust if c["numeric"] else str.ljust) for c in cols]
    rule = ["-" * (w - 1) + ":" if c["numeric"] else ":" + "-" * (w - 1) for c, w in zip(cols, widths)]
    lines = ["| " + " | ".join(pad(h, w) for pad, h, w in zip(pads, heads, widths)) + " |",
             "| " + " | ".join(rule) + " |"]
    for i in range(len(cols[0]["cells"]) if cols else 0):
        lines.append("| " + " | ".join(pad(cells[i], w) for pad, cells, w in zip(pads, body, widths)) + " |")
    return (f"{caption}\n\n" if caption else "") + "\n".join(lines) + "\n"


def table_latex(cols: list[dict], caption: str = "", label: str = "") -> str:
    """A table float that compiles in any LaTeX document: no package needed (no booktabs), long
    text in ragged paragraph columns, two-line headers; scaled to the line width when wider and
    graphicx is loaded, else centred over the margins."""
    def head(c: dict) -> str:
        text = c["label"]
        if c["long"]:
            return r"\raggedright " + latex_escape(text)
        lines = text.split(" (", 1)
        lines = [lines[0], "(" + lines[1]] if len(lines) == 2 else lines
        if len(lines) == 1:
            return latex_escape(text)
        align = "r" if c["numeric"] else "l"
        return rf"\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}" + r"\\".join(map(latex_escape, lines)) + r"\end{tabular}"

    def cell(c: dict, text: str) -> str:
        if c["numeric"]:
            return _latex_number(text)
        return (r"\raggedright " if c["long"] else "") + latex_escape(text)

    spec = "".join("r" if c["numeric"] else r"p{12em}" if c["long"] else "l" for c in cols)
    rows = [" & ".join(head(c) for c in cols) + r" \tabularnewline", r"\hline"]
    for i in range(len(cols[0]["cells"]) if cols else 0):
        rows.append(" & ".join(cell(c, c["cells"][i]) for c in cols) + r" \tabularnewline")
    lines = [r"% needs no package; \usepackage{graphicx} scales it to the line width where it is wider",
             r"\begin{table}[htbp]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}"]
    if caption:
        lines.append(rf"\caption{{{latex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{tab:{label}}}")
    lines += [r"\setbox0=\hbox{%", rf"\begin{{tabular}}{{{spec}}}", r"\hline", *rows, r"\hline",
              r"\end{tabular}}%",
              r"\ifdim\wd0>\linewidth\ifdefined\resizebox\resizebox{\linewidth}{!}{\box0}"
              r"\else\makebox[\linewidth][c]{\box0}\fi\else\box0\fi",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


def _html_cell(text: str) -> tuple[str, str]:
    """A text cell's class and HTML: a short one stays on one line; a longer one wraps, also
    after = ; , / and, in a word still longer than SHORT_TEXT, after _ (break opportunities:
    nothing is added when the table is copied)."""
    if len(text) <= SHORT_TEXT:
        return "short", html.escape(text)
    pieces = []
    for piece in re.split(r"(?<=[=;,/])(?=\S)", text):
        pieces += re.split(r"(?<=_)(?=\S)", piece) if len(piece) > SHORT_TEXT and " " not in piece else [piece]
    return "long", "<wbr>".join(html.escape(p) for p in pieces)


def table_html(cols: list[dict], caption: str = "", title: str = "") -> str:
    """A standalone page (the report embeds it): text wraps, numbers do not, headers wrap, a
    table of many columns is set tighter, and the table scrolls sideways inside its box where it
    still cannot fit."""
    head = "".join(f'<th class="{"num" if c["numeric"] else "text"}" title="{html.escape(c["name"])}">'
                   f'{html.escape(c["label"])}</th>' for c in cols)
    rows = []
    for i in range(len(cols[0]["cells"]) if cols else 0):
        cells = []
        for c in cols:
            cls, text = ("num", html.escape(c["cells"][i])) if c["numeric"] else _html_cell(c["cells"][i])
            cells.append(f'<td class="{cls}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = "\n".join(rows)
    density = "dense" if len(cols) > DENSE_COLUMNS else "compact" if len(cols) > COMPACT_COLUMNS else ""
    compact = f' class="{density}"' if density else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title or caption)}</title>\n<style>\n{TABLE_STYLE}\n</style>\n</head>\n<body>\n"
            + (f'<p class="caption">{html.escape(caption)}</p>\n' if caption else "")
            + f'<div class="table-scroll">\n<table{compact}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n'
              f"</tbody>\n</table>\n</div>\n</body>\n</html>\n")


def write_table(frame: pd.DataFrame, prefix: str | Path, caption: str = "") -> list[Path]:
    """The same table as CSV (raw names, full precision), Markdown, LaTeX and HTML (the report
    shows the HTML)."""
    prefix = Path(prefix)
    write_csv(prefix.with_suffix(".csv"), frame)
    cols = _columns(frame)
    texts = {".md": table_markdown(cols, caption), ".tex": table_latex(cols, caption, prefix.name),
             ".html": table_html(cols, caption, prefix.name)}
    for suffix, text in texts.items():
        with atomic_path(prefix.with_suffix(suffix)) as tmp:
            tmp.write_text(text)
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


def job_costs(benchmark_paths: list[str]) -> pd.DataFrame:
    """Snakemake's per-job benchmark files (benchmarks/{rule}/{study}/...tsv) -> per rule and study:
    jobs, wall time (median, max, total), peak RSS, CPU time and mean load; a total row last."""
    rows = []
    for path in benchmark_paths:
        parts = Path(path).parts
        i = len(parts) - 1 - parts[::-1].index("benchmarks") if "benchmarks" in parts else 0
        bench = pd.read_csv(path, sep="\t")
        rows.append({"rule": parts[i + 1], "study": parts[i + 2] if len(parts) > i + 3 else "-",
                     "s": float(bench["s"].iloc[-1]),
                     "max_rss_mb": float(pd.to_numeric(bench["max_rss"], errors="coerce").iloc[-1]),
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
