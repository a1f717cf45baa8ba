"""Toy ops, rules and an evaluator for testing the rewrite engine without the array language."""

from __future__ import annotations

import numpy as np

from verglas.graph import Apply, Constant, Op, TensorType, Variable, toposort
from verglas.rewrite import node_rewriter

F64 = TensorType("float64", ())


def var(name: str) -> Variable:
    return Variable(F64, name=name)


def const(value: float) -> Constant:
    return Constant(F64, value)


class _Toy(Op):
    nin = 1
    fn = None

    def make_node(self, *inputs):
        if len(inputs) != self.nin:
            raise TypeError(f"{self}: expected {self.nin} inputs, got {len(inputs)}")
        return Apply(self, inputs, [inputs[0].type])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(type(self).fn(*inputs))

    def __repr__(self):
        return type(self).__name__.lower()


class Add(_Toy):
    nin = 2
    fn = staticmethod(np.add)


class Mul(_Toy):
    nin = 2
    fn = staticmethod(np.multiply)


class Neg(_Toy):
    fn = staticmethod(np.negative)


class Exp(_Toy):
    fn = staticmethod(np.exp)


class Log(_Toy):
    fn = staticmethod(np.log)


# An Elemwise-like op: tracked by its own class and by the class of its scalar_op.
class ScalarExp:
    fn = staticmethod(np.exp)


class ScalarLog:
    fn = staticmethod(np.log)


class Map(Op):
    __props__ = ("scalar_op",)

    def __init__(self, scalar_op):
        self.scalar_op = scalar_op

    def make_node(self, x):
        return Apply(self, [x], [x.type])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self.scalar_op.fn(inputs[0]))


add, mul, neg, exp, log = Add(), Mul(), Neg(), Exp(), Log()


def evaluate(inputs, outputs, values):
    """Run each node's perform in topological order."""
    env = dict(zip(inputs, values))
    for node in toposort(outputs, inputs):
        args = [v.data if isinstance(v, Constant) else env[v] for v in node.inputs]
        storage = [[None] for _ in node.outputs]
        node.op.perform(node, args, storage)
        for out, cell in zip(node.outputs, storage):
            env[out] = cell[0]
    return [v.data if isinstance(v, Constant) else env[v] for v in outputs]


def is_const(var, value) -> bool:
    return isinstance(var, Constant) and var.data.size == 1 and var.data.item() == value


# -- toy rules, written as the real ones will be -----------------------------------------------
@node_rewriter(Neg)
def neg_neg(fgraph, node):
    """neg(neg(x)) -> x"""
    match node.inputs:
        case [Variable(owner=Apply(op=Neg(), inputs=[x]))]:
            return [x]


@node_rewriter(Mul)
def mul_by_one(fgraph, node):
    """x * 1 -> x"""
    match node.inputs:
        case [x, one] | [one, x] if is_const(one, 1):
            return [x]


@node_rewriter(Add)
def add_zero(fgraph, node):
    """x + 0 -> x"""
    match node.inputs:
        case [x, zero] | [zero, x] if is_const(zero, 0):
            return [x]


@node_rewriter(Exp)
def exp_log(fgraph, node):
    """exp(log(x)) -> x"""
    match node.inputs:
        case [Variable(owner=Apply(op=Log(), inputs=[x]))]:
            return [x]


@node_rewriter(Mul)
def mul_two_to_add(fgraph, node):
    """x * 2 -> x + x  (undone by add_self_to_mul: a cycle)"""
    match node.inputs:
        case [x, two] if is_const(two, 2):
            return [add(x, x)]


@node_rewriter(Add)
def add_self_to_mul(fgraph, node):
    """x + x -> x * 2  (undoes mul_two_to_add)"""
    match node.inputs:
        case [x, y] if x is y:
            return [mul(x, const(2.0))]


@node_rewriter(Map, scalar_tracks=(ScalarExp,))
def map_exp_map_log(fgraph, node):
    """map(exp)(map(log)(x)) -> x"""
    match node.inputs:
        case [Variable(owner=Apply(op=Map(scalar_op=ScalarLog()), inputs=[x]))]:
            return [x]
