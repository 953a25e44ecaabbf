"""A run's spec is typed once, at the door (`leaner train`, `train()`, `make_task`, a cost job), and
handed down typed: no stage re-reads the model config or the recipe from the JSON."""

from __future__ import annotations

import ast
import json
import subprocess

import pytest

from leaner.runspec import RunSpec
from leaner.workflow.plan import load_plan

from conftest import BIN, REPO, TINY, small_spec

pytestmark = pytest.mark.fast

PACKAGE = REPO / "src" / "leaner"


def test_a_planned_spec_reads_back_typed_with_its_bytes_kept():
    plan = load_plan(TINY)
    for study in plan.studies.values():
        for variant in study.variants.values():
            spec = RunSpec.of(variant.spec())
            assert spec.model == variant.model and spec.recipe == variant.recipe
            assert (spec.study, spec.variant, spec.seed, spec.task) == (study.name, variant.id, variant.seed,
                                                                        study.task)
            assert spec.json == json.dumps(variant.spec(), sort_keys=True)  # what resume and records match
            assert RunSpec.of(spec) is spec


@pytest.mark.parametrize("change, said", [
    (lambda s: s.pop("seed"), "run spec: missing 'seed'"),
    (lambda s: s.update(sede=1), "run spec: 'sede' is not a key of it"),
    (lambda s: s["model"].update(arch="resnet"), "model.arch: unknown architecture 'resnet'"),
    (lambda s: s["recipe"].update(lrr=1), "recipe.lrr: not a recipe key"),
])
def test_a_bad_spec_is_one_line_naming_what_is_wrong(change, said):
    spec = small_spec()
    change(spec)
    with pytest.raises(ValueError) as err:
        RunSpec.of(spec)
    assert str(err.value).startswith(said) and "\n" not in str(err.value)


def test_a_typed_spec_is_not_read_as_a_dict():
    with pytest.raises(TypeError, match=r"read spec\.recipe, not spec\['recipe'\]"):
        RunSpec.of(small_spec())["recipe"]


def test_leaner_train_refuses_a_bad_spec_at_its_door(tmp_path, digits_manifest):
    spec = {**small_spec(), "recipie": {}}
    done = subprocess.run([str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data", str(digits_manifest),
                           "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "leaner train: error: run spec: 'recipie' is not a key of it (keys: study, variant")
    assert not (tmp_path / "run").exists()


def _calls(path, names: set[str]) -> list[str]:
    """`Recipe.of(...)` and `model_config(...)` calls in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = (f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    else getattr(f, "id", None))
            if name in names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    return found


def test_no_stage_below_the_door_types_the_spec_again():
    """Training, tasks, data, measurement and pricing read RunSpec's fields: none calls Recipe.of or
    model_config (the plan, which builds specs, and runspec.py itself do)."""
    below = [p for d in ("training", "tasks", "data", "measure") for p in (PACKAGE / d).rglob("*.py")]
    below.append(PACKAGE / "planning" / "cost.py")
    found = [c for p in below for c in _calls(p, {"Recipe.of", "model_config"})]
    assert found == [], found
    # the check sees a call where there is one
    assert _calls(PACKAGE / "runspec.py", {"Recipe.of", "model_config"})
