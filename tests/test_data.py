"""Data preparation and loading: digits, and the Hugging Face `datasets` path on local files."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from leaner.data import batch_indices, load_splits, prepare
from leaner.schema import Recipe
from leaner.training.train import train

from conftest import small_spec

pytestmark = pytest.mark.fast


def test_digits_split_is_fixed_recorded_and_standardised(tmp_path):
    spec = {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}
    m1 = prepare("digits", spec, str(tmp_path / "a" / "manifest.json"))
    m2 = prepare("digits", spec, str(tmp_path / "b" / "manifest.json"))
    assert m1["sha256"] == m2["sha256"]
    assert (m1["n_train"], m1["n_eval"]) == (1438, 359)
    with np.load(tmp_path / "a" / "digits.npz") as z:
        assert len(set(z["train_idx"]) | set(z["test_idx"])) == 1797
        assert not set(z["train_idx"]) & set(z["test_idx"])
        assert abs(z["x_train"].mean()) < 1e-5 and z["x_train"].std() == pytest.approx(1, abs=1e-4)
        assert z["x_train"].shape == (1438, 1, 8, 8)
    other = prepare("digits", {**spec, "split_seed": 1}, str(tmp_path / "c" / "manifest.json"))
    assert other["sha256"] != m1["sha256"]


def test_tampered_digits_arrays_are_detected(tmp_path):
    manifest = tmp_path / "manifest.json"
    prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
    with open(tmp_path / "digits.npz", "r+b") as fh:
        fh.seek(200)
        fh.write(b"\x00\x01\x02\x03")
    with pytest.raises(RuntimeError, match="sha256"):
        load_splits(str(manifest), Recipe.of({}))


def test_batch_order_is_a_function_of_seed_and_epoch():
    a = batch_indices(100, 32, seed=0, epoch=3)
    assert [len(b) for b in a] == [32, 32, 32, 4]
    assert sorted(np.concatenate(a)) == list(range(100))
    assert all((x == y).all() for x, y in zip(a, batch_indices(100, 32, seed=0, epoch=3)))
    assert not (a[0] == batch_indices(100, 32, seed=0, epoch=4)[0]).all()


def test_repeated_augmentation_shows_each_image_three_times_and_deals_its_copies_to_other_processes():
    """recipe.repeat_aug (DeiT, timm's RepeatAugSampler): an epoch of n samples draws n / 3 images,
    each three times in a row of the repeated permutation, which is dealt to the processes in turn;
    each process's share of every global batch is its next samples in that deal."""
    from leaner.data.splits import epoch_order

    n, batch = 24, 8
    dealt = np.repeat(epoch_order(n, 5, 2), 3)[:n]
    one = np.concatenate(batch_indices(n, batch, 5, 2, repeats=3))
    assert np.array_equal(one, dealt) and np.array_equal(np.bincount(one, minlength=n)[one], np.full(n, 3))
    assert len(set(one)) == 8
    for world in (2, 4):
        shares = [batch_indices(n, batch, 5, 2, rank=r, world=world, repeats=3) for r in range(world)]
        for r in range(world):  # each process sees every world-th sample of the deal, batch by batch
            assert np.array_equal(np.concatenate(shares[r]), dealt[r::world])
            assert all(len(b) == batch // world for b in shares[r])
        first_image = dealt[0]  # its three copies land on three different processes (world 4) or alternate (2)
        holders = [r for r in range(world) for b in shares[r] for i in b if i == first_image]
        assert holders == ([0, 0, 1] if world == 2 else [0, 1, 2])  # by process
    assert np.array_equal(np.concatenate(batch_indices(n, batch, 5, 2)), epoch_order(n, 5, 2))  # repeats 1: as before
    assert not np.array_equal(np.concatenate(batch_indices(n, batch, 5, 3, repeats=3)), one)  # another epoch


class _Pids:
    """A toy dataset: each sample is its index and the pid of the process that loaded it."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        import os

        return torch.tensor([i, os.getpid()]), torch.tensor(i)


def test_the_training_loader_keeps_its_workers_across_epochs_and_follows_each_epochs_order():
    from leaner.data.splits import LoaderSplit, worker_count

    split = LoaderSplit(_Pids(), num_workers=2, persistent=True)
    pids = []
    for epoch in (0, 1):
        batches = list(split.train_batches(4, seed=0, epoch=epoch))
        order = np.concatenate(batch_indices(12, 4, 0, epoch))
        assert np.array_equal(torch.cat([x[:, 0] for x, _ in batches]).numpy(), order)
        pids.append({int(p) for x, _ in batches for p in x[:, 1]})
    split.close()
    assert len(pids[0]) == 2 and pids[0] == pids[1]  # the same two worker processes
    fresh = LoaderSplit(_Pids(), num_workers=2)  # the evaluation split's: workers for each pass
    first, second = ({int(p) for x, _ in fresh.eval_batches(4) for p in x[:, 1]} for _ in range(2))
    assert first.isdisjoint(second)

    assert worker_count(3) == 3 and worker_count("auto", cores=64, local_world=8) == 7
    assert worker_count("auto", cores=16, local_world=8) == 1 and worker_count("auto", cores=1) == 0


class _Slow:
    """A toy dataset whose samples take `seconds` each to make (a worker's decode), recording when."""

    def __init__(self, n: int, seconds: float):
        self.n, self.seconds = n, seconds

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time

        time.sleep(self.seconds)
        return torch.tensor(i), torch.tensor(time.time(), dtype=torch.float64)


def test_the_training_loader_prefetches_across_an_epochs_end_and_restarts_where_it_is_asked():
    """One stream of batches over the epochs: while the step of an epoch's last batch runs, the
    workers already build the next epoch's first batches, so that batch comes without a wait;
    every epoch still follows its own order, and a stream asked for another place (a resume)
    starts there."""
    import time

    from leaner.data.splits import LoaderSplit

    split = LoaderSplit(_Slow(8, 0.15), num_workers=2, persistent=True)  # 2 samples a batch: 0.3 s each
    first = list(split.train_batches(2, seed=3, epoch=0))
    assert np.array_equal(torch.cat([x for x, _ in first]).numpy(), np.concatenate(batch_indices(8, 2, 3, 0)))
    time.sleep(1.0)  # the last batch's step
    t0 = time.perf_counter()
    nxt = split.train_batches(2, seed=3, epoch=1)
    x, made = next(nxt)
    waited = time.perf_counter() - t0
    assert waited < 0.15, f"the next epoch's first batch took {waited:.2f} s: nothing was read ahead"
    assert float(made.max()) < time.time() - 0.5  # made during the step, before it was asked for
    rest = [x] + [b for b, _ in nxt]
    assert np.array_equal(torch.cat(rest).numpy(), np.concatenate(batch_indices(8, 2, 3, 1)))
    resumed = [b for b, _ in split.train_batches(2, seed=3, epoch=5, skip=2)]  # not where the stream is
    assert np.array_equal(torch.cat(resumed).numpy(), np.concatenate(batch_indices(8, 2, 3, 5)[2:]))
    again = [b for b, _ in split.train_batches(2, seed=3, epoch=6)]  # and on from there
    split.close()
    assert np.array_equal(torch.cat(again).numpy(), np.concatenate(batch_indices(8, 2, 3, 6)))


def test_batches_finished_ahead_on_a_thread_are_the_bits_of_those_finished_when_asked(tmp_path):
    """The read-ahead (compute/side_stream.py) on a thread of its own, two batches ahead, gives
    the bits of the batches finished one by one when asked: each is a function of its own seed."""
    from leaner.compute.side_stream import read_ahead

    _write_image_folder(tmp_path / "imgs", size=24, fmt="jpg")
    cpu = torch.device("cpu")
    for decode in ("pil", "device"):
        spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "decode": decode}
        prepare("tiny_imgs", spec, str(tmp_path / decode / "manifest.json"))
        splits = load_splits(str(tmp_path / decode / "manifest.json"), Recipe.of({"augment": True, "num_workers": 0}))
        loaded = [(x, y, 100 + k) for k, (x, y) in enumerate(splits.train.train_batches(4, seed=0, epoch=0))]
        finish = splits.finish
        made = [list(read_ahead(lambda b: finish.train(b[0], b[1], cpu, b[2]), iter(loaded), cpu, depth))  # noqa: B023
                for depth in (0, 2)]
        assert len(made[0]) == len(made[1]) == 5
        for (a, ya), (b, yb) in zip(*made):
            assert torch.equal(a, b) and torch.equal(ya, yb)
        failing = read_ahead(lambda b: 1 / 0, iter(loaded), cpu, 2)
        with pytest.raises(ZeroDivisionError):
            next(failing)


@pytest.mark.parametrize("decode", ["pil", "device"])
def test_an_augmented_image_run_resumed_after_a_stop_ends_as_an_uninterrupted_one(tmp_path, decode):
    """Every random draw of a training batch comes from its place in the run (a sample's in the
    workers, a batch's on the device) and the loader draws nothing from the training's generator
    (drop-path's), so a run stopped after a checkpoint and resumed ends with the same weights, bit
    for bit, as one that ran through, and the workers' count changes no bit."""
    from leaner.training.resume import RESUME_DIR

    _write_image_folder(tmp_path / "imgs", fmt="jpg")
    manifest = tmp_path / "data" / "manifest.json"
    prepare("tiny_imgs", {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "decode": decode},
            str(manifest))
    # drop-path draws from the training's generator: a loader must not draw from it at another step
    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8, drop_path_rate=0.2, depth=2)
    run["recipe"].update(epochs=3, batch_size=4, augment=True, checkpoint_every=4, num_workers=2)
    run["conditioning"]["samples"] = 4
    import multiprocessing

    before = set(multiprocessing.active_children())  # an earlier test's may still be ending
    through = train(run, str(manifest), tmp_path / "through", progress=False)
    assert set(multiprocessing.active_children()) <= before  # the run closed its loader: no worker outlives it
    assert train(run, str(manifest), tmp_path / "stopped", progress=False, stop_after=8) == {}
    assert (tmp_path / "stopped" / RESUME_DIR).is_dir()
    resumed = train(run, str(manifest), tmp_path / "stopped", progress=False)
    assert resumed["steps"] == through["steps"] == 15 and resumed["resumed_at"] == [8]
    weights = (tmp_path / "through" / "model.safetensors").read_bytes()
    assert (tmp_path / "stopped" / "model.safetensors").read_bytes() == weights
    run["recipe"]["num_workers"] = 0
    train(run, str(manifest), tmp_path / "in_process", progress=False)
    ours, theirs = (load_file(tmp_path / name / "model.safetensors") for name in ("in_process", "through"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_the_image_task_draws_its_batches_with_the_recipes_repeats(digits_manifest):
    from leaner.tasks.trainers import make_task
    from leaner.workflow.config import RECIPE_DEFAULTS

    assert RECIPE_DEFAULTS["repeat_aug"] == 1
    spec = small_spec()
    spec["recipe"].update(repeat_aug=3, batch_size=12)
    task = make_task(spec, str(digits_manifest), torch.device("cpu"))
    x, y = next(iter(task.train_batches(0)))
    assert len(y) == 12 and all(torch.equal(x[i], x[i + 1]) and torch.equal(x[i], x[i + 2]) for i in (0, 3, 6, 9))
    assert not torch.equal(x[0], x[3])


def _write_image_folder(root, classes=("cat", "dog", "owl"), per_class=6, size=20, fmt="png"):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 80, (size, size + i, 3), dtype=np.uint8) + np.uint8(60 * c)
                Image.fromarray(pixels).save(folder / f"{i}.{fmt}")


IMAGE_SPEC = {"train_split": "train", "eval_split": "validation", "image_key": "image", "label_key": "label",
              "num_classes": 3, "img_size": 16, "in_chans": 3, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


def test_image_folder_through_datasets_with_deit_transforms(tmp_path):
    _write_image_folder(tmp_path / "imgs")
    spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC}
    manifest = prepare("tiny_imgs", spec, str(tmp_path / "data" / "manifest.json"))
    assert (manifest["n_train"], manifest["n_eval"]) == (18, 18)
    splits = load_splits(str(tmp_path / "data" / "manifest.json"), Recipe.of({"augment": True, "num_workers": 0}))
    x, y = next(splits.train.train_batches(8, seed=0, epoch=0))
    # the workers stop at uint8 (a quarter of float32's bytes across processes); the device finishes
    assert x.shape == (8, 3, 16, 16) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert set(y.tolist()) <= {0, 1, 2}
    cpu = torch.device("cpu")
    xf, yf = splits.finish.train(x, y, cpu, seed=5)
    assert xf.dtype == torch.float32 and torch.equal(yf, y) and torch.equal(splits.finish.train(x, y, cpu, 5)[0], xf)
    plain = (x.float() / 255 - 0.5) / 0.25
    assert not torch.equal(xf, splits.finish.train(x, y, cpu, 6)[0]) or torch.allclose(xf, plain, atol=1e-5)
    xe, ye = next(splits.eval.eval_batches(18))
    assert xe.shape == (18, 3, 16, 16) and xe.dtype == torch.uint8
    assert torch.allclose(splits.finish.eval(xe, ye, cpu)[0], (xe.float() / 255 - 0.5) / 0.25, atol=1e-5)
    # eval transform is deterministic; labels follow the class folders
    xe2, _ = next(splits.eval.eval_batches(18))
    assert torch.equal(xe, xe2) and sorted(set(ye.tolist())) == [0, 1, 2]


def test_a_training_job_opens_the_prepared_arrow_files_without_resolving_the_folder_again(tmp_path, monkeypatch):
    """Preparation resolves an ImageFolder once; a job reads the Arrow files it left (the same rows,
    in order) and walks the tree again only where those files are gone, or for a slice."""
    import datasets

    from leaner.data.images import _encoded
    from leaner.data.tensor_augment import open_image

    _write_image_folder(tmp_path / "imgs")
    spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC}
    path = tmp_path / "data" / "manifest.json"
    manifest = prepare("tiny_imgs", spec, str(path))
    assert set(manifest["arrow_files"]) == {"train", "validation"}
    resolved = datasets.load_dataset("imagefolder", data_dir=str(tmp_path / "imgs"), split="validation")

    calls = []
    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append(a) or real(*a, **k))
    splits = load_splits(str(path), Recipe.of({"augment": False, "num_workers": 0}))
    assert calls == []
    assert [r["label"] for r in splits.eval.dataset.ds] == resolved["label"]
    encoded, name = _encoded(splits.eval.dataset.ds[3]["image"], 3)  # the workers decode it, with Pillow
    assert name == "3.png" and np.array_equal(np.asarray(open_image(encoded, 3)), np.asarray(resolved[3]["image"]))

    manifest["arrow_files"]["train"]["files"] = [str(tmp_path / "elsewhere.arrow")]  # another machine's cache
    path.write_text(json.dumps(manifest))
    splits = load_splits(str(path), Recipe.of({"augment": False, "num_workers": 0}))
    assert calls == [("imagefolder",)] and len(splits.train) == 18

    sliced = prepare("tiny_slice", {**spec, "train_split": "train[:6]"}, str(tmp_path / "slice" / "manifest.json"))
    assert "train[:6]" not in sliced["arrow_files"] and sliced["n_train"] == 6


