"""The GPU path, on a machine with CUDA (every test here is skipped without one; CI has none).

Every task family trains a few steps in bf16 through the real CLI and Snakemake; conditioning on
the GPU equals the CPU's; a killed GPU run resumes and finishes close to an uninterrupted one; k
jobs of a jobs_per_gpu study train on one GPU at once; P2's points are drawn on the GPU as a pure
function of (seed, step); the step captured as a CUDA graph trains as the eager step does, and so
does each torch.compile mode; a late divergence check still stops at the first bad step."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml

from leaner.schema import Recipe

from conftest import TINY, kill_after_checkpoint, small_spec, snakemake
from test_sequence import _write_glue

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.workflow]


ONE_POINT = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [2], "mlp_ratio": [2], "seeds": [0]}


def _on_gpu(cfg: dict, share: int = 1) -> dict:
    """Every study of `cfg` on one GPU, `share` of its jobs at once on it (jobs_per_gpu)."""
    for study in cfg["studies"].values():
        study["resources"] = {**study.get("resources", {}), "gpu": 1, "threads": 1,
                              **({"jobs_per_gpu": share} if share > 1 else {})}
    return cfg


E2E_SHARE = 4  # the end-to-end run's jobs on the one GPU at once: its jobs are small, their start-up is its time


def test_every_task_family_trains_in_bf16_on_the_gpu(tmp_path, monkeypatch):
    """One variant of each task family (image, P2, ListOps, a language model, GLUE's pre-training and
    fine-tuning) through Snakemake up to each study's summary, every training and conditioning job
    on the GPU, E2E_SHARE of them at once on it (a study's jobs_per_gpu), as a sweep of small models
    runs: sized to finish within gpu-check's e2e section (90 s)."""
    import os

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("LEANER_GPU_LOCK_DIR", str(tmp_path / "locks"))
    cfg = _on_gpu(yaml.safe_load(TINY.read_text()), E2E_SHARE)
    seq = _on_gpu(yaml.safe_load((TINY.parent / "tiny_sequence.yaml").read_text()), E2E_SHARE)
    _write_glue(tmp_path / "glue")
    cfg["datasets"].update(seq["datasets"])
    cfg["datasets"]["glue_local"] = {"kind": "glue", "source": "files", "path": str(tmp_path / "glue"),
                                     "tasks": ["sst2", "stsb"], "max_length": 32}
    cfg["studies"].update(seq["studies"])
    cfg["studies"]["tiny_bert"] = {
        "task": "glue", "dataset": "stories", "model": {"context": 32},
        "recipe": {"epochs": 1, "steps_per_epoch": 10, "batch_size": 8, "lr": 5.0e-3},
        "finetune": {"dataset": "glue_local", "recipe": {"epochs": 1, "batch_size": 16, "lr": 1.0e-3}},
        "conditioning": {"samples": 16}, "resources": {"gpu": 1, "threads": 1, "jobs_per_gpu": E2E_SHARE},
        "grid": dict(ONE_POINT)}
    # one variant a family, up to each study's summary (training, fine-tuning, conditioning): one at a
    # time on the GPU, the whole tiny DAG took over 5 minutes on an H200 (13 trainings, never finished)
    for name, study in cfg["studies"].items():
        study["grid"] = {**study["grid"], "heads": [2]} if name == "tiny_nearest" else dict(ONE_POINT)
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    cores = str(max(E2E_SHARE, min(16, os.cpu_count() or 1)))
    snakemake(work, *(f"results/{name}/summary.csv" for name in cfg["studies"]), "--cores", cores, configfile=path)
    tasks = set()
    for metrics in (work / "results").glob("*/*/metrics.json"):
        m = json.loads(metrics.read_text())
        assert m["device"].startswith("cuda") and m["status"] == "ok", (metrics, m["device"], m["status"])
        tasks.add(m["spec"]["task"])
    for metrics in (work / "results").glob("tiny_bert/*/glue/*/metrics.json"):
        assert json.loads(metrics.read_text())["device"].startswith("cuda")
        tasks.add("glue_finetune")
    assert tasks == {"image_classification", "nearest_point", "listops", "language_model", "glue", "glue_finetune"}


def test_conditioning_on_the_gpu_equals_the_cpu(tmp_path, digits_manifest, monkeypatch):
    """The probe runs in float64 on either device (conditioning.float64_probe), so kappa agrees
    within 1e-3 relative wherever float64's rounding of sigma_min (about 2e-16 x kappa relative)
    is far below that: kappa <= 1e11. (This tiny ViT on 8 x 8 digits measures kappa ~1e9-5e10:
    most of its patches are blank.)"""
    from leaner.measure.conditioning import conditioning_rows
    from leaner.training.train import train

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    spec = small_spec()
    train(spec, str(digits_manifest), tmp_path / "v", device="cpu", progress=False)
    checkpoints = {"init": (0, str(tmp_path / "v" / "init.safetensors")),
                   "final": (1, str(tmp_path / "v" / "model.safetensors"))}
    cpu = pd.DataFrame(conditioning_rows(spec, checkpoints, str(digits_manifest), device="cpu"))
    gpu = pd.DataFrame(conditioning_rows(spec, checkpoints, str(digits_manifest), device="cuda"))
    ok = cpu["kappa_median"] <= 1e11
    assert ok.sum() >= len(cpu) // 2, cpu["kappa_median"].tolist()
    rel = (gpu["kappa_median"][ok] - cpu["kappa_median"][ok]).abs() / cpu["kappa_median"][ok]
    assert rel.max() < 1e-3, rel.max()


def test_a_killed_gpu_run_resumes_and_ends_close_to_an_uninterrupted_one(tmp_path, digits_manifest, monkeypatch):
    """bf16 kernels are not bit-reproducible across a restart, so the two runs are compared by
    their result: the resumed run reaches the last step, and its eval accuracy is within 0.05 of an
    uninterrupted GPU run's (same seed, same data order)."""
    from leaner.training.resume import RESUME_DIR, RESUME_FILE
    from leaner.training.train import train

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    spec = small_spec()
    spec["recipe"] = {**spec["recipe"], "epochs": 20, "checkpoint_every": 20}
    whole = train(spec, str(digits_manifest), tmp_path / "whole", device="cuda", progress=False)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(digits_manifest),
           "--out", str(out), "--gpu-share", "10000", "--no-progress"]
    kill_after_checkpoint(subprocess.Popen(cmd), out / RESUME_DIR / RESUME_FILE)
    assert not (out / "metrics.json").exists()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from step" in proc.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["device"].startswith("cuda") and resumed["steps"] == whole["steps"]
    assert abs(resumed["final"]["eval_acc"] - whole["final"]["eval_acc"]) < 0.05


