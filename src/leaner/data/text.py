"""Text for language modelling: TinyStories from the hub at paper scale, local files, or a small
generated corpus for the default study, all read through Hugging Face `datasets`.

Tokenizer: bytes (UTF-8, 256 ids, plus 256 = end of document). It needs nothing downloaded or
trained, and it is the same for every corpus; the price is ~4x more tokens per story than GPT-2's
BPE, so a context of 256 bytes holds about 50 words.

The data rule tokenizes each split once into a flat uint16 token file (documents joined by the
end-of-document token) beside the manifest; training draws windows of context+1 tokens at
offsets that are a function of (seed, step), evaluation reads fixed consecutive windows.

The generated corpus ("synthetic stories") is written by this module, not taken from anywhere:
short stories from a small grammar, each about one named character whose name and pronoun recur,
so predicting later tokens rewards attending back to earlier ones. It is a stand-in with the shape
of TinyStories, not a sample of it; its numbers say nothing about TinyStories itself.

The induction corpus (`source: induction`) is a task one layer cannot do at small size (Sanford,
Hsu and Telgarsky 2024): each line a random segment of 4-16 letters from a 16-letter alphabet,
repeated to 48 letters. Past its first period every letter is the one that followed the previous
occurrence of the letter before it, and the period differs from line to line, so no fixed offset
gives it away: predicting it needs a head that finds the earlier occurrence and one that reads
what came after (two attention steps). The first period is unpredictable (log 16 = 2.77 nats a
letter).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import atomic_path, read_json, sha256_file, verify_sha256, write_json
from ..runspec import RunSpec
from .checks import check_text
from .hub import load_hub_split
from .kinds import DatasetKind, add_kind, settings, shared, source_hub
from .vocab import BYTE_VOCAB_SIZE as VOCAB_SIZE
from .vocab import EOT

NAMES = {"she": ["Lily", "Mia", "Sara", "Anna", "Lucy", "Emma", "Zoe", "Ruby"],
         "he": ["Tom", "Ben", "Max", "Leo", "Sam", "Jack", "Finn", "Noah"]}
ANIMALS = ["cat", "dog", "bird", "fox", "frog", "bunny", "duck", "bear"]
PLACES = ["park", "forest", "garden", "beach", "farm", "hill", "lake", "town"]
THINGS = ["ball", "kite", "box", "hat", "boat", "drum", "cake", "shell"]
COLORS = ["red", "blue", "green", "yellow", "big", "small", "shiny", "soft"]
FEELINGS = ["happy", "sad", "scared", "excited", "tired", "proud", "curious", "brave"]


def _story(rng: np.random.Generator) -> str:
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    pron = pick(["she", "he"])
    name, poss = pick(NAMES[pron]), {"she": "her", "he": "his"}[pron]
    animal, place, thing, color, feel = pick(ANIMALS), pick(PLACES), pick(THINGS), pick(COLORS), pick(FEELINGS)
    friend_pron = pick(["she", "he"])
    friend = pick([n for n in NAMES[friend_pron] if n != name])
    lines = [f"Once upon a time, there was a little {animal} named {name}.",
             f"{name} lived near the {place} and liked to play with a {color} {thing}."]
    if rng.random() < 0.5:
        lines.append(f"One day, {name} lost {poss} {thing} in the {place}. {pron.capitalize()} felt {feel}.")
        lines.append(f"{name} asked {friend} for help. {friend} said, \"I will help you find your {thing}.\"")
        lines.append(f"They looked and looked, and {friend} found the {color} {thing} under a tree.")
        lines.append(f"{name} said, \"Thank you, {friend}!\" and gave {friend} a hug.")
    else:
        lines.append(f"One day, {name} met a {pick(ANIMALS)} called {friend} at the {place}.")
        lines.append(f"{friend} wanted to play with the {color} {thing} too. {name} felt {feel}.")
        lines.append(f"Then {name} shared {poss} {thing} with {friend}, and they played all day.")
    lines.append(f"From that day on, {name} and {friend} were best friends.")
    return " ".join(lines)


def _write_splits(out_dir: Path, texts: list[str], eval_fraction: float) -> dict[str, str]:
    """train.txt and validation.txt (the first `eval_fraction` of `texts`), one document per line;
    their paths by split."""
    n_eval = max(1, int(round(eval_fraction * len(texts))))
    files = {}
    for split, chunk in (("train", texts[n_eval:]), ("validation", texts[:n_eval])):
        path = out_dir / f"{split}.txt"
        with atomic_path(path) as tmp:
            tmp.write_text("\n".join(chunk) + "\n")
        files[split] = str(path)
    return files


def write_generated_corpus(out_dir: Path, stories: int, seed: int, eval_fraction: float = 0.1) -> dict[str, str]:
    """train.txt and validation.txt, one story per line; returns their paths by split."""
    rng = np.random.default_rng([seed, 0x570])
    return _write_splits(out_dir, [_story(rng) for _ in range(stories)], eval_fraction)


INDUCTION_LETTERS, INDUCTION_LENGTH, INDUCTION_PERIODS = "abcdefghijklmnop", 48, (4, 16)


def _induction_line(rng: np.random.Generator) -> str:
    period = int(rng.integers(INDUCTION_PERIODS[0], INDUCTION_PERIODS[1] + 1))
    segment = "".join(INDUCTION_LETTERS[i] for i in rng.integers(len(INDUCTION_LETTERS), size=period))
    return (segment * (INDUCTION_LENGTH // period + 1))[:INDUCTION_LENGTH]


def write_induction_corpus(out_dir: Path, lines: int, seed: int, eval_fraction: float = 0.1) -> dict[str, str]:
    """train.txt and validation.txt of induction lines (module docstring); returns their paths by split."""
    rng = np.random.default_rng([seed, 0x1D0])
    return _write_splits(out_dir, [_induction_line(rng) for _ in range(lines)], eval_fraction)


GENERATORS = {"generated": (write_generated_corpus, "synthetic stories generated by leaner.data.text (a "
                                                    "TinyStories stand-in)"),
              "induction": (write_induction_corpus, "induction lines generated by leaner.data.text (repeated "
                                                    "random segments)")}


def load_text_split(meta: dict, split: str, files: dict[str, str] | None = None):
    """One split as a `datasets.Dataset` with a text column: from the hub by name, or from local
    text files (one document per line) through the `text` builder."""
    import datasets

    if files is not None:
        return datasets.load_dataset("text", data_files={split: files[split]}, split=split)
    return load_hub_split(meta, meta.get("subset"), split)


def encode_bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def decode_bytes(ids) -> str:
    return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


def _tokenize_to_file(ds, text_key: str, path: Path, limit: int | None) -> int:
    """Write the split's documents as one uint16 stream, EOT after each; returns the token count."""
    from tqdm import tqdm

    total = 0
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            for row in tqdm(ds, desc=path.stem, mininterval=10.0, disable=len(ds) < 100_000):
                ids = np.append(encode_bytes(row[text_key]), np.uint16(EOT))
                fh.write(ids.tobytes())
                total += len(ids)
                if limit and total >= limit:
                    break
    return total


