"""The hub preflight: `datasets.load_dataset_builder` run for real on local stand-ins of hub
datasets (a folder with a loading script, which datasets 4+ refuses as it refuses one on the hub;
a folder of parquet files, which loads), the hub's gated and unreachable answers put in its
client's place, and the check at the start of a real Snakemake run."""

from __future__ import annotations

import pytest
import yaml
from huggingface_hub.utils import httpx  # the HTTP library of the pinned huggingface_hub

from leaner.data.hub_check import (
    PARQUET_REVISION,
    PROBLEM,
    check_lines,
    hub_problem,
    hub_problems,
    manifest_path,
    skip_reason,
)

from conftest import BIN, TINY, parquet_image_dataset, run, snakemake

pytestmark = pytest.mark.slow


def _scripted(root):
    """A dataset folder that ships a loading script `<folder name>.py`, as ILSVRC/imagenet-1k did."""
    folder = root / "imagenet-1k"
    folder.mkdir(parents=True)
    (folder / "imagenet-1k.py").write_text("import datasets\n\nclass Imagenet1k(datasets.GeneratorBasedBuilder):\n"
                                           "    pass\n")
    return folder


def _hub(name, **extra):
    return {"kind": "hub", "name": str(name), "subset": None, "num_classes": 3, **extra}


def test_a_dataset_with_a_loading_script_gets_one_line_saying_what_to_do(tmp_path):
    line = hub_problem("imagenet1k", _hub(_scripted(tmp_path)))
    assert line is not None and "\n" not in line
    assert line.startswith(f"{PROBLEM} datasets.imagenet1k: {tmp_path / 'imagenet-1k'}: it ships a loading script")
    assert "Dataset scripts are no longer supported, but found imagenet-1k.py" in line  # the library's own words
    for fix in ("revision: refs/convert/parquet", "kind: imagefolder with path: a local copy", "datasets<4"):
        assert fix in line, line
    # text and GLUE name their own local copies
    text = hub_problem("stories", {"kind": "text", "source": "hub", "name": str(tmp_path / "imagenet-1k")})
    assert "source: files with path: a local copy (train.txt, validation.txt)" in text


def test_a_loadable_dataset_passes_and_a_missing_subset_is_named(tmp_path):
    folder = parquet_image_dataset(tmp_path)
    assert hub_problem("pictures", _hub(folder)) is None
    glue = {"kind": "glue", "source": "hub", "name": str(folder), "tasks": ["cola"]}
    line = hub_problem("glue", glue)
    assert line.startswith(f"{PROBLEM} datasets.glue: {folder} (cola): subset 'cola' does not exist"), line
    assert "BuilderConfig 'cola' not found" in line


def test_every_family_loads_the_configured_revision(monkeypatch, tmp_path):
    """Images, text and GLUE from the hub all load through load_hub_split, with the config's revision."""
    import datasets

    from leaner.data.glue import _load as load_glue
    from leaner.data.image_prep import load_split as load_images
    from leaner.data.text import load_text_split

    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: asked.append((args, kwargs)))
    pinned = {"name": "user/set", "revision": PARQUET_REVISION}
    load_images({**pinned, "kind": "hub", "subset": "full"}, "train")
    load_text_split({**pinned, "kind": "text", "subset": None}, "validation")
    load_glue({**pinned, "kind": "glue", "source": "hub"}, "cola", "train")
    assert asked == [(("user/set", "full"), {"split": "train", "revision": PARQUET_REVISION}),
                     (("user/set", None), {"split": "validation", "revision": PARQUET_REVISION}),
                     (("user/set", "cola"), {"split": "train", "revision": PARQUET_REVISION})]


