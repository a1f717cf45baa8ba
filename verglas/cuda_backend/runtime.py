"""Running a generated CUDA program: the Launcher protocol, its two implementations and the
runner Function calls.

A Launcher is everything the generated host code touches: `xp` (array module), `threads` /
`max_blocks` (launch shape), `kernel(spec)` (a launchable handle), buffers (`empty`,
`as_strided`, `copy`), transfers (`to_device`, `to_host`, `from_input`), `matmul` and
index-error flags.

- `SimLauncher`: numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1). Device arrays are numpy
  arrays; each launch calls the simulator's kernel object on them, zero copy, after checking
  the arguments against the kernel's declared parameter types (the contract the GPU path's
  argument marshalling relies on).
- `CupyLauncher`: a real GPU. Kernels are compiled once to PTX (`numba.cuda.compile_ptx`,
  cached on disk), loaded with cupy (`cupy.cuda.function.Module`) and launched with flat
  argument tuples in numba's array ABI: no numba dispatcher on the launch path. Buffers come
  from cupy's memory pool, matmul is cuBLAS through cupy. A call with a shape signature seen
  before is captured once as a CUDA graph and replayed (`CapturedCall`), where its inputs and
  outputs are small enough that copying them costs less than the launches saved.
"""

from __future__ import annotations

import cmath
import functools
import math
import os
import re
import threading

import numpy as np

from verglas.backend import Runner
from verglas.cuda_backend import cache, host
from verglas.cuda_backend.codegen import Config, generate
from verglas.cuda_backend.compat import numba_cuda
from verglas.cuda_backend.templates import Arr

__all__ = ["build_runner", "default_launcher", "CUDARunner", "Launcher", "SimLauncher",
           "CupyLauncher", "NO_DEVICE_MESSAGE"]

NO_DEVICE_MESSAGE = ("device='cuda' needs an NVIDIA GPU with the CUDA driver, numba-cuda and "
                     "cupy, or NUMBA_ENABLE_CUDASIM=1 for the simulator: ")

# the CUDA release whose driver first loads a PTX ISA version (a driver loads PTX up to its own)
_PTX_CUDA = {(9, 0): (13, 0), (8, 8): (12, 9), (8, 7): (12, 8), (8, 6): (12, 7), (8, 5): (12, 5),
             (8, 4): (12, 4), (8, 3): (12, 3), (8, 2): (12, 2), (8, 1): (12, 1), (8, 0): (12, 0)}

_launcher = None
_launcher_lock = threading.Lock()


def ptx_needs(ptx: str) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """(PTX ISA version of `ptx`, the CUDA driver version that first loads it, if known)."""
    match = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M)
    isa = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    return isa, _PTX_CUDA.get(isa)


def load_failure(name: str, ptx: str, driver: tuple[int, int], exc: Exception) -> str:
    """What to tell a user whose driver refused kernel `name`'s PTX."""
    (major, minor), needs = ptx_needs(ptx)
    text = (f"cuda backend: the CUDA driver (CUDA {driver[0]}.{driver[1]}) could not load kernel "
            f"{name}, PTX ISA {major}.{minor} ({type(exc).__name__}: {exc}). ")
    if needs is not None and driver < needs:
        text += (f"That PTX needs a CUDA {needs[0]}.{needs[1]} driver or newer. ")
    return text + ("verglas[cuda] compiles with NVVM 13.0 (PTX 9.0) for CUDA 13 drivers (R580 or "
                   "newer); for a CUDA 12 driver install verglas[cuda12] instead (NVVM 12.9, PTX "
                   "8.8, needs R575 or newer; pin cuda-toolkit to the driver's 12.x for an older "
                   "one), or update the driver.")


def default_launcher():
    """The process's Launcher: the simulator when NUMBA_ENABLE_CUDASIM=1, else the GPU's;
    RuntimeError (never ImportError) when neither is usable."""
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = _make_launcher()
        return _launcher


