"""`leaner pilot`: a declared claim's arms trained on pilot seeds, the seeds the claim itself never
uses, through the same Snakemake workflow as the study; their per-run results kept as a small CSV
(pilots/{study}.csv, in the repository: one per study, every claim's arms, so that claims sharing
a configuration share its pilot runs) and the report a rationale quotes (each arm's mean and sd,
the declared test's power by analysis/stats.py, the seeds 80% needs).

The runs live in their own folder (pilot_runs/{study}, ignored by git): a pilot never writes into
the study's results, and a second call trains only what is missing."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from ..analysis.stats import ALPHA, MAX_SEEDS, TARGET_POWER, equivalence_power, seeds_for, welch_power
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


# The pilot's report


def arms(pilot: pd.DataFrame, claim: dict, label) -> pd.DataFrame:
    """Per arm of `claim` (role: baseline, lean[j], control), from a pilot's per-run rows (its CSV:
    configuration, seed, metric, value; `label` names a claim point's configuration as the CSV
    does): configuration, runs, n (the runs that learned: summary.nearest_learned for P2's MSE,
    every run otherwise), mean and sd over those. An arm the pilot did not run is left out."""
    from ..analysis.summary import nearest_learned

    rows = []
    for role, point in claim_arms(claim):
        runs = pilot[(pilot["configuration"] == label(point)) & (pilot["metric"] == claim["metric"])]["value"]
        kept = runs[runs.map(nearest_learned)] if claim["metric"] == "best_train_loss" else runs
        if len(runs):
            rows.append({"role": role, "configuration": label(point), "runs": len(runs), "n": len(kept),
                         "mean": kept.mean(), "sd": kept.std()})
    return pd.DataFrame(rows, columns=["role", "configuration", "runs", "n", "mean", "sd"])


def claim_arms(claim: dict) -> list[tuple[str, dict]]:
    """(role, grid point) of every arm of a claim: the baseline, each lean model, the control."""
    out = [("baseline", claim["baseline"])] + [(f"lean[{j}]", p) for j, p in enumerate(claim["lean"])]
    return out + ([("control", claim["control"])] if claim.get("control") else [])


def comparisons(claim: dict) -> list[tuple[str, str]]:
    """(arm, against) pairs a claim's report covers: each lean model against the baseline, and the
    control against the baseline where the claim names one."""
    return [(role, "baseline") for role, _ in claim_arms(claim)[1:]]


def shift_of(hypothesis: str, margin: float, seen: float) -> tuple[float, str]:
    """The shift beyond the null a declared test's power is taken at, and the truth it assumes:
    non-inferior at a true difference of 0 (the bound must clear -margin); superior at a true gain
    of one margin (the bound must clear 0); inferior at the pilot's difference (the upper bound
    must fall below -margin: the cost the pilot saw, less the margin)."""
    if hypothesis == "non-inferior":
        return margin, "a true difference of 0"
    if hypothesis == "superior":
        return margin, f"a true gain of {margin:g}"
    return -seen - margin, f"the pilot's difference {seen:+.3f}"


def report(pilot: pd.DataFrame, claim: dict, label) -> list[str]:
    """What a claim's rationale needs, from the pilot's per-run values: each arm's mean and sd (over
    the runs that learned, with how many did not), then per comparison the difference seen, the
    power of the declared test at the declared margin for the declared seeds (each arm with its own
    sd; where runs did not learn, at the learned runs the collapse rate leaves of the declared seeds)
    and the seeds 80% power needs; for a non-inferiority claim, the power of equivalence too."""
    per_arm = arms(pilot, claim, label).set_index("role")
    declared = len(claim["seeds"])
    hypothesis = claim.get("hypothesis", "non-inferior")
    sign = 1.0 if claim.get("mode", "max") == "max" else -1.0
    seeds = sorted(pilot[pilot["configuration"].isin(per_arm["configuration"])]["seed"].unique())
    lines = [f"pilot of claim {claim['name']} ({claim['metric']}, {len(seeds)} seeds: "
             f"{', '.join(str(s) for s in seeds)})"]
    for role, arm in per_arm.iterrows():
        stuck = f", {arm['runs'] - arm['n']} of {arm['runs']} did not learn" if arm["runs"] > arm["n"] else ""
        lines.append(f"  {role:<9} {arm['configuration']:<22} mean {arm['mean']:.3f} (sd {arm['sd']:.3f}), "
                     f"n {arm['n']}{stuck}")
    lines.append(f"  the declared test: {hypothesis}, margin {claim['margin']:g}, one-sided {ALPHA:.0%} Welch; "
                 f"each arm at its own pilot sd:")
    for role, against in comparisons(claim):
        if role not in per_arm.index or against not in per_arm.index:
            continue
        a, b = per_arm.loc[role], per_arm.loc[against]
        seen = sign * (a["mean"] - b["mean"])
        if role == "control":  # compared, not claimed: a test of it is a claim of its own (e.g. depth_costs)
            lines.append(f"  control {a['configuration']} against {b['configuration']}: seen {seen:+.3f}")
            continue
        shift, truth = shift_of(hypothesis, claim["margin"], seen)
        # the runs a declared seed count leaves, at the pilot's rate of learning (both arms' least)
        rate = min(a["n"] / a["runs"], b["n"] / b["runs"])
        n = int(declared * rate)
        power = welch_power(a["sd"], b["sd"], n, n, shift)
        need = seeds_for(a["sd"], b["sd"], shift)
        need_text = f"over {MAX_SEEDS}" if need is None else str(math.ceil(need / rate)) if rate else "n/a"
        learned = f" ({n} that learn at the pilot's rate)" if rate < 1 else ""
        power_text = (f"power {power:.0%} at {declared} seeds{learned}, at {truth}" if n > 1
                      else f"no test at the declared {'one seed' if declared == 1 else 'seeds'}")
        lines.append(f"  {a['configuration']} against {b['configuration']}: seen {seen:+.3f}; {power_text}; "
                     f"{TARGET_POWER:.0%} needs {need_text} seeds")
        if hypothesis == "non-inferior" and n > 1:
            lines.append(f"    equivalence (both bounds within +-{claim['margin']:g}) at a true difference of 0: "
                         f"power {equivalence_power(a['sd'], b['sd'], n, claim['margin']):.0%} (simulated)")
    return lines


PILOT_COLUMNS = ["study", "configuration", "variant", "seed", "metric", "value", "identity"]  # workflow/kept.py


def merged(old: pd.DataFrame | None, new: list[dict]) -> pd.DataFrame:
    """A study's pilot CSV with `new` runs laid over the `old` ones (a run measured again replaces
    its row), ordered by configuration, seed and metric."""
    frame = pd.DataFrame(new, columns=PILOT_COLUMNS)
    if old is not None and len(old):
        keep = ~old.set_index(["variant", "metric"]).index.isin(frame.set_index(["variant", "metric"]).index)
        frame = pd.concat([old[keep].reindex(columns=PILOT_COLUMNS), frame], ignore_index=True)
    return frame.sort_values(["configuration", "seed", "metric"], kind="stable").reset_index(drop=True)
