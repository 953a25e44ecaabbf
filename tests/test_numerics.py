"""Pinned numerics (leaner.compute.numerics): the same bits whatever the machine's instruction ceiling, and
the difference they protect against; what is recorded, and what summaries, tables and `leaner
status` say when results made under different numerics meet."""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys

import pandas as pd
import pytest

from leaner.compute.numerics import describe_mix, is_mixed, label, pinned_environment

from conftest import REPO, TINY, snakemake

pytestmark = pytest.mark.slow

X86 = platform.machine() in ("x86_64", "AMD64")
TIMINGS = ["wall_time_s", "throughput_samples_per_s", "peak_memory_mb"]


def _ceiling() -> str:
    """The machine's vector ceiling, as /proc/cpuinfo says: avx512, avx2 or older."""
    from leaner.compute.numerics import _cpu_identity

    return _cpu_identity()[2]


# A machine whose CPU stops at AVX2 (Intel or AMD without AVX-512), as each library can be told.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Haswell"}
# Below that: no AVX at all (what lowering an AVX2 machine can still show, unpinned).
SSE_MACHINE = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def test_the_pinned_environment_lowers_and_never_raises():
    env = pinned_environment(threads=3, environ={}, machine="x86_64")
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_CBWR"] == "COMPATIBLE"
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3" and env["MKL_DYNAMIC"] == "FALSE"
    assert pinned_environment(environ={"ATEN_CPU_CAPABILITY": "avx512"}, machine="x86_64")["ATEN_CPU_CAPABILITY"] \
        == "avx2"
    assert pinned_environment(environ={"ATEN_CPU_CAPABILITY": "DEFAULT"}, machine="x86_64")["ATEN_CPU_CAPABILITY"] \
        == "default"  # a machine (or a user) below AVX2 stays there: the record then says so
    arm = pinned_environment(environ={}, machine="aarch64")
    assert "ATEN_CPU_CAPABILITY" not in arm and "MKL_CBWR" not in arm  # x86-64's settings only


def _numpy_features(env: dict) -> dict:
    """numpy's dispatch targets in force in a fresh process that imports leaner's CLI first."""
    code = ("import json, leaner.cli, numpy._core._multiarray_umath as m; "
            "print(json.dumps({k: m.__cpu_features__[k] for k in ('X86_V3', 'X86_V4')}))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.skipif(not X86, reason="numpy's x86-64 dispatch targets")
def test_numpy_runs_its_avx2_kernels_in_every_leaner_process():
    """An Intel AVX-512 host and an AMD AVX2 one derived geometric-mean kappas one bit apart
    (numpy's AVX-512 log and exp): leaner caps numpy's dispatch at AVX2 before numpy loads, and a
    value the user set is kept (here lowering numpy below AVX2, which it then obeys)."""
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    assert _numpy_features(env) == {"X86_V3": _ceiling() in ("avx2", "avx512"), "X86_V4": False}
    lowered = _numpy_features({**env, "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"})
    assert lowered == {"X86_V3": False, "X86_V4": False}


def _blas_in_a_leaner_process(env: dict) -> str:
    code = "import leaner; from leaner.compute.numerics import analysis_blas; print(analysis_blas())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.mark.skipif(not X86, reason="OpenBLAS's x86-64 kernels")
def test_numpys_and_scipys_openblas_run_their_avx2_kernels_in_every_leaner_process():
    """An AMD AVX-512 host's OpenBLAS (SkylakeX kernels) made the default study's within-
    configuration correlation of kappa one bit apart from an AVX2 host's: every leaner process
    loads OpenBLAS's Haswell kernels where the CPU has AVX2, and a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    blas = _blas_in_a_leaner_process(env)
    if blas.startswith("openblas") and _ceiling() in ("avx2", "avx512"):
        assert blas.endswith(" Haswell"), blas
        assert _blas_in_a_leaner_process({**env, "OPENBLAS_CORETYPE": "Sandybridge"}).endswith(" Sandybridge")


KAPPA_WITHIN = """
import leaner, json, pandas as pd
from leaner.analysis.kappa_within import kappa_within_table
summary = pd.read_csv("tests/reference/default_study/summaries/vit_digits.csv")
table = kappa_within_table(summary, "eval_acc", "max")
print(json.dumps({c: [repr(v) for v in table[c]] for c in table.columns if table[c].dtype.kind == "f"}))
"""


@pytest.mark.skipif(not X86, reason="pinning covers x86-64 CPUs with AVX2")
def test_the_statistics_through_blas_are_the_same_bits_whatever_the_instruction_ceiling():
    """The default study's kappa_within statistics (dot products and least squares through numpy's
    and scipy's BLAS), recomputed from its reference summary here and with the machine told it
    stops at AVX2: the same bits, and the committed reference's."""
    if _ceiling() not in ("avx2", "avx512"):
        pytest.skip("this CPU has no AVX2")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    runs = []
    for extra in ({}, AVX2_MACHINE):
        proc = subprocess.run([sys.executable, "-c", KAPPA_WITHIN], env={**env, **extra}, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1]
    reference = pd.read_csv(REPO / "tests" / "reference" / "default_study" / "tables" / "vit_digits-kappa_within.csv")
    for column, values in runs[0].items():
        assert values == [repr(v) for v in reference[column]], column


def test_labels_and_mixes():
    cpu = {"machine": "x86_64", "capability": "AVX2", "blas": "MKL 2024.2", "mkl_branch": "COMPATIBLE",
           "onednn": "off", "threads": 1, "torch": "2.14.1", "device": "cpu"}
    assert label(cpu) == "cpu x86_64/AVX2, MKL 2024.2 COMPATIBLE, oneDNN off, 1 thread, torch 2.14.1"
    gpu = {**cpu, "device": "cuda:0", "device_name": "NVIDIA H100", "precision": "bf16", "threads": 4}
    assert label(gpu) == "cuda NVIDIA H100 bf16; host x86_64/AVX2, MKL 2024.2 COMPATIBLE, oneDNN off, 4 threads, " \
                         "torch 2.14.1"
    assert describe_mix(["a", "a"]) == "all 2 results under a"
    assert describe_mix(["a", "b", "a", float("nan")]) == \
        "results made under 3 different numerics are compared: a (2); b (1); unrecorded (1)"
    assert is_mixed(["a", "b"]) and not is_mixed(["a", "a"]) and not is_mixed([])


def _run_train(tmp_path, digits_manifest, *extra, env=None):
    from conftest import small_spec

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "leaner", "train", "--spec", json.dumps(small_spec()), "--data",
           str(digits_manifest), "--out", str(out), "--threads", "1", "--no-progress", *extra]
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    return json.loads((out / "metrics.json").read_text())["numerics"]


