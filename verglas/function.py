"""`compile()` and Function: the callable users hold (argument checks, the call, pickling)."""

from __future__ import annotations

import builtins
import hashlib
import operator

import numpy as np

from verglas import cache, rewrite, schedule  # (modules: functions looked up at each call)
from verglas.cpu_backend.runtime import NO_WORKSPACE, build_runner, keep_workspace
from verglas.graph.basic import Constant, Variable
from verglas.graph.fg import FunctionGraph
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.printing import dprint
from verglas.graph.reference import ReferenceRunner
from verglas.graph.types import TensorType

__all__ = ["compile", "Function", "asnumpy"]

DEVICES = ("cpu", "cuda")
MODES = ("fast_run", "fast_compile", "reference")


def compile(inputs, outputs, device: str = "cpu", mode: str = "fast_run") -> Function:
    """Compile the graph from `inputs` to `outputs` into a Function.

    Examples
    --------
    >>> import verglas as vg
    >>> x = vg.tensor("x", shape=(None,), dtype="float64")
    >>> f = vg.compile([x], vg.exp(x) + 1)
    >>> f([0.0, 1.0])
    array([2.        , 3.71828183])
    """
    inputs = _check_inputs(inputs)
    single = isinstance(outputs, Variable)
    outputs = [outputs] if single else list(outputs)
    for k, out in enumerate(outputs):
        if not isinstance(out, Variable):
            raise TypeError(f"compile: output {k} is {type(out).__name__}, not a variable")
    if device not in DEVICES:
        raise ValueError(f"compile: device must be one of {DEVICES}, not {device!r}")
    if not (isinstance(mode, rewrite.Mode) or isinstance(mode, str) and mode in MODES):
        raise ValueError(f"compile: mode must be one of {MODES} or a rewrite Mode, not {mode!r}")
    names = [v.name or f"input{k}" for k, v in enumerate(inputs)]
    if mode == "reference":
        return Function(freeze(inputs, outputs), names, single, device, mode)
    mode_key = mode if isinstance(mode, str) else repr((sorted(mode.include),
                                                        sorted(mode.exclude)))
    key = cache.cache_key(freeze(inputs, outputs).fingerprint(), mode_key, device)
    directory = cache.entry_dir(device, key)
    entry = directory / "function.pkl"

    def optimized() -> tuple[FrozenFunctionGraph, object]:
        """The optimized graph and its Program: stored by the first process to compile them
        (a second one skips the rewrites and the scheduling), else computed and stored."""
        cached = cache.load_pickle(entry)
        if isinstance(cached, dict) and isinstance(cached.get("graph"), FrozenFunctionGraph):
            return cached["graph"], cached.get("program")
        graph = _optimize(inputs, outputs, mode)
        program = _lower(graph, names)
        cache.store_pickle(entry, {"graph": graph, "program": program})
        cache.store_pickle(directory / "inputs.pkl",
                           [(v.type.dtype, v.type.shape) for v in graph.inputs])
        return graph, program

    # a warm start needs only the input types and the backend's stored code: the graph and
    # Program (tens of ms to unpickle for thousands of nodes) load if something asks for them
    types = cache.load_pickle(directory / "inputs.pkl") if entry.exists() else None
    if device == "cpu" and isinstance(types, list) and len(types) == len(inputs):
        return Function(None, names, single, device, mode, key, load=optimized,
                        input_types=[TensorType(d, shape) for d, shape in types])
    graph, program = optimized()
    return Function(graph, names, single, device, mode, key, program=program)


def _check_inputs(inputs) -> list:
    if isinstance(inputs, Variable):
        inputs = [inputs]
    inputs = list(inputs)
    for k, var in enumerate(inputs):
        if not isinstance(var, Variable) or not isinstance(var.type, TensorType):
            raise TypeError(f"compile: input {k} is {var!r}, not a tensor variable")
        if isinstance(var, Constant) or var.owner is not None:
            raise TypeError(f"compile: input {k} ({var!r}) must be a root variable (built by "
                            f"vg.tensor or vg.scalar), not a constant or a computed value")
    if len({id(v) for v in inputs}) != len(inputs):
        raise ValueError("compile: an input variable is listed twice")
    return inputs


def _optimize(inputs, outputs, mode) -> FrozenFunctionGraph:
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    rewrite.rewrite_graph(fgraph, mode)
    # inplace nodes own their buffers: identical twins must not be interned into one node
    inplace = any(node.op.destroy_map for node in fgraph.apply_nodes)
    return fgraph.freeze(dedup_nodes=not inplace)


def _lower(graph, names):
    return schedule.lower(graph, tuple(names))


