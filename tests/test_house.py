"""The house rules that a reader relies on: imports inside the package point one way (no cycles,
lazy imports included), and the code passes the linters configured in pyproject.toml."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.fast

PACKAGE = REPO / "src" / "leaner"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its body (a function's lazy import
    counts: it runs when the function does)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule pkg.sub when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_package_imports_have_no_cycles():
    graph = import_graph()
    assert "leaner.analysis.overview" in graph and "leaner.analysis.stats" in graph["leaner.analysis.overview"]
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (it is pinned in requirements.lock; `make setup` installs it)")
    return found


def test_ruff_passes():
    proc = subprocess.run([_tool("ruff"), "check", "src", "tests", "benchmarks"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_snakefmt_passes():
    proc = subprocess.run([_tool("snakefmt"), "--check", "Snakefile", "rules"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_layers_picture_is_drawn_from_the_imports_with_every_unit_above_what_it_imports(tmp_path):
    """docs/draw_layers.py (the picture in docs/architecture.md): every sub-package and top-level
    module is in it, one row above the highest one it imports."""
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import draw_layers
    finally:
        sys.path.remove(str(REPO / "docs"))
    units = draw_layers.unit_graph()
    assert {"workflow", "tasks", "data", "analysis", "models", "training", "cli"} <= set(units)
    row = {u: i for i, layer in enumerate(draw_layers.rows(units)) for u in layer}
    assert all(row[u] == 1 + max((row[t] for t in units[u]), default=-1) for u in units)
    svg = draw_layers.draw(tmp_path / "layers.svg").read_text()
    assert all(f">{u}" in svg for u in units)


MODULE_LINES, FUNCTION_LINES = 350, 100  # the house's limits: a module a reader holds in mind, a function on a screen
# One idea a module: a module passes MODULE_LINES only where its one idea needs it, named here with why.
ONE_IDEA = {
    "src/leaner/training/train.py": "the training loop read top to bottom: set-up, resume, the step, the epochs, "
                                    "the outputs",
    "src/leaner/analysis/stats.py": "the statistics every claim, table and finding uses: intervals, differences, "
                                    "correlations, and the power a claim's seeds give",
    "src/leaner/analysis/summary.py": "summary.csv: one row per run, every column a reader of a run needs (its "
                                      "plateau among them)",
    "src/leaner/analysis/overview.py": "both papers in one view: every configuration of every study, the heads "
                                       "comparisons, kappa against error, the headline, each with its caption, "
                                       "and the figure that draws them",
    "src/leaner/analysis/figures.py": "P1's figures of a study: kappa and the metric against heads and the MLP "
                                      "ratio, the training curves, kappa through training, the theory check's",
    "src/leaner/analysis/report.py": "the report job: which figures and tables each study gets (plain code over "
                                     "its grid and claims), its tables with their captions, the run's index",
}


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of every module of the package and the benchmarks, and of every function in them."""
    modules, functions = {}, {}
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]):
        name, text = str(path.relative_to(REPO)), path.read_text()
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{name}:{node.name}:{node.lineno}"] = node.end_lineno - node.lineno + 1
    return modules, functions


def test_every_module_and_function_is_within_the_houses_limits():
    """A module over MODULE_LINES is one idea that needs the room (ONE_IDEA says which and why), not
    several; one listed there that no longer needs it is taken off."""
    modules, functions = _sizes()
    assert len(modules) > 80 and functions
    long_modules = {m: n for m, n in modules.items() if n > MODULE_LINES and m not in ONE_IDEA}
    long_functions = {f: n for f, n in functions.items() if n > FUNCTION_LINES}
    assert not long_modules, (f"modules over {MODULE_LINES} lines (split by idea, or say in ONE_IDEA why one idea "
                              f"needs them): {long_modules}")
    assert not long_functions, f"functions over {FUNCTION_LINES} lines (split into steps): {long_functions}"
    assert all(modules.get(m, 0) > MODULE_LINES for m in ONE_IDEA), "ONE_IDEA lists a module within the limit"


def test_every_test_module_names_its_tier():
    """Each test module says which tier it is in (conftest.TIERS: the Makefile's test-fast, test and
    reproduce), by a module-level pytestmark; a new module without one fails here (and at
    collection)."""
    from conftest import TIERS

    untiered = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        marks = [node for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)]
        named = {n.attr for m in marks for n in ast.walk(m.value) if isinstance(n, ast.Attribute)}
        if not named & set(TIERS):
            untiered.append(path.name)
    assert not untiered, f"test modules without a tier (pytestmark = pytest.mark.<{'|'.join(TIERS)}>): {untiered}"


# a top-level import and the distribution that provides it, where their names differ
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}


