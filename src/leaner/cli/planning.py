"""Commands before a run: `leaner variants`, `check-config`, `check-data`, `match`, `cost`,
`rehearse` and `pilot` (what a config expands to, whether it and its data are sound, what it costs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .args import CONFIG_FILES, plan_of, positive_float


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

    from ..tasks import CATALOG, task_info
    from ..workflow.config import load_yaml
    from ..workflow.match import LEAN_SEARCH_KEYS, match_lean
    from ..workflow.plan import study_model_base

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
        from ..io import write_csv

        write_csv(a.out, frame)
    return 0


def cmd_variants(a):
    from ..workflow.config import did_you_mean

    plan = plan_of(a.config)
    if a.study and a.study not in plan.studies:
        raise ValueError(f"--study {a.study}: no such study{did_you_mean(a.study, plan.studies)} "
                         f"(allowed: {', '.join(plan.studies)})")
    for name, study in plan.studies.items():
        if a.study and name != a.study:
            continue
        for vid, v in study.variants.items():
            print(f"{name}\t{vid}\t{','.join(v.protocols)}")


def cmd_check_config(a):
    plan = plan_of(a.config)
    n = sum(len(s.variants) for s in plan.studies.values())
    print(f"{' + '.join(a.config)}: ok, {len(plan.studies)} studies, {n} variants")


def cmd_check_data(a):
    from ..data.hub_check import PROBLEM, check_lines

    plan = plan_of(a.config)
    lines = check_lines({name: plan.datasets[name] for name in plan.used_datasets()}, a.root)
    for line in lines:
        print(line, file=sys.stderr if line.startswith(PROBLEM) else sys.stdout)
    return 1 if any(line.startswith(PROBLEM) for line in lines) else 0


def cmd_rehearse(a):
    import tempfile
    from pathlib import Path

    from ..planning.rehearse import COLUMNS, rehearse, rehearse_inline

    if a.inline:  # one architecture, in a process of its own
        print(json.dumps(rehearse_inline(plan_of(a.config), a.only, Path(a.work))))
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leaner-rehearse-") as tmp:
        rows = rehearse(plan_of(a.config), a.config, Path(a.work or tmp), a.studies, a.ends, a.max_params, a.timeout)
    failed = [r for r in rows if r["result"] != "pass"]
    kept = sum(bool(r.get("earlier")) for r in rows)
    print(f"{len(rows) - len(failed)} of {len(rows)} architectures passed in {time.perf_counter() - started:.0f} s"
          + (f" ({kept} kept from an earlier run of this commit, "
             f"{sum(r['seconds'] for r in rows if r.get('earlier')):.0f} s then)" if kept else ""))
    if a.out:
        import pandas as pd

        from ..io import write_csv

        write_csv(a.out, pd.DataFrame(rows).reindex(columns=[*COLUMNS, "kappa_methods", "earlier"]))
    return 1 if failed else 0


def cmd_cost(a):
    from ..planning.cards import card
    from ..planning.cost import LOADER_RATE, jobs, parse_mfu, plan_cost
    from ..planning.cost_report import format_cost, write_cost_csv
    from ..planning.fit import DEFAULT_CARD, GPU_ENV, check_plan, default_card, default_card_note
    from ..planning.time_limit import KILL_WAIT_S, SIGNAL_LEAD_S

    if a.check:
        started = time.perf_counter()
        plan = plan_of(a.config)
        gpu = default_card(a.gpu or os.environ.get(GPU_ENV))
        lead = SIGNAL_LEAD_S if a.signal_lead is None else a.signal_lead
        listed, problems = check_plan(plan, a.check, gpu, grace_s=lead + KILL_WAIT_S, lead_s=lead)
        for line in listed:
            print(line)
        for line in problems:
            print(line, file=sys.stderr)
        if a.check == "cluster":  # what was checked, on what, in how long
            gpu_jobs = sum(len(jobs(s)) for s in plan.studies.values() if s.resources["gpu"] >= 1)
            named = a.gpu or os.environ.get(GPU_ENV)
            fallback = f" ({gpu.name}: {default_card_note(named)})" if "default card" in gpu.name else ""
            print(f"leaner cost --check cluster: {gpu_jobs} GPU jobs checked in {time.perf_counter() - started:.1f} s"
                  f"{fallback}, with the stop signal {lead:g} s before each time limit: {len(problems)} problem(s), "
                  f"{len(listed)} job(s) of several attempts", file=sys.stderr)
        return 2 if problems else 0
    from ..workflow.config import did_you_mean

    gpu, mfu = card(a.gpu or DEFAULT_CARD), parse_mfu(a.mfu)
    plan = plan_of(a.config)
    for name in a.study or []:
        if name not in plan.studies:
            raise ValueError(f"--study {name}: no such study in {' + '.join(a.config)}"
                             f"{did_you_mean(name, plan.studies)} (studies: {', '.join(plan.studies)})")
    costs = [c for c in plan_cost(plan, gpu, mfu, loader_rate=a.loader_rate or LOADER_RATE)
             if not a.study or c.name in a.study]
    if a.wall_budget:
        from ..planning.reach import format_reach, reach_rows

        epochs = {(s.name, j.name): j.spec.recipe.epochs for s in plan.studies.values() for j in jobs(s)}
        rows = [r for c in costs for r in c.rows]
        print(format_reach(reach_rows(rows, epochs, gpu, a.wall_budget), gpu, a.wall_budget))
        return None
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
    from ..planning import pilot
    from ..workflow.config import load_configs

    default = "config.yaml" if os.path.exists("config.yaml") else None
    a.config = a.configs or a.config
    return pilot.main(load_configs(a.config, default), a)


def match_parser(sub) -> None:
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


def variants_parser(sub) -> None:
    s = sub.add_parser("variants", help="list the variants a config expands to")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--study", default=None)
    s.set_defaults(func=cmd_variants)


def check_config_parser(sub) -> None:
    s = sub.add_parser("check-config", help="validate a config file")
    s.add_argument("config", **CONFIG_FILES)
    s.set_defaults(func=cmd_check_config)


def check_data_parser(sub) -> None:
    s = sub.add_parser("check-data", help="ask the hub whether each dataset the studies take from it loads with the "
                                          "pinned datasets (before any job), and say what to do when not")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--root", default=".", help="the folder holding results/ (a prepared dataset is not asked again)")
    s.set_defaults(func=cmd_check_data)


def rehearse_parser(sub) -> None:
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


def cost_parser(sub) -> None:
    s = sub.add_parser("cost", help="GPU-hours of every study on a card, and each job's GPU memory against it")
    s.add_argument("config", **CONFIG_FILES)
    s.add_argument("--gpu", default=None, help="the card: h100, h200, a100, l40s or a10 (default h100; with "
                                               "--check cluster, where no study names one, default $LEANER_GPU, "
                                               "else h100)")
    s.add_argument("--mfu", default=None, help="model FLOPs utilisation for every FLOPs-priced job, in (0, 1] "
                                               "(default: measured where it was, else 0.3)")
    s.add_argument("--loader-rate", type=positive_float, default=None,
                   help="images/s one Pillow loader worker gives at 224 px on your machine (benchmarks/run.py row "
                        "1b); default: results.md's, 327")
    s.add_argument("--out", default=None, help="also write one row per job as CSV")
    s.add_argument("--wall-budget", type=positive_float, default=None, metavar="HOURS",
                   help="instead: the epochs each configuration completes within HOURS a job, on the card and on a "
                        "V100 (the authors' regime for P2's figN: 4 h, one job, no requeue; planning/reach.py)")
    s.add_argument("--study", nargs="+", default=None,
                   help="only these studies (the table and --wall-budget; --check checks every study)")
    s.add_argument("--check", choices=("local", "cluster"), default=None,
                   help="instead: each GPU study's jobs against the card they will run on ($LEANER_GPU_MEM_GB, else "
                        "this machine's CUDA devices (local) or the study's gpu_model (cluster)); one line per study "
                        "that cannot fit, exit status 2. On a cluster also each job's time against its study's "
                        "runtime (on the gpu_model, else --gpu): the jobs that need several attempts, and one line "
                        "per job that cannot finish")
    s.add_argument("--signal-lead", type=float, default=None,
                   help="with --check cluster: seconds before the time limit the jobs get their stop signal "
                        "(sbatch --signal=USR1@N; default: what profiles/slurm asks, planning/cost.py SIGNAL_LEAD_S; "
                        "0: none, only SIGTERM at the limit)")
    s.set_defaults(func=cmd_cost)


def pilot_parser(sub) -> None:
    s = sub.add_parser("pilot", help="a declared claim's arms on pilot seeds it never uses: their results as a CSV "
                       "(pilots/), each arm's mean and sd, the declared test's power and the seeds 80%% needs")
    s.add_argument("study")
    s.add_argument("--claim", required=True, help="the claim's name (studies.STUDY.claims[].name)")
    s.add_argument("--seeds", type=_seed_list, default=_seed_list("100-104"),
                   help="pilot seeds, none of the claim's (default 100-104)")
    s.add_argument("configs", nargs="*", default=[], metavar="config", help=CONFIG_FILES["help"] + " (default "
                   "config.yaml), right after the study")
    s.add_argument("--config", nargs="+", default=["config.yaml"], help="the same, as an option")
    s.add_argument("--out", default=None,
                   help="the pilot's CSV (default pilots/STUDY.csv: one per study, every claim's arms)")
    s.add_argument("--work", default=None, help="where the pilot's runs live (default pilot_runs/STUDY)")
    s.add_argument("--cores", default="all", help="Snakemake's --cores (default all)")
    s.add_argument("--from-csv", action="store_true", help="train nothing: report from the pilot's CSV")
    s.set_defaults(func=cmd_pilot)


def cmd_tune(a):
    from ..planning import tune
    from ..workflow.config import load_configs

    default = "config.yaml" if os.path.exists("config.yaml") else None
    a.config = a.configs or a.config
    return tune.main(load_configs(a.config, default), a)


def _rates(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of numbers (e.g. 1e-3,3e-3,1e-2)") \
            from None


def tune_parser(sub) -> None:
    s = sub.add_parser("tune", help="a declared claim's arms at several learning rates on a validation split "
                       "carved from the training data: each arm's best rate, kept as pilots/STUDY_lr.csv before the "
                       "claim runs")
    s.add_argument("study")
    s.add_argument("--claim", required=True, help="the claim's name (studies.STUDY.claims[].name)")
    s.add_argument("--lrs", type=_rates, required=True, help="the learning rates to try, e.g. 1e-3,3e-3,1e-2")
    s.add_argument("--seeds", type=_seed_list, default=_seed_list("100-102"),
                   help="pilot seeds, none of the claim's (default 100-102)")
    s.add_argument("--validation-fraction", type=float, default=0.2,
                   help="share of the training rows held out as the validation split (default 0.2)")
    s.add_argument("configs", nargs="*", default=[], metavar="config", help=CONFIG_FILES["help"] + " (default "
                   "config.yaml), right after the study")
    s.add_argument("--config", nargs="+", default=["config.yaml"], help="the same, as an option")
    s.add_argument("--out", default=None, help="the choice's CSV (default pilots/STUDY_lr.csv)")
    s.add_argument("--work", default=None, help="where the runs live (default pilot_runs/STUDY_lr)")
    s.add_argument("--cores", default="all", help="Snakemake's --cores (default all)")
    s.set_defaults(func=cmd_tune)
