"""The scatter family, PyTorch's writes at indices: ``scatter scatter_add scatter_reduce
index_add index_copy index_put index_fill masked_scatter`` (functions, Tensor methods and the
in-place ``_`` forms) and ``take_along_dim``.

Each op checks shapes, dtypes and devices from metadata, then launches ONE kernel closure through
``dispatch.launch`` that works through the ``xp`` namespace, so host, sim and cuda run the same
code. Out-of-place forms copy the input into a new result inside that kernel; in-place forms pass
``transfer.check_no_overlap`` (which refuses expanded views and notes the write for compile's
write records: Note [write records] in ``_runtime/writes.py``) and write the tensor's own memory.
A source that shares memory with the written tensor is copied first, so ``x.scatter_add_(0, i,
x)`` reads the values ``x`` had before the call.

Determinism. Accumulations (``scatter_add``, ``scatter_reduce``, ``index_add``, ``index_put(...,
accumulate=True)``) sum through ``xp.add.at`` (``_add_at``): unbuffered, so repeated indices
accumulate every contribution, in index order on the host and sim (on cuda, CuPy's atomics:
exact for integers, float sums in an unspecified order, as PyTorch's cuda). Products and
extrema use a sorted segmented scan instead (``_scatter_combine``: CuPy has no
``multiply.at``, and its ``maximum.at`` drops NaNs), in one fixed order on every backend. Plain
writes with repeated indices
(``scatter``, ``index_copy``, ``index_put`` without ``accumulate``) keep the last write on the
host and sim; PyTorch leaves which one wins unspecified, and so does cuda here.

Index checks. Index dtypes follow PyTorch 2.11 (``index_copy``/``index_fill``/
``take_along_dim``: int64 only; ``scatter``/``scatter_add``/``scatter_reduce``/``index_add``:
int32 or int64; ``index_put``: int64, int32, uint8/bool masks). Index values are checked by
ONE function, :func:`check_range`, that every kernel here (and ``gather``/``index_select`` in
``indexing.py``) calls before it writes: negative indices are out of range exactly as those past
the end, except for ``index_fill``, ``index_put`` and ``take_along_dim``, which count from the
end (as PyTorch 2.11's).
On cpu the op raises at once with PyTorch's exception type (scatter, ``gather`` and
``take_along_dim``: RuntimeError; the ``index_*`` ops: IndexError); on sim the queued kernel
fails and the next sync reports it (as CUDA's device-side assert). The indices are NOT read on
the host (that would wait for the device and break captures): on cuda a check kernel records the
first out-of-range index where the next synchronization reads it and raises sim's message,
eagerly and after graph replays (the op's result is then unspecified; the device stays
usable). Every op here is capture-safe except ``index_put`` with a bool
mask, whose kernel turns the mask into indices (a data-dependent size).
"""

from __future__ import annotations

import builtins

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime import writes as _writes
from .. import _dtype
from . import elementwise as _ops
from . import transfer as _transfer
from .tensor import Tensor, _normalize_dim, layout_of

__all__ = ["scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy", "index_put",
           "index_fill", "masked_scatter", "take_along_dim"]

TENSOR_METHODS = ("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
                  "scatter_reduce_", "index_add", "index_add_", "index_copy", "index_copy_",
                  "index_put", "index_put_", "index_fill", "index_fill_", "masked_scatter",
                  "masked_scatter_", "take_along_dim")

_REDUCE_AT = {"sum": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}
_SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")
_REDUCE_ALIASES = {"max": "amax", "min": "amin"}   # PyTorch takes these spellings too
_LEGACY_REDUCE = {"add": "sum", "multiply": "prod"}   # scatter(..., reduce=) spellings


