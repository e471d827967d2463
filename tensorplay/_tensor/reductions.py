"""Reductions (``sum mean prod amax amin max min argmax argmin all any std var norm logsumexp
count_nonzero``) and scans (``cumsum cumprod``), with PyTorch's ``dim``/``keepdim``/``dtype`` rules.

Each op works out the result's shape and dtype from metadata alone, takes the result's memory
from ``_dispatch.empty`` and launches one kernel that calls the ``xp`` reduction. Dtype rules
follow PyTorch: ``sum``/``prod``/``cumsum`` of bool and integer tensors give int64; ``mean``,
``std``, ``var``, ``norm`` need a floating (or complex) input, or an explicit ``dtype=``;
float16 and bfloat16 accumulate in float32 and round once at the end.

``dim`` may be an int, a tuple of ints, or None (every dimension). A 0-d tensor accepts
``dim=0``/``-1``. The ops that order elements (``max min amax amin argmax argmin sort argsort
topk``) raise RuntimeError for complex tensors, as in PyTorch.
"""

from __future__ import annotations

import builtins
import functools
import warnings
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import autograd as _autograd, elementwise as _ops
from .autograd import grad_mode as _grad_mode
from .tensor import Tensor, _normalize_dim, layout_of

if TYPE_CHECKING:
    from .._runtime.device import device as Device

__all__ = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any",
           "std", "var", "norm", "logsumexp", "cumsum", "cumprod", "count_nonzero", "sort",
           "argsort", "topk", "return_types"]

TENSOR_METHODS = ("sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "all",
                  "any", "std", "var", "norm", "logsumexp", "cumsum", "cumprod", "count_nonzero",
                  "sort", "argsort", "topk")


class return_types:
    """The named tuples ``(values, indices)`` that ``max``/``min``/``median``/``mode``/
    ``kthvalue`` (with a ``dim``), ``sort``, ``topk``, ``cummax`` and ``cummin`` return."""

    max = namedtuple("max", ["values", "indices"])
    min = namedtuple("min", ["values", "indices"])
    sort = namedtuple("sort", ["values", "indices"])
    topk = namedtuple("topk", ["values", "indices"])
    median = namedtuple("median", ["values", "indices"])
    mode = namedtuple("mode", ["values", "indices"])
    kthvalue = namedtuple("kthvalue", ["values", "indices"])
    cummax = namedtuple("cummax", ["values", "indices"])
    cummin = namedtuple("cummin", ["values", "indices"])


# -- shared machinery ---------------------------------------------------------------------------
def _check_tensor(value, op: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): expected a Tensor, got {type(value).__name__}")
    value._check_guard()
    return value


def _axes(tensor: Tensor, dim, op: str) -> tuple[int, ...]:
    """The reduced dimensions, normalized; ``None`` means all of them."""
    ndim = tensor.ndim
    if dim is None:
        return tuple(range(ndim))
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if not dims:
        return tuple(range(ndim))  # PyTorch: an empty dim list reduces everything
    axes = tuple(_normalize_dim(d, ndim) for d in dims)
    for d in axes:
        if axes.count(d) > 1:
            raise RuntimeError(f"{op}(): dim {d} appears multiple times in the list of dims")
    return () if ndim == 0 else axes


