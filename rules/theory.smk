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
