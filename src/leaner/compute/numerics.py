"""The numerics a job computes under: pinned, so that a CPU run gives the same bits on every x86-64
CPU with AVX2 (Intel or AMD, with or without AVX-512), and recorded with every result.

What moves a CPU result from one machine to another with torch's x86-64 wheels (measured in
docs/numerics.md):
- ATen's own kernels (softmax, layer norm, GELU, reductions, the fused AdamW step) are built for
  several instruction sets and pick one by the CPU's: ATEN_CPU_CAPABILITY caps it (avx2 here).
- MKL (matrix products, SVD, and ATen's exp, log, sqrt, erf, erfinv and tanh on float tensors,
  through its vector maths) picks its code path by the CPU's instruction set and vendor. Its
  conditional numerical reproducibility (MKL_CBWR) fixes one path; only AUTO and COMPATIBLE are
  offered on non-Intel CPUs (an AVX2 branch falls back to AUTO there), so the pinned branch is
  COMPATIBLE, the one MKL promises on both vendors.
- oneDNN (convolutions, and GELU while it is enabled) picks its kernels by instruction set and
  blocks them by cache size: a pinned job switches it off, so those ops run in ATen and MKL.
- the number of threads splits reductions: fixed per job (the study's `threads`).
- numpy (the analysis: geometric means of kappa, log-kappa regressions, Fisher's z) has AVX-512
  kernels for exp, log and their kin whose results differ from its AVX2 ones in the last bit;
  and the OpenBLAS that numpy and scipy each bundle (dot products, least squares: the
  within-configuration correlation of kappa) picks its kernels by CPU at load (SkylakeX on an
  AVX-512 CPU, Intel or AMD; Haswell or Zen, whose kernels are Haswell's, on an AVX2 one): a
  dot product of 92 runs came out one bit apart. `cap_numpy` caps numpy's dispatch at AVX2 and
  sets both OpenBLAS copies to their Haswell kernels (OPENBLAS_CORETYPE, read when each loads) in
  every leaner process, before numpy loads (leaner/__init__.py), whatever the study's mode.

`pin` must run before torch is imported (the CLI does it first thing for the stages that compute:
train, conditioning, theory); `in_effect` reads back what the process really runs under, pinned or
not, for metrics.json. `describe_mix` is what a summary, a table and `leaner status` say of the
numerics of the results they put side by side. This module imports no torch at its top.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from collections import Counter
from collections.abc import Iterable

MODES = ("pinned", "native")  # the config's `numerics`: pinned (the default) or the machine's own
DEFAULT_MODE = "pinned"
PINNED_CAPABILITY = "avx2"  # ATen's: the highest set every x86-64 CPU of the last decade has
PINNED_MKL_BRANCH = "COMPATIBLE"  # MKL's: the branch it offers on Intel and AMD alike
X86 = ("x86_64", "AMD64", "amd64")

# mkl_cbwr_get's answers (MKL's named constants for its branches)
MKL_BRANCHES = {1: "off", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}

_ASKED: dict = {}  # what pin() set in this process

NUMPY_ENV = "NPY_DISABLE_CPU_FEATURES"  # read once, when numpy loads
NUMPY_ABOVE_AVX2 = "X86_V4 AVX512_ICL AVX512_SPR"  # numpy's dispatch targets above X86_V3 (AVX2 with FMA3)
OPENBLAS_ENV = "OPENBLAS_CORETYPE"  # read once, when an OpenBLAS (numpy's, scipy's) loads
OPENBLAS_AVX2 = "Haswell"  # OpenBLAS's AVX2 kernels (its Zen target uses them too)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"numerics {mode!r}: allowed {', '.join(MODES)}")
    return mode


def pinned_environment(threads: int | None = None, environ: dict | None = None,
                       machine: str | None = None) -> dict[str, str]:
    """The environment variables a pinned job sets (before torch loads). A capability the user
    already lowered to `default` is kept: pinning lowers, it never raises."""
    environ = os.environ if environ is None else environ
    env = {"MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}
    if (machine or platform.machine()) in X86:
        asked = environ.get("ATEN_CPU_CAPABILITY", "").lower()
        env["ATEN_CPU_CAPABILITY"] = "default" if asked == "default" else PINNED_CAPABILITY
        env["MKL_CBWR"] = PINNED_MKL_BRANCH
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def cap_numpy(environ: dict | None = None, ceiling: str | None = None) -> None:
    """Keep numpy's kernels and its and scipy's OpenBLAS at AVX2 on an AVX-512 CPU, so that the
    tables a run derives are the same bytes on both (an Intel AVX-512 host and an AMD AVX2 one gave
    geometric-mean kappas one bit apart; an AMD AVX-512 host's OpenBLAS a within-configuration
    correlation one bit apart). Takes effect only where numpy is not loaded yet; a value the user
    set is kept. OpenBLAS is told Haswell only on a CPU that has AVX2 (`ceiling`, read from
    /proc/cpuinfo when not given): forced onto an older CPU it would run instructions it lacks."""
    environ = os.environ if environ is None else environ
    environ.setdefault(NUMPY_ENV, NUMPY_ABOVE_AVX2)
    if platform.machine() in X86 and (ceiling or _cpu_identity()[2]) in ("avx2", "avx512"):
        environ.setdefault(OPENBLAS_ENV, OPENBLAS_AVX2)


def pin(mode: str, threads: int | None = None) -> None:
    """Make this process compute under `mode` on `threads` CPU threads: for `pinned`, set the
    environment above, load torch and switch oneDNN off; `native` keeps the machine's own choices
    (the threads aside). Raises where torch was loaded before and already runs another
    capability (pinning must come first)."""
    check_mode(mode)
    _ASKED.clear()
    _ASKED["mode"] = mode
    loaded_before = "torch" in sys.modules
    env = pinned_environment(threads) if mode == "pinned" else {}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    os.environ.update(env)
    if mode == "native" and not threads:
        return
    import torch

    if threads:
        torch.set_num_threads(threads)
    if mode == "native":
        return
    torch.backends.mkldnn.enabled = False
    wanted = env.get("ATEN_CPU_CAPABILITY")
    if loaded_before and wanted and wanted != "default":
        have = torch.backends.cpu.get_cpu_capability()
        if have not in (wanted.upper(), "DEFAULT"):
            raise RuntimeError(f"numerics pinned: torch was loaded before the pin and runs {have} kernels "
                               f"(pin before importing torch; allowed: {wanted.upper()} or below)")


@functools.cache
def _cpu_identity() -> tuple[str, str, str]:
    """(vendor, model name, highest vector set the CPU has: avx512, avx2 or older) from
    /proc/cpuinfo where there is one."""
    vendor, model, flags = "", platform.processor() or "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if vendor and model and flags:
                    break
    except OSError:
        pass
    ceiling = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else ("older" if flags else "")
    return vendor, model, ceiling


def _mkl_branch(torch) -> str | None:
    """MKL's reproducibility branch in force (mkl_cbwr_get), where torch carries MKL."""
    import ctypes

    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    for name in ("mkl_cbwr_get", "mkl_serv_cbwr_get"):
        try:
            get = getattr(ctypes.CDLL(lib), name)
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_int
        return MKL_BRANCHES.get(get(1), str(get(1)))  # 1: MKL_CBWR_BRANCH
    return None


