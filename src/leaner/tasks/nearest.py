"""P2's nearest-point task (the farthest point of a set on the sphere)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..runspec import RunSpec
from .base import Task, trains


def nearest_point_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """P2's loss: squared error summed over coordinates, averaged over tokens and batch (so the
    zero predictor scores 1 on unit vectors)."""
    return (pred.float() - target).pow(2).sum(-1).mean()


@trains("nearest_point")
class NearestPoint(Task):
    """P2's farthest-point task: a stream of point sets, MSE to each point's farthest neighbour.
    The run's metric is P2's: the minimum over epochs of the epoch-mean training MSE. With a fresh
    stream that is the population risk; with the authors' replayed set (`stream: replay`) it is a
    training-set MSE, and eval_mse, on points no run trains on, is the population risk beside it."""

    name = "nearest_point"

    def __init__(self, spec: RunSpec, data_path: str, device: torch.device):
        from ..data import open_data

        self.device = device
        self.steps_per_epoch = spec.recipe.steps_per_epoch
        self.stream = open_data(data_path, spec, device)
        self._eval = None

    def train_batches(self, epoch: int, skip: int = 0, rank: int = 0, world: int = 1) -> Iterator[Any]:
        """This process's share of each global batch of `epoch` (every rank draws the global batch
        from the stream's seed and keeps its rows: cheap next to the model)."""
        from ..compute.distributed import check_split, shard

        check_split(self.stream.batch_size, self.stream.batch_size, world)
        first = epoch * self.steps_per_epoch + skip
        for batch in self.stream.batches(first, (epoch + 1) * self.steps_per_epoch):
            yield shard(batch, rank, world)

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        return nearest_point_mse(model(x), y), len(x)

    @torch.no_grad()
    def evaluate(self, model, autocast) -> dict[str, float]:
        """MSE on the fixed evaluation set, drawn once and kept on the device; one sync."""
        if self._eval is None:
            self._eval = [(x.to(self.device), y.to(self.device)) for x, y in self.stream.eval_batches()]
        rank, world = self.eval_part
        s = self.sums(model, self._eval[rank::world], autocast,
                      lambda pred, y: {"err": nearest_point_mse(pred, y).double() * len(y), "n": len(y)})
        return {"eval_mse": s["err"] / max(s["n"], 1)}

    def probe_inputs(self, n: int) -> torch.Tensor:
        return torch.cat([x for x, _ in self.stream.eval_batches(limit=n)])

    def data_info(self) -> dict:
        kind = self.stream.device.type
        replay = self.stream.replay is not None
        regime = (f"the same {self.stream.replay} batches every epoch (P2's loader): train MSE is a training-set "
                  "MSE, eval_mse the fresh-point MSE" if replay else "new points every batch: train MSE is the "
                  "population risk")
        if replay:
            kind = "cpu"  # the authors' points, drawn on the CPU wherever the run trains
        return {"stream": "replay" if replay else "fresh", "stream_note": regime,
                "replicates": "independent" if self.stream.independent else "paper",
                "points_drawn_on": kind, "generator": "CUDA Philox" if kind == "cuda" else "CPU Mersenne Twister",
                "note": "a pure function of (data seed, step) on either; the GPU's points differ from the CPU's"
                if kind == "cuda" else "a pure function of (data seed, step)"}

    def diagnostics(self, model) -> dict:
        """fig_perfect's statistic for every head of the first layer."""
        from ..models.nearest import qk_identity_angle

        qk = model.blocks[0].attn.qk().detach()
        return {"qk_angle_deg": qk_identity_angle(model),
                "qk_fro": qk.flatten(-2).norm(dim=-1).flatten().tolist()}
