"""The example model service (examples/serve): a saved artifact served over HTTP.

The model is built and saved once for the module; the server runs in a subprocess (app.py, as
a user starts it) on a free loopback port and is sent concurrent good requests, checked against
numpy, and every kind of bad request, each answered with a 4xx while the server keeps serving.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SERVE = Path(__file__).resolve().parent.parent / "examples" / "serve"
MAX_BODY = 1 << 20
N_FEATURES = 64


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The saved model's directory (model.vgl, weights.npz) and the cache it was built in."""
    import verglas as vg

    sys.path.insert(0, str(SERVE))
    try:
        from build_model import build
    finally:
        sys.path.remove(str(SERVE))
    cache = tmp_path_factory.mktemp("cache")
    vg.config.cache_dir = cache
    try:
        directory = tmp_path_factory.mktemp("model")
        build(directory)
    finally:
        del vg.config.cache_dir
    return directory, cache


def numpy_model(directory: Path):
    with np.load(directory / "weights.npz") as saved:
        params = [saved[f"{kind}{k}"] for k in range(len(saved.files) // 2) for kind in "wb"]

    def predict(x):
        h = x.astype(np.float64)
        for k in range(0, len(params) - 2, 2):
            h = np.tanh(h @ params[k] + params[k + 1])
        return h @ params[-2] + params[-1]

    return predict


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    """The port of app.py serving the model (stopped after the module's tests)."""
    directory, cache = model
    log = open(tmp_path_factory.mktemp("log") / "server.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, str(SERVE / "app.py"), str(directory / "model.vgl"), "--port", "0",
         "--max-body", str(MAX_BODY)],
        cwd=SERVE, stdout=subprocess.PIPE, stderr=log, text=True,
        env=dict(os.environ, VERGLAS_CACHE_DIR=str(cache)))
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("serving on "):
            log.seek(0)
            pytest.fail(f"the server did not start: {line!r}\n{log.read()}")
        port = int(line.rsplit(":", 1)[1])
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def request(port: int, method: str, path: str, body=None, headers=None):
    """(status, headers, body) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (as curl does)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def post_json(port, rows):
    status, _, body = request(port, "POST", "/predict", json.dumps({"rows": rows}),
                              {"Content-Type": "application/json"})
    return status, json.loads(body)


def post_binary(port, x: np.ndarray):
    status, found, body = request(port, "POST", "/predict", x.tobytes(), {
        "Content-Type": "application/octet-stream", "X-Shape": ",".join(map(str, x.shape))})
    if status != 200:
        return status, json.loads(body)
    out_shape = tuple(int(s) for s in found["x-shape"].split(","))
    return status, np.frombuffer(body, "<f4").reshape(out_shape)


def test_concurrent_requests_match_numpy(model, server):
    port, proc = server
    want_of = numpy_model(model[0])

    def client(k: int) -> int:
        rng = np.random.default_rng(k)
        for j in range(4):
            x = rng.standard_normal((1 + 37 * j + k, N_FEATURES)).astype(np.float32)
            if (j + k) % 2:
                status, got = post_binary(port, x)
            else:
                status, answer = post_json(port, x.tolist())
                got = np.array(answer["rows"], dtype=np.float32)
            assert status == 200, got
            assert got.shape == (x.shape[0], 8)
            np.testing.assert_allclose(got, want_of(x), rtol=1e-4, atol=1e-5)
        return k

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(client, range(8))) == list(range(8))
    assert proc.poll() is None


JSON, BINARY = "application/json", "application/octet-stream"
F32 = np.zeros((4, N_FEATURES), np.float32).tobytes()
TOO_BIG = b"\0" * (MAX_BODY + 4)


def rows_json(rows) -> bytes:
    return json.dumps({"rows": rows}).encode()


def chunked(data: bytes, size: int = 1 << 16):
    """A body sent in chunks, with no Content-Length (http.client encodes an iterable so)."""
    return lambda: (data[start:start + size] for start in range(0, len(data), size))


# kind -> Content-Type, body, other headers, the status and what the message says
BAD = {
    "wrong width (binary)": (BINARY, F32[:4 * 63 * 4], {"X-Shape": "4,63"}, 400,
                             "shape (n, 64)"),
    "wrong width (JSON)": (JSON, rows_json([[1.0, 2.0, 3.0]]), {}, 400, "shape (n, 64)"),
    "no rows (JSON)": (JSON, rows_json([]), {}, 400, "shape (n, 64)"),
    "shape and bytes disagree": (BINARY, F32, {"X-Shape": "5,64"}, 400, "needs 1280 bytes"),
    "float64 bytes": (BINARY, np.zeros((4, 64)).tobytes(), {"X-Shape": "4,64"}, 400,
                      "needs 1024 bytes"),
    "declared float64": (BINARY, np.zeros((4, 64)).tobytes(),
                         {"X-Shape": "4,64", "X-Dtype": "float64"}, 415, "float32"),
    "no X-Shape": (BINARY, F32, {}, 400, "X-Shape must be"),
    "bad X-Shape": (BINARY, F32, {"X-Shape": "4;64"}, 400, "X-Shape must be"),
    "non-numeric": (JSON, rows_json([["a"] * 64]), {}, 400, "numbers only"),
    "booleans": (JSON, rows_json([[True] * 64]), {}, 400, "numbers only"),
    "nulls": (JSON, rows_json([[None] * 64]), {}, 400, "numbers only"),
    "ragged": (JSON, rows_json([[0.0] * 64, [0.0] * 3]), {}, 400, "equally long"),
    "NaN (JSON)": (JSON, rows_json([[float("nan")] * 64]), {}, 400, "NaN or infinite"),
    "beyond float32": (JSON, rows_json([[1e300] * 64]), {}, 400, "NaN or infinite"),
    "inf (binary)": (BINARY, np.full((4, 64), np.inf, np.float32).tobytes(),
                     {"X-Shape": "4,64"}, 400, "NaN or infinite"),
    "not JSON": (JSON, b"{rows: oops", {}, 400, "not JSON"),
    "no rows key": (JSON, b'{"x": 1}', {}, 400, '"rows"'),
    "missing body": (JSON, None, {}, 400, "empty body"),
    "empty binary": (BINARY, b"", {"X-Shape": "0,64"}, 400, "empty body"),
    "wrong content type": ("text/csv", b"1,2,3", {}, 415, "Content-Type must be"),
    # (refused from its Content-Length, before the body is read: only its start is sent)
    "oversized (declared)": (BINARY, TOO_BIG[:1024],
                             {"X-Shape": "4097,64", "Content-Length": str(len(TOO_BIG))}, 413,
                             "limit"),
    "oversized (chunked)": (BINARY, chunked(TOO_BIG),
                            {"X-Shape": "4097,64"}, 413, "limit"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_request_gets_a_4xx_and_the_server_goes_on(model, server, kind):
    port, proc = server
    content_type, body, headers, status, message = BAD[kind]
    got_status, _, answer = request(port, "POST", "/predict",
                                    body() if callable(body) else body,
                                    {"Content-Type": content_type, **headers})
    assert got_status == status, answer
    assert message in json.loads(answer)["error"]
    # still serving, and still right
    assert request(port, "GET", "/health")[0] == 200
    x = np.random.default_rng(0).standard_normal((3, N_FEATURES)).astype(np.float32)
    status, got = post_binary(port, x)
    assert status == 200
    np.testing.assert_allclose(got, numpy_model(model[0])(x), rtol=1e-4, atol=1e-5)
    assert proc.poll() is None


def test_other_methods_and_paths(server):
    port, _ = server
    assert request(port, "GET", "/predict")[0] == 405
    assert request(port, "GET", "/nowhere")[0] == 404
    status, _, body = request(port, "GET", "/health")
    assert status == 200 and json.loads(body)["n_features"] == N_FEATURES
