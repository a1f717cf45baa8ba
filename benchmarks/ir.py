"""IR benchmark: freeze time per node and frozen == / hash time, verglas beside PyTensor.

Run: `python benchmarks/ir.py [--json]`. Builds the same structural graph (chains of
sin(add(v, y)) joined by a balanced add tree, depth ~200 so PyTensor's recursive
equal_computations copes) at 1e2, 1e4 and 1e5 nodes with toy verglas ops defined here (the
array language is not needed) and, when importable, with PyTensor scalar ops. A script, not a
timed test. Goals: verglas freeze <= 1/3 of PyTensor's time per node; == plus hash under 1 us
and the 1e5 graph within 2x of the 1e2 one.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verglas.graph import Apply, Op, ScalarType, freeze  # noqa: E402

SIZES = (100, 10_000, 100_000)
CHAIN = 200  # nodes per chain


class Toy(Op):
    """A toy scalar op (add, sin) for the benchmark graphs."""

    __props__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def make_node(self, *inputs):
        return Apply(self, inputs, [inputs[0].type])


def build(n: int, add, sin, make_input):
    """(inputs, outputs) of an n-node graph: chains of sin(add(v, y)) joined by an add tree."""
    y = make_input("y")
    inputs, heads = [y], []
    chains = max(1, n // CHAIN)
    per_chain = min(n, CHAIN) if chains > 1 else n
    per_chain -= per_chain % 2
    if chains > 1:  # leave room for the chains - 1 joining adds
        per_chain = (n - (chains - 1)) // chains // 2 * 2
    for k in range(chains):
        v = make_input(f"x{k}")
        inputs.append(v)
        for _ in range(per_chain // 2):
            v = sin(add(v, y))
        heads.append(v)
    while len(heads) > 1:
        heads = [add(heads[i], heads[i + 1]) if i + 1 < len(heads) else heads[i]
                 for i in range(0, len(heads), 2)]
    return inputs, heads


def best_of(fn, repeats: int) -> float:
    """Minimum wall time of `fn()` over `repeats` runs, with gc collected before each."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def eq_hash_time(g1, g2, loops: int = 20_000) -> float:
    """Seconds per (g1 == g2 and hash(g1)) on equal graphs frozen from distinct sources."""
    assert g1 == g2
    t0 = time.perf_counter()
    for _ in range(loops):
        g1 == g2  # noqa: B015
        hash(g1)
    return (time.perf_counter() - t0) / loops


def count_nodes(outputs) -> int:
    """Apply nodes between the roots and `outputs` (works for both libraries' graphs)."""
    seen, stack = set(), [o.owner for o in outputs if o.owner is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(v.owner for v in node.inputs if v.owner is not None)
    return len(seen)


def bench_verglas(n: int, repeats: int) -> dict:
    add, sin = Toy("add"), Toy("sin")
    f64 = ScalarType("float64")
    ins1, outs1 = build(n, add, sin, f64.make_variable)
    ins2, outs2 = build(n, add, sin, f64.make_variable)
    nodes = count_nodes(outs1)

    def cold():  # every node new to the intern tables
        g = freeze(ins1, outs1)
        del g

    freeze_s = best_of(cold, repeats)
    g1 = freeze(ins1, outs1)
    hit_s = best_of(lambda: freeze(ins2, outs2), repeats)  # every node already interned
    g2 = freeze(ins2, outs2)
    return {"nodes": nodes, "freeze_us_per_node": freeze_s / nodes * 1e6,
            "refreeze_us_per_node": hit_s / nodes * 1e6,
            "eq_hash_us": eq_hash_time(g1, g2) * 1e6}


def bench_pytensor(n: int, repeats: int) -> dict | None:
    try:
        import pytensor.scalar as ps
        from pytensor.graph.basic import equal_computations
        from pytensor.graph.fg import FunctionGraph
    except ImportError:
        return None
    ins1, outs1 = build(n, ps.add, ps.sin, ps.float64)
    ins2, outs2 = build(n, ps.add, ps.sin, ps.float64)
    nodes = count_nodes(outs1)
    fg1 = FunctionGraph(ins1, outs1, clone=False)
    fg2 = FunctionGraph(ins2, outs2, clone=False)
    if not hasattr(fg1, "freeze"):
        return {"nodes": nodes}

    def cold():
        g = fg1.freeze()
        del g

    freeze_s = best_of(cold, repeats)
    g1 = fg1.freeze()
    hit_s = best_of(lambda: fg2.freeze(), repeats)
    g2 = fg2.freeze()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * CHAIN + 10_000))
    try:
        eqc_s = best_of(lambda: equal_computations(outs1, outs2, ins1, ins2), repeats)
    finally:
        sys.setrecursionlimit(limit)
    return {"nodes": nodes, "freeze_us_per_node": freeze_s / nodes * 1e6,
            "refreeze_us_per_node": hit_s / nodes * 1e6,
            "eq_hash_us": eq_hash_time(g1, g2) * 1e6,
            "equal_computations_us_per_node": eqc_s / nodes * 1e6}


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform()}
    try:
        import pytensor

        info["pytensor"] = pytensor.__version__
    except ImportError:
        info["pytensor"] = None
    return info