# -- operands ---------------------------------------------------------------------------------
def _tensor(value, op: str, name: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    value._check_guard()
    return value


def _same_device(tensor: Tensor, other: Tensor, op: str, name: str) -> None:
    if other.device != tensor.device:
        raise RuntimeError(f"{op}(): Expected all tensors to be on the same device, but found "
                           f"{name} on {other.device} and self on {tensor.device}")


def _index(index, tensor: Tensor, op: str, allowed=(_dtype.int64,), name: str = "index",
           exc: type[Exception] = RuntimeError):
    index = _tensor(index, op, name)
    if index.dtype not in allowed:
        valid = " or ".join(d.name for d in allowed)
        raise exc(f"{op}(): Expected dtype {valid} for {name}, got {index.dtype.name}")
    _same_device(tensor, index, op, name)
    return index


def check_range(op: str, idx, size: int, dim: int, exc: type[Exception], wrap: bool = False,
                note: str = "") -> None:
    """THE bounds check of the gather/scatter/index family, called first thing INSIDE each
    op's kernel with the index's ``xp`` array: raise ``exc`` for an index outside ``[0, size)``
    (``[-size, size)`` with ``wrap``, the ops that count from the end as PyTorch's do:
    ``index_fill``, ``index_put``, ``take_along_dim``). Where the values are at hand without a
    host read (NumPy arrays: cpu, whose kernels run at once, so the op raises; sim, whose queued
    kernel fails and reports at the next sync, as CUDA's device-side assert) a negative index
    fails exactly as a positive one past the end. On cuda the indices are not read on the host
    (that would wait for the device): the backend's ``check_index_range`` queues a check kernel
    whose failure the next synchronization raises with sim's message; the op's result is then
    unspecified."""
    if not isinstance(idx, np.ndarray):
        check_on_device = _dispatch.accelerator_hook("check_index_range")
        if check_on_device is not None:
            check_on_device(idx, size, dim, wrap, op, exc, note)
        return
    if idx.size == 0:
        return
    bad = (idx >= size) | (idx < (-size if wrap else 0))
    if bad.any():
        value = int(idx[bad].reshape(-1)[0])
        valid = f"[{-size}, {size})" if wrap else f"[0, {size})"
        raise exc(f"{op}(): index {value} is out of bounds for dimension {dim} with size "
                  f"{size} (valid indices: {valid}){note}")


def _number(value, op: str, name: str = "value"):
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"{op}(): only supports a 0-dimensional {name} tensor, but got "
                               f"a tensor with {value.ndim} dimension(s)")
        return value
    if isinstance(value, (builtins.bool, int, float, complex, np.number, np.bool_)):
        return value
    raise TypeError(f"{op}(): argument '{name}' must be a Number or a 0-d Tensor, not "
                    f"{type(value).__name__}")


def _scalar_operand(tensor: Tensor, value, op: str):
    """A number or 0-d tensor as something the kernel can assign (casting as it does): an xp
    0-d array on the tensor's device (read only inside the kernel: its contents may still be
    in flight) or a NumPy scalar of the tensor's dtype."""
    if isinstance(value, Tensor):
        if value.device != tensor.device:
            value = value.to(tensor.device)
        return value._data
    if isinstance(value, complex) and not tensor.dtype.is_complex:
        value = value.real
    _dtype.check_value_fits(value, tensor.dtype, op)
    return np.asarray(value).astype(tensor.dtype.numpy)[()]


def _reads_written(target: Tensor, source: Tensor) -> bool:
    """Whether ``source`` shares bytes with ``target`` (so an in-place kernel copies it first)."""
    return _writes.overlaps(_writes.extent(target), _writes.extent(source))


def _finish(op: str, tensor: Tensor, inplace: bool, apply) -> Tensor:
    """Launch ONE kernel: ``apply(dst)`` on the tensor's own memory (in place, after the
    overlap/write-record check) or on a new copy of it."""
    device = tensor.device
    if inplace:
        _transfer.check_no_overlap(tensor, op)
        dst = tensor._data

        def kernel():
            apply(dst)
        _dispatch.launch(device, _dispatch.named(op, kernel, shape=tensor.shape))
        return tensor
    _dispatch.check_dtype_supported(device, tensor.dtype)
    out = _dispatch.empty(device, tensor.shape, tensor.dtype)
    data = tensor._data

    def copy_kernel():
        out[...] = data
        apply(out)
    _dispatch.launch(device, _dispatch.named(op, copy_kernel, shape=tensor.shape))
    return Tensor._make(out, device, tensor.dtype)


# -- scatter ----------------------------------------------------------------------------------
def _scatter_key(xp, index, axis: int):
    """The advanced-index tuple that sends ``src[i, j, ...]`` to ``dst[..., index[i, j], ...]``."""
    ndim = index.ndim
    key = []
    for d, size in enumerate(index.shape):
        if d == axis:
            key.append(index)
        else:
            shape = [1] * ndim
            shape[d] = size
            key.append(xp.arange(size).reshape(shape))
    return tuple(key)


def _check_scatter_shapes(op: str, tensor: Tensor, axis: int, index: Tensor, src) -> None:
    if index.ndim != tensor.ndim and index.numel() != 0:
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as "
                           f"self tensor ({index.ndim} vs {tensor.ndim})")
    if isinstance(src, Tensor) and src.ndim != index.ndim and index.numel() != 0:
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as "
                           f"src tensor ({index.ndim} vs {src.ndim})")
    if index.numel() == 0:
        return
    for d in range(tensor.ndim):
        if d != axis and index.shape[d] > tensor.shape[d]:
            raise RuntimeError(f"{op}(): Expected index {list(index.shape)} to be smaller than "
                               f"self {list(tensor.shape)} apart from dimension {axis}")
        if isinstance(src, Tensor) and index.shape[d] > src.shape[d]:
            raise RuntimeError(f"{op}(): Expected index {list(index.shape)} to be smaller than "
                               f"src {list(src.shape)}")


