"""A job's life against its time limit: the attempts a job of a given length needs within its
runtime, and whether its stop (the step in flight, then its state's write) fits between the stop
signal and the scheduler's SIGKILL."""

from __future__ import annotations

import math

START_MINUTES = 5.0  # an attempt's start-up before its first step (imports, data, model, compile), assumed
KILL_WAIT_S = 30.0  # from a scheduler's SIGTERM at the time limit to its SIGKILL: Slurm's KillWait default
# profiles/slurm asks Slurm for SIGUSR1 this long before the time limit (sbatch --signal=USR1@300, a
# test checks the two agree): sized from the largest stop `leaner cost` prices in configs/paper.yaml,
# vit_imagenet's L12-H32-D2048 (its step in flight, 0.3 s, then its 7.3 GB state written in ~38 s at
# WRITE_BYTES_PER_S), with room for a slower filesystem and Slurm's signal timer (up to 60 s early)
SIGNAL_LEAD_S = 300.0
STOP_GRACE_S = SIGNAL_LEAD_S + KILL_WAIT_S  # from the early signal to the SIGKILL


def stop_seconds(params: int, step_s: float) -> float:
    """Seconds a stop signal takes to become a saved state: the step in flight, then the write."""
    from ..training.resume import write_seconds

    return step_s + write_seconds(params)


def attempts_needed(wall_hours: float | None, runtime: float, params: int, checkpoint: float | str | None,
                    step_s: float = 0.0, grace_s: float = STOP_GRACE_S,
                    lead_s: float = SIGNAL_LEAD_S) -> tuple[int | None, str | None]:
    """(how many runs of at most `runtime` minutes a job of `wall_hours` needs, or None; why it
    cannot finish, or None). Each attempt pays START_MINUTES and stops `lead_s` before its limit
    (the early signal); it saves its state there (stopping.py) if the step in flight and the
    write (`stop_seconds`) fit in `grace_s` (the early signal to the SIGKILL), else only what its
    last periodic checkpoint (recipe.checkpoint_minutes) saved survives: up to that interval is
    lost."""
    from ..training.resume import checkpoint_minutes, write_seconds

    if wall_hours is None:
        return None, None
    work, gain = wall_hours * 60, runtime - START_MINUTES - lead_s / 60  # gain: the minutes an attempt trains
    if work <= gain:
        return 1, None
    stop = stop_seconds(params, step_s)
    if stop > grace_s:
        minutes = checkpoint_minutes(checkpoint, params)
        gain -= minutes if minutes else gain
    if gain <= 0:
        return None, (f"an attempt of {runtime} min keeps no progress (start-up ~{START_MINUTES:g} min; its stop, "
                      f"a {step_s:.0f} s step and a {write_seconds(params):.0f} s state write, does not fit the "
                      f"{grace_s:g} s from the stop signal to SIGKILL, and the checkpoint interval is "
                      f"{checkpoint_minutes(checkpoint, params) or 'by steps only'})")
    return math.ceil(work / gain), None
