"""A seeded generator of random programs over verglas's public API.

`generate(seed)` builds a Program (see program.py) of 1-12 op nodes over 1-4 inputs. It
evaluates every node with numpy as it goes, so each choice can follow the real shapes and
dtypes (axes in range, shapes that broadcast, indices in bounds most of the time). A node numpy
refuses is dropped and another drawn, except now and then: then it ends the program, whose
expected result is numpy's exception (verglas must raise the same kind).

What it draws: every dtype the language accepts; 0-d, empty and length-1 axes, static or known
only at run time; values with NaN, +-inf, -0.0, huge and tiny magnitudes, integer extremes;
C, Fortran, strided, reversed, read-only and list arguments; Python scalars (weak, NEP 50);
and every public function: elementwise, comparisons, logical/bitwise, where/clip, reductions
with their axis/keepdims variants, softmax family, matmul/dot, shape functions, basic,
advanced and boolean indexing, set/inc_subtensor, casts, constants, and inner graphs
(OpFromGraph, Scan).
"""

from __future__ import annotations

import warnings

import numpy as np

from tests.fuzz.oracle import NumpyXP, Ref
import verglas as vg
from tests.fuzz.program import LAYOUTS, V, Input, Node, Program, VerglasXP, evaluate

__all__ = ["generate", "DTYPES", "UNARY", "BINARY", "REDUCTIONS"]

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
_DTYPE_WEIGHTS = (4, 3, 2, 5, 7, 3, 2, 2, 2, 3, 12, 14, 2, 2)
UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid",
         "softplus", "erf", "neg", "abs", "sign", "floor", "ceil", "isnan", "isinf", "invert",
         "logical_not", "sqr", "reciprocal", "real", "imag", "conj")
BINARY = ("add", "sub", "mul", "true_divide", "floor_divide", "mod", "power", "maximum",
          "minimum", "eq", "neq", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
          "bitwise_xor", "logical_and", "logical_or", "left_shift", "right_shift")