def _make_launcher():
    try:
        from numba.cuda.core import config

        cuda = numba_cuda()
    except Exception as exc:  # numba-cuda or cuda-bindings missing
        raise RuntimeError(NO_DEVICE_MESSAGE + f"numba.cuda cannot be imported ({exc})") from None
    if config.ENABLE_CUDASIM:
        return SimLauncher()
    try:
        available = cuda.is_available()
    except Exception:  # pragma: no cover - driver errors
        available = False
    if not available:
        raise RuntimeError(NO_DEVICE_MESSAGE + "no CUDA device or driver was found")
    try:
        import cupy  # noqa: F401  (raises AttributeError, not ImportError, without CUDA)
    except Exception as exc:
        raise RuntimeError(NO_DEVICE_MESSAGE + f"cupy cannot be imported ({exc})") from None
    return CupyLauncher()


def build_runner(program, cache_key: str | None = None):
    """A CUDARunner for `program` on the process's launcher (kernels compile on first use)."""
    launcher = default_launcher()
    src = generate(program, Config(threads=launcher.threads))
    return CUDARunner(program, src, launcher)


class Launcher:
    """The protocol generated host code runs against (see the module docstring)."""

    xp = np
    threads = 256
    max_blocks = 1024
    supports_graphs = False

    def __init__(self):
        self._local = threading.local()

    def compile_ahead(self, specs) -> None:
        """Start compiling `specs` (a program's kernels) before their first launches, where
        kernels are compiled at all (not under the simulator)."""

    # -- index-error flags: zeroed device words kernels set; checked once per call ------------
    def begin_call(self) -> None:
        self._local.pending = []

    def error_flag(self, exc_type, message: str):
        flag = self.xp.zeros(1, dtype=np.int32)
        self._local.pending.append((flag, exc_type, message))
        return flag

    def take_pending(self) -> list:
        pending, self._local.pending = getattr(self._local, "pending", []), []
        return pending

    def check_errors(self, pending) -> None:
        if not pending:
            return
        values = self.to_host(self.xp.concatenate([f for f, _, _ in pending]))
        for value, (_, exc_type, message) in zip(values, pending):
            if value:
                raise exc_type(message)

    def as_strided(self, a, shape, strides):
        return self.xp.lib.stride_tricks.as_strided(a, shape, strides)

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype)

    def copy(self, a):
        return self.xp.array(a, copy=True, order="C")


# -- the simulator ---------------------------------------------------------------------------------
class _IEEEMath:
    """`math` (or `cmath`) for kernels run by the simulator: Python's functions raise on
    overflow and domain errors (math.exp(1000) is an OverflowError) where the GPU's return
    inf or NaN; these are numpy's, which do return them."""

    _NUMPY = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
              "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
              "pow": np.power, "isinf": np.isinf, "isnan": np.isnan, "fmod": np.fmod,
              "floor": np.floor, "copysign": np.copysign}

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        fn = self._NUMPY.get(name)
        if fn is None:
            return getattr(self._module, name)

        def ieee(*args):  # in double precision, as the math functions (a float16 exp(13))
            wide = [np.complex128(a) if np.iscomplexobj(a) else np.float64(a) for a in args]
            with np.errstate(all="ignore"):
                return fn(*wide)

        return ieee


_SIM_MATH, _SIM_CMATH = _IEEEMath(math), _IEEEMath(cmath)


