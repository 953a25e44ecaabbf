"""A task is added in one place: a record in the task catalogue and its training class in one
module, registered there under the task's name. Here a toy task (digit parity: is the digit odd?)
lives in a module of the test's own and its record is added through the catalogue's door, and it
runs through every stage: config expansion, training, summary.csv, its tables and figures. A toy
dataset kind and the registry itself follow. Each is added inside `leaner.extend.scoped()`, which
leaves the catalogues as they were. (A figure or a table is no record: tests/test_report.py.)"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from conftest import REPO, TINY, small_spec

pytestmark = pytest.mark.fast

TOY_MODULE = '''
from leaner.tasks import TaskInfo
from leaner.tasks.base import classification_measure, evaluation_sums, trains
from leaner.tasks.image import ImageClassification


def parity_model(given: dict, ds: dict, problem) -> dict:
    return {"arch": "vit", **given, "img_size": ds["img_size"], "in_chans": ds["in_chans"], "num_classes": 2}


@trains(TaskInfo("digit_parity", "P1", "arch", ("digits",), ("patch_size", "qkv_bias", "drop_path_rate", "global_pool"),
                 parity_model, metric=("eval_acc", "max"), train_metric=("eval_acc", "max")))
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


@pytest.fixture
def scope():
    from leaner.extend import scoped

    with scoped():
        yield


@pytest.fixture
def toy_task(tmp_path, monkeypatch, scope):
    """The toy task: its record and training class, one definition in a module of the test's own."""
    import importlib
    import sys

    from leaner.tasks import CATALOG

    (tmp_path / "toy_task.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_task", raising=False)
    importlib.import_module("toy_task")  # adds its record and registers DigitParity under its name
    return CATALOG["digit_parity"]


def test_a_task_added_in_the_catalogue_runs_through_every_stage(tmp_path, toy_task, digits_manifest):
    import yaml

    from leaner.analysis.report import StudyData, write_study
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
    metrics_paths, cond_paths, histories = [], [], []
    for vid, variant in study.variants.items():
        out = tmp_path / "results" / "parity" / vid
        m = train(variant.spec(), str(digits_manifest), out, progress=False)
        assert m["status"] == "ok" and m["primary_metric"] == "eval_acc"
        assert m["final"]["eval_acc"] > 0.6  # parity is learnable: well above chance after ten epochs
        write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                           str(digits_manifest), str(out / "conditioning.csv"), device="cpu")
        metrics_paths.append(str(out / "metrics.json"))
        cond_paths.append(str(out / "conditioning.csv"))
        histories.append(str(out / "history.csv"))
    summary_csv, kappa_csv = (tmp_path / "results" / "parity" / name for name in ("summary.csv", "kappa.csv"))
    frame = write_summary("parity", metrics_paths, cond_paths, study.protocol_map(), str(summary_csv),
                          kappa_csv=str(kappa_csv))
    assert set(frame["task"]) == {"digit_parity"} and frame["error"].between(0, 0.4).all()
    # its outputs: a P1 task scored by accuracy, where its grid shows them (one MLP ratio: no figure against it)
    declared = study.declared()
    data = StudyData("parity", frame, declared["baseline"], declared["checks"], declared["claims"],
                     pd.read_csv(kappa_csv), histories, declared["points"])
    captions = write_study(data, tmp_path / "figures", tmp_path / "tables")
    figure_names = ("kappa_vs_heads", "accuracy_vs_heads", "kappa_through_training", "training_curves")
    assert list(captions["figures"]) == [f"parity-{name}" for name in figure_names]
    assert list(captions["tables"]) == [f"parity-{name}" for name in ("by_config", "lean_vs_baseline",
                                                                      "paper_comparison", "kappa_within",
                                                                      "theorem_vs_real")]
    assert len(pd.read_csv(tmp_path / "tables" / "parity-by_config.csv")) == 4
    assert {p.name for p in (tmp_path / "figures").iterdir()} == {f"parity-{name}.{ext}" for name in figure_names
                                                                    for ext in ("png", "pdf")}
    with open(metrics_paths[0]) as fh:
        assert json.load(fh)["spec"]["task"] == "digit_parity"