# (== and != compare variables by identity, as in PyTensor: vg.eq and vg.neq are the functions)
_OPERATOR_SPELLED = {"add", "sub", "mul", "true_divide", "floor_divide", "mod", "power", "lt",
                     "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                     "right_shift"}
REDUCTIONS = ("sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "any",
              "all")
_PY_SCALARS = (0, 1, -1, 2, 3, 7, -5, 255, 256, -129, 2**31, 2**63, 0.5, -0.0, 0.0, 1.5,
               -2.25, 1e10, 1e-30, 3.4e38, float("inf"), float("-inf"), float("nan"), True,
               False, 1j, 2.5 - 1j)
_MAX_SIZE = 20_000
_MAX_SIZE_SMALL = 400


class _Gen:
    def __init__(self, seed: int, max_ops: int, inner: bool, dtypes, small: bool = False):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.max_ops = max_ops
        self.inner = inner
        self.dtypes = dtypes
        self.small = small  # arrays of at most a few dozen elements
        self.xp = NumpyXP()
        self.inputs: list[Input] = []
        self.values: list[np.ndarray] = []
        # the same values built by verglas (None where it refused): their static shapes
        # decide what a program may ask (squeeze(axis=None) needs a static shape)
        self.symbolic: list = []
        self.nodes: list[Node] = []
        self.error = False

    # -- small random choices -------------------------------------------------------------
    def chance(self, p) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq, p=None):
        return seq[int(self.rng.choice(len(seq), p=p))]

    def value_id(self, pred=None, recent=0.6):
        """A value (index) satisfying `pred`, preferring the newest ones."""
        ids = [k for k, v in enumerate(self.values) if pred is None or pred(v)]
        if not ids:
            return None
        if self.chance(recent) and len(ids) > 1:
            return ids[-1 - int(self.rng.integers(0, min(3, len(ids))))]
        return self.pick(ids)

    # -- inputs -----------------------------------------------------------------------------------
    def base_shape(self):
        ndim = self.pick((0, 1, 2, 3, 4), (0.08, 0.3, 0.37, 0.2, 0.05))
        shape = []
        for _ in range(ndim):
            r = self.rng.random()
            if r < 0.05:
                shape.append(0)
            elif r < 0.22:
                shape.append(1)
            elif r < 0.82:
                shape.append(int(self.rng.integers(2, 6)))
            elif r < 0.96:
                shape.append(int(self.rng.integers(6, 40)))
            else:
                shape.append(int(self.rng.integers(100, 700)))
        limit = 60 if self.small else 6000
        while int(np.prod(shape)) > limit:
            big = int(np.argmax(shape))
            shape[big] = max(1, shape[big] // 4)
        return tuple(shape)

    def input_shape(self, base):
        if not base or self.chance(0.5):
            return base
        shape = list(base)
        if self.chance(0.35):  # fewer leading axes
            shape = shape[int(self.rng.integers(1, len(shape) + 1)):]
        for a in range(len(shape)):
            if self.chance(0.2):
                shape[a] = 1
        return tuple(shape)

    def dtype(self):
        weights = np.array([w if d in self.dtypes else 0 for d, w in
                            zip(DTYPES, _DTYPE_WEIGHTS)], float)
        return DTYPES[int(self.rng.choice(len(DTYPES), p=weights / weights.sum()))]

    def values_of(self, dtype, shape):
        dt = np.dtype(dtype)
        rng = self.rng
        size = int(np.prod(shape))
        if dt.kind == "b":
            return rng.random(shape) < self.pick((0.5, 0.1, 0.9))
        if dt.kind in "iu":
            info = np.iinfo(dt)
            profile = self.pick(("small", "small", "range", "extremes"))
            if profile == "small":
                lo, hi = max(info.min, -6), min(info.max, 6)
                out = rng.integers(lo, hi, size=shape, endpoint=True)
            elif profile == "range":
                out = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
            else:
                picks = np.array(sorted({info.min, info.min + 1, -1 if info.min else 0, 0, 1, 2,
                                         info.max - 1, info.max}), dtype=dt)
                out = rng.choice(picks, size=shape)
            return np.asarray(out).astype(dt)
        real = dt.kind == "f"
        ft = dt if real else np.dtype(f"float{dt.itemsize * 4}")
        out = self._float_values(ft, shape, size)
        if not real:
            z = np.empty(shape, dt)
            z.real, z.imag = out, self._float_values(ft, shape, size)
            return z
        return np.asarray(out).astype(dt)

    def _float_values(self, ft, shape, size):
        rng = self.rng
        profile = self.pick(("normal", "integral", "special", "wide", "positive"),
                            (0.35, 0.2, 0.25, 0.1, 0.1))
        if profile == "integral":
            out = rng.integers(-8, 9, size=shape).astype(ft)
        elif profile == "wide":
            info = np.finfo(ft)
            mag = np.exp(rng.uniform(np.log(float(info.tiny)), np.log(float(info.max)), shape))
            out = (mag * rng.choice([-1.0, 1.0], size=shape)).astype(ft)
        elif profile == "positive":
            out = rng.uniform(0.01, 20.0, size=shape).astype(ft)
        else:
            out = (rng.normal(size=shape) * self.pick((1.0, 3.0, 100.0))).astype(ft)
        if profile == "special" and size:
            info = np.finfo(ft)
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max),
                                 -float(info.max), float(info.tiny), float(info.smallest_subnormal),
                                 -float(info.smallest_subnormal), 1e30 if ft.itemsize > 2 else 1e4,
                                 0.5, -1.0, 1.0], dtype=ft)
            mask = rng.random(shape) < 0.3
            out = np.where(mask, rng.choice(specials, size=shape), out).astype(ft)
        return out

    def add_input(self, value, static=None):
        shape = value.shape
        if static is None:
            static = tuple(s if self.chance(0.35) else None for s in shape)
        layout = self.pick(LAYOUTS, (0.5, 0.12, 0.12, 0.1, 0.08, 0.08))
        self.inputs.append(Input(value, static, layout))
        self.values.insert(len(self.inputs) - 1, value)
        var = vg.tensor(f"x{len(self.inputs) - 1}", shape=static, dtype=value.dtype)
        self.symbolic.insert(len(self.inputs) - 1, var)

    def make_inputs(self):
        base = self.base_shape()
        n = self.pick((1, 2, 3, 4), (0.3, 0.4, 0.2, 0.1))
        family = self.dtype() if self.chance(0.5) else None
        for _ in range(n):
            dtype = family if family is not None and self.chance(0.7) else self.dtype()
            self.add_input(self.values_of(dtype, self.input_shape(base)))
        if base and self.chance(0.25):  # an index vector input, for dynamic advanced indexing
            n_axis = max(base)
            m = int(self.rng.integers(0, 6))
            lo = -n_axis if n_axis else 0
            idx = self.rng.integers(lo, max(n_axis, 1), size=m) if n_axis else np.zeros(0, int)
            self.add_input(idx.astype(self.pick(("int64", "int32", "int8", "uint8")) if
                                      (idx >= 0).all() else self.pick(("int64", "int32"))))

    # -- nodes ----------------------------------------------------------------------------------
    def try_node(self, nodes, allow_error=True) -> bool:
        """Evaluate `nodes` after the current ones; keep them if numpy accepts them (or, now
        and then, as the program's failing end)."""
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                new = evaluate(nodes, self.xp, self.values)[len(self.values):]
        except (TypeError, ValueError, IndexError, OverflowError) as exc:
            if allow_error and self.chance(0.06):
                self.nodes += nodes
                self.values += [None] * len(nodes)
                self.symbolic += [None] * len(nodes)
                self.error = True
                self.error_kind = type(exc)
                return True
            return False
        new = [np.asarray(v) for v in new]
        limit = _MAX_SIZE_SMALL if self.small else _MAX_SIZE
        if any(v.size > limit or v.dtype == object for v in new):
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built = evaluate(nodes, VerglasXP(), self.symbolic)[len(self.symbolic):]
        except Exception:  # verglas refuses what numpy accepts: the checker will say so
            built = [None] * len(nodes)
        self.nodes += nodes
        self.values += new
        self.symbolic += built
        return True

    def static_shape(self, k):
        """The static shape verglas gives value k (None when unknown)."""
        var = self.symbolic[k] if k < len(self.symbolic) else None
        return getattr(getattr(var, "type", None), "shape", None)

    def run(self) -> Program:
        self.make_inputs()
        target = int(self.rng.integers(1, self.max_ops + 1))
        attempts = 0
        while len(self.nodes) < target and attempts < 20 * target and not self.error:
            attempts += 1
            plan = self.pick(_PLANS, _PLAN_WEIGHTS)
            if plan in (_plan_ofg, _plan_scan) and not self.inner:
                continue
            nodes = plan(self)
            if nodes:
                self.try_node(nodes)
        n_in = len(self.inputs)
        last = len(self.values) - 1
        outputs = [last]
        if not self.error:
            used = {a.k for node in self.nodes for a in node.args if isinstance(a, V)}
            sinks = [k for k in range(n_in, last) if k not in used]
            self.rng.shuffle(sinks)
            outputs += sinks[:int(self.rng.integers(0, 3))]
            if self.chance(0.05):  # an input as an output: returned as a fresh array
                outputs.append(int(self.rng.integers(0, n_in)))
        return Program(self.seed, self.inputs, self.nodes, outputs)

    def operand(self, like=None, scalar_p=0.2, const_p=0.08):
        """An operand: a program value (preferably broadcastable with `like`), a Python
        scalar or a constant array."""
        if self.chance(scalar_p):
            return self.pick(_PY_SCALARS)
        if like is not None and self.chance(const_p):
            shape = np.shape(like)
            if shape and self.chance(0.5):
                shape = shape[int(self.rng.integers(0, len(shape) + 1)):]
            return self.values_of(self.dtype(), shape)
        if like is None:
            return V(self.value_id())
        shape = np.shape(like)
        k = self.value_id(lambda v: v is not None and _broadcastable(v.shape, shape), 0.5)
        return V(k if k is not None else self.value_id())

    def axis_for(self, ndim, allow_tuple=True, allow_none=True):
        r = self.rng.random()
        if ndim == 0 or (allow_none and r < 0.25):
            return None
        if allow_tuple and r > 0.8 and ndim >= 2:
            n = int(self.rng.integers(1, ndim + 1))
            axes = self.rng.choice(ndim, size=n, replace=False)
            return tuple(int(a) - (ndim if self.chance(0.3) else 0) for a in axes)
        a = int(self.rng.integers(0, ndim))
        return a - ndim if self.chance(0.3) else a

    def index_template(self, shape, advanced_p=0.3):
        """A random numpy index for an array of `shape`: (template, dynamic value ids)."""
        entries, dyn = [], []
        ndim = len(shape)
        axis = 0
        used_ellipsis = False
        while axis < ndim and (not entries or self.chance(0.7)):
            n = shape[axis]
            r = self.rng.random()
            if r < 0.07:
                entries.append(None)
                continue
            if r < 0.12 and not used_ellipsis:
                entries.append(Ellipsis)
                used_ellipsis = True
                axis = ndim - int(self.rng.integers(0, ndim - axis + 1))
                continue
            if r < 0.35:
                if n == 0 or self.chance(0.04):
                    entries.append(int(self.rng.integers(-3, 4)))
                else:
                    entries.append(int(self.rng.integers(-n, n)))
            elif r < 0.35 + advanced_p:
                entries.append(self.advanced_entry(shape[axis:], dyn))
                if isinstance(entries[-1], np.ndarray) and entries[-1].dtype == bool:
                    axis += entries[-1].ndim
                    continue
            else:
                entries.append(self.slice_entry(n, dyn))
            axis += 1
        return tuple(entries), dyn

    def slice_entry(self, n, dyn):
        def bound():
            if self.chance(0.3):
                return None
            return int(self.rng.integers(-n - 2, n + 3))

        step = self.pick((None, None, 1, 2, -1, -2, 3))
        start, stop = bound(), bound()
        if self.chance(0.1):  # a run-time bound: a 0-d int input
            k = self.value_id(lambda v: v is not None and v.ndim == 0 and v.dtype.kind in "iu")
            if k is not None:
                dyn.append(k)
                start = Ref(len(dyn) - 1)
        return ("slice", start, stop, step)

    def advanced_entry(self, rest_shape, dyn):
        n = rest_shape[0]
        r = self.rng.random()
        if r < 0.25:  # a boolean mask over one or more axes
            k = int(self.rng.integers(1, len(rest_shape) + 1))
            mask_shape = rest_shape[:k]
            cand = self.value_id(lambda v: v is not None and v.dtype == bool
                                 and v.shape == mask_shape, 0.5)
            if cand is not None and self.chance(0.6):
                dyn.append(cand)
                return Ref(len(dyn) - 1)
            return self.rng.random(mask_shape) < 0.5
        if r < 0.5:  # a run-time integer index array
            cand = self.value_id(lambda v: v is not None and v.dtype.kind in "iu"
                                 and v.ndim >= 1 and (v.size == 0 or (
                                     v.min() >= -n and v.max() < n)), 0.3)
            if cand is not None:
                dyn.append(cand)
                return Ref(len(dyn) - 1)
        m_shape = (int(self.rng.integers(0, 5)),) if self.chance(0.8) else (2, 2)
        if n == 0:
            return np.zeros(m_shape, dtype=np.int64)
        lo = -n if self.chance(0.5) else 0
        hi = n if self.chance(0.97) else n + 2
        return self.rng.integers(lo, hi, size=m_shape).astype(self.pick(("int64", "int32",
                                                                         "int64")))


