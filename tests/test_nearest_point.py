"""P2's farthest-point task and encoder: data, loss, the batched W-averaged attention, the
hand-built solution, and a short real training run."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from leaner.data.point_stream import PointStream, _generator, farthest_targets, sample_sphere
from leaner.models import build_model, param_counts
from leaner.models.nearest import AveragedMultiheadAttention, NearestPointEncoder, qk_identity_angle
from leaner.runspec import RunSpec
from leaner.schema import Recipe
from leaner.tasks.nearest import nearest_point_mse
from leaner.training.optim import lr_at
from leaner.training.train import train

from conftest import nearest_setup

pytestmark = pytest.mark.fast


def test_points_lie_on_the_sphere_and_targets_are_the_farthest_point():
    x = sample_sphere(64, 9, 5, torch.Generator().manual_seed(0))
    torch.testing.assert_close(x.norm(dim=-1), torch.ones(64, 9))
    y = farthest_targets(x)
    for b in range(64):
        for i in range(9):
            dots = [float(x[b, j] @ x[b, i]) for j in range(9)]
            assert torch.equal(y[b, i], x[b, dots.index(min(dots))])  # brute force


def test_zero_predictor_scores_one():
    stream = PointStream(dim=16, tokens=8, batch_size=256, data_seed=0)
    errs = [nearest_point_mse(torch.zeros_like(y), y).item() for x, y in stream.batches(0, 20)]
    assert sum(errs) / len(errs) == pytest.approx(1.0, abs=1e-6)  # unit targets: exactly 1


def test_stream_is_a_function_of_seed_and_step_with_p2_shared_streams():
    a = PointStream(8, 4, 16, data_seed=0, streams=7)
    b = PointStream(8, 4, 16, data_seed=1, streams=7)
    assert torch.equal(a.batch(5)[0], PointStream(8, 4, 16, data_seed=0).batch(5)[0])
    assert not torch.equal(a.batch(5)[0], a.batch(6)[0])
    # P2's 7 loader workers seeded data_seed + worker: seed 1's stream 0 is seed 0's stream 1
    assert torch.equal(b.batch(0)[0], a.batch(1)[0]) and torch.equal(b.batch(7)[0], a.batch(8)[0])
    independent = PointStream(8, 4, 16, data_seed=1, streams=1)
    assert not torch.equal(independent.batch(0)[0], PointStream(8, 4, 16, data_seed=0, streams=1).batch(1)[0])
    # the evaluation set does not depend on the data seed
    assert torch.equal(next(a.eval_batches())[0], next(b.eval_batches())[0])


def test_the_stream_reseeds_one_generator_per_batch():
    """Batch k is drawn from a generator seeded for (stream, position) alone: whatever was drawn
    before, and the same numbers as a fresh CPU generator (the stream before it moved to the
    training device)."""
    s = PointStream(8, 4, 16, data_seed=3)
    first = s.batch(5)[0]
    s.batch(6), s.batch(100)
    assert torch.equal(s.batch(5)[0], first)
    assert torch.equal(first, sample_sphere(16, 4, 8, _generator(3 + 5 % 7, 5 // 7)))
    assert s.device.type == "cpu" and first.device.type == "cpu"


def _authors_epoch(data_seed: int, dim: int, tokens: int, batch: int, batches: int, workers: int = 7) -> list:
    """P2's loader as its code ran, written from its description (papers.md 2.1): each of 7 workers
    iterates a dataset whose generator is seeded data_seed + worker and yields one point set at a
    time, `torch.randn((d, N))` normalised per point (column); the DataLoader batches `batch`
    consecutive sets of one worker, taking batch k from worker k mod 7. Returns one epoch's batches
    as the authors' (B, d, N) tensors."""
    def worker_sets(w):
        g = torch.Generator()
        g.manual_seed(data_seed + w)
        while True:
            x = torch.randn((dim, tokens), generator=g)
            yield x / x.norm(dim=0)

    iterators = [worker_sets(w) for w in range(workers)]
    return [torch.stack([next(iterators[k % workers]) for _ in range(batch)]) for k in range(batches)]


