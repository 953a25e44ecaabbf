"""The report job (`leaner report`, the workflow's `report` rule): every study's figures and
tables, the theory check's, both papers in one view (overview.py) and what each job cost
(job_costs.py), with each output's caption and an index of them all.

Which figures and tables a study gets is decided here, by plain code over what its config declared
(its grid's points, baseline, claims and P2's acceptance checks: `StudyData`): `study_outputs`.
Each output is one function that draws or makes it, carrying its caption (`plots.captioned`,
beside the function), and one line there. The tables of a study are defined below: (StudyData) ->
(data frame, caption line of its files)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from ..compute.numerics import UNRECORDED, describe_mix
from ..grid import ACCEPTANCE_CHECKS
from ..io import write_text
from ..tasks import task_info
from . import figures, figures_p2, papers, pareto, tables
from .job_costs import write_job_costs
from .kappa_within import kappa_within_table
from .overview import write_overview
from .plots import captioned
from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, gmean
from .summary import ARCH, learned_rows, read_summary, replicate_note
from .table_render import write_table


@dataclass
class StudyData:
    """A study as its figures and tables see it: its summary and what its config declared, as the
    plan resolved it."""

    study: str
    summary: pd.DataFrame  # summary.csv
    baseline: dict = field(default_factory=dict)  # the study's baseline settings (lean_vs_baseline)
    checks: tuple[str, ...] = ACCEPTANCE_CHECKS  # P2's acceptance checks to run
    claims: list[dict] = field(default_factory=list)  # the study's declared claims
    kappa: pd.DataFrame = field(default_factory=pd.DataFrame)  # kappa_through_training.csv
    histories: list[str] = field(default_factory=list)  # every variant's history.csv
    points: list[dict] = field(default_factory=list)  # the grid's points (grid.grid_points of its variants)

    @property
    def task(self) -> str:
        return self.summary["task"].iloc[0]

    @property
    def history(self) -> pd.DataFrame:
        """Every variant's history.csv, read into one frame (the training curves')."""
        return figures.read_histories(self.histories)

    @property
    def metric(self) -> tuple[str, str]:
        """The study's headline metric and its better direction (the task's)."""
        return task_info(self.task).metric

    def varies(self, axis: str, *within: str) -> bool:
        """Whether `axis` takes two values or more among points equal on every axis of `within` (a
        curve along `axis`, or two lines told apart by it)."""
        seen: dict[tuple, set] = {}
        for p in self.points:
            seen.setdefault(tuple(p.get(k) for k in within), set()).add(p.get(axis))
        return any(len(values) > 1 for values in seen.values())

    def has(self, **values) -> bool:
        """Whether some point has every one of these values."""
        return any(all(p.get(k) == v for k, v in values.items()) for p in self.points)

    @property
    def architectures(self) -> bool:
        """The points are P1's architectures (a width each): parameters trade against depth and
        heads, which P2's nearest-point grid (equal parameters across ranks) does not."""
        return any("width" in p for p in self.points)

    @property
    def below_baseline(self) -> bool:
        """Some point is shallower than the baseline: the deepest point matching the study's
        baseline settings (all points when none is set or none matches)."""
        base = [p for p in self.points if all(p.get(k) == v for k, v in self.baseline.items())] or self.points
        return bool(base) and any(p["depth"] < max(b["depth"] for b in base) for p in self.points)


Draw = Callable[[StudyData, Path], list[Path]]
Make = Callable[[StudyData], tuple[pd.DataFrame, str]]


