"""Order statistics, counting and searching: ``median mode kthvalue unique bincount histc
cummax cummin nansum nanmean searchsorted bucketize`` (functions and Tensor methods).
``logsumexp`` and ``count_nonzero`` live with the other reductions in ``reductions.py``.

Each op decides its result's shape and dtype from metadata and launches ONE kernel closure
through ``dispatch.launch`` written against the ``xp`` namespace, so host, sim and cuda run the
same code, and may be used inside a captured graph. Two exceptions read data on the host because
their result's SIZE depends on it (as in PyTorch): ``unique`` (always) and ``bincount`` (the
number of bins is ``max(input) + 1``). They wait for the device and raise inside a capture; give
``bincount`` a ``minlength`` no smaller than the bins you expect and it still reads the maximum.

Ties and NaN. ``median``/``kthvalue`` sort stably with NaN as the largest value; ``median``
propagates NaN (a row with a NaN gives NaN and the index of its first NaN). Which index PyTorch
returns among equal values is not documented for ``median``/``kthvalue``; here it is the stably
sorted position. ``mode`` gives the smallest most-frequent value and the LAST index where it
occurs; ``cummax``/``cummin`` give the last index of the running extreme (PyTorch's rule).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import creation as _creation
from .reductions import _axes, _check_nonempty, _reduced_shape, _summing_dtype, _xp_axis, \
    return_types
from .tensor import Tensor, _normalize_dim

__all__ = ["median", "mode", "kthvalue", "unique", "bincount", "histc", "cummax", "cummin",
           "nansum", "nanmean", "searchsorted", "bucketize"]

TENSOR_METHODS = ("median", "mode", "kthvalue", "unique", "bincount", "histc", "cummax",
                  "cummin", "nansum", "nanmean")


def _tensor(value, op: str, name: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    value._check_guard()
    return value


def _ordered(value, op: str) -> Tensor:
    tensor = _tensor(value, op)
    if tensor.dtype.is_complex:
        raise RuntimeError(f"{op}(): does not support complex input ({tensor.dtype.name}); "
                           f"it orders values")
    return tensor


def _new(device, shape, dtype: _dtype.dtype):
    _dispatch.check_dtype_supported(device, dtype)
    return _dispatch.empty(device, tuple(shape), dtype)


def _launch(op: str, device, kernel, shape=()) -> None:
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tuple(shape)))


def _pair(op: str, tensor: Tensor, dim, keepdim: bool, pick) -> tuple:
    """``(values, indices)`` along one ``dim``: ``pick(xp, a, axis)`` returns the chosen
    position along ``axis`` (keepdims shape, int64) of a non-empty array."""
    axis = _normalize_dim(dim, tensor.ndim)
    axes = () if tensor.ndim == 0 else (axis,)
    _check_nonempty(op, tensor, axes)
    shape = _reduced_shape(tensor.shape, axes, keepdim)
    device = tensor.device
    values = _new(device, shape, tensor.dtype)
    indices = _new(device, shape, _dtype.int64)
    data, xp, zero_d = tensor._data, _dispatch.xp_of(device), tensor.ndim == 0

    def kernel():
        a = data.reshape(1) if zero_d else data
        ax = 0 if zero_d else axis
        found = pick(xp, a, ax)
        picked = xp.take_along_axis(a, found, axis=ax)
        if zero_d or not keepdim:
            found, picked = found.reshape(shape), picked.reshape(shape)
        values[...] = picked
        indices[...] = found
    _launch(op, device, kernel, shape)
    return Tensor._make(values, device, tensor.dtype), Tensor._make(indices, device,
                                                                     _dtype.int64)


def _nan_aware_rank(xp, a, axis: int, rank: int, propagate_nan: bool):
    """The position (keepdims) of the element of stable rank ``rank`` along ``axis``; with
    ``propagate_nan``, the first NaN's position where the row holds one."""
    order = xp.argsort(a, axis=axis, kind="stable")
    # a slice, not ``take`` with an index array: building that array is a host-to-device copy,
    # which a capturing stream refuses
    found = xp.moveaxis(xp.moveaxis(order, axis, -1)[..., rank:rank + 1], -1, axis)
    if propagate_nan and a.dtype.kind in "fV":
        nan = xp.isnan(a)
        first = xp.argmax(nan, axis=axis, keepdims=True)
        found = xp.where(xp.any(nan, axis=axis, keepdims=True), first, found)
    return found.astype(np.int64)


