# Helpers shared by every rule: load + validate the config once, expand every study's variants.
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from leaner.workflow.config import ConfigError, load_yaml, merge_cli_config
from leaner.outputs import OVERVIEW_TABLES, THEORY_TABLES, caption
from leaner.provenance import CLAIMS_ENV
from leaner.workflow.plan import RESERVED_STUDY_NAMES, build_plan
from leaner.data.glue import GLUE_TASKS
from leaner.data.hub_check import hub_problems, skip_reason
from leaner.workflow.datasets import data_spec
from leaner.models.memory import conditioning_mem_mb, training_mem_mb
from leaner import warm
from leaner.workflow.preflight import (
    resource_problems,
    unknown_study_message,
    unknown_variant_message,
)
from leaner.workflow.scheduling import (
    RESUMABLE_RULES,
    RETRIED_RULES,
    ask_group_components,
    cluster_check_args,
    gpu_share_group,
    job_resources,
    job_retries,
    limit_resource,
    local_gpu_limits,
    plan_check_skipped,
    relay_stop_signals,
    retrains,
    retries_by_job,
)
from leaner.training.finished import drop as drop_finished


# Jobs run the `leaner` CLI of the environment Snakemake itself runs in.
envvars:
    "PATH",


os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
# --sdm conda: envs/leaner.post-deploy.sh installs the package from this checkout, wherever --directory points
os.environ.setdefault("LEANER_SOURCE", workflow.basedir)

# --configfile / --config values that do not define their studies in full (an overlay) are laid
# over config.yaml beside this workflow; without any, config.yaml is the config.
merge_cli_config(config, load_yaml(Path(workflow.basedir) / "config.yaml"))

try:
    PLAN = build_plan(config)
except ConfigError as err:
    sys.stderr.write(str(err) + "\n")
    raise SystemExit(2)

STUDIES = list(PLAN.studies)
# each job records its study's claims as declared now (provenance.claims_declared)
os.environ[CLAIMS_ENV] = json.dumps({s: PLAN.studies[s].claims_digest for s in STUDIES}, sort_keys=True)
CLAIMING_STUDIES = [s for s in STUDIES if PLAN.studies[s].claims]  # their claims make the headline
PREPARE_RULES = ("prepare_data", "prepare_data_local")  # rules/data.smk
FIG_EXT = ["png", "pdf"]
TABLE_EXT = ["csv", "md", "tex", "html"]


def figure_files(prefix, names, category, subcategory="figures"):
    """results/figures/{prefix}-{name}.{png,pdf}; the PNG goes into the report with the caption
    of the figure's record (outputs.caption)."""
    out = []
    for name in names:
        png, pdf = (f"results/figures/{prefix}-{name}.{ext}" for ext in FIG_EXT)
        text = caption("figures", name)
        out += [report(png, caption=text, category=category, subcategory=subcategory), pdf]
    return out


def table_files(prefix, names, category, subcategory="tables"):
    """results/tables/{prefix}-{name}.{csv,md,tex,html}; the HTML goes into the report."""
    out = []
    for name in names:
        csv, md, tex, html = (f"results/tables/{prefix}-{name}.{ext}" for ext in TABLE_EXT)
        text = caption("tables", name)
        out += [csv, md, tex, report(html, caption=text, category=category, subcategory=subcategory)]
    return out


wildcard_constraints:
    study="|".join(STUDIES),
    variant=r"L\d+-H\d+-[A-Za-z0-9.-]+-s\d+",
    dataset="|".join(PLAN.datasets),
    glue_task="|".join(GLUE_TASKS),


def study_of(wildcards):
    return PLAN.studies[wildcards.study]


def variant_of(wildcards):
    """The variant a target names; a name the study lacks stops the run with one line."""
    variants = study_of(wildcards).variants
    if wildcards.variant not in variants:
        path = f"results/{wildcards.study}/{wildcards.variant}"
        refuse(unknown_variant_message(path, wildcards.study, wildcards.variant, variants))
    return variants[wildcards.variant]


def variant_dirs(study):
    return [f"results/{study}/{vid}" for vid in PLAN.studies[study].variants]