def _blas(torch) -> str:
    """torch's BLAS and its version, from its build configuration."""
    config = torch.__config__.show()
    found = re.search(r"BLAS_INFO=(\w+)", config)
    blas = found.group(1) if found else "unknown"
    if blas == "mkl":
        version = re.search(r"Math Kernel Library Version ([\d.]+)", config)
        return f"MKL {version.group(1)}" if version else "MKL"
    return blas


def analysis_blas() -> str:
    """The BLAS numpy computes with and the kernels it loaded ('openblas 0.3.31 Haswell'), read
    back through threadpoolctl: what the analysis's dot products and least squares ran on."""
    import numpy as np
    from threadpoolctl import threadpool_info

    np.ones(2) @ np.ones(2)  # numpy's BLAS loaded
    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))
    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and lib.get("filepath", "").startswith(numpy_dir + os.sep + "numpy"):
            return " ".join(str(v) for v in (lib["internal_api"], lib.get("version"), lib.get("architecture")) if v)
    return "unknown"


def in_effect(device: str = "cpu", precision: str | None = None) -> dict:
    """What this process computes under, read back from torch and MKL (not what was asked):
    for metrics.json and conditioning.csv, with `label`, the key two results must share to be
    bit-for-bit comparable."""
    import torch

    vendor, model, ceiling = _cpu_identity()
    record = {"mode": _ASKED.get("mode", "native"), "machine": platform.machine(), "cpu_vendor": vendor,
              "cpu_model": model, "cpu_ceiling": ceiling, "capability": torch.backends.cpu.get_cpu_capability(),
              "blas": _blas(torch), "mkl_branch": _mkl_branch(torch),
              "onednn": "on" if torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available() else "off",
              "threads": torch.get_num_threads(), "torch": torch.__version__.split("+")[0], "device": str(device),
              "numpy_blas": analysis_blas()}
    if str(device).startswith("cuda"):
        record["device_name"] = torch.cuda.get_device_name(torch.device(device))
        record["precision"] = precision
    record["label"] = label(record)
    return record


