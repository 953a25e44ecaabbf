"""`leaner COMMAND ...`: the commands a user types (run, status, check-config, cost, ...) and the
pipeline's stages the rules run (train, conditioning, ..., left out of --help's list). Each parses
its arguments and calls one function; errors a user can fix are printed as one line, without a
traceback."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import analysis, planning, running, stages

SUBCOMMANDS = (  # each adds its subcommand's parser, in --help's order: a user's, then the rules'
    running.run_parser, running.status_parser, planning.check_config_parser, planning.variants_parser,
    planning.cost_parser, planning.pilot_parser, planning.tune_parser, planning.rehearse_parser,
    planning.check_data_parser, planning.match_parser, analysis.schema_parser,
    stages.prepare_data_parser, stages.train_parser, stages.conditioning_parser, stages.theory_parser,
    analysis.summary_parser, analysis.glue_scores_parser, analysis.run_config_parser,
    analysis.declare_parser, analysis.report_parser,
)


# pipeline stages (the rules' commands): each job's log ends with a line saying what it wrote
STAGES = ("prepare-data", "conditioning", "theory", "summary", "glue-scores", "run-config", "declare", "report")
# the rules' commands, callable but left out of `leaner --help`'s list of what a user types
RULE_COMMANDS = ("train", *STAGES)


class _Commands:
    """The subparsers, with a rule's command added without a help line (argparse then lists it
    neither among the commands nor in the usage)."""

    def __init__(self, sub):
        self.sub = sub

    def add_parser(self, name, **kwargs):
        if name in RULE_COMMANDS:
            kwargs.pop("help", None)
        return self.sub.add_parser(name, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from ..provenance import describe

    p = argparse.ArgumentParser(
        prog="leaner", description="can a transformer trade depth for attention heads? The commands a user types; "
        "`leaner COMMAND --help` says more.",
        epilog=f"The pipeline's stages, the commands Snakemake's rules run (each has --help): "
               f"{', '.join(RULE_COMMANDS)}.")
    p.add_argument("--version", action="version", version=describe())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = _Commands(sub)
    for add in SUBCOMMANDS:
        add(commands)
    return p
OUTPUT_ARGS = ("out", "kappa_out", "outdir", "results")


def _closing_line(args, seconds: float) -> None:
    from ..provenance import describe

    wrote = [str(getattr(args, a)) for a in OUTPUT_ARGS if getattr(args, a, None)]
    print(f"leaner {args.command}: done in {seconds:.1f} s ({describe()}){'; wrote ' if wrote else ''}"
          f"{', '.join(wrote)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from ..workflow.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and not {"-h", "--help"} & set(argv[1:2]):  # everything after `run` is snakemake's
        args = argparse.Namespace(command="run", snakemake_args=argv[1:], func=running.cmd_run)
    else:
        args = build_parser().parse_args(argv)
    args.argv = argv  # a launcher runs the same command again on each of its processes
    started = time.perf_counter()
    try:
        if getattr(args, "numerics", None):  # before anything loads torch
            from ..compute.numerics import pin

            pin(args.numerics, getattr(args, "threads", None))
        code = args.func(args)
        if args.command in STAGES and not code:
            _closing_line(args, time.perf_counter() - started)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`leaner status | head`): what it wanted it has
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, OSError, RuntimeError, TimeoutError) as exc:
        if os.environ.get("LEANER_DEBUG"):  # the traceback, for a bug report
            raise
        print(f"leaner {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return code or 0


def entry() -> None:
    """Console entry point. Every output is closed and fsynced when `main` returns, so skip the
    interpreter's teardown of torch's module graph, which costs about 2 s per job. A job of a local
    Snakemake run runs in the run's warm process where it can (leaner/running/handoff.py)."""
    from ..running.handoff import hand_off

    code = hand_off(sys.argv[1:])
    if code is None:
        code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