def _best(old: dict | None, new: dict | None) -> dict | None:
    """Merge two rounds of figures keeping the minimum of each."""
    if old is None or new is None:
        return new if old is None else old
    return {k: min(old[k], new[k]) if k != "nodes" else new[k] for k in new}


def fmt(value, spec=".2f") -> str:
    return "-" if value is None else format(value, spec)


def main(argv=None) -> None:
    """Run the benchmark, print the table, optionally record JSON and markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="write benchmarks/results/ir-<date>")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per size")
    args = parser.parse_args(argv)

    rows = []
    for n in SIZES:
        # Alternate the two libraries round by round so both see the same machine load; keep
        # the best of each figure.
        vg = pt = None
        for _ in range(args.repeats):
            vg = _best(vg, bench_verglas(n, 2))
            pt = _best(pt, bench_pytensor(n, 2))
        rows.append({"size": n, "verglas": vg, "pytensor": pt})

    header = ("| nodes | vg freeze us/node | pt freeze us/node | vg/pt | vg refreeze us/node | "
              "vg ==+hash us | pt ==+hash us | pt equal_computations us/node |")
    lines = [header, "|" + "---|" * 8]
    for row in rows:
        vg, pt = row["verglas"], row["pytensor"] or {}
        ptf = pt.get("freeze_us_per_node")
        ratio = vg["freeze_us_per_node"] / ptf if ptf else None
        lines.append(
            f"| {vg['nodes']} | {fmt(vg['freeze_us_per_node'])} | {fmt(ptf)} | {fmt(ratio)} | "
            f"{fmt(vg['refreeze_us_per_node'])} | {fmt(vg['eq_hash_us'], '.3f')} | "
            f"{fmt(pt.get('eq_hash_us'), '.3f')} | "
            f"{fmt(pt.get('equal_computations_us_per_node'))} |")
    small, big = rows[0]["verglas"]["eq_hash_us"], rows[-1]["verglas"]["eq_hash_us"]
    ratios = [r["verglas"]["freeze_us_per_node"] / r["pytensor"]["freeze_us_per_node"]
              for r in rows if r["pytensor"] and "freeze_us_per_node" in r["pytensor"]]
    goals = [
        f"freeze <= 1/3 of PyTensor per node: "
        f"{'met' if ratios and max(ratios) <= 1 / 3 else 'NOT met' if ratios else 'n/a'}"
        f" (worst ratio {fmt(max(ratios) if ratios else None)})",
        f"== plus hash under 1 us: {'met' if max(small, big) < 1 else 'NOT met'}",
        f"1e5 ==+hash within 2x of 1e2: {'met' if big <= 2 * small else 'NOT met'}"
        f" ({big / small:.2f}x)",
    ]
    table = "\n".join(lines)
    print(table)
    print("\n".join("goal: " + g for g in goals))

    if args.json:
        date = datetime.date.today().isoformat()
        out = Path(__file__).resolve().parent / "results"
        out.mkdir(exist_ok=True)
        command = "python benchmarks/ir.py " + " ".join(sys.argv[1:] if argv is None else argv)
        info = machine()
        record = {"date": date, "command": command, "machine": info, "rows": rows,
                  "goals": goals}
        (out / f"ir-{date}.json").write_text(json.dumps(record, indent=2) + "\n")
        md = [f"# IR benchmark, {date}", "",
              f"- command: `{command}`",
              f"- machine: {info['cpu']}, {info['cores']} cores ({info['platform']})",
              f"- python {info['python']}, numpy {info['numpy']}, "
              f"pytensor {info['pytensor']}", "",
              "Graph: chains of sin(add(v, y)) (200 nodes each) joined by a balanced add tree;",
              "freeze times are the best of several runs with every node new to the intern",
              "tables (refreeze: every node already interned).", "", table, "",
              *("- " + g for g in goals), ""]
        (out / f"ir-{date}.md").write_text("\n".join(md))
        print(f"wrote {out / f'ir-{date}.json'} and .md")


if __name__ == "__main__":
    main()
