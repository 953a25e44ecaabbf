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


rule unknown_study_report:
    input:
        lambda w: refuse_unknown_study(w.study, f"results/{w.folder}/{w.study}-{w.name}"),
    output:
        "results/{folder}/{study}-{name}",
    wildcard_constraints:
        folder="figures|tables",
        study=rf"(?!(?:{KNOWN_PREFIXES})-)[A-Za-z0-9_]+",
        name="[^/]+",