def _broadcastable(a, b) -> bool:
    for x, y in zip(a[::-1], b[::-1]):
        if x != y and x != 1 and y != 1:
            return False
    return True


# -- plans: each returns the nodes of one op (sometimes with a helper node) ------------------------
def _plan_unary(g):
    k = g.value_id()
    return [Node("unary", (V(k),), {"name": g.pick(UNARY)})]


def _plan_binary(g):
    name = g.pick(BINARY)
    k = g.value_id()
    a = V(k)
    b = g.operand(like=g.values[k])
    if g.chance(0.25):
        a, b = b, a
    spelling = "operator" if name in _OPERATOR_SPELLED and g.chance(0.5) else "function"
    return [Node("binary", (a, b), {"name": name, "spelling": spelling})]


def _plan_where(g):
    k = g.value_id()
    like = g.values[k]
    c = V(k) if g.values[k].dtype == bool or g.chance(0.3) else g.operand(like, 0.05)
    return [Node("where", (c, g.operand(like, 0.3), g.operand(like, 0.3)), {})]


def _plan_clip(g):
    k = g.value_id()
    lo = None if g.chance(0.2) else g.operand(g.values[k], 0.7)
    hi = None if g.chance(0.2) and lo is not None else g.operand(g.values[k], 0.7)
    return [Node("clip", (V(k), lo, hi), {})]