def prepare_text(name: str, spec: dict, out_manifest: str) -> dict:
    out_dir = Path(out_manifest).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    files = None
    if spec["source"] in GENERATORS:
        files = GENERATORS[spec["source"]][0](out_dir / "corpus", spec["stories"], spec["seed"])
        splits = {"train": "train", "eval": "validation"}
    elif spec["source"] == "files":
        root = Path(spec["path"])
        files = {"train": str(root / spec["train_file"]), "validation": str(root / spec["eval_file"])}
        splits = {"train": "train", "eval": "validation"}
    else:
        splits = {"train": spec["train_split"], "eval": spec["eval_split"]}
    info = {}
    for role, split in splits.items():
        ds = load_text_split(spec, split, files)
        if spec["text_key"] not in ds.column_names:
            raise ValueError(f"dataset {name!r} split {split!r} has no column {spec['text_key']!r} "
                             f"(columns: {', '.join(ds.column_names)})")
        path = out_dir / f"{role}.bin"
        limit = spec.get("max_train_tokens") if role == "train" else spec["eval_tokens"] + 1
        tokens = _tokenize_to_file(ds, spec["text_key"], path, limit)
        info[role] = {"split": split, "documents": len(ds), "tokens": tokens, "file": path.name,
                      "sha256": sha256_file(path)}
    manifest = {"dataset": name, "kind": "text", **spec, "tokenizer": "bytes", "vocab_size": VOCAB_SIZE,
                "eot": EOT, "splits": info,
                "source_note": (GENERATORS[spec["source"]][1] if spec["source"] in GENERATORS
                                else spec.get("name", spec.get("path")))}
    write_json(out_manifest, manifest)
    return manifest


