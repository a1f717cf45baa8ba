"""`compile()` and Function: the callable users hold (argument checks, the call, pickling)."""

from __future__ import annotations

import operator
import threading
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from verglas import artifact
from verglas import backend as backends
from verglas import cache, rewrite, schedule  # (modules: functions looked up at each call)
from verglas.graph.basic import Constant, Variable
from verglas.graph.fg import FunctionGraph
from verglas.graph.frozen import FrozenFunctionGraph, freeze
from verglas.graph.printing import dprint
from verglas.graph.types import TensorType
from verglas.logger import CompileLog, apply_config, logger

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
    apply_config()
    record = CompileLog(f"compile({', '.join(names)}) on {backend.name}")
    if not rewrites:  # the graph as written (nothing to store: freezing is all it costs)
        with record.stage("freeze"):
            graph = freeze(inputs, outputs)
        with record.stage("backend codegen+compile"):
            function = Function(graph, names, single, device, mode)
        record.done(f"not used (mode {mode!r} runs the graph as written)")
        return function
    mode_key = mode if isinstance(mode, str) else repr((sorted(mode.include),
                                                        sorted(mode.exclude)))
    with record.stage("freeze+fingerprint"):
        fingerprint = freeze(inputs, outputs).fingerprint()
    if cache.usable() is None:  # a directory refused (warned): nothing read, nothing stored
        graph, program = _optimized_now(inputs, outputs, mode, names, backend, record)
        with record.stage("backend codegen+compile"):
            function = Function(graph, names, single, device, mode, program=program)
        record.done("off (the cache directory is refused)")
        return function
    key = cache.cache_key(fingerprint, mode_key, backend.name)
    directory = cache.entry_dir(backend.name, key)
    entry = directory / "function.pkl"
    reads: list[str | None] = []  # why each read of the stored graph failed (None: it did not)

    def optimized() -> tuple[FrozenFunctionGraph, object]:
        """The optimized graph and its Program: stored by the first process to compile them
        (a second one skips the rewrites and the scheduling), else computed and stored."""
        with record.stage("load graph"):
            cached, why = cache.read_pickle(entry)
        if isinstance(cached, dict) and isinstance(cached.get("graph"), FrozenFunctionGraph):
            reads.append(None)
            return cached["graph"], cached.get("program")
        reads.append(why or "unreadable entry (function.pkl)")
        if record.finished:  # (asked for after compile returned, by a first broadcasting call)
            logger.info("%s: the stored graph cannot be read (%s): optimizing it again",
                        record.label, reads[-1])
        graph, program = _optimized_now(inputs, outputs, mode, names, backend, record)
        with record.stage("store graph"):
            cache.store_pickle(entry, {"graph": graph, "program": program})
            _store_input_types(directory, graph)
        return graph, program

    # a warm start needs only the input types and the backend's stored code: the graph and
    # Program (tens of ms to unpickle for thousands of nodes) load if something asks for them
    # (a backend that stores no code asks for them at once)
    with record.stage("cache lookup"):
        if entry.exists():
            types, why = cache.read_pickle(directory / "inputs.pkl")
        else:
            types, why = None, cache.miss_reason(backend.name, key)
    warm = isinstance(types, list) and len(types) == len(inputs)
    if warm:
        load, input_types = optimized, [TensorType(d, shape) for d, shape in types]
    else:
        graph, program = optimized()
        if not (directory / "inputs.pkl").exists():  # (lost, the stored graph read)
            _store_input_types(directory, graph)
        load, input_types = (lambda: (graph, program)), [v.type for v in graph.inputs]
    asked: list[bool] = []

    def code() -> tuple[FrozenFunctionGraph, object]:
        asked.append(True)
        return load()

    with record.stage("backend load") as stage:
        function = Function(None, names, single, device, mode, key, load=code,
                            input_types=input_types)
        if asked:  # the backend had no stored code to load: it generated and compiled it
            stage.name = "backend codegen+compile"
    if not warm or asked and getattr(function._runner, "directory", None) is not None:
        with record.stage("cache accounting"):
            cache.record(backend.name, key)  # (what was stored counted: LRU past the limit)
    if warm:
        record.done("hit" if not asked else "hit for the optimized graph (the backend "
                    "generated its code)")
    else:
        why = why or reads[0] or "unreadable entry (inputs.pkl)"
        record.done(f"miss ({why})" if reads[0] else f"miss ({why}; the optimized graph read)")
    return function


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


