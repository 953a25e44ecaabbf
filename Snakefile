# The whole study as one DAG: prepare data -> train every variant -> condition numbers ->
# per-study summary, figures and tables; plus the Gaussian check of Theorem 3.2.
# Wiring only: every rule calls the `leaner` CLI; the logic lives in src/leaner/.
from snakemake.utils import min_version

min_version("9.0")


# `snakemake --report report.html` after a run: every figure and table, with its caption.
report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/finetune.smk"
include: "rules/conditioning.smk"
include: "rules/theory.smk"
include: "rules/aggregate.smk"
include: "rules/refuse_unknown_studies.smk"


rule all:
    default_target: True
    input:
        final_outputs(),


# What a run does besides its rules (the GPUs it counts, the plan and hub checks, the warm
# process): leaner/run_hooks.py.
run_hooks.check_resource_names(workflow)


onstart:
    run_hooks.at_start(workflow, PLAN, config)


onsuccess:
    run_hooks.at_end(success=True)


onerror:
    run_hooks.at_end()
