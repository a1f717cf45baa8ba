"""The frameworks under test: verglas and its peers, each turning a Case into a runner."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.programs import Case


def _listed(result) -> list:
    """A result (one array or a sequence of them) as a list."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


def namespace(xp, **extra) -> types.SimpleNamespace:
    """The numpy-like names program bodies use, taken from `xp`, plus `extra`."""
    names = ("exp", "sin", "cos", "abs", "tanh", "sum", "max", "mean", "sqrt")
    return types.SimpleNamespace(**{n: getattr(xp, n) for n in names}, **extra)


def _eager_recurrence(xp):
    def recurrence(step, xs, init):
        """The trace of `carry = step(carry, x)` over the rows of xs, by a Python loop."""
        carry, trace = init, []
        for x in xs:
            carry = step(carry, x)
            trace.append(carry)
        return xp.stack(trace)
    return recurrence


def array_namespace(xp) -> types.SimpleNamespace:
    """Eager namespace (numpy, cupy) with hand-written, numerically stable softmax/logsumexp,
    and `recurrence(step, xs, init)` (the trace of a loop) as a Python loop."""
    def softmax(x, axis=-1):
        e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
        return e / xp.sum(e, axis=axis, keepdims=True)

    def logsumexp(x, axis=None):
        top = xp.max(x, axis=axis, keepdims=True)
        out = xp.log(xp.sum(xp.exp(x - top), axis=axis, keepdims=True)) + top
        return xp.squeeze(out, axis=axis)

    return namespace(xp, softmax=softmax, logsumexp=logsumexp,
                     recurrence=_eager_recurrence(xp), reusable=lambda fn: fn)


class Framework:
    """One column of the table: builds a zero-argument runner for a case."""

    name = ""

    def unavailable(self) -> str | None:
        """Why this framework cannot run here, or None."""
        return None

    def prepare(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Callable[[], Any]]:
        """Build the graph of `case` (untimed); the returned thunk compiles it (timed).

        The thunk returns the runner: a zero-argument callable, `arrays` bound, that returns
        the outputs.
        """
        raise NotImplementedError

    def build(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Any]:
        """Compile `case` and bind `arrays`; the runner returns the outputs."""
        return self.prepare(case, arrays)()

    def sync(self, result) -> None:
        """Wait until `result` is computed (asynchronous devices)."""

    def to_numpy(self, result) -> list[np.ndarray]:
        """The outputs of one call as numpy arrays."""
        return [np.asarray(r) for r in _listed(result)]


class Eager(Framework):
    """numpy (CPU) or cupy (GPU): the program run op by op."""

    def __init__(self, module: str):
        self.name = module

    def unavailable(self) -> str | None:
        if self.name == "numpy":
            return None
        from benchmarks.gpu import gpu_missing
        return gpu_missing()

    def _xp(self):
        if self.name == "numpy":
            return np
        import cupy
        return cupy

    def prepare(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Callable[[], Any]]:
        xp = self._xp()
        ns = array_namespace(xp)
        fn = case.reference or case.body
        args = [xp.asarray(a) for a in arrays]
        return lambda: lambda: fn(ns, *args)

    def sync(self, result) -> None:
        if self.name == "cupy":
            import cupy
            cupy.cuda.Device().synchronize()

    def to_numpy(self, result) -> list[np.ndarray]:
        if self.name == "cupy":
            import cupy
            return [cupy.asnumpy(r) for r in _listed(result)]
        return super().to_numpy(result)


def _simulated() -> bool:
    from benchmarks.gpu import simulated
    return simulated()


class Verglas(Framework):
    """verglas through its public API only."""

    name = "verglas"

    def __init__(self, device: str):
        self.device = device

    def unavailable(self) -> str | None:
        try:
            import verglas  # noqa: F401
        except ImportError as exc:
            return f"ImportError: {exc}"
        return None

    def symbols(self, case: Case, arrays: list[np.ndarray]) -> list:
        """Symbolic inputs with every dimension known only at run time."""
        import verglas as vg
        return [vg.scalar(n, dtype=str(a.dtype)) if a.ndim == 0 else
                vg.tensor(n, shape=(None,) * a.ndim, dtype=str(a.dtype))
                for n, a in zip(case.names, arrays)]

    def graph(self, case: Case, arrays: list[np.ndarray]) -> tuple[list, list]:
        """The verglas inputs and outputs of `case`."""
        import verglas as vg
        inputs = self.symbols(case, arrays)
        outputs = _listed(case.body(verglas_namespace(), *inputs))
        if case.wrt:
            outputs = [outputs[0], *vg.grad(outputs[0], [inputs[i] for i in case.wrt])]
        return inputs, outputs

    def prepare(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Callable[[], Any]]:
        import verglas as vg
        inputs, outputs = self.graph(case, arrays)
        args = arrays
        if self.device == "cuda" and not _simulated():
            import cupy
            args = [cupy.asarray(a) for a in arrays]

        def compile_():
            f = vg.compile(inputs, outputs, device=self.device)
            return lambda: f(*args)
        return compile_

    def sync(self, result) -> None:
        if self.device == "cuda" and not _simulated():
            import cupy
            cupy.cuda.Device().synchronize()

    def to_numpy(self, result) -> list[np.ndarray]:
        import verglas as vg
        return [vg.asnumpy(r) for r in _listed(result)]


