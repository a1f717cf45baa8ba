"""The HTTP side of the model service, shared by app.py (verglas) and app_numpy.py (numpy).

`make_app(predict, n_features)` is a Starlette app around `predict`, a function from a float32
array of shape (rows, n_features) to a float32 array of rows: it imports only numpy and the
web stack, and knows nothing of how the model is computed.

POST /predict takes either
- JSON (`Content-Type: application/json`): `{"rows": [[x00, x01, ...], ...]}`, answered with
  `{"rows": [[y00, ...], ...]}`; or
- raw bytes (`Content-Type: application/octet-stream`): the rows as little-endian float32, C
  order, with their shape in an `X-Shape: <rows>,<n_features>` header (and, optionally,
  `X-Dtype: float32`), answered with the outputs the same way (their shape in `X-Shape`).
  This is the path for large batches: no text to parse, one copy in and one out.

Each request is decoded, computed and encoded in Starlette's thread pool, so requests overlap:
the compiled model releases the GIL while it runs. A bad request (no body, too large, wrong
content type, malformed JSON or shape, non-numeric or non-finite values, wrong dtype) gets a
4xx answer `{"error": "..."}`; nothing a client sends stops the server. GET /health answers
`{"status": "ok", ...}` with the model's input and output widths.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

import numpy as np
import threadpoolctl
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

MAX_BODY = 64 << 20  # bytes: 256k rows of 64 float32 values, or a JSON text of that size
MAX_ROWS = 1 << 18
FLOAT32 = np.dtype("<f4")


class BadRequest(Exception):
    """A request the service refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def make_app(predict, n_features: int, n_outputs: int, name: str, max_body: int = MAX_BODY,
             max_rows: int = MAX_ROWS) -> Starlette:
    """A Starlette app serving `predict` (float32 (rows, n_features) -> float32 rows)."""

    async def predict_endpoint(request: Request) -> Response:
        try:
            kind = _content_type(request)
            body = await _read_body(request, max_body)
            return await run_in_threadpool(_answer, predict, kind, body, request.headers,
                                           n_features, max_rows)
        except BadRequest as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": name, "n_features": n_features,
                             "n_outputs": n_outputs})

    return Starlette(routes=[Route("/predict", predict_endpoint, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def _content_type(request: Request) -> str:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/json", "application/octet-stream"):
        given = f"not {kind!r}" if kind else "none was given"
        raise BadRequest(415, f"Content-Type must be application/json or "
                              f"application/octet-stream; {given}")
    return kind


async def _read_body(request: Request, max_body: int) -> bytes:
    """The body, refused as soon as it is known to exceed `max_body` bytes (by its declared
    length, or while it streams in)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise BadRequest(413, f"body of {declared} bytes; the limit is {max_body}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise BadRequest(413, f"body over the limit of {max_body} bytes")
        chunks.append(chunk)
    if not size:
        raise BadRequest(400, "empty body: send rows as JSON or float32 bytes")
    return b"".join(chunks)


def _answer(predict, kind: str, body: bytes, headers, n_features: int,
            max_rows: int) -> Response:
    """Decode, compute, encode (in a worker thread)."""
    binary = kind == "application/octet-stream"
    rows = _decode_binary(body, headers) if binary else _decode_json(body)
    if rows.ndim != 2 or rows.shape[1] != n_features:
        raise BadRequest(400, f"rows must have shape (n, {n_features}), not {rows.shape}")
    if not 0 < rows.shape[0] <= max_rows:
        raise BadRequest(413 if rows.shape[0] else 400,
                         f"{rows.shape[0]} rows; send between 1 and {max_rows}")
    if not np.isfinite(rows).all():
        raise BadRequest(400, "rows hold NaN or infinite values")
    out = np.asarray(predict(rows), dtype=FLOAT32)
    if binary:
        return Response(out.tobytes(), media_type="application/octet-stream",
                        headers={"X-Shape": ",".join(map(str, out.shape)), "X-Dtype": "float32"})
    return JSONResponse({"rows": out.tolist()})


def _decode_binary(body: bytes, headers) -> np.ndarray:
    dtype = headers.get("x-dtype", "float32").strip().lower()
    if dtype != "float32":
        raise BadRequest(415, f"X-Dtype {dtype!r}: the rows must be little-endian float32")
    text = headers.get("x-shape")
    try:
        shape = tuple(int(s) for s in text.split(","))
        if any(s < 0 for s in shape):
            raise ValueError
    except (AttributeError, ValueError):
        raise BadRequest(400, f"X-Shape must be '<rows>,<n_features>', not {text!r}") from None
    if int(np.prod(shape, dtype=np.int64)) * FLOAT32.itemsize != len(body):
        raise BadRequest(400, f"X-Shape {text} needs {int(np.prod(shape)) * 4} bytes of "
                              f"float32; the body has {len(body)}")
    return np.frombuffer(body, dtype=FLOAT32).reshape(shape).astype(np.float32)


def _decode_json(body: bytes) -> np.ndarray:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(400, f"body is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise BadRequest(400, 'JSON body must be {"rows": [[...], ...]}')
    try:
        rows = np.array(data["rows"])  # (ragged lists raise; strings stay strings)
    except (ValueError, TypeError):
        raise BadRequest(400, "rows must be a list of equally long lists of numbers") from None
    if rows.dtype.kind not in "iuf":
        raise BadRequest(400, "rows must hold numbers only")
    with np.errstate(over="ignore"):  # (beyond float32's range: refused as infinite)
        return rows.astype(np.float32)


def serve(app: Starlette, host: str, port: int, blas_threads: int = 1) -> None:
    """Serve `app` on host:port (0: a free port), printing the address once it is bound.

    Concurrent requests are the parallelism: a BLAS that also splits each product over its
    own threads (OpenBLAS's default: one per core) oversubscribes the cores, so it gets
    `blas_threads` (verglas's products call numpy's BLAS: the one limit covers both)."""
    threadpoolctl.threadpool_limits(blas_threads, user_api="blas")
    # (IPPROTO_TCP named: asyncio turns Nagle's algorithm off only on sockets that say TCP,
    # and with it on, an answer written as headers then body waits ~40 ms for a delayed ACK)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)  # (connections made from here on wait for uvicorn, none is refused)
    print(f"serving on http://{host}:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def arguments(description: str, model_help: str, argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("model", help=model_help)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port")
    parser.add_argument("--max-body", type=int, default=MAX_BODY,
                        help="largest request body, in bytes (larger: 413)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="threads per matrix product (requests run concurrently)")
    return parser.parse_args(sys.argv[1:] if argv is None else argv)
