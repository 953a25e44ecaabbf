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
    threads: 1
    resources:
        gpu=lambda wildcards: min(1, study_of(wildcards).resources["gpu"]),
    log:
        "logs/conditioning/{study}/{variant}.log",
    benchmark:
        "benchmarks/conditioning/{study}/{variant}.tsv"
    conda:
        "../envs/leaner.yaml"
    shell:
        "leaner conditioning --metrics {input.metrics:q} --init {input.init:q} --final {input.model:q}"
        " --data {input.data:q} --out {output:q} --threads {threads} > {log:q} 2>&1"
