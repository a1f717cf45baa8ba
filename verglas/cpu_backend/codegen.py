"""Source generation for the CPU backend: a Program becomes ONE Python function that numba
compiles as a single unit (one compilation per program, whatever the number of steps)."""

from __future__ import annotations

import contextlib

import numpy as np

from verglas.config import config
# each kernel module registers its ops' kernels into `emit` (and their helpers) on import
from verglas.cpu_backend import (array_kernels, index_kernels, inner_kernels,  # noqa: F401
                                 reduce_kernels, shape_kernels)
from verglas.cpu_backend.callees import call_unlinked
from verglas.cpu_backend.dimfacts import DimFacts
from verglas.cpu_backend.dtypes import np_dtype, storage_dtype, to_storage
from verglas.cpu_backend.intrinsics import (empty_expr, prefer_wide_vectors, ws_add,
                                            ws_reserve, ws_take, zero_d)
from verglas.cpu_backend.kernels import HELPER_REFS, EmitContext, emit
from verglas.cpu_backend.rowfusion import emit_row_group
from verglas.cpu_backend.shape_reads import read_lengths_once
from verglas.cpu_backend.storage import BLOCK_MIN_BYTES, Storage
from verglas.ops.basic import DimShuffle
from verglas.schedule.program import Step
from verglas.schedule.repeats import Repeat
from verglas.source import Emitter, any_of

HELPER_REFS["call_unlinked"] = call_unlinked  # generated code calls it by that name

__all__ = ["Emitter", "ProgramSource", "generate", "INLINE_CONSTANT_LIMIT", "np_dtype"]

INLINE_CONSTANT_LIMIT = 4096  # constants up to this many elements are baked into the code
# With more 0-d inputs than this, they travel packed in one array per dtype: each array argument
# costs numba ~10 ms of compile time (and dispatch time at every call).
PACK_THRESHOLD = 4
# An Elemwise or reduction op used at least this many times in a program becomes one kernel
# function its steps call: compiling a kernel costs about as much as one inline loop nest,
# each call a few ms.


LARGE_FUNCTION_STEPS = 24  # steps over arrays that make a function "large" (see ProgramSource)


class _Names(dict):
    """Buffer id -> variable name; a buffer known as a scalar is materialized on first use."""

    def __init__(self, emitter, prefix: str = "b"):
        super().__init__()
        self.emitter = emitter
        self.prefix = prefix  # buffer b<id> is named <prefix><id>
        # whether 0-d elementwise results stay scalar locals (set_scalar) rather than arrays:
        # in a loop body, where an array per step would be an allocation per step
        self.scalar_results = False
        self.scalars: dict[int, str] = {}  # buffer id -> scalar expression of its one element
        self.pending: dict[int, tuple[str, int]] = {}  # buffer id -> (name, ndim)
        # "pkJ[S]" -> ("pkJ", S): a packed 0-d input (or a repeat's varying value, a cell of
        # the row of its table): element S of a 1-d C-contiguous array
        self.packed: dict[str, tuple[str, int]] = {}
        self.vectors: dict[int, tuple[str, list[str]]] = {}  # bid -> (dtype, element exprs)

    def name_of(self, bid: int) -> str:
        return f"{self.prefix}{bid}"

    def __missing__(self, bid):
        if bid in self.vectors:  # a shape vector, built where something needs the array
            dtype, elements = self.vectors[bid]
            name = self[bid] = self.name_of(bid)
            self.emitter.line(f"{name} = np.empty({len(elements)}, {np_dtype(dtype)})")
            for k, value in enumerate(elements):
                self.emitter.line(f"{name}[{k}] = {value}")
            return name
        name, ndim = self.pending.pop(bid)
        value = self.scalars[bid]
        if ndim == 0:
            self.emitter.line(f"{name} = {zero_d(value)}")
        else:
            self.emitter.line(f"{name} = np.full(({'1, ' * ndim}), {value})")
        self[bid] = name
        return name