def test_replay_draws_the_authors_points_every_epoch_and_after_a_resume():
    """`replay`: batch k of every epoch is the authors' batch k, bit for bit (in our (B, N, d)
    layout), also when a fresh stream is asked for a late batch first (a resumed run); the
    evaluation set is the fresh stream's."""
    authors = _authors_epoch(2, 8, 4, 16, 10)
    replay = PointStream(8, 4, 16, data_seed=2, replay=10)
    for k in range(10):
        assert torch.equal(replay.batch(k)[0], authors[k].transpose(1, 2))
        assert torch.equal(replay.batch(k + 10)[0], authors[k].transpose(1, 2))  # the next epoch replays it
    resumed = PointStream(8, 4, 16, data_seed=2, replay=10)
    assert torch.equal(resumed.batch(379)[0], authors[9].transpose(1, 2))
    assert torch.equal(resumed.batch(2)[0], authors[2].transpose(1, 2))
    x, y = replay.batch(3)
    assert torch.equal(y, farthest_targets(x)) and x.is_contiguous()
    fresh = PointStream(8, 4, 16, data_seed=2)
    assert torch.equal(next(replay.eval_batches())[0], next(fresh.eval_batches())[0])
    # the authors' data seeds 2 and 3 share 6 of 7 workers: seed 3's worker 0 is seed 2's worker 1
    assert torch.equal(PointStream(8, 4, 16, data_seed=3, replay=10).batch(0)[0], replay.batch(1)[0])


def test_replayed_batches_are_kept_where_an_epoch_fits(monkeypatch):
    """An epoch that fits REPLAY_KEEP_BYTES is drawn once and kept (the same tensors every epoch);
    a larger one is drawn again every epoch from the workers' kept states: the authors' points
    again, in the second epoch too, and the same targets."""
    import leaner.data.point_stream as point_stream

    kept = PointStream(8, 4, 16, data_seed=2, replay=10)
    assert kept.batch(13)[0] is kept.batch(3)[0]
    monkeypatch.setattr(point_stream, "REPLAY_KEEP_BYTES", 2 * 4 * 10 * 16 * 4 * 8 - 1)  # one byte short
    drawn = PointStream(8, 4, 16, data_seed=2, replay=10)
    authors = _authors_epoch(2, 8, 4, 16, 10)
    for k in (13, 3, 19, 0, 27, 10):
        x, y = drawn.batch(k)
        assert x is not kept.batch(k)[0] and torch.equal(x, authors[k % 10].transpose(1, 2))
        assert torch.equal(y, kept.batch(k)[1])


def test_independent_replicates_share_no_batch_and_no_initial_weights(tmp_path):
    """`replicates: independent`: no training batch of one data seed is another's, in either regime,
    and each run starts from its own init; `paper`: every run starts from init seed 613."""
    from leaner.tasks.nearest import NearestPoint
    from leaner.training.start import initial_model

    for replay in (None, 10):
        a, b = (PointStream(8, 4, 16, data_seed=s, replay=replay, independent=True) for s in (2, 3))
        seen = {a.batch(k)[0].numpy().tobytes() for k in range(20)}
        assert not seen & {b.batch(k)[0].numpy().tobytes() for k in range(20)}
        # nor a paper run's: seed 2's independent stream is not P2's stream 2 (any paper seed's)
        paper = {PointStream(8, 4, 16, data_seed=s, replay=replay).batch(k)[0].numpy().tobytes()
                 for s in range(4) for k in range(20)}
        assert not seen & paper
    inits = {}
    for replicates in ("paper", "independent"):
        for seed in (0, 1):
            spec, manifest = nearest_setup(tmp_path / f"{replicates}{seed}", seed=seed,
                                           recipe={"replicates": replicates})
            run = RunSpec.of(spec)
            task = NearestPoint(run, str(manifest), torch.device("cpu"))
            assert task.data_info()["replicates"] == replicates and task.stream.independent == (replicates != "paper")
            model, _ = initial_model(run, tmp_path / f"{replicates}{seed}" / "run", _SingleProcess(), print)
            inits[replicates, seed] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.equal(inits["paper", 0], inits["paper", 1])
    assert not torch.equal(inits["independent", 0], inits["independent", 1])


class _SingleProcess:
    """What initial_model reads of a run's processes: one, the main one."""

    main, active, world, rank = True, False, 1, 0


