"""Which figures and tables a study gets (from its grid), and what is on them: readable log
ticks, a y label and a legend on every panel that needs one."""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from leaner.analysis import figures, figures_p2, pareto, plots, stats
from leaner.workflow.plan import build_plan

from conftest import TINY, planned_outputs, snakemake

pytestmark = pytest.mark.fast

CONFIG = yaml.safe_load(TINY.read_text())


def outputs(study: str, **grid) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The figure and table names of one study of the tiny config, its grid replaced by `grid`
    (a list: several grids) or updated with it."""
    config = copy.deepcopy(CONFIG)
    st = config["studies"][study]
    st.update({k: grid.pop(k) for k in ("baseline",) if k in grid})
    if "grids" in grid:
        st["grid"] = grid.pop("grids")
    elif grid:
        st["grid"] = {**st["grid"], **grid}
    return planned_outputs(build_plan(config).studies[study])


def test_the_tiny_config_lists_only_what_its_grid_shows():
    plan = build_plan(copy.deepcopy(CONFIG))
    # one MLP width; P2 with one d, one N, one positional encoding
    assert planned_outputs(plan.studies["tiny"]) == (
        ("kappa_vs_heads", "accuracy_vs_heads", "kappa_through_training", "training_curves"),
        ("by_config", "lean_vs_baseline", "paper_comparison", "kappa_within", "theorem_vs_real"))
    assert planned_outputs(plan.studies["tiny_nearest"]) == (
        ("mse_vs_rank", "perfect_angle", "kappa_vs_rank", "kappa_through_training", "training_curves"),
        ("by_config", "acceptance", "paper_comparison"))


P1 = {"protocol": ["fixed_width"], "width": [16], "seeds": [0]}


def test_vs_mlp_only_where_one_point_has_two_mlp_widths():
    two_at_one_point = [{**P1, "depth": [1], "heads": [1, 2], "mlp_ratio": [2]},
                        {**P1, "depth": [1], "heads": [2], "mlp_ratio": [4]}]
    assert "accuracy_vs_mlp" in outputs("tiny", grids=two_at_one_point)[0]
    # two MLP widths, but never at the same (protocol, depth, heads): nothing to draw a line through
    apart = [{**P1, "depth": [1], "heads": [1, 2], "mlp_ratio": [2]},
             {**P1, "depth": [2], "heads": [2], "mlp_ratio": [4]}]
    assert "accuracy_vs_mlp" not in outputs("tiny", grids=apart)[0]
    assert "accuracy_vs_mlp" not in outputs("tiny", grids=[{**P1, "depth": [1, 2], "heads": [1, 2],
                                                            "mlp_ratio": [2]}])[0]


def test_vs_heads_only_where_heads_vary_along_a_curve():
    figs, _ = outputs("tiny", grids=[{**P1, "depth": [1, 2], "heads": [2], "mlp_ratio": [2]}])
    assert figs == ("kappa_through_training", "training_curves")
    # one head count per depth: points, no curve
    figs, _ = outputs("tiny", grids=[{**P1, "depth": [1], "heads": [1], "mlp_ratio": [2]},
                                     {**P1, "depth": [2], "heads": [2], "mlp_ratio": [2]}])
    assert "accuracy_vs_heads" not in figs and "kappa_vs_heads" not in figs


def test_lean_vs_baseline_only_with_a_shallower_configuration():
    assert "lean_vs_baseline" in outputs("tiny")[1]
    assert "lean_vs_baseline" not in outputs("tiny", grids=[{**P1, "depth": [2], "heads": [1, 2],
                                                             "mlp_ratio": [2]}])[1]
    # the configured baseline is the shallowest model: nothing below it
    assert "lean_vs_baseline" not in outputs("tiny", grids=[{**P1, "depth": [1, 2], "heads": [1, 2],
                                                             "mlp_ratio": [2]}], baseline={"depth": 1})[1]


@pytest.mark.parametrize("axis, values, name", [("tokens", [4, 8], "mse_vs_rank_by_tokens"),
                                                ("dim", [8, 16], "mse_vs_rank_by_dim"),
                                                ("posn", ["none", "additive"], "mse_vs_rank_by_posn")])
def test_p2_lines_by_an_axis_only_where_it_varies(axis, values, name):
    figs, _ = outputs("tiny_nearest", **{axis: values})
    assert name in figs
    assert not {"mse_vs_rank_by_tokens", "mse_vs_rank_by_dim", "mse_vs_rank_by_posn"} - {name} & set(figs)
    assert name not in outputs("tiny_nearest")[0]


def test_rank_and_single_head_figures_follow_the_grid():
    figs, _ = outputs("tiny_nearest", heads=[2])  # one rank, no 1-head model
    assert figs == ("kappa_through_training", "training_curves")
    figs, _ = outputs("tiny_nearest", heads=[1, 2], depth=[2])
    assert "perfect_angle" not in figs and "mse_vs_rank" in figs


# ----------------------------------------------------------------------------- the figures themselves

def history() -> pd.DataFrame:
    """Histories of two configurations x three seeds, five epochs of 20 steps (eval every epoch)."""
    rows = [{"config": f"L1-H{h}-D16-hd{16 // h}-mlp32", "seed": s, "variant": f"L1-H{h}-D16-hd{16 // h}-mlp32-s{s}",
             "epoch": e, "step": 20 * e, "train_loss": 2.3 / (e * h) + 0.01 * s, "eval_acc": 0.1 * e + 0.01 * s}
            for h in (1, 4) for s in range(3) for e in range(1, 6)]
    return pd.DataFrame(rows)


def test_training_curves_pool_the_seeds_of_each_configuration():
    """One line per configuration: the mean over its seeds at each step, the 95% t-band around it
    (losses in log space, accuracies on the logit scale, so that no band leaves [0, 1])."""
    agg = figures.band(history(), "eval_acc", "linear")
    one = agg[(agg["config"] == "L1-H4-D16-hd4-mlp32") & (agg["step"] == 60)].iloc[0]
    assert one["mean"] == pytest.approx(0.31) and one["count"] == 3
    assert one["hi"] - one["mean"] == pytest.approx(4.302653 * 0.01 / np.sqrt(3), rel=1e-5)
    near_one = history().assign(eval_acc=lambda f: np.where(f["seed"] == 0, 1.0, 0.95 + 0.01 * f["seed"]))
    linear, logit = figures.band(near_one, "eval_acc", "linear"), figures.band(near_one, "eval_acc", "logit")
    assert linear["hi"].max() > 1.0  # what a t-band on the raw accuracy did
    assert logit["hi"].max() < 1.0 and logit["lo"].min() > 0.0 and logit["mean"].between(0.95, 1.0).all()
    loss = figures.band(history(), "train_loss", "log")
    first = loss[(loss["config"] == "L1-H1-D16-hd16-mlp32") & (loss["step"] == 20)].iloc[0]
    assert first["mean"] == pytest.approx(np.exp(np.mean(np.log([2.3, 2.31, 2.32]))))
    assert figures.panels_for(history(), "image_classification") == ["train_loss", "eval_acc"]
    assert figures.panels_for(history(), "nearest_point") == ["train_loss"]  # no eval_loss in these histories


def test_points_and_intervals_stay_inside_the_range_of_what_they_measure():
    """A figure's point is the table's: a metric's arithmetic mean with its t-interval cut to the
    metric's range (accuracy in [0, 1], loss at least 0; the cut keeps coverage); kappa >= 1 as a
    geometric mean on the log scale, cut at 1 (the tables' geometric means). Seeds spread as widely
    as three seeds of an untrained model spread, where a raw t-interval leaves the range."""
    from leaner.analysis.tables import by_config

    assert stats.metric_range("eval_acc") == (0.0, 1.0) and stats.metric_range("eval_loss") == (0.0, math.inf)
    assert stats.metric_range("glue_avg") == (0.0, 1.0) and stats.metric_range("best_train_loss")[0] == 0.0
    spread = pd.DataFrame({"heads": [1, 1, 1], "kappa": [1.05, 1.3, 40.0], "eval_acc": [0.99, 1.0, 0.9],
                           "eval_loss": [0.01, 0.02, 2.0]})
    assert stats.ci95(spread["kappa"])[1] < 1 and stats.ci95(spread["eval_acc"])[2] > 1  # raw: out of range
    kappa = plots.seed_agg(spread, ["heads"], "kappa").iloc[0]
    assert kappa["lo"] == 1.0 and kappa["hi"] > 40.0
    assert kappa["mean"] == pytest.approx(np.exp(np.log([1.05, 1.3, 40.0]).mean()))
    acc = plots.seed_agg(spread, ["heads"], "eval_acc").iloc[0]
    mean, lo, _, _ = stats.ci95(spread["eval_acc"])
    assert acc["mean"] == pytest.approx(mean) and acc["lo"] == pytest.approx(lo) and acc["hi"] == 1.0
    loss = plots.seed_agg(spread, ["heads"], "eval_loss").iloc[0]
    assert loss["mean"] == pytest.approx(np.mean([0.01, 0.02, 2.0])) and loss["lo"] == 0.0 and loss["hi"] > 2.0
    # the table reports the very same numbers
    summary = spread.assign(task="image_classification", depth=1, width=16, head_dim=16, mlp_hidden=32,
                            qk_scale=1.0, params_total=1000, status="ok", seed=[0, 1, 2])
    row = by_config(summary).iloc[0]
    assert (row["eval_acc_mean"], row["eval_acc_lo"], row["eval_acc_hi"]) == (acc["mean"], acc["lo"], acc["hi"])


def test_curve_colours_follow_the_heads_and_line_styles_the_depth():
    configs = ["L1-H1-D16-hd16-mlp32", "L1-H4-D64-hd16-mlp128", "L2-H4-D64-hd16-mlp128", "L2-H16-D64-hd4-mlp128",
               "L2-H4-D16-hd4-mlp32"]
    styles = figures.line_styles(configs)
    assert styles[configs[1]]["color"] == styles[configs[2]]["color"] != styles[configs[0]]["color"]
    assert styles[configs[0]]["linestyle"] == styles[configs[1]]["linestyle"] != styles[configs[2]]["linestyle"]
    assert styles[configs[3]]["linestyle"] == styles[configs[2]]["linestyle"]
    # two configurations of 2 layers and 4 heads (widths 64 and 16): told apart by a marker
    assert styles[configs[2]]["marker"] != styles[configs[4]]["marker"] and styles[configs[0]]["marker"] is None
    p2 = figures.line_styles(["L1-H1-W1-r16-d16-N8-none", "L1-H4-W1-r4-d16-N8-none", "L3-H1-W1-r16-d16-N8-none"])
    assert p2["L1-H1-W1-r16-d16-N8-none"]["color"] == p2["L3-H1-W1-r16-d16-N8-none"]["color"]


def p1_summary(mlp_ratios=(2,), heads=(1, 2, 4), depths=(1, 2)) -> pd.DataFrame:
    rows = []
    for depth in depths:
        for h in heads:
            for ratio in mlp_ratios:
                for seed in (0, 1):
                    acc = 0.5 + 0.05 * h - 0.02 * depth + 0.01 * seed
                    rows.append({"study": "s", "task": "image_classification",
                                 "variant": f"L{depth}-H{h}-r{ratio}-s{seed}",
                                 "depth": depth, "heads": h, "width": 16, "head_dim": 16 // h, "mlp_hidden": 16 * ratio,
                                 "mlp_ratio": ratio, "seed": seed, "protocols": "fixed_width", "status": "ok",
                                 "params_total": 1000 * depth * ratio, "steps": 20, "eval_acc": acc, "error": 1 - acc,
                                 "eval_loss": 3 - acc, "glue_avg": acc - 0.1,
                                 "kappa_init_gmean": 3e7 / h**3, "kappa_final_gmean": 2e4 / h})
    return pd.DataFrame(rows)


def p2_summary() -> pd.DataFrame:
    rows = []
    for modules in (1, 2):
        for heads in (1, 2, 4):
            for seed in (0, 1):
                rows.append({"study": "p", "task": "nearest_point", "variant": f"W{modules}-H{heads}-s{seed}",
                             "depth": 1,
                             "heads": heads, "modules": modules, "head_dim": 16 // heads, "dim": 16, "tokens": 8,
                             "posn": "none", "seed": seed, "protocols": np.nan, "status": "ok", "steps": 20,
                             "params_total": 500, "best_train_loss": 0.01 * heads**3 + 0.001 * seed,
                             "kappa_init_gmean": 800 / heads, "kappa_final_gmean": 100 / heads,
                             "qk_angle_deg_min": 170 + seed})
    return pd.DataFrame(rows)


def p1_kappa(summary: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, r in summary.iterrows():
        for step, frac in ((0, 0.0), (10, 0.5), (20, 1.0)):
            rows.append({**r.to_dict(), "checkpoint": f"step{step}", "step": step, "fraction": frac,
                         "matrix": "heads_concat", "kappa_l1": 1e6 / (1 + step), "kappa_gmean": 1e6 / (1 + step),
                         "total_heads": r["heads"]})
    return pd.DataFrame(rows)


def drawn(monkeypatch, make, *args):
    """The figure `make` builds, drawn (so its ticks and labels are final), not saved."""
    shown = []
    for module in (figures, figures_p2, pareto):
        monkeypatch.setattr(module, "save", lambda fig, prefix: shown.append(fig) or [])
    make(*args)
    fig = shown[0]
    fig.canvas.draw()
    return fig


def tick_labels(ax, which="y") -> list[str]:
    axis = ax.yaxis if which == "y" else ax.xaxis
    lo, hi = sorted(axis.get_view_interval())
    return [t.get_text() for t, v in zip(axis.get_ticklabels(), axis.get_ticklocs()) if lo <= v <= hi and t.get_text()]


def test_log_ticks_are_powers_of_ten_when_wide_and_plain_numbers_when_narrow():
    assert plots.log_label(1e8, 1e3, 1e9, [1e4, 1e6, 1e8]) == r"$\mathdefault{10^{8}}$"
    assert plots.log_label(1e5, 1e3, 1e9, [1e4, 1e5, 1e8]) == r"$\mathdefault{10^{5}}$"
    assert [plots.log_label(v, 0.3, 6, [0.5, 1, 2, 5]) for v in (0.5, 1, 2, 5)] == ["0.5", "1", "2", "5"]
    # narrow but large: every label of that axis as a x 10^k, never 100000 beside 1e+06
    assert [plots.log_label(v, 9e4, 6e5, [1e5, 2e5, 5e5]) for v in (1e5, 2e5)] == [
        r"$\mathdefault{10^{5}}$", r"$\mathdefault{2\times10^{5}}$"]
    for lo, hi in ((1.2, 13), (0.9, 1.15), (3, 40), (1e-3, 1e4)):
        inside = [t for t in plots.log_ticks(lo, hi) if lo <= t <= hi]
        assert len(inside) >= 2, (lo, hi, inside)


PARETO_CLAIM = {"name": "lean", "metric": "eval_acc", "mode": "max", "margin": 0.05, "seeds": [0, 1],
                "baseline": {"depth": 2, "heads": 1, "width": 16, "head_dim": 16, "mlp_hidden": 32},
                "lean": [{"depth": 1, "heads": 4, "width": 16, "head_dim": 4, "mlp_hidden": 32}]}


def test_the_pareto_view_stars_the_baseline_rings_the_lean_models_and_states_each_verdict(monkeypatch):
    """P1's Fig. 1 view: every configuration against its parameters, the baseline's band of
    +-margin, the lean model ringed where its mean is, its verdict written out, and the front of
    the configurations that no smaller model beats."""
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Rectangle

    summary = p1_summary()
    fig = drawn(monkeypatch, pareto.pareto, summary, "x", "s", [PARETO_CLAIM])
    full, zoom = [ax for ax in fig.axes if ax.get_visible()]
    base = summary.query("depth == 2 and heads == 1")["eval_acc"].mean()  # 0.515 at 4000 parameters
    lean = summary.query("depth == 1 and heads == 4")["eval_acc"].mean()  # 0.685 at 2000
    for ax in (full, zoom):
        assert ax.get_xscale() == "log"
        band = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_alpha() == 0.15]
        assert len(band) == 1 and band[0].get_y() == pytest.approx(base - 0.05)
        assert band[0].get_height() == pytest.approx(0.1)
        marks = [c.get_offsets()[0] for c in ax.collections if isinstance(c, PathCollection)]
        assert any(m[0] == pytest.approx(4000, rel=0.1) and m[1] == pytest.approx(base) for m in marks)  # the star
        assert any(m[0] == pytest.approx(2000, rel=0.1) and m[1] == pytest.approx(lean) for m in marks)  # a ring
    text = " ".join(t.get_text() for t in zoom.texts)
    assert "L1-H4-D16-mlp32: superior, +0.170 [+0.149, +0.191]" in text and "50% fewer parameters" in text
    front = next(line for line in full.lines if line.get_label().startswith("Pareto front"))
    # at 2000 parameters the best is L1/H4; no model of 4000 beats it, so the front ends there
    assert list(front.get_ydata()) == pytest.approx([lean], abs=1e-3)  # its mean on the logit scale


def test_every_panel_has_y_labels_tick_labels_and_a_legend(monkeypatch):
    summary = p1_summary(mlp_ratios=(2, 4))
    kappa = p1_kappa(summary)
    theory = pd.DataFrame([{"protocol": proto, "tokens": 17, "head_dim": 8 if proto == "fixed_head_dim" else 64 // h,
                            "width": 8 * h if proto == "fixed_head_dim" else 64, "heads": h,
                            "kappa_mean": k, "kappa_std": 0.1, "kappa_formula": k}
                           for proto in ("fixed_head_dim", "fixed_width") for h, k in ((4, 9.0), (8, 3.1), (16, 2.0))])
    made = {"kappa_vs_heads": (figures.kappa_vs_heads, summary, "x", "s"),
            "accuracy_vs_heads": (figures.metric_vs_heads, summary, "x", "s"),
            "accuracy_vs_mlp": (figures.metric_vs_mlp, summary, "x", "s"),
            "kappa_through_training": (figures.kappa_through_training, kappa, "x", "s"),
            "loss_vs_heads": (figures.metric_vs_heads, summary, "x", "s", "eval_loss"),
            "glue_vs_heads": (figures.metric_vs_heads, summary, "x", "s", "glue_avg"),
            "glue_vs_mlp": (figures.metric_vs_mlp, summary, "x", "s", "glue_avg"),
            "mse_vs_rank": (figures_p2.mse_vs_rank, p2_summary(), "x", "p"),
            "kappa_vs_rank": (figures_p2.kappa_vs_rank, p2_summary(), "x", "p"),
            "perfect_angle": (figures_p2.perfect_angle, p2_summary(), "x", "p"),
            "theory": (figures.theory_curves, theory, "x"),
            "training_curves": (figures.training_curves, history(), "x", "s", "image_classification"),
            "pareto": (pareto.pareto, summary, "x", "s", [PARETO_CLAIM]),
            "layer_won_back": (pareto.layer_won_back, ladder_summary(), "x", "s", ladder_claims())}
    for name, (make, *args) in made.items():
        fig = drawn(monkeypatch, make, *args)
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert panels, name
        for ax in panels:
            assert ax.get_ylabel(), (name, ax.get_title())
            assert ax.get_legend() is not None or fig.legends, (name, ax.get_title())  # its own, or the figure's
            labels = tick_labels(ax)
            assert len(labels) >= 2, (name, ax.get_title(), labels)
            if ax.get_yscale() == "log":  # one style per axis: all math text or all plain
                assert len({label.startswith("$") for label in labels}) == 1, (name, labels)
                assert not any("e+" in label or "e-" in label for label in labels), (name, labels)


def test_a_figure_drawn_twice_from_the_same_summary_is_the_same_png(tmp_path):
    """perfect_angle jitters its points (seaborn): from a seeded generator, so reruns match."""
    import numpy as np

    np.random.seed(1)
    first = figures_p2.perfect_angle(p2_summary(), tmp_path / "a", "p")[0].read_bytes()
    np.random.seed(2)  # whatever state the process is in
    assert figures_p2.perfect_angle(p2_summary(), tmp_path / "b", "p")[0].read_bytes() == first
    assert np.random.randint(1 << 30) == np.random.RandomState(2).randint(1 << 30)  # the caller's state is kept


def test_every_overview_panel_has_a_legend_and_readable_log_ticks(monkeypatch):
    from leaner.analysis import overview

    shown = []
    monkeypatch.setattr(overview, "save", lambda fig, prefix: shown.append(fig) or [])
    configs = overview.configurations([p1_summary()])
    overview.overview_figure(configs, overview.kappa_error_correlation(configs), "x")
    fig = shown[0]
    fig.canvas.draw()
    assert len(fig.axes) == 4
    for ax in fig.axes:
        assert ax.get_ylabel() and ax.get_legend() is not None, ax.get_title()
        assert ax.get_legend().get_texts()[0].get_text().startswith("s")
        for which in ("x", "y"):
            labels = tick_labels(ax, which)
            assert len(labels) >= 2 and not any(re.search(r"\de[+-]", label) for label in labels), (which, labels)


def test_a_study_gets_the_figures_and_tables_its_grid_shows_each_with_its_caption(tmp_path):
    from leaner.analysis import report
    from leaner.grid import grid_points

    summary = p1_summary().assign(qk_scale=1.0)  # one MLP width, heads and depth vary
    data = report.StudyData("s", summary, {}, kappa=p1_kappa(summary),
                            points=grid_points(summary.to_dict("records")))
    figs, tabs = report.study_outputs(data)
    assert [name for name, *_ in figs] == ["kappa_vs_heads", "accuracy_vs_heads", "kappa_through_training",
                                           "training_curves"]
    assert [name for name, _ in tabs] == ["by_config", "lean_vs_baseline", "paper_comparison", "kappa_within",
                                          "theorem_vs_real"]
    for name, _, draw in figs[:3]:  # (the training curves read every variant's history.csv)
        draw(data, tmp_path / f"s-{name}")
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "s-accuracy_vs_heads.png", "s-kappa_through_training.png", "s-kappa_vs_heads.png"]
    captions = report.write_tables(data, tmp_path, tabs[:1])
    assert captions["s-by_config"].startswith("**s**: one row per configuration")
    assert "Numerics:" in (tmp_path / "s-by_config.md").read_text().split("\n")[0]


@pytest.mark.workflow
def test_a_dry_run_plans_one_report_job_for_every_study(tmp_path):
    """One report job for the run, whatever its studies' grids (it decides their outputs itself)."""
    out = snakemake(tmp_path, "-n", "--cores", "1").stdout
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.MULTILINE))
    assert jobs["report"] == "1" and jobs["summary"] == "2"
    assert not [rule for rule in jobs if rule.startswith(("figures", "tables", "overview", "theory_report"))]