def _identity(xp, reduce: str, dtype: _dtype.dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return -np.inf if reduce == "amax" else np.inf
    if dtype is _dtype.bool:
        return reduce == "amin"
    info = np.iinfo(dtype.numpy)
    return info.min if reduce == "amax" else info.max


def _scatter_impl(op: str, input, dim, index, src, value, reduce, include_self: bool,
                  inplace: bool) -> Tensor:
    tensor = _tensor(input, op)
    index = _index(index, tensor, op, (_dtype.int64, _dtype.int32))
    if src is not None and value is not None:
        raise TypeError(f"{op}(): give either src (a Tensor) or value (a number), not both")
    if src is None and value is None:
        raise TypeError(f"{op}(): missing the source: pass src= (a Tensor) or value= (a number)")
    if src is not None and not isinstance(src, Tensor):
        value, src = src, None   # scatter(input, dim, index, 1.5): the value overload
    if src is not None:
        src = _tensor(src, op, "src")
        _same_device(tensor, src, op, "src")
        if src.dtype is not tensor.dtype:
            raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype, got "
                               f"{tensor.dtype.name} and {src.dtype.name}")
    else:
        value = _number(value, op)
    axis = _normalize_dim(dim, tensor.ndim)
    _check_scatter_shapes(op, tensor, axis, index, src)
    size = tensor.shape[axis] if tensor.ndim else 1
    reduce = _REDUCE_ALIASES.get(reduce, reduce)
    if reduce is not None and reduce not in _SCATTER_REDUCES:
        raise RuntimeError(f"{op}(): reduce argument must be one of {list(_SCATTER_REDUCES)}, "
                           f"got {reduce!r}")
    if reduce == "mean" and tensor.dtype is _dtype.bool:
        raise RuntimeError(f"{op}(): reduce='mean' is not supported for bool tensors")
    if index.numel() == 0:
        return tensor if inplace else tensor.clone()
    xp = _dispatch.xp_of(tensor.device)
    idx = index._data
    zero_d = tensor.ndim == 0
    crop = tuple(slice(0, s) for s in index.shape)
    if src is not None:
        source = src._data
        copy_first = inplace and _reads_written(tensor, src)
    else:
        source = _scalar_operand(tensor, value, op)
        copy_first = False
    dtype = tensor.dtype
    identity = None if reduce is None else _identity(xp, reduce, dtype)

    def apply(dst):
        check_range(op, idx, size, axis, RuntimeError)
        target = dst.reshape(1) if zero_d else dst
        key = (idx.reshape(-1),) if zero_d else _scatter_key(xp, idx, axis)
        if src is None:
            vals = xp.broadcast_to(xp.asarray(source, dtype=dst.dtype), idx.shape)
        else:
            vals = source.reshape(1) if zero_d else source[crop]
            if copy_first:
                vals = vals.copy()
        if reduce is None:
            target[key] = vals
            return
        if not include_self:
            target[key] = identity
        if reduce == "mean":
            total = xp.zeros(target.shape, dtype=target.dtype)
            _add_at(xp, total, key, vals)
            count = xp.zeros(target.shape, dtype=np.int64)
            xp.add.at(count, key, 1)
            scattered = count > 0
            if include_self:
                total = total + target
                count = count + 1
            divisor = xp.maximum(count, 1).astype(target.dtype)
            mean = total / divisor if dtype.is_floating_point or dtype.is_complex \
                else xp.floor_divide(total, divisor)
            target[...] = xp.where(scattered, mean, target)
            return
        if reduce == "sum":
            _add_at(xp, target, key, vals)
        else:
            _scatter_combine(xp, target, key, vals, _REDUCE_AT[reduce])
    return _finish(op, tensor, inplace, apply)


def _add_at(xp, target, key, vals) -> None:
    """``target[key] += vals``, accumulating repeated positions (``xp.add.at``). CuPy's
    ``add.at`` refuses bfloat16, so bfloat16 accumulates in float32 and rounds once (exact for
    the untouched elements, which round-trip unchanged)."""
    if target.dtype.name == "bfloat16" and xp is not np:
        wide = target.astype(np.float32)
        xp.add.at(wide, key, xp.asarray(vals).astype(np.float32))
        target[...] = wide.astype(target.dtype)
        return
    xp.add.at(target, key, vals)


