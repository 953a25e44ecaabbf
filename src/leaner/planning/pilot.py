"""`leaner pilot`: a declared claim's arms trained on pilot seeds, the seeds the claim itself never
uses, through the same Snakemake workflow as the study; their per-run results kept as a small CSV
(pilots/{study}.csv, in the repository: one per study, every claim's arms, so that claims sharing
a configuration share its pilot runs) and the report a rationale quotes (analysis/power.py: each
arm's mean and sd, the declared test's power, the seeds 80% needs).

The runs live in their own folder (pilot_runs/{study}, ignored by git): a pilot never writes into
the study's results, and a second call trains only what is missing."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import yaml

from ..analysis.power import claim_arms, merged, report
from ..io import read_json, write_csv, write_text
from ..provenance import SOURCE_ROOT
from ..running.launch import snakemake_command
from ..workflow.config import ConfigError, did_you_mean
from ..workflow.kept import variant_identity
from ..workflow.plan import Plan, build_plan

PILOT_CSV = "pilots/{study}.csv"
PILOT_RUNS = "pilot_runs/{study}"


class PilotError(ValueError):
    """A pilot that cannot run as asked; the message is one line naming what is allowed."""


def find_claim(plan: Plan, study: str, name: str) -> dict:
    if study not in plan.studies:
        raise PilotError(f"{study}: no such study{did_you_mean(study, plan.studies)} "
                         f"(allowed: {', '.join(plan.studies)})")
    claims = {c["name"]: c for c in plan.studies[study].claims}
    if name not in claims:
        raise PilotError(f"--claim {name}: study {study} declares no such claim (allowed: "
                         f"{', '.join(claims) or 'none: the study declares no claims'})")
    return claims[name]


def pilot_config(config: dict, study: str, seeds: list[int]) -> dict:
    """The config the pilot runs: the study alone, every grid entry on the pilot seeds, without its
    claims (the pilot's runs are no claim's data; its report reads the claim of the study's plan)."""
    out = copy.deepcopy(config)
    out["studies"] = {study: {k: v for k, v in out["studies"][study].items() if k != "claims"}}
    out["every_study"] = {**(out.get("every_study") or {}), "seeds": list(seeds)}
    return out


def pilot_runs(plan: Plan, study: str, claim: dict, seeds: list[int]) -> list[tuple[str, str, int]]:
    """(role, variant id, seed) of every pilot run, in the pilot plan."""
    variants = plan.studies[study].variants.values()
    runs = []
    for role, point in claim_arms(claim):
        for seed in seeds:
            found = [v for v in variants
                     if v.seed == seed and all(getattr(v.model, k, None) == x for k, x in point.items())]
            runs.append((role, found[0].id, seed))
    return runs


def refuse_declared_seeds(claim: dict, seeds: list[int]) -> None:
    """A pilot's seeds must be ones the claim never uses: its runs are not the claim's data."""
    used = sorted(set(seeds) & set(claim["declared_seeds"]))
    if used:
        raise PilotError(f"--seeds: {used} are seeds claim {claim['name']} declares (allowed: seeds it never uses, "
                         f"not {claim['declared_seeds']})")


def value_of(metrics: dict, metric: str) -> float:
    """A run's value of a claim's metric: a final metric, or best_X (the best epoch's X, as the
    summaries name it: P2's best_train_loss)."""
    if metric in metrics["final"]:
        return float(metrics["final"][metric])
    best = metrics.get("best") or {}
    if metric.startswith("best_") and metric[5:] in best:
        return float(best[metric[5:]])
    raise PilotError(f"metric {metric}: not among a training run's final metrics (allowed: "
                     f"{', '.join([*metrics['final'], *(f'best_{k}' for k in best)])}); a pilot cannot measure it")


def run(config: dict, study: str, claim_name: str, seeds: list[int], out_csv: str | None = None,
        work: str | None = None, cores: str = "all", from_csv: bool = False) -> list[str]:
    """Train the claim's arms on `seeds` (or, `from_csv`, read a pilot already kept) and return the
    report's lines. Raises PilotError or ConfigError."""
    import pandas as pd

    claim = find_claim(build_plan(config), study, claim_name)
    out_csv = out_csv or PILOT_CSV.format(study=study)
    if from_csv:
        if not Path(out_csv).exists():
            raise PilotError(f"--from-csv: {out_csv} does not exist (run the pilot first, without --from-csv)")
        return report(pd.read_csv(out_csv), claim, point_label)
    refuse_declared_seeds(claim, seeds)
    if len(seeds) < 2:
        raise PilotError(f"--seeds: {seeds} gives no standard deviation (allowed: two seeds or more)")
    overlay = pilot_config(config, study, seeds)
    pilot_plan = build_plan(overlay)
    runs = pilot_runs(pilot_plan, study, claim, seeds)
    folder = Path(work or PILOT_RUNS.format(study=study))
    targets = [f"results/{study}/{variant}/metrics.json" for _, variant, _ in runs]
    print(f"leaner pilot: {len(runs)} runs of claim {claim_name} in {folder}", flush=True)
    train_pilot(folder, overlay, targets, cores)
    rows = [{"study": study, "configuration": point_label(dict(claim_arms(claim))[role]), "variant": variant,
             "seed": seed, "metric": claim["metric"],
             "value": value_of(read_json(folder / f"results/{study}/{variant}/metrics.json"), claim["metric"]),
             "identity": variant_identity(pilot_plan, pilot_plan.studies[study].variants[variant])}
            for role, variant, seed in runs]
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    write_csv(out_csv, merged(pd.read_csv(out_csv) if Path(out_csv).exists() else None, rows))
    return [f"wrote {out_csv}", *report(pd.read_csv(out_csv), claim, point_label)]


def train_pilot(folder: Path, overlay: dict, targets: list[str], cores: str) -> None:
    """Run the workflow in `folder` on `overlay` (written there as pilot.yaml) for `targets`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder / "pilot.yaml", yaml.safe_dump(overlay, sort_keys=False))
    snakefile = Path("Snakefile") if Path("Snakefile").exists() else SOURCE_ROOT / "Snakefile"
    cmd = [snakemake_command(), "-s", str(snakefile.resolve()), "-d", str(folder), "--configfile",
           str((folder / "pilot.yaml").resolve()), "--cores", str(cores), "--rerun-incomplete", *targets]
    if subprocess.run(cmd).returncode:
        raise PilotError(f"the pilot's Snakemake run failed (its logs: {folder / 'logs'})")


def point_label(point: dict) -> str:
    """A claim point's configuration as the tables name it (tables.claim_label)."""
    from ..analysis.tables import claim_label

    return claim_label(point)


def main(config: dict, a) -> int:
    try:
        for line in run(config, a.study, a.claim, a.seeds, a.out, a.work, a.cores, a.from_csv):
            print(line)
    except (PilotError, ConfigError) as err:
        print(f"leaner pilot: error: {err}", file=sys.stderr)
        return 2
    return 0