def study_outputs(d: StudyData) -> tuple[list[tuple[str, Callable, Draw]], list[tuple[str, Make]]]:
    """(figures, tables) of a study, in the report's order: (name, the function carrying its caption,
    how it is drawn) for each figure and (name, its function) for each table whose study has
    something for it to show. To add one: its function, and one line here."""
    info, metric = task_info(d.task), d.metric[0]
    p1, p2, declared = info.family == "P1", info.family == "P2", bool(d.claims)
    heads = p1 and d.varies("heads", "protocol", "mlp_ratio", "depth")  # a line of heads per depth
    mlp = p1 and d.varies("mlp_hidden", "protocol", "depth", "heads")  # the MLP width within an architecture
    line = ("depth", *figures_p2.P2_AXES)
    rank = p2 and d.varies("head_dim", *line)  # the head rank along one line

    def lines_by(axis: str) -> bool:  # and two lines told apart by `axis`
        return rank and d.varies(axis, *(a for a in line if a != axis))

    ladder = declared and d.architectures and any(map(pareto.is_ladder, d.claims))
    words = {"eval_acc": "accuracy", "eval_loss": "loss", "glue_avg": "glue"}.get(metric)
    figs = [
        ("kappa_vs_heads", heads, figures.kappa_vs_heads, lambda d, p: figures.kappa_vs_heads(d.summary, p, d.study)),
        (f"{words}_vs_heads", heads and words, figures.metric_vs_heads,
         lambda d, p: figures.metric_vs_heads(d.summary, p, d.study, metric=metric)),
        (f"{words}_vs_mlp", mlp and words, figures.metric_vs_mlp,
         lambda d, p: figures.metric_vs_mlp(d.summary, p, d.study, metric=metric)),
        ("mse_vs_rank", rank, figures_p2.mse_vs_rank, lambda d, p: figures_p2.mse_vs_rank(d.summary, p, d.study)),
        ("mse_vs_rank_by_tokens", lines_by("tokens"), figures_p2.mse_vs_rank,
         lambda d, p: figures_p2.mse_vs_rank(d.summary, p, d.study, hue="tokens", log=False)),
        ("mse_vs_rank_by_dim", lines_by("dim"), figures_p2.mse_vs_rank,
         lambda d, p: figures_p2.mse_vs_rank(d.summary, p, d.study, hue="dim")),
        ("mse_vs_rank_by_posn", lines_by("posn"), figures_p2.mse_vs_rank,
         lambda d, p: figures_p2.mse_vs_rank(d.summary, p, d.study, hue="posn")),
        ("perfect_angle", p2 and d.has(depth=1, heads=1), figures_p2.perfect_angle,
         lambda d, p: figures_p2.perfect_angle(d.summary, p, d.study)),
        ("kappa_vs_rank", rank, figures_p2.kappa_vs_rank, lambda d, p: figures_p2.kappa_vs_rank(d.summary, p, d.study)),
        ("kappa_through_training", True, figures.kappa_through_training,
         lambda d, p: figures.kappa_through_training(d.kappa, p, d.study)),
        ("training_curves", True, figures.training_curves,
         lambda d, p: figures.training_curves(d.history, p, d.study, d.task)),
        ("pareto", declared and d.architectures, pareto.pareto,
         lambda d, p: pareto.pareto(d.summary, p, d.study, d.claims)),
        ("layer_won_back", ladder, pareto.layer_won_back,
         lambda d, p: pareto.layer_won_back(d.summary, p, d.study, d.claims)),
    ]
    tabs = [
        ("by_config", True, by_config),
        ("lean_vs_baseline", p1 and d.below_baseline, lean_vs_baseline),
        ("glue_tasks", metric == "glue_avg", glue_tasks),
        ("acceptance", p2, acceptance),
        ("paper_comparison", True, paper_comparison),
        ("claims", declared, claims),
        ("kappa_within", p1 and d.architectures, kappa_within),
        ("theorem_vs_real", p1 and d.architectures, theorem_vs_real),
        ("exchange", ladder, exchange),
    ]
    return [(name, fn, draw) for name, shown, fn, draw in figs if shown], \
        [(name, make) for name, shown, make in tabs if shown]


def caption(fn: Callable, name: str, study: str | None) -> str:
    """Output `name`'s caption, carried by `fn`, for `study` (None: the output of no study: the
    theory check's), as Snakemake's report would render it."""
    from jinja2 import Template

    wildcards = SimpleNamespace(study=study) if study else SimpleNamespace()
    return Template(fn.captions[name], keep_trailing_newline=True).render(snakemake=SimpleNamespace(
        wildcards=wildcards))


