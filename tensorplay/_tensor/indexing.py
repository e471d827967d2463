"""Indexing: ``tensor[key]`` and ``tensor[key] = value``, plus ``nonzero masked_fill
masked_select index_select gather take``.

A key is an int, a slice (step > 0), ``None``, ``...``, a Python bool, an integer tensor/list/
array or a boolean mask, or a tuple of those. As in PyTorch, ints, slices, ``None`` and ``...``
are applied first as a *view* (they alias the base); index tensors and masks then pick elements
into a new tensor with NumPy's advanced-indexing layout (index dims replace the indexed dims
where the index tensors are adjacent in the key, else they come first).

Nothing here reads data on the host at op-construction time, with one exception that PyTorch
shares: *reading* with a boolean mask (and ``nonzero``/``masked_select``) has a result shape that
depends on the data, so the mask is copied to the host (``_host_copy``, which waits for the
device and is refused inside graph capture). Writing through a mask needs no host read unless the
value has more than one element (then its shape is checked against the mask's count).

.. note:: Integer index *values* are checked when the kernel runs: on cpu an out-of-range index
   raises ``IndexError`` at once; on an accelerator the error surfaces at the next sync.
"""

from __future__ import annotations

import builtins

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import elementwise as _ops
from . import transfer as _transfer
from . import creation as _creation
from .scatter import check_range as _check_range
from .tensor import Tensor, _normalize_dim, layout_of
from .views import _make_view, unsqueeze_stride

__all__ = ["getitem", "setitem", "nonzero", "masked_fill", "masked_select", "index_select",
           "gather", "take"]

TENSOR_METHODS = ("nonzero", "masked_fill", "masked_fill_", "masked_select", "index_select",
                  "gather", "take")


class _Parsed:
    """A key split into its basic part (a view key) and its advanced indices."""

    __slots__ = ("basic", "advanced", "empty_dims", "new_dims")

    def __init__(self):
        self.basic: list = []
        self.advanced: list[tuple[int, Tensor]] = []  # (view dim, index tensor)
        self.empty_dims: list[int] = []               # dims added by a `False` index
        self.new_dims: list[tuple[int, int]] = []     # (view dim, stride) added by None/bools


def _is_mask(index: Tensor) -> bool:
    return index.dtype in (_dtype.bool, _dtype.uint8)


def _as_index_tensor(item, device) -> Tensor:
    """A list/array/tensor index as a Tensor on ``device`` (copied there if needed)."""
    if isinstance(item, Tensor):
        item._check_guard()
        index = item
    elif isinstance(item, np.ndarray):
        index = _creation.tensor(item)
    else:
        try:
            # PyTorch makes a list index int64 (bool/uint8 aside), so an empty one is an
            # empty int64 index, not the float32 that tensor([]) gives
            index = _creation.tensor(item, dtype=_dtype.int64) if _empty_list(item) \
                else _creation.tensor(item)
        except (TypeError, ValueError) as error:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None, bools and "
                             f"integer or boolean tensors are valid indices (got {item!r}: "
                             f"{error})") from None
    integer = not (index.dtype.is_floating_point or index.dtype.is_complex)
    if not integer:
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors, got "
                         f"{index.dtype.name}")
    if index.dtype is _dtype.uint8:  # a byte mask, as in PyTorch; xp needs bool for masks
        index = index.to(_dtype.bool)
    return index if index.device == device else index.to(device)


def _empty_list(item) -> bool:
    """A list holding no element at any depth (``[]``, ``[[], []]``)."""
    return isinstance(item, list) and builtins.all(_empty_list(x) for x in item)


def _consumed(item) -> int:
    if item is None or item is Ellipsis or isinstance(item, (builtins.bool, np.bool_)):
        return 0
    if isinstance(item, Tensor) and _is_mask(item):
        return item.ndim
    if isinstance(item, (list, np.ndarray)):
        array = np.asarray(item)
        return array.ndim if array.dtype == np.bool_ else 1
    return 1