def test_singular_kappa_is_an_off_scale_marker_and_the_jacobian_a_row_of_its_own(monkeypatch):
    """A +inf kappa (a singular block) is not plotted as a magnitude: the axis stays on the finite
    values and an open triangle sits on the top edge; the Jacobian gets its own row of panels."""
    summary = p1_summary()
    summary["kappa_jac_init_gmean"] = 1e9
    summary["kappa_jac_final_gmean"] = 1e8
    summary["kappa_jac_final_method"] = "lanczos"
    summary.loc[summary["heads"] == 1, "kappa_init_gmean"] = np.inf
    fig = drawn(monkeypatch, figures.kappa_vs_heads, summary, "unused", "s")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2  # head outputs, Jacobian (no block-output column in this summary)
    assert "Jacobian" in axes[1].get_title() and "lower bound" in axes[1].get_title()
    top = axes[0]
    assert np.isfinite(top.get_ylim()).all() and top.get_ylim()[1] < 1e8
    triangles = [c for c in top.collections if len(c.get_offsets()) and c.get_offsets()[0][1] == pytest.approx(0.97)]
    assert triangles and triangles[0].get_offsets()[0][0] == 1  # at heads = 1
    assert "singular" in " ".join(t.get_text() for t in fig.texts)
    # one legend for the whole figure (every panel draws the same depths), naming the marker
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    assert any("singular" in t.get_text() for t in fig.legends[0].get_texts())


