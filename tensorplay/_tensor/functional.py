"""The module-level functions ``tensorplay`` exports (``tp.add``, ``tp.exp``, ``tp.sum``,
``tp.matmul``, ``tp.reshape`` ...): a thin table over ``elementwise``, ``reductions``,
``linalg``, ``activations``, ``join``, ``views`` and ``indexing``, which hold the one
implementation each.

The elementwise functions take ``out=`` (the result is written into that tensor, which must have
the broadcast shape and a dtype the result can be cast to). ``add``/``sub`` take ``alpha``
(``a + alpha * b``) and ``div`` takes ``rounding_mode`` (None, ``"trunc"``, ``"floor"``), as in
PyTorch.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import activations as _activations, creation as _creation, join as _join
from . import decompositions as _decompositions, linalg as _linalg
from . import pointwise as _pointwise, scatter as _scatter, search as _search, shapes as _shapes
from .. import _dtype
from . import (
    indexing as _indexing,
    elementwise as _ops,
    reductions as _reductions,
    views as _views,
)
from . import autograd as _autograd
from .tensor import Tensor

_ALIASES = {  # PyTorch's alternative names
    "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
    "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne", "negative": "neg", "absolute": "abs", "arcsin": "asin",
    "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "fix": "trunc",
}
_CUSTOM_BINARY = ("add", "sub", "div")
_CUSTOM_UNARY = ("round",)
_BY_ZERO = ("Raises RuntimeError (\"ZeroDivisionError\") for an integer division by zero on "
            "cpu, as PyTorch's CPU does; accelerators do not check (that would wait for the "
            "device): there the result of an integer division by zero is unspecified, as with "
            "PyTorch on CUDA. Floating division by zero gives inf/nan. Bool and complex tensors "
            "are refused.")
_DOCS = {
    "floor_divide": "``input // other`` rounded down (PyTorch's ``div(rounding_mode='floor')``). "
                    + _BY_ZERO,
    "remainder": "``input % other`` with the sign of ``other`` (Python's ``%``). " + _BY_ZERO,
    "fmod": "The C remainder ``input - trunc(input / other) * other``: the sign of ``input``. "
            + _BY_ZERO,
    "pow": "``input ** other``. An integer base to a negative Python int raises RuntimeError "
           "(\"Integers to negative integer powers are not allowed\"); a negative integer "
           "*tensor* exponent gives PyTorch's truncated result: 0, or +-1 for a base of +-1.",
}


def _binary(op: str):
    def function(input, other, *, out: Tensor | None = None) -> Tensor:
        return _ops.binary(op, input, other, out=out)
    function.__name__ = function.__qualname__ = op
    function.__doc__ = _DOCS.get(
        op, f"Elementwise ``{op}`` with broadcasting and PyTorch type promotion.")
    return function


def _unary(op: str):
    def function(input, *, out: Tensor | None = None) -> Tensor:
        return _ops.unary(op, input, out=out)
    function.__name__ = function.__qualname__ = op
    function.__doc__ = f"Elementwise ``{op}``."
    return function


def _check_alpha(input, other, alpha, op: str) -> None:
    if isinstance(alpha, builtins.bool) or not isinstance(alpha, (int, float, complex, np.number)):
        raise TypeError(f"{op}(): alpha must be a number, got {type(alpha).__name__}")
    promoted = _dtype.result_type(input, other)
    _dtype.check_op(op, promoted, (input, other))   # before ``other * alpha`` changes its dtype
    if isinstance(alpha, (float, np.floating)) and not (promoted.is_floating_point or
                                                        promoted.is_complex):
        raise RuntimeError(f"{op}(): for integral input tensors, argument alpha must not be a "
                           f"floating point number (got {alpha})")


def add(input, other, *, alpha=1, out: Tensor | None = None) -> Tensor:
    """``input + alpha * other`` with broadcasting and PyTorch type promotion."""
    if alpha != 1:
        _check_alpha(input, other, alpha, "add")
        other = _ops.binary("mul", other, alpha)
    return _ops.binary("add", input, other, out=out)


def sub(input, other, *, alpha=1, out: Tensor | None = None) -> Tensor:
    """``input - alpha * other`` with broadcasting and PyTorch type promotion."""
    if alpha != 1:
        _check_alpha(input, other, alpha, "sub")
        other = _ops.binary("mul", other, alpha)
    return _ops.binary("sub", input, other, out=out)


def add_(input, other, *, alpha=1) -> Tensor:
    """In-place :func:`add`: ``input += alpha * other``; returns ``input``."""
    if input._ag is None and (other.__class__ is not Tensor or other._ag is None):
        if alpha == 1:   # the eager hot path: one frame less
            return _ops.binary("add", input, other, out=input)
        return add(input, other, alpha=alpha, out=input)
    return _autograd.dispatch("add", _add_into, (input, other), {"alpha": alpha}, True)


def _add_into(input, other, *, alpha=1) -> Tensor:
    return add(input, other, alpha=alpha, out=input)


add_._tp_differentiable = "add"   # type: ignore[attr-defined]   # checks autograd state inline


def sub_(input, other, *, alpha=1) -> Tensor:
    """In-place :func:`sub`: ``input -= alpha * other``; returns ``input``."""
    if alpha == 1:
        return _ops.binary("sub", input, other, out=input)
    return sub(input, other, alpha=alpha, out=input)


def _trunc_divide(xp, a, b):
    if a.dtype.kind == "f":
        return xp.trunc(a / b)
    quotient = xp.floor_divide(a, b)
    inexact = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return quotient + inexact.astype(quotient.dtype)


def div(input, other, *, rounding_mode: str | None = None, out: Tensor | None = None) -> Tensor:
    """True division (integers give float32), or rounded: ``"trunc"`` toward zero, ``"floor"``
    down (both keep integer dtypes, as in PyTorch).

    Raises:
        ValueError: another ``rounding_mode``. RuntimeError: a rounded division of bool or
            complex tensors, or (on cpu only) an integer division by zero, as in
            :func:`floor_divide`.
    """
    if rounding_mode is None:
        return _ops.binary("div", input, other, out=out)
    if rounding_mode == "floor":
        return _ops.binary("floor_divide", input, other, out=out)
    if rounding_mode == "trunc":
        return _join._apply("div_trunc", [input, other], _trunc_divide, out=out)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                     f"found {rounding_mode!r}")


def div_(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """In-place :func:`div` (with its ``rounding_mode``); returns ``input``."""
    return div(input, other, rounding_mode=rounding_mode, out=input)


def _round_to(decimals: int):
    scale = 10.0 ** builtins.abs(decimals)

    def formula(xp, x):
        factor = x.dtype.type(scale)
        if decimals > 0:
            return xp.rint(x * factor) / factor
        return xp.rint(x / factor) * factor
    return formula


def round(input, *, decimals: int = 0, out: Tensor | None = None) -> Tensor:
    """Round to the nearest integer, halves to even (``round(2.5) == 2``), as PyTorch does.
    Integer tensors come back unchanged. ``decimals=n`` rounds to ``n`` decimal places
    (negative ``n``: to tens, hundreds...) as PyTorch computes it, ``rint(x * 10**n) / 10**n``
    in the tensor's dtype (float32 for float16/bfloat16), so a result can be one ulp away from
    the correctly rounded decimal.

    Raises:
        TypeError: ``decimals`` not an int. RuntimeError: bool or complex input, or integer
            input with ``decimals != 0`` (as in PyTorch).
    """
    if isinstance(decimals, builtins.bool) or not isinstance(decimals, (int, np.integer)):
        raise TypeError(f"round(): decimals must be an int, got {type(decimals).__name__}")
    if decimals == 0:
        return _ops.unary("round", input, out=out)
    tensor = _join._tensor_arg(input, "round", "input")
    return _join._apply("round.decimals", [tensor], _round_to(int(decimals)), out=out)


def round_(input, *, decimals: int = 0) -> Tensor:
    """In-place :func:`round`."""
    return round(input, decimals=decimals, out=input)


def _to_bool(_promoted):
    return _dtype.bool


def _same(promoted):
    return promoted


def isnan(input) -> Tensor:
    """Where the elements are NaN (bool)."""
    return _join._apply("isnan", [input], lambda xp, x: xp.isnan(x),
                           result=_to_bool, compute=_same)


def isinf(input) -> Tensor:
    """Where the elements are +-inf (bool)."""
    return _join._apply("isinf", [input], lambda xp, x: xp.isinf(x),
                           result=_to_bool, compute=_same)


def isfinite(input) -> Tensor:
    """Where the elements are neither inf nor NaN (bool)."""
    return _join._apply("isfinite", [input], lambda xp, x: xp.isfinite(x),
                           result=_to_bool, compute=_same)


def rsqrt(input) -> Tensor:
    """``1 / sqrt(x)``; integer input gives float32."""
    return _join._apply("rsqrt", [input], lambda xp, x: 1 / xp.sqrt(x),
                           result=_join._floating("rsqrt"))


def clone(input) -> Tensor:
    """A contiguous copy on the same device."""
    return _join._tensor_arg(input, "clone", "input").clone()


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a :class:`Tensor`."""
    return isinstance(obj, Tensor)


