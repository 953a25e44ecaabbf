"""The report job decides which figures and tables each study gets, by plain code over what its
config declared (its grid's points, baseline and claims): every output of today can be given, each
by a function carrying its caption, and every caption renders as reStructuredText."""

from __future__ import annotations

import re

import docutils.core
import docutils.nodes
import pandas as pd
import pytest

from leaner.analysis import figures, figures_p2, job_costs, overview, pareto, report
from leaner.analysis.report import StudyData, study_outputs

from conftest import BIN, REPO, run

pytestmark = pytest.mark.fast

# Every figure and table a study can get (what the catalogue listed before the report decided them).
EVERY_FIGURE = {"kappa_vs_heads", "accuracy_vs_heads", "loss_vs_heads", "glue_vs_heads", "accuracy_vs_mlp",
                "loss_vs_mlp", "glue_vs_mlp", "mse_vs_rank", "mse_vs_rank_by_tokens", "mse_vs_rank_by_dim",
                "mse_vs_rank_by_posn", "perfect_angle", "kappa_vs_rank", "kappa_through_training", "training_curves",
                "pareto", "layer_won_back"}
EVERY_TABLE = {"by_config", "lean_vs_baseline", "glue_tasks", "acceptance", "paper_comparison", "claims",
               "kappa_within", "theorem_vs_real", "exchange"}


def _p1(task: str, claims=()) -> StudyData:
    """A P1 study whose grid shows everything: heads along a depth, two MLP widths at one point."""
    points = [{"protocol": "fixed_width", "depth": d, "heads": h, "width": 16, "mlp_hidden": m,
               "mlp_ratio": m / 16} for d in (1, 2) for h in (1, 2, 4) for m in (32, 64)]
    return StudyData("s", pd.DataFrame({"task": [task]}), {"depth": 2}, claims=list(claims), points=points)


def _p2(**axes) -> StudyData:
    points = [{"depth": d, "heads": h, "head_dim": 16 // h, "modules": 1, "dim": 16, "tokens": 8, "posn": "none",
               **{axis: value}} for d in (1, 2) for h in (1, 2) for axis, values in axes.items() for value in values]
    return StudyData("p", pd.DataFrame({"task": ["nearest_point"]}), points=points)


LADDER = {"name": "ladder", "baseline": {"depth": 2, "heads": 1}, "control": {"depth": 1, "heads": 1},
          "lean": [{"depth": 1, "heads": h} for h in (2, 4, 8)]}


def _names(d: StudyData) -> tuple[set[str], set[str]]:
    figs, tabs = study_outputs(d)
    return {name for name, *_ in figs}, {name for name, _ in tabs}


def test_every_output_of_today_is_given_where_a_grid_shows_it_each_by_a_function_carrying_its_caption():
    given_figures, given_tables = set(), set()
    studies = [_p1("image_classification", [LADDER]), _p1("language_model"), _p1("glue"),
               _p2(tokens=(4, 8)), _p2(dim=(8, 16)), _p2(posn=("none", "additive"))]
    for d in studies:
        figs, tabs = study_outputs(d)
        for name, fn, _ in figs:
            assert fn.captions[name].strip(), name
        for name, make in tabs:
            assert make.captions[name].strip(), name
        given_figures |= {name for name, *_ in figs}
        given_tables |= {name for name, _ in tabs}
    assert given_figures == EVERY_FIGURE and given_tables == EVERY_TABLE


def test_what_a_study_gets_follows_its_task_grid_and_claims():
    figs, tabs = _names(_p1("image_classification", [LADDER]))
    assert {"accuracy_vs_heads", "accuracy_vs_mlp", "pareto", "layer_won_back"} <= figs
    assert {"claims", "exchange", "lean_vs_baseline"} <= tabs and "acceptance" not in tabs
    figs, tabs = _names(_p1("image_classification", [{**LADDER, "lean": LADDER["lean"][:2]}]))  # two rungs
    assert "pareto" in figs and "layer_won_back" not in figs and "exchange" not in tabs
    figs, tabs = _names(_p1("language_model"))  # no claims; the metric is a loss
    assert {"loss_vs_heads", "loss_vs_mlp"} <= figs and not {"pareto", "accuracy_vs_heads"} & figs
    assert "claims" not in tabs
    figs, tabs = _names(_p2(tokens=(4, 8)))
    assert {"mse_vs_rank", "mse_vs_rank_by_tokens", "perfect_angle", "kappa_vs_rank"} <= figs
    assert not {"mse_vs_rank_by_dim", "mse_vs_rank_by_posn", "kappa_vs_heads"} & figs
    assert tabs == {"by_config", "acceptance", "paper_comparison"}


def _captioned() -> list[tuple[str, str]]:
    """(where, caption) of every output function of the analysis modules."""
    out = {}
    for module in (figures, figures_p2, job_costs, overview, pareto, report):
        for fn in vars(module).values():
            for output in getattr(fn, "captions", {}):
                out[id(fn), output] = (f"{fn.__module__}.{fn.__name__}: {output}", report.caption(fn, output, "study"))
    return list(out.values())


def test_every_caption_is_restructuredtext_that_renders_without_an_error():
    """The report's captions are reStructuredText (Snakemake renders them with docutils): a bare
    |x| is a substitution reference and renders as an error in the report."""
    captions = _captioned()
    assert len(captions) >= len(EVERY_FIGURE) + len(EVERY_TABLE) + 9  # and the theory's, the overview's, the costs'
    captions += [(str(path.relative_to(REPO)), re.sub(r"{{.*?}}", "name", path.read_text()))
                 for path in sorted((REPO / "report").glob("*.rst")) if ".. include::" not in path.read_text()]
    problems = []
    for where, text in captions:
        doctree = docutils.core.publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 5})
        problems += [f"{where}: {node.astext()!r} does not render"
                     for node in doctree.findall(docutils.nodes.problematic)]  # the report's error spans
    assert problems == []


def test_a_caption_names_its_study_or_none_for_the_theory_check():
    assert report.caption(report.paper_comparison, "paper_comparison", "vit").startswith("**vit**: the paper's")
    assert report.caption(report.paper_comparison, "paper_comparison", None).startswith("the paper's")


def test_leaner_report_refuses_a_missing_config_in_one_line(tmp_path):
    proc = run([str(BIN / "leaner"), "report", "--config", str(tmp_path / "none.yaml"), "--results", str(tmp_path),
                "--theory", "t.csv", "--benchmarks", "b.tsv"], cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "none.yaml" in proc.stderr