def test_a_stop_signal_to_a_graphed_gpu_run_saves_its_step_and_the_run_resumes(tmp_path, monkeypatch):
    """P2 on CUDA with the step replayed as a CUDA graph, as paper.yaml trains it: SIGTERM after its
    first checkpoint stops it at the next step with its state saved (75), and the run started again
    resumes there, on the GPU, to its last step."""
    import re
    import signal
    import time

    from leaner.training.resume import RESUME_DIR, RESUME_FILE

    from conftest import nearest_setup

    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    spec, manifest = nearest_setup(tmp_path, recipe={"epochs": 200, "steps_per_epoch": 50, "checkpoint_every": 500,
                                                     "cuda_graph": True})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out",
           str(out), "--gpu-share", "10000", "--no-progress"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (out / RESUME_DIR / RESUME_FILE).exists():
        assert time.time() < deadline and proc.poll() is None, "no checkpoint was written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 75, err[-3000:]
    found = re.search(r"stopped by SIGTERM \(it came after step (\d+)\): resume state saved at step (\d+)", err)
    assert found and int(found[2]) - int(found[1]) <= 1, err[-3000:]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_at"] == [int(found[2])] and metrics["steps"] == metrics["total_steps"] == 10_000
    assert metrics["device"].startswith("cuda") and metrics["status"] == "ok"