def _reduced_shape(shape, axes, keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def _xp_axis(tensor: Tensor, axes):
    """The ``axis=`` argument for xp: None for a 0-d tensor (xp has no axis 0 there)."""
    return None if tensor.ndim == 0 else axes


_accumulate = _dtype.accumulation_dtype

# Note [accurate sums]
# NumPy (the ``xp`` of cpu and sim) adds pairwise (error ~ log n) only along the innermost loop
# of its iteration, which follows memory order. A sum over any other dim (``x.sum(0)`` of a
# contiguous matrix, a trailing dim of a transposed or strided view) adds the elements into each
# result one by one, and a float32 error grows with their number: ``ones(2e7, 2).sum(0)`` stops
# at 2**24 and ``(rand(1e5, 8) + 1000).var(0)`` comes out three times too large. Such sums
# (sum, mean, var/std, norm, logsumexp, linalg.vector_norm) accumulate float16/bfloat16/float32
# in float64 and complex64 in complex128 (``dtype=``: the input is cast in buffers, not copied
# whole; CuPy casts in its kernel) and round once into the result's dtype. Full and
# trailing-dim sums over one contiguous run (the common, fast cases, the cuda small-sum kernel
# among them), and sums of at most 8 elements (too few to drift), keep their accumulation dtype,
# speed and values. Decided from shape and strides only: no host read, the same kernel while
# capturing.
_WIDER = {np.dtype(np.float32): np.dtype(np.float64),
          np.dtype(np.complex64): np.dtype(np.complex128)}


def _summing_dtype(data, axes, acc: np.dtype) -> np.dtype:
    """The dtype to sum ``data`` (an ``xp`` array) over ``axes`` (normalized; None: all) in:
    ``acc``, or its float64/complex128 widening where NumPy would add one by one (Note
    [accurate sums])."""
    wide = _WIDER.get(acc)
    if wide is None:
        return acc
    shape, strides = data.shape, data.strides
    if axes is None:
        axes = range(len(shape))
    left = 1
    for d in axes:
        left *= shape[d]
    if left <= 8:
        return acc
    # the reduced dims of more than one element must be the innermost and one C-ordered
    # contiguous run
    run = data.itemsize
    for d in range(len(shape) - 1, -1, -1):
        size = shape[d]
        if size == 1:
            continue
        if d not in axes or strides[d] != run:
            return wide
        run *= size
        left //= size
        if left == 1:
            return acc
    return acc


def _new(device, shape, dtype: _dtype.dtype):
    _dispatch.check_dtype_supported(device, dtype)
    return _dispatch.empty(device, shape, dtype)


def _reduce(op: str, tensor: Tensor, axes, keepdim: bool, result: _dtype.dtype, body) -> Tensor:
    """Launch ``out[...] = body(xp, a, axis, keepdims)`` into a new result tensor."""
    device = tensor.device
    shape = _reduced_shape(tensor.shape, axes, keepdim)
    out = _new(device, shape, result)
    data, xp, axis = tensor._data, _dispatch.xp_of(device), _xp_axis(tensor, axes)

    def kernel():
        out[...] = body(xp, data, axis, keepdim)
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
    return Tensor._make(out, device, result)


_AXIS_DTYPES = frozenset((_dtype.float16, _dtype.bfloat16, _dtype.float32, _dtype.float64))


def _axis_kernel(op: str, tensor: Tensor, axes, result: _dtype.dtype, acc) -> Callable | None:
    """The backend's own launcher ``fn(data, out)`` of ``op`` ("sum", "mean", "amax", "amin")
    over the one axis in ``axes`` of a non-empty contiguous float ``tensor`` whose result keeps
    its dtype (the ``reduce_axis`` hook of ``backends.OptionalHooks``; cuda: the last axis or
    the first), accumulating in ``acc``; None when the backend has none for the case (the
    ``xp`` reduction runs). Decided from metadata only."""
    if len(axes) != 1 or tensor.ndim == 0 or result is not tensor.dtype or \
            tensor.dtype not in _AXIS_DTYPES or tensor.device.type == "cpu":
        return None
    reduce_axis = _dispatch.hook(_dispatch.backend_of(tensor.device), "reduce_axis")
    if reduce_axis is None or tensor.numel() == 0 or not tensor.is_contiguous():
        return None
    return reduce_axis(op, tensor.shape, axes[0], tensor.dtype.numpy, acc, result.numpy)


def _launch_axis_kernel(op: str, tensor: Tensor, fast, keepdim: bool, axes,
                        result: _dtype.dtype) -> Tensor:
    """Run :func:`_axis_kernel`'s launcher ``fast`` into a new result tensor."""
    return _launch_shaped(op, tensor, fast, _reduced_shape(tensor.shape, axes, keepdim), result)


def _launch_shaped(op: str, tensor: Tensor, fast, shape: tuple, result: _dtype.dtype) -> Tensor:
    """:func:`_launch_axis_kernel` with the result's shape known."""
    device = tensor._device
    out = _dispatch.empty(device, shape, result)
    kernel = functools.partial(fast, tensor._data, out)
    # the backend's own kernel touches no NumPy: nothing to silence
    _dispatch.launch_native(device, _dispatch.named(op, kernel, shape=shape))
    return Tensor._make(out, device, result)


def _check_nonempty(op: str, tensor: Tensor, axes) -> None:
    for d in axes:
        if tensor.shape[d] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size "
                             f"(the tensor has shape {tensor.shape}); the reduction has no "
                             f"identity")


