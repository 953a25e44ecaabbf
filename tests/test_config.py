"""Config validation and variant expansion."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest
import yaml

from leaner.grid import variant_id
from leaner.workflow.config import ConfigError, load_yaml
from leaner.workflow.plan import build_plan, load_plan

from conftest import BIN, REPO, TINY, image_folder, run

pytestmark = pytest.mark.fast


def tiny() -> dict:
    return load_yaml(TINY)


def test_tiny_expands_to_readable_ids_and_dedups_shared_models():
    plan = build_plan(tiny())
    study = plan.studies["tiny"]
    # fixed_width: 2 depths x 2 heads (seed 0) + 1 depth x 2 heads (seed 1);
    # fixed_head_dim h=2, d=8 is D=16 again: shared
    assert len(study.variants) == 6
    shared = study.variants["L1-H2-D16-hd8-mlp32-s0"]
    assert shared.protocols == ("fixed_width", "fixed_head_dim")
    assert study.variants["L2-H1-D16-hd16-mlp32-s0"].protocols == ("fixed_width",)
    spec = shared.spec()
    assert spec["model"]["width"] == 16 and spec["model"]["head_dim"] == 8 and spec["model"]["mlp_hidden"] == 32
    assert spec["model"]["num_classes"] == 10 and spec["model"]["img_size"] == 8 and spec["model"]["in_chans"] == 1
    assert "protocols" not in spec  # adding a protocol must not retrain a model it shares


def test_protocols_give_the_right_shapes():
    cfg = tiny()
    cfg["studies"]["tiny"]["grid"] = {"protocol": ["fixed_width", "fixed_head_dim"], "width": [32],
                                      "head_dim": [4], "depth": [1], "heads": [1, 2, 8],
                                      "mlp_hidden": [48], "seeds": [0]}
    ids = set(build_plan(cfg).studies["tiny"].variants)
    assert ids == {
        "L1-H1-D32-hd32-mlp48-s0", "L1-H2-D32-hd16-mlp48-s0", "L1-H8-D32-hd4-mlp48-s0",  # fixed width
        "L1-H1-D4-hd4-mlp48-s0", "L1-H2-D8-hd4-mlp48-s0",  # fixed head dim (h=8, d=4 is D=32: shared)
    }


def test_variant_id_format():
    assert variant_id(8, 16, 1024, 64, 1536, 0) == "L8-H16-D1024-hd64-mlp1536-s0"


def test_override_changes_only_matching_variant_specs():
    base = build_plan(tiny()).studies["tiny"].variants
    cfg = tiny()
    cfg["studies"]["tiny"]["overrides"] = [{"where": {"depth": 2, "heads": 1, "seed": 0}, "recipe": {"lr": 0.02}}]
    changed = build_plan(cfg).studies["tiny"].variants
    diff = [vid for vid in base if base[vid].spec_json() != changed[vid].spec_json()]
    assert diff == ["L2-H1-D16-hd16-mlp32-s0"]
    assert changed[diff[0]].recipe.lr == 0.02


def test_paper_config_dedups_the_baseline_and_has_every_axis():
    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["vit_imagenet"]
    base = study.variants["L12-H12-D768-hd64-mlp3072-s0"]
    assert base.protocols == ("fixed_width", "fixed_head_dim")
    assert base.expect_params == {"params": 86_570_000, "tolerance": 500_000}
    depths = {v.model.depth for v in study.variants.values()}
    heads = {v.model.heads for v in study.variants.values()}
    mlps = {v.model.mlp_hidden / v.model.width for v in study.variants.values()}
    assert depths == {12, 8} and heads == {12, 16, 24, 32} and mlps == {4, 2}
    # 2 depths x 4 heads x 2 protocols x 2 MLP ratios, minus the 2x2 shared h=12 models
    assert len(study.variants) == 2 * 4 * 2 * 2 - 2 * 2
    assert study.resources["gpu"] >= 1
    # P2 trains in fp32 without TF32, as its authors did; the P1 models in bf16
    for name, st in plan.studies.items():
        recipe = next(iter(st.variants.values())).spec()["recipe"]
        want = ("fp32", False) if st.task == "nearest_point" else ("bf16", True)
        assert (recipe["precision"], recipe["tf32"]) == want, name


def test_each_dataset_says_where_and_with_what_it_is_prepared(tmp_path):
    """`prepare`: the kind's defaults, each given key over them; on the submitting host by default
    for data downloaded from the hub only; and none of it in the data rule's params, so changing
    it prepares nothing again."""
    from leaner.workflow.datasets import data_spec

    (tmp_path / "glue" / "cola").mkdir(parents=True)
    cfg = tiny()
    cfg["datasets"].update(
        pictures={"kind": "hub", "name": "uoft-cs/cifar10", "num_classes": 10, "revision": "refs/convert/parquet",
                  "prepare": {"runtime": 600}},
        folder={"kind": "imagefolder", "path": str(image_folder(tmp_path / "imgs")), "num_classes": 3},
        tinystories={"kind": "text", "name": "roneneldan/TinyStories"},
        stories={"kind": "text", "source": "generated"},
        glue={"kind": "glue"},
        glue_files={"kind": "glue", "source": "files", "path": str(tmp_path / "glue")},
        listops={"kind": "listops", "prepare": {"local": True, "threads": 2}})
    datasets = build_plan(cfg).datasets
    assert datasets["pictures"]["prepare"] == {"runtime": 600, "mem_mb": 16000, "threads": 4, "local": True}
    assert datasets["listops"]["prepare"] == {"runtime": 60, "mem_mb": 4000, "threads": 2, "local": True}
    local = {name: ds["prepare"]["local"] for name, ds in datasets.items()}
    assert local == {"digits": False, "pictures": True, "folder": False, "tinystories": True, "stories": False,
                     "glue": True, "glue_files": False, "listops": True, "nearest_point": False}
    assert data_spec(datasets["pictures"]) == {k: v for k, v in datasets["pictures"].items() if k != "prepare"}
    assert "prepare" not in data_spec(datasets["pictures"]) and data_spec(datasets["pictures"])["revision"]
    imagenet = load_plan(REPO / "configs" / "paper.yaml").datasets["imagenet1k"]["prepare"]
    assert imagenet["local"] and imagenet["runtime"] >= 240 and imagenet["mem_mb"] >= 32000 and imagenet["threads"] >= 8


# ----------------------------------------------------------------------------- bad input

def _bad(mutate) -> list[str]:
    cfg = copy.deepcopy(tiny())
    mutate(cfg)
    with pytest.raises(ConfigError) as exc:
        build_plan(cfg)
    return exc.value.problems


FOLDERS: dict[str, str] = {}  # image folders the BAD cases point at (made once, below)


@pytest.fixture(scope="module", autouse=True)
def _image_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    FOLDERS["good"] = str(image_folder(root / "good"))
    FOLDERS["differ"] = str(image_folder(root / "differ", classes=("cat", "dog", "owl", "yak"), splits=("train",)))
    image_folder(root / "differ", classes=("cat", "dog", "emu"), splits=("validation",))
    FOLDERS["empty"] = str(image_folder(root / "empty"))
    for png in (root / "empty" / "train").rglob("*.png"):
        png.rename(png.with_suffix(".txt"))
    (root / "shards").mkdir()
    (root / "shards" / "imagenet1k-train-0000.tar").write_bytes(b"")
    FOLDERS["train_shards"] = str(root / "shards")


def _imagefolder(folder: str, **keys):
    return _set(["datasets", "imgs"],
                lambda: {"kind": "imagefolder", "path": FOLDERS[folder], "num_classes": 3, **keys})


def _set(path, value):
    def mutate(cfg):
        node = cfg
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value() if callable(value) else value
    return mutate


BAD = [
    ("unknown key", _set(["studies", "tiny", "recipe", "learning_rate"], 0.1),
     "studies.tiny.recipe.learning_rate: unknown key (allowed:"),
    ("wrong type", _set(["studies", "tiny", "recipe", "epochs"], "ten"),
     'studies.tiny.recipe.epochs: "ten" is not allowed (allowed: an integer >= 1)'),
    ("heads not dividing the width", _set(["studies", "tiny", "grid", 0, "heads"], [1, 3]),
     "studies.tiny.grid[0].heads: 3 does not divide width 16 under fixed_width "
     "(allowed: divisors of 16: 1, 2, 4, 8, 16)"),
    ("empty grid axis", _set(["studies", "tiny", "grid", 0, "depth"], []),
     "studies.tiny.grid[0].depth: must not be empty"),
    ("empty grid list", _set(["studies", "tiny", "grid"], []),
     "studies.tiny.grid: must not be empty"),
    ("missing dataset path", _set(["datasets", "imgs"], {"kind": "imagefolder", "path": "/nonexistent/imgs",
                                                         "num_classes": 3}),
     "datasets.imgs.path: '/nonexistent/imgs' does not exist"),
    ("missing webdataset folder", _set(["datasets", "imgs"], {"kind": "webdataset", "path": "/nonexistent/wds",
                                                             "num_classes": 3}),
     "datasets.imgs.path: '/nonexistent/wds' does not exist (allowed: a folder of webdataset tar shards)"),
    ("webdataset folder without a split's shards",
     _set(["datasets", "imgs"], lambda: {"kind": "webdataset", "path": FOLDERS["train_shards"], "num_classes": 3}),
     "datasets.imgs.eval_split: no shards '"),
    ("image folder without the split's folder", _imagefolder("good", eval_split="val"),
     "datasets.imgs.eval_split: '"),
    ("image folder without images", _imagefolder("empty"),
     "datasets.imgs.train_split: no images in '"),
    ("image folder whose splits have other classes", _imagefolder("differ"),
     "datasets.imgs.eval_split: its class folders differ from train_split's (only in train: owl, yak; only in "
     "validation: emu)"),
    ("loader workers neither a count nor auto", _set(["studies", "tiny", "recipe", "num_workers"], "many"),
     'studies.tiny.recipe.num_workers: "many" is not allowed (allowed: an integer >= 0 or auto)'),
    ("an image recipe key on P2's task", _set(["studies", "tiny_nearest", "recipe", "repeat_aug"], 3),
     "studies.tiny_nearest.recipe.repeat_aug: not used by task nearest_point (allowed: leave it out; it is for "
     "task image_classification)"),
    ("device decoding of in-memory digits", _set(["datasets", "digits", "decode"], "device"),
     "datasets.digits.decode: not used by kind digits (allowed: leave it out; it is for kind hub, imagefolder, "
     "webdataset)"),
    ("unknown dataset", _set(["studies", "tiny", "dataset"], "mnist"),
     "studies.tiny.dataset: unknown dataset 'mnist' (allowed: digits, nearest_point)"),
    ("negative size", _set(["studies", "tiny", "grid", 0, "width"], [-16]),
     "studies.tiny.grid[0].width[0]: -16 is not allowed (allowed: an integer >= 1)"),
    ("unknown protocol", _set(["studies", "tiny", "grid", 0, "protocol"], ["fixed_depth"]),
     "studies.tiny.grid[0].protocol[0]: \"fixed_depth\" is not allowed "
     "(allowed: one of fixed_width, fixed_head_dim, crossed)"),
    ("reserved study name", lambda c: c["studies"].update(figures=c["studies"].pop("tiny_nearest")),
     "studies.figures: reserved name"),
    ("grid key of another task", _set(["studies", "tiny", "grid", 0, "modules"], [2]),
     "studies.tiny.grid[0].modules: not used by task image_classification"),
    ("dataset of another kind", _set(["studies", "tiny_nearest", "dataset"], "digits"),
     "studies.tiny_nearest.dataset: 'digits' is a digits dataset, task nearest_point needs one of kind nearest_point"),
    ("partition in a study (belongs to the user's profile)",
     _set(["studies", "tiny", "resources", "slurm_partition"], "gpu"),
     "studies.tiny.resources.slurm_partition: unknown key "
     "(allowed: attempts, conditioning_runtime, gpu, gpu_model, jobs_per_gpu, mem_mb, runtime, threads)"),
    ("width missing for fixed_width", lambda c: c["studies"]["tiny"]["grid"][0].pop("width"),
     "studies.tiny.grid[0].width: required by protocol fixed_width"),
    ("zero width", _set(["studies", "tiny", "grid", 0, "width"], [0]),
     "studies.tiny.grid[0].width[0]: 0 is not allowed (allowed: an integer >= 1)"),
    ("negative seed", _set(["studies", "tiny", "grid", 0, "seeds"], [-1]),
     "studies.tiny.grid[0].seeds[0]: -1 is not allowed (allowed: an integer >= 0)"),
    ("duplicate seeds (duplicate variant ids)", _set(["studies", "tiny", "grid", 0, "seeds"], [0, 0]),
     "studies.tiny.grid[0].seeds: [0, 0] repeats a value (allowed: distinct values)"),
    ("duplicate head counts", _set(["studies", "tiny", "grid", 0, "heads"], [2, 2]),
     "studies.tiny.grid[0].heads: [2, 2] repeats a value (allowed: distinct values)"),
    ("unknown task", _set(["studies", "tiny", "task"], "segmentation"),
     'studies.tiny.task: "segmentation" is not allowed (allowed: one of image_classification, nearest_point, '
     "listops, language_model, glue)"),
    ("unknown top-level key", lambda c: c.update(studys={}),
     "config error: studys: unknown key (did you mean 'studies'?) (allowed: datasets"),
    ("missing grid", lambda c: c["studies"]["tiny"].pop("grid"),
     "studies.tiny: give grid or lean, one of them (allowed: "),
    ("zero learning rate", _set(["studies", "tiny", "recipe", "lr"], 0),
     "studies.tiny.recipe.lr: 0 is not allowed (allowed: a number > 0)"),
    ("zero batch size", _set(["studies", "tiny", "recipe", "batch_size"], 0),
     "studies.tiny.recipe.batch_size: 0 is not allowed (allowed: an integer >= 1)"),
    ("warm-up beyond the run", _set(["studies", "tiny", "recipe", "warmup_frac"], 1.5),
     "studies.tiny.recipe.warmup_frac: 1.5 is not allowed (allowed: a number >= 0 < 1)"),
    ("three betas", _set(["studies", "tiny", "recipe", "betas"], [0.9, 0.99, 0.999]),
     "studies.tiny.recipe.betas: [0.9, 0.99, 0.999] is not allowed"),
    ("half precision", _set(["studies", "tiny", "recipe", "precision"], "fp16"),
     'studies.tiny.recipe.precision: "fp16" is not allowed (allowed: one of bf16, fp32)'),
    ("TF32 as a number", _set(["studies", "tiny", "recipe", "tf32"], 2),
     "studies.tiny.recipe.tf32: 2 is not allowed (allowed: "),
    ("unknown schedule", _set(["studies", "tiny", "recipe", "schedule"], "linear"),
     'studies.tiny.recipe.schedule: "linear" is not allowed (allowed: one of cosine, epoch_cosine)'),
    ("mlp_ratio and mlp_hidden both", _set(["studies", "tiny", "grid", 0, "mlp_hidden"], [32]),
     "studies.tiny.grid[0]: give mlp_ratio or mlp_hidden, not both"),
    ("MLP ratio giving a fractional width", _set(["studies", "tiny", "grid", 0, "mlp_ratio"], [1.3]),
     "studies.tiny.grid[0].mlp_ratio: 1.3 x width 16 is not a whole number of MLP units"),
    ("head_dim missing for fixed_head_dim", lambda c: c["studies"]["tiny"]["grid"][2].pop("head_dim"),
     "studies.tiny.grid[2].head_dim: required by protocol fixed_head_dim"),
    ("unknown dataset kind", _set(["datasets", "x"], {"kind": "csv"}),
     'datasets.x.kind: "csv" is not allowed (allowed: one of digits, hub, imagefolder'),
    ("hub dataset without a name", _set(["datasets", "x"], {"kind": "hub", "num_classes": 10}),
     "datasets.x.name: required for kind hub"),
    ("image folder without its class count, used by a study", lambda c: (
        c["datasets"].update(imgs={"kind": "imagefolder", "path": FOLDERS["good"]}),
        c["studies"]["tiny"].update(dataset="imgs")),
     "datasets.imgs.num_classes: required for kind imagefolder (allowed: the number of classes"),
    ("hub images without their class count, used by a study", lambda c: (
        c["datasets"].update(hubimgs={"kind": "hub", "name": "uoft-cs/cifar10"}),
        c["studies"]["tiny"].update(dataset="hubimgs")),
     "datasets.hubimgs.num_classes: required for kind hub"),
    ("ListOps lengths the wrong way round", _set(["datasets", "lo"], {"kind": "listops", "min_length": 50,
                                                                      "max_length": 20}),
     "datasets.lo.min_length: 50 is above max_length 20 (allowed: at most max_length)"),
    ("text files that do not exist", _set(["datasets", "corpus"], {"kind": "text", "source": "files",
                                                                    "path": "/nonexistent/corpus"}),
     "datasets.corpus.path: '/nonexistent/corpus' does not exist (allowed: a folder holding train_file and eval_file)"),
    ("text file missing in its folder", _set(["datasets", "corpus"], {"kind": "text", "source": "files",
                                                                     "path": str(REPO / "tests"),
                                                                     "train_file": "no_such.txt",
                                                                     "eval_file": "conftest.py"}),
     "datasets.corpus.train_file: '"),
    ("glue study without fine-tuning", lambda c: c.update(
        datasets={"stories": {"kind": "text", "source": "generated"}},
        studies={"b": {"task": "glue", "dataset": "stories", "grid": c["studies"]["tiny"]["grid"][0]}}),
     "studies.b.finetune: required by task glue"),
    ("glue fine-tuning on a text dataset", lambda c: c.update(
        datasets={"stories": {"kind": "text", "source": "generated"}},
        studies={"b": {"task": "glue", "dataset": "stories", "finetune": {"dataset": "stories"},
                       "grid": c["studies"]["tiny"]["grid"][0]}}),
     "studies.b.finetune.dataset: 'stories' is not a glue dataset (allowed: none declared; add one of kind glue)"),
    ("fine-tuning in a study that does not pretrain", _set(["studies", "tiny", "finetune"], {"dataset": "digits"}),
     "studies.tiny.finetune: only used by task glue"),
    ("bad study name", lambda c: c["studies"].update({"my-study": c["studies"].pop("tiny_nearest")}),
     "studies: bad name 'my-study' (allowed: letters, digits and _, starting with a letter)"),
    ("override matching nothing",
     _set(["studies", "tiny", "overrides"], [{"where": {"depth": 7}, "recipe": {"lr": 0.1}}]),
     "studies.tiny.overrides[0].where: matches no variant of the grid"),
    ("expected parameters of a missing variant",
     _set(["studies", "tiny", "expect_params"], [{"variant": "L9-H9-D9-hd1-mlp9-s0", "params": 5, "tolerance": 0}]),
     "studies.tiny.expect_params: no variant 'L9-H9-D9-hd1-mlp9-s0' in the grid"),
    ("P2 heads not dividing the width", _set(["studies", "tiny_nearest", "grid", "heads"], [3]),
     "studies.tiny_nearest.grid.heads: 3 does not divide the model width 8 (allowed: divisors of 8)"),
    ("model key of another task", _set(["studies", "tiny", "model", "ff"], 64),
     "studies.tiny.model.ff: not used by task image_classification (allowed: patch_size"),
    ("GPU model in quotes", _set(["studies", "tiny", "resources", "gpu_model"], "'h100'"),
     "studies.tiny.resources.gpu_model: \"'h100'\" is not allowed (allowed: a string matching ^[A-Za-z0-9_.]*$)"),
    ("zero probe samples", _set(["studies", "tiny", "conditioning", "samples"], 0),
     "studies.tiny.conditioning.samples: 0 is not allowed (allowed: an integer >= 1)"),
    ("empty theory grid", _set(["theory", "heads"], []), "theory.heads: must not be empty"),
    ("unknown preparation setting", _set(["datasets", "digits", "prepare"], {"memory": 8000}),
     "datasets.digits.prepare.memory: unknown key (allowed: local, mem_mb, runtime, threads)"),
    ("preparation runtime of zero", _set(["datasets", "digits", "prepare"], {"runtime": 0}),
     "datasets.digits.prepare.runtime: 0 is not allowed (allowed: an integer >= 1)"),
    ("revision of generated data", _set(["datasets", "stories"], {"kind": "text", "source": "generated",
                                                                   "revision": "main"}),
     "datasets.stories.revision: only for data from the hub, this is a text dataset from generated "
     "(allowed: kind hub, or source hub)"),
]


@pytest.mark.parametrize("name,mutate,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_clear_line(name, mutate, expected):
    """At least 30 kinds of malformed config, each stopped with one line naming the key."""
    problems = _bad(mutate)
    assert len(problems) == 1, problems
    assert "\n" not in problems[0]
    assert problems[0].startswith("config error: ")
    assert expected in problems[0], problems[0]
    assert "(allowed: " in problems[0], problems[0]  # says what would be accepted


def test_every_mistake_of_a_file_is_said_at_once():
    """A misspelt key and a value no schema allows in one study, a task that does not exist in
    another, a dataset misspelt in a third: four lines, not two and then two more after a fix."""
    cfg = tiny()
    tiny_study = cfg["studies"]["tiny"]
    cfg["studies"]["other"] = {**copy.deepcopy(tiny_study), "task": "image_clasification"}
    tiny_study["recipe"]["epocs"] = 3
    tiny_study["grid"][0]["heads"] = [3]  # a mistake the schema cannot see: 3 does not divide 16
    cfg["studies"]["third"] = {**copy.deepcopy(cfg["studies"]["tiny_nearest"]), "dataset": "nearest_pint"}
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    said = err.value.problems
    assert said[0].startswith("config error: studies.other.task: \"image_clasification\" is not allowed")
    assert said[1].startswith("config error: studies.tiny.recipe.epocs: unknown key (did you mean 'epochs'?)")
    assert any(line.startswith("config error: studies.tiny.grid[0].heads: 3 does not divide width 16") for line in said)
    assert ("config error: studies.third.dataset: unknown dataset 'nearest_pint' (did you mean 'nearest_point'?) "
            "(allowed: digits, nearest_point)") in said
    assert len(said) == 4, said


@pytest.mark.parametrize("value", [None, 3, "a study"])
def test_a_study_that_is_no_mapping_is_one_line_beside_the_others_checks(value):
    cfg = tiny()
    cfg["studies"]["tiny"] = value
    cfg["studies"]["tiny_nearest"]["grid"]["heads"] = [3]  # heads 3 do not divide P2's dim 8: said too
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    said = err.value.problems
    assert said[0].startswith(f"config error: studies.tiny: {json.dumps(value)} is not allowed"), said
    assert len(said) == 2 and said[1].startswith("config error: studies.tiny_nearest."), said


def test_cli_reports_bad_config_without_traceback(tmp_path):
    cfg = tiny()
    cfg["studies"]["tiny"]["grid"][0]["heads"] = [3]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = run([str(BIN / "leaner"), "check-config", str(path)], cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "config error: studies.tiny.grid[0].heads: 3 does not divide width 16 under fixed_width "
        "(allowed: divisors of 16: 1, 2, 4, 8, 16)"]


def test_every_recipe_conditioning_resource_and_theory_key_has_its_default_in_the_schema():
    """Each key is declared once, in the schema, with its type, description and default (a
    dataset key's per kind, in the kind's record); every kind's defaults pass the schema."""
    import jsonschema

    from leaner.data.kinds import every_kind, kind_defaults
    from leaner.schema import defaults as _defaults
    from leaner.schema import schema_file as _schema_file
    from leaner.workflow.config import config_schema, validate_schema

    dataset_schema = {**config_schema()["$defs"]["dataset"], "$defs": _schema_file()["$defs"]}
    for kind in every_kind():
        jsonschema.Draft202012Validator(dataset_schema).validate({"kind": kind, **kind_defaults(kind)})
    assert kind_defaults("digits")["img_size"] == 8 and kind_defaults("hub")["img_size"] == 224
    assert config_schema()["$defs"]["dataset"]["properties"]["kind"]["enum"] == list(every_kind())

    for section in ("recipe", "conditioning", "resources", "theory"):
        props = _schema_file()["$defs"][section]["properties"]
        assert set(_defaults(section)) == set(props), section
    config = yaml.safe_load(TINY.read_text())
    study = next(iter(config["studies"].values()))
    study.update(recipe=_defaults("recipe"), conditioning=_defaults("conditioning"), resources=_defaults("resources"))
    config["theory"] = _defaults("theory")
    validate_schema(config)
    tasks = config_schema()["$defs"]["study"]["properties"]["task"]["enum"]
    assert set(tasks) >= {"image_classification", "nearest_point"}


