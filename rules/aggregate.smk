# Per study: every variant's metrics + condition numbers -> summary.csv -> figures and tables.


rule summary:
    input:
        metrics=lambda wildcards: study_files(wildcards, "metrics.json"),
        conditioning=lambda wildcards: study_files(wildcards, "conditioning.csv"),
        histories=lambda wildcards: study_files(wildcards, "history.csv"),
        glue=glue_files,
    output:
        summary="results/{study}/summary.csv",
        kappa="results/{study}/kappa_through_training.csv",
    log:
        "logs/summary/{study}.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        protocols=lambda wildcards: json.dumps(study_of(wildcards).protocol_map(), sort_keys=True),
        code=stage_digest("summary"),
    shell:
        "leaner summary --study {wildcards.study:q} --protocols {params.protocols:q}"
        " --metrics {input.metrics:q} --conditioning {input.conditioning:q} --histories {input.histories:q}"
        " --glue {input.glue:q} --out {output.summary:q} --kappa-out {output.kappa:q} > {log:q} 2>&1"


# Figures and tables depend on the study's grid: one rule of each per study, making the
# names outputs.study_outputs gives it (those with something to show).
for study_name in STUDIES:
    study_figures, study_tables = PLAN.studies[study_name].outputs()

    rule:
        name:
            f"figures_{study_name}"
        input:
            summary="results/{study}/summary.csv",
            kappa="results/{study}/kappa_through_training.csv",
            histories=lambda wildcards: study_files(wildcards, "history.csv"),
        output:
            figure_files("{study}", study_figures, category="{study}"),
        log:
            "logs/figures/{study}.log",
        wildcard_constraints:
            study=study_name,
        localrule: True
        conda:
            "../envs/leaner.yaml"
        params:
            claims=lambda wildcards: json.dumps(study_of(wildcards).claims, sort_keys=True),
            names=study_figures,
            code=stage_digest("figures"),
        shell:
            "leaner figures --summary {input.summary:q} --kappa {input.kappa:q} --histories {input.histories:q}"
            " --study {wildcards.study:q} --claims {params.claims:q} --names {params.names:q}"
            " --outdir results/figures > {log:q} 2>&1"

    rule:
        name:
            f"tables_{study_name}"
        input:
            "results/{study}/summary.csv",
        output:
            table_files("{study}", study_tables, category="{study}"),
        log:
            "logs/tables/{study}.log",
        wildcard_constraints:
            study=study_name,
        localrule: True
        conda:
            "../envs/leaner.yaml"
        params:
            baseline=lambda wildcards: json.dumps(study_of(wildcards).baseline, sort_keys=True),
            checks=lambda wildcards: json.dumps(study_of(wildcards).acceptance),
            claims=lambda wildcards: json.dumps(study_of(wildcards).claims, sort_keys=True),
            names=study_tables,
            code=stage_digest("tables"),
        shell:
            "leaner tables --summary {input:q} --study {wildcards.study:q} --baseline {params.baseline:q}"
            " --checks {params.checks:q} --claims {params.claims:q} --names {params.names:q}"
            " --outdir results/tables > {log:q} 2>&1"


# Both papers in one view: every configuration of every study on common axes, the heads
# comparisons, kappa against error, and a summary paragraph generated from those numbers.
rule overview:
    input:
        summaries=expand("results/{study}/summary.csv", study=STUDIES),
        claims=expand("results/tables/{study}-claims.csv", study=CLAIMING_STUDIES),
    output:
        figure=figure_files("all_studies", ["overview"], category="Both papers"),
        tables=table_files("all_studies", OVERVIEW_TABLES, category="Both papers"),
        findings="results/overview/findings.md",
        findings_html=report(
            "results/overview/findings.html",
            caption="../report/findings.rst",
            category="Both papers",
            subcategory="findings",
        ),
    log:
        "logs/overview.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        code=stage_digest("overview"),
    shell:
        "leaner overview --summaries {input.summaries:q} --claims {input.claims:q} --figdir results/figures"
        " --tabledir results/tables --findings results/overview/findings > {log:q} 2>&1"


# What each stage cost: every job's benchmark file in one table.
rule job_costs:
    input:
        benchmarks=benchmark_files(),
        metrics=trained_metrics(),
    output:
        table_files("all_studies", ["job_costs"], category="Run"),
    log:
        "logs/job_costs.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        code=stage_digest("job_costs"),
    shell:
        "leaner job-costs --benchmarks {input.benchmarks:q} --metrics {input.metrics:q} --outdir results/tables"
        " > {log:q} 2>&1"


# The configuration this run resolved, as YAML, for the report.
rule run_config:
    output:
        report("results/overview/config.yaml", caption="../report/config.rst", category="Run"),
    log:
        "logs/run_config.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        config=lambda wildcards: json.dumps(config),
    shell:
        "leaner run-config --config {params.config:q} --out {output:q} > {log:q} 2>&1"
