"""A rare slow path that a vectorized loop pays for only when a vector needs it.

A vectorized loop computes both sides of every select, so a slow path written as plain
kernel code (a Payne-Hanek reduction, say) would cost every element.  ``rare_path(name, slow,
dtype, limit)`` instead gives an intrinsic ``fix(x, fast)`` that returns ``fast``, or
``slow(x)`` where ``|x| >= limit``, as a call to a small scalar function ``vg_<name>``
declared with LLVM vector-function-ABI variants ("vector-function-abi-variant"): when LLVM
vectorizes the loop it calls ``vg_<name>_v<N>(<N x T> x, <N x T> fast)``, which tests the
whole vector at once (one compare and one branch) and only if a lane is large calls the
scalar slow function on each lane.  ``slow`` is compiled once as a ``numba.cfunc`` (it may
branch and loop: it is never vectorized).

The functions live in one small LLVM library per name, linked into every library whose code
calls ``fix``; ``@llvm.compiler.used`` keeps the vector variants alive until the vectorizer
has seen them.  The vector variants use the intel_ocl_bicc calling convention (LLVM gives
the call site the variant's convention), whose callee-saved vector registers spare the loop
a spill and reload of every constant around the call: with the C convention the same sin
loop ran 10-35% slower, depending on the stack's alignment.  Cost on the common path: a
call, an abs, a compare and a branch per vector.
"""

import numba
import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

# vector widths LLVM may pick (float64: 128/256/512-bit registers, x2 and x4 unrolled wider)
_WIDTHS = {"float64": (2, 4, 8, 16, 32), "float32": (4, 8, 16, 32, 64)}
_LL = {"float64": "double", "float32": "float"}
_LIBRARIES: dict = {}  # name -> finalized numba CodeLibrary


def _vector_variant(name: str, t: str, n: int, limit: str, masked: bool) -> str:
    """IR of vg_<name>_{v,m}<n>: one vector test, then the scalar function on every lane."""
    v = f"<{n} x {t}>"
    splat = "<" + ", ".join([f"{t} {limit}"] * n) + ">"
    mask_arg = f", <{n} x i1> %mask" if masked else ""
    fabs = f"llvm.fabs.v{n}f{64 if t == 'double' else 32}"
    big = "%big0"
    # intel_ocl_bicc: the callee preserves zmm16-31 (ymm8-15 without AVX-512), so the loop
    # keeps its constants in registers across the call instead of spilling them around it.
    lines = [f"define intel_ocl_bicc {v} @vg_{name}_{'m' if masked else 'v'}{n}"
             f"({v} %x, {v} %r{mask_arg}) #1 {{",
             "entry:",
             f"  %ax = call {v} @{fabs}({v} %x)",
             f"  %big0 = fcmp oge {v} %ax, {splat}"]
    if masked:
        lines.append(f"  %big1 = and <{n} x i1> %big0, %mask")
        big = "%big1"
    lines += [f"  %bits = bitcast <{n} x i1> {big} to i{n}",
              f"  %any = icmp ne i{n} %bits, 0",
              "  br i1 %any, label %lanes, label %done, !prof !0",
              "done:",
              f"  ret {v} %r",
              "lanes:",
              "  br label %lane",
              "lane:",
              "  %i = phi i32 [0, %lanes], [%i1, %lane]",
              f"  %acc = phi {v} [%r, %lanes], [%acc1, %lane]",
              f"  %xi = extractelement {v} %x, i32 %i",
              f"  %ri = extractelement {v} %acc, i32 %i",
              f"  %si = call {t} @vg_{name}({t} %xi, {t} %ri)",
              f"  %acc1 = insertelement {v} %acc, {t} %si, i32 %i",
              "  %i1 = add i32 %i, 1",
              f"  %last = icmp eq i32 %i1, {n}",
              "  br i1 %last, label %out, label %lane",
              "out:",
              f"  ret {v} %acc1",
              "}"]
    return "\n".join(lines)


