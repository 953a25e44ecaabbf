"""One run's spec, typed once: what the plan wrote for a training job (workflow/variants.py,
Variant.spec) read back at the door of `leaner train` (or of any stage handed a spec) and passed
down as it is: the model config and the recipe typed, the rest named. The JSON a job carries is
kept, unchanged, for what records it (metrics.json, the weights' metadata, the resume state's
match), so a spec's bytes are the plan's whatever reads them. Light: no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .models.config import ModelConfig, model_config
from .schema import Recipe

REQUIRED = ("study", "variant", "task", "dataset", "seed", "model", "recipe")
OPTIONAL = ("conditioning", "expect_params", "glue_task", "init_from")


@dataclass(frozen=True)
class RunSpec:
    """A training job's spec. `raw` is the dict the plan wrote (never changed: `json` is its bytes)."""

    study: str
    variant: str
    task: str
    dataset: str
    seed: int
    model: ModelConfig
    recipe: Recipe
    conditioning: dict = field(default_factory=dict)
    expect_params: dict | None = None  # {"params": n, "tolerance": t}: the built model is checked
    glue_task: str | None = None  # a fine-tuning job's GLUE task
    init_from: str | None = None  # a fine-tuning job's pretrained weights
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, spec: dict | RunSpec) -> RunSpec:
        """The typed spec of a job's dict (a RunSpec is returned as it is); a missing or unknown
        key, or a bad model or recipe, is a one-line ValueError naming it."""
        if isinstance(spec, RunSpec):
            return spec
        if not isinstance(spec, dict):
            raise ValueError(f"run spec: a JSON object, not {type(spec).__name__}")
        missing = [k for k in REQUIRED if k not in spec]
        unknown = sorted(set(spec) - set(REQUIRED) - set(OPTIONAL))
        if missing or unknown:
            what = f"missing {missing[0]!r}" if missing else f"{unknown[0]!r} is not a key of it"
            raise ValueError(f"run spec: {what} (keys: {', '.join(REQUIRED)}; optional: {', '.join(OPTIONAL)})")
        if not isinstance(spec["recipe"], dict) or not isinstance(spec["model"], dict):
            raise ValueError("run spec: model and recipe are JSON objects")
        return cls(study=spec["study"], variant=spec["variant"], task=spec["task"], dataset=spec["dataset"],
                   seed=spec["seed"], model=model_config(spec["model"]), recipe=Recipe.of(spec["recipe"]),
                   conditioning=spec.get("conditioning") or {}, expect_params=spec.get("expect_params"),
                   glue_task=spec.get("glue_task"), init_from=spec.get("init_from"), raw=spec)

    @property
    def json(self) -> str:
        """The spec's canonical text (sorted keys): what a resume state and a finished copy match."""
        return json.dumps(self.raw, sort_keys=True)

    @property
    def name(self) -> str:
        return f"{self.study}/{self.variant}"

    def __getitem__(self, key: str) -> Any:
        raise TypeError(f"RunSpec is typed: read spec.{key}, not spec[{key!r}]")
