"""`leaner rehearse CONFIG`: a paper config through the real code on the CPU, before the GPU bill.

Every distinct architecture of the config (variants that differ only by seed or recipe share
one) is built at its real shape and taken through what a GPU job will do with it, on synthetic
data of the real shape: JPEG-encoded images at the dataset's size through the real loader and
transforms, token sequences of the real context length, ListOps of LRA's lengths, P2's point
sets of its N and d. Each architecture, in a process of its own:

  1. trains 2 steps at batch 2 (`leaner.training.train.train`), writes its resume checkpoint and stops
     there as a preempted job would;
  2. resumes from that checkpoint (reloaded with weights_only, the model, optimiser and RNG
     states restored) and trains a third step, writing every output a training job writes;
  3. runs its conditioning job as the workflow does (`leaner conditioning`, its own process, with
     the mem_mb its rule asks on the CPU, `memory.conditioning_mem_mb`), as the study configures it
     (the Lanczos estimate of the Jacobian where the block is large, as on ViT-B, cut to 2 steps),
     from the saved weights, at every checkpoint the study keeps, on the probe batch a CPU job
     measures at once (`memory.cpu_chunk`: the study's samples up to 64, fewer where they would
     take over 1 GiB) and one input more, so that a second chunk runs too; the job's peak RSS must
     stay within its mem_mb, as a cluster's memory limit would hold it;
  4. measures the memory a training forward keeps for backward (the rise of the process's peak
     RSS over it), per sample.

The table: parameters, training FLOPs per sample (leaner.models.footprint), those activations per sample, the
resume checkpoint's size, the time taken, and `pass` or the one line that failed. What the CPU
cannot show (CUDA kernels, NCCL, bf16, torch.compile, the loader's worker processes) is for
`make gpu-check` on a GPU machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..io import read_json, write_json
from ..models.config import ModelConfig
from ..provenance import code_state
from ..runspec import RunSpec
from ..schema import Recipe, recipe_spec
from ..workflow.config import did_you_mean

REHEARSAL_RECIPE = {"batch_size": 2, "eval_batch_size": 2, "max_steps": 3, "checkpoint_every": 2,
                    "checkpoint_minutes": None, "eval_every": 1, "num_workers": 0}
STOP_AT = 2  # the checkpoint step at which the first attempt is preempted
COLUMNS = ("study", "variant", "params", "train_gflop_per_sample", "activation_mb_per_sample", "checkpoint_mb",
           "cond_chunk", "cond_peak_mb", "cond_mem_mb", "seconds", "result")


def architectures(plan, studies: list[str] | None = None, ends: bool = False,
                  max_params: float | None = None) -> list[tuple[str, str, int]]:
    """(study, variant, parameters) of one variant per distinct architecture (task and model), of
    at most `max_params` parameters; with `ends`, only the smallest and the largest of each study
    (by parameters, then by the activation memory of a training sample: P2's variants of one width
    differ only there)."""
    from ..models.footprint import footprint

    out = []
    for name, study in plan.studies.items():
        if studies and name not in studies:
            continue
        seen: dict[ModelConfig, tuple] = {}
        for vid, v in study.variants.items():
            if v.model not in seen:
                fp = footprint(v.model, v.recipe.precision, flops=False)
                seen[v.model] = (fp.params, fp.saved + fp.working, vid)
        found = sorted(row for row in seen.values() if max_params is None or row[0] <= max_params)
        chosen = [found[0], found[-1]] if ends and len(found) > 1 else found
        out += [(name, vid, params) for params, _, vid in chosen]
    return out


def rehearsal_spec(spec: dict) -> dict:
    """The variant's spec at its real shape, with a rehearsal's recipe (a few steps, 2 samples a
    micro-batch) and conditioning on a CPU job's probe chunk and one input more (step 3), the
    Lanczos estimate (where configured) cut to 2 steps: its code at the real shape, not a
    converged value (64 float64 steps on ViT-B's 12 layers take minutes per checkpoint on a CPU)."""
    from ..models.memory import cpu_chunk

    samples = spec["conditioning"]["samples"]
    cond = {**spec["conditioning"], "samples": min(samples, cpu_chunk(spec["model"], samples) + 1),
            "lanczos_steps": 2, "jacobian_samples": min(1, spec["conditioning"].get("jacobian_samples", 0))}
    recipe = Recipe.of({**spec["recipe"], **REHEARSAL_RECIPE})
    recipe = dataclasses.replace(recipe, batch_size=recipe.batch_size * recipe.accumulate,  # 2 samples a micro-batch
                                 # max_steps steps whatever the epochs and the data give an epoch (one step each)
                                 epochs=max(recipe.epochs, recipe.max_steps))
    return {**spec, "recipe": recipe_spec(recipe), "conditioning": cond}


# ------------------------------------------------------------------------------------- synthetic data

def synthetic_dataset(name: str, spec: dict, root: Path) -> Path:
    """A prepared dataset of `spec`'s kind and shape, small, made here (its kind's rehearsal
    sample); returns its manifest."""
    from ..data import prepare, rehearsal_sample

    manifest = root / name / "manifest.json"
    if manifest.exists():
        return manifest
    manifest.parent.mkdir(parents=True, exist_ok=True)  # as Snakemake makes an output's folder
    prepare(name, rehearsal_sample(name, spec, root / name), str(manifest))
    return manifest


# ------------------------------------------------------------------------------------- one architecture

def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))


