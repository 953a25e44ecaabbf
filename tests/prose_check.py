"""The results prose (README.md, docs/results.md, docs/claims.md) read against the runs it quotes:
every number with a decimal point must be a number of the references a paragraph cites
(`tests/reference/NAME`; none cited: the default study's), at the precision it is written; every
interval "x [lo, hi]" must be one row's three consecutive numbers (a difference and its bounds, a
mean and its interval, a correlation and its interval; as magnitudes where the prose says "costs
0.51 [0.32, 0.69]"); and an italic verdict beside such an interval (*superior*, *inferior*, ...;
each verdict read as the nearest interval's) must be that row's verdict; a word of cause ("carries",
"because", "buys", ...) in README.md or docs/results.md must stand in a sentence of CAUSES, each tied
to a reference's claim that is an intervention (a control arm, or a lean arm at the baseline's
parameters: one thing moved). What is not a run's
number (a version, a paper's count) is listed in NOT_RUNS with where it comes from. Generated
blocks (between `<!-- NAME: begin -->` and `end`) are held byte for byte elsewhere
(test_readme.py) and left out here."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCES = REPO / "tests" / "reference"
PROSE = ("README.md", "docs/results.md", "docs/claims.md")
DEFAULT = "default_study"
VERDICTS = ("non-inferior", "superior", "equivalent", "inferior", "inconclusive")
# numbers in the prose that no run makes: the text they stand in and where they come from
NOT_RUNS = {
    "Python 3.11": "the interpreter the project is tested on (pyproject.toml)",
    "within 4.65": "PLATFORM_REACH (leaner/analysis/stats.py), a constant of the method",
    "by 1.645": "the one-sided 95% normal quantile, a constant of the method",
    "62.65M": "DaViT-B's lean model as timm builds it (tests/test_backbones.py)",
    "62.0M": "P1's count for it (../shared/papers.md)",
}
# words of cause (a word in README.md or docs/results.md's prose: CAUSE_PROSE) and the sentences allowed
# them: a fragment of the sentence -> (reference, claim) whose intervention moved one thing
CAUSE = re.compile(r"\b(carr(?:y|ies|ied)|because|buys?|buying|bought|causes?|caused|drives?|drove|driven"
                   r"|due to|explains?|explained|thanks to|responsible for)\b", re.I)
CAUSE_PROSE = ("README.md", "docs/results.md")
CAUSES = {
    # one layer at fixed width: 4 heads inferior (the control), 8 and 16 at its parameters match
    "the heads, not the lost layer, carry the match": ("default_study", "lean_matches_conventional"),
    # the logit scale at fixed architecture and parameters (its answer: kappa_dose)
    "Whether conditioning *carries* the gain": ("why_kappa", "conditioning_helps_4_heads"),
}
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:e[-+]?\d+)?%?")
SIGNED = r"[-+]?\d+\.\d+%?"
INTERVAL = re.compile(rf"({SIGNED}) \[({SIGNED}), ({SIGNED})\]")
ITALIC = re.compile(r"\*(" + "|".join(VERDICTS) + r")\*")


def prose(text: str) -> str:
    """The text less its generated blocks and code fences."""
    text = re.sub(r"<!-- (.+?): begin -->.*?<!-- \1: end -->", "", text, flags=re.S)
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _cells(value: float) -> set[str]:
    """How a value can be written: to 0-5 decimals, as a percentage to 0-3, in e-notation to 0-2."""
    out = {f"{abs(value):.{d}f}" for d in range(6)} | {f"{abs(value) * 100:.{d}f}" for d in range(4)}
    if value:
        for d in range(3):
            mantissa, exponent = f"{abs(value):.{d}e}".split("e")
            out.add(f"{mantissa}e{int(exponent)}")
    return out


@dataclass
class Pool:
    """What a set of references holds: every number (written forms) and every row of numbers."""

    numbers: set[str] = field(default_factory=set)
    rows: list[tuple[list[float | None], str | None]] = field(default_factory=list)  # (cells, verdict)

    @classmethod
    def of(cls, names: tuple[str, ...]) -> Pool:
        pool = cls()
        for name in names:
            path = REPO / name
            if path.suffix == ".csv":
                pool._csv(path)
                continue
            for table in sorted(path.rglob("*.csv")):
                pool._csv(table)
            for text in sorted(path.glob("*.md")):  # the findings: their numbers, and their intervals as rows
                words = text.read_text()
                for m in re.finditer(r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?", words):
                    pool.numbers.add(m.group().replace(",", ""))
                for m in re.finditer(r"([-+]?\d+\.\d+) \[([-+]?\d+\.\d+), ([-+]?\d+\.\d+)\]", words):
                    pool.rows.append(([float(x) for x in m.groups()], None))
        return pool

    def _csv(self, path: Path) -> None:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        if path.parent.name == "pilots":  # what a rationale quotes of a pilot: each arm's mean and sd, their gaps
            import pandas as pd

            arms = pd.DataFrame(rows).astype({"value": float}).groupby("configuration")["value"].agg(["mean", "std"])
            for mean, sd in arms.itertuples(index=False):
                self.numbers |= _cells(mean) | (_cells(sd) if math.isfinite(sd) else set())
            for a in arms["mean"]:
                for b in arms["mean"]:
                    self.numbers |= _cells(a - b)
        for row in rows:
            cells = []
            for value in row.values():
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    number = math.nan
                cells.append(number if math.isfinite(number) else None)
                if math.isfinite(number):
                    self.numbers |= _cells(number)
            self.rows.append((cells, row.get("verdict") or None))

    def interval(self, written: tuple[str, str, str]) -> list[str | None] | None:
        """The verdicts of the rows holding `written` as three consecutive numbers (None: no row)."""
        def forms(tok: str) -> tuple[str, bool]:
            return tok.lstrip("+-").rstrip("%"), tok.endswith("%")

        want = [forms(t) for t in written]
        found = []
        for cells, verdict in self.rows:
            for i in range(len(cells) - 2):
                trio = cells[i:i + 3]
                if None in trio:
                    continue
                for order in ((0, 1, 2), (0, 2, 1)):  # bounds in order, or as magnitudes reversed
                    if all(_writes(trio[j], *want[k]) for k, j in enumerate(order)):
                        found.append(verdict)
        return found or None


def _writes(value: float, text: str, percent: bool) -> bool:
    decimals = len(text.split(".")[1]) if "." in text else 0
    shown = abs(value) * 100 if percent else abs(value)
    return f"{shown:.{decimals}f}" == text


def paragraph_sources(paragraph: str) -> tuple[str, ...]:
    cited = sorted(set(re.findall(r"tests/reference/(\w+)", paragraph)))
    pilots = sorted(p for p in set(re.findall(r"pilots/\w+\.csv", paragraph)) if (REPO / p).exists())
    return tuple(f"tests/reference/{name}" for name in (cited or [DEFAULT])) + tuple(pilots)


_POOLS: dict = {}  # the references' pools, read once a process


def problems(text: str, where: str, pools: dict | None = None) -> list[str]:
    """One line per number, interval or verdict of `text`'s prose that its references do not hold."""
    pools = _POOLS if pools is None else pools
    out = []
    for paragraph in prose(text).split("\n\n"):
        names = paragraph_sources(paragraph)
        if names not in pools:
            pools[names] = Pool.of(names)
        pool = pools[names]
        body = re.sub(r"`[^`]*`", "", paragraph)
        for quoted in NOT_RUNS:
            body = body.replace(quoted, "")
        flat = " ".join(body.split())
        cited = ", ".join(names)
        for m in NUMBER.finditer(flat):
            if m.group().lstrip("+-").rstrip("%") not in pool.numbers:
                out.append(f"{where}: {m.group()} is no number of {cited}: ...{flat[max(0, m.start() - 60):m.end()]}")
        if where in CAUSE_PROSE:
            out += _uncaused(flat, where)
        intervals = list(INTERVAL.finditer(flat))
        said: dict[int, list[str]] = {}  # each italic verdict goes to the interval nearest it
        for v in ITALIC.finditer(flat):
            gaps = [(max(v.start() - m.end(), m.start() - v.end()), i) for i, m in enumerate(intervals)]
            gap, i = min(gaps, default=(None, None))
            if gap is not None and gap <= 60:
                said.setdefault(i, []).append(v.group(1))
        for i, m in enumerate(intervals):
            verdicts = pool.interval(m.groups())
            if verdicts is None:
                out.append(f"{where}: {m.group()} is no row of {cited}: ...{flat[max(0, m.start() - 60):m.end()]}")
                continue
            stated = {v for v in verdicts if v}
            words = said.get(i, [])
            if words and stated and not set(words) & stated:
                out.append(f"{where}: {m.group()} is {' or '.join(sorted(stated))} in {cited}, "
                           f"the prose says *{words[0]}*: ...{flat[max(0, m.start() - 60):m.end() + 40]}")
    return out


