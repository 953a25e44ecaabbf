"""The conda environment of every rule (envs/leaner.yaml and envs/leaner.post-deploy.sh, for
`snakemake --sdm conda`).

conda-forge cannot be reached from the test machines, so the conda solve and the download of the
pinned wheels are never run here. Everything else is run the way Snakemake 9 and conda run it:
- Snakemake copies the env file to <workdir>/.snakemake/conda/<hash>_.yaml (conda.py, create_env)
  and, once the environment exists, the post-deploy script to <hash>_.post-deploy.sh, then runs it
  with its own code (Env.execute_deployment_script, called here) with the environment activated,
  in its working directory and with its environment variables;
- conda writes the pip part to condaenv.*.requirements.txt beside the copied env file and runs
  `<prefix>/bin/python -m pip install -U -r <that file> --exists-action=b` in that directory
  (conda/env/installers/pip.py).
The environment is a clean venv at <hash>_. In place of the wheels pip would download, a
directory of links to exactly the lock's distributions installed here (plus pip and setuptools,
which the env file takes from conda-forge) is put on its path, and pip runs offline, without this
machine's configuration: it must find every pin already satisfied and every dependency of every
pin among the pins. The post-deploy step runs offline too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ENV_FILE = REPO / "envs" / "leaner.yaml"
POST_DEPLOY = REPO / "envs" / "leaner.post-deploy.sh"
LOCK = REPO / "requirements.lock"


def lock_lines() -> list[str]:
    return [s for line in LOCK.read_text().splitlines() if (s := line.strip()) and not s.startswith("#")]


def pip_part(env_file: Path) -> list[str]:
    parts = [d["pip"] for d in yaml.safe_load(env_file.read_text())["dependencies"] if isinstance(d, dict)]
    assert len(parts) == 1, f"{env_file}: expected one pip part, found {len(parts)}"
    return parts[0]


def test_pip_part_is_the_lock():
    """Every line of requirements.lock, in order and nothing else, each an exact pin; no paths."""
    pins = pip_part(ENV_FILE)
    assert pins == lock_lines(), "envs/leaner.yaml differs from requirements.lock: run python envs/sync_pins.py"
    for pin in pins:
        req = Requirement(pin)  # raises on anything that is not a plain requirement (-e, -r, paths)
        assert not req.url and len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", pin
    env = yaml.safe_load(ENV_FILE.read_text())
    assert env["channels"][0] == "conda-forge" and "python=3.11" in env["dependencies"]
    assert "pip" in env["dependencies"]


def test_every_rule_uses_the_env_and_its_post_deploy_script():
    """Each rule's `conda:` is envs/leaner.yaml, and Snakemake's own naming of the post-deploy
    script beside an env file (Env.post_deploy_file) gives envs/leaner.post-deploy.sh."""
    from snakemake.sourcecache import LocalSourceFile

    envs = {(smk.parent / path).resolve() for smk in (REPO / "rules").glob("*.smk")
            for path in re.findall(r'conda:\s*"([^"]+)"', smk.read_text())}
    assert envs == {ENV_FILE}, envs
    assert LocalSourceFile(str(ENV_FILE)).replace_suffix([".yaml", ".yml"], ".post-deploy.sh").path == str(POST_DEPLOY)
    assert os.access(POST_DEPLOY, os.R_OK)


def test_env_file_is_generated():
    spec = importlib.util.spec_from_file_location("sync_pins", REPO / "envs" / "sync_pins.py")
    sync_pins = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync_pins)
    assert ENV_FILE.read_text() == sync_pins.render(), "run python envs/sync_pins.py"


# --- the deployment, as Snakemake and conda run it ---------------------------------------------


def installed_pins() -> list[importlib.metadata.Distribution]:
    """The lock's distributions that apply here, as installed in this interpreter; skips when the
    stand-in for pip's downloads cannot be built."""
    if os.name != "posix":
        pytest.skip("Snakemake runs post-deploy scripts on POSIX systems only")
    if sys.version_info[:2] != (3, 11):
        pytest.skip(f"requirements.lock is for Python 3.11, this is {sys.version.split()[0]}")
    dists, missing = [], []
    for pin in lock_lines():
        req = Requirement(pin)
        if req.marker and not req.marker.evaluate():
            continue
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            dist = None
        if dist is None or not req.specifier.contains(dist.version, prereleases=True):
            missing.append(pin)
        else:
            dists.append(dist)
    if missing:
        pytest.skip(f"this interpreter lacks {len(missing)} pins of requirements.lock ({', '.join(missing[:5])}"
                    "...): run `make setup`")
    conda_part()
    return dists


