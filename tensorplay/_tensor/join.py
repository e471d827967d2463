"""Ops that join tensors or select between them: ``cat``/``stack``, ``where``, ``clamp``; and
:func:`_apply`, the one-kernel formula engine that
these, ``activations.py`` and ``functional.py`` share.

Every op checks its operands, works out the result's shape and dtype from metadata alone, takes
its memory from ``_dispatch.empty`` and launches ONE kernel that computes the whole formula with
``xp`` (temporaries live only inside the kernel). float16 and bfloat16 compute in float32 and
round once when the result is stored.
"""

from __future__ import annotations

import functools
from typing import overload

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import autograd as _autograd, elementwise as _ops
from .autograd import grad_mode as _grad_mode
from . import indexing as _indexing
from . import transfer as _transfer
from .tensor import Tensor, _normalize_dim

__all__ = ["cat", "concat", "concatenate", "stack", "where", "clamp", "clip", "clamp_min",
           "clamp_max"]

TENSOR_METHODS = ("clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max")


def _tensor_arg(value, op: str, name: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be a Tensor, not "
                        f"{type(value).__name__}")
    if value._guard is not None:
        value._check_guard()
    return value


def _result(op: str, device, shape, dtype: _dtype.dtype, out: Tensor | None):
    """The output array: new memory, or ``out``'s after checking shape and castability."""
    if out is None:
        _dispatch.check_dtype_supported(device, dtype)
        array = _dispatch.empty(device, shape, dtype)
        return array, Tensor._make(array, device, dtype)
    if tuple(shape) != out.shape:
        raise RuntimeError(f"{op}: the result of shape {tuple(shape)} cannot be written into the "
                           f"tensor of shape {out.shape} (in-place ops don't broadcast self)")
    if not _dtype.can_cast(dtype, out.dtype):
        raise RuntimeError(f"{op}: result type {dtype.name} can't be cast to the desired output "
                           f"type {out.dtype.name}")
    _transfer.check_no_overlap(out, op)
    return out._data, out


#: ``_apply(op, operands, formula, *, result, compute, out, native, cache)``:
#: ``out[...] = formula(xp, *operands)`` through the one elementwise engine (its formula form,
#: ``elementwise.formula``, documents the arguments)
_apply = _ops.formula


@functools.cache
def _floating(op: str):
    """A result rule: floating stays, bool/integer becomes float32; complex is refused."""
    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if promoted.is_complex:
            raise TypeError(f"{op}(): complex tensors are not supported")
        return promoted if promoted.is_floating_point else _dtype.get_default_dtype()
    return rule


@functools.cache
def _only_floating(op: str):
    """A result rule that refuses bool/integer input (PyTorch has no integer kernel)."""
    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if not promoted.is_floating_point:
            raise TypeError(f"{op}(): expected a floating point tensor, got {promoted.name}; "
                            f"convert it with .float() first")
        return promoted
    return rule


@functools.cache
def _inexact(op: str):
    """A result rule that takes floating and complex dtypes and refuses bool/integer input."""
    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if not (promoted.is_floating_point or promoted.is_complex):
            raise TypeError(f"{op}(): expected a floating point or complex tensor, got "
                            f"{promoted.name}; convert it with .float() first")
        return promoted
    return rule


# -- joining ----------------------------------------------------------------------------------
def _tensor_list(tensors, op: str) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}(): expected a list or tuple of Tensors, got "
                        f"{type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{op}(): expected a non-empty list of Tensors")
    for i, item in enumerate(tensors):
        _tensor_arg(item, op, f"tensors[{i}]")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        names = " and ".join(sorted(str(d) for d in devices))
        raise RuntimeError(f"{op}: expected all tensors on one device, but found {names}; move "
                           f"them with .to() first")
    return tensors


def _launch_join(op: str, tensors, shape, keys, result: _dtype.dtype) -> Tensor:
    device = tensors[0].device
    out, tensor = _result(op, device, shape, result, None)
    arrays = [t._data for t in tensors]

    def kernel():
        for key, array in zip(keys, arrays):
            out[key] = array
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tuple(shape)))
    return tensor