class Function:
    """A compiled program: call it with arrays; `graph` is the optimized frozen graph and
    `program` its schedule (a warm start loads both only when asked for)."""

    def __init__(self, graph: FrozenFunctionGraph | None, input_names, single: bool,
                 device: str, mode, cache_key: str | None = None, program=None, load=None,
                 input_types=None):
        self._load = load
        self.input_names = list(input_names)
        self._attach(graph, program)
        self.single = single
        self.device = device
        self.mode = mode
        self.cache_key = cache_key
        self._input_types = (input_types if input_types is not None
                             else [v.type for v in graph.inputs])
        self._build()

    def _attach(self, graph, program) -> None:
        """Hold the optimized graph (None: not loaded yet) and its Program, if it is one."""
        self._graph = graph
        if program is not None and program.graph is graph and graph is not None:
            program = program.with_input_names(self.input_names)  # a cached one: our names
        else:
            program = None  # lowered when asked for
        self._program = program

    @property
    def graph(self) -> FrozenFunctionGraph:
        if self._graph is None:
            self._attach(*self._load())
        return self._graph

    @property
    def program(self):
        """The scheduled Program (None in reference mode)."""
        if self.mode == "reference":
            return None
        if self._program is None:
            self._program = _lower(self.graph, self.input_names)
        return self._program

    def _build(self):
        self._specs = [(np.dtype(t.dtype), t.ndim,
                        t.shape if any(s is not None for s in t.shape) else None)
                       for t in self._input_types]
        self._contiguous = False
        self._fast = self._call_checked
        if self.mode == "reference":
            self._runner = ReferenceRunner(self.graph)
            return
        if self.device == "cpu":
            self._runner = build_runner(lambda: self.program, self.cache_key,
                                        [(t.dtype, t.ndim) for t in self._input_types])
            self._runner.compile()
            self._contiguous = True
            if not self._runner.converts:  # (float16 arguments go through the runner)
                self._fast = _fast_call(self)
            return
        else:
            # imported when a program asks for it: most processes never load the CUDA backend
            from verglas.cuda_backend.runtime import build_runner as build_cuda_runner

            self._runner = build_cuda_runner(self.program, self.cache_key)

    # -- the call --------------------------------------------------------------------------
    # f(*args) calls self._fast(*args) with no frame of its own in between: Python looks
    # `__call__` up on the type and calls what the descriptor returns (~0.1 us a call)
    __call__ = property(operator.attrgetter("_fast"), doc="Call the program with arrays.")

    def _call_checked(self, *args):
        """The call with every argument checked and converted (the fast path's fallback)."""
        specs = self._specs
        if len(args) != len(specs):
            n = len(specs)
            raise TypeError(f"Function takes {n} input{'s' if n != 1 else ''} "
                            f"({', '.join(self.input_names)}), got {len(args)}")
        values = list(args)
        for k, (arg, (dtype, ndim, static)) in enumerate(zip(args, specs)):
            # fast path: an array that already fits (the common case costs a few checks)
            if (type(arg) is np.ndarray and arg.dtype == dtype and arg.ndim == ndim
                    and (not self._contiguous or arg.flags.c_contiguous
                         and arg.flags.writeable)
                    and (static is None or all(s is None or s == n
                                               for s, n in zip(static, arg.shape)))):
                continue
            value = self._convert(k, self._input_types[k], arg)
            if self._contiguous and not (value.flags.c_contiguous and value.flags.writeable):
                # (the program's one signature takes writable C-contiguous arrays)
                value = np.array(value, order="C")
            values[k] = value
        outputs = self._runner(values)
        if self.mode == "reference":
            outputs = _owned(outputs, values)
        return outputs[0] if self.single else outputs

    def _convert(self, k, ttype, arg):
        label = f"input {k} ({self.input_names[k]!r})"
        if _is_device_array(arg):
            if self.device == "cuda" and self.mode != "reference":
                return self._runner.accept(ttype, arg, label)  # zero copy, checked like filter
            arg = asnumpy(arg)
        if not isinstance(arg, np.ndarray):
            try:
                arg = np.asarray(arg)
            except Exception as exc:  # e.g. ragged lists
                raise TypeError(f"{label}: cannot convert {type(arg).__name__} to an array: "
                                f"{exc}") from None
            if arg.dtype == object:
                raise TypeError(f"{label}: cannot convert the value to an array of numbers")
        return ttype.filter(arg, label)

    # -- what users inspect --------------------------------------------------------------------
    def dprint(self, file=None):
        """Print the optimized graph."""
        return dprint(self.graph, file=file)

    def __repr__(self):
        return (f"Function({', '.join(self.input_names)} -> {len(self.graph.outputs)} outputs, "
                f"device={self.device!r}, {len(self.graph.toposort())} nodes)")

    # -- pickling: the optimized graph travels; nothing is rewritten again -----------------------
    def __getstate__(self):
        # the optimized graph and its scheduled Program travel: nothing is rewritten or
        # lowered again on the other side, only the backend's code is rebuilt (or loaded)
        return {"graph": self.graph, "input_names": self.input_names, "single": self.single,
                "device": self.device, "mode": self.mode if isinstance(self.mode, str) else
                "fast_run", "cache_key": self.cache_key, "program": self.program}

    def __setstate__(self, state):
        graph, program = state.pop("graph"), state.pop("program", None)
        self._load = None
        self.__dict__.update(state)
        self._attach(graph, program)
        self._input_types = [v.type for v in graph.inputs]
        self._build()


