"""`leaner run`'s console: Snakemake's output read line by line and told as a person reads it.

Snakemake prints a block for every job it starts (rule, inputs, outputs, reason, resources: the
default study's run prints thousands of lines, a dry run of the paper's config 16,582). The
console keeps every line in logs/snakemake/TIME.log under the run folder and prints instead:

- the job counts once ("30 jobs: train 8, conditioning 8, ..."), from Snakemake's job stats;
- a line when a stage's last job finishes ("train: 8 of 8 done, 0:21"), and the share of all
  jobs done every tenth of the run (on a terminal, one line rewritten after every job);
- every line Snakemake prints that is not its per-job chatter: warnings, errors, each failed job's
  block, the workflow's own lines (a plan check, where the results are);
- after a failure, each failed job's log and its last lines.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Snakemake's per-job and start-up chatter (Snakemake 9): left out of the console, kept in the log
CHATTER = re.compile(
    r"^(\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]"
    r"|Select jobs to execute\.\.\.|Execute \d+ jobs\.\.\.|(local)?(rule|checkpoint) [\w]+:|Finished jobid: .*"
    r"|Using shell: .*|Provided cores: .*|Rules claiming more threads will be scaled down\."
    r"|Conda environments: ignored|Assuming unrestricted shared filesystem usage\.|SNAKEMAKE|=+"
    r"|  (Date|Workflow ID|Platform|Host|User|Snakemake version|Python version|Command|Snakefile|Base directory"
    r"|Run directory|Working directory|Config file\(s\)|Config MD5): .*"
    r"|Building DAG of jobs\.\.\.|host: .*|Job stats:|job +count|-+ +-+|"
    r"|    (input|output|log|jobid|benchmark|reason|wildcards|resources|threads|priority|shell): .*"
    r"|    \w[\w ]*: .*"
    r"|RuleException:|CalledProcessError in file .*|Command '.*' returned non-zero exit status \d+\."
    r"|Removing output files of failed job .*|Shutting down, this might take some time\.)$")
# a job's block printed inside a group's (Slurm, GPU-sharing groups), one level further in
INDENTED_CHATTER = re.compile(r"^((local)?(rule|checkpoint) \w+:|\w[\w ]*: .*|\w[\w ]*:)$")
# of a failed job's block, the lines a person needs (the command, inputs and outputs are in the log)
ERROR_KEPT = re.compile(r"^\s+(message|jobid|log|wildcards): ")
PATHS = re.compile(r"^\S+/\S*(, \S+/\S*)*$")  # bare paths (the outputs Snakemake removes after a failure)
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)")
RESTARTED = re.compile(r"^Trying to restart job (\d+)\.")
STEPS = re.compile(r"^(\d+) of (\d+) steps \((\d+(?:\.\d+)?)%\) done")
FAILED = re.compile(r"^(\s*)Error in rule (\w+):")
STAT = re.compile(r"^(\w+) +(\d+)$")
TAIL_LINES = 5


@dataclass
class Failure:
    rule: str
    log: str | None = None
    jobid: str | None = None


@dataclass
class Console:
    """What the run has said so far, and what the person has been shown."""

    folder: Path
    out: object = field(default=sys.stderr)
    tty: bool = False
    started: float = field(default_factory=time.time)
    totals: dict[str, int] = field(default_factory=dict)  # jobs by rule, from the job stats
    done: dict[str, int] = field(default_factory=dict)
    failed: list[Failure] = field(default_factory=list)  # each failed job not since restarted or finished
    in_stats: bool = False
    error_indent: int | None = None  # inside a failed job's block: the indentation of its first line
    shown_tenth: int = 0
    partial: bool = False  # a progress line waiting to be rewritten (terminal)
    gone: bool = False  # the reader left (a closed pipe): the run goes on, its log is still kept

    def _write(self, text: str) -> None:
        if self.gone:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except OSError:  # a closed pipe or a full disk under the console: Snakemake runs on regardless
            self.gone = True

    def _say(self, text: str) -> None:
        if self.partial:
            self._write("\r\033[K")
            self.partial = False
        self._write(text + "\n")

    def _elapsed(self) -> str:
        s = int(time.time() - self.started)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"

    def line(self, text: str) -> None:
        """One line of Snakemake's output."""
        text = text.rstrip("\n")
        if text == "Job stats:":
            self.in_stats, self.totals = True, {}
            return
        if self.in_stats:
            m = STAT.match(text)
            if m and m.group(1) != "total":
                self.totals[m.group(1)] = int(m.group(2))
            elif m:
                self.in_stats = False
                jobs = ", ".join(f"{rule} {n}" for rule, n in self.totals.items() if rule != "all")
                self._say(f"leaner run: {m.group(2)} jobs: {jobs}")
            return
        indent = len(text) - len(text.lstrip())
        if self.error_indent is not None:
            if text.strip() and indent > self.error_indent:
                if ERROR_KEPT.match(text) and "message: None" not in text:
                    self._say(text)
                key, _, value = text.strip().partition(": ")
                if key in ("log", "jobid"):
                    setattr(self.failed[-1], key, value.split()[0])
                return
            self.error_indent = None
        m = FAILED.match(text)
        if m:
            self.failed.append(Failure(m.group(2)))
            self.error_indent = len(m.group(1))
            self._say(text)
            return
        m = FINISHED.match(text) or RESTARTED.match(text)
        if m:  # a job that finished, or is tried again, is no failure (a retry after a stop signal)
            self.failed = [f for f in self.failed if f.jobid != m.group(1)]
        m = FINISHED.match(text)
        if m:
            rule = m.group(2)
            self.done[rule] = self.done.get(rule, 0) + 1
            total = self.totals.get(rule)
            if total and self.done[rule] == total and rule != "all":
                self._say(f"  {rule}: {total} of {total} done, {self._elapsed()}")
            return
        m = STEPS.match(text)
        if m:
            self._progress(int(m.group(1)), int(m.group(2)), float(m.group(3)))
            return
        if CHATTER.match(text) or PATHS.match(text) or indent and INDENTED_CHATTER.match(text.strip()):
            return
        self._say(text)

    def _progress(self, n: int, total: int, percent: float) -> None:
        if self.tty:
            self._write(f"\r\033[K  [{n}/{total} jobs, {percent:g}%] {self._elapsed()}")
            self.partial = True
        elif int(percent // 10) > self.shown_tenth and n < total:
            self.shown_tenth = int(percent // 10)
            self._say(f"  [{n}/{total} jobs, {percent:g}%] {self._elapsed()}")

    def closing(self, code: int, log: Path) -> None:
        """After Snakemake exits: each failed job's log and its last lines, and where the whole
        output is."""
        for failure in self.failed:
            rule, path = failure.rule, failure.log
            if path is None:
                self._say(f"leaner run: rule {rule} failed (no log named)")
                continue
            file = self.folder / path
            lines = file.read_text(errors="replace").splitlines()[-TAIL_LINES:] if file.is_file() else []
            self._say(f"leaner run: rule {rule} failed; its log {file}" + (", last lines:" if lines else " is empty"))
            for text in lines:
                self._say(f"    {text}")
        ended = "done" if code == 0 else f"exit status {code}"
        self._say(f"leaner run: {ended} in {self._elapsed()}; Snakemake's whole output: {log}")
