"""The benchmark CLI: `python -m benchmarks` or `python benchmarks/run.py`."""

from __future__ import annotations

import argparse
import gc
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import compile_times, gpu, peers, programs, report
from benchmarks.checks import compare
from benchmarks.timing import measure

COMPILE = ("compile_cold", "compile_warm")
GROUPS = {
    "default": {d: names for d, names in programs.DEFAULT.items()},
    "compile": {"cpu": list(COMPILE), "cuda": list(COMPILE)},
    "inner": {"cpu": programs.INNER, "cuda": programs.INNER},
    "models": {"cpu": programs.MODELS, "cuda": programs.MODELS},
    "spellings": {"cpu": programs.SPELLINGS, "cuda": programs.SPELLINGS},
    "all": {"cpu": [*programs.DEFAULT["cpu"], "big_graph", *COMPILE],
            "cuda": [*programs.DEFAULT["cuda"], "big_graph", *COMPILE]},
}


def expand(spec: str | None, device: str) -> list[str]:
    """Program names from `--programs` (names and the groups default, compile, inner, all)."""
    names = []
    for name in (spec or "default").split(","):
        names += GROUPS[name][device] if name in GROUPS else [name]
    return list(dict.fromkeys(names))


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="verglas side by side with numpy, PyTensor (NUMBA, C), JAX and cupy.")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--programs", default="default", help=(
        "comma-separated program names or groups. Programs: "
        f"{', '.join([*programs.PROGRAMS, *COMPILE])}. Groups: default (run time, "
        f"cpu: {','.join(GROUPS['default']['cpu'])}), compile (cold and warm compile "
        f"times of {','.join(programs.COMPILE_PROGRAMS)} in fresh processes), inner "
        f"(inner graphs: {','.join(programs.INNER)}), models ({','.join(programs.MODELS)}), spellings "
        f"({','.join(programs.SPELLINGS)}), all"))
    p.add_argument("--repeat", type=int, default=7, help="timed samples per cell (default 7)")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--json", action="store_true",
                   help="write benchmarks/results/<name>-<date>.json and .md")
    p.add_argument("--name", help="record name (default: <device>, or <device>-quick)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")
    p.add_argument("--compile-timeout", type=float, default=300,
                   help="seconds before a compile probe is reported as a timeout (default 300)")
    p.add_argument("--compile-programs", default=",".join(programs.COMPILE_PROGRAMS),
                   help="comma-separated programs the compile runs measure (default: "
                        f"{','.join(programs.COMPILE_PROGRAMS)})")
    return p.parse_args(argv)


class Progress:
    """tqdm when installed, else one line per step on stderr; nothing when `show` is off."""

    def __init__(self, total: int, show: bool = True):
        self.bar, self.n, self.total, self.show = None, 0, total, show
        if show:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="cell", dynamic_ncols=True, file=sys.stderr)
            except ImportError:
                pass

    def step(self, desc: str) -> None:
        """Announce the next cell."""
        if not self.show:
            return
        if self.bar is None:
            self.n += 1
            print(f"[{self.n}/{self.total}] {desc}", file=sys.stderr, flush=True)
        else:
            if self.bar.n or self.bar.desc:
                self.bar.update()
            self.bar.set_description(desc[:48])

    def close(self) -> None:
        """Finish the bar."""
        if self.bar is not None:
            self.bar.update()
            self.bar.close()


def unavailable(fw: peers.Framework) -> str | None:
    """`fw.unavailable()`, with a broken import reported instead of raised."""
    try:
        return fw.unavailable()
    except Exception as exc:  # noqa: BLE001 -- e.g. verglas half-written: a cell, not a crash
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _error(exc: BaseException) -> dict:
    """An exception as a result cell."""
    first = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return {"status": "error", "error": first, "traceback": traceback.format_exc(limit=6)}


