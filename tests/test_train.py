"""The training loop: outputs, determinism, resume after a real kill, divergence."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from leaner.schema import Recipe
from leaner.training.optim import lr_at
from leaner.training.resume import RESUME_DIR, RESUME_FILE, rng_state, set_rng_state
from leaner.training.train import train
from leaner.training.weights import kept_steps

from conftest import BIN, REPO, kill_after_checkpoint, saved_checkpoint, small_spec

pytestmark = pytest.mark.fast


def _weights(path):
    return load_file(str(path))


def _same_weights(a, b) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_outputs_and_metrics_schema(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"].update(epochs=8, lr=1e-2)
    metrics = train(spec, str(digits_manifest), tmp_path, progress=False)
    for name in ("model.safetensors", "init.safetensors", "history.csv", "metrics.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert not (tmp_path / RESUME_DIR).exists()  # removed once the outputs are final
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(metrics))
    for key in ("study", "variant", "spec", "params", "status", "final", "best", "steps", "wall_time_s",
                "throughput_samples_per_s", "peak_memory_mb", "device", "versions", "seed"):
        assert key in on_disk, key
    assert on_disk["status"] == "ok" and on_disk["device"] == "cpu"
    # the recipe asks for bf16 (the default); the CPU computes in fp32, and the record says so
    assert spec["recipe"]["precision"] == "bf16" and (on_disk["precision"], on_disk["tf32"]) == ("fp32", False)
    assert on_disk["steps"] == 8 * math.ceil(1438 / 64)
    assert set(on_disk["params"]) == {"attention", "mlp", "embedding", "head", "norm", "total"}
    assert on_disk["params"]["attention"] == 16 * 48 + 48 + 16 * 16 + 16
    history = pd.read_csv(tmp_path / "history.csv")
    assert list(history["epoch"]) == list(range(1, 9))
    assert history["eval_acc"].between(0, 1).all()
    # eight epochs of a tiny ViT beat chance clearly: the majority label of digits' 359 test images
    chance = on_disk["chance"]
    assert chance["metric"] == "eval_acc" and chance["n"] == 359 and 0.1 <= chance["value"] < 0.12
    assert on_disk["final"]["eval_acc"] > 0.3
    assert not _same_weights(tmp_path / "init.safetensors", tmp_path / "model.safetensors")


def test_same_seed_same_result(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"]["max_steps"] = 15
    train(spec, str(digits_manifest), tmp_path / "a", progress=False)
    train(spec, str(digits_manifest), tmp_path / "b", progress=False)
    assert _same_weights(tmp_path / "a" / "model.safetensors", tmp_path / "b" / "model.safetensors")


@pytest.mark.slow
def test_the_same_weights_are_the_same_bytes_in_any_process(tmp_path):
    """The sha256 metrics.json records of the weights holds across re-runs: three processes save
    the same model to byte-identical files, whose one metadata key is the spec (several keys come
    out in a hash map's order, which changes from one process to the next)."""
    save = ("import sys, torch; from leaner.models import build_model; from leaner.training.weights import "
            "save_weights; from conftest import small_spec; torch.manual_seed(0); spec = small_spec(); "
            "save_weights(build_model(spec['model']), sys.argv[1], spec)")
    paths = [tmp_path / f"w{i}.safetensors" for i in range(3)]
    for path in paths:
        subprocess.run([sys.executable, "-c", save, str(path)], check=True, cwd=REPO / "tests")
    assert len({path.read_bytes() for path in paths}) == 1
    header = paths[0].read_bytes()[8:8 + int.from_bytes(paths[0].read_bytes()[:8], "little")]
    assert json.loads(json.loads(header)["__metadata__"]["spec"]) == small_spec()
    assert list(json.loads(header)["__metadata__"]) == ["spec"]


def test_warmup_then_cosine():
    recipe = Recipe.of({"lr": 1.0, "min_lr": 0.0, "warmup_frac": 0.1})
    lrs = [lr_at(s, 100, recipe) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] < 0.01


@pytest.mark.slow
def test_killed_training_resumes_and_ends_identical(tmp_path, digits_manifest):
    """SIGKILL a real `leaner train` after its first checkpoint; the re-run resumes from the
    checkpoint (its log says so) and ends bit-identical to an uninterrupted run."""
    spec = small_spec()
    spec["recipe"].update(epochs=6, checkpoint_every=10)
    spec["conditioning"]["steps"] = [3, 0.3]  # kept before the kill (3) and after the resume (41 of 138)
    args = ["--spec", json.dumps(spec), "--data", str(digits_manifest), "--threads", "1", "--no-progress"]
    subprocess.run([str(BIN / "leaner"), "train", *args, "--out", str(tmp_path / "ref")], check=True,
                   capture_output=True)

    out = tmp_path / "killed"
    proc = subprocess.Popen([str(BIN / "leaner"), "train", *args, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = out / RESUME_DIR / RESUME_FILE
    kill_after_checkpoint(proc, ckpt)
    assert saved_checkpoint(ckpt) and not (out / "metrics.json").exists(), "the kill came too late to test resume"

    rerun = subprocess.run([str(BIN / "leaner"), "train", *args, "--out", str(out)], capture_output=True,
                           text=True, check=True)
    assert "resumed from step" in rerun.stderr
    assert _same_weights(tmp_path / "ref" / "model.safetensors", out / "model.safetensors")
    ref = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    got = json.loads((out / "metrics.json").read_text())
    assert got["final"] == ref["final"] and got["steps"] == ref["steps"]
    assert [c["name"] for c in got["checkpoints"]] == ["step3", "step41"]
    # same files, same weights (not always the same bytes: safetensors writes its metadata map in
    # a per-process hash order, so the sha256 is an integrity check, not a reproducibility one)
    assert [c["file"] for c in got["checkpoints"]] == [c["file"] for c in ref["checkpoints"]]
    for kept in got["checkpoints"]:
        assert _same_weights(tmp_path / "ref" / kept["file"], out / kept["file"])
    assert not list((out / "checkpoints").glob(".*"))  # no temporary left behind
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "ref" / "history.csv").drop(columns="elapsed_s"),
                                  pd.read_csv(out / "history.csv").drop(columns="elapsed_s"))


def _gpus(monkeypatch, n: int, own: int) -> dict:
    """A stand-in for n GPUs' RNG generators (torch.cuda is absent here), this process on GPU
    `own`; GPU i's state starts as [i, 0]. Returns the generators' states by GPU."""
    states = {i: torch.tensor([i, 0], dtype=torch.uint8) for i in range(n)}

    def set_rng_state(state, device):
        assert device in states, f"no GPU {device} among {n}"
        states[device] = state.clone()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: own)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: states[device].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    return states


