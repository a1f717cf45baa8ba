"""How generated code writes a scalar op, shared by both backends: numpy's semantics where a
scalar op's one `impl` (written for floats) is not enough.

- `loop_dtypes`: numpy computes a ufunc in its loop's dtypes (float32 ** int32 in float64,
  int64 < float64 in float64); generated code converts the arguments first, as numpy does.
- `variant`: the expression (over x, y, z) an op takes for arguments of other kinds: complex
  numbers (cmath, numpy's lexicographic order, Smith's division), signed integers (numpy
  wraps around; numba marks signed +, -, * no-signed-wrap, so LLVM may assume no overflow:
  it folded x + INT64_MIN into x | INT64_MIN), integers' floor, the parts of a real number.
- `HELPERS`: the functions those expressions call, as source using only math, cmath and np:
  the CPU backend jits them, CUDA kernels paste them in as nested functions.
- `emit_scalar`: a scalar op (a Composite's graph inlined) on argument expressions, each op
  converted to its loop's dtypes and written by the backend's own `write_op`.

An expression names `ITYPE` where it needs the arguments' dtype (np.<dtype>).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from verglas.complex_code import COMPLEX_HELPERS
from verglas.graph import Constant
from verglas.ops.scalar import Cast, Clip

__all__ = ["loop_dtypes", "variant", "helpers_in", "HELPERS", "arith", "emit_scalar",
           "substitute", "term_runs", "TermRun", "TermLoops", "ElementBlock"]


@functools.cache
def loop_dtypes(sop, dtypes: tuple) -> tuple | None:
    """The input dtypes of the numpy loop `sop`'s ufunc uses for arguments of `dtypes`, or
    None (no ufunc, or no such loop)."""
    ufunc = getattr(sop, "ufunc", None)
    if ufunc is None and len(dtypes) == 1 and getattr(sop, "nin", 0) == 1 \
            and not isinstance(sop, Cast):
        # a float function without a ufunc (sigmoid, softplus, erf): numpy-like, it computes in
        # its result's float dtype (an integer or bool argument converted first)
        try:
            (out,) = sop.output_dtypes(*dtypes)
        except TypeError:
            return None
        return (out,) if np.dtype(out).kind in "fc" and np.dtype(dtypes[0]).kind in "biu" \
            else None
    if ufunc is None or len(dtypes) != ufunc.nin:
        return None
    try:
        loop = ufunc.resolve_dtypes(tuple(np.dtype(d) for d in dtypes) + (None,) * ufunc.nout)
    except (TypeError, ValueError):
        return None
    return tuple(d.name for d in loop[:ufunc.nin])


# complex arguments: cmath, and numpy's definitions where they differ from Python's
_COMPLEX = {
    "exp": "complex_exp(x)", "log": "complex_log(x)", "sqrt": "complex_sqrt(x)",
    "sin": "complex_sin(x)", "cos": "complex_cos(x)", "tan": "complex_tan(x)",
    "tanh": "complex_tanh(x)", "expm1": "complex_expm1(x)", "log1p": "complex_log1p(x)",
    "isinf": "cmath.isinf(x)", "sign": "complex_sign(x)",
    "lt": "complex_lt(x, y)", "le": "complex_le(x, y)", "gt": "complex_lt(y, x)",
    "ge": "complex_le(y, x)", "maximum": "complex_maximum(x, y)",
    "minimum": "complex_minimum(x, y)", "clip": "complex_clip(x, y, z)",
    "clip_to_bound": "complex_clip(x, y, z)",
    "true_div": "complex_divide(x, y)", "reciprocal": "complex_divide(1, x)",
    "pow": "complex_pow(x, y)",  # (numba's cpow gives NaN for 0 ** z, numpy 0 where z.real > 0)
}
_COMPLEX64 = {"expm1": "complex_expm1_single(x)", "log1p": "complex_log1p_single(x)"}
# signed integers: in uint64, where +, - and * wrap around (the cast to the result's dtype
# keeps the low bits); INT_MIN // -1 is INT_MIN (numba's // gives 0)
_SIGNED = {
    "add": "(np.uint64(x) + np.uint64(y))", "sub": "(np.uint64(x) - np.uint64(y))",
    "mul": "(np.uint64(x) * np.uint64(y))", "neg": "(np.uint64(0) - np.uint64(x))",
    "sqr": "(np.uint64(x) * np.uint64(x))",
    "floor_div": "(ITYPE(np.uint64(0) - np.uint64(x)) if y == -1 else x // y)",
}
# numpy's float16 maximum and minimum keep the first operand on a tie (maximum(-0.0, 0.0) is
# -0.0 there; its float32 and float64 loops give the second: fuzzer seed 16900)
_HALF = {"maximum": "(x if (x >= y or x != x) else y)",
         "minimum": "(x if (x <= y or x != x) else y)",
         "clip_to_bound": Clip.impl_expr}  # (its clip keeps x on a tie in every loop)
_INTEGER = {"floor": "x", "ceil": "x"}  # an integer is its own floor (math.floor goes through a
# float: int64 values lose their low bits)
_REAL = {"real": "x", "conj": "x", "imag": "0"}


def variant(sop, arg_dtypes) -> str | None:
    """The expression of `sop` for arguments of `arg_dtypes` (already numpy's loop dtypes)
    where its `impl` does not give numpy's result, else None."""
    kinds = {np.dtype(d).kind for d in arg_dtypes}
    name = sop.name
    if "c" in kinds:
        if "complex64" in arg_dtypes and name in _COMPLEX64:
            return _COMPLEX64[name]  # (numpy computes them in float32)
        return _COMPLEX.get(name)
    if kinds <= {"i", "u", "b"} and name in _INTEGER:
        return _INTEGER[name]
    if set(arg_dtypes) == {"float16"} and name in _HALF:
        return _HALF[name]
    if name in _REAL:
        return _REAL[name]
    if name == "pow" and kinds <= {"i", "u", "b"}:
        return "int_power(x, y)"
    if kinds == {"i"} and len(set(arg_dtypes)) == 1 and name in _SIGNED:
        return _SIGNED[name].replace("ITYPE", f"np.{arg_dtypes[0]}")
    return None


def arith(op: str, a: str, b: str, dtype: str) -> str:
    """`a op b` (op "+" or "*") computed in `dtype` with numpy's wraparound; the caller
    converts the result to `dtype`."""
    if np.dtype(dtype).kind == "i":
        return f"(np.uint64({a}) {op} np.uint64({b}))"
    return f"({a} {op} {b})"


def emit_scalar(sop, args: list[str], arg_dtypes: list[str], out_dtypes, *, literal, cast,
                write_op, loops=None) -> list[str]:
    """The names of `sop`'s results on expressions `args`: a Composite's frozen scalar graph
    inlined node by node (constants as `literal(value, dtype)`), every other op's arguments
    converted (`cast(expr, dtype)`) to the dtypes numpy's loop computes in, then
    `write_op(sop, args, arg_dtypes, out_dtype)` emitting it and returning its name.

    With `loops` (a TermLoops), the Composite's runs of like terms it can read are written as
    loops over the terms."""
    inner = getattr(sop, "fgraph", None)
    if inner is not None:
        values = dict(zip(inner.inputs, args))
        plans = loops.plan(inner) if loops is not None else {}
        inside = {n for plan in plans.values() for n in plan[0].nodes}

        def value_of(v):
            return literal(v.data, v.type.dtype) if isinstance(v, Constant) else values[v]

        def emit_node(node, ins):
            return emit_scalar(node.op, ins, [v.type.dtype for v in node.inputs],
                               [o.type.dtype for o in node.outputs], literal=literal,
                               cast=cast, write_op=write_op)

        order = inner.toposort()
        for k, node in enumerate(order):
            if node in plans:
                run, reads = plans[node]
                # what code after the run reads of what was computed before it
                later = {v for n in order[k + 1:] if n not in inside for v in n.inputs}
                later = [v for v in values if v in later or v in inner.outputs]
                values[node.outputs[0]] = loops.write(run, reads, value_of, emit_node, cast,
                                                      later, values)
            elif node not in inside:
                outs = emit_node(node, [value_of(v) for v in node.inputs])
                values.update(zip(node.outputs, outs))
        return [value_of(o) for o in inner.outputs]
    (out_dtype,) = out_dtypes
    loop = loop_dtypes(sop, tuple(arg_dtypes))
    if loop is not None:  # (numba's promotion differs: float32 ** int32 stays float32 there,
        # int64 < float64 compares exactly)
        args = [a if d == want else cast(a, want) for a, d, want in zip(args, arg_dtypes, loop)]
        arg_dtypes = list(loop)
    return [write_op(sop, args, list(arg_dtypes), out_dtype)]


def substitute(expr: str, args: list[str]) -> str:
    """`expr` (over x, y, z) with the argument expressions put in."""
    names = dict(zip(("x", "y", "z"), args))
    return re.sub(r"\b[xyz]\b", lambda m: f"({names[m.group(0)]})", expr)


def helpers_in(expr: str) -> list[str]:
    """The HELPERS an expression calls (helpers calling helpers first)."""
    found: list[str] = []
    seen: set[str] = set()

    def visit(text):
        for name in re.findall(r"\b\w+(?=\()", text):
            if name in HELPERS and name not in seen:
                seen.add(name)
                visit(HELPERS[name])
                found.append(name)

    visit(expr)
    return found


HELPERS = {
    # the CUDA backend's float % and // (numba-cuda's own give NaN for a finite x and an
    # infinite y, seen on a real GPU; the simulator runs Python's, which hid it)
    "float_divmod": '''def float_divmod(a, b):
    """numpy's (floor_divide, remainder) of two floats, as numpy's npy_divmod computes them."""
    mod = math.fmod(a, b)
    if b == 0:
        return a / b, mod
    div = (a - mod) / b
    if mod != 0 or mod != mod:
        if (b < 0) != (mod < 0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div != 0:
        # math.floor gives an int: exact below 2**52, where a float may have a fraction
        floordiv = math.copysign(math.floor(div), div) if abs(div) < 4503599627370496.0 else div
        if div - floordiv > 0.5:
            floordiv += 1.0
    else:
        floordiv = math.copysign(0.0, a / b)
    return floordiv, mod
''',
    # a product no fast-math flag reaches: the CPU backend compiles its helpers into loops
    # flagged 'reassoc' and 'contract', which would re-associate it (it substitutes an
    # intrinsic for this def); CUDA kernels compile without such flags
    "strict_mul": '''def strict_mul(a, b):
    return a * b
''',
    "int_power": '''def int_power(x, y):
    """numpy's integer power: an error for a negative exponent, else repeated squaring with
    wraparound (in uint64: the caller keeps the result's low bits)."""
    if y < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    result = np.uint64(1)
    base = np.uint64(x)
    e = np.uint64(y)
    while e > 0:
        if e & np.uint64(1):
            result = result * base
        base = base * base
        e = e >> np.uint64(1)
    return result
''',
    **COMPLEX_HELPERS,
}


# -- term runs ---------------------------------------------------------------------------------
MIN_TERMS = 3  # shorter runs of like terms are written out


@dataclass(frozen=True, eq=False)
class TermRun:
    """`terms` consecutive nodes of one accumulation chain in a scalar graph, each
    `acc = combine(acc, term_k)` with every term_k the same little graph: generated code
    computes them as one loop over k (its size then does not grow with the terms).

    `template` is the first term's nodes in order and `root` its value; `leaves[s][k]` is what
    term k reads at the template's leaf slot s (a graph input, a constant, or a value computed
    before the chain); `nodes` are all the nodes the loop computes."""

    start: object  # the accumulator's value before the run
    end: object  # the node whose output is the run's result
    acc_position: int
    template: tuple
    root: object
    slots: tuple  # the first term's leaf variables, by slot
    leaves: tuple  # per slot, one variable per term
    nodes: frozenset

    @property
    def terms(self) -> int:
        return len(self.leaves[0]) if self.leaves else 0


@functools.lru_cache(maxsize=256)
def term_runs(graph) -> tuple[TermRun, ...]:
    """The runs of at least MIN_TERMS like terms in the accumulation chains of the (frozen,
    scalar) `graph`: chains of one binary op whose accumulator input is read by nothing else,
    each term a little graph of its own (read only by its chain node) whose nodes repeat term
    after term with only their leaves changing."""
    clients = graph.clients
    runs = []
    used: set = set()
    for node in graph.toposort():
        if node in used or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        for pos in (0, 1):
            chain = _chain_from(node, pos, clients)
            if len(chain) >= MIN_TERMS:
                found = _like_runs(chain, pos, clients)
                if found:
                    runs += found
                    used.update(n for run in found for n in run.nodes)
                    break
    return tuple(runs)


def _chain_from(node, pos, clients) -> list:
    """The nodes op(op(op(acc, t1), t2), t3)... starting at `node` (whose accumulator, input
    `pos`, is not itself such a chain link), each link's value read by the next one only."""
    acc = node.inputs[pos]
    if acc.owner is not None and acc.owner.op == node.op and len(clients[acc]) == 1:
        return []  # not the chain's first link
    chain = [node]
    while True:
        out = chain[-1].outputs[0]
        uses = clients[out]
        if len(uses) != 1 or uses[0][0] == "output":
            return chain
        nxt, i = uses[0]
        if nxt.op != node.op or i != pos:
            return chain
        chain.append(nxt)


def _term_nodes(root, link, clients) -> list | None:
    """The nodes computing `root` read by nothing outside them (and `link`), in order; what they
    read from elsewhere is a leaf. None when root is itself a leaf."""
    if root.owner is None or any(c is not link for c, _ in clients[root]) or any(
            clients[o] for o in root.owner.outputs if o is not root):
        return None  # a leaf, or a value something else reads too
    members = {root.owner}
    stack = [root.owner]
    while stack:  # the backward closure, then trimmed to what only the term reads
        for v in stack.pop().inputs:
            if v.owner is not None and v.owner not in members:
                members.add(v.owner)
                stack.append(v.owner)
    changed = True
    while changed:
        changed = False
        for n in list(members):
            if n is root.owner:
                continue
            for out in n.outputs:
                if any(c == "output" or (c is not link and c not in members)
                       for c, _ in clients[out]):
                    members.discard(n)
                    changed = True
                    break
        if changed:  # what only removed nodes led to is not the term's either
            keep = {root.owner}
            stack = [root.owner]
            while stack:
                for v in stack.pop().inputs:
                    if v.owner in members and v.owner not in keep:
                        keep.add(v.owner)
                        stack.append(v.owner)
            members = keep
    order: list = []
    seen: set = set()

    def visit(n):  # post-order: a node after what it reads
        seen.add(n)
        for v in n.inputs:
            if v.owner in members and v.owner not in seen:
                visit(v.owner)
        order.append(n)

    visit(root.owner)
    return order


def _shape(nodes, root) -> tuple[tuple, list] | None:
    """(signature, leaves by slot) of a term: its nodes' ops and wiring, each input either a
    node of the term (by place and output) or a leaf slot numbered by first reading."""
    place = {n: k for k, n in enumerate(nodes)}
    leaves: list = []
    slot_of: dict = {}
    sig = []
    for n in nodes:
        refs = []
        for v in n.inputs:
            if v.owner in place:
                refs.append(("n", place[v.owner], v.owner.outputs.index(v)))
            else:
                if v not in slot_of:
                    slot_of[v] = len(leaves)
                    leaves.append(v)
                refs.append(("leaf", slot_of[v], v.type.dtype))
        sig.append((n.op, tuple(refs), tuple(o.type.dtype for o in n.outputs)))
    return (tuple(sig), place[root.owner], root.owner.outputs.index(root)), leaves


def _like_runs(chain, pos, clients) -> list[TermRun]:
    """The runs of at least MIN_TERMS consecutive links of `chain` whose terms have one shape."""
    out_dtype = chain[0].outputs[0].type.dtype
    shapes = []
    for link in chain:
        term = link.inputs[1 - pos]
        nodes = _term_nodes(term, link, clients)
        ok = nodes is not None and link.inputs[pos].type.dtype == out_dtype \
            and link.outputs[0].type.dtype == out_dtype
        shapes.append((nodes, _shape(nodes, term)) if ok else None)
    runs = []
    k = 0
    while k < len(chain):
        if shapes[k] is None:
            k += 1
            continue
        sig = shapes[k][1][0]
        j = k + 1
        while j < len(chain) and shapes[j] is not None and shapes[j][1][0] == sig:
            j += 1
        if j - k >= MIN_TERMS:
            template = tuple(shapes[k][0])
            first_leaves = shapes[k][1][1]
            per_slot = tuple(tuple(shapes[m][1][1][s] for m in range(k, j))
                             for s in range(len(first_leaves)))
            nodes = frozenset(n for m in range(k, j) for n in shapes[m][0]) | set(chain[k:j])
            runs.append(TermRun(start=chain[k].inputs[pos], end=chain[j - 1],
                                acc_position=pos, template=template,
                                root=chain[k].inputs[1 - pos], slots=tuple(first_leaves),
                                leaves=per_slot, nodes=nodes))
        k = j
    return runs


class ElementBlock:
    """A loop over `size` elements run as blocks of SIZE: the code writing term runs
    (TermLoops.write) closes the loop over a block's elements, loops over the terms with the
    elements inside, and opens it again; what it keeps per element lives in scratch arrays of
    SIZE values, allocated once before the blocks (`allocate(name, dtype)` emits it there).
    `em` is the Emitter.

    `stable`: {name or expression: an expression reading it again in a later loop over the
    same elements} (element reads at `index`, values computed before the blocks, and names
    bound to such reads)."""

    SIZE = 256  # elements per block: the kept values stay in the L1 cache

    def __init__(self, em, size: str, index: str, allocate, stable):
        self.em, self.size, self.index = em, size, index
        self.allocate, self.stable = allocate, dict(stable)
        self.start, self.count, self.element = em.fresh("bs"), em.fresh("bn"), em.fresh("j")

    def open_blocks(self) -> None:
        """Emit the loop over the blocks (the caller indents below it)."""
        em = self.em
        em.line(f"for {self.start} in range(0, {self.size}, {self.SIZE}):")
        with em.indent():
            em.line(f"{self.count} = min({self.SIZE}, {self.size} - {self.start})")

    def open_elements(self) -> None:
        """Emit a loop over the block's elements at the current depth; below it, `index` is
        the element's index."""
        em = self.em
        em.line(f"for {self.element} in range({self.count}):")
        em.depth += 1
        em.line(f"{self.index} = {self.start} + {self.element}")

    def hoist(self, expr: str) -> str:
        """`expr` (the same for every element) read once into a name, here."""
        name = self.em.fresh("tv")
        self.em.line(f"{name} = {expr}")
        return name

    def close_elements(self) -> None:
        """Go on below the loop over the block's elements (one level out)."""
        self.em.depth -= 1

    def keep(self, value: str, dtype: str, always: bool = False) -> str:
        """An expression reading the element's `value` in a later loop over the elements: the
        stable expression, or (stored here) its place in a scratch array."""
        if value in self.stable and not always:
            return self.stable[value]
        name = self.em.fresh("sk")
        self.allocate(name, dtype)
        self.em.line(f"{name}[{self.element}] = {value}")
        return f"{name}[{self.element}]"


class TermLoops:
    """How generated code reads the leaves of term runs, and writes the runs as loops.

    `elements` maps a Composite input position to (array, offset, m): the input is element
    `offset + m` of `array` (an expression each). `constants(dtype, values)` names an array
    holding `values`. `em` writes lines (line, fresh, indent). A run is written as a loop when
    each leaf slot reads one value for all its terms, constants, or elements of one array at
    consecutive places."""

    def __init__(self, em, elements: dict, constants):
        self.em, self.elements, self.constants = em, elements, constants
        self.block = None  # an ElementBlock: the loops over elements run in blocks

    def plan(self, graph) -> dict:
        """{the run's end node: (run, per slot: how term c reads it)} for the runs it can read."""
        position = {v: k for k, v in enumerate(graph.inputs)}
        plans = {}
        for run in term_runs(graph):
            reads = [self._reader(leaves, position) for leaves in run.leaves]
            if all(r is not None for r in reads):
                plans[run.end] = (run, reads)
        return plans

    def inputs_only_looped(self, graph) -> set:
        """The input positions read only by the planned loops (which read them as elements of
        their arrays): generated code need not hold them one by one."""
        inside = {n for run, _ in self.plan(graph).values() for n in run.nodes}
        clients = graph.clients
        return {k for k, v in enumerate(graph.inputs)
                if clients[v] and all(c in inside for c, _ in clients[v])}

    def _reader(self, leaves, position):
        first = leaves[0]
        if all(v is first for v in leaves):
            return ("same", first)
        if all(isinstance(v, Constant) for v in leaves):
            return ("constants", first.type.dtype, [v.data for v in leaves])
        locs = [self.elements.get(position.get(v)) for v in leaves]
        if any(loc is None for loc in locs):
            return None
        array, offset, m = locs[0]
        if all(loc[:2] == (array, offset) and loc[2] == m + k for k, loc in enumerate(locs)):
            return ("elements", array, offset, m)
        return None

    def write(self, run: TermRun, reads, value_of, emit_node, cast, later=(),
              values=None) -> str:
        """Emit `run` as a loop over its terms (`value_of` gives what a variable computed
        before it is); the name holding its result.

        In a block of elements (`self.block`, see ElementBlock) the loop over the terms runs
        outside a loop over the block's elements (each inner loop a SIMD loop, as the terms
        written out were): what the terms read and the variables `later` (those the code after
        the run reads) are kept per element across it, `values` then naming the latter."""
        em = self.em
        dtype = run.end.outputs[0].type.dtype
        acc, c = em.fresh("acc"), em.fresh("c")
        block = self.block
        start = cast(value_of(run.start), dtype)
        if block is None:
            em.line(f"{acc} = {start}")
        else:  # per element: an expression reading each kept value in a later loop
            same = [r[1] for r in reads if r[0] == "same" and r[1] in values]
            kept = {v: block.keep(value_of(v), v.type.dtype) for v in dict.fromkeys(
                [*same, *later])}
            accs = block.keep(start, dtype, always=True)
            block.close_elements()
        leaf_of = {}
        for slot, read in zip(run.slots, reads):
            if read[0] == "same":
                leaf_of[slot] = value_of(read[1])
            elif read[0] == "constants":
                leaf_of[slot] = f"{self.constants(read[1], read[2])}[{c}]"
            else:
                _, array, offset, m = read
                leaf_of[slot] = f"{array}[{offset} + {m} + {c}]"
        em.line(f"for {c} in range({run.terms}):  # {run.terms} like terms")
        with em.indent():
            if block is not None:
                for slot, read in zip(run.slots, reads):
                    if read[0] != "same":  # one value per term: read before the elements
                        leaf_of[slot] = block.hoist(leaf_of[slot])
                block.open_elements()
                for slot, read in zip(run.slots, reads):
                    if read[0] == "same" and read[1] in kept:
                        leaf_of[slot] = kept[read[1]]
                acc = accs
            local = dict(leaf_of)
            for node in run.template:
                outs = emit_node(node, [local[v] for v in node.inputs])
                local.update(zip(node.outputs, outs))
            args = [acc, local[run.root]] if run.acc_position == 0 else [local[run.root], acc]
            (value,) = emit_node(run.end, args)
            em.line(f"{acc} = {value}")
            if block is not None:
                block.close_elements()
        if block is None:
            return acc
        block.open_elements()  # the rest of the elements' code, in a loop of its own again
        for v in later:
            values[v] = em.fresh("r")
            em.line(f"{values[v]} = {kept[v]}")
        result = em.fresh("acc")
        em.line(f"{result} = {accs}")
        return result