def _scatter_combine(xp, target, key, vals, ufunc: str) -> None:
    """``target[key] = ufunc(target[key], vals)`` accumulating repeated positions, for
    ``multiply``, ``maximum`` and ``minimum``, without the ufunc ``at`` methods (CuPy has no
    ``multiply.at``, and its ``maximum.at``/``minimum.at`` drop NaNs and round float64 through
    float32): sort the contributions by target position (stably), run a segmented inclusive
    scan (Hillis-Steele: ``ceil(log2 n)`` steps, a number known from the shapes, so nothing is
    read on the host), then a reverse scan spreads each segment's total over the segment, so
    the writes to one position all carry the same value and it does not matter which one wins.
    The same fixed order on every backend; NaN propagates through ``xp.maximum``/``minimum``."""
    combine = getattr(xp, ufunc)
    shape = vals.shape
    keys = [xp.broadcast_to(k, shape).reshape(-1) for k in key]
    linear = xp.zeros(keys[0].shape, dtype=np.int64)
    for k, size in zip(keys, target.shape):
        linear = linear * size + k
    order = xp.argsort(linear, kind="stable")
    linear = linear[order]
    scan = vals.reshape(-1)[order]
    n, step = linear.shape[0], 1
    while step < n:
        same = linear[step:] == linear[:-step]
        updated = scan.copy()
        updated[step:] = xp.where(same, combine(scan[step:], scan[:-step]), scan[step:])
        scan, step = updated, step * 2
    step = 1
    while step < n:   # a reverse segmented scan of "take the later": every entry gets its
        same = linear[:-step] == linear[step:]          # segment's full result
        updated = scan.copy()
        updated[:-step] = xp.where(same, scan[step:], scan[:-step])
        scan, step = updated, step * 2
    position = tuple(k[order] for k in keys)
    # repeated positions all write the same value, so which write wins does not matter
    target[position] = combine(target[position], scan)


def _legacy_reduce(op: str, reduce):
    if reduce is None:
        return None
    if reduce not in _LEGACY_REDUCE:
        raise RuntimeError(f"{op}(): reduce argument must be either 'add' or 'multiply', got "
                           f"{reduce!r} (scatter_reduce takes sum/prod/mean/amax/amin)")
    return _LEGACY_REDUCE[reduce]


def scatter(input, dim: int, index, src=None, value=None, *, reduce: str | None = None) -> Tensor:
    """A copy of ``input`` with ``out[index[i][j]][j] = src[i][j]`` (for ``dim=0``; likewise
    for every dim), or ``value`` (a number) in place of ``src``. ``index`` (int64 or int32) has the
    input's number of dims and is no larger than ``src`` anywhere nor than ``input`` outside
    ``dim``; only its extent of ``src`` is read. ``reduce="add"``/``"multiply"`` accumulates
    instead of writing. Repeated indices without ``reduce``: the last write wins on host and
    sim, unspecified on cuda (as PyTorch).

    Raises:
        RuntimeError: index not int64/int32, src of another dtype, mismatched dims or sizes,
            an unknown ``reduce``, an out-of-range or negative index (module notes).
        TypeError: neither or both of ``src``/``value``.
    """
    return _scatter_impl("scatter", input, dim, index, src, value,
                         _legacy_reduce("scatter", reduce), True, False)


def scatter_(input, dim: int, index, src=None, value=None, *,
             reduce: str | None = None) -> Tensor:
    """In-place :func:`scatter`; returns ``input``."""
    return _scatter_impl("scatter_", input, dim, index, src, value,
                         _legacy_reduce("scatter_", reduce), True, True)


def scatter_add(input, dim: int, index, src) -> Tensor:
    """A copy of ``input`` with ``out[index[i][j]][j] += src[i][j]`` (for ``dim=0``); every
    contribution of a repeated index is added (deterministically). Raises as :func:`scatter`."""
    return _scatter_impl("scatter_add", input, dim, index, _tensor(src, "scatter_add", "src"),
                         None, "sum", True, False)


def scatter_add_(input, dim: int, index, src) -> Tensor:
    """In-place :func:`scatter_add`; returns ``input``."""
    return _scatter_impl("scatter_add_", input, dim, index,
                         _tensor(src, "scatter_add_", "src"), None, "sum", True, True)


def scatter_reduce(input, dim: int, index, src, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """Reduce every ``src[i][j]`` into ``out[index[i][j]][j]`` (for ``dim=0``) with ``reduce``
    one of ``"sum" "prod" "mean" "amax" "amin"``. With ``include_self`` the input's value takes
    part; without, a position that receives values gets only their reduction (positions that
    receive none keep the input's value either way). ``mean`` of integer tensors rounds down
    (floor division, as PyTorch). NaN propagates through amax/amin.

    Raises:
        RuntimeError: as :func:`scatter`, and for a ``reduce`` outside the five.
    """
    return _scatter_impl("scatter_reduce", input, dim, index,
                         _tensor(src, "scatter_reduce", "src"), None, reduce,
                         builtins.bool(include_self), False)


def scatter_reduce_(input, dim: int, index, src, reduce: str, *,
                    include_self: bool = True) -> Tensor:
    """In-place :func:`scatter_reduce`; returns ``input``."""
    return _scatter_impl("scatter_reduce_", input, dim, index,
                         _tensor(src, "scatter_reduce_", "src"), None, reduce,
                         builtins.bool(include_self), True)


# -- index_* ----------------------------------------------------------------------------------
def _index_source(op: str, tensor: Tensor, axis: int, index: Tensor, source) -> Tensor:
    source = _tensor(source, op, "source")
    _same_device(tensor, source, op, "source")
    if source.dtype is not tensor.dtype:
        raise RuntimeError(f"{op}(): self ({tensor.dtype.name}) and source "
                           f"({source.dtype.name}) must have the same scalar type")
    expected = list(tensor.shape)
    if expected:
        expected[axis] = index.numel()
    if tensor.ndim and list(source.shape) != expected and source.numel() != 0:
        raise RuntimeError(f"{op}(): source of shape {list(source.shape)} does not match the "
                           f"expected shape {expected} (self's shape with dim {axis} of size "
                           f"index.numel() = {index.numel()})")
    if not tensor.ndim and source.numel() != index.numel():
        raise RuntimeError(f"{op}(): source must have {index.numel()} element(s) for a 0-d "
                           f"self, got {source.numel()}")
    return source


def _vector_index(op: str, index: Tensor) -> None:
    if index.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector, got shape "
                         f"{list(index.shape)}")