def is_floating_point(input) -> bool:
    """Whether ``input``'s dtype is a floating-point one (float16, bfloat16, float32,
    float64)."""
    return _join._tensor_arg(input, "is_floating_point", "input").dtype.is_floating_point


def is_complex(input) -> bool:
    """Whether ``input``'s dtype is complex64 or complex128."""
    return _join._tensor_arg(input, "is_complex", "input").dtype.is_complex


def numel(input) -> int:
    """The number of elements of ``input`` (1 for a 0-d tensor)."""
    return _join._tensor_arg(input, "numel", "input").numel()


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape that ``shapes`` broadcast to (ValueError if they do not)."""
    return _ops._broadcast_shape("broadcast_shapes", *(tuple(s) if isinstance(s, (tuple, list))
                                                       else (s,) for s in shapes))


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    """Views of the tensors expanded to their common shape."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = _ops._broadcast_shape("broadcast_tensors", *(t.shape for t in tensors))
    return tuple(_views.expand(t, shape) for t in tensors)


# -- Tensor methods that live here ----------------------------------------------------------
def _converter(name: str, dtype: _dtype.dtype):
    def method(self) -> Tensor:
        return self.to(dtype)
    method.__name__ = name
    method.__doc__ = f"This tensor as {dtype} (itself if it already is)."
    return method


