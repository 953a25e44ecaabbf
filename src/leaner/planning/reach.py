"""How far a job gets in a wall-clock budget: the authors' regime beside the full schedule.

P2's figN jobs ran under a 4-hour Slurm limit on one V100-class GPU with no requeue
(NoahAmsel/attention-formers, paper_experiments/figN/figN.slurm: `--time=4:00:00`, `--gres=gpu:1`),
and the paper reports the minimum over epochs of the training MSE: a job cut at the limit reports
the best epoch it reached. `leaner cost --wall-budget H` prices each job's epochs within H hours
from the plan's own step times (cost.price, on the card priced), and on a V100-class card by the
ratio of the two cards' fp32 peaks and memory bandwidths (CARD_RATIOS: P2's steps are bound by
launches, attention scores or FLOPs, none faster on a V100 than on the card priced). A recipe's
`wall_budget_minutes` trains in that regime (training/train.py): the schedule stays the full one,
and the run stops at the first epoch's end past the budget, as a job killed at its limit would
have stopped."""

from __future__ import annotations

from .cards import Card

AUTHORS_BUDGET_H = 4.0  # figN.slurm's --time=4:00:00
# A V100 SXM2 against the card priced: fp32 peak 15.7 TFLOP/s and memory bandwidth 0.9 TB/s
# (NVIDIA's V100 datasheet). Its step is taken as this many times slower, the two ratios bounding it.
V100_FP32_TFLOPS, V100_MEMORY_TBPS = 15.7, 0.9


def card_ratios(card: Card) -> tuple[float, float]:
    """(fewer, more): how many times slower a V100 runs a step than `card`, by memory bandwidth and
    by fp32 peak, the smaller first."""
    ratios = (card.memory_tbps / V100_MEMORY_TBPS, card.fp32_tflops / V100_FP32_TFLOPS)
    return min(ratios), max(ratios)


def epochs_within(wall_hours: float | None, epochs: int, budget_h: float, slower: float = 1.0) -> float | None:
    """The epochs a job of `epochs` that takes `wall_hours` on the card priced completes within
    `budget_h` on a card `slower` times slower (at most all of them); None where it is not priced."""
    if wall_hours is None:
        return None
    if wall_hours * slower <= budget_h:
        return float(epochs)
    return epochs * budget_h / (wall_hours * slower)


def reach_rows(rows: list[dict], epochs: dict[tuple[str, str], int], card: Card, budget_h: float) -> list[dict]:
    """Per configuration (cost.price's rows, one per seed: the first seed's; `epochs`: each (study,
    job)'s scheduled epochs): its wall hours on `card`, and the epochs it completes within
    `budget_h` on `card` and on a V100-class card (the two ratios' bounds, the fewer epochs first)."""
    fewer, more = card_ratios(card)
    out, seen = [], set()
    for r in rows:
        config = (r["study"], r["job"].rsplit("-s", 1)[0])
        if config in seen:
            continue
        seen.add(config)
        n = epochs[(r["study"], r["job"])]
        on_card = epochs_within(r["wall_hours"], n, budget_h)
        v100 = (epochs_within(r["wall_hours"], n, budget_h, more), epochs_within(r["wall_hours"], n, budget_h, fewer))
        out.append({"study": r["study"], "configuration": config[1], "epochs": n, "wall_hours": r["wall_hours"],
                    "epochs_on_card": on_card, "epochs_v100_lo": v100[0], "epochs_v100_hi": v100[1],
                    "truncated_on_v100": v100[0] is not None and v100[0] < n})
    return out


def format_reach(rows: list[dict], card: Card, budget_h: float) -> str:
    """The printed table: per configuration its hours on the card, and the epochs done in the budget."""
    fewer, more = card_ratios(card)

    def done(x: float | None, n: int) -> str:
        return "?" if x is None else "all" if x >= n else f"{x:.0f} ({100 * x / n:.2g}%)"

    lines = [f"Within {budget_h:g} h a job (the authors' regime: one job, no requeue, the best epoch reached), on "
             f"{card.name} and on a V100 ({fewer:.1f}-{more:.1f} x slower: memory bandwidth, fp32 peak):", "",
             f"{'study':<16} {'configuration':<32} {'epochs':>6} {'h on card':>9} {'epochs in budget':>17} "
             f"{'on a V100':>24}"]
    for r in rows:
        v100 = done(r["epochs_v100_lo"], r["epochs"])
        if r["epochs_v100_hi"] != r["epochs_v100_lo"]:
            v100 += f" to {done(r['epochs_v100_hi'], r['epochs'])}"
        hours = "?" if r["wall_hours"] is None else f"{r['wall_hours']:.1f}"
        lines.append(f"{r['study']:<16} {r['configuration']:<32} {r['epochs']:>6} {hours:>9} "
                     f"{done(r['epochs_on_card'], r['epochs']):>17} {v100:>24}")
    cut = [r for r in rows if r["truncated_on_v100"]]
    lines += ["", f"{len(cut)} of {len(rows)} configurations end before their schedule on a V100 within "
                  f"{budget_h:g} h: their points rest on truncated training (the best epoch reached)."]
    return "\n".join(lines)
