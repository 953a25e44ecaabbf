"""The workflow itself, run through Snakemake: the tiny study end to end, lint, the paper-scale
dry run, and bad configs stopped before any job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from leaner.running.handoff import WARM_LINE

from conftest import BIN, REPO, TINY, parquet_image_dataset, saved_checkpoint, snakemake, venv_activate

pytestmark = [pytest.mark.fast, pytest.mark.workflow]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny study, started as most users start it: from a shell with the venv activated
    (its `activate` exports PS1, which every job's non-interactive bash drops)."""
    work = tmp_path_factory.mktemp("tiny")
    proc = snakemake(work, "--cores", "2", sourced=venv_activate(tmp_path_factory.mktemp("venv")))
    return work, proc


def test_tiny_study_end_to_end(tiny_run):
    work, proc = tiny_run
    assert "Finished" in proc.stderr + proc.stdout
    logs = sorted((work / "logs").rglob("*.log"))
    assert len(logs) > 20 and not [p for p in logs if p.stat().st_size == 0]  # every job says what it did
    assert all(p.read_text().splitlines()[-1].startswith("leaner ") for p in logs if "train" not in p.parts)
    # training, conditioning and theory ran in the run's warm process, which stopped with the run (the
    # activated venv's PS1, which the warm process has and the jobs lack, is not what a library reads)
    computed = [p for p in logs if {"train", "conditioning", "theory"} & set(p.parts)]
    assert len(computed) == 17 and all(p.read_text().splitlines()[-1].startswith(WARM_LINE) for p in computed)
    assert not [p for p in logs if "refused this job" in p.read_text()]
    # each beside its Snakemake benchmark (which saw only the client), the child's own
    children = sorted((work / "logs" / "benchmarks").rglob("*.warm.tsv"))
    assert len(children) == 17 and all(p.with_name(p.name.replace(".warm", "")).exists() for p in children)
    warm_log = (work / "logs" / "warm.log").read_text()
    assert "leaner warm: serving" in warm_log and warm_log.rstrip().endswith("leaner warm: stopped")
    variants = [d.name for d in (work / "results" / "tiny").iterdir() if d.is_dir()]
    assert len(variants) == 6
    for v in variants:
        d = work / "results" / "tiny" / v
        for name in ("model.safetensors", "init.safetensors", "history.csv", "metrics.json", "conditioning.csv"):
            assert (d / name).stat().st_size > 0, d / name
        assert not (d / ".resume").exists() and not (d / "progress.json").exists()
        assert list(d.glob("events.out.tfevents.*")), d  # TensorBoard's, beside history.csv
        assert (work / "logs" / "train" / "tiny" / f"{v}.log").exists()
        assert (work / "logs" / "benchmarks" / "train" / "tiny" / f"{v}.tsv").exists()

    summary = pd.read_csv(work / "results" / "tiny" / "summary.csv")
    assert len(summary) == 6 and set(summary["variant"]) == set(variants)
    assert (summary["status"] == "ok").all()
    assert summary["eval_acc"].between(0.0, 1.0).all() and summary["eval_acc"].mean() > 0.15  # chance: 0.1
    assert (summary["kappa_init_gmean"] > 1).all() and (summary["kappa_final_gmean"] > 1).all()
    shared = summary[summary["variant"] == "L1-H2-D16-hd8-mlp32-s0"].iloc[0]
    assert shared["protocols"] == "fixed_width;fixed_head_dim"
    assert (summary["params_total"] > 0).all()

    cond = pd.read_csv(work / "results" / "tiny" / "L2-H2-D16-hd8-mlp32-s0" / "conditioning.csv")
    assert len(cond) == 4 * 2 * 3  # checkpoints (init, step10, half-way, final) x layers x matrices
    assert list(dict.fromkeys(cond["checkpoint"])) == ["init", "step10", "step34", "final"]
    assert set(cond["matrix"]) == {"heads_concat", "attn_proj_out", "jacobian"}
    jac = cond["matrix"] == "jacobian"
    assert (cond.loc[~jac, "samples"] == 32).all() and (cond.loc[jac, "samples"] == 4).all()
    assert (cond["tokens"] == 17).all() and set(cond.loc[jac, "method"]) == {"exact"}
    assert cond["singular_fraction"].between(0, 1).all()
    kept = work / "results" / "tiny" / "L2-H2-D16-hd8-mlp32-s0" / "checkpoints"
    assert sorted(p.name for p in kept.glob("*.safetensors")) == ["step10.safetensors", "step34.safetensors"]
    through = pd.read_csv(work / "results" / "tiny" / "kappa_through_training.csv")
    assert len(through) == 6 * 4 * 3  # variants x checkpoints x matrices
    assert set(through["step"]) == {0, 10, 34, 69} and set(through["fraction"].round(3)) == {0, 0.145, 0.493, 1}
    assert (through["kappa_gmean"] >= 1).all()

    for fig in ("kappa_vs_heads", "accuracy_vs_heads", "kappa_through_training"):
        for ext in ("png", "pdf"):
            assert (work / "results" / "figures" / f"tiny-{fig}.{ext}").stat().st_size > 5000
    assert not (work / "results" / "figures" / "tiny-accuracy_vs_mlp.png").exists()  # one MLP width
    lean = pd.read_csv(work / "results" / "tables" / "tiny-lean_vs_baseline.csv")
    assert set(lean["depth"]) == {1}
    assert (lean["baseline"] == "L2-H1-D16-mlp32").all()
    assert (lean["param_reduction_pct"] > 0).all()
    md = (work / "results" / "tables" / "tiny-by_config.md").read_text()
    assert "eval acc (mean)" in md and "|" in md
    assert "\\begin{tabular}" in (work / "results" / "tables" / "tiny-by_config.tex").read_text()

    # P2's family ran through the same rules
    near = pd.read_csv(work / "results" / "tiny_nearest" / "summary.csv")
    assert len(near) == 2 and set(near["head_dim"]) == {8, 4} and (near["task"] == "nearest_point").all()
    assert near["best_train_loss"].between(0, 4).all() and (near["kappa_final_gmean"] >= 1).all()
    cond = pd.read_csv(work / "results" / "tiny_nearest" / "L1-H2-W1-r4-d8-N4-none-s0" / "conditioning.csv")
    assert set(cond["cols"]) == {8, 4 * 8} and set(cond["tokens"]) == {4}  # the Jacobian: N*D columns
    checks = pd.read_csv(work / "results" / "tables" / "tiny_nearest-acceptance.csv")
    assert list(checks.columns) == ["check", "expected", "observed", "pass", "runs"]
    assert checks["check"].str.contains("MSE\\(rank d/2\\) / MSE\\(rank d\\)").sum() == 1
    assert checks["check"].str.startswith("fig_perfect").sum() == 1
    for fig in ("mse_vs_rank", "perfect_angle", "kappa_vs_rank", "kappa_through_training"):
        assert (work / "results" / "figures" / f"tiny_nearest-{fig}.png").stat().st_size > 5000
    assert not list((work / "results" / "figures").glob("tiny_nearest-mse_vs_rank_by_*"))  # one d, N, posn
    both = pd.read_csv(work / "results" / "tables" / "all_studies-kappa_rank_error.csv")
    assert set(both["study"]) == {"tiny", "tiny_nearest"}
    assert {"heads", "rank", "depth", "error_mean", "kappa_final"} <= set(both.columns)

    theory = pd.read_csv(work / "results" / "theory" / "gaussian_conditioning.csv")
    assert set(theory["protocol"]) == {"fixed_head_dim", "fixed_width"}
    assert (work / "results" / "figures" / "theory-gaussian_conditioning.png").stat().st_size > 5000