def _new(kind: str):
    def method(self, *size, dtype=None, device=None) -> Tensor:
        dtype = self.dtype if dtype is None else dtype
        device = self.device if device is None else device
        if kind == "tensor":
            return _creation.tensor(size[0], dtype=dtype, device=device)
        if kind == "full":
            shape, value = size
            return _creation.full(shape, value, dtype=dtype, device=device)
        return getattr(_creation, kind)(*size, dtype=dtype, device=device)
    method.__name__ = f"new_{kind}"
    method.__doc__ = f"A new ``{kind}`` tensor with this tensor's dtype and device by default."
    return method


TENSOR_METHODS = ("add", "sub", "add_", "sub_", "div", "div_", "isnan", "isinf", "isfinite",
                  "rsqrt", "round", "round_")
_METHOD_ONLY = ("view", "view_as", "reshape_as", "expand", "expand_as")  # not torch.* functions
#: methods whose names would shadow builtins here; installed by ``_methods.install``
TENSOR_EXTRA_METHODS = {
    **{name: _converter(name, dtype) for name, dtype in (
        ("float", _dtype.float32), ("double", _dtype.float64), ("half", _dtype.float16),
        ("bfloat16", _dtype.bfloat16), ("int", _dtype.int32), ("long", _dtype.int64),
        ("short", _dtype.int16), ("char", _dtype.int8), ("byte", _dtype.uint8),
        ("bool", _dtype.bool), ("cfloat", _dtype.complex64), ("cdouble", _dtype.complex128))},
    **{f"new_{kind}": _new(kind) for kind in ("zeros", "ones", "empty", "full", "tensor")},
    **{alias: f"{target}" for alias, target in _ALIASES.items()},
}


