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
(the summary says so). Logs and check.json go to $OUT/gpu-check when $OUT is set, else to --out;
check.json is rewritten after every section, so a job stopped midway keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("decode", "conditioning", "p2", "precision", "ddp", "tests", "bench")
LIMITS = {"decode": 90, "conditioning": 120, "p2": 150, "precision": 150, "ddp": 150, "tests": 300,
          "bench": 200}  # seconds, each at most
NEEDS = {"decode": 30, "conditioning": 40, "p2": 60, "precision": 60, "ddp": 90, "tests": 120,
         "bench": 120}  # skipped with less than this left
DECODE_TESTS = tuple(f"tests/test_gpu.py::{name}" for name in (
    "test_the_device_recipe_on_the_gpu_matches_the_cpu_and_real_nvjpeg_survives_odd_files",
    "test_device_decoding_while_long_kernels_are_queued_matches_an_idle_decode"))
BF16_MSE_RATIO = 1.5  # declared before any GPU run: bf16's final eval MSE at most this times fp32's

# (label, depth, heads, modules, dim, tokens, batch of one forward): configs/paper.yaml's largest P2
# shapes at the batch each step runs at (figN's H64 N 256: 256 in 4 micro-batches)
P2_SHAPES = [("fig1 L5-H64-W64 N16", 5, 64, 64, 64, 16, 256),
             ("figN L2-H1-W64 N256", 2, 1, 64, 64, 256, 256),
             ("figN L2-H8-W64 N64", 2, 8, 64, 64, 64, 256),
             ("figN L2-H8-W64 N256", 2, 8, 64, 64, 256, 256),
             ("figN L2-H64-W64 N64", 2, 64, 64, 64, 64, 256),
             ("figN L2-H64-W64 N256", 2, 64, 64, 64, 256, 64)]


def out_folder(given: str | None, env=os.environ) -> Path:
    """$OUT/gpu-check where a GPU job hands back $OUT, else --out, else benchmarks/gpu-check."""
    if given:
        return Path(given)
    return Path(env["OUT"]) / "gpu-check" if env.get("OUT") else REPO / "benchmarks" / "gpu-check"


def section_conditioning(work: Path, samples: int = 16) -> dict:
    import torch

    from leaner.conditioning import layer_kappas, probe_bytes, probe_chunk, probe_limit
    from leaner.models.nearest import NearestPointEncoder

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = NearestPointEncoder(64, 256, 2, 64, 64, 2048).to(dev)
    x = torch.randn(samples, 256, 64, device=dev)
    limit = probe_limit(dev, None, sum(p.numel() for p in model.parameters()))
    chunk = probe_chunk(4096, 256, 4096, 2, limit)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    kappas = layer_kappas(model, x, chunk)
    torch.cuda.synchronize()
    seconds, peak = time.perf_counter() - t0, torch.cuda.max_memory_allocated() / 2**30
    card = torch.cuda.get_device_properties(0).total_memory / 2**30
    values = torch.cat([k for mats in kappas.values() for k in mats.values()])
    ok = bool((~torch.isnan(values)).all()) and peak < card and len(values) == 2 * 2 * samples
    per = probe_bytes(4096, 256, 4096, 2) / 1e9
    return {"status": "pass" if ok else "fail",
            "summary": f"figN L2-H64-W64 N256, {samples} inputs in chunks of {chunk} (~{per:.1f} GB an input, "
                       f"{limit / 2**30:.0f} GiB allowed): peak {peak:.1f} of {card:.0f} GiB, {seconds:.1f} s, "
                       f"median kappa {values.median().item():.3g}",
            "chunk": chunk, "peak_gib": round(peak, 2), "probe_seconds": round(seconds, 1)}


# ----------------------------------------------------------------------------- sections (in a child)