def test_an_unknown_task_is_refused_with_the_catalogue_names(toy_task):
    from leaner.tasks.trainers import make_task

    with pytest.raises(ValueError, match="unknown task 'nope' .*digit_parity"):
        make_task({**small_spec(), "task": "nope"}, "", None)


# A dataset kind is added in one place too: one record carrying its preparation, opening, rehearsal
# sample and training rows (here the test's own functions: bright or dark 4x4 noise images).

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
def toy_kind(scope):
    from leaner.data.kinds import DatasetKind, add_kind, shared
    from leaner.tasks import CATALOG, TaskInfo, add_task
    from leaner.tasks.image import ImageClassification
    from leaner.tasks.trainers import TRAINERS

    kind = add_kind(DatasetKind("bright", {"img_size": 4, "in_chans": 1, "num_classes": 2, "seed": 0},
                                {"runtime": 5, "mem_mb": 1000, "threads": 1, "local": False}, required=("n_train",),
                                check=_even, prepare=_prepare_bright, open=_open_bright, sample=_bright_sample,
                                rows=_bright_rows, about="bright or dark noise images.",
                                keys=shared("n_train", "img_size", "in_chans", "num_classes", "seed")))
    # a task that reads it: the image task's record and class, for this kind (the catalogue's own is left alone)
    image = CATALOG["image_classification"]
    add_task(TaskInfo("bright_images", "P1", "arch", ("bright",), image.model_keys, image.model_base,
                      metric=image.metric, train_metric=image.train_metric))
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
    # its keys are the schema's: a key it reads that another kind defines otherwise is refused
    from leaner.data.kinds import add_kind, dataset_schema
    from leaner.extend import scoped

    with scoped():
        add_kind(dataclasses.replace(toy_kind, name="dim", keys={**toy_kind.keys, "seed": {"type": "string"}}))
        with pytest.raises(ValueError, match="dataset key 'seed': defined differently by kinds listops, text, "
                                             "bright, dim"):
            dataset_schema()
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


def test_the_scope_leaves_the_catalogues_as_they_were():
    from leaner.extend import load_builtins, scoped
    from leaner.tasks import CATALOG, TaskInfo, add_task

    load_builtins()  # (scoped does too: what it loads stays)
    before = list(CATALOG)
    with scoped():
        add_task(TaskInfo("nothing", "P1", "arch", ("digits",), (), _parity_model, ("eval_acc", "max"),
                          ("eval_acc", "max")))
        with pytest.raises(ValueError, match="task 'nothing': in the catalogue already"):
            add_task(CATALOG["nothing"])
        assert "nothing" in CATALOG
    assert list(CATALOG) == before


def test_leaner_schema_writes_the_schema_where_stale_and_its_check_only_says_so(tmp_path):
    from leaner.cli import main
    from leaner.workflow.config import SCHEMA_JSON, write_schema

    with pytest.raises(ValueError, match="not a source tree of this project"):
        write_schema(tmp_path)
    (tmp_path / "schemas").mkdir()
    assert write_schema(tmp_path, check=True) == str(tmp_path / SCHEMA_JSON)
    assert not (tmp_path / SCHEMA_JSON).exists()  # a check writes nothing
    assert write_schema(tmp_path) == str(tmp_path / SCHEMA_JSON) and write_schema(tmp_path, check=True) == ""
    assert (tmp_path / SCHEMA_JSON).read_text() == (REPO / SCHEMA_JSON).read_text()
    assert main(["schema", "--check"]) == 0  # this checkout's is current


def test_every_record_has_its_code_registered():
    from leaner.analysis.papers import PAPER_ROWS
    from leaner.extend import load_builtins
    from leaner.tasks import CATALOG, trainer_names
    from leaner.tasks.trainers import TRAINERS

    load_builtins()
    assert set(TRAINERS.code) == set(trainer_names())
    assert set(PAPER_ROWS.code) <= set(CATALOG)
    # a dataset kind carries its code: one without its preparation is refused where it is defined
    from leaner.data.kinds import DatasetKind

    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'prepare'"):
        DatasetKind("half", {}, {}, open=_open_bright, sample=_bright_sample)


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