def _need_float(op: str, dtype: _dtype.dtype) -> None:
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"{op}(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {dtype.name}; pass "
                           f"dtype=tensorplay.float32 or convert with .float() first")


def _real(dtype: _dtype.dtype) -> _dtype.dtype:
    if dtype is _dtype.complex64:
        return _dtype.float32
    if dtype is _dtype.complex128:
        return _dtype.float64
    return dtype


def _summed_dtype(tensor, dtype):
    """The result dtype of sums, products and their scans: ``dtype`` if given, else the
    tensor's own floating/complex dtype, else int64 (bools and integers widen, as in PyTorch)."""
    if dtype is not None:
        return _dtype.to_dtype(dtype)
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        return tensor.dtype
    return _dtype.int64


class _SumPlan:
    """What a sum/prod over one input signature decides before it launches (as Note
    [elementwise plans] in ``elementwise.py``): device, result shape and dtype, the reduction
    and, for a small whole-tensor sum on a backend that has one, its one-launch kernel."""

    __slots__ = ("op", "device", "shape", "result", "reduce", "axis", "keepdim", "acc", "fast",
                 "into_out", "attrs", "launch")
    # the slots' types (declarations only: no class attribute is made)
    op: str
    device: Device
    shape: tuple[int, ...]
    result: _dtype.dtype
    reduce: Callable[..., Any]      # xp.sum or xp.prod
    axis: Any                       # xp's axis= (None for a 0-d tensor)
    keepdim: bool
    acc: np.dtype
    fast: Callable[..., Any] | None
    into_out: bool
    attrs: dict[str, Any]
    launch: Callable[..., Any]


_sum_plans: dict = {}


def _sum_like(op: str, tensor, dim, keepdim, dtype, reducer: str) -> Tensor:
    if type(tensor) is Tensor and tensor._guard is None and type(dim) is not list:
        data = tensor._data
        key = (op, tensor._layout or layout_of(tensor), dim, keepdim, dtype)
        plan = _sum_plans.get(key)
        if plan is None:
            plan = _sum_plan(op, tensor, dim, keepdim, dtype, reducer)
            _dispatch.remember(_sum_plans, key, plan, 1024)
    else:
        plan = _sum_plan(op, tensor, dim, keepdim, dtype, reducer)
        data = tensor._data
    device, result = plan.device, plan.result
    out = _dispatch.empty(device, plan.shape, result)
    if plan.fast is not None:
        kernel = functools.partial(plan.fast, data, out)
    elif plan.into_out:
        kernel = functools.partial(plan.reduce, data, axis=plan.axis, keepdims=plan.keepdim,
                                   dtype=plan.acc, out=out)
    else:
        kernel = functools.partial(_reduce_into, plan.reduce, data, plan.axis, plan.keepdim,
                                   plan.acc, out)
    # _dispatch.named, inlined
    kernel.__name__, kernel.tp_attrs = op, plan.attrs   # type: ignore[attr-defined]
    plan.launch(device, kernel)
    return Tensor._make(out, device, result)


def _reduce_into(reduce, data, axis, keepdims, acc, out) -> None:
    out[...] = reduce(data, axis=axis, keepdims=keepdims, dtype=acc)


def _sum_plan(op: str, tensor, dim, keepdim, dtype, reducer: str) -> _SumPlan:
    tensor = _check_tensor(tensor, op)
    axes = _axes(tensor, dim, op)
    plan = _SumPlan()
    plan.op, plan.device, plan.keepdim = op, tensor.device, keepdim
    plan.result = _summed_dtype(tensor, dtype)
    plan.acc = _accumulate(plan.result).numpy
    if reducer == "sum":
        plan.acc = _summing_dtype(tensor._data, axes, plan.acc)
    plan.shape = _reduced_shape(tensor.shape, axes, keepdim)
    _dispatch.check_dtype_supported(plan.device, plan.result)
    plan.reduce = getattr(_dispatch.xp_of(plan.device), reducer)
    plan.axis = _xp_axis(tensor, axes)
    # the reduction writes ``out=`` itself when it accumulates in the result's dtype (one
    # kernel instead of a reduction and a copy)
    plan.into_out = plan.acc == plan.result.numpy and tensor.ndim > 0
    plan.fast = None
    hook = _dispatch.sum_hook(plan.device)
    if hook is not None and op == "sum" and len(axes) == tensor.ndim and tensor.ndim > 0 and \
            tensor.is_contiguous() and \
            0 < tensor.numel() <= hook.limit:  # type: ignore[attr-defined]
        plan.fast = hook(plan.acc if tensor.dtype.numpy == plan.acc else tensor.dtype.numpy,
                         plan.result.numpy)
    if plan.fast is None and op == "sum":
        plan.fast = _axis_kernel("sum", tensor, axes, plan.result, plan.acc)
    plan.attrs = {"shape": plan.shape}
    # the backend's own sum kernel touches no NumPy: nothing to silence
    plan.launch = _dispatch.launch if plan.fast is None else _dispatch.launch_native
    return plan


