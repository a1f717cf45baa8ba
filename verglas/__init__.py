"""verglas: a GPU-targeted array-program compiler for Python."""

__version__ = "0.1.0"

import importlib
import pkgutil

from verglas.artifact import load
from verglas.config import config
from verglas.function import Function, asnumpy, compile
from verglas.grad import grad
from verglas.graph.printing import dprint
from verglas.ops.basic import (as_tensor, concatenate, constant, expand_dims, squeeze, stack,
                               transpose)
from verglas.ops.indexing import inc_subtensor, set_subtensor
from verglas.ops.linalg import dot, matmul
from verglas.ops.math import (abs, add, bitwise_and, bitwise_or, bitwise_xor, cast, ceil, clip,
                              conj, cos, divide, eq, erf, exp, expm1, floor, floor_divide,
                              full_like, ge, gt, imag, invert, isinf, isnan, le, left_shift, log,
                              log1p, logical_and, logical_not, logical_or, lt, maximum, minimum,
                              mod, mul, neg, neq, ones_like, power, real, reciprocal, right_shift,
                              sigmoid, sign, sin, softplus, sqr, sqrt, sub, tan, tanh, true_divide,
                              where, zeros_like)
from verglas.ops.nn import log_softmax, logsumexp, softmax
from verglas.ops.op_from_graph import OpFromGraph
from verglas.ops.reduce import all, any, argmax, argmin, cumsum, max, mean, min, prod, std, sum, var
from verglas.ops.scan import scan, until
from verglas.ops.shape import arange, broadcast_to, full, ones, reshape, zeros
from verglas.ops.variable import scalar, tensor

# every backend registers itself when it loads (verglas/backend.py): each module
# verglas/<device>_backend is imported here, so a new backend is one new package
for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_backend"):
        importlib.import_module(f"{__name__}.{_module.name}")
del _module

__all__ = [
    "Function", "asnumpy", "compile", "config", "load", "grad", "dprint", "expand_dims", "squeeze",
    "transpose", "inc_subtensor", "set_subtensor", "dot", "matmul", "abs", "add", "bitwise_and",
    "bitwise_or", "bitwise_xor", "cast", "ceil", "clip", "conj", "cos", "divide", "eq", "erf",
    "exp", "expm1", "floor", "floor_divide", "full_like", "ge", "gt", "imag", "invert", "isinf",
    "isnan", "le", "left_shift", "log", "log1p", "logical_and", "logical_not", "logical_or", "lt",
    "maximum", "minimum", "mod", "mul", "neg", "neq", "ones_like", "power", "real", "reciprocal",
    "right_shift", "sigmoid", "sign", "sin", "softplus", "sqr", "sqrt", "sub", "tan", "tanh",
    "true_divide", "where", "zeros_like", "log_softmax", "logsumexp", "softmax", "all", "any",
    "argmax", "argmin", "cumsum", "max", "mean", "min", "prod", "std", "sum", "var", "arange",
    "broadcast_to", "concatenate", "full", "ones", "reshape", "stack", "zeros", "as_tensor",
    "constant", "scalar", "tensor", "OpFromGraph", "scan", "until",
]
