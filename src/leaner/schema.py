"""The config's schema (schemas/config.schema.yaml), the one home of every key's type, default and
meaning: read here, below every stage, so that the workflow layer takes its defaults from it and a
run reads its recipe typed (`Recipe`), each key with the schema's type and default. Light (no
torch, no pandas)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import operator
from pathlib import Path
from typing import Any

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.cache
def schema_file() -> dict:
    with open(SCHEMA_PATH) as fh:
        return yaml.safe_load(fh)


def defaults(section: str) -> dict[str, Any]:
    """A config section's defaults, as the schema declares them beside each key's type and
    description (every key of these sections has one; tests/test_config.py checks)."""
    return {key: copy.deepcopy(spec["default"])
            for key, spec in schema_file()["$defs"][section]["properties"].items() if "default" in spec}




_JSON_TYPES = {"integer": int, "number": float, "boolean": bool, "string": str, "array": list, "null": type(None)}
_REFS = {"posint": int, "nonnegint": int, "posnum": float, "fraction": float}


def _python_type(prop: dict) -> Any:
    """The Python type a schema property's values take (a union where it allows several)."""
    options = prop.get("oneOf") or prop.get("anyOf") or [prop]
    found: list[Any] = []
    for option in options:
        if "$ref" in option:
            found.append(_REFS.get(option["$ref"].rsplit("/", 1)[-1], Any))
        elif "enum" in option or "const" in option:
            values = option.get("enum") or [option["const"]]
            found.extend(dict.fromkeys(type(v) for v in values))
        else:
            kinds = option.get("type", [])
            found.extend(_JSON_TYPES[k] for k in ([kinds] if isinstance(kinds, str) else kinds))
    found = list(dict.fromkeys(found)) or [Any]
    return functools.reduce(operator.or_, found) if Any not in found else Any


class Section:
    """A config section's settings, typed (`_typed` makes one class per section)."""

    section = ""

    @classmethod
    def of(cls, values: dict):
        """The settings `values` gives, each key checked against the section's."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"{cls.section}.{unknown[0]}: not a {cls.section} key "
                             f"(allowed: {', '.join(f.name for f in dataclasses.fields(cls))})")
        return cls(**values)


def _typed(section: str, name: str, doc: str) -> type:
    """A frozen dataclass of a config section: one field per key of the schema's section, its type
    and default the schema's (the one home of both; the description beside them there)."""
    fields = []
    for key, prop in schema_file()["$defs"][section]["properties"].items():
        default = prop["default"]
        fields.append((key, _python_type(prop), dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d))))
    cls = dataclasses.make_dataclass(name, fields, bases=(Section,), frozen=True)
    cls.section, cls.__doc__, cls.__module__ = section, doc, __name__
    return cls


# the plan builds one per variant (workflow/variants.py) and writes every key in the spec; a run reads
# it back once, as `RunSpec.of(spec).recipe` (runspec.py)
Recipe = _typed("recipe", "Recipe", "A run's recipe: every key of the schema's `recipe`, typed, with its default.")


# Recipe keys added after results existed: a spec leaves each out at its default, so that the specs
# planned before it (and the results trained from them) stay the same bytes and are not retrained.
SPEC_OMITS_AT_DEFAULT = ("wall_budget_minutes",)


def recipe_spec(recipe) -> dict:
    """A recipe as a run's spec holds it: every key, but those of SPEC_OMITS_AT_DEFAULT at their default."""
    defaults = {f.name: f.default_factory() for f in dataclasses.fields(recipe)}
    return {k: v for k, v in dataclasses.asdict(recipe).items()
            if not (k in SPEC_OMITS_AT_DEFAULT and v == defaults[k])}
