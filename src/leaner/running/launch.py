"""`leaner run`: Snakemake in a working folder, picking up a run that died.

A run killed mid-way (kill -9, an OOM kill, a closed laptop) leaves Snakemake's lock in
.snakemake/locks and the outputs of the jobs it was running marked incomplete, so a plain re-run
stops with a LockException, then with an IncompleteFilesException. Here the lock is cleared (with
Snakemake's own --unlock) only when no Snakemake is alive in that folder, and incomplete jobs
re-run (--rerun-incomplete; a training job resumes from its checkpoint). A lock held by a live run
is never touched: the command stops with one line naming that process.

A live Snakemake in the folder: any process of this machine whose command line runs snakemake
and whose -d/--directory (or, without one, its working directory) is the folder. A run started on
another machine (a cluster's other login node) cannot be seen from here; its lock is not cleared
unless no process here holds the folder, so start a cluster run from one place.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOCKS = Path(".snakemake") / "locks"


def _directory(args: list[str], cwd: Path) -> Path:
    """The working folder a snakemake command line names (-d/--directory), else `cwd`."""
    for i, arg in enumerate(args):
        if arg in ("-d", "--directory") and i + 1 < len(args):
            return (cwd / args[i + 1]).resolve()
        if arg.startswith("--directory="):
            return (cwd / arg.split("=", 1)[1]).resolve()
    return cwd.resolve()


def _snakemake_args(cmdline: list[str]) -> list[str] | None:
    """The arguments of a snakemake command line (`snakemake ...`, `python .../snakemake ...`,
    `python -m snakemake ...`), or None for any other program."""
    for i, part in enumerate(cmdline[:3]):
        if Path(part).name == "snakemake":
            return cmdline[i + 1:] if i == 0 or Path(cmdline[0]).name.startswith("python") else None
        if part == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] == "snakemake":
            return cmdline[i + 2:]
    return None


def live_snakemakes(folder: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every Snakemake running in `folder` on this machine."""
    import psutil

    folder, found = folder.resolve(), []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            cmdline, cwd = proc.info["cmdline"] or [], proc.info["cwd"]
        except (psutil.Error, KeyError):
            continue
        args = _snakemake_args(cmdline)
        if args is None or cwd is None or proc.pid == os.getpid():
            continue
        # Snakemake moves into its --directory, so its cwd may already be the folder
        if Path(cwd).resolve() == folder or _directory(args, Path(cwd)) == folder:
            found.append((proc.pid, " ".join(cmdline)))
    return found


def snakemake_command() -> str:
    """The snakemake of the environment this runs in."""
    beside = Path(sys.executable).parent / "snakemake"
    return str(beside) if beside.exists() else "snakemake"


def _config_files(args: list[str]) -> list[str]:
    """The config files a snakemake command line names (--configfile/--configfiles A B ...)."""
    out, taking = [], False
    for arg in args:
        if arg.startswith("--configfile=") or arg.startswith("--configfiles="):
            out.append(arg.split("=", 1)[1])
            taking = False
        elif arg in ("--configfile", "--configfiles"):
            taking = True
        elif taking and not arg.startswith("-"):
            out.append(arg)
        else:
            taking = False
    return out


# What tells snakemake how many jobs to run at once: without one, `leaner run` asks for every core
PARALLELISM = ("-c", "--cores", "-j", "--jobs", "--profile", "--executor", "-e", "--workflow-profile")


def run_snakemake(args: list[str]) -> int:
    """Run snakemake with `args` (plus --rerun-incomplete, and --cores all where nothing says how
    many jobs), after clearing a lock that no live run holds and reading each config file named (a
    missing or unparsable one: one line with its file and line, exit status 2). Its output is told
    through the console (running/console.py); Snakemake's exit status. `--help` is Snakemake's own,
    in place of this process."""
    from ..workflow.config import ConfigError, load_yaml

    for path in _config_files(args):
        try:
            load_yaml(path)
        except ConfigError as exc:
            print(f"leaner run: {exc}", file=sys.stderr)
            return 2
    if not any(arg.split("=", 1)[0] in PARALLELISM or arg[:2] in ("-c", "-j") and arg[2:].isdigit()
               for arg in args) and not {"-h", "--help", "-n", "--dry-run", "--dryrun"} & set(args):
        args = [*args, "--cores", "all"]
    folder = _directory(args, Path.cwd())
    locks = list((folder / LOCKS).glob("*.lock"))
    if locks:
        live = live_snakemakes(folder)
        if live:
            pid, cmd = live[0]
            print(f"leaner run: error: a Snakemake run is active in {folder} (pid {pid}: {cmd[:120]}); wait for it "
                  "or stop it first (its lock was left alone)", file=sys.stderr)
            return 1
        print(f"leaner run: the lock in {folder / LOCKS} belongs to a run that is no longer alive: clearing it "
              "(snakemake --unlock); interrupted jobs re-run, training resumes from its checkpoint", file=sys.stderr)
        unlock = subprocess.run([snakemake_command(), *args, "--unlock"], stdout=subprocess.DEVNULL)
        if unlock.returncode:
            return unlock.returncode
    extra = [] if "--rerun-incomplete" in args or "--ri" in args else ["--rerun-incomplete"]
    sys.stdout.flush()
    sys.stderr.flush()
    if {"-h", "--help"} & set(args):
        os.execv(snakemake_command(), [snakemake_command(), *args])
    return _told(folder, [snakemake_command(), *args, *extra])


def _told(folder: Path, command: list[str]) -> int:
    """Run `command` (snakemake) with its output told through the console (running/console.py)
    and kept whole in logs/snakemake/; its exit status. Ctrl-C reaches Snakemake from the terminal
    as it would without leaner (this process lets it be); SIGTERM and SIGHUP are passed on."""
    import signal
    import time

    from .console import Console

    log = folder / "logs" / "snakemake" / f"{time.strftime('%Y-%m-%dT%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    console = Console(folder, sys.stderr, tty=sys.stderr.isatty())
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace")
    passed = {s: signal.signal(s, lambda signum, _: proc.send_signal(signum)) for s in (signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with open(log, "w") as kept:
            for text in proc.stdout:
                kept.write(text)
                kept.flush()
                console.line(text)
        code = proc.wait()
    finally:
        if proc.poll() is None:  # this process failed while Snakemake ran (its log unwritable): stop it
            proc.terminate()
            proc.wait()
        for s, handler in passed.items():
            signal.signal(s, handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    console.closing(code, log)
    return code
