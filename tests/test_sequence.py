"""Sequence families: LRA ListOps (generator, encoder classifier) and the GPT-style causal LM
(byte corpus through `datasets`, causal masking), then a tiny run of both through Snakemake."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pandas as pd
import pytest
import torch

from leaner.data import prepare
from leaner.data.listops import decode, generate, load_listops
from leaner.data.text import TokenStream, decode_bytes
from leaner.measure.conditioning import kappa, kappa_of_rows
from leaner.models import build_model, param_counts
from leaner.training.weights import load_weights, save_weights

from conftest import REPO, snakemake

pytestmark = pytest.mark.slow

SEQ_CONFIG = REPO / "tests" / "config" / "tiny_sequence.yaml"


# ----------------------------------------------------------------------------- ListOps

def _evaluate(tokens: list[str]) -> tuple[int, int, int]:
    """An evaluator written apart from the generator: recursive descent over the token list.
    Returns (value, nesting depth, most arguments of any operator)."""
    pos = 0

    def expr(depth: int) -> tuple[int, int, int]:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok.isdigit():
            return int(tok), depth, 0
        args, deepest, widest = [], depth + 1, 0
        while tokens[pos] != "]":
            value, d, w = expr(depth + 1)
            args.append(value)
            deepest, widest = max(deepest, d), max(widest, w)
        pos += 1
        ops = {"[MAX": max, "[MIN": min, "[SM": lambda a: sum(a) % 10,
               "[MED": lambda a: math.floor(statistics.median(a))}
        return ops[tok](args), deepest, max(widest, len(args))

    out = expr(0)
    assert pos == len(tokens), "trailing tokens"
    return out


@pytest.mark.parametrize("max_depth,max_args,min_len,max_len", [(3, 5, 8, 48), (6, 10, 40, 200)])
def test_listops_expressions_evaluate_to_their_labels_within_bounds(max_depth, max_args, min_len, max_len):
    examples = generate(400, np.random.default_rng(7), max_depth, max_args, min_len, max_len)
    assert len(examples) == 400
    labels = []
    for tokens, label in examples:
        value, depth, widest = _evaluate(tokens)
        assert value == label, " ".join(tokens)
        assert min_len <= len(tokens) <= max_len
        assert 1 <= depth <= max_depth and 2 <= widest <= max_args
        labels.append(label)
    assert len(set(labels)) == 10  # every class occurs


def test_listops_data_rule_writes_splits_once_with_a_hash(tmp_path):
    spec = {"kind": "listops", "seed": 3, "n_train": 300, "n_val": 50, "n_test": 40, "max_depth": 3, "max_args": 4,
            "min_length": 6, "max_length": 32}
    manifest = prepare("lo", spec, str(tmp_path / "a" / "manifest.json"))
    again = prepare("lo", spec, str(tmp_path / "b" / "manifest.json"))
    assert manifest["sha256"] == again["sha256"]  # a fixed seed gives the same file
    splits = load_listops(str(tmp_path / "a" / "manifest.json"))
    tokens, lengths, labels = splits["train"]
    assert tokens.shape == (300, 32) and len(splits["val"][0]) == 50 and len(splits["test"][0]) == 40
    for row, n, label in zip(tokens[:50], lengths[:50], labels[:50]):
        assert (row[n:] == 0).all() and (row[:n] != 0).all()
        assert _evaluate(decode(row))[0] == int(label)
    with open(tmp_path / "a" / manifest["file"], "r+b") as fh:  # a changed file is refused
        fh.seek(100)
        fh.write(b"\x00\x01")
    with pytest.raises(ValueError, match="do not match the sha256"):
        load_listops(str(tmp_path / "a" / "manifest.json"))


def _classifier(heads=2, depth=2):
    return build_model({"arch": "sequence_classifier", "vocab_size": 16, "max_len": 40, "num_classes": 10,
                        "width": 32, "depth": depth, "heads": heads, "head_dim": 32 // heads, "mlp_hidden": 64})


def test_classifier_ignores_padding():
    torch.manual_seed(0)
    model = _classifier().eval()
    x = torch.randint(1, 16, (3, 12))
    padded = torch.cat([x, torch.zeros(3, 9, dtype=torch.long)], 1)
    torch.testing.assert_close(model(x), model(padded), rtol=1e-5, atol=1e-5)
    counts = param_counts(model)
    assert counts["attention"] == 2 * (32 * 96 + 96 + 32 * 32 + 32) and counts["embedding"] == 16 * 32 + 40 * 32


# ----------------------------------------------------------------------------- causal LM

def _lm(heads=4, depth=2):
    return build_model({"arch": "causal_lm", "vocab_size": 257, "max_len": 32, "width": 32, "depth": depth,
                        "heads": heads, "head_dim": 32 // heads, "mlp_hidden": 64})


@pytest.mark.parametrize("fused", [True, False])
def test_causal_lm_never_sees_the_future(fused):
    torch.manual_seed(0)
    model = _lm().eval()
    for blk in model.blocks:
        blk.attn.fused_attn = fused
    x = torch.randint(0, 257, (2, 20))
    changed = x.clone()
    changed[:, 12:] = torch.randint(0, 257, (2, 8))
    a, b = model(x), model(changed)
    assert a.shape == (2, 20, 257)
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-6)  # earlier logits unchanged
    assert not torch.allclose(a[:, 12:], b[:, 12:])  # later ones do see the change


def test_tied_lm_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    model = _lm()
    assert model.head.weight is model.token_embed.weight
    save_weights(model, tmp_path / "w.safetensors", {"variant": "v"})
    torch.manual_seed(1)
    other = _lm()
    load_weights(other, tmp_path / "w.safetensors")
    assert other.head.weight is other.token_embed.weight
    x = torch.randint(0, 257, (2, 16))
    torch.testing.assert_close(model(x), other(x))


def _write_corpus(root, train_docs, eval_docs):
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_text("\n".join(train_docs) + "\n")
    (root / "validation.txt").write_text("\n".join(eval_docs) + "\n")


def test_text_from_local_files_goes_through_datasets_and_bytes(tmp_path):
    docs = [f"Story {i}: the cat sat on the mat, naïvely." for i in range(50)]
    _write_corpus(tmp_path / "corpus", docs, docs[:5])
    spec = {"kind": "text", "source": "files", "path": str(tmp_path / "corpus"), "train_file": "train.txt",
            "eval_file": "validation.txt", "text_key": "text", "max_train_tokens": None, "eval_tokens": 4096}
    manifest = prepare("corpus", spec, str(tmp_path / "data" / "manifest.json"))
    assert manifest["splits"]["train"]["documents"] == 50 and manifest["vocab_size"] == 257
    stream = TokenStream(str(tmp_path / "data" / "manifest.json"), "train")
    assert len(stream) == sum(len(d.encode()) + 1 for d in docs)  # bytes plus one end-of-document each
    assert decode_bytes(stream.tokens[: len(docs[0].encode())]) == docs[0]
    starts = stream.random_starts(4, 16, seed=0, step=5)
    assert (starts == stream.random_starts(4, 16, seed=0, step=5)).all()
    x, y = stream.window_batch(starts, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_induction_lines_repeat_a_segment_whose_period_changes_from_line_to_line(tmp_path):
    """The induction corpus: every line a random segment of 4-16 of the 16 letters repeated to 48,
    so after its first period each letter is the one that followed the previous occurrence of the
    previous letter's context; periods vary (no fixed offset gives the answer away), and the same
    seed writes the same bytes."""
    from leaner.data.text import INDUCTION_LENGTH, INDUCTION_LETTERS, INDUCTION_PERIODS

    spec = {"kind": "text", "source": "induction", "stories": 400, "seed": 3, "text_key": "text",
            "max_train_tokens": None, "eval_tokens": 1024}
    manifest = prepare("induction", spec, str(tmp_path / "a" / "manifest.json"))
    assert manifest["splits"]["train"]["documents"] == 360 and "induction" in manifest["source_note"]
    lines = (tmp_path / "a" / "corpus" / "train.txt").read_text().splitlines()
    periods = set()
    for line in lines:
        assert len(line) == INDUCTION_LENGTH and set(line) <= set(INDUCTION_LETTERS)
        period = next(p for p in range(1, INDUCTION_LENGTH) if line[p:] == line[:-p])
        assert INDUCTION_PERIODS[0] <= period <= INDUCTION_PERIODS[1] or len(set(line[:period])) < period
        periods.add(period)
    assert len(periods) >= 10
    again = prepare("induction", spec, str(tmp_path / "b" / "manifest.json"))
    assert again["splits"]["train"]["sha256"] == manifest["splits"]["train"]["sha256"]


def test_text_through_the_hub_code_path_on_a_local_parquet_dataset(tmp_path):
    """`source: hub` runs datasets.load_dataset(name); a local folder of parquet files stands in
    for TinyStories (no network at test time)."""
    root = tmp_path / "tinystories_like"
    (root / "data").mkdir(parents=True)
    pd.DataFrame({"text": [f"Once upon a time {i}." for i in range(40)]}).to_parquet(root / "data" / "train-0.parquet")
    pd.DataFrame({"text": [f"The end {i}." for i in range(8)]}).to_parquet(root / "data" / "validation-0.parquet")
    spec = {"kind": "text", "source": "hub", "name": str(root), "subset": None, "text_key": "text",
            "train_split": "train", "eval_split": "validation", "max_train_tokens": None, "eval_tokens": 4096}
    manifest = prepare("hub_text", spec, str(tmp_path / "data" / "manifest.json"))
    assert manifest["splits"]["train"]["documents"] == 40 and manifest["splits"]["eval"]["documents"] == 8
    bad = {**spec, "text_key": "story"}
    with pytest.raises(ValueError, match="has no column 'story'"):
        prepare("hub_text", bad, str(tmp_path / "bad" / "manifest.json"))


def test_kappa_over_real_rows_only():
    torch.manual_seed(0)
    mats = torch.randn(4, 10, 6, dtype=torch.float64)
    lengths = torch.tensor([10, 7, 7, 6])
    got = kappa_of_rows(mats, lengths)
    want = torch.stack([kappa(mats[i, :n]) for i, n in enumerate(lengths.tolist())])
    torch.testing.assert_close(got, want)


# ----------------------------------------------------------------------------- through Snakemake

def test_tiny_sequence_studies_through_snakemake(tmp_path):
    snakemake(tmp_path, "--cores", "2", configfile=SEQ_CONFIG)
    for study, metric in (("tiny_listops", "eval_acc"), ("tiny_lm", "eval_loss")):
        summary = pd.read_csv(tmp_path / "results" / study / "summary.csv")
        assert len(summary) == 2 and (summary["status"] == "ok").all()
        assert summary[metric].notna().all() and summary["kappa_final_gmean"].notna().all()
        assert (summary["kappa_init_gmean"] >= 1).all()
        for name in ("by_config", "lean_vs_baseline"):
            assert (tmp_path / "results" / "tables" / f"{study}-{name}.md").stat().st_size > 0
    lm = pd.read_csv(tmp_path / "results/tiny_lm/summary.csv")
    assert lm["eval_loss"].max() < math.log(257)
    # the chance level each run is judged against: the unigram's loss (bytes of English-like text:
    # between 2 and log 256 nats) and ListOps' majority label
    assert (lm["chance"].between(2.0, math.log(256))).all() and lm["learned"].notna().all()
    listops = pd.read_csv(tmp_path / "results/tiny_listops/summary.csv")
    assert listops["chance"].between(0.1, 0.5).all() and listops["learned"].notna().all()
    for fig in ("tiny_listops-kappa_through_training", "tiny_lm-kappa_through_training"):
        assert (tmp_path / "results" / "figures" / f"{fig}.png").stat().st_size > 10_000
    # one head count: nothing to plot against heads (tests/test_figures.py draws those figures)
    assert not list((tmp_path / "results" / "figures").glob("*_vs_heads.png"))
    cond = pd.read_csv(next((tmp_path / "results" / "tiny_listops").glob("*/conditioning.csv")))
    assert set(cond["checkpoint"]) == {"init", "final"}
    metrics = json.loads(next((tmp_path / "results" / "tiny_lm").glob("*/metrics.json")).read_text())
    assert metrics["spec"]["model"]["arch"] == "causal_lm" and "eval_ppl" in metrics["final"]


# ----------------------------------------------------------------------------- BERT-style encoder on GLUE

def _write_glue(root):
    """Tiny GLUE tasks in GLUE's layout (<task>/<split>.tsv, the hub's column names): a single
    sentence task, a regression task, and a three-way pair task with MNLI's matched split."""
    rng = np.random.default_rng(0)
    words = ["good", "bad", "fine", "awful", "great", "poor"]
    rows = lambda n: [(" ".join(rng.choice(words, 4)), " ".join(rng.choice(words, 3))) for _ in range(n)]  # noqa: E731
    for split, n in (("train", 48), ("validation", 16)):
        pairs = rows(n)
        (root / "sst2").mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"sentence": [a for a, _ in pairs], "label": [int("good" in a) for a, _ in pairs],
                      "idx": range(n)}).to_csv(root / "sst2" / f"{split}.tsv", sep="\t", index=False)
        (root / "stsb").mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs],
                      "label": [float(len(set(a.split()) & set(b.split()))) for a, b in pairs],
                      "idx": range(n)}).to_csv(root / "stsb" / f"{split}.tsv", sep="\t", index=False)
        (root / "mnli").mkdir(parents=True, exist_ok=True)
        name = "train" if split == "train" else "validation_matched"
        pd.DataFrame({"premise": [a for a, _ in pairs], "hypothesis": [b for _, b in pairs],
                      "label": [i % 3 for i in range(n)], "idx": range(n)}).to_csv(
            root / "mnli" / f"{name}.tsv", sep="\t", index=False)


