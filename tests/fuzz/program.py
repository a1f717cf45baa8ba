"""Random programs as data: inputs, a list of op nodes, outputs; evaluated by numpy (the
oracle, `oracle.NumpyXP`), built as a verglas graph (`VerglasXP`) or printed as the Python a
user would write (`source`).

A node is a method of the XP protocol (the method names below, shared by NumpyXP and
VerglasXP), its arguments (`V(k)`: the program's k-th value, inputs first; or a Python scalar;
or a numpy array, which verglas takes as a constant) and keyword parameters. Inner graphs
(`ofg`, `scan_map`, `scan_acc`) hold a body: nodes over the body's own values.
"""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np

import verglas as vg
from tests.fuzz.oracle import Ref, fill_index

__all__ = ["V", "Input", "Node", "Program", "evaluate", "VerglasXP", "source", "arg_value",
           "LAYOUTS"]

LAYOUTS = ("C", "F", "strided", "reversed", "readonly", "list")


@dataclasses.dataclass(frozen=True)
class V:
    """A reference to the k-th value of a program (or of a body)."""

    k: int

    def __repr__(self):
        return f"v{self.k}"


@dataclasses.dataclass
class Input:
    """A program input: its values, its symbolic shape (ints or None) and the layout the
    array is handed over in."""

    value: np.ndarray
    static: tuple
    layout: str = "C"

    def argument(self):
        """The value as given to the compiled function (a copy in its layout)."""
        a = self.value
        if self.layout == "list" and a.size and a.dtype.name in ("bool", "int64", "float64"):
            return a.tolist()  # a Python list, or a Python scalar for a 0-d input
        if a.ndim == 0 or self.layout in ("C", "list"):
            return np.array(a, order="C")
        if self.layout == "F":
            return np.asfortranarray(a).copy()
        if self.layout == "strided":
            big = np.zeros(tuple(2 * s + 1 for s in a.shape), dtype=a.dtype)
            view = big[tuple(slice(1, None, 2) for _ in a.shape)]
            view[...] = a
            return view
        if self.layout == "reversed":
            rev = tuple(slice(None, None, -1) for _ in a.shape)
            return np.ascontiguousarray(a[rev])[rev]
        out = np.array(a)
        out.flags.writeable = False
        return out


@dataclasses.dataclass
class Node:
    method: str
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Program:
    seed: int
    inputs: list
    nodes: list
    outputs: list  # value ids

    def value_count(self) -> int:
        return len(self.inputs) + len(self.nodes)

    def __str__(self):
        return source(self)


def arg_value(arg, values):
    if isinstance(arg, V):
        return values[arg.k]
    if isinstance(arg, list):
        return [arg_value(a, values) for a in arg]
    return arg


def evaluate(nodes, xp, values: list) -> list:
    """Run `nodes` with the XP `xp` after `values` (the inputs); returns every value."""
    values = list(values)
    for node in nodes:
        args = [arg_value(a, values) for a in node.args]
        values.append(getattr(xp, node.method)(*args, **node.kwargs))
    return values


# -- verglas ---------------------------------------------------------------------------------
def _tensor_like(var, name):
    return vg.tensor(name, shape=(None,) * var.ndim, dtype=var.dtype)


