"""The one writer of every table: CSV, Markdown, LaTeX and HTML from a data frame.

The CSV is for machines: raw column names, full precision. The Markdown, LaTeX and HTML are for
people: readable headers (column_label), numbers with the same decimals down a column
(about SIG significant figures for the column's typical value, scientific notation for a whole
column that spans too many orders of magnitude), numbers right-aligned and text left-aligned; the
LaTeX needs no package, the HTML fits 1400 px."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import atomic_path, write_csv

# Readable column headers for the tables people read (Markdown, HTML, LaTeX); the CSV keeps the
# raw names. `column_label("kappa_final_gmean")` is "κ final (geo. mean)": a name of its own
# (LABELS), else its words (WORDS) with the statistic it ends in (STATS) in brackets.

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
