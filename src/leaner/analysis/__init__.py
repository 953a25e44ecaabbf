"""From per-variant results to what a reader sees, each module importing only those above it:

    stats        intervals, differences, rank correlations, when a difference is resolved
    power        a declared claim's power from a pilot (noncentral t), and the pilot's report
    summary      summary.csv (one row per variant); a configuration's axes; the headline metric
    tables       tables over configurations, and the one table writer
    papers       the papers' reported numbers beside ours
    study_tables what the tables rules write
    plots        what every figure shares (style, saving, log axes, off-scale marks)
    figures      each study's figures
    overview     across studies: configurations, effects, correlations, the headline, findings
"""
