# Prepare each dataset once: fixed split, standardisation or hub resolution -> manifest.json.


rule prepare_data:
    output:
        "results/data/{dataset}/manifest.json",
    log:
        "logs/prepare_data/{dataset}.log",
    benchmark:
        "benchmarks/prepare_data/{dataset}.tsv"
    conda:
        "../envs/leaner.yaml"
    params:
        spec=dataset_spec,
    shell:
        "leaner prepare-data --dataset {wildcards.dataset:q} --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"
