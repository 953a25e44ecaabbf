# A target under results/ naming a study the config does not define (a typo, or another config's
# study) stops the run with a one-line message naming the studies there are, instead of
# Snakemake's "No rule to produce". These rules match only names that no study has.
rule unknown_study:
    input:
        lambda w: refuse_unknown_study(w.study, f"results/{w.study}/{w.path}"),
    output:
        "results/{study}/{path}",
    wildcard_constraints:
        study=rf"(?!(?:{KNOWN_FOLDERS})/)[^/]+",
        path=".+",


# A figure or table as a target: the report job makes results/figures/ and results/tables/ whole,
# so one line says to target the folder (or names the studies there are, for a study's typo).
rule report_file:
    input:
        lambda w: refuse_report_file(w.folder, w.file),
    output:
        "results/{folder}/{file}",
    wildcard_constraints:
        folder="figures|tables",
        file="[^/]+",