def test_kappa_against_heads_is_read_against_what_the_theorem_says_of_each_protocol():
    """Theorem 3.2 predicts a fall with heads at a fixed head dim (case b) and no change at a fixed
    width (the control): a fall at fixed width is reported as beyond the theorem, not credited to it."""
    from leaner.analysis.papers import _kappa_trend

    width = p1_summary(depths=(1,))
    head_dim = width.assign(protocols="fixed_head_dim")
    (w,) = _kappa_trend(width)
    (h,) = _kappa_trend(head_dim)
    assert "flat under Theorem 3.2" in w["paper"] and w["check"] == "after training: falls: beyond the theorem"
    assert "case b" in h["paper"] and h["check"] == "after training: pass"
    rising = head_dim.assign(kappa_final_gmean=lambda f: 10.0 * f["heads"])
    assert _kappa_trend(rising)[0]["check"] == "after training: fail"


def test_p2_kappa_through_training_names_each_line_by_its_heads_and_their_rank(monkeypatch):
    """P2 counts every head of a layer (heads x W): "2 heads" is rank 8 at W = 1 and rank 16 at
    W = 2, so each line says its rank."""
    rows = [{"variant": f"W{w}-H{h}-s{s}", "matrix": "heads_concat", "modules": w, "heads": h, "total_heads": h * w,
             "head_dim": 16 // h, "depth": 1, "seed": s, "protocols": np.nan, "status": "ok", "fraction": f,
             "kappa_gmean": 10.0 + f}
            for w, hs in ((1, (1, 2)), (2, (1,))) for h in hs for s in (0, 1) for f in (0.0, 0.5, 1.0)]
    fig = drawn(monkeypatch, figures.kappa_through_training, pd.DataFrame(rows), "unused", "p")
    labels = {ax.get_title(): [t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes}
    assert labels == {"W = 1": ["1 head of rank 16, depth 1", "2 heads of rank 8, depth 1"],
                      "W = 2": ["2 heads of rank 16, depth 1"]}


def test_a_heads_figures_points_are_its_tables_means_over_the_same_seeds():
    """A configuration two grid entries share (vit_digits' L1/H4 and L2/H4: the claims' 20 seeds and
    P1's Fig. 3 at head dim 16 on 3 of them) carries both protocols on every seed, so each protocol's
    panel draws it over all its seeds, as by_config averages it: on the reference run, every
    (protocol, configuration) point of the vs-heads figures equals the table's mean and n."""
    from leaner.analysis.summary import ARCH, explode_protocols, read_summary
    from leaner.analysis.tables import by_config

    from reference_run import REFERENCE

    summary = read_summary(REFERENCE / "summaries" / "vit_digits.csv")
    assert (summary.groupby(ARCH)["protocols"].nunique() == 1).all()
    table = by_config(summary).set_index(ARCH)
    shared = 0
    for (protocol, *key), g in explode_protocols(summary).groupby(["protocol", *ARCH]):
        row = table.loc[tuple(key)]
        assert (g["eval_acc"].mean(), len(g)) == pytest.approx((row["eval_acc_mean"], row["n"])), (protocol, key)
        shared += protocol == "fixed_head_dim" and len(g) == 20
    assert shared == 2  # L1/H4 and L2/H4 at their 20 seeds in the Fig. 3 panel


def ladder_summary() -> pd.DataFrame:
    """Two layers of 4 heads, one layer of 4 (the control) and one layer of 8, 16 and 32 heads at
    width 64 and at head dim 16, 3 seeds, each seed moving every model alike (so the shares of the
    means are exact)."""
    rows = []
    arms = ((2, 4, 64, 0.90), (1, 4, 64, 0.80), (1, 8, 64, 0.85), (1, 16, 64, 0.89), (1, 32, 64, 0.92),
            (1, 8, 128, 0.86), (1, 16, 256, 0.91), (1, 32, 512, 0.93))
    for seed in range(3):
        for depth, heads, width, acc in arms:
            rows.append({"depth": depth, "heads": heads, "width": width, "head_dim": width // heads,
                         "mlp_hidden": 2 * width, "seed": seed, "params_total": depth * 12 * width * width,
                         "eval_acc": acc + 0.004 * seed, "claims_digest": "d", "status": "ok",
                         "task": "image_classification", "variant": f"L{depth}-H{heads}-D{width}-s{seed}"})
    return pd.DataFrame(rows)


def ladder_claims() -> list[dict]:
    def point(depth, heads, width):
        return {"depth": depth, "heads": heads, "width": width, "mlp_hidden": 2 * width}

    common = {"metric": "eval_acc", "mode": "max", "margin": 0.02, "seeds": [0, 1, 2], "declaration": "d",
              "baseline": point(2, 4, 64), "control": point(1, 4, 64), "hypothesis": "non-inferior"}
    return [{**common, "name": "at_fixed_width", "lean": [point(1, h, 64) for h in (8, 16, 32)]},
            {**common, "name": "at_fixed_head_dim", "lean": [point(1, h, 16 * h) for h in (8, 16, 32)]}]


def test_the_exchange_table_gives_each_rung_its_share_of_the_lost_layer_and_the_figure_draws_it(monkeypatch):
    """A ladder claim (a control, lean models at three head counts or more) gets the exchange table
    and the layer_won_back figure: each rung's share of the control's cost won back, 0 at the
    control and 1 at the baseline; another claim gets neither."""
    from leaner.analysis.pareto import exchange_table

    summary, claims = ladder_summary(), ladder_claims()
    table = exchange_table(summary, claims)
    assert list(table["claim"]) == ["at_fixed_width"] * 4 + ["at_fixed_head_dim"] * 4
    assert list(table["role"]) == ["control", "lean", "lean", "lean"] * 2
    assert list(table["heads"]) == [4, 8, 16, 32] * 2
    assert list(table["width"]) == [64, 64, 64, 64, 64, 128, 256, 512]
    assert list(table["head_dim"]) == [16, 8, 4, 2, 16, 16, 16, 16]
    assert table["kept_share"].to_numpy() == pytest.approx([0, 0.5, 0.9, 1.2, 0, 0.6, 1.1, 1.3])
    assert list(table["params_ratio"]) == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.5, 2.0, 8.0, 32.0])
    lean = table[table["role"] == "lean"]
    assert (lean["kept_lo"] < lean["kept_share"]).all() and (lean["kept_share"] < lean["kept_hi"]).all()
    assert table.loc[table["role"] == "control", "kept_lo"].isna().all()
    assert list(lean["verdict"][:3]) == ["inferior", "equivalent", "superior"]
    # only a ladder shows them: three head counts and a control
    assert all(map(pareto.is_ladder, claims))
    assert not pareto.is_ladder({**claims[0], "lean": claims[0]["lean"][:2]})
    assert not pareto.is_ladder({**claims[0], "control": None})
    assert exchange_table(summary, [{**claims[0], "control": None}]).empty
    fig = drawn(monkeypatch, pareto.layer_won_back, summary, "x", "s", claims)
    by_heads, by_params = [ax for ax in fig.axes if ax.get_visible()]
    assert by_heads.get_xscale() == "log" and by_params.get_xscale() == "log"
    lines = [line for line in by_heads.lines if (line.get_gid() or "").startswith("at_fixed")]
    assert [list(line.get_xdata()) for line in lines] == [[4, 8, 16, 32]] * 2
    assert list(lines[1].get_ydata()) == pytest.approx([0, 0.6, 1.1, 1.3])
    params = [line for line in by_params.lines if line.get_gid() == "at_fixed_head_dim"][0]
    assert list(params.get_xdata()) == [12 * 64 * 64, 12 * 128 * 128, 12 * 256 * 256, 12 * 512 * 512]
    # the share that puts a rung within the margin: 1 - 0.02 / 0.10
    dotted = [line for line in by_heads.lines if line.get_linestyle() == ":"]
    assert dotted and all(line.get_ydata()[0] == pytest.approx(0.8) for line in dotted)
    assert "superior" in {t.get_text() for t in by_heads.texts}


