# Theorem 3.2 by Monte Carlo: kappa of Gaussian head blocks vs heads, against the closed form.


rule theory:
    output:
        "results/theory/gaussian_conditioning.csv",
    log:
        "logs/theory/theory.log",
    benchmark:
        "logs/benchmarks/theory/theory.tsv"
    conda:
        "../envs/leaner.yaml"
    threads: 1
    params:
        settings=json.dumps(PLAN.theory, sort_keys=True),
        numerics=PLAN.numerics,
        code=stage_digest("theory"),
    shell:
        "leaner theory --settings {params.settings:q} --out {output:q} --threads {threads}"
        " --numerics {params.numerics} > {log:q} 2>&1"


rule theory_report:
    input:
        rules.theory.output,
    output:
        figure_files("theory", ["gaussian_conditioning"], category="Theorem 3.2"),
        table_files("theory", THEORY_TABLES, category="Theorem 3.2"),
    log:
        "logs/theory/theory_report.log",
    localrule: True
    conda:
        "../envs/leaner.yaml"
    params:
        code=stage_digest("figures") + stage_digest("tables"),
    shell:
        "leaner theory-report --theory {input:q} --figdir results/figures --tabledir results/tables > {log:q} 2>&1"
