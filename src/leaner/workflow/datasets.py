"""A dataset's config entry checked and completed: its kind's defaults filled in, what the kind
requires present, the kind's own checks run (data/kinds.py), and where its preparation runs
(`prepare`)."""

from __future__ import annotations

from pathlib import Path

from ..data.kinds import dataset_kind, from_hub, kind_defaults, reading

REQUIRED_HINTS = {"name": "a hub dataset name, e.g. uoft-cs/cifar10", "path": "an existing local folder",
                  "num_classes": "the number of classes, an integer >= 1"}


def data_spec(spec: dict) -> dict:
    """The entry without its `prepare` settings: what the data is, not where it is prepared, so
    the data rule's params (and every prepared dataset) stay the same when those change."""
    return {key: value for key, value in spec.items() if key != "prepare"}


def _prepare(spec: dict, out: dict, defaults: dict) -> dict:
    """The dataset's `prepare` settings: the given keys over its kind's; local null (the default of
    text and glue) is true for data from the hub."""
    settings = {**defaults, **(spec.get("prepare") or {})}
    if settings["local"] is None:
        settings["local"] = from_hub(out)
    return settings


def check_dataset(name: str, spec: dict, problems: list[str], base_dir: Path) -> dict:
    """The dataset `name` with every key (`spec` over its kind's defaults); problems are appended."""
    kind = dataset_kind(spec["kind"])
    defaults = kind_defaults(kind.name)
    out = {**defaults, **spec}
    missing = [req for req in kind.required if req not in spec]
    problems += [f"config error: datasets.{name}.{req}: required for kind {kind.name} "
                 f"(allowed: {REQUIRED_HINTS.get(req, 'a value')})" for req in missing]
    if kind.check and not missing:  # a kind's own checks read the keys it requires
        problems += kind.check(name, spec, out, base_dir)
    for key in spec:
        if key not in ("kind", "prepare", *kind.keys):
            problems.append(f"config error: datasets.{name}.{key}: not used by kind {kind.name} (allowed: leave it "
                            f"out; it is for kind {', '.join(reading(key)) or 'none'})")
    if "revision" in spec and "revision" in kind.keys and not from_hub(out):
        source = f" from {out['source']}" if "source" in out else ""
        problems.append(f"config error: datasets.{name}.revision: only for data from the hub, this is a {kind.name} "
                        f"dataset{source} (allowed: kind hub, or source hub)")
    out["prepare"] = _prepare(spec, out, defaults["prepare"])
    return out
