"""How far the default study's README numbers move from one platform to another, in standard errors.

    .venv/bin/python benchmarks/platform_spread.py REFERENCE_WORKDIR NAME=WORKDIR ... [--readme REV]

REFERENCE_WORKDIR and each WORKDIR hold a finished run of config.yaml (results/tables/...); --readme
also takes the claims and heads-effect tables of the README at git revision REV (3 decimals), as
one more platform. For every number with an interval (a claim's means, difference and bounds; a
heads comparison's difference and bounds) it prints |other - reference| / se, se being the
reference's standard error (stats.interval_se), then the largest ratio per platform and overall,
the verdicts that changed, and the one-seed numbers' moves (held to nothing, shown for scale).
docs/numerics.md has its output for the runs made there.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

READ = {"keep_default_na": False, "na_values": [""]}
SIGNED = r"[+-]\d+\.\d+"


def _tables(workdir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    t = Path(workdir) / "results" / "tables"
    return pd.read_csv(t / "all_studies-headline.csv", **READ), pd.read_csv(t / "all_studies-heads_effect.csv", **READ)


def _readme_tables(rev: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The full claims and heads-effect tables at `rev` (the README's until it became a short manual,
    docs/results.md's since), as the columns the CSVs have."""
    def show(path):
        return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True).stdout

    text = show("README.md")
    if "<!-- claims table: begin -->" not in text:
        text = show("docs/results.md")

    def rows(name):
        begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
        block = text[text.index(begin) + len(begin):text.index(end)]
        return [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()[2:]]

    claims = []
    for r in rows("claims table"):
        nums = [float(x) for x in re.findall(SIGNED, r[8])] + [math.nan] * 3
        claims.append({"study": r[0].strip("`"), "configuration": r[3], "mean": float(r[6].split()[0]),
                       "lean_advantage": nums[0], "bound_lo": nums[1], "bound_hi": nums[2], "verdict": r[10]})
    effects = []
    for r in rows("heads effect table"):
        nums = [float(x) for x in re.findall(SIGNED, r[2])] + [math.nan] * 3
        effects.append({"study": r[0].strip("`"), "comparison": r[1], "delta_error": nums[0], "delta_lo": nums[1],
                        "delta_hi": nums[2], "verdict": r[4]})
    return pd.DataFrame(claims), pd.DataFrame(effects)


def moves(ref: tuple[pd.DataFrame, pd.DataFrame], other: tuple[pd.DataFrame, pd.DataFrame]) -> pd.DataFrame:
    """One row per README number: the reference's value, the other's, its se and |move| / se."""
    from leaner.analysis.stats import interval_se

    rows = []
    claims, effects = ref
    o_claims, o_effects = other
    for i, r in claims.iterrows():
        assert o_claims.iloc[i]["configuration"] == r["configuration"], (i, r["configuration"])
        same = claims[(claims["study"] == r["study"]) & (claims["claim"] == r["claim"])]
        lean = r if r["role"] == "lean" else same[same["role"] == "lean"].iloc[0]
        n_base = int(same[same["role"] == "baseline"]["n"].iloc[0])
        se = interval_se(lean["bound_lo"], lean["bound_hi"], int(lean["n"]), n_base, 0.90)
        cols = [("mean", se / math.sqrt(2))]  # a mean: about 1/sqrt(2) of the difference's se
        if r["role"] == "lean":
            cols += [(c, se) for c in ("lean_advantage", "bound_lo", "bound_hi")]
        for col, s in cols:
            rows.append({"table": "claims", "row": f"{r['study']} {r['configuration']}", "number": col,
                         "reference": r[col], "other": o_claims.iloc[i][col], "se": s,
                         "verdict": r["verdict"] if r["role"] == "lean" else "",
                         "other_verdict": o_claims.iloc[i]["verdict"] if r["role"] == "lean" else ""})
    for i, r in effects.iterrows():
        n = [int(x) for x in str(r["n"]).split(", ")]
        se = interval_se(r["delta_lo"], r["delta_hi"], n[0], n[1], 0.95)
        for col in ("delta_error", "delta_lo", "delta_hi"):
            rows.append({"table": "heads effect", "row": f"{r['study']} {r['group']}: heads {r['heads']}",
                         "number": col, "reference": r[col], "other": o_effects.iloc[i][col], "se": se,
                         "verdict": r["verdict"], "other_verdict": o_effects.iloc[i]["verdict"]})
    frame = pd.DataFrame(rows)
    frame["move"] = (frame["other"] - frame["reference"]).abs()
    frame["ratio"] = frame["move"] / frame["se"]
    return frame


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reference")
    p.add_argument("others", nargs="+", help="NAME=WORKDIR")
    p.add_argument("--readme", help="a git revision whose README's tables count as one more platform")
    a = p.parse_args(argv)
    ref = _tables(Path(a.reference))
    platforms = {name: _tables(Path(path)) for name, path in (o.split("=", 1) for o in a.others)}
    if a.readme:
        platforms[f"README at {a.readme}"] = _readme_tables(a.readme)
    largest = 0.0
    for name, other in platforms.items():
        m = moves(ref, other)
        held = m[m["se"].notna()]
        top = held.loc[held["ratio"].idxmax()]
        largest = max(largest, float(top["ratio"]))
        changed = held.drop_duplicates("row")
        changed = changed[changed["verdict"] != changed["other_verdict"]]
        print(f"## {name}\n")
        print(f"numbers with an interval: {len(held)}; |move| / se: median {held['ratio'].median():.2f}, "
              f"largest {top['ratio']:.2f} ({top['row']}, {top['number']}: {top['reference']:+.4f} -> "
              f"{top['other']:+.4f}, se {top['se']:.4f})")
        print("verdicts changed: " + ("; ".join(f"{r['row']}: {r['verdict']} -> {r['other_verdict']}"
                                                 for _, r in changed.iterrows()) or "none"))
        one = m[m["se"].isna() & m["number"].isin(["mean", "delta_error"])]
        print("one-seed numbers (held to nothing): largest move "
              + (f"{one['move'].max():.3f} ({one.loc[one['move'].idxmax(), 'row']})" if len(one) else "n/a") + "\n")
    print(f"largest |move| / se over every platform: {largest:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