def _plan_cast(g):
    k = g.value_id()
    return [Node("cast", (V(k),), {"dtype": g.dtype(),
                                   "spelling": g.pick(("method", "function"))})]


def _plan_like(g):
    k = g.value_id()
    name = g.pick(("zeros_like", "ones_like", "full_like"))
    kw = {"name": name, "dtype": None if g.chance(0.6) else g.dtype()}
    if name == "full_like":
        kw["value"] = g.pick(_PY_SCALARS[:16])
    return [Node("like", (V(k),), kw)]


def _plan_reduce(g):
    k = g.value_id()
    ndim = g.values[k].ndim
    name = g.pick(REDUCTIONS)
    axis = g.axis_for(ndim, allow_tuple=name not in ("argmax", "argmin"))
    return [Node("reduce", (V(k),), {"name": name, "axis": axis, "keepdims": g.chance(0.3),
                                     "spelling": g.pick(("function", "method"))})]


def _plan_cumsum(g):
    k = g.value_id()
    return [Node("cumsum", (V(k),), {"axis": g.axis_for(g.values[k].ndim, allow_tuple=False)})]


def _plan_nn(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1 and v.dtype.kind != "c")
    if k is None:
        return None
    name = g.pick(("softmax", "log_softmax", "logsumexp"))
    ndim = g.values[k].ndim
    if name == "logsumexp":
        kw = {"name": name, "axis": g.axis_for(ndim), "keepdims": g.chance(0.3)}
    else:
        kw = {"name": name, "axis": g.axis_for(ndim, allow_tuple=False, allow_none=False)}
    return [Node("nn", (V(k),), kw)]


