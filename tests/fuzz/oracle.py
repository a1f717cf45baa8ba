"""The fuzzer's oracle: numpy evaluating a program eagerly, exactly and perturbed.

`NumpyXP()` evaluates each op of a random program with numpy (scipy for erf): that result is
what verglas must return. `NumpyXP(rng)` evaluates it again with every result an
implementation may legitimately round differently moved at random within that freedom:

- IEEE basic operations (+ - * / sqrt) are correctly rounded, but a compiler may contract
  a*b+c into an FMA or reassociate: an inexact result moves by one ulp;
- transcendental functions move by a few ulps (numpy's own are not correctly rounded either);
- sums, products, matrix products and cumulative sums move within the bound of any summation
  order (n * eps * sum|x|), unless every partial result is an exactly representable integer;
- values numpy leaves unspecified (float -> int casts of NaN, inf or out-of-range values)
  become random values, and a maximum or minimum over both signed zeros a random zero.

With `rewrites=True` it also evaluates what verglas's rewrites deliberately make more accurate
than numpy (rewrite/canonicalize.py): log(exp(x)) is x, log(sum(exp(x))) and
exp(x) / sum(exp(x)) are the stable logsumexp and softmax. Compiled configurations are judged
against that; the reference executor (no rewrites) against plain numpy.

Choice runs, `NumpyXP(rng, moves=False)`, make the same choices of unspecified values and
round nothing: an output element they change depends on an unspecified value, however far
(an integer fill may shift a float result anywhere), and is not determined.

An output element that comes out the same (within the spread of the perturbed runs) in every
run is determined by the program; only those are compared. An element that a one-ulp change
upstream flips (floor(2.9999999) after a division, a comparison of nearly equal values, an
overflow threshold) is not, and is skipped. The perturbed runs are what makes the comparison
strict everywhere else: exact integer results, exact zeros and their signs, NaN positions,
infinities.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.special

__all__ = ["NumpyXP", "TRANSCENDENTAL_ULPS"]

# how far an implementation's transcendental result may sit from numpy's, in ulps (numpy's
# own float32 exp/log are 2-3.4 ulp off the exact value; verglas's vmath <= 4)
TRANSCENDENTAL_ULPS = 8
# how far one summation order may sit from another, as a multiple of n * eps * sum|x|
SUM_SLACK = 2.0

_UNARY_NP = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor, "ceil": np.ceil,
    "isnan": np.isnan, "isinf": np.isinf, "invert": np.invert,
    "logical_not": np.logical_not,
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sqr": np.square,
    "real": np.real, "imag": np.imag, "conj": np.conjugate,
}
_EXACT_UNARY = {"neg", "abs", "sign", "floor", "ceil", "isnan", "isinf", "invert",
                "logical_not", "real", "imag", "conj"}
_BINARY_NP = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "true_divide": np.true_divide,
    "floor_divide": np.floor_divide, "mod": np.remainder, "power": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "neq": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "left_shift": np.left_shift,
    "right_shift": np.right_shift,
}
_BASIC_BINARY = {"add", "sub", "mul", "true_divide"}


def _float_dtype_of(x) -> np.dtype:
    """The dtype numpy's float functions give `x` (ints and bools: the smallest float that
    holds them)."""
    return np.exp(np.zeros(1, np.asarray(x).dtype)).dtype


def _is_python_scalar(v) -> bool:
    return isinstance(v, (bool, int, float, complex))


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind in "fc"


class NumpyXP:
    """numpy semantics of the fuzzer's ops; with `rng`, one perturbed run (module docstring)."""

    def __init__(self, rng: np.random.Generator | None = None, run: int = 0,
                 rewrites: bool = False, moves: bool = True):
        self.rng = rng
        self.run = run  # which perturbed run: it picks the fill of unspecified values
        # False: a run that only fills unspecified values and flips unspecified zero signs,
        # rounding nothing (what differs from the exact run then depends on those choices)
        self.moves = moves
        self.rewrites = rewrites
        self._made: dict = {}  # id(result) -> (how it was made, the result): see _rewritten

    def _made_by(self, out, *how):
        """Remember how `out` was computed (with `rewrites`)."""
        if self.rewrites:
            self._made[id(out)] = (how, out)
        return out

    def _how(self, a):
        entry = self._made.get(id(a))
        return entry[0] if entry is not None and entry[1] is a else None

    # -- perturbation helpers --------------------------------------------------------------
    def _move(self, x, amount):
        """`x` plus a random fraction in [-1, 1] of `amount` (per element; complex parts
        apart); non-finite elements and zero amounts stay."""
        if self.rng is None or not self.moves:
            return x
        x = np.asarray(x)
        if x.dtype.kind == "c":
            re = self._move(x.real.copy(), amount if np.isrealobj(amount) else amount.real)
            im = self._move(x.imag.copy(), amount if np.isrealobj(amount) else amount.imag)
            return (re + 1j * im).astype(x.dtype)
        if x.dtype.kind != "f" or x.size == 0:
            return x
        u = self.rng.uniform(-1.0, 1.0, x.shape)
        moved = (x.astype(np.float64) + u * np.asarray(amount, np.float64)).astype(x.dtype)
        return np.where(np.isfinite(x), moved, x).astype(x.dtype)

    def _ulps(self, x, n, where=None):
        """`x` moved by up to `n` ulps (only where `where`)."""
        if self.rng is None:
            return x
        x = np.asarray(x)
        if x.dtype.kind not in "fc" or x.size == 0:
            return x
        mag = np.abs(x) if x.dtype.kind == "f" else np.maximum(np.abs(x.real), np.abs(x.imag))
        with np.errstate(all="ignore"):
            amount = n * np.spacing(mag.astype(x.real.dtype)).astype(np.float64)
        amount = np.where(np.isfinite(amount), amount, 0.0)
        if where is not None:
            amount = np.where(where, amount, 0.0)
        return self._move(x, amount)

    def _basic(self, name, a, b, out):
        """A correctly rounded binary result moved one ulp where it is inexact."""
        if self.rng is None or not _is_float(out):
            return out
        out = np.asarray(out)
        if out.dtype.kind == "c":
            return self._ulps(out, 1)
        a, b = (np.asarray(v).astype(out.dtype) for v in (a, b))
        with np.errstate(all="ignore"):
            if name == "true_divide":  # exact when the quotient times b gives a back
                exact = _exact_product(out, b, a)
            elif name == "mul":
                exact = _exact_product(a, b, out)
            else:  # a sum is exact when its rounding error (TwoSum) is zero
                s = out.astype(np.float64) if out.dtype.itemsize < 8 else out
                a64, b64 = a.astype(s.dtype), (b if name == "add" else -b).astype(s.dtype)
                if out.dtype.itemsize < 8:
                    exact = (a64 + b64) == s
                else:
                    bb = s - a64
                    exact = ((a64 - (s - bb)) + (b64 - bb)) == 0
        return self._ulps(out, 1, ~np.asarray(exact))

    def _unrounded_overflow(self, a):
        """|x * y| (wide) where `a` is a float product x * y (with `rewrites`) whose rounding
        overflowed, else 0; None where there is none. A product contracted into an FMA (a*b + c,
        a sum's accumulation) is not rounded: no inf there, so what follows (inf, NaN, or a
        finite value where c cancels it) is the compiler's choice (seed 35240: numpy's
        -inf + inf was NaN, verglas's fma(-3e36, 129, -inf) -inf)."""
        how = self._how(a)
        if how is None or how[0] != "mul" or np.asarray(a).dtype.kind != "f":
            return None
        x, y = (np.asarray(v) for v in how[1:3])
        with np.errstate(all="ignore"):
            mag = np.abs(x.astype(np.longdouble) * y.astype(np.longdouble))
            over = np.isinf(a) & np.isfinite(mag)
        return np.where(over, mag, 0) if np.any(over) else None

    def _unrounded(self, a):
        """_unrounded_overflow, 0 where there is none (terms a sum adds as finite)."""
        over = self._unrounded_overflow(a)
        return np.zeros(np.shape(a), np.longdouble) if over is None else over

    def _transcendental(self, x, out):
        """A function value moved a few ulps (not at x == 0, where every implementation is
        exact: exp(0) = 1, sin(+-0) = +-0, ...)."""
        if self.rng is None:
            return out
        x = np.broadcast_to(np.asarray(x), np.shape(out))
        return self._ulps(out, TRANSCENDENTAL_ULPS, x != 0)

    def _exactly_integral(self, values, bound):
        """Whether every value and `bound` (a sum of magnitudes) are integers any float of the
        result's dtype holds exactly: then every order of summation gives the same result."""
        values = np.asarray(values)
        if values.dtype.kind not in "fc":
            return True
        mant = np.finfo(values.real.dtype).nmant + 1
        with np.errstate(all="ignore"):
            ok = np.all(np.isfinite(values)) and np.all(values == np.round(values))
            return bool(ok) and bool(np.all(np.asarray(bound) < 2.0 ** mant))

    def _summed(self, out, magnitude, count, finite=None):
        """A sum (or sum-like) result moved within any summation order's error. A complex
        sum that overflowed is any mix of inf and NaN (it depends on the order and on how
        the products were formed): random. So is a sum whose finite terms' magnitudes
        (`finite`, summed wide) exceed the dtype: one order (or an FMA) overflows where
        another does not (inf - huge is inf, or NaN once huge overflowed)."""
        if self.rng is None or not _is_float(out):
            return out
        out = np.asarray(out)
        if out.dtype.kind == "c":
            out = self._random_fill(out, ~np.isfinite(out))
        if finite is not None:
            with np.errstate(all="ignore"):
                big = np.asarray(finite) > float(np.finfo(out.real.dtype).max)
            out = self._random_fill(out, np.broadcast_to(big, out.shape))
        eps = np.finfo(out.real.dtype).eps
        n = np.maximum(np.asarray(count, np.float64) - 1, 0)
        amount = SUM_SLACK * eps * n * np.asarray(magnitude, np.float64)
        amount = np.where(np.isfinite(amount), amount, 0.0)
        return self._ulps(self._move(out, np.broadcast_to(amount, out.shape)), 1)

    def _random_fill(self, out, where):
        """Other values where `where` (values numpy leaves unspecified): runs 0-3 put one of
        0, 1, the largest and the smallest value everywhere, runs 4-7 the same four in turn
        by place (neighbours differ), later runs random ones; so what depends on them differs
        between runs (a random integer alone is almost never 0).
        - An unsigned dtype's smallest is 0 again: a random one instead (seed 18478: an argmax
          over [fill + 7, ..., 11] was 5 in every run of 0, 1 and the largest, which wraps,
          while verglas's saturated cast gave 64519 there).
        - Runs in turn (seed 25538): with one value everywhere, a row of unspecified values
          was the same in every run, and a log_softmax over it always -log(n), while
          verglas's saturated casts of NaN, -inf and 1e30 differ."""
        if self.rng is None or not np.any(where):
            return out
        out = np.array(out)
        dt = out.dtype
        if self.run < 4:
            turn = np.full(out.shape, self.run)
        else:
            turn = (self.run + np.arange(out.size).reshape(out.shape)) % 4
        if dt.kind in "iu":
            info = np.iinfo(dt)
            random = self.rng.integers(info.min, info.max, size=out.shape, endpoint=True,
                                       dtype=dt)
            fills = [np.full(out.shape, v, dt) for v in (0, 1, info.max, info.min)]
            if info.min == 0:
                fills[3] = random
            fill = np.choose(turn, fills) if self.run < 8 else random
        elif dt.kind == "b":
            fill = turn % 2 == 1
        else:
            fill = np.choose(turn, [np.full(out.shape, v, dt)
                                    for v in (0.0, np.nan, np.inf, -1.0)])
        out[where] = fill[where]
        return out

    # -- elementwise -------------------------------------------------------------------------
    def unary(self, a, name):
        out = self._unary(a, name)
        return self._made_by(out, "exp", a) if name == "exp" else out

    def _unary(self, a, name):
        a = np.asarray(a)
        if name in ("sigmoid", "softplus", "erf") and a.dtype.kind == "c":
            raise TypeError(f"{name}: not supported for complex input")  # as scipy's expit
        if name == "sigmoid":
            dt = _float_dtype_of(a)
            out = scipy.special.expit(a.astype(np.float64)).astype(dt)
            return self._transcendental(a, out)
        if name == "softplus":
            dt = _float_dtype_of(a)
            out = np.logaddexp(0.0, a.astype(np.float64)).astype(dt)
            return self._transcendental(a, out)
        if name == "erf":
            dt = _float_dtype_of(a)
            wide = np.complex128 if dt.kind == "c" else np.float64
            out = scipy.special.erf(a.astype(wide)).astype(dt)
            return self._transcendental(a, out)
        if name == "reciprocal":
            return self.binary(1, a, "true_divide")
        if name == "log" and self.rewrites:
            stable = self._stable_log(a)
            if stable is not None:
                return stable
        out = np.asarray(_UNARY_NP[name](a))
        if name == "abs" and a.dtype.kind == "c":  # a hypot: not correctly rounded anywhere
            return self._ulps(out, 2)
        if name in _EXACT_UNARY or not _is_float(out):
            return out
        if name == "sqr":
            return self._made_by(self._basic("mul", a, a, out), "mul", a, a)
        if name == "sqrt":
            if self.rng is None or out.dtype.kind == "c":
                return self._ulps(out, 1)
            wide = np.float64 if out.dtype.itemsize < 8 else np.longdouble
            with np.errstate(all="ignore"):
                exact = out.astype(wide) * out.astype(wide) == a.astype(wide)
            return self._ulps(out, 1, ~exact)
        return self._transcendental(a, out)

    def _stable_log(self, a):
        """What verglas's rewrites make of log(a): x for a = exp(x), the stable logsumexp for
        a = sum(exp(x)) (float x of a's dtype), else None."""
        how = self._how(a)
        if how is None:
            return None
        if how[0] == "exp" and _is_float(how[1]) and np.asarray(how[1]).dtype.kind == "f":
            return np.array(how[1])
        if how[0] == "sum":
            _, e, axis, keepdims = how
            inner = self._how(e)
            if inner is not None and inner[0] == "exp" and np.asarray(inner[1]).dtype == \
                    a.dtype and a.dtype.kind == "f":
                return self.nn(inner[1], "logsumexp", axis=axis, keepdims=keepdims)
        return None

    def _stable_softmax(self, num, den):
        """The stable softmax verglas's rewrites make of exp(x) / sum(exp(x), keepdims=True),
        else None."""
        how, inner = self._how(den), self._how(num)
        if how is None or inner is None or how[0] != "sum" or inner[0] != "exp":
            return None
        _, e, axis, keepdims = how
        x = np.asarray(inner[1])
        if e is not num or not keepdims or x.dtype != np.asarray(num).dtype or \
                x.dtype.kind != "f":
            return None
        return self.nn(x, "softmax", axis=tuple(range(x.ndim)) if axis is None else axis)

    def binary(self, a, b, name, spelling="function"):
        if name == "true_divide" and self.rewrites:
            stable = self._stable_softmax(a, b)
            if stable is not None:
                return stable
        out = np.asarray(_BINARY_NP[name](a, b))
        if name in _BASIC_BINARY:
            moved = self._basic(name, a, b, out)
            if name == "mul":
                return self._made_by(moved, "mul", a, b)
            if name in ("add", "sub"):
                for v in (a, b):
                    over = self._unrounded_overflow(v)
                    if over is not None:
                        moved = self._random_fill(moved, np.broadcast_to(over > 0, out.shape))
            return moved
        if name == "power" and _is_float(out):
            return self._power(a, b, out)
        return out

    def _power(self, a, b, out):
        if self.rng is None:
            return out
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        if out.dtype.kind == "c":  # numpy multiplies for integer exponents: |b| roundings
            with np.errstate(all="ignore"):
                ulps = TRANSCENDENTAL_ULPS + 2 * np.abs(b).astype(np.float64)
                # where |a|**|b| leaves the range, which parts overflow on the way (inf, NaN
                # or a finite result) depends on the algorithm: numpy's repeated products
                # give NaN for z**-5 of a huge z, exp(b * log(a)) gives 0
                power = np.abs(a).astype(np.float64) ** np.abs(b).astype(np.float64)
                info = np.finfo(out.real.dtype)
                unspecified = ~np.isfinite(out) | ~(power <= float(info.max)) | (
                    (power < float(info.tiny)) & (power > 0))
            return self._ulps(self._random_fill(out, unspecified),
                              np.where(np.isfinite(ulps), ulps, 0.0))
        with np.errstate(all="ignore"):
            af, bf = a.astype(np.float64), b.astype(np.float64)
            integral = (af == np.round(af)) & (bf == np.round(bf)) & (bf >= 0)
            mant = np.finfo(out.real.dtype).nmant + 1 if out.dtype.kind in "fc" else 53
            exact = integral & (np.abs(out) < 2.0 ** mant)
            exact |= (bf == 0) | (af == 1) | (bf == 1) | ~np.isfinite(af) | ~np.isfinite(bf)
        return self._ulps(out, TRANSCENDENTAL_ULPS, ~exact)

    def where(self, c, a, b):
        # np.where wraps a Python int the result dtype cannot hold (where(c, uint8, -5) gives
        # 251); verglas raises OverflowError as numpy's ufuncs do: the oracle follows them.
        # Two Python scalars are typed as np.asarray types them.
        dtypes = [np.asarray(v).dtype for v in (a, b) if not _is_python_scalar(v)]
        if not dtypes:
            a, b = np.asarray(a), np.asarray(b)
        for v in (a, b):
            if isinstance(v, int) and not isinstance(v, bool) and dtypes:
                dt = np.result_type(*dtypes, v)
                if dt.kind in "iu" and not np.iinfo(dt).min <= v <= np.iinfo(dt).max:
                    raise OverflowError(f"Python integer {v} out of bounds for {dt}")
        return np.asarray(np.where(c, a, b))

    def clip(self, a, lo, hi):
        if lo is None and hi is None:
            return np.array(a)
        out = np.asarray(np.clip(a, lo, hi))
        if self.rng is not None and out.dtype.kind == "f" and lo is not None and hi is not None:
            # which zero a tie of +0.0 and -0.0 gives depends on numpy's loop (x wins against
            # scalar bounds, the bound wins against array bounds)
            with np.errstate(all="ignore"):
                tie = (out == 0) & ((np.asarray(a) == lo) | (np.asarray(a) == hi))
            flip = tie & (self.rng.random(out.shape) < 0.5)
            out = np.where(flip, -out, out).astype(out.dtype)
        return out

    def cast(self, a, dtype, spelling="method"):
        a = np.asarray(a)
        dt = np.dtype(dtype)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = a.astype(dt)
            if a.dtype.kind in "fc" and dt.kind in "iu":
                return self._random_fill(out, _unspecified_cast(a, dt))
        return out

    def like(self, a, name, value=None, dtype=None):
        if name == "zeros_like":
            return np.zeros_like(a, dtype=dtype)
        if name == "ones_like":
            return np.ones_like(a, dtype=dtype)
        return np.full_like(a, value, dtype=dtype)

    # -- reductions ----------------------------------------------------------------------------
    def reduce(self, a, name, axis=None, keepdims=False, spelling="function"):
        a = np.asarray(a)
        if name in ("argmax", "argmin"):
            return np.asarray(getattr(np, name)(a, axis=axis, keepdims=keepdims))
        if name in ("any", "all", "max", "min"):
            out = np.asarray(getattr(np, name)(a, axis=axis, keepdims=keepdims))
            if name in ("max", "min") and self.rng is not None and out.dtype.kind == "f":
                both = np.any(a == 0, axis=axis, keepdims=keepdims) & np.any(
                    np.signbit(a) & (a == 0), axis=axis, keepdims=keepdims) & np.any(
                    ~np.signbit(a) & (a == 0), axis=axis, keepdims=keepdims)
                flip = (out == 0) & both & (self.rng.random(out.shape) < 0.5)
                out = np.where(flip, -out, out).astype(out.dtype)
            return out
        if name == "sum":
            return self._made_by(self._sum(a, axis, keepdims), "sum", a, axis, keepdims)
        if name == "prod":
            out = np.asarray(np.prod(a, axis=axis, keepdims=keepdims))
            if self.rng is None or not _is_float(out):
                return out
            count = a.size // max(out.size, 1) if out.size else 0
            with np.errstate(all="ignore"):
                mag = np.prod(np.abs(a).astype(np.float64), axis=axis, keepdims=keepdims)
            risky = _order_dependent_product(a, axis, keepdims)
            if self._exactly_integral(a, mag):
                # exact in any order, but for a zero beside factors whose product overflows:
                # 0 or NaN (inf * 0) by the order (seed 27055: float16, a tree order on CUDA)
                zero = np.any(a == 0, axis=axis, keepdims=keepdims)
                return self._random_fill(out, risky & zero)
            return self._ulps(self._random_fill(out, risky), max(2 * count, 1))
        if name == "mean":
            total = self._sum(a if _is_float(a) else a.astype(np.float64), axis, keepdims)
            count = a.size // max(total.size, 1) if total.size else 0
            if a.size == 0:
                count = int(np.prod([a.shape[x] for x in _axes(axis, a.ndim)]))
            return self.binary(total, np.asarray(count, total.dtype), "true_divide")
        if name in ("var", "std"):
            af = a if _is_float(a) else a.astype(np.float64)
            centered = self.binary(af, self.reduce(af, "mean", axis, keepdims=True), "sub")
            sq = self.binary(centered, np.conj(centered), "mul") if af.dtype.kind == "c" \
                else self.unary(centered, "sqr")
            if af.dtype.kind == "c":
                sq = sq.real
            out = self.reduce(sq, "mean", axis, keepdims)
            return self.unary(out, "sqrt") if name == "std" else out
        raise ValueError(f"unknown reduction {name}")

    def _sum(self, a, axis, keepdims):
        out = np.asarray(np.sum(a, axis=axis, keepdims=keepdims))
        if self.rng is None or not _is_float(out):
            return out
        mag = np.sum(np.abs(a).astype(np.float64), axis=axis, keepdims=keepdims)
        if self._exactly_integral(a, mag):
            return out
        count = a.size // max(out.size, 1) if out.size else 0
        finite = np.sum(_finite_abs(a) + self._unrounded(a), axis=axis, keepdims=keepdims)
        return self._summed(out, mag, count, finite)

    def cumsum(self, a, axis=None):
        a = np.asarray(a)
        out = np.asarray(np.cumsum(a, axis=axis))
        if self.rng is None or not _is_float(out):
            return out
        flat = a.reshape(-1) if axis is None else a
        mag = np.cumsum(np.abs(flat).astype(np.float64), axis=0 if axis is None else axis)
        if self._exactly_integral(a, mag):
            return out
        shape = [1] * out.ndim
        ax = 0 if axis is None else axis % max(a.ndim, 1)
        if out.ndim:
            shape[ax] = out.shape[ax]
        count = np.arange(1, out.shape[ax] + 1).reshape(shape) if out.ndim else 1
        finite = np.cumsum(_finite_abs(flat) + self._unrounded(a).reshape(flat.shape),
                           axis=0 if axis is None else axis)
        return self._summed(out, mag, count, finite)

    def nn(self, a, name, axis=-1, keepdims=False):
        """softmax, log_softmax and logsumexp as numpy compositions (scipy's semantics:
        integers computed in float64, an empty axis gives -inf for logsumexp)."""
        rewrites, self.rewrites = self.rewrites, False  # (its own exp/sum/log are not patterns)
        try:
            return self._nn(a, name, axis, keepdims)
        finally:
            self.rewrites = rewrites

    def _nn(self, a, name, axis, keepdims):
        a = np.asarray(a)
        if not _is_float(a):
            a = a.astype(np.float64)
        axes = _axes(axis, a.ndim)
        if any(a.shape[x] == 0 for x in axes):
            shift = np.zeros(tuple(1 if i in axes else s for i, s in enumerate(a.shape)), a.dtype)
        else:
            top = self.reduce(a, "max", axes, keepdims=True)
            shift = np.where(np.isinf(top), np.zeros((), a.dtype), top).astype(a.dtype)
        shifted = self.binary(a, shift, "sub")
        e = self.unary(shifted, "exp")
        total = self.reduce(e, "sum", axes, keepdims=True)
        if name == "softmax":
            return self.binary(e, total, "true_divide")
        if name == "log_softmax":
            return self.binary(shifted, self.unary(total, "log"), "sub")
        out = self.binary(self.unary(total, "log"), shift, "add")
        return np.squeeze(out, axis=axes) if not keepdims else out

    # -- linear algebra --------------------------------------------------------------------------
    def matmul(self, a, b, spelling="function"):
        return self._product(np.matmul, a, b)

    def dot(self, a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim == 0 or b.ndim == 0:
            return self.binary(a, b, "mul")
        return self._product(np.dot, a, b)

    def _product(self, fn, a, b):
        out = np.asarray(fn(a, b))
        if self.rng is None or not _is_float(out):
            return out
        if out.dtype.kind == "f":
            # the sign of a zero sum of products depends on where the sum starts: numpy's own
            # dot and matmul give -0.0 and 0.0 for [-6.0] . [0.0]
            flip = (out == 0) & (self.rng.random(out.shape) < 0.5)
            out = np.where(flip, -out, out).astype(out.dtype)
        with np.errstate(all="ignore"):
            mag = np.asarray(fn(np.abs(np.asarray(a)).astype(np.float64),
                                np.abs(np.asarray(b)).astype(np.float64)))
        k = np.asarray(a).shape[-1] if np.ndim(a) else 1
        if self._exactly_integral(a, mag) and self._exactly_integral(b, mag):
            return out
        with np.errstate(all="ignore"):
            finite = np.asarray(fn(_finite_abs(a), _finite_abs(b)))
        return self._summed(out, mag, k + 1, finite)

    # -- shapes and indexing ---------------------------------------------------------------------
    def reshape(self, a, shape, spelling="function"):
        return np.reshape(a, shape)

    def transpose(self, a, axes=None, spelling="function"):
        return np.transpose(a, axes)

    def expand_dims(self, a, axis):
        return np.expand_dims(a, axis)

    def squeeze(self, a, axis=None):
        return np.squeeze(a, axis)

    def broadcast_to(self, a, shape):
        return np.array(np.broadcast_to(a, shape))

    def concatenate(self, *arrays, axis=0):
        return np.concatenate(arrays, axis=axis)

    def stack(self, *arrays, axis=0):
        return np.stack(arrays, axis=axis)

    def getitem(self, a, *dynamic, template):
        return np.array(np.asarray(a)[fill_index(template, dynamic)])

    def update(self, a, v, *dynamic, template, inc):
        out = np.array(a, copy=True)
        index = fill_index(template, dynamic)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if not inc:
                out[index] = v  # (a Python scalar stays weak: out of range raises)
                values = np.asarray(v)
                if values.dtype.kind in "fc" and out.dtype.kind in "iu":
                    # floats stored into integers: the cast of NaN, inf and out-of-range
                    # values is undefined, as in cast
                    unspecified = np.zeros(out.shape, bool)
                    unspecified[index] = _unspecified_cast(values, out.dtype)
                    out = self._random_fill(out, unspecified)
                return out
            # x[idx] += v decides the dtypes and errors (the dtype rule first: verglas checks
            # it when building); repeated indices then accumulate
            if not _is_python_scalar(v) and not np.can_cast(np.asarray(v).dtype, out.dtype,
                                                            "same_kind"):
                raise TypeError(f"cannot add {np.asarray(v).dtype} into {out.dtype}")
            added = np.add(out[index], v)
            if added.dtype != out.dtype and not np.can_cast(added.dtype, out.dtype,
                                                            "same_kind"):
                raise TypeError(f"cannot add {np.asarray(v).dtype} into {out.dtype}")
            if any(isinstance(e, np.ndarray) for e in index):
                # values broadcast first: numpy 2.4's add.at reads past a value array that it
                # broadcasts against a 2-d index itself (nan, or a sum that misses terms)
                np.add.at(out, index, np.ascontiguousarray(
                    np.broadcast_to(np.asarray(v).astype(added.dtype), added.shape)))
                if self.rng is not None and _is_float(out):
                    # an element incremented twice or more that overflowed: which inf or NaN
                    # depends on the order and precision of the additions
                    counts = np.zeros(out.shape, np.int64)
                    np.add.at(counts, index, 1)
                    out = self._random_fill(out, (counts > 1) & ~np.isfinite(out))
            else:
                view = out[index] if Ellipsis in index else out[index + (Ellipsis,)]
                view += v
            if self.rng is not None and _is_float(out):
                out = self._ulps(out, 2 * max(1, np.asarray(v).size), out != np.asarray(a))
        return out

    def const(self, kind, shape=None, value=None, dtype=None, start=0, stop=None, step=1):
        if kind == "arange":
            out = np.arange(start, stop, step, dtype=dtype)
            if self.rng is not None and out.dtype.kind == "f":
                out = self._ulps(out, 1)
            return out
        if kind == "zeros":
            return np.zeros(shape, dtype)
        if kind == "ones":
            return np.ones(shape, dtype)
        return np.full(shape, value, dtype)

    # -- inner graphs ----------------------------------------------------------------------------
    def ofg(self, *args, body, outs, use=0, inline=False):
        from tests.fuzz.program import evaluate

        return evaluate(body, self, [np.asarray(a) for a in args])[outs[use]]

    def scan_map(self, *seqs, body, out):
        from tests.fuzz.program import evaluate

        seqs = [np.asarray(s) for s in seqs]
        steps = [evaluate(body, self, [s[t] for s in seqs])[out] for t in range(len(seqs[0]))]
        return np.stack([np.asarray(v) for v in steps])

    def scan_acc(self, init, *seqs, body, out, last=False, until=False):
        from tests.fuzz.program import evaluate

        h = np.asarray(init)
        seqs = [np.asarray(s) for s in seqs]
        trace = []
        for t in range(len(seqs[0])):
            new = self.cast(evaluate(body, self, [h, *[s[t] for s in seqs]])[out], h.dtype)
            trace.append(new)
            stop = until and bool(np.all(new == h))  # a fixed point: the loop stops
            h = new
            if stop:
                break
        trace = np.stack(trace)
        return trace[-1] if last else trace


def _unspecified_cast(a, dtype) -> np.ndarray:
    """Where converting float (or complex) `a` to integer `dtype` is undefined in C: NaN, inf
    and values out of the dtype's range."""
    real = np.asarray(a).real.astype(np.float64)
    info = np.iinfo(dtype)
    with np.errstate(all="ignore"):
        return ~np.isfinite(real) | (real >= float(info.max) + 1) | (real <= float(info.min) - 1)


def _order_dependent_product(a, axis, keepdims) -> np.ndarray:
    """Where a product's value depends on the order of its factors: its factors above 1 (or
    its nonzero ones below 1) multiply past the dtype's range, so some order overflows (or
    underflows) on the way where another does not; and where a complex product is not finite
    (which of inf and NaN depends on the order of the cross terms)."""
    a = np.asarray(a)
    info = np.finfo(a.real.dtype)
    with np.errstate(all="ignore"):
        mag = np.abs(a).astype(np.float64)
        big = np.prod(np.where(mag > 1, mag, 1.0), axis=axis, keepdims=keepdims)
        small = np.prod(np.where((mag < 1) & (mag > 0), mag, 1.0), axis=axis,
                        keepdims=keepdims)
        risky = (big > float(info.max)) | (small < float(info.tiny))
        if a.dtype.kind == "c":
            risky |= ~np.isfinite(np.prod(a, axis=axis, keepdims=keepdims))
    return np.asarray(risky)


def _finite_abs(a):
    """|a| with its non-finite elements 0, in a dtype wide enough not to overflow."""
    a = np.asarray(a)
    wide = np.longdouble if a.dtype.itemsize >= 8 else np.float64
    mag = np.abs(a).astype(wide)
    return np.where(np.isfinite(mag), mag, 0)


def _exact_product(a, b, p):
    """Whether a * b == p exactly (float64: Dekker's product with Veltkamp's split; narrower
    floats: their float64 product is exact)."""
    a, b, p = np.broadcast_arrays(np.asarray(a), np.asarray(b), np.asarray(p))
    if p.dtype.itemsize < 8:
        return a.astype(np.float64) * b.astype(np.float64) == p.astype(np.float64)
    a, b, p = (v.astype(np.float64) for v in (a, b, p))
    ah, al = _split(a)
    bh, bl = _split(b)
    err = (((ah * bh - p) + ah * bl) + al * bh) + al * bl
    return (a * b == p) & (err == 0) & np.isfinite(err)


def _split(a):
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _axes(axis, ndim) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted(a % ndim for a in axes)) if ndim else ()


class Ref:
    """A place in an index template filled by a program value (a dynamic index)."""

    __slots__ = ("k",)

    def __init__(self, k: int):
        self.k = k

    def __repr__(self):
        return f"Ref({self.k})"


def fill_index(template, dynamic):
    """The numpy index `template` describes, with its Ref entries replaced by `dynamic`."""
    out = []
    for entry in template:
        if isinstance(entry, Ref):
            out.append(dynamic[entry.k])
        elif isinstance(entry, tuple) and entry and entry[0] == "slice":
            out.append(slice(*(dynamic[c.k] if isinstance(c, Ref) else c for c in entry[1:])))
        else:
            out.append(entry)
    return tuple(out)


_ = math