def _slice(item: slice, size: int) -> slice:
    step = 1 if item.step is None else _ops_index(item.step)
    if step <= 0:
        raise ValueError(f"step must be greater than zero (got slice step {step}); negative "
                         f"steps are not supported: use flip() instead")
    start = None if item.start is None else _ops_index(item.start)
    stop = None if item.stop is None else _ops_index(item.stop)
    return slice(start, stop, step)


def _ops_index(value) -> int:
    if isinstance(value, Tensor):
        return value.__index__()
    if isinstance(value, builtins.bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"slice indices must be integers or None, got {type(value).__name__}")
    return int(value)


def _parse(tensor: Tensor, key) -> _Parsed:
    items = key if isinstance(key, tuple) else (key,)
    shape, ndim = tensor.shape, tensor.ndim
    if builtins.sum(1 for item in items if item is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = builtins.sum(_consumed(item) for item in items)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim} (got {used})")
    parsed = _Parsed()
    in_dim = out_dim = 0
    for item in items:
        if item is None or isinstance(item, (builtins.bool, np.bool_)):
            # PyTorch inserts it as unsqueeze() would, in front of the next indexed dim
            parsed.basic.append(None)
            parsed.new_dims.append((out_dim, unsqueeze_stride(shape, tensor.stride(), in_dim)))
            if item is not None and not item:
                parsed.empty_dims.append(out_dim)
            out_dim += 1
        elif item is Ellipsis:
            rest = ndim - used
            parsed.basic.extend([slice(None)] * rest)
            in_dim += rest
            out_dim += rest
        elif isinstance(item, slice):
            parsed.basic.append(_slice(item, shape[in_dim]))
            in_dim += 1
            out_dim += 1
        elif isinstance(item, (int, np.integer)):
            size, position = shape[in_dim], int(item)
            if not -size <= position < size:
                raise IndexError(f"index {position} is out of bounds for dimension {in_dim} with "
                                 f"size {size}")
            parsed.basic.append(position % size)
            in_dim += 1
        elif isinstance(item, (float, complex, np.inexact)):
            kind = "NumPy" if isinstance(item, np.generic) else "Python"
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte tensors are valid indices (got a {kind} "
                             f"{type(item).__name__}: {item!r}); use int() for a position")
        else:
            index = _as_index_tensor(item, tensor.device)
            width = index.ndim if _is_mask(index) else 1
            if _is_mask(index):
                _check_mask(index, shape, in_dim)
            elif index.numel() and shape[in_dim] == 0:
                raise IndexError(f"index is out of bounds for dimension {in_dim} with size 0")
            parsed.basic.extend([slice(None)] * width)
            parsed.advanced.append((out_dim, index))
            in_dim += width
            out_dim += width
    return parsed


def _check_mask(mask: Tensor, shape, in_dim: int) -> None:
    for j, size in enumerate(mask.shape):
        if shape[in_dim + j] != size:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not "
                             f"match the shape of the indexed tensor {list(shape)} at index "
                             f"{in_dim + j}")


def _view(tensor: Tensor, parsed: _Parsed):
    data = tensor._data[tuple(parsed.basic) + (Ellipsis,)]  # `...` keeps 0-d results arrays
    if parsed.new_dims:  # xp gives new dims stride 0; PyTorch's strides, as in unsqueeze()
        strides = list(data.strides)
        for dim, stride in parsed.new_dims:
            strides[dim] = stride * tensor.dtype.itemsize
        data = _dispatch.xp_of(tensor.device).lib.stride_tricks.as_strided(
            data, shape=data.shape, strides=tuple(strides))
    for dim in parsed.empty_dims:
        data = data[(slice(None),) * dim + (slice(0, 0),)]
    return data


def _advanced_key(view_ndim: int, parsed: _Parsed):
    """The xp key over the view: slices, with each index array at its dimension."""
    key, dim = [], 0
    for position, index in parsed.advanced:
        while dim < position:
            key.append(slice(None))
            dim += 1
        key.append(index._data)
        dim += index.ndim if _is_mask(index) else 1
    key.extend([slice(None)] * (view_ndim - dim))
    return tuple(key)


def _mask_count(mask: Tensor, call: str) -> int:
    return int(np.count_nonzero(mask._host_copy(call)))


