"""`make gpu-check`: what a GPU machine must show before a sweep goes to it, in one command.

Sections, in this order (what has never run on a GPU first), each in a process of its own with
its own time limit (a hang or a failure stops only its section), and a one-screen summary at the end:

  decode     the image path on CUDA, never yet run there: the batched device augmentation against
             the CPU's, nvJPEG's fallback to Pillow on odd files, and the decode-ordering test
             (nvJPEG's stream against queued training kernels); the gpu tests of that name
  conditioning  the float64 probe at nearest_figN's largest shape (L2-H64-W64, N 256: 4,096 heads
             a layer, ~6.4 GB an input) in chunks sized from the GPU's free memory: chunk, peak
             memory, seconds; it passes when every kappa is finite or singular and the peak stays
             under the card
  vit        vit_imagenet's ViT-B/16, compiled, bf16, at the recipe's per-GPU batch (128) through
             `leaner train` on JPEGs read by the real loader (Pillow, `num_workers: auto`): images/s
             of the run, of the step alone (data on the GPU) and of the loader alone; it passes
             when the run ends finite at >= 0.8 x the slower of the two (as `leaner cost` prices it)
  p2         P2's attention at the paper's largest shapes (fig1 L5-H64-W64 N16, figN W64 at N 64 and
             256): the kernel it takes, one training step's peak GPU memory and time at the
             paper's per-step batch (figN's H64 N-256 in its 4 micro-batches of 64) in fp32 (TF32
             off), as P2 trains; it passes when every shape fits, the fused forms take a fused
             kernel and memory from N 64 to 256 grows linearly
  precision  a P2 fig1 variant trained by `leaner train` for a few thousand steps in fp32 (TF32
             off) and in bf16, same seed and data: the losses side by side; it passes when both
             record their precision, both end finite and bf16's eval MSE is at most 1.5 x fp32's
  ddp        where two GPUs or more exist: `leaner train --nproc 2` (DDP, NCCL) with a resume
             checkpoint inside the run, killed after it and resumed
  tests      the `gpu`-marked tests (the fast ones first, the end-to-end Snakemake run last)
  bench      the GPU benchmark rows (benchmarks/run.py --quick --gpu-only)

--budget SECONDS (default 450: one 10-minute GPU job with its start-up) skips what would not fit
(the summary says so). --cpu rehearses the whole command on the CPU, each section with a stand-in
of CPU size (fewer inputs, smaller batches, eager; 207 s on 2 cores, results.md row 11). Logs
and check.json go to $OUT/gpu-check when $OUT is set, else to --out; check.json is rewritten
after every section, so a job stopped midway keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("decode", "conditioning", "vit", "p2", "precision", "ddp", "tests", "bench")
LIMITS = {"decode": 90, "conditioning": 120, "vit": 180, "p2": 150, "precision": 150, "ddp": 150, "tests": 300,
          "bench": 200}  # seconds, each at most
NEEDS = {"decode": 30, "conditioning": 40, "vit": 90, "p2": 60, "precision": 60, "ddp": 90, "tests": 120,
         "bench": 120}  # skipped with less than this left
DECODE_TESTS = tuple(f"tests/test_gpu.py::{name}" for name in (
    "test_the_device_recipe_on_the_gpu_matches_the_cpu_and_real_nvjpeg_survives_odd_files",
    "test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode"))
BF16_MSE_RATIO = 1.5  # declared before any GPU run: bf16's final eval MSE at most this times fp32's
LOADER_OVERLAP = 0.8  # declared before any GPU run: `leaner train` keeps this share of min(step, loader)
CPU_STAND_IN_MB = 12000  # `--cpu`: the conditioning stand-in's memory (figN's chunk of one input fits)

# (label, depth, heads, modules, dim, tokens, batch of one forward): configs/paper.yaml's largest P2
# shapes at the batch each step runs at (figN's H64 N 256: 256 in 4 micro-batches)
P2_SHAPES = [("fig1 L5-H64-W64 N16", 5, 64, 64, 64, 16, 256),
             ("figN L2-H1-W64 N256", 2, 1, 64, 64, 256, 256),
             ("figN L2-H8-W64 N64", 2, 8, 64, 64, 64, 256),
             ("figN L2-H8-W64 N256", 2, 8, 64, 64, 256, 256),
             ("figN L2-H64-W64 N64", 2, 64, 64, 64, 64, 256),
             ("figN L2-H64-W64 N256", 2, 64, 64, 64, 256, 64)]


# `--cpu`: the whole command rehearsed on the CPU, each section with a stand-in of CPU size (fewer
# inputs, smaller batches, eager), to check the command itself (its sections, budget, check.json)
# where no GPU is at hand; its figures measure the CPU, not a card
ON_CPU = os.environ.get("GPU_CHECK_DEVICE") == "cpu"
DEVICE = "cpu" if ON_CPU else "cuda"


@contextlib.contextmanager
def peak_gib():
    """{"gib": the peak memory over the block}: the card's allocator on CUDA, the rise of the
    process's peak RSS on the CPU (`--cpu`)."""
    import torch

    from leaner.rehearse import peak_rise_mb

    out = {}
    if ON_CPU:
        with peak_rise_mb() as rise:
            yield out
        out["gib"] = rise["mb"] / 1024
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    yield out
    torch.cuda.synchronize()
    out["gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30


def card_gib() -> float:
    """The card's memory (on the CPU, `--cpu`: the machine's)."""
    import torch

    if ON_CPU:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def out_folder(given: str | None, env=os.environ) -> Path:
    """$OUT/gpu-check where a GPU job hands back $OUT, else --out, else benchmarks/gpu-check."""
    if given:
        return Path(given)
    return Path(env["OUT"]) / "gpu-check" if env.get("OUT") else REPO / "benchmarks" / "gpu-check"


def section_conditioning(work: Path, samples: int = 16) -> dict:
    import torch

    from leaner.conditioning import layer_kappas, probe_limit
    from leaner.memory import probe_bytes, probe_chunk
    from leaner.models.nearest import NearestPointEncoder

    dev = torch.device(DEVICE)
    samples = 2 if ON_CPU else samples
    torch.manual_seed(0)
    model = NearestPointEncoder(64, 256, 2, 64, 64, 2048).to(dev)
    x = torch.randn(samples, 256, 64, device=dev)
    limit = probe_limit(dev, CPU_STAND_IN_MB if ON_CPU else None, sum(p.numel() for p in model.parameters()))
    chunk = probe_chunk(4096, 256, 4096, 2, limit)
    with peak_gib() as peak:  # synchronised at both ends
        t0 = time.perf_counter()
        kappas = layer_kappas(model, x, chunk)
    seconds, card = time.perf_counter() - t0, card_gib()
    values = torch.cat([k for mats in kappas.values() for k in mats.values()])
    ok = bool((~torch.isnan(values)).all()) and peak["gib"] < card and len(values) == 2 * 2 * samples
    per = probe_bytes(4096, 256, 4096, 2) / 1e9
    return {"status": "pass" if ok else "fail",
            "summary": f"figN L2-H64-W64 N256, {samples} inputs in chunks of {chunk} (~{per:.1f} GB an input, "
                       f"{limit / 2**30:.0f} GiB allowed): peak {peak['gib']:.1f} of {card:.0f} GiB, {seconds:.1f} s, "
                       f"median kappa {values.median().item():.3g}",
            "chunk": chunk, "peak_gib": round(peak["gib"], 2), "probe_seconds": round(seconds, 1)}


def section_vit(work: Path) -> dict:
    """vit_imagenet's ViT-B/16 at its recipe's per-GPU batch (1024 over 8 GPUs: 128), compiled,
    bf16, through `leaner train` on JPEGs read by the real loader (Pillow workers, `num_workers:
    auto`, the DeiT augmentation), against the same step on data held on the GPU and against the
    loader alone: images/s each. `leaner cost` prices such a job at the slower of its step and its
    loader (cost.loader_feed); it passes when the run ends finite and keeps at least LOADER_OVERLAP
    of that rate (the loader overlaps the step). `--cpu`: eager, batch 4, the loader at 2 workers."""
    import math

    import pandas as pd

    sys.path.insert(0, str(REPO / "benchmarks"))
    from run import _bare_vit, _image_manifest, _loader_rate

    from leaner.data.splits import worker_count
    from leaner.train import train
    from leaner.workflow.plan import load_plan

    study = load_plan(REPO / "configs" / "paper.yaml").studies["vit_imagenet"]
    spec = study.variants["L12-H12-D768-hd64-mlp3072-s0"].spec()
    batch = 4 if ON_CPU else spec["recipe"]["batch_size"] // max(1, study.resources["gpu"])
    workers = 2 if ON_CPU else worker_count("auto")
    steps_per_epoch, epochs = (2, 4) if ON_CPU else (8, 5)  # steady: epochs 2 to the last but one
    manifest = _image_manifest(work / "jpeg", batch * steps_per_epoch, 256, 224, "jpg", ("pil",))["pil"]
    loader = _loader_rate(manifest, workers, batch, DEVICE)
    step = _bare_vit(batch, 3, False, "cpu")[0] if ON_CPU else _bare_vit(batch, 20, True)[0]
    recipe = {**spec["recipe"], "batch_size": batch, "epochs": epochs, "eval_every": 10_000, "repeat_aug": 1,
              "checkpoint_every": 10_000_000, "checkpoint_minutes": None, "num_workers": workers,
              "compile": not ON_CPU, "precision": "fp32" if ON_CPU else "bf16"}
    run = {**spec, "dataset": "jpeg", "model": {**spec["model"], "num_classes": 4}, "recipe": recipe}
    run.pop("expect_params", None)  # 4 classes, not 1000
    metrics = train(run, manifest, work / "run", device=DEVICE, progress=False)
    h = pd.read_csv(work / "run" / "history.csv")
    a, b = h.iloc[1], h.iloc[-2]
    ours = (b["step"] - a["step"]) * batch / (b["elapsed_s"] - a["elapsed_s"])
    bound = min(loader, step)
    ok = math.isfinite(metrics["final"]["train_loss"]) and ours >= LOADER_OVERLAP * bound
    fed = "loader-bound" if loader < step else "step-bound"
    return {"status": "pass" if ok else "fail",
            "summary": f"ViT-B/16 batch {batch}{', compiled' if not ON_CPU else ''}: `leaner train` {ours:.0f} "
                       f"images/s; step alone {step:.0f}, loader alone {loader:.0f} ({workers} "
                       f"workers, {loader / workers:.0f} a worker): {fed}, {ours / bound:.2f} x the slower",
            "images_per_s": round(ours, 1), "step_images_per_s": round(step, 1),
            "loader_images_per_s": round(loader, 1), "workers": workers, "batch": batch}


# ----------------------------------------------------------------------------- sections (in a child)

def section_p2(work: Path) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    from leaner.data.nearest_point import PointStream
    from leaner.models.nearest import NearestPointEncoder, attention_kernel

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(DEVICE)
    rows = []
    for label, depth, heads, modules, dim, tokens, batch in P2_SHAPES:
        r, batch = dim // heads, 2 if ON_CPU else batch
        kernel, width = attention_kernel(tokens, r, torch.float32, DEVICE)
        q = torch.zeros(2, modules * heads, tokens, width, device=dev, requires_grad=True)
        chosen = SDPBackend(torch._fused_sdp_choice(q, q, q, scale=r ** -0.5)).name if kernel == "fused" else "MATH"
        row = {"shape": label, "head_dim": r, "form": kernel, "kernel": chosen, "batch": batch}
        torch.manual_seed(0)
        model = NearestPointEncoder(dim, tokens, depth, heads, modules, 2048).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        x, y = PointStream(dim, tokens, batch, 0, device=dev).batch(0)
        try:
            for _ in range(2):  # warm-up (the optimiser's state)
                _p2_step(model, opt, x, y)
            with peak_gib() as peak:  # synchronised at both ends
                t0 = time.perf_counter()
                for _ in range(5):
                    _p2_step(model, opt, x, y)
            row.update(ms_per_step=round((time.perf_counter() - t0) / 5 * 1e3, 1), peak_gib=round(peak["gib"], 2))
        except torch.OutOfMemoryError:
            row.update(ms_per_step=None, peak_gib=f"over {card_gib():.0f}")
        del model, opt
        if not ON_CPU:
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    by = {r["shape"]: r["peak_gib"] for r in rows}
    growth = [(a, b) for a, b in (("figN L2-H8-W64 N64", "figN L2-H8-W64 N256"),
                                  ("figN L2-H64-W64 N64", "figN L2-H64-W64 N256"))
              if isinstance(by.get(a), float) and isinstance(by.get(b), float) and by[a] > 0]
    ratios = {f"{a.split(' N')[0]} N64->N256": round(by[b] / by[a], 2) for a, b in growth}
    # --cpu: the RSS does not resolve the growth of a 2-sample step (the allocator reuses its pages)
    status = p2_verdict(rows, ratios, need_growth=not ON_CPU)
    summary = "; ".join(f"{r['shape']}: {r['kernel'].lower()}, {r['peak_gib']} GiB, {r['ms_per_step']} ms"
                        for r in rows) + f"; memory growth {ratios}"
    return {"status": status, "summary": summary, "rows": rows, "growth": ratios}


def _p2_step(model, opt, x, y) -> None:
    from leaner.tasks.nearest import nearest_point_mse

    opt.zero_grad(set_to_none=True)
    nearest_point_mse(model(x), y).backward()
    opt.step()


def p2_verdict(rows: list[dict], ratios: dict, need_growth: bool = True) -> str:
    """pass: every shape fit (a measured peak), the fused forms took a fused kernel, and both N 64 ->
    256 memory ratios were measured and are linear (4x; quadratic would be 16x)."""
    fused_ok = all(r["kernel"] != "MATH" for r in rows if r["form"] == "fused")
    fits = bool(rows) and all(isinstance(r["peak_gib"], float) for r in rows)
    linear = all(v < 8 for v in ratios.values()) and (len(ratios) == 2 or not need_growth)
    return "pass" if fused_ok and fits and linear else "fail"


def precision_verdict(rows: list[dict], bf16_as: tuple = ("bf16", True)) -> str:
    """pass: each run recorded the precision it was asked for (`bf16_as`: what a bf16 run records),
    both ended finite, and bf16's eval MSE is at most BF16_MSE_RATIO x fp32's."""
    import math

    ok = bool(rows) and all(
        r["fp32"]["recorded"] == ["fp32", False] and r["bf16"]["recorded"] == list(bf16_as)
        and math.isfinite(r["fp32"]["final_eval_mse"]) and math.isfinite(r["bf16"]["final_eval_mse"])
        and r["bf16"]["final_eval_mse"] <= BF16_MSE_RATIO * r["fp32"]["final_eval_mse"] for r in rows)
    return "pass" if ok else "fail"


def section_precision(work: Path, steps: int = 3000) -> dict:
    steps = 200 if ON_CPU else steps
    from leaner.data import prepare
    from leaner.train import train
    from leaner.workflow.plan import load_plan

    plan = load_plan(REPO / "configs" / "paper.yaml")
    study = plan.studies["nearest_fig1"]
    manifest = work / "np" / "manifest.json"
    prepare(study.dataset, plan.datasets[study.dataset], str(manifest))
    rows = []
    for prefix in ("L1-H1-W1-", "L1-H4-W8-"):
        spec = next(v for vid, v in study.variants.items() if vid.startswith(prefix)).spec()
        row = {"variant": spec["variant"], "steps": steps}
        for precision, tf32 in (("fp32", False), ("bf16", True)):
            run = {**spec, "recipe": {**spec["recipe"], "max_steps": steps, "precision": precision, "tf32": tf32}}
            m = train(run, str(manifest), work / f"{spec['variant']}-{precision}", device=DEVICE, progress=False)
            row[precision] = {"best_train_mse": m["best"]["train_loss"], "final_eval_mse": m["final"]["eval_mse"],
                              "steps_per_s": round(m["throughput_samples_per_s"] / spec["recipe"]["batch_size"], 1),
                              "recorded": [m["precision"], m["tf32"]]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = "; ".join(f"{r['variant']}: eval MSE fp32 {r['fp32']['final_eval_mse']:.4g} ({r['fp32']['steps_per_s']}"
                        f" steps/s), bf16 {r['bf16']['final_eval_mse']:.4g} ({r['bf16']['steps_per_s']} steps/s)"
                        for r in rows)
    # --cpu: training on the CPU runs and records fp32 where bf16 is asked (leaner.devices)
    return {"status": precision_verdict(rows, ("fp32", False) if ON_CPU else ("bf16", True)), "summary": summary,
            "rows": rows}


def section_ddp(work: Path) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    from leaner.data import prepare
    from leaner.resume import RESUME_DIR, RESUME_FILE

    from conftest import kill_after_checkpoint, small_spec

    manifest = work / "digits" / "manifest.json"
    prepare("digits", {"kind": "digits", "test_fraction": 0.2, "split_seed": 0}, str(manifest))
    spec = small_spec()
    spec["recipe"].update(epochs=40, checkpoint_every=100)
    run = work / "ddp"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(spec), "--data", str(manifest), "--out",
           str(run), "--nproc", "2", "--no-progress"]
    env = {**os.environ, "LEANER_GPU_LOCK_DIR": str(work / "locks")}
    env.pop("LEANER_DEVICE", None)
    if ON_CPU:
        env["LEANER_DEVICE"] = "cpu"  # two gloo processes
    kill_after_checkpoint(subprocess.Popen(cmd, env=env), run / RESUME_DIR / RESUME_FILE, timeout_s=240)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    metrics = json.loads((run / "metrics.json").read_text()) if proc.returncode == 0 else {}
    ok = (metrics.get("processes") == 2 and metrics.get("status") == "ok" and "resumed from step" in proc.stderr
          and str(metrics.get("device", "")).startswith(DEVICE))
    why = proc.stderr.strip().splitlines()[-1:] if not ok else []
    return {"status": "pass" if ok else "fail",
            "summary": f"2 processes, killed after the checkpoint at step 100, resumed: steps {metrics.get('steps')}, "
                       f"eval acc {metrics.get('final', {}).get('eval_acc')}" + (f"; {why[0]}" if why else "")}


# ----------------------------------------------------------------------------- sections (commands)

def run_logged(cmd: list[str], log: Path, timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run `cmd` with its output in `log`; (exit status or None on the time limit, its last lines)."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    lines = log.read_text(errors="replace").strip().splitlines()
    return code, "\n".join(lines[-3:])


def section_tests(out: Path, timeout: float) -> dict:
    slow = "tests/test_gpu.py::test_every_task_family_trains_in_bf16_on_the_gpu"
    started = time.monotonic()
    results = []
    # the end-to-end run's folders (its Snakemake log, each job's log) stay in --out, also when the
    # time limit stops it: where it stood is then in snakemake's log
    kept = ["--basetemp", str(out / "tests-end_to_end")]
    for name, args in (("fast", ["-m", "gpu", "--deselect", slow, "tests"]), ("end to end", [*kept, slow])):
        left = timeout - (time.monotonic() - started)
        if left < 30:
            results.append((name, None, "not run: no time left in this section"))
            continue
        code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
                                 "--durations=5", *args], out / f"tests-{name.replace(' ', '_')}.log", left)
        results.append((name, code, tail.splitlines()[-1] if tail else ""))
    ok = all(code == 0 for _, code, _ in results)
    summary = "; ".join(f"{name}: {line}" + (" (time limit)" if code is None else "") for name, code, line in results)
    return {"status": "pass" if ok else "fail", "summary": summary}