def run_case(case: programs.Case, fws: list, reasons: dict, repeat: int, device: str,
             progress: Progress) -> list[dict]:
    """Every framework on one case: check against numpy, then time."""
    arrays = case.make_inputs()
    base = {"case": case.label, "program": case.program}
    try:
        want = peers.Eager("numpy").to_numpy(peers.Eager("numpy").build(case, arrays)())
    except Exception as exc:  # noqa: BLE001 -- reported; cells then run unchecked
        want = None
        print(f"numpy reference of {case.label} failed: {exc}", file=sys.stderr)
    nbytes = sum(a.nbytes for a in arrays) + sum(w.nbytes for w in want or [])
    out = []
    for fw in fws:
        progress.step(f"{case.label} {fw.name}")
        cell = {**base, "framework": fw.name, "bytes": nbytes}
        if reasons[fw.name]:
            out.append({**cell, "status": "unavailable", "error": reasons[fw.name]})
            continue
        try:
            t0 = time.perf_counter()
            runner = fw.build(case, arrays)
            result = runner()
            fw.sync(result)
            cell["first_call_s"] = time.perf_counter() - t0
            mismatch = None if want is None else compare(fw.to_numpy(result), want)
            del result
            small = "overhead" in case.tags
            timing = measure(runner, sync=fw.sync, repeat=repeat,
                             min_sample=0.005 if small else 0.0)
            cell.update(timing.as_dict(), status="mismatch" if mismatch else "ok")
            if mismatch:
                cell["error"] = mismatch
        except Exception as exc:  # noqa: BLE001 -- one failing cell never stops the run
            cell.update(_error(exc))
        runner = None
        gc.collect()
        out.append(cell)
    return out


def _cell(r: dict | None) -> str:
    """`median (min) unit`, `n/a`, `error: Kind` or `MISMATCH ...`."""
    if r is None:
        return "-"
    if r["status"] == "unavailable":
        return "n/a"
    if r["status"] == "error":
        return "error: " + r["error"].split(":")[0]
    med, mn = r["median_s"], r["min_s"]
    text = report.fmt_time(med)
    number, unit = text.split()
    scale = med / float(number)
    cell = f"{number} ({mn / scale:.3g}) {unit}"
    return ("MISMATCH " + cell) if r["status"] == "mismatch" else cell


def _median(r: dict | None) -> float | None:
    """The median of a cell that ran and matched."""
    return r["median_s"] if r and r["status"] == "ok" else None


def runtime_table(results: list[dict], names: list[str]) -> tuple[list[str], list[list[str]]]:
    """Rows per case: `median (min)` per framework, then verglas/peer ratios of medians."""
    by = {(r["case"], r["framework"]): r for r in results}
    peers_ = names[1:]
    headers = ["program", *names, *(f"verglas/{p}" for p in peers_)]
    rows = []
    for case in dict.fromkeys(r["case"] for r in results):
        got = [by.get((case, n)) for n in names]
        rows.append([case, *map(_cell, got),
                     *(report.fmt_ratio(_median(got[0]), _median(g)) for g in got[1:])])
    return headers, rows


def bandwidth_table(results: list[dict], names: list[str], copies: dict):
    """GPU rows: achieved GB/s (bytes read + written / median) and % of copy bandwidth."""
    by = {(r["case"], r["framework"]): r for r in results}
    headers = ["program", "MB moved", "copy GB/s", *(f"{n} GB/s (% copy)" for n in names)]
    rows = []
    for case, nbytes in dict.fromkeys((r["case"], r["bytes"]) for r in results):
        if case not in copies:
            continue
        copy_bw = nbytes / copies[case]
        cells = []
        for n in names:
            med = _median(by.get((case, n)))
            cells.append("-" if med is None else
                         f"{nbytes / med / 1e9:.0f} ({100 * nbytes / med / copy_bw:.0f}%)")
        rows.append([case, f"{nbytes / 1e6:.0f}", f"{copy_bw / 1e9:.0f}", *cells])
    return headers, rows


def notes(results: list[dict], compiles: list[dict]) -> list[str]:
    """Errors, mismatches and unavailable frameworks, deduplicated."""
    seen: dict[tuple, list[str]] = {}
    for r in results + compiles:
        status = r.get("status") or ("unavailable" if "unavailable" in r else
                                     "error" if "error" in r else "ok")
        if status == "ok":
            continue
        msg = r.get("error") or r.get("unavailable")
        where = r.get("case") or f"compile {r['program']} {r.get('state', '')}".strip()
        seen.setdefault((status.upper(), r["framework"], msg), []).append(where)
    return [f"{status} {fw} [{', '.join(where) if len(where) < 3 else f'{len(where)} cells'}]: "
            f"{msg}" for (status, fw, msg), where in seen.items()]


