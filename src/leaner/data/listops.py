"""LRA ListOps (Tay et al. 2021, after Nangia & Bowman 2018): nested list operations to evaluate.

An expression is a value 0-9 or an operator applied to 2..max_args sub-expressions:
MAX, MIN, MED (median, rounded down) and SM (sum mod 10), written in prefix form,
``[MAX 2 9 [MIN 4 7 ] 0 ]``. The label is its value (10 classes). As in LRA's generator, every
node above the depth limit is an operator with probability 1/4 (else a value), the argument count
is uniform in 2..max_args, and expressions are kept only when their length in tokens lies in
[min_length, max_length] (LRA: depth 10, 10 arguments, 500-2000 tokens; 96k/2k/2k examples).

The data rule generates the three splits once, from a fixed seed, into one npz: token ids padded
with 0 to max_length, true lengths and labels, with a sha256 in the manifest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import atomic_path, read_json, sha256_file, verify_sha256, write_json
from ..runspec import RunSpec
from .checks import check_listops
from .kinds import DatasetKind, add_kind, settings, shared
from .vocab import LISTOPS_CLOSE, LISTOPS_OPERATORS, LISTOPS_PAD, LISTOPS_VOCAB

OPERATORS, CLOSE, PAD, VOCAB = LISTOPS_OPERATORS, LISTOPS_CLOSE, LISTOPS_PAD, LISTOPS_VOCAB  # id 0 is padding
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
OPERATOR_P = 0.25
SPLITS = ("train", "val", "test")


def apply(op: str, args: list[int]) -> int:
    if op == "[MAX":
        return max(args)
    if op == "[MIN":
        return min(args)
    if op == "[MED":
        return int(np.floor(np.median(args)))
    if op == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown operator {op!r} (allowed: {', '.join(OPERATORS)})")


def _expression(rng: np.random.Generator, depth: int, max_depth: int, max_args: int, budget: int):
    """(tokens, value) of a random expression, or None once it exceeds `budget` tokens."""
    if depth >= max_depth or rng.random() >= OPERATOR_P:
        value = int(rng.integers(10))
        return [str(value)], value
    op = OPERATORS[int(rng.integers(len(OPERATORS)))]
    tokens, values = [op], []
    for _ in range(int(rng.integers(2, max_args + 1))):
        sub = _expression(rng, depth + 1, max_depth, max_args, budget - len(tokens) - 1)
        if sub is None:
            return None
        tokens += sub[0]
        values.append(sub[1])
        if len(tokens) + 1 > budget:
            return None
    tokens.append(CLOSE)
    return tokens, apply(op, values)


def generate(n: int, rng: np.random.Generator, max_depth: int, max_args: int, min_length: int,
             max_length: int, max_tries: int = 10_000_000) -> list[tuple[list[str], int]]:
    """`n` expressions with min_length <= tokens <= max_length, each with its value."""
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > max_tries:
            raise ValueError(f"ListOps: only {len(out)} of {n} expressions of {min_length}-{max_length} tokens "
                             f"in {max_tries} tries (max_depth {max_depth}, max_args {max_args}): widen the bounds")
        expr = _expression(rng, 0, max_depth, max_args, max_length)  # None: longer than max_length
        if expr is not None and max(min_length, 2) <= len(expr[0]) <= max_length:  # never a bare value
            out.append(expr)
    return out


def encode(examples: list[tuple[list[str], int]], max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tokens = np.zeros((len(examples), max_length), dtype=np.int8)
    lengths = np.zeros(len(examples), dtype=np.int32)
    labels = np.zeros(len(examples), dtype=np.int64)
    for i, (toks, value) in enumerate(examples):
        tokens[i, :len(toks)] = [TOKEN_ID[t] for t in toks]
        lengths[i], labels[i] = len(toks), value
    return tokens, lengths, labels


def decode(ids) -> list[str]:
    return [VOCAB[int(i)] for i in ids if int(i) != 0]


def prepare_listops(name: str, spec: dict, out_manifest: str) -> dict:
    """Generate train/val/test once from spec['seed'] and write them beside the manifest."""
    from tqdm import tqdm

    out_dir = Path(out_manifest).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([spec["seed"], 0x115705])
    arrays, counts = {}, {}
    for split in SPLITS:
        n = spec[f"n_{split}"]
        examples = []
        for _ in tqdm(range(0, n, 1000), desc=f"listops {split}", disable=n < 20000):
            examples += generate(min(1000, n - len(examples)), rng, spec["max_depth"], spec["max_args"],
                                 spec["min_length"], spec["max_length"])
        tokens, lengths, labels = encode(examples, spec["max_length"])
        arrays.update({f"{split}_tokens": tokens, f"{split}_lengths": lengths, f"{split}_labels": labels})
        counts[split] = {"n": n, "mean_length": float(lengths.mean()),
                         "label_counts": np.bincount(labels, minlength=10).tolist()}
    data_path = out_dir / "listops.npz"
    with atomic_path(data_path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    manifest = {"dataset": name, "kind": "listops", **spec, "vocab": list(VOCAB), "vocab_size": len(VOCAB),
                "num_classes": 10, "file": data_path.name, "sha256": sha256_file(data_path), "splits": counts,
                "source": "LRA ListOps definition, generated here (MAX, MIN, MED, SM over digits 0-9)"}
    write_json(out_manifest, manifest)
    return manifest


def load_listops(manifest_path: str) -> dict:
    """{split: (tokens int64 (n, max_length), lengths, labels)} after checking the file's hash."""
    import torch

    manifest = read_json(manifest_path)
    path = Path(manifest_path).parent / manifest["file"]
    verify_sha256(path, manifest["sha256"], manifest_path)
    with np.load(path) as z:
        return {s: (torch.from_numpy(z[f"{s}_tokens"].astype(np.int64)), torch.from_numpy(z[f"{s}_lengths"]),
                    torch.from_numpy(z[f"{s}_labels"])) for s in SPLITS}