def test_k_jobs_train_on_one_gpu_at_once(tmp_path, monkeypatch):
    """jobs_per_gpu 4 with --resources gpu=1: four variants hold seats on the same GPU at the same
    time, each training on it."""
    monkeypatch.delenv("LEANER_DEVICE", raising=False)
    monkeypatch.setenv("LEANER_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["studies"]["tiny_nearest"]
    study = cfg["studies"]["tiny"]
    study["grid"] = {"protocol": ["fixed_width"], "width": [16], "depth": [1], "heads": [1, 2], "mlp_ratio": [2],
                     "seeds": [0, 1]}
    study["recipe"]["epochs"] = 30
    study["resources"] = {"gpu": 1, "jobs_per_gpu": 4, "threads": 1}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "results/tiny/summary.csv", "--cores", "4", "--resources", "gpu=1", configfile=path)
    runs = [json.loads(p.read_text()) for p in (work / "results" / "tiny").glob("*/metrics.json")]
    assert len(runs) == 4 and all(m["device"] == "cuda:0" for m in runs)
    assert sorted(m["run"]["gpu_claim"]["seat"] for m in runs) == [0, 1, 2, 3]
    assert max(m["run"]["gpu_claim"]["at_unix"] for m in runs) < min(m["run"]["finished_unix"] for m in runs)


def test_the_point_stream_on_the_gpu_is_a_pure_function_of_seed_and_step():
    from leaner.data.point_stream import PointStream, farthest_targets

    s = PointStream(16, 8, 64, data_seed=2, device="cuda")
    x, y = s.batch(9)
    assert x.is_cuda and y.is_cuda
    s.batch(10)
    assert torch.equal(PointStream(16, 8, 64, data_seed=2, device="cuda").batch(9)[0], x)
    assert not torch.equal(s.batch(10)[0], x)
    assert torch.allclose(x.norm(dim=-1), torch.ones(64, 8, device="cuda"))
    # the targets are the farthest points, as float64 on the CPU finds them
    assert torch.equal(farthest_targets(x.cpu().double()), y.cpu().double())
    # a different generator from the CPU's: other points, and metrics.json says so
    assert not torch.equal(PointStream(16, 8, 64, data_seed=2).batch(9)[0], x.cpu())


def test_the_replayed_points_on_the_gpu_are_the_authors_cpu_points():
    """`stream: replay` draws the authors' points on the CPU wherever the model trains, so a GPU run
    trains on a CPU run's points (kept on the GPU once drawn); the targets agree with the CPU's."""
    from leaner.data.point_stream import PointStream

    gpu, cpu = (PointStream(16, 8, 64, data_seed=2, device=d, replay=10) for d in ("cuda", "cpu"))
    for k in (0, 9, 13):
        x, y = gpu.batch(k)
        assert x.is_cuda and y.is_cuda
        assert torch.equal(x.cpu(), cpu.batch(k)[0]) and torch.equal(y.cpu(), cpu.batch(k)[1])
    assert gpu.batch(13)[0] is gpu.batch(3)[0]


def _nearest_on_gpu(tmp_path, name, **recipe):
    from leaner.training.train import train

    from conftest import nearest_setup

    spec, manifest = nearest_setup(tmp_path / name, recipe={"epochs": 4, "steps_per_epoch": 50, **recipe})
    return train(spec, str(manifest), tmp_path / name / "out", device="cuda", progress=False)