def main(argv: list[str] | None = None) -> int:
    """Run the suite, print the tables, optionally record them."""
    args = parse(argv)
    device = args.device
    names = expand(args.programs, device)
    want_compile = [n for n in names if n in COMPILE]
    names = [n for n in names if n not in COMPILE]
    smoke = device == "cuda" and gpu.simulated()
    if smoke:
        print("--device cuda under numba's CUDA simulator: a smoke test (quick sizes, verglas "
              "against numpy, one sample; no timing to read)", file=sys.stderr)
        args.quick, args.repeat, want_compile = True, 1, []
    elif device == "cuda" and (missing := gpu.gpu_missing()):
        print(f"skipping --device cuda: {missing}", file=sys.stderr)
        return 0
    cases = programs.cases(names, device, args.quick)
    fws = [peers.Verglas("cuda"), peers.Eager("numpy")] if smoke else peers.frameworks(device)
    reasons = {fw.name: unavailable(fw) for fw in fws}
    fw_names = [fw.name for fw in fws]
    compile_programs = [n for n in args.compile_programs.split(",") if n]
    unknown = [n for n in compile_programs
               if n not in programs.PROGRAMS and n not in programs.OTHER_CASES]
    if unknown:
        raise SystemExit(f"unknown compile program(s): {', '.join(unknown)}")
    n_compile = 2 * len(compile_programs) * len(compile_times.FRAMEWORKS[device])
    progress = Progress(len(cases) * len(fws) + (n_compile if want_compile else 0),
                        show=not args.no_progress and sys.stderr.isatty())
    results = []
    for case in cases:
        results += run_case(case, fws, reasons, args.repeat, device, progress)
    compiles = []
    if want_compile:
        compiles = compile_times.measure_all(compile_programs, device, args.quick,
                                             progress.step, args.compile_timeout)
    progress.close()
    copies = {}
    if device == "cuda" and not smoke:
        for case, nbytes in dict.fromkeys((r["case"], r["bytes"]) for r in results):
            if nbytes >= 1 << 20:
                copies[case] = gpu.copy_timing(nbytes, args.repeat).median

    record = report.header(device, None if argv is None else ["-m", "benchmarks", *argv])
    sections = []
    if results:
        sections.append(("run time per call: median (min) over repeats; ratios of medians",
                         runtime_table(results, fw_names)))
    if copies:
        sections.append(("bandwidth: bytes read + written / median",
                         bandwidth_table(results, fw_names[:1] + fw_names[1:], copies)))
    if compiles:
        cnames = compile_times.FRAMEWORKS[device]
        sections.append(("compile time in a fresh process, cold (empty caches) and warm",
                         compile_times.rows(compiles, cnames)))
    found = notes(results, compiles)
    for title, (headers, rows) in sections:
        print(f"\n{title}\n")
        print(report.table(headers, rows))
    if found:
        print("\nnotes:", file=sys.stderr)
        for line in found:
            print("  " + line, file=sys.stderr)
    bad = [r for r in results if r.get("status") == "mismatch"]
    if bad:
        print(f"\n!!! {len(bad)} RESULT MISMATCH(ES) against numpy: "
              + ", ".join(f"{r['framework']} {r['case']}" for r in bad), file=sys.stderr)
    if args.json:
        record.update(options=vars(args), results=results, compile=compiles,
                      copy_median_s=copies, notes=found)
        md = [f"# verglas benchmarks ({device}{', quick' if args.quick else ''})", "",
              report.describe(record)]
        for title, (headers, rows) in sections:
            md += ["", f"## {title}", "", report.table(headers, rows, markdown=True)]
        if found:
            md += ["", "## notes", "", *(f"- {line}" for line in found)]
        name = args.name or (device + ("-quick" if args.quick else ""))
        path, md_path = report.write(name, record, "\n".join(md))
        print(f"\nwrote {path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
