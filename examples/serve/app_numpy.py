"""The same service computed with numpy, for comparison (see README.md).

    python examples/serve/app_numpy.py examples/serve/weights.npz --port 8001

It serves the model build_model.py saved as weights (w0, b0, w1, b1, ...: tanh layers, then a
linear one), written as one would in numpy, behind the very same HTTP code (service.py).
"""

from __future__ import annotations

import numpy as np
from service import MAX_BODY, arguments, make_app, serve
from starlette.applications import Starlette


def mlp(params: list[np.ndarray]):
    """The forward pass of the MLP with these weights and biases, in numpy."""

    def predict(x: np.ndarray) -> np.ndarray:
        h = x
        for k in range(0, len(params) - 2, 2):
            h = np.tanh(h @ params[k] + params[k + 1])
        return h @ params[-2] + params[-1]

    return predict


def create_app(path: str, max_body: int = MAX_BODY) -> Starlette:
    """The numpy service of the weights saved at `path`."""
    with np.load(path) as saved:
        params = [saved[f"{kind}{k}"] for k in range(len(saved.files) // 2) for kind in "wb"]
    return make_app(mlp(params), params[0].shape[0], params[-1].shape[0],
                    name=f"numpy:{path}", max_body=max_body)


def main(argv=None) -> None:
    args = arguments(__doc__.splitlines()[0], "the weights build_model.py wrote", argv)
    serve(create_app(args.model, args.max_body), args.host, args.port, args.blas_threads)


if __name__ == "__main__":
    main()