def _fast_call(function: Function):
    """A generated wrapper that hands arrays that already fit straight to the jitted program.

    It checks exactly what the program's one signature assumes (ndarray, dtype, ndim, C order,
    writable, static dims) and falls back to the checked call for anything else. (numba's
    dispatcher would refuse the rest too, since it may compile no other signature, but its
    TypeError costs ~50 us where these checks cost ~0.2 us.)
    """
    runner = function._runner
    n = len(function._specs)
    names = [f"a{k}" for k in range(n)]
    conds = []
    for k, (name, (dtype, ndim, static)) in enumerate(zip(names, function._specs)):
        conds.append(f"type({name}) is ndarray and {name}.dtype is D{k} and "
                     f"{name}.ndim == {ndim}")
        if k in runner.direct:  # (packed 0-d inputs travel in a new array)
            conds.append(f"(F := {name}.flags).c_contiguous and F.writeable")
        for axis, dim in enumerate(static or ()):
            if dim is not None:
                conds.append(f"{name}.shape[{axis}] == {dim}")
    consts = "".join(f", C{k}" for k in range(len(runner.arg_constants)))
    unpack = f"{', '.join(names)}{',' if n == 1 else ''} = args" if n else "pass"
    test = " and ".join(conds) if conds else "True"
    call_args = [names[k] for k in runner.direct]
    call_args += [f"array(({''.join(names[k] + ', ' for k in ks)}), P{j})"
                  for j, (_, ks) in enumerate(runner.packing)]
    take = give = ""
    if runner.workspace:  # see CPURunner: one workspace per call running at once
        result = "r[0]" if function.single else "list(r[:-2])"
        take = "            w = POOL.pop() if POOL else NO_WS\n"
        give = "            KEEP(POOL, r[-2], r[-1])\n"
    elif runner.bare:
        result = "r" if function.single else "[r]"
    else:
        result = "r[0]" if function.single else "list(r)"
    call = f"JIT({', '.join(call_args)}{consts}{', w' if runner.workspace else ''})"
    source = (f"def fast(*args):\n"
              f"    if len(args) == {n}:\n"
              f"        {unpack}\n"
              f"        if {test}:\n"
              f"{take}"
              f"            try:\n"
              f"                r = {call}\n"
              f"            except RETRY:\n"  # broadcasting at run time: the general program
              f"                return checked(*args)\n"
              f"{give}"
              f"            return {result}\n"
              f"    return checked(*args)\n")
    namespace = {"ndarray": np.ndarray, "JIT": runner.jitted, "checked": function._call_checked,
                 "array": np.array, "RETRY": getattr(runner, "retry_on", ()),
                 "POOL": runner.pool, "NO_WS": NO_WORKSPACE, "KEEP": keep_workspace}
    namespace.update({f"P{j}": np.dtype(d) for j, (d, _) in enumerate(runner.packing)})
    namespace.update({f"D{k}": spec[0] for k, spec in enumerate(function._specs)})
    namespace.update({f"C{k}": c for k, c in enumerate(runner.arg_constants)})
    if function.cache_key is None:
        code = builtins.compile(source, "<verglas fast call>", "exec")
    else:  # stored beside the program: a warm start loads its bytecode
        # named by its text: one graph compiled for one output or for a list of them has two
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        path = cache.entry_dir(function.device, function.cache_key) / f"fastcall-{digest}.py"
        if not path.exists() or path.read_text() != source:
            cache.write_atomic(path, source.encode())
        code = cache.code_of(path)
    exec(code, namespace)
    return namespace["fast"]


def _owned(outputs: list, inputs: list) -> list:
    """Outputs the caller owns: copies of anything aliasing an input, a constant or another
    output, and of read-only arrays."""
    result = []
    for k, out in enumerate(outputs):
        out = np.asarray(out)
        if (not out.flags.writeable or not out.flags.owndata
                or any(np.may_share_memory(out, a) for a in inputs)
                or any(np.may_share_memory(out, o) for o in result)):
            out = out.copy()
        result.append(out)
    return result


def _is_device_array(arg) -> bool:
    """A GPU array: `__cuda_array_interface__`, or DLPack on a CUDA device (kDLCUDA = 2,
    kDLCUDAManaged = 13)."""
    if isinstance(arg, np.ndarray):
        return False
    if hasattr(arg, "__cuda_array_interface__"):
        return True
    device = getattr(arg, "__dlpack_device__", None)
    try:
        return callable(device) and device()[0] in (2, 13)
    except Exception:
        return False


def asnumpy(array) -> np.ndarray:
    """Any result (numpy or device array) as a numpy array."""
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    if callable(get) and hasattr(array, "__cuda_array_interface__"):
        return get()
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    return np.asarray(array)