def test_strings_from_the_command_line_are_read_as_the_type_the_schema_wants():
    """`snakemake --config 'theory={draws: 5}'` hands draws over as the string '5': it is read as
    the integer the schema wants; a string that is no such value is still refused in one line."""
    config = yaml.safe_load(TINY.read_text())
    config["theory"] = {"draws": "5", "tokens": "[17, 33]"}
    config["studies"]["tiny"]["recipe"]["lr"] = "0.01"
    plan = build_plan(config)
    assert plan.theory["draws"] == 5 and plan.theory["tokens"] == [17, 33]
    assert next(iter(plan.studies["tiny"].variants.values())).recipe.lr == 0.01
    config["theory"]["draws"] = "many"
    with pytest.raises(ConfigError) as err:
        build_plan(config)
    assert str(err.value) == 'config error: theory.draws: "many" is not allowed (allowed: an integer >= 1)'
    config["theory"] = "draws:5"  # --config 'theory=draws:5': a string where a mapping belongs
    config["studies"]["tiny"]["recipe"] = "epochs=2"
    with pytest.raises(ConfigError) as err:
        build_plan(config)
    assert str(err.value).splitlines() == [
        "config error: studies.tiny.recipe: \"epochs=2\" is not allowed (allowed: a mapping with keys "
        + str(err.value).split("a mapping with keys ")[1].split(";")[0]
        + "; on the command line: --config 'studies={tiny: {recipe: {key: value, ...}}}', in YAML flow style)",
        'config error: theory: "draws:5" is not allowed (allowed: a mapping with keys draws, seed, tokens, head_dim, '
        "width, heads; on the command line: --config 'theory={key: value, ...}', in YAML flow style)"]


