# Condition numbers of one variant's attention: at initialisation, at the steps whose weights
# training kept (conditioning.steps), and after training.


rule conditioning:
    input:
        metrics="results/{study}/{variant}/metrics.json",
        init="results/{study}/{variant}/init.safetensors",
        model="results/{study}/{variant}/model.safetensors",
        kept="results/{study}/{variant}/checkpoints",
        data=dataset_manifest,
    output:
        "results/{study}/{variant}/conditioning.csv",
    log:
        "logs/conditioning/{study}/{variant}.log",
    benchmark:
        "logs/benchmarks/conditioning/{study}/{variant}.tsv"
    group:
        share_group
    conda:
        "../envs/leaner.yaml"
    threads: 1
    resources:
        gpu=gpu_resource("gpu", max_gpus=1),
        gpu_share=gpu_resource("gpu_share", max_gpus=1),
        gpu_model=gpu_resource("gpu_model", max_gpus=1),
        gres=gpu_resource("gres", max_gpus=1),
        tasks_per_gpu=gpu_resource("tasks_per_gpu", max_gpus=1),
        runtime=study_resource("conditioning_runtime"),
        mem_mb=conditioning_memory,
    params:
        numerics=PLAN.numerics,
        code=job_code("conditioning"),
    shell:
        "exec leaner conditioning --metrics {input.metrics:q} --init {input.init:q} --final {input.model:q}"
        " --data {input.data:q} --out {output:q} --threads {threads}"
        " --gpu-share {resources.gpu_share} --mem-mb {resources.mem_mb} --numerics {params.numerics}"
        " > {log:q} 2>&1"
