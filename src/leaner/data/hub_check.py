"""Before any job: can the pinned `datasets` load each dataset the run takes from the hub?

`datasets` 4 and later refuse a dataset that still ships a loading script, a gated dataset needs a
login, and a compute node may have no network: each would otherwise be learnt when the data job
runs, possibly hours into a sweep. `datasets.load_dataset_builder` asks the hub for what a
dataset is (its files, its subsets; no data is downloaded), and a failure is turned into one line
saying what to do. `leaner check-data` runs it on a config's datasets, and the Snakefile at the
start of a run (onstart) on those it will prepare; a dataset with a manifest is not asked again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

from .hub import hub_subsets
from .kinds import from_hub

PROBLEM = "data error:"
PARQUET_REVISION = "refs/convert/parquet"
SKIP_ENV = "LEANER_SKIP_DATA_CHECK"
OFFLINE_ENV = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
LOCAL_COPY = {"hub": "kind: imagefolder with path: a local copy",
              "text": "source: files with path: a local copy (train.txt, validation.txt)",
              "glue": "source: files with path: a local copy (<task>/<split>.tsv)"}


def manifest_path(root: str | Path, name: str) -> Path:
    """Where the data rule writes dataset `name`'s manifest."""
    return Path(root) / "results" / "data" / name / "manifest.json"


def skip_reason(environ: Mapping[str, str]) -> str | None:
    """Why the check at the start of a run is skipped (None: it runs): LEANER_SKIP_DATA_CHECK, or
    offline mode, where the hub is not to be asked and the data comes from the local cache."""
    for var in (SKIP_ENV, *OFFLINE_ENV):
        if environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var}={environ[var]}"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _gated_status(exc: BaseException) -> int | None:
    """401 or 403 when the hub refused a gated dataset (None: it did not)."""
    from huggingface_hub.errors import GatedRepoError

    for e in _chain(exc):
        if isinstance(e, GatedRepoError):
            return getattr(getattr(e, "response", None), "status_code", None) or 401
        if "is a gated dataset on the Hub" in str(e):
            return 403 if "ask for access" in str(e) else 401
    return None


def _unreachable(exc: BaseException) -> str | None:
    """'offline' when offline mode kept the hub from being asked, 'network' when it could not be
    reached (None: neither)."""
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import httpx  # the HTTP library the pinned huggingface_hub (and datasets) use

    chain = list(_chain(exc))
    if any(isinstance(e, OfflineModeIsEnabled) or "OfflineModeIsEnabled" in str(e) for e in chain):
        return "offline"
    if any(isinstance(e, (httpx.ConnectError, httpx.TimeoutException))
           or (isinstance(e, ConnectionError) and "reach" in str(e)) for e in chain):
        return "network"
    return None


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:200]}"


def explain(spec: dict, subset: str | None, exc: BaseException) -> str:
    """What went wrong asking the hub for dataset `spec` (`subset`), and what to do, in one line."""
    import datasets

    repo = spec["name"]
    local = LOCAL_COPY[spec["kind"]]
    version = datasets.__version__
    text = str(exc)
    if "Dataset scripts are no longer supported" in text:
        return (f"it ships a loading script, which datasets {version} refuses ({_first_line(exc)}) (fix: "
                f"revision: {PARQUET_REVISION}, the hub's parquet conversion of it; or {local}; or datasets<4 in "
                f"requirements.lock)")
    gated = _gated_status(exc)
    if gated == 403:
        return (f"it is gated on the hub and this account has not been granted access (fix: ask for access at "
                f"https://huggingface.co/datasets/{repo}; or {local})")
    if gated:
        return (f"it is gated on the hub and this machine is not logged in (fix: accept its terms at "
                f"https://huggingface.co/datasets/{repo}, then `hf auth login` (huggingface-cli login before "
                f"huggingface_hub 1.0) or set HF_TOKEN; or {local})")
    unreachable = _unreachable(exc)
    if unreachable == "offline":
        return (f"offline mode is on ({' or '.join(OFFLINE_ENV)}) and it is not in the local cache (fix: unset "
                f"them where huggingface.co can be reached and prepare it there; or {local})")
    if unreachable:
        return (f"the hub cannot be reached from here, no network ({_first_line(exc)}) (fix: prepare it where "
                f"huggingface.co can be reached, e.g. prepare: {{local: true}} on a login node with internet; or "
                f"{local}; {SKIP_ENV}=1 skips this check)")
    if "Revision" in text and "doesn't exist" in text:
        return (f"revision {spec.get('revision')!r} does not exist (fix: a branch, tag or commit of it, e.g. "
                f"revision: {PARQUET_REVISION}; or no revision: the default branch)")
    if "doesn't exist on the Hub" in text:
        return ("no such dataset on the hub, or not visible to this account (fix: check datasets.<name>.name; "
                "a private dataset: `hf auth login`)")
    if text.startswith("BuilderConfig") and "not found" in text:
        return f"subset {subset!r} does not exist ({_first_line(exc)}) (fix: one of the subsets listed there)"
    return (f"datasets {version} cannot load it ({_first_line(exc)}) (fix: {local}; or a datasets version that "
            f"reads it; or revision: {PARQUET_REVISION})")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The libraries' own retry and progress warnings off: the check says what matters in one line."""
    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "datasets")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def hub_problem(name: str, spec: dict) -> str | None:
    """One line naming dataset `name` and what to do when the pinned `datasets` cannot load its
    builder from the hub (for every subset it needs); None when it can."""
    import datasets

    for subset in hub_subsets(spec):
        try:
            with _quiet():
                datasets.load_dataset_builder(spec["name"], subset, revision=spec.get("revision"))
        except Exception as exc:  # every failure becomes the one line
            where = spec["name"] + (f" ({subset})" if subset else "") + (
                f" at {spec['revision']}" if spec.get("revision") else "")
            return f"{PROBLEM} datasets.{name}: {where}: {explain(spec, subset, exc)}"
    return None


def check_lines(specs: Mapping[str, dict], root: str | Path = ".") -> list[str]:
    """One line per dataset of `specs`: a problem line (PROBLEM first) for one from the hub that
    cannot be loaded and has no manifest under `root` yet, else what was found."""
    import datasets

    lines = []
    for name, spec in specs.items():
        manifest = manifest_path(root, name)
        if not from_hub(spec):
            lines.append(f"datasets.{name}: not from the hub, nothing to ask")
        elif manifest.exists():
            lines.append(f"datasets.{name}: prepared already ({manifest})")
        else:
            lines.append(hub_problem(name, spec) or f"datasets.{name}: ok, {spec['name']} loads with datasets "
                                                    f"{datasets.__version__}")
    return lines


def hub_problems(specs: Mapping[str, dict], root: str | Path = ".") -> list[str]:
    """The problem lines of check_lines."""
    return [line for line in check_lines(specs, root) if line.startswith(PROBLEM)]
