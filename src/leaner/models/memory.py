"""The memory a variant's jobs need, in one model: on the host (the mem_mb a job asks for) and on
a GPU (what `leaner cost` prices, the onstart check holds against the card, and `leaner rehearse`
checks), from the size of the model and what each stage holds per parameter:

  training      fp32 weights, gradients and AdamW's two moments, STATE_BYTES, in every process
                (+ DDP_BUCKET_BYTES on a GPU under DDP: its gradient buckets); on a GPU also the
                activations of its per-GPU batch (models/footprint.py measures them per sample),
                or evaluation's forward where that is larger, + ALLOCATOR_SLACK and the CUDA context
  conditioning  on the host a fresh fp32 model, the fp32 weights loaded into it and its float64
                copy for the probe, CONDITIONING_BYTES (measured peak: 12.3 bytes per parameter,
                ViTs of 76M and 151M); on a GPU the float64 copy; both with the float64 probe's
                chunk of inputs (`probe_bytes` an input), which at P2's widest shapes is GBs an
                input whatever the parameters, or the Jacobian's products where they take more

On the host, plus a quarter (MARGIN) for what that leaves out (activations, allocator slack) and
the runtime itself (Python, torch, timm and the data at rest: 0.7-0.9 GB measured).

The count is params.model_params's: closed forms for leaner's own models and a table for timm's
backbones, so that Snakemake, which asks for every job's memory while it builds the DAG, imports
neither torch nor timm.
"""

from __future__ import annotations

import math

from .config import ModelConfig, model_config
from .params import model_params

MIB = 2**20
STATE_BYTES = 16  # per parameter, training: fp32 weights, gradients, AdamW's two moments
DDP_BUCKET_BYTES = 4  # per parameter, on a GPU under DDP: its gradient buckets beside the gradients
CONDITIONING_BYTES = 16  # per parameter, a conditioning job on the host (fp32 model, loaded weights, float64 copy)
FLOAT64_BYTES = 8  # per parameter, a conditioning job on a GPU: the float64 copy the probe runs
# the host
RUNTIME_MB = 1024
# host memory a process that uses CUDA holds beyond a CPU one (the CUDA runtime, cuBLAS and the
# kernels torch loads, mapped into its RSS): an allowance, 1-2 GB as torch processes are commonly
# seen; `make gpu-check`'s conditioning section measures a conditioning job's peak RSS on a GPU
CUDA_HOST_MB = 2048
MARGIN = 1.25
# a GPU
ALLOCATOR_SLACK = 0.10  # of the activations: the caching allocator's fragmentation
CUDA_CONTEXT_GB = 1.0  # per process: the CUDA context, cuBLAS and cuDNN workspaces
PROBE_BATCH = 64  # probe inputs measured at once, at most
SCORE_COPIES = 3  # N x N float64 tensors per head alive at once in the math kernel (scores, softmax, their product)
MEMORY_SHARE = 0.7  # of the job's memory (or the GPU's free memory) the probe's chunks may use
CPU_PROBE_BYTES = 2**30  # the chunk a CPU conditioning job asks room for, at most (one input always)
JACREV_CHUNK = 64  # rows of the exact Jacobian per vmapped backward: P2's L5-H64-W64 block took >20 GB at all 1024
LANCZOS_COPIES = 2  # one input's score tensors a Lanczos product holds (forward-mode, then reverse): the
# rehearsal's figN L2-H64-W64 N256 rose 12.5 GB with 6.5 GB an input


def _mb(params: int, bytes_per_param: int, copies: int = 1) -> int:
    return math.ceil(MARGIN * params * bytes_per_param * copies / MIB) + RUNTIME_MB


def training_mem_mb(model: ModelConfig | dict, processes: int, asked_mb: int) -> int:
    """A training job's mem_mb: the study's `asked_mb`, or more where `processes` copies of the
    model's training state need more."""
    return max(asked_mb, _mb(model_params(model), STATE_BYTES, processes))


def conditioning_mem_mb(model: ModelConfig | dict, cond: dict, on_cpu: bool = True) -> int:
    """A conditioning job's mem_mb, from its model's size and, where it runs on the CPU, room for
    the larger of the probe's chunk of `cpu_chunk` inputs and the Jacobian's products
    (`jacobian_bytes`); the chunk `conditioning.probe_limit` then sizes from this mem_mb is at
    least `cpu_chunk`. On a GPU, the host memory CUDA itself holds (CUDA_HOST_MB)."""
    model = model_config(model)
    probe = max(cpu_chunk(model, cond["samples"]) * _input_bytes(model), jacobian_bytes(model, cond)) if on_cpu else 0
    runtime = RUNTIME_MB + (0 if on_cpu else CUDA_HOST_MB)
    return math.ceil(MARGIN * (model_params(model) * CONDITIONING_BYTES + probe / MEMORY_SHARE) / MIB) + runtime