@pytest.mark.parametrize("saved_on, resumed_on, after", [
    ((2, 1), (1, 0), {0: [1, 7]}),  # GPU 1 of 2, then the only GPU of a node
    ((1, 0), (4, 2), {0: [0, 0], 1: [1, 0], 2: [0, 7], 3: [3, 0]}),  # the only GPU, then GPU 2 of 4
    ((3, 2), (3, 0), {0: [2, 7], 1: [0, 0], 2: [1, 0]}),  # GPU 2, then GPU 0 of the same three
])
def test_gpu_rng_states_resume_on_another_number_of_gpus(monkeypatch, saved_on, resumed_on, after):
    """A run requeued onto a node with fewer or more GPUs (or onto another GPU) goes on drawing
    from its own GPU's stream: the state of the GPU it trained on goes to the GPU it trains on
    now, the others in order as far as both have GPUs; a changed count is one warning line."""
    (n_saved, own_saved), (n_now, own_now) = saved_on, resumed_on
    before = _gpus(monkeypatch, n_saved, own_saved)
    before[own_saved][1] = 7  # the stream this run drew from
    state = rng_state()
    assert [s.tolist() for s in state["cuda"]][0] == [own_saved, 7] and len(state["cuda"]) == n_saved

    now, log = _gpus(monkeypatch, n_now, own_now), []
    set_rng_state(state, log.append)
    assert {i: s.tolist() for i, s in now.items()} == after
    if n_saved == n_now:
        assert log == []
    else:
        assert log == [f"warning: checkpoint has the RNG states of {n_saved} GPU(s), this process sees {n_now}; "
                       f"restoring {min(n_saved, n_now)}, its own GPU's first"]


