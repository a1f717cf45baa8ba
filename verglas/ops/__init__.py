"""The array language: numpy names and numpy 2 semantics over the graph IR.

Its modules import one way, each from those before it:
scalar, basic (constants, as_tensor, shape reads, DimShuffle, Join), composite, elemwise,
math, reduce, indexing, shape (Reshape, Alloc, ARange), linalg, nn, autodiff (vjp),
op_from_graph, scan, and variable (TensorVariable, whose operators and methods are all of them).
"""

# Importing any part of the language imports all of it: variable.py makes every tensor-typed
# variable a TensorVariable, whose methods the ops below it build their gradients with.
from verglas.ops import variable  # noqa: F401
