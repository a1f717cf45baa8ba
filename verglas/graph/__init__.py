"""The graph IR: types, variables, ops, mutable and frozen function graphs."""

from verglas.graph.basic import Apply, Constant, Node, Variable, intern_constant
from verglas.graph.features import (AlreadyThere, Feature, History, InconsistencyError,
                                    ReplaceValidate, callback)
from verglas.graph.fg import OUTPUT, FunctionGraph, MissingInputError
from verglas.graph.frozen import (FrozenApply, FrozenFunctionGraph, NominalVariable, freeze,
                                  intern_node, intern_table_sizes, nominal_input)
from verglas.graph.op import Op, stable_key
from verglas.graph.printing import dprint
from verglas.graph.spec import SpecError, check_graph
from verglas.graph.traversal import ancestors, clone, graph_replace, toposort
from verglas.graph.types import ScalarType, TensorType, Type, as_dtype

__all__ = [
    "Apply", "Constant", "Node", "Variable", "AlreadyThere", "Feature", "History",
    "InconsistencyError", "ReplaceValidate", "callback", "OUTPUT", "FunctionGraph",
    "MissingInputError", "FrozenApply", "FrozenFunctionGraph", "NominalVariable", "freeze",
    "intern_constant", "intern_node", "intern_table_sizes", "nominal_input", "Op", "stable_key",
    "ancestors", "clone", "graph_replace", "toposort", "ScalarType", "TensorType", "Type",
    "as_dtype", "dprint", "SpecError", "check_graph",
]