def section_decode(out: Path, timeout: float) -> dict:
    code, tail = run_logged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *DECODE_TESTS],
                            out / "decode.log", timeout)
    last = tail.splitlines()[-1] if tail else ""
    return {"status": "pass" if code == 0 else "fail", "summary": last + (" (time limit)" if code is None else "")}


def section_bench(out: Path, timeout: float) -> dict:
    code, tail = run_logged([sys.executable, "benchmarks/run.py", "--quick", "--gpu-only", "--out",
                             str(out / "bench.md")], out / "bench.log", timeout)
    return {"status": "pass" if code == 0 else "fail",
            "summary": f"rows 5, 6b, 7 in {out / 'bench.md'}" if code == 0 else (tail or "time limit")}


# ----------------------------------------------------------------------------- driver

def child(name: str, result: Path) -> None:
    """One in-process section, its result as JSON (an exception is the section's failure); its runs
    in a temporary folder, removed after."""
    try:
        with tempfile.TemporaryDirectory(prefix=f"gpu-check-{name}-") as work:
            res = {"conditioning": section_conditioning, "vit": section_vit, "p2": section_p2,
                   "precision": section_precision, "ddp": section_ddp}[name](Path(work))
    except Exception as exc:
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        res = {"status": "fail", "summary": f"{type(exc).__name__}: {first}"}
    result.write_text(json.dumps(res))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="logs and check.json (default: $OUT/gpu-check when $OUT is set, "
                                                "else benchmarks/gpu-check)")
    p.add_argument("--budget", type=float, default=450.0, help="seconds in all (default 450)")
    p.add_argument("--only", type=lambda t: t.split(","), default=list(SECTIONS),
                   help=f"sections, a,b ({','.join(SECTIONS)})")
    p.add_argument("--cpu", action="store_true", help="rehearse the whole command on the CPU, each section with a "
                                                       "stand-in of CPU size (its figures are the CPU's)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out = out_folder(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.child:
        child(a.child[0], Path(a.child[1]))
        return 0
    unknown = sorted(set(a.only) - set(SECTIONS))
    if unknown:
        print(f"gpu-check: error: --only {','.join(unknown)}: unknown (allowed: {', '.join(SECTIONS)})")
        return 2
    import torch

    from leaner.io import write_text

    if a.cpu:
        os.environ["GPU_CHECK_DEVICE"] = "cpu"  # for the sections' processes
    elif not torch.cuda.is_available():
        print("gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine "
              "(or rehearse the command on the CPU: --cpu)")
        return 2
    start = time.monotonic()
    head = (f"gpu-check --cpu: a rehearsal on {os.cpu_count()} CPU cores, torch {torch.__version__}" if a.cpu else
            f"gpu-check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}), {os.cpu_count()} cores")
    print(head, flush=True)
    results = {}
    for name in (s for s in SECTIONS if s in a.only):
        write_text(out / "check.json", json.dumps({"machine": head, "sections": results}, indent=1))
        left = a.budget - (time.monotonic() - start)
        if left < NEEDS[name]:
            results[name] = {"status": "not run", "summary": f"{left:.0f} s of the budget left, needs ~{NEEDS[name]}"}
            continue
        if name == "ddp" and not a.cpu and torch.cuda.device_count() < 2:
            results[name] = {"status": "skipped", "summary": f"{torch.cuda.device_count()} GPU here; needs two"}
            continue
        limit, t0 = min(LIMITS[name], left), time.monotonic()
        print(f"gpu-check: {name} (up to {limit:.0f} s) ...", flush=True)
        if name in ("decode", "tests", "bench"):
            res = {"decode": section_decode, "tests": section_tests, "bench": section_bench}[name](out, limit)
        else:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
                result = Path(tmp.name)
            code, tail = run_logged([sys.executable, __file__, "--out", str(out), "--child", name, str(result)],
                                    out / f"{name}.log", limit)
            res = json.loads(result.read_text()) if code == 0 and result.stat().st_size else \
                {"status": "fail", "summary": "time limit" if code is None else (tail.splitlines() or ["?"])[-1]}
            result.unlink(missing_ok=True)
        res["seconds"] = round(time.monotonic() - t0, 1)
        results[name] = res
        print(f"gpu-check: {name}: {res['status']} ({res['seconds']} s)", flush=True)
    write_text(out / "check.json", json.dumps({"machine": head, "sections": results}, indent=1))
    print("\n" + "=" * 100 + f"\n{head}; {time.monotonic() - start:.0f} s in all")
    for name, res in results.items():
        print(f"{name:<10} {res['status']:<8} {res.get('seconds', '-'):>6} s  {res['summary']}")
    return 0 if all(r["status"] in ("pass", "skipped") for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