class TokenStream:
    """A tokenized split: random training windows by (seed, step), fixed evaluation windows."""

    def __init__(self, manifest_path: str, role: str, check: bool = True):
        meta = read_json(manifest_path)
        info = meta["splits"][role]
        path = Path(manifest_path).parent / info["file"]
        if check:
            verify_sha256(path, info["sha256"], manifest_path)
        self.tokens = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return len(self.tokens)

    def window_batch(self, starts: np.ndarray, context: int):
        import torch

        rows = np.stack([np.asarray(self.tokens[s:s + context + 1], dtype=np.int64) for s in starts])
        t = torch.from_numpy(rows)
        return t[:, :-1], t[:, 1:]

    def random_starts(self, batch: int, context: int, seed: int, step: int) -> np.ndarray:
        if len(self) <= context + 1:
            raise ValueError(f"split has {len(self)} tokens, fewer than one window of {context + 1}")
        return np.random.default_rng([seed, step, 0x7E7]).integers(0, len(self) - context - 1, size=batch)

    def eval_starts(self, context: int, limit_tokens: int) -> np.ndarray:
        n = min(len(self) - 1, limit_tokens) // context
        return np.arange(n) * context


def open_token_streams(manifest_path: str, spec: RunSpec, device) -> tuple[TokenStream, TokenStream]:
    """What a run reads (the kind's `open`): the training and evaluation token streams."""
    return TokenStream(manifest_path, "train"), TokenStream(manifest_path, "eval")


def text_sample(name: str, entry: dict, folder: Path) -> dict:
    """300 generated stories and 4,096 evaluation tokens, instead of the entry's source."""
    return {**entry, "source": "generated", "stories": 300, "eval_tokens": 4096, "max_train_tokens": None}


# The kind this module defines: its record, with the code above.
add_kind(DatasetKind(
    "text", {"subset": None, "train_split": "train", "eval_split": "validation", "seed": 0, "source": "hub",
             "text_key": "text", "train_file": "train.txt", "eval_file": "validation.txt", "stories": 4000,
             "max_train_tokens": None, "eval_tokens": 262144},
    settings(240, 16000, 4, None), check=check_text, from_hub=source_hub, streamed=True,
    tasks_read="(train, eval) text.TokenStreams of byte tokens",
    prepare=prepare_text, open=open_token_streams, sample=text_sample,
    keys={
        **shared("name", "path", "subset", "revision", "train_split", "eval_split", "seed", "source"),
        "text_key": {"type": "string", "minLength": 1, "description": "text: the column holding the documents"},
        "train_file": {"type": "string", "minLength": 1, "description": "text from files: training file under path"},
        "eval_file": {"type": "string", "minLength": 1, "description": "text from files: validation file under path"},
        "stories": {"$ref": "#/$defs/posint", "description": "generated text: number of stories (induction: of lines)"},
        "max_train_tokens": {"type": ["integer", "null"], "minimum": 1, "description": "text: cap on training tokens"},
        "eval_tokens": {"$ref": "#/$defs/posint", "description": "text: validation tokens kept and evaluated"}},
    about="a corpus for language modelling (hub, local files, or generated), byte-tokenized by the data rule."))