def _moved(xp, array, axis: int, zero_d: bool):
    return array.reshape(1) if zero_d else xp.moveaxis(array, axis, 0)


def _index_add(op: str, input, dim, index, source, alpha, inplace: bool) -> Tensor:
    tensor = _tensor(input, op)
    index = _index(index, tensor, op, (_dtype.int64, _dtype.int32))
    _vector_index(op, index)
    axis = _normalize_dim(dim, tensor.ndim)
    source = _index_source(op, tensor, axis, index, source)
    if isinstance(alpha, builtins.bool) or not isinstance(alpha, (int, float, complex,
                                                                  np.number)):
        raise TypeError(f"{op}(): alpha must be a number, got {type(alpha).__name__}")
    size = tensor.shape[axis] if tensor.ndim else 1
    xp = _dispatch.xp_of(tensor.device)
    idx, src, zero_d = index._data, source._data, tensor.ndim == 0
    copy_first = inplace and _reads_written(tensor, source)
    # cast to the tensor's dtype, as PyTorch: an integral tensor truncates a float alpha
    scale = None if alpha == 1 else np.asarray(alpha).astype(tensor.dtype.numpy)[()]

    def apply(dst):
        check_range(op, idx, size, axis, IndexError)
        vals = _moved(xp, src, axis, zero_d)
        if scale is not None:
            vals = vals * scale
        elif copy_first:
            vals = vals.copy()
        _add_at(xp, _moved(xp, dst, axis, zero_d), idx.reshape(-1), vals)
    return _finish(op, tensor, inplace, apply)


def index_add(input, dim: int, index, source, *, alpha=1) -> Tensor:
    """A copy of ``input`` with ``alpha * source`` added into the slices ``index`` (1-D, int64
    or int32) along ``dim``: ``out.select(dim, index[i]) += alpha * source.select(dim, i)``.
    ``source`` has the input's shape with ``dim`` of size ``len(index)``. Repeated indices
    accumulate every slice (deterministically).

    Raises:
        RuntimeError: index dtype, source dtype or shape mismatch; a float ``alpha`` for an
            integer tensor. IndexError: an index that is not a vector, an out-of-range or
            negative index (on cpu; module notes).
    """
    return _index_add("index_add", input, dim, index, source, alpha, False)


def index_add_(input, dim: int, index, source, *, alpha=1) -> Tensor:
    """In-place :func:`index_add`; returns ``input``."""
    return _index_add("index_add_", input, dim, index, source, alpha, True)


#: (op, the tensor's, index's and source's Layouts, dim) -> (the in-place launch of that
#: signature, ``_index_copy``'s ``launch``; the bytes the tensor and the source span around their
#: first elements, :func:`_spans`): a repeated index_copy_ (a KV cache's write, every step) goes
#: straight to it; only the source's overlap with the tensor is looked at per call, from the two
#: addresses and the kept spans
_index_copy_plans: dict = {}


def _spans(target: Tensor, source: Tensor) -> tuple[int, int, int, int] | None:
    """``(low, high)`` of ``target``'s bytes, then of ``source``'s, each relative to the
    address of its first element (what a layout decides), or None when either is empty."""
    spans = []
    for tensor in (target, source):
        extent = _writes.extent(tensor)
        if extent is None:
            return None
        first = tensor.data_ptr()
        spans += [extent[1] - first, extent[2] - first]
    return spans[0], spans[1], spans[2], spans[3]


