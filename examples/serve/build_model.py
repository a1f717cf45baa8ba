"""Build the served model: the README demo's MLP as a forward pass, compiled and saved.

    python examples/serve/build_model.py [--out examples/serve]

writes `model.vgl` (the verglas artifact app.py serves) and `weights.npz` (the same weights,
for app_numpy.py and for checking answers). The model is the demo's network (verglas.demo:
widths 64-256-256-8, tanh hidden layers, float32) with seeded random weights baked in as
constants: rows of 64 values in, rows of 8 out, any number of rows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import verglas as vg
from verglas.demo import WIDTHS


def weights(seed: int = 0) -> list[np.ndarray]:
    """w0, b0, w1, b1, ... of the demo's widths (scaled normal weights, small biases)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(WIDTHS[:-1], WIDTHS[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
                      .astype(np.float32))
        params.append((0.1 * rng.standard_normal(fan_out)).astype(np.float32))
    return params


def forward(x, params):
    """The network's output for rows `x` (symbolic), its weights constants of the graph."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = vg.tanh(h @ vg.constant(params[k]) + vg.constant(params[k + 1]))
    return h @ vg.constant(params[-2]) + vg.constant(params[-1])


def build(out: Path, seed: int = 0) -> tuple[Path, Path]:
    """Compile the model and write model.vgl and weights.npz into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    params = weights(seed)
    x = vg.tensor("x", shape=(None, WIDTHS[0]), dtype="float32")
    model = vg.compile([x], forward(x, params))
    np.savez(out / "weights.npz", **{f"{kind}{k // 2}": p
                                     for k, (kind, p) in enumerate(zip("wb" * len(params),
                                                                       params))})
    return model.save(out / "model.vgl"), out / "weights.npz"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in build(args.out, args.seed):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