# -- sums and products ------------------------------------------------------------------------
def sum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum over ``dim`` (all dims by default). Bool and integer inputs give int64, unless
    ``dtype`` (the dtype the input is cast to first) says otherwise."""
    if input.__class__ is Tensor and input._ag is not None and _grad_mode.enabled:
        return _autograd.dispatch("sum", sum, (input, dim, keepdim), {"dtype": dtype})
    return _sum_like("sum", input, dim, keepdim, dtype, "sum")


sum._tp_differentiable = "sum"   # type: ignore[attr-defined]   # checks autograd state inline


def prod(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Product over ``dim`` (PyTorch takes one int; a tuple also works here)."""
    return _sum_like("prod", input, dim, keepdim, dtype, "prod")


#: (the input's Layout, dim, keepdim) -> :func:`_mean_stages` of a mean without ``dtype``: a
#: repeated mean (a loss's, every step) goes straight to its kernels
_mean_plans: dict = {}


def mean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Mean over ``dim``.

    Raises:
        RuntimeError: for bool/integer input without a floating ``dtype=``, as in PyTorch.
    """
    # (an int dim or None: True and 1.0 hash as 1 but are errors)
    key = (input._layout or layout_of(input), dim, keepdim) if type(input) is Tensor and \
        dtype is None and (dim is None or type(dim) is int) and input._guard is None else None
    if key is not None:
        stages = _mean_plans.get(key)
        if stages is not None:
            return _run_stages(input, stages)
    tensor = _check_tensor(input, "mean")
    result = tensor.dtype if dtype is None else _dtype.to_dtype(dtype)
    _need_float("mean", result)
    axes = _axes(tensor, dim, "mean")
    acc = _summing_dtype(tensor._data, axes, _accumulate(result).numpy)
    stages = _mean_stages(tensor, axes, keepdim, result, acc)
    if stages is not None:
        if key is not None:
            _dispatch.remember(_mean_plans, key, stages)
        return _run_stages(tensor, stages)

    def body(xp, a, axis, keepdims):
        if a.size == 0:   # NaN, as PyTorch gives, without NumPy's "Mean of empty slice"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return xp.mean(a, axis=axis, keepdims=keepdims, dtype=acc)
        return xp.mean(a, axis=axis, keepdims=keepdims, dtype=acc)
    return _reduce("mean", tensor, axes, keepdim, result, body)


def _mean_stages(tensor: Tensor, axes, keepdim: bool, result: _dtype.dtype, acc):
    """A mean as the backend's axis kernels (:func:`_axis_kernel`), ``((shape the input is
    viewed as, launcher, result shape), ...)`` run in turn, each over the one before's result;
    None where the backend has none for the case.

    One kernel over the one reduced axis; over every element of a contiguous tensor (a loss's
    mean: the array library's reduction costs several times its host time) the mean of its one
    row of elements, or for float32 and float64 the mean of its rows' means (equal rows: the
    same value; the partial means keep float32's precision, where a half dtype's would round
    twice)."""
    shape = _reduced_shape(tensor.shape, axes, keepdim)
    fast = _axis_kernel("mean", tensor, axes, result, acc)
    if fast is not None:
        return ((tensor._data.shape, fast, shape),)
    if not (len(axes) == tensor.ndim > 1 and result is tensor.dtype and tensor.is_contiguous()):
        return None
    data, device, dtype = tensor._data, tensor._device, tensor._dtype
    flat = Tensor._make(data.reshape(-1), device, dtype)
    fast = _axis_kernel("mean", flat, (0,), dtype, acc)
    if fast is not None:
        return ((flat._data.shape, fast, shape),)
    if dtype not in (_dtype.float32, _dtype.float64):
        return None
    rows = Tensor._make(data.reshape(-1, data.shape[-1]), device, dtype)
    fast = _axis_kernel("mean", rows, (1,), dtype, acc)
    partial = (rows._data.shape[0],)
    # (the partial means' layout, shown by as many of the input's first elements)
    last = _axis_kernel("mean", Tensor._make(data.reshape(-1)[:partial[0]], device, dtype), (0,),
                        dtype, acc)
    if fast is None or last is None:
        return None
    return ((rows._data.shape, fast, partial), (partial, last, shape))


def _run_stages(tensor: Tensor, stages) -> Tensor:
    """Launch :func:`_mean_stages`' kernels over ``tensor`` into a new result."""
    if tensor._guard is not None:
        tensor._check_guard()
    device, result = tensor._device, tensor._dtype
    for view, fast, shape in stages:
        tensor = _launch_shaped("mean", Tensor._make(tensor._data.reshape(view), device, result),
                                fast, shape, result)
    return tensor