def _index_copy(op: str, input, dim, index, source, inplace: bool) -> Tensor:
    key = (op, input._layout or layout_of(input), index._layout or layout_of(index),
           source._layout or layout_of(source), dim) \
        if inplace and type(input) is Tensor and type(index) is Tensor and \
        type(source) is Tensor and type(dim) is int else None
    if key is not None:
        found = _index_copy_plans.get(key)
        if found is not None:
            kept, spans = found
            if spans is not None:   # _reads_written from the kept spans
                a, b = input.data_ptr(), source.data_ptr()
                if a + spans[0] < b + spans[3] and b + spans[2] < a + spans[1]:
                    kept = None   # the source overlaps: the general path copies it first
            if kept is not None:
                for value in (input, index, source):
                    if value._guard is not None:
                        value._check_guard()
                return kept(input, index, source)
    tensor = _tensor(input, op)
    index = _index(index, tensor, op)
    _vector_index(op, index)
    axis = _normalize_dim(dim, tensor.ndim)
    source = _index_source(op, tensor, axis, index, source)
    size = tensor.shape[axis] if tensor.ndim else 1
    xp = _dispatch.xp_of(tensor.device)
    idx, src, zero_d = index._data, source._data, tensor.ndim == 0
    copy_first = inplace and _reads_written(tensor, source)
    fast = None if zero_d or copy_first else _dispatch.accelerator_hook("index_copy")

    def apply(dst, idx=idx, src=src):
        # the backend's kernel checks the indices itself (the error of check_range, at the
        # next synchronization)
        if fast is not None and type(dst) is not np.ndarray and fast(dst, axis, idx, src, op):
            return
        check_range(op, idx, size, axis, IndexError)
        vals = _moved(xp, src, axis, zero_d)
        if copy_first:
            vals = vals.copy()
        _moved(xp, dst, axis, zero_d)[idx.reshape(-1)] = vals
    if not inplace or copy_first:
        return _finish(op, tensor, inplace, apply)
    device, shape = tensor.device, tensor.shape

    def launch(tensor: Tensor, index: Tensor, source: Tensor) -> Tensor:
        """The in-place launch (``_finish``'s) for this signature; ``tensor``'s layout checked."""
        if _writes.active:   # Note [write records]
            _writes.note(tensor)
        dst, idx, src = tensor._data, index._data, source._data

        def kernel():
            apply(dst, idx, src)
        _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
        return tensor
    _transfer.check_no_overlap(tensor, op)   # an expanded view refused before a launch is kept
    if key is not None:
        _dispatch.remember(_index_copy_plans, key, (launch, _spans(tensor, source)))
    return launch(tensor, index, source)


def index_copy(input, dim: int, index, source) -> Tensor:
    """A copy of ``input`` whose slices ``index`` (1-D int64) along ``dim`` are replaced by
    ``source``'s slices in order. Repeated indices: the last slice wins on host and sim,
    unspecified on cuda (as PyTorch).

    Raises:
        RuntimeError: index not int64, source dtype or shape mismatch. IndexError: an index that
            is not a vector, an out-of-range or negative index (on cpu; module notes).
    """
    return _index_copy("index_copy", input, dim, index, source, False)


def index_copy_(input, dim: int, index, source) -> Tensor:
    """In-place :func:`index_copy`; returns ``input``."""
    return _index_copy("index_copy_", input, dim, index, source, True)


def _index_fill(op: str, input, dim, index, value, inplace: bool) -> Tensor:
    tensor = _tensor(input, op)
    index = _index(index, tensor, op, exc=IndexError)   # as PyTorch's index_fill
    _vector_index(op, index)
    axis = _normalize_dim(dim, tensor.ndim)
    value = _number(value, op)
    size = tensor.shape[axis] if tensor.ndim else 1
    xp = _dispatch.xp_of(tensor.device)
    idx, zero_d = index._data, tensor.ndim == 0
    fill = _scalar_operand(tensor, value, op)

    def apply(dst):
        check_range(op, idx, size, axis, IndexError, wrap=True)
        _moved(xp, dst, axis, zero_d)[idx.reshape(-1)] = fill
    return _finish(op, tensor, inplace, apply)


def index_fill(input, dim: int, index, value) -> Tensor:
    """A copy of ``input`` with the slices ``index`` (1-D int64; negative indices count from
    the end) along ``dim`` set to ``value`` (a number or a 0-d tensor).

    Raises:
        RuntimeError: a value tensor that is not 0-d. IndexError: index not int64, an index
            that is not a vector, an index outside ``[-size, size)`` (on cpu; module notes).
            TypeError: a value that is not a number.
    """
    return _index_fill("index_fill", input, dim, index, value, False)


def index_fill_(input, dim: int, index, value) -> Tensor:
    """In-place :func:`index_fill`; returns ``input``."""
    return _index_fill("index_fill_", input, dim, index, value, True)


_PUT_INDEX_DTYPES = (_dtype.int64, _dtype.int32, _dtype.uint8, _dtype.bool)