def _advanced_shape(view_shape, parsed: _Parsed, counts) -> tuple[int, ...]:
    """The result shape of advanced indexing over the view (NumPy's layout)."""
    index_shapes, spans = [], []
    for (dim, index), count in zip(parsed.advanced, counts):
        width = index.ndim if _is_mask(index) else 1
        index_shapes.append((count,) if _is_mask(index) else index.shape)
        spans.append((dim, dim + width))
    try:
        broadcast = tuple(np.broadcast_shapes(*index_shapes))
    except ValueError:
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together "
                         f"with shapes {', '.join(str(list(s)) for s in index_shapes)}") from None
    adjacent = builtins.all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    covered = {d for lo, hi in spans for d in range(lo, hi)}
    if adjacent:
        first, last = spans[0][0], spans[-1][1]
        return tuple(view_shape[:first]) + broadcast + tuple(view_shape[last:])
    return broadcast + tuple(s for d, s in enumerate(view_shape) if d not in covered)


# -- reading ----------------------------------------------------------------------------------
_PLAIN_BOUNDS = (int, type(None))   # slice bounds the quick path of getitem takes as they are


def getitem(tensor: Tensor, key):
    """``tensor[key]``: a view for ints/slices/None/.../bools, a copy with index tensors.

    Raises:
        IndexError: an int out of range (naming index, dim and size), too many indices, a mask
            of the wrong shape, index tensors that do not broadcast, a float index.
        ValueError: a slice step <= 0.
    """
    if tensor._guard is not None:
        tensor._check_guard()
    kind = type(key)
    if kind is int or (kind is slice and key.step is None and
                       type(key.start) in _PLAIN_BOUNDS and type(key.stop) in _PLAIN_BOUNDS):
        # the common views, ``t[i]`` and ``t[a:b]`` (as _parse and _view make them, without
        # their frames): an in-range int or a plain slice of the first dimension
        data = tensor._data
        if data.ndim and (kind is slice or -data.shape[0] <= key < data.shape[0]):
            return _make_view(tensor, data[key, ...])
    parsed = _parse(tensor, key)
    view = _view(tensor, parsed)
    if not parsed.advanced:
        return _make_view(tensor, view)
    counts = [_mask_count(index, "boolean mask indexing") if _is_mask(index) else None
              for _, index in parsed.advanced]
    shape = _advanced_shape(view.shape, parsed, counts)
    device, dtype = tensor.device, tensor.dtype
    out = _dispatch.empty(device, shape, dtype)
    index_key = _advanced_key(view.ndim, parsed)

    def kernel():
        out[...] = view[index_key]
    _dispatch.launch(device, _dispatch.named("index", kernel, shape=shape))
    return Tensor._make(out, device, dtype)


# -- writing ----------------------------------------------------------------------------------
def _check_writable(tensor: Tensor, op: str) -> None:
    _transfer.check_no_overlap(tensor, op)


def _value_operand(tensor: Tensor, value, op: str):
    """(xp value for the kernel, its shape): a scalar of the tensor's dtype, or an array."""
    if not isinstance(value, Tensor) and not isinstance(value, _ops._Number):
        value = _creation.tensor(value, dtype=tensor.dtype)  # checks each value fits, as torch
    if isinstance(value, Tensor):
        value._check_guard()
        if value.device != tensor.device:
            value = value.to(tensor.device)
        return value._data, value.shape
    value = _dtype.storable_value(value, tensor.dtype, op)
    # Through an int64/float64 array so that a negative int wraps into an unsigned dtype, as
    # PyTorch's casts do.
    return np.asarray(value).astype(tensor.dtype.numpy)[()], ()


def _fit_value(array, value_shape, target_shape, op: str):
    """Drop leading size-1 dims that ``target_shape`` lacks, then check broadcasting."""
    value_shape = tuple(value_shape)
    strip = 0
    while len(value_shape) - strip > len(target_shape) and value_shape[strip] == 1:
        strip += 1
    fitted = value_shape[strip:]
    try:
        ok = tuple(np.broadcast_shapes(fitted, tuple(target_shape))) == tuple(target_shape)
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value_shape)} cannot "
                           f"be broadcast to indexing result of shape {list(target_shape)}")
    return array[(0,) * strip + (Ellipsis,)] if strip else array


