"""Tables people can paste: readable headers, numbers aligned with the same decimals down a
column, LaTeX that escapes its text and compiles in a bare document (pdflatex), HTML that fits a
1400 px window (headless Chromium). The CSV keeps raw names and full precision."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from leaner.analysis.table_render import column_label, number_format, write_table

pytestmark = pytest.mark.fast

CAPTION = "vit_digits: eval_acc per configuration over seeds (mean, 95% interval, min, max, n) & #1 ~ ^{x}"
VERDICT = ("more heads help: the 95% interval of the difference clears zero by more than a quarter of its "
           "half-width, in every seed pair of the group (see findings.md, section 2)")


def _table(tmp_path):
    frame = pd.DataFrame({"depth": [1, 2], "eval_acc_mean": [0.91, 0.935], "protocols": ["fixed_width", "a;b"]})
    return write_table(frame, tmp_path / "t", CAPTION)


def _by_config(rows: int = 6) -> pd.DataFrame:
    """A table like by_config: integers, an accuracy with its interval (NaN for one seed), kappa
    over many orders of magnitude and an infinite one, a long text column."""
    rng = np.random.default_rng(0)
    acc = rng.uniform(0.4, 0.95, rows)
    return pd.DataFrame({
        "depth": np.arange(rows) % 3 + 1, "heads": 2 ** (np.arange(rows) % 5), "protocols": ["fixed_width"] * rows,
        "params": 1_000 * np.arange(1, rows + 1) ** 4 + 2794, "eval_acc_mean": acc,
        "eval_acc_lo": np.r_[acc[:-1] - 0.05, math.nan], "eval_acc_hi": np.r_[acc[:-1] + 0.05, math.nan],
        "n": np.r_[[10] * (rows - 1), 1], "kappa_final_gmean": np.r_[10.0 ** (2 * np.arange(1, rows)), math.inf],
        "delta_eval_acc": acc - 0.9, "verdict": [VERDICT] * rows,
    })


def _nasty() -> pd.DataFrame:
    """Text LaTeX and Markdown must escape, booleans, NaN, signed and tiny numbers."""
    return pd.DataFrame({
        "check": ["MSE(rank d/2) / MSE(rank d) >= 10 & 5% | #1_a", "angle(QK^T, I) < 165 deg {x} ~y $z \\w",
                  "κ ≥ 3 -- ρ → 1 “quoted”"],
        "expected": [">= 10", "> 165 deg", "~179.5"], "observed": [13.4, 179.81, math.nan],
        "tiny": [3e-5, -2e-6, 0.0], "pass": [True, False, True], "mc_over_formula": [0.556, 0.799, 1.02],
    })


def _wide() -> pd.DataFrame:
    """As wide as all_studies-kappa_rank_error: 24 columns, five of them text."""
    rows = 12
    frame = pd.DataFrame({"study": ["nearest_rank"] * rows, "task": ["image_classification"] * rows,
                          "family": ["P1"] * rows,
                          "group": ["depth=1, protocol=fixed_head_dim, mlp_ratio=2.0"] * rows,
                          "depth_group": ["protocol=fixed_head_dim, mlp_ratio=2.0, heads=16, rank=16"] * rows})
    for i, name in enumerate(["depth", "heads", "rank", "model_width", "params", "n"]):
        frame[name] = (np.arange(rows) + 1) * 10 ** i
    for name in ["rank_fraction", "error_mean", "error_lo", "error_hi", "relative_error", "relative_error_lo",
                 "relative_error_hi", "relative_error_depth", "relative_error_depth_lo", "relative_error_depth_hi"]:
        frame[name] = np.linspace(0.01, 1.5, rows)
    for name in ["kappa_init", "kappa_final", "kappa_jac_final"]:
        frame[name] = np.logspace(1, 12, rows)
    return frame


def _markdown_rows(path) -> list[list[str]]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_the_latex_caption_is_escaped(tmp_path):
    _table(tmp_path)
    tex = (tmp_path / "t.tex").read_text()
    caption = next(line for line in tex.splitlines() if line.lstrip().startswith(r"\caption"))
    assert r"vit\_digits: eval\_acc" in caption and r"95\% interval" in caption and r"\& \#1" in caption
    assert r"\textasciitilde{}" in caption and r"\textasciicircum{}\{x\}" in caption
    assert r"fixed\_width" in tex  # the cells too
    assert "booktabs" not in tex and r"\toprule" not in tex  # a bare document compiles it


def test_labels_are_readable():
    assert column_label("eval_acc_mean") == "eval acc (mean)"
    assert column_label("kappa_final_gmean") == "κ final (geo. mean)"
    assert column_label("eval_acc_lo") == "eval acc (95% CI low)" and column_label("hi") == "95% CI high"
    assert column_label("params") == "parameters" and column_label("n") == "seeds"
    assert column_label("delta_eval_acc") == "Δ eval acc" and column_label("mlp_hidden") == "MLP hidden"
    assert column_label("some_new_column") == "some new column"  # unknown names: their words
    assert column_label("paper setting") == "paper setting"  # already a label


def test_numbers_keep_the_same_decimals_down_a_column():
    show = number_format(pd.Series([0.5176, 0.06992, 0.1409]))
    assert [show(v) for v in (0.5176, 0.06992, 0.1409)] == ["0.5176", "0.0699", "0.1409"]
    show = number_format(pd.Series([2794, 102666]))
    assert show(102666) == "102,666"  # integers: thousands separators
    show = number_format(pd.Series([60.63, 2_800_556.75, math.inf, math.nan]))  # kappa: 5 orders of magnitude
    assert (show(60.63), show(2_800_556.75), show(math.inf), show(math.nan)) == ("6.06e1", "2.80e6", "∞", "")
    show = number_format(pd.Series([-0.3728, 0.0001, 0.4135]))  # a difference near zero stays fixed
    assert show(0.0001) == "0.0001" and show(-0.3728) == "-0.3728"
    show = number_format(pd.Series([6.0, math.nan]))  # an integer column widened by a missing value
    assert show(6.0) == "6"


def test_markdown_html_and_latex_have_labels_alignment_and_figures(tmp_path):
    frame = _by_config()
    paths = write_table(frame, tmp_path / "t", "by configuration")
    assert [p.suffix for p in paths] == [".csv", ".md", ".tex", ".html"]
    csv = pd.read_csv(tmp_path / "t.csv")
    assert list(csv.columns) == list(frame.columns)  # the CSV is for machines: raw names, full precision
    assert csv["eval_acc_mean"].tolist() == frame["eval_acc_mean"].tolist()

    head, rule, *rows = _markdown_rows(tmp_path / "t.md")
    assert head[:5] == ["depth", "heads", "protocols", "parameters", "eval acc (mean)"]
    assert "κ final (geo. mean)" in head and "seeds" in head and "eval acc (95% CI low)" in head
    numeric = {name: frame[name].dtype.kind in "iuf" for name in frame.columns}
    for name, cell in zip(frame.columns, rule):
        assert re.fullmatch("-+:" if numeric[name] else ":-+", cell), (name, cell)
    column = dict(zip(frame.columns, zip(*rows)))
    acc = [c for c in column["eval_acc_mean"] + column["eval_acc_lo"] if c]
    assert len({len(c.split(".")[1]) for c in acc}) == 1 and all(len(c) == 6 for c in acc)  # 0.xxxx throughout
    assert column["params"][-1] == f"{frame['params'].iloc[-1]:,}"
    assert column["kappa_final_gmean"][:2] == ("1.00e2", "1.00e4") and column["kappa_final_gmean"][-1] == "∞"
    assert column["eval_acc_lo"][-1] == ""  # NaN: an empty cell

    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>") and "<style>" in page
    assert '<th class="num" title="kappa_final_gmean">κ final (geo. mean)</th>' in page
    assert '<th class="text" title="verdict">verdict</th>' in page
    assert "tabular-nums" in page and "overflow-x:auto" in page
    assert re.search(r'<td class="num">\d{1,3}(,\d{3})+</td>', page) and '<td class="long">more heads help' in page

    tex = (tmp_path / "t.tex").read_text()
    assert r"\begin{tabular}{rrlrrrrrrrp{12em}}" in tex
    assert r"$\kappa$ final\\(geo. mean)" in tex and r"$1.00\times10^{2}$" in tex and r"$\infty$" in tex


def test_markdown_and_html_escape_their_text(tmp_path):
    write_table(_nasty(), tmp_path / "t")
    rows = _markdown_rows(tmp_path / "t.md")
    assert all(len(row) == 6 for row in rows)  # a | in a cell does not split it
    assert rows[2][0] == r"MSE(rank d/2) / MSE(rank d) >= 10 & 5% \| #1_a" and rows[2][4] == "yes"
    page = (tmp_path / "t.html").read_text()
    assert "&lt; 165 deg" in page and "&amp; 5%" in page and "<td class=\"short\">no</td>" in page


def _ensure(binary: str, package: str) -> str:
    """The binary's path; installed from Debian's package when missing and we may (root, apt-get),
    as tests/slurm_cluster.py installs Slurm; else the test skips."""
    found = shutil.which(binary)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], env=env,
                       capture_output=True, timeout=600)
        found = shutil.which(binary)
    if found is None:
        pytest.skip(f"{binary} is not installed (Debian: {package})")
    return found


@pytest.mark.slow
def test_every_latex_table_compiles(tmp_path):
    """Every kind of table, nasty text included, in a bare article (no package: the table is
    centred over the margins when wide) and in one with graphicx (scaled to the line width)."""
    pdflatex = _ensure("pdflatex", "texlive-latex-base")
    tables = []
    for name, frame in [("by_config", _by_config()), ("nasty", _nasty()), ("wide", _wide()),
                        ("one_row", _by_config().head(1)), ("empty", _nasty().iloc[:0])]:
        write_table(frame, tmp_path / name, f"{name}: {CAPTION} -- κ ≥ 1")
        tables.append(name)
    for preamble in ("", r"\usepackage{graphicx}"):
        inputs = "".join(rf"\input{{{name}.tex}}\clearpage" for name in tables)
        (tmp_path / "doc.tex").write_text(rf"\documentclass{{article}}{preamble}\begin{{document}}{inputs}"
                                          "\\end{document}\n")
        proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:]
        log = (tmp_path / "doc.log").read_text(errors="replace")
        assert "Missing character" not in log  # every character has a glyph in the default fonts
        assert (tmp_path / "doc.pdf").stat().st_size > 1000


PROBE = ("<script>window.addEventListener('load', () => {"
         "const edges = [...document.querySelectorAll('table')].map(t => t.getBoundingClientRect().right);"
         "const out = document.createElement('pre'); out.id = 'probe';"
         "out.textContent = 'PROBE ' + document.documentElement.scrollWidth + ' '"
         " + document.documentElement.clientWidth + ' ' + edges.join(',');"
         "document.body.appendChild(out);});</script>")


def _widths_at_1400(chromium: str, page, tmp_path) -> tuple[int, int, list[float]]:
    """(page scroll width, viewport width, each table's right edge) in headless Chromium."""
    probe = tmp_path / f"probe-{page.name}"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,900", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"PROBE (\d+) (\d+) ([\d.,]*)", proc.stdout)
    assert found, proc.stdout[-1000:] + proc.stderr[-2000:]
    return int(found[1]), int(found[2]), [float(x) for x in found[3].split(",") if x]


@pytest.mark.slow
def test_the_widest_html_tables_fit_1400_px(tmp_path):
    """The widest tables of a study (a long verdict; 24 columns) show every column in a 1400 px window."""
    chromium = _ensure("chromium", "chromium")
    effects = _by_config(9).assign(group=["depth=1, protocol=fixed_head_dim, mlp_ratio=2.0"] * 9,
                                   heads=["1 -> 16"] * 9, params=["102666 -> 102666"] * 9)
    write_table(effects, tmp_path / "heads_effect", "Most against fewest heads: " + VERDICT)
    write_table(_wide(), tmp_path / "kappa_rank_error", "Every study")
    for name in ("heads_effect", "kappa_rank_error"):
        scroll, viewport, edges = _widths_at_1400(chromium, tmp_path / f"{name}.html", tmp_path)
        assert len(edges) == 1 and viewport > 1300
        assert scroll <= viewport and max(edges) <= viewport, (name, scroll, viewport, edges)
