"""The task catalogue: one record per task, the one place a task is registered.

A task is what a study trains on and how it is read: which datasets it takes, its grid (the
architecture axes of a configuration), the model settings its variants share, its recipe
defaults, the metric that heads its study (and which way is better; which figures and tables a
study shows, analysis/report.py decides from its task's family and metric and its grid), which
paper's rows it reproduces, and the class that trains it (imported only when training:
this module needs neither torch nor pandas, so the Snakefile can read it).

To add a task: add one `TaskInfo` below, and write its training class (a `Task`, see base.py) in
a module of this package (the record's `trainer`), registered under the task's name where it is
defined (`@trains("name")`); trainers.py imports that module for the task's runs. (A task
outside this package is one definition: its record on its class, `@trains(TaskInfo(...))`.) Config
expansion, summary.csv, tables, figures and the overview read everything else from the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..data.kinds import kind_module
from ..data.vocab import BERT_PAD, BERT_VOCAB_SIZE, BYTE_VOCAB_SIZE, LISTOPS_VOCAB
from ..grid import IMAGE_GRID_KEYS, NEAREST_GRID_KEYS
from ..registry import add_record, scoped_catalogue

# A configuration's architecture axes, per kind of grid: depth x heads x protocol x width x MLP x
# logit scale ("arch": ViTs and the sequence models), or P2's depth x heads x modules x d x N x positions.
GRID_AXES = {"arch": ("depth", "heads", "width", "head_dim", "mlp_hidden", "qk_scale"),
             "nearest": ("depth", "heads", "modules", "head_dim", "dim", "tokens", "posn")}
GRID_KEYS = {"arch": IMAGE_GRID_KEYS, "nearest": NEAREST_GRID_KEYS}


@dataclass(frozen=True)
class TaskInfo:
    name: str
    family: str  # the paper whose claim it tests: "P1" (more heads, less depth) or "P2" (heads hurt)
    grid: str  # "arch" or "nearest" (GRID_AXES)
    dataset_kinds: tuple[str, ...]
    model_keys: tuple[str, ...]  # the study's `model:` keys it uses
    # (settings: the study's `model:` block over `model` over the schema's defaults, dataset, problem) -> model
    model_base: Callable[[dict, dict, Callable[[str], None]], dict]
    metric: tuple[str, str]  # the study's headline: a summary.csv column and "max" or "min"
    train_metric: tuple[str, str]  # what a run tracks for its best epoch (a history column)
    recipe: dict = field(default_factory=dict)  # defaults over config.RECIPE_DEFAULTS
    model: dict = field(default_factory=dict)  # defaults over config.MODEL_DEFAULTS
    recipe_keys: tuple[str, ...] = ()  # recipe keys only this task reads (a study of another task may not set them)
    # a second stage trained per pretrained variant (GLUE): the dataset kind it reads (None: none)
    finetune_kind: str | None = None
    finetune_recipe: dict = field(default_factory=dict)  # its defaults over config.RECIPE_DEFAULTS
    # a training step's time is its kernels' launches, not its FLOPs: `leaner cost` prices it from
    # measured step times (P2's small models)
    launch_bound: bool = False
    # the module of this package its training class is defined in (tasks/trainers.py imports it for
    # a run of this task alone); "" for a task outside the package (its module is imported by its user)
    trainer: str = ""

    @property
    def axes(self) -> tuple[str, ...]:
        return GRID_AXES[self.grid]

    @property
    def grid_keys(self) -> tuple[str, ...]:
        return GRID_KEYS[self.grid]


# the ViT's own settings, which a timm backbone (`model: {timm: NAME}`) takes from its timm model instead
_VIT_ONLY = ("patch_size", "qkv_bias", "global_pool")


def _vit(given: dict, ds: dict, problem: Callable[[str], None]) -> dict:
    if given.get("timm"):
        from ..models.timm_families import family_of
        from ..schema import defaults

        try:
            family_of(given["timm"])
        except ValueError as exc:
            problem(str(exc))
        schema = defaults("model")
        for key in _VIT_ONLY:
            if given.get(key, schema[key]) != schema[key]:
                problem(f"model.{key}: {given[key]} is a setting of leaner's own ViT (allowed: leave it out "
                        f"with timm: {given['timm']}, which keeps its own)")
        return {"arch": "timm", "backbone": given["timm"], "drop_path_rate": given["drop_path_rate"],
                "img_size": given.get("img_size", ds["img_size"]), "in_chans": ds["in_chans"],
                "num_classes": ds["num_classes"]}
    model = {"arch": "vit", **{k: v for k, v in given.items() if k != "timm"}}
    model.setdefault("img_size", ds["img_size"])
    model["in_chans"] = ds["in_chans"]
    model["num_classes"] = ds["num_classes"]
    if model["img_size"] % model["patch_size"]:
        problem(f"model.patch_size: {model['patch_size']} does not divide img_size {model['img_size']} "
                f"(allowed: divisors of the image size)")
    return model


def _nearest(given: dict, ds: dict, problem: Callable[[str], None]) -> dict:
    return dict(given)


def _listops(given: dict, ds: dict, problem: Callable[[str], None]) -> dict:
    return {"arch": "sequence_classifier", **given, "vocab_size": len(LISTOPS_VOCAB), "max_len": ds["max_length"],
            "num_classes": 10}


def _causal_lm(given: dict, ds: dict, problem: Callable[[str], None]) -> dict:
    given = dict(given)
    context = given.pop("context")
    return {"arch": "causal_lm", **given, "vocab_size": BYTE_VOCAB_SIZE, "max_len": context}


def _masked_lm(given: dict, ds: dict, problem: Callable[[str], None]) -> dict:
    given = dict(given)
    context = given.pop("context")
    return {"arch": "masked_lm", **given, "vocab_size": BERT_VOCAB_SIZE, "pad_id": BERT_PAD, "max_len": context}


SEQUENCE_MODEL_KEYS = ("qkv_bias", "drop_path_rate")

CATALOG: dict[str, TaskInfo] = scoped_catalogue({})


def add_task(info: TaskInfo) -> TaskInfo:
    """Add a task's record to the catalogue (refused where the name is taken); returns it."""
    return add_record(CATALOG, "task", info)


