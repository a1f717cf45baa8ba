"""The README demo: train a small MLP with verglas on the CPU and time it next to numpy.

Run with `python -m verglas.demo` (add `--device cuda` on a machine with an NVIDIA GPU). It
builds a 2-hidden-layer tanh MLP and its mean-squared-error loss, differentiates it with
`vg.grad`, compiles one SGD step (loss and updated parameters) into one program, shows that two
structurally equal graphs freeze to the very same object, trains for a few hundred steps, checks
the compiled step against the numpy reference executor, and prints per-step times for verglas and
for a hand-written numpy implementation of the same step.
"""

from __future__ import annotations

import argparse
import pickle
import time

import numpy as np

import verglas as vg
from verglas.graph import FunctionGraph

BATCH, WIDTHS, LR = 256, (64, 256, 256, 8), 0.05


def mlp_step(x, t, params, lr):
    """The loss of the MLP on (x, t) and the parameters after one SGD step."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = vg.tanh(h @ params[k] + params[k + 1])
    y = h @ params[-2] + params[-1]
    loss = vg.mean((y - t) ** 2)
    grads = vg.grad(loss, params)
    return loss, [p - lr * g for p, g in zip(params, grads)]


def numpy_step(x, t, params, lr):
    """The same step written by hand in numpy (forward, backprop, update)."""
    hs, h = [x], x
    for k in range(0, len(params) - 2, 2):
        h = np.tanh(h @ params[k] + params[k + 1])
        hs.append(h)
    y = h @ params[-2] + params[-1]
    diff = y - t
    loss = np.mean(diff ** 2)
    g = 2 * diff / diff.size
    new = [None] * len(params)
    for k in range(len(params) - 2, -1, -2):
        new[k] = params[k] - lr * (hs[k // 2].T @ g)
        new[k + 1] = params[k + 1] - lr * g.sum(axis=0)
        if k:
            g = (g @ params[k].T) * (1 - hs[k // 2] ** 2)
    return loss, new


def data(rng):
    """A regression problem whose target a random teacher MLP computes."""
    x = rng.standard_normal((BATCH, WIDTHS[0])).astype("float32")
    teacher = rng.standard_normal((WIDTHS[0], WIDTHS[-1])).astype("float32")
    t = np.tanh(x @ teacher / np.sqrt(WIDTHS[0])).astype("float32")
    params = []
    for fan_in, fan_out in zip(WIDTHS[:-1], WIDTHS[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype("float32"))
        params.append(np.zeros(fan_out, "float32"))
    return x, t, params


def symbolic_inputs():
    x = vg.tensor("x", shape=(None, WIDTHS[0]), dtype="float32")
    t = vg.tensor("t", shape=(None, WIDTHS[-1]), dtype="float32")
    params = []
    for k, (fan_in, fan_out) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        params.append(vg.tensor(f"w{k}", shape=(fan_in, fan_out), dtype="float32"))
        params.append(vg.tensor(f"b{k}", shape=(fan_out,), dtype="float32"))
    return x, t, params


def median_ms(fn, repeat: int = 50) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)

    x, t, params = symbolic_inputs()
    loss, updated = mlp_step(x, t, params, LR)

    # the IR: graphs built twice from different variables freeze to the very same object
    x2, t2, params2 = symbolic_inputs()
    loss2, _ = mlp_step(x2, t2, params2, LR)
    g1 = FunctionGraph([x, t, *params], [loss]).freeze()
    g2 = FunctionGraph([x2, t2, *params2], [loss2]).freeze()
    print(f"graph of the loss: {len(g1.toposort())} nodes; built twice, frozen: "
          f"equal={g1 == g2}, same object={g1 is g2}, pickled back equal="
          f"{pickle.loads(pickle.dumps(g1)) == g1}")

    t0 = time.perf_counter()
    step = vg.compile([x, t, *params], [loss, *updated], device=args.device)
    print(f"compiled one SGD step for device={args.device!r} in {time.perf_counter() - t0:.2f} s:"
          f" {len(step.program.steps)} steps ({step.program.n_kernels()} kernels)")
    lines = step.dprint(file="str").splitlines()
    print("\n".join(lines[:20] + ([f"  ... ({len(lines) - 20} more lines)"] if len(lines) > 20
                                   else [])))

    rng = np.random.default_rng(0)
    xv, tv, pv = data(rng)
    reference = vg.compile([x, t, *params], [loss, *updated], mode="reference")
    got, want = step(xv, tv, *pv), reference(xv, tv, *pv)
    ok = all(np.allclose(vg.asnumpy(a), b, rtol=1e-4, atol=1e-5) for a, b in zip(got, want))
    print(f"compiled step agrees with the numpy reference executor: {ok}")

    current = pv
    for k in range(args.steps):
        loss_value, *current = step(xv, tv, *current)
        if k % (args.steps // 5) == 0 or k == args.steps - 1:
            print(f"  step {k:4d}  loss {float(vg.asnumpy(loss_value)):.5f}")

    ms_vg = median_ms(lambda: step(xv, tv, *pv))
    ms_np = median_ms(lambda: numpy_step(xv, tv, pv, np.float32(LR)))
    print(f"one training step (batch {BATCH}, widths {'-'.join(map(str, WIDTHS))}, float32):"
          f" verglas {ms_vg:.3f} ms, numpy {ms_np:.3f} ms ({ms_np / ms_vg:.1f}x)")


if __name__ == "__main__":
    main()
