"""`compile()` and Function: the callable users hold (argument checks, the call, pickling)."""

from __future__ import annotations

import operator

import numpy as np

from verglas import backend as backends
from verglas import cache, rewrite, schedule  # (modules: functions looked up at each call)
from verglas.graph.basic import Constant, Variable
from verglas.graph.fg import FunctionGraph
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.printing import dprint
from verglas.graph.types import TensorType

__all__ = ["compile", "Function", "asnumpy"]


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
    # the device selects a backend, the mode the rewrites (a mode a backend owns: none)
    backend, rewrites = backends.select(device, mode)
    names = [v.name or f"input{k}" for k, v in enumerate(inputs)]
    if not rewrites:  # the graph as written (nothing to store: freezing is all it costs)
        return Function(freeze(inputs, outputs), names, single, device, mode)
    mode_key = mode if isinstance(mode, str) else repr((sorted(mode.include),
                                                        sorted(mode.exclude)))
    key = cache.cache_key(freeze(inputs, outputs).fingerprint(), mode_key, backend.name)
    directory = cache.entry_dir(backend.name, key)
    entry = directory / "function.pkl"

    def optimized() -> tuple[FrozenFunctionGraph, object]:
        """The optimized graph and its Program: stored by the first process to compile them
        (a second one skips the rewrites and the scheduling), else computed and stored."""
        cached = cache.load_pickle(entry)
        if isinstance(cached, dict) and isinstance(cached.get("graph"), FrozenFunctionGraph):
            return cached["graph"], cached.get("program")
        graph = _optimize(inputs, outputs, mode)
        program = _lower(graph, names, backend) if backend.lowers else None
        cache.store_pickle(entry, {"graph": graph, "program": program})
        cache.store_pickle(directory / "inputs.pkl",
                           [(v.type.dtype, v.type.shape) for v in graph.inputs])
        return graph, program

    # a warm start needs only the input types and the backend's stored code: the graph and
    # Program (tens of ms to unpickle for thousands of nodes) load if something asks for them
    # (a backend that stores no code asks for them at once)
    types = cache.load_pickle(directory / "inputs.pkl") if entry.exists() else None
    if isinstance(types, list) and len(types) == len(inputs):
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


def _lower(graph, names, backend):
    """The Program of `graph`, in the variant `backend` runs first."""
    return backend.program(schedule.lower(graph, tuple(names)))


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
        """The scheduled Program (None where the backend runs the frozen graph itself, as the
        reference executor does)."""
        if not self._backend.lowers:
            return None
        if self._program is None:
            self._program = _lower(self.graph, self.input_names, self._backend)
        return self._program

    def _code(self):
        """What the backend runs: the Program, or the optimized frozen graph."""
        return self.program if self._backend.lowers else self.graph

    def _build(self):
        self._backend, _ = backends.select(self.device, self.mode)
        self._specs = [(np.dtype(t.dtype), t.ndim,
                        t.shape if any(s is not None for s in t.shape) else None)
                       for t in self._input_types]
        self._runner = self._backend.runner(self._code, self.cache_key, self._input_types)
        self._contiguous = self._runner.contiguous
        self._fast = (self._runner.fast_call(self._specs, self.single, self._call_checked)
                      or self._call_checked)

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
        return outputs[0] if self.single else outputs

    def _convert(self, k, ttype, arg):
        label = f"input {k} ({self.input_names[k]!r})"
        if _is_device_array(arg):
            accepted = self._runner.accept(ttype, arg, label)  # zero copy, checked like filter
            if accepted is not None:
                return accepted
            arg = asnumpy(arg)  # (a backend that takes numpy arrays only)
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

    def source(self) -> str:
        """The generated code that runs, readable on its own: the CPU backend's numba module,
        the CUDA backend's host function and kernels; for the reference executor, what it
        runs instead (no code is generated)."""
        return self._runner.source()

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