def _plan_matmul(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1)
    if k is None:
        return None
    a = g.values[k]
    kdim = a.shape[-1]
    r = g.rng.random()
    method = "matmul" if g.chance(0.75) else "dot"
    kw = {"spelling": g.pick(("operator", "function"))} if method == "matmul" else {}
    if r < 0.3 and a.ndim >= 2:  # a @ a.T
        nodes = [Node("transpose", (V(k),), {"spelling": "T"})]
        tk = len(g.values)
        return nodes + [Node(method, (V(k), V(tk)), kw)]
    cand = g.value_id(lambda v: v is not None and v.ndim >= 1 and (
        v.shape[0] if v.ndim == 1 else v.shape[-2]) == kdim, 0.3)
    if cand is not None and r < 0.7:
        return [Node(method, (V(k), V(cand)), kw)]
    shape = [kdim] if g.chance(0.3) else [kdim, int(g.rng.integers(0, 6))]
    if len(shape) == 2 and a.ndim >= 3 and g.chance(0.3):
        shape = [a.shape[-3]] + shape if method == "matmul" else [2] + shape
    b = g.values_of(a.dtype if g.chance(0.7) else g.dtype(), tuple(shape))
    return [Node(method, (V(k), b), kw)]


def _factor_shape(g, size):
    if size == 0:
        return tuple(g.pick(([0], [0, 3], [2, 0], [0, 1, 2])))
    dims = []
    rest = size
    for _ in range(int(g.rng.integers(0, 4))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0][:12]
        d = g.pick(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    g.rng.shuffle(dims)
    if g.chance(0.3):
        dims[int(g.rng.integers(0, len(dims)))] = -1
    return tuple(int(d) for d in dims)


def _plan_reshape(g):
    k = g.value_id()
    shape = _factor_shape(g, g.values[k].size)
    return [Node("reshape", (V(k),), {"shape": shape,
                                      "spelling": g.pick(("method", "function"))})]


def _plan_transpose(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1)
    if k is None:
        return None
    ndim = g.values[k].ndim
    if g.chance(0.4):
        return [Node("transpose", (V(k),), {"spelling": "T"})]
    axes = None if g.chance(0.2) else tuple(int(a) for a in g.rng.permutation(ndim))
    return [Node("transpose", (V(k),), {"axes": axes})]


def _plan_expand_squeeze(g):
    k = g.value_id()
    v = g.values[k]
    if g.chance(0.5):
        n = v.ndim + 1
        axis = int(g.rng.integers(-n, n)) if g.chance(0.8) else tuple(
            int(a) for a in g.rng.choice(n + 1, size=2, replace=False))
        return [Node("expand_dims", (V(k),), {"axis": axis})]
    ones = [a for a, s in enumerate(v.shape) if s == 1]
    static = g.static_shape(k)
    if ones and g.chance(0.7):
        axis = g.pick(ones) if g.chance(0.7) else tuple(ones)
    elif static is not None and None not in static and (g.chance(0.5) or not v.ndim):
        axis = None  # (verglas needs a static shape to drop every length-1 axis)
    else:
        axis = int(g.rng.integers(0, v.ndim))
    return [Node("squeeze", (V(k),), {"axis": axis})]


def _plan_broadcast_to(g):
    k = g.value_id()
    shape = list(g.values[k].shape)
    shape = [s if s != 1 or g.chance(0.5) else int(g.rng.integers(0, 5)) for s in shape]
    for _ in range(int(g.rng.integers(0, 3))):
        shape.insert(0, int(g.rng.integers(1, 4)))
    return [Node("broadcast_to", (V(k),), {"shape": tuple(shape)})]


def _plan_join(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1)
    if k is None:
        return None
    v = g.values[k]
    method = g.pick(("concatenate", "stack"))
    if method == "stack":
        others = [j for j, w in enumerate(g.values) if w is not None and w.shape == v.shape]
        axis = int(g.rng.integers(-v.ndim - 1, v.ndim + 1))
    else:
        axis = int(g.rng.integers(-v.ndim, v.ndim))
        ax = axis % v.ndim
        others = [j for j, w in enumerate(g.values) if w is not None and w.ndim == v.ndim
                  and all(w.shape[a] == v.shape[a] for a in range(v.ndim) if a != ax)]
    n = int(g.rng.integers(1, 4))
    parts = [V(k)] + [V(g.pick(others)) for _ in range(n)]
    return [Node(method, tuple(parts), {"axis": axis})]


def _plan_getitem(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1)
    if k is None:
        return None
    template, dyn = g.index_template(g.values[k].shape)
    return [Node("getitem", (V(k), *[V(d) for d in dyn]), {"template": template})]


def _plan_update(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1)
    if k is None:
        return None
    x = g.values[k]
    template, dyn = g.index_template(x.shape, advanced_p=0.35)
    try:
        from tests.fuzz.oracle import fill_index

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            target = x[fill_index(template, [g.values[d] for d in dyn])]
    except (IndexError, ValueError, TypeError):
        target = x[()]
    if g.chance(0.4):
        v = g.pick(_PY_SCALARS[:16])
    elif g.chance(0.5):
        shape = target.shape[int(g.rng.integers(0, target.ndim + 1)):] if target.ndim else ()
        v = g.values_of(x.dtype if g.chance(0.8) else g.dtype(), shape)
    else:
        v = g.operand(like=target, scalar_p=0.0)
        extra = np.ndim(g.values[v.k] if isinstance(v, V) else v) - target.ndim
        static = g.static_shape(v.k) if isinstance(v, V) else np.shape(v)
        if extra > 0 and (static is None or any(d != 1 for d in static[:extra])):
            return None  # numpy drops leading length-1 axes verglas cannot see are 1
    return [Node("update", (V(k), v, *[V(d) for d in dyn]),
                 {"template": template, "inc": g.chance(0.5)})]


def _plan_const(g):
    k = g.value_id()
    v = g.values[k]
    kind = g.pick(("arange", "zeros", "ones", "full"))
    dtype = g.dtype() if g.chance(0.5) else None
    if kind == "arange":
        n = v.shape[-1] if v.ndim else int(g.rng.integers(0, 6))
        if dtype is not None and np.dtype(dtype).kind in "bc":
            dtype = None
        if g.chance(0.6):
            kw = {"kind": kind, "start": 0, "stop": n, "step": 1, "dtype": dtype}
        else:
            step = g.pick((0.5, 2, -1, 0.25))
            kw = {"kind": kind, "start": 1.5 if step != -1 else n, "stop": n * abs(step) + 1.5
                  if step != -1 else 0, "step": step, "dtype": None}
    else:
        shape = v.shape[int(g.rng.integers(0, v.ndim + 1)):] if v.ndim else ()
        kw = {"kind": kind, "shape": tuple(shape), "dtype": dtype or "float64"}
        if kind == "full":
            kw["value"] = g.pick(_PY_SCALARS[:16])
            kw["dtype"] = dtype
    c = len(g.values)
    name = g.pick(("add", "mul", "sub", "maximum", "true_divide"))
    pair = (V(k), V(c)) if g.chance(0.5) else (V(c), V(k))
    return [Node("const", (), kw), Node("binary", pair, {"name": name, "spelling": "function"})]


def _sub_generator(g, n_in_values):
    """A body program over `n_in_values` (numpy values of the body's inputs)."""
    sub = _Gen(int(g.rng.integers(0, 2**31)), 3, inner=False, dtypes=g.dtypes, small=g.small)
    sub.values = list(n_in_values)
    sub.symbolic = [vg.tensor(f"i{k}", shape=(None,) * v.ndim, dtype=v.dtype)
                    for k, v in enumerate(n_in_values)]
    return sub


def _body(g, in_values, max_nodes=3, elementwise=False):
    """1-3 body nodes over `in_values`; returns (nodes, body values) or None."""
    sub = _sub_generator(g, in_values)
    target = int(g.rng.integers(1, max_nodes + 1))
    for _ in range(10 * target):
        if len(sub.nodes) >= target:
            break
        plans = _BODY_ELEMWISE if elementwise else _BODY_PLANS
        plan = sub.pick(plans)
        nodes = plan(sub)
        if nodes:
            sub.try_node(nodes, allow_error=False)
    if not sub.nodes:
        return None
    return sub.nodes, sub.values


def _plan_ofg(g):
    ks = [g.value_id() for _ in range(int(g.rng.integers(1, 3)))]
    ks = list(dict.fromkeys(ks))
    made = _body(g, [g.values[k] for k in ks])
    if made is None:
        return None
    nodes, values = made
    last = len(values) - 1
    outs = [last]
    if g.chance(0.4):  # an output nobody uses, or one that is an input
        outs.append(int(g.rng.integers(0, len(values))))
    return [Node("ofg", tuple(V(k) for k in ks), {"body": nodes, "outs": outs, "use": 0,
                                                  "inline": g.chance(0.25)})]


def _plan_scan(g):
    k = g.value_id(lambda v: v is not None and v.ndim >= 1 and v.shape[0] >= 1)
    if k is None:
        return None
    seq = g.values[k]
    if g.chance(0.5):
        made = _body(g, [seq[0]])
        if made is None:
            return None
        nodes, values = made
        return [Node("scan_map", (V(k),), {"body": nodes, "out": len(values) - 1})]
    step = seq[0]
    init = step.astype(g.dtype()) if g.chance(0.3) else step
    made = _body(g, [init, step], elementwise=True)
    if made is None:
        return None
    nodes, values = made
    if values[-1].shape != init.shape:
        return None
    init_arg = g.values_of(init.dtype, init.shape) if g.chance(0.5) else None
    if init_arg is None:
        c = len(g.values)
        pre = [Node("cast", (V(k),), {"dtype": init.dtype.name, "spelling": "method"}),
               Node("getitem", (V(c),), {"template": (0,)})]
        return pre + [Node("scan_acc", (V(c + 1), V(k)),
                           {"body": nodes, "out": len(values) - 1, "last": g.chance(0.4),
                            "until": g.chance(0.3)})]
    return [Node("scan_acc", (init_arg, V(k)),
                 {"body": nodes, "out": len(values) - 1, "last": g.chance(0.4),
                  "until": g.chance(0.3)})]


_PLANS = (_plan_unary, _plan_binary, _plan_where, _plan_clip, _plan_cast, _plan_like,
          _plan_reduce, _plan_cumsum, _plan_nn, _plan_matmul, _plan_reshape, _plan_transpose,
          _plan_expand_squeeze, _plan_broadcast_to, _plan_join, _plan_getitem, _plan_update,
          _plan_const, _plan_ofg, _plan_scan)
_PLAN_WEIGHTS = np.array([14, 20, 5, 3, 6, 2, 10, 3, 4, 4, 3, 3, 3, 2, 3, 7, 5, 2, 2, 2], float)
_PLAN_WEIGHTS /= _PLAN_WEIGHTS.sum()
_BODY_PLANS = (_plan_unary, _plan_binary, _plan_binary, _plan_reduce, _plan_where, _plan_nn,
               _plan_cast, _plan_getitem)
_BODY_ELEMWISE = (_plan_unary, _plan_binary, _plan_binary, _plan_where, _plan_clip)


def generate(seed: int, max_ops: int = 12, inner: bool = True, dtypes=DTYPES,
             small: bool = False) -> Program:
    """The random program of `seed` (deterministic); `small`: arrays of at most a few dozen
    elements (for numba's CUDA simulator, which runs a Python thread per element)."""
    return _Gen(seed, max_ops, inner, frozenset(dtypes), small).run()