def test_the_step_as_a_cuda_graph_trains_as_the_eager_step(tmp_path):
    """Same kernels, same data, same order: the graphed run's losses track the eager run's."""
    eager = _nearest_on_gpu(tmp_path, "eager")
    graphed = _nearest_on_gpu(tmp_path, "graphed", cuda_graph=True)
    assert eager["status"] == graphed["status"] == "ok" and graphed["steps"] == eager["steps"] == 200
    assert graphed["data"]["points_drawn_on"] == "cuda"
    assert graphed["best"]["train_loss"] == pytest.approx(eager["best"]["train_loss"], rel=0.05)
    assert graphed["final"]["eval_mse"] == pytest.approx(eager["final"]["eval_mse"], rel=0.05)


@pytest.mark.parametrize("mode", [True, "reduce-overhead"])
def test_each_compile_mode_trains(tmp_path, mode):
    eager = _nearest_on_gpu(tmp_path, "eager")
    compiled = _nearest_on_gpu(tmp_path, "compiled", compile=mode)
    assert compiled["status"] == "ok" and compiled["steps"] == 200
    assert compiled["final"]["eval_mse"] == pytest.approx(eager["final"]["eval_mse"], rel=0.1)


@pytest.mark.parametrize("graphed", [False, True])
def test_a_late_divergence_check_on_the_gpu_stops_at_the_first_bad_step(tmp_path, graphed):
    """An absurd learning rate: the run is `diverged` at the step the device flagged, and its
    weights are finite (no update from that step on), though the host looked only every 50 steps."""
    from safetensors.torch import load_file

    m = _nearest_on_gpu(tmp_path, "bad", lr=1.0e12, warmup_frac=0.0, cuda_graph=graphed)
    assert m["status"] == "diverged" and m["steps"] == m["diverged_at_step"] < 200
    weights = load_file(str(tmp_path / "bad" / "out" / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_p2_shapes_of_the_paper_config_take_a_fused_kernel_on_cuda():
    """Every paper shape with N >= 64 reaches a fused kernel on this GPU in fp32 and bf16, its
    head dim padded as `attention_kernel` says; the padded form equals the math form."""
    from torch.nn.attention import SDPBackend

    from leaner.models.nearest import attend, attention_kernel

    from test_p2_attention import paper_shapes

    for n, r in sorted(paper_shapes()):
        for dtype in (torch.float32, torch.bfloat16):
            kernel, width = attention_kernel(n, r, dtype, "cuda")
            if kernel == "math":
                continue
            q = torch.randn(2, 8, n, width, device="cuda", dtype=dtype, requires_grad=True)
            choice = SDPBackend(torch._fused_sdp_choice(q, q, q, scale=r ** -0.5))
            assert choice != SDPBackend.MATH, (n, r, dtype)
    g = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(4, 64, 256, 1, device="cuda", generator=g) for _ in range(3))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.testing.assert_close(attend(q, k, v, "fused", 4), attend(q, k, v, "math", 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["lowrank", "flex"])
def test_p2_low_rank_forms_on_cuda_are_the_math_form(kernel):
    """The low-rank Triton kernel and FlexAttention (compiled) on the GPU, forward and backward,
    against the math form in fp32 (TF32 off) at every paper shape of rank <= 8 (a few heads each)."""
    from leaner.models.nearest import LOWRANK_MAX_RANK, attend

    from test_p2_attention import paper_shapes

    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator("cuda").manual_seed(0)
    for n, r in sorted(s for s in paper_shapes() if s[1] <= LOWRANK_MAX_RANK):
        q, k, v = (torch.randn(2, 6, n, r, device="cuda", generator=g, requires_grad=True) for _ in range(3))
        grad = torch.randn(q.shape, device="cuda", generator=g)
        got, want = attend(q, k, v, kernel, max(16, r)), attend(q, k, v, "math", r)
        got = [got, *torch.autograd.grad(got, (q, k, v), grad)]
        want = [want, *torch.autograd.grad(want, (q, k, v), grad)]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"N{n} r{r}")


def test_the_recipe_precision_is_what_a_gpu_run_computes_in(tmp_path, digits_manifest):
    """P2 in fp32 without TF32 (its task's recipe), the ViT in bf16 with TF32 (the default): each
    recorded in metrics.json, and P2's loss is an fp32 tensor (no autocast)."""
    from leaner.training.train import train

    p2 = _nearest_on_gpu(tmp_path, "p2")
    assert (p2["precision"], p2["tf32"]) == ("fp32", False) and p2["device"].startswith("cuda")
    vit = train(small_spec(), str(digits_manifest), tmp_path / "vit", device="cuda", progress=False)
    assert (vit["precision"], vit["tf32"]) == ("bf16", True)


def _device_decoded_jpegs(tmp_path, size: int):
    """A JPEG image folder of `size` px prepared for `decode: device` at 32 px: (splits, the training
    set as one batch, its labels, the dataset's entry)."""
    from test_data import IMAGE_SPEC, _write_image_folder

    from leaner.data import load_splits, prepare

    _write_image_folder(tmp_path / "imgs", per_class=8, size=size, fmt="jpg")
    manifest = tmp_path / "data" / "manifest.json"
    spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "img_size": 32, "decode": "device"}
    prepare("jpegs", spec, str(manifest))
    splits = load_splits(str(manifest), Recipe.of({"augment": True, "num_workers": 0}))
    (x, y), = splits.train.train_batches(len(splits.train), seed=0, epoch=0)
    return splits, x, y, spec