def test_bert_pretraining_then_glue_finetuning_through_snakemake(tmp_path):
    import yaml

    _write_glue(tmp_path / "glue")
    config = {
        "datasets": {"stories": {"kind": "text", "source": "generated", "stories": 60, "seed": 0, "eval_tokens": 2048},
                     "glue_local": {"kind": "glue", "source": "files", "path": str(tmp_path / "glue"),
                                    "tasks": ["sst2", "stsb", "mnli"], "max_length": 32}},
        "studies": {"tiny_bert": {
            "task": "glue", "dataset": "stories", "model": {"context": 32},
            "recipe": {"epochs": 2, "steps_per_epoch": 10, "batch_size": 8, "lr": 5.0e-3},
            "finetune": {"dataset": "glue_local", "recipe": {"epochs": 2, "batch_size": 16, "lr": 1.0e-3}},
            "conditioning": {"samples": 16},
            "grid": {"protocol": ["fixed_width"], "width": [16], "depth": [1, 2], "heads": [2], "mlp_ratio": [2],
                     "seeds": [0]},
            "resources": {"threads": 1}}},
        "theory": {"draws": 2, "seed": 0, "tokens": [17], "head_dim": [8], "width": [64], "heads": [1, 2]},
    }
    path = tmp_path / "bert.yaml"
    path.write_text(yaml.safe_dump(config))
    work = tmp_path / "work"
    work.mkdir()
    snakemake(work, "--cores", "2", configfile=path)
    variant = "L2-H2-D16-hd8-mlp32-s0"
    base = work / "results" / "tiny_bert" / variant
    pre = json.loads((base / "metrics.json").read_text())
    assert pre["spec"]["model"]["arch"] == "masked_lm" and pre["final"]["eval_loss"] < math.log(260)
    for task in ("sst2", "stsb", "mnli"):
        m = json.loads((base / "glue" / task / "metrics.json").read_text())
        assert m["spec"]["init_from"] == f"results/tiny_bert/{variant}/model.safetensors"
        assert m["spec"]["model"]["num_classes"] == {"sst2": 2, "stsb": 1, "mnli": 3}[task]
        assert "eval_score" in m["final"]
    # fine-tuning started from the pretrained encoder, not from scratch
    from safetensors.torch import load_file

    pretrained = load_file(str(base / "model.safetensors"))
    start = load_file(str(base / "glue" / "sst2" / "init.safetensors"))
    assert torch.equal(pretrained["blocks.0.attn.qkv.weight"], start["blocks.0.attn.qkv.weight"])
    glue = json.loads((base / "glue.json").read_text())
    assert set(glue["tasks"]) == {"sst2", "stsb", "mnli"}
    assert glue["glue_avg"] == pytest.approx(np.mean([t["score"] for t in glue["tasks"].values()]))
    summary = pd.read_csv(work / "results" / "tiny_bert" / "summary.csv")
    assert {"glue_sst2", "glue_stsb", "glue_mnli", "glue_avg"} <= set(summary.columns) and len(summary) == 2
    table = pd.read_csv(work / "results" / "tables" / "tiny_bert-glue_tasks.csv")
    assert list(table["depth"]) == [1, 2] and table["glue_avg"].notna().all()
    assert (work / "results" / "figures" / "tiny_bert-kappa_through_training.png").stat().st_size > 10_000
    assert not (work / "results" / "figures" / "tiny_bert-glue_vs_heads.png").exists()  # one head count