def training_gpu_bytes(fp, recipe, gpus: int) -> float:
    """GPU memory of one process of a training job on `gpus` GPUs (its per-GPU batch), from the
    footprint `fp` of its architecture (models/footprint.py): its state, the larger of a training
    batch's activations and evaluation's forward (no graph; about two of the largest saved tensor
    a sample), the allocator's slack and the CUDA context."""
    state = fp.params * (STATE_BYTES + (DDP_BUCKET_BYTES if gpus > 1 else 0))
    train = fp.activation_bytes(math.ceil(recipe.batch_size / gpus / recipe.accumulate))
    evaluate = 2 * fp.largest * recipe.eval_batch_size
    return state + (1 + ALLOCATOR_SLACK) * max(train, evaluate) + CUDA_CONTEXT_GB * 1e9


def conditioning_gpu_bytes(model: ModelConfig | dict, cond: dict, params: int, gpu_memory_gb: float) -> float:
    """GPU memory of a conditioning job on a card of `gpu_memory_gb`: the float64 model, and the
    probe in the chunks that fit MEMORY_SHARE of the card (more than the card where one input alone
    does not fit) or the Jacobian's products where they take more, plus the CUDA context."""
    model = model_config(model)
    chunk = min(cond["samples"], model_chunk(model, MEMORY_SHARE * gpu_memory_gb * 1e9))
    return (FLOAT64_BYTES * params + max(chunk * _input_bytes(model), jacobian_bytes(model, cond))
            + CUDA_CONTEXT_GB * 1e9)


def jacobian_bytes(model: ModelConfig | dict, cond: dict) -> float:
    """Bytes the Jacobian of one attention block at one input holds (0 without jacobian_samples):
    exactly (N*D at most jacobian_exact_max), JACREV_CHUNK backward passes at once, each with
    that input's score tensors, and the (N*D)^2 Jacobian twice (formed, then decomposed); by
    Lanczos, LANCZOS_COPIES of the score tensors."""
    if not cond.get("jacobian_samples"):
        return 0.0
    tokens, heads, cols = probe_shape(model)
    scores = 8.0 * SCORE_COPIES * heads * tokens**2
    n = tokens * model_config(model).residual_width
    if n <= cond.get("jacobian_exact_max", 0):
        return JACREV_CHUNK * scores + 2 * 8.0 * n * n
    return LANCZOS_COPIES * scores


def cpu_chunk(model: ModelConfig | dict, samples: int) -> int:
    """Probe inputs a CPU conditioning job measures at once: PROBE_BATCH (or all `samples`) where
    they take at most CPU_PROBE_BYTES, else as many as do, at least one."""
    return max(1, min(samples, model_chunk(model, CPU_PROBE_BYTES)))


def model_chunk(model: ModelConfig | dict, limit_bytes: float | None) -> int:
    """`probe_chunk` for `model`."""
    tokens, heads, cols = probe_shape(model)
    return probe_chunk(heads, tokens, cols, model_config(model).depth, limit_bytes)


def _input_bytes(model: ModelConfig) -> float:
    tokens, heads, cols = probe_shape(model)
    return probe_bytes(heads, tokens, cols, model.depth)


# ------------------------------------------------------------------------ the float64 probe's chunks

def probe_bytes(heads: int, tokens: int, cols: int, layers: int) -> float:
    """Bytes one probe input takes in the float64 probe: SCORE_COPIES N x N score tensors for each
    head of the layer that runs, and its captures of every layer (N x cols, twice)."""
    return 8.0 * (SCORE_COPIES * heads * tokens**2 + 2 * layers * tokens * cols)


def probe_shape(model: ModelConfig | dict) -> tuple[int, int, int]:
    """(tokens N, heads a layer, columns h*d) of the probe's head-output matrix (padded sequences:
    their full length)."""
    model = model_config(model)
    return model.seq_len, model.attention_heads, model.attention_heads * model.head_dim


def probe_chunk(heads: int, tokens: int, cols: int, layers: int, limit_bytes: float | None) -> int:
    """How many probe inputs to measure at once within `limit_bytes` (None: PROBE_BATCH); at least
    one. Each input's kappas are its own, but a batch's size can move the last bits of a float64
    forward pass (other BLAS blocking), which an ill-conditioned Jacobian amplifies: chunks stay
    PROBE_BATCH wherever that fits, so smaller models measure as they always did."""
    if limit_bytes is None:
        return PROBE_BATCH
    return max(1, min(PROBE_BATCH, int(limit_bytes // probe_bytes(heads, tokens, cols, layers))))
