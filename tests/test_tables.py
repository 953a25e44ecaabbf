"""Tables people can paste: the LaTeX version escapes its caption as pandas escapes its cells,
and compiles (with pdflatex, where it is installed)."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

CAPTION = "vit_digits: eval_acc per configuration over seeds (mean, 95% interval, min, max, n) & #1 ~ ^{x}"


def _table(tmp_path):
    from leaner.analysis.tables import write_table

    frame = pd.DataFrame({"depth": [1, 2], "eval_acc_mean": [0.91, 0.935], "protocols": ["fixed_width", "a;b"]})
    return write_table(frame, tmp_path / "t", CAPTION)


def test_the_latex_caption_is_escaped(tmp_path):
    _table(tmp_path)
    tex = (tmp_path / "t.tex").read_text()
    caption = next(line for line in tex.splitlines() if line.lstrip().startswith(r"\caption"))
    assert r"vit\_digits: eval\_acc" in caption and r"95\% interval" in caption and r"\& \#1" in caption
    assert r"\textasciitilde{}" in caption and r"\textasciicircum{}\{x\}" in caption
    assert r"fixed\_width" in tex  # the cells, escaped by pandas


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (Debian: texlive-latex-extra)")
def test_every_latex_table_compiles(tmp_path):
    _table(tmp_path)
    doc = tmp_path / "doc.tex"
    doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\\input{t.tex}\\end{document}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]