@pytest.mark.skipif(not X86, reason="the pinned settings are x86-64's (ATen's AVX2 kernels, MKL's branch)")
def test_a_training_run_records_the_numerics_it_ran_under(tmp_path, digits_manifest):
    import os

    pinned = _run_train(tmp_path, digits_manifest)
    assert pinned["mode"] == "pinned" and pinned["onednn"] == "off" and pinned["threads"] == 1
    if _ceiling() in ("avx2", "avx512"):
        assert pinned["capability"] == "AVX2"
    if pinned["blas"].startswith("MKL"):
        assert pinned["mkl_branch"] == "COMPATIBLE"
    native = _run_train(tmp_path, digits_manifest, "--numerics", "native",
                        env={k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")})
    assert native["mode"] == "native" and native["mkl_branch"] in (None, "off")
    assert native["label"] != pinned["label"]


@pytest.mark.skipif(not X86, reason="the pinned settings are x86-64's")
def test_pinning_after_torch_loaded_other_kernels_is_refused():
    code = ("import torch; torch.ones(3).sum(); from leaner.compute.numerics import pin\n"
            "try:\n    pin('pinned')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
            "print(torch.backends.cpu.get_cpu_capability())")
    env = {k: v for k, v in __import__("os").environ.items() if k != "ATEN_CPU_CAPABILITY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    if out.strip().endswith("AVX512"):
        assert "refused: numerics pinned: torch was loaded before the pin and runs AVX512 kernels" in out
    else:  # a CPU without AVX-512 already runs what the pin asks
        assert "refused" not in out


def _tiny_outputs():
    """Each study's summary, and the report's tables (its study tables are read from them)."""
    from leaner.workflow.plan import load_plan

    return [f"results/{name}/summary.csv" for name in load_plan(TINY).studies] + ["results/tables"]


def _study(workdir, numerics: str, machine: dict) -> dict[str, str]:
    """The tiny config's summaries (timings dropped) and tables, run under `numerics` on a machine
    whose instruction ceiling is `machine`'s."""
    import os

    targets = _tiny_outputs()
    workdir.mkdir(parents=True)
    env_before = {k: os.environ.get(k) for k in machine}
    os.environ.update(machine)  # what every job of this Snakemake sees, as a machine's CPU would be
    try:
        snakemake(workdir, "--cores", "2", *targets, "--config", f"numerics={numerics}", timeout=900)
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = {}
    studies = tuple(f"{t.split('/')[1]}-" for t in targets if t.endswith("summary.csv"))
    targets = [t for t in targets if t.endswith("summary.csv")] + sorted(
        f"results/tables/{p.name}" for p in (workdir / "results" / "tables").iterdir()
        if p.name.startswith(studies) and p.suffix in (".csv", ".md"))
    for target in targets:
        path = workdir / target
        if target.endswith("summary.csv"):
            frame = pd.read_csv(path).drop(columns=TIMINGS)
            buf = io.StringIO()
            frame.to_csv(buf, index=False)
            out[target] = buf.getvalue()
        else:
            out[target] = path.read_text()
    return out


@pytest.mark.workflow
@pytest.mark.skipif(not X86, reason="pinning covers x86-64 CPUs with AVX2; other platforms are not held to bits")
def test_pinned_results_are_the_same_bits_whatever_the_instruction_ceiling(tmp_path):
    """The tiny study (ViT and P2 variants, their conditioning, summaries and tables) run pinned on
    this machine and again with the machine's ceiling lowered to AVX2 (ATen, MKL and oneDNN each
    told so, as on a CPU without AVX-512): byte-identical. Unpinned, the same two runs differ,
    which is what the pinning protects against (where this CPU has no AVX-512, the unpinned run
    is lowered further, to SSE4.2)."""
    if _ceiling() not in ("avx2", "avx512"):
        pytest.skip("this CPU has no AVX2: the pinned numerics are defined for AVX2 and above")
    here = _study(tmp_path / "pinned_here", "pinned", {})
    lowered = _study(tmp_path / "pinned_avx2", "pinned", AVX2_MACHINE)
    for target in here:
        assert here[target] == lowered[target], target
    summary = pd.read_csv(tmp_path / "pinned_here" / "results" / "tiny" / "summary.csv")
    assert summary["numerics"].str.contains("AVX2").all() and summary["numerics"].nunique() == 1
    assert "Numerics: all 6 results under cpu x86_64/AVX2" in here["results/tables/tiny-by_config.md"]

    below = AVX2_MACHINE if _ceiling() == "avx512" else SSE_MACHINE
    native_here = _study(tmp_path / "native_here", "native", {})
    native_lowered = _study(tmp_path / "native_lowered", "native", below)
    differ = [t for t in native_here if t.endswith("summary.csv") and native_here[t] != native_lowered[t]]
    assert differ == [t for t in native_here if t.endswith("summary.csv")], differ
    assert native_here["results/tiny/summary.csv"] != here["results/tiny/summary.csv"]


def test_summaries_tables_and_status_say_when_numerics_are_mixed(tmp_path):
    """Two runs of a study made under different numerics: the summary's column, every table's
    caption and `leaner status` say so; one numerics: the caption names it."""
    from leaner.analysis.report import numerics_note
    from leaner.running.status import Row, render

    mixed = pd.DataFrame({"numerics": ["cpu A", "cpu A", "cpu B"], "kappa_numerics": ["cpu A", "cpu A", "cpu B"]})
    assert numerics_note(mixed) == ("Numerics: results made under 2 different numerics are compared: "
                                    "cpu A (2); cpu B (1).")
    same = pd.DataFrame({"numerics": ["cpu A"] * 2, "kappa_numerics": ["cuda X fp64; host A"] * 2})
    assert numerics_note(same) == ("Numerics: all 2 results under cpu A; condition numbers: all 2 results under "
                                   "cuda X fp64; host A.")
    rows = [Row("s", "v1", "done", "", "", "cpu A"), Row("s", "v2", "done", "", "", "cpu B"),
            Row("t", "w", "done", "", "", "cpu A"), Row("s", "v3", "pending", "", "")]
    text = render(rows)
    assert "numerics: study s: results made under 2 different numerics are compared: cpu A (1); cpu B (1)" in text
    assert "study t" not in text
    assert "numerics:" not in render(rows[2:])


def test_the_cli_refuses_an_unknown_numerics(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "leaner", "theory", "--settings", "{}", "--out",
                           str(tmp_path / "t.csv"), "--numerics", "fast"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "invalid choice: 'fast' (choose from 'pinned', 'native')" in proc.stderr