def _p2_reference(dim, tokens, depth, heads, modules, ff, posn, posn_dim):
    """P2's encoder (their encoders.py) from stock PyTorch modules, built in their order from their
    init seed: a TransformerEncoderLayer (its own self_attn, unused, then linear1, linear2), then the
    W attention modules, then the concatenated table (features x N, empty without it), then the
    additive one. Returns (its forward, its tensors by our names)."""
    torch.manual_seed(613)
    d_model = dim + (posn_dim if posn == "concatenated" else 0)
    layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
    widened = [nn.MultiheadAttention(d_model, heads, batch_first=True) for _ in range(modules)]
    concatenated = torch.empty(posn_dim if posn == "concatenated" else 0, tokens).uniform_(-1, 1)
    additive = torch.empty(dim, tokens).normal_(-1, 1) if posn == "additive" else None

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True)

    def forward(x):
        if additive is not None:
            x = x + additive.T
        if len(concatenated):
            x = torch.cat([x, concatenated.T.expand(len(x), -1, -1)], dim=-1)
        for _ in range(depth):  # nn.TransformerEncoder: every layer a copy of the first
            x = unit(x + torch.stack([m(x, x, x, need_weights=False)[0] for m in widened]).mean(0))
            x = unit(x + layer.linear2(torch.relu(layer.linear1(x))))
        return x[..., :dim]

    batched = AveragedMultiheadAttention.from_modules(widened)
    tensors = {"attn.in_proj_weight": batched.in_proj_weight, "attn.in_proj_bias": batched.in_proj_bias,
               "attn.proj.weight": batched.proj.weight, "attn.proj.bias": batched.proj.bias,
               "mlp.fc1.weight": layer.linear1.weight, "mlp.fc1.bias": layer.linear1.bias,
               "mlp.fc2.weight": layer.linear2.weight, "mlp.fc2.bias": layer.linear2.bias}
    table = additive if additive is not None else concatenated if len(concatenated) else None
    return forward, tensors, None if table is None else table.T