def dataset_manifest(wildcards):
    return f"results/data/{study_of(wildcards).dataset}/manifest.json"


def dataset_spec(wildcards):
    return json.dumps(data_spec(PLAN.datasets[wildcards.dataset]), sort_keys=True)


def prepare_setting(key):
    """A dataset's `prepare` setting (threads, runtime, mem_mb) for its data job."""
    return lambda wildcards: PLAN.datasets[wildcards.dataset]["prepare"][key]


def prepared_datasets(local):
    """The names of the datasets prepared on the submitting host (local) or as submitted jobs, as
    a wildcard constraint (one that matches nothing when there are none)."""
    names = [re.escape(name) for name, ds in PLAN.datasets.items() if ds["prepare"]["local"] == local]
    return "|".join(names) or "(?!)"


def variant_spec(wildcards):
    return variant_of(wildcards).spec_json()


def study_resource(key):
    return lambda wildcards: study_of(wildcards).resources[key]


def gpu_resource(key, max_gpus=None):
    """gpu, gpu_share, gpu_model or gres of a GPU job of the study (leaner/workflow/scheduling.py)."""
    return lambda wildcards: job_resources(study_of(wildcards).resources, max_gpus)[key]


def share_group(wildcards):
    """The Snakemake group of a study whose jobs share GPUs: on a cluster it spans jobs_per_gpu
    jobs, one allocation of one GPU per k variants (local runs ignore groups). The group sizes are
    set when the DAG asks for its first group (leaner/workflow/scheduling.py ask_group_components:
    Snakemake 9.27 replaces its group settings after this file is parsed)."""
    ask_group_components(workflow, {name: st.resources for name, st in PLAN.studies.items()})
    return gpu_share_group(wildcards.study, study_of(wildcards).resources)


def finetune_manifest(wildcards):
    return f"results/data/{study_of(wildcards).finetune['dataset']}/manifest.json"


def finetune_spec(wildcards):
    variant_of(wildcards)
    spec = study_of(wildcards).finetune_spec(wildcards.variant, wildcards.glue_task)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def pretrained_weights(wildcards):
    """The weights a fine-tuning job starts from: its spec's (plan.Study.finetune_spec)."""
    variant_of(wildcards)
    return study_of(wildcards).finetune_spec(wildcards.variant, wildcards.glue_task)["init_from"]


def glue_task_metrics(wildcards):
    tasks = study_of(wildcards).finetune["tasks"]
    return [f"results/{wildcards.study}/{wildcards.variant}/glue/{t}/metrics.json" for t in tasks]


def glue_files(wildcards):
    """The GLUE scores of every variant of a glue study (nothing for other tasks)."""
    return study_files(wildcards, "glue.json") if study_of(wildcards).task == "glue" else []


def attempt_number(wildcards, attempt):
    """Snakemake's attempt of the job (its retries), as a resource the shell can name."""
    return attempt


def processes_per_variant(wildcards):
    """One training process per requested GPU (at least one)."""
    return max(1, study_of(wildcards).resources["gpu"])


def training_memory(wildcards):
    """mem_mb of a training job: the study's, or what its variant's model needs if that is more."""
    model = variant_of(wildcards).model
    return training_mem_mb(model, processes_per_variant(wildcards), study_of(wildcards).resources["mem_mb"])


def finetune_memory(wildcards):
    """mem_mb of a fine-tuning job, as training's for its model."""
    model = study_of(wildcards).finetune_spec(wildcards.variant, wildcards.glue_task)["model"]
    return training_mem_mb(model, processes_per_variant(wildcards), study_of(wildcards).resources["mem_mb"])


def conditioning_memory(wildcards):
    """mem_mb of a conditioning job, from its variant's model size (and its probe, on the CPU)."""
    v = variant_of(wildcards)
    on_cpu = study_of(wildcards).resources["gpu"] == 0
    return conditioning_mem_mb(v.model, v.conditioning, on_cpu)


def study_files(wildcards, name):
    return [f"{d}/{name}" for d in variant_dirs(wildcards.study)]


