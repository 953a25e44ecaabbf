# Train one variant. Its full spec is a param, so changing one variant re-runs only that variant.
# `exec`: the training process is the job's process, the one Snakemake waits for and the
# scheduler's signal reaches (a shell between them would die on SIGTERM, and Snakemake with it,
# before the resume state is saved: training/stopping.py).
# A study asking for more than one GPU per variant trains it on that many processes (DDP under
# torchrun, launched by `leaner train --nproc`); on Slurm the job is one task that sees all its
# GPUs (tasks_per_gpu 0: leaner/workflow/scheduling.py).
# The rolling checkpoint lives in results/{study}/{variant}/.resume/ (not an output: it survives
# a killed job, and a re-run resumes from it). checkpoints/ holds the weights kept at the study's
# conditioning.steps (possibly none), for kappa through training.


# What a study's jobs read of its declarations (workflow/plan.py Study.job_declaration): the claims
# digest each training run records, each variant's protocols for the summary. Training takes it
# `ancient`: a claim declared or reworded after the runs retrains nothing, and the claims table
# says the declaration came after them.
rule declare:
    output:
        "results/{study}/declared.json",
    log:
        "logs/declare/{study}.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        declaration=lambda wildcards: json.dumps(study_of(wildcards).job_declaration(), sort_keys=True),
    shell:
        "leaner declare --declaration {params.declaration:q} --out {output:q} > {log:q} 2>&1"


rule train:
    input:
        data=dataset_manifest,
        declared=ancient("results/{study}/declared.json"),
    output:
        model="results/{study}/{variant}/model.safetensors",
        init="results/{study}/{variant}/init.safetensors",
        history="results/{study}/{variant}/history.csv",
        metrics="results/{study}/{variant}/metrics.json",
        kept=directory("results/{study}/{variant}/checkpoints"),
    log:
        "logs/train/{study}/{variant}.log",
    benchmark:
        "logs/benchmarks/train/{study}/{variant}.tsv"
    retries: PLAN.train_retries
    group:
        share_group
    conda:
        "../envs/leaner.yaml"
    threads: study_resource("threads")
    resources:
        gpu=gpu_resource("gpu"),
        gpu_share=gpu_resource("gpu_share"),
        gpu_model=gpu_resource("gpu_model"),
        gres=gpu_resource("gres"),
        nodes=gpu_resource("nodes"),
        tasks_per_gpu=gpu_resource("tasks_per_gpu"),
        runtime=study_resource("runtime"),
        attempt=attempt_number,
        mem_mb=training_memory,
    params:
        spec=variant_spec,
        outdir=lambda wildcards: f"results/{wildcards.study}/{wildcards.variant}",
        nproc=processes_per_variant,
        numerics=PLAN.numerics,
        code=job_code("training"),
    shell:
        "exec leaner train --spec {params.spec:q} --data {input.data:q} --declared {input.declared:q}"
        " --out {params.outdir:q}"
        " --threads {threads} --nproc {params.nproc} --gpu-share {resources.gpu_share}"
        " --numerics {params.numerics} --attempt {resources.attempt} --log {log:q} > {log:q} 2>&1"
