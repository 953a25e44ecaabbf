"""Snakemake's internals, in one place: every reading and setting this workflow makes of a running
Snakemake where Snakemake 9 gives no public door. Nothing else in the package or the rules reaches
past the Snakefile's own directives (the rules' functions get wildcards, the `onstart` handlers
hand `workflow` to leaner.run_hooks, which asks this module).

Written against snakemake 9.27.1 (requirements.lock pins it). tests/test_engine.py runs each
function on a workflow of its own, through Snakemake as users start it, and fails when a release
changes what it reaches into.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

TESTED_WITH = "9.27.1"


@dataclass(frozen=True)
class PendingJob:
    """A job the run will execute: its rule, wildcards, first output's folder, its resources as
    resolved (the profile's default and set resources applied; `out_dir` None for a rule without
    outputs, as a target rule) and whether it runs for a reason
    that asks for new results (forced, new params, code, software or input), not only because its
    outputs are missing or incomplete."""

    rule: str
    wildcards: dict
    out_dir: Path | None
    resources: dict
    retrains: bool


@dataclass(frozen=True)
class FailedJob:
    """A job that failed: its rule, which attempt failed, its wildcards, its first output's folder,
    and its name (one per job)."""

    rule: str
    attempt: int
    wildcards: dict
    out_dir: Path
    name: str


def runs_locally(workflow) -> bool:
    """Whether this Snakemake runs its jobs itself (not on a cluster, not a dry run's plan)."""
    return bool(workflow.local_exec)


def inside_cluster_job(workflow) -> bool:
    """Whether this Snakemake is the one inside a cluster job (its rules' runner there)."""
    return bool(workflow.remote_exec)


def resource_settings(workflow) -> tuple[list[str], list[str], dict[str, list[str]], list[str]]:
    """The resource names the command line and profiles set: (--resources, --default-resources,
    {rule: --set-resources names}, every rule's name)."""
    rs = workflow.resource_settings
    overrides = {rule: list(res.keys()) for rule, res in dict(rs.overwrite_resources or {}).items()}
    return (list(dict(rs.resources or {}).keys()), list(dict(rs.default_resources or {}).keys()), overrides,
            [r.name for r in workflow.rules])


def global_resource(workflow, name: str) -> int | None:
    """The run's limit of a global resource (`_cores`, `gpu`, ...), None where none is set."""
    return workflow.global_resources.get(name).value


def jobs_to_run(workflow) -> list[PendingJob]:
    """Every job this run will execute (at `onstart`, once the DAG is built)."""
    dag = workflow.dag
    jobs = []
    for job in dag.needrun_jobs():
        reason = dag.reason(job)
        retrains = bool(reason.forced or reason.is_provenance_triggered() or reason.updated_input
                        or reason.updated_input_run)
        out_dir = Path(job.output[0]).parent if job.output else None  # a target rule has no output
        jobs.append(PendingJob(job.rule.name, dict(job.wildcards), out_dir, dict(job.resources), retrains))
    return jobs


def set_group_components(workflow, wanted: Callable[[Mapping[str, int]], dict[str, int]]) -> None:
    """Set the group sizes to `wanted(the sizes given on the command line or in a profile)`. Called
    from a rule's `group` function, when the DAG asks for its first group: Snakemake 9 replaces
    `workflow.group_settings` from the command line after the Snakefile is parsed, so a setting
    made at parse time is lost."""
    settings = workflow.group_settings
    sizes = wanted(dict(settings.group_components))
    if sizes != dict(settings.group_components):
        settings.group_components = sizes


def limit_resource(workflow, name: str, value: int) -> None:
    """A global resource limit set at `onstart`, once the scheduler exists: Snakemake 9's
    `register_resource` updates what is free but not the totals the scheduler counts by, so those
    are set too."""
    workflow.register_resource(name, value)
    workflow.scheduler.global_resources[name] = value


def retries_by_job(decide: Callable[[FailedJob], int | None]) -> None:
    """A failed job's retries decided per job by `decide` (None: the rule's own): Snakemake 9.27
    keeps one `retries` number per rule (workflow.py refuses a callable) and reads it, once per
    failure, as `Job.restart_times` (JobScheduler._handle_error: another attempt while
    restart_times > attempt - 1), so that property is replaced here by one that asks `decide`
    first. A group job takes the most of its jobs' (GroupJob.restart_times), unchanged."""
    from snakemake.jobs import Job

    rule_own = getattr(Job, "_rule_restart_times", None) or Job.__dict__["restart_times"]
    Job._rule_restart_times = rule_own

    def restart_times(job) -> int:
        own = decide(FailedJob(job.rule.name, job.attempt, dict(job.wildcards), Path(job.output[0]).parent,
                               str(job)))
        return rule_own.fget(job) if own is None else own

    Job.restart_times = property(restart_times)


def relay_stop_signals(environ: Mapping, argv: list[str]) -> bool:
    """In the Snakemake that runs a Slurm job's rules (inside the job, not the jobstep Snakemake of
    its batch step): SIGTERM (the time limit, scancel, a preemption) and SIGUSR1 (the early stop
    signal profiles/slurm asks for) are passed on to the job processes it runs (its children: the
    rules `exec` the training), then Snakemake does what it does: on SIGTERM it waits for them
    to end; SIGUSR1, which would end it at once (its default action) and with it, Slurm's step
    and the training before its save, it lets pass. Slurm with proctrack/cgroup, as most clusters
    run it, signals only the step's own process, this Snakemake, which would otherwise keep the
    signal to itself. True where installed (in the main thread of such a Snakemake).

    SIGTERM reaches the scheduler's own handler (JobScheduler.exit_gracefully, snakemake 9.27.1,
    installed after this file is parsed), which is wrapped here."""
    import signal
    import threading

    if not environ.get("SLURM_JOB_ID") or "slurm-jobstep" in argv:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    from snakemake.scheduling.job_scheduler import JobScheduler

    graceful = getattr(JobScheduler, "_leaner_graceful", None) or JobScheduler.exit_gracefully
    JobScheduler._leaner_graceful = graceful
    relayed = wakeup_relay((signal.SIGTERM, signal.SIGUSR1))

    def exit_gracefully(self, *args):
        if not relayed:
            pass_on(signal.SIGTERM)
        return graceful(self, *args)

    JobScheduler.exit_gracefully = exit_gracefully
    # the handler keeps SIGUSR1 from ending Snakemake; the relay (where it runs) passes it on
    signal.signal(signal.SIGUSR1, lambda signum, frame: None if relayed else pass_on(signum))
    return True


_RELAYED: set[int] = set()  # the signals this process's relay thread passes on


def wakeup_relay(signals) -> bool:
    """A thread that passes `signals` on to this process's children the moment any of its threads
    gets one. Python runs a signal's handler in the main thread only, when that thread next runs
    Python code; Snakemake's main thread waits on a lock while its jobs run, and a signal the kernel
    delivers to another of its threads (its choice for a signal sent to the process) does not wake
    it, so a handler could wait the whole job and the training never hear of its time limit (seen
    once in CI: a SIGUSR1 left the training running to its end). Python's C-level handler writes
    each handled signal's number to the wakeup fd as it arrives, in whatever thread: the relay reads
    it there. The signals need a Python handler (their numbers are written only then). False where
    another wakeup fd is set already (the handlers then pass the signals on themselves)."""
    import os
    import signal
    import threading

    wanted = {int(s) for s in signals}
    if wanted <= _RELAYED:
        return True
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)
        return False
    _RELAYED.update(wanted)

    def relay() -> None:
        while data := os.read(r, 512):
            for signum in dict.fromkeys(data):
                if signum in wanted:
                    pass_on(signum)

    threading.Thread(target=relay, name="leaner-stop-relay", daemon=True).start()
    return True


def pass_on(signum: int) -> list[int]:
    """Send `signum` to this process's children (the pids it reached)."""
    import psutil

    reached = []
    for child in psutil.Process().children():
        try:
            child.send_signal(signum)
            reached.append(child.pid)
        except psutil.Error:
            continue
    return reached