def count_nonzero(input, dim=None) -> Tensor:
    """The number of nonzero elements over ``dim`` (int64)."""
    tensor = _check_tensor(input, "count_nonzero")
    axes = _axes(tensor, dim, "count_nonzero")

    def body(xp, a, axis, keepdims):
        return xp.sum(a != 0, axis=axis, keepdims=keepdims, dtype=np.int64)
    return _reduce("count_nonzero", tensor, axes, False, _dtype.int64, body)


# -- extrema ----------------------------------------------------------------------------------
def _check_tensor_op(value, op: str) -> Tensor:
    """``value`` as a Tensor that ``op`` accepts (Note [op dtype rules] in ``_dtype``)."""
    tensor = _check_tensor(value, op)
    _dtype.check_op(op, tensor.dtype, (tensor,))
    return tensor


def _extreme(op: str, tensor, dim, keepdim: bool, reducer: str) -> Tensor:
    tensor = _check_tensor_op(tensor, op)
    axes = _axes(tensor, dim, op)
    _check_nonempty(op, tensor, axes)
    fast = _axis_kernel(reducer, tensor, axes, tensor.dtype, None)
    if fast is not None:
        return _launch_axis_kernel(op, tensor, fast, keepdim, axes, tensor.dtype)

    def body(xp, a, axis, keepdims):
        return getattr(xp, reducer)(a, axis=axis, keepdims=keepdims)
    return _reduce(op, tensor, axes, keepdim, tensor.dtype, body)


