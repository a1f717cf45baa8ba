"""Constant powers as products: GELU's `h ** 3` and `gelu(x @ w1)` with the rewrite rules
excluded and included, in one process.

`python -m benchmarks.powers [--size 1024] [--repeat 7]` prints medians of 10-call batches:
the GELU of an (n, n) float32 array compiled with `pow_integer_to_products` excluded (the power
left to `pow`) and included (products), then `gelu(x @ w1)` against the matmul alone plus a
plain elementwise pass over its output, and plus the GELU pass (issue 17: within 10% of the
matmul plus one pass).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _median_s(f, *args, repeat: int) -> float:
    f(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(10):
            f(*args)
        times.append((time.perf_counter() - t0) / 10)
    return float(np.median(times))


def gelu(m, h):
    """The tanh form of GELU, with its cube."""
    return 0.5 * h * (1 + m.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))


def main(argv: list[str] | None = None) -> int:
    import verglas as vg
    from verglas.rewrite import get_mode

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    n, rng = args.size, np.random.default_rng(0)
    h = vg.tensor("h", shape=(None, None), dtype="float32")
    a = rng.standard_normal((n, n)).astype("float32")
    for label, mode in (("pow (rule excluded)", get_mode("fast_run").excluding(
            "pow_integer_to_products")), ("products", "fast_run")):
        f = vg.compile([h], gelu(vg, h), mode=mode)
        gelu_pass = _median_s(f, a, repeat=args.repeat)
        print(f"gelu {n}x{n} float32, {label}: {gelu_pass * 1e3:.2f} ms")
    x, w = (vg.tensor(k, shape=(None, None), dtype="float32") for k in "xw")
    xs = rng.standard_normal((n, n // 4)).astype("float32")
    ws = (rng.standard_normal((n // 4, n)) / np.sqrt(n / 4)).astype("float32")
    matmul = _median_s(vg.compile([x, w], x @ w), xs, ws, repeat=args.repeat)
    fused = _median_s(vg.compile([x, w], gelu(vg, x @ w)), xs, ws, repeat=args.repeat)
    one_pass = _median_s(vg.compile([h], h * 1.0001 + 0.5), xs @ ws, repeat=args.repeat)
    print(f"gelu(x @ w1) {n}x{n // 4} @ {n // 4}x{n}: {fused * 1e3:.2f} ms; matmul "
          f"{matmul * 1e3:.2f} ms, a plain pass {one_pass * 1e3:.2f} ms "
          f"({fused / (matmul + one_pass):.2f}x their sum), the GELU pass above "
          f"{gelu_pass * 1e3:.2f} ms ({fused / (matmul + gelu_pass):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
