"""What a Snakemake run of this workflow does besides its rules, in one place. rules/common.smk
only validates the config and answers the rules' questions; the Snakefile calls these:

- `prepare`, while the Snakefile is parsed (by every Snakemake of a run, the one inside a cluster
  job too): the jobs' environment, each failed job's retries decided per job, and in a Slurm job
  the stop signals passed on to the training;
- `group_sizes`, from the rules' `group` function, when the DAG asks for its first group;
- `check_resource_names`, once every rule is defined: a misspelt resource stops the run;
- `at_start`, from `onstart` (a real run, not a dry run; not inside cluster jobs): the GPUs and
  their shares, the plan check, finished copies a retrained job forgets, the hub check and the
  warm process, each stopping the run with one line a problem before any job starts;
- `at_end`, from `onsuccess` and `onerror`: the warm process stops; after a success, where the
  results are.

Every reach into Snakemake's internals goes through workflow/engine.py.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from .workflow import engine
from .workflow.preflight import resource_problems
from .workflow.scheduling import (
    RESUMABLE_RULES,
    RETRIED_RULES,
    cluster_check_args,
    job_retries,
    local_gpu_limits,
    plan_check_skipped,
    wanted_group_components,
)

PREPARE_RULES = ("prepare_data", "prepare_data_local")  # rules/data.smk
WARM = []  # the warm process of this run, if any


def _stop(problems: list[str]) -> None:
    """Stop the run before any job, one line a problem."""
    if problems:
        sys.stderr.write("\n".join(problems) + "\n")
        raise SystemExit(2)


def prepare(workflow, plan, basedir: str) -> None:
    """While the Snakefile is parsed: jobs run the `leaner` CLI of the environment Snakemake runs
    in (--sdm conda: envs/leaner.post-deploy.sh installs the package from `basedir`, wherever
    --directory points); retries and stop signals as the module docstring says."""
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("LEANER_SOURCE", basedir)
    engine.retries_by_job(retry_decision(plan, engine.inside_cluster_job(workflow)))
    engine.relay_stop_signals(os.environ, sys.argv)


def retry_decision(plan, inside_job: bool):
    """A failed job's retries (workflow/scheduling.py job_retries) for the rules retried as their
    study allows; one line where a job is not tried again, and why (once a job and attempt)."""
    said = set()

    def decide(job: engine.FailedJob) -> int | None:
        if job.rule not in RETRIED_RULES:
            return None
        allowed = plan.studies[job.wildcards["study"]].resources["attempts"]
        tries, line = job_retries(job.rule, job.attempt, allowed, job.out_dir, inside_job)
        if line and (job.name, job.attempt) not in said:
            said.add((job.name, job.attempt))
            sys.stderr.write(f"{job.rule} {job.out_dir}: {line}\n")
        return tries

    return decide


def group_sizes(workflow, plan) -> None:
    """The group sizes GPU sharing needs (one Slurm job of one GPU trains k variants); a size the
    user gave on the command line or in a profile is kept."""
    resources = {name: st.resources for name, st in plan.studies.items()}
    engine.set_group_components(workflow, lambda given: wanted_group_components(resources, given))


def check_resource_names(workflow) -> None:
    """Unknown resource names in --resources / --default-resources / --set-resources (a profile's
    typo) stop the run before any job."""
    _stop(resource_problems(*engine.resource_settings(workflow)))


def at_start(workflow, plan, config: dict) -> None:
    """At the start of a real run, in this order (each may stop it)."""
    _count_gpus(workflow, plan)
    jobs = engine.jobs_to_run(workflow)
    _check_plan(workflow, plan, config, jobs)
    _drop_finished_copies(jobs)
    _check_hub_data(plan, jobs)
    if engine.runs_locally(workflow):
        from . import warm

        WARM.append(warm.start(plan.numerics, "logs/warm.log"))


def at_end(success: bool = False) -> None:
    """At the end of a run: the warm process stops taking jobs; after a success, where the
    findings, figures, tables and report are."""
    from . import warm

    while WARM:
        warm.stop(WARM.pop())
    lines = outcome_lines(Path.cwd()) if success else []
    if lines:
        print("\n".join(lines), file=sys.stderr, flush=True)


def outcome_lines(root: Path) -> list[str]:
    """Where a finished run's results are (nothing before its findings exist)."""
    findings = root / "results" / "overview" / "findings.md"
    if not findings.is_file():
        return []
    figures = len(list((root / "results" / "figures").glob("*.png")))
    tables = len(list((root / "results" / "tables").glob("*.csv")))
    return [f"leaner: the results are in {root}:",
            f"  findings  {findings} (and findings.html beside it): what each study's claims and tables show",
            f"  figures   {root / 'results' / 'figures'}/ ({figures} figures, each .png and .pdf)",
            f"  tables    {root / 'results' / 'tables'}/ ({tables} tables, each .csv, .md, .tex and .html)",
            f"  report    {shlex.join([*sys.argv, '--report', str(root / 'report.html')])}  (one page: every "
            "figure, table and caption)",
            f"  status    leaner status --root {root}"]


