"""Which code produced a result: the package version and, in a git checkout, the commit and
whether the working tree differed from it (recorded in every metrics.json, shown by
`leaner --version`)."""

from __future__ import annotations

import functools
import os
import subprocess
import time
from pathlib import Path

from . import __version__

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding src/leaner, if it is one


# Variables that point git at another repository, index or stopping place than the one asked for:
# a caller's (a git hook's GIT_DIR, a CI's GIT_CEILING_DIRECTORIES) must not decide which commit a
# result records.
GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
                 "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_NAMESPACE")
GIT_TIMEOUT_S = 30


def _git(*args: str) -> tuple[subprocess.CompletedProcess | None, str | None]:
    """(git's answer, None), or (None, why it gave none) for `git -C SOURCE_ROOT *args`."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_REDIRECTS}
    command = f"git {' '.join(args)}"
    try:
        done = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=env, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        return None, "no git on PATH"
    except subprocess.TimeoutExpired:
        return None, f"{command} took over {GIT_TIMEOUT_S} s"
    except OSError as exc:
        return None, f"{command} could not start: {exc}"
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:300] or "nothing on stderr"
        return None, f"{command} in {SOURCE_ROOT} exited {done.returncode}: {said}"
    return done, None


_KNOWN: dict = {}  # the answer once git gave one (a failure is asked again next time)


def code_state() -> dict:
    """{"version", "commit", "dirty", "why"}: the commit of the checkout holding this package and
    whether its tracked files differ from it; commit and dirty are None outside a git checkout (an
    installed copy), without git, or where git failed, and `why` then says which (None otherwise).
    A failure is not remembered: the next call asks git again (the first answer is kept)."""
    if _KNOWN:
        return dict(_KNOWN)
    state = {"version": __version__, "commit": None, "dirty": None, "why": None}
    if not (SOURCE_ROOT / ".git").exists():
        return {**state, "why": f"not a git checkout: {SOURCE_ROOT} has no .git (an installed copy)"}
    head, why = _git("rev-parse", "HEAD")
    if head is None:
        time.sleep(0.2)  # once more: a transient failure must not stand in a run's record
        head, again = _git("rev-parse", "HEAD")
        if head is None:
            return {**state, "why": why if why == again else f"{why}; then {again}"}
    changed, why = _git("status", "--porcelain", "--untracked-files=no")
    state.update(commit=head.stdout.strip(), dirty=bool(changed.stdout.strip()) if changed else None, why=why)
    if changed is not None:
        _KNOWN.update(state)
    return state


def describe() -> str:
    """'leaner 0.1.0 (commit 1a2b3c4d, with local changes)', for --version and log headers."""
    s = code_state()
    if s["commit"] is None:
        return f"leaner {s['version']} (commit unknown: {s['why']})"
    return f"leaner {s['version']} (commit {s['commit'][:10]}{', with local changes' if s['dirty'] else ''})"


# The modules each stage's numbers come from (the stage's command and what they import inside the
# package; a job adds the modules it loads by name, its task's and its dataset kind's). A rule
# carries its job's digest as a param, so Snakemake re-runs a stage, and what follows, when that
# code changes; a comment or a docstring changes no digest (the digest is of the syntax tree less
# docstrings).
STAGE_ROOTS = {
    "data": ("leaner.data",),
    "training": ("leaner.training.train",),
    "conditioning": ("leaner.measure.conditioning",),
    "theory": ("leaner.measure.theory",),
    "summary": ("leaner.analysis.summary",),
    "report": ("leaner.analysis.report", "leaner.workflow.plan"),  # the plan: what each study declared
}
PACKAGE = Path(__file__).resolve().parent


def _module_file(name: str) -> Path | None:
    """The file of leaner module `name` (a package's __init__.py), or None where it is no module."""
    base = PACKAGE.joinpath(*name.split(".")[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported(path: Path, tree) -> set[str]:
    """The leaner modules `path` imports, at module level or inside functions."""
    import ast

    package = ".".join(("leaner", *path.relative_to(PACKAGE).parts[:-1]))  # where a relative import starts
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "leaner"}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            if module.split(".")[0] != "leaner":
                continue
            out.add(module)
            out |= {f"{module}.{a.name}" for a in node.names}  # `from . import x`: x may be a module
    return out


_TREES: dict[Path, tuple] = {}  # a file's leaner imports and its digest, read once a process


def _tree(path: Path) -> tuple[set[str], str]:
    """(the leaner modules `path` imports, a digest of its syntax tree less docstrings)."""
    import ast
    import hashlib

    if path not in _TREES:
        bare = _without_docstrings(ast.parse(path.read_text(), str(path)))  # imports are kept
        _TREES[path] = _imported(path, bare), hashlib.sha256(ast.dump(bare).encode()).hexdigest()
    return _TREES[path]


def stage_files(stage: str, modules: tuple[str, ...] = ()) -> list[Path]:
    """The package's files `stage`'s code runs (STAGE_ROOTS, the `modules` its job loads by name:
    tasks.job_modules, and every leaner module they import, with the packages above each)."""
    todo, seen = [*STAGE_ROOTS[stage], *modules], set()
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        todo += sorted(_tree(path)[0]) + [name.rsplit(".", 1)[0]] * ("." in name)
    return sorted(seen)


def _without_docstrings(tree):
    import ast

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


@functools.cache
def stage_digest(stage: str, modules: tuple[str, ...] = ()) -> str:
    """A 16-hex digest of `stage`'s code for a job that loads `modules` by name (its task's training
    class, its dataset's kind: tasks.job_modules): each file's syntax tree less its docstrings (a
    comment, a docstring or a blank line changes nothing; any statement does)."""
    import hashlib

    files = "".join(f"{p.relative_to(PACKAGE).as_posix()}\0{_tree(p)[1]}\0" for p in stage_files(stage, modules))
    return hashlib.sha256(files.encode()).hexdigest()[:16]