for _info in (
    TaskInfo(
        "image_classification", family="P1", grid="arch", dataset_kinds=("digits", "hub", "imagefolder", "webdataset"),
        model_keys=("patch_size", "img_size", "qkv_bias", "drop_path_rate", "global_pool", "timm"), model_base=_vit,
        metric=("eval_acc", "max"), train_metric=("eval_acc", "max"),
        recipe_keys=("augment", "mixup", "cutmix", "repeat_aug"), trainer="image"),
    # P2's recipe (papers.md 2.3): AdamW(0.9, 0.95), no weight decay, batch 256, "epochs" of 100
    # steps, warm-up then cosine stepped per epoch, model init seed 613 whatever the data seed
    # (`replicates: independent` instead: each run's own init seed and unshared data streams);
    # fp32 without TF32, as its authors trained (their MSE floors, 1e-4 to 2e-3, sit where the
    # rounding of near-hardmax scores could matter).
    TaskInfo(
        "nearest_point", family="P2", grid="nearest", dataset_kinds=("nearest_point",),
        model_keys=("ff", "posn_dim"), model_base=_nearest,
        metric=("best_train_loss", "min"), train_metric=("train_loss", "min"),
        recipe_keys=("replicates",), launch_bound=True, trainer="nearest",
        recipe={"batch_size": 256, "lr": 0.01, "weight_decay": 0.0, "betas": [0.9, 0.95],
                "schedule": "epoch_cosine", "steps_per_epoch": 100, "init_seed": 613, "epochs": 1000,
                "eval_batch_size": 1024, "precision": "fp32", "tf32": False}),
    TaskInfo(
        "listops", family="P1", grid="arch", dataset_kinds=("listops",),
        model_keys=SEQUENCE_MODEL_KEYS, model_base=_listops,
        metric=("eval_acc", "max"), train_metric=("eval_acc", "max"), trainer="sequence"),
    # GPT-2/nanoGPT: AdamW(0.9, 0.95), weight decay 0.1; an "epoch" is steps_per_epoch random windows
    TaskInfo(
        "language_model", family="P1", grid="arch", dataset_kinds=("text",),
        model_keys=(*SEQUENCE_MODEL_KEYS, "context"), model_base=_causal_lm,
        metric=("eval_loss", "min"), train_metric=("eval_loss", "min"),
        recipe={"betas": [0.9, 0.95], "weight_decay": 0.1, "steps_per_epoch": 100, "grad_clip": 1.0},
        trainer="sequence"),
    # cramming BERT: masked-LM pretraining on a text corpus (its training metric), then fine-tuning
    # of each variant on every GLUE task: the study's metric is the GLUE average of the fine-tuned
    # runs. AdamW(0.9, 0.98), weight decay 0.01, clipping 0.5 [INF].
    TaskInfo(
        "glue", family="P1", grid="arch", dataset_kinds=("text",),  # the pretraining corpus
        model_keys=(*SEQUENCE_MODEL_KEYS, "context"), model_base=_masked_lm,
        metric=("glue_avg", "max"), train_metric=("eval_loss", "min"), model={"context": 128},
        recipe={"betas": [0.9, 0.98], "weight_decay": 0.01, "steps_per_epoch": 100, "grad_clip": 0.5},
        finetune_kind="glue", trainer="sequence",
        # fine-tuning on each GLUE task (cramming: 5 epochs, batch 32, lr 4e-5 [INF])
        finetune_recipe={"epochs": 5, "batch_size": 32, "lr": 4e-5, "weight_decay": 0.01, "warmup_frac": 0.1,
                         "betas": [0.9, 0.98], "steps_per_epoch": None, "schedule": "cosine"}),
):
    add_task(_info)
