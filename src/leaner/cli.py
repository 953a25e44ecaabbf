"""`leaner <stage> ...`: one subcommand per pipeline stage. Each parses its arguments and calls
one function; errors a user can fix are printed as one line, without a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys


def _json_arg(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None


def cmd_prepare_data(a):
    from .data import prepare

    prepare(a.dataset, a.spec, a.out)


def cmd_train(a):
    from . import distributed

    if a.nproc > 1 and not distributed.launched_by_torchrun():
        return distributed.launch(a.argv, a.nproc, a.device)
    from .train import train

    train(a.spec, a.data, a.out, device=a.device, threads=a.threads, progress=not a.no_progress)


def cmd_conditioning(a):
    from .conditioning import write_conditioning

    write_conditioning(a.metrics, a.init, a.final, a.data, a.out, device=a.device, threads=a.threads)


def cmd_theory(a):
    from .theory import write_theory

    write_theory(a.settings, a.out)


def cmd_summary(a):
    from .aggregate import write_summary

    write_summary(a.study, a.metrics, a.conditioning, a.protocols, a.out, a.glue, a.kappa_out)


def cmd_glue_scores(a):
    from .aggregate import write_glue_scores

    write_glue_scores(a.metrics, a.out)


def cmd_tables(a):
    from .aggregate import write_study_tables

    write_study_tables(a.summary, a.study, a.baseline, a.outdir, a.checks)


def cmd_combined_table(a):
    from .aggregate import write_combined_table

    write_combined_table(a.summaries, a.outdir)


def cmd_figures(a):
    from .figures import write_study_figures

    write_study_figures(a.summary, a.study, a.outdir, a.kappa)


def cmd_theory_report(a):
    from .aggregate import write_theory_table
    from .figures import write_theory_figure

    write_theory_figure(a.theory, a.figdir)
    write_theory_table(a.theory, a.tabledir)


def cmd_variants(a):
    from .config import load_plan

    plan = load_plan(a.config)
    for name, study in plan.studies.items():
        if a.study and name != a.study:
            continue
        for vid, v in study.variants.items():
            print(f"{name}\t{vid}\t{','.join(v.protocols)}")


def cmd_check_config(a):
    from .config import load_plan

    plan = load_plan(a.config)
    n = sum(len(s.variants) for s in plan.studies.values())
    print(f"{a.config}: ok, {len(plan.studies)} studies, {n} variants")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leaner", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("prepare-data", help="prepare one dataset and write its manifest")
    s.add_argument("--dataset", required=True)
    s.add_argument("--spec", required=True, type=_json_arg, help="the dataset's config (JSON)")
    s.add_argument("--out", required=True, help="manifest.json to write")
    s.set_defaults(func=cmd_prepare_data)

    s = sub.add_parser("train", help="train one variant")
    s.add_argument("--spec", required=True, type=_json_arg, help="the variant spec (JSON)")
    s.add_argument("--data", required=True, help="the prepared dataset's manifest.json")
    s.add_argument("--out", required=True, help="the variant's output directory")
    s.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: CUDA when present)")
    s.add_argument("--threads", type=int, default=None, help="CPU threads in all (split over --nproc processes)")
    s.add_argument("--nproc", type=int, default=1,
                   help="processes (GPUs) for this one variant: >1 runs DistributedDataParallel under torchrun")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("conditioning", help="condition numbers of one trained variant")
    s.add_argument("--metrics", required=True)
    s.add_argument("--init", required=True)
    s.add_argument("--final", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--device", default=None)
    s.add_argument("--threads", type=int, default=None)
    s.set_defaults(func=cmd_conditioning)

    s = sub.add_parser("theory", help="Monte Carlo check of Theorem 3.2")
    s.add_argument("--settings", required=True, type=_json_arg)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_theory)

    s = sub.add_parser("summary", help="one row per variant of a study")
    s.add_argument("--study", required=True)
    s.add_argument("--protocols", required=True, type=_json_arg, help="{variant: [protocols]}")
    s.add_argument("--metrics", nargs="+", required=True)
    s.add_argument("--conditioning", nargs="+", required=True)
    s.add_argument("--glue", nargs="*", default=[], help="glue.json of each variant (glue studies)")
    s.add_argument("--out", required=True)
    s.add_argument("--kappa-out", default=None, help="also write kappa at every kept checkpoint (CSV)")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("glue-scores", help="one pretrained variant's GLUE task scores and their average")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each fine-tuning run")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_glue_scores)

    s = sub.add_parser("tables", help="per-configuration and lean-vs-baseline tables of a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--study", required=True)
    s.add_argument("--baseline", type=_json_arg, default={})
    s.add_argument("--checks", type=_json_arg, default=None, help="acceptance checks to run (JSON list)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_tables)

    s = sub.add_parser("combined-table", help="kappa, rank, heads, depth and error of every study in one table")
    s.add_argument("--summaries", nargs="+", required=True)
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_combined_table)

    s = sub.add_parser("figures", help="the papers' figures for a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--kappa", default=None, help="kappa at every kept checkpoint (summary --kappa-out)")
    s.add_argument("--study", required=True)
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_figures)

    s = sub.add_parser("theory-report", help="figure and table of the theory check")
    s.add_argument("--theory", required=True)
    s.add_argument("--figdir", required=True)
    s.add_argument("--tabledir", required=True)
    s.set_defaults(func=cmd_theory_report)

    s = sub.add_parser("variants", help="list the variants a config expands to")
    s.add_argument("config", nargs="?", default="config.yaml")
    s.add_argument("--study", default=None)
    s.set_defaults(func=cmd_variants)

    s = sub.add_parser("check-config", help="validate a config file")
    s.add_argument("config", nargs="?", default="config.yaml")
    s.set_defaults(func=cmd_check_config)
    return p


def main(argv: list[str] | None = None) -> int:
    from .config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # a launcher runs the same command again on each of its processes
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        if "--debug" in sys.argv or os.environ.get("LEANER_DEBUG"):
            raise
        print(f"leaner {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return code or 0


def entry() -> None:
    """Console entry point. Every output is closed and fsynced when `main` returns, so skip the
    interpreter's teardown of torch's module graph, which costs about 2 s per job."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