# -- the table ------------------------------------------------------------------------------
def _build() -> list[str]:
    names = []
    table = globals()
    binary_ops = list(_ops._BINARY) + list(_ops._COMPARE) + ["div"]
    for op in binary_ops:
        if op not in _CUSTOM_BINARY:
            table[op] = _binary(op)
        names.append(op)
    for op in _ops._UNARY:
        if op not in _CUSTOM_UNARY:
            table[op] = _unary(op)
        names.append(op)
    for alias, target in _ALIASES.items():
        table[alias] = table[target]
        names.append(alias)
    for module in (_reductions, _linalg, _activations, _join, _views, _indexing, _pointwise,
                   _shapes, _scatter, _search, _decompositions):
        for name in module.__all__:
            if name in ("getitem", "setitem") or name in _METHOD_ONLY:
                continue
            table[name] = getattr(module, name)
            names.append(name)
    names += ["isnan", "isinf", "isfinite", "rsqrt", "clone", "is_tensor", "is_floating_point",
              "is_complex", "numel", "broadcast_shapes", "broadcast_tensors"]
    return sorted(set(names))


__all__ = _build()


if TYPE_CHECKING:
    # The table ``_build`` fills, spelled out for type checkers, which do not run it.
    # tests/internals/test_typing.py checks these names against ``__all__`` and their sources.
    from .activations import (  # noqa: F401 (re-exported through __all__)
        erf, erfc, gelu, log_softmax, relu, sigmoid, silu, softmax,
    )
    from .decompositions import (  # noqa: F401 (re-exported through __all__)
        cholesky, det, inverse, logdet, pinverse, qr, slogdet, svd,
    )
    from .indexing import (  # noqa: F401 (re-exported through __all__)
        gather, index_select, masked_fill, masked_select, nonzero, take,
    )
    from .join import (  # noqa: F401 (re-exported through __all__)
        cat, clamp, clamp_max, clamp_min, clip, concat, concatenate, stack, where,
    )
    from .linalg import (  # noqa: F401 (re-exported through __all__)
        addmm, bmm, dot, matmul, mm, outer,
    )
    from .pointwise import (  # noqa: F401 (re-exported through __all__)
        addcdiv, addcmul, allclose, copysign, digamma, equal, erfinv, heaviside, hypot,
        isclose, lerp, lgamma, logaddexp, logit, nan_to_num, sinc, xlogy,
    )
    from .reductions import (  # noqa: F401 (re-exported through __all__)
        all, amax, amin, any, argmax, argmin, argsort, count_nonzero, cumprod, cumsum,
        logsumexp, max, mean, min, norm, prod, return_types, sort, std, sum, topk, var,
    )
    from .scatter import (  # noqa: F401 (re-exported through __all__)
        index_add, index_copy, index_fill, index_put, masked_scatter, scatter, scatter_add,
        scatter_reduce, take_along_dim,
    )
    from .search import (  # noqa: F401 (re-exported through __all__)
        bincount, bucketize, cummax, cummin, histc, kthvalue, median, mode, nanmean, nansum,
        searchsorted, unique,
    )
    from .shapes import (  # noqa: F401 (re-exported through __all__)
        as_strided, cross, diag, diagonal, einsum, flip, kron, meshgrid, roll, tensordot, tile,
        trace, tril, triu,
    )
    from .views import (  # noqa: F401 (re-exported through __all__)
        adjoint, broadcast_to, chunk, flatten, moveaxis, movedim, narrow, permute, reshape,
        select, split, squeeze, swapaxes, swapdims, t, tensor_split, transpose, unbind,
        unflatten, unsqueeze, view_as_real,
    )

    class _Unary(Protocol):
        def __call__(self, input: Any, *, out: Tensor | None = None) -> Tensor: ...

    class _Binary(Protocol):
        def __call__(self, input: Any, other: Any, *, out: Tensor | None = None) -> Tensor: ...

    # what ``_unary`` and ``_binary`` make
    neg: _Unary
    abs: _Unary
    sign: _Unary
    square: _Unary
    floor: _Unary
    ceil: _Unary
    trunc: _Unary
    logical_not: _Unary
    bitwise_not: _Unary
    exp: _Unary
    exp2: _Unary
    expm1: _Unary
    log: _Unary
    log2: _Unary
    log10: _Unary
    log1p: _Unary
    sqrt: _Unary
    sin: _Unary
    cos: _Unary
    tan: _Unary
    asin: _Unary
    acos: _Unary
    atan: _Unary
    sinh: _Unary
    cosh: _Unary
    tanh: _Unary
    reciprocal: _Unary
    mul: _Binary
    floor_divide: _Binary
    remainder: _Binary
    pow: _Binary
    maximum: _Binary
    minimum: _Binary
    bitwise_and: _Binary
    bitwise_or: _Binary
    bitwise_xor: _Binary
    bitwise_left_shift: _Binary
    bitwise_right_shift: _Binary
    atan2: _Binary
    fmod: _Binary
    eq: _Binary
    ne: _Binary
    lt: _Binary
    le: _Binary
    gt: _Binary
    ge: _Binary
    logical_and: _Binary
    logical_or: _Binary
    logical_xor: _Binary
    # _ALIASES
    subtract = sub
    multiply: _Binary  # mul
    divide = div
    true_divide = div
    greater: _Binary  # gt
    greater_equal: _Binary  # ge
    less: _Binary  # lt
    less_equal: _Binary  # le
    not_equal: _Binary  # ne
    negative: _Unary  # neg
    absolute: _Unary  # abs
    arcsin: _Unary  # asin
    arccos: _Unary  # acos
    arctan: _Unary  # atan
    arctan2: _Binary  # atan2
    fix: _Unary  # trunc
    # what ``from ._tensor.functional import *`` gives (a literal, which type checkers read)
    __all__ = [
        "abs", "absolute", "acos", "add", "addcdiv", "addcmul", "addmm", "adjoint", "all",
        "allclose", "amax", "amin", "any", "arccos", "arcsin", "arctan", "arctan2", "argmax",
        "argmin", "argsort", "as_strided", "asin", "atan", "atan2", "bincount", "bitwise_and",
        "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift",
        "bitwise_xor", "bmm", "broadcast_shapes", "broadcast_tensors", "broadcast_to",
        "bucketize", "cat", "ceil", "cholesky", "chunk", "clamp", "clamp_max", "clamp_min",
        "clip", "clone", "concat", "concatenate", "copysign", "cos", "cosh", "count_nonzero",
        "cross", "cummax", "cummin", "cumprod", "cumsum", "det", "diag", "diagonal", "digamma",
        "div", "divide", "dot", "einsum", "eq", "equal", "erf", "erfc", "erfinv", "exp",
        "exp2", "expm1", "fix", "flatten", "flip", "floor", "floor_divide", "fmod", "gather",
        "ge", "gelu", "greater", "greater_equal", "gt", "heaviside", "histc", "hypot",
        "index_add", "index_copy", "index_fill", "index_put", "index_select", "inverse",
        "is_complex", "is_floating_point", "is_tensor", "isclose", "isfinite", "isinf",
        "isnan", "kron", "kthvalue", "le", "lerp", "less", "less_equal", "lgamma", "log",
        "log10", "log1p", "log2", "log_softmax", "logaddexp", "logdet", "logical_and",
        "logical_not", "logical_or", "logical_xor", "logit", "logsumexp", "lt", "masked_fill",
        "masked_scatter", "masked_select", "matmul", "max", "maximum", "mean", "median",
        "meshgrid", "min", "minimum", "mm", "mode", "moveaxis", "movedim", "mul", "multiply",
        "nan_to_num", "nanmean", "nansum", "narrow", "ne", "neg", "negative", "nonzero",
        "norm", "not_equal", "numel", "outer", "permute", "pinverse", "pow", "prod", "qr",
        "reciprocal", "relu", "remainder", "reshape", "return_types", "roll", "round", "rsqrt",
        "scatter", "scatter_add", "scatter_reduce", "searchsorted", "select", "sigmoid",
        "sign", "silu", "sin", "sinc", "sinh", "slogdet", "softmax", "sort", "split", "sqrt",
        "square", "squeeze", "stack", "std", "sub", "subtract", "sum", "svd", "swapaxes",
        "swapdims", "t", "take", "take_along_dim", "tan", "tanh", "tensor_split", "tensordot",
        "tile", "topk", "trace", "transpose", "tril", "triu", "true_divide", "trunc", "unbind",
        "unflatten", "unique", "unsqueeze", "var", "view_as_real", "where", "xlogy",
    ]