class VerglasXP:
    """The XP protocol building a verglas graph, spelled as users spell it (operators,
    methods or functions, as the node says)."""

    _OPERATORS = {"add": "+", "sub": "-", "mul": "*", "true_divide": "/", "floor_divide": "//",
                  "mod": "%", "power": "**", "eq": "==", "neq": "!=", "lt": "<", "le": "<=",
                  "gt": ">", "ge": ">=", "bitwise_and": "&", "bitwise_or": "|",
                  "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>"}

    def unary(self, a, name):
        if name == "neg" and isinstance(a, vg.graph.basic.Variable):
            return -a
        if name == "invert" and isinstance(a, vg.graph.basic.Variable):
            return ~a
        return getattr(vg, name)(a)

    def binary(self, a, b, name, spelling="function"):
        if spelling == "operator" and (isinstance(a, vg.graph.basic.Variable)
                                       or isinstance(b, vg.graph.basic.Variable)):
            op = self._OPERATORS[name]
            env = {"a": a, "b": b}
            if op in ("==", "!=") and not isinstance(a, vg.graph.basic.Variable):
                return eval(f"b {op} a", env)  # Python would compare a scalar with a variable
            return eval(f"a {op} b", env)
        return getattr(vg, name)(a, b)

    def where(self, c, a, b):
        return vg.where(c, a, b)

    def clip(self, a, lo, hi):
        return vg.clip(a, lo, hi)

    def cast(self, a, dtype, spelling="method"):
        return a.astype(dtype) if spelling == "method" else vg.cast(a, dtype)

    def like(self, a, name, value=None, dtype=None):
        if name == "full_like":
            return vg.full_like(a, value, dtype)
        return getattr(vg, name)(a, dtype)

    def reduce(self, a, name, axis=None, keepdims=False, spelling="function"):
        if spelling == "method" and isinstance(a, vg.graph.basic.Variable):
            return getattr(a, name)(axis=axis, keepdims=keepdims)
        return getattr(vg, name)(a, axis=axis, keepdims=keepdims)

    def cumsum(self, a, axis=None):
        return vg.cumsum(a, axis=axis)

    def nn(self, a, name, axis=-1, keepdims=False):
        if name == "logsumexp":
            return vg.logsumexp(a, axis=axis, keepdims=keepdims)
        return getattr(vg, name)(a, axis=axis)

    def matmul(self, a, b, spelling="function"):
        return a @ b if spelling == "operator" else vg.matmul(a, b)

    def dot(self, a, b):
        return vg.dot(a, b)

    def reshape(self, a, shape, spelling="function"):
        return a.reshape(shape) if spelling == "method" else vg.reshape(a, shape)

    def transpose(self, a, axes=None, spelling="function"):
        if spelling == "T":
            return a.T
        return vg.transpose(a, axes)

    def expand_dims(self, a, axis):
        return vg.expand_dims(a, axis)

    def squeeze(self, a, axis=None):
        return vg.squeeze(a, axis)

    def broadcast_to(self, a, shape):
        return vg.broadcast_to(a, shape)

    def concatenate(self, *arrays, axis=0):
        return vg.concatenate(list(arrays), axis=axis)

    def stack(self, *arrays, axis=0):
        return vg.stack(list(arrays), axis=axis)

    def getitem(self, a, *dynamic, template):
        return a[fill_index(template, dynamic)]

    def update(self, a, v, *dynamic, template, inc):
        target = a[fill_index(template, dynamic)]
        return vg.inc_subtensor(target, v) if inc else vg.set_subtensor(target, v)

    def const(self, kind, shape=None, value=None, dtype=None, start=0, stop=None, step=1):
        if kind == "arange":
            return vg.arange(start, stop, step, dtype=dtype)
        if kind == "full":
            return vg.full(shape, value, dtype)
        return getattr(vg, kind)(shape, dtype)

    # -- inner graphs ----------------------------------------------------------------------------
    def ofg(self, *args, body, outs, use=0, inline=False):
        inner = [_tensor_like(vg.as_tensor(a), f"i{k}") for k, a in enumerate(args)]
        values = evaluate(body, self, inner)
        op = vg.OpFromGraph(inner, [values[o] for o in outs], inline=inline)
        result = op(*args)
        return result[use] if isinstance(result, (list, tuple)) else result

    def scan_map(self, *seqs, body, out):
        def step(*slices):
            return evaluate(body, self, list(slices))[out]

        return vg.scan(step, sequences=list(seqs))

    def scan_acc(self, init, *seqs, body, out, last=False, until=False):
        def step(*args):
            *slices, h = args
            new = evaluate(body, self, [h, *slices])[out].astype(init.dtype)
            # with `until`: stop at a fixed point (the state no longer changes)
            return (new, vg.until(vg.all(vg.eq(new, h)))) if until else new

        trace = vg.scan(step, sequences=list(seqs), outputs_info=init)
        return trace[-1] if last else trace