def test_a_finished_run_ends_by_saying_where_its_results_are(tiny_run):
    work, proc = tiny_run
    tail = proc.stderr[proc.stderr.index("leaner: the results are in"):]
    assert f"findings  {work / 'results' / 'overview' / 'findings.md'}" in tail, tail
    figures = len(list((work / "results" / "figures").glob("*.png")))
    assert f"figures   {work / 'results' / 'figures'}/ ({figures} figures" in tail and figures > 0, tail
    # the report line is a command that makes the report
    import shlex

    command = re.search(r"^  report    (.*)  \(one page", tail, flags=re.M).group(1)
    (work / "report.html").unlink(missing_ok=True)
    subprocess.run(shlex.split(command), cwd=work, check=True, capture_output=True, timeout=600,
                   env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert (work / "report.html").stat().st_size > 200_000


def test_every_tiny_variant_agrees_with_an_independent_float64_recomputation(tiny_run):
    """The stage's kappa (heads_concat median, init and final, every layer) against reference_kappa."""
    from reference_kappa import check_study_outputs

    work, _ = tiny_run
    # checkpoints x layers: 2 two-layer and 4 one-layer ViTs, 2 P2 models
    assert check_study_outputs(work / "results", "tiny*/*/metrics.json") == 2 * (2 * 2 + 4 * 1 + 2 * 1)


def test_both_papers_in_one_view_and_the_paper_comparisons(tiny_run):
    work, _ = tiny_run
    tables = work / "results" / "tables"
    effects = pd.read_csv(tables / "all_studies-heads_effect.csv")
    # tiny: fixed_width at depth 1 (seeds 0 and 1: an interval) and at depth 2 (seed 0 only); P2: 1 -> 2 heads
    assert set(effects["study"]) == {"tiny", "tiny_nearest"} and len(effects) == 3
    with_interval = effects[effects["n"] == "2, 2"].iloc[0]
    assert with_interval["delta_lo"] <= with_interval["delta_error"] <= with_interval["delta_hi"]
    # a comparison on a model that never beat chance (summary.csv: learned) says so instead of a verdict;
    # three epochs can leave a tiny ViT there
    summary = pd.read_csv(work / "results" / "tiny" / "summary.csv")
    stuck = {f"L{r['depth']}/H{r['heads']}" for _, r in summary.iterrows() if not r["learned"]}
    for _, r in effects[effects["study"] == "tiny"].iterrows():
        depth = re.search(r"depth=(\d+)", r["group"]).group(1)
        named = [c for c in (f"L{depth}/H{h}" for h in r["heads"].split(" -> ")) if c in stuck]
        if named:
            assert r["verdict"] == f"did not learn: {', '.join(named)}"
        elif r["n"] == "1, 1":
            assert r["verdict"] == "n/a (one seed)"
        else:
            assert r["verdict"] in ("more heads help", "more heads hurt", "inconclusive", "unresolved")
    # P2: a run learned when its best MSE fell below 0.95 of the zero predictor's (summary.NEAREST_LEARNED);
    # one that did not is counted in n and, where it is a configuration's only run, takes its verdict
    near = pd.read_csv(work / "results" / "tiny_nearest" / "summary.csv").sort_values("heads")
    assert (near["learned"] == (near["best_train_loss"] < 0.95)).all()
    p2_row = effects[effects["study"] == "tiny_nearest"].iloc[0]
    stuck = [f"L1/H{h}" for h, ok in zip(near["heads"], near["learned"]) if not ok]
    left_out = [f"{int(not ok)}" for ok in near["learned"]]
    assert p2_row["n"] == "1, 1" + (f" (did not learn: {', '.join(left_out)})" if stuck else "")
    assert p2_row["verdict"] == (f"did not learn: {', '.join(stuck)}" if stuck else "n/a (one seed)")
    corr = pd.read_csv(tables / "all_studies-kappa_error_correlation.csv")
    assert list(corr["study"]) == ["tiny", "tiny_nearest", "pooled"]
    tiny = corr[corr["study"] == "tiny"].iloc[0]
    assert tiny["configurations"] == 4 and -1 <= tiny["rho_kappa_error"] <= 1
    assert pd.isna(tiny["lo"]) and pd.isna(tiny["hi"])  # no interval below 5 configurations
    findings = (work / "results" / "overview" / "findings.md").read_text()
    assert "configurations of 2 studies (tiny, tiny_nearest)" in findings
    assert f"tiny {tiny['rho_kappa_error']:+.2f} (n=4)" in findings  # the paragraph quotes the table
    page = (work / "results" / "overview" / "findings.html").read_text()
    # every section of findings.md: the declared claims (none in this config) and the heads effects
    sections = ["Declared claims", "Most against fewest heads"]
    assert re.findall(r"^## (.+)$", findings, flags=re.MULTILINE) == sections
    assert "No study declares claims." in findings
    assert all(f"<h3>{s}</h3>" in page for s in sections) and page.count("<table") == 3
    assert (work / "results" / "figures" / "all_studies-overview.png").stat().st_size > 20000

    p1 = pd.read_csv(tables / "tiny-paper_comparison.csv")
    assert list(p1.columns) == ["quantity", "paper", "paper setting", "ours", "our setting", "difference", "check"]
    assert p1["quantity"].str.startswith("top-1 change").any() and p1["paper"].str.contains("points").any()
    assert p1["our setting"].str.startswith("digits, ").all()
    p2 = pd.read_csv(tables / "tiny_nearest-paper_comparison.csv")
    checks = pd.read_csv(tables / "tiny_nearest-acceptance.csv")
    assert (p2["check"].dropna().isin(["pass", "fail"])).all()
    assert p2["quantity"].str.startswith("acceptance: ").sum() == len(checks)
    # P2 under its authors' replayed set: the fresh-point MSE beside theirs, and what the seeds vary
    assert p2["our setting"].str.contains("replayed set").all() and p2["our setting"].str.contains("613").all()
    assert p2["ours"].str.contains("fresh points").any()
    costs = pd.read_csv(tables / "all_studies-job_costs.csv")
    rows = {(r["rule"], r["study"]): r for _, r in costs.iterrows()}
    assert rows[("train", "tiny")]["jobs"] == 6 and rows[("conditioning", "tiny_nearest")]["jobs"] == 2
    assert rows[("all", "-")]["jobs"] == 6 + 6 + 2 + 2 + 2 + 1  # train, conditioning (2 studies), 2 datasets, theory
    assert "<table" in (tables / "tiny-by_config.html").read_text()


def test_the_report_holds_every_figure_and_table_with_captions(tiny_run):
    work, _ = tiny_run
    snakemake(work, "--report", "report.html")
    page = (work / "report.html").read_text(errors="replace")
    assert len(page) > 200_000
    # every caption rendered: docutils marks what it could not read as "problematic"
    assert 'class="problematic"' not in page and "System Message" not in page
    for text in ("Can a transformer trade depth for attention heads", "tiny-kappa_through_training.png",
                 "all_studies-overview.png", "findings.html", "all_studies-job_costs.html",
                 "tiny_nearest-paper_comparison.html", "theory-paper_comparison.html", "config.yaml",
                 "does the conditioning seen at initialisation survive training"):
        assert text in page, text


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


@pytest.mark.slow
def test_paper_scale_dry_run_resolves_the_whole_dag(tmp_path):
    proc = snakemake(tmp_path, "-n", "--cores", "8", configfile=REPO / "configs" / "paper.yaml")
    out = proc.stdout + proc.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    # ViT-B: 28 variants; P2: fig1 315, figN 100, fig_d 100, posn 30 + 160 (papers.md 2.5);
    # LRA ListOps 18, TinyStories LM 9, BERT 4 (each fine-tuned on the 8 GLUE tasks); P1's headline table: five
    # timm backbones, each original against its lean model
    assert counts["train"] == str(28 + 315 + 100 + 100 + 190 + 18 + 9 + 4 + 5 * 2), out[-3000:]
    assert counts["conditioning"] == counts["train"]
    assert counts["finetune"] == str(4 * 8) and counts["glue_scores"] == "4"
    # ImageNet, TinyStories, MiniPile and GLUE from the hub on the submitting host; ListOps and P2's points not
    assert counts["prepare_data_local"] == "4" and counts["prepare_data"] == "2"
    assert "gpu=1" in out and "gpu=8" in out  # ViT-B trains each variant over 8 GPUs
    # memory from the model's size: ViT-L12/D2048's float64 probe needs over 9 GB, P2's small models about 1 GB
    # besides what CUDA itself holds on the host (models/memory.py CUDA_HOST_MB)
    from leaner.models.memory import CUDA_HOST_MB

    mem_mb = {(rule, wildcards): int(mem) for rule, wildcards, mem in _printed_jobs(out)}
    assert mem_mb[("conditioning", "study=vit_imagenet, variant=L12-H32-D2048-hd64-mlp8192-s0")] > 9000 + CUDA_HOST_MB
    assert CUDA_HOST_MB < mem_mb[("conditioning", "study=nearest_fig1, variant=L1-H1-W1-r64-d64-N16-none-s0")] \
        < 2000 + CUDA_HOST_MB
    # the study's own value, larger than the estimate
    assert mem_mb[("train", "study=vit_imagenet, variant=L12-H32-D2048-hd64-mlp8192-s0")] == 256000


def _printed_jobs(out: str) -> list[tuple[str, str, str]]:
    """(rule, wildcards, mem_mb) of each job a run or dry run printed."""
    jobs = []
    for block in re.split(r"^\s*\[.*\]$", out, flags=re.M):  # a group's jobs are printed indented
        rule = re.search(r"^\s*(?:local)?rule (\w+):$", block, flags=re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, flags=re.M)
        mem = re.search(r"\bmem_mb=(\d+)", block)
        if rule and wildcards and mem:
            jobs.append((rule.group(1), wildcards.group(1), mem.group(1)))
    return jobs


def test_bad_config_stops_before_any_job(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny"]["grid"][0]["heads"] = [1, 3]
    cfg["studies"]["tiny"]["recipe"]["epochs"] = "many"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--cores", "1", configfile=path, check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("config error:")]
    assert lines == ['config error: studies.tiny.recipe.epochs: "many" is not allowed (allowed: an integer >= 1)']
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("text,said", [
    (None, "leaner run: config error: {path}: file not found"),
    ("studies:\n  a: {task: x, grid: {depth: [1]}\n  b: 1\n",
     "leaner run: config error: {path} line 3: not valid YAML (expected ',' or '}}', but got '<scalar>')"),
])
def test_leaner_run_refuses_a_missing_or_unparsable_config_file_in_one_line(tmp_path, text, said):
    path = tmp_path / "mine.yaml"
    if text is not None:
        path.write_text(text)
    proc = subprocess.run([str(BIN / "leaner"), "run", "-s", str(REPO / "Snakefile"), "--configfile", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr == said.format(path=path) + "\n", proc.stderr
    assert not (tmp_path / ".snakemake").exists()


def test_leaner_run_without_cores_uses_every_core(tmp_path):
    """`leaner run` as the README starts it, less --cores: Snakemake gets --cores all."""
    proc = subprocess.run([str(BIN / "leaner"), "run", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           "results/data/digits/manifest.json", "--configfile", str(TINY)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "results" / "data" / "digits" / "manifest.json").is_file()
    (kept,) = (tmp_path / "logs" / "snakemake").glob("*.log")  # Snakemake's whole output, as it printed it
    assert f"Provided cores: {os.cpu_count()}" in kept.read_text()


def test_leaner_run_tells_a_run_in_a_few_lines_and_keeps_snakemakes_whole_output(tiny_run, tmp_path):
    """The aggregates of the finished tiny run made again through `leaner run`: the job counts,
    a line per stage, where the results are, where Snakemake's whole output is; no job blocks."""
    import shutil

    work, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(work, copy, symlinks=True)
    proc = subprocess.run([str(BIN / "leaner"), "run", "-s", str(REPO / "Snakefile"), "--forcerun", "summary",
                           "--configfile", str(TINY)], cwd=copy, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert re.fullmatch(r"leaner run: \d+ jobs: summary 2, .*", lines[0]), lines[:3]
    assert "  summary: 2 of 2 done, 0:" in proc.stderr and "  report: 1 of 1 done, 0:" in proc.stderr
    assert any(line.startswith("leaner: the results are in") for line in lines)
    assert not [line for line in lines if line.startswith(("localrule ", "rule ", "    output:", "[Mon", "[Tue"))]
    whole = Path(re.search(r"Snakemake's whole output: (\S+)$", lines[-1]).group(1))
    assert whole.parent == copy / "logs" / "snakemake" and "Finished jobid" in whole.read_text()
    assert len(lines) < 40 < len(whole.read_text().splitlines()), len(lines)


def test_leaner_run_ends_a_failure_with_the_failed_jobs_log_and_its_last_lines(tmp_path):
    """A job that fails, as the test builds it (an image folder at 224 pixels under a model of 8)."""
    from conftest import image_folder

    folder = image_folder(tmp_path / "imgs")
    cfg = {"datasets": {"imgs": {"kind": "imagefolder", "path": str(folder), "num_classes": 3}},
           "studies": {"s": {"task": "image_classification", "dataset": "imgs",
                             "model": {"patch_size": 2, "img_size": 8}, "recipe": {"epochs": 1, "batch_size": 2},
                             "grid": {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1],
                                      "mlp_ratio": [2], "seeds": [0]},
                             "resources": {"threads": 1, "runtime": 5, "mem_mb": 1000}}}}
    path = tmp_path / "fails.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([str(BIN / "leaner"), "run", "-s", str(REPO / "Snakefile"),
                           "results/s/L1-H1-D16-hd16-mlp32-s0/metrics.json", "--configfile", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    log = tmp_path / "logs" / "train" / "s" / "L1-H1-D16-hd16-mlp32-s0.log"
    said = proc.stderr.splitlines()
    at = said.index(f"leaner run: rule train failed; its log {log}, last lines:")
    assert said[at + 1:at + 6] == [f"    {line}" for line in log.read_text().splitlines()[-5:]], said[at:]
    assert said[-1].startswith("leaner run: exit status 1 in ") and "shell:" not in proc.stderr


def test_profile_resource_typos_stop_before_any_job(tmp_path):
    """Snakemake passes unknown resource names through and the SLURM plugin ignores them, so a
    typo would silently send jobs to the default partition: the workflow refuses them instead."""
    proc = snakemake(tmp_path, "--cores", "1", "--default-resources", "slurm_partiton=gpu", "--set-resources",
                     "trian:runtime=5", "train:mem_gb=3", "--resources", "gpus=2", check=False)
    assert proc.returncode == 2
    lines = [re.split(r" \((?:allowed|did you mean)", line)[0] for line in proc.stderr.splitlines()
             if line.startswith("resource error:")]
    assert lines == ["resource error: --resources gpus: unknown resource",
                     "resource error: --default-resources slurm_partiton: unknown resource",
                     "resource error: --set-resources train:mem_gb: unknown resource",
                     "resource error: --set-resources trian: no such rule"]
    assert "slurm_partiton: unknown resource (did you mean 'slurm_partition'?)" in proc.stderr
    assert "trian: no such rule (did you mean 'train'?)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()
    # the shipped profiles themselves pass the check
    for profile in ("local", "slurm"):
        snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / profile))


# Slurm's commands where no Slurm is: each records its call; sinfo names a partition, sbatch refuses the job.
SLURM_STAND_INS = {"sinfo": 'echo PARTITION; echo "debug*"', "sbatch": 'echo "sbatch: no cluster here" >&2; exit 1'}


def test_under_a_cluster_executor_data_from_the_hub_is_prepared_on_the_submitting_host(tmp_path, monkeypatch):
    """`--executor slurm` (the plugin itself, Slurm's commands stood in for): the dataset from the
    hub is prepared here, as a local rule, while the generated one goes to sbatch with its
    `prepare` settings as runtime, memory and cores."""
    stand_ins, calls = tmp_path / "slurm-bin", tmp_path / "calls.log"
    stand_ins.mkdir()
    for name in ("sbatch", "sinfo", "squeue", "sacct", "sacctmgr", "sshare", "scontrol", "scancel"):
        script = stand_ins / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{SLURM_STAND_INS.get(name, "exit 1")}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_ins}{os.pathsep}{os.environ['PATH']}")
    cfg = yaml.safe_load(TINY.read_text())
    cfg["datasets"] = {"digits": {"kind": "digits", "prepare": {"runtime": 7, "mem_mb": 1500, "threads": 2}},
                       "pictures": {"kind": "hub", "name": str(parquet_image_dataset(tmp_path)), "num_classes": 3,
                                    "img_size": 8, "in_chans": 1, "mean": [0.5], "std": [0.25]}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    proc = snakemake(work, "--executor", "slurm", "--jobs", "2", "--slurm-no-account",
                     "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
                     "results/data/pictures/manifest.json", "results/data/digits/manifest.json", configfile=path,
                     check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]  # sbatch refused the digits job
    assert "localrule prepare_data_local:" in out and (work / "results/data/pictures/manifest.json").exists()
    submitted = [line for line in calls.read_text().splitlines() if line.startswith("sbatch ")]
    assert len(submitted) == 1 and "--comment rule_prepare_data_wildcards_digits" in submitted[0], submitted
    for flag in (" -t 7 ", " --mem 1500 ", " --cpus-per-task=2 "):
        assert flag in submitted[0], submitted[0]
    assert not (work / "results/data/digits/manifest.json").exists()


NEAR = " (did you mean 'tiny_nearest'?)"


@pytest.mark.parametrize("target,hint", [("results/vit_digit/summary.csv", ""),
                                         ("results/figures/vit_digit-accuracy_vs_heads.png", ""),
                                         ("results/tables/tiny_neerest-by_config.md", NEAR)])
def test_a_target_naming_an_unknown_study_gets_one_clear_line(tmp_path, target, hint):
    proc = snakemake(tmp_path, target, "--cores", "1", check=False)
    assert proc.returncode == 2
    in_shared_folder = "/figures/" in target or "/tables/" in target
    study = target.split("/")[2].split("-")[0] if in_shared_folder else target.split("/")[1]
    assert f"{target}: no study named '{study}' in the config{hint} (allowed: tiny, tiny_nearest;" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception" not in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("file", ["conditioning.csv", "model.safetensors"])
def test_a_target_naming_an_unknown_variant_gets_one_clear_line(tmp_path, file):
    """A variant id the study lacks (a seed the grid does not have) is one line naming the
    nearest variant, not a KeyError from an input function."""
    proc = snakemake(tmp_path, f"results/tiny/L1-H2-D16-hd8-mlp32-s7/{file}", "--cores", "1", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert ("results/tiny/L1-H2-D16-hd8-mlp32-s7: no variant 'L1-H2-D16-hd8-mlp32-s7' in study 'tiny' (did you "
            "mean 'L1-H2-D16-hd8-mlp32-s1'?) (allowed: ") in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "KeyError" not in proc.stderr
    assert not (tmp_path / "results").exists()


# ----------------------------------------------------------------------------- incremental re-runs

def _job_counts(out: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M)}


def test_adding_a_head_count_schedules_only_the_new_variants(tiny_run, tmp_path):
    work, _ = tiny_run
    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny"]["grid"][0]["heads"] = [1, 2, 4]
    path = tmp_path / "more_heads.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = "\n".join(snakemake(work, "-n", "--cores", "2", configfile=path).stdout.splitlines())
    counts = _job_counts(out)
    new = {"L1-H4-D16-hd4-mlp32-s0", "L2-H4-D16-hd4-mlp32-s0"}
    assert counts["train"] == 2 and counts["conditioning"] == 2, out[-3000:]
    assert set(re.findall(r"variant=(\S+)", out)) == new
    # and the aggregates of that study downstream, nothing of the other study
    assert counts["summary"] == 1 and counts["report"] == 1


def _code_copy(tmp_path: Path) -> Path:
    """The workflow and the package copied, to be edited as a user edits theirs."""
    import shutil

    copy = tmp_path / "workflow"
    copy.mkdir()
    for name in ("Snakefile", "rules", "schemas", "src", "config.yaml"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(src, copy / name)
    return copy


def _dry_run_with(copy: Path, work: Path, *args: str) -> str:
    """`snakemake -n` of the copied workflow with the copied package on the path (Snakemake's
    default re-run triggers, as `snakemake --cores all` runs)."""
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "snakemake"), "-s", str(copy / "Snakefile"), "-d", str(work), "--configfile",
                           str(TINY), "-n", "--cores", "2", *args], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_a_code_change_reruns_the_stage_it_moves_and_a_docstring_or_comment_nothing(tiny_run, tmp_path):
    """Each stage's rule carries its code's digest (provenance.stage_digest) as a param: an edit
    that cannot change a number re-runs nothing; a statement in the training code re-trains every
    variant (and what follows); one in a figure's code re-makes the report, not models."""
    work, _ = tiny_run
    trained = len(list((work / "results").glob("*/*/metrics.json")))
    copy = _code_copy(tmp_path)
    pkg = copy / "src" / "leaner"
    _edit(pkg / "training" / "train.py", '"""THE training loop', '"""THE (one) training loop')
    _edit(pkg / "training" / "step.py", "\n\n", "\n\n# an edited comment\n\n")
    _edit(copy / "rules" / "train.smk", "rule train:", "# an edited comment\nrule train:")
    out = _dry_run_with(copy, work)
    assert "Nothing to be done" in out, out[-3000:]

    step = (pkg / "training" / "step.py").read_text()
    (pkg / "training" / "step.py").write_text(step + "\nEDITED = True\n")
    counts = _job_counts(_dry_run_with(copy, work))
    assert counts["train"] == trained and counts["conditioning"] == trained, counts
    assert counts["summary"] == 2 and counts["report"] == 1, counts  # and what follows
    (pkg / "training" / "step.py").write_text(step)

    plots = pkg / "analysis" / "plots.py"
    plots.write_text(plots.read_text() + "\nEDITED = True\n")
    out = _dry_run_with(copy, work)
    counts = _job_counts(out)
    assert counts.get("report") == 1, out[-3000:]
    assert not {"train", "conditioning", "summary", "prepare_data"} & set(counts), counts


@pytest.mark.parametrize("root,said", [
    ("nope", "--root {root}: no such folder"),
    ("empty", "--root {root}: holds no results/ and no config.yaml: not a run's folder"),
])
def test_status_refuses_a_root_that_holds_no_run(tmp_path, root, said):
    (tmp_path / "empty").mkdir()
    folder = tmp_path / root
    proc = subprocess.run([str(BIN / "leaner"), "status", "--root", str(folder)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and said.format(root=folder) in proc.stderr, proc.stderr


def test_status_of_a_finished_run_reads_that_runs_config(tiny_run, tmp_path):
    """From another folder, `--root RUN` counts the run's own variants (not ./config.yaml's)."""
    work, _ = tiny_run
    proc = subprocess.run([str(BIN / "leaner"), "status", "--root", str(work)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    trained = len(list((work / "results").glob("*/*/metrics.json")))
    assert proc.stdout.splitlines()[0] == f"{trained} variants: {trained} done", proc.stdout


def test_status_names_a_variant_trained_by_other_training_code(tiny_run, tmp_path):
    import shutil

    from leaner.provenance import stage_digest
    from leaner.tasks import job_modules

    work, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(work / "results", copy / "results", ignore=shutil.ignore_patterns("*.safetensors", "checkpoints"))
    shutil.copy(TINY, copy / "config.yaml")
    every = sorted((copy / "results").glob("*/*/metrics.json"))
    for m in map(lambda path: json.loads(path.read_text()), every):  # the digest of the modules it loaded
        modules = tuple(m["code"]["modules"])
        assert m["code"]["training"] == stage_digest("training", modules)
        kind = "nearest_point" if m["spec"]["task"] == "nearest_point" else "digits"  # the demo's datasets
        assert modules == job_modules(m["spec"]["task"], kind)
    old = json.loads(every[0].read_text())
    old["code"]["training"] = "0123456789abcdef"
    every[0].write_text(json.dumps(old))
    proc = subprocess.run([str(BIN / "leaner"), "status", "--root", str(copy)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "1 trained by other training code than this checkout's: snakemake re-trains them" in first, first
    flagged = [line for line in proc.stdout.splitlines() if "by other training code, 0123456789abcdef" in line]
    assert len(flagged) == 1 and every[0].parent.name in flagged[0], proc.stdout


@pytest.mark.slow
def test_requesting_one_variant_runs_only_its_chain(tmp_path):
    target = "results/tiny/L2-H1-D16-hd16-mlp32-s0/conditioning.csv"
    proc = snakemake(tmp_path, target, "--cores", "2")
    counts = _job_counts(proc.stdout + proc.stderr)
    assert counts == {"declare": 1, "prepare_data": 1, "train": 1, "conditioning": 1, "total": 4}, \
        proc.stderr[-2000:]
    assert sorted(d.name for d in (tmp_path / "results" / "tiny").iterdir()) == [
        "L2-H1-D16-hd16-mlp32-s0", "declared.json"]
    assert (tmp_path / target).stat().st_size > 0


def _status(workdir, config) -> dict[str, list[str]]:
    """`leaner status` of a config in `workdir`: variant -> [state, step, detail]."""
    from conftest import run

    out = run([str(BIN / "leaner"), "status", str(config)], cwd=workdir).stdout.splitlines()
    assert re.match(r"\d+ variants: ", out[0]) and out[1].split()[:4] == ["study", "variant", "state", "step"], out
    rows = {}
    for line in out[2:]:
        study, variant, state, rest = line.split(maxsplit=3) + [""] * (4 - len(line.split(maxsplit=3)))
        step, _, detail = rest.partition("  ")
        rows[variant] = [state, step.strip(), detail.strip()]
    return rows


@pytest.mark.slow
def test_a_killed_run_shows_in_status_and_the_readme_command_resumes_it(tmp_path):
    """A real run, watched: `leaner status` shows the long variant running (step, loss) while the
    short one is done; `leaner run` refuses to touch a live run's lock; after kill -9 of Snakemake
    and its job, status says the run stopped (resumable) and the untargeted variant is pending, and
    the README's command (`leaner run`, no --unlock, no --rerun-incomplete) resumes it."""
    import os
    import signal
    import subprocess

    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2, 4], "mlp_ratio": [2],
                     "seeds": [0]}
    study["recipe"].update(epochs=120, checkpoint_every=100)
    study["overrides"] = [{"where": {"heads": 2}, "recipe": {"epochs": 1}}]
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(cfg))
    long_, short, untargeted = "L1-H1-D16-hd16-mlp32-s0", "L1-H2-D16-hd8-mlp32-s0", "L1-H4-D16-hd4-mlp32-s0"
    targets = [f"results/tiny/{v}/metrics.json" for v in (long_, short)]
    args = ["-s", str(REPO / "Snakefile"), "-d", str(tmp_path), *targets, "--cores", "2", "--configfile", str(path)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen([str(BIN / "snakemake"), *args], cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "results" / "tiny" / long_
    ckpt = folder / ".resume" / "state.pt"
    deadline = time.time() + 240
    while not (ckpt.exists() and (tmp_path / targets[1]).exists()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    try:
        running = _status(tmp_path, path)
        refused = subprocess.run([str(BIN / "leaner"), "run", *args], cwd=tmp_path, env=env, capture_output=True,
                                 text=True, timeout=60)
        watch = subprocess.Popen([str(BIN / "leaner"), "status", str(path), "--watch", "0.2"], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, text=True)
        frames = []
        for line in iter(watch.stdout.readline, ""):
            frames += [line] if " variants: " in line else []
            if len(frames) == 2:
                break
        watch.kill()
        watch.wait()
        history_rows = len(pd.read_csv(folder / "history.csv"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and its training job, mid-training
        proc.wait()
    assert saved_checkpoint(ckpt) and not (tmp_path / targets[0]).exists(), "the kill came too late to test resume"

    state, step, detail = running[long_]
    assert state == "running" and re.fullmatch(r"\d+/2760", step) and re.match(r"loss \d", detail), running[long_]
    assert running[short][0] == "done" and re.match(r"eval_acc 0\.\d+", running[short][2]), running[short]
    assert running[untargeted][0] == "pending"
    assert refused.returncode == 1 and "a Snakemake run is active in" in refused.stderr, refused.stderr
    assert len(frames) == 2 and frames[0].startswith("3 variants: ")
    assert history_rows >= 1  # history.csv is written while the run trains

    stopped = _status(tmp_path, path)
    assert stopped[long_][0] == "failed" and "process gone" in stopped[long_][2], stopped[long_]
    assert re.search(r"a re-run resumes from step [1-9]\d*00$", stopped[long_][2]), stopped[long_]
    assert stopped[short][0] == "done" and stopped[untargeted][0] == "pending"
    assert list((tmp_path / ".snakemake" / "locks").glob("*.lock")), "the kill should leave Snakemake's lock"

    from conftest import run

    proc = run([str(BIN / "leaner"), "run", *args], cwd=tmp_path)
    assert "belongs to a run that is no longer alive" in proc.stderr
    log = (tmp_path / "logs" / "train" / "tiny" / f"{long_}.log").read_text()
    resumed = re.search(r"resumed from step (\d+) of (\d+)", log)
    assert resumed and int(resumed.group(1)) >= 100, log[-2000:]
    metrics = json.loads((tmp_path / targets[0]).read_text())
    assert metrics["steps"] == int(resumed.group(2)) == 120 * 23
    assert not ckpt.exists()
    assert _status(tmp_path, path)[long_][0] == "done"


def test_tensorboard_sorts_the_runs_by_their_hyperparameters_and_shows_kappa(tiny_run):
    """The summary stage gives each run TensorBoard's HParams (architecture, protocols, parameters,
    seed; final metric and kappa as its columns) and kappa at each kept checkpoint, beside its curves."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    work, _ = tiny_run
    summary = pd.read_csv(work / "results" / "tiny" / "summary.csv").set_index("variant")
    through = pd.read_csv(work / "results" / "tiny" / "kappa_through_training.csv")
    for variant in ("L1-H2-D16-hd8-mlp32-s0", "L2-H1-D16-hd16-mlp32-s0"):
        events = EventAccumulator(str(work / "results" / "tiny" / variant))
        events.Reload()
        content = events.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
        hp = {k: v.number_value if v.HasField("number_value") else v.string_value for k, v in start.hparams.items()}
        row = summary.loc[variant]
        assert hp == {"study": "tiny", "protocols": row["protocols"], "params": row["params_total"],
                      "seed": row["seed"], "depth": row["depth"], "heads": row["heads"], "width": 16,
                      "head_dim": row["head_dim"], "mlp_hidden": 32, "qk_scale": 1.0}
        assert events.Scalars("hparams/eval_acc")[0].value == pytest.approx(row["eval_acc"], rel=1e-6)
        assert events.Scalars("hparams/kappa_final")[0].value == pytest.approx(row["kappa_final_gmean"], rel=1e-6)
        assert "train/loss" in events.Tags()["scalars"]  # the same run as the training curves
        for matrix in ("heads_concat", "attn_proj_out", "jacobian"):
            mine = through[(through["variant"] == variant) & (through["matrix"] == matrix)]
            assert mine["step"].tolist() == [0, 10, 34, 69]
            mine = mine[np.isfinite(mine["kappa_gmean"])]  # a singular matrix (kappa inf) has no point
            logged = events.Scalars(f"kappa/{matrix}")
            assert [e.step for e in logged] == mine["step"].tolist()
            assert [e.value for e in logged] == pytest.approx(mine["kappa_gmean"].tolist(), rel=1e-6)
    assert len(list((work / "results" / "tiny" / variant).glob("events.out.tfevents.*.hparams"))) == 1