def _uncaused(flat: str, where: str) -> list[str]:
    """A word of cause outside every sentence CAUSES allows."""
    out = []
    for m in CAUSE.finditer(flat):
        start = max(flat.rfind(". ", 0, m.start()), flat.rfind(": ", 0, m.start()), -2) + 2
        end = min(i for i in (flat.find(". ", m.end()), flat.find(": ", m.end()), len(flat)) if i >= 0)
        sentence = flat[start:end]
        if not any(fragment in flat[max(0, m.start() - len(fragment)):m.end() + len(fragment)]
                   for fragment in CAUSES):
            out.append(f"{where}: a word of cause ({m.group()!r}) with no intervention in CAUSES: ...{sentence}")
    return out


def intervention(reference: str, claim: str) -> str | None:
    """Why `claim` of tests/reference/`reference` is no intervention that moved one thing (None: it is)."""
    rows = [row for table in sorted((REFERENCES / reference).rglob("*-claims.csv"))
            for row in csv.DictReader(open(table, newline="")) if row["claim"] == claim]
    if not rows:
        return f"no claim {claim} in tests/reference/{reference}"
    roles = {row["role"]: row for row in rows}
    if "control" in roles:
        return None
    lean = [row for row in rows if row["role"] == "lean"]
    if lean and all(row["params"] == roles["baseline"]["params"] for row in lean):
        return None
    return f"{claim} in tests/reference/{reference} has no control and its lean arms move the parameters"