def test_a_run_that_did_not_learn_is_marked_apart_and_left_out_of_its_points_mean(monkeypatch):
    """As the tables count it: a configuration's point is the mean of its runs that learned (all of
    them where none did), and every run that did not learn is a hollow marker at its own value."""
    from matplotlib.collections import PathCollection

    summary = p1_summary().assign(learned=True)
    stuck = (summary["depth"] == 1) & (summary["heads"] == 2) & (summary["seed"] == 1)
    summary.loc[stuck, ["eval_acc", "learned"]] = [0.1, False]
    alone = (summary["depth"] == 2) & (summary["heads"] == 4)  # neither seed learned
    summary.loc[alone, "learned"] = False
    fig = drawn(monkeypatch, figures.metric_vs_heads, summary, "x", "s")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    marked = [c for c in ax.collections if isinstance(c, PathCollection)
              and c.get_label() == plots.NOT_LEARNED_LABEL]
    points = {tuple(p) for c in marked for p in c.get_offsets()}
    assert (2, 0.1) in points and {(4, v) for v in summary.loc[alone, "eval_acc"]} <= points and len(points) == 3
    kept = summary.query("depth == 1 and heads == 2 and seed == 0")["eval_acc"].iloc[0]
    line = next(line for line in ax.lines if list(line.get_xdata()) == [1, 2, 4] and line.get_ydata()[1] == kept)
    assert line.get_ydata()[1] == pytest.approx(kept)  # the mean over the one run that learned
    assert [t.get_text() for t in ax.get_legend().get_texts()].count(plots.NOT_LEARNED_LABEL) == 1


def test_two_depths_labels_at_one_head_count_do_not_overprint(monkeypatch):
    summary = p1_summary()
    summary.loc[summary["depth"] == 2, "eval_acc"] -= 0.005  # depth 2 lies just below depth 1, 0.025 apart
    fig = drawn(monkeypatch, figures.metric_vs_heads, summary, "x", "s")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    boxes = [t.get_window_extent() for t in ax.texts]
    assert len(boxes) == 6
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)], "labels overprint"