# -- median, kthvalue, mode -------------------------------------------------------------------
def median(input, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (the element of rank ``(n - 1) // 2``, as PyTorch: no averaging).
    ``median(t)``: a 0-d tensor (NaN for an empty floating tensor); ``median(t, dim,
    keepdim=False)``: the named tuple ``(values, indices)``. NaN propagates.

    Raises:
        RuntimeError: complex input; an empty non-floating tensor without ``dim``.
        IndexError: a ``dim`` of size 0.
    """
    tensor = _ordered(input, "median")
    if dim is None:
        device, xp, n = tensor.device, _dispatch.xp_of(tensor.device), tensor.numel()
        if n == 0 and not tensor.dtype.is_floating_point:
            raise RuntimeError("median(): cannot compute the median of an empty integer tensor "
                               "(it has no NaN to return)")
        out = _new(device, (), tensor.dtype)
        data = tensor._data

        def kernel():
            if n == 0:
                out[...] = np.nan
                return
            flat = data.reshape(-1)
            found = _nan_aware_rank(xp, flat, 0, (n - 1) // 2, True)
            out[...] = flat[found].reshape(())
        _launch("median", device, kernel)
        return Tensor._make(out, device, tensor.dtype)
    size = tensor.shape[_normalize_dim(dim, tensor.ndim)] if tensor.ndim else 1
    values, indices = _pair("median", tensor, dim, keepdim,
                            lambda xp, a, ax: _nan_aware_rank(xp, a, ax, (size - 1) // 2, True))
    return return_types.median(values, indices)


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """The ``k``-th smallest element (1-based) along ``dim`` and its index: the named tuple
    ``(values, indices)``. NaN counts as the largest value.

    Raises:
        RuntimeError: ``k`` outside ``1..size``, complex input. TypeError: ``k`` not an int.
    """
    tensor = _ordered(input, "kthvalue")
    if isinstance(k, builtins.bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"kthvalue(): argument 'k' must be int, not {type(k).__name__}")
    axis = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[axis] if tensor.ndim else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k={k} out of range for dimension "
                           f"{axis} of size {size} (valid: 1 to {size})")
    values, indices = _pair("kthvalue", tensor, axis, keepdim,
                            lambda xp, a, ax: _nan_aware_rank(xp, a, ax, int(k) - 1, False))
    return return_types.kthvalue(values, indices)


def _running(xp, ufunc: str, a, axis: int):
    """The inclusive running ``xp.<ufunc>`` (maximum or minimum) along ``axis``, as
    ``ufunc.accumulate`` (which CuPy does not have): a Hillis-Steele scan of ``ceil(log2 n)``
    steps, a number known from the shape, so nothing is read on the host. NaN propagates, as
    ``xp.maximum`` propagates it."""
    combine = getattr(xp, ufunc)
    scan = xp.moveaxis(a, axis, -1).copy()
    n, step = scan.shape[-1], 1
    while step < n:
        scan[..., step:] = combine(scan[..., step:], scan[..., :-step])
        step *= 2
    return xp.moveaxis(scan, -1, axis)


def _mode_pick(xp, a, axis: int):
    n = a.shape[axis]
    order = xp.argsort(a, axis=axis, kind="stable")
    ordered = xp.take_along_axis(a, order, axis=axis)
    moved = xp.moveaxis(ordered, axis, -1)
    starts = xp.ones(moved.shape, dtype=np.bool_)
    same = moved[..., 1:] == moved[..., :-1]
    if moved.dtype.kind in "fV":
        same = same | (xp.isnan(moved[..., 1:]) & xp.isnan(moved[..., :-1]))
    starts[..., 1:] = ~same
    position = xp.broadcast_to(xp.arange(n), moved.shape)
    start = _running(xp, "maximum", xp.where(starts, position, 0), -1)
    run = position - start + 1          # the count of the value so far, at each position
    best = xp.argmax(run, axis=-1)      # first position reaching the largest count: the end
    best = xp.moveaxis(best[..., None], -1, axis)   # of the smallest most-frequent value's run
    return xp.take_along_axis(order, best, axis=axis).astype(np.int64)


def mode(input, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and the
    last index where it occurs: the named tuple ``(values, indices)``. NaNs count as equal.

    Raises:
        RuntimeError: complex input. IndexError: a ``dim`` of size 0.
    """
    tensor = _ordered(input, "mode")
    values, indices = _pair("mode", tensor, dim, keepdim, _mode_pick)
    return return_types.mode(values, indices)


# -- cummax, cummin ---------------------------------------------------------------------------
def _cumulative(op: str, input, dim: int):
    tensor = _ordered(input, op)
    axis = _normalize_dim(dim, tensor.ndim)
    device, shape = tensor.device, tensor.shape
    values = _new(device, shape, tensor.dtype)
    indices = _new(device, shape, _dtype.int64)
    data, xp, zero_d = tensor._data, _dispatch.xp_of(device), tensor.ndim == 0
    ufunc = "maximum" if op == "cummax" else "minimum"
    floating = tensor.dtype.is_floating_point
    empty = tensor.numel() == 0

    def kernel():
        if empty:
            return
        a = data.reshape(1) if zero_d else data
        ax = 0 if zero_d else axis
        running = _running(xp, ufunc, a, ax)
        hit = a == running
        if floating:
            hit = hit | xp.isnan(a)
        place = [1] * a.ndim
        place[ax] = a.shape[ax]
        position = xp.arange(a.shape[ax]).reshape(place)
        found = _running(xp, "maximum", xp.where(hit, position, 0), ax)
        values[...] = running.reshape(shape)
        indices[...] = found.reshape(shape)
    _launch(op, device, kernel, shape)
    result = getattr(return_types, op)
    return result(Tensor._make(values, device, tensor.dtype),
                  Tensor._make(indices, device, _dtype.int64))


def cummax(input, dim: int) -> tuple[Tensor, Tensor]:
    """Running maximum along ``dim`` and the index where it was (last) reached: the named
    tuple ``(values, indices)``. NaN propagates (its index is the latest NaN's)."""
    return _cumulative("cummax", input, dim)


def cummin(input, dim: int) -> tuple[Tensor, Tensor]:
    """Running minimum along ``dim`` and its (last) index: ``(values, indices)``."""
    return _cumulative("cummin", input, dim)


# -- nansum, nanmean --------------------------------------------------------------------------
def _nan_reduce(op: str, input, dim, keepdim: bool, dtype) -> Tensor:
    tensor = _tensor(input, op)
    if tensor.dtype.is_complex:
        raise RuntimeError(f"{op}(): complex tensors are not supported (got "
                           f"{tensor.dtype.name})")
    if dtype is not None:
        result = _dtype.to_dtype(dtype)
    elif op == "nanmean" or tensor.dtype.is_floating_point:
        result = tensor.dtype
    else:
        result = _dtype.int64
    if op == "nanmean" and not (tensor.dtype.is_floating_point and result.is_floating_point):
        # PyTorch checks the input's dtype, so dtype= does not admit integer input
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got "
                           f"{tensor.dtype.name} (dtype={result.name}); convert with .float()")
    axes = _axes(tensor, dim, op)
    shape = _reduced_shape(tensor.shape, axes, keepdim)
    device = tensor.device
    out = _new(device, shape, result)
    data, xp, axis = tensor._data, _dispatch.xp_of(device), _xp_axis(tensor, axes)
    # Note [accurate sums] in reductions.py: wider where NumPy would add one by one
    acc = _summing_dtype(data, axes, _dtype.accumulation_dtype(result).numpy)
    floating = tensor.dtype.is_floating_point

    def kernel():
        a = data.astype(acc)
        if floating:
            nan = xp.isnan(a)
            a = xp.where(nan, xp.zeros((), dtype=acc), a)
        total = xp.sum(a, axis=axis, keepdims=keepdim)
        if op == "nanmean":
            count = xp.sum(~nan, axis=axis, keepdims=keepdim) if floating else \
                xp.sum(xp.ones(a.shape, dtype=np.int64), axis=axis, keepdims=keepdim)
            total = total / count
        out[...] = total
    _launch(op, device, kernel, shape)
    return Tensor._make(out, device, result)


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum over ``dim`` treating NaN as 0; bool/integer input gives int64 (as ``sum``)."""
    return _nan_reduce("nansum", input, dim, keepdim, dtype)


def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Mean over ``dim`` of the non-NaN elements (NaN where all are NaN).

    Raises:
        RuntimeError: bool/integer input (even with a floating ``dtype=``, as PyTorch), a
            non-floating ``dtype``, complex input.
    """
    return _nan_reduce("nanmean", input, dim, keepdim, dtype)


# -- unique, bincount, histc ------------------------------------------------------------------
def unique(input, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct values (sorted; ``sorted=False`` also sorts), and optionally the inverse
    indices (input's shape for ``dim=None``, ``(size of dim,)`` with ``dim``) and the counts.
    With ``dim``, the distinct slices along ``dim``. NaNs are all distinct, as in PyTorch.

    Reads the data on the host (the result's size depends on it): waits for the device and is
    NOT capture-safe (raises inside a capture).
    """
    tensor = _tensor(input, "unique")
    if tensor.dtype.is_complex:
        raise RuntimeError(f"unique(): complex tensors are not supported (got "
                           f"{tensor.dtype.name})")
    host = np.asarray(tensor._host_copy("unique()"))
    device = tensor.device
    if dim is None:
        values, inverse, counts = np.unique(host.reshape(-1), return_inverse=True,
                                            return_counts=True, equal_nan=False)
        inverse = inverse.reshape(host.shape)
    else:
        axis = _normalize_dim(dim, tensor.ndim)
        if tensor.ndim == 0:
            raise IndexError("unique(): a 0-d tensor has no dim to take slices along")
        if host.shape[axis] == 0:
            values = host
            inverse = np.zeros(0, np.int64)
            counts = np.zeros(0, np.int64)
        else:
            values, inverse, counts = np.unique(host, return_inverse=True, return_counts=True,
                                                axis=axis, equal_nan=False)
            inverse = inverse.reshape(-1)
    result = [_creation.tensor(np.ascontiguousarray(values, dtype=tensor.dtype.numpy),
                               dtype=tensor.dtype, device=device)]
    if return_inverse:
        result.append(_creation.tensor(np.ascontiguousarray(inverse, dtype=np.int64),
                                       device=device))
    if return_counts:
        result.append(_creation.tensor(np.ascontiguousarray(counts, dtype=np.int64),
                                       device=device))
    return result[0] if len(result) == 1 else tuple(result)


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """Counts of each value of a 1-D non-negative integer tensor: ``max(input) + 1`` bins (at
    least ``minlength``); with ``weights`` (same length) their sums instead. The result is
    int64, or float32 for float32 weights and float64 for other weights (as PyTorch).

    Reads the maximum on the host (the result's size depends on it): NOT capture-safe.

    Raises:
        RuntimeError: input not 1-D integer, a negative value, a negative ``minlength``,
            weights of another length.
    """
    tensor = _tensor(input, "bincount")
    if tensor.ndim != 1 or not (tensor.dtype.is_floating_point is False and
                                not tensor.dtype.is_complex and tensor.dtype is not _dtype.bool):
        raise RuntimeError(f"bincount(): only supports 1-d non-negative integral inputs, got "
                           f"a {tensor.ndim}-d {tensor.dtype.name} tensor")
    if isinstance(minlength, builtins.bool) or not isinstance(minlength, (int, np.integer)):
        raise TypeError(f"bincount(): minlength must be an int, got {type(minlength).__name__}")
    if minlength < 0:
        raise RuntimeError(f"bincount(): minlength should be >= 0, got {minlength}")
    if weights is not None:
        weights = _tensor(weights, "bincount", "weights")
        if weights.ndim != 1 or weights.shape[0] != tensor.shape[0]:
            raise RuntimeError(f"bincount(): weights should be 1-d and have the same length as "
                               f"input (got shapes {list(weights.shape)} and "
                               f"{list(tensor.shape)})")
        if weights.device != tensor.device:
            raise RuntimeError(f"bincount(): weights on {weights.device}, input on "
                               f"{tensor.device}: put them on one device")
        result = _dtype.float32 if weights.dtype is _dtype.float32 else _dtype.float64
    else:
        result = _dtype.int64
    host = np.asarray(tensor._host_copy("bincount()"))
    if host.size and host.min() < 0:
        raise RuntimeError(f"bincount(): only supports 1-d non-negative integral inputs, got "
                           f"the value {int(host.min())}")
    size = builtins.max(int(host.max()) + 1 if host.size else 0, int(minlength))
    device = tensor.device
    out = _new(device, (size,), result)
    data, xp = tensor._data, _dispatch.xp_of(device)
    wdata = None if weights is None else weights._data

    def kernel():
        out[...] = 0
        if wdata is None:
            xp.add.at(out, data.astype(np.int64), 1)
        else:
            xp.add.at(out, data.astype(np.int64), wdata.astype(out.dtype))
    _launch("bincount", device, kernel, (size,))
    return Tensor._make(out, device, result)


def _number(value, op: str, name: str) -> float:
    if isinstance(value, builtins.bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{op}(): argument '{name}' must be a number, not "
                        f"{type(value).__name__}")
    return float(value)


def histc(input, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """A histogram of ``bins`` equal-width bins over ``[min, max]`` (the data's own minimum and
    maximum when ``min == max``, widened by 1 each way if those are equal too); elements outside
    the range and NaN are ignored; ``max`` falls in the last bin. The result has the input's
    dtype. Bins are computed in float64 (PyTorch computes in the input's dtype, which can place
    an element lying exactly on a bin edge one bin over). Capture-safe: the data range is found
    on the device. Integer input is taken on accelerators and refused on cpu, as PyTorch's CUDA
    and CPU kernels do.

    Raises:
        NotImplementedError: (a RuntimeError) bool or complex input, integer input on cpu.
        RuntimeError: ``bins <= 0``, ``min > max``, an infinite range.
    """
    tensor = _tensor(input, "histc")
    kind = tensor.dtype
    if not (kind.is_floating_point or (tensor.device.type != "cpu" and not kind.is_complex
                                        and kind is not _dtype.bool)):
        where = "histogram_cpu" if tensor.device.type == "cpu" else "histc"
        valid = "floating" if tensor.device.type == "cpu" else "floating or integer"
        raise NotImplementedError(f"histc(): \"{where}\" not implemented for '{kind.name}'; "
                                  f"it takes {valid} tensors on {tensor.device.type}")
    if isinstance(bins, builtins.bool) or not isinstance(bins, (int, np.integer)):
        raise TypeError(f"histc(): argument 'bins' must be int, not {type(bins).__name__}")
    if bins <= 0:
        raise RuntimeError(f"histc(): bins must be > 0, got {bins}")
    low, high = _number(min, "histc", "min"), _number(max, "histc", "max")
    if low > high:
        raise RuntimeError(f"histc(): max must be larger than min (got min={low}, max={high})")
    if not (np.isfinite(low) and np.isfinite(high)):
        raise RuntimeError(f"histc(): range of [{low}, {high}] is not finite")
    device = tensor.device
    out = _new(device, (bins,), tensor.dtype)
    data, xp, n = tensor._data, _dispatch.xp_of(device), tensor.numel()
    from_data = low == high

    def kernel():
        out[...] = 0
        a = data.reshape(-1).astype(np.float64)
        if n == 0:
            return
        lo, hi = xp.asarray(low), xp.asarray(high)
        if from_data:
            finite = xp.where(xp.isnan(a), xp.inf, a)
            lo = xp.min(finite)
            hi = xp.max(xp.where(xp.isnan(a), -xp.inf, a))
            same = lo == hi
            lo, hi = xp.where(same, lo - 1, lo), xp.where(same, hi + 1, hi)
        inside = (a >= lo) & (a <= hi)
        position = xp.floor((a - lo) * bins / (hi - lo))
        position = xp.clip(xp.where(inside, position, 0), 0, bins - 1).astype(np.int64)
        counts = xp.zeros(bins, dtype=np.int64)   # CuPy's add.at takes few dtypes: count in
        xp.add.at(counts, position, inside.astype(np.int64))   # int64, then cast
        out[...] = counts
    _launch("histc", device, kernel, (bins,))
    return Tensor._make(out, device, tensor.dtype)


# -- searchsorted, bucketize ------------------------------------------------------------------
def _bound(xp, seq, values, right: bool, one_d: bool):
    """PyTorch's binary search, vectorized: the first position whose boundary is ``>= value``
    (``> value`` with ``right``) along ``seq``'s last dim, stepping right wherever that test is
    false, so as PyTorch a NaN boundary is stepped past and a NaN value lands at the end (NumPy
    orders NaN last instead). ``n.bit_length()`` halving steps, a number known from the shape:
    nothing is read on the host, and an N-D sequence needs no ``values x length`` temporary."""
    n = seq.shape[-1]
    start = xp.zeros(values.shape, dtype=np.int64)
    end = xp.full(values.shape, n, dtype=np.int64)
    for _ in range(n.bit_length()):
        active = start < end
        mid = (start + end) // 2
        probe = xp.where(active, mid, 0)
        boundary = seq[probe] if one_d else xp.take_along_axis(seq, probe, axis=-1)
        go_right = ~(boundary > values) if right else ~(boundary >= values)
        start = xp.where(active & go_right, mid + 1, start)
        end = xp.where(active & ~go_right, mid, end)
    return start


def _search(op: str, boundaries: Tensor, values: Tensor, right: bool, out_int32: bool,
            sorter) -> Tensor:
    result = _dtype.int32 if out_int32 else _dtype.int64
    device = values.device
    shape = values.shape
    out = _new(device, shape, result)
    seq, vals, xp = boundaries._data, values._data, _dispatch.xp_of(device)
    order = None if sorter is None else sorter._data
    one_d = boundaries.ndim == 1
    n = boundaries.shape[-1] if boundaries.ndim else 0

    def kernel():
        s = seq if order is None else xp.take_along_axis(seq, order, axis=-1)
        if n == 0:
            out[...] = 0
            return
        out[...] = _bound(xp, s, vals, right, one_d)
    _launch(op, device, kernel, shape)
    return Tensor._make(out, device, result)


def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter=None) -> Tensor:
    """For each value of ``input``, the index where it would be inserted into
    ``sorted_sequence`` (sorted along its last dim) to keep it sorted: the first such index, or
    the last with ``right=True``/``side="right"``. A 1-D sequence serves every value; an N-D one
    holds one sequence per row of ``input`` (same leading dims). ``input`` may be a number (a 0-d
    result). ``sorter`` (int64, the sequence's shape) gives the sorting order of an unsorted
    sequence. int64 result (int32 with ``out_int32``). NaN as PyTorch's binary search treats
    it: every comparison with NaN is false, so a NaN value lands at the end, and a value whose
    search probes a NaN boundary goes right of it. Different dtypes compare in the promoted one.

    Raises:
        RuntimeError: mismatched leading dims or devices, ``side`` not left/right or
            disagreeing with ``right``, a ``sorter`` of the wrong shape or dtype.
    """
    op = "searchsorted"
    boundaries = _tensor(sorted_sequence, op, "sorted_sequence")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"searchsorted(): side can only be 'left' or 'right', got "
                               f"{side!r}")
        if right and side == "left":
            raise RuntimeError("searchsorted(): side and right can't be set to opposites, got "
                               "side of left while right was True")
        right = side == "right"
    if boundaries.dtype.is_complex or boundaries.dtype is _dtype.bool:
        raise RuntimeError(f"searchsorted(): {boundaries.dtype.name} boundaries are not "
                           f"supported")
    if boundaries.ndim == 0:
        raise RuntimeError("searchsorted(): boundaries tensor should have 1 or more dimensions")
    scalar = not isinstance(input, Tensor)
    if scalar:
        if isinstance(input, builtins.bool) or not isinstance(input, (int, float, np.number)):
            raise TypeError(f"searchsorted(): argument 'input' must be Tensor or Number, not "
                            f"{type(input).__name__}")
        if boundaries.ndim != 1:
            raise RuntimeError(f"searchsorted(): input value can be a scalar only when "
                               f"boundaries tensor dimension is 1, but we got boundaries "
                               f"tensor dim({boundaries.ndim})")
        values = _creation.tensor(input, dtype=boundaries.dtype, device=boundaries.device)
    else:
        values = _tensor(input, op)
        if values.device != boundaries.device:
            raise RuntimeError(f"searchsorted(): boundaries on {boundaries.device}, input on "
                               f"{values.device}: put them on one device")
        if values.dtype is not boundaries.dtype:   # compared in the promoted dtype, as torch
            common = _dtype.promote_types(boundaries.dtype, values.dtype)
            boundaries, values = boundaries.to(common), values.to(common)
        if boundaries.ndim != 1 and (values.ndim != boundaries.ndim or
                                     values.shape[:-1] != boundaries.shape[:-1]):
            raise RuntimeError(f"searchsorted(): boundaries tensor should be 1 dimension or "
                               f"the first N-1 dimensions of boundaries tensor and input value "
                               f"tensor must match, but we got boundaries tensor "
                               f"{list(boundaries.shape)} and input value tensor "
                               f"{list(values.shape)}")
    if sorter is not None:
        sorter = _tensor(sorter, op, "sorter")
        if sorter.dtype is not _dtype.int64:
            raise RuntimeError(f"searchsorted(): sorter must be a tensor of long dtype, got "
                               f"{sorter.dtype.name}")
        if sorter.shape != boundaries.shape:
            raise RuntimeError(f"searchsorted(): boundary and sorter must have the same size, "
                               f"but got boundary tensor {list(boundaries.shape)} and got "
                               f"sorter tensor {list(sorter.shape)}")
    return _search(op, boundaries, values, builtins.bool(right), out_int32, sorter)


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each value of ``input`` for the sorted 1-D ``boundaries``: ``i`` with
    ``boundaries[i-1] < x <= boundaries[i]`` (``boundaries[i-1] <= x < boundaries[i]`` with
    ``right=True``). ``input`` may be a number.

    Raises:
        RuntimeError: boundaries not 1-D, mismatched dtypes.
    """
    boundaries = _tensor(boundaries, "bucketize", "boundaries")
    if boundaries.ndim != 1:
        raise RuntimeError(f"bucketize(): boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