def test_a_nested_config_on_the_snakemake_command_line_works(tmp_path):
    proc = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n", "--cores", "1",
                "--configfile", str(TINY), "--config", "theory={draws: 5, seed: 1}", "--quiet", "all"],
               tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _variants(plan, study):
    return list(plan.studies[study].variants.values())


def test_an_overlay_is_laid_over_config_yaml_and_a_full_config_stands_alone(tmp_path):
    """A partial config (no studies, or studies that change some values) is laid over config.yaml,
    as `--configfile config.yaml overlay.yaml` lays it; a config defining its studies (each with
    its task) stands alone."""
    base = load_plan(REPO / "config.yaml")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("studies:\n  vit_digits:\n    recipe: {epochs: 2}\ntheory: {draws: 3}\n")
    for plan in (load_plan(overlay, default=REPO / "config.yaml"), load_plan(REPO / "config.yaml", overlay)):
        assert list(plan.studies) == list(base.studies)
        assert {v.recipe.epochs for v in _variants(plan, "vit_digits")} == {2}
        assert {v.recipe.lr for v in _variants(plan, "vit_digits")} == {3.0e-3}  # the rest of the study kept
        assert _variants(plan, "nearest_rank") == _variants(base, "nearest_rank")
        assert plan.theory["draws"] == 3 and plan.theory["tokens"] == base.theory["tokens"]
    paper = load_plan(REPO / "configs" / "paper.yaml", default=REPO / "config.yaml")
    assert "vit_digits" not in paper.studies and "vit_imagenet" in paper.studies