def cat(tensors, dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension; dtypes promote. 1-D empty tensors (shape
    ``(0,)``) are skipped, as in PyTorch.

    Raises:
        RuntimeError: empty list, 0-d tensors, different ndim, or sizes that differ outside
            ``dim`` (naming the tensor's position); tensors on different devices.
    """
    tensors = _tensor_list(tensors, "cat")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    kept = [t for t in tensors if t.shape != (0,)] or tensors[:1]
    ref = kept[0]
    axis = _normalize_dim(dim, ref.ndim)
    for i, t in enumerate(tensors):
        if t.shape == (0,) and ref.shape != (0,):
            continue
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} "
                               f"and {t.ndim}")
        for d in range(ref.ndim):
            if d != axis and t.shape[d] != ref.shape[d]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {axis}. "
                                   f"Expected size {ref.shape[d]} but got size {t.shape[d]} "
                                   f"for tensor number {i} in the list.")
    keys, offset = [], 0
    for t in kept:
        keys.append((slice(None),) * axis + (slice(offset, offset + t.shape[axis]),))
        offset += t.shape[axis]
    shape = ref.shape[:axis] + (offset,) + ref.shape[axis + 1:]
    # skipped empties still take part in promotion, as in PyTorch
    return _launch_join("cat", kept, shape, keys, _dtype.result_type(*tensors))


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dimension ``dim``; dtypes promote."""
    tensors = _tensor_list(tensors, "stack")
    ref = tensors[0]
    for i, t in enumerate(tensors):
        if t.shape != ref.shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(ref.shape)} at entry 0 and {list(t.shape)} at entry {i}")
    axis = _normalize_dim(dim, ref.ndim + 1)
    keys = [(slice(None),) * axis + (i,) for i in range(len(tensors))]
    shape = ref.shape[:axis] + (len(tensors),) + ref.shape[axis:]
    return _launch_join("stack", tensors, shape, keys, _dtype.result_type(*tensors))


# -- selection and bounds -----------------------------------------------------------------------
@overload
def where(condition) -> tuple[Tensor, ...]: ...


@overload
def where(condition, input, other) -> Tensor: ...


def where(condition, input=None, other=None) -> Tensor | tuple[Tensor, ...]:
    """``input`` where ``condition`` is true, else ``other`` (Tensors or numbers, broadcast,
    promoted). ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)``.

    Raises:
        TypeError: a condition that is not a bool tensor.
    """
    if _grad_mode.enabled and ((input.__class__ is Tensor and input._ag is not None) or (
            other.__class__ is Tensor and other._ag is not None)):
        return _autograd.dispatch("where", where, (condition, input, other), {})
    condition = _tensor_arg(condition, "where", "condition")
    if input is None and other is None:
        return _indexing.nonzero(condition, as_tuple=True)
    if condition.dtype is not _dtype.bool:
        raise TypeError(f"where expected condition to be a boolean tensor, but got a tensor "
                        f"with dtype {condition.dtype.name}")
    return _ops.formula("where", [condition, input, other], _where, promote=_promote_values,
                        native="where", cache=True)


def _where(xp, condition, first, second):
    return xp.where(condition, first, second)


def _promote_values(operands) -> _dtype.dtype:
    """``where``'s result dtype: its two values promoted; the bool condition takes no part."""
    return _dtype.result_type(*operands[1:])


where._tp_differentiable = "where"   # type: ignore[attr-defined]   # checks autograd inline


def tensor_where(self, condition, other) -> Tensor:
    """``Tensor.where(condition, other)``: this tensor where ``condition`` is true, else
    ``other`` (PyTorch's ``x.where(c, y) == where(c, x, y)``)."""
    return where(condition, self, other)


def _clamp(op: str, input, min, max, out=None) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    if min is None and max is None:
        raise ValueError(f"{op}: at least one of 'min' or 'max' must not be None")
    bounds = [b for b in (min, max) if b is not None]
    has_low, has_high = min is not None, max is not None

    def formula(xp, x, *limits):
        pending = list(limits)
        if has_low:
            x = xp.maximum(x, pending.pop(0))
        if has_high:
            x = xp.minimum(x, pending.pop(0))
        return x
    return _apply(op, [tensor, *bounds], formula, out=out)


def clamp(input, min=None, max=None) -> Tensor:
    """Limit every element to ``[min, max]`` (Tensors or numbers; either may be None). NaN
    propagates; where ``min > max`` the result is ``max``.

    Raises:
        ValueError: neither bound given. RuntimeError: complex operands (no ordering).
    """
    return _clamp("clamp", input, min, max)


def clamp_(input, min=None, max=None) -> Tensor:
    """In-place :func:`clamp`; the result must be castable to the tensor's dtype."""
    return _clamp("clamp_", input, min, max, out=input)


clip = clamp
clip_ = clamp_


def clamp_min(input, min) -> Tensor:
    """``clamp(input, min=min)``: :func:`clamp` with a lower bound only."""
    return clamp(input, min=min)


def clamp_max(input, max) -> Tensor:
    """``clamp(input, max=max)``: :func:`clamp` with an upper bound only."""
    return clamp(input, max=max)
