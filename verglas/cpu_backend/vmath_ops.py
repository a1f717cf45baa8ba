"""Building blocks of the vectorizable math kernels: bit casts, exact float steps, Horner.

Everything here is ``inline="always"`` into the kernels of vmath, vmath_trig and vmath_pow.
The steps an error-free transformation needs (two-sum, two-product, Cody-Waite products) go
through ``llvm.fma`` or through ``_sadd``/``_ssub``/``_smul``: float operations emitted with
the single fast-math flag 'afn', which means nothing for an add or a multiply but keeps
numba from stamping the caller's 'reassoc'/'nsz'/'arcp' on them (numba only flags
instructions that have none), so ``(a + b) - a`` is never folded to ``b``.  An add that
takes an error term of these must be strict too: LLVM's combines of a 'reassoc'+'nsz' add
look through the adds that feed it, flagged or not (a two_sum's error term, consumed by a
fast subtract, came out 0).
"""

import struct

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

FASTMATH = frozenset({"contract"})
JIT = {"inline": "always", "fastmath": set(FASTMATH), "cache": False}


@intrinsic
def as_int(typingctx, x):
    """Reinterpret float64/float32 bits as int64/int32."""
    ret = types.int64 if x == types.float64 else types.int32

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(x), codegen


@intrinsic
def as_float(typingctx, x):
    """Reinterpret int64/int32 bits as float64/float32."""
    ret = types.float64 if x == types.int64 else types.float32

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(x), codegen


@intrinsic
def fdiv(typingctx, a, b):
    """a / b as a bare fdiv: numba's '/' adds a zero check that blocks vectorization."""

    def codegen(context, builder, sig, args):
        return builder.fdiv(args[0], args[1], flags=("afn",))  # exact: never 'arcp'

    return a(a, b), codegen


def _strict(opname: str):
    """A float add/sub/mul that callers' fast-math flags do not reach (see module doc)."""

    @intrinsic
    def op(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, opname)(args[0], args[1], flags=("afn",))

        return a(a, b), codegen

    return op


sadd, ssub, smul = map(_strict, ("fadd", "fsub", "fmul"))


@intrinsic
def rint(typingctx, x):
    """Round to the nearest integer (llvm.rint, vectorizes to vrndscale); survives 'reassoc'."""

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(args[0].type, [args[0].type])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.rint.f{x.bitwidth}")
        return builder.call(fn, args)

    return x(x), codegen


@intrinsic
def to_int(typingctx, x):
    """An integral float64/float32 `x` (|x| < 2^51 / 2^22) as int64/int32, through its bits:
    the low bits of x + 1.5*2^52 (1.5*2^23). For NaN and inf the bits are garbage but
    defined, where numba's fptosi gives poison (LLVM folding a kernel on a constant NaN made
    its whole result garbage, not NaN); as cheap as the conversion on AVX-512 and cheaper
    without it (AVX2 has no vector float64 -> int64), unlike clamping or llvm.fptosi.sat."""
    ret = types.int64 if x == types.float64 else types.int32

    def codegen(context, builder, sig, args):
        ity = context.get_value_type(ret)
        magic = 1.5 * 2.0 ** (52 if ret == types.int64 else 23)
        shifted = builder.fadd(args[0], ir.Constant(args[0].type, magic), flags=("afn",))
        packed = struct.pack("<d" if ret == types.int64 else "<f", magic)
        magic_bits = ir.Constant(ity, int.from_bytes(packed, "little"))
        return builder.sub(builder.bitcast(shifted, ity), magic_bits)

    return ret(x), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma, vfmadd), free of the caller's fast-math flags.

    numba stamps its fast-math flags on every call that returns a scalar float, and with
    'reassoc' LLVM's backend folds fma(a, b, -(a*b)) to 0; the call is made on one-lane
    vectors, which numba leaves alone and LLVM turns back into a plain scalar fma."""

    def codegen(context, builder, sig, args):
        ty = args[0].type
        vty = ir.VectorType(ty, 1)
        fnty = ir.FunctionType(vty, [vty] * 3)
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fma.v1f{a.bitwidth}")
        zero = ir.Constant(ir.IntType(32), 0)
        vargs = [builder.insert_element(ir.Constant(vty, None), v, zero) for v in args]
        return builder.extract_element(builder.call(fn, vargs), zero)

    return a(a, b, c), codegen


def _int_op(opname: str):
    """An int32/int64 binary op that keeps the width of its first operand.

    numba widens int32 arithmetic to int64, and LLVM cannot always narrow it back, which
    halves the SIMD lanes of the float32 kernels' exponent manipulation.
    """

    @intrinsic
    def op(typingctx, a, b):
        def codegen(context, builder, sig, args):
            rhs = context.cast(builder, args[1], sig.args[1], sig.args[0])
            return getattr(builder, opname)(args[0], rhs)

        return a(a, b), codegen

    return op


iadd, isub, iand, ior, ixor = map(_int_op, ("add", "sub", "and_", "or_", "xor"))
shl, ashr = _int_op("shl"), _int_op("ashr")


@numba.njit(**JIT)
def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e == a + b exactly (Knuth, any magnitudes)."""
    s = sadd(a, b)
    bb = ssub(s, a)
    return s, sadd(ssub(a, ssub(s, bb)), ssub(b, bb))


@numba.njit(**JIT)
def fast_two_sum(a, b):
    """(s, e) with s + e == a + b exactly, for |a| >= |b| (or a == 0)."""
    s = sadd(a, b)
    return s, ssub(b, ssub(s, a))


@numba.njit(**JIT)
def two_prod(a, b):
    """(p, e) with p = fl(a * b) and p + e == a * b exactly (barring underflow)."""
    p = smul(a, b)
    return p, fma(a, b, -p)


def make_horner(n: int):
    """Build an inlined Horner evaluation of an n-coefficient tuple (lowest degree first)."""
    expr = f"c[{n - 1}]"
    for i in range(n - 2, -1, -1):
        expr = f"({expr}) * z + c[{i}]"
    scope: dict = {}
    exec(f"def horner(z, c):\n    return {expr}\n", scope)
    return numba.njit(**JIT)(scope["horner"])