#: (tensor's Layout, the key spelled by :func:`_plain_index`, the value's Layout) -> (the xp
#: key of the written view, the value's leading size-1 dims dropped): a repeated write of a
#: tensor through the same basic key (a cache filled every step) skips the parsing and checks
_kept_writes: dict = {}


def _plain_index(key):
    """A hashable spelling of a basic index made of ints, slices of ints, None and ``...``
    (slices are not hashable before Python 3.12), or None for any other key."""
    items = key if key.__class__ is tuple else (key,)
    spelled = []
    for item in items:
        kind = item.__class__
        if kind is int or item is None or item is Ellipsis:
            spelled.append(item)
        elif kind is slice and item.start.__class__ in _PLAIN_BOUNDS and \
                item.stop.__class__ in _PLAIN_BOUNDS and item.step.__class__ in _PLAIN_BOUNDS:
            spelled.append((item.start, item.stop, item.step))
        else:
            return None
    return tuple(spelled)


def _write_kept(tensor: Tensor, value: Tensor, index: tuple, strip: int) -> None:
    """The kernel of a kept write (:data:`_kept_writes`): the checks were made by the first
    write of this signature."""
    value._check_guard()
    view = tensor._data[index]
    array = value._data[(0,) * strip + (Ellipsis,)] if strip else value._data
    device = tensor._device
    _transfer.note_write(Tensor._make(view, device, tensor._dtype))
    _dispatch.launch(device, _transfer.assign_kernel(device, view, array, "index_put"))


def setitem(tensor: Tensor, key, value) -> None:
    """``tensor[key] = value``: ``value`` (a number or a tensor, on any device) is broadcast
    and cast to the tensor's dtype, then written in a kernel on the tensor's device.

    Raises:
        IndexError/ValueError: as :func:`getitem`. RuntimeError: a value that does not
            broadcast to the indexed shape, or a target that is an expanded view.
    """
    tensor._check_guard()
    kept_key = None
    if value.__class__ is Tensor:
        plain = _plain_index(key)
        if plain is not None:
            kept_key = (tensor._layout or layout_of(tensor), plain,
                        value._layout or layout_of(value))
            kept = _kept_writes.get(kept_key)
            if kept is not None:
                _write_kept(tensor, value, *kept)
                return
    parsed = _parse(tensor, key)
    view = _view(tensor, parsed)
    array, value_shape = _value_operand(tensor, value, "__setitem__")
    _check_writable(Tensor._make(view, tensor.device, tensor.dtype), "__setitem__")
    if not parsed.advanced:
        array = _fit_value(array, value_shape, view.shape, "__setitem__")
        if kept_key is not None and not parsed.new_dims and not parsed.empty_dims and \
                value.device == tensor.device:
            _dispatch.remember(_kept_writes, kept_key, (
                tuple(parsed.basic) + (Ellipsis,),
                len(value_shape) - array.ndim))
        kernel = _transfer.assign_kernel(tensor.device if value.__class__ is Tensor and
                                         value.device == tensor.device else None,
                                         view, array, "index_put")
    elif _single_mask(parsed) and _prod(value_shape) == 1:
        kernel = _masked_write(tensor, view, parsed, array, value_shape)
    else:
        if _prod(value_shape) != 1:   # an empty value fits only an empty selection
            counts = [_mask_count(index, "boolean mask assignment") if _is_mask(index)
                      else None for _, index in parsed.advanced]
            array = _fit_value(array, value_shape, _advanced_shape(view.shape, parsed, counts),
                               "__setitem__")
        else:
            _advanced_shape(view.shape, parsed, [0] * len(parsed.advanced))
            if value_shape:
                array = array.reshape(())
        index_key = _advanced_key(view.ndim, parsed)

        def kernel():
            view[index_key] = array
    _dispatch.launch(tensor.device, _dispatch.named("index_put", kernel))


def _single_mask(parsed: _Parsed) -> bool:
    return len(parsed.advanced) == 1 and _is_mask(parsed.advanced[0][1])


