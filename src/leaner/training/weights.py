"""Model weights on disk: safetensors written atomically, with the variant's spec (its id
included) as their one metadata key, so that the same weights are the same bytes in any process.

Training writes init.safetensors, model.safetensors and the weights kept at the study's
conditioning.steps (checkpoints/step<N>.safetensors); conditioning and fine-tuning read them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..io import atomic_path, sha256_file

KEPT_DIR = "checkpoints"  # weights kept at conditioning.steps (in .resume/ until the run ends)


def save_weights(model, path: Path, spec: dict) -> None:
    """safetensors of the model; a tensor shared by two names (a tied LM head) is stored once."""
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, value in model.state_dict().items():
        key = (value.data_ptr(), value.shape, value.stride())
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = value.detach().to("cpu").contiguous()
    with atomic_path(path) as tmp:
        # one metadata key: safetensors writes several in a hash map's order, which changes from one
        # process to the next, and the same weights would get other bytes (and sha256) on a re-run
        save_file(tensors, str(tmp), metadata={"spec": json.dumps(spec, sort_keys=True)})


def load_weights(model, path: str | Path) -> None:
    """Load what save_weights wrote; names it skipped must be tied to a loaded tensor."""
    from safetensors.torch import load_file

    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    state = model.state_dict()
    shared = {(v.data_ptr(), v.shape) for k, v in state.items() if k not in missing}
    untied = [k for k in missing if (state[k].data_ptr(), state[k].shape) not in shared]
    if untied or unexpected:
        raise ValueError(f"{path}: weights do not fit the model (missing {untied}, unexpected {unexpected})")


def load_pretrained(model, path: str | Path) -> list[str]:
    """Start from a pretrained body (fine-tuning): every weight of `path` whose name and shape fit,
    the output head excepted; returns the names left at their fresh initialisation."""
    from safetensors.torch import load_file

    state = model.state_dict()
    given = {k: v for k, v in load_file(str(path)).items()
             if not k.startswith("head.") and k in state and state[k].shape == v.shape}
    if not given:
        raise ValueError(f"{path}: no weight fits this model")
    model.load_state_dict(given, strict=False)
    fresh = sorted(k for k in state if k not in given)
    body = [k for k in fresh if not k.startswith("head.")]
    if body:
        raise ValueError(f"{path}: pretrained weights lack {', '.join(body[:5])} (the encoder must match)")
    return fresh


def kept_steps(requested: list, total_steps: int) -> list[int]:
    """The steps whose weights a run keeps for conditioning: integers are steps, numbers in (0, 1)
    fractions of the run (rounded, at least step 1); steps at or past the end are the final weights."""
    steps = {int(x) if isinstance(x, int) or float(x) >= 1 else max(1, round(float(x) * total_steps))
             for x in requested}
    return sorted(s for s in steps if 0 < s < total_steps)


def kept_name(step: int) -> str:
    return f"step{step}"


def publish_kept(tmp_dir: Path, final_dir: Path, keep: set[int]) -> list[dict]:
    """Move the weights kept during training to <out>/checkpoints/ (replacing an older run's) and
    describe them for metrics.json: [{name, step, file, sha256}] in step order. `keep` holds the
    steps the run trained to: a diverged run stops before its later steps, and drops any it saved
    between the bad step and the check that found it."""
    shutil.rmtree(final_dir, ignore_errors=True)
    if tmp_dir.exists():
        os.replace(tmp_dir, final_dir)
    else:
        final_dir.mkdir(parents=True)
    wanted = {f"{kept_name(step)}.safetensors" for step in keep}
    for path in final_dir.iterdir():
        if path.name not in wanted:
            path.unlink()
    out = []
    for step in sorted(keep):
        path = final_dir / f"{kept_name(step)}.safetensors"
        if path.exists():
            out.append({"name": kept_name(step), "step": step, "file": f"{KEPT_DIR}/{path.name}",
                        "sha256": sha256_file(path)})
    return out