class _Namer:
    def __init__(self):
        self.consts = []

    def arg(self, a, names):
        if isinstance(a, V):
            return names[a.k]
        if isinstance(a, np.ndarray):
            return _array_source(a)
        if isinstance(a, np.generic):
            return repr(a.item())
        return repr(a)


def _array_source(a: np.ndarray) -> str:
    if a.size == 0:
        return f"np.zeros({a.shape!r}, dtype={a.dtype.name!r})"
    if a.ndim == 0:
        return f"np.array({a.item()!r}, dtype={a.dtype.name!r})"
    return f"np.array({a.tolist()!r}, dtype={a.dtype.name!r})"


def _index_source(template, dyn_names) -> str:
    parts = []
    for e in template:
        if isinstance(e, Ref):
            parts.append(dyn_names[e.k])
        elif isinstance(e, tuple) and e and e[0] == "slice":
            comps = [dyn_names[c.k] if isinstance(c, Ref) else ("" if c is None else repr(c))
                     for c in e[1:]]
            parts.append(":".join(comps).rstrip(":") if comps[2] == "" else ":".join(comps))
            if parts[-1] == "":
                parts[-1] = ":"
        elif e is None:
            parts.append("None")
        elif e is Ellipsis:
            parts.append("...")
        elif isinstance(e, np.ndarray):
            parts.append(_array_source(e))
        else:
            parts.append(repr(e))
    return ", ".join(parts) + ("," if len(parts) == 1 else "")


def _node_source(node, names, namer) -> str:
    m, kw = node.method, node.kwargs
    args = [namer.arg(a, names) for a in node.args]
    if m == "unary":
        return f"vg.{kw.get('name', '?')}({args[0]})" if "name" in kw else f"vg.?({args[0]})"
    if m == "binary":
        name, spelling = kw.get("name"), kw.get("spelling", "function")
        if spelling == "operator":
            return f"{args[0]} {VerglasXP._OPERATORS[name]} {args[1]}"
        return f"vg.{name}({args[0]}, {args[1]})"
    if m == "cast":
        if kw.get("spelling") == "method":
            return f"{args[0]}.astype({kw['dtype']!r})"
        return f"vg.cast({args[0]}, {kw['dtype']!r})"
    if m == "getitem":
        return f"{args[0]}[{_index_source(kw['template'], args[1:])}]"
    if m == "update":
        fn = "inc_subtensor" if kw["inc"] else "set_subtensor"
        return f"vg.{fn}({args[0]}[{_index_source(kw['template'], args[2:])}], {args[1]})"
    if m in ("ofg", "scan_map", "scan_acc"):
        return _inner_source(node, args, namer)
    if m == "reduce" and kw.get("spelling") == "method":
        return f"{args[0]}.{kw['name']}(axis={kw['axis']!r}, keepdims={kw['keepdims']!r})"
    if m in ("reduce", "nn", "like"):
        rest = ", ".join(f"{k}={v!r}" for k, v in kw.items() if k not in ("name", "spelling"))
        return f"vg.{kw['name']}({args[0]}{', ' + rest if rest else ''})"
    if m == "matmul" and kw.get("spelling") == "operator":
        return f"{args[0]} @ {args[1]}"
    if m == "transpose" and kw.get("spelling") == "T":
        return f"{args[0]}.T"
    if m == "reshape":
        if kw.get("spelling") == "method":
            return f"{args[0]}.reshape({kw['shape']!r})"
        return f"vg.reshape({args[0]}, {kw['shape']!r})"
    if m in ("concatenate", "stack"):
        return f"vg.{m}([{', '.join(args)}], axis={kw.get('axis', 0)!r})"
    if m == "const":
        kind = kw["kind"]
        if kind == "arange":
            return f"vg.arange({kw['start']!r}, {kw['stop']!r}, {kw['step']!r}, " \
                   f"dtype={kw['dtype']!r})"
        if kind == "full":
            return f"vg.full({kw['shape']!r}, {kw['value']!r}, {kw['dtype']!r})"
        return f"vg.{kind}({kw['shape']!r}, {kw['dtype']!r})"
    kwtext = ", ".join(f"{k}={v!r}" for k, v in kw.items() if k != "spelling")
    return f"vg.{m}({', '.join(args)}{', ' + kwtext if kwtext else ''})"