def final_outputs():
    out = []
    for study in STUDIES:
        figures, tables = PLAN.studies[study].outputs()
        out.append(f"results/{study}/summary.csv")
        out += expand("results/figures/{study}-{fig}.{ext}", study=study, fig=figures, ext=FIG_EXT)
        out += expand("results/tables/{study}-{table}.{ext}", study=study, table=tables, ext=TABLE_EXT)
    out += expand("results/tables/all_studies-{table}.{ext}", table=OVERVIEW_TABLES + ("job_costs",), ext=TABLE_EXT)
    out += expand("results/figures/all_studies-overview.{ext}", ext=FIG_EXT)
    out += ["results/overview/findings.md", "results/overview/findings.html", "results/overview/config.yaml"]
    out += expand("results/figures/theory-gaussian_conditioning.{ext}", ext=FIG_EXT)
    out += expand("results/tables/theory-{table}.{ext}", table=THEORY_TABLES, ext=TABLE_EXT)
    return out


def benchmark_files():
    """Every per-job benchmark file of the run (the job_costs table reads them)."""
    out = [f"logs/benchmarks/prepare_data/{d}.tsv" for d in PLAN.used_datasets()] + [
        "logs/benchmarks/theory/theory.tsv"
    ]
    for study, st in PLAN.studies.items():
        for vid in st.variants:
            out += [f"logs/benchmarks/train/{study}/{vid}.tsv", f"logs/benchmarks/conditioning/{study}/{vid}.tsv"]
            if st.finetune:
                out += [f"logs/benchmarks/finetune/{study}/{vid}/{task}.tsv" for task in st.finetune["tasks"]]
    return out


RETRY_LINES = set()  # (job, attempt): said once


def decide_retries(job):
    """A failed job's retries (workflow/scheduling.py job_retries) for the rules retried as their
    study allows; one line where a job is not tried again, and why."""
    if job.rule.name not in RETRIED_RULES:
        return None
    out_dir = Path(job.output[0]).parent
    tries, line = job_retries(
        job.rule.name, job.attempt, study_of(job.wildcards).resources["attempts"], out_dir, workflow.remote_exec
    )
    if line and (str(job), job.attempt) not in RETRY_LINES:
        RETRY_LINES.add((str(job), job.attempt))
        sys.stderr.write(f"{job.rule.name} {out_dir}: {line}\n")
    return tries


retries_by_job(decide_retries)
relay_stop_signals(os.environ, sys.argv)


def trained_metrics():
    """Every training and fine-tuning job's metrics.json (what their attempts cost)."""
    out = []
    for study, st in PLAN.studies.items():
        for vid in st.variants:
            out.append(f"results/{study}/{vid}/metrics.json")
            if st.finetune:
                out += [f"results/{study}/{vid}/glue/{task}/metrics.json" for task in st.finetune["tasks"]]
    return out


def check_resource_settings():
    """Unknown resource names in --resources / --default-resources / --set-resources (a profile's
    typo) stop the run before any job; called once every rule is defined."""
    rs = workflow.resource_settings
    overrides = {rule: list(res.keys()) for rule, res in dict(rs.overwrite_resources or {}).items()}
    problems = resource_problems(
        list(dict(rs.resources or {}).keys()),
        list(dict(rs.default_resources or {}).keys()),
        overrides,
        [r.name for r in workflow.rules],
    )
    if problems:
        sys.stderr.write("\n".join(problems) + "\n")
        raise SystemExit(2)


def count_gpus():
    """At the start of a local run (onstart: not in dry runs, not on a cluster): the GPUs and their
    shares Snakemake counts, and a study this machine cannot run as asked stops the run before any
    job starts (leaner/workflow/scheduling.py local_gpu_limits)."""
    if not workflow.local_exec:
        return
    limits, problems = local_gpu_limits(
        PLAN, *(workflow.global_resources.get(name).value for name in ("gpu", "_cores", "gpu_share"))
    )
    if problems:
        sys.stderr.write("\n".join(problems) + "\n")
        raise SystemExit(2)
    for name, value in limits.items():
        limit_resource(workflow, name, value)