def test_the_device_recipe_on_the_gpu_matches_the_cpu_and_real_nvjpeg_survives_odd_files(tmp_path, monkeypatch):
    """`decode: device` on CUDA: nvJPEG and the batched DeiT recipe (kornia's warps, torchvision's
    ops) give the CPU's images to within 2 grey levels on average for the same seed (every draw on
    the host from it; erasing, whose noise is drawn on the device, left out); and on ImageNet's odd
    files the real nvJPEG decodes or hands over what it can, and what nothing reads is dropped with
    its label."""
    from test_data import _write_odd_images

    from leaner.data import load_splits, prepare, tensor_augment

    splits, x, y, spec = _device_decoded_jpegs(tmp_path, 40)
    with monkeypatch.context() as m:
        m.setattr(tensor_augment, "random_erase_", lambda x, rng, noise: x)
        out = {}
        for device in ("cpu", "cuda"):
            images, labels = splits.finish.train(x, y, torch.device(device), 7)
            assert images.device.type == device and torch.equal(labels.cpu(), y)
            out[device] = images.float().cpu()
    grey_levels = (out["cuda"] - out["cpu"]).abs() * 0.25 * 255  # std 0.25
    assert grey_levels.mean() < 2.0, grey_levels.mean()

    _write_odd_images(tmp_path / "imgs" / "train" / "cat")
    prepare("odd", spec, str(tmp_path / "odd" / "manifest.json"))
    splits = load_splits(str(tmp_path / "odd" / "manifest.json"), Recipe.of({"augment": True, "num_workers": 0}))
    (x, y), = splits.train.train_batches(len(splits.train), seed=0, epoch=0)
    images, labels = splits.finish.train(x, y, torch.device("cuda"), 0)
    skipped = splits.finish.take_events()["unreadable, skipped"]
    # the noise no decoder reads; the JPEG cut after its header nvJPEG may reject or decode in part
    assert "noise.JPEG" in skipped and set(skipped) <= {"cut.JPEG", "noise.JPEG"}, skipped
    kept = [i for i, name in enumerate(x.names) if name not in skipped]
    assert images.shape == (len(kept), 3, 32, 32) and torch.isfinite(images).all()
    assert torch.equal(labels.cpu(), y[kept])