def _inner_source(node, args, namer) -> str:
    kw = node.kwargs
    n_in = len(args) if node.method == "ofg" else (
        len(args) if node.method == "scan_map" else len(args))
    if node.method == "ofg":
        params = [f"i{k}" for k in range(n_in)]
        body = _body_lines(kw["body"], params, namer)
        outs = ", ".join(_body_names(kw["body"], params)[o] for o in kw["outs"])
        inline = ", inline=True" if kw.get("inline") else ""
        head = f"vg.OpFromGraph([{', '.join(params)}], [{outs}]{inline})"
        return (f"{head}({', '.join(args)})[{kw.get('use', 0)}]"
                f"  # where, inside: {'; '.join(body)}")
    if node.method == "scan_map":
        params = [f"s{k}" for k in range(len(args))]
        names = _body_names(kw["body"], params)
        body = "; ".join(_body_lines(kw["body"], params, namer))
        return (f"vg.scan(lambda {', '.join(params)}: <{body}; return {names[kw['out']]}>, "
                f"sequences=[{', '.join(args)}])")
    params = ["h"] + [f"s{k}" for k in range(len(args) - 1)]
    names = _body_names(kw["body"], params)
    body = "; ".join(_body_lines(kw["body"], params, namer))
    tail = "[-1]" if kw.get("last") else ""
    new = f"{names[kw['out']]}.astype(h.dtype)"
    ret = f"({new}, vg.until(vg.all(vg.eq({new}, h))))" if kw.get("until") else new
    return (f"vg.scan(lambda {', '.join(params[1:] + ['h'])}: <{body}; return "
            f"{ret}>, sequences=[{', '.join(args[1:])}], outputs_info={args[0]}){tail}")


def _body_names(body, params):
    return list(params) + [f"b{j}" for j in range(len(body))]


def _body_lines(body, params, namer):
    names = _body_names(body, params)
    return [f"{names[len(params) + j]} = {_node_source(n, names, namer)}"
            for j, n in enumerate(body)]


def source(program: Program) -> str:
    """The program as the Python a user would write, with its input values."""
    n_in = len(program.inputs)
    names = [f"x{k}" for k in range(n_in)] + [f"v{k}" for k in range(n_in, program.value_count())]
    namer = _Namer()
    lines = ["import numpy as np", "import verglas as vg", ""]
    for k, inp in enumerate(program.inputs):
        lines.append(f"x{k} = vg.tensor('x{k}', shape={tuple(inp.static)!r}, "
                     f"dtype={inp.value.dtype.name!r})")
    for j, node in enumerate(program.nodes):
        lines.append(f"{names[n_in + j]} = {_node_source(node, names, namer)}")
    outs = ", ".join(names[o] for o in program.outputs)
    lines.append(f"f = vg.compile([{', '.join(names[:n_in])}], [{outs}])")
    args = []
    for k, inp in enumerate(program.inputs):
        text = _array_source(inp.value)
        if len(text) > 2000:
            text = f"<{inp.value.dtype} array of shape {inp.value.shape}>"
        args.append(f"    {text},  # layout {inp.layout}")
    lines.append("result = f(\n" + "\n".join(args) + "\n)")
    return "\n".join(lines)


_ = textwrap