class ProgramSource:
    """What generating a program produces: source text, globals it needs, constant arguments."""

    def __init__(self, name: str):
        self.name = name
        self.emitter = Emitter(depth=1)  # lines of a function body
        self.globals: dict[str, object] = {}
        self.imports: set[str] = set()
        self.arg_constants: list | None = []  # large constants passed as arguments
        self.functions: list[str] = []  # extra top-level functions (sub-programs)
        self._constants: dict = {}
        self.shared_ops: dict = {}  # Program.shared_kernels: ops compiled as one kernel function
        # a function of many loops: its elementwise loops go to kernel functions of their own.
        # LLVM no longer inlines the vectorized math kernels into it (measured: past ~20-40
        # loops, tanh called per element, 10 ns instead of 0.65), and a kernel compiles in a
        # second process while the program does (aside.py): numba's time grows with the
        # program function's size (the transformer block's gradient, cold: 3.4 -> 2.9 s)
        self.large = False
        # (op, broadcasting, layout) -> (kernel function name, its scalar groups)
        self.shared_kernels: dict = {}
        self.jit_names: list[str] = []  # names of those functions, callees first
        self.sub_functions: dict[int, str] = {}  # id(sub-program) -> its function's name
        # constants that shared kernels take in arrays: per dtype, one global array per
        # function, copied once at its top (numba types a global array read-only, and a
        # kernel parameter must get one type at every call site) and passed with an offset
        self.pools: dict[str, list] = {}
        self._pool_runs: dict = {}  # (dtype, value reprs) -> offset of that run in the pool
        self.uses_zero = False  # whether the function needs `zo` (see offset)
        # assume no run-time broadcasting (dims not statically 1 are equal): kernels check it
        # and raise RuntimeBroadcast, and the runner falls back to the general program
        self.specialized = False
        self.parallel = False  # whether some function runs loops on the thread pool
        # whether large elementwise loops run on the pool (kernels.py): not in a program that
        # calls BLAS, whose own threads spin ~0.1 s after each product and hold the other
        # core (measured: tanh of 1M elements right after a gemm, pooled 477-499 us, on one
        # thread 452-563 us; 227 against 425 us in a program without products)
        self.pools_elementwise = False
        self.root = self  # the program's source (a sub-function's parent's)
        self.workspace = False  # whether it takes a workspace `ws` (see Storage)
        self.blocks = 0  # how many output blocks `ob<k>` it takes (see Storage)
        self.reserved: list = []  # what the workspace's top reserves (Storage.reserved)
        self.bare = False  # whether it returns its one output as it is, not in a tuple
        self.facts = DimFacts(self.globals)  # lengths its code has proven equal so far
        # the depth of the function's straight-line code, where facts learned hold below: 1,
        # or 2 in a repeat's loop (the same statements, run every iteration, at least once)
        self.straight_depth = 1
        self.repeats = 0  # how many repeats' loops the code being emitted sits in

    def child(self, name: str) -> ProgramSource:
        """A source for one extra function sharing this one's globals and name allocator.

        Its constants all become globals (a sub-program's function takes only its inputs).
        """
        child = ProgramSource(name)
        child.emitter.share_names(self.emitter)
        child.globals, child.imports = self.globals, self.imports
        child.facts = DimFacts(child.globals)
        child.arg_constants = None
        child.functions, child.jit_names = self.functions, self.jit_names
        child.sub_functions = self.sub_functions
        child._constants = self._constants
        child.shared_kernels = self.shared_kernels
        child.root = self.root
        child.specialized = self.specialized
        return child

    def constant(self, value) -> str:
        """The name of a global holding numpy scalar `value` (numba freezes it into the code)."""
        key = (type(value), repr(value.item()) if not np.isnan(value) else "nan")
        name = self._constants.get(key)
        if name is None:
            name = self._constants[key] = self.emitter.fresh("k")
            self.globals[name] = value
        return name

    def pool_run(self, dtype: str, values) -> tuple[str, int]:
        """(name of a 1-d C-contiguous array, offset) where numpy scalars `values` lie in a row
        (numba type Array(dtype, 1, 'C'), like the packed-input arrays)."""
        # (float16 values: the float32 holding them)
        values = [np.dtype(storage_dtype(dtype)).type(np.asarray(v).astype(dtype))
                  for v in values]
        key = (dtype, tuple("nan" if v != v else repr(v.item()) for v in values))
        pool = self.pools.setdefault(dtype, [])
        start = self._pool_runs.get(key)
        if start is None:
            start = self._pool_runs[key] = len(pool)
            pool.extend(values)
        return f"kq{list(self.pools).index(dtype)}", start

    def offset(self, k: int) -> str:
        """An int64 expression equal to `k` that numba does not type as a literal (a literal
        argument would compile a kernel once per value)."""
        self.uses_zero = True
        return f"zo + {k}"  # (+ 0 too: blocks that differ only in offsets look alike)

    def _prologue(self) -> list[str]:
        """Lines for the top of the function: the pools copied into locals, the zero."""
        lines = ["    zo = np.int64(0)"] if self.uses_zero else []
        if self.workspace:
            add, reserve = self.add_global("ws_add", ws_add), self.add_global("ws_reserve",
                                                                              ws_reserve)
            lines.append("    wq0 = 0")
            lines += [f"    wq{k + 1} = {add}(wq{k}, {shape}, {dtype})"
                      for k, (shape, dtype) in enumerate(self.reserved)]
            lines += [f"    wo = wq{len(self.reserved)}", f"    ws = {reserve}(ws, wo)"]
        for j, (dtype, values) in enumerate(self.pools.items()):
            name = self.add_global("kpool", np.array(values, dtype=storage_dtype(dtype)))
            lines.append(f"    kq{j} = {name}.copy()")
        return lines

    def callee_call(self, name: str, args) -> str:
        """The expression calling the program's own function `name` on `args` without
        linking its code into the caller's (callees.py)."""
        call = self.add_global("call", call_unlinked)
        return f"{call}({name}, ({''.join(f'{a}, ' for a in args)}))"

    def add_global(self, prefix: str, value, import_line: str | None = None) -> str:
        """Register a global used by the generated code and return its name."""
        for name, existing in self.globals.items():
            if existing is value and name.startswith(prefix):
                return name
        name = self.emitter.fresh(prefix)
        self.globals[name] = value
        if import_line:
            self.imports.add(import_line)
        return name


