# Per study: every variant's metrics + condition numbers -> summary.csv -> figures and tables.


rule summary:
    input:
        metrics=lambda wildcards: study_files(wildcards, "metrics.json"),
        conditioning=lambda wildcards: study_files(wildcards, "conditioning.csv"),
        histories=lambda wildcards: study_files(wildcards, "history.csv"),
        glue=glue_files,
        declared="results/{study}/declared.json",
    output:
        summary="results/{study}/summary.csv",
        kappa="results/{study}/kappa_through_training.csv",
    log:
        "logs/summary/{study}.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        code=stage_digest("summary"),
    shell:
        "leaner summary --study {wildcards.study:q} --declared {input.declared:q}"
        " --metrics {input.metrics:q} --conditioning {input.conditioning:q} --histories {input.histories:q}"
        " --glue {input.glue:q} --out {output.summary:q} --kappa-out {output.kappa:q} > {log:q} 2>&1"


# The configuration this run resolved, as YAML: the report reads each study's declarations from it.
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


# One report of the run: every study's figures and tables (which ones, each study's grid and claims
# decide: analysis/report.py), the theory check's, both papers in one view, what each job cost,
# each with its caption, and an index. Snakemake's --report takes the figures and tables from here.
rule report:
    input:
        config="results/overview/config.yaml",
        summaries=expand("results/{study}/summary.csv", study=STUDIES),
        kappa=expand("results/{study}/kappa_through_training.csv", study=STUDIES),
        histories=[f"{folder}/history.csv" for study in STUDIES for folder in variant_dirs(study)],
        theory="results/theory/gaussian_conditioning.csv",
        benchmarks=benchmark_files(),
        metrics=trained_metrics(),
    output:
        figures=report(
            directory("results/figures"),
            patterns=["{study}-{name}.png"],
            caption="../report/figure.rst",
            category=report_category,
            subcategory="figures",
        ),
        tables=report(
            directory("results/tables"),
            patterns=["{study}-{name}.html"],
            caption="../report/table.rst",
            category=report_category,
            subcategory="tables",
        ),
        captions=directory("results/overview/captions"),
        index="results/overview/index.md",
        findings="results/overview/findings.md",
        findings_html=report(
            "results/overview/findings.html",
            caption="../report/findings.rst",
            category="Both papers",
            subcategory="findings",
        ),
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    threads: 8  # (at most the run's cores) the studies drawn side by side
    params:
        code=stage_digest("report", kind_modules()),  # the plan it rebuilds reads every kind
    shell:
        "leaner report --config {input.config:q} --results results --theory {input.theory:q}"
        " --benchmarks {input.benchmarks:q} --metrics {input.metrics:q} --workers {threads} > {log:q} 2>&1"
