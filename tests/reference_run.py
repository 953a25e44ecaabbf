"""The runs the numbers are held to, kept in tests/reference/:

- default_study: the README's source run of the default study (config.yaml);
- quick_study: every study at a small budget (config.yaml with configs/quick.yaml: one seed, 60
  steps), which `make test` re-runs through the real DAG, so any change to the numbers fails CI.

Each holds every table the run writes but the job costs, each study's summary without its
timings, the findings, and where, when and under which numerics it ran (provenance.json).

Uses:
- the tests: the README's tables must be what the default run's CSVs render (test_readme.py); a
  new run must give these files byte for byte where its numerics label is the reference's
  (test_reference_runs.py: the quick one in `make test`, the default in `make reproduce`), or else stay
  within what another platform can move;
- refreshing them after a change that moves the numbers, from a finished run:
  `.venv/bin/python tests/reference_run.py WORKDIR [WALL]` (of config.yaml) writes the default's
  files, the generated blocks (the README's short claims table; docs/results.md's full claims
  and heads-effect tables, the numbers behind them and the findings) and the README's headline
  figure; `.venv/bin/python tests/reference_run.py --quick WORKDIR` (of config.yaml with
  configs/quick.yaml) the quick one's files;
- a named config's run (NAMED: configs/NAME.yaml's studies, kept for docs/results.md's where-the-trade-holds
  table): `.venv/bin/python tests/reference_run.py --named NAME WORKDIR [WALL] [--same-code WHY]`;
- the README's headline figure alone: `.venv/bin/python tests/reference_run.py --figure` draws
  docs/headline.png from the reference's summaries with the overview's own code (the figure
  `leaner report` draws as results/figures/all_studies-overview.png).
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "reference" / "default_study"
QUICK = REPO / "tests" / "reference" / "quick_study"
CONFIGS = {REFERENCE: ["config.yaml"], QUICK: ["config.yaml", "configs/quick.yaml"]}  # what each is a run of
README = REPO / "README.md"
RESULTS = REPO / "docs" / "results.md"
FIGURE = REPO / "docs" / "headline.png"
TIMINGS = ("wall_time_s", "throughput_samples_per_s", "peak_memory_mb")  # summary columns a machine's load moves
NOT_KEPT = ("all_studies-job_costs.csv",)  # nothing but timings
IDENTITIES = "identities.csv"  # workflow/kept.py


def _without(text: str, columns: tuple[str, ...]) -> str:
    """A CSV's text with `columns` left out, every other cell as written."""
    rows = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(rows[0]) if name not in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep])
    return out.getvalue()


def comparable(workdir: Path, configs: list[str]) -> dict[str, str]:
    """The files of a run of `configs` that no machine's load moves: name -> text; with them the
    identity of each run (workflow/kept.py: identities.csv), from a plan of the configs."""
    from leaner.workflow.kept import identities_text, reference_identities
    from leaner.workflow.plan import load_plan

    results = Path(workdir) / "results"
    files = {f"tables/{p.name}": p.read_text() for p in sorted((results / "tables").glob("*.csv"))
             if p.name not in NOT_KEPT}
    for summary in sorted(results.glob("*/summary.csv")):
        files[f"summaries/{summary.parent.name}.csv"] = _without(summary.read_text(), TIMINGS)
    files["findings.md"] = (results / "overview" / "findings.md").read_text()
    paths = [REPO / c for c in configs]
    plan = load_plan(*paths, default=None if len(paths) > 1 or configs == ["config.yaml"] else REPO / "config.yaml")
    rows = reference_identities(plan, sorted(results.glob("*/summary.csv")))
    files[IDENTITIES] = identities_text(rows)
    return files


def numerics_labels(workdir: Path) -> set[str]:
    """Every numerics label the run's summaries carry (training and condition numbers)."""
    import pandas as pd

    labels = set()
    for summary in (Path(workdir) / "results").glob("*/summary.csv"):
        frame = pd.read_csv(summary)
        for column in ("numerics", "kappa_numerics"):
            labels |= set(frame[column].dropna()) if column in frame else {"unrecorded"}
    return labels


def provenance(folder: Path = REFERENCE) -> dict:
    return json.loads((folder / "provenance.json").read_text())


def reference_files(folder: Path = REFERENCE) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*.csv"))} | {
        "findings.md": (folder / "findings.md").read_text()}


def _arrows(values, fmt) -> str:
    return " -> ".join(fmt(v) for v in values)