def _jpegs(images, subsampling: int) -> list[torch.Tensor]:
    """The images (uint8 HWC arrays) as JPEGs at quality 90 with chroma `subsampling` (Pillow's: 0
    4:4:4, 2 4:2:0), each a 1-D byte tensor."""
    import io

    from PIL import Image

    data = []
    for pixels in images:
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90, subsampling=subsampling)
        data.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
    return data


def test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode(tmp_path):
    """The ordering hazard of nvJPEG's own stream (pytorch/vision #9606): decode a batch of JPEGs on
    the GPU while large matrix products are queued on the training stream and their outputs freed
    back to the caching allocator, 50 times; every decode must equal the one made with the GPU idle.
    Against the CPU's decoder (libjpeg-turbo), what can hold: on 4:4:4 JPEGs (no chroma to upsample)
    8 grey levels at most; on 4:2:0 JPEGs of smooth, photo-like content a mean under 2 (as
    torchvision's own tests hold it): nvJPEG upsamples 4:2:0 chroma without interpolating, libjpeg-
    turbo and Pillow with it (docs/gpu.md), so on noise the two differ by up to ~100 levels."""
    import numpy as np
    from PIL import Image

    from leaner.data.tensor_augment import DeviceTransforms

    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 255, (224, 224, 3), dtype=np.uint8) for _ in range(16)]
    smooth = [np.asarray(Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).resize((224, 224),
                                                                                                 Image.BICUBIC))
              for _ in range(16)]
    meta = {"img_size": 224, "in_chans": 3, "mean": [0.5] * 3, "std": [0.5] * 3}
    t, dev = DeviceTransforms(meta, Recipe.of({})), torch.device("cuda")
    for data, bound in ((_jpegs(noise, 0), "max"), (_jpegs(smooth, 2), "mean")):
        gpu = [img.cpu().int() for img in t._decode_jpegs(data, dev)]
        cpu = [img.int() for img in t._decode_jpegs(data, torch.device("cpu"))]
        diff = torch.stack([(a - b).abs().float() for a, b in zip(gpu, cpu)])
        assert (diff.max() <= 8) if bound == "max" else (diff.mean() < 2.0), (bound, diff.max(), diff.mean())
    data = _jpegs(noise, 2)
    idle = [img.cpu() for img in t._decode_jpegs(data, dev)]
    for _ in range(50):
        a = torch.randn(4096, 4096, device=dev)
        for _ in range(8):
            a = a @ a / 64  # queued, long
        del a  # freed to the cache while the products may still run
        got = t._decode_jpegs(data, dev)
        assert all(torch.equal(g.cpu(), ref) for g, ref in zip(got, idle))


def test_training_batches_read_ahead_are_the_plain_paths_and_the_host_does_not_wait(tmp_path):
    """`decode: device`'s training batches made ahead of the step (compute/side_stream.py: two ahead,
    on a thread and CUDA stream of their own) while long matrix products are queued on the training
    stream and their outputs freed: a batch is handed over with those products still running (the
    host never waits for the training stream), and, read on the training stream, it is the same
    bits as the batch made when asked for from the same seed, 20 times."""
    from leaner.compute.side_stream import read_ahead

    splits, x, y, _ = _device_decoded_jpegs(tmp_path, 64)
    dev = torch.device("cuda")
    want = [[t.clone() for t in splits.finish.train(x, y, dev, k)] for k in range(20)]
    torch.cuda.synchronize()

    def make(k):
        return splits.finish.train(x, y, dev, k)

    ahead = read_ahead(make, iter(range(20)), dev, 2)
    overlapped = 0
    for k in range(20):
        a = torch.randn(4096, 4096, device=dev)
        for _ in range(16):
            a = a @ a / 64  # queued on the training stream, long
        del a  # freed to the cache while the products run
        got = next(ahead)
        overlapped += not torch.cuda.current_stream().query()  # the products still run: the host did not wait
        assert all(torch.equal(g, w) for g, w in zip(got, want[k])), k
    assert overlapped >= 15, overlapped

