"""From per-variant results to what a reader sees: all 15 modules, each importing only those above it:

    stats           intervals, differences, rank correlations, when a difference is resolved; the
                    power of a declared claim's test (noncentral t; `leaner pilot` reports it)
    table_render    the one table writer: CSV, Markdown, LaTeX and HTML from a data frame, with
                    readable column headers for the tables people read (the CSV keeps raw names)
    summary         summary.csv (one row per variant, whether it ended on a plateau); a
                    configuration's axes; the headline metric
    tables          tables over configurations: by config, lean vs baseline, acceptance, claims
    kappa_within    kappa against the metric with the architecture removed (within a configuration)
    findings        the findings paragraphs, generated from the overview's numbers
    trade           where P1's rule holds: each declared test of the trade as held, failed, not testable
    papers          the papers' reported numbers beside ours
    plots           what every figure shares (style, saving, log axes, off-scale marks, seed
                    aggregates, error bars, panel grids, metric names), and the caption a figure's
                    or a table's function carries
    job_costs       what each stage cost: benchmark files, the warm process's measures, every attempt
    figures         P1's figures of a study: kappa, metric vs heads and MLP, training curves (loss and
                    metric against the step, one line per configuration), kappa in training, theory
    figures_p2      P2's figures: MSE and kappa against head rank, the angle of one-head models
    pareto          a claim's models on the parameter-metric plane, with its baseline, control and margin
    overview        across studies: configurations, effects, correlations, the headline, findings,
                    and the overview figure (every configuration of every study on common axes)
    report          the report job: which figures and tables each study gets (plain code over its
                    grid and claims), a study's tables (Theorem 3.2 against the real heads among
                    them), the theory check's, captions and the run's index
"""
