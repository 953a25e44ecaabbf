# Prepare each dataset once: fixed split, standardisation or hub resolution -> manifest.json.
# A dataset's `prepare` settings give the job's threads, runtime and memory, and whether it runs on
# the submitting host under a cluster executor (`local`, default for data from the hub: compute
# nodes often have no internet). Snakemake's localrule holds for a whole rule, so the datasets are
# split by name between two rules of the same command.


rule prepare_data:
    output:
        "results/data/{dataset}/manifest.json",
    log:
        "logs/prepare_data/{dataset}.log",
    benchmark:
        "logs/benchmarks/prepare_data/{dataset}.tsv"
    wildcard_constraints:
        dataset=prepared_datasets(local=False),
    conda:
        "../envs/leaner.yaml"
    threads: prepare_setting("threads")
    resources:
        runtime=prepare_setting("runtime"),
        mem_mb=prepare_setting("mem_mb"),
    params:
        spec=dataset_spec,
        code=data_code,
    shell:
        "leaner prepare-data --dataset {wildcards.dataset:q} --spec {params.spec:q} --out {output:q} > {log:q} 2>&1"


use rule prepare_data as prepare_data_local with:
    wildcard_constraints:
        dataset=prepared_datasets(local=True),
    localrule: True