def amax(input, dim=(), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (all dims by default); NaN propagates."""
    return _extreme("amax", input, dim, keepdim, "amax")


def amin(input, dim=(), keepdim: bool = False) -> Tensor:
    """Minimum over ``dim`` (all dims by default); NaN propagates."""
    return _extreme("amin", input, dim, keepdim, "amin")


#: (op, the input's Layout, dim, keepdim) -> (the backend's launcher, the result's shape): a
#: repeated argmax over the last dim (a decode step's choice) goes straight to the launch
_arg_plans: dict = {}


def _arg_extreme(op: str, tensor, dim, keepdim: bool, finder: str) -> Tensor:
    key = (op, tensor._layout or layout_of(tensor), dim, keepdim) \
        if type(tensor) is Tensor and type(dim) is int and type(keepdim) is bool else None
    if key is not None:
        found = _arg_plans.get(key)
        if found is not None:
            if tensor._guard is not None:
                tensor._check_guard()
            return _launch_shaped(op, tensor, found[0], found[1], _dtype.int64)
    tensor = _check_tensor_op(tensor, op)
    if dim is None:
        if tensor.numel() == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0.")
        shape = (1,) * tensor.ndim if keepdim else ()
        out = _new(tensor.device, shape, _dtype.int64)
        data, xp = tensor._data, _dispatch.xp_of(tensor.device)

        def kernel():
            out[...] = getattr(xp, finder)(data)
        _dispatch.launch(tensor.device, _dispatch.named(op, kernel))
        return Tensor._make(out, tensor.device, _dtype.int64)
    axes = _axes(tensor, dim, op)
    _check_nonempty(op, tensor, axes)
    axis = axes[0] if axes else None
    if axis is not None and axis == tensor.ndim - 1 and tensor.device.type != "cpu" and \
            tensor.dtype in _AXIS_DTYPES and tensor.is_contiguous():
        reduce_axis = _dispatch.hook(_dispatch.backend_of(tensor.device), "reduce_axis")
        fast = None if reduce_axis is None else reduce_axis(
            finder, tensor.shape, axis, tensor.dtype.numpy, None, np.dtype(np.int64))
        if fast is not None:
            shape = _reduced_shape(tensor.shape, axes, keepdim)
            if key is not None:
                _dispatch.remember(_arg_plans, key, (fast, shape))
            return _launch_shaped(op, tensor, fast, shape, _dtype.int64)

    def body(xp, a, _axis, keepdims):
        return getattr(xp, finder)(a, axis=axis, keepdims=keepdims)
    return _reduce(op, tensor, axes, keepdim, _dtype.int64, body)


def argmax(input, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the (first) maximum: flat over all elements when ``dim`` is None."""
    return _arg_extreme("argmax", input, dim, keepdim, "argmax")


def argmin(input, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the (first) minimum: flat over all elements when ``dim`` is None."""
    return _arg_extreme("argmin", input, dim, keepdim, "argmin")


def _values_indices(op: str, tensor: Tensor, dim, keepdim: bool, finder: str):
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"{op}(): dim must be one int, got {dim!r}; use amax/amin to reduce "
                        f"over several dims")
    axes = _axes(tensor, dim, op)
    _check_nonempty(op, tensor, axes)
    device = tensor.device
    shape = _reduced_shape(tensor.shape, axes, keepdim)
    values = _new(device, shape, tensor.dtype)
    indices = _new(device, shape, _dtype.int64)
    data, xp = tensor._data, _dispatch.xp_of(device)
    axis = axes[0] if axes else None

    def kernel():
        if axis is None:  # a 0-d tensor
            values[...] = data
            indices[...] = 0
            return
        found = getattr(xp, finder)(data, axis=axis, keepdims=True)
        picked = xp.take_along_axis(data, found, axis=axis)
        if not keepdim:
            found, picked = found.squeeze(axis), picked.squeeze(axis)
        values[...] = picked
        indices[...] = found
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
    result = getattr(return_types, op)
    return result(Tensor._make(values, device, tensor.dtype),
                  Tensor._make(indices, device, _dtype.int64))


def _max_min(op: str, input, dim, keepdim, other):
    finder = "argmax" if op == "max" else "argmin"
    if isinstance(dim, Tensor) or other is not None:
        return _ops.binary("maximum" if op == "max" else "minimum", input,
                           dim if other is None else other)
    tensor = _check_tensor_op(input, op)
    if dim is None:
        if keepdim:
            raise TypeError(f"{op}(): keepdim needs a dim")
        if tensor.numel() == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                               f"argument.")
        return _extreme(op, tensor, None, False, "amax" if op == "max" else "amin")
    return _values_indices(op, tensor, dim, keepdim, finder)


def max(input, dim=None, keepdim: bool = False, *, other=None):
    """``max(t)``: the maximum as a 0-d tensor. ``max(t, dim, keepdim=False)``: a named tuple
    ``(values, indices)``. ``max(t, other_tensor)``: the elementwise ``maximum``."""
    return _max_min("max", input, dim, keepdim, other)


def min(input, dim=None, keepdim: bool = False, *, other=None):
    """``min(t)``, ``min(t, dim)`` -> ``(values, indices)``, or elementwise ``min(t, other)``."""
    return _max_min("min", input, dim, keepdim, other)


# -- logical ----------------------------------------------------------------------------------
def _logical(op: str, input, dim, keepdim: bool) -> Tensor:
    tensor = _check_tensor(input, op)
    axes = _axes(tensor, dim, op)
    result = _dtype.uint8 if tensor.dtype is _dtype.uint8 else _dtype.bool

    def body(xp, a, axis, keepdims):
        return getattr(xp, op)(a, axis=axis, keepdims=keepdims)
    return _reduce(op, tensor, axes, keepdim, result, body)


def all(input, dim=None, keepdim: bool = False) -> Tensor:
    """Whether every element over ``dim`` is nonzero (bool; uint8 for uint8 input)."""
    return _logical("all", input, dim, keepdim)


def any(input, dim=None, keepdim: bool = False) -> Tensor:
    """Whether some element over ``dim`` is nonzero (bool; uint8 for uint8 input)."""
    return _logical("any", input, dim, keepdim)


# -- statistics -------------------------------------------------------------------------------
def _correction(correction, unbiased) -> float:
    if unbiased is not None:
        if correction is not None:
            raise TypeError("std/var: give either correction= or unbiased=, not both")
        return 1 if unbiased else 0
    return 1 if correction is None else correction


def _moment(op: str, input, dim, unbiased, keepdim, correction) -> Tensor:
    if isinstance(dim, builtins.bool):  # the legacy var(t, unbiased) spelling
        dim, unbiased = None, dim
    tensor = _check_tensor(input, op)
    if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise RuntimeError(f"{op}(): std and var only support floating point and complex "
                           f"dtypes, got {tensor.dtype.name}")
    ddof = _correction(correction, unbiased)
    axes = _axes(tensor, dim, op)
    result = _real(tensor.dtype)
    acc = _summing_dtype(tensor._data, axes, _accumulate(tensor.dtype).numpy)
    # complex input: xp's default when not widened, as before; a complex dtype= makes the
    # variance complex (zero imaginary part), so the widened kernel keeps its real part
    widened_complex = acc.kind == "c" and acc != tensor.dtype.numpy
    if tensor.dtype.is_complex and not widened_complex:
        acc = None   # type: ignore[assignment]   # xp's default

    def body(xp, a, axis, keepdims):
        value = xp.var(a, axis=axis, keepdims=keepdims, ddof=ddof, dtype=acc)
        if widened_complex:
            value = xp.real(value)
        return xp.sqrt(value) if op == "std" else value
    return _reduce(op, tensor, axes, keepdim, result, body)


def var(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance over ``dim`` with Bessel's ``correction`` (default 1; ``unbiased=False`` means
    0). Complex input gives a real result. Fewer than ``correction + 1`` elements give inf/nan."""
    return _moment("var", input, dim, unbiased, keepdim, correction)


def std(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Standard deviation: the square root of :func:`var` (same arguments)."""
    return _moment("std", input, dim, unbiased, keepdim, correction)


def norm(input, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The vector p-norm over ``dim`` (all elements by default): ``p`` a number, ``inf``,
    ``-inf``, or ``"fro"`` (the 2-norm). Complex input gives a real result.

    Raises:
        RuntimeError: for bool/integer input. ValueError: for an unsupported ``p`` ("nuc").
    """
    tensor = _check_tensor(input, "norm")
    if dtype is not None:
        tensor = tensor.to(_dtype.to_dtype(dtype))
    if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise RuntimeError(f"norm(): Expected a floating point or complex tensor as input. "
                           f"Got {tensor.dtype.name}")
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str) or isinstance(p, builtins.bool) or \
            not isinstance(p, (int, float, np.number)):
        raise ValueError(f"norm(): p must be a number, inf, -inf or 'fro', got {p!r}")
    p = float(p)
    axes = _axes(tensor, dim, "norm")
    if np.isinf(p) and tensor.numel() == 0:
        raise RuntimeError("norm(): cannot compute the inf norm on an empty tensor because "
                           "the operation does not have an identity")
    result = _real(tensor.dtype)
    acc = _accumulate(result).numpy
    wide = _summing_dtype(tensor._data, axes, acc)

    def body(xp, a, axis, keepdims):
        x = xp.abs(a).astype(acc, copy=False)
        if p == 2:
            return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=keepdims, dtype=wide))
        if p == np.inf:
            return xp.amax(x, axis=axis, keepdims=keepdims)
        if p == -np.inf:
            return xp.amin(x, axis=axis, keepdims=keepdims)
        if p == 0:
            return xp.sum(x != 0, axis=axis, keepdims=keepdims, dtype=wide)
        if p == 1:
            return xp.sum(x, axis=axis, keepdims=keepdims, dtype=wide)
        return xp.sum(x ** p, axis=axis, keepdims=keepdims, dtype=wide) ** (1.0 / p)
    return _reduce("norm", tensor, axes, keepdim, result, body)