def conda_part() -> list[importlib.metadata.Distribution]:
    """Stand-ins for the two packages the env file takes from conda-forge besides Python."""
    try:
        return [importlib.metadata.distribution(name) for name in ("pip", "setuptools")]
    except importlib.metadata.PackageNotFoundError as exc:
        pytest.skip(f"this interpreter has no {exc.name}")


@pytest.fixture(autouse=True)
def offline_pip(monkeypatch):
    """pip sees no index, no wheel directory and no configuration of this machine: only what the
    environment holds."""
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.delenv("PYTHONPATH", raising=False)


def link_distributions(dists, into: Path) -> None:
    """Links each distribution's top-level entries (packages, modules, .dist-info) into `into`."""
    into.mkdir()
    for dist in dists:
        base = Path(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files or ()}:
            if top in ("..", "__pycache__") or top.endswith(".pth") or (into / top).exists():
                continue
            if (base / top).exists():
                (into / top).symlink_to(base / top)


def snakemake_env_prefix(workdir: Path) -> Path:
    """Where Snakemake 9.27.1 puts a new environment of this env file and post-deploy script, named
    by Snakemake's own hash (Env._get_hash; Env.address picks <hash>_ when none exists yet)."""
    from snakemake.deployment.conda import Env

    envs_dir = workdir / ".snakemake" / "conda"
    envs_dir.mkdir(parents=True)
    env = SimpleNamespace(name=None, dir=None, _envs_dir=str(envs_dir), _container_img=None, content_pin=None,
                          content_deploy=POST_DEPLOY.read_bytes(), content=ENV_FILE.read_bytes())
    digest = Env._get_hash(env, include_location=True, include_container_img=True)
    assert re.fullmatch(r"[0-9a-f]{32}", digest) and digest == hashlib.md5(
        os.path.realpath(envs_dir).encode() + env.content_deploy + env.content).hexdigest()
    return envs_dir / f"{digest}_"


def create_env(workdir: Path, dists, pip_part_of=None) -> tuple[Path, subprocess.CompletedProcess | None]:
    """The environment at Snakemake's path: the env file copied beside it, a clean venv whose
    site-packages sees `dists` (what pip installs from the pip part), and, when `pip_part_of` gives
    the pins, conda's pip step run on them. Returns the prefix and pip's result."""
    prefix = snakemake_env_prefix(workdir)
    shutil.copy(ENV_FILE, f"{prefix}.yaml")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    link_distributions([*dists, *conda_part()], prefix.parent / "downloaded")
    site = subprocess.run([str(prefix / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "downloaded.pth").write_text(f"{prefix.parent / 'downloaded'}\n")
    if pip_part_of is None:
        return prefix, None
    requirements = prefix.parent / "condaenv.test.requirements.txt"
    requirements.write_text("\n".join(pip_part_of(Path(f"{prefix}.yaml"))))
    pip = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "-U", "-r", requirements.name,
                          "--exists-action=b"],
                         cwd=prefix.parent, env=activated(prefix), capture_output=True, text=True, timeout=120)
    return prefix, pip


