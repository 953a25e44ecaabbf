"""A task is added in one place: a record in the task catalogue and its training class in one
module. Here a toy task (digit parity: is the digit odd?) lives in a module of the test's own and
one record put into the catalogue, and it runs through every stage: config expansion, training,
summary.csv, its tables and figures."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import TINY

TOY_MODULE = '''
from leaner.tasks.base import Task, classification_measure, evaluation_sums
from leaner.tasks.image import ImageClassification


class DigitParity(ImageClassification):
    """Digits -> odd or even: the digits data with labels y % 2."""

    name = "digit_parity"

    def loss(self, model, batch):
        x, y = batch
        return super().loss(model, (x, y % 2))

    def evaluate(self, model, autocast):
        batches = ((x, y % 2) for x, y in (self._to_device(b, train=False)
                                           for b in self.splits.eval.eval_batches(self.eval_batch_size)))
        s = evaluation_sums(model, batches, autocast, classification_measure)
        return {"eval_loss": s["loss"] / s["n"], "eval_acc": s["correct"] / s["n"]}
'''


def _parity_model(given: dict, ds: dict, problem) -> dict:
    from leaner.tasks import VIT_DEFAULTS

    return {"arch": "vit", **VIT_DEFAULTS, **given, "img_size": ds["img_size"], "in_chans": ds["in_chans"],
            "num_classes": 2}


@pytest.fixture
def toy_task(tmp_path, monkeypatch):
    from leaner.tasks import CATALOG, TaskInfo

    (tmp_path / "toy_task.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    info = TaskInfo("digit_parity", "P1", "arch", ("digits",), ("patch_size",), _parity_model,
                    metric=("eval_acc", "max"), train_metric=("eval_acc", "max"),
                    figures=("accuracy_vs_heads", "kappa_vs_heads"), tables=("by_config", "lean_vs_baseline"),
                    trainer="toy_task:DigitParity")
    monkeypatch.setitem(CATALOG, "digit_parity", info)
    return info


def test_a_task_added_in_the_catalogue_runs_through_every_stage(tmp_path, toy_task, digits_manifest):
    import yaml

    from leaner.analysis.study_figures import write_study_figures
    from leaner.analysis.study_tables import write_study_tables
    from leaner.analysis.summary import write_summary
    from leaner.conditioning import write_conditioning
    from leaner.plan import build_plan
    from leaner.train import train

    config = yaml.safe_load(TINY.read_text())
    config["studies"] = {"parity": {
        "task": "digit_parity", "dataset": "digits", "model": {"patch_size": 2},
        "recipe": {"epochs": 10, "batch_size": 64, "lr": 5.0e-3},
        "conditioning": {"samples": 16, "jacobian_samples": 0},
        "grid": {"protocol": ["fixed_width"], "width": [16], "depth": [1, 2], "heads": [1, 2], "mlp_ratio": [2],
                 "seeds": [0]}}}
    plan = build_plan(config)
    study = plan.studies["parity"]
    assert len(study.variants) == 4
    metrics_paths, cond_paths = [], []
    for vid, variant in study.variants.items():
        out = tmp_path / "results" / "parity" / vid
        m = train(variant.spec(), str(digits_manifest), out, progress=False)
        assert m["status"] == "ok" and m["primary_metric"] == "eval_acc"
        assert m["final"]["eval_acc"] > 0.6  # parity is learnable: well above chance after ten epochs
        write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                           str(digits_manifest), str(out / "conditioning.csv"), device="cpu")
        metrics_paths.append(str(out / "metrics.json"))
        cond_paths.append(str(out / "conditioning.csv"))
    summary_csv = tmp_path / "results" / "parity" / "summary.csv"
    frame = write_summary("parity", metrics_paths, cond_paths, study.protocol_map(), str(summary_csv))
    assert set(frame["task"]) == {"digit_parity"} and frame["error"].between(0, 0.4).all()
    tables = write_study_tables(str(summary_csv), "parity", {}, str(tmp_path / "tables"))
    assert {p.name for p in tables} >= {"parity-by_config.csv", "parity-lean_vs_baseline.csv"}
    assert len(pd.read_csv(tmp_path / "tables" / "parity-by_config.csv")) == 4
    figures = write_study_figures(str(summary_csv), "parity", str(tmp_path / "figures"))
    assert {p.name for p in figures} == {"parity-accuracy_vs_heads.png", "parity-accuracy_vs_heads.pdf",
                                         "parity-kappa_vs_heads.png", "parity-kappa_vs_heads.pdf"}
    with open(metrics_paths[0]) as fh:
        assert json.load(fh)["spec"]["task"] == "digit_parity"


def test_an_unknown_task_is_refused_with_the_catalogue_names(toy_task):
    from leaner.tasks import make_task

    with pytest.raises(ValueError, match="unknown task 'nope' .*digit_parity"):
        make_task({"task": "nope"}, "", None)
