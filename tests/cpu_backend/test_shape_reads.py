"""Array lengths read more than once in a generated function are read once, into a local
(cpu_backend/shape_reads.py), where the array's one binding allows it."""

import numpy as np

from verglas.cpu_backend.shape_reads import read_lengths_once

_TEXT = """def f(a, b, ws):
    x = view(a, (a.shape[0], a.shape[1]))
    y, wo = take(ws, (x.shape[0], b.shape[1]))
    for r in range(x.shape[0]):
        z = x.shape[0] + a.shape[0]
        w = y.shape[1] + y.shape[1]
        for q in rows(r):
            s = q.shape[0] + q.shape[0]
    if b.shape[0]:
        u = a
    else:
        u = b
    v = u.shape[0] + u.shape[0]
    ws = grow(ws.shape[0], ws.shape[0])
    return x.shape[0] + b.shape[1]"""


def test_lengths_read_twice_get_a_local_after_the_binding():
    out = read_lengths_once(_TEXT)
    lines = out.split("\n")
    # a parameter's at the top; an assignment's (a tuple's too) right after it
    assert set(lines[1:3]) == {"    a_n0 = a.shape[0]", "    b_n1 = b.shape[1]"}
    assert lines[lines.index("    x = view(a, (a_n0, a.shape[1]))") + 1] == "    x_n0 = x.shape[0]"
    assert lines[lines.index("    y, wo = take(ws, (x_n0, b_n1))") + 1] == "    y_n1 = y.shape[1]"
    assert "        z = x_n0 + a_n0" in lines and "        w = y_n1 + y_n1" in lines
    assert "    return x_n0 + b_n1" in lines
    # bound twice (u, ws) or by a loop header (q): read where they are
    assert "    v = u.shape[0] + u.shape[0]" in lines
    assert "    ws = grow(ws.shape[0], ws.shape[0])" in lines
    assert "            s = q.shape[0] + q.shape[0]" in lines
    assert "a.shape[1]" in out  # (read once: left as it is)


def test_the_rewritten_function_computes_the_same():
    env = {"view": lambda a, s: a, "take": lambda ws, s: (np.ones(s), 0),
           "rows": lambda r: [np.ones(r + 1)], "grow": lambda *s: s}

    args = (np.ones((3, 4)), np.ones((2, 5)), np.ones(6))
    results = []
    for text in (_TEXT, read_lengths_once(_TEXT)):
        namespace = dict(env)
        exec(text, namespace)
        results.append(namespace["f"](*args))
    assert results[0] == results[1] == 3 + 5


def test_a_local_name_in_use_is_never_taken():
    text = "def f(a):\n    a_n0 = 1\n    return a.shape[0] + a.shape[0] + a_n0"
    assert read_lengths_once(text) == text
