"""The README states what its source run wrote (tests/reference/default_study) and nothing else: its
claims and heads-effect tables and its findings are rendered from that run's files, and that run
was made under pinned numerics, so a pinned re-run anywhere on x86-64 with AVX2 gives its bytes
(test_reference_runs.py re-runs it: `make reproduce`)."""

from __future__ import annotations

import re
import shlex

import pandas as pd
import pytest

from reference_run import FIGURE, README, REFERENCE, REPO, marked, provenance, readme_blocks

pytestmark = pytest.mark.fast


def test_the_readmes_tables_and_findings_are_rendered_from_the_reference_run():
    """The README's short claims table and docs/results.md's tables and findings."""
    for (path, name), block in readme_blocks().items():
        text = path.read_text()
        start, end = marked(text, name)
        assert text[start:end] == block, f"{path.name} block {name!r}: run tests/reference_run.py to render it again"


def test_the_readme_shows_the_headline_figure_drawn_from_the_reference_run():
    """docs/headline.png is committed and shown; `tests/reference_run.py --figure` draws it again."""
    assert FIGURE.is_file() and FIGURE.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({FIGURE.relative_to(REPO).as_posix()})" in README.read_text()


def test_the_reference_run_was_made_under_pinned_numerics_and_committed_code():
    made = provenance()
    assert "COMPATIBLE" in made["numerics"] and "oneDNN off" in made["numerics"] and "/AVX2," in made["numerics"]
    assert made["dirty"] is False and len(made["commit"]) == 40
    for summary in (REFERENCE / "summaries").glob("*.csv"):
        frame = pd.read_csv(summary)
        assert set(frame["numerics"]) == set(frame["kappa_numerics"]) == {made["numerics"]}, summary.name


# ----------------------------------------------------------------------------- what the README names

PAGES = (README, REPO / "docs" / "results.md", REPO / "docs" / "claims.md", REPO / "docs" / "gpu.md",
         REPO / "docs" / "slurm.md")
REPO_PATH = re.compile(r"(?<![\w/.$-])((?:src|docs|configs|profiles|tests|benchmarks|pilots|schemas|envs|rules|report)"
                       r"/[\w./+-]*|(?:config\.yaml|requirements\.lock|Makefile|Snakefile|pyproject\.toml)\b)")
PLACEHOLDERS = {"<file>": "results/vit_digits/summary.csv"}


def _commands(text: str) -> list[str]:
    """Every command a page gives: each line of its bash blocks (continuations joined, comments
    cut) and every inline `...` that starts with a command."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                found.append(line)
    found += [c for c in re.findall(r"`([^`\n]+)`", text)
              if re.match(r"(\.venv/bin/)?(leaner|snakemake|make|python) ", c)]
    return found


def _check_command(line: str, makefile: str) -> None:
    from snakemake.cli import get_argument_parser

    from leaner.cli import build_parser
    from leaner.workflow.plan import load_plan

    line = re.sub(r"\s*\[[^\]]*\]", "", line)  # optional parts: `leaner status [CONFIG ...]`
    for key, value in PLACEHOLDERS.items():
        line = line.replace(key, value)
    argv = shlex.split(line)
    program = argv[0].removeprefix(".venv/bin/")
    if argv[1].endswith(":"):  # a line the command prints, quoted: `leaner train: stalled: ...`
        return
    if program == "make":
        targets = [t for t in argv[1:] if "=" not in t]
        assert all(re.search(rf"^{re.escape(t)}:", makefile, re.M) for t in targets), f"{line}: no such make target"
        return
    if program == "python":
        script = argv[1] if argv[1] != "-m" else None
        assert script is None or (REPO / script).is_file(), f"{line}: {script} does not exist"
        return
    if program == "leaner" and len(argv) == 2:  # a subcommand named in prose: `leaner cost`
        subcommands = build_parser()._subparsers._group_actions[0].choices
        assert argv[1] in subcommands, f"{line}: no such subcommand (allowed: {', '.join(subcommands)})"
        return
    if program == "leaner" and argv[1:2] != ["run"]:
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as stop:
            raise AssertionError(f"{line}: leaner refuses these arguments") from stop
        return
    args = get_argument_parser().parse_args(argv[2:] if program == "leaner" else argv[1:])
    for path in [*(args.configfile or []), *(args.profile or [])]:
        assert (REPO / path).exists(), f"{line}: {path} does not exist"
    if not args.targets:
        return
    plan = load_plan(*(REPO / c for c in args.configfile or []), default=REPO / "config.yaml")
    for target in args.targets:
        parts = target.split("/")
        if len(parts) == 4 and parts[0] == "results" and parts[1] in plan.studies:
            assert parts[2] in plan.studies[parts[1]].variants, f"{line}: no variant {parts[2]} in {parts[1]}"


def test_every_command_the_readme_gives_parses_and_names_what_exists():
    """Each `leaner` command parses with leaner's own parser, each snakemake command with
    Snakemake's, its config files and profiles exist and a variant it targets is planned; each
    make target is the Makefile's and each script exists."""
    makefile = (REPO / "Makefile").read_text()
    checked = 0
    for page in PAGES:
        for line in _commands(page.read_text()):
            _check_command(line, makefile)
            checked += 1
    assert checked >= 20, checked


def test_every_repository_path_the_readme_names_exists():
    missing = []
    for page in PAGES:
        for path in set(REPO_PATH.findall(page.read_text())):
            path = path.rstrip(".,;:")
            placeholder = any(c in path for c in "{*<") or re.search(r"/[A-Z]+(_\w+)?\.", path)  # pilots/STUDY_lr.csv
            if not placeholder and not (REPO / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing


def test_the_readme_is_a_manual_of_about_300_lines_with_a_glossary():
    """The README: what it is, the first commands, what a run writes, the configuration, re-running
    one ablation, paper scale, watching, when things go wrong, the layout, a glossary; the science
    and its numbers are docs/results.md's."""
    text = README.read_text()
    assert len(text.splitlines()) <= 320, len(text.splitlines())
    assert text.index("make demo") < 200  # the first command
    sections = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    for wanted in ("What the study shows", "What a run writes", "Paper scale on GPUs and Slurm", "Configuration",
                   "Re-run one ablation", "Watching a sweep", "When things go wrong",
                   "Layout, and where to add what", "Glossary"):
        assert wanted in sections, (wanted, sections)
    glossary = text[text.index("## Glossary"):]
    for term in ("kappa", "control", "margin", "non-inferior", "Another platform could read", "platform tolerance",
                 "W modules", "MFU", "pinned numerics", "warm start", "P2's task"):
        assert term in glossary, term
