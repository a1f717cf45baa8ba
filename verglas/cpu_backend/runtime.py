"""The CPU backend's runner: compiling a generated program with numba and calling it.

The program's source is written to the cache directory as a module and jitted with
`numba.njit(cache=True)`, so a second process loads machine code instead of compiling. The
module's globals (constants, jitted helpers) are stored beside it and re-resolved on import.
A Function calls the jitted program through a generated fast call (`CPURunner.fast_call`).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import sys
import threading
import types

import numba
import numpy as np

from verglas import cache
from verglas.backend import Backend, Runner, gc_paused
from verglas.config import config
# (stored_code: how numba's cache stores a program's functions)
from verglas.cpu_backend import aside, callees, kernels, stored_code  # noqa: F401
from verglas.cpu_backend.blas import numpy_cblas_gemm
from verglas.cpu_backend.codegen import generate
from verglas.cpu_backend.dtypes import STORED_AS, from_storage, storage_dtype, to_storage
from verglas.cpu_backend.intrinsics import WORKSPACE_ALIGN, preferred_vector_width
from verglas.cpu_backend.kernels import RuntimeBroadcast
from verglas.cpu_backend.parallel_for import launch
from verglas.cpu_backend.storage import BLOCK_MIN_BYTES
from verglas.cpu_backend.threads import parallel_rows
from verglas.logger import logger

__all__ = ["CPUBackend", "CPURunner", "build_runner", "JIT_OPTIONS", "NO_WORKSPACE",
           "OutputBlocks", "keep_workspace"]

# NaN/Inf semantics must hold, so no 'nnan'/'ninf'; reassociation lets reductions vectorize.
# No 'arcp' either: x / y as x * (1 / y) is not numpy's quotient (1 / y overflows for a
# subnormal y, and floor(49.0 / 7.0) may become 6); nor 'nsz': 0.0 - x is not -x for x = 0.
JIT_OPTIONS = dict(nogil=True, error_model="numpy", fastmath={"contract", "reassoc"})

_lock = threading.Lock()
_general_lock = threading.RLock()

# the extra functions (shared kernels, sub-programs, row loops) are only called from jitted code:
# no Python or C entry points to build (~40% of a small function's compile time)
_CALLEE_OPTIONS = dict(JIT_OPTIONS, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def _program_options(parallel: bool, **extra) -> dict:
    """numba options of a program function; with `parallel` (it runs row loops on numba's
    thread pool through parallel_for.parallel_range), the pool is started first."""
    if parallel:
        launch()
    return dict(extra, **JIT_OPTIONS)

HEADER = ("import cmath\nimport math\n\nimport numba\nimport numpy as np\n\n"
          "from verglas.cpu_backend.kernels import RuntimeBroadcast\n\n")


def _module_text(src) -> str:
    return HEADER + src.text + "\n"


def build_runner(program_of, key: str | None, inputs: list[tuple[str, int]]):
    """A CPURunner for the Program `program_of()` returns, whose inputs have (dtype, ndim)
    `inputs`; with a cache `key`, its code is stored and reused on disk (a warm start loads it
    without asking for the Program).

    The program is generated for calls whose inputs only broadcast along dims that are
    statically 1 (the usual case, and far less code to compile); a call that broadcasts at
    run time raises RuntimeBroadcast inside it, and the runner then compiles (once) and runs
    the general program.

    The key covers the graph and verglas's own source, so a stored entry's source is exactly
    what generating again would give: a warm start loads it instead.
    """
    key = key and key + _settings_tag()
    runner = _build(program_of, key, inputs, specialized=True)
    runner.general = functools.partial(_build, program_of, key and key + "-general", inputs,
                                       specialized=False)
    return runner


def _settings_tag() -> str:
    """What of the generated code the graph does not decide (verglas.config): the workspace
    switch, the vector width, whether row loops run on threads and whose BLAS products call
    (numba's own cache would not tell programs built with another apart; asking for numpy's
    BLAS registers its symbols, which a stored program's machine code needs to load)."""
    return (f"-w{preferred_vector_width() or 0}{'' if config.workspace else '-nows'}"
            f"{'' if parallel_rows() else '-serial'}{'' if numpy_cblas_gemm() else '-numbablas'}")


def _build(program_of, key: str | None, inputs, specialized: bool):
    if key is not None:
        runner = _load_runner(program_of, key, inputs)
        if runner is not None:
            return runner
    program = program_of()
    if not specialized:
        program = program.general()
    src = generate(program)
    outputs = [program.buffers[b].dtype for b in program.outputs]
    text = _module_text(src)
    if key is None:
        namespace = dict(src.globals)
        namespace.update(math=__import__("math"), cmath=__import__("cmath"), np=np)
        exec(compile(text, f"<verglas program {id(src):x}>", "exec"), namespace)
        _jit_functions(namespace, src.jit_names, _CALLEE_OPTIONS)
        jitted = numba.njit(**_program_options(src.parallel))(namespace[src.name])
        return CPURunner(inputs, jitted, src.arg_constants, text, src.packing, program_of,
                         src.workspace, src.bare, outputs, _module_layout(src),
                         blocks=src.blocks)
    directory = cache.entry_dir(CPUBackend.name, key)
    path = directory / "program.py"
    globals_path = directory / "globals.pkl"
    spec = _globals_spec(src.globals)
    with _lock:
        if not path.exists() or path.read_text() != text:
            cache.write_atomic(path, text.encode())
        if cache.load_pickle(globals_path) is None:
            cache.store_pickle(globals_path, spec)
        module = _import_module(path, key)
        module.__dict__.update(_resolve_globals(spec))
        _jit_functions(module.__dict__, src.jit_names, dict(cache=True, **_CALLEE_OPTIONS))
        cache.store_pickle(directory / "runner.pkl", {
            "digest": hashlib.sha256(text.encode()).hexdigest(),  # program.py's, checked on load
            "name": src.name, "jit_names": list(src.jit_names),
            "arg_constants": list(src.arg_constants), "packing": list(src.packing),
            "parallel": src.parallel, "workspace": src.workspace, "bare": src.bare,
            "outputs": outputs, "blocks": src.blocks})
    jitted = numba.njit(**_program_options(src.parallel, cache=True))(getattr(module, src.name))
    return CPURunner(inputs, jitted, src.arg_constants, text, src.packing, program_of,
                     src.workspace, src.bare, outputs, _module_layout(src), directory,
                     blocks=src.blocks)


def _load_runner(program_of, key: str, inputs):
    """The runner of a stored entry (source, globals and layout on disk), or None."""
    directory = cache.entry_dir(CPUBackend.name, key)
    meta = cache.load_pickle(directory / "runner.pkl")
    path = directory / "program.py"
    if not isinstance(meta, dict) or not path.exists():
        return None
    globals_spec = cache.load_pickle(directory / "globals.pkl")
    try:
        text = path.read_text()
    except OSError:  # (removed meanwhile)
        return None
    if not isinstance(globals_spec, dict) or \
            meta.get("digest") != hashlib.sha256(text.encode()).hexdigest():
        return None
    options = _program_options(meta.get("parallel", False), cache=True)
    with _lock:
        module = _import_module(path, key)
        module.__dict__.update(_resolve_globals(globals_spec))
        _jit_functions(module.__dict__, meta["jit_names"], dict(cache=True, **_CALLEE_OPTIONS))
    jitted = numba.njit(**options)(getattr(module, meta["name"]))
    return CPURunner(inputs, jitted, meta["arg_constants"], text, meta["packing"],
                     program_of, meta.get("workspace", False), meta.get("bare", False),
                     meta.get("outputs"), dict(meta, globals=globals_spec), directory,
                     blocks=meta.get("blocks", 0))


def _jit_functions(namespace: dict, names, options: dict) -> None:
    """Jit the sub-program functions in place, callees first, so the program calls machine code."""
    for name in names:
        fn = namespace[name]
        if not isinstance(fn, numba.core.registry.CPUDispatcher):
            namespace[name] = numba.njit(**options)(fn)


def _import_module(path, key):
    name = f"verglas_program_{key}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(cache.code_of(path), module.__dict__)
    except BaseException:
        del sys.modules[name]  # (no later compile may find half a module)
        raise
    return module


def _globals_spec(globals_: dict) -> dict:
    """Globals as picklable specs: arrays as they are, jitted helpers by importable name."""
    spec = {}
    for name, value in globals_.items():
        if isinstance(value, (np.ndarray, np.generic)):
            spec[name] = ("array", value)
        else:
            spec[name] = ("helper", _helper_ref(value))
    return spec


def _helper_ref(dispatcher):
    for key, fn in kernels.HELPER_REFS.items():
        if fn is dispatcher:
            return key
    ref = kernels.helper_ref(dispatcher)
    if ref is None:
        raise TypeError(f"cpu backend: helper {dispatcher} has no importable reference")
    return ref


def _resolve_globals(spec: dict) -> dict:
    out = {}
    for name, (kind, value) in spec.items():
        out[name] = value if kind == "array" else kernels.resolve_helper(value)
    return out


def _module_layout(src) -> dict:
    """What `source()` shows of a program module beside its text: its globals (as specs where
    they have one), its program function and the functions jitted before it."""
    globals_ = {}
    for name, value in src.globals.items():
        try:
            globals_.update(_globals_spec({name: value}))
        except TypeError:  # (a helper no stored program could find again: shown as it is)
            globals_[name] = ("object", repr(value))
    return {"globals": globals_, "name": src.name, "jit_names": list(src.jit_names)}


def _binding(name: str, kind: str, value) -> str:
    """The line of Python that binds global `name` as the loaded module has it."""
    if kind == "helper":
        return f"{name} = resolve_helper({value!r})"
    if kind == "array":
        array = np.asarray(value)
        if array.size <= 64:  # (every value written so that it reads back exactly)
            text = np.array2string(array, separator=", ", floatmode="unique",
                                   max_line_width=1 << 30, threshold=1 << 30)
            return f"{name} = np.array({text}, dtype=np.{array.dtype})"
        return (f"{name} = np.empty({array.shape}, dtype=np.{array.dtype})  # the "
                f"{array.size} values of a constant of the graph (not shown)")
    return f"# {name}: {value}"


class CPUBackend(Backend):
    """numba: each Program becomes one jitted function (see build_runner)."""

    name = "cpu"

    def runner(self, code_of, key, input_types) -> CPURunner:
        runner = build_runner(code_of, key, [(t.dtype, t.ndim) for t in input_types])
        runner.compile()
        return runner


class CPURunner(Runner):
    """Calls the jitted program with C-contiguous inputs and the constant arguments.

    A program with a `workspace` also takes a byte array its temporaries live in, and returns
    last the workspace it used (the one given, or a larger one it made) and the bytes it
    needed: a call takes a workspace from `pool` (a new thread: an empty one) and gives back
    the one returned, grown if some temporaries did not fit.
    So each thread calling at once has its own, and a steady state allocates only outputs.
    Its outputs at the function's top then come from `blocks` byte arrays it recycles (see
    OutputBlocks), taken after the workspace, with the bytes each needed returned after it.
    """

    retry_on = RuntimeBroadcast  # what a caller of `jitted` hands back to __call__
    contiguous = True  # the program's one signature takes writable C-contiguous arrays

    def __init__(self, inputs, jitted, arg_constants, text: str, packing=(), program_of=None,
                 workspace: bool = False, bare: bool = False, outputs=None, layout=None,
                 directory=None, blocks: int = 0):
        self._program_of = program_of
        self.jitted = jitted
        self.arg_constants = tuple(arg_constants)
        self.text = text  # the generated module
        self.layout = dict(layout or {})  # its globals, function names (see _module_layout)
        self.directory = directory  # its cache entry (None: not stored)
        # 0-d inputs that travel packed: [(dtype, [input positions])]
        self.packing = [(d, list(ks)) for d, ks in packing]
        packed = {k for _, ks in self.packing for k in ks}
        self.direct = [k for k in range(len(inputs)) if k not in packed]
        self.workspace = workspace
        self.bare = bare  # the program returns its one output itself, not a tuple
        self.outputs = list(outputs or [])  # the outputs' dtypes
        # float16 inputs or outputs travel as float32 (see dtypes.py): converted in __call__
        self.converts = any(d in STORED_AS for d in self.outputs) or any(
            d in STORED_AS for d, _ in inputs)
        self.pool: list[np.ndarray] = []  # workspaces no call is using (list ops are atomic)
        arg_types = [numba.typeof(np.empty((0,) * inputs[k][1],
                                           dtype=storage_dtype(np.dtype(inputs[k][0]).name)))
                     for k in self.direct]
        arg_types += [numba.typeof(np.empty(len(ks), dtype=storage_dtype(d)))
                      for d, ks in self.packing]
        arg_types += [numba.typeof(c) for c in self.arg_constants]
        if workspace:
            arg_types.append(numba.typeof(NO_WORKSPACE))
        self.blocks = OutputBlocks(blocks)
        arg_types += [numba.typeof(NO_WORKSPACE)] * blocks
        self.signature = tuple(arg_types)
        self.general = None  # () -> the runner of the general program (see build_runner)
        self._general = None

    @property
    def program(self):
        return self._program_of()

    def compile(self) -> None:
        """Compile (or load from numba's cache) the signature every call uses, and no other:
        a call with other argument types raises TypeError (the Function converts them)."""
        with gc_paused():
            self._compile()
        self.jitted.disable_compile()

    def _compile(self) -> None:
        record = None if self.directory is None else self.directory / "callees.pkl"
        try:
            self._compile_stored(record)
        except Exception as exc:
            if record is None or not _raised_by_numba_cache(exc):
                raise
            # numba's own cache files carry no digest: one it cannot read (truncated, damaged)
            # is emptied, for this function and those it calls, and the program compiled again
            logger.warning("cpu backend: numba's cache of %s could not be read (%s: %s); "
                           "compiling again", self.directory, type(exc).__name__, exc)
            for value in self._stored_functions():
                value._cache.flush()
            self.jitted.compile(self.signature)
            cache.store_pickle(record, callees.registered(self.jitted.py_func.__module__))

    def _stored_functions(self) -> list:
        """The program's function and the jitted functions its module names that numba's
        cache stores."""
        values = (self.jitted, *self.jitted.py_func.__globals__.values())
        return [value for value in values if isinstance(value, numba.core.registry.CPUDispatcher)
                and getattr(value, "_cache", None) is not None]

    def _compile_stored(self, record) -> None:
        """Compile the program, or load it from numba's cache with the functions it calls
        registered first (callees.py: their code is not linked into it), as `record` lists
        them. Without a record (a program compiled elsewhere, stopped before writing it), a
        stored program is compiled again, never loaded with calls nothing resolves."""
        entries = None if record is None else cache.load_pickle(record)
        if record is not None and entries is None:
            # whatever calls the module's functions compiles again: loaded from numba's
            # cache, it would meet calls nothing resolves (a sub-program calling a row loop)
            module = self.jitted.py_func.__module__
            for value in self._stored_functions():
                if value.py_func.__module__ == module and not aside.leaf_of(value, module):
                    value._cache.flush()
        if entries:
            callees.load(self.jitted.py_func.__globals__, entries)
            self.jitted.compile(self.signature)
        else:  # (its row functions and kernels compile in a second process meanwhile)
            with aside.session(self.jitted.py_func.__module__):
                self.jitted.compile(self.signature)
        if record is not None and entries is None:
            cache.store_pickle(record, callees.registered(self.jitted.py_func.__module__))

    def arguments(self, args: list) -> list:
        """The jitted function's arguments for the program's inputs `args`."""
        if self.converts:
            args = [to_storage(a) for a in args]
        if not self.packing:
            return args
        out = [args[k] for k in self.direct]
        out += [np.array([args[k] for k in ks], dtype=storage_dtype(d)) for d, ks in self.packing]
        return out

    def __call__(self, args: list) -> list:
        blocks = self.blocks
        try:
            if not self.workspace and not blocks.count:
                result = self.jitted(*self.arguments(args), *self.arg_constants)
                result = [result] if self.bare else list(result)
            else:
                pool, taken = self.pool, blocks.take() if blocks.count else []
                ws = [pool.pop() if pool else NO_WORKSPACE] if self.workspace else []
                result = list(self.jitted(*self.arguments(args), *self.arg_constants, *ws,
                                          *blocks.usable(taken)))
                if blocks.count:
                    blocks.give(taken, result[-blocks.count:])
                    del result[-blocks.count - 1:]
                if self.workspace:
                    keep_workspace(pool, result[-2], result[-1])
                    del result[-2:]
        except RuntimeBroadcast as exc:
            if self.general is None:  # (a general program checks no broadcasting)
                raise RuntimeError(f"verglas bug: the general program raised {exc!r}") from exc
            return self.general_runner()(args)
        if self.converts:
            result = [from_storage(r, d) for r, d in zip(result, self.outputs)]
        return result

    def general_runner(self) -> CPURunner:
        """The runner of the general program, built on first use (one thread builds it)."""
        if self._general is None:
            with _general_lock:
                if self._general is None:
                    runner = self.general()
                    runner.compile()
                    self._general = runner
        return self._general

    def source(self) -> str:
        """The generated module, then what verglas does when it loads it: bind the names the
        code uses and jit its functions (a module that runs on its own, large constants
        aside)."""
        layout = self.layout
        lines = [self.text.rstrip("\n"), "", "",
                 "# -- what verglas does when it loads this module --",
                 "from numpy import inf, nan  # noqa: E402, F401",
                 "from verglas.cpu_backend.kernels import resolve_helper  # noqa: E402", ""]
        lines += [_binding(name, kind, value)
                  for name, (kind, value) in layout.get("globals", {}).items()]
        options = ", ".join(f"{k}={v!r}" for k, v in JIT_OPTIONS.items())
        lines.append("")
        for name in layout.get("jit_names", ()):
            lines.append(f"{name} = numba.njit({options})({name})")
        name = layout.get("name", "program")
        lines.append(f"{name} = numba.njit({options})({name})")
        args = [f"in{k}" for k in self.direct] + [f"pk{j}" for j in range(len(self.packing))]
        args += [f"carg{k}" for k in range(len(self.arg_constants))]
        args += ["ws"] if self.workspace else []
        args += [f"ob{k}" for k in range(self.blocks.count)]
        call = f"{name}({', '.join(args)})"
        lines += ["", f"# called as {call}, its inputs C-contiguous and writable"]
        if self.packing:
            lines.append("# pk<j>: the 0-d inputs of one dtype, packed in one array")
        if self.arg_constants:
            lines.append(f"# carg<k>: the {len(self.arg_constants)} constants too large to be "
                         f"written in the code")
        if self.workspace:
            lines.append("# ws: a uint8 workspace (np.empty(0, np.uint8) to start); returned "
                         "after the outputs with the bytes it needed")
        if self.blocks.count:
            lines.append("# ob<k>: uint8 blocks its outputs are carved from (np.empty(0, "
                         "np.uint8) to start); the bytes each needed are returned last")
        return "\n".join(lines) + "\n"

    def fast_call(self, specs: list, single: bool, checked):
        """A generated wrapper that hands arrays that already fit straight to the jitted program
        (None where inputs or outputs are converted: float16 goes through __call__).

        It checks exactly what the program's one signature assumes (ndarray, dtype, ndim, C
        order, writable, static dims) and falls back to `checked` for anything else. (numba's
        dispatcher would refuse the rest too, since it may compile no other signature, but its
        TypeError costs ~50 us where these checks cost ~0.2 us.)
        """
        if self.converts:
            return None
        n = len(specs)
        names = [f"a{k}" for k in range(n)]
        conds = []
        for k, (name, (dtype, ndim, static)) in enumerate(zip(names, specs)):
            conds.append(f"type({name}) is ndarray and {name}.dtype is D{k} and "
                         f"{name}.ndim == {ndim}")
            if k in self.direct:  # (packed 0-d inputs travel in a new array)
                conds.append(f"(F := {name}.flags).c_contiguous and F.writeable")
            for axis, dim in enumerate(static or ()):
                if dim is not None:
                    conds.append(f"{name}.shape[{axis}] == {dim}")
        consts = "".join(f", C{k}" for k in range(len(self.arg_constants)))
        unpack = f"{', '.join(names)}{',' if n == 1 else ''} = args" if n else "pass"
        test = " and ".join(conds) if conds else "True"
        call_args = [names[k] for k in self.direct]
        call_args += [f"array(({''.join(names[k] + ', ' for k in ks)}), P{j})"
                      for j, (_, ks) in enumerate(self.packing)]
        take = give = ""
        tail = []  # the arguments after the constants
        nb = self.blocks.count
        extra = 2 * self.workspace + nb + bool(nb)  # what the program returns after its outputs
        if self.workspace:  # see the class docstring: one workspace per call running at once
            take = "            w = POOL.pop() if POOL else NO_WS\n"
            give = f"            KEEP(POOL, r[{-extra}], r[{-extra + 1}])\n"
            tail.append("w")
        if nb:  # (a block another reference holds is an earlier output's: not passed)
            take += ("            try:\n"  # (another thread may take the last meanwhile)
                     "                E = SETS.popleft() if len(SETS) > 1 else NEW()\n"
                     "            except IndexError:\n"
                     "                E = NEW()\n")
            give += (f"            if r[{-nb - 1}]:\n"
                     f"                GIVE(E, r[{-nb}:])\n"
                     f"            else:\n"
                     f"                SETS.append(E)\n")
            tail += [f"E[{k}] if RC(E[{k}]) <= FREE else NO_WS" for k in range(nb)]
        if extra:
            result = "r[0]" if single else f"list(r[:{-extra}])"
        elif self.bare:
            result = "r" if single else "[r]"
        else:
            result = "r[0]" if single else "list(r)"
        call = f"JIT({', '.join(call_args)}{consts}{''.join(', ' + t for t in tail)})"
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
        namespace = {"ndarray": np.ndarray, "JIT": self.jitted, "checked": checked,
                     "array": np.array, "RETRY": self.retry_on, "POOL": self.pool,
                     "NO_WS": NO_WORKSPACE, "KEEP": keep_workspace, "SETS": self.blocks.sets,
                     "NEW": self.blocks.new, "GIVE": self.blocks.give, "RC": sys.getrefcount,
                     "FREE": FREE_BLOCK_REFS}
        namespace.update({f"P{j}": np.dtype(d) for j, (d, _) in enumerate(self.packing)})
        namespace.update({f"D{k}": spec[0] for k, spec in enumerate(specs)})
        namespace.update({f"C{k}": c for k, c in enumerate(self.arg_constants)})
        if self.directory is None:
            code = compile(source, "<verglas fast call>", "exec")
        else:  # stored beside the program: a warm start loads its bytecode
            # named by its text: one graph compiled for one output or for a list of them has two
            digest = hashlib.sha256(source.encode()).hexdigest()[:16]
            path = self.directory / f"fastcall-{digest}.py"
            if not path.exists() or path.read_text() != source:
                cache.write_atomic(path, source.encode())
            code = cache.code_of(path)
        exec(code, namespace)
        return namespace["fast"]


def _raised_by_numba_cache(exc: Exception) -> bool:
    """`exc` was raised while numba read or wrote its cache files."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "numba.core.caching":
            return True
        tb = tb.tb_next
    return False


def keep_workspace(pool: list, ws: np.ndarray, need: int) -> None:
    """Give the workspace a call returned back to `pool`: a new one of `need` bytes where some
    temporaries did not fit in it (the next call then carves them all)."""
    pool.append(ws if need <= len(ws) else aligned_bytes(need))


def aligned_bytes(n: int) -> np.ndarray:
    """A new uint8 array of `n` bytes starting on a WORKSPACE_ALIGN boundary, as the arrays
    carved from it must (malloc's large chunks start 16 bytes past a page: every 64-byte
    vector store of an output carved there split two cache lines)."""
    buf = np.empty(n + WORKSPACE_ALIGN - 1, np.uint8)
    start = -buf.ctypes.data % WORKSPACE_ALIGN
    return buf[start:start + n]


class OutputBlocks:
    """The byte arrays a program's outputs are carved from (storage.Storage), recycled.

    A freed output's pages go back to the system (glibc trims its heap), and the next call's
    output faults them in again and zeroes them (rnn_grad float64, alone in a process: 96
    faults a call, 1.38 ms, where recycled blocks take 1.05). Instead, a call takes the oldest
    set of blocks (there are two at least, so a caller that holds the last call's outputs
    while it calls again still finds a free one), passes each block nothing else holds (no
    output of an earlier call still lives there) and gets back the bytes each output needed:
    a block too small for its output is replaced, one the caller still holds is left to the
    caller's output until it is freed.
    Outputs below BLOCK_MIN_BYTES come from malloc's free lists without new pages: no block.
    Each set is one call's alone (deque operations are atomic), as the workspaces are.
    """

    def __init__(self, count: int):
        self.count = count
        self.sets: collections.deque[list[np.ndarray]] = collections.deque()

    def take(self) -> list[np.ndarray]:
        """A set of blocks for one call (a new, empty one while fewer than two are kept)."""
        sets = self.sets
        try:
            return sets.popleft() if len(sets) > 1 else self.new()
        except IndexError:  # (another thread took the last one meanwhile)
            return self.new()

    def new(self) -> list[np.ndarray]:
        """A set with no block yet (each output's comes after the first call that needs it)."""
        return [NO_WORKSPACE] * self.count

    def usable(self, blocks: list[np.ndarray]) -> list[np.ndarray]:
        """The program's block arguments: each block of `blocks` nothing else holds."""
        return [blocks[k] if sys.getrefcount(blocks[k]) <= FREE_BLOCK_REFS else NO_WORKSPACE
                for k in range(self.count)]

    def give(self, blocks: list[np.ndarray], needs) -> None:
        """Keep `blocks` for a later call, with a new block where the bytes a call `needs`
        did not fit."""
        for k, need in enumerate(needs):
            if need > len(blocks[k]) and need >= BLOCK_MIN_BYTES:
                blocks[k] = aligned_bytes(need)
        self.sets.append(blocks)


def _free_block_refs() -> int:
    """sys.getrefcount of a block only its set holds, as the fast call reads it."""
    blocks = [np.empty(0, np.uint8)]
    return sys.getrefcount(blocks[0])


FREE_BLOCK_REFS = _free_block_refs()


# the workspace of a call no other has left one for: every temporary is then a new array
# (writeable: numba types a read-only array apart, and would compile the program twice)
NO_WORKSPACE = np.empty(0, np.uint8)