def test_num_classes_mismatch_is_reported(tmp_path):
    _write_image_folder(tmp_path / "imgs")
    spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "num_classes": 10}
    with pytest.raises(ValueError, match="num_classes is 10 in the config but the 'label' column has 3"):
        prepare("tiny_imgs", spec, str(tmp_path / "data" / "manifest.json"))


def test_hub_loader_on_a_local_parquet_dataset_trains_end_to_end(tmp_path):
    """`kind: hub` resolves its name with datasets.load_dataset; a local dataset directory is a
    valid name, so the hub path runs for real here without a network."""
    import datasets

    _write_image_folder(tmp_path / "imgs")
    folder = datasets.load_dataset("imagefolder", data_dir=str(tmp_path / "imgs"))
    hub_dir = tmp_path / "hub_copy"
    (hub_dir / "data").mkdir(parents=True)
    for split, ds in folder.items():
        ds.to_parquet(str(hub_dir / "data" / f"{split}-00000-of-00001.parquet"))
    spec = {"kind": "hub", "name": str(hub_dir), "subset": None, **IMAGE_SPEC}
    manifest_path = tmp_path / "data" / "manifest.json"
    prepare("hubby", spec, str(manifest_path))
    assert json.loads(manifest_path.read_text())["splits"]["train_split"]["rows"] == 18

    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8)
    run["recipe"].update(epochs=2, batch_size=6, augment=True, mixup=0.8, cutmix=1.0, label_smoothing=0.1)
    run["conditioning"]["samples"] = 8
    metrics = train(run, str(manifest_path), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 6
    assert 0.0 <= metrics["final"]["eval_acc"] <= 1.0


def test_randaugment_posterize_at_full_magnitude_gives_a_black_image_not_an_error():
    """DeiT's rand-m9-mstd0.5-inc1 reaches magnitude 10 (0 bits kept) ~2% of the time; Pillow
    refuses 0 bits, which used to crash an ImageNet epoch. The op now returns the black image
    it always meant, and posterizes as before at other magnitudes."""
    from PIL import Image, ImageOps

    from leaner.data.images import build_transforms

    train_tf, _ = build_transforms({**IMAGE_SPEC, "img_size": 32}, Recipe.of({"augment": True}))
    randaug = next(t for t in train_tf.transforms if type(t).__name__ == "RandAugment")
    op = next(o for o in randaug.ops if o.name == "PosterizeIncreasing")
    op.prob, op.magnitude_std = 1.0, 0
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    op.magnitude = 10
    assert np.asarray(op(img)).max() == 0
    op.magnitude = 5  # keeps 4 - int(2.0) = 2 bits
    assert np.array_equal(np.asarray(op(img)), np.asarray(ImageOps.posterize(img, 2)))
    for _ in range(200):  # the whole training transform, many draws: no error
        train_tf(img)


@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_decoding_on_the_device_gives_the_same_batches_as_pillow(tmp_path, fmt):
    """`decode: device` (workers read bytes; decode and DeiT augmentation on the training device,
    here the CPU) against `decode: pil`: the same labels in the same order, the same shapes and
    dtype; the deterministic evaluation images agree to within two grey levels anywhere, well under
    half of one on average (bicubic resizes of two libraries)."""
    _write_image_folder(tmp_path / "imgs", size=24, fmt=fmt)
    loaded = {}
    for decode in ("pil", "device"):
        spec = {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "decode": decode}
        prepare("tiny_imgs", spec, str(tmp_path / decode / "manifest.json"))
        loaded[decode] = load_splits(str(tmp_path / decode / "manifest.json"),
                                     Recipe.of({"augment": True, "num_workers": 0}))
    pil, dev = loaded["pil"], loaded["device"]
    assert type(pil.finish).__name__ == "Normalized" and type(dev.finish).__name__ == "DeviceTransforms"
    cpu = torch.device("cpu")
    batches = (split.train.train_batches(8, seed=0, epoch=1) for split in (pil, dev))
    for k, ((xp, yp), (xd, yd)) in enumerate(zip(*batches)):
        assert torch.equal(yp, yd)
        xp, _ = pil.finish.train(xp, yp, cpu, k)
        x, y = dev.finish.train(xd, yd, cpu, k)
        assert torch.equal(y, yd)
        assert x.shape == xp.shape == (len(yp), 3, 16, 16) and x.dtype == xp.dtype == torch.float32
        assert torch.isfinite(x).all()
    (xp, yp), (xd, yd) = next(pil.eval.eval_batches(18)), next(dev.eval.eval_batches(18))
    xp, _ = pil.finish.eval(xp, yp, cpu)
    xe, ye = dev.finish.eval(xd, yd, cpu)
    assert torch.equal(yp, yd) and xe.shape == xp.shape
    grey_levels = (xe - xp).abs() * 0.25 * 255  # std 0.25
    assert grey_levels.mean() < 0.5 and grey_levels.max() <= 2.0, (grey_levels.mean(), grey_levels.max())


def test_each_randaugment_op_on_tensors_matches_timms_on_pillow():
    """The 15 ops of rand-m9-mstd0.5-inc1 with timm's own arguments (bicubic, as the recipe), on a
    batch whose samples carry different arguments: each sample lands within a grey level (mean) of
    timm's Pillow op with its arguments, two for the affine ops (bicubic kernels differ: torch's
    a = -0.75 against Pillow's -0.5, and this image's hard 8-pixel edges are where it shows), and
    the op itself moves the image much more."""
    import random

    import timm.data.auto_augment as aa
    from PIL import Image

    from leaner.data.rand_augment import AFFINE_OPS, apply_op, rand_augment_ops

    base = np.random.default_rng(0).integers(0, 255, (6, 6, 3), dtype=np.uint8)
    pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:40, :44]
    tensor, fill = torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), [124, 116, 104]
    assert len(rand_augment_ops()) == 15
    for name in rand_augment_ops():
        refs, args = [], []
        for magnitude, seed in ((6, 3), (9, 4), (3, 0)):  # seeds 3 and 4 draw opposite signs
            op = aa.AugmentOp(name, prob=1.0, magnitude=magnitude,
                              hparams={"img_mean": tuple(fill), "interpolation": Image.BICUBIC})
            random.seed(seed)
            args.append(op.level_fn(magnitude, op.hparams) if op.level_fn else ())
            refs.append(np.asarray(op.aug_fn(Image.fromarray(pixels), *args[-1], **op.kwargs)).astype(float))
        batch = apply_op(name, tensor.expand(len(args), -1, -1, -1).contiguous(), args, fill)
        assert batch.dtype == torch.uint8 and batch.shape == (len(args), *tensor.shape)
        tolerance = 2.0 if name in AFFINE_OPS else 1.0
        for ref, ours, arg in zip(refs, batch.permute(0, 2, 3, 1).numpy().astype(float), args):
            moved, off = np.abs(ref - pixels).mean(), np.abs(ours - ref).mean()
            assert off < min(tolerance, 0.2 * moved), (name, arg, off, moved)


