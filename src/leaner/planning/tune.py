"""`leaner tune`: each arm of a declared claim trained at several learning rates on a validation
split carved from the training data (never the test split), the rate each arm reaches its best
mean at picked by the claim's own metric and direction, and the choice kept in the repository
(pilots/{study}_lr.csv) before the claim's run, which then trains each arm at its own rate
(`overrides` whose `where` is the arm, as the report prints them).

The runs are pilot runs (planning/pilot.py): the claim's arms on seeds the claim never uses, in
their own folder (pilot_runs/{study}_lr), one copy of the study per rate, on a copy of its dataset
whose eval split is the validation rows (a dataset kind that cannot carve one refuses in one line)."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

from ..io import read_json, write_csv
from ..workflow.config import ConfigError
from ..workflow.kept import variant_identity
from ..workflow.plan import build_plan
from .pilot import (
    PilotError,
    claim_arms,
    find_claim,
    pilot_config,
    pilot_runs,
    point_label,
    refuse_declared_seeds,
    train_pilot,
    value_of,
)

TUNE_CSV = "pilots/{study}_lr.csv"
TUNE_RUNS = "pilot_runs/{study}_lr"
TUNE_COLUMNS = ["study", "configuration", "variant", "lr", "seed", "metric", "value", "chosen", "identity"]
VALIDATION_KINDS = ("digits",)  # kinds whose prepare carves a validation split (validation_fraction)


def tune_config(config: dict, study: str, lrs: list[float], seeds: list[int], fraction: float) -> dict:
    """The config the tuning runs: per rate, a copy of the study (named STUDY_lrI) on the
    validation copy of its dataset, its recipe's lr (and every override's) set to the rate."""
    plan = build_plan(config)
    dataset = plan.studies[study].dataset
    entry = copy.deepcopy(plan.datasets[dataset])
    if entry.get("kind") not in VALIDATION_KINDS:
        raise PilotError(f"study {study}: dataset {dataset} (kind {entry.get('kind')}) cannot carve a validation "
                         f"split from its training data (allowed kinds: {', '.join(VALIDATION_KINDS)})")
    out = pilot_config(config, study, seeds)
    base = out["studies"].pop(study)
    out.setdefault("datasets", {})[f"{dataset}_validation"] = {**entry, "validation_fraction": fraction}
    for i, lr in enumerate(lrs):
        st = copy.deepcopy(base)
        st["dataset"] = f"{dataset}_validation"
        st["recipe"] = {**(st.get("recipe") or {}), "lr": lr}
        for ov in st.get("overrides") or []:
            (ov.get("recipe") or {}).pop("lr", None)
        out["studies"][f"{study}_lr{i}"] = st
    return out


def choose(rows: list[dict], mode: str) -> list[dict]:
    """Mark each configuration's rate with the best mean value (higher for `mode` max, lower for
    min; a tie goes to the smaller rate) as chosen."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    means = frame.groupby(["configuration", "lr"])["value"].mean().reset_index()
    sign = 1.0 if mode == "max" else -1.0
    best = {}
    for cfg, part in means.groupby("configuration"):
        part = part.assign(key=sign * part["value"]).sort_values(["key", "lr"], ascending=[False, True])
        best[cfg] = float(part["lr"].iloc[0])
    return [{**r, "chosen": r["lr"] == best[r["configuration"]]} for r in rows]


def report(rows: list[dict], claim: dict) -> list[str]:
    """Each arm's mean validation value per rate, the chosen rate, and the overrides to declare."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    lines = [f"claim {claim['name']}, metric {claim['metric']} on the validation split ({frame['seed'].nunique()} "
             f"seeds an arm and rate):"]
    points = dict((point_label(p), p) for _, p in claim_arms(claim))
    overrides = []
    for cfg, part in frame.groupby("configuration", sort=False):
        by_lr = part.groupby("lr")["value"].agg(["mean", "std"])
        chosen = float(part[part["chosen"]]["lr"].iloc[0])
        cells = ", ".join(f"{lr:g}: {m:.4f} (sd {s:.4f})" if not math.isnan(s) else f"{lr:g}: {m:.4f}"
                          for lr, (m, s) in by_lr.iterrows())
        edge = {min(by_lr.index): "smallest", max(by_lr.index): "largest"}.get(chosen)
        lines.append(f"  {cfg}: {cells}; chosen {chosen:g}"
                     + (f" (the {edge} rate tried: the best may lie beyond it; try one past it)" if edge else ""))
        where = ", ".join(f"{k}: {v}" for k, v in points[cfg].items())
        overrides.append(f"  - {{where: {{{where}}}, recipe: {{lr: {chosen:g}}}}}")
    return [*lines, "overrides (each arm at its chosen rate):", *overrides]


def run(config: dict, study: str, claim_name: str, lrs: list[float], seeds: list[int], fraction: float = 0.2,
        out_csv: str | None = None, work: str | None = None, cores: str = "all") -> list[str]:
    """Train the claim's arms at each rate on `seeds` and return the report's lines. Raises
    PilotError or ConfigError."""
    import pandas as pd

    claim = find_claim(build_plan(config), study, claim_name)
    refuse_declared_seeds(claim, seeds)
    if len(lrs) < 2 or min(lrs) <= 0:
        raise PilotError(f"--lrs: {lrs} (allowed: two or more positive learning rates)")
    if not 0 < fraction < 1:
        raise PilotError(f"--validation-fraction: {fraction} (allowed: a share of the training rows in (0, 1))")
    overlay = tune_config(config, study, lrs, seeds, fraction)
    plan = build_plan(overlay)
    runs = [(i, lr, role, variant, seed) for i, lr in enumerate(lrs)
            for role, variant, seed in pilot_runs(plan, f"{study}_lr{i}", claim, seeds)]
    folder = Path(work or TUNE_RUNS.format(study=study))
    targets = [f"results/{study}_lr{i}/{variant}/metrics.json" for i, _, _, variant, _ in runs]
    print(f"leaner tune: {len(runs)} runs of claim {claim_name} ({len(lrs)} rates) in {folder}", flush=True)
    train_pilot(folder, overlay, targets, cores)
    points = dict(claim_arms(claim))
    rows = [{"study": study, "configuration": point_label(points[role]), "variant": variant, "lr": lr, "seed": seed,
             "metric": claim["metric"],
             "value": value_of(read_json(folder / f"results/{study}_lr{i}/{variant}/metrics.json"), claim["metric"]),
             "identity": variant_identity(plan, plan.studies[f"{study}_lr{i}"].variants[variant])}
            for i, lr, role, variant, seed in runs]
    rows = choose(rows, claim["mode"])
    out_csv = out_csv or TUNE_CSV.format(study=study)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    write_csv(out_csv, pd.DataFrame(rows, columns=TUNE_COLUMNS))
    return [f"wrote {out_csv}", *report(rows, claim)]


def main(config: dict, a) -> int:
    try:
        for line in run(config, a.study, a.claim, a.lrs, a.seeds, a.validation_fraction, a.out, a.work, a.cores):
            print(line)
    except (PilotError, ConfigError) as err:
        print(f"leaner tune: error: {err}", file=sys.stderr)
        return 2
    return 0