def _module_text(name: str, dtype: str, limit: float, slow_symbol: str) -> str:
    """The scalar function vg_<name>, its vector variants and their declarations."""
    t = _LL[dtype]
    sfx = "f64" if dtype == "float64" else "f32"
    lim = ir.Constant(ir.DoubleType() if dtype == "float64" else ir.FloatType(), limit)
    lim = lim.get_reference()  # LLVM's exact hex spelling
    widths = _WIDTHS[dtype]
    abi = ",".join([f"_ZGV_LLVM_N{n}vv_vg_{name}(vg_{name}_v{n})" for n in widths]
                   + [f"_ZGV_LLVM_M{n}vv_vg_{name}(vg_{name}_m{n})" for n in widths])
    variants = [_vector_variant(name, t, n, lim, masked) for n in widths
                for masked in (False, True)]
    used = ", ".join(f"ptr @vg_{name}_{k}{n}" for n in widths for k in "vm")
    decls = [f"declare <{n} x {t}> @llvm.fabs.v{n}{sfx}(<{n} x {t}>)" for n in widths]
    return "\n".join([
        f"declare {t} @{slow_symbol}({t})",
        f"declare {t} @llvm.fabs.{sfx}({t})",
        *decls,
        f"define {t} @vg_{name}({t} %x, {t} %r) #0 {{",
        "entry:",
        f"  %ax = call {t} @llvm.fabs.{sfx}({t} %x)",
        f"  %big = fcmp oge {t} %ax, {lim}",
        "  br i1 %big, label %slow, label %fast, !prof !0",
        "fast:",
        f"  ret {t} %r",
        "slow:",
        f"  %s = call {t} @{slow_symbol}({t} %x)",
        f"  ret {t} %s",
        "}",
        *variants,
        f"@llvm.compiler.used = appending global [{2 * len(widths)} x ptr] [{used}], "
        'section "llvm.metadata"',
        "attributes #0 = { noinline nounwind willreturn memory(none) speculatable "
        f'"vector-function-abi-variant"="{abi}" }}',
        "attributes #1 = { nounwind willreturn memory(none) }",
        '!0 = !{!"branch_weights", i32 1, i32 1000}',
        ""])


def _slow_cfunc(nbt, slow):
    """`slow` compiled as a cfunc, cached by numba beside its module (a library routine, not
    the user's program: a Payne-Hanek reduction costs ~0.5 s to compile, once per install)."""
    try:
        return numba.cfunc(nbt(nbt), cache=True, error_model="numpy", fastmath=False)(slow)
    except RuntimeError:  # numba found no writable cache directory: compile every process
        return numba.cfunc(nbt(nbt), cache=False, error_model="numpy", fastmath=False)(slow)


def _library(context, name: str, slow, dtype: str, limit: float):
    """The finalized library holding vg_<name>, built on first use."""
    lib = _LIBRARIES.get(name)
    if lib is None:
        nbt = numba.float64 if dtype == "float64" else numba.float32
        cfunc = _slow_cfunc(nbt, slow)
        text = _module_text(name, dtype, limit, cfunc._wrapper_name)
        module = llvm.parse_assembly(text)
        module.verify()
        lib = context.codegen().create_library(f"vg_{name}")
        lib.add_llvm_module(module)
        lib.add_linking_library(cfunc._library)
        lib.finalize()
        _LIBRARIES[name] = lib
    return lib


def rare_path(name: str, slow, dtype: str, limit: float):
    """Intrinsic fix(x, fast): fast, or slow(x) (a plain Python function compiled as a
    cfunc) where |x| >= limit; vectorized loops test a whole vector before calling slow."""
    nbt = types.float64 if dtype == "float64" else types.float32

    @intrinsic
    def fix(typingctx, x, fast):
        def codegen(context, builder, sig, args):
            context.add_linking_libs([_library(context, name, slow, dtype, limit)])
            ty = context.get_value_type(nbt)
            fnty = ir.FunctionType(ty, [ty, ty])
            fn = cgutils.get_or_insert_function(builder.module, fnty, f"vg_{name}")
            return builder.call(fn, args)

        return nbt(nbt, nbt), codegen

    return fix
