"""Run under torchrun by test_distributed.py: one task's evaluation of one initial model, every
rank evaluating its share of the batches (Task.share_evaluation); rank 0 writes the metrics as
JSON (floats as repr: exact) with the batches each rank evaluated, to compare across process counts.

    python -m torch.distributed.run --standalone --nproc-per-node N tests/eval_shards.py SPEC DATA OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from leaner.compute import distributed
from leaner.models import build_model
from leaner.tasks.trainers import make_task
from leaner.training.resume import seed_everything
from leaner.training.step import autocast_for


def main(spec_json: str, data: str, out: str) -> None:
    torch.set_num_threads(1)
    spec, device = json.loads(spec_json), torch.device("cpu")
    ctx = distributed.init(device)
    seed_everything(spec["seed"])
    model = build_model(spec["model"])
    task = make_task(spec, data, device)
    if ctx.active:
        task.share_evaluation(ctx.rank, ctx.world, ctx.gather)
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    scores = task.evaluate(model, autocast_for(device, "fp32"))
    batches = ctx.gather(len(calls))  # how many batches each rank evaluated
    if ctx.main:
        Path(out).write_text(json.dumps({"scores": scores, "batches": batches}))
    ctx.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