def test_every_package_the_code_imports_is_declared():
    """Each third-party module src/leaner imports (lazily too) is a declared dependency in
    pyproject.toml, not one that arrives only through another package."""
    import re
    import tomllib

    declared = {re.split(r"[=<>; ]", d)[0].lower().replace("-", "_")
                for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    imported = set()
    for path in (REPO / "src" / "leaner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third = {m for m in imported if m not in sys.stdlib_module_names and m not in ("leaner", "__future__")}
    missing = sorted(m for m in third if DISTRIBUTION.get(m, m).lower().replace("-", "_") not in declared)
    assert missing == [], f"imported, not declared in pyproject.toml: {missing}"


# What the house replaced, and with what: each old name must stay gone from the package, so that a
# reader meets one way of doing each thing.
REPLACED = {
    "param_counts.json": "parameter counts without building (models/params.py, models/timm_families.py's table)",
    "LEANER_CACHE_DIR": "the same: nothing is cached, the counts are closed forms and a committed table",
    "fault_hold": "faults the tests build into the processes they start (tests/faults/sitecustomize.py)",
    "LEANER_FAULT_": "the same: the loop, io.py and the stall watch carry no test hooks",
    "analysis/power.py": "analysis/stats.py (a claim's power beside its test) and planning/pilot.py (its report)",
    "analysis/plateau.py": "analysis/summary.py (a run's plateau is one of its summary's columns)",
    "analysis/labels.py": "analysis/table_render.py (the headers beside the one table writer)",
    "analysis/theorem.py": "analysis/report.py (the theorem_vs_real table beside its rows)",
    "shown.py": "analysis/report.py study_outputs (which figures and tables a study gets: plain code over its grid "
                "and claims, run in the report job) and plots.captioned (the caption on the function that draws)",
    "outputs.py": "the same; grid.grid_points (a study's points), plan.Study.declared (what the report reads)",
    "catalogue.py": "`leaner schema` (workflow/config.py write_schema): nothing else is generated from code",
    "catalogue.json": "nothing: the report decides at run time, the Snakefile lists the report's folders",
    "analysis/study_figures.py": "analysis/report.py (one report job for every study)",
    "analysis/study_tables.py": "analysis/report.py",
    "analysis/study_data.py": "analysis/report.py (StudyData beside the functions that take it)",
    "FIGURE_CODE": "report.study_outputs' lines (name, function, how it is drawn)",
    "TABLE_CODE": "the same",
    "theory-report": "`leaner report` (the theory check's figure and tables are the report's)",
    "analysis/figure_parts.py": "analysis/plots.py (what every figure shares, seed aggregates and panels too)",
    "analysis/curves.py": "analysis/figures.py (P1's figures of a study, through training too)",
    "analysis/overview_figure.py": "analysis/overview.py (the overview figure beside the numbers it draws)",
    "LEANER_CLAIMS_DIGESTS": "results/{study}/declared.json (rule declare): a job's plan data comes in its spec "
                             "or its inputs, the claims digest a run records too",
    "claims_declared": "the same (leaner train --declared)",
}


def test_what_was_replaced_stays_gone():
    """A module replaced is no file of the package; a name replaced is in none of its files."""
    modules = [old for old in REPLACED if old.endswith(".py") and (PACKAGE / old).exists()]
    names = {old: [str(p.relative_to(REPO)) for p in sorted(PACKAGE.rglob("*.py")) if old in p.read_text()]
             for old in REPLACED if not old.endswith(".py")}
    assert not modules and not any(names.values()), f"replaced (see REPLACED for by what): {modules}, {names}"


_LOADED = """
import json, sys
from leaner.training import train
from leaner.tasks.trainers import load_trainer
from leaner.data.kinds import dataset_kind
before = sorted(m for m in sys.modules if m.startswith("leaner"))
load_trainer(sys.argv[1]); dataset_kind(sys.argv[2])
print(json.dumps([before, sorted(m for m in sys.modules if m.startswith("leaner"))]))
"""


@pytest.mark.parametrize("task, kind", [("image_classification", "digits"), ("nearest_point", "nearest_point"),
                                        ("language_model", "text")])
def test_a_run_loads_its_own_task_and_dataset_kind_alone(task, kind):
    """The training module imports no task's training class, no data family and nothing of the
    analysis; a run then loads its task's module and its dataset kind's, none of the others'; and
    the digest its rule carries covers every module it loaded (a change to any re-trains it)."""
    from leaner.provenance import stage_files
    from leaner.tasks import job_modules

    proc = subprocess.run([sys.executable, "-c", _LOADED, task, kind], capture_output=True, text=True, timeout=120,
                          cwd=REPO, check=True)
    before, after = json.loads(proc.stdout)
    trainers = {"leaner.tasks.image", "leaner.tasks.nearest", "leaner.tasks.sequence"}
    families = {f"leaner.data.{m}" for m in ("digits", "images", "nearest_point", "listops", "text", "glue")}
    assert not set(before) & (trainers | families) and not any(m.startswith("leaner.analysis") for m in before)
    modules = job_modules(task, kind)
    assert set(modules) <= set(after) and set(after) & (trainers | families) <= set(modules) | {"leaner.data.glue"}
    # (a language model's trainer reads the GLUE tokens too: tasks/sequence.py trains the GLUE stages)
    covered = {str(p.relative_to(PACKAGE)) for p in stage_files("training", modules)}
    loaded = {str(Path(sys.modules[m].__file__).relative_to(PACKAGE)) for m in map(_import, after)}
    assert loaded <= covered, loaded - covered


def _import(name: str) -> str:
    import importlib

    importlib.import_module(name)
    return name
