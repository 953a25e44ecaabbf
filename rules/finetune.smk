# BERT-style studies (task glue): fine-tune each pretrained variant on every GLUE task of the
# study's finetune dataset (the same `leaner train` loop, started from the pretrained encoder),
# then collect the task scores and the GLUE average into glue.json.


rule finetune:
    input:
        pretrained=pretrained_weights,
        data=finetune_manifest,
        declared=ancient("results/{study}/declared.json"),
    output:
        model="results/{study}/{variant}/glue/{glue_task}/model.safetensors",
        init="results/{study}/{variant}/glue/{glue_task}/init.safetensors",
        history="results/{study}/{variant}/glue/{glue_task}/history.csv",
        metrics="results/{study}/{variant}/glue/{glue_task}/metrics.json",
    log:
        "logs/finetune/{study}/{variant}/{glue_task}.log",
    benchmark:
        "logs/benchmarks/finetune/{study}/{variant}/{glue_task}.tsv"
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
        mem_mb=finetune_memory,
    params:
        spec=finetune_spec,
        outdir=lambda wildcards: f"results/{wildcards.study}/{wildcards.variant}/glue/{wildcards.glue_task}",
        nproc=processes_per_variant,
        numerics=PLAN.numerics,
        code=job_code("training", finetune=True),
    shell:
        "exec leaner train --spec {params.spec:q} --data {input.data:q} --declared {input.declared:q}"
        " --out {params.outdir:q}"
        " --threads {threads} --nproc {params.nproc} --gpu-share {resources.gpu_share}"
        " --numerics {params.numerics} --attempt {resources.attempt} --log {log:q} > {log:q} 2>&1"


rule glue_scores:
    input:
        glue_task_metrics,
    output:
        "results/{study}/{variant}/glue.json",
    log:
        "logs/glue_scores/{study}/{variant}.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        code=stage_digest("summary"),
    shell:
        "leaner glue-scores --metrics {input:q} --out {output:q} > {log:q} 2>&1"
