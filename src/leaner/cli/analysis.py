"""The report stages: `leaner summary` (a study's runs in one table), `glue-scores`, `run-config`
(the configuration a run resolved), `declare` (what a study's jobs read of its declarations) and
`report` (every figure and table of the run, with their captions); and `leaner schema`, the
config's JSON Schema for editors."""

from __future__ import annotations

from .args import json_arg


def cmd_summary(a):
    from ..analysis.summary import write_summary
    from ..io import read_json

    protocols = read_json(a.declared)["protocols"]
    write_summary(a.study, a.metrics, a.conditioning, protocols, a.out, a.glue, a.kappa_out, a.histories)


def cmd_glue_scores(a):
    from ..analysis.summary import write_glue_scores

    write_glue_scores(a.metrics, a.out)


def cmd_run_config(a):
    import yaml

    from ..io import write_text

    write_text(a.out, "# The configuration this run resolved (defaults filled in by the Snakefile's config\n"
                      "# loading; every variant's full spec is in its metrics.json).\n" +
               yaml.safe_dump(a.config, sort_keys=False))


def cmd_declare(a):
    from ..io import write_json

    write_json(a.out, a.declaration)


def cmd_report(a):
    from ..analysis.report import write_report
    from ..workflow.config import load_yaml
    from ..workflow.plan import build_plan

    plan = build_plan(load_yaml(a.config))
    write_report({name: st.declared() for name, st in plan.studies.items()}, a.results, a.theory, a.benchmarks,
                 a.metrics, a.workers)


def cmd_schema(a):
    from ..workflow.config import write_schema

    stale = write_schema(check=a.check)
    if a.check and stale:
        raise SystemExit(f"leaner schema: {stale} is stale, run `leaner schema` to write it")
    print(f"leaner schema: {stale or 'up to date'}{' (written)' if stale else ''}")


def summary_parser(sub) -> None:
    s = sub.add_parser("summary", help="one row per variant of a study")
    s.add_argument("--study", required=True)
    s.add_argument("--declared", required=True, help="the study's declared.json (its variants' protocols)")
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


def run_config_parser(sub) -> None:
    s = sub.add_parser("run-config", help="write the configuration a run resolved, as YAML")
    s.add_argument("--config", required=True, type=json_arg)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_run_config)


def declare_parser(sub) -> None:
    s = sub.add_parser("declare", help="write what a study's jobs read of its declarations (its declared.json)")
    s.add_argument("--declaration", required=True, type=json_arg,
                   help="{study, claims_digest, protocols} (workflow/plan.py Study.job_declaration)")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_declare)


def report_parser(sub) -> None:
    s = sub.add_parser("report", help="every figure and table of a run, their captions and an index of them")
    s.add_argument("--config", required=True, help="the configuration the run resolved (results/overview/config.yaml)")
    s.add_argument("--results", required=True, help="the run's results folder: each study's summary.csv, "
                   "kappa_through_training.csv and history.csv files are read from it; figures/, tables/ and "
                   "overview/ are written there")
    s.add_argument("--theory", required=True, help="the theory check's CSV (results/theory/gaussian_conditioning.csv)")
    s.add_argument("--benchmarks", nargs="+", required=True, help="every job's benchmark file (what each cost)")
    s.add_argument("--metrics", nargs="*", default=[],
                   help="the training jobs' metrics.json: their earlier attempts' costs (a retried job's benchmark "
                        "file holds its last attempt only)")
    s.add_argument("--workers", type=int, default=1, help="processes drawing the studies side by side (default 1)")
    s.set_defaults(func=cmd_report)


def schema_parser(sub) -> None:
    s = sub.add_parser("schema", help="write schemas/config.schema.json, the config's JSON Schema with the task and "
                       "dataset names filled in (for a maintainer, in a source tree)")
    s.add_argument("--check", action="store_true", help="only say whether it is stale (exit 1 where it is)")
    s.set_defaults(func=cmd_schema)
