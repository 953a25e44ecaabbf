"""`leaner status`: where every variant of every study stands, read from the files alone.

The same files answer on a laptop and under Slurm (a shared filesystem): a variant's metrics.json
(done or diverged), its heartbeat progress.json (running, or failed with the error), the resume
state and the training log. A heartbeat from this host whose process is gone, or one from any host
not renewed for STALE_S seconds, is a run that died (killed, out of memory, node lost): its
re-run resumes from the last checkpoint.
"""

from __future__ import annotations

import math
import platform
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..compute.numerics import UNRECORDED, describe_mix, is_mixed
from ..io import read_json
from ..provenance import stage_digest
from ..training.tracking import HEARTBEAT_S, read_progress

STALE_S = 10 * 60 + 2 * HEARTBEAT_S  # longer than any quiet spell of a live run (an evaluation, a compile)
STATES = ("pending", "running", "stopped", "done", "diverged", "failed")


@dataclass
class Row:
    study: str
    variant: str
    state: str
    step: str
    detail: str
    numerics: str = ""  # a done variant's (numerics.label), to say where a study mixes them


def _alive(pid: int, started: float | None) -> bool:
    """Whether process `pid` of this host, started at `started`, still runs (a killed one not yet
    reaped is a zombie; a pid reused by another process has another start time)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        same = started is None or abs(proc.create_time() - started) < 1.0
        return same and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False


def _is_error(line: str) -> bool:
    return bool(re.search(r"error|Error|Traceback|Killed", line))


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""


def _steps(step, total) -> str:
    return f"{step}/{total}" if step is not None and total else ""


def _loss(value) -> str:
    return f"loss {value:.4g}" if isinstance(value, int | float) and math.isfinite(value) else "no loss yet"


def variant_row(study: str, variant: str, folder: Path, log: Path, now: float | None = None) -> Row:
    """One variant's state from its files."""
    now = time.time() if now is None else now
    metrics = folder / "metrics.json"
    if metrics.exists():
        m = read_json(metrics)
        steps = _steps(m.get("steps"), m.get("total_steps"))
        if m.get("status") == "diverged":
            return Row(study, variant, "diverged", steps, f"loss not finite at step {m.get('diverged_at_step')}")
        name = m.get("primary_metric")
        value = (m.get("final") or {}).get(name, (m.get("best") or {}).get(name))
        shown = f"{name} {value:.4g}" if isinstance(value, int | float) else "no metric"
        if not (folder / "conditioning.csv").exists():
            shown += " (kappa pending)"
        code = m.get("code") or {}
        made_by = code.get("training")
        if made_by and made_by != stage_digest("training", tuple(code.get("modules") or ())):
            shown += f" (trained by other training code, {made_by}: a run re-trains it)"
        return Row(study, variant, "done", steps, shown, (m.get("numerics") or {}).get("label", UNRECORDED))
    beat = read_progress(folder)
    if beat is not None:
        steps = _steps(beat.get("step"), beat.get("total_steps"))
        where = beat.get("host", "?") + (f", slurm job {beat['slurm_job_id']}" if beat.get("slurm_job_id") else "")
        if beat.get("state") == "failed":
            return Row(study, variant, "failed", steps, beat.get("detail") or _last_line(log))
        if beat.get("state") == "stopped":  # on a signal (a time limit), its state saved
            return Row(study, variant, "stopped", steps, f"{beat.get('detail') or 'stopped'}; a re-run resumes "
                       f"from step {beat.get('checkpoint_step')} ({where})")
        age = now - beat.get("updated_unix", 0)
        if beat.get("host") == platform.node():
            alive = _alive(int(beat.get("pid", -1)), beat.get("pid_started"))
        else:
            alive = age < STALE_S
        if alive and beat.get("state") == "starting":
            return Row(study, variant, "running", "", f"starting: loading data and model ({where})")
        if alive:
            return Row(study, variant, "running", steps, f"{_loss(beat.get('loss'))}, {age:.0f} s ago ({where})")
        ckpt = beat.get("checkpoint_step")
        resumable = f"; a re-run resumes from step {ckpt}" if ckpt else "; no checkpoint yet: a re-run starts over"
        gone = "process gone" if beat.get("host") == platform.node() else f"no heartbeat for {age / 60:.0f} min"
        last = _last_line(log)
        return Row(study, variant, "failed", steps, (last if _is_error(last) else f"stopped: {gone} ({where})")
                   + resumable)
    last = _last_line(log)
    if last:  # no heartbeat: the job failed before it began (a bad spec, no data); its log says why
        return Row(study, variant, "failed", "", last)
    return Row(study, variant, "pending", "", "")


def collect(plan, root: str | Path = ".") -> list[Row]:
    """Every variant of every study of `plan`, results and logs under `root`."""
    root = Path(root)
    return [variant_row(name, vid, root / "results" / name / vid, root / "logs" / "train" / name / f"{vid}.log")
            for name, study in plan.studies.items() for vid in study.variants]


def render(rows: list[Row], width: int | None = None) -> str:
    """The table: a count per state, then one line per variant (on a terminal, the detail cut to
    its width; whole into a file or a pipe)."""
    width = width or (shutil.get_terminal_size().columns if sys.stdout.isatty() else 10**6)
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    head = f"{len(rows)} variants: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    cols = [("study", [r.study for r in rows]), ("variant", [r.variant for r in rows]),
            ("state", [r.state for r in rows]), ("step", [r.step for r in rows])]
    widths = [max([len(name), *map(len, values)]) for name, values in cols]
    other = sum("by other training code" in r.detail for r in rows)
    if other:
        head += f"; {other} trained by other training code than this checkout's: snakemake re-trains them"
    lines = [head, *numerics_lines(rows), "  ".join(name.ljust(w) for (name, _), w in zip(cols, widths)) + "  detail"]
    for i, r in enumerate(rows):
        line = "  ".join(values[i].ljust(w) for (_, values), w in zip(cols, widths)) + "  " + r.detail
        line = line.rstrip()
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return "\n".join(lines)


def numerics_lines(rows: list[Row]) -> list[str]:
    """One line per study whose finished variants were trained under different numerics (their
    comparisons would mix the platforms); nothing where each study's share one."""
    lines = []
    for study in dict.fromkeys(r.study for r in rows):
        done = [r.numerics for r in rows if r.study == study and r.numerics]
        if is_mixed(done):
            lines.append(f"numerics: study {study}: {describe_mix(done)}")
    return lines


def show(plan, root: str | Path = ".", watch: float | None = None, states: list[str] | None = None) -> None:
    """Print the table once, or every `watch` seconds until interrupted."""
    while True:
        rows = [r for r in collect(plan, root) if not states or r.state in states]
        text = render(rows)
        if watch and sys.stdout.isatty():
            text = "\033[H\033[2J" + time.strftime("%H:%M:%S ") + text  # redraw in place
        print(text, flush=True)
        if not watch:
            return
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return
        if not sys.stdout.isatty():
            print(flush=True)
