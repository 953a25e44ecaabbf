"""What the tables rules write: a study's tables (the names its plan gives, outputs.study_outputs)
and the theory tables. Each table a study may show is defined here, its record with its function
(`@table`, shown.py): (StudyData) -> (data frame, caption line)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..compute.numerics import UNRECORDED, describe_mix
from ..outputs import ACCEPTANCE_CHECKS
from ..shown import TABLE_CODE, Architectures, BelowBaseline, Ladder, outputs_for, table
from ..tasks import task_info
from . import papers, pareto, tables
from .kappa_within import kappa_within_table
from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, gmean
from .study_data import StudyData
from .summary import ARCH, learned_rows, read_summary, replicate_note
from .table_render import write_table


def write_study_tables(summary_csv: str, study: str, baseline: dict, table_dir: str, names: list[str],
                       checks=None, claims: list[dict] | None = None) -> list[Path]:
    """results/tables/{study}-{name}.{csv,md,tex,html} for each of `names` (the plan's:
    plan.Study.outputs). `checks`: P2's acceptance checks to run, as the plan resolved them (None:
    every one, as a study that names none)."""
    checks = ACCEPTANCE_CHECKS if checks is None else tuple(checks)
    data = StudyData(study, read_summary(summary_csv), baseline or {}, checks, claims or [])
    known = outputs_for("tables", task_info(data.task), bool(claims))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no table {', '.join(unknown)} for task {data.task} (allowed: {', '.join(known)})")
    paths, note = [], f"{replicate_note(data.summary)} {numerics_note(data.summary)}"
    for name in names:
        frame, caption = TABLE_CODE[name](data)
        paths += write_table(frame, Path(table_dir) / f"{study}-{name}", f"{caption}. {note}")
    return paths


def numerics_note(summary: pd.DataFrame) -> str:
    """The caption's last sentence: what the study's results were computed under (training, and
    the condition numbers where they differ), saying so where rows made under different numerics
    are put side by side."""
    trained = summary.get("numerics", pd.Series([UNRECORDED] * len(summary)))
    note = f"Numerics: {describe_mix(trained)}"
    kappa = summary.get("kappa_numerics")
    if kappa is not None and set(kappa.dropna()) != set(trained.dropna()):
        note += f"; condition numbers: {describe_mix(kappa)}"
    return note + "."


def write_theory_table(theory_csv: str, table_dir: str) -> list[Path]:
    frame = pd.read_csv(theory_csv)
    frame["mc_over_formula"] = frame["kappa_mean"] / frame["kappa_formula"]
    return write_table(frame, Path(table_dir) / "theory-gaussian_conditioning",
                       "Theorem 3.2: Monte Carlo kappa of N x (h*d) Gaussian blocks against the closed form") + \
        write_table(papers.theorem_comparison(frame), Path(table_dir) / "theory-paper_comparison",
                    "Theorem 3.2: our Monte Carlo against papers.md 1.1 (N = 197, d = 64); pass within 10%")


# The catalogue's tables, each defined with its record (shown.table).
P1 = {"family": "P1"}


@table("by_config", caption=(
        "**{{ snakemake.wildcards.study }}**: one row per configuration, with its parameter count (from "
        "the\n"
        "built model), the metric's mean over seeds with its Student-t 95% interval, minimum, maximum "
        "and\n"
        "n, the number of diverged runs, and kappa at initialisation and after training (geometric "
        "means), and\n"
        "how far the best training loss fell over a run's last quarter of steps (near 0: the curve is\n"
        "flat, a plateau, not a run cut short). P2's also give the fresh-point MSE beside the best\n"
        "training MSE.\n"
    ))
def by_config(d: StudyData) -> tuple[pd.DataFrame, str]:
    p2 = "; eval_mse: the MSE on fresh points (min, mean)" if task_info(d.task).grid != "arch" else ""
    return tables.by_config(d.summary), (
        f"{d.study}: {d.metric[0]} per configuration over seeds (mean, 95% interval, min, max, n); "
        f"last_quarter_fall_max: the largest fall of a run's best training loss over its last quarter of steps, as a "
        f"share of its best before (near 0: flat, a plateau){p2}")


@table("lean_vs_baseline", requires=(BelowBaseline("depth"),), tasks=P1, caption=(
        "**{{ snakemake.wildcards.study }}**: every shallower configuration against the deepest baseline\n"
        "(the config's ``baseline``, else the deepest model with the fewest heads): parameter reduction,\n"
        "the metric's difference with a Welch 95% interval, and a verdict (better / worse) only where "
        "the\n"
        "interval clears zero by a quarter of its half-width; inconclusive where it spans zero (which is "
        "not\n"
        '"no difference": that needs a declared margin, see the claims table), unresolved where it comes\n'
        "closer; n/a with one seed.\n"
    ))
def lean_vs_baseline(d: StudyData) -> tuple[pd.DataFrame, str]:
    frame = tables.with_claim_verdicts(tables.lean_vs_baseline(d.summary, d.baseline, *d.metric), d.summary,
                                       d.claims)
    return frame, (
        f"{d.study}: shallower variants against the deepest baseline (difference with Welch 95% interval; "
        f"parameter reduction). Its question is whether there is a difference at all (two-sided 95%, called only "
        f"clear of zero); a declared claim asks whether a lean model is within its margin of the baseline "
        f"(one-sided bounds): for a pair a claim declares, `claim_verdict` is that claim's verdict")


@table("glue_tasks", tasks={"metric": "glue_avg"}, caption=(
        "**{{ snakemake.wildcards.study }}**: P1's GLUE table: each pretrained configuration fine-tuned "
        "on every\n"
        "GLUE task (MCC for CoLA, F1 for MRPC and QQP, Spearman for STS-B, accuracy otherwise), and the\n"
        "unweighted GLUE average; means over seeds.\n"
    ))
def glue_tasks(d: StudyData) -> tuple[pd.DataFrame, str]:
    return tables.glue_tasks_table(d.summary), (f"{d.study}: GLUE score per task after fine-tuning, and the average "
                                                f"(mean over seeds, with the average's 95% interval)")


@table("acceptance", tasks={"family": "P2"}, caption=(
        "**{{ snakemake.wildcards.study }}**: P2's acceptance checks (papers.md 2.7) wherever the "
        "study's grid\n"
        "holds the points a check needs: the rank-d/2 over rank-d MSE ratio at one layer (>= 10), rank-1 "
        "MSE\n"
        "at N = 4 (about 0) against N >= 64 (above 0.5), and the fig_perfect angle (above 165 degrees). "
        "Per\n"
        "configuration the minimum over data seeds, as P2 reports.\n"
    ))
def acceptance(d: StudyData) -> tuple[pd.DataFrame, str]:
    return tables.acceptance_checks(d.summary, d.checks), f"{d.study}: P2's acceptance checks (min over seeds)"


@table("paper_comparison", caption=(
        "{% if snakemake.wildcards.study is defined %}**{{ snakemake.wildcards.study }}**: {% endif "
        "%}the paper's\n"
        "reported numbers (shared/papers.md; figure read-offs tagged [V-fig], about 20% on log axes) "
        "next\n"
        "to ours, each with the setting it came from (our dataset, parameter range, training steps and\n"
        "seeds: the default CPU study or paper scale), the difference, and the acceptance checks as pass "
        "or\n"
        "fail.\n"
    ))
def paper_comparison(d: StudyData) -> tuple[pd.DataFrame, str]:
    return papers.paper_comparison(d.summary, d.baseline, d.checks), (
        f"{d.study}: the paper's reported numbers beside ours, with the setting of each")


@table("claims", claims=True, caption=(
        "**{{ snakemake.wildcards.study }}**: the claims the config declared before the run "
        "(``claims:``),\n"
        "each a baseline configuration against lean ones on one metric, at a stated margin, over the\n"
        "declared seeds only. The difference is positive where the lean model is better; its one-sided "
        "95%\n"
        "Welch bounds decide: superior (lower bound above 0), equivalent (both within the margin),\n"
        "non-inferior (lower bound above minus the margin), inferior (upper bound below minus the "
        "margin),\n"
        'else inconclusive. An interval that straddles zero is inconclusive, never "no difference".\n'
    ))
def claims(d: StudyData) -> tuple[pd.DataFrame, str]:
    return tables.claims_table(d.summary, d.claims), (
        f"{d.study}: the claims declared in the config, baseline first; difference positive where the lean model "
        f"is better, with its one-sided 95% Welch bounds; superior: lower bound above 0; equivalent: both bounds "
        f"within the margin; non-inferior: lower bound above -margin; inferior: upper bound below -margin; else "
        f"inconclusive. The control (the model without what the lean one adds, e.g. the lean depth at the "
        f"baseline's heads) is judged against the baseline the same way. control_cost: the control's difference "
        f"from the baseline; margin_share: the margin as a share of that cost; kept_share: the share of it the lean "
        f"model keeps, (lean - control) / (baseline - control), 1 where it matches the baseline, with kept_lo, "
        f"kept_hi its 5th and 95th percentiles over the runs resampled ({BOOTSTRAP_RESAMPLES:,} resamples from seed "
        f"{BOOTSTRAP_SEED}). supported: whether the verdict supports the declared hypothesis. declaration: whether the "
        f"claim is judged as declared before its runs trained (else it is left out of the headline). split_lo, "
        f"split_hi: the difference bounded over retraining and the test split together (a paired bootstrap over "
        f"the seeds and the test examples both arms share, {BOOTSTRAP_RESAMPLES:,} resamples from seed "
        f"{BOOTSTRAP_SEED}, 5th and 95th percentiles); split_verdict: what those bounds would read, to show whether "
        f"the split's size could change the verdict, which stays the declared Welch test's (with few seeds a "
        f"bootstrap over them has no small-sample correction and can come out narrower than the Welch bounds)")


@table("exchange", requires=(Architectures(), Ladder()), claims=True, caption=(
        "**{{ snakemake.wildcards.study }}**: how many heads buy back a layer, per claim that puts\n"
        "one-layer models with more and more heads against a deeper baseline with a control (the\n"
        "shallower model at the baseline's heads): each model's heads, head dim, width and parameters\n"
        "(params_ratio: against the baseline's), its difference from the baseline with the claim's\n"
        "one-sided 95% bounds and declared verdict, and the share of the control's cost it wins back\n"
        "(kept_share: 0 at the control, 1 where it matches the baseline) with its 90% interval over the\n"
        "runs resampled. The figure layer_won_back draws it.\n"
    ))
def exchange(d: StudyData) -> tuple[pd.DataFrame, str]:
    return pareto.exchange_table(d.summary, d.claims), (
        f"{d.study}: how many heads buy back a layer: per ladder claim its control (share 0) and each lean model by "
        f"heads; params_ratio: parameters against the baseline's; lean_advantage: the difference from the baseline "
        f"(positive where the model is better) with its one-sided 95% Welch bounds and the verdict the claim "
        f"declared a test for; control_cost: what the control costs against the baseline; kept_share: the share of "
        f"that cost the model wins back, (model - control) / (baseline - control), 1 where it matches the baseline, "
        f"with kept_lo, kept_hi its 5th and 95th percentiles over the runs resampled ({BOOTSTRAP_RESAMPLES:,} "
        f"resamples from seed {BOOTSTRAP_SEED})")


@table("theorem_vs_real", requires=(Architectures(),), tasks=P1, caption=(
        "**{{ snakemake.wildcards.study }}**: P1's Theorem 3.2 held against the real heads, per "
        "configuration\n"
        "at layer 1: the closed form's kappa and Gaussian heads' for the same N tokens, h heads and head\n"
        "dim d, the measured kappa at initialisation and after training, and what the theorem assumes,\n"
        "measured beside the Gaussian heads': isotropy (a head's stable rank over min(N, d); 1/min(N, d)\n"
        "for a rank-one head) and alignment (mean \\|cos\\| between heads' top token directions; 1 where\n"
        "every head's output lies along one direction over the tokens).\n"
    ))
def theorem_vs_real(d: StudyData) -> tuple[pd.DataFrame, str]:
    return theorem_rows(d.summary), (
        f"{d.study}: Theorem 3.2 against the real heads (layer 1; runs that learned): theorem_kappa, the closed "
        f"form (sqrt(D) + sqrt(N)) / (sqrt(D) - sqrt(N)) at D = h*d; gauss_*: the median over 256 Gaussian "
        f"N x (h*d) blocks; kappa_init, kappa_final: geometric means over seeds of each run's median; isotropy: "
        f"the heads' mean stable rank over min(N, d); alignment: the mean over pairs of heads of |u_i . u_j|, u_i a "
        f"head's top left singular vector (medians over seeds). A near-uniform softmax gives every token the mean "
        f"of the values: each head nearly rank one (isotropy near 1/min(N, d)) along the same token direction "
        f"(alignment near 1), far from the independent isotropic heads the theorem assumes")


@table("kappa_within", requires=(Architectures(),), tasks=P1, caption=(
        "**{{ snakemake.wildcards.study }}**: does conditioning carry the gain once the architecture is\n"
        "known? Per kappa (head outputs and the block Jacobian, at initialisation and after training): "
        "the\n"
        "correlation of log10 kappa with the metric within a configuration, over its seeds, pooled over\n"
        "configurations (P1's direction declared: lower kappa, better), its 95% interval, the slope per\n"
        "decade of kappa, the one-sided p and the \\|r\\| the test detects 80% of the time; beside it the\n"
        "across-configuration Spearman rho, alone and with parameters and heads partialled out.\n"
    ))
def kappa_within(d: StudyData) -> tuple[pd.DataFrame, str]:
    return kappa_within_table(d.summary, *d.metric), (
        f"{d.study}: log10 kappa against {d.metric[0]} within a configuration (each run less its configuration's "
        f"means, pooled; one-sided Student t in P1's declared direction, lower kappa better; Fisher-z 95% interval; "
        f"slope: {d.metric[0]} per decade of kappa), and across configurations (Spearman rho of the means, and "
        f"partial on log parameters and log heads). Runs that did not learn and singular kappas are left out")


# P1's Theorem 3.2 held against the real heads: per configuration, the closed form's kappa and
# Gaussian heads' for the same shape beside the measured kappa and the head structure the theorem
# assumes (measure/heads.py writes both into conditioning.csv; summary.py keeps layer 1's).
THEOREM_COLUMNS = ["configuration", "heads", "head_dim", "cols", "tokens", "n", "theorem_kappa", "gauss_kappa",
                   "kappa_init", "kappa_final", "init_over_gauss", "gauss_isotropy", "isotropy_init", "isotropy_final",
                   "gauss_alignment", "alignment_init", "alignment_final"]


def theorem_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Theorem 3.2 against the real heads, per configuration (layer 1, its runs that learned): the
    closed form's kappa and Gaussian heads' for the same (N, h, d), the measured kappa at init
    and after training (geometric means over seeds of the per-run medians), and what the theorem
    assumes of the heads, measured (medians over seeds) beside the Gaussian heads': isotropy (mean
    stable rank over min(N, d)) and alignment (mean |cos| between heads' top token directions)."""
    if "theorem_kappa_l1" not in summary:
        return pd.DataFrame(columns=THEOREM_COLUMNS)
    rows = []
    for _, g in learned_rows(summary).groupby(ARCH, sort=True):
        first = g.iloc[0]
        kappa_init, kappa_final = gmean(g["kappa_init_l1"]), gmean(g["kappa_final_l1"])
        rows.append({"configuration": tables.arch_label(first), "heads": int(first["heads"]),
                     "head_dim": int(first["head_dim"]), "cols": int(first["heads"] * first["head_dim"]),
                     "tokens": int(first["probe_tokens"]), "n": len(g), "theorem_kappa": first["theorem_kappa_l1"],
                     "gauss_kappa": first["gauss_kappa_l1"], "kappa_init": kappa_init, "kappa_final": kappa_final,
                     "init_over_gauss": kappa_init / first["gauss_kappa_l1"],
                     "gauss_isotropy": first["gauss_isotropy_l1"],
                     "isotropy_init": g["heads_isotropy_init_l1"].median(),
                     "isotropy_final": g["heads_isotropy_final_l1"].median(),
                     "gauss_alignment": first["gauss_alignment_l1"],
                     "alignment_init": g["heads_alignment_init_l1"].median(),
                     "alignment_final": g["heads_alignment_final_l1"].median()})
    return pd.DataFrame(rows, columns=THEOREM_COLUMNS)
