"""Checks made while Snakemake parses the workflow, before any job is run or submitted.

Snakemake passes resource names it does not know straight through, and the SLURM plugin ignores
the ones it does not read: a typo such as `slurm_partiton=gpu` in a profile would silently send
every job to the default partition. These checks turn such slips into one-line errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Resources Snakemake itself understands.
SNAKEMAKE_RESOURCES = frozenset({
    "_cores", "_nodes", "threads", "runtime", "mem", "mem_mb", "mem_mib", "disk", "disk_mb", "disk_mib",
    "tmpdir", "gpu", "gpu_model", "gpu_manufacturer"})
# Resources of this workflow's own (leaner/workflow/scheduling.py).
LEANER_RESOURCES = frozenset({"gpu_share"})
# Resources snakemake-executor-plugin-slurm reads (2.x).
SLURM_RESOURCES = frozenset({
    "slurm_partition", "slurm_account", "slurm_extra", "slurm_cluster", "cluster", "clusters", "constraint",
    "qos", "nodes", "tasks", "tasks_per_node", "tasks_per_gpu", "cpus_per_task", "cpus_per_gpu",
    "mem_mb_per_cpu", "gres", "mpi"})
KNOWN_RESOURCES = SNAKEMAKE_RESOURCES | SLURM_RESOURCES | LEANER_RESOURCES


def _unknown(keys: Iterable[str]) -> list[str]:
    return sorted(k for k in keys if k not in KNOWN_RESOURCES)


def resource_problems(limits: Iterable[str], defaults: Iterable[str], overrides: Mapping[str, Iterable[str]],
                      rules: Iterable[str]) -> list[str]:
    """One line per unknown resource name in --resources (`limits`), --default-resources
    (`defaults`) or --set-resources (`overrides`, by rule), and per override of a rule that does
    not exist."""
    from .config import did_you_mean

    names = sorted(KNOWN_RESOURCES - {"_cores", "_nodes"})
    allowed = ", ".join(names)
    rules = set(rules)

    def unknown(where: str, keys: Iterable[str]) -> list[str]:
        return [f"resource error: {where}{k}: unknown resource{did_you_mean(k, names)} (allowed: {allowed})"
                for k in _unknown(keys)]

    problems = unknown("--resources ", limits) + unknown("--default-resources ", defaults)
    for rule, keys in sorted(overrides.items()):
        if rule not in rules:
            problems.append(f"resource error: --set-resources {rule}: no such rule{did_you_mean(rule, rules)} "
                            f"(allowed: {', '.join(sorted(rules))})")
        problems += unknown(f"--set-resources {rule}:", keys)
    return problems


def unknown_study_message(path: str, study: str, studies: Iterable[str]) -> str:
    from .config import did_you_mean

    studies = list(studies)
    return (f"{path}: no study named {study!r} in the config{did_you_mean(study, studies)} (allowed: "
            f"{', '.join(studies)}; see `leaner variants <config>`)")


def unknown_variant_message(path: str, study: str, variant: str, variants: Iterable[str]) -> str:
    from .config import did_you_mean

    variants = list(variants)
    shown = ", ".join(variants[:3]) + (f" and {len(variants) - 3} more" if len(variants) > 3 else "")
    return (f"{path}: no variant {variant!r} in study {study!r}{did_you_mean(variant, variants)} (allowed: "
            f"{shown}; see `leaner variants <config>`)")