@pytest.fixture
def online(monkeypatch):
    """The hub's client as if this machine were online (the tests' session is offline)."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)


def _hub_answers(monkeypatch, exc):
    """The hub answering every request for a file with `exc` (in place of huggingface_hub's client)."""
    import huggingface_hub

    def answer(self, repo_id, filename, **kwargs):
        raise exc

    monkeypatch.setattr(huggingface_hub.HfApi, "hf_hub_download", answer)


def _gated(status):
    from huggingface_hub.errors import GatedRepoError

    url = "https://huggingface.co/datasets/ILSVRC/imagenet-1k/resolve/main/README.md"
    response = httpx.Response(status, request=httpx.Request("GET", url))
    return GatedRepoError(f"{status} Client Error. Cannot access gated repo for url {url}.", response=response)


def test_a_gated_dataset_says_to_log_in_or_to_ask_for_access(monkeypatch, online):
    spec = _hub("ILSVRC/imagenet-1k")
    _hub_answers(monkeypatch, _gated(401))
    line = hub_problem("imagenet1k", spec)
    assert line.startswith(f"{PROBLEM} datasets.imagenet1k: ILSVRC/imagenet-1k: it is gated on the hub and this "
                           "machine is not logged in"), line
    assert "`hf auth login`" in line and "https://huggingface.co/datasets/ILSVRC/imagenet-1k" in line
    _hub_answers(monkeypatch, _gated(403))
    assert "has not been granted access (fix: ask for access at https://huggingface.co/datasets/ILSVRC/imagenet-1k" \
        in hub_problem("imagenet1k", spec)


def test_no_network_and_offline_mode_are_said_as_such(monkeypatch, online):
    spec = _hub("ILSVRC/imagenet-1k", revision="refs/convert/parquet")
    _hub_answers(monkeypatch, httpx.ConnectError("[Errno -2] Name or service not known"))
    line = hub_problem("imagenet1k", spec)
    assert line.startswith(f"{PROBLEM} datasets.imagenet1k: ILSVRC/imagenet-1k at refs/convert/parquet: the hub "
                           "cannot be reached from here, no network"), line
    assert "LEANER_SKIP_DATA_CHECK=1" in line
    monkeypatch.undo()  # the session's own offline mode (HF_DATASETS_OFFLINE=1), asked for real
    line = hub_problem("imagenet1k", spec)
    assert "offline mode is on (HF_DATASETS_OFFLINE or HF_HUB_OFFLINE) and it is not in the local cache" in line


def test_the_check_is_skipped_offline_or_when_asked():
    assert skip_reason({}) is None and skip_reason({"LEANER_SKIP_DATA_CHECK": "0"}) is None
    assert skip_reason({"LEANER_SKIP_DATA_CHECK": "1"}) == "LEANER_SKIP_DATA_CHECK=1"
    assert skip_reason({"HF_DATASETS_OFFLINE": "1"}) == "HF_DATASETS_OFFLINE=1"
    assert skip_reason({"HF_HUB_OFFLINE": "true"}) == "HF_HUB_OFFLINE=true"


def test_a_prepared_dataset_is_not_asked_again(tmp_path):
    specs = {"imagenet1k": _hub(_scripted(tmp_path)), "digits": {"kind": "digits"}}
    assert len(hub_problems(specs, tmp_path)) == 1
    manifest = manifest_path(tmp_path, "imagenet1k")
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    assert hub_problems(specs, tmp_path) == []
    assert check_lines(specs, tmp_path) == [f"datasets.imagenet1k: prepared already ({manifest})",
                                            "datasets.digits: not from the hub, nothing to ask"]


def _config(tmp_path, datasets: dict) -> str:
    """The tiny config's ViT study on each of `datasets` (8x8 grey images, 3 classes)."""
    cfg = yaml.safe_load(TINY.read_text())
    study = cfg["studies"].pop("tiny")
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1], "mlp_ratio": [2],
                     "seeds": [0]}
    cfg["studies"] = {f"on_{name}": {**study, "dataset": name} for name in datasets}
    cfg["datasets"] = {name: {"kind": "hub", "name": str(folder), "num_classes": 3, "img_size": 8, "in_chans": 1,
                              "mean": [0.5], "std": [0.25]} for name, folder in datasets.items()}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_leaner_check_data_lists_each_dataset_and_fails_on_one_that_cannot_load(tmp_path):
    config = _config(tmp_path, {"imagenet1k": _scripted(tmp_path), "pictures": parquet_image_dataset(tmp_path)})
    proc = run([str(BIN / "leaner"), "check-data", str(config)], tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    import datasets

    assert proc.stdout.splitlines() == [f"datasets.pictures: ok, {tmp_path / 'pictures'} loads with datasets "
                                        f"{datasets.__version__}"]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROBLEM} datasets.imagenet1k: "), proc.stderr


def test_a_run_stops_at_its_start_with_the_one_line_before_any_job(tmp_path, monkeypatch):
    """Snakemake's onstart asks before any job; dry runs do not ask; LEANER_SKIP_DATA_CHECK=1 lets
    the run go on (and the data job then fails on the same dataset, hours later in a real sweep)."""
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    config = _config(tmp_path, {"imagenet1k": _scripted(tmp_path), "pictures": parquet_image_dataset(tmp_path)})
    work = tmp_path / "work"
    work.mkdir()
    proc = snakemake(work, "--cores", "2", configfile=config, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith(PROBLEM)]
    assert len(lines) == 1 and lines[0].startswith(f"{PROBLEM} datasets.imagenet1k: "), proc.stderr[-3000:]
    assert "refs/convert/parquet" in lines[0] and "Traceback" not in proc.stderr
    assert not (work / "results").exists() and not (work / "logs").exists()  # no job ran
    assert "Finished job" not in proc.stderr and "Finished jobid" not in proc.stderr

    assert snakemake(work, "-n", "--cores", "2", configfile=config).returncode == 0

    monkeypatch.setenv("LEANER_SKIP_DATA_CHECK", "1")
    target = "results/data/imagenet1k/manifest.json"
    proc = snakemake(work, target, "--cores", "1", configfile=config, check=False)
    assert proc.returncode == 1 and lines[0] not in proc.stderr
    assert "Dataset scripts are no longer supported" in (work / "logs" / "prepare_data" / "imagenet1k.log").read_text()
