"""The default study (config.yaml) end to end, as `make study` runs it: the README's findings
table must be what this run writes (verdicts exactly, every number within the margin that
protects its verdict), and every variant's conditioning.csv must agree with an independent float64
recomputation. This is the re-run on another machine that the README's findings have to survive."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, snakemake
from reference_kappa import agrees, reference_kappas

pytestmark = [pytest.mark.workflow, pytest.mark.study]

BEGIN, END = "<!-- findings table: begin -->", "<!-- findings table: end -->"


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("default")
    snakemake(work, "--cores", "2", configfile=REPO / "config.yaml", timeout=1800)
    return work


def readme_table() -> pd.DataFrame:
    text = (REPO / "README.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = []
    for line in block.strip().splitlines()[2:]:
        study, comparison, measure, value, _, verdict = [c.strip() for c in line.strip("|").split("|")]
        nums = [float(x) for x in re.findall(r"[+-]\d+\.\d+", value)]
        rows.append({"study": study.strip("`"), "comparison": comparison, "measure": measure,
                     "delta": nums[0], "lo": nums[1] if len(nums) > 1 else math.nan,
                     "hi": nums[2] if len(nums) > 1 else math.nan, "verdict": verdict})
    return pd.DataFrame(rows)


def test_the_readme_findings_are_what_the_pipeline_writes(default_run):
    from leaner.aggregate import RESOLVE_MARGIN
    from leaner.overview import headline_markdown

    written = pd.read_csv(default_run / "results" / "tables" / "all_studies-headline.csv",
                          keep_default_na=False, na_values=[""])  # the verdict "n/a" is a word
    key = ["study", "comparison"]
    ours = readme_table().set_index(key)
    written = written.set_index(key)
    assert sorted(ours.index) == sorted(written.index), headline_markdown(written.reset_index())
    ours = ours.loc[written.index].reset_index()
    written = written.reset_index()
    assert list(ours["verdict"]) == list(written["verdict"]), headline_markdown(written)
    for (_, r), (_, w) in zip(ours.iterrows(), written.iterrows()):
        # a number may move between machines by no more than the margin that protects its verdict
        # (at least 0.01); single-seed rows carry no verdict: 0.03 (one ListOps example is 0.002)
        tol = 0.03 if math.isnan(w["lo"]) else max(0.01, RESOLVE_MARGIN * (w["hi"] - w["lo"]) / 2)
        for col in ("delta", "lo", "hi"):
            if not math.isnan(w[col]):
                assert abs(r[col] - w[col]) <= tol, (r["comparison"], col, r[col], w[col])
    assert not (written["verdict"] == "unresolved").all()


def test_every_variant_agrees_with_an_independent_float64_recomputation(default_run):
    from leaner.conditioning import singular_kappa
    from leaner.io import read_json
    from leaner.models import build_model
    from leaner.tasks import make_task
    from leaner.train import load_weights

    checked = 0
    for metrics_path in sorted((default_run / "results").glob("*/*/metrics.json")):
        m = read_json(metrics_path)
        spec, folder = m["spec"], metrics_path.parent
        cond = pd.read_csv(folder / "conditioning.csv")
        task = make_task(spec, str(default_run / "results" / "data" / spec["dataset"] / "manifest.json"),
                         torch.device("cpu"))
        n = spec["conditioning"]["samples"]
        probe = task.probe_inputs(n)
        lengths = task.probe_lengths(n) if hasattr(task, "probe_lengths") else None
        pad = 0 if spec["model"].get("arch") == "sequence_classifier" else None
        for ckpt, path in (("init", "init.safetensors"), ("final", "model.safetensors")):
            model = build_model(spec["model"])
            load_weights(model, folder / path)
            ref = reference_kappas(model, probe, lengths, pad)
            for layer, ks in ref.items():
                row = cond[(cond["checkpoint"] == ckpt) & (cond["layer"] == layer + 1)
                           & (cond["matrix"] == "heads_concat")].iloc[0]
                median = float(np.sort(ks)[(len(ks) - 1) // 2])
                limit = singular_kappa(int(row["tokens"]), int(row["cols"]))
                assert agrees(float(row["kappa_median"]), median, limit), (folder.name, ckpt, layer, row["kappa_median"], median)
                checked += 1
    assert checked > 100