def test_randaugment_draws_each_samples_ops_as_timm_does():
    """Every sample draws its own: the 15 ops equally often (chi-square), each applied half the
    time, magnitudes N(9, 0.5) clipped to [0, 10]; and a batch of one image comes out in many
    different versions, a quarter of them untouched (both steps skipped)."""
    from scipy import stats

    from leaner.data.rand_augment import draw_rand_augment, rand_augment

    torch.manual_seed(0)
    ops, applied, magnitude = draw_rand_augment(20000)
    assert ops.shape == applied.shape == magnitude.shape == (2, 20000)
    assert stats.chisquare(torch.bincount(ops.flatten(), minlength=15).numpy()).pvalue > 0.001
    assert abs(applied.float().mean().item() - 0.5) < 0.01
    assert magnitude.min() >= 0 and magnitude.max() <= 10
    assert abs(magnitude.mean().item() - 9) < 0.02 and abs(magnitude.std().item() - 0.5) < 0.02
    img = torch.from_numpy(np.random.default_rng(1).integers(0, 255, (3, 24, 24), dtype=np.uint8))
    out = rand_augment(img.expand(400, -1, -1, -1).contiguous(), [124, 116, 104])
    untouched = (out == img).flatten(1).all(1).float().mean().item()
    assert 0.18 < untouched < 0.35, untouched
    assert len({o.numpy().tobytes() for o in out}) > 200