def test_named_overlays_change_every_study(tmp_path):
    """configs/quick.yaml: one seed and 60 steps in every study; configs/seeds5.yaml: seeds 30-34 on
    every configuration (the configurations themselves unchanged), over either config."""
    for config in (REPO / "config.yaml", REPO / "configs" / "paper.yaml"):
        base = load_plan(config)
        quick = load_plan(config, REPO / "configs" / "quick.yaml")
        five = load_plan(config, REPO / "configs" / "seeds5.yaml")
        for name, study in base.studies.items():
            configs = {vid.rpartition("-s")[0] for vid in study.variants}
            assert {vid.rpartition("-s")[0] for vid in quick.studies[name].variants} == configs
            assert {v.seed for v in _variants(quick, name)} == {0}
            assert {v.recipe.max_steps for v in _variants(quick, name)} == {60}
            assert {v.recipe.epochs for v in _variants(quick, name)} == {v.recipe.epochs for v in _variants(
                base, name)}
            assert len(five.studies[name].variants) == 5 * len(configs), name
            assert {v.seed for v in _variants(five, name)} == {30, 31, 32, 33, 34}
    with pytest.raises(ConfigError, match=r"every_study.seeds"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("every_study: {seeds: 5}\n")
        load_plan(bad, default=REPO / "config.yaml")


@pytest.mark.slow
def test_a_partial_configfile_layers_on_config_yaml_under_snakemake(tmp_path):
    """`snakemake --configfile configs/quick.yaml` alone: laid over config.yaml (23 variants, one
    seed each), not a config of its own."""
    proc = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n", "--cores", "1",
                "--configfile", str(REPO / "configs" / "quick.yaml")], tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
    assert counts["train"] == "23" and counts["conditioning"] == "23", proc.stdout[-3000:]
    # one study's values, from a file or from --config: the rest of config.yaml stays
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("studies:\n  nearest_rank:\n    grid: {depth: [1], heads: [1, 4], modules: [1], dim: [16], "
                       "tokens: [8], seeds: [10, 11, 12, 13, 14, 15, 16, 17]}\n")  # the claim's points and seeds
    for extra in (["--configfile", str(overlay)], ["--config", "studies={vit_digits: {recipe: {epochs: 2}}}"]):
        proc = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n", "--cores", "1",
                    *extra], tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
        assert counts["train"] == ("118" if "--configfile" in extra else "130"), proc.stdout[-3000:]