def _masked_write(tensor: Tensor, view, parsed: _Parsed, array, value_shape):
    """``view[mask] = value`` for a one-element value as ``where(mask, value, view)``: no
    data-dependent index computation, so it never syncs the device (capture-safe on cuda)."""
    position, mask = parsed.advanced[0]
    trailing = view.ndim - position - mask.ndim
    condition = mask._data
    if trailing:
        condition = condition[(Ellipsis,) + (None,) * trailing]
    if value_shape:
        array = array.reshape(())
    xp = _dispatch.xp_of(tensor.device)

    def kernel():
        view[...] = xp.where(condition, array, view)
    return kernel


def _prod(shape) -> int:
    result = 1
    for size in shape:
        result *= size
    return result


# -- named indexing ops -----------------------------------------------------------------------
def nonzero(input, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """Indices of the nonzero elements: an ``(n, ndim)`` int64 tensor, or (``as_tuple``) one
    1-D tensor per dimension. Reads the data on the host (the result's size depends on it)."""
    tensor = _tensor(input, "nonzero")
    host = np.asarray(tensor._host_copy("nonzero()"))
    found = np.nonzero(host.reshape(1) if host.ndim == 0 else host)
    if as_tuple:
        return tuple(_creation.tensor(np.ascontiguousarray(i, dtype=np.int64),
                                      device=tensor.device) for i in found)
    stacked = np.stack(found, axis=1) if host.ndim else np.zeros((len(found[0]), 0), np.int64)
    return _creation.tensor(np.ascontiguousarray(stacked, dtype=np.int64), device=tensor.device)


def _tensor(value, op: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): expected a Tensor, got {type(value).__name__}")
    value._check_guard()
    return value


def _mask_operand(tensor: Tensor, mask, op: str) -> Tensor:
    mask = _tensor(mask, op)
    if mask.dtype is not _dtype.bool:
        raise TypeError(f"{op}: expected a bool mask, got dtype {mask.dtype.name}")
    _ops._broadcast_shape(op, tensor.shape, mask.shape)
    return mask if mask.device == tensor.device else mask.to(tensor.device)


def _fill_value(tensor: Tensor, value, op: str):
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"{op} only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value.ndim} dimension(s)")
        return _value_operand(tensor, value, op)[0]
    return _value_operand(tensor, _ops._check_operand(value, op), op)[0]


#: (tensor's Layout, mask's Layout, the number's type, the number: a float by its bits, since
#: -0.0 == 0.0) -> (the elementwise plan, the number as filled): a repeated masked_fill
#: (attention's, every step) goes straight to the launch, its checks done at the first call
_masked_fill_plans: dict = {}


def masked_fill(input, mask, value) -> Tensor:
    """A copy with ``value`` where ``mask`` (broadcast to the tensor's shape) is true."""
    kind = type(value)
    # the key of a call that may keep its plan (tensors, a Python number), None otherwise
    key = (input._layout or layout_of(input), mask._layout or layout_of(mask), kind,
           value.hex() if kind is float else value) \
        if type(input) is Tensor and type(mask) is Tensor and (kind is float or kind is int) \
        else None
    if key is not None:
        found = _masked_fill_plans.get(key)
        if found is not None:
            return _ops._execute(found[0], (mask, found[1], input), None)
    tensor = _tensor(input, "masked_fill")
    given = mask
    mask = _mask_operand(tensor, mask, "masked_fill")
    if tuple(np.broadcast_shapes(tensor.shape, mask.shape)) != tensor.shape:
        raise RuntimeError(f"masked_fill: the mask of shape {mask.shape} does not broadcast to "
                           f"the tensor's shape {tensor.shape}")
    fill = _fill_value(tensor, value, "masked_fill")
    if not isinstance(value, Tensor) and tensor.device.type != "cpu":
        # a number (checked and cast to the tensor's dtype above, back as a Python number so
        # that the plan is kept per signature): where's one-kernel engine (on the host NumPy's
        # where below is cheaper)
        operands = (mask, fill.item(), tensor)
        plan = _ops._plan("masked_fill", None, operands, None, None, None, None,
                          _masked_fill_formula, "where", _tensor_dtype)
        if key is not None and mask is given:   # (the mask on the tensor's device)
            _dispatch.remember(_masked_fill_plans, key, (plan, operands[1]))
        return _ops._execute(plan, operands, None)
    out = _dispatch.empty(tensor.device, tensor.shape, tensor.dtype)
    data, cond, xp = tensor._data, mask._data, _dispatch.xp_of(tensor.device)

    def kernel():
        out[...] = xp.where(cond, fill, data)
    _dispatch.launch(tensor.device, _dispatch.named("masked_fill", kernel))
    return Tensor._make(out, tensor.device, tensor.dtype)