def test_a_run_on_device_decoded_images_trains(tmp_path):
    _write_image_folder(tmp_path / "imgs", fmt="jpg")
    manifest = tmp_path / "data" / "manifest.json"
    prepare("tiny_imgs", {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "decode": "device"},
            str(manifest))
    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8)
    run["recipe"].update(epochs=2, batch_size=6, augment=True, mixup=0.8, cutmix=1.0, label_smoothing=0.1)
    run["conditioning"]["samples"] = 8
    metrics = train(run, str(manifest), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 6


def _jpeg_components(data: bytes) -> int:
    """The number of colour components in a JPEG's frame header (SOF0-SOF2): 1 grey, 3 YCbCr, 4 CMYK."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            break
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            return data[i + 9]
        i += 2 + length
    raise RuntimeError("not a decodable JPEG: no frame header")


def nvjpeg_like(data, mode, device):
    """A stand-in for the GPU's batched decode_jpeg, on the CPU: it rejects the whole batch where
    nvJPEG does (a CMYK JPEG; a malformed one), else decodes as torchvision does."""
    from torchvision.io import decode_jpeg

    for d in data:
        if _jpeg_components(d.numpy().tobytes()) == 4:
            raise RuntimeError("nvjpeg: unsupported colour space (CMYK)")
    return decode_jpeg(data, mode=mode, device=device)


def _write_odd_images(folder):
    """ImageNet's odd files, in one class folder: grayscale, CMYK, progressive, a PNG named .JPEG,
    and two that nothing reads (a JPEG cut after its header, bytes that are no image)."""
    from PIL import Image

    pixels = np.kron(np.random.default_rng(1).integers(0, 255, (4, 4, 3), dtype=np.uint8), np.ones((6, 6, 1), np.uint8))
    rgb = Image.fromarray(pixels)
    rgb.convert("L").save(folder / "gray.JPEG", format="JPEG")
    rgb.convert("CMYK").save(folder / "cmyk.JPEG", format="JPEG")
    rgb.save(folder / "progressive.JPEG", format="JPEG", progressive=True)
    rgb.save(folder / "png.JPEG", format="PNG")
    whole = (folder / "progressive.JPEG").read_bytes()
    (folder / "cut.JPEG").write_bytes(whole[:200])
    (folder / "noise.JPEG").write_bytes(bytes(range(256)) * 4)


def test_decoding_on_the_device_survives_imagenets_odd_files(tmp_path, monkeypatch, capsys):
    """`decode: device` with a decoder that rejects what nvJPEG rejects: the CMYK JPEG is decoded
    on the CPU, grayscale, progressive and a PNG named .JPEG come through, and the two unreadable
    files are left out of their batch with their labels, named once an epoch in the log and
    counted in metrics.json; the epoch finishes."""
    from leaner.data import tensor_augment

    _write_image_folder(tmp_path / "imgs", per_class=3, fmt="jpg")
    _write_odd_images(tmp_path / "imgs" / "train" / "cat")
    manifest = tmp_path / "data" / "manifest.json"
    prepare("odd", {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC, "decode": "device"},
            str(manifest))
    monkeypatch.setattr(tensor_augment, "jpeg_decoder", lambda: nvjpeg_like)
    with pytest.raises(RuntimeError, match="CMYK"):
        nvjpeg_like([torch.frombuffer(bytearray((tmp_path / "imgs/train/cat/cmyk.JPEG").read_bytes()),
                                      dtype=torch.uint8)], None, "cpu")

    splits = load_splits(str(manifest), Recipe.of({"augment": True, "num_workers": 0}))
    (x, y), = splits.train.train_batches(len(splits.train), seed=0, epoch=0)
    assert len(x) == 15 and x.images.count(None) == 1  # the noise: no worker decoder reads it
    images, labels = splits.finish.train(x, y, torch.device("cpu"), 0)
    assert images.shape == (13, 3, 16, 16) and torch.isfinite(images).all()
    kept = [i for i, name in enumerate(x.names) if name not in ("cut.JPEG", "noise.JPEG")]
    assert torch.equal(labels, y[kept])
    events = splits.finish.take_events()
    assert events == {"decoded on the CPU": ["cmyk.JPEG"], "unreadable, skipped": sorted(
        ["cut.JPEG", "noise.JPEG"], key=x.names.index)}
    assert splits.finish.take_events() == {"decoded on the CPU": [], "unreadable, skipped": []}

    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8)
    run["recipe"].update(epochs=2, batch_size=5, augment=True)
    run["conditioning"]["samples"] = 4
    metrics = train(run, str(manifest), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 6
    events = metrics["data"]["events"]  # two epochs: each file met twice, listed once
    assert events["decoded on the CPU"] == 2 and events["unreadable, skipped"] == 4
    assert sorted(events["unreadable files"]) == ["cut.JPEG", "noise.JPEG"]
    log = capsys.readouterr().err
    for epoch in (1, 2):
        assert f"epoch {epoch}: 1 image decoded on the CPU: cmyk.JPEG" in log
        assert re.search(rf"epoch {epoch}: 2 images unreadable, skipped: (cut|noise)\.JPEG, (noise|cut)\.JPEG", log)


def test_decoding_with_pillow_in_the_workers_survives_the_same_files(tmp_path, capsys):
    """`decode: pil` (the default): Pillow reads CMYK, grayscale, progressive and the PNG named
    .JPEG in the workers; the two unreadable files leave their batches, labels and all, through
    two worker processes, and are named in the log and counted in metrics.json."""
    _write_image_folder(tmp_path / "imgs", per_class=3, fmt="jpg")
    _write_odd_images(tmp_path / "imgs" / "train" / "cat")
    manifest = tmp_path / "data" / "manifest.json"
    prepare("odd", {"kind": "imagefolder", "path": str(tmp_path / "imgs"), **IMAGE_SPEC}, str(manifest))
    splits = load_splits(str(manifest), Recipe.of({"augment": True, "num_workers": 2}))
    order = np.concatenate(batch_indices(len(splits.train), 5, seed=0, epoch=0))
    names = [splits.train.dataset.name_of(i) for i in order]
    labels = torch.tensor(splits.train.labels())[order]
    xs, ys = zip(*splits.train.train_batches(5, seed=0, epoch=0))
    good = [i for i, name in enumerate(names) if name not in ("cut.JPEG", "noise.JPEG")]
    assert sum(map(len, xs)) == 13 and torch.equal(torch.cat(ys), labels[good])
    assert sorted(splits.train.take_events()["unreadable, skipped"]) == ["cut.JPEG", "noise.JPEG"]

    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8)
    run["recipe"].update(epochs=2, batch_size=5, num_workers=2)
    run["conditioning"]["samples"] = 4
    metrics = train(run, str(manifest), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 6
    events = metrics["data"]["events"]
    assert events["unreadable, skipped"] == 4 and sorted(events["unreadable files"]) == ["cut.JPEG", "noise.JPEG"]
    assert "decoded on the CPU" not in events  # Pillow is the CPU decoder
    assert re.search(r"epoch 2: 2 images unreadable, skipped: (cut|noise)\.JPEG, (noise|cut)\.JPEG",
                     capsys.readouterr().err)


def _write_shards(root, split, n_shards, per_shard, size=20, odd=()):
    """Webdataset tar shards as timm/imagenet-1k-wds's: imagenet1k-{split}-NNNN.tar, each sample a
    .jpg and a .cls member sharing a key; `odd`: (key, bytes) samples added to the first shard.
    Returns {key: label}."""
    import io

    from PIL import Image

    from leaner.data.shards import write_shard

    rng = np.random.default_rng(len(split))
    root.mkdir(parents=True, exist_ok=True)
    keys = {}
    for s in range(n_shards):
        samples = []
        for i in range(per_shard):
            label, buf = (s * per_shard + i) % 3, io.BytesIO()
            pixels = rng.integers(0, 80, (size, size + i % 3, 3), dtype=np.uint8) + np.uint8(60 * label)
            Image.fromarray(pixels).save(buf, format="JPEG")
            keys[f"s{s}_{i:03d}"] = label
            samples.append((f"s{s}_{i:03d}", {"jpg": buf.getvalue(), "cls": str(label).encode()}))
        samples += [(key, {"jpg": data, "cls": b"0"}) for key, data in (odd if s == 0 else ())]
        write_shard(root / f"imagenet1k-{split}-{s:04d}.tar", samples)
    return keys


@pytest.mark.parametrize("decode", ["pil", "device"])
def test_webdataset_shards_are_read_in_sequence_each_sample_once_an_epoch_in_a_seeded_order(tmp_path, decode):
    """kind webdataset: the shards' samples counted at preparation; an epoch of 2 processes x 2
    workers reads each sample once (equal shards, dealt evenly), in an order set by (seed, epoch)
    alone, the processes' shares disjoint; a resumed epoch gives the rest of the same batches;
    evaluation reads every sample once, in order, up to a limit."""
    from leaner.data.shards import SHUFFLE_BUFFER

    keys = _write_shards(tmp_path / "wds", "train", 8, 6)
    _write_shards(tmp_path / "wds", "validation", 2, 5)
    spec = {"kind": "webdataset", "path": str(tmp_path / "wds"), **IMAGE_SPEC, "image_key": "jpg",
            "label_key": "cls", "decode": decode}
    manifest = prepare("wds", spec, str(tmp_path / "data" / "manifest.json"))
    assert (manifest["n_train"], manifest["n_eval"]) == (48, 10) and len(manifest["shards"]["train_split"]) == 8
    splits = load_splits(str(tmp_path / "data" / "manifest.json"), Recipe.of({"augment": True, "num_workers": 2}))
    assert splits.eval.labels() == [i % 3 for i in range(10)]
    assert SHUFFLE_BUFFER > 48  # here each worker shuffles all it reads

    def epoch(e, rank, world, skip=0):
        labels, names = [], []
        for x, y in splits.train.train_batches(8, seed=1, epoch=e, skip=skip, rank=rank, world=world):
            if decode == "device":
                names += x.names
            x, y = splits.finish.train(x, y, torch.device("cpu"), 0)
            assert x.shape == (len(y), 3, 16, 16)
            labels.append(y.tolist())
        return labels, names

    assert splits.train.steps_per_epoch(8) == 6
    ranks = [epoch(0, r, 2) for r in range(2)]
    assert [len(b) for labels, _ in ranks for b in labels] == [4] * 12  # each process: 6 steps of half the batch
    assert sorted(y for labels, _ in ranks for b in labels for y in b) == sorted(keys.values())
    if decode == "device":  # each sample once, the two processes' shares disjoint
        assert sorted(ranks[0][1] + ranks[1][1]) == sorted(f"{k}.jpg" for k in keys)
    assert epoch(0, 0, 2) == ranks[0] and epoch(1, 0, 2) != ranks[0]
    assert epoch(0, 0, 2, skip=4)[0] == ranks[0][0][4:]

    got = list(splits.eval.eval_batches(4, limit=7))
    assert sum(len(y) for _, y in got) == 7
    evaluated = sorted(sum((list(x.names) for x, _ in got), [])) if decode == "device" else None
    assert evaluated is None or len(set(evaluated)) == 7


@pytest.mark.parametrize("decode", ["pil", "device"])
def test_a_run_on_webdataset_shards_trains_and_names_the_files_it_cannot_read(tmp_path, decode):
    """Two epochs from shards through the training loop, with repeated augmentation and 2 workers,
    one shard holding a file that is no image: it is left out of its batch and named in
    metrics.json."""
    _write_shards(tmp_path / "wds", "train", 4, 6, odd=[("noise", bytes(range(256)) * 4)])
    _write_shards(tmp_path / "wds", "validation", 1, 6)
    manifest = tmp_path / "data" / "manifest.json"
    prepare("wds", {"kind": "webdataset", "path": str(tmp_path / "wds"), **IMAGE_SPEC, "image_key": "jpg",
                    "label_key": "cls", "decode": decode}, str(manifest))
    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8)
    run["recipe"].update(epochs=2, batch_size=5, augment=True, repeat_aug=2, num_workers=2)
    run["conditioning"]["samples"] = 4
    metrics = train(run, str(manifest), tmp_path / "run", progress=False)
    assert metrics["status"] == "ok" and metrics["steps"] == 2 * (25 // 5)
    events = metrics["data"]["events"]
    assert events["unreadable files"] == ["noise.jpg"] and events["unreadable, skipped"] >= 1


def test_a_webdataset_run_resumed_mid_epoch_ends_as_an_uninterrupted_one(tmp_path):
    """Shards read by 2 workers with the Pillow recipe and drop-path: stopped after a checkpoint in
    the middle of an epoch and resumed (the epoch's first batches read again and dropped), the run
    ends with the uninterrupted run's weights, bit for bit: the workers' generators are seeded from
    the epoch's place in the run, not drawn from the training's."""
    _write_shards(tmp_path / "wds", "train", 4, 6)
    _write_shards(tmp_path / "wds", "validation", 1, 6)
    manifest = tmp_path / "data" / "manifest.json"
    prepare("wds", {"kind": "webdataset", "path": str(tmp_path / "wds"), **IMAGE_SPEC, "image_key": "jpg",
                    "label_key": "cls"}, str(manifest))
    run = small_spec(img_size=16, in_chans=3, num_classes=3, patch_size=8, drop_path_rate=0.2, depth=2)
    run["recipe"].update(epochs=2, batch_size=4, augment=True, num_workers=2, checkpoint_every=3)
    run["conditioning"]["samples"] = 4
    through = train(run, str(manifest), tmp_path / "through", progress=False)
    assert train(run, str(manifest), tmp_path / "stopped", progress=False, stop_after=3) == {}
    resumed = train(run, str(manifest), tmp_path / "stopped", progress=False)
    assert resumed["resumed_at"] == [3] and resumed["steps"] == through["steps"] == 12
    ours, theirs = (load_file(tmp_path / name / "model.safetensors") for name in ("stopped", "through"))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
def test_the_paper_config_takes_the_hubs_webdataset_shards_as_its_comment_says(tmp_path):
    """configs/paper.yaml's commented imagenet_wds entry, uncommented and given to vit_imagenet (its
    DeiT recipe, repeat_aug 3 and all), plans without a problem: shards named as the hub's."""
    import yaml

    from leaner.workflow.plan import build_plan

    from conftest import REPO

    _write_shards(tmp_path / "wds", "train", 1, 2)
    _write_shards(tmp_path / "wds", "validation", 1, 2)
    text = (REPO / "configs" / "paper.yaml").read_text()
    entry = re.search(r"# (imagenet_wds: \{kind: webdataset.*\})", text).group(1)
    cfg = yaml.safe_load(text)
    cfg["datasets"].update(yaml.safe_load(entry.replace("/data/imagenet-1k-wds", str(tmp_path / "wds"))))
    cfg["studies"]["vit_imagenet"]["dataset"] = "imagenet_wds"
    plan = build_plan(cfg)
    spec = plan.datasets["imagenet_wds"]
    assert (spec["image_key"], spec["label_key"], spec["img_size"]) == ("jpg", "cls", 224)
    assert plan.studies["vit_imagenet"].variants