def section_p2(work: Path) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    from leaner.data.nearest_point import PointStream
    from leaner.models.nearest import NearestPointEncoder, attention_kernel
    from leaner.tasks.nearest import nearest_point_mse

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    rows = []
    for label, depth, heads, modules, dim, tokens, batch in P2_SHAPES:
        r = dim // heads
        kernel, width = attention_kernel(tokens, r, torch.float32, "cuda")
        q = torch.zeros(2, modules * heads, tokens, width, device=dev, requires_grad=True)
        chosen = SDPBackend(torch._fused_sdp_choice(q, q, q, scale=r ** -0.5)).name if kernel == "fused" else "MATH"
        row = {"shape": label, "head_dim": r, "form": kernel, "kernel": chosen, "batch": batch}
        torch.manual_seed(0)
        model = NearestPointEncoder(dim, tokens, depth, heads, modules, 2048).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        x, y = PointStream(dim, tokens, batch, 0, device=dev).batch(0)
        try:
            for i in range(7):  # 2 warm-up steps (the optimiser's state), then 5 timed
                if i == 2:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base, t0 = torch.cuda.memory_allocated(), time.perf_counter()
                opt.zero_grad(set_to_none=True)
                nearest_point_mse(model(x), y).backward()
                opt.step()
            torch.cuda.synchronize()
            row.update(ms_per_step=round((time.perf_counter() - t0) / 5 * 1e3, 1),
                       peak_gib=round((torch.cuda.max_memory_allocated() - base) / 2**30, 2))
        except torch.OutOfMemoryError:
            card = torch.cuda.get_device_properties(0).total_memory / 2**30
            row.update(ms_per_step=None, peak_gib=f"over {card:.0f}")
        del model, opt
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    by = {r["shape"]: r["peak_gib"] for r in rows}
    growth = [(a, b) for a, b in (("figN L2-H8-W64 N64", "figN L2-H8-W64 N256"),
                                  ("figN L2-H64-W64 N64", "figN L2-H64-W64 N256"))
              if isinstance(by.get(a), float) and isinstance(by.get(b), float)]
    ratios = {f"{a.split(' N')[0]} N64->N256": round(by[b] / by[a], 2) for a, b in growth}
    status = p2_verdict(rows, ratios)
    summary = "; ".join(f"{r['shape']}: {r['kernel'].lower()}, {r['peak_gib']} GiB, {r['ms_per_step']} ms"
                        for r in rows) + f"; memory growth {ratios}"
    return {"status": status, "summary": summary, "rows": rows, "growth": ratios}


def p2_verdict(rows: list[dict], ratios: dict) -> str:
    """pass: every shape fit (a measured peak), the fused forms took a fused kernel, and both N 64 ->
    256 memory ratios were measured and are linear (4x; quadratic would be 16x)."""
    fused_ok = all(r["kernel"] != "MATH" for r in rows if r["form"] == "fused")
    fits = bool(rows) and all(isinstance(r["peak_gib"], float) for r in rows)
    linear = len(ratios) == 2 and all(v < 8 for v in ratios.values())
    return "pass" if fused_ok and fits and linear else "fail"


def precision_verdict(rows: list[dict]) -> str:
    """pass: each run recorded the precision it was asked for, both ended finite, and bf16's eval MSE
    is at most BF16_MSE_RATIO x fp32's."""
    import math

    ok = bool(rows) and all(
        r["fp32"]["recorded"] == ["fp32", False] and r["bf16"]["recorded"] == ["bf16", True]
        and math.isfinite(r["fp32"]["final_eval_mse"]) and math.isfinite(r["bf16"]["final_eval_mse"])
        and r["bf16"]["final_eval_mse"] <= BF16_MSE_RATIO * r["fp32"]["final_eval_mse"] for r in rows)
    return "pass" if ok else "fail"


def section_precision(work: Path, steps: int = 3000) -> dict:
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
            m = train(run, str(manifest), work / f"{spec['variant']}-{precision}", progress=False)
            row[precision] = {"best_train_mse": m["best"]["train_loss"], "final_eval_mse": m["final"]["eval_mse"],
                              "steps_per_s": round(m["throughput_samples_per_s"] / spec["recipe"]["batch_size"], 1),
                              "recorded": [m["precision"], m["tf32"]]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = "; ".join(f"{r['variant']}: eval MSE fp32 {r['fp32']['final_eval_mse']:.4g} ({r['fp32']['steps_per_s']}"
                        f" steps/s), bf16 {r['bf16']['final_eval_mse']:.4g} ({r['bf16']['steps_per_s']} steps/s)"
                        for r in rows)
    return {"status": precision_verdict(rows), "summary": summary, "rows": rows}


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
    kill_after_checkpoint(subprocess.Popen(cmd, env=env), run / RESUME_DIR / RESUME_FILE, timeout_s=240)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    metrics = json.loads((run / "metrics.json").read_text()) if proc.returncode == 0 else {}
    ok = (metrics.get("processes") == 2 and metrics.get("status") == "ok" and "resumed from step" in proc.stderr
          and str(metrics.get("device", "")).startswith("cuda"))
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
            res = {"conditioning": section_conditioning, "p2": section_p2, "precision": section_precision,
                   "ddp": section_ddp}[name](Path(work))
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

    if not torch.cuda.is_available():
        print("gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine")
        return 2
    start = time.monotonic()
    head = (f"gpu-check: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}), {os.cpu_count()} cores")
    print(head, flush=True)
    results = {}
    for name in (s for s in SECTIONS if s in a.only):
        write_text(out / "check.json", json.dumps({"machine": head, "sections": results}, indent=1))
        left = a.budget - (time.monotonic() - start)
        if left < NEEDS[name]:
            results[name] = {"status": "not run", "summary": f"{left:.0f} s of the budget left, needs ~{NEEDS[name]}"}
            continue
        if name == "ddp" and torch.cuda.device_count() < 2:
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