def open_listops(manifest_path: str, spec: RunSpec, device) -> dict:
    """What a run reads (the kind's `open`): load_listops's splits."""
    return load_listops(manifest_path)


def listops_rows(entry: dict, manifest: dict | None, spec: RunSpec) -> int:
    """The entry's `n_train`."""
    return int(entry["n_train"])


def listops_sample(name: str, entry: dict, folder: Path) -> dict:
    """Four training sequences, two to validate, two to test, at the entry's lengths."""
    return {**entry, "n_train": 4, "n_val": 2, "n_test": 2}


# The kind this module defines: its record, with the code above.
add_kind(DatasetKind(
    "listops", {"seed": 0, "n_train": 96000, "n_val": 2000, "n_test": 2000, "max_depth": 10, "max_args": 10,
                "min_length": 500, "max_length": 2000},
    settings(60, 4000, 1, False), check=check_listops,
    tasks_read="{split: (tokens, lengths, labels)} tensors, hash-checked",
    prepare=prepare_listops, open=open_listops, sample=listops_sample, rows=listops_rows,
    keys={
        **shared("seed", "max_length", "n_train"),
        "n_val": {"$ref": "#/$defs/posint", "description": "listops: validation examples (LRA: 2000)"},
        "n_test": {"$ref": "#/$defs/posint", "description": "listops: test examples (LRA: 2000)"},
        "max_depth": {"$ref": "#/$defs/posint", "description": "listops: maximum nesting depth (LRA: 10)"},
        "max_args": {"type": "integer", "minimum": 2,
                     "description": "listops: maximum arguments per operator (LRA: 10)"},
        "min_length": {"$ref": "#/$defs/posint", "description": "listops: minimum tokens per expression (LRA: 500)"}},
    about="LRA ListOps, generated once by the data rule."))
