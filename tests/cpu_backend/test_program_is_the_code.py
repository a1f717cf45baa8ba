"""`print(f.program)` is what the CPU runs: the steps the Program says run work (a loop or a
kernel call of their own; a row group one, a repeat's body once) are exactly those whose code
in the generated program function loops or calls a kernel, step for step."""

from __future__ import annotations

import re

import numpy as np
import pytest

import verglas as vg
from tests.cpu_backend.utils import compare_backend, compile_pair
from verglas.schedule.program import Step
from verglas.schedule.repeats import Repeat

_HEAD = re.compile(r"^\s*# steps? (\d+)")
_WORK = re.compile(r"^\s*(for (?!rp\d)\w+ in |[A-Za-z_]\w*\()")  # a loop, or a bare call


def _code_work(text: str) -> dict[int, bool]:
    """Per first step of each `# step N` / `# steps N-M` block of the program function:
    whether its lines loop (a repeat's own `for rp` aside) or call a function as a statement
    (a kernel, BLAS, a sub-program)."""
    body = text[text.index("\ndef program("):]
    body = body[:body.index("\n# -- what verglas")]
    work: dict[int, bool] = {}
    current = None
    for line in body.split("\n"):
        m = _HEAD.match(line)
        if m:
            current = int(m.group(1))
            work.setdefault(current, False)
        elif current is not None and _WORK.match(line) and not line.lstrip().startswith(
                ("raise", "if ")):
            work[current] = True
    return work


def _program_work(program) -> dict[int, bool]:
    work = {}
    for unit in program.units():
        steps = (program.repeat_body(unit) if isinstance(unit, Repeat)
                 else [unit] if isinstance(unit, Step) else [unit])
        for s in steps:
            work[s.index] = not isinstance(s, Step) or program.runs_work(s)
    return work


def _check(inputs, outputs, arrays):
    compare_backend(inputs, outputs, arrays)
    f = compile_pair(inputs, outputs)[0]
    program, text = f.program, f.source()
    code = _code_work(text)
    want = _program_work(program)
    assert {k: v for k, v in code.items() if k in want} == want, str(program)
    assert sum(want.values()) == program.n_kernels()
    return program


def _mlp_grad():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    t = vg.tensor("t", shape=(None, None), dtype="float32")
    w1 = vg.tensor("w1", shape=(None, None), dtype="float32")
    b1 = vg.tensor("b1", shape=(None,), dtype="float32")
    w2 = vg.tensor("w2", shape=(None, None), dtype="float32")
    b2 = vg.tensor("b2", shape=(None,), dtype="float32")
    h = vg.tanh(x @ w1 + b1)
    loss = vg.mean((h @ w2 + b2 - t) ** 2)
    inputs = [x, t, w1, b1, w2, b2]
    g = np.random.default_rng(0)
    arrays = [g.standard_normal(s).astype("float32")
              for s in [(6, 5), (6, 3), (5, 4), (4,), (4, 3), (3,)]]
    return inputs, [loss, *vg.grad(loss, [w1, b1, w2, b2])], arrays


def _scan():
    x0 = vg.tensor("x0", shape=(None,), dtype="float64")
    u = vg.tensor("u", shape=(None, None), dtype="float64")
    trace = vg.scan(lambda u_t, x: 0.5 * x + vg.tanh(u_t), sequences=[u], outputs_info=[x0])
    g = np.random.default_rng(1)
    return [x0, u], [trace[-1], vg.sum(trace)], [g.standard_normal(4), g.standard_normal((7, 4))]


def _rounds():
    x = vg.tensor("x", shape=(None,), dtype="float64")
    y = x
    for _ in range(10):
        y = vg.tanh(y) + vg.max(y)
    return [x], [y], [np.linspace(-1, 1, 9)]


def _softmax():
    x = vg.tensor("x", shape=(None, None), dtype="float32")
    return [x], [vg.softmax(x, axis=1)], [np.random.default_rng(2).standard_normal(
        (5, 7)).astype("float32")]


def _logsumexp():
    x = vg.tensor("x", shape=(None, None), dtype="float64")
    return [x], [vg.logsumexp(x, axis=1)], [np.random.default_rng(3).standard_normal((5, 7))]


@pytest.mark.parametrize("build", [_softmax, _logsumexp, _mlp_grad, _scan, _rounds],
                         ids=["softmax", "logsumexp", "mlp_grad", "scan", "rounds"])
def test_the_program_counts_the_loops_and_kernels_of_the_code(build):
    inputs, outputs, arrays = build()
    program = _check(inputs, outputs, arrays)
    if build in (_softmax, _logsumexp):
        assert program.n_kernels() == 1  # one loop over rows
    if build is _rounds:
        assert program.repeats