def _masked_fill_formula(xp, mask, fill, data):
    return xp.where(mask, fill, data)


def _tensor_dtype(operands) -> _dtype.dtype:
    """masked_fill's result dtype: the filled tensor's (the last operand)."""
    return operands[-1].dtype


def masked_fill_(input, mask, value) -> Tensor:
    """In-place :func:`masked_fill`."""
    tensor = _tensor(input, "masked_fill_")
    mask = _mask_operand(tensor, mask, "masked_fill_")
    if tuple(np.broadcast_shapes(tensor.shape, mask.shape)) != tensor.shape:
        raise RuntimeError(f"masked_fill_: the mask of shape {mask.shape} does not broadcast "
                           f"to the tensor's shape {tensor.shape}")
    _check_writable(tensor, "masked_fill_")
    fill = _fill_value(tensor, value, "masked_fill_")
    data, cond, xp = tensor._data, mask._data, _dispatch.xp_of(tensor.device)

    def kernel():
        data[...] = xp.where(cond, fill, data)
    _dispatch.launch(tensor.device, _dispatch.named("masked_fill_", kernel))
    return tensor


def masked_select(input, mask) -> Tensor:
    """The elements where ``mask`` is true (both broadcast), as a 1-D tensor. Reads the mask
    on the host (the result's size depends on it)."""
    tensor = _tensor(input, "masked_select")
    mask = _mask_operand(tensor, mask, "masked_select")
    shape = tuple(np.broadcast_shapes(tensor.shape, mask.shape))
    host = np.broadcast_to(np.asarray(mask._host_copy("masked_select()")), shape)
    count = int(np.count_nonzero(host))
    out = _dispatch.empty(tensor.device, (count,), tensor.dtype)
    data, cond, xp = tensor._data, mask._data, _dispatch.xp_of(tensor.device)

    def kernel():
        out[...] = xp.broadcast_to(data, shape)[xp.broadcast_to(cond, shape)]
    _dispatch.launch(tensor.device, _dispatch.named("masked_select", kernel))
    return Tensor._make(out, tensor.device, tensor.dtype)


def _int_index(index, device, op: str) -> Tensor:
    index = _tensor(index, op)
    if index.dtype not in (_dtype.int64, _dtype.int32, _dtype.int16, _dtype.int8,
                           _dtype.uint8):
        raise TypeError(f"{op}(): expected an integer index tensor, got {index.dtype.name}")
    return index if index.device == device else index.to(device)


#: (tensor's Layout, dim, index's Layout) -> :func:`_index_select_launcher`'s ``run``: a
#: repeated index_select (an embedding lookup, every step) goes straight to the launch
_index_select_plans: dict = {}


def index_select(input, dim: int, index) -> Tensor:
    """The slices at ``index`` (a 1-D or 0-d integer tensor) along ``dim``.

    Raises:
        IndexError: an index that is not a vector; an index outside ``[0, size)`` (negative
            ones too, as PyTorch): on cpu at once, on sim at the next sync (``scatter.py``'s
            module notes).
    """
    key = (input._layout or layout_of(input), dim, index._layout or layout_of(index)) \
        if type(input) is Tensor and type(index) is Tensor and type(dim) is int else None
    if key is not None:
        run = _index_select_plans.get(key)
        if run is not None:
            return run(input, index)
    tensor = _tensor(input, "index_select")
    given = index
    index = _int_index(index, tensor.device, "index_select")
    if index.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape "
                         f"{index.shape}")
    axis = _normalize_dim(dim, tensor.ndim)
    if tensor.ndim == 0:
        shape = ()
    else:
        shape = tensor.shape[:axis] + (index.numel(),) + tensor.shape[axis + 1:]
    run = _index_select_launcher(tensor, axis, shape)
    if key is not None and index is given:   # (the index on the tensor's device)
        _dispatch.remember(_index_select_plans, key, run)
    return run(tensor, index)


