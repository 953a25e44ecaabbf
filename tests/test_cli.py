"""`leaner --help` as a user first reads it: the commands a user types, the rules' stages named
once below them (still callable)."""

from __future__ import annotations

import subprocess

import pytest

from leaner.cli import RULE_COMMANDS

from conftest import BIN, REPO

pytestmark = pytest.mark.fast


def test_help_lists_a_users_commands_and_names_the_rules_stages_below_them():
    out = subprocess.run([str(BIN / "leaner"), "--help"], capture_output=True, text=True, timeout=120).stdout
    listed = out[out.index("COMMAND\n"):out.index("options:")]
    commands = [line.split()[0] for line in listed.splitlines()[1:] if line.startswith("    ") and
                not line.startswith("     ")]
    assert commands[:3] == ["run", "status", "check-config"] and len(commands) <= 12, commands
    assert not set(commands) & set(RULE_COMMANDS), commands
    assert len(out.splitlines()) <= 45, out  # one screen
    tail = " ".join(out[out.index("options:"):].split())
    assert all(name in tail.replace("- ", "-") for name in RULE_COMMANDS), tail


def test_a_rules_stage_stays_callable():
    proc = subprocess.run([str(BIN / "leaner"), "train", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: leaner train"), proc.stderr


def test_pilot_takes_its_config_as_every_command_does_and_as_an_option():
    """`leaner pilot STUDY CONFIG` as `leaner status CONFIG`; `--config CONFIG` still works."""
    def report(*args):
        proc = subprocess.run([str(BIN / "leaner"), "pilot", "exchange_digits", *args, "--claim", "depth_costs",
                               "--from-csv"], capture_output=True, text=True, timeout=300, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    positional = report("configs/exchange.yaml")
    assert "power 97% at 10 seeds" in positional and positional == report("--config", "configs/exchange.yaml")


def test_a_reader_that_leaves_the_pipe_ends_leaner_quietly(tmp_path):
    """`leaner status --watch | head -1`: the next table meets a closed pipe; leaner ends with exit
    status 0 and says nothing (it said "error: [Errno 32] Broken pipe", exit 1)."""
    from conftest import TINY

    proc = subprocess.Popen([str(BIN / "leaner"), "status", str(TINY), "--watch", "0.1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    first = proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0 and first.endswith("variants: 8 pending\n")
    assert proc.stderr.read() == ""
