"""GLUE for fine-tuning a BERT-style encoder, through Hugging Face `datasets`.

Each task comes from the hub (`nyu-mll/glue`, one configuration per task) or from local files in
GLUE's layout, `<path>/<task>/<split>.tsv` with the hub's column names (tab-separated, a header
row). Text is tokenized as bytes, the same tokenizer as pretraining:
``[CLS] sentence1 [SEP] sentence2 [SEP]``, cut to max_length (the longer sentence gives way).

The data rule writes one npz per task (train and evaluation tokens padded with PAD, labels) and a
manifest with each file's sha256.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import atomic_path, read_json, sha256_file, verify_sha256, write_json
from ..runspec import RunSpec
from .checks import check_glue
from .hub import load_hub_split
from .kinds import DatasetKind, add_kind, each_task, settings, shared, source_hub
from .vocab import BERT_CLS, BERT_MASK, BERT_PAD, BERT_SEP, BERT_VOCAB_SIZE

PAD, CLS, SEP, MASK, VOCAB_SIZE = BERT_PAD, BERT_CLS, BERT_SEP, BERT_MASK, BERT_VOCAB_SIZE

# task: (text columns, number of labels (1 = regression), evaluation split, main metric)
GLUE_TASKS = {
    "cola": (("sentence",), 2, "validation", "matthews"),
    "sst2": (("sentence",), 2, "validation", "accuracy"),
    "mrpc": (("sentence1", "sentence2"), 2, "validation", "f1"),
    "stsb": (("sentence1", "sentence2"), 1, "validation", "spearman"),
    "qqp": (("question1", "question2"), 2, "validation", "f1"),
    "mnli": (("premise", "hypothesis"), 3, "validation_matched", "accuracy"),
    "qnli": (("question", "sentence"), 2, "validation", "accuracy"),
    "rte": (("sentence1", "sentence2"), 2, "validation", "accuracy"),
    "wnli": (("sentence1", "sentence2"), 2, "validation", "accuracy"),
}


def encode_pair(texts: list[str], max_length: int) -> list[int]:
    """[CLS] a [SEP] (b [SEP]) as byte ids, the longer part trimmed first to fit max_length."""
    parts = [list(t.encode("utf-8")) for t in texts]
    budget = max_length - 1 - len(parts)
    while sum(len(p) for p in parts) > budget:
        longest = max(range(len(parts)), key=lambda i: len(parts[i]))
        parts[longest] = parts[longest][:len(parts[longest]) - (sum(len(p) for p in parts) - budget)]
    ids = [CLS]
    for p in parts:
        ids += p + [SEP]
    return ids


def _load(spec: dict, task: str, split: str):
    import datasets

    if spec["source"] == "files":
        path = Path(spec["path"]) / task / f"{split}.tsv"
        if not path.is_file():
            raise FileNotFoundError(f"GLUE task {task!r}: {path} not found (layout: <path>/<task>/<split>.tsv)")
        return datasets.load_dataset("csv", data_files={split: str(path)}, delimiter="\t", split=split)
    return load_hub_split(spec, task, split)


def prepare_glue(name: str, spec: dict, out_manifest: str) -> dict:
    out_dir = Path(out_manifest).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = {}
    for task in spec["tasks"]:
        columns, n_labels, eval_split, metric = GLUE_TASKS[task]
        arrays, counts = {}, {}
        for role, split in (("train", "train"), ("eval", eval_split)):
            ds = _load(spec, task, split)
            missing = [c for c in (*columns, "label") if c not in ds.column_names]
            if missing:
                raise ValueError(f"GLUE task {task!r} split {split!r} has no column(s) {', '.join(missing)} "
                                 f"(columns: {', '.join(ds.column_names)})")
            if spec.get("max_train_examples") and role == "train":
                ds = ds.select(range(min(len(ds), spec["max_train_examples"])))
            tokens = np.full((len(ds), spec["max_length"]), PAD, dtype=np.int16)
            for i, row in enumerate(ds):
                ids = encode_pair([str(row[c]) for c in columns], spec["max_length"])
                tokens[i, :len(ids)] = ids
            labels = np.asarray(ds["label"], dtype=np.float32 if n_labels == 1 else np.int64)
            arrays.update({f"{role}_tokens": tokens, f"{role}_labels": labels})
            counts[role] = {"split": split, "rows": len(ds)}
        path = out_dir / f"{task}.npz"
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)
        tasks[task] = {"file": path.name, "sha256": sha256_file(path), "num_labels": n_labels, "metric": metric,
                       **counts}
    manifest = {"dataset": name, "kind": "glue", **spec, "tokenizer": "bytes", "vocab_size": VOCAB_SIZE,
                "pad": PAD, "cls": CLS, "sep": SEP, "mask": MASK, "glue_tasks": tasks}
    write_json(out_manifest, manifest)
    return manifest


def load_glue_task(manifest_path: str, task: str) -> dict:
    """{train|eval: (tokens int64, labels)} of one task after checking its hash."""
    import torch

    manifest = read_json(manifest_path)
    if task not in manifest["glue_tasks"]:
        raise ValueError(f"GLUE task {task!r} was not prepared in {manifest_path} "
                         f"(prepared: {', '.join(manifest['glue_tasks'])})")
    info = manifest["glue_tasks"][task]
    path = Path(manifest_path).parent / info["file"]
    verify_sha256(path, info["sha256"], manifest_path)
    with np.load(path) as z:
        return {role: (torch.from_numpy(z[f"{role}_tokens"].astype(np.int64)), torch.from_numpy(z[f"{role}_labels"]))
                for role in ("train", "eval")}


def score(task: str, pred: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """GLUE's metrics for one task: the main one as `score`, with the others GLUE reports."""
    from scipy import stats

    metric = GLUE_TASKS[task][3]
    out: dict[str, float] = {}
    if metric == "spearman":
        out["spearman"] = float(stats.spearmanr(pred, labels)[0])
        out["pearson"] = float(stats.pearsonr(pred, labels)[0])
    else:
        out["accuracy"] = float((pred == labels).mean())
        if metric == "f1":
            tp = float(((pred == 1) & (labels == 1)).sum())
            precision = tp / max(float((pred == 1).sum()), 1.0)
            recall = tp / max(float((labels == 1).sum()), 1.0)
            out["f1"] = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        if metric == "matthews":
            tp, tn = float(((pred == 1) & (labels == 1)).sum()), float(((pred == 0) & (labels == 0)).sum())
            fp, fn = float(((pred == 1) & (labels == 0)).sum()), float(((pred == 0) & (labels == 1)).sum())
            denom = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
            out["matthews"] = (tp * tn - fp * fn) / denom if denom else 0.0
    out["score"] = out[metric]
    return {k: (0.0 if v != v else v) for k, v in out.items()}  # constant predictions: correlation 0


