"""Saved artifacts: `Function.save` / `verglas.load` (verglas/artifact.py).

One small CPU Function is compiled for the module (numba compiles cost seconds) in a cache
directory of its own; each test saves it to a file of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import verglas as vg
from verglas import artifact

PREFIX = struct.Struct("<8sII")  # magic, format version, header length (artifact.py's layout)
RNG = np.random.default_rng(7)
W = RNG.standard_normal((5, 3)).astype("float32")
B = RNG.standard_normal(3).astype("float32")
XV = RNG.standard_normal((4, 5)).astype("float32")


def expected(xv):
    return np.tanh(xv @ W + B)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    vg.config.cache_dir = tmp_path_factory.mktemp("cache")
    yield vg.config.cache_dir
    del vg.config.cache_dir


@pytest.fixture(scope="module")
def f(cache_dir):
    x = vg.tensor("x", shape=(None, 5), dtype="float32")
    return vg.compile([x], vg.tanh(x @ vg.constant(W) + vg.constant(B)))


@pytest.fixture
def saved(f, tmp_path):
    return f.save(tmp_path / "model.vgl")


def split(path):
    """(format version, header dict, payload bytes) of the file at `path`."""
    data = path.read_bytes()
    magic, version, size = PREFIX.unpack_from(data)
    assert magic == artifact.MAGIC
    return version, json.loads(data[PREFIX.size:PREFIX.size + size]), data[PREFIX.size + size:]


def rewrite(path, version=None, payload=None, **changes):
    """Write the file again with header fields (and the format version, the payload) changed;
    the digest and length are made to match the payload."""
    old_version, header, old_payload = split(path)
    payload = old_payload if payload is None else payload
    header.update(changes, payload_bytes=len(payload),
                  payload_sha256=hashlib.sha256(payload).hexdigest())
    text = json.dumps(header).encode()
    version = old_version if version is None else version
    path.write_bytes(PREFIX.pack(artifact.MAGIC, version, len(text)) + text + payload)


@pytest.fixture
def no_recompile(monkeypatch):
    """Make rewriting, scheduling and code generation fail if anything asks for them."""
    def refuse(*args, **kwargs):
        raise AssertionError("a saved artifact was rewritten, scheduled or generated again")

    import verglas.cpu_backend.runtime as runtime
    import verglas.function as function
    monkeypatch.setattr(runtime, "generate", refuse)
    monkeypatch.setattr(function.rewrite, "rewrite_graph", refuse)
    monkeypatch.setattr(function.schedule, "lower", refuse)


def test_header_names_versions_device_and_digest(f, saved):
    version, header, payload = split(saved)
    assert version == header["format"] == artifact.FORMAT_VERSION
    assert header["device"] == "cpu" and header["verglas"] == vg.__version__
    assert header["numpy"] == np.__version__ and header["numba"] and header["python"]
    assert header["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    assert header["inputs"] == [{"name": "x", "dtype": "float32", "shape": [None, 5]}]
    assert "program.py" in header["stored_code"]
    assert artifact.read_header(saved) == header


def test_load_reuses_stored_code(f, saved, no_recompile, monkeypatch, tmp_path):
    monkeypatch.setattr(vg.config, "cache_dir", tmp_path / "other-cache")  # (written from the file)
    g = vg.load(saved)
    assert list((tmp_path / "other-cache").glob("cpu/*/program.py"))
    got = g(XV)
    np.testing.assert_allclose(got, expected(XV), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, f(XV))
    assert g.graph == f.graph and g.source() == f.source()
    assert g.input_names == ["x"] and g.single


def test_load_in_a_fresh_process_needs_no_graph_code(saved, tmp_path):
    # a process that imports verglas and numpy only, with an empty cache: everything it needs
    # comes from the file, and nothing is rewritten, scheduled or generated again
    np.save(tmp_path / "x.npy", XV)
    np.save(tmp_path / "want.npy", expected(XV))
    script = textwrap.dedent(f"""
        import numpy as np
        import verglas
        import verglas.cpu_backend.runtime as runtime
        import verglas.function as function

        def refuse(*args, **kwargs):
            raise AssertionError("recompiled")

        runtime.generate = function.rewrite.rewrite_graph = function.schedule.lower = refuse
        g = verglas.load({str(saved)!r})
        got = g(np.load({str(tmp_path / "x.npy")!r}))
        np.testing.assert_allclose(got, np.load({str(tmp_path / "want.npy")!r}), rtol=1e-5,
                                   atol=1e-6)
        print("ok", g.input_names)
    """)
    cache = tmp_path / "fresh-cache"
    env = dict(os.environ, VERGLAS_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "['x']"]
    assert list(cache.glob("cpu/*/program.py"))  # the stored code, written into the cache


def test_corrupted_payload_is_refused_before_unpickling(saved, monkeypatch):
    data = bytearray(saved.read_bytes())
    data[-10] ^= 0x01
    saved.write_bytes(bytes(data))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(ValueError, match="corrupted: the payload's sha256") as info:
        vg.load(saved)
    assert str(saved) in str(info.value)
    with pytest.raises(ValueError, match="corrupted"):
        artifact.read_header(saved)


@pytest.mark.parametrize("keep, match", [
    (0, "the file is empty"), (5, "too short"), (PREFIX.size + 10, "truncated or damaged"),
    (-1, "truncated: .* of the payload's"),
])
def test_truncated_file(saved, keep, match):
    data = saved.read_bytes()
    saved.write_bytes(data[:keep])
    with pytest.raises(ValueError, match=match) as info:
        vg.load(saved)
    assert str(saved) in str(info.value)


def test_other_files_and_damaged_headers(saved, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an artifact at all, just some text")
    with pytest.raises(ValueError, match="not a verglas artifact"):
        vg.load(text)
    data = saved.read_bytes()
    saved.write_bytes(data + b"\0")
    with pytest.raises(ValueError, match="1 bytes after the payload"):
        vg.load(saved)
    _, _, size = PREFIX.unpack_from(data)
    saved.write_bytes(data[:PREFIX.size] + b"{" * size + data[PREFIX.size + size:])
    with pytest.raises(ValueError, match="damaged header"):
        vg.load(saved)


def test_other_format_version(saved):
    rewrite(saved, version=artifact.FORMAT_VERSION + 1)
    with pytest.raises(ValueError, match=f"format version {artifact.FORMAT_VERSION + 1}; "
                                         f"this verglas reads version"):
        vg.load(saved)


def test_unknown_device(saved):
    rewrite(saved, device="tpu")
    with pytest.raises(ValueError, match="saved for device 'tpu'"):
        vg.load(saved)


def test_payload_that_does_not_unpickle_here(saved):
    # a digest-valid payload naming a module this process does not have
    rewrite(saved, payload=b"cno_such_module_for_verglas\nThing\n.")
    with pytest.raises(ValueError, match="cannot be read here .*ModuleNotFoundError"):
        vg.load(saved)


def test_other_versions_recompile_from_the_saved_graph(f, saved):
    rewrite(saved, numba="0.1.0", verglas_source="0" * 16, code_stamp="0" * 40)
    with pytest.warns(UserWarning, match=r"numba 0\.1\.0 \(here .*stored code is stale"):
        g = vg.load(saved)
    assert g.graph == f.graph and g.cache_key not in (None, f.cache_key)
    np.testing.assert_allclose(g(XV), expected(XV), rtol=1e-5, atol=1e-6)


def test_reference_mode_and_several_outputs(tmp_path):
    # a Function with no stored code (the reference executor) and a list of outputs
    x = vg.tensor("x", shape=(None, 5), dtype="float64")
    f = vg.compile([x], [vg.sum(x, axis=1), vg.exp(x)], mode="reference")
    path = f.save(tmp_path / "ref.vgl")
    assert artifact.read_header(path)["stored_code"] == []
    g = vg.load(path)
    xv = XV.astype("float64")
    got = g(xv)
    assert isinstance(got, list) and len(got) == 2
    np.testing.assert_allclose(got[0], xv.sum(axis=1))
    np.testing.assert_allclose(got[1], np.exp(xv))


def test_refused_cache_directory_compiles_in_memory(f, saved, monkeypatch, tmp_path):
    # a cache directory others may write to is refused (verglas/cache.py): the stored code
    # is not written into it, and the Function compiles in memory
    refused = tmp_path / "shared-cache"
    refused.mkdir()
    refused.chmod(0o777)
    monkeypatch.setattr(vg.config, "cache_dir", refused)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        g = vg.load(saved)
    assert g.cache_key is None and not list(refused.iterdir())
    np.testing.assert_allclose(g(XV), expected(XV), rtol=1e-5, atol=1e-6)