class StepContext(EmitContext):
    """What a kernel emitter sees: buffer names, static facts, and the source being built."""

    def __init__(self, src: ProgramSource, program, step, names, contiguous, storage,
                 varying=None):
        self.src = src
        # input position -> (row, column): a repeat's varying input, read by iteration from
        # the row of a table (see _emit_repeat)
        self._varying = varying or {}
        self.em = src.emitter
        self.program = program
        self.step = step
        self.node = step.node
        self.op = step.node.op
        self._names = names
        self._contiguous = contiguous
        self._storage = storage
        self._reads_checked = False
        self.producer = None  # an elementwise step's context this reduction computes

    def inp(self, i: int) -> str:
        return self._names[self.step.inputs[i]]

    def scalar(self, i: int) -> str | None:
        """A scalar expression for input `i` when it is known to hold one element, else None
        (an element read of the step, a[3], with its bounds checked once for the step)."""
        if i in self._varying:
            return "{}[{}]".format(*self._varying[i])
        index = self.step.element_index(i)
        if index is not None:
            if not self._reads_checked:
                self._reads_checked = True
                self._check_element_reads()
            return f"{self.inp(i)}[{', '.join(map(str, index))}]"
        return self._names.scalars.get(self.step.inputs[i])

    def _check_element_reads(self) -> None:
        """One bounds check per array and axis for all the step's element reads (the largest
        index and the most negative one), where the static shape does not prove them."""
        bounds: dict = {}  # (input position of the array's first read, axis) -> (hi, lo)
        first: dict = {}
        for i, index in self.step.element_reads:
            i = first.setdefault(self.step.inputs[i], i)
            for axis, k in enumerate(index):
                hi, lo = bounds.get((i, axis), (-1, 0))
                bounds[(i, axis)] = (max(hi, k), min(lo, k))
        for (i, axis), (hi, lo) in bounds.items():
            static = self.program.buffers[self.step.inputs[i]].var.type.shape[axis]
            if static is not None and hi < static and -lo <= static:
                continue
            n = f"{self.inp(i)}.shape[{axis}]"
            self.fail_if(any_of([f"{n} <= {hi}", f"{n} < {-lo}"]), "IndexError",
                         f"{self.op}: index {hi if hi >= -lo else lo} is out of bounds for "
                         f"axis {axis}")

    def set_scalar(self, j: int, expr: str) -> None:
        """Declare output `j` a one-element buffer equal to `expr`; emitted only if used."""
        bid = self.step.outputs[j]
        self._names.pop(bid, None)
        self._names.scalars[bid] = expr
        self._names.pending[bid] = (self._names.name_of(bid), self.node.outputs[j].ndim)

    def set_elements(self, j: int, dtype: str, elements: list[str]) -> None:
        """Declare 1-d output `j` the vector of scalar expressions `elements`; the array is
        built only if a reader asks for it (`inp`) rather than its `elements`."""
        bid = self.step.outputs[j]
        self._names.pop(bid, None)
        self._names.vectors[bid] = (dtype, list(elements))

    def elements(self, i: int) -> list[str] | None:
        """Scalar expressions of the elements of input `i`, where set_elements declared them."""
        entry = self._names.vectors.get(self.step.inputs[i])
        return None if entry is None else entry[1]

    def readers(self, j: int) -> list[tuple[object, int]]:
        """(step, input position) of every later step reading output `j`."""
        bid = self.step.outputs[j]
        return [(st, k) for st in self.program.steps[self.step.index + 1:]
                for k, b in enumerate(st.inputs) if b == bid]

    def out(self, j: int) -> str:
        return self._names[self.step.outputs[j]]

    def rename_out(self, j: int, name: str) -> None:
        """Output `j` is now the array named `name` (a C-contiguous view of its first one)."""
        self._names[self.step.outputs[j]] = name

    def element_of(self, i: int) -> tuple[str, int] | None:
        """(array, k) when input `i` is element k of a 1-d C-contiguous array variable: a 0-d
        input travelling in a packed-input array `pk{j}`, or an element read a[k] (k >= 0) of
        such an input. Runs of consecutive elements then travel as the array and an offset."""
        if i in self._varying:
            return self._varying[i]
        index = self.step.element_index(i)
        if index is not None:
            if len(index) == 1 and index[0] >= 0 and self.is_contiguous(i):
                self.scalar(i)  # (its bounds check)
                return self.inp(i), index[0]
            return None
        return self._names.packed.get(self.scalar(i))

    def is_contiguous(self, i: int) -> bool:
        """Whether input `i` is statically known to be C-contiguous."""
        return self._contiguous[self.step.inputs[i]] is True

    def layout(self, i: int) -> str:
        """numba's layout of input `i`: 'C', 'F' (a transpose of a C array) or 'A'."""
        value = self._contiguous[self.step.inputs[i]]
        return "C" if value is True else (value or "A")

    def reads_across(self, i: int) -> bool:
        """Whether input `i` (2-d or more) is a view whose last axis is not its storage's
        fastest: a transposed array ('F'), or a view through a DimShuffle that moves its
        input's last axis. A loop in the output's order reads it a row of storage apart
        each step (see tiles.py)."""
        if self.layout(i) == "F":
            return self.node.inputs[i].ndim >= 2
        buffers, b = self.program.buffers, self.step.inputs[i]
        while buffers[b].view_of is not None:
            op = buffers[b].var.owner.op
            if isinstance(op, DimShuffle):
                kept = [d for d in op.new_order if d != "x"]
                if kept and kept[-1] != op.input_ndim - 1:
                    return True
            b = buffers[b].view_of
        return False

    def set_layout(self, j: int, layout: str) -> None:
        """Declare the layout of output `j` (a view): 'C', 'F' or 'A'."""
        self._contiguous[self.step.outputs[j]] = True if layout == "C" else layout

    def set_last_axes_swapped(self, j: int, i: int) -> None:
        """Declare output `j` a view of C-contiguous input `i` with its last two axes swapped:
        each of its matrices is F-contiguous (attention's k^T, batched)."""
        self._contiguous[("swapped", self.step.outputs[j])] = self.step.inputs[i]

    def swapped_base(self, i: int) -> str | None:
        """The C-contiguous array whose last two axes input `i` swaps (set_last_axes_swapped),
        where this function holds it; else None."""
        base = self._contiguous.get(("swapped", self.step.inputs[i]))
        if base is None or self._contiguous.get(base) is not True or base not in self._names:
            return None
        return self._names[base]

    def constant_value(self, i: int):
        if i in self._varying:
            return None  # (a constant per iteration)
        return super().constant_value(i)

    def set_contiguous(self, j: int, value: bool = True) -> None:
        """Declare whether output `j` (a view) is C-contiguous."""
        self._contiguous[self.step.outputs[j]] = value

    def alloc(self, j: int, shape_expr: str) -> str:
        """Emit the allocation of output `j` with tuple expression `shape_expr`."""
        return self._storage.alloc(self.step.outputs[j], shape_expr)

    def alloc_in_branch(self, j: int, shape_expr: str) -> str | None:
        """Emit the allocation of output `j` where the code may not run (a branch in a loop:
        a loop's collected outputs, once the first step gave their rows' shape) when it needs
        no workspace offset: its slot's array is there already, or it is a new array. Else
        None (the caller allocates it another way)."""
        storage, bid = self._storage, self.step.outputs[j]
        slot = self.program.slots[bid] if self.program.slots else None
        if (slot is not None and slot not in storage.slot_storage and storage.workspace
                and slot not in storage.output_slots) or bid in storage.destinations:
            return None
        return storage.alloc(bid, shape_expr)

    def adopt(self, j: int, i: int) -> str | None:
        """Let output `j` be input `i` itself, when input i's storage dies at this step (see
        Storage.adopt); the output's name, or None (then allocate it)."""
        return self._storage.adopt(self.step.outputs[j], self.step.inputs[i], self.step.index)

    def check_equal(self, pairs, exc: str, message: str) -> None:
        """Emit `if a != b or ...: raise exc(message)` for the length expressions (a, b) of
        `pairs` that earlier code has not already proven equal (see dimfacts.py); below it,
        they are."""
        facts = self.src.facts
        todo = facts.unproven(pairs)
        if not todo:
            return
        self.fail_if(any_of(f"{a} != {b}" for a, b in todo), exc, message)
        if self.em.depth == self.src.straight_depth:  # (in a branch or loop, only there)
            for a, b in todo:
                facts.learn(a, b)

    def shape_is(self, j: int, dims) -> None:
        """Declare output `j`'s shape the length expressions `dims` (a view's)."""
        if self.em.depth == self.src.straight_depth:
            self.src.facts.shape_is(self.out(j), dims)

    def scratch(self, shape_expr: str, dtype: str) -> str:
        """A new array of `shape_expr` and `dtype` for this step alone (no buffer of the
        program): taken from the workspace where the function has one."""
        name = self.fresh("sc")
        storage = self._storage
        if storage.workspace:
            take = self.src.add_global("ws_take", ws_take)
            self.line(f"{name}, wo = {take}(ws, wo, {shape_expr}, {np_dtype(dtype)})")
            storage.root.used_workspace = True
            storage.root.takes += 1
        else:
            self.line(f"{name} = {empty_expr(self.src, shape_expr, dtype)}")
        return name

    def keeps_scalars(self) -> bool:
        """Whether 0-d elementwise results stay scalar locals (set_scalar): in loop bodies."""
        return self._names.scalar_results

    @contextlib.contextmanager
    def loop(self, var: str, count: str):
        """`for var in range(count):` around loop bodies (emit_body). The workspace arrays a
        body takes as it goes (ws_take) are taken again by every iteration: `wo` goes back."""
        root = self._storage.root
        takes, mark, depth = root.takes, len(self.em.lines), self.em.depth
        self.line(f"for {var} in range({count}):")
        with self.indent():
            yield
        if root.takes != takes:
            back = self.fresh("wl")
            self.em.lines.insert(mark, "    " * depth + f"{back} = wo")
            self.em.lines.insert(mark + 2, "    " * (depth + 1) + f"wo = {back}")

    def emit_body(self, program, inputs, destinations=None):
        """Emit `program`, a loop body, inline here (inside `loop`).

        `inputs`: per program input, ("scalar", expression) or ("array", name, layout,
        lengths), `lengths` the expressions its dims equal; `destinations`: {output position:
        (row expression, message, buffer)}, outputs to compute straight into that row
        (ValueError with the message if their shapes differ; `buffer`, where not None, the
        one computed there, which the output is a view of). Returns (per output ("scalar",
        expression) or ("array", name, whether it is C-contiguous), the output positions
        computed into their rows).
        """
        src, em = self.src, self.em
        names = _Names(em, prefix=em.fresh("l") + "b")
        names.scalar_results = True
        contiguous: dict = {}
        saved = src.facts, src.shared_ops, src.straight_depth
        src.facts, src.shared_ops = src.facts.copy(), program.shared_kernels()
        src.straight_depth = em.depth  # (one iteration's straight-line code)
        for b, binding in zip(program.inputs, inputs):
            if binding[0] == "scalar":
                names.scalars[b] = binding[1]
                names.pending[b] = (names.name_of(b), program.buffers[b].ndim)
                contiguous[b] = True  # (an array made of it, where a kernel needs one, is)
                continue
            _, name, layout, lengths = binding
            names[b] = name
            contiguous[b] = True if layout == "C" else (layout if layout == "F" else False)
            src.facts.shape_is(name, lengths)
        for buf in program.buffers:
            if buf.kind == "constant":
                names[buf.id] = src.add_global("const", to_storage(np.array(buf.var.data,
                                                                             order="C")))
                contiguous[buf.id] = True
        storage = Storage(program, names, src, self._storage.workspace, parent=self._storage)
        targets = {j: program.outputs[j] if target is None else target
                   for j, (_, _, target) in (destinations or {}).items()}
        storage.destinations = {targets[j]: (row, message, targets[j] != program.outputs[j])
                                for j, (row, message, _) in (destinations or {}).items()}
        try:
            _emit_units(program, src, names, contiguous, storage, label="body step")
        finally:
            src.facts, src.shared_ops, src.straight_depth = saved
        results = []
        for b in program.outputs:
            if b in names.scalars and not dict.__contains__(names, b):
                results.append(("scalar", names.scalars[b]))
            else:
                results.append(("array", names[b], contiguous.get(b) is True))
        directed = {j for j, b in targets.items() if b in storage.directed}
        return results, directed

    def sub_function(self, sub_program) -> str:
        """The name of the function computing `sub_program`, generated once per program.

        It takes the sub-program's inputs (C-contiguous arrays) and returns its outputs, each
        an array it owns: one as it is, several in a tuple.
        """
        name = self.src.sub_functions.get(id(sub_program))
        if name is None:
            name = self.src.emitter.fresh("sub")
            self.src.sub_functions[id(sub_program)] = name
            generate(sub_program, name, parent=self.src)
        return name

    def call_sub_function(self, sub_program, args) -> None:
        """Emit the call of `sub_program`'s function on `args`, its results as the outputs
        (one is returned as it is, several in a tuple)."""
        call = self.src.callee_call(self.sub_function(sub_program), args)
        if len(sub_program.outputs) == 1:
            self.line(f"{self.out(0)} = {call}")
            return
        res = self.fresh("r")
        self.line(f"{res} = {call}")
        for j in range(len(sub_program.outputs)):
            self.line(f"{self.out(j)} = {res}[{j}]")



