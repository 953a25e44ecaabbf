"""Draw the package's layers from its imports: docs/layers.svg.

    .venv/bin/python docs/draw_layers.py [OUT.svg]

The import graph is tests/test_house.py's (every import in a module's body, lazy ones included).
Modules are grouped into the units a reader meets (each sub-package, each top-level module); a
unit sits one row above the highest unit it imports, so every arrow points down (an import that
a longer path down already implies is not drawn). The picture is
made from the code each time: it cannot drift from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = tuple(sorted(p.parent.name for p in (REPO / "src" / "leaner").glob("*/__init__.py")))
# what each unit is, in a few words (units not named here get none)
ROLE = {"cli": "commands", "workflow": "config, plan, scheduling", "analysis": "summary, tables, figures",
        "training": "the one loop", "measure": "kappa, Jacobians, theory", "tasks": "task catalogue + classes",
        "data": "kind catalogue + loaders", "models": "typed configs, ViT, sequence, P2; memory",
        "outputs": "figure/table catalogue",
        "compute": "devices, ranks, numerics", "grid": "architecture axes", "planning": "cost, rehearsal, pilot",
        "running": "leaner run, status", "warm": "warm start"}


def unit_graph() -> dict[str, set[str]]:
    sys.path.insert(0, str(REPO / "tests"))
    from test_house import import_graph

    def unit(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] != "__main__" else None

    units: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        u = unit(module)
        if u:
            units.setdefault(u, set()).update(t for t in map(unit, targets) if t and t != u)
    return units


def rows(units: dict[str, set[str]]) -> list[list[str]]:
    """Units by row, bottom first: a unit's row is one above the highest it imports."""
    height: dict[str, int] = {}

    def h(u: str) -> int:
        if u not in height:
            height[u] = 1 + max((h(t) for t in units[u]), default=-1)
        return height[u]

    out: list[list[str]] = [[] for _ in range(max(map(h, units)) + 1)]
    for u in sorted(units):
        out[h(u)].append(u)
    return out


def reduced(units: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows no longer path implies (transitive reduction): u -> t is left out where u
    imports another unit that leads to t."""
    def below(u: str, seen: set[str]) -> set[str]:
        for t in units[u]:
            if t not in seen:
                seen.add(t)
                below(t, seen)
        return seen

    return {u: {t for t in targets if not any(t in below(o, set()) for o in targets - {t})}
            for u, targets in units.items()}


def draw(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "leaner-layers"
    plt.rcParams["svg.fonttype"] = "none"  # the names stay text: searchable, and smaller
    units = unit_graph()
    layers = rows(units)
    width = max(map(len, layers))
    fig, ax = plt.subplots(figsize=(1.9 * width + 1, 1.15 * len(layers) + 0.8))
    where = {}
    for y, layer in enumerate(layers):
        for i, u in enumerate(layer):
            where[u] = ((i + 0.5) * width / len(layer), y)
    for u, targets in reduced(units).items():
        for t in targets:
            (x0, y0), (x1, y1) = where[u], where[t]
            ax.annotate("", (x1, y1 + 0.22), (x0, y0 - 0.22),
                        arrowprops={"arrowstyle": "-|>", "color": "#9aa5b1", "lw": 0.6, "shrinkA": 0, "shrinkB": 0})
    for u, (x, y) in where.items():
        package = u in PACKAGES
        label = f"{u}/" if package else u
        if u in ROLE:
            label += f"\n{ROLE[u]}"
        ax.text(x, y, label, ha="center", va="center", fontsize=8, fontweight="bold" if package else "normal",
                bbox={"boxstyle": "round,pad=0.35", "fc": "#dbe9f6" if package else "#f4f4f4",
                      "ec": "#4a6fa5" if package else "#9aa5b1"})
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.7, len(layers) - 0.3)
    ax.axis("off")
    ax.set_title("leaner's layers: each unit imports only units below it (bold: packages; an arrow is left out\n"
                 "where a longer path down gives it)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Date": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(draw(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "layers.svg"))
