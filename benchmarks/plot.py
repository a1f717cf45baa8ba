"""A picture of a record: verglas's speedup over each peer, per program (a PNG beside the JSON).

`python -m benchmarks.plot results/<record>.json ...` (re)draws the PNG of existing records;
`report.write` draws one whenever it writes a record it can picture: run time per program
(`results`) and compile time per program (`compile`). The speedup is peer time / verglas time
on a log scale, so 2x faster and 2x slower lie equally far from the line at 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3")


def speedups(cells: list[dict], case, seconds) -> tuple[str, list[str], dict[str, list]]:
    """(the framework measured against the others, the cases, {peer: [peer time / its time
    per case, None where either is missing]}) of cells whose case label is `case(cell)` and
    time `seconds(cell)` (None: no time)."""
    times: dict[tuple, float] = {}
    for c in cells:
        if (t := seconds(c)) is not None:
            times[(case(c), c["framework"])] = t
    frameworks = list(dict.fromkeys(c["framework"] for c in cells))
    if not frameworks:
        return "", [], {}
    main, peers = frameworks[0], frameworks[1:]
    cases = [k for k in dict.fromkeys(case(c) for c in cells) if (k, main) in times]
    ratios = {p: [times[(k, p)] / times[(k, main)] if (k, p) in times else None for k in cases]
              for p in peers}
    return main, cases, {p: r for p, r in ratios.items() if any(v is not None for v in r)}


def panels(record: dict) -> list[tuple[str, str, list[str], dict]]:
    """(title, framework, cases, ratios) for each part of `record` there is to picture."""
    out = []
    ran = [r for r in record.get("results") or [] if r.get("status") == "ok"]
    main, cases, ratios = speedups(ran, lambda c: c["case"], lambda c: c.get("median_s"))
    if ratios:
        out.append(("run time (medians)", main, cases, ratios))
    compiled = [r for r in record.get("compile") or []
                if "error" not in r and "unavailable" not in r]
    main, cases, ratios = speedups(compiled, lambda c: f"{c['program']}, {c['state']}",
                                   lambda c: c.get("total_s"))
    if ratios:
        out.append(("compile + first call, fresh process", main, cases, ratios))
    return out


def draw(record: dict, path: Path) -> Path | None:
    """Draw `record` into the PNG `path`; None where there is nothing to picture."""
    parts = panels(record)
    if not parts:
        return None
    from matplotlib.figure import Figure  # (no pyplot: the Agg canvas, no display needed)

    heights = [len(cases) * (len(ratios) + 0.6) * 0.15 + 0.9 for _, _, cases, ratios in parts]
    fig = Figure(figsize=(9, sum(heights) + 0.8), layout="constrained")
    axes = fig.subplots(len(parts), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (title, main, cases, ratios) in zip(axes, parts):
        _panel(ax, title, main, cases, ratios)
    m = record.get("machine", {})
    fig.suptitle(f"{Path(path).stem}: {record.get('device', '')} on {m.get('cpu', '?')}, "
                 f"{m.get('cores', '?')} cores; {str(record.get('date', ''))[:10]}", fontsize=10)
    fig.savefig(path, dpi=110)
    return Path(path)


def _panel(ax, title: str, main: str, cases: list[str], ratios: dict) -> None:
    """Grouped horizontal bars: one group per case, one bar per peer, labelled `3.1x`."""
    n = len(ratios)
    width = 0.8 / n
    values = [v for r in ratios.values() for v in r if v is not None]
    for j, (peer, row) in enumerate(ratios.items()):
        ys = [k + (j - (n - 1) / 2) * width for k in range(len(cases))]
        shown = [(y, v) for y, v in zip(ys, row) if v is not None]
        # bars start at 1: rightwards where verglas is faster, leftwards where it is slower
        ax.barh([y for y, _ in shown], [v - 1 for _, v in shown], height=width, left=1,
                color=COLORS[j % len(COLORS)], label=peer)
        for y, v in shown:
            ax.text(v, y, f" {v:.3g}x " if v < 100 else f" {v:.0f}x ", va="center",
                    ha="left" if v >= 1 else "right", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(min(min(values), 1.0) / 2.2, max(max(values), 1.0) * 2.2)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(cases)), cases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"peer time / {main} time (log scale; right of 1: {main} is faster)",
                  fontsize=8)
    ax.set_title(f"{title}: speedup of {main} over each peer", fontsize=9)
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    ax.grid(axis="x", which="both", alpha=0.25)


def main(argv: list[str] | None = None) -> int:
    """(Re)draw the PNG of each record named."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.plot",
                                description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+", type=Path, help="record JSON files")
    args = p.parse_args(argv)
    for path in args.records:
        png = draw(json.loads(path.read_text()), path.with_suffix(".png"))
        print(f"wrote {png}" if png else f"{path}: nothing to picture (no run or compile times)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