def test_a_process_that_never_used_cuda_saves_no_gpu_rng_state(monkeypatch):
    _gpus(monkeypatch, 2, 0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # a CPU job on a GPU node
    assert "cuda" not in rng_state()


def test_kept_steps_are_steps_or_fractions_of_the_run():
    assert kept_steps([0.02, 0.5, 10, 0.5001, 500, 1000], 1000) == [10, 20, 500]
    assert kept_steps([0.001], 100) == [1]  # a fraction rounds to at least step 1
    assert kept_steps([], 100) == []


def test_weights_kept_during_training_are_the_weights_at_that_step(tmp_path, digits_manifest):
    """At a constant learning rate the weights kept at step 7 of a 20-step run are bit-identical
    to the final weights of the same run stopped at step 7, and conditioning measures them."""
    from leaner.measure.conditioning import write_conditioning

    spec = small_spec()
    spec["recipe"].update(lr=2e-3, min_lr=2e-3, warmup_frac=0.0, max_steps=20)
    spec["conditioning"]["steps"] = [7, 0.5]
    long = train(spec, str(digits_manifest), tmp_path / "long", progress=False)
    assert [(c["name"], c["step"]) for c in long["checkpoints"]] == [("step7", 7), ("step10", 10)]
    short_spec = {**spec, "recipe": {**spec["recipe"], "max_steps": 7},
                  "conditioning": {**spec["conditioning"], "steps": []}}
    short = train(short_spec, str(digits_manifest), tmp_path / "short", progress=False)
    assert short["checkpoints"] == []
    assert _same_weights(tmp_path / "long" / "checkpoints" / "step7.safetensors",
                         tmp_path / "short" / "model.safetensors")

    out = tmp_path / "long"
    write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                       str(digits_manifest), str(out / "conditioning.csv"))
    cond = pd.read_csv(out / "conditioning.csv")
    assert list(dict.fromkeys(cond["checkpoint"])) == ["init", "step7", "step10", "final"]
    assert list(dict.fromkeys(cond["step"])) == [0, 7, 10, 20]
    write_conditioning(str(tmp_path / "short" / "metrics.json"), str(tmp_path / "short" / "init.safetensors"),
                       str(tmp_path / "short" / "model.safetensors"), str(digits_manifest),
                       str(tmp_path / "short.csv"))
    short_final = pd.read_csv(tmp_path / "short.csv").query("checkpoint == 'final'")
    step7 = cond.query("checkpoint == 'step7'")
    assert step7["kappa_median"].tolist() == short_final["kappa_median"].tolist()

    (out / "checkpoints" / "step10.safetensors").write_bytes(b"replaced")
    with pytest.raises(ValueError, match="sha256"):
        write_conditioning(str(out / "metrics.json"), str(out / "init.safetensors"), str(out / "model.safetensors"),
                           str(digits_manifest), str(out / "conditioning2.csv"))