def test_a_dataset_without_its_class_count_and_a_misspelt_study_are_one_line_each(tmp_path):
    cfg = tiny()
    cfg["datasets"]["imgs"] = {"kind": "imagefolder", "path": str(image_folder(tmp_path / "imgs"))}
    cfg["studies"]["tiny"]["dataset"] = "imgs"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    for cmd in (["check-config", str(path)], ["match", str(path), "--study", "tiny", "--reduction", "0.3"]):
        proc = run([str(BIN / "leaner"), *cmd], cwd=tmp_path, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "config error: datasets.imgs.num_classes: required for kind imagefolder (allowed: the number of "
            "classes, an integer >= 1)"], proc.stderr

    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(tiny()))
    for cmd, line in ((["variants", str(good), "--study", "tiny_neerest"],
                       "leaner variants: error: --study tiny_neerest: no such study (did you mean 'tiny_nearest'?) "
                       "(allowed: tiny, tiny_nearest)"),
                      (["match", str(good), "--study", "tiny_neerest", "--reduction", "0.3"],
                       "config error: studies.tiny_neerest: no such study (did you mean 'tiny_nearest'?) "
                       "(allowed: tiny, tiny_nearest)")):
        proc = run([str(BIN / "leaner"), *cmd], cwd=tmp_path, check=False)
        assert proc.returncode in (1, 2) and proc.stderr.strip().splitlines() == [line], proc.stderr