def label(record: dict) -> str:
    """One line naming the numerics of `record` (in_effect's): 'cpu x86_64/AVX2, MKL 2024.2
    COMPATIBLE, oneDNN off, 1 thread, torch 2.14.1' (MKL's branch, or "its own dispatch" where no
    branch is fixed); a GPU run leads with its card and precision."""
    threads = record.get("threads")
    branch = record.get("mkl_branch")
    cpu = (f"{record.get('machine')}/{record.get('capability')}, {record.get('blas')}"
           + ("" if not branch else " (its own dispatch)" if branch == "off" else f" {branch}")
           + f", oneDNN {record.get('onednn')}, {threads} thread{'s' * (threads != 1)}, torch {record.get('torch')}")
    if str(record.get("device", "cpu")).startswith("cuda"):
        return f"cuda {record.get('device_name')} {record.get('precision') or ''}".rstrip() + f"; host {cpu}"
    return f"cpu {cpu}"


UNRECORDED = "unrecorded"  # results written before runs recorded their numerics


def describe_mix(labels: Iterable) -> str:
    """What a table says of the numerics of its rows: 'all N results under <label>' or, where they
    differ, 'results made under K different numerics are compared: <label> (n), ...'."""
    counts = Counter(str(v) if v is not None and v == v else UNRECORDED for v in labels)  # v == v: not NaN
    if not counts:
        return "no results"
    if len(counts) == 1:
        (only, n), = counts.items()
        return f"all {n} result{'s' * (n != 1)} under {only}"
    shown = "; ".join(f"{name} ({n})" for name, n in counts.most_common())
    return f"results made under {len(counts)} different numerics are compared: {shown}"


def is_mixed(labels: Iterable) -> bool:
    return len({str(v) if v is not None and v == v else UNRECORDED for v in labels}) > 1


LABELS_JOIN = " + "  # between the numerics labels of results put together (a label has no " + ")


def join_labels(labels) -> str:
    """The distinct numerics labels of some results, sorted, joined: one label where they share it."""
    return LABELS_JOIN.join(sorted({str(v) if v == v else UNRECORDED for v in labels}))  # v == v: not NaN


def split_labels(joined: str) -> list[str]:
    return str(joined).split(LABELS_JOIN)
