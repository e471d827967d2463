"""The ONE method table: every op method and operator of Tensor is installed here.

``tensor.py`` is the data model and imports no op module; each method below forwards to the one
implementation in ``elementwise``, ``reductions``, ``linalg``, ``activations``, ``join``,
``views``, ``indexing``, ``transfer``, ``random``, ``repr`` or ``functional``, which also export
the same functions at module level (``tensorplay.add`` ...). ``tensor.pyi`` is generated from the
installed class by ``tools/gen_tensor_stub.py``; ``tests/internals/test_tensor_stubs.py`` fails
when the two disagree.
"""

from __future__ import annotations

from types import ModuleType

from . import (
    activations as _activations,
    creation as _creation,
    decompositions as _decompositions,
    elementwise as _ops,
    functional as _functional,
    indexing as _indexing,
    join as _join,
    linalg as _linalg,
    normalization as _normalization,
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
from . import autograd as _autograd, derivatives as _derivatives
from .tensor import Tensor

_dispatch = _autograd.dispatch


# The operator and elementwise method factories check autograd state inline (one slot read
# per operand) instead of through a wrapper, so a warm eager op enters no extra Python frame.
def _binary_inplace_fn(op: str):
    def function(input, other) -> Tensor:
        return _ops.binary(op, input, other, out=input)
    function.__name__ = f"{op}_"
    return function


def _unary_inplace_fn(op: str):
    def function(input) -> Tensor:
        return _ops.unary(op, input, out=input)
    function.__name__ = f"{op}_"
    return function


def _binary_method(op: str):
    fn = _functional._binary(op)

    def method(self, other) -> Tensor:
        if self._ag is None and (other.__class__ is not Tensor or other._ag is None):
            return _ops.binary(op, self, other)
        return _dispatch(op, fn, (self, other), {})
    method.__name__ = op
    method.__doc__ = f"The method form of :func:`tensorplay.{op}` (this tensor is ``input``)."
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
    return method


def _compare_method(op: str):
    fn = _functional._binary(op)

    def method(self, other) -> Tensor:
        try:
            if self._ag is None and (other.__class__ is not Tensor or other._ag is None):
                return _ops.binary(op, self, other)
            return _dispatch(op, fn, (self, other), {})
        except _ops.UnsupportedOperand:
            # as PyTorch's: Python then tries the other operand's method, else compares by
            # identity (``t == None`` is False, ``t != None`` True, ``t < None`` a TypeError)
            return NotImplemented
    method.__name__ = f"__{op}__"
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
    return method


def _reflected_method(op: str):
    fn = _functional._binary(op)

    def method(self, other) -> Tensor:
        if self._ag is None and (other.__class__ is not Tensor or other._ag is None):
            return _ops.binary(op, other, self)
        return _dispatch(op, fn, (other, self), {})
    method.__name__ = f"r{op}"
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
    return method


def _inplace_method(op: str):
    fn = _binary_inplace_fn(op)

    def method(self, other) -> Tensor:
        if self._ag is None and (other.__class__ is not Tensor or other._ag is None):
            return _ops.binary(op, self, other, out=self)
        return _dispatch(op, fn, (self, other), {}, True)
    method.__name__ = f"{op}_"
    method.__doc__ = f"In-place :meth:`{op}`: writes the result into this tensor and returns it."
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
    return method


def _unary_method(op: str):
    fn = _functional._unary(op)

    def method(self) -> Tensor:
        if self._ag is None:
            return _ops.unary(op, self)
        return _dispatch(op, fn, (self,), {})
    method.__name__ = op
    method.__doc__ = f"The method form of :func:`tensorplay.{op}` (this tensor is ``input``)."
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
    return method


def _unary_inplace_method(op: str):
    fn = _unary_inplace_fn(op)

    def method(self) -> Tensor:
        if self._ag is None:
            return _ops.unary(op, self, out=self)
        return _dispatch(op, fn, (self,), {}, True)
    method.__name__ = f"{op}_"
    method.__doc__ = f"In-place :meth:`{op}`: writes the result into this tensor and returns it."
    method._tp_differentiable = op   # type: ignore[attr-defined]   # read by _differentiable
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


_linalg_matmul = _linalg.matmul   # the plain function: installed below behind autograd's wrapper


def _matmul(self, other) -> Tensor:
    if self._ag is None and (other.__class__ is not Tensor or other._ag is None):
        return _linalg_matmul(self, other)
    return _dispatch("matmul", _linalg_matmul, (self, other), {})


def _rmatmul(self, other) -> Tensor:
    return _dispatch("matmul", _linalg_matmul, (other, self), {})


_matmul._tp_differentiable = _rmatmul._tp_differentiable = "matmul"  # type: ignore[attr-defined]


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
    """Install every op method, operator and op property on :class:`Tensor` (once, at import),
    each differentiable (see :func:`_make_differentiable`), and the autograd surface."""
    data_model = set(Tensor.__dict__)
    owners = method_owners()
    _make_module_functions_differentiable()
    for dunder, op in _DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _binary_method(op))
        setattr(Tensor, f"__r{dunder}__", _reflected_method(op))
        setattr(Tensor, f"__i{dunder}__", _inplace_method(op))
    for dunder, op in _COMPARE_DUNDER.items():
        setattr(Tensor, f"__{dunder}__", _compare_method(op))
    for op in _BINARY_METHODS:   # an op module's own method (add's alpha=) comes below
        if op not in owners:
            setattr(Tensor, op, _binary_method(op))
        if f"{op}_" not in owners:
            setattr(Tensor, f"{op}_", _inplace_method(op))
    for op in _ops._UNARY:
        if op not in owners:
            setattr(Tensor, op, _unary_method(op))
        if f"{op}_" not in owners:
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
    # mypy: these name their tensor argument otherwise than the stub's ``self``
    Tensor.type = _transfer.tensor_type  # type: ignore[assignment]
    Tensor.uniform_ = _random.uniform_  # type: ignore[assignment]
    Tensor.bernoulli = _random.bernoulli  # type: ignore[assignment]
    Tensor.bernoulli_ = _random.bernoulli_  # type: ignore[assignment]
    Tensor.exponential_ = _random.exponential_  # type: ignore[assignment]
    Tensor.geometric_ = _random.geometric_  # type: ignore[assignment]
    Tensor.multinomial = _random.multinomial  # type: ignore[assignment]
    Tensor.normal_ = _random.normal_  # type: ignore[assignment]
    Tensor.random_ = _random.random_  # type: ignore[assignment]
    for name, module in owners.items():
        setattr(Tensor, name, getattr(module, name))
    Tensor.true_divide = Tensor.div
    Tensor.subtract, Tensor.multiply, Tensor.divide = Tensor.sub, Tensor.mul, Tensor.div
    for name in _views.TENSOR_PROPERTIES:
        setattr(Tensor, name, property(getattr(_views, name)))
    for name, method in _functional.TENSOR_EXTRA_METHODS.items():
        setattr(Tensor, name, getattr(Tensor, method) if isinstance(method, str) else method)
    Tensor.where = _join.tensor_where   # self is the value, not the condition
    Tensor.flip = _shapes.tensor_flip   # the method takes ints, the function a sequence
    _make_differentiable([name for name in Tensor.__dict__ if name not in data_model])
    for name, value in _autograd.TENSOR_SURFACE.items():
        setattr(Tensor, name, value)
    for name in _functional.__all__:
        value = getattr(_functional, name)
        if callable(value) and not isinstance(value, type) and name not in _NOT_OPS:
            setattr(_functional, name, _differentiable(value, _changes_its_input(name)))


