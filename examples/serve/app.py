"""The model service: a saved verglas Function behind HTTP (see README.md).

    python examples/serve/app.py examples/serve/model.vgl --port 8000

The server holds no graph code: it loads the artifact that build_model.py saved (the optimized
graph, its Program and the generated code travel in the file) and calls it for each request, in
Starlette's thread pool, so concurrent requests run concurrently (the compiled program releases
the GIL). The HTTP side is service.py's, shared with app_numpy.py.
"""

from __future__ import annotations

import numpy as np
from service import MAX_BODY, arguments, make_app, serve
from starlette.applications import Starlette

from verglas import load


def create_app(path: str, max_body: int = MAX_BODY) -> Starlette:
    """The service of the model saved at `path` (one float32 matrix in, one out)."""
    model = load(path)
    (x,), (y,) = model.graph.inputs, model.graph.outputs
    if x.type.dtype != "float32" or x.type.ndim != 2 or x.type.shape[1] is None:
        raise ValueError(f"{path}: the service wants a model of one float32 input of shape "
                         f"(rows, n_features), not {x.type}")
    model(np.zeros((1, x.type.shape[1]), np.float32))  # (the first call's set-up, before serving)
    return make_app(model, x.type.shape[1], y.type.shape[-1], name=f"verglas:{path}",
                    max_body=max_body)


def main(argv=None) -> None:
    args = arguments(__doc__.splitlines()[0], "the artifact build_model.py wrote", argv)
    serve(create_app(args.model, args.max_body), args.host, args.port, args.blas_threads)


if __name__ == "__main__":
    main()