def _index_put(op: str, input, indices, values, accumulate: bool, inplace: bool) -> Tensor:
    tensor = _tensor(input, op)
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"{op}(): argument 'indices' must be a tuple of Tensors, not "
                        f"{type(indices).__name__}")
    values = _tensor(values, op, "values")
    _same_device(tensor, values, op, "values")
    if values.dtype is not tensor.dtype:
        raise RuntimeError(f"{op}(): Index put requires the source and destination dtypes "
                           f"match, got {tensor.dtype.name} for the destination and "
                           f"{values.dtype.name} for the source.")
    arrays, masks, bounds, consumed = [], [], [], 0
    for position, item in enumerate(indices):
        item = _tensor(item, op, f"indices[{position}]")
        if item.dtype not in _PUT_INDEX_DTYPES:
            raise IndexError(f"{op}(): tensors used as indices must be long, int, byte or bool "
                             f"tensors, got {item.dtype.name}")
        _same_device(tensor, item, op, f"indices[{position}]")
        is_mask = item.dtype in (_dtype.bool, _dtype.uint8)
        width = item.ndim if is_mask else 1
        if consumed + width > tensor.ndim:
            raise IndexError(f"{op}(): too many indices for tensor of dimension {tensor.ndim} "
                             f"({len(indices)} index tensors given)")
        if is_mask:
            for k, size in enumerate(item.shape):
                if size != tensor.shape[consumed + k]:
                    raise IndexError(f"{op}(): The shape of the mask {list(item.shape)} at "
                                     f"index {k} does not match the shape of the indexed "
                                     f"tensor {list(tensor.shape)} at index {consumed + k}")
        else:
            bounds.append((item._data, tensor.shape[consumed], consumed))
        masks.append(is_mask)
        arrays.append(item._data)
        consumed += width
    index_shapes = [a.shape for a, m in zip(arrays, masks) if not m]
    try:
        np.broadcast_shapes(*index_shapes)
    except ValueError:
        raise IndexError(f"{op}(): shape mismatch: indexing tensors could not be broadcast "
                         f"together with shapes {[list(s) for s in index_shapes]}") from None
    if not builtins.any(masks):
        target_shape = tuple(np.broadcast_shapes(*index_shapes)) + tensor.shape[consumed:]
        try:
            fits = tuple(np.broadcast_shapes(values.shape, target_shape)) == target_shape
        except ValueError:
            fits = False
        if not fits:
            raise RuntimeError(f"{op}(): shape mismatch: value tensor of shape "
                               f"{list(values.shape)} cannot be broadcast to indexing result "
                               f"of shape {list(target_shape)}")
    xp = _dispatch.xp_of(tensor.device)
    src = values._data
    copy_first = inplace and _reads_written(tensor, values)
    accumulate = builtins.bool(accumulate)

    def apply(dst):
        for array, size, dim in bounds:
            check_range(op, array, size, dim, IndexError, wrap=True)
        parts = []
        for array, is_mask in zip(arrays, masks):
            if is_mask:
                parts.extend(xp.nonzero(array.astype(np.bool_)))
            else:
                parts.append(array.astype(np.int64))
        key = tuple(parts)
        vals = src.copy() if copy_first else src
        if accumulate:
            shape = xp.broadcast(*key).shape + dst.shape[len(key):]
            _add_at(xp, dst, key, xp.broadcast_to(vals, shape))
        else:
            dst[key] = vals
    return _finish(op, tensor, inplace, apply)


def index_put(input, indices, values, accumulate: bool = False) -> Tensor:
    """A copy of ``input`` with ``out[indices] = values`` (``indices`` a tuple of int64/int32
    index tensors or bool masks, as in ``out[i, j] = values``; negative indices count from the
    end); ``accumulate=True`` adds instead, every contribution of a repeated index
    (deterministically). A bool mask is turned into indices inside the kernel: on an
    accelerator that takes a data-dependent size, so bool masks are not capture-safe.

    Raises:
        TypeError: indices not a tuple/list of tensors. IndexError: an index dtype outside
            long/int/byte/bool, too many indices, a mask shape mismatch, an index outside
            ``[-size, size)`` (on cpu; module notes). RuntimeError: values of another dtype or
            a shape that does not broadcast.
    """
    return _index_put("index_put", input, indices, values, accumulate, False)


def index_put_(input, indices, values, accumulate: bool = False) -> Tensor:
    """In-place :func:`index_put`; returns ``input``."""
    return _index_put("index_put_", input, indices, values, accumulate, True)


