"""The ONE method table: every op method and operator of Tensor is installed here.

``tensor.py`` is the data model and imports no op module; each method below forwards to the one
implementation in ``elementwise``, ``reductions``, ``linalg``, ``activations``, ``join``,
``views``, ``indexing``, ``transfer``, ``random``, ``repr`` or ``functional``, which also export
the same functions at module level (``tensorplay.add`` ...). ``tensor.pyi`` is generated from the
installed class by ``tools/gen_tensor_stub.py``; ``tests/internals/test_tensor_stubs.py`` fails
when the two disagree.
"""

from __future__ import annotations

from . import (
    activations as _activations,
    creation as _creation,
    decompositions as _decompositions,
    elementwise as _ops,
    functional as _functional,
    indexing as _indexing,
    join as _join,
    linalg as _linalg,
    pointwise as _pointwise,
    random as _random,
    reductions as _reductions,
    scatter as _scatter,
    search as _search,
    shapes as _shapes,
    repr as _repr,
    transfer as _transfer,
    views as _views,
)
from .tensor import Tensor


def _binary_method(op: str):
    def method(self, other) -> Tensor:
        return _ops.binary(op, self, other)
    method.__name__ = op
    return method


def _compare_method(op: str):
    def method(self, other) -> Tensor:
        try:
            return _ops.binary(op, self, other)
        except _ops.UnsupportedOperand:
            # as PyTorch's: Python then tries the other operand's method, else compares by
            # identity (``t == None`` is False, ``t != None`` True, ``t < None`` a TypeError)
            return NotImplemented
    method.__name__ = f"__{op}__"
    return method


def _reflected_method(op: str):
    def method(self, other) -> Tensor:
        return _ops.binary(op, other, self)
    method.__name__ = f"r{op}"
    return method


def _inplace_method(op: str):
    def method(self, other) -> Tensor:
        return _ops.binary(op, self, other, out=self)
    method.__name__ = f"{op}_"
    return method


def _unary_method(op: str):
    def method(self) -> Tensor:
        return _ops.unary(op, self)
    method.__name__ = op
    return method


def _unary_inplace_method(op: str):
    def method(self) -> Tensor:
        return _ops.unary(op, self, out=self)
    method.__name__ = f"{op}_"
    return method


def abs_(self) -> Tensor:
    """In-place :func:`abs`; complex tensors are refused (their ``abs`` is real), as PyTorch."""
    if self._dtype in _ops._REAL_PART:   # complex (a dict lookup: no property call)
        raise RuntimeError(f"In-place abs is not supported for complex tensors (got "
                           f"{self._dtype.name}); use x.abs(), which gives a "
                           f"{_ops._REAL_PART[self._dtype].name} tensor")
    return _ops.unary("abs", self, out=self)


def _pos(self) -> Tensor:
    return self


def _matmul(self, other) -> Tensor:
    return _linalg.matmul(self, other)


def _rmatmul(self, other) -> Tensor:
    return _linalg.matmul(other, self)


def copy_(self, src, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` (a Tensor on any device, a NumPy array or Python data) into this tensor,
    broadcasting and casting; a copy from or to the host waits for the device."""
    if not isinstance(src, Tensor):
        src = _creation.tensor(src)
    return _transfer.copy_(self, src)


def fill_(self, value) -> Tensor:
    """Set every element to ``value`` (a Python number or a one-element tensor)."""
    return _ops.fill_(self, value)


def zero_(self) -> Tensor:
    """Set every element to 0."""
    return _ops.fill_(self, 0)


def _repr_method(self) -> str:
    return _repr.tensor_repr(self)


_DUNDER = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "pow",
           "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
           "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift"}
_COMPARE_DUNDER = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_BINARY_METHODS = ("add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
                   "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                   "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                   "bitwise_left_shift", "bitwise_right_shift", "atan2", "fmod")
#: modules whose ``TENSOR_METHODS`` names are installed as they are (later ones win)
_METHOD_MODULES = (_transfer, _reductions, _linalg, _activations, _join, _views, _indexing,
                   _pointwise, _shapes, _scatter, _search, _decompositions, _functional)


def install() -> None:
    """Install every op method, operator and op property on :class:`Tensor` (once, at import)."""
    for dunder, op in _DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _binary_method(op))
        setattr(Tensor, f"__r{dunder}__", _reflected_method(op))
        setattr(Tensor, f"__i{dunder}__", _inplace_method(op))
    for dunder, op in _COMPARE_DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _compare_method(op))
    for op in _BINARY_METHODS:
        setattr(Tensor, op, _binary_method(op))
        setattr(Tensor, f"{op}_", _inplace_method(op))
    Tensor.true_divide = Tensor.div
    Tensor.subtract, Tensor.multiply, Tensor.divide = Tensor.sub, Tensor.mul, Tensor.div
    for op in _ops._UNARY:
        setattr(Tensor, op, _unary_method(op))
        setattr(Tensor, f"{op}_", _unary_inplace_method(op))
    Tensor.abs_ = abs_
    Tensor.__neg__ = _unary_method("neg")
    Tensor.__abs__ = _unary_method("abs")
    Tensor.__invert__ = _unary_method("bitwise_not")
    Tensor.__pos__ = _pos
    Tensor.__matmul__ = _matmul
    Tensor.__rmatmul__ = _rmatmul
    Tensor.__getitem__ = _indexing.getitem
    Tensor.__setitem__ = _indexing.setitem
    Tensor.__repr__ = _repr_method
    Tensor.copy_ = copy_
    Tensor.fill_ = fill_
    Tensor.zero_ = zero_
    Tensor.type = _transfer.tensor_type
    Tensor.uniform_ = _random.uniform_
    Tensor.bernoulli = _random.bernoulli
    Tensor.bernoulli_ = _random.bernoulli_
    Tensor.exponential_ = _random.exponential_
    Tensor.geometric_ = _random.geometric_
    Tensor.multinomial = _random.multinomial
    Tensor.normal_ = _random.normal_
    Tensor.random_ = _random.random_
    for module in _METHOD_MODULES:
        for name in module.TENSOR_METHODS:
            setattr(Tensor, name, getattr(module, name))
    for name in _views.TENSOR_PROPERTIES:
        setattr(Tensor, name, property(getattr(_views, name)))
    for name, method in _functional.TENSOR_EXTRA_METHODS.items():
        setattr(Tensor, name, getattr(Tensor, method) if isinstance(method, str) else method)
    Tensor.where = _join.tensor_where   # self is the value, not the condition
    Tensor.flip = _shapes.tensor_flip   # the method takes ints, the function a sequence