# `leaner conditioning ARGS` as its console entry runs it, then the process's own peak RSS (VmHWM:
# this process image only; ru_maxrss would also count the parent's peak, which a fork carries
# across exec) written to the file named first
_PEAK_OF_JOB = """import os, sys
from leaner.cli import main
code = main(sys.argv[2:])
with open("/proc/self/status") as fh:
    peak = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as fh:
    fh.write(peak)
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


def conditioning_job(out: Path, manifest: Path, mem_mb: int) -> float:
    """The conditioning job of the run in `out` as the workflow runs it (`leaner conditioning`, in a
    process of its own, given its mem_mb); the peak RSS of that process, MB. Raises on a failure."""
    args = ["conditioning", "--metrics", str(out / "metrics.json"), "--init", str(out / "init.safetensors"),
            "--final", str(out / "model.safetensors"), "--data", str(manifest), "--out",
            str(out / "conditioning.csv"), "--device", "cpu", "--mem-mb", str(mem_mb)]
    peak = out / "conditioning.peak_kb"
    with open(out / "conditioning.log", "w") as log:
        code = subprocess.run([sys.executable, "-c", _PEAK_OF_JOB, str(peak), *args], stdout=log,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        last = (out / "conditioning.log").read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(f"the conditioning job exited {code}: {last[0][:300]}")
    return int(peak.read_text()) / 1024


@contextlib.contextmanager
def peak_rise_mb():
    """{"mb": the rise of the process's peak RSS over the block}, filled in at its end."""
    out = {}
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current RSS
    before = _rss_kb("VmRSS")
    yield out
    out["mb"] = (_rss_kb("VmHWM") - before) / 1024


def activation_mb_per_sample(spec: RunSpec, manifest: Path, weights: Path) -> float:
    """MB per sample that a training forward pass keeps for backward: the rise of the process's
    peak RSS over the forward (the activations are all alive at its end; the backward then frees
    them as it allocates the gradients)."""
    import torch

    from ..models import build_model
    from ..tasks.trainers import make_task
    from ..training.weights import load_weights

    model = build_model(spec.model)
    load_weights(model, str(weights))
    model.train()
    task = make_task(spec, str(manifest), torch.device("cpu"))
    batch = next(iter(task.train_batches(0)))
    with peak_rise_mb() as peak:
        loss, _ = task.loss(model, batch)
    loss.backward()
    return peak["mb"] / len(batch[0])


def rehearse_one(spec: dict, manifest: Path, work: Path) -> dict:
    """Steps 1-4 of the module docstring for one variant's architecture; raises on a failure."""
    import torch

    from ..measure.conditioning import probe_limit
    from ..models.footprint import footprint
    from ..models.memory import conditioning_mem_mb, model_chunk
    from ..training.resume import RESUME_DIR, RESUME_FILE
    from ..training.train import train

    real_cond = spec["conditioning"]
    spec = RunSpec.of(rehearsal_spec(spec))
    out = work / spec.study / spec.variant
    if out.exists():
        shutil.rmtree(out)
    train(spec, str(manifest), out, device="cpu", progress=False, stop_after=STOP_AT)
    state = out / RESUME_DIR / RESUME_FILE
    if not state.exists() or (out / "metrics.json").exists():
        raise RuntimeError(f"no resume checkpoint at step {STOP_AT}")
    checkpoint_mb = state.stat().st_size / 2**20
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        metrics = train(spec, str(manifest), out, device="cpu", progress=False)
    if f"resumed from step {STOP_AT}" not in log.getvalue():
        raise RuntimeError(f"the second attempt did not resume from step {STOP_AT}: {log.getvalue()[-300:]}")
    if metrics["status"] != "ok" or metrics["steps"] != REHEARSAL_RECIPE["max_steps"]:
        raise RuntimeError(f"training ended {metrics['status']} at step {metrics['steps']}")
    cond_mem_mb = conditioning_mem_mb(spec.model, real_cond)
    chunk = model_chunk(spec.model, probe_limit(torch.device("cpu"), cond_mem_mb, metrics["params"]["total"]))
    cond_peak_mb = conditioning_job(out, manifest, cond_mem_mb)
    import pandas as pd

    cond = pd.read_csv(out / "conditioning.csv")
    if cond.empty:
        raise RuntimeError("conditioning wrote no rows")
    if cond_peak_mb > cond_mem_mb:
        raise RuntimeError(f"the conditioning job (chunks of {chunk}) peaked at {cond_peak_mb:.0f} MB, over the "
                           f"{cond_mem_mb} MB of its mem_mb")
    activations = activation_mb_per_sample(spec, manifest, out / "model.safetensors")
    flops = footprint(spec.model, spec.recipe.precision).flops
    return {"params": metrics["params"]["total"], "train_gflop_per_sample": flops / 1e9,
            "activation_mb_per_sample": activations, "checkpoint_mb": checkpoint_mb, "cond_chunk": chunk,
            "cond_peak_mb": cond_peak_mb, "cond_mem_mb": cond_mem_mb,
            "kappa_methods": ",".join(sorted(set(cond["method"])))}


# ------------------------------------------------------------------------------------- the whole config

def run_child(configs: list[str], study: str, variant: str, work: Path, timeout_s: float) -> dict:
    """One architecture's rehearsal in its own process (its memory its own, a crash its own)."""
    cmd = [sys.executable, "-m", "leaner", "rehearse", *configs, "--only", f"{study}/{variant}", "--work",
           str(work), "--inline"]
    # blocks above 64 kB mmapped and unmapped when freed: the RSS follows what is live (step 4)
    env = {**os.environ, "LEANER_DEVICE": "cpu", "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"result": f"failed: no result within {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    why = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    if proc.returncode < 0:
        why = [f"killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")]
    return {"result": f"failed: {why[0][:300]}"}


def rehearse(plan, configs: list[str], work: Path, studies: list[str] | None = None, ends: bool = False,
             max_params: float | None = None, timeout_s: float = 3600.0, show=print) -> list[dict]:
    """Every architecture's row (see the module docstring), printed as it comes; `configs` are the
    files `plan` came from, which each architecture's process reads again."""
    unknown = sorted(set(studies or []) - set(plan.studies))
    if unknown:
        hint = did_you_mean(unknown[0], plan.studies) if len(unknown) == 1 else ""
        raise ValueError(f"--studies {','.join(unknown)}: no such study{hint} (allowed: {', '.join(plan.studies)})")
    chosen = architectures(plan, studies, ends, max_params)
    for name in dict.fromkeys(study for study, _, _ in chosen):
        dataset = plan.studies[name].dataset
        synthetic_dataset(dataset, plan.datasets[dataset], work / "data")
    show(header())
    rows = []
    for study, variant, params in chosen:
        kept = work / "rows" / f"{study}--{variant}.json"
        row = earlier_pass(kept)
        if row is None:
            t0 = time.perf_counter()
            row = {"study": study, "variant": variant, "params": params,
                   **run_child(configs, study, variant, work, timeout_s)}
            row["seconds"] = time.perf_counter() - t0
            row.setdefault("result", "pass")
            write_json(kept, {**row, "code": code_state()})
        rows.append(row)
        show(format_row(row))
    return rows


def earlier_pass(path: Path) -> dict | None:
    """The row an earlier rehearsal in the same --work folder kept, if it passed on the very code
    here (the same commit, neither tree changed): a long rehearsal goes on where it stopped. Any
    other row is rehearsed again."""
    if not path.is_file():
        return None
    row = read_json(path)
    code, here = row.pop("code", None), code_state()
    same = code == here and here["commit"] is not None and here["dirty"] is False
    return {**row, "earlier": True} if same and row.get("result") == "pass" else None


def rehearse_inline(plan, target: str, work: Path) -> dict:
    """The child's side: one architecture's row (pass, or the line that failed)."""
    study, _, variant = target.partition("/")
    try:
        v = plan.variant(study, variant)
    except KeyError:
        raise ValueError(f"--only {target}: no such variant (see `leaner variants`)") from None
    manifest = work / "data" / v.dataset / "manifest.json"
    try:
        row = {**rehearse_one(v.spec(), manifest, work), "result": "pass"}
        shutil.rmtree(work / study / variant)  # a large model leaves GBs; a failed one stays to be looked at
    except Exception as exc:  # the row says what failed; the table goes on
        row = {"result": f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    return row


WIDTHS = (16, 38, 9, 18, 21, 13, 14, 8)


def header() -> str:
    names = ("study", "variant", "params", "train GFLOP/sample", "activations MB/sample", "checkpoint MB",
             "cond MB (job)", "seconds")
    return "  ".join(f"{n:<{w}}" if i < 2 else f"{n:>{w}}" for i, (n, w) in enumerate(zip(names, WIDTHS))) + "  result"


def format_row(row: dict) -> str:
    def num(key, fmt):
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    cells = (row["study"], row["variant"], f"{row['params'] / 1e6:.2f}M", num("train_gflop_per_sample", ".3g"),
             num("activation_mb_per_sample", ".3g"), num("checkpoint_mb", ".4g"),
             f"{num('cond_peak_mb', '.0f')} ({num('cond_mem_mb', 'd')})", num("seconds", ".1f"))
    return "  ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, WIDTHS))) + \
        f"  {row['result']}" + (" (kept from an earlier run of this commit)" if row.get("earlier") else "")