class PyTensor(Framework):
    """PyTensor with the numba linker (mode NUMBA) or the C linker (FAST_RUN rewrites, cvm)."""

    def __init__(self, linker: str):
        self.linker = linker
        self.name = f"pt_{linker}"

    def unavailable(self) -> str | None:
        try:
            import pytensor
        except ImportError as exc:
            return f"ImportError: {exc}"
        if self.linker == "c" and not pytensor.config.cxx:
            return "C linker unavailable (pytensor.config.cxx is empty: no compiler)"
        return None

    def mode(self):
        """The pytensor.function mode for this linker."""
        if self.linker == "numba":
            return "NUMBA"
        from pytensor.compile.mode import Mode
        return Mode(linker="cvm", optimizer="fast_run")

    def graph(self, case: Case, arrays: list[np.ndarray]) -> tuple[list, list]:
        """The PyTensor inputs and outputs of `case`."""
        import pytensor
        import pytensor.tensor as pt
        ns = pytensor_namespace()
        inputs = [pt.tensor(n, shape=(None,) * a.ndim, dtype=str(a.dtype))
                  for n, a in zip(case.names, arrays)]
        outputs = _listed(case.body(ns, *inputs))
        if case.wrt:
            outputs = [outputs[0], *pytensor.grad(outputs[0], [inputs[i] for i in case.wrt])]
        return inputs, outputs

    def prepare(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Callable[[], Any]]:
        import pytensor
        inputs, outputs = self.graph(case, arrays)
        mode = self.mode()

        def compile_():
            f = pytensor.function(inputs, outputs, mode=mode)
            return lambda: f(*arrays)
        return compile_


def verglas_namespace():
    """The verglas module's names plus `recurrence(step, xs, init)` through vg.scan."""
    import verglas as vg

    class Namespace:
        def __getattr__(self, name):
            return getattr(vg, name)

        @staticmethod
        def recurrence(step, xs, init):
            return vg.scan(lambda x, carry: step(carry, x), sequences=xs, outputs_info=init)

        @staticmethod
        def reusable(fn):
            return _reusable(fn, vg.OpFromGraph, lambda v: v.type.make_variable(v.name))
    return Namespace()


def _reusable(fn, op_class, fresh):
    """`fn` as one op built at its first call (from fresh variables like its arguments) and
    applied at every call."""
    op = None

    def apply(*args):
        nonlocal op
        if op is None:
            inputs = [fresh(a) for a in args]
            op = op_class(inputs, [fn(*inputs)])
        return op(*args)
    return apply


def pytensor_namespace() -> types.SimpleNamespace:
    """pytensor.tensor names plus its softmax and logsumexp, and `recurrence` (pytensor.scan)."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.tensor.special import softmax

    def recurrence(step, xs, init):
        trace, _ = pytensor.scan(lambda x, carry: step(carry, x), sequences=xs,
                                 outputs_info=init)
        return trace
    from pytensor.compile.builders import OpFromGraph

    return namespace(pt, softmax=softmax, logsumexp=pt.logsumexp, recurrence=recurrence,
                     reusable=lambda fn: _reusable(fn, OpFromGraph, lambda v: v.type()))


class Jax(Framework):
    """jax.jit on the CPU or GPU backend, float64 enabled, inputs placed on the device."""

    name = "jax"

    def __init__(self, device: str):
        self.device = device

    def unavailable(self) -> str | None:
        try:
            import jax
        except ImportError as exc:
            return f"ImportError: {exc}"
        jax.config.update("jax_enable_x64", True)
        try:
            jax.devices("gpu" if self.device == "cuda" else "cpu")
        except RuntimeError as exc:
            return f"no JAX {self.device} backend: {exc}"
        return None

    def function(self, case: Case) -> Callable:
        """The jitted function of `case` (loss and gradients flattened when `wrt`)."""
        import jax
        import jax.numpy as jnp
        def recurrence(step, xs, init):
            def body(carry, x):
                carry = step(carry, x)
                return carry, carry
            return jax.lax.scan(body, init, xs)[1]
        ns = namespace(jnp, softmax=jax.nn.softmax, logsumexp=jax.nn.logsumexp,
                       recurrence=recurrence, reusable=lambda fn: fn)
        def fn(*args):
            return case.body(ns, *args)

        if case.wrt:
            def scalar(*args):
                return _listed(case.body(ns, *args))[0]

            value_and_grad = jax.value_and_grad(scalar, argnums=case.wrt)

            def fn(*args):
                value, grads = value_and_grad(*args)
                return (value, *grads)

        return jax.jit(fn)

    def put(self, arrays: list[np.ndarray]) -> list:
        """The inputs as arrays on the JAX device."""
        import jax
        dev = jax.devices("gpu" if self.device == "cuda" else "cpu")[0]
        return [jax.device_put(a, dev) for a in arrays]

    def prepare(self, case: Case, arrays: list[np.ndarray]) -> Callable[[], Callable[[], Any]]:
        args = self.put(arrays)

        def compile_():
            f = self.function(case)  # tracing and XLA compilation happen at the first call
            return lambda: f(*args)
        return compile_

    def sync(self, result) -> None:
        import jax
        jax.block_until_ready(result)


def frameworks(device: str) -> list[Framework]:
    """verglas first, then the peers for `device`."""
    if device == "cuda":
        return [Verglas("cuda"), Eager("cupy"), Jax("cuda")]
    return [Verglas("cpu"), Eager("numpy"), PyTensor("numba"), PyTensor("c"), Jax("cpu")]