def _optimized_now(inputs, outputs, mode, names, backend, record: CompileLog):
    """The optimized graph and its Program (if the backend lowers), computed."""
    with record.stage("rewrite"):
        graph = _optimize(inputs, outputs, mode)
    if not backend.lowers:
        return graph, None
    with record.stage("schedule"):
        return graph, _lower(graph, names, backend)


def _store_input_types(directory, graph) -> None:
    cache.store_pickle(directory / "inputs.pkl",
                       [(v.type.dtype, v.type.shape) for v in graph.inputs])


def _runner(backend, code_of, key: str | None, input_types):
    """The backend's Runner; with a cache key, its code stored and loaded where the cache
    directory is trusted (else built in memory), and built in memory when a file the backend
    was reading or writing vanished (a `cache clear` or prune in another process)."""
    if key is not None and cache.usable() is None:
        key = None
    try:
        return backend.runner(code_of, key, input_types)
    except OSError as exc:
        if key is None:
            raise
        logger.warning("%s backend: its cache entry %s could not be used (%s); compiling in "
                       "memory", backend.name, key, exc)
        return backend.runner(code_of, None, input_types)


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
            graph = self.graph  # (loading the graph attaches its stored or computed Program)
            if self._program is None:
                self._program = _lower(graph, self.input_names, self._backend)
        return self._program

    def _code(self):
        """What the backend runs: the Program, or the optimized frozen graph."""
        return self.program if self._backend.lowers else self.graph

    def _build(self):
        self._backend, _ = backends.select(self.device, self.mode)
        self._specs = [(np.dtype(t.dtype), t.ndim,
                        t.shape if any(s is not None for s in t.shape) else None)
                       for t in self._input_types]
        self._runner = _runner(self._backend, self._code, self.cache_key, self._input_types)
        RUNNER_BUILDS[self.cache_key] += 1
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
            if self._contiguous and not value.flags.c_contiguous:
                # (the program's one signature takes writable C-contiguous arrays)
                value = np.array(value, order="C")
            elif self._contiguous and not value.flags.writeable:
                value = _writable_view(value)  # (a program never writes its inputs)
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
        if not isinstance(arg, np.ndarray) and hasattr(type(arg), "__dlpack__"):
            try:  # a host array exporting its memory (torch, jax...): a view, no copy
                arg = np.from_dlpack(arg)
            except Exception:  # noqa: BLE001 -- one numpy cannot view: np.asarray's turn
                pass
        if not isinstance(arg, np.ndarray):
            try:  # (the array interface and __array__ give views where they can)
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
        key = state["cache_key"] and (state["cache_key"], state["device"], state["mode"],
                                      state["single"], tuple(state["input_names"]))
        with _unpickled_lock:
            twin = _UNPICKLED.get(key)
            if twin is not None:  # the same program unpickled before: share its runner
                _UNPICKLED.move_to_end(key)
                self.__dict__.update(twin.__dict__)
                return
            self._load = None
            self.__dict__.update(state)
            self._attach(graph, program)
            self._input_types = [v.type for v in graph.inputs]
            self._build()
            if key:
                _UNPICKLED[key] = self
                if len(_UNPICKLED) > _UNPICKLED_MAX:
                    _UNPICKLED.popitem(last=False)

    def save(self, path) -> Path:
        """Write this Function to one versioned, digest-checked file that `verglas.load` reads
        back without the code that built the graph (and, where versions match, without
        rewriting, scheduling or generating code again); see verglas/artifact.py."""
        return artifact.save(path, type(self), self.__getstate__(),
                             getattr(self._runner, "directory", None))


# Functions unpickled in this process, by what they run (least recently unpickled first): a
# process that receives one pickled Function per task, as a dask worker does, builds (compiles
# or loads) its runner once; calls are thread-safe, so the copies share it
_UNPICKLED: OrderedDict = OrderedDict()
_UNPICKLED_MAX = 64
_unpickled_lock = threading.Lock()
# runners built in this process (compiled, or loaded from the cache), per Function cache key
RUNNER_BUILDS: Counter = Counter()


class _WritableInterface:
    """A read-only array's memory, offered as writable through the array interface."""

    def __init__(self, array: np.ndarray):
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], False)
        self.__array_interface__ = interface
        self.array = array  # (the view's base: keeps the memory alive)


def _writable_view(array: np.ndarray) -> np.ndarray:
    """A writable view of a read-only array: numba types read-only arrays apart (the program
    would compile twice), and a program never writes its inputs, so no copy is needed (below
    64 KiB a copy is the cheaper of the two: ~2 us for the view)."""
    return np.asarray(_WritableInterface(array)) if array.nbytes >= 1 << 16 else array.copy()


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