def _count_gpus(workflow, plan) -> None:
    """A local run: the GPUs and their shares Snakemake counts; a study this machine cannot run
    as asked stops the run (workflow/scheduling.py local_gpu_limits)."""
    if not engine.runs_locally(workflow):
        return
    limits, problems = local_gpu_limits(plan, *(engine.global_resource(workflow, name)
                                                for name in ("gpu", "_cores", "gpu_share")))
    _stop(problems)
    for name, value in limits.items():
        engine.limit_resource(workflow, name, value)


def _check_plan(workflow, plan, config: dict, jobs: list[engine.PendingJob]) -> None:
    """`leaner cost --check` (planning/fit.py), one line per job that cannot fit or finish. Locally:
    each GPU study's memory against the CUDA devices here ($LEANER_GPU_MEM_GB instead). On a
    cluster, always: memory and time on each study's gpu_model, else the card every training job's
    resolved gpu_model names, else $LEANER_GPU, else the default card, with the early stop signal
    the jobs' slurm_extra asks for (scheduling.cluster_check_args); one line says what was checked.
    It runs in a child process: the estimate opens a CUDA context where CUDA is present, which this
    process, alive for the whole sweep, must not hold. LEANER_SKIP_PLAN_CHECK=1 skips it."""
    import subprocess
    import tempfile

    import yaml

    from .planning.fit import may_know_a_card

    where = "local" if engine.runs_locally(workflow) else "cluster"
    if plan_check_skipped(os.environ) or not may_know_a_card(plan, where):
        return
    extra = []
    if where == "cluster":
        extra = cluster_check_args([j.resources for j in jobs if j.rule in RESUMABLE_RULES], os.environ)
    with tempfile.NamedTemporaryFile("w", prefix=".leaner-config-", suffix=".yaml") as resolved:
        yaml.safe_dump(dict(config), resolved)
        resolved.flush()
        src = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run([sys.executable, "-m", "leaner", "cost", resolved.name, "--check", where, *extra],
                              env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr)
        raise SystemExit(2)
    if where == "cluster":
        sys.stderr.write(proc.stderr)


def _drop_finished_copies(jobs: list[engine.PendingJob]) -> None:
    """A training job this run retrains (forced, new params, new input) forgets the finished run a
    cluster job kept for it (training/finished.py), so that it trains again."""
    from .training.finished import drop

    for job in jobs:
        if job.rule in RESUMABLE_RULES and job.retrains:
            drop(job.out_dir)


def _check_hub_data(plan, jobs: list[engine.PendingJob]) -> None:
    """Every dataset from the hub whose preparation this run will run is asked for at the hub; one
    the pinned `datasets` cannot load stops the run, with one line saying what to do. Skipped with
    LEANER_SKIP_DATA_CHECK=1 or in offline mode (HF_DATASETS_OFFLINE=1, HF_HUB_OFFLINE=1)."""
    from .data.hub_check import hub_problems, skip_reason

    if skip_reason(os.environ):
        return
    names = {job.wildcards["dataset"] for job in jobs if job.rule in PREPARE_RULES}
    _stop(hub_problems({name: plan.datasets[name] for name in sorted(names)}))
