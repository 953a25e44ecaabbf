"""The runs the project keeps, by identity, so that a claim's run counts as new data only where no
run of the same identity was kept before the claim: a run another study, or a pilot, already made
is a result already seen, whatever its study or variant is called.

A run's identity is what decides its trained model and metric: the task, the dataset's spec, the
model, the recipe (less the keys that by contract change no bit: evaluation and checkpoint cadence,
loader workers, host syncs), the seed and a fine-tune's start. Neither the study's or variant's
name, the conditioning settings nor the code state enter: a run of the same identity under other
code or numerics is the same experiment, its result seen up to rounding.

Where the project keeps runs: each reference under tests/reference (its `identities.csv`, one row a
run, and `kept_since` in its provenance.json: when it was first kept) and each pilot under pilots/
(an `identity` column). Each is written with the runs (tests/reference_run.py, `leaner pilot`) and
a test holds them to a fresh plan of the configs that made them. Light: no torch, no pandas."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..provenance import SOURCE_ROOT

REFERENCES = "tests/reference"
PILOTS = "pilots"
IDENTITIES = "identities.csv"
# recipe keys that change no bit of a run's result (the resume, worker-count and sync tests hold them to it)
NOT_IDENTITY = ("eval_every", "checkpoint_every", "checkpoint_minutes", "eval_batch_size", "num_workers",
                "sync_every")


def run_identity(spec: dict, dataset: dict) -> str:
    """The digest of what decides a run's result: `spec` a variant's spec (Variant.spec), `dataset`
    its dataset's resolved spec (its `prepare` resources left out)."""
    key = {"task": spec["task"], "seed": spec["seed"], "model": spec["model"],
           "recipe": {k: v for k, v in spec["recipe"].items() if k not in NOT_IDENTITY},
           "dataset": {k: v for k, v in dataset.items() if k != "prepare"},
           **{k: spec[k] for k in ("glue_task", "init_from") if spec.get(k) is not None}}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def variant_identity(plan, variant) -> str:
    return run_identity(variant.spec(), plan.datasets[variant.dataset])


def plan_identities(plan) -> dict[tuple[str, str], str]:
    """(study, variant id) -> identity, for every variant of a plan."""
    return {(st.name, v.id): variant_identity(plan, v) for st in plan.studies.values() for v in st.variants.values()}


@dataclass(frozen=True)
class Kept:
    """One kept run: `where` ("reference NAME" or "pilot pilots/STUDY.csv"), its study and variant,
    and (a reference's) when it was first kept."""

    where: str
    study: str
    variant: str
    since: str | None = None

    @property
    def pilot(self) -> bool:
        return self.where.startswith("pilot")

    def __str__(self) -> str:
        return f"{self.where} ({self.study}/{self.variant})"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def kept_runs(root: str | Path = SOURCE_ROOT) -> dict[str, list[Kept]]:
    """identity -> every run of that identity the project keeps under `root`."""
    root = Path(root)
    out: dict[str, list[Kept]] = {}
    for ids in sorted((root / REFERENCES).glob(f"*/{IDENTITIES}")):
        since = json.loads((ids.parent / "provenance.json").read_text()).get("kept_since")
        for row in _rows(ids):
            out.setdefault(row["identity"], []).append(Kept(f"reference {ids.parent.name}", row["study"],
                                                            row["variant"], since))
    for pilot in sorted((root / PILOTS).glob("*.csv")):
        for row in _rows(pilot):
            if row.get("identity"):
                out.setdefault(row["identity"], []).append(Kept(f"pilot {PILOTS}/{pilot.name}", row["study"],
                                                                row["variant"]))
    return out


def _stem(variant: str) -> str:
    """A variant's configuration: its id without the seed."""
    return re.sub(r"-s\d+$", "", variant)


def _seeds(seeds: list[int]) -> str:
    """10-29, or 3, 5, 9."""
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def prior_runs(st, kept: dict[str, list[Kept]], identity_of) -> dict[str, dict[str, tuple[list[int], list[Kept]]]]:
    """For each claim of study `st`: its runs that a run kept before the claim repeats, by
    configuration (variant id less the seed): (seeds, the kept runs). Kept before: any pilot (a
    pilot precedes the claims it sizes; the claims' own seeds are never a pilot's), any reference
    of another study first kept before the study's own reference (every one, while the study has
    none); a reference of the study itself is its own result. Runs the claim names as `seen` are
    left out. `identity_of(variant)` is the variant's identity."""
    own = [k.since for runs in kept.values() for k in runs if not k.pilot and k.study == st.name and k.since]
    own_since = min(own) if own else None
    out = {}
    for claim in st.claims:
        found: dict[str, tuple[list[int], list[Kept]]] = {}
        seen = {(json.dumps(s["point"], sort_keys=True) if s["point"] else None, seed)
                for s in claim.get("seen_runs", []) for seed in s["seeds"]}
        points = [claim["baseline"], *claim["lean"], *([claim["control"]] if claim.get("control") else [])]
        for point in points:
            label = json.dumps(point, sort_keys=True)
            for v in st.variants.values():
                if (v.seed not in claim["seeds"] or (None, v.seed) in seen or (label, v.seed) in seen
                        or not all(getattr(v.model, k) == x for k, x in point.items())):
                    continue
                prior = [k for k in kept.get(identity_of(v), []) if k.pilot or (
                    k.study != st.name and (own_since is None or (k.since or "") < own_since))]
                if prior:
                    seeds, where = found.setdefault(_stem(v.id), ([], []))
                    seeds.append(v.seed)
                    where.extend(k for k in prior if str(k) not in map(str, where))
        if found:
            out[claim["name"]] = found
    return out


def repeat_problems(plan, root: str | Path = SOURCE_ROOT) -> list[str]:
    """One line per claim of `plan` whose runs repeat runs kept before it and are not named in
    its `seen`: which configuration and seeds, where they were kept, and what to write."""
    kept = kept_runs(root)
    problems = []
    for st in plan.studies.values():
        for name, found in prior_runs(st, kept, lambda v: variant_identity(plan, v)).items():
            i = next(i for i, c in enumerate(st.claims) if c["name"] == name)
            said = "; ".join(f"{config} seeds {_seeds(seeds)} ({', '.join(sorted({k.where for k in where}))}: "
                             f"e.g. {where[0].study}/{where[0].variant})" for config, (seeds, where) in found.items())
            problems.append(f"config error: studies.{st.name}.claims[{i}] ({name}): its runs repeat runs the "
                            f"project keeps, so they are not new data: {said} (allowed: new seeds, or the "
                            f"repeats named in the claim's `seen`, e.g. seen: [{{heads: H, ..., seeds: [...]}}])")
    return problems


def reference_identities(plan, summaries: list[Path]) -> list[dict]:
    """Rows (study, variant, identity) of the runs a reference keeps (its studies' summary CSVs),
    each planned by `plan` (of the config files that made them)."""
    ids = plan_identities(plan)
    rows = []
    for path in summaries:
        for row in _rows(path):
            key = (row["study"], row["variant"])
            rows.append({"study": key[0], "variant": key[1], "identity": ids[key]})
    return rows


def identities_text(rows: list[dict]) -> str:
    """A reference's identities.csv."""
    return "\n".join(["study,variant,identity"] + [f"{r['study']},{r['variant']},{r['identity']}" for r in rows]) + "\n"