class SimLauncher(Launcher):
    """numba's CUDA simulator with numpy arrays as device buffers (small grids: each simulated
    thread is a Python thread)."""

    def __init__(self, threads: int = 32, max_blocks: int = 4):
        super().__init__()
        from numba import cuda
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        self.cuda = cuda
        self.fake_array = FakeCUDAArray
        self.threads = threads
        self.max_blocks = max_blocks
        self._kernels: dict = {}

    def kernel(self, spec):
        handle = self._kernels.get((spec.source, spec.params))
        if handle is None:
            namespace = {"cuda": self.cuda, "math": _SIM_MATH, "cmath": _SIM_CMATH, "np": np}
            exec(compile(spec.source, f"<verglas kernel {spec.name}>", "exec"), namespace)
            handle = SimKernel(spec, self.cuda.jit(namespace[spec.name]), self.fake_array)
            self._kernels[(spec.source, spec.params)] = handle
        return handle

    def empty(self, shape, dtype):
        # garbage that shows: a kernel that forgets an element leaves NaN or a sentinel
        dtype = np.dtype(dtype)
        fill = np.nan if dtype.kind in "fc" else (True if dtype.kind == "b" else 77)
        return np.full(shape, fill, dtype)

    def to_device(self, value):
        return np.array(value, copy=True)

    def to_host(self, value):
        return np.array(value, copy=True)

    def from_input(self, value):
        """A read-only view of the caller's array: a kernel writing to an input fails."""
        view = np.asarray(value).view()
        view.flags.writeable = False
        return view

    def matmul(self, a, b, dtype):
        return np.matmul(a, b).astype(dtype, copy=False)


class SimKernel:
    """A simulator kernel behind the launch signature `(blocks, threads, *args)`."""

    def __init__(self, spec, jitted, fake_array):
        self.spec = spec
        self.jitted = jitted
        self.fake_array = fake_array

    def __call__(self, blocks: int, threads: int, *args) -> None:
        _check_args(self.spec, args)
        wrapped = [self.fake_array(a) if isinstance(a, np.ndarray) else a for a in args]
        self.jitted[blocks, threads](*wrapped)


def _check_args(spec, args) -> None:
    """Arguments match the kernel's parameter types (what the GPU marshalling assumes)."""
    if len(args) != len(spec.params):
        raise TypeError(f"{spec.name}: {len(args)} arguments for {len(spec.params)} parameters")
    for k, (p, a) in enumerate(zip(spec.params, args)):
        if isinstance(p, Arr):
            ok = (isinstance(a, np.ndarray) and a.dtype == np.dtype(p.dtype) and a.ndim == p.ndim
                  and (p.layout != "C" or a.flags.c_contiguous))
        else:
            ok = (isinstance(a, np.generic) and a.dtype == np.dtype(p.dtype)) \
                or (type(a) is int and p.dtype == "int64") \
                or (type(a) is float and p.dtype == "float64")
        if not ok:
            got = (f"{a.dtype}{a.shape} contiguous={a.flags.c_contiguous}"
                   if isinstance(a, np.ndarray) else repr(type(a)))
            raise TypeError(f"{spec.name}: argument {k} is {got}, parameter is {p}")