# -- masked_scatter, take_along_dim ------------------------------------------------------------
def _masked_scatter(op: str, input, mask, source, inplace: bool) -> Tensor:
    tensor = _tensor(input, op)
    mask = _tensor(mask, op, "mask")
    source = _tensor(source, op, "source")
    if mask.dtype is not _dtype.bool:
        raise RuntimeError(f"{op}(): masked_scatter_ only supports boolean masks, but got mask "
                           f"with dtype {mask.dtype.name}")
    if source.dtype is not tensor.dtype:
        raise RuntimeError(f"{op}(): expected self and source to have same dtypes but got "
                           f"{tensor.dtype.name} and {source.dtype.name}")
    _same_device(tensor, mask, op, "mask")
    _same_device(tensor, source, op, "source")
    shape = _ops._broadcast_shape(op, tensor.shape, mask.shape)
    if inplace and tuple(shape) != tensor.shape:
        raise RuntimeError(f"{op}(): the mask of shape {list(mask.shape)} does not broadcast "
                           f"to self's shape {list(tensor.shape)}")
    if tensor.device.type == "cpu":
        count = int(np.count_nonzero(np.broadcast_to(mask._data, shape)))
        if count > source.numel():
            raise RuntimeError(f"{op}(): Number of elements of source < number of ones in "
                               f"mask ({source.numel()} < {count})")
    if tuple(shape) != tensor.shape:   # the out-of-place form broadcasts self too
        tensor = tensor.expand(shape).contiguous()
    xp = _dispatch.xp_of(tensor.device)
    cond, src = mask._data, source._data
    flat_size = source.numel()

    def apply(dst):
        full = xp.broadcast_to(cond, dst.shape).reshape(-1)
        if flat_size == 0:
            return
        position = xp.cumsum(full, dtype=np.int64) - 1
        position = xp.clip(position, 0, flat_size - 1)
        picked = src.reshape(-1)[position].reshape(dst.shape)
        dst[...] = xp.where(full.reshape(dst.shape), picked, dst)
    return _finish(op, tensor, inplace, apply)


def masked_scatter(input, mask, source) -> Tensor:
    """A copy of ``input`` (broadcast with ``mask``) whose elements where ``mask`` (bool) is
    true take ``source``'s elements in row-major order. ``source`` needs at least as many
    elements as the mask has true values: checked on cpu; on an accelerator (no host read) a
    short source repeats its last element (unspecified in PyTorch's terms).

    Raises:
        RuntimeError: a mask that is not bool, a source of another dtype, too short a source
            (cpu), shapes that do not broadcast.
    """
    return _masked_scatter("masked_scatter", input, mask, source, False)


def masked_scatter_(input, mask, source) -> Tensor:
    """In-place :func:`masked_scatter`; the mask must broadcast to ``input``'s shape."""
    return _masked_scatter("masked_scatter_", input, mask, source, True)


def take_along_dim(input, indices, dim: int | None = None) -> Tensor:
    """``input``'s elements at ``indices`` (int64) along ``dim``, the two broadcast against
    each other outside ``dim`` (NumPy's ``take_along_axis``); with ``dim=None`` both are
    flattened first.

    Raises:
        RuntimeError: indices not int64, a different number of dims, shapes that do not
            broadcast, an out-of-range or negative index (on cpu; module notes).
    """
    op = "take_along_dim"
    tensor = _tensor(input, op)
    index = _tensor(indices, op, "indices")
    if index.dtype is not _dtype.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be int64 but got "
                           f"{index.dtype.name}")
    _same_device(tensor, index, op, "indices")
    xp = _dispatch.xp_of(tensor.device)
    data, idx = tensor._data, index._data
    shape: tuple[int, ...]
    if dim is None:
        size, axis = tensor.numel(), 0
        shape = (index.numel(),)

        def kernel():
            check_range(op, idx, size, axis, RuntimeError, wrap=True)
            out[...] = data.reshape(-1)[idx.reshape(-1)]
    else:
        if tensor.ndim != index.ndim:
            raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                               f"number of dimensions, but got {tensor.ndim} dimensions for "
                               f"input, and {index.ndim} dimensions for indices")
        axis = _normalize_dim(dim, tensor.ndim)
        if tensor.ndim == 0:
            size, axis = 1, 0
            shape = ()

            def kernel():
                check_range(op, idx, size, axis, RuntimeError, wrap=True)
                out[...] = data.reshape(1)[idx.reshape(1)].reshape(())
        else:
            outer_in = tensor.shape[:axis] + (1,) + tensor.shape[axis + 1:]
            outer_ix = index.shape[:axis] + (1,) + index.shape[axis + 1:]
            try:
                outer = tuple(np.broadcast_shapes(outer_in, outer_ix))
            except ValueError:
                raise RuntimeError(f"take_along_dim(): shapes {list(tensor.shape)} and "
                                   f"{list(index.shape)} do not broadcast outside dim "
                                   f"{axis}") from None
            size = tensor.shape[axis]
            data_shape = outer[:axis] + (tensor.shape[axis],) + outer[axis + 1:]
            shape = outer[:axis] + (index.shape[axis],) + outer[axis + 1:]

            def kernel():
                check_range(op, idx, size, axis, RuntimeError, wrap=True)
                out[...] = xp.take_along_axis(xp.broadcast_to(data, data_shape),
                                              xp.broadcast_to(idx, shape), axis=axis)
    _dispatch.check_dtype_supported(tensor.device, tensor.dtype)
    out = _dispatch.empty(tensor.device, shape, tensor.dtype)
    _dispatch.launch(tensor.device, _dispatch.named(op, kernel, shape=shape))
    return Tensor._make(out, tensor.device, tensor.dtype)
