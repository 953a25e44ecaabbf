"""Nothing runs that should not: YAML is loaded safely, checkpoints load as tensors only, and
config strings reach no shell."""

from __future__ import annotations

import os

import pytest
import torch
import yaml

from leaner.training.resume import RESUME_DIR, RESUME_FILE
from leaner.training.train import train
from leaner.workflow.config import ConfigError, load_yaml

from conftest import BIN, REPO, run, small_spec, snakemake

pytestmark = pytest.mark.slow


class _Payload:
    """Pickles to a call of os.system: what an unsafe loader would execute."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_yaml_with_python_tags_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f'studies: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(path)
    proc = run([str(BIN / "leaner"), "check-config", str(path)], cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_a_pickled_resume_checkpoint_is_not_executed(tmp_path, digits_manifest):
    """torch.load(weights_only=True): a checkpoint carrying code is refused, the run starts fresh."""
    marker = tmp_path / "pwned"
    (tmp_path / "out" / RESUME_DIR).mkdir(parents=True)
    torch.save({"spec": "x", "model": _Payload(marker)}, tmp_path / "out" / RESUME_DIR / RESUME_FILE)
    spec = small_spec()
    spec["recipe"]["max_steps"] = 3
    metrics = train(spec, str(digits_manifest), tmp_path / "out", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 3
    assert not marker.exists()


def test_config_strings_reach_no_shell(tmp_path):
    """A dataset path full of shell syntax is passed to the jobs as one quoted argument: the
    study runs on that folder and no command hidden in its name is executed."""
    evil = tmp_path / 'corpus; touch PWNED1 $(touch PWNED2) `touch PWNED3` "q" \'s\''
    evil.mkdir()
    stories = [f"Once upon a time there was a story number {i}." for i in range(200)]
    (evil / "train.txt").write_text("\n".join(stories) + "\n")
    (evil / "validation.txt").write_text("\n".join(stories[:20]) + "\n")
    config = {
        "datasets": {"corpus": {"kind": "text", "source": "files", "path": str(evil), "eval_tokens": 1024}},
        "studies": {"lm": {
            "description": "x; touch PWNED4 $(touch PWNED5)", "task": "language_model", "dataset": "corpus",
            "model": {"context": 16}, "recipe": {"epochs": 1, "steps_per_epoch": 3, "batch_size": 4},
            "conditioning": {"samples": 4},
            "grid": {"protocol": ["fixed_width"], "width": [8], "depth": [1], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]}}},
        "theory": {"draws": 2, "seed": 0, "tokens": [5], "head_dim": [2], "width": [8], "heads": [1, 2]},
    }
    path = tmp_path / "evil_config.yaml"
    path.write_text(yaml.safe_dump(config))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "results/lm/L1-H2-D8-hd4-mlp16-s0/conditioning.csv", "--cores", "1", configfile=path)
    manifest = (work / "results" / "data" / "corpus" / "manifest.json").read_text()
    assert "touch PWNED1" in manifest  # the path arrived whole, as data
    pwned = [p for root in (tmp_path, work, REPO) for p in root.rglob("PWNED*")]
    assert pwned == [], pwned


@pytest.mark.parametrize("failure", ["enospc", "torch_unexpected_pos"])
def test_a_full_disk_is_named_with_the_file_being_written(tmp_path, digits_manifest, monkeypatch, failure):
    """Out of space while the resume checkpoint is written: the error says so and names the
    file, whether the writer reports ENOSPC or, as torch.save does, only 'unexpected pos'; the
    temporary file is removed and no checkpoint is half-written."""
    import collections
    import errno

    from leaner import io
    from leaner.training import resume

    from conftest import small_spec

    def full(*args, **kwargs):
        if failure == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 118208 vs 118096")

    monkeypatch.setattr(resume.torch, "save", full)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(io.shutil, "disk_usage", lambda path: usage(2**30, 2**30, 0))
    spec = small_spec()
    spec["recipe"].update(max_steps=6, checkpoint_every=3)
    with pytest.raises(OSError, match=r"no space left on device writing .*\.resume/state\.pt \(0 MB free"):
        train(spec, str(digits_manifest), tmp_path, progress=False)
    assert not list((tmp_path / RESUME_DIR).glob("*.tmp")) and not (tmp_path / RESUME_DIR / RESUME_FILE).exists()
