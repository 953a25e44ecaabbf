"""Snakemake's command line as tests/test_slurm.py starts it against the test's Slurm: the real CLI
and the real Slurm plugin, whose status checks wait what `--seconds-between-status-checks` says
(2 s in these tests), and nothing else changed.

The plugin itself adds 10 s to its wait after each round of checks that finds no job finished, up
to 180 s: right on a shared cluster (its docs' open point is to take that option as the least
wait), but in a test of one-minute jobs it leaves each finished attempt unseen for up to a minute,
most of the Slurm tests' time. What the tests check (the jobs, their signals, saves, retries and
results) does not depend on how soon Snakemake looks.

    python tests/slurm_snakemake.py <snakemake's arguments>
"""

from __future__ import annotations

import asyncio
import sys

from snakemake_executor_plugin_slurm import Executor


async def _sleep(self) -> None:
    await asyncio.sleep(self.workflow.remote_execution_settings.seconds_between_status_checks)


Executor.sleep = _sleep

if __name__ == "__main__":
    from snakemake.cli import main

    sys.exit(main())
