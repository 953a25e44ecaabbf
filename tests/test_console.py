"""`leaner run`'s console (running/console.py) on Snakemake 9's own lines: what a retried job, a
long run's progress, a failure's removed outputs, a group's indented blocks and a reader who
leaves make of it. The end-to-end runs are in test_workflow.py."""

from __future__ import annotations

import io

import pytest

from leaner.running.console import Console

pytestmark = pytest.mark.fast

STATS = ["Job stats:", "job      count", "-----  -------", "train        2", "all          1", "total        3", ""]


def told(lines: list[str], tmp_path, out=None) -> tuple[Console, str]:
    out = out or io.StringIO()
    console = Console(tmp_path, out)
    for line in lines:
        console.line(line + "\n")
    console.closing(0, tmp_path / "whole.log")
    return console, out.getvalue() if isinstance(out, io.StringIO) else ""


def test_a_job_that_failed_then_finished_on_its_retry_is_no_failure(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "t.log").write_text("stopped, resumable\n")
    error = ["Error in rule train:", "    jobid: 3", "    log: logs/t.log (check log file(s) for error details)",
             "    shell:", "        exec leaner train ...", "        (command exited with non-zero exit code)"]
    console, said = told([*STATS, *error, "Trying to restart job 3.", "Finished jobid: 3 (Rule: train)"], tmp_path)
    assert console.failed == [] and "failed; its log" not in said
    assert "Error in rule train:" in said and "    jobid: 3" in said and "exec leaner" not in said
    console, said = told([*STATS, *error, "Finished jobid: 4 (Rule: train)"], tmp_path)  # another job finished
    assert f"leaner run: rule train failed; its log {tmp_path / 'logs' / 't.log'}, last lines:\n" \
           "    stopped, resumable\n" in said


def test_progress_of_a_long_run_and_removed_outputs_are_told_not_printed(tmp_path):
    lines = [*STATS, "1 of 300 steps (0.3%) done", "31 of 300 steps (10%) done", "33 of 300 steps (11%) done",
             "Removing output files of failed job train since they might be corrupted:",
             "results/a/model.safetensors, results/a/metrics.json", "results/b/init.safetensors"]
    _, said = told(lines, tmp_path)
    assert said.splitlines()[:2] == ["leaner run: 3 jobs: train 2", "  [31/300 jobs, 10%] 0:00"]
    assert "0.3%" not in said and "results/a" not in said and "Removing" not in said


def test_a_groups_indented_job_blocks_are_chatter_and_its_failed_job_is_named(tmp_path):
    lines = [*STATS, "group job gpu_share_s (jobs in lexicogr. order):", "", "    rule train:",
             "        input: results/data/d/manifest.json", "        output: results/s/v/model.safetensors",
             "        jobid: 7", "        wildcards: study=s, variant=v",
             "Error in group gpu_share_s:", "    Error in rule train:", "        jobid: 7",
             "        log: logs/train/s/v.log (check log file(s) for error details)", "        shell:",
             "            exec leaner train ..."]
    console, said = told(lines, tmp_path)
    assert "input:" not in said and "    rule train:" not in said and "exec leaner" not in said
    assert [(f.rule, f.log, f.jobid) for f in console.failed] == [("train", "logs/train/s/v.log", "7")]
    assert f"leaner run: rule train failed; its log {tmp_path / 'logs/train/s/v.log'} is empty" in said


class Closed(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_who_leaves_does_not_stop_the_telling(tmp_path):
    console, _ = told([*STATS, "Finished jobid: 1 (Rule: train)", "a line"], tmp_path, out=Closed())
    assert console.gone and console.done == {"train": 1}