def open_glue_task(manifest_path: str, spec: RunSpec, device) -> dict:
    """What a run reads (the kind's `open`): the GLUE task of its spec (`glue_task`)."""
    return load_glue_task(manifest_path, spec.glue_task)


# Each task's training rows where no prepared manifest says (`leaner cost`)
GLUE_TRAIN_ROWS = {"cola": 8_551, "sst2": 67_349, "mrpc": 3_668, "stsb": 5_749, "qqp": 363_846, "mnli": 392_702,
                   "qnli": 104_743, "rte": 2_490, "wnli": 635}


def glue_rows(entry: dict, manifest: dict | None, spec: RunSpec) -> int | None:
    """The fine-tuning job's GLUE task's: its manifest's, else the task's known size; at most the
    entry's `max_train_examples`."""
    task = spec.glue_task
    rows = (manifest["glue_tasks"][task]["train"]["rows"] if manifest and task in manifest["glue_tasks"]
            else GLUE_TRAIN_ROWS.get(task))
    return min(rows, entry.get("max_train_examples") or rows) if rows else None


def glue_sample(name: str, entry: dict, folder: Path) -> dict:
    raise ValueError(f"dataset {name}: GLUE is only fine-tuned on, which the rehearsal leaves out")


# The kind this module defines: its record, with the code above.
add_kind(DatasetKind(
    "glue", {"name": "nyu-mll/glue", "max_length": 128, "source": "hub",
             "tasks": ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"], "max_train_examples": None},
    settings(120, 8000, 4, None), check=check_glue, from_hub=source_hub, hub_subsets=each_task,
    tasks_read="{train|eval: (tokens, labels)} of the run's spec.glue_task, hash-checked",
    prepare=prepare_glue, open=open_glue_task, sample=glue_sample, rows=glue_rows,
    keys={
        **shared("name", "path", "revision", "max_length", "source"),
        "tasks": {"type": "array", "minItems": 1,
                  "items": {"enum": ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]},
                  "description": "glue: the tasks to fine-tune on (default the eight of the GLUE average)"},
        "max_train_examples": {"type": ["integer", "null"], "minimum": 1,
                               "description": "glue: cap on training rows per task"}},
    about="GLUE tasks for fine-tuning (hub nyu-mll/glue, or local <path>/<task>/<split>.tsv files)."))