def logsumexp(input, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim``, computed stably (subtracting the maximum); integer
    input gives float32. An empty reduction gives ``-inf``."""
    tensor = _check_tensor(input, "logsumexp")
    axes = _axes(tensor, dim, "logsumexp")
    result = tensor.dtype if tensor.dtype.is_floating_point or tensor.dtype.is_complex \
        else _dtype.get_default_dtype()
    acc = _accumulate(result).numpy
    wide = _summing_dtype(tensor._data, axes, acc)
    empty = builtins.any(tensor.shape[d] == 0 for d in axes)

    def body(xp, a, axis, keepdims):
        x = a.astype(acc, copy=False)
        if empty:
            return -np.inf
        if axis is None:
            return x
        top = xp.amax(x, axis=axis, keepdims=True)
        top = xp.where(xp.isinf(top), xp.zeros_like(top), top)
        total = xp.log(xp.sum(xp.exp(x - top), axis=axis, keepdims=True, dtype=wide)) + top
        return total if keepdims else total.squeeze(axis)
    return _reduce("logsumexp", tensor, axes, keepdim, result, body)


# -- scans ------------------------------------------------------------------------------------
def _scan(op: str, input, dim, dtype, scanner: str) -> Tensor:
    tensor = _check_tensor(input, op)
    axis = _normalize_dim(dim, tensor.ndim)
    result = _summed_dtype(tensor, dtype)
    acc = _accumulate(result).numpy
    device = tensor.device
    out = _new(device, tensor.shape, result)
    data, xp = tensor._data, _dispatch.xp_of(device)
    zero_d = tensor.ndim == 0

    def kernel():
        if zero_d:
            out[...] = data
        else:
            out[...] = getattr(xp, scanner)(data, axis=axis, dtype=acc)
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tensor.shape))
    return Tensor._make(out, device, result)


def cumsum(input, dim, *, dtype=None) -> Tensor:
    """Running sums along ``dim`` (bool/integer input gives int64)."""
    return _scan("cumsum", input, dim, dtype, "cumsum")


def cumprod(input, dim, *, dtype=None) -> Tensor:
    """Running products along ``dim`` (bool/integer input gives int64)."""
    return _scan("cumprod", input, dim, dtype, "cumprod")


# -- sorting ----------------------------------------------------------------------------------
def _sorted_indices(xp, a, axis: int, descending: bool):
    """Stable argsort; descending keeps equal elements in their original order (and puts NaN
    first), as PyTorch's stable sort does."""
    if not descending:
        return xp.argsort(a, axis=axis, kind="stable")
    flipped = xp.argsort(xp.flip(a, axis=axis), axis=axis, kind="stable")
    return (a.shape[axis] - 1) - xp.flip(flipped, axis=axis)


def _sort_kernel(op: str, tensor: Tensor, axis: int, descending: bool, count: int):
    """(values, indices) arrays of the first ``count`` elements along ``axis`` once sorted."""
    device = tensor.device
    sizes = list(tensor.shape)
    if sizes:
        sizes[axis] = count
    shape = tuple(sizes)
    values = _new(device, shape, tensor.dtype)
    indices = _new(device, shape, _dtype.int64)
    data, xp, zero_d = tensor._data, _dispatch.xp_of(device), tensor.ndim == 0
    keep = (slice(None),) * axis + (slice(0, count),)

    def kernel():
        if zero_d:
            values[...] = data
            indices[...] = 0
            return
        order = _sorted_indices(xp, data, axis, descending)[keep]
        values[...] = xp.take_along_axis(data, order, axis=axis)
        indices[...] = order
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
    return Tensor._make(values, device, tensor.dtype), Tensor._make(indices, device, _dtype.int64)


def sort(input, dim: int = -1, descending: bool = False, stable: bool = False):
    """Sorted values and their indices along ``dim``: ``(values, indices)``. Always stable;
    NaN sorts as the largest value."""
    tensor = _check_tensor_op(input, "sort")
    axis = _normalize_dim(dim, tensor.ndim)
    count = tensor.shape[axis] if tensor.ndim else 1
    return return_types.sort(*_sort_kernel("sort", tensor, axis, descending, count))


def argsort(input, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The indices that sort ``dim`` (stable)."""
    return sort(input, dim, descending, stable).indices


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, in order.

    Raises:
        RuntimeError: ``k`` outside ``0..size``.
    """
    tensor = _check_tensor_op(input, "topk")
    axis = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[axis] if tensor.ndim else 1
    if isinstance(k, builtins.bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= size:
        raise RuntimeError(f"topk(): selected index k={k!r} is out of range for dimension {axis} "
                           f"of size {size}")
    return return_types.topk(*_sort_kernel("topk", tensor, axis, largest, int(k)))