def _index_select_launcher(tensor: Tensor, axis: int, shape: tuple):
    """``run(tensor, index)``: index_select's launch for this signature, its checks done."""
    device, dtype = tensor.device, tensor.dtype
    zero_d = tensor.ndim == 0
    size = tensor.shape[axis] if tensor.ndim else 1
    xp = _dispatch.xp_of(device)
    # the backend's one kernel checks the indices itself (check_range's error, at the next
    # synchronization)
    fast = None if zero_d or device.type == "cpu" else \
        _dispatch.accelerator_hook("index_select")
    note = " (index out of range in self)"

    def run(tensor: Tensor, index: Tensor) -> Tensor:
        if tensor._guard is not None:
            tensor._check_guard()
        if index._guard is not None:
            index._check_guard()
        out = _dispatch.empty(device, shape, dtype)
        data, idx = tensor._data, index._data

        def kernel():
            if fast is not None and fast(out, axis, idx.reshape(-1), data, "index_select",
                                         note):
                return
            _check_range("index_select", idx, size, axis, IndexError, note=note)
            if zero_d:
                out[...] = data.reshape(1)[idx.reshape(-1)].reshape(())
            else:
                xp.take(data, idx.reshape(-1), axis=axis, out=out)
        _dispatch.launch(device, _dispatch.named("index_select", kernel))
        return Tensor._make(out, device, dtype)
    return run


def gather(input, dim: int, index) -> Tensor:
    """``out[i][j][k] = input[index[i][j][k]][j][k]`` (for dim 0): ``index`` has the input's
    number of dims and is no larger than it outside ``dim``.

    Raises:
        RuntimeError: mismatched dims or sizes; an index outside ``[0, size)`` (negative ones
            too, as PyTorch): on cpu at once, on sim at the next sync (``scatter.py``'s module
            notes).
    """
    tensor = _tensor(input, "gather")
    index = _int_index(index, tensor.device, "gather")
    if index.ndim != tensor.ndim:
        raise RuntimeError(f"Index tensor must have the same number of dimensions as input "
                           f"tensor ({index.ndim} vs {tensor.ndim})")
    axis = _normalize_dim(dim, tensor.ndim)
    for d in range(tensor.ndim):
        if d != axis and index.shape[d] > tensor.shape[d]:
            raise RuntimeError(f"Size does not match at dimension {d} expected index "
                               f"{list(index.shape)} to be smaller than self "
                               f"{list(tensor.shape)} apart from dimension {axis}")
    out = _dispatch.empty(tensor.device, index.shape, tensor.dtype)
    data, idx, xp = tensor._data, index._data, _dispatch.xp_of(tensor.device)
    crop = tuple(slice(None) if d == axis else slice(0, index.shape[d])
                 for d in range(tensor.ndim))
    size = tensor.shape[axis] if tensor.ndim else 1

    def kernel():
        _check_range("gather", idx, size, axis, RuntimeError)
        if not crop:
            out[...] = data
        else:
            out[...] = xp.take_along_axis(data[crop], idx.astype(np.int64), axis=axis)
    _dispatch.launch(tensor.device, _dispatch.named("gather", kernel))
    return Tensor._make(out, tensor.device, tensor.dtype)


def take(input, index) -> Tensor:
    """Elements at the flat (row-major) positions ``index``; the result has ``index``'s shape.
    Negative positions count from the end (as PyTorch's ``take``)."""
    tensor = _tensor(input, "take")
    index = _int_index(index, tensor.device, "take")
    out = _dispatch.empty(tensor.device, index.shape, tensor.dtype)
    data, idx, xp = tensor._data, index._data, _dispatch.xp_of(tensor.device)

    def kernel():
        out[...] = xp.take(data, idx)
    _dispatch.launch(tensor.device, _dispatch.named("take", kernel))
    return Tensor._make(out, tensor.device, tensor.dtype)