def test_a_models_defaults_live_in_the_schema_under_its_tasks_own(monkeypatch):
    """A model key's default is the schema's (tasks' own over it, for keys they use), so changing
    it there changes what a variant trains; img_size alone has none (the dataset's)."""
    from leaner.schema import defaults, schema_file
    from leaner.tasks import CATALOG
    from leaner.workflow import plan as planning

    props = schema_file()["$defs"]["model"]["properties"]
    assert set(props) - set(defaults("model")) == {"img_size"}
    assert all(prop.get("description") for prop in props.values())
    assert all(set(info.model) <= set(info.model_keys) for info in CATALOG.values())
    config = yaml.safe_load(TINY.read_text())
    (tiny_nearest,) = [v for v in build_plan(config).studies["tiny_nearest"].variants.values()][:1]
    assert tiny_nearest.model.ff == config["studies"]["tiny_nearest"]["model"].get("ff", 2048)
    monkeypatch.setitem(planning.MODEL_DEFAULTS, "posn_dim", 7)
    monkeypatch.setitem(planning.MODEL_DEFAULTS, "context", 99)
    changed = build_plan(yaml.safe_load(TINY.read_text())).studies["tiny_nearest"]
    assert {v.model.posn_dim for v in changed.variants.values()} == {7}
    problems: list[str] = []
    assert planning._model_base("lm", {"task": "glue"}, {}, problems)["max_len"] == 128  # glue's own goes over
    assert planning._model_base("lm", {"task": "language_model"}, {}, problems)["max_len"] == 99 and not problems


