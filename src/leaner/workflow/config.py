"""The configuration: each key's defaults, the JSON Schema it is validated against (with one
line per problem, naming the key and what is allowed), YAML loading and merging.

Everything here is light (no torch import): Snakemake imports it to build the DAG. plan.py
expands a validated config into studies and variants.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from ..compute.numerics import MODES
from ..data.kinds import dataset_schema, every_kind
from ..schema import defaults, schema_file
from ..tasks import CATALOG


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `names` to a misspelt `name`, or ''."""
    import difflib

    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


MODEL_DEFAULTS = defaults("model")  # a task's own (tasks/__init__.py) go over these, for the keys it uses
RECIPE_DEFAULTS = defaults("recipe")  # a task's own (tasks/__init__.py) and the study's recipe go over these
# conditioning: jacobian_*: kappa of the attention block's Jacobian on the first few probe inputs, exact
# up to jacobian_exact_max rows (N * D), else after lanczos_steps of matrix-free Lanczos (measure/jacobian.py)
CONDITIONING_DEFAULTS = defaults("conditioning")
RESOURCE_DEFAULTS = defaults("resources")
THEORY_DEFAULTS = defaults("theory")


class ConfigError(ValueError):
    """A configuration problem; str() is one line per problem, each naming the key."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def config_schema() -> dict:
    """The config's JSON Schema, with the task names, and the dataset kinds and their keys, filled in
    from their catalogues."""
    schema = copy.deepcopy(schema_file())
    schema["$defs"]["study"]["properties"]["task"]["enum"] = list(CATALOG)
    dataset = schema["$defs"]["dataset"]["properties"]
    keys, prose = dataset_schema()
    dataset["kind"]["enum"] = list(every_kind())
    dataset["kind"]["description"] += f" {prose}"
    dataset.update(keys)
    schema["properties"]["numerics"]["enum"] = list(MODES)
    return schema


SCHEMA_JSON = "schemas/config.schema.json"
SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the source tree this package is in (an editable install's)


def write_schema(root: str | Path = SOURCE_ROOT, check: bool = False) -> str:
    """Write config_schema() to `root`/schemas/config.schema.json (a source tree's) where it differs,
    or with `check` only compare; returns the file's path where it was stale, else ""."""
    from ..io import write_text

    path = Path(root) / SCHEMA_JSON
    if not path.parent.is_dir():
        raise ValueError(f"{root}: not a source tree of this project (no schemas/ there)")
    text = json.dumps(config_schema(), indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        return ""
    if not check:
        write_text(path, text)
    return str(path)


def _key_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _allowed(schema: dict, root: dict) -> str:
    """A short description of what a schema node allows, for error messages."""
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return _allowed(node, root)
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if "const" in schema:
        return str(schema["const"])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    bits = []
    if "minimum" in schema:
        bits.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bits.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bits.append(f"<= {schema['maximum']}")
    if "exclusiveMaximum" in schema:
        bits.append(f"< {schema['exclusiveMaximum']}")
    if "pattern" in schema:
        bits.append(f"matching {schema['pattern']}")
    if kind == "array":
        item = _allowed(schema.get("items", {}), root)
        return f"a non-empty list of {item}" if schema.get("minItems") else f"a list of {item}"
    if kind == "object" and "properties" in schema:
        return "a mapping with keys " + ", ".join(schema["properties"])
    if "oneOf" in schema:
        return " or ".join(_allowed(s, root) for s in schema["oneOf"])
    name = " or ".join("a number" if k == "number" else f"{'an' if k == 'integer' else 'a'} {k}"
                       for k in kinds if k)
    return " ".join([name or "a value"] + bits)


def _format_error(err, root: dict) -> str:
    where = _key_path(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        target = f"{where}.{extra[0]}" if where != "(top level)" else extra[0]
        allowed_txt = ", ".join(allowed) if allowed else "(any name)"
        return f"{target}: unknown key{did_you_mean(extra[0], allowed)} (allowed: {allowed_txt})"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        required = err.schema.get("required", [])
        optional = sorted(set(err.schema.get("properties", {})) - set(required))
        return (f"{where}: missing required key '{missing}' (allowed: a mapping with keys "
                f"{', '.join(required)} and optionally {', '.join(optional)})")
    if err.validator in ("minItems", "minProperties"):
        return f"{where}: must not be empty (allowed: at least one entry)"
    if err.validator == "uniqueItems":
        return f"{where}: {json.dumps(err.instance)} repeats a value (allowed: distinct values)"
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        return f"{where}: bad name {err.instance!r} (allowed: letters, digits and _, starting with a letter)"
    if err.validator == "oneOf" and isinstance(err.instance, (list, dict)):
        # Report the most specific sub-error: what the user most likely meant.
        # (the branch whose type fits the value, and the deepest error within it).
        fitting = [e for e in err.context if not (e.validator == "type" and not e.relative_path)]
        best = max(fitting, key=lambda e: len(list(e.absolute_path)), default=None)
        if best is not None:
            return _format_error(best, root)
    hint = ""
    if isinstance(err.instance, str) and err.schema.get("type") in ("object", "array") and \
            not any(isinstance(p, int) for p in err.absolute_path):  # a list entry has no --config spelling
        parts = [str(p) for p in err.absolute_path] or [where]
        value = "{key: value, ...}" if err.schema.get("type") == "object" else "[value, ...]"
        for part in reversed(parts[1:]):
            value = f"{{{part}: {value}}}"
        hint = f"; on the command line: --config '{parts[0]}={value}', in YAML flow style"
    return f"{where}: {json.dumps(err.instance)} is not allowed (allowed: {_allowed(err.schema, root)}{hint})"


def _typed_cli_values(config: dict, validator) -> None:
    """Snakemake hands nested `--config` values over as strings (`theory={draws: 5}` gives
    draws '5'): where the schema wants another type, a string that reads as YAML of that type
    is replaced by it, in place. Anything else is left for the schema to refuse."""
    for _ in range(100):  # each pass fixes every coercible value it sees; nested ones may need more
        changed = False
        for err in validator.iter_errors(config):
            if err.validator != "type" or not isinstance(err.instance, str) or not err.absolute_path:
                continue
            try:
                value = yaml.safe_load(err.instance)
            except yaml.YAMLError:
                continue
            if isinstance(value, str) or not validator.evolve(schema=err.schema).is_valid(value):
                continue
            *parents, last = err.absolute_path
            holder = config
            for key in parents:
                holder = holder[key]
            holder[last], changed = value, True
        if not changed:
            return


def schema_check(config: dict) -> tuple[list[str], dict]:
    """(one line per problem of `config` against the schema, the config less its unknown keys):
    strings from `--config` are read as the type the schema wants first, in place."""
    import jsonschema

    schema = config_schema()
    validator = jsonschema.Draft202012Validator(schema)
    _typed_cli_values(config, validator)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    lines = list(dict.fromkeys(f"config error: {_format_error(e, schema)}" for e in errors))
    cleaned = copy.deepcopy(config) if errors else config
    for err in errors:
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            holder = cleaned
            for key in err.absolute_path:
                holder = holder[key]
            for extra in set(err.instance) - set(err.schema.get("properties", {})):
                holder.pop(extra, None)
    return lines, cleaned


def validate_schema(config: dict) -> None:
    """Check `config` against the schema (strings from `--config` read as the type the schema
    wants); ConfigError with one line per problem."""
    lines, _ = schema_check(config)
    if lines:
        raise ConfigError(lines)


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError([f"config error: {path}: file not found"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError([f"config error: {path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"config error: {path}: must be a mapping with a 'studies' key"])
    return data


def stands_alone(config: dict) -> bool:
    """A config that defines its studies in full (each with its task) is a config of its own; one
    with no studies, or with studies that only change some values, is an overlay."""
    studies = config.get("studies")
    return bool(studies) and all(isinstance(st, dict) and "task" in st for st in studies.values())


def merge_cli_config(config: dict, default: dict) -> None:
    """Lay `config` (the --configfile files and --config values Snakemake merged) over `default`,
    in place, unless it stands alone."""
    if stands_alone(config):
        return
    merged = _deep_merge(default, config)
    config.clear()
    config.update(merged)


def load_configs(paths: Iterable[str | Path], default: str | Path | None = "config.yaml") -> dict:
    """The config several files give, as Snakemake's `--configfile a b` merges them (later ones
    win, key by key), laid over `default` unless it stands alone."""
    merged: dict = {}
    for path in paths:
        merged = _deep_merge(merged, load_yaml(path))
    if default is not None and not stands_alone(merged):
        merge_cli_config(merged, load_yaml(default))
    return merged


def apply_every_study(config: dict) -> dict:
    """`every_study` laid over each study: recipe, conditioning and resources keys replace the
    study's, seeds replace every grid entry's (and a lean study's) and every declared claim's: an
    overlay that reruns a study on other seeds tests its claims on those seeds (the claims table
    says how many)."""
    every = config.get("every_study")
    if not every or not isinstance(config.get("studies"), dict):
        return config
    out = copy.deepcopy(config)
    for st in out["studies"].values():
        if not isinstance(st, dict):
            continue
        for section in ("recipe", "conditioning", "resources"):
            if section in every:
                st[section] = {**(st.get(section) or {}), **every[section]}
        if "seeds" in every:
            grids = st.get("grid") if isinstance(st.get("grid"), list) else [st.get("grid")]
            for grid in [*grids, st.get("lean"), *(st.get("claims") or [])]:
                if isinstance(grid, dict):
                    grid["seeds"] = list(every["seeds"])
    return out