def method_owners() -> dict[str, ModuleType]:
    """Method name -> the op module whose ``TENSOR_METHODS`` defines it.

    Raises:
        RuntimeError: two op modules define the same method (one op, one definition: a later
            module would otherwise silently replace the earlier one's method).
    """
    owners: dict[str, ModuleType] = {}
    for module in _METHOD_MODULES:
        for name in module.TENSOR_METHODS:
            if name in owners:
                raise RuntimeError(f"Tensor.{name} is defined by both {owners[name].__name__} "
                                   f"and {module.__name__}: each op has one definition")
            owners[name] = module
    return owners


#: functions and methods that read tensors without making one to differentiate
_NOT_OPS = frozenset({"is_tensor", "is_floating_point", "is_complex", "numel",
                      "broadcast_shapes", "__repr__", "__pos__", "allclose", "equal"})
#: op functions that only ``nn.functional`` exports, made differentiable where they live too
_INTERNAL_OPS = ("linear", "solve", "inv", "linalg_cholesky", "linalg_qr", "linalg_slogdet",
                 "linalg_svd", "eigh", "lstsq", "matrix_norm", "norm", "pinv", "svdvals",
                 "vector_norm", "mse_loss")
#: in-place methods whose rule keeps the trailing underscore off under another name
_INPLACE_RULES = {"copy_": "copy", "fill_": "fill", "zero_": "zero"}


def _changes_its_input(name: str) -> bool:
    """Whether the op of this name changes its first argument (PyTorch's trailing ``_``)."""
    return name in ("setitem", "__setitem__") or (name.endswith("_") and not name.endswith("__"))


def _differentiable(fn, inplace: bool, op: str | None = None):
    """``fn`` wrapped by ``derivatives.differentiable`` under its rule's name (``op``, else the
    function's name), unless it already checks autograd state itself."""
    if getattr(fn, "_tp_differentiable", None) is not None:
        return fn
    if not op:
        op = getattr(fn, "__name__", "")
    if inplace and op.endswith("_") and not op.endswith("__"):
        op = op[:-1]
    return _derivatives.differentiable(op, fn, inplace)


#: the op modules whose public functions are made differentiable where they live, so every
#: caller (Tensor methods, ``tensorplay.*``, ``nn.functional``, ``linalg``) gets the same one
_OP_MODULES = _METHOD_MODULES[:-1] + (_normalization,)


def _make_module_functions_differentiable() -> None:
    for module in _OP_MODULES:
        names = set(getattr(module, "__all__", ())) | set(getattr(module, "TENSOR_METHODS", ()))
        names |= {name for name in _INTERNAL_OPS if hasattr(module, name)}
        for name in sorted(names):
            value = getattr(module, name, None)
            if callable(value) and not isinstance(value, type) and name not in _NOT_OPS:
                # linear algebra keeps its own names: its ``norm`` is not the reduction's
                op = name if module is not _decompositions or name.startswith("linalg_") \
                    else f"linalg_{name}"
                setattr(module, name, _differentiable(value, _changes_its_input(name), op))


def _make_differentiable(names) -> None:
    """Route each installed op method through autograd: the method factories above check
    inline, every other method gets the one wrapper; properties (``T``, ``mT`` ...) too."""
    for name in names:
        value = Tensor.__dict__[name]
        if name in _NOT_OPS:
            continue
        if isinstance(value, property):
            setattr(Tensor, name, property(_differentiable(value.fget, False)))
            continue
        if not callable(value):
            continue
        setattr(Tensor, name, _differentiable(value, _changes_its_input(name)))
