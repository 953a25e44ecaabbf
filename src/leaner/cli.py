"""`leaner <stage> ...`: one subcommand per pipeline stage. Each parses its arguments and calls
one function; errors a user can fix are printed as one line, without a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .compute.devices import SHARE_UNITS
from .compute.numerics import DEFAULT_MODE, MODES


def _json_arg(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None


GPU_SHARE_HELP = (f"GPUs this job declared, in 1/{SHARE_UNITS} of a GPU (the rule's gpu_share resource): 0 runs "
                  f"on the CPU, {SHARE_UNITS}*g on g whole GPUs, {SHARE_UNITS}//k on a seat of a GPU shared by k "
                  "jobs (default: one GPU when CUDA is present)")


NUMERICS_HELP = ("pinned (default): the same bits on every x86-64 CPU with AVX2 (ATen's AVX2 kernels, MKL's "
                 "COMPATIBLE branch, oneDNN off, these threads); native: the machine's own (docs/numerics.md)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def cmd_prepare_data(a):
    from .data import prepare

    prepare(a.dataset, a.spec, a.out)


def cmd_train(a):
    """Exit status 0 when trained, STOPPED_EXIT when stopped by a signal with the resume state
    saved (training/stopping.py), 1 on an error."""
    from .compute import distributed
    from .training.stopping import STOPPED_EXIT, Stopped
    from .training.tracking import mark_failed, read_progress

    if a.nproc > 1 and not distributed.launched_by_torchrun():
        began = time.time()
        code = distributed.launch(a.argv, a.nproc, a.device, a.gpu_share)
        beat = read_progress(a.out) or {}  # torchrun reports any rank's exit as its own failure
        stopped = code and beat.get("state") == "stopped" and beat.get("updated_unix", 0) >= began
        return STOPPED_EXIT if stopped else code
    from .training.train import train

    try:
        train(a.spec, a.data, a.out, device=a.device, threads=a.threads, progress=not a.no_progress,
              gpu_share=a.gpu_share)
    except Stopped as exc:
        print(f"leaner train: {exc}", file=sys.stderr, flush=True)
        return STOPPED_EXIT
    except BaseException as exc:  # before training began too: `leaner status` shows why
        mark_failed(a.out, exc)
        raise


def cmd_conditioning(a):
    from .measure.conditioning import write_conditioning

    write_conditioning(a.metrics, a.init, a.final, a.data, a.out, device=a.device, threads=a.threads,
                       gpu_share=a.gpu_share, memory_mb=a.mem_mb)


def cmd_theory(a):
    from .measure.theory import write_theory

    write_theory(a.settings, a.out)


def cmd_summary(a):
    from .analysis.summary import write_summary

    write_summary(a.study, a.metrics, a.conditioning, a.protocols, a.out, a.glue, a.kappa_out)


def cmd_glue_scores(a):
    from .analysis.summary import write_glue_scores

    write_glue_scores(a.metrics, a.out)


def cmd_tables(a):
    from .analysis.study_tables import write_study_tables

    write_study_tables(a.summary, a.study, a.baseline, a.outdir, a.names, a.checks, a.claims)


def cmd_job_costs(a):
    from .analysis.tables import write_job_costs

    write_job_costs(a.benchmarks, a.outdir)


def cmd_run_config(a):
    import yaml

    from .io import write_text

    write_text(a.out, "# The configuration this run resolved (defaults filled in by the Snakefile's config\n"
                      "# loading; every variant's full spec is in its metrics.json).\n" +
               yaml.safe_dump(a.config, sort_keys=False))


def _kv(text: str) -> dict:
    """'depth=12,heads=12,width=768,mlp_ratio=4' -> {'depth': 12, ...}"""
    out = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{part!r} is not key=value (e.g. depth=12,heads=12,width=768)")
        out[key.strip()] = float(value) if "." in value else int(value)
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def cmd_match(a):
    import pandas as pd

    from .tasks import CATALOG, task_info
    from .workflow.config import load_yaml
    from .workflow.match import LEAN_SEARCH_KEYS, match_lean
    from .workflow.plan import study_model_base

    st, model_base = study_model_base(load_yaml(a.config), a.study, os.path.dirname(os.path.abspath(a.config)))
    if task_info(st["task"]).grid != "arch":
        arch_tasks = [n for n, i in CATALOG.items() if i.grid == "arch"]
        raise ValueError(f"study {a.study} is a {st['task']} study (allowed: {', '.join(arch_tasks)} studies)")
    lean = dict(st.get("lean") or {})  # the study's block, with what the command line gives over it
    lean["baseline"] = a.baseline or lean.get("baseline") or st.get("baseline")
    if not lean["baseline"]:
        raise ValueError("no baseline: give --baseline depth=..,heads=..,width=..,mlp_ratio=.. or a study with one")
    if a.budget is not None or a.reduction is not None:
        lean["budget"], lean["reduction"] = a.budget, a.reduction
    lean.update({key: getattr(a, key) for key in LEAN_SEARCH_KEYS if getattr(a, key)})
    base, rows = match_lean(model_base, lean)
    frame = pd.DataFrame(rows)
    print(f"baseline L{base['depth']}-H{base['heads']}-D{base['width']}-mlp{base['mlp_hidden']}: "
          f"{base['params']:,} parameters; budget {base['budget']:,}")
    if len(frame):
        shown = frame.assign(vs_baseline=frame["vs_baseline"].map(lambda x: f"{x:.3f}"),
                             params=frame["params"].map(lambda x: f"{x:,}"))
        print(shown.to_markdown(index=False))
    fits = int(frame["fits"].sum()) if len(frame) else 0
    print(f"{fits} of {len(frame)} configurations of fewer layers and more heads fit")
    if a.out:
        from .io import write_csv

        write_csv(a.out, frame)
    return 0


def cmd_overview(a):
    from .analysis.overview import write_overview

    write_overview(a.summaries, a.figdir, a.tabledir, a.findings, a.claims)


def cmd_figures(a):
    from .analysis.study_figures import write_study_figures

    write_study_figures(a.summary, a.study, a.outdir, a.names, a.kappa, a.histories, a.claims)


def cmd_theory_report(a):
    from .analysis.study_figures import write_theory_figure
    from .analysis.study_tables import write_theory_table

    write_theory_figure(a.theory, a.figdir)
    write_theory_table(a.theory, a.tabledir)


def _plan(configs: list[str]):
    """The plan of config files given as `--configfile` takes them: an overlay is laid over
    ./config.yaml (config.merge_cli_config)."""
    from .workflow.plan import load_plan

    return load_plan(*configs, default="config.yaml" if os.path.exists("config.yaml") else None)


def cmd_variants(a):
    from .workflow.config import did_you_mean

    plan = _plan(a.config)
    if a.study and a.study not in plan.studies:
        raise ValueError(f"--study {a.study}: no such study{did_you_mean(a.study, plan.studies)} "
                         f"(allowed: {', '.join(plan.studies)})")
    for name, study in plan.studies.items():
        if a.study and name != a.study:
            continue
        for vid, v in study.variants.items():
            print(f"{name}\t{vid}\t{','.join(v.protocols)}")


def cmd_check_config(a):
    plan = _plan(a.config)
    n = sum(len(s.variants) for s in plan.studies.values())
    print(f"{' + '.join(a.config)}: ok, {len(plan.studies)} studies, {n} variants")


def cmd_check_data(a):
    from .data.hub_check import PROBLEM, check_lines

    plan = _plan(a.config)
    lines = check_lines({name: plan.datasets[name] for name in plan.used_datasets()}, a.root)
    for line in lines:
        print(line, file=sys.stderr if line.startswith(PROBLEM) else sys.stdout)
    return 1 if any(line.startswith(PROBLEM) for line in lines) else 0


def cmd_rehearse(a):
    import tempfile
    from pathlib import Path

    from .planning.rehearse import COLUMNS, rehearse, rehearse_inline

    if a.inline:  # one architecture, in a process of its own
        print(json.dumps(rehearse_inline(_plan(a.config), a.only, Path(a.work))))
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leaner-rehearse-") as tmp:
        rows = rehearse(_plan(a.config), a.config, Path(a.work or tmp), a.studies, a.ends, a.max_params, a.timeout)
    failed = [r for r in rows if r["result"] != "pass"]
    kept = sum(bool(r.get("earlier")) for r in rows)
    print(f"{len(rows) - len(failed)} of {len(rows)} architectures passed in {time.perf_counter() - started:.0f} s"
          + (f" ({kept} kept from an earlier run of this commit, "
             f"{sum(r['seconds'] for r in rows if r.get('earlier')):.0f} s then)" if kept else ""))
    if a.out:
        import pandas as pd

        from .io import write_csv

        write_csv(a.out, pd.DataFrame(rows).reindex(columns=[*COLUMNS, "kappa_methods", "earlier"]))
    return 1 if failed else 0


def cmd_status(a):
    from .running.status import STATES, show

    unknown = [s for s in a.state if s not in STATES]
    if unknown:
        raise ValueError(f"--state {','.join(unknown)}: unknown (allowed: {', '.join(STATES)})")
    show(_plan(a.config), a.root, a.watch, a.state)


def cmd_cost(a):
    from .planning.cost import LOADER_RATE, card, check_plan, format_cost, parse_mfu, plan_cost, write_cost_csv

    if a.check:
        listed, problems = check_plan(_plan(a.config), a.check, card(a.gpu))
        for line in listed:
            print(line)
        for line in problems:
            print(line, file=sys.stderr)
        return 2 if problems else 0
    gpu, mfu = card(a.gpu), parse_mfu(a.mfu)
    costs = plan_cost(_plan(a.config), gpu, mfu, loader_rate=a.loader_rate or LOADER_RATE)
    print(format_cost(costs, gpu, " + ".join(a.config)))
    if a.out:
        write_cost_csv(a.out, costs)


def _seed_list(text: str) -> list[int]:
    """'100-104' or '100,101,105' (or both: '100-102,110') -> the seeds, in order, each once."""
    seeds: list[int] = []
    for part in filter(None, text.split(",")):
        first, sep, last = part.partition("-")
        try:
            span = range(int(first), int(last) + 1) if sep else [int(first)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a seed or a range (e.g. 100-104 or 100,101)") from None
        seeds += [s for s in span if s not in seeds]
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: no seeds, or a negative one (allowed: e.g. 100-104)")
    return seeds


def cmd_pilot(a):
    from .planning import pilot
    from .workflow.config import load_configs

    default = "config.yaml" if os.path.exists("config.yaml") else None
    return pilot.main(load_configs(a.config, default), a)


def cmd_run(a):
    from .running.launch import run_snakemake

    return run_snakemake(a.snakemake_args)


CONFIG_FILES = dict(nargs="*", default=["config.yaml"], help="config files, merged in order as --configfile merges "
                    "them; an overlay (no studies of its own) is laid over ./config.yaml")


def _prepare_data_parser(sub) -> None:
    s = sub.add_parser("prepare-data", help="prepare one dataset and write its manifest")
    s.add_argument("--dataset", required=True)
    s.add_argument("--spec", required=True, type=_json_arg, help="the dataset's config (JSON)")
    s.add_argument("--out", required=True, help="manifest.json to write")
    s.set_defaults(func=cmd_prepare_data)


def _train_parser(sub) -> None:
    s = sub.add_parser("train", help="train one variant")
    s.add_argument("--spec", required=True, type=_json_arg, help="the variant spec (JSON)")
    s.add_argument("--data", required=True, help="the prepared dataset's manifest.json")
    s.add_argument("--out", required=True, help="the variant's output directory")
    s.add_argument("--device", default=None, help="force cpu, cuda or cuda:N (also $LEANER_DEVICE)")
    s.add_argument("--gpu-share", type=_nonneg_int, default=None, help=GPU_SHARE_HELP)
    s.add_argument("--threads", type=int, default=None, help="CPU threads in all (split over --nproc processes)")
    s.add_argument("--nproc", type=int, default=1,
                   help="processes (GPUs) for this one variant: >1 runs DistributedDataParallel under torchrun")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_train)


def _conditioning_parser(sub) -> None:
    s = sub.add_parser("conditioning", help="condition numbers of one trained variant")
    s.add_argument("--metrics", required=True)
    s.add_argument("--init", required=True)
    s.add_argument("--final", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--device", default=None, help="force cpu, cuda or cuda:N (also $LEANER_DEVICE)")
    s.add_argument("--gpu-share", type=_nonneg_int, default=None, help=GPU_SHARE_HELP)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--mem-mb", type=int, default=None, help="the job's memory: on the CPU the probe is measured in "
                                                            "chunks that fit it (default: 64 inputs at once)")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.set_defaults(func=cmd_conditioning)


def _theory_parser(sub) -> None:
    s = sub.add_parser("theory", help="Monte Carlo check of Theorem 3.2")
    s.add_argument("--settings", required=True, type=_json_arg)
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=None, help="CPU threads")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.set_defaults(func=cmd_theory)


def _summary_parser(sub) -> None:
    s = sub.add_parser("summary", help="one row per variant of a study")
    s.add_argument("--study", required=True)
    s.add_argument("--protocols", required=True, type=_json_arg, help="{variant: [protocols]}")
    s.add_argument("--metrics", nargs="+", required=True)
    s.add_argument("--conditioning", nargs="+", required=True)
    s.add_argument("--glue", nargs="*", default=[], help="glue.json of each variant (glue studies)")
    s.add_argument("--out", required=True)
    s.add_argument("--kappa-out", default=None, help="also write kappa at every kept checkpoint (CSV)")
    s.set_defaults(func=cmd_summary)


def _glue_scores_parser(sub) -> None:
    s = sub.add_parser("glue-scores", help="one pretrained variant's GLUE task scores and their average")
    s.add_argument("--metrics", nargs="+", required=True, help="metrics.json of each fine-tuning run")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_glue_scores)


def _tables_parser(sub) -> None:
    s = sub.add_parser("tables", help="per-configuration and lean-vs-baseline tables of a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--study", required=True)
    s.add_argument("--baseline", type=_json_arg, default={})
    s.add_argument("--checks", type=_json_arg, default=None, help="acceptance checks to run (JSON list)")
    s.add_argument("--claims", type=_json_arg, default=None, help="the study's declared claims, as the plan "
                                                                   "resolved them (JSON list)")
    s.add_argument("--names", nargs="+", required=True,
                   help="the tables to write: the study's, as its plan decides them (the workflow passes them)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_tables)


def _match_parser(sub) -> None:
    s = sub.add_parser("match", help="lean variants of a baseline within a parameter budget (exact counts)")
    s.add_argument("config", nargs="?", default="config.yaml", help="the config whose study gives task and data")
    s.add_argument("--study", required=True, help="the study (its task, dataset and model settings)")
    s.add_argument("--baseline", type=_kv, default=None,
                   help="depth=..,heads=..,width=..,mlp_ratio=.. (default: the study's lean or baseline block)")
    s.add_argument("--budget", type=int, default=None, help="at most this many parameters")
    s.add_argument("--reduction", type=float, default=None, help="at least this fraction fewer parameters, e.g. 0.3")
    s.add_argument("--depths", type=_ints, default=None, help="depths to consider (default: every shallower one)")
    s.add_argument("--heads", type=_ints, default=None, help="head counts (default: powers of 2 above the baseline's)")
    s.add_argument("--protocols", type=lambda t: t.split(","), default=None,
                   help="fixed_width,fixed_head_dim (default: both)")
    s.add_argument("--mlp-ratios", type=lambda t: [float(x) for x in t.split(",")], default=None,
                   help="MLP ratios (default: the baseline's)")
    s.add_argument("--out", default=None, help="also write the table as CSV")
    s.set_defaults(func=cmd_match)


def _job_costs_parser(sub) -> None:
    s = sub.add_parser("job-costs", help="per-job benchmark files -> a table of what each stage cost")
    s.add_argument("--benchmarks", nargs="+", required=True)
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_job_costs)


def _run_config_parser(sub) -> None:
    s = sub.add_parser("run-config", help="write the configuration a run resolved, as YAML")
    s.add_argument("--config", required=True, type=_json_arg)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_run_config)


def _overview_parser(sub) -> None:
    s = sub.add_parser("overview", help="both papers in one view: every study's heads, rank, depth, error and kappa")
    s.add_argument("--summaries", nargs="+", required=True)
    s.add_argument("--figdir", required=True)
    s.add_argument("--tabledir", required=True)
    s.add_argument("--findings", required=True, help="prefix of the generated summary (.md and .html)")
    s.add_argument("--claims", nargs="*", default=[], help="the claims tables of the studies that declare claims")
    s.set_defaults(func=cmd_overview)


def _figures_parser(sub) -> None:
    s = sub.add_parser("figures", help="the papers' figures for a study")
    s.add_argument("--summary", required=True)
    s.add_argument("--kappa", default=None, help="kappa at every kept checkpoint (summary --kappa-out)")
    s.add_argument("--histories", nargs="*", default=None, help="every variant's history.csv (training curves)")
    s.add_argument("--study", required=True)
    s.add_argument("--names", nargs="+", required=True,
                   help="the figures to make: the study's, as its plan decides them (the workflow passes them)")
    s.add_argument("--claims", type=_json_arg, default=None, help="the study's declared claims, as the plan "
                   "resolves them (JSON; the Pareto view)")
    s.add_argument("--outdir", required=True)
    s.set_defaults(func=cmd_figures)


def _theory_report_parser(sub) -> None:
    s = sub.add_parser("theory-report", help="figure and table of the theory check")
    s.add_argument("--theory", required=True)
    s.add_argument("--figdir", required=True)
    s.add_argument("--tabledir", required=True)
    s.set_defaults(func=cmd_theory_report)


def _variants_parser(sub) -> None:
    s = sub.add_parser("variants", help="list the variants a config expands to")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--study", default=None)
    s.set_defaults(func=cmd_variants)


def _check_config_parser(sub) -> None:
    s = sub.add_parser("check-config", help="validate a config file")
    s.add_argument("config", **CONFIG_FILES)
    s.set_defaults(func=cmd_check_config)


def _check_data_parser(sub) -> None:
    s = sub.add_parser("check-data", help="ask the hub whether each dataset the studies take from it loads with the "
                                          "pinned datasets (before any job), and say what to do when not")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--root", default=".", help="the folder holding results/ (a prepared dataset is not asked again)")
    s.set_defaults(func=cmd_check_data)


def _rehearse_parser(sub) -> None:
    s = sub.add_parser("rehearse", help="every distinct architecture of a config at its real shape, on the CPU: a "
                                        "few training steps, a checkpoint and resume, its conditioning")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--studies", type=lambda t: t.split(","), default=None, help="only these studies (a,b)")
    s.add_argument("--ends", action="store_true", help="only the smallest and the largest architecture of each study")
    s.add_argument("--max-params", type=float, default=None, help="leave out architectures of more parameters "
                   "(e.g. 1e8: what a small machine's memory holds; ViT L12-D2048 takes ~17 GB here)")
    s.add_argument("--out", default=None, help="also write the table as CSV")
    s.add_argument("--work", default=None, help="folder for the runs, kept: run again with the same folder, it "
                                                "goes on where it stopped, keeping the rows that passed on the "
                                                "same commit (default: a temporary one, removed after)")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds one architecture may take (default 3600)")
    s.add_argument("--only", default=None, help=argparse.SUPPRESS)
    s.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_rehearse)


def _status_parser(sub) -> None:
    s = sub.add_parser("status", help="every variant of every study: pending, running (step, loss), done (metric), "
                                      "diverged or failed (why)")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--root", default=".", help="the folder holding results/ and logs/ (default: here)")
    s.add_argument("--watch", type=float, nargs="?", const=10.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 10) until Ctrl-C")
    s.add_argument("--state", type=lambda t: t.split(","), default=[], help="only these states, e.g. running,failed")
    s.set_defaults(func=cmd_status)


def _cost_parser(sub) -> None:
    s = sub.add_parser("cost", help="GPU-hours of every study on a card, and each job's GPU memory against it")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--gpu", default="h100", help="the card: h100, h200 or a100 (default h100)")
    s.add_argument("--mfu", default=None, help="model FLOPs utilisation for every FLOPs-priced job, in (0, 1] "
                                               "(default: measured where it was, else 0.3)")
    s.add_argument("--loader-rate", type=_positive_float, default=None,
                   help="images/s one Pillow loader worker gives at 224 px on your machine (benchmarks/run.py row "
                        "1b); default: results.md's, 327")
    s.add_argument("--out", default=None, help="also write one row per job as CSV")
    s.add_argument("--check", choices=("local", "cluster"), default=None,
                   help="instead: each GPU study's jobs against the card they will run on ($LEANER_GPU_MEM_GB, else "
                        "this machine's CUDA devices (local) or the study's gpu_model (cluster)); one line per study "
                        "that cannot fit, exit status 2. On a cluster also each job's time against its study's "
                        "runtime (on the gpu_model, else --gpu): the jobs that need several attempts, and one line "
                        "per job that cannot finish")
    s.set_defaults(func=cmd_cost)


def _pilot_parser(sub) -> None:
    s = sub.add_parser("pilot", help="a declared claim's arms on pilot seeds it never uses: their results as a CSV "
                       "(pilots/), each arm's mean and sd, the declared test's power and the seeds 80%% needs")
    s.add_argument("study")
    s.add_argument("--claim", required=True, help="the claim's name (studies.STUDY.claims[].name)")
    s.add_argument("--seeds", type=_seed_list, default=_seed_list("100-104"),
                   help="pilot seeds, none of the claim's (default 100-104)")
    s.add_argument("--config", nargs="+", default=["config.yaml"], help=CONFIG_FILES["help"])
    s.add_argument("--out", default=None, help="the pilot's CSV (default pilots/STUDY-CLAIM.csv)")
    s.add_argument("--work", default=None, help="where the pilot's runs live (default pilot_runs/STUDY)")
    s.add_argument("--cores", default="all", help="Snakemake's --cores (default all)")
    s.add_argument("--from-csv", action="store_true", help="train nothing: report from the pilot's CSV")
    s.set_defaults(func=cmd_pilot)


def _run_parser(sub) -> None:
    s = sub.add_parser("run", help="snakemake in this folder, resuming a run that died (stale lock, incomplete files)")
    s.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="passed to snakemake, e.g. --cores all")
    s.set_defaults(func=cmd_run)


SUBCOMMANDS = (  # each adds its subcommand's parser, in --help's order
    _prepare_data_parser, _train_parser, _conditioning_parser, _theory_parser, _summary_parser, _glue_scores_parser,
    _tables_parser, _match_parser, _job_costs_parser, _run_config_parser, _overview_parser, _figures_parser,
    _theory_report_parser, _variants_parser, _check_config_parser, _check_data_parser, _rehearse_parser,
    _status_parser, _cost_parser, _pilot_parser, _run_parser,
)


def build_parser() -> argparse.ArgumentParser:
    from .provenance import describe

    p = argparse.ArgumentParser(prog="leaner", description=__doc__)
    p.add_argument("--version", action="version", version=describe())
    sub = p.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return p


# pipeline stages (the rules' commands): each job's log ends with a line saying what it wrote
STAGES = ("prepare-data", "conditioning", "theory", "summary", "glue-scores", "tables", "job-costs", "run-config",
          "overview", "figures", "theory-report")
OUTPUT_ARGS = ("out", "kappa_out", "outdir", "figdir", "tabledir", "findings")


def _closing_line(args, seconds: float) -> None:
    from .provenance import describe

    wrote = [str(getattr(args, a)) for a in OUTPUT_ARGS if getattr(args, a, None)]
    print(f"leaner {args.command}: done in {seconds:.1f} s ({describe()}){'; wrote ' if wrote else ''}"
          f"{', '.join(wrote)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from .workflow.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and not {"-h", "--help"} & set(argv[1:2]):  # everything after `run` is snakemake's
        args = argparse.Namespace(command="run", snakemake_args=argv[1:], func=cmd_run)
    else:
        args = build_parser().parse_args(argv)
    args.argv = argv  # a launcher runs the same command again on each of its processes
    started = time.perf_counter()
    try:
        if getattr(args, "numerics", None):  # before anything loads torch
            from .compute.numerics import pin

            pin(args.numerics, getattr(args, "threads", None))
        code = args.func(args)
        if args.command in STAGES and not code:
            _closing_line(args, time.perf_counter() - started)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
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
    from .running.handoff import hand_off

    code = hand_off(sys.argv[1:])
    if code is None:
        code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
