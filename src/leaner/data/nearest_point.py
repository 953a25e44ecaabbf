"""Dataset kind nearest_point: P2's point sets (point_stream.py), nothing to download; its record
and code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..io import write_json
from ..runspec import RunSpec
from .kinds import DatasetKind, add_kind, settings

if TYPE_CHECKING:
    from .point_stream import PointStream


def prepare_nearest_point(name: str, spec: dict, out_manifest: str) -> dict:
    """Nothing to download: record the generator's settings, which every run of the study reads."""
    manifest = {"dataset": name, "kind": "nearest_point",
                "source": "i.i.d. uniform points on the unit sphere (normalised Gaussians), farthest-point targets",
                **{k: spec[k] for k in ("stream", "streams", "eval_samples", "eval_seed")}}
    write_json(out_manifest, manifest)
    return manifest


def open_point_stream(manifest_path: str, spec: RunSpec, device) -> PointStream:
    """What a run reads (the kind's `open`): the stream of its spec's point sets, drawn where the
    model trains (no copy, no host work per step)."""
    from ..io import read_json
    from .point_stream import PointStream

    meta, recipe, model = read_json(manifest_path), spec.recipe, spec.model
    return PointStream(model.dim, model.tokens, recipe.batch_size, spec.seed, streams=meta["streams"],
                       eval_samples=meta["eval_samples"], eval_seed=meta["eval_seed"], device=device,
                       replay=recipe.steps_per_epoch if meta["stream"] == "replay" else None,
                       independent=recipe.replicates == "independent")


def nearest_point_sample(name: str, entry: dict, folder) -> dict:
    """Eight evaluation point sets (training draws its own)."""
    return {**entry, "eval_samples": 8}


# The kind this module defines: its record, with the code above.
add_kind(DatasetKind(
    "nearest_point", {"stream": "fresh", "streams": 7, "eval_samples": 4096, "eval_seed": 12345},
    settings(10, 2000, 1, False), implicit=True, streamed=True,
    tasks_read="nearest_point.PointStream: point sets drawn on the run's device, by (seed, step)",
    prepare=prepare_nearest_point, open=open_point_stream, sample=nearest_point_sample,
    keys={
        "stream": {"enum": ["fresh", "replay"], "description": (
            "nearest_point: fresh (new points every batch: the training MSE is the population risk) or replay (P2's "
            "code as it ran: every epoch replays the same steps_per_epoch batches, so the training MSE is a "
            "training-set MSE; the fresh-point MSE is reported beside it)")},
        "streams": {"$ref": "#/$defs/posint", "description": (
            "nearest_point: interleaved data streams (P2: 7 loader workers seeded data_seed + worker)")},
        "eval_samples": {"$ref": "#/$defs/posint", "description": "nearest_point: size of the fixed evaluation set"},
        "eval_seed": {"$ref": "#/$defs/nonnegint"}},
    about="P2's stream of points on the unit sphere (generated, never stored)."))