def numbers_behind() -> str:
    """The README's 'numbers behind it': per-configuration means of the reference run's tables."""
    import pandas as pd

    t = REFERENCE / "tables"
    vit, listops, lm = (pd.read_csv(t / f"{s}-by_config.csv") for s in ("vit_digits", "listops_small", "lm_stories"))
    accept = pd.read_csv(t / "nearest_rank-acceptance.csv")

    def pick(frame, protocol, depth):
        rows = frame[frame["protocols"].str.contains(protocol) & (frame["depth"] == depth)]
        return rows.sort_values("heads")

    acc, kappa = (lambda v: f"{v:.3f}"), (lambda v: f"{v:.1e}".replace("e+0", "e").replace("e+", "e"))
    fig3 = [pick(vit, "fixed_head_dim", d) for d in (1, 2)]
    wide = vit[(vit["width"] == 64) & (vit["depth"] == 1)].sort_values("heads")
    ratios = accept[accept["check"].str.contains("MSE")]
    angles = accept[accept["check"].str.contains("angle")]
    one_run = "one run each, one platform"
    rows = [
        ("vit_digits", "P1's Fig. 3 shape, head dim 16 "
                       f"({_arrows(fig3[0]['n'], str)} and {_arrows(fig3[1]['n'], str)} seeds): accuracy "
                       f"{_arrows(fig3[0]['eval_acc_mean'], acc)} "
                       f"(1 layer: {_arrows(fig3[0]['params'], lambda v: f'{v / 1e3:.1f}k')} parameters) and "
                       f"{_arrows(fig3[1]['eval_acc_mean'], acc)} (2 layers) with "
                       f"{_arrows(fig3[0]['heads'], str)} heads; kappa of the head outputs after training (geometric "
                       f"mean over layers and seeds) {_arrows(fig3[0]['kappa_final_gmean'], kappa)} at 1 layer. At "
                       f"width 64 and 1 layer, {_arrows(wide['heads'], str)} heads (head dim "
                       f"{', '.join(map(str, wide['head_dim']))}, {_arrows(wide['n'], str)} seeds): accuracy "
                       f"{', '.join(map(acc, wide['eval_acc_mean']))} "
                       f"and kappa {', '.join(map(kappa, wide['kappa_final_gmean']))}"),
        ("nearest_rank", "P2's acceptance, over the runs that learned: MSE(rank 8) / MSE(rank 16) = "
                         + " and ".join(f"{r['observed']:.1f} (W = {w}; {r['runs']})" for w, (_, r) in
                                        zip((1, 2), ratios.iterrows()))
                         + "; angle(QK^T, I) " + " / ".join(f"{r['observed']:.1f}" for _, r in angles.iterrows())
                         + " degrees (W = 1 / 2; " + " / ".join(r["runs"] for _, r in angles.iterrows()) + ")"),
        ("listops_small", f"accuracy {_arrows(pick(listops, 'fixed_width', 1)['eval_acc_mean'], acc)} with "
                          f"{_arrows(pick(listops, 'fixed_width', 1)['heads'], str)} heads at 1 layer, "
                          f"{_arrows(pick(listops, 'fixed_width', 2)['eval_acc_mean'], acc)} with "
                          f"{_arrows(pick(listops, 'fixed_width', 2)['heads'], str)} at 2 layers ({one_run})"),
        ("lm_stories", f"validation loss (nats/byte) {_arrows(pick(lm, 'fixed_width', 1)['eval_loss_mean'], acc)} "
                       f"with {_arrows(pick(lm, 'fixed_width', 1)['heads'], str)} heads at 1 layer, "
                       f"{_arrows(pick(lm, 'fixed_width', 2)['eval_loss_mean'], acc)} with "
                       f"{_arrows(pick(lm, 'fixed_width', 2)['heads'], str)} at 2 layers ({one_run})"),
    ]
    return "| study | numbers behind it |\n|---|---|\n" + "".join(f"| `{s}` | {text} |\n" for s, text in rows)


SUPPORTED = {"yes": "supported", "no": "not supported"}


