"""The report stages: `leaner summary`, `glue-scores`, `tables`, `job-costs`, `run-config`,
`overview`, `figures` and `theory-report` (each reads results and writes tables, figures or text)."""

from __future__ import annotations

from .args import json_arg


def cmd_summary(a):
    from ..analysis.summary import write_summary

    write_summary(a.study, a.metrics, a.conditioning, a.protocols, a.out, a.glue, a.kappa_out, a.histories)


def cmd_glue_scores(a):
    from ..analysis.summary import write_glue_scores

    write_glue_scores(a.metrics, a.out)


def cmd_tables(a):
    from ..analysis.study_tables import write_study_tables

    write_study_tables(a.summary, a.study, a.baseline, a.outdir, a.names, a.checks, a.claims)


def cmd_job_costs(a):
    from ..analysis.job_costs import write_job_costs

    write_job_costs(a.benchmarks, a.outdir, a.metrics)


def cmd_run_config(a):
    import yaml

    from ..io import write_text

    write_text(a.out, "# The configuration this run resolved (defaults filled in by the Snakefile's config\n"
                      "# loading; every variant's full spec is in its metrics.json).\n" +
               yaml.safe_dump(a.config, sort_keys=False))


def cmd_overview(a):
    from ..analysis.overview import write_overview

    write_overview(a.summaries, a.figdir, a.tabledir, a.findings, a.claims)


def cmd_figures(a):
    from ..analysis.study_figures import write_study_figures

    write_study_figures(a.summary, a.study, a.outdir, a.names, a.kappa, a.histories, a.claims)


def cmd_catalogue(a):
    from ..catalogue import write_catalogue

    stale = write_catalogue(check=a.check)
    if a.check and stale:
        raise SystemExit(f"leaner catalogue: stale, run `leaner catalogue` to write them: {', '.join(stale)}")
    print(f"leaner catalogue: {'stale' if stale else 'up to date'}{': ' if stale else ''}{', '.join(stale)}"
          f"{' (written)' if stale else ''}")


def cmd_theory_report(a):
    from ..analysis.study_figures import write_theory_figure
    from ..analysis.study_tables import write_theory_table

    write_theory_figure(a.theory, a.figdir)
    write_theory_table(a.theory, a.tabledir)


def summary_parser(sub) -> None:
    s = sub.add_parser("summary", help="one row per variant of a study")
    s.add_argument("--study", required=True)
    s.add_argument("--protocols", required=True, type=json_arg, help="{variant: [protocols]}")
    s.add_argument("--metrics", nargs="+", required=True)
    s.add_argument("--conditioning", nargs="+", required=True)
    s.add_argument("--glue", nargs="*", default=[], help="glue.json of each variant (glue studies)")
    s.add_argument("--histories", nargs="*", default=[], help="history.csv of each variant (its plateau)")
    s.add_argument("--out", required=True)
    s.add_argument("--kappa-out", default=None, help="also write kappa at every kept checkpoint (CSV)")
    s.set_defaults(func=cmd_summary)


def glue_scores_parser(sub) -> None:
    s = sub.add_parser("glue-scores", help="one pretrained variant's GLUE task scores and their average")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each fine-tuning run")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_glue_scores)


def tables_parser(sub) -> None:
    s = sub.add_parser("tables", help="per-configuration and lean-vs-baseline tables of a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--study", required=True)
    s.add_argument("--baseline", type=json_arg, default={})
    s.add_argument("--checks", type=json_arg, default=None, help="acceptance checks to run (JSON list)")
    s.add_argument("--claims", type=json_arg, default=None, help="the study's declared claims, as the plan "
                                                                   "resolved them (JSON list)")
    s.add_argument("--names", nargs="+", required=True,
                   help="the tables to write: the study's, as its plan decides them (the workflow passes them)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_tables)


def job_costs_parser(sub) -> None:
    s = sub.add_parser("job-costs", help="per-job benchmark files -> a table of what each stage cost")
    s.add_argument("--benchmarks", nargs="+", required=True)
    s.add_argument("--metrics", nargs="*", default=[],
                   help="the training jobs' metrics.json: their earlier attempts' costs (a retried job's benchmark "
                        "file holds its last attempt only)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_job_costs)


def run_config_parser(sub) -> None:
    s = sub.add_parser("run-config", help="write the configuration a run resolved, as YAML")
    s.add_argument("--config", required=True, type=json_arg)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_run_config)


def overview_parser(sub) -> None:
    s = sub.add_parser("overview", help="both papers in one view: every study's heads, rank, depth, error and kappa")
    s.add_argument("--summaries", nargs="+", required=True)
    s.add_argument("--figdir", required=True)
    s.add_argument("--tabledir", required=True)
    s.add_argument("--findings", required=True, help="prefix of the generated summary (.md and .html)")
    s.add_argument("--claims", nargs="*", default=[], help="the claims tables of the studies that declare claims")
    s.set_defaults(func=cmd_overview)


def figures_parser(sub) -> None:
    s = sub.add_parser("figures", help="the papers' figures for a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--kappa", default=None, help="kappa at every kept checkpoint (summary --kappa-out)")
    s.add_argument("--histories", nargs="*", default=None, help="every variant's history.csv (training curves)")
    s.add_argument("--study", required=True)
    s.add_argument("--names", nargs="+", required=True,
                   help="the figures to make: the study's, as its plan decides them (the workflow passes them)")
    s.add_argument("--claims", type=json_arg, default=None, help="the study's declared claims, as the plan "
                   "resolves them (JSON; the Pareto view)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_figures)


def theory_report_parser(sub) -> None:
    s = sub.add_parser("theory-report", help="figure and table of the theory check")
    s.add_argument("--theory", required=True)
    s.add_argument("--figdir", required=True)
    s.add_argument("--tabledir", required=True)
    s.set_defaults(func=cmd_theory_report)


def catalogue_parser(sub) -> None:
    s = sub.add_parser("catalogue", help="write the index and captions of every figure and table from their "
                       "definitions (for a maintainer, in a source tree)")
    s.add_argument("--check", action="store_true", help="only say which are stale (exit 1 where some are)")
    s.set_defaults(func=cmd_catalogue)