def activated(prefix: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "CONDA_PREFIX": str(prefix), "PATH": f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONNOUSERSITE": "1"}


def post_deploy(prefix: Path) -> str:
    """Copies the script where Snakemake does and runs it with Snakemake's code: in the current
    directory, with the current environment variables, after `source <conda>/bin/activate <prefix>`
    (here: the variables that activation sets; no conda is installed)."""
    from snakemake.deployment.conda import Env

    target = f"{prefix}.post-deploy.sh"
    shutil.copy(POST_DEPLOY, target)
    conda = SimpleNamespace(shellcmd=lambda address, cmd: (
        f"export CONDA_PREFIX='{address}' CONDA_DEFAULT_ENV='{address}' PATH='{address}/bin':\"$PATH\"; {cmd}"))
    try:
        Env.execute_deployment_script(SimpleNamespace(conda=conda, address=str(prefix)), f"{prefix}.yaml", target)
    except subprocess.CalledProcessError as exc:
        return f"FAILED ({exc.returncode}): {exc.output}"
    return "ok"


def workflow_copy(dst: Path) -> Path:
    """The files of the checkout that installing and importing the package read (leaner.workflow.config reads
    schemas/ beside src/); a copy, so that the test never writes in the repository."""
    for name in ("src", "schemas"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dst / name)
    return dst


def run_in(prefix: Path, cwd: Path, *args: str) -> str:
    proc = subprocess.run(args, cwd=cwd, env=activated(prefix), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip()


def check_installed_from(prefix: Path, source: Path, outside: Path) -> None:
    """`leaner` runs from a directory outside the workflow and imports the workflow's own files."""
    version = run_in(prefix, outside, str(prefix / "bin" / "leaner"), "--version")
    assert version.startswith("leaner 0.1.0"), version
    python = str(prefix / "bin" / "python")
    where = run_in(prefix, outside, python, "-c", "import leaner, sys; print(leaner.__file__); print(sys.prefix)")
    module, sys_prefix = where.splitlines()
    assert Path(module).resolve() == (source / "src" / "leaner" / "__init__.py").resolve(), where
    assert Path(sys_prefix).resolve() == prefix.resolve()
    record = json.loads(run_in(prefix, outside, python, "-c", "import importlib.metadata as m; "
                                                              "print(m.distribution('leaner').read_text('direct_url.json'))"))
    assert record == {"url": source.resolve().as_uri(), "dir_info": {"editable": True}}
    site = run_in(prefix, outside, python, "-c", "import importlib.metadata as m; "
                                                 "print(m.distribution('leaner').locate_file(''))")
    assert Path(site).resolve().is_relative_to(prefix.resolve()), site  # installed into the env itself
    # leaner's declared dependencies (pyproject.toml) are met by the pins
    assert "No broken requirements found" in run_in(prefix, outside, python, "-m", "pip", "check")


def test_env_deploys_as_under_snakemake(tmp_path, monkeypatch):
    """`snakemake --sdm conda` started in the checkout: conda's pip step on the copied env file,
    then the post-deploy script finds the workflow from Snakemake's working directory."""
    dists = installed_pins()
    source = workflow_copy(tmp_path / "workflow")
    prefix, pip = create_env(source, dists, pip_part_of=pip_part)
    assert pip.returncode == 0, f"pip part failed:\n{pip.stdout[-3000:]}\n{pip.stderr[-3000:]}"
    assert "Successfully installed" not in pip.stdout, pip.stdout  # nothing beyond the pins was needed
    assert "Looking in" not in pip.stdout, pip.stdout  # no index, no wheel directory
    for pin in map(Requirement, lock_lines()):  # pip echoes each requirement as written
        assert not pin.marker or not pin.marker.evaluate() or \
            f"Requirement already satisfied: {pin.name}{pin.specifier} " in pip.stdout, pin

    monkeypatch.chdir(source)
    monkeypatch.delenv("LEANER_SOURCE", raising=False)
    assert post_deploy(prefix) == "ok"
    (tmp_path / "elsewhere").mkdir()
    check_installed_from(prefix, source, tmp_path / "elsewhere")


def test_post_deploy_with_another_working_directory(tmp_path, monkeypatch):
    """`snakemake --directory <run>`: below the checkout the script finds it; outside it it needs
    LEANER_SOURCE and says so."""
    dists = installed_pins()
    source = workflow_copy(tmp_path / "workflow")
    run_dir = tmp_path / "scratch" / "run"
    run_dir.mkdir(parents=True)
    prefix, _ = create_env(run_dir, dists)

    monkeypatch.chdir(run_dir)
    monkeypatch.delenv("LEANER_SOURCE", raising=False)
    failed = post_deploy(prefix)
    assert failed.startswith("FAILED") and "set LEANER_SOURCE=" in failed, failed
    monkeypatch.setenv("LEANER_SOURCE", str(tmp_path / "scratch"))
    failed = post_deploy(prefix)
    assert failed.startswith("FAILED") and "is not the leaner workflow" in failed, failed

    monkeypatch.setenv("LEANER_SOURCE", str(source))
    assert post_deploy(prefix) == "ok"
    check_installed_from(prefix, source, run_dir)

    inside = source / "results" / "run"
    inside.mkdir(parents=True)
    monkeypatch.chdir(inside)
    monkeypatch.delenv("LEANER_SOURCE")
    assert post_deploy(prefix) == "ok"
    check_installed_from(prefix, source, run_dir)


def test_pip_step_needs_every_dependency_pinned(tmp_path):
    """The check above has teeth: with one pin that another pin depends on left out of both the
    pip part and the installed set, pip (offline) fails on it."""
    dists = installed_pins()
    pinned = {canonicalize_name(Requirement(pin).name) for pin in lock_lines()}
    needed = sorted({canonicalize_name(Requirement(r).name) for d in dists for r in d.requires or ()
                     if "extra ==" not in r} & pinned)
    drop = needed[0]
    kept = [d for d in dists if canonicalize_name(d.metadata["Name"]) != drop]
    _, pip = create_env(tmp_path, kept, pip_part_of=lambda f: [p for p in pip_part(f)
                                                               if canonicalize_name(Requirement(p).name) != drop])
    assert pip.returncode != 0 and "No matching distribution" in pip.stderr, pip.stdout[-2000:]
    assert re.search(r"[-_.]".join(map(re.escape, drop.split("-"))), pip.stderr, re.IGNORECASE), pip.stderr