@pytest.mark.parametrize("posn,heads,modules", [("none", 2, 3), ("additive", 4, 2), ("concatenated", 2, 2)])
def test_the_init_seed_gives_the_authors_initial_weights(posn, heads, modules):
    """Seed 613 through the training path's seeding and model builder gives the weights P2's code
    starts from, and the same function."""
    from leaner.training.resume import seed_everything

    shape = {"dim": 8, "tokens": 5, "depth": 2, "heads": heads, "modules": modules, "ff": 16, "posn": posn,
             "posn_dim": 4}
    forward, want, table = _p2_reference(**shape)
    seed_everything(613)
    model = NearestPointEncoder(**shape)
    for block in model.blocks:
        got = dict(block.named_parameters())
        for name, tensor in want.items():
            assert torch.equal(got[name].detach(), tensor.detach()), name
    if table is not None:
        assert torch.equal(model.pos_embed.detach(), table)
    x = sample_sphere(3, 5, 8, torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), forward(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("d_model,heads,modules", [(8, 1, 1), (8, 2, 3), (12, 4, 2)])
def test_batched_attention_equals_w_separate_modules_averaged(d_model, heads, modules):
    torch.manual_seed(0)
    mhas = [nn.MultiheadAttention(d_model, heads, batch_first=True) for _ in range(modules)]
    for m in mhas:  # non-zero biases, so their handling is tested too
        nn.init.normal_(m.in_proj_bias)
        nn.init.normal_(m.out_proj.bias)
    batched = AveragedMultiheadAttention.from_modules(mhas)
    x = torch.randn(3, 7, d_model)
    want = torch.stack([m(x, x, x, need_weights=False)[0] for m in mhas]).mean(0)
    torch.testing.assert_close(batched(x), want, rtol=1e-5, atol=1e-6)


def test_modules_are_initialised_independently_and_layers_identically():
    torch.manual_seed(0)
    model = NearestPointEncoder(dim=8, tokens=4, depth=3, heads=2, modules=2, ff=16)
    w = model.blocks[0].attn.in_proj_weight
    assert not torch.equal(w[0], w[1])
    for blk in model.blocks[1:]:
        for (n1, p1), (n2, p2) in zip(model.blocks[0].named_parameters(), blk.named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)
    counts = param_counts(model)
    per_module = 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8  # nn.MultiheadAttention(8, 2): in- and out-projection
    assert counts["attention"] == 3 * 2 * per_module
    assert counts["mlp"] == 3 * (8 * 16 + 16 + 16 * 8 + 8) and counts["norm"] == 3 * 2


@pytest.mark.parametrize("posn,d_model", [("none", 8), ("additive", 8), ("concatenated", 8 + 6)])
def test_positional_encodings(posn, d_model):
    torch.manual_seed(0)
    model = NearestPointEncoder(dim=8, tokens=5, depth=1, heads=2, ff=16, posn=posn, posn_dim=6)
    assert model.blocks[0].attn.d_model == d_model
    x = sample_sphere(2, 5, 8, torch.Generator().manual_seed(1))
    assert model(x).shape == (2, 5, 8)
    if posn == "none":  # permutation equivariant without positions
        perm = torch.tensor([4, 2, 0, 1, 3])
        torch.testing.assert_close(model(x[:, perm]), model(x)[:, perm], rtol=1e-5, atol=1e-6)
    if posn == "additive":  # P2's quirk: init normal with mean -1
        assert model.pos_embed.mean().item() < -0.5


def test_hand_built_construction_solves_the_task():
    """P2's construction: Q K^T = -c I, V = O = I, zero feed-forward; the post-norm returns the
    farthest point (papers.md 2.6)."""
    d, c = 16, 1000.0
    model = NearestPointEncoder(dim=d, tokens=8, depth=1, heads=1, modules=1, ff=4)
    attn = model.blocks[0].attn
    with torch.no_grad():
        eye = torch.eye(d)
        attn.in_proj_weight[0].copy_(torch.cat([-c * math.sqrt(d) * eye, eye, eye]))  # scores: -c <x_i, x_j>
        attn.in_proj_bias.zero_()
        attn.proj.weight[0].copy_(1e3 * eye)  # O = large identity: the residual x_i is negligible
        attn.proj.bias.zero_()
        for p in model.blocks[0].mlp.parameters():
            p.zero_()
    stream = PointStream(d, 8, 256, data_seed=0)
    x, y = stream.batch(0)
    assert nearest_point_mse(model(x), y).item() < 0.01
    assert qk_identity_angle(model) == [pytest.approx(180.0, abs=1e-3)]


def test_p2_epoch_schedule():
    recipe = Recipe.of({"lr": 1.0, "min_lr": 0.0, "warmup_frac": 0.05, "schedule": "epoch_cosine"})
    per_epoch = [lr_at(e * 100, 100 * 100, recipe, steps_per_epoch=100) for e in range(100)]
    assert per_epoch[0] == 0.0  # warm-up starts at lr 0
    assert per_epoch[4] == pytest.approx(1.0) and per_epoch[5] == pytest.approx(1.0)
    assert lr_at(250, 10000, recipe, 100) == per_epoch[2]  # constant within an epoch
    assert per_epoch[-1] < 0.01 and all(a >= b for a, b in zip(per_epoch[5:], per_epoch[6:]))


def test_short_training_run_learns_and_keeps_init_seed(tmp_path):
    spec, manifest = nearest_setup(tmp_path)
    model = spec["model"]
    m = train(spec, str(manifest), tmp_path / "a", progress=False)
    assert m["status"] == "ok" and m["steps"] == 200
    assert m["best"]["train_loss"] < 0.8 * m["final"]["eval_mse"] + 0.5  # learned from the start (~2)
    assert m["best"]["train_loss"] < 1.0 and len(m["diagnostics"]["qk_angle_deg"]) == 1
    assert m["data"]["points_drawn_on"] == "cpu"
    other = copy.deepcopy(spec)
    other["seed"] = 4  # another data seed: same init (P2's init seed 613)
    train(other, str(manifest), tmp_path / "b", progress=False)
    from safetensors.torch import load_file

    a, b = load_file(str(tmp_path / "a" / "init.safetensors")), load_file(str(tmp_path / "b" / "init.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert build_model(model)(torch.randn(2, 4, 8)).shape == (2, 4, 8)
    # the summary reads the run's plateau from its history: the best training MSE's last-quarter fall
    import pandas as pd

    from leaner.analysis.summary import summarize_study

    row = summarize_study("p2", [str(tmp_path / "a" / "metrics.json")], [], {},
                          history_paths=[str(tmp_path / "a" / "history.csv")]).iloc[0]
    h = pd.read_csv(tmp_path / "a" / "history.csv")
    best_before = h.loc[h["step"] <= 0.75 * h["step"].max(), "train_loss"].min()
    assert row["train_loss_last_quarter_fall"] == pytest.approx((best_before - h["train_loss"].min()) / best_before)
    assert row["train_loss_last_quarter_fall"] >= 0 and row["eval_mse"] == m["final"]["eval_mse"]


def test_the_plateau_is_read_from_the_curve_and_the_fresh_point_mse_sits_beside_the_training_one():
    import pandas as pd

    from leaner.analysis.summary import last_quarter_fall
    from leaner.analysis.tables import by_config

    steps = list(range(10, 110, 10))
    flat = pd.DataFrame({"step": steps, "train_loss": [1.0, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]})
    falling = pd.DataFrame({"step": steps, "train_loss": [1.0 - 0.09 * i for i in range(10)]})
    assert last_quarter_fall(flat) == 0.0
    assert last_quarter_fall(falling) == pytest.approx((0.46 - 0.19) / 0.46)  # best 0.46 at step 70, 0.19 at 100
    assert math.isnan(last_quarter_fall(flat.iloc[:1])) and math.isnan(last_quarter_fall(flat[["step"]]))
    rows = [{"depth": 1, "heads": 2, "head_dim": 8, "tokens": 8, "seed": s, "best_train_loss": 0.5,
             "eval_mse": 0.6 + 0.1 * s, "train_loss_last_quarter_fall": 0.01 * s} for s in range(3)]
    table = by_config(_summary(rows)).iloc[0]
    assert table["eval_mse_mean"] == pytest.approx(0.7) and table["eval_mse_min"] == pytest.approx(0.6)
    assert table["last_quarter_fall_max"] == pytest.approx(0.02)


def _summary(rows):
    import pandas as pd

    base = {"task": "nearest_point", "modules": 1, "dim": 16, "posn": "none", "status": "ok", "params_total": 1,
            "protocols": ""}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_acceptance_checks_pass_and_fail_on_the_numbers():
    from leaner.analysis.tables import acceptance_checks
    from leaner.grid import ACCEPTANCE_CHECKS

    rows = []
    for seed, (full, half) in enumerate([(0.04, 0.57), (0.05, 0.58)]):
        rows += [{"depth": 1, "heads": 1, "head_dim": 16, "tokens": 8, "seed": seed, "best_train_loss": full,
                  "qk_angle_deg_min": 179.0 - seed * 20},
                 {"depth": 1, "heads": 2, "head_dim": 8, "tokens": 8, "seed": seed, "best_train_loss": half,
                  "qk_angle_deg_min": 100.0}]
    # figN-like points at 2 layers: rank 1 at N=4 and N=64
    rows += [{"depth": 2, "heads": 16, "head_dim": 1, "tokens": n, "seed": 0, "best_train_loss": mse,
              "qk_angle_deg_min": 90.0} for n, mse in ((4, 0.02), (64, 0.81))]
    rows += [{"depth": 2, "heads": 1, "head_dim": 16, "tokens": n, "seed": 0, "best_train_loss": 0.01,
              "qk_angle_deg_min": 90.0} for n in (4, 64)]
    checks = acceptance_checks(_summary(rows), ACCEPTANCE_CHECKS).set_index("check")
    gap = checks.loc["1 layer, W=1, d=16, N=8, posn=none: MSE(rank d/2) / MSE(rank d)"]
    assert gap["observed"] == pytest.approx(0.57 / 0.04) and gap["pass"]  # min over seeds
    assert checks.loc["2 layers, W=1, d=16, posn=none, rank 1: MSE at N=4", "pass"]
    assert checks.loc["2 layers, W=1, d=16, posn=none, rank 1: MSE at N >= 64", "pass"]
    angle = checks.loc["fig_perfect: 1 layer, 1 head, W=1, d=16, N=8: angle(QK^T, I), every head"]
    assert angle["observed"] == pytest.approx(159.0) and not angle["pass"]  # seed 1's head is off
    only = acceptance_checks(_summary(rows), checks=["full_rank_gap"])
    assert len(only) == 1
    rows[1]["best_train_loss"] = rows[3]["best_train_loss"] = 0.3  # gap of 7.5x: fails
    assert not acceptance_checks(_summary(rows), checks=["full_rank_gap"])["pass"].iloc[0]


def test_the_replay_regime_reaches_the_training_batches(tmp_path):
    """`stream: replay` in the dataset's settings: every epoch the task trains on the same batches."""
    from leaner.tasks.nearest import NearestPoint

    for stream, same in (("replay", True), ("fresh", False)):
        spec, manifest = nearest_setup(tmp_path / stream, stream=stream)
        task = NearestPoint(RunSpec.of(spec), str(manifest), torch.device("cpu"))
        first, second = list(task.train_batches(0)), list(task.train_batches(1))
        assert len(first) == len(second) == spec["recipe"]["steps_per_epoch"]
        assert all(torch.equal(a[0], b[0]) for a, b in zip(first, second)) == same
        assert task.data_info()["stream"].startswith(stream)


def test_p2_tables_say_what_a_replicate_is_and_give_intervals_only_over_independent_ones(tmp_path):
    """Under P2's own replicates (init 613 shared, streams shared) by_config and the heads effect give
    no interval across seeds and say why; under independent replicates they give one; every
    table's caption names what a replicate is."""
    import pandas as pd

    from leaner.analysis import report
    from leaner.analysis.overview import NOT_INDEPENDENT, configurations, heads_effect
    from leaner.analysis.summary import read_summary
    from leaner.analysis.tables import by_config

    rows = [{"depth": 1, "heads": h, "head_dim": 16 // h, "tokens": 8, "seed": s, "best_train_loss": mse + 0.01 * s,
             "error": mse + 0.01 * s, "variant": f"v{h}{s}", "study": "p2"}
            for h, mse in ((1, 0.05), (2, 0.6)) for s in range(3)]
    for replicates, independent in (("paper", False), ("independent", True)):
        summary = _summary([{**r, "replicates": replicates} for r in rows])
        table = by_config(summary)
        assert table["best_train_loss_lo"].notna().all() == independent
        assert configurations([summary])["error_lo"].notna().all() == independent  # the overview's per-config table
        effect = heads_effect(configurations([summary])).iloc[0]
        assert (effect["verdict"] == NOT_INDEPENDENT) == (not independent)
        assert effect["replicate"] == ("independent seed" if independent else
                                       "P2 data seed (shared init 613 and streams)")
        path = tmp_path / f"{replicates}.csv"
        summary.to_csv(path, index=False)
        report.write_tables(report.StudyData("p2", read_summary(path)), tmp_path / replicates,
                            [("by_config", report.by_config)])
        caption = (tmp_path / replicates / "p2-by_config.md").read_text().split("\n")[0]
        assert ("not independent and no interval" in caption) != independent
        assert ("a replicate is an independent seed" in caption.lower()) == independent
    assert pd.isna(by_config(_summary(rows)).iloc[0]["best_train_loss_lo"])  # unrecorded: the paper's regime


def test_replicates_is_checked_before_any_job():
    import yaml

    from leaner.workflow.config import ConfigError
    from leaner.workflow.plan import build_plan

    from conftest import TINY

    cfg = yaml.safe_load(TINY.read_text())
    cfg["studies"]["tiny_nearest"]["recipe"]["replicates"] = "independent"
    plan = build_plan(cfg)
    assert {v.recipe.replicates for v in plan.studies["tiny_nearest"].variants.values()} == {"independent"}
    # each run's own init seed: the spec says so (null: the variant's seed), not P2's 613
    assert {v.recipe.init_seed for v in plan.studies["tiny_nearest"].variants.values()} == {None}
    assert {v.recipe.init_seed for v in build_plan(yaml.safe_load(TINY.read_text())).studies["tiny_nearest"]
            .variants.values()} == {613}
    for study, value, message in (
            ("tiny_nearest", "indep", 'config error: studies.tiny_nearest.recipe.replicates: "indep" is not allowed '
                                      "(allowed: one of paper, independent)"),
            ("tiny", "independent", "config error: studies.tiny.recipe.replicates: not used by task "
                                    "image_classification (allowed: leave it out; it is for task nearest_point)"),
            ("tiny_nearest", "independent", "config error: studies.tiny_nearest.recipe.init_seed: 7 with replicates: "
                                            "independent (allowed: leave it out, each run starts from its own seed; "
                                            "or replicates: paper)")):
        bad = yaml.safe_load(TINY.read_text())
        bad["studies"][study]["recipe"]["replicates"] = value
        if "init_seed" in message:
            bad["studies"][study]["recipe"]["init_seed"] = 7
        with pytest.raises(ConfigError) as err:
            build_plan(bad)
        assert message in str(err.value)
