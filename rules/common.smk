# Helpers shared by every rule: load + validate the config once, expand every study's variants.
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from leaner.workflow.config import ConfigError, load_yaml, merge_cli_config
from leaner.workflow.plan import RESERVED_STUDY_NAMES, build_plan
from leaner.data.glue import GLUE_TASKS
from leaner.workflow.datasets import data_spec
from leaner.models.memory import conditioning_mem_mb, training_mem_mb
from leaner import run_hooks
from leaner.data.kinds import kind_module, kind_modules
from leaner.provenance import stage_digest
from leaner.tasks import FINETUNE_SUFFIX, job_modules
from leaner.workflow.preflight import unknown_study_message, unknown_variant_message
from leaner.workflow.scheduling import gpu_share_group, job_resources


# Jobs run the `leaner` CLI of the environment Snakemake itself runs in.
envvars:
    "PATH",


# --configfile / --config values that do not define their studies in full (an overlay) are laid
# over config.yaml beside this workflow; without any, config.yaml is the config.
merge_cli_config(config, load_yaml(Path(workflow.basedir) / "config.yaml"))

try:
    PLAN = build_plan(config)
except ConfigError as err:
    sys.stderr.write(str(err) + "\n")
    raise SystemExit(2)

# the jobs' environment, per-job retries, stop signals passed on in a Slurm job (leaner/run_hooks.py)
run_hooks.prepare(workflow, PLAN, workflow.basedir)

STUDIES = list(PLAN.studies)


def report_category(wildcards):
    """The report's category of results/{figures,tables}/{study}-{name}.*: its study's, the theory
    check's, both papers' or the run's."""
    if wildcards.name == "job_costs":
        return "Run"
    return {"theory": "Theorem 3.2", "all_studies": "Both papers"}.get(wildcards.study, wildcards.study)


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


def job_code(stage, finetune=False):
    """The digest of `stage`'s code for a job of this study (provenance.stage_digest): the stage's
    modules and those its job loads by name, its task's training class and its dataset's kind."""

    def code(wildcards):
        st = study_of(wildcards)
        if finetune:
            task, dataset = st.task + FINETUNE_SUFFIX, st.finetune["dataset"]
        else:
            task, dataset = st.task, st.dataset
        return stage_digest(stage, job_modules(task, PLAN.datasets[dataset]["kind"]))

    return code


def data_code(wildcards):
    """The data stage's digest for this dataset: data/ and its kind's module."""
    family = kind_module(PLAN.datasets[wildcards.dataset]["kind"])
    return stage_digest("data", (family,) if family else ())


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
    set when the DAG asks for its first group (leaner/run_hooks.py group_sizes: Snakemake 9.27
    replaces its group settings after this file is parsed)."""
    run_hooks.group_sizes(workflow, PLAN)
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
    """Every study's summary, and the run's report (analysis/report.py): its figures, tables,
    captions, index and findings, and the configuration it resolved."""
    summaries = [f"results/{study}/summary.csv" for study in STUDIES]
    made = ["results/figures", "results/tables", "results/overview/captions", "results/overview/index.md"]
    overview = ["results/overview/findings.md", "results/overview/findings.html", "results/overview/config.yaml"]
    return [*summaries, *made, *overview]


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


def trained_metrics():
    """Every training and fine-tuning job's metrics.json (what their attempts cost)."""
    out = []
    for study, st in PLAN.studies.items():
        for vid in st.variants:
            out.append(f"results/{study}/{vid}/metrics.json")
            if st.finetune:
                out += [f"results/{study}/{vid}/glue/{task}/metrics.json" for task in st.finetune["tasks"]]
    return out


# Names a target under results/ may start with (rules/refuse_unknown_studies.smk refuses any other).
KNOWN_FOLDERS = "|".join(STUDIES + list(RESERVED_STUDY_NAMES))


def refuse(message):
    """Stop the run before any job, with one line saying why."""
    sys.stderr.write(f"{message}\n")
    raise SystemExit(2)


def refuse_unknown_study(study, path):
    """Stop the run before any job: target `path` names a study the config does not define."""
    refuse(unknown_study_message(path, study, STUDIES))


def refuse_report_file(folder, file):
    """Stop the run before any job: a figure or table was named as a target."""
    path, study = f"results/{folder}/{file}", file.split("-", 1)[0]
    if study not in (*STUDIES, "theory", "all_studies"):
        refuse_unknown_study(study, path)
    refuse(f"{path}: the report job makes results/{folder}/ whole; target results/{folder} (or run the workflow)")
