"""A task is added in one place: a record in the task catalogue and its training class in one
module, registered there under the task's name. Here a toy task (digit parity: is the digit odd?)
lives in a module of the test's own and one record put into the catalogue, and it runs through
every stage: config expansion, training, summary.csv, its tables and figures. A toy dataset kind,
a toy figure and the registry itself follow."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import REPO, TINY, small_spec

TOY_MODULE = '''
from leaner.tasks.base import Task, classification_measure, evaluation_sums, trains
from leaner.tasks.image import ImageClassification


@trains("digit_parity")
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
    return {"arch": "vit", **given, "img_size": ds["img_size"], "in_chans": ds["in_chans"], "num_classes": 2}


def _fresh(monkeypatch, *registries) -> None:
    """Registrations made during the test are undone after it."""
    for registry in registries:
        monkeypatch.setattr(registry, "code", dict(registry.code))


@pytest.fixture
def toy_task(tmp_path, monkeypatch):
    import importlib
    import sys

    from leaner.tasks import CATALOG, TaskInfo
    from leaner.tasks.trainers import TRAINERS

    _fresh(monkeypatch, TRAINERS)
    model_keys = ("patch_size", "qkv_bias", "drop_path_rate", "global_pool")
    info = TaskInfo("digit_parity", "P1", "arch", ("digits",), model_keys, _parity_model,
                    metric=("eval_acc", "max"), train_metric=("eval_acc", "max"),
                    figures=("accuracy_vs_heads", "kappa_vs_heads"), tables=("by_config", "lean_vs_baseline"))
    monkeypatch.setitem(CATALOG, "digit_parity", info)
    (tmp_path / "toy_task.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_task", raising=False)
    importlib.import_module("toy_task")  # registers DigitParity under its task's name
    return info


def test_a_task_added_in_the_catalogue_runs_through_every_stage(tmp_path, toy_task, digits_manifest):
    import yaml

    from leaner.analysis.study_figures import write_study_figures
    from leaner.analysis.study_tables import write_study_tables
    from leaner.analysis.summary import write_summary
    from leaner.measure.conditioning import write_conditioning
    from leaner.training.train import train
    from leaner.workflow.plan import build_plan

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
    figure_names, table_names = study.outputs()
    tables = write_study_tables(str(summary_csv), "parity", {}, str(tmp_path / "tables"), table_names)
    assert {p.name for p in tables} >= {"parity-by_config.csv", "parity-lean_vs_baseline.csv"}
    assert len(pd.read_csv(tmp_path / "tables" / "parity-by_config.csv")) == 4
    figures = write_study_figures(str(summary_csv), "parity", str(tmp_path / "figures"), figure_names)
    assert {p.name for p in figures} == {"parity-accuracy_vs_heads.png", "parity-accuracy_vs_heads.pdf",
                                         "parity-kappa_vs_heads.png", "parity-kappa_vs_heads.pdf"}
    with open(metrics_paths[0]) as fh:
        assert json.load(fh)["spec"]["task"] == "digit_parity"


def test_an_unknown_task_is_refused_with_the_catalogue_names(toy_task):
    from leaner.tasks.trainers import make_task

    with pytest.raises(ValueError, match="unknown task 'nope' .*digit_parity"):
        make_task({**small_spec(), "task": "nope"}, "", None)


# A dataset kind is added in one place too: one record in the kind catalogue, and its preparation,
# opening, rehearsal sample and training rows registered under its name (here the test's own
# functions: bright or dark 4x4 noise images).

def _prepare_bright(name: str, spec: dict, out_manifest: str) -> dict:
    import numpy as np

    from leaner.io import write_json

    rng = np.random.default_rng(spec["seed"])
    labels = rng.integers(0, 2, spec["n_train"])
    images = rng.normal(size=(spec["n_train"], spec["in_chans"], spec["img_size"], spec["img_size"]))
    images += np.where(labels, 1.0, -1.0)[:, None, None, None]
    path = out_manifest.replace("manifest.json", "bright.npz")
    np.savez(path, x=images.astype(np.float32), y=labels)
    manifest = {"dataset": name, "kind": "bright", "num_classes": 2, "arrays": "bright.npz"}
    write_json(out_manifest, manifest)
    return manifest


def _open_bright(manifest_path: str, spec: dict, device):
    import numpy as np
    import torch

    from leaner.data import InMemorySplit, Splits
    from leaner.io import read_json

    with np.load(manifest_path.replace("manifest.json", "bright.npz")) as z:
        x, y = torch.from_numpy(z["x"]), torch.from_numpy(z["y"])
    half = len(y) // 2
    return Splits(InMemorySplit(x[:half], y[:half]), InMemorySplit(x[half:], y[half:]), read_json(manifest_path))


def _even(name: str, given: dict, out: dict, base_dir) -> list[str]:
    return [] if out["n_train"] % 2 == 0 else [f"config error: datasets.{name}.n_train: {out['n_train']} is odd "
                                                f"(allowed: an even number, halved into train and eval)"]


def _bright_sample(name: str, entry: dict, folder) -> dict:
    return {**entry, "n_train": 16}


def _bright_rows(entry: dict, manifest: dict | None, spec: dict) -> int:
    return entry["n_train"] // 2  # the other half is evaluated on


@pytest.fixture
def toy_kind(monkeypatch):
    from leaner.data import builtin_kinds
    from leaner.data.kinds import KINDS, OPEN, PREPARE, ROWS, SAMPLE, DatasetKind
    from leaner.tasks import CATALOG, TaskInfo
    from leaner.tasks.image import ImageClassification
    from leaner.tasks.trainers import TRAINERS

    builtin_kinds()
    _fresh(monkeypatch, PREPARE, OPEN, SAMPLE, ROWS, TRAINERS)
    kind = DatasetKind("bright", {"img_size": 4, "in_chans": 1, "num_classes": 2, "seed": 0},
                       {"runtime": 5, "mem_mb": 1000, "threads": 1, "local": False}, required=("n_train",),
                       check=_even)
    monkeypatch.setitem(KINDS, "bright", kind)
    PREPARE.register("bright")(_prepare_bright)
    OPEN.register("bright")(_open_bright)
    SAMPLE.register("bright")(_bright_sample)
    ROWS.register("bright")(_bright_rows)
    # a task that reads it: the image task's record and class, for this kind (the catalogue's own is left alone)
    image = CATALOG["image_classification"]
    monkeypatch.setitem(CATALOG, "bright_images", TaskInfo(
        "bright_images", "P1", "arch", ("bright",), image.model_keys, image.model_base, metric=image.metric,
        train_metric=image.train_metric, figures=("accuracy_vs_heads",), tables=("by_config",)))
    TRAINERS.register("bright_images")(ImageClassification)
    return kind


def test_a_dataset_kind_added_in_the_catalogue_is_checked_prepared_trained_on_priced_and_rehearsed(
        tmp_path, toy_kind, monkeypatch):
    import yaml

    from leaner.data import prepare
    from leaner.training.train import train
    from leaner.workflow.config import ConfigError
    from leaner.workflow.plan import build_plan

    config = yaml.safe_load(TINY.read_text())
    study = {"task": "bright_images", "dataset": "noise", "model": {"patch_size": 2},
             "recipe": {"epochs": 3, "batch_size": 32, "lr": 5.0e-3},
             "grid": {"protocol": ["fixed_width"], "width": [8], "depth": [1], "heads": [2], "mlp_ratio": [2],
                      "seeds": [0]}}
    config["studies"] = {"toy": study}
    for entry, error in (({"kind": "bright"}, "datasets.noise.n_train: required for kind bright"),
                         ({"kind": "bright", "n_train": 7}, "datasets.noise.n_train: 7 is odd"),
                         ({"kind": "bright", "n_train": 8, "decode": "pil"},
                          "datasets.noise.decode: not used by kind bright"),
                         ({"kind": "brite", "n_train": 8}, "datasets.noise.kind: .*one of .*bright")):
        config["datasets"] = {"noise": entry}
        with pytest.raises(ConfigError, match=error):
            build_plan(config)
    config["datasets"] = {"noise": {"kind": "bright", "n_train": 512, "img_size": 8}}
    plan = build_plan(config)
    assert plan.datasets["noise"] == {"kind": "bright", "img_size": 8, "in_chans": 1, "num_classes": 2, "seed": 0,
                                      "n_train": 512, "prepare": {"runtime": 5, "mem_mb": 1000, "threads": 1,
                                                                  "local": False}}
    manifest = tmp_path / "data" / "noise" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    assert prepare("noise", plan.datasets["noise"], str(manifest))["kind"] == "bright"
    (variant,) = plan.studies["toy"].variants.values()
    metrics = train(variant.spec(), str(manifest), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["final"]["eval_acc"] > 0.9  # brightness is easy to read

    # priced: its steps from the rows its kind counts (256 at batch 32, three epochs), before it is prepared
    from leaner.planning.cards import card
    from leaner.planning.cost import plan_cost

    (cost,) = plan_cost(plan, card("h100"), root=tmp_path / "elsewhere")
    assert [row["steps"] for row in cost.rows] == [3 * 256 // 32] and cost.rows[0]["gpu_hours"] > 0

    # rehearsed: its small sample prepared, trained to a preemption, resumed, and its kappa measured (the
    # conditioning job in this process, where the toy kind is registered, instead of a child's)
    from leaner.cli import main
    from leaner.planning import rehearse

    def conditioning_here(out, manifest, mem_mb):
        assert main(["conditioning", "--metrics", str(out / "metrics.json"), "--init", str(out / "init.safetensors"),
                     "--final", str(out / "model.safetensors"), "--data", str(manifest), "--out",
                     str(out / "conditioning.csv"), "--device", "cpu", "--mem-mb", str(mem_mb),
                     "--numerics", "native"]) == 0  # torch is loaded here already: nothing to pin
        return 0.0

    monkeypatch.setattr(rehearse, "conditioning_job", conditioning_here)
    sample = rehearse.synthetic_dataset("noise", plan.datasets["noise"], tmp_path / "rehearsal" / "data")
    assert json.loads(sample.read_text())["kind"] == "bright"
    row = rehearse.rehearse_one(variant.spec(), sample, tmp_path / "rehearsal")
    assert row["params"] == metrics["params"]["total"] and row["kappa_methods"]


# A figure is added in one place too: one record in the output catalogue (what it needs from the
# grid, its caption), and the function that draws it registered under its name.

def _depth_histogram(data, prefix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.hist(data.summary["depth"])
    ax.set_xlabel("depth")
    ax.set_title(data.study)
    paths = [prefix.with_suffix(".png"), prefix.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths


def test_a_figure_added_in_the_catalogue_is_listed_where_the_grid_shows_it_and_drawn(tmp_path, toy_task,
                                                                                     monkeypatch):
    import dataclasses

    from leaner.analysis.study_figures import FIGURE_CODE, draws, write_study_figures
    from leaner.outputs import FIGURES, Has, Shown, caption, study_outputs
    from leaner.tasks import CATALOG

    _fresh(monkeypatch, FIGURE_CODE)
    (tmp_path / "depth_histogram.rst").write_text("How deep the variants are.\n")
    record = Shown("depth_histogram", (Has((("depth", 3),)),), str(tmp_path / "depth_histogram.rst"))
    monkeypatch.setitem(FIGURES, "depth_histogram", record)
    draws("depth_histogram")(_depth_histogram)
    monkeypatch.setitem(CATALOG, "digit_parity", dataclasses.replace(toy_task, figures=("depth_histogram",)))
    shallow, deep = [{"depth": 1, "heads": 1}, {"depth": 2, "heads": 1}], [{"depth": 3, "heads": 1}]
    assert study_outputs("digit_parity", shallow)[0] == ()  # its requirement unmet: neither made nor listed
    assert study_outputs("digit_parity", shallow + deep)[0] == ("depth_histogram",)
    assert caption("figures", "depth_histogram") == str(tmp_path / "depth_histogram.rst")
    summary = tmp_path / "summary.csv"
    summary.write_text("task,depth\ndigit_parity,1\ndigit_parity,3\n")
    paths = write_study_figures(str(summary), "parity", str(tmp_path), ["depth_histogram"])
    assert [p.name for p in paths] == ["parity-depth_histogram.png", "parity-depth_histogram.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_every_record_has_its_code_registered_and_every_figure_and_table_its_caption():
    from leaner.analysis.papers import PAPER_ROWS
    from leaner.analysis.study_figures import FIGURE_CODE
    from leaner.analysis.study_tables import TABLE_CODE
    from leaner.data import builtin_kinds
    from leaner.data.kinds import KINDS, OPEN, PREPARE, ROWS, SAMPLE
    from leaner.outputs import CLAIMS_OUTPUTS, FIGURES, TABLES
    from leaner.tasks import CATALOG, trainer_names
    from leaner.tasks.trainers import TRAINERS

    rules = REPO / "rules"
    for (kind, registry, code), claims in zip((("figures", FIGURES, FIGURE_CODE), ("tables", TABLES, TABLE_CODE)),
                                              CLAIMS_OUTPUTS):
        named = {n for info in CATALOG.values() for n in getattr(info, kind)} | {claims}
        assert named <= set(registry), (kind, named - set(registry))
        assert set(code.code) == set(registry), kind
        for name, record in registry.items():
            assert record.name == name and (rules / record.caption).resolve().is_file(), record.caption
    assert set(TRAINERS.code) == set(trainer_names())
    assert set(PAPER_ROWS.code) <= set(CATALOG)
    builtin_kinds()
    for registry in (PREPARE, OPEN, SAMPLE):
        assert set(registry.code) == set(KINDS), registry.what
    assert set(ROWS.code) <= set(KINDS)


def test_the_registry_refuses_a_name_without_a_record_a_second_registration_and_names_what_there_is():
    from leaner.registry import Registry

    records = ["a", "b"]
    registry = Registry("toy", lambda: records)

    @registry.register("a")
    def first():
        return 1

    assert registry["a"] is first and "a" in registry and "b" not in registry
    with pytest.raises(ValueError, match="toy 'c' of .*: no record of that name \\(allowed: a, b\\)"):
        registry.register("c")(first)
    with pytest.raises(ValueError, match="toy 'a': registered twice"):
        registry.register("a")(lambda: 2)
    with pytest.raises(ValueError, match="toy 'b': none registered \\(allowed: a\\)"):
        registry["b"]