def write_study(d: StudyData, fig_dir: Path, table_dir: Path) -> dict[str, dict[str, str]]:
    """results/figures/{study}-{name}.{png,pdf} and results/tables/{study}-{name}.{csv,md,tex,html}
    of every output the study gets; returns their captions, {"figures" | "tables": {file stem:
    caption}}."""
    figs, tabs = study_outputs(d)
    captions: dict[str, dict[str, str]] = {"figures": {}, "tables": {}}
    for name, fn, draw in figs:
        draw(d, fig_dir / f"{d.study}-{name}")
        captions["figures"][f"{d.study}-{name}"] = caption(fn, name, d.study)
    captions["tables"] = write_tables(d, table_dir, tabs)
    return captions


def write_tables(d: StudyData, table_dir: Path, tabs: list[tuple[str, Make]]) -> dict[str, str]:
    """results/tables/{study}-{name}.{csv,md,tex,html} of each of `tabs`, each file's caption line
    ending in what a replicate is and the numerics; returns {file stem: the report's caption}."""
    note = f"{replicate_note(d.summary)} {numerics_note(d.summary)}"
    captions = {}
    for name, make in tabs:
        frame, line = make(d)
        write_table(frame, table_dir / f"{d.study}-{name}", f"{line}. {note}")
        captions[f"{d.study}-{name}"] = caption(make, name, d.study)
    return captions


