# Per study: every variant's metrics + condition numbers -> summary.csv -> figures and tables.


rule summary:
    input:
        metrics=lambda wildcards: study_files(wildcards, "metrics.json"),
        conditioning=lambda wildcards: study_files(wildcards, "conditioning.csv"),
        glue=glue_files,
    output:
        summary="results/{study}/summary.csv",
        kappa="results/{study}/kappa_through_training.csv",
    params:
        protocols=lambda wildcards: json.dumps(study_of(wildcards).protocol_map(), sort_keys=True),
    localrule: True
    log:
        "logs/summary/{study}.log",
    conda:
        "../envs/leaner.yaml"
    shell:
        "leaner summary --study {wildcards.study:q} --protocols {params.protocols:q}"
        " --metrics {input.metrics:q} --conditioning {input.conditioning:q} --glue {input.glue:q}"
        " --out {output.summary:q} --kappa-out {output.kappa:q} > {log:q} 2>&1"


# Figures and tables depend on the study's task: one rule of each per task.
for task in STUDY_FIGURES:

    rule:
        name:
            f"figures_{task}"
        input:
            summary="results/{study}/summary.csv",
            kappa="results/{study}/kappa_through_training.csv",
        output:
            expand("results/figures/{{study}}-{fig}.{ext}", fig=STUDY_FIGURES[task], ext=FIG_EXT),
        wildcard_constraints:
            study=studies_of(task),
        localrule: True
        log:
            "logs/figures/{study}.log",
        conda:
            "../envs/leaner.yaml"
        shell:
            "leaner figures --summary {input.summary:q} --kappa {input.kappa:q} --study {wildcards.study:q}"
            " --outdir results/figures > {log:q} 2>&1"

    rule:
        name:
            f"tables_{task}"
        input:
            "results/{study}/summary.csv",
        output:
            expand("results/tables/{{study}}-{table}.{ext}", table=STUDY_TABLES[task], ext=TABLE_EXT),
        params:
            baseline=lambda wildcards: json.dumps(study_of(wildcards).baseline, sort_keys=True),
            checks=lambda wildcards: json.dumps(study_of(wildcards).acceptance),
        wildcard_constraints:
            study=studies_of(task),
        localrule: True
        log:
            "logs/tables/{study}.log",
        conda:
            "../envs/leaner.yaml"
        shell:
            "leaner tables --summary {input:q} --study {wildcards.study:q} --baseline {params.baseline:q}"
            " --checks {params.checks:q} --outdir results/tables > {log:q} 2>&1"


rule combined_table:
    input:
        expand("results/{study}/summary.csv", study=STUDIES),
    output:
        expand("results/tables/all_studies-kappa_rank_error.{ext}", ext=TABLE_EXT),
    localrule: True
    log:
        "logs/tables/all_studies.log",
    conda:
        "../envs/leaner.yaml"
    shell:
        "leaner combined-table --summaries {input:q} --outdir results/tables > {log:q} 2>&1"