def claims_brief(frame) -> str:
    """The README's short claims table: each decided comparison (lean or control against its
    baseline, over more than one seed) in six columns; the full table is docs/results.md's."""
    from leaner.analysis.findings import _elsewhere, _stuck
    from leaner.analysis.stats import signed

    lines = ["| study | claim | compared (parameters against the baseline's) | difference (+: better) "
             "[one-sided 95%] | verdict: declared supported? | another platform could read |",
             "|---|---|---|---|---|---|"]
    decided = frame[(frame["role"] != "baseline") & (frame["n"] > 1)]
    for _, r in decided.iterrows():
        baseline = frame[(frame["claim"] == r["claim"]) & (frame["study"] == r["study"])
                         & (frame["role"] == "baseline")]["configuration"].iloc[0]
        fewer = f", -{r['param_reduction_pct']:.0f}%" if round(r["param_reduction_pct"]) else ""
        declared = (f"declared {r['hypothesis']}: {SUPPORTED.get(r['supported'], r['supported'])}"
                    if isinstance(r.get("hypothesis"), str) else "the control")
        lines.append(f"| `{r['study']}` | {r['claim']} ({r['metric']}) | {r['configuration']} vs {baseline} "
                     f"({r['role']}{fewer}) | {signed(r['lean_advantage'])} [{signed(r['bound_lo'])}, "
                     f"{signed(r['bound_hi'])}], n = {int(r['n'])}{_stuck(r)} | **{r['verdict']}** ({declared}) | "
                     f"{_elsewhere(r)} |")
    return "\n".join(lines) + "\n"


NAMED = {"why_heads": "configs/why_heads.yaml", "why_kappa": "configs/why_kappa.yaml",
         "why_rank_p2": "configs/why_rank_p2.yaml", "depth_floor": "configs/depth_floor.yaml",
         "depth_floor_long": "configs/depth_floor_long.yaml", "depth_floor_tasks": "configs/depth_floor_tasks.yaml",
         "fair_recipe": "configs/fair_recipe.yaml", "rank_params_p2": "configs/rank_params_p2.yaml",
         "kappa_dose": "configs/kappa_dose.yaml",
         "exchange": "configs/exchange.yaml"}  # the named configs' references (tests/reference/NAME)
CONFIGS.update({REPO / "tests" / "reference" / name: [config] for name, config in NAMED.items()})


def where_brief() -> str:
    """docs/results.md's one view of where P1's rule holds: every test of the trade in the default
    study's reference and in each named config's (analysis/trade.py over each run's declared claims
    as judged, overview.headline), in that order."""
    import pandas as pd

    from leaner.analysis.overview import headline
    from leaner.analysis.trade import trade_table

    read = {"keep_default_na": False, "na_values": [""]}
    lines = ["| config | study | task | test | what moved | lean; control | reading |", "|" + "---|" * 7]
    runs = [("config.yaml", REFERENCE)] + [(c, REPO / "tests" / "reference" / n) for n, c in NAMED.items()]
    for config, folder in runs:
        if not folder.exists():
            continue
        claims = [pd.read_csv(p, **read).assign(study=p.name[:-len("-claims.csv")])
                  for p in sorted((folder / "tables").glob("*-claims.csv"))]
        tasks = {s["study"].iloc[0]: s["task"].iloc[0]
                 for s in (pd.read_csv(p) for p in sorted((folder / "summaries").glob("*.csv")))}
        for _, r in trade_table(headline(claims), tasks).iterrows():
            verdicts = r["lean_verdicts"] + (f"; control {r['control_verdict']}" if r["control"] else "")
            lines.append(f"| `{config}` | `{r['study']}` | {r['task']} | {r['claim']} ({r['kind']}) | {r['changed']} | "
                         f"{verdicts} | **{r['reading']}** |")
    return "\n".join(lines) + "\n"


def readme_blocks() -> dict[tuple[Path, str], str]:
    """What the generated blocks must hold, rendered from the reference's files: (file, block name)
    -> text."""
    import pandas as pd

    from leaner.analysis.findings import effects_markdown, headline_markdown

    read = {"keep_default_na": False, "na_values": [""]}  # the verdict "n/a (one seed)" is words
    findings = (REFERENCE / "findings.md").read_text()
    body = findings.split("\n## ")[0].split("\n", 1)[1].strip()  # the paragraphs before the tables
    headline = pd.read_csv(REFERENCE / "tables" / "all_studies-headline.csv", **read)
    return {(README, "claims"): claims_brief(headline), (RESULTS, "where the trade holds"): where_brief(),
            (RESULTS, "claims table"): headline_markdown(headline),
            (RESULTS, "heads effect table"): effects_markdown(
                pd.read_csv(REFERENCE / "tables" / "all_studies-heads_effect.csv", **read)),
            (RESULTS, "numbers behind it"): numbers_behind(),
            (RESULTS, "findings"): "\n".join(f"> {line}" if line else ">" for line in body.splitlines()) + "\n"}