@captioned("by_config", (
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


@captioned("lean_vs_baseline", (
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


@captioned("glue_tasks", (
        "**{{ snakemake.wildcards.study }}**: P1's GLUE table: each pretrained configuration fine-tuned "
        "on every\n"
        "GLUE task (MCC for CoLA, F1 for MRPC and QQP, Spearman for STS-B, accuracy otherwise), and the\n"
        "unweighted GLUE average; means over seeds.\n"
    ))
def glue_tasks(d: StudyData) -> tuple[pd.DataFrame, str]:
    return tables.glue_tasks_table(d.summary), (f"{d.study}: GLUE score per task after fine-tuning, and the average "
                                                f"(mean over seeds, with the average's 95% interval)")


@captioned("acceptance", (
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


@captioned("paper_comparison", (
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


@captioned("claims", (
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


@captioned("exchange", (
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


@captioned("theorem_vs_real", (
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


@captioned("kappa_within", (
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


def numerics_note(summary: pd.DataFrame) -> str:
    """A table caption's last sentence: what the study's results were computed under (training,
    and the condition numbers where they differ), saying so where rows made under different
    numerics are put side by side."""
    trained = summary.get("numerics", pd.Series([UNRECORDED] * len(summary)))
    note = f"Numerics: {describe_mix(trained)}"
    kappa = summary.get("kappa_numerics")
    if kappa is not None and set(kappa.dropna()) != set(trained.dropna()):
        note += f"; condition numbers: {describe_mix(kappa)}"
    return note + "."


@captioned("gaussian_conditioning", (
        "Theorem 3.2 by Monte Carlo, the numbers: per protocol, tokens N, heads h and head dim d, the mean,\n"
        "median and standard deviation of kappa over draws, the closed form, and their ratio.\n"
    ))
def write_theory(theory_csv: str | Path, fig_dir: Path, table_dir: Path) -> dict[str, dict[str, str]]:
    """The theory check's figure and tables (results/{figures,tables}/theory-*); returns their
    captions, as write_report keeps them."""
    frame = pd.read_csv(theory_csv)
    figures.theory_curves(frame, fig_dir / "theory-gaussian_conditioning")
    frame["mc_over_formula"] = frame["kappa_mean"] / frame["kappa_formula"]
    write_table(frame, table_dir / "theory-gaussian_conditioning",
                "Theorem 3.2: Monte Carlo kappa of N x (h*d) Gaussian blocks against the closed form")
    write_table(papers.theorem_comparison(frame), table_dir / "theory-paper_comparison",
                "Theorem 3.2: our Monte Carlo against papers.md 1.1 (N = 197, d = 64); pass within 10%")
    return {"figures": {"theory-gaussian_conditioning": caption(figures.theory_curves, "gaussian_conditioning", None)},
            "tables": {"theory-gaussian_conditioning": caption(write_theory, "gaussian_conditioning", None),
                       "theory-paper_comparison": caption(paper_comparison, "paper_comparison", None)}}


def read_study(name: str, declared: dict, results: Path) -> StudyData:
    """Study `name` from its files under `results` and what its config declared: {baseline,
    checks, claims, points, variants} (the plan's, `leaner report` reads them from the run's
    resolved config)."""
    folder = results / name
    return StudyData(name, read_summary(folder / "summary.csv"), declared["baseline"], tuple(declared["checks"]),
                     declared["claims"], pd.read_csv(folder / "kappa_through_training.csv"),
                     [str(folder / vid / "history.csv") for vid in declared["variants"]], declared["points"])


def _write_study(name: str, declared: dict, results: Path) -> dict[str, dict[str, str]]:
    return write_study(read_study(name, declared, results), results / "figures", results / "tables")


def write_report(studies: dict[str, dict], results: str | Path, theory_csv: str | Path, benchmarks: list[str],
                 metrics: list[str] = (), workers: int = 1) -> dict[str, dict[str, str]]:
    """Every output of a run under `results` (its figures/ and tables/, overview/findings.{md,html},
    overview/captions/{figures,tables}/<stem>.rst and overview/index.md) from each study's files
    and what its config declared (`studies`: {name: read_study's `declared`}), the studies and the
    theory check drawn by `workers` processes side by side; returns the captions, {"figures" |
    "tables": {file stem: caption}}, in the studies' order."""
    results = Path(results)
    fig_dir, table_dir, overview = results / "figures", results / "tables", results / "overview"
    if workers > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(studies) + 1)) as pool:
            pending = [pool.submit(_write_study, name, declared, results) for name, declared in studies.items()]
            pending.append(pool.submit(write_theory, theory_csv, fig_dir, table_dir))
            made = [job.result() for job in pending]
    else:
        made = [_write_study(name, declared, results) for name, declared in studies.items()]
        made.append(write_theory(theory_csv, fig_dir, table_dir))
    captions: dict[str, dict[str, str]] = {"figures": {}, "tables": {}}
    for each in made:
        for kind, written in each.items():
            captions[kind].update(written)
    write_overview([str(results / name / "summary.csv") for name in studies], str(fig_dir), str(table_dir),
                   str(overview / "findings"), [str(table_dir / f"{name}-claims.csv")
                                                for name, declared in studies.items() if declared["claims"]])
    for name in write_overview.captions:  # its figure, then its tables
        captions["figures" if name == "overview" else "tables"][f"all_studies-{name}"] = \
            caption(write_overview, name, None)
    write_job_costs(benchmarks, str(table_dir), list(metrics))
    captions["tables"]["all_studies-job_costs"] = caption(write_job_costs, "job_costs", None)
    for kind, made in captions.items():
        for stem, text in made.items():
            write_text(overview / "captions" / kind / f"{stem}.rst", text)
    write_text(overview / "index.md", index_markdown(captions))
    return captions


def index_markdown(captions: dict[str, dict[str, str]]) -> str:
    """overview/index.md: every figure and table of the run by what it belongs to (a study, the
    theory check, all studies), each with its files and caption."""
    groups: dict[str, list[str]] = {}
    for kind, ext, others in (("figures", "png", ("pdf",)), ("tables", "md", ("csv", "tex", "html"))):
        for stem, text in captions[kind].items():
            group, name = stem.split("-", 1)
            files = ", ".join(f"[{e}](../{kind}/{stem}.{e})" for e in (ext, *others))
            groups.setdefault(group, []).append(f"### {name} ({kind[:-1]}: {files})\n\n{text.strip()}\n")
    return "# What this run made\n\nEvery figure and table, with its caption.\n" + "".join(
        f"\n## {group}\n\n" + "\n".join(entries) for group, entries in groups.items())
