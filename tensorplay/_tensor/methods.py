"""Attach operators and op methods to Tensor (kept apart so ``_tensor.py`` stays the data model).

Each method forwards to the one implementation in ``_ops``, ``_reductions``, ``_combine``,
``_views`` or ``_indexing``; the same functions are exported at module level by ``__init__``.
"""

from __future__ import annotations

from . import (
    join as _combine,
    functional as _functional,
    indexing as _indexing,
    elementwise as _ops,
    reductions as _reductions,
    views as _views,
)
from .tensor import Tensor


def _binary_method(op: str):
    def method(self, other):
        return _ops.binary(op, self, other)
    method.__name__ = op
    return method


def _reflected_method(op: str):
    def method(self, other):
        return _ops.binary(op, other, self)
    method.__name__ = f"r{op}"
    return method


def _inplace_method(op: str):
    def method(self, other):
        return _ops.binary(op, self, other, out=self)
    method.__name__ = f"{op}_"
    return method


def _unary_method(op: str):
    def method(self):
        return _ops.unary(op, self)
    method.__name__ = op
    return method


def _unary_inplace_method(op: str):
    def method(self):
        return _ops.unary(op, self, out=self)
    method.__name__ = f"{op}_"
    return method


_DUNDER = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "pow",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
           "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift"}
_COMPARE_DUNDER = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def install() -> None:
    for dunder, op in _DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _binary_method(op))
        setattr(Tensor, f"__r{dunder}__", _reflected_method(op))
        setattr(Tensor, f"__i{dunder}__", _inplace_method(op))
    for dunder, op in _COMPARE_DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _binary_method(op))
    for op in ("add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
               "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
               "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
               "bitwise_right_shift", "atan2", "fmod"):
        setattr(Tensor, op, _binary_method(op))
        setattr(Tensor, f"{op}_", _inplace_method(op))
    Tensor.true_divide = Tensor.div
    Tensor.subtract, Tensor.multiply, Tensor.divide = Tensor.sub, Tensor.mul, Tensor.div
    for op in _ops._UNARY:
        setattr(Tensor, op, _unary_method(op))
        setattr(Tensor, f"{op}_", _unary_inplace_method(op))
    Tensor.__neg__ = _unary_method("neg")
    Tensor.__abs__ = _unary_method("abs")
    Tensor.__invert__ = _unary_method("bitwise_not")
    Tensor.__pos__ = lambda self: self
    Tensor.__matmul__ = lambda self, other: _combine.matmul(self, other)
    Tensor.__rmatmul__ = lambda self, other: _combine.matmul(other, self)
    Tensor.__getitem__ = _indexing.getitem
    Tensor.__setitem__ = _indexing.setitem
    from . import random as _random

    Tensor.uniform_ = _random.uniform_
    Tensor.normal_ = _random.normal_
    Tensor.random_ = _random.random_
    for module in (_reductions, _combine, _views, _indexing, _functional):
        for name in module.TENSOR_METHODS:
            setattr(Tensor, name, getattr(module, name))
    for name in _views.TENSOR_PROPERTIES:
        setattr(Tensor, name, property(getattr(_views, name)))
    for name, method in _functional.TENSOR_EXTRA_METHODS.items():
        setattr(Tensor, name, getattr(Tensor, method) if isinstance(method, str) else method)
    Tensor.where = _combine.tensor_where   # self is the value, not the condition