FINETUNE_SUFFIX = "_finetune"  # a fine-tuning run's spec names its task <study task>_finetune
FINETUNE_METRIC = ("eval_score", "max")  # a fine-tuning run's: the GLUE task's own metric


def task_info(name: str) -> TaskInfo:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r} (allowed: {', '.join(CATALOG)})") from None


def task_of(spec_task: str) -> TaskInfo:
    """The record of a run's spec task (a fine-tuning run's: its study's task)."""
    return task_info(spec_task[: -len(FINETUNE_SUFFIX)] if spec_task.endswith(FINETUNE_SUFFIX) else spec_task)


def trainer_metric(spec_task: str) -> tuple[str, str]:
    """The metric (and its better direction) a run of spec task `spec_task` tracks."""
    if spec_task.endswith(FINETUNE_SUFFIX):
        return FINETUNE_METRIC
    return task_info(spec_task).train_metric


def job_modules(spec_task: str, kind: str) -> tuple[str, ...]:
    """The modules a job of spec task `spec_task` on a dataset of `kind` loads by name: its training
    class's (tasks/trainers.py) and its kind's (data/kinds.py); a stage's digest takes them
    (provenance.stage_digest), so a change to one family's code re-runs that family's jobs alone."""
    trainer = task_of(spec_task).trainer
    return tuple(m for m in (f"{__name__}.{trainer}" if trainer else None, kind_module(kind)) if m)


def trainer_names() -> list[str]:
    """The names a training class registers under: each task's, and each fine-tuning stage's."""
    return [*CATALOG, *(name + FINETUNE_SUFFIX for name, info in CATALOG.items() if info.finetune_kind)]
