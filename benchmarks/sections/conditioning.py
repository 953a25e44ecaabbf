"""gpu-check's conditioning section: the float64 probe at nearest_figN's largest shape (L2-H64-W64,
N 256) in chunks sized from the free memory."""

from __future__ import annotations

import resource
import time
from pathlib import Path

from .common import DEVICE, ON_CPU, card_gib, peak_gib

CPU_STAND_IN_MB = 12000  # `--cpu`: the conditioning stand-in's memory (figN's chunk of one input fits)
FIGN_MODEL = {"arch": "nearest_point_encoder", "depth": 2, "heads": 64, "head_dim": 1, "ff": 2048, "posn_dim": 64,
              "modules": 64, "dim": 64, "tokens": 256, "posn": "none", "d_model": 64}  # figN's L2-H64-W64 N256


def section_conditioning(work: Path, samples: int = 16) -> dict:
    import torch

    from leaner.measure.conditioning import layer_kappas, probe_limit
    from leaner.models.config import model_config
    from leaner.models.memory import conditioning_mem_mb, probe_bytes, probe_chunk
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
    # the host memory of this process (CUDA's own included) against what the rule asks for such a job
    # (models/memory.py conditioning_mem_mb with its CUDA_HOST_MB allowance): declared before any GPU run
    host_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    asked_mb = conditioning_mem_mb(model_config(FIGN_MODEL), {"samples": samples}, on_cpu=ON_CPU)
    ok = (bool((~torch.isnan(values)).all()) and peak["gib"] < card and len(values) == 2 * 2 * samples
          and host_mb <= asked_mb)
    per = probe_bytes(4096, 256, 4096, 2) / 1e9
    return {"status": "pass" if ok else "fail",
            "summary": f"figN L2-H64-W64 N256, {samples} inputs in chunks of {chunk} (~{per:.1f} GB an input, "
                       f"{limit / 2**30:.0f} GiB allowed): peak {peak['gib']:.1f} of {card:.0f} GiB, {seconds:.1f} s, "
                       f"median kappa {values.median().item():.3g}; host peak {host_mb:.0f} MB of the {asked_mb} MB "
                       "the job asks",
            "chunk": chunk, "peak_gib": round(peak["gib"], 2), "probe_seconds": round(seconds, 1),
            "host_peak_mb": round(host_mb), "asked_mb": asked_mb}