def test_weights_kept_by_a_killed_run_of_another_spec_are_not_published(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"]["max_steps"] = 6
    spec["conditioning"]["steps"] = [3]
    stale = tmp_path / RESUME_DIR / "checkpoints"
    stale.mkdir(parents=True)
    (stale / "step5.safetensors").write_bytes(b"from a run with other settings")
    metrics = train(spec, str(digits_manifest), tmp_path, progress=False)
    assert [c["name"] for c in metrics["checkpoints"]] == ["step3"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step3.safetensors"]


def test_corrupt_resume_checkpoint_starts_fresh(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"]["max_steps"] = 5
    (tmp_path / RESUME_DIR).mkdir(parents=True)
    (tmp_path / RESUME_DIR / RESUME_FILE).write_bytes(b"PK\x03\x04 truncated")
    metrics = train(spec, str(digits_manifest), tmp_path, progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 5


def test_divergence_is_a_status_not_a_crash(tmp_path, digits_manifest):
    spec = small_spec()
    spec["recipe"].update(lr=1e12, warmup_frac=0.0, epochs=3)
    metrics = train(spec, str(digits_manifest), tmp_path, progress=False)
    assert metrics["status"] == "diverged"
    assert metrics["steps"] < 3 * math.ceil(1438 / 64)
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "diverged"
    assert (tmp_path / "model.safetensors").exists()


def _nan_from(monkeypatch, first_bad: int) -> None:
    """Make the image task's loss NaN from its `first_bad`-th call (0-based) on."""
    from leaner.tasks.image import ImageClassification

    real, calls = ImageClassification.loss, [0]

    def loss(self, model, batch):
        value, n = real(self, model, batch)
        calls[0] += 1
        return (value * math.nan if calls[0] > first_bad else value), n

    monkeypatch.setattr(ImageClassification, "loss", loss)


@pytest.mark.parametrize("sync_every", [1, 7])
def test_a_late_divergence_check_stops_at_the_first_bad_step_with_its_weights(tmp_path, digits_manifest,
                                                                              monkeypatch, capsys, sync_every):
    """The loss turns NaN at step 10. Checked on every step or only every 7th (as on a GPU, where a
    check is a host sync), the run is `diverged` at step 10 with the weights after steps 0-9: the
    device-side flag skips every optimiser update from the bad step on."""
    spec = small_spec()
    spec["recipe"].update(epochs=2, sync_every=sync_every)
    spec["conditioning"]["steps"] = [5, 12]  # 12 comes after the bad step: not a step the run trained
    clean = small_spec()
    clean["recipe"].update(epochs=2)
    clean["conditioning"]["steps"] = [10]  # keeps the weights after step 10
    train(clean, str(digits_manifest), tmp_path / "clean", progress=False)
    _nan_from(monkeypatch, 10)
    metrics = train(spec, str(digits_manifest), tmp_path / "bad", progress=False)
    assert metrics["status"] == "diverged" and metrics["steps"] == 10 and metrics["diverged_at_step"] == 10
    found = 13 if sync_every == 7 else 10  # the check after step index 13 is the first after 10
    assert f"loss is not finite at step 10 (found at step {found})" in capsys.readouterr().err
    step10 = tmp_path / "clean" / "checkpoints" / "step10.safetensors"
    assert _same_weights(tmp_path / "bad" / "model.safetensors", step10)
    assert [c["name"] for c in metrics["checkpoints"]] == ["step5"]
    assert sorted(p.name for p in (tmp_path / "bad" / "checkpoints").iterdir()) == ["step5.safetensors"]
    history = pd.read_csv(tmp_path / "bad" / "history.csv")
    assert history["step"].tolist() == [10]
    # the logged loss is the mean over the steps that trained (0-9), not NaN
    assert 1.0 < history["train_loss"].iloc[0] < 2.5


def test_syncing_less_often_changes_nothing_but_rounding(tmp_path, digits_manifest):
    """sync_every only decides when the host reads the device's sums: same weights, bit for bit,
    and the same logged losses up to float64 rounding."""
    runs = {}
    for k in (1, 5):
        spec = small_spec()
        spec["recipe"].update(epochs=2, sync_every=k)
        runs[k] = train(spec, str(digits_manifest), tmp_path / f"k{k}", progress=False)
    assert _same_weights(tmp_path / "k1" / "model.safetensors", tmp_path / "k5" / "model.safetensors")
    a, b = (pd.read_csv(tmp_path / f"k{k}" / "history.csv") for k in (1, 5))
    assert a["train_loss"].tolist() == pytest.approx(b["train_loss"].tolist(), rel=1e-12)
    assert runs[1]["final"]["eval_acc"] == runs[5]["final"]["eval_acc"]


def test_expected_parameter_count_is_enforced(tmp_path, digits_manifest):
    spec = small_spec()
    spec["expect_params"] = {"params": 10, "tolerance": 0}
    with pytest.raises(ValueError, match="expects 10"):
        train(spec, str(digits_manifest), tmp_path, progress=False)


def test_the_log_and_metrics_say_which_code_ran(tmp_path, digits_manifest, capsys):
    """A header line (code, device, threads, parameters, start step) opens the log, and
    metrics.json records the commit of this checkout and whether its tracked files differed."""
    from conftest import REPO

    spec = small_spec()
    spec["recipe"]["max_steps"] = 2
    metrics = train(spec, str(digits_manifest), tmp_path, progress=False)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("[unit/v] leaner 0.1.0") and "device cpu" in first and "step 0 of 2" in first
    assert f"{metrics['params']['total']:,} parameters" in first
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert metrics["code"]["commit"] == head.stdout.strip(), metrics["code"]
    assert isinstance(metrics["code"]["dirty"], bool) and metrics["code"]["why"] is None, metrics["code"]
    version = subprocess.run([str(BIN / "leaner"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith(f"leaner 0.1.0 (commit {head.stdout[:10]}")


PROVENANCE = ("import json, leaner.provenance as p; s = p.code_state(); "
              "print(json.dumps({**s, 'described': p.describe()}))")


def test_the_commit_is_the_checkouts_whatever_git_variables_say_and_a_missing_one_says_why(tmp_path):
    """A caller's GIT_DIR or GIT_CEILING_DIRECTORIES (a git hook's, a CI's) does not move the
    recorded commit; where git cannot answer, the record and `leaner --version` say why."""
    from conftest import REPO

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    env = {**os.environ, "GIT_DIR": str(tmp_path / "elsewhere"), "GIT_CEILING_DIRECTORIES": str(REPO.parent)}
    run = subprocess.run([sys.executable, "-c", PROVENANCE], env=env, capture_output=True, text=True, check=True)
    state = json.loads(run.stdout)
    assert state["commit"] == head.stdout.strip() and state["why"] is None, state
    empty = tmp_path / "bin"  # a PATH without git
    empty.mkdir()
    run = subprocess.run([sys.executable, "-c", PROVENANCE], env={**os.environ, "PATH": str(empty)},
                         capture_output=True, text=True, check=True)
    state = json.loads(run.stdout)
    assert state["commit"] is None and state["dirty"] is None and state["why"] == "no git on PATH", state
    assert state["described"] == "leaner 0.1.0 (commit unknown: no git on PATH)"


def test_progress_in_a_log_file_is_lines_not_carriage_return_frames(tmp_path, digits_manifest):
    from leaner.training.progress import LineProgress

    lines = []
    bar = LineProgress(10, 0, lines.append, every=0.0)
    for _ in range(10):
        bar.update(1)
    assert lines[0].startswith("step 1/10 (10%), ") and lines[-1].startswith("step 10/10 (100%)")
    spec = small_spec()
    spec["recipe"]["max_steps"] = 5
    with open(tmp_path / "train.log", "w") as log:
        proc = subprocess.run([str(BIN / "leaner"), "train", "--spec", json.dumps(spec), "--data",
                               str(digits_manifest), "--out", str(tmp_path / "run")], stderr=log)
    assert proc.returncode == 0
    text = (tmp_path / "train.log").read_text()
    assert "\r" not in text and "[unit/v] leaner 0.1.0" in text.splitlines()[0]


def test_tensorboard_events_hold_the_history_and_the_heartbeat_goes_at_the_end(tmp_path, digits_manifest):
    """TensorBoard's own event files beside history.csv hold every history column against the
    step (float32); progress.json is removed once metrics.json says how the run ended."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = small_spec()
    spec["recipe"].update(epochs=3)
    train(spec, str(digits_manifest), tmp_path, progress=False)
    history = pd.read_csv(tmp_path / "history.csv")
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["eval/acc", "eval/loss", "lr", "train/loss"]
    for tag, column in (("train/loss", "train_loss"), ("eval/acc", "eval_acc"), ("lr", "lr")):
        logged = events.Scalars(tag)
        assert [e.step for e in logged] == history["step"].tolist() == [23, 46, 69]
        assert [e.value for e in logged] == pytest.approx(history[column].tolist(), rel=1e-6)
    assert not (tmp_path / "progress.json").exists()
    # a fresh start in the same folder (another spec: nothing to resume) supersedes the old events
    spec["recipe"].update(lr=5e-3)
    train(spec, str(digits_manifest), tmp_path, progress=False)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    logged = events.Scalars("train/loss")
    assert [e.step for e in logged] == [23, 46, 69]
    assert [e.value for e in logged] == pytest.approx(pd.read_csv(tmp_path / "history.csv")["train_loss"].tolist(),
                                                      rel=1e-6)


def test_history_grows_each_epoch_and_a_failure_leaves_a_failed_heartbeat(tmp_path, digits_manifest, monkeypatch):
    """An error in epoch 3: history.csv already holds epochs 1-2 (rewritten at each epoch, not
    at the end), and progress.json says failed, at which step, with the error."""
    from leaner.tasks.image import ImageClassification

    real, calls = ImageClassification.loss, [0]

    def loss(self, model, batch):
        calls[0] += 1
        if calls[0] > 50:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(self, model, batch)

    monkeypatch.setattr(ImageClassification, "loss", loss)
    spec = small_spec()
    spec["recipe"].update(epochs=4)
    with pytest.raises(RuntimeError, match="simulated"):
        train(spec, str(digits_manifest), tmp_path, progress=False)
    assert pd.read_csv(tmp_path / "history.csv")["step"].tolist() == [23, 46]
    beat = json.loads((tmp_path / "progress.json").read_text())
    assert beat["state"] == "failed" and beat["step"] == 50 and beat["total_steps"] == 92
    assert beat["detail"] == "RuntimeError: CUDA out of memory (simulated)" and 1.0 < beat["loss"] < 2.5
    assert not (tmp_path / "metrics.json").exists()


def test_a_gpu_without_bf16_is_refused_in_one_line_and_fp32_sets_tf32(monkeypatch):
    """A stand-in for a GPU without bf16 (a V100): precision bf16 stops before training with one
    line; precision fp32 runs, with TF32 as the recipe says."""
    from leaner.training.step import set_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    cuda = torch.device("cuda", 0)
    with pytest.raises(ValueError) as err:
        set_precision(cuda, Recipe.of({"precision": "bf16", "tf32": True}))
    assert str(err.value) == ("recipe.precision bf16: Tesla V100-SXM2-32GB does not support bf16 "
                              "(allowed here: precision fp32)")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for tf32 in (False, True):
            made = set_precision(cuda, Recipe.of({"precision": "fp32", "tf32": tf32}))
            assert made == {"precision": "fp32", "tf32": tf32}
            assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_checkpoint_minutes_adds_checkpoints_by_wall_time(tmp_path, digits_manifest, monkeypatch):
    """checkpoint_every 5 over 22 steps: a state at 5, 10, 15, 20, whatever checkpoint_minutes
    says; with a millisecond, at every step as well (each step is later than that); auto, for
    this model's 2,794 parameters, is 7 minutes (the run is far shorter)."""
    from leaner.training.resume import RunState, checkpoint_minutes

    saved: list[int] = []
    real = RunState.save
    monkeypatch.setattr(RunState, "save", lambda self, out: (saved.append(self.step), real(self, out))[1])
    spec = small_spec()
    spec["recipe"].update(epochs=1, max_steps=22, checkpoint_every=5)
    for minutes, want in ((None, [5, 10, 15, 20]), ("auto", [5, 10, 15, 20]), (60.0, [5, 10, 15, 20]),
                          (1e-5, list(range(1, 22)))):
        saved.clear()
        spec["recipe"]["checkpoint_minutes"] = minutes
        train(spec, str(digits_manifest), tmp_path / str(minutes), progress=False)
        assert saved == want, (minutes, saved)
    assert checkpoint_minutes("auto", 2_794) == pytest.approx(6.93, abs=0.01)
    assert checkpoint_minutes("auto", 600_000_000) == pytest.approx(42.1, abs=0.1)  # a 7 GB state
    assert checkpoint_minutes("auto", 10**11) == 60.0 and checkpoint_minutes(12.5, 10**11) == 12.5


def test_accumulated_micro_batches_train_as_the_whole_batch(tmp_path):
    """P2 at toy size, batch 64 as 4 micro-batches of 16: the same losses and weights as the whole
    batch at once, up to float32 summation order (the key bias aside: softmax ignores it, so its
    gradient is rounding noise, which AdamW scales up to steps of lr); a batch too small to cut is
    one line."""
    from conftest import nearest_setup

    spec, manifest = nearest_setup(tmp_path, recipe={"epochs": 2, "steps_per_epoch": 10})
    whole = train(spec, str(manifest), tmp_path / "whole", progress=False)
    spec["recipe"]["accumulate"] = 4
    parts = train(spec, str(manifest), tmp_path / "parts", progress=False)
    assert parts["best"]["train_loss"] == pytest.approx(whole["best"]["train_loss"], rel=1e-5)
    wa, wb = _weights(tmp_path / "whole" / "model.safetensors"), _weights(tmp_path / "parts" / "model.safetensors")
    d = spec["model"]["d_model"]
    for w in (wa, wb):
        w["blocks.0.attn.in_proj_bias"][..., d:2 * d] = 0  # the key bias
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-4, atol=1e-5, msg=key)
    spec["recipe"]["accumulate"] = 65
    with pytest.raises(ValueError) as err:
        train(spec, str(manifest), tmp_path / "bad", progress=False)
    assert str(err.value) == ("recipe.accumulate 65: a batch of 64 samples in this process cannot be cut into 65 "
                              "micro-batches (allowed: accumulate <= batch_size / processes)")


def test_a_wall_budget_stops_at_the_first_epochs_end_past_it_on_the_full_schedule(tmp_path, monkeypatch):
    """recipe.wall_budget_minutes, the authors' regime for figN: P2 at toy size, 4 epochs of 10
    steps, a clock that makes each step take 1 s and a budget of 0.4 min (24 s): training stops at
    the end of epoch 3 (30 s), the first epoch's end past it, with the learning rates of the full
    4-epoch schedule (the weights equal the full run's at step 30), status ok and the stop in
    metrics.json; the spec of a recipe without a budget does not name the key (specs planned before
    it stay the same bytes)."""
    import time
    import types

    import leaner.training.train as trainer
    from leaner.schema import recipe_spec

    from conftest import nearest_setup

    spec, manifest = nearest_setup(tmp_path, recipe={"epochs": 4, "steps_per_epoch": 10})
    spec["conditioning"]["steps"] = [30]
    full = train(spec, str(manifest), tmp_path / "full", progress=False)
    assert "wall_budget" not in full and full["steps"] == 40
    clock = {"s": 0.0}  # the trainer's clock: one second a step
    one_step = trainer.one_step
    monkeypatch.setattr(trainer, "one_step", lambda *a: (clock.update(s=clock["s"] + 1), one_step(*a))[1])
    monkeypatch.setattr(trainer, "time", types.SimpleNamespace(perf_counter=lambda: clock["s"], time=time.time))
    spec["recipe"]["wall_budget_minutes"] = 0.4
    cut = train(spec, str(manifest), tmp_path / "cut", progress=False)
    assert cut["status"] == "ok" and cut["wall_budget"] == {"minutes": 0.4, "stopped_at_epoch": 3}
    assert (cut["steps"], cut["total_steps"]) == (30, 40)
    history = pd.read_csv(tmp_path / "cut" / "history.csv")
    assert list(history["epoch"]) == [1, 2, 3]
    assert _same_weights(tmp_path / "full" / "checkpoints" / "step30.safetensors",
                         tmp_path / "cut" / "model.safetensors")
    assert "wall_budget_minutes" not in recipe_spec(Recipe.of({}))
    assert recipe_spec(Recipe.of({"wall_budget_minutes": 240}))["wall_budget_minutes"] == 240