def _body_copies(program) -> set:
    """The outputs of a sub-program returned as copies: all but the temporaries it computes
    (each once), not views or inplace results."""
    copies, seen = set(), set()
    for b in program.outputs:
        buf = program.buffers[b]
        if not (buf.kind == "temp" and buf.view_of is None and buf.takes_over is None
                and b not in seen):
            copies.add(b)
        seen.add(_inplace_base(program, b).id)
    return copies


def _inplace_base(program, b: int):
    """The buffer whose storage buffer `b` overwrites, through inplace results."""
    buf = program.buffers[b]
    while buf.takes_over is not None:
        buf = program.buffers[buf.takes_over]
    return buf


def generate(program, name: str = "program", parent: ProgramSource | None = None
             ) -> ProgramSource:
    """The source of one function computing `program` (its kernels registered in kernels.py).

    With a `parent`, the function is added to the parent's extra functions (a sub-program).
    The program's variant (schedule/variants.py) says whether its inputs' dims broadcast only
    where they are statically 1 (ProgramSource.specialized); a sub-program's follows its
    parent's.
    """
    src = ProgramSource(name) if parent is None else parent.child(name)
    if parent is None:
        src.specialized = program.variant == "specialized"
    src.shared_ops = program.shared_kernels()  # (the scheduler's decision)
    src.large = sum(1 for st in program.steps if st.node.outputs
                    and st.node.outputs[0].ndim >= 1) >= LARGE_FUNCTION_STEPS
    em = src.emitter
    names = _Names(em)
    contiguous: dict[int, bool] = {}
    args = []
    scalar_inputs = [k for k, b in enumerate(program.inputs) if program.buffers[b].ndim == 0]
    pack = parent is None and len(scalar_inputs) > PACK_THRESHOLD
    packing: dict[str, list[int]] = {}
    for k, b in enumerate(program.inputs):
        contiguous[b] = True  # the runtime passes C-contiguous inputs
        if pack and k in scalar_inputs:
            slots = packing.setdefault(program.buffers[b].dtype, [])
            j = list(packing).index(program.buffers[b].dtype)
            names.scalars[b] = f"pk{j}[{len(slots)}]"
            names.packed[names.scalars[b]] = (f"pk{j}", len(slots))
            names.pending[b] = (f"in{k}", 0)
            slots.append(k)
            continue
        names[b] = f"in{k}"
        if program.buffers[b].ndim == 0:
            names.scalars[b] = f"in{k}[()]"
        args.append(names[b])
    args.extend(f"pk{j}" for j in range(len(packing)))
    src.packing = list(packing.items())
    for buf in program.buffers:
        if buf.kind != "constant":
            continue
        # (np.ascontiguousarray makes 0-d arrays 1-d)
        data = to_storage(np.array(buf.var.data, order="C"))
        if data.size <= INLINE_CONSTANT_LIMIT or src.arg_constants is None:
            names[buf.id] = src.add_global("const", data)
        else:
            names[buf.id] = f"carg{len(src.arg_constants)}"
            src.arg_constants.append(data)
            args.append(names[buf.id])
        contiguous[buf.id] = True

    em.reserve(args + [f"in{k}" for k in range(len(program.inputs))])
    # temporaries live in a workspace kept across calls (see Storage); config.workspace False
    # (VERGLAS_WORKSPACE=0) makes every call allocate them afresh (nothing held between calls)
    storage = Storage(program, names, src, workspace=parent is None and config.workspace)

    _emit_units(program, src, names, contiguous, storage)
    # (the scheduler's decision: an output owns its storage, or a copy is returned; a
    # sub-program's outputs are copied into their places by its caller)
    copies = set(program.returned_copies()) if parent is None else _body_copies(program)
    outs = [f"{names[b]}.copy()" if b in copies or b in names.scalars else names[b]
            for b in program.outputs]
    src.workspace, src.reserved = storage.used_workspace, storage.reserved
    if src.workspace:  # the last argument; given back with the bytes a call should have
        args.append("ws")
        outs += ["ws", "wo"]
    src.blocks = len(storage.blocks)  # then the outputs' blocks: whether one was too small
    if src.blocks:  # (for an output of BLOCK_MIN_BYTES or more), and the bytes each needed
        args += [block for block, _ in storage.blocks]
        misfit = em.fresh("bm")
        em.line(f"{misfit} = " + " or ".join(f"({need} > {block}.size and {need} >= "
                                          f"{BLOCK_MIN_BYTES})" for block, need in storage.blocks))
        outs += [misfit] + [need for _, need in storage.blocks]
    # one array returned bare: numba boxes no tuple around it (~0.1 us of every call)
    src.bare = len(outs) == 1  # (a sub-program's function too: its callers take it as it is)
    em.line(f"return {outs[0]}" if src.bare else
            f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")

    header = f"def {name}({', '.join(args)}):"
    body = "\n".join([header] + src._prologue() + em.lines)
    if parent is not None:
        src.functions.append(body)
        src.jit_names.append(name)
    if parent is None:
        wide = src.add_global("wide", prefer_wide_vectors)
        src.text = "\n\n".join(_first_line(read_lengths_once(text), f"    {wide}()")
                                for text in src.functions + [body])
    return src


def _emit_units(program, src: ProgramSource, names: _Names, contiguous: dict,
                storage: Storage, label: str = "step") -> None:
    """The code of `program`'s units, in order, into `src` (a whole function's body, or a loop
    body inline in one: `label` "body step" tells its comments apart)."""
    em = src.emitter
    fused = {p: r for r, p in program.reduce_maps}

    def emit_unit(unit, varying=None) -> None:
        members = [unit] if isinstance(unit, Step) else unit.steps
        contexts = []
        for step in members:
            if step.index in fused:
                em.line(f"# {label} {step.index}: {step.node.op} (in the loop of {label} "
                        f"{fused[step.index]})")
                return
            for b in step.outputs:
                names[b] = names.name_of(b)
                contiguous[b] = program.buffers[b].view_of is None
            em.line(f"# {label} {step.index}: {step.node.op}")
            contexts.append(StepContext(src, program, step, names, contiguous, storage,
                                        varying))
        if isinstance(unit, Step):
            producer = program.producer_in(unit.index)
            if producer is not None:
                contexts[0].producer = StepContext(src, program, producer, names, contiguous,
                                                   storage)
            emit(unit.node.op, contexts[0])
        else:
            em.line(f"# {label}s {unit.first}-{unit.last}: one loop over rows")
            emit_row_group(unit, contexts)

    for unit in program.units():
        if isinstance(unit, Repeat):
            for step in program.steps[unit.first + unit.period:unit.last_step + 1]:
                for b in step.outputs:
                    contiguous[b] = program.buffers[b].view_of is None
            _emit_repeat(unit, program, src, names, emit_unit, label)
        else:
            emit_unit(unit)


def _emit_repeat(rep: Repeat, program, src: ProgramSource, names: _Names, emit_unit,
                 label: str = "step") -> None:
    """The scheduler's Repeat as one loop: its body's steps emitted once, each carried buffer
    a loop variable holding the outer buffer first and the body's output after."""
    em = src.emitter
    body = program.repeat_body(rep)
    em.line(f"# {label}s {rep.first}-{rep.last_step}: {rep.count} iterations of {label}s "
            f"{body[0].index}-{body[-1].index}")
    hidden = []
    for x, _ in rep.carried:
        var = em.fresh("rc")
        em.line(f"{var} = {names[x]}")
        if x not in rep.unproven:  # (the scheduler's check)
            src.facts.same_shape(var, names[x], program.buffers[x].ndim)
        hidden.append((x, var, dict.pop(names, x), names.scalars.pop(x, None),
                       names.vectors.pop(x, None)))
        names[x] = var
    tables = _varying_tables(rep, program, src, names)
    rp = em.fresh("rp")
    em.line(f"for {rp} in range({rep.count}):")
    with em.indent():
        src.straight_depth += 1
        src.repeats += 1
        outer = {}
        for array, d in rep.shifted:  # the body reads a[i] of a[d * rp:]
            outer[array] = names[array]
            view = em.fresh("ra")
            em.line(f"{view} = {names[array]}[{d} * {rp}:]")
            names[array] = view
        varying: dict[int, dict] = {}
        for table, columns in tables:
            row = em.fresh("rw")
            em.line(f"{row} = {table}[{rp}]")
            for c, (j, i) in enumerate(columns):
                varying.setdefault(j, {})[i] = (row, c)
                names.packed[f"{row}[{c}]"] = (row, c)
        for j, step in enumerate(body):
            emit_unit(step, varying.get(j))
        for (_, y), (_, var, *_) in zip(rep.carried, hidden):
            em.line(f"{var} = {names[y]}")
        src.straight_depth -= 1
        src.repeats -= 1
    names.update(outer)
    for x, _, name, scalar, vector in hidden:  # X as it was outside the loop
        names[x] = name
        for table, value in ((names.scalars, scalar), (names.vectors, vector)):
            if value is not None:
                table[x] = value
    for b0, last in rep.last:  # the last block's buffers: the last iteration's values
        if b0 in names.vectors:
            names.vectors[last] = names.vectors[b0]
        if b0 in names.scalars:
            names.scalars[last] = names.scalars[b0]
            if b0 in names.pending:
                names.pending[last] = (names.name_of(last), names.pending[b0][1])
        if dict.__contains__(names, b0):
            names[last] = names[b0]


def _varying_tables(rep: Repeat, program, src: ProgramSource, names: _Names) -> list:
    """Per dtype, the (count, m) table of the values the body's m varying inputs of that dtype
    take, row k for iteration k, in the body's order of reads (so a step reading a run of them
    reads a run of one row): [(table name, [(body position, input position) per column])].

    Constants make a global table; packed inputs one gather from their packed array; other
    inputs are written element by element."""
    em = src.emitter
    by_key: dict = {}
    for j, i, bs in rep.varying:
        buf = program.buffers[bs[0]]
        by_key.setdefault((buf.dtype, buf.kind), []).append((j, i, bs))
    tables = []
    for (dtype, kind), columns in by_key.items():
        table = em.fresh("rv")
        shape = f"({rep.count}, {len(columns)})"
        cells = [[bs[k] for *_, bs in columns] for k in range(rep.count)]
        exprs = [[names.scalars.get(b) for b in row] for row in cells]
        packed = [names.packed.get(e) for row in exprs for e in row]
        if kind == "constant":
            values = np.array([[np.asarray(program.buffers[b].var.data).reshape(-1)[0]
                                for b in row] for row in cells]).astype(dtype)
            em.line(f"{table} = {src.add_global('rvc', to_storage(values))}.copy()")
        elif packed and all(loc is not None and loc[0] == packed[0][0] for loc in packed):
            at = [loc[1] for loc in packed]
            if at == list(range(at[0], at[0] + len(at))):  # a run: a slice, no gather
                em.line(f"{table} = {packed[0][0]}[{at[0]}:{at[0] + len(at)}].reshape({shape})")
            else:
                at = src.add_global("rvi", np.array(at, np.int64))
                em.line(f"{table} = {packed[0][0]}[{at}].reshape({shape})")
        else:
            em.line(f"{table} = np.empty({shape}, {np_dtype(dtype)})")
            for k, row in enumerate(cells):
                for c, b in enumerate(row):
                    value = names.scalars.get(b)
                    if value is None:
                        value = f"{names[b]}[{', '.join('0' * program.buffers[b].ndim) or '()'}]"
                    em.line(f"{table}[{k}, {c}] = {value}")
        tables.append((table, [(j, i) for j, i, _ in columns]))
    return tables


def _first_line(function: str, line: str) -> str:
    """`function`'s source with `line` as the first statement of its body."""
    header, _, body = function.partition("\n")
    return f"{header}\n{line}\n{body}"
