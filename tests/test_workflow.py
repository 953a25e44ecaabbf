"""The workflow itself, run through Snakemake: the tiny study end to end, lint, the paper-scale
dry run, and bad configs stopped before any job."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny")
    proc = snakemake(work, "--cores", "2")
    return work, proc


def test_tiny_study_end_to_end(tiny_run):
    work, proc = tiny_run
    assert "Finished" in proc.stderr + proc.stdout
    variants = [d.name for d in (work / "results" / "tiny").iterdir() if d.is_dir()]
    assert len(variants) == 6
    for v in variants:
        d = work / "results" / "tiny" / v
        for name in ("model.safetensors", "init.safetensors", "history.csv", "metrics.json", "conditioning.csv"):
            assert (d / name).stat().st_size > 0, d / name
        assert not (d / ".resume").exists()
        assert (work / "logs" / "train" / "tiny" / f"{v}.log").exists()
        assert (work / "benchmarks" / "train" / "tiny" / f"{v}.tsv").exists()

    summary = pd.read_csv(work / "results" / "tiny" / "summary.csv")
    assert len(summary) == 6 and set(summary["variant"]) == set(variants)
    assert (summary["status"] == "ok").all()
    assert summary["eval_acc"].between(0.0, 1.0).all() and summary["eval_acc"].mean() > 0.15  # chance: 0.1
    assert (summary["kappa_init_gmean"] > 1).all() and (summary["kappa_final_gmean"] > 1).all()
    shared = summary[summary["variant"] == "L1-H2-D16-hd8-mlp32-s0"].iloc[0]
    assert shared["protocols"] == "fixed_width;fixed_head_dim"
    assert (summary["params_total"] > 0).all()

    cond = pd.read_csv(work / "results" / "tiny" / "L2-H2-D16-hd8-mlp32-s0" / "conditioning.csv")
    assert len(cond) == 2 * 2 * 2  # checkpoints x layers x matrices
    assert (cond["samples"] == 32).all() and (cond["tokens"] == 17).all()

    for fig in ("kappa_vs_heads", "accuracy_vs_heads", "accuracy_vs_mlp"):
        for ext in ("png", "pdf"):
            assert (work / "results" / "figures" / f"tiny-{fig}.{ext}").stat().st_size > 5000
    lean = pd.read_csv(work / "results" / "tables" / "tiny-lean_vs_baseline.csv")
    assert set(lean["depth"]) == {1}
    assert (lean["baseline"] == "L2-H1-D16-mlp32").all()
    assert (lean["param_reduction_pct"] > 0).all()
    md = (work / "results" / "tables" / "tiny-by_config.md").read_text()
    assert "eval_acc_mean" in md and "|" in md
    assert "\\begin{tabular}" in (work / "results" / "tables" / "tiny-by_config.tex").read_text()

    # P2's family ran through the same rules
    near = pd.read_csv(work / "results" / "tiny_nearest" / "summary.csv")
    assert len(near) == 2 and set(near["head_dim"]) == {8, 4} and (near["task"] == "nearest_point").all()
    assert near["best_train_loss"].between(0, 4).all() and (near["kappa_final_gmean"] >= 1).all()
    cond = pd.read_csv(work / "results" / "tiny_nearest" / "L1-H2-W1-r4-d8-N4-none-s0" / "conditioning.csv")
    assert set(cond["cols"]) == {8} and set(cond["tokens"]) == {4}
    checks = pd.read_csv(work / "results" / "tables" / "tiny_nearest-acceptance.csv")
    assert list(checks.columns) == ["check", "expected", "observed", "pass"]
    assert checks["check"].str.contains("MSE\\(rank d/2\\) / MSE\\(rank d\\)").sum() == 1
    assert checks["check"].str.startswith("fig_perfect").sum() == 1
    for fig in ("mse_vs_rank", "mse_vs_rank_by_tokens", "mse_vs_rank_by_dim", "mse_vs_rank_by_posn",
                "perfect_angle", "kappa_vs_rank"):
        assert (work / "results" / "figures" / f"tiny_nearest-{fig}.png").stat().st_size > 5000
    both = pd.read_csv(work / "results" / "tables" / "all_studies-kappa_rank_error.csv")
    assert set(both["study"]) == {"tiny", "tiny_nearest"}
    assert {"heads", "rank", "depth", "error_mean", "kappa_final"} <= set(both.columns)

    theory = pd.read_csv(work / "results" / "theory" / "gaussian_conditioning.csv")
    assert set(theory["protocol"]) == {"fixed_head_dim", "fixed_width"}
    assert (work / "results" / "figures" / "theory-gaussian_conditioning.png").stat().st_size > 5000


def test_rerun_has_nothing_to_do(tiny_run):
    work, _ = tiny_run
    proc = snakemake(work, "-n", "--cores", "2")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_changing_one_variant_reruns_only_it(tiny_run, tmp_path):
    work, _ = tiny_run
    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny"]["overrides"] = [{"where": {"depth": 2, "heads": 2, "seed": 0}, "recipe": {"lr": 3e-3}}]
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake(work, "-n", "--cores", "2", configfile=path)
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert counts.get("train") == "1" and counts.get("conditioning") == "1", out[-3000:]
    assert "variant=L2-H2-D16-hd8-mlp32-s0" in out


def test_lint_is_clean():
    proc = snakemake(REPO, "--lint", configfile=TINY)
    out = proc.stdout + proc.stderr
    assert "Congratulations, your workflow is in a good condition!" in out, out


def test_paper_scale_dry_run_resolves_the_whole_dag(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "8", configfile=REPO / "configs" / "paper.yaml")
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    # ViT-B: 28 variants; P2: fig1 315, figN 100, fig_d 100, posn 30 + 160 (papers.md 2.5)
    assert counts["train"] == str(28 + 315 + 100 + 100 + 190), out[-3000:]
    assert counts["conditioning"] == counts["train"]
    assert counts["prepare_data"] == "2"
    assert "gpu=1" in out


def test_bad_config_stops_before_any_job(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny"]["grid"][0]["heads"] = [1, 3]
    cfg["studies"]["tiny"]["recipe"]["epochs"] = "many"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--cores", "1", configfile=path, check=False)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.startswith("config error:")]
    assert lines == ['config error: studies.tiny.recipe.epochs: "many" is not allowed (allowed: an integer >= 1)']
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()