def headline_figure(path: Path = FIGURE) -> Path:
    """Draw the overview figure of the reference run into `path` (a PNG), as `leaner report` draws
    it: the summaries in the run's study order, the configurations and correlations computed from
    them (the same as the run's all_studies-kappa_rank_error and -kappa_error_correlation tables)."""
    import shutil
    import tempfile

    import pandas as pd

    from leaner.analysis.overview import configurations, kappa_error_correlation, overview_figure

    order = dict.fromkeys(pd.read_csv(REFERENCE / "tables" / "all_studies-kappa_rank_error.csv")["study"])
    configs = configurations([pd.read_csv(REFERENCE / "summaries" / f"{study}.csv") for study in order])
    with tempfile.TemporaryDirectory() as tmp:
        png, = (p for p in overview_figure(configs, kappa_error_correlation(configs), Path(tmp) / "overview")
                if p.suffix == ".png")
        shutil.copyfile(png, path)
    return path


def marked(text: str, name: str) -> tuple[int, int]:
    """Where a generated block `name` lies: (start, end) of the text between its markers."""
    begin, end = f"<!-- {name}: begin -->\n", f"<!-- {name}: end -->"
    start = text.index(begin) + len(begin)
    return start, text.index(end, start)


def write_reference(workdir: Path, wall: str | None = None, folder: Path = REFERENCE,
                    same_code: str | None = None) -> None:
    """Keep a finished run as the reference in `folder`; for the default study's, render the
    README's blocks and its headline figure from it. A run whose variants record more than one
    code state is refused unless `same_code` says why their numbers are one code's (what differed
    and the re-run that showed it); the provenance then lists every state with its count."""
    labels = numerics_labels(workdir)
    if len(labels) != 1:
        raise SystemExit(f"the run mixes numerics ({sorted(labels)}): a reference is made under one")
    runs = [json.loads(p.read_text()) for p in (Path(workdir) / "results").glob("*/*/metrics.json")]
    counts = Counter((m["code"]["commit"], m["code"]["dirty"]) for m in runs)
    if len(counts) != 1 and not same_code:
        raise SystemExit(f"the run's variants come from {len(counts)} code states: a reference comes from one "
                         "(or say why their numbers are one code's: --same-code WHY)")
    since = provenance(folder).get("kept_since") if (folder / "provenance.json").exists() else None
    for old in folder.rglob("*"):
        if old.is_file():
            old.unlink()
    for name, text in comparable(workdir, CONFIGS[folder]).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (commit, dirty), _ = counts.most_common(1)[0]
    record = runs[0]["numerics"]
    made = {"numerics": labels.pop(), "cpu": f"{record['cpu_vendor']} {record['cpu_model']} ({record['cpu_ceiling']})",
            "commit": commit, "dirty": dirty}
    if len(counts) > 1:
        made["code_states"] = [f"{c[:10]}{' with local changes' if d else ''}: {n} runs"
                               for (c, d), n in counts.most_common()]
        made["same_code"] = same_code
    # when runs of these identities were first kept here (workflow/kept.py: what a later claim has seen)
    made["kept_since"] = since or time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    made |= {"date": time.strftime("%Y-%m-%d"),
             "command": f"snakemake --cores 2 --configfile {' '.join(CONFIGS[folder])}", "wall": wall}
    (folder / "provenance.json").write_text(json.dumps(made, indent=1) + "\n")
    if folder != REFERENCE:
        return
    for (path, name), block in readme_blocks().items():
        text = path.read_text()
        start, end = marked(text, name)
        path.write_text(text[:start] + block + text[end:])
    headline_figure()


if __name__ == "__main__":
    if sys.argv[1:] == ["--figure"]:
        print(headline_figure())
    elif sys.argv[1:2] == ["--quick"]:
        write_reference(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None, QUICK)
    elif sys.argv[1:2] == ["--named"]:  # --named NAME WORKDIR [WALL [--same-code WHY]]: a named config's run
        same = sys.argv[sys.argv.index("--same-code") + 1] if "--same-code" in sys.argv else None
        rest = sys.argv[3:sys.argv.index("--same-code")] if same else sys.argv[3:]
        write_reference(Path(rest[0]), rest[1] if len(rest) > 1 else None, REPO / "tests" / "reference" / sys.argv[2],
                        same)
    else:
        write_reference(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