# -- a real GPU (not runnable without one) ----------------------------------------------------
class CupyLauncher(Launcher):
    """cupy buffers and streams; kernels as PTX loaded into cupy modules."""

    supports_graphs = True

    def __init__(self, threads: int = 256):
        super().__init__()
        import cupy

        self.xp = cupy
        version = cupy.cuda.runtime.driverGetVersion()  # e.g. 13000
        self.driver = (version // 1000, version % 1000 // 10)
        if self.driver < (12, 0):
            raise RuntimeError(f"cuda backend: the CUDA driver supports CUDA {self.driver[0]}."
                               f"{self.driver[1]}; verglas needs a CUDA 13 driver (R580 or "
                               f"newer) with verglas[cuda], or a CUDA 12 driver with "
                               f"verglas[cuda12]")
        device = cupy.cuda.Device()
        cc = device.compute_capability  # e.g. "90"
        self.cc = (int(cc[:-1]), int(cc[-1]))
        self.threads = threads
        self.max_blocks = device.attributes["MultiProcessorCount"] * 8
        self._kernels: dict = {}

    def kernel(self, spec):
        handle = self._kernels.get(spec.fingerprint)
        if handle is None:
            handle = self._kernels[spec.fingerprint] = CupyKernel(spec, self.cc, self.driver)
        return handle

    def compile_ahead(self, specs) -> None:
        """A helper process compiles the kernels of `specs` not loaded yet while the first
        call compiles and launches the ones it needs first (cache.Ahead)."""
        waiting = [s for s in specs if self.kernel(s).function is None]
        ahead = cache.Ahead(waiting, self.cc)
        if ahead.helper is not None:
            for spec in waiting:
                self.kernel(spec).ahead = ahead

    def upload(self, value):
        """A device copy of host `value`, bit for bit. (cupy.array of a 0-d array fills the
        result with its value, and fills a zero with a memset: -0.0 arrived as 0.0, seen on a
        real GPU. np.ascontiguousarray would make a 0-d value 1-d.)"""
        host = np.asarray(value, order="C")
        out = self.xp.empty(host.shape, host.dtype)
        if host.size:
            out.set(host)
        return out

    def to_device(self, value):
        cp = self.xp
        if not cp.cuda.get_current_stream().is_capturing():
            return self.upload(value)
        # Capturing (CapturedCall): a host value of a capturable program depends only on the
        # input shapes and constants, fixed for the graph; it is uploaded now, once, on a side
        # stream (cupy refuses host-to-device copies on a capturing stream, and a captured
        # copy would keep pointing at a pinned staging buffer cupy recycles).
        side = cp.cuda.Stream(non_blocking=True)
        with side:
            out = self.upload(value)
        side.synchronize()
        return out

    def to_host(self, value):
        return self.xp.asnumpy(value)

    def from_input(self, value):
        """numpy: copied to the device; cupy, __cuda_array_interface__ or DLPack: zero copy."""
        cp = self.xp
        if isinstance(value, cp.ndarray):
            return value
        if isinstance(value, np.ndarray):
            return self.upload(value)
        if hasattr(value, "__cuda_array_interface__"):
            return cp.asarray(value)
        if hasattr(value, "__dlpack__"):
            return cp.from_dlpack(value)
        return self.upload(np.asarray(value))

    def matmul(self, a, b, dtype):
        return self.xp.matmul(a, b).astype(dtype, copy=False)


class CupyKernel:
    """A kernel loaded from PTX into a cupy module, launched with numba's array ABI."""

    def __init__(self, spec, cc, driver=(13, 0)):
        self.spec = spec
        self.cc = cc
        self.driver = driver
        self.function = None
        self.ahead = None  # the cache.Ahead compiling this kernel in a helper process
        self.is_array = [isinstance(p, Arr) for p in spec.params]
        self.scalar_types = [None if isinstance(p, Arr) else np.dtype(p.dtype).type
                             for p in spec.params]
        self._lock = threading.Lock()

    def load(self):
        import cupy

        with self._lock:
            if self.function is None:
                ahead, self.ahead = self.ahead, None
                ptx = (ahead.ptx(self.spec) if ahead is not None else
                       cache.compile_ptx(self.spec, self.cc))
                module = cupy.cuda.function.Module()
                try:  # cuModuleLoadData takes NUL-terminated PTX
                    module.load(ptx.encode() + b"\0")
                except Exception as exc:  # noqa: BLE001 -- CUDADriverError: say what to do
                    raise RuntimeError(load_failure(self.spec.name, ptx, self.driver, exc)) \
                        from exc
                self.module = module  # the function lives as long as its module
                self.function = module.get_function(cache.entry_name(ptx))
        return self.function

    def __call__(self, blocks: int, threads: int, *args) -> None:
        import cupy

        fn = self.function or self.load()
        flat: list = []
        for is_array, scalar_type, a in zip(self.is_array, self.scalar_types, args):
            if is_array:  # meminfo, parent, nitems, itemsize, data, *shape, *strides (bytes)
                flat.extend((0, 0, a.size, a.itemsize, a.data.ptr, *a.shape, *a.strides))
            else:
                flat.append(scalar_type(a))
        fn((blocks,), (threads,), tuple(flat), stream=cupy.cuda.get_current_stream())


# -- the runner ----------------------------------------------------------------------------------
class CUDARunner(Runner):
    """Calls the generated host function; replays CUDA graphs for repeated shape signatures."""

    _ahead_started = False  # the first call asked the launcher to compile the kernels ahead

    MAX_GRAPHS = 8
    # the device memory the graphs of one Function may hold (their buffers stay allocated)
    MAX_GRAPH_BYTES = int(os.environ.get("VERGLAS_CUDA_GRAPH_BYTES", 1 << 30))
    MAX_SEEN = 256
    # A replay copies the inputs into the graph's buffers and the outputs out of them: worth
    # it while those bytes (in + out) cost less than the launches the graph saves. An H100
    # copies ~2.9 TB/s and a launch from Python costs ~8 us, so ~12 MB per step break even;
    # 4 MB leans toward eager calls (ew_chain, 1e8 float32: 1.18 ms replayed, 4x one pass).
    GRAPH_BYTES_PER_STEP = int(os.environ.get("VERGLAS_CUDA_GRAPH_BYTES_PER_STEP", 4 << 20))

    def __init__(self, program, generated, launcher):
        self.program = program
        self.generated = generated  # the ProgramSource: host text, kernels, globals
        self.launcher = launcher
        self.fn, self.constants = _host_function(generated, launcher, f"{id(program):x}")
        self.use_graphs = launcher.supports_graphs and generated.capturable
        self._graphs: dict = {}  # signature -> CapturedCall, least recently used first
        self._seen: dict = {}  # signature -> bytes in + out of its eager call
        self._graph_bytes = self.GRAPH_BYTES_PER_STEP * max(1, len(program.steps))
        self._graphs_lock = threading.Lock()
        self.capture_error: str | None = None  # why a capture failed (graphs then off)

    def accept(self, ttype, value, label: str):
        """A device array given by the caller, checked like TensorType.filter (zero copy
        when its dtype already matches)."""
        array = self.launcher.from_input(value)
        if array.ndim != ttype.ndim:
            raise TypeError(f"{label}: expected an array of ndim {ttype.ndim} ({ttype}), got "
                            f"ndim {array.ndim}")
        for axis, (want, got) in enumerate(zip(ttype.shape, array.shape)):
            if want is not None and want != got:
                raise ValueError(f"{label}: dimension {axis} has length {got}, but the static "
                                 f"shape requires {want}")
        if array.dtype != np.dtype(ttype.dtype):
            if not np.can_cast(array.dtype, ttype.dtype, "safe"):
                raise TypeError(f"{label}: expected dtype {ttype.dtype}, got {array.dtype} "
                                f"(not a safe cast)")
            array = array.astype(ttype.dtype)
        return array

    def _evict(self) -> None:
        """Drop the least recently used graphs past MAX_GRAPHS or MAX_GRAPH_BYTES (never the
        newest: a call signature replays at least once)."""
        while len(self._graphs) > 1 and (
                len(self._graphs) > self.MAX_GRAPHS
                or sum(c.nbytes for c in self._graphs.values()) > self.MAX_GRAPH_BYTES):
            del self._graphs[next(iter(self._graphs))]

    @property
    def text(self) -> str:
        """The generated host function and kernel sources."""
        return self.generated.full_text()

    def source(self) -> str:
        """The host function and kernels, after what the host code's free names are."""
        g = self.generated
        launcher = type(self.launcher).__name__
        lines = [f"# Host code (Python), run with `L` the launcher ({launcher}: buffers, "
                 "transfers, launches);",
                 "# `H` is verglas.cuda_backend.host, K<k> the kernels below (numba.cuda), P<k> "
                 "a step's",
                 "# reference perform on the host, c<id> a constant on the device (hc<id> on "
                 "the host)."]
        for name, value in g.globals.items():
            if isinstance(value, np.ndarray):
                text = np.array2string(value, threshold=8, separator=", ")
                lines.append(f"# {name}: {value.dtype} array of shape {value.shape}: {text}")
            else:
                lines.append(f"# {name}: {value!r}")
        return "\n".join(lines) + "\n\n" + self.text + "\n"

    def __call__(self, args: list) -> list:
        L = self.launcher
        if not self._ahead_started:  # (the first call: its kernels compile two at a time)
            self._ahead_started = True
            L.compile_ahead(self.generated.all_kernels())
        inputs = [L.from_input(a) for a in args]
        if self.use_graphs:
            key = tuple((a.shape, a.dtype.str) for a in inputs)
            with self._graphs_lock:  # one capture per signature, even with callers racing
                call = self._graphs.pop(key, None)
                if call is not None:
                    self._graphs[key] = call  # the most recently used now
                elif self._seen.get(key, math.inf) <= self._graph_bytes:
                    try:
                        call = self._graphs[key] = CapturedCall(self, inputs)
                        self._evict()
                    except (IndexError, ValueError, TypeError):  # the caller's error
                        L.take_pending()
                        raise
                    except Exception as exc:  # noqa: BLE001 -- the call runs eagerly instead
                        # the host code did something a capture refuses (a read back the
                        # generator did not see): this program is run without graphs, and
                        # says why
                        L.take_pending()
                        self.use_graphs, self.capture_error = False, repr(exc)
            if call is not None:
                return call.replay(inputs)
        L.begin_call()
        outputs = self.fn(L, *inputs, *self.constants)
        L.check_errors(L.take_pending())
        if self.use_graphs and key not in self._seen:
            with self._graphs_lock:
                if len(self._seen) >= self.MAX_SEEN:  # signatures seen once: forget them
                    self._seen.clear()
                self._seen[key] = sum(getattr(a, "nbytes", 0) for a in (*inputs, *outputs))
        return list(outputs)


def _host_function(generated, launcher, label: str):
    """(host function, its device constants) of a generated program; a sub-program's function
    is bound to its own constants and put in its caller's namespace under its global name."""
    namespace = {"H": host, "np": np}
    namespace.update(generated.globals)
    for k, spec in enumerate(generated.kernels):
        namespace[f"K{k}"] = launcher.kernel(spec)
    for name, sub in generated.subs.items():
        fn, constants = _host_function(sub, launcher, f"{label}.{name}")
        namespace[name] = functools.partial(_call_with, fn, constants)
    exec(compile(generated.text, f"<verglas cuda program {label}>", "exec"), namespace)
    constants = tuple(launcher.to_device(np.asarray(data)) for _, data in generated.const_args)
    return namespace[generated.name], constants


def _call_with(fn, constants, L, *inputs):
    return fn(L, *inputs, *constants)


class CapturedCall:
    """One call of a program captured as a CUDA graph for one input shape signature.

    Inputs are copied into fixed buffers, the graph replays the kernels on them, and the
    outputs are copied out (the graph owns its buffers). Every allocation made while capturing
    is kept alive with the graph. The fixed buffers are shared: one replay at a time.
    """

    def __init__(self, runner, inputs):
        import cupy

        L = runner.launcher
        self.launcher = L
        self._lock = threading.Lock()
        for spec in runner.generated.all_kernels():  # loaded before, not inside, the capture
            L.kernel(spec).load()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.inputs = [cupy.empty(a.shape, a.dtype) for a in inputs]
        pool = cupy.get_default_memory_pool()
        self.kept: list = []

        def allocate(nbytes):
            ptr = pool.malloc(nbytes)
            self.kept.append(ptr)
            return ptr

        L.begin_call()
        with self.stream, cupy.cuda.using_allocator(allocate):
            self.stream.begin_capture()
            try:
                self.outputs = runner.fn(L, *self.inputs, *runner.constants)
            finally:
                self.graph = self.stream.end_capture()
        self.pending = L.take_pending()
        self.graph.upload(self.stream)
        self.nbytes = (sum(p.mem.size for p in self.kept)
                       + sum(a.nbytes for a in self.inputs))

    def replay(self, inputs) -> list:
        import cupy

        current = cupy.cuda.get_current_stream()
        with self._lock:
            self.stream.wait_event(current.record())
            with self.stream:
                for fixed, value in zip(self.inputs, inputs):
                    cupy.copyto(fixed, value)
                self.graph.launch(self.stream)
                outputs = [o.copy() for o in self.outputs]
            # the caller's stream waits for the replay before it reads the error flags (read
            # under the lock: the next replay zeroes them)
            current.wait_event(self.stream.record())
            self.launcher.check_errors(self.pending)
        return outputs