def check_plan_at_start():
    """At the start of a run (onstart: not in dry runs), before any job: `leaner cost --check`
    (leaner/planning/fit.py), one line per job that cannot fit or finish, and the run stops. Locally:
    each GPU study's memory against the CUDA devices here ($LEANER_GPU_MEM_GB instead). On a cluster,
    always: memory and time on each study's gpu_model, else the card every training job's resolved
    gpu_model names (the profile's set-resources), else $LEANER_GPU, else the default card, with the
    early stop signal the jobs' slurm_extra asks for (workflow/scheduling.py cluster_check_args); one
    line says what was checked and how long it took. It runs in a child process: the estimate opens
    a CUDA context where CUDA is present, which this process, alive for the whole sweep, must not hold.
    LEANER_SKIP_PLAN_CHECK=1 skips it (a test of the time limit itself runs 1-minute jobs, which the
    plan's 5 minutes of assumed start-up refuses)."""
    import subprocess
    import tempfile

    import yaml
    from leaner.planning.fit import may_know_a_card

    where = "local" if workflow.local_exec else "cluster"
    if plan_check_skipped(os.environ) or not may_know_a_card(PLAN, where):
        return
    extra = []
    if where == "cluster":
        trained = [dict(j.resources) for j in workflow.dag.needrun_jobs() if j.rule.name in RESUMABLE_RULES]
        extra = cluster_check_args(trained, os.environ)
    with tempfile.NamedTemporaryFile("w", prefix=".leaner-config-", suffix=".yaml") as resolved:
        yaml.safe_dump(dict(config), resolved)
        resolved.flush()
        src = str(Path(workflow.basedir) / "src")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(
            [sys.executable, "-m", "leaner", "cost", resolved.name, "--check", where, *extra],
            env=env,
            capture_output=True,
            text=True,
        )
    if proc.returncode:
        sys.stderr.write(proc.stderr)
        raise SystemExit(2)
    if where == "cluster":
        sys.stderr.write(proc.stderr)


def drop_finished_copies():
    """At the start of a run (onstart: not in dry runs, not in cluster jobs): a training job this run
    retrains (forced, new params, new input: workflow/scheduling.py retrains) forgets the finished run
    a cluster job kept for it (training/finished.py), so that it trains again."""
    for job in workflow.dag.needrun_jobs():
        if job.rule.name in RESUMABLE_RULES and retrains(workflow.dag.reason(job)):
            drop_finished(Path(job.output[0]).parent)


def check_hub_data():
    """At the start of a run (onstart: not in dry runs, not in cluster jobs): every dataset from
    the hub whose preparation this run will run is asked for at the hub; one the pinned `datasets`
    cannot load stops the run before any job, with one line saying what to do. Skipped with
    LEANER_SKIP_DATA_CHECK=1 or in offline mode (HF_DATASETS_OFFLINE=1, HF_HUB_OFFLINE=1)."""
    if skip_reason(os.environ):
        return
    names = {job.wildcards["dataset"] for job in workflow.dag.needrun_jobs() if job.rule.name in PREPARE_RULES}
    problems = hub_problems({name: PLAN.datasets[name] for name in sorted(names)})
    if problems:
        sys.stderr.write("\n".join(problems) + "\n")
        raise SystemExit(2)


WARM = []  # the warm process of this run, if any


def start_warm():
    """At the start of a local run (onstart): the warm process its training, conditioning and theory
    jobs fork from instead of each importing torch (leaner/warm.py; LEANER_WARM=off: none)."""
    if workflow.local_exec:
        WARM.append(warm.start(PLAN.numerics, "logs/warm.log"))


def stop_warm():
    """At the end of a run (onsuccess, onerror): the warm process stops taking jobs."""
    for proc in WARM:
        warm.stop(proc)


# Names a target under results/ may start with (rules/refuse_unknown_studies.smk refuses any other).
KNOWN_FOLDERS = "|".join(STUDIES + list(RESERVED_STUDY_NAMES))
KNOWN_PREFIXES = "|".join(STUDIES + ["theory", "all_studies"])


def refuse(message):
    """Stop the run before any job, with one line saying why."""
    sys.stderr.write(message + "\n")
    raise SystemExit(2)


def refuse_unknown_study(study, path):
    """Stop the run before any job: target `path` names a study the config does not define."""
    refuse(unknown_study_message(path, study, STUDIES))
