"""`leaner rehearse`: a slice of configs/paper.yaml at its real shapes, run for real on the CPU (the
whole config's table is in benchmarks/results.md), and what a failed architecture looks like."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from leaner.models.params import model_params
from leaner.workflow.plan import load_plan

from conftest import BIN, REPO, TINY

pytestmark = pytest.mark.slow

PAPER = REPO / "configs" / "paper.yaml"


def _rehearse(*args: str, cwd, timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "leaner"), "rehearse", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


SLICE = ("vit_imagenet", "nearest_fig_d", "lra_listops")


def test_the_smallest_and_largest_paper_architectures_under_40m_parameters_rehearse(tmp_path):
    """The ViT at 224 px from JPEGs through the real loader (L8-D768: the Lanczos estimate), P2's
    fig_d from d 16 to d 256, ListOps at LRA's 2000 tokens: each study's smallest and
    largest architecture of at most 40M parameters, through two steps, a stop at the checkpoint, a
    resume and the conditioning. (The whole config, L12-D2048 and figN's N 256 included, is
    benchmarks/results.md row 9: hours on 2 cores.)"""
    out = tmp_path / "rehearsal.csv"
    proc = _rehearse(str(PAPER), "--ends", "--max-params", "4e7", "--studies", ",".join(SLICE), "--out", str(out),
                     "--work", str(tmp_path / "w"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = pd.read_csv(out)
    assert (rows["result"] == "pass").all(), rows[["variant", "result"]]
    assert sorted(rows["study"]) == sorted(SLICE * 2)
    plan = load_plan(PAPER)
    for row in rows.itertuples():
        assert row.params == model_params(plan.variant(row.study, row.variant).model) <= 4e7, row
        assert row.train_gflop_per_sample > 0 and row.activation_mb_per_sample > 0, row
        # the resume state: fp32 weights and AdamW's two moments, 12 bytes a parameter (+ RNG, history)
        assert 12 * row.params < row.checkpoint_mb * 2**20 < 12 * row.params + 8 * 2**20, row
    methods = rows.groupby("study")["kappa_methods"].agg(",".join)
    assert "lanczos" in methods["vit_imagenet"]  # 197 x 768: matrix-free
    assert {"exact", "lanczos"} <= set(methods["nearest_fig_d"].split(","))  # d 16: exact; d 256: matrix-free
    assert "passed in" in proc.stdout and not list((tmp_path / "w").glob("*/L*"))  # each run's files removed


def test_an_architecture_that_fails_is_a_row_with_its_line_and_the_command_fails(tmp_path):
    proc = _rehearse(str(TINY), "--studies", "tiny_nearest", "--timeout", "0.5", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert sum(line.endswith("failed: no result within 0 s") for line in lines) == 2, proc.stdout
    assert lines[-1].startswith("0 of 2 architectures passed in ")
    bad = _rehearse(str(TINY), "--studies", "tiny,vit", cwd=tmp_path, timeout=300)
    assert bad.returncode == 1
    assert bad.stderr.strip() == ("leaner rehearse: error: --studies vit: no such study (allowed: tiny, "
                                  "tiny_nearest)")


def test_a_rehearsal_run_again_in_its_folder_keeps_what_passed_on_the_same_commit(tmp_path, monkeypatch):
    """A whole-config rehearsal takes hours: run again with the same --work, it goes on where it
    stopped. A row is kept only if it passed on the very code here; another commit, a changed tree
    or a failure is rehearsed again."""
    from leaner.planning import rehearse as r

    here = {"version": "0", "commit": "a" * 40, "dirty": False}
    monkeypatch.setattr(r, "code_state", lambda: here)
    plan, work = load_plan(TINY), tmp_path / "w"
    first = r.rehearse(plan, [str(TINY)], work, ["tiny_nearest"], show=lambda line: None)
    assert [row["result"] for row in first] == ["pass", "pass"] and not any(row.get("earlier") for row in first)

    children = []

    def child(configs, study, variant, work, timeout_s):
        children.append(variant)
        return {"result": "failed: stand-in"} if len(children) == 1 else {}

    monkeypatch.setattr(r, "run_child", child)
    printed = []
    again = r.rehearse(plan, [str(TINY)], work, ["tiny_nearest"], show=printed.append)
    assert children == [] and [row["earlier"] for row in again] == [True, True]
    assert [row["seconds"] for row in again] == [row["seconds"] for row in first]
    assert printed[1].endswith("pass (kept from an earlier run of this commit)")

    for changed in ({**here, "commit": "b" * 40}, {**here, "dirty": True}):
        monkeypatch.setattr(r, "code_state", lambda changed=changed: changed)
        children.clear()
        rows = r.rehearse(plan, [str(TINY)], work, ["tiny_nearest"], show=lambda line: None)
        assert children == [row["variant"] for row in first] and not any(row.get("earlier") for row in rows)
    monkeypatch.setattr(r, "code_state", lambda: {**here, "commit": "c" * 40})
    children.clear()
    rows = r.rehearse(plan, [str(TINY)], work, ["tiny_nearest"], show=lambda line: None)
    assert [row["result"] for row in rows] == ["failed: stand-in", "pass"]
    r.rehearse(plan, [str(TINY)], work, ["tiny_nearest"], show=lambda line: None)
    assert children == [row["variant"] for row in first] + [first[0]["variant"]]  # only the failure again


def test_a_config_of_one_epoch_of_one_step_rehearses(tmp_path):
    """A valid config whose data gives one step an epoch, for one epoch: the rehearsal still runs
    its steps, stops at its checkpoint and resumes (it rehearses any valid config)."""
    import numpy as np

    from leaner.planning.rehearse import REHEARSAL_RECIPE, STOP_AT, rehearse_one

    from conftest import nearest_setup

    spec, manifest = nearest_setup(tmp_path, recipe={"epochs": 1, "steps_per_epoch": 1})
    # a large parent, as the suite's process is late in a run: the conditioning job's peak is its
    # own (a child's ru_maxrss would carry the parent's 1.5 GB across fork and exec)
    ballast = np.ones(1_500_000_000 // 8)
    row = rehearse_one(spec, manifest, tmp_path / "work")
    del ballast
    assert row["params"] > 0 and row["checkpoint_mb"] > 0
    assert row["cond_chunk"] >= 1 and 0 < row["cond_peak_mb"] <= row["cond_mem_mb"]
    metrics = json.loads((tmp_path / "work" / spec["study"] / spec["variant"] / "metrics.json").read_text())
    assert metrics["steps"] == REHEARSAL_RECIPE["max_steps"] > STOP_AT and metrics["resumed_at"] == [STOP_AT]


def test_a_conditioning_job_over_its_mem_mb_fails_the_rehearsal(tmp_path, monkeypatch):
    """The conditioning job runs as the workflow runs it and its peak RSS is held to its mem_mb:
    with a mem_mb below what it takes (as when the probe's chunk was left out of it), the
    architecture fails with the line that says so."""
    import leaner.models.memory
    from leaner.planning.rehearse import rehearse_one

    from conftest import nearest_setup

    monkeypatch.setattr(leaner.models.memory, "conditioning_mem_mb", lambda model, cond, on_cpu=True: 300)
    spec, manifest = nearest_setup(tmp_path, recipe={"epochs": 1, "steps_per_epoch": 1})
    with pytest.raises(RuntimeError, match=r"the conditioning job \(chunks of \d+\) peaked at \d+ MB, over the 300 MB"):
        rehearse_one(spec, manifest, tmp_path / "work")
