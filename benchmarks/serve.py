"""The model service under load: verglas's (examples/serve/app.py) against numpy's.

`python -m benchmarks.serve [--json] [--duration 5] [--rounds 2] [--clients 8] [--rows 256]`
builds the README demo's MLP (examples/serve/build_model.py: 64-256-256-8, tanh, float32) in a
temporary directory and starts three servers on loopback, each in its own process with the same
HTTP code (examples/serve/service.py): verglas (the saved artifact), numpy (the same weights)
and "http only" (a model that returns zeros: what the web stack alone costs, the ceiling). In
each round, in turn, `clients` threads of this process (one keep-alive connection each) send
requests of `rows` float32 rows (the binary path) back to back for `duration` seconds:
throughput is answers per second over the round, latency the p50 / p99 of single requests. The
first answer of every client is checked against numpy. Then, without HTTP, the model call alone
is timed (median of one call; and `clients` threads calling at once, calls per second).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.timing import measure

SERVE = Path(__file__).resolve().parent.parent / "examples" / "serve"
SERVICES = ("verglas", "numpy", "http only")
NULL_APP = ("import sys, numpy as np; from service import make_app, serve; "
            "serve(make_app(lambda x: np.zeros((len(x), 8), np.float32), 64, 8, 'null'), "
            "'127.0.0.1', 0, int(sys.argv[1]))")


def _start(service: str, directory: Path, blas_threads: int, started: list) -> int:
    """Start one server on a free port (appended to `started`); its port once it answers."""
    command = {"verglas": [str(SERVE / "app.py"), str(directory / "model.vgl")],
               "numpy": [str(SERVE / "app_numpy.py"), str(directory / "weights.npz")],
               "http only": ["-c", NULL_APP, str(blas_threads)]}[service]
    if service != "http only":
        command += ["--port", "0", "--blas-threads", str(blas_threads)]
    proc = subprocess.Popen([sys.executable, *command], cwd=SERVE, stdout=subprocess.PIPE,
                            text=True)
    started.append(proc)
    line = proc.stdout.readline()
    if not line.startswith("serving on "):
        raise RuntimeError(f"{service} server did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    for _ in range(200):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{service} server on port {port} does not answer")


def _connect(port: int) -> http.client.HTTPConnection:
    """A keep-alive connection with Nagle's algorithm off, as curl and httpx open them."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _client(port: int, body: bytes, headers: dict, until: float, latencies: list,
            first: list) -> None:
    """Send requests back to back until `until`, recording each one's latency."""
    conn = _connect(port)
    while True:
        start = time.perf_counter()
        if start >= until:
            break
        conn.request("POST", "/predict", body, headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {data[:200]!r}")
        latencies.append(time.perf_counter() - start)
        if not first:
            first.append(np.frombuffer(data, "<f4").reshape(-1, 8))
    conn.close()


def _load(port: int, x: np.ndarray, clients: int, duration: float) -> dict:
    """`clients` threads hammering the server for `duration` s: throughput and latencies."""
    body = x.astype("<f4").tobytes()
    headers = {"Content-Type": "application/octet-stream",
               "X-Shape": f"{x.shape[0]},{x.shape[1]}"}
    per_client = [[] for _ in range(clients)]
    firsts = [[] for _ in range(clients)]
    start = time.perf_counter()
    until = start + duration
    threads = [threading.Thread(target=_client, args=(port, body, headers, until, lat, first))
               for lat, first in zip(per_client, firsts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    latencies = sorted(v for lat in per_client for v in lat)
    return {"requests": len(latencies), "seconds": elapsed,
            "throughput": len(latencies) / elapsed,
            "p50_s": latencies[len(latencies) // 2],
            "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "firsts": [f[0] for f in firsts if f]}


def _model_alone(directory: Path, params: list, x: np.ndarray, clients: int,
                 blas_threads: int) -> dict:
    """The model call without HTTP (BLAS threads limited as in the servers): median of one
    call, and calls per second with `clients` threads calling at once (for 1 s each)."""
    import threadpoolctl
    from app_numpy import mlp

    import verglas as vg

    models = {"verglas": vg.load(directory / "model.vgl"), "numpy": mlp(params)}
    out = {}
    with threadpoolctl.threadpool_limits(blas_threads, user_api="blas"):
        for name, model in models.items():
            one = measure(lambda model=model: model(x), repeat=7, min_total=0.5).median
            counts = [0] * clients
            until = time.perf_counter() + 1.0

            def work(k, model=model, until=until):
                while time.perf_counter() < until:
                    model(x)
                    counts[k] += 1

            threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[name] = {"call_s": one, "threaded_calls_per_s": sum(counts) / 1.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true",
                        help="write benchmarks/results/serve-<date>.json and .md")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="the servers' threads per matrix product (app.py's default: 1)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(SERVE))
    from app_numpy import mlp
    from build_model import build

    load_before = os.getloadavg()  # (the machine is shared: how busy it was, for the record)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        env_cache = os.environ.get("VERGLAS_CACHE_DIR")
        print(f"building the model in {directory} (cache: {env_cache or 'default'})")
        build(directory)
        with np.load(directory / "weights.npz") as saved:
            params = [saved[f"{kind}{k}"] for k in range(len(saved.files) // 2) for kind in "wb"]
        x = np.random.default_rng(1).standard_normal((args.rows, params[0].shape[0]),
                                                     dtype=np.float32)
        want = mlp(params)(x)
        runs: dict[str, list[dict]] = {name: [] for name in SERVICES}
        started: list[subprocess.Popen] = []
        ports, startup = {}, {}
        try:
            for name in SERVICES:  # (one after the other: each start-up timed alone)
                start = time.perf_counter()
                ports[name] = _start(name, directory, args.blas_threads, started)
                startup[name] = time.perf_counter() - start
            for port in ports.values():  # warm up: first calls, thread pools
                _load(port, x, args.clients, 0.5)
            for k in range(args.rounds):
                for name, port in ports.items():
                    run = _load(port, x, args.clients, args.duration)
                    if name != "http only":
                        for got in run["firsts"]:
                            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
                    run["checked"] = len(run.pop("firsts"))
                    runs[name].append(run)
                    print(f"round {k}: {name:10s} {run['throughput']:8.1f} req/s  p50 "
                          f"{report.fmt_time(run['p50_s'])}  p99 {report.fmt_time(run['p99_s'])}")
        finally:
            for proc in started:
                proc.terminate()
                proc.wait(timeout=30)
        alone = _model_alone(directory, params, x, args.clients, args.blas_threads)

    summary = {name: {"startup_s": startup[name],
                      "throughput": statistics.median(r["throughput"] for r in rs),
                      "p50_s": statistics.median(r["p50_s"] for r in rs),
                      "p99_s": statistics.median(r["p99_s"] for r in rs)}
               for name, rs in runs.items()}
    # (the figures sit at the top of the record: `results` is the suite's list of cells,
    # which report.write pictures)
    record = dict(report.header("cpu"),
                  params={"clients": args.clients, "rows": args.rows,
                          "n_features": int(params[0].shape[0]),
                          "blas_threads": args.blas_threads,
                          "load_average_before": load_before,
                          "load_average_after": os.getloadavg(),
                          "duration_s": args.duration, "rounds": args.rounds,
                          "model": "demo MLP 64-256-256-8, tanh, float32"},
                  services=runs, summary=summary, model_alone=alone,
                  throughput_ratio=summary["verglas"]["throughput"]
                  / summary["numpy"]["throughput"])
    terminal, markdown = render(record)
    print(terminal)
    if args.json:
        for path in report.write("serve", record, markdown):
            print(f"wrote {path}")
    return 0


def render(record: dict) -> tuple[str, str]:
    """The record's tables and summary, for the terminal and as markdown."""
    p, summary, alone = record["params"], record["summary"], record["model_alone"]
    numpy_rate, ceiling = summary["numpy"]["throughput"], summary["http only"]["throughput"]
    headers = ["service", "throughput (req/s)", "rows/s", "p50", "p99", "vs numpy",
               "start-up"]
    rows = [[name, f"{s['throughput']:.1f}", f"{s['throughput'] * p['rows']:.0f}",
             report.fmt_time(s["p50_s"]), report.fmt_time(s["p99_s"]),
             f"{s['throughput'] / numpy_rate:.2f}x", report.fmt_time(s["startup_s"])]
            for name, s in summary.items()]
    alone_headers = ["model alone", "one call (median)", f"calls/s, {p['clients']} threads"]
    alone_rows = [[name, report.fmt_time(a["call_s"]), f"{a['threaded_calls_per_s']:.0f}"]
                  for name, a in alone.items()]
    text = (f"{p['clients']} concurrent clients, {p['rows']} rows of {p['n_features']} "
            f"float32 per request (binary body), {p['rounds']} rounds of {p['duration_s']:g} s "
            f"per service, in turn; medians over rounds; servers with {p['blas_threads']} BLAS "
            f"thread(s) per product. verglas/numpy throughput: "
            f"**{record['throughput_ratio']:.2f}x** (goal: 1.2x). The web stack alone (a model "
            f"that returns zeros) answers {ceiling:.0f} req/s: verglas reaches "
            f"{summary['verglas']['throughput'] / ceiling:.0%} of that ceiling, numpy "
            f"{numpy_rate / ceiling:.0%}. Load average (1 min) of this shared "
            f"{record['machine']['cores']}-core machine: {p['load_average_before'][0]:.1f} "
            f"before, {p['load_average_after'][0]:.1f} after.")
    terminal = "\n".join([report.table(headers, rows), report.table(alone_headers, alone_rows),
                          text.replace("**", "")])
    markdown = "\n\n".join([
        "# The model service under load: verglas against numpy", report.describe(record), text,
        report.table(headers, rows, markdown=True),
        "The model call alone, in the benchmark's process (no HTTP, BLAS threads as in the "
        "servers):", report.table(alone_headers, alone_rows, markdown=True)])
    return terminal, markdown


if __name__ == "__main__":
    sys.exit(main())