def test_a_run_reads_its_recipe_typed_with_the_schemas_defaults_and_refuses_a_key_there_is_not():
    from leaner.schema import Recipe, defaults

    recipe = Recipe.of({"lr": 0.5})
    assert recipe.lr == 0.5 and recipe.eval_batch_size == defaults("recipe")["eval_batch_size"] == 256
    assert dataclasses.asdict(Recipe.of(defaults("recipe"))) == defaults("recipe")
    with pytest.raises(ValueError, match="recipe.eval_batch: not a recipe key \\(allowed: epochs, "):
        Recipe.of({"eval_batch": 64})
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.lr = 1.0


def test_the_plan_builds_each_variants_model_typed_per_architecture_and_its_recipe_typed():
    """Every variant of config.yaml, paper.yaml and the timm backbones' tiny config carries a typed
    model config (one class per architecture, its study keys defaulted from the schema) and a typed
    Recipe; its spec holds them as plain dicts that read back to the same config. A model dict with
    a key its architecture does not have, or without one it needs, is one line."""
    from leaner.models.config import CONFIGS, ClassifierConfig, ModelConfig, ViTConfig, model_config
    from leaner.schema import Recipe, defaults

    archs = set()
    for path in (REPO / "config.yaml", REPO / "configs" / "paper.yaml",
                 REPO / "tests" / "config" / "tiny_backbones.yaml"):
        plan = load_plan(path)
        for study in plan.studies.values():
            for v in study.variants.values():
                assert isinstance(v.model, ModelConfig) and isinstance(v.recipe, Recipe)
                assert model_config(v.spec()["model"]) == v.model and Recipe.of(v.spec()["recipe"]) == v.recipe
                archs.add(v.model.arch)
            if study.finetune:
                spec = study.finetune_spec(next(iter(study.variants)), "sst2")
                tuned = model_config(spec["model"])
                assert isinstance(tuned, ClassifierConfig) and tuned.pad_id == spec["model"]["pad_id"] != 0
                archs.add(tuned.arch)
    assert archs == set(CONFIGS)
    listops = next(iter(load_plan(REPO / "config.yaml").studies["listops_small"].variants.values())).model
    assert listops.pad_id == 0 and "pad_id" not in listops.to_spec()  # specs planned before pad_id stay the same
    vit = ViTConfig(depth=2, heads=2, head_dim=8, width=16, mlp_hidden=32, img_size=8, in_chans=1, num_classes=10)
    assert (vit.patch_size, vit.qkv_bias, vit.global_pool) == tuple(defaults("model")[k] for k in (
        "patch_size", "qkv_bias", "global_pool"))
    assert (dataclasses.replace(vit, patch_size=2).seq_len, vit.residual_width, vit.attention_heads) == (17, 16, 2)
    with pytest.raises(ValueError, match=r"^model\.ff: not a setting of a vit model \(allowed: depth, heads, "):
        model_config({**vit.to_spec(), "ff": 64})
    with pytest.raises(ValueError, match=r"^model\.num_classes: missing from a vit model \(required: num_classes\)$"):
        model_config({k: x for k, x in vit.to_spec().items() if k != "num_classes"})
    with pytest.raises(ValueError, match=r"^model\.arch: unknown architecture 'rnn' \(allowed: vit, "):
        model_config({"arch": "rnn"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        vit.depth = 3


def test_crossed_holds_width_and_head_dim_so_count_and_rank_each_move_alone():
    cfg = tiny()
    cfg["studies"]["tiny"]["grid"] = {"protocol": ["crossed"], "width": [16], "head_dim": [2, 8], "depth": [1],
                                      "heads": [2, 8], "mlp_hidden": [32], "seeds": [0]}
    study = build_plan(cfg).studies["tiny"]
    shapes = {(v.model.heads, v.model.head_dim, v.model.width) for v in study.variants.values()}
    assert shapes == {(2, 2, 16), (2, 8, 16), (8, 2, 16), (8, 8, 16)}  # h*d 4, 16, 16, 64 at D 16
    from leaner.models import build_model

    model = build_model(study.variants["L1-H8-D16-hd8-mlp32-s0"].spec()["model"])
    attn = model.blocks[0].attn
    assert (attn.num_heads, attn.head_dim, attn.qkv.out_features, attn.proj.in_features, attn.proj.out_features) == (
        8, 8, 3 * 64, 64, 16)
    cfg["studies"]["tiny"]["grid"].pop("head_dim")
    with pytest.raises(ConfigError, match=r"grid: protocol crossed needs both width and head_dim"):
        build_plan(cfg)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_every_named_config_plans_and_its_claims_cite_a_pilot_that_is_committed(name):
    """Each configs/*.yaml (a study of its own or an overlay on config.yaml) builds its plan, and a
    declared claim's rationale is written (no placeholder) and names its pilot's CSV where the repo
    holds it."""
    plan = load_plan(REPO / "configs" / name, default=REPO / "config.yaml")
    assert plan.studies
    for study in plan.studies.values():
        for claim in study.claims:
            assert claim["rationale"].strip() and "PILOT" not in claim["rationale"], (name, claim["name"])
            for cited in re.findall(r"pilots/[\w.-]+\.csv", claim["rationale"]):
                assert (REPO / cited).is_file(), (name, claim["name"], cited)
