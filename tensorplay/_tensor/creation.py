"""Tensor creation: ``tensor``, ``as_tensor``, ``from_numpy``, ``from_dlpack``, ``zeros``/``ones``/
``empty``/``full`` and their ``_like`` forms, ``arange``, ``linspace``, ``eye``.

Dtype inference follows PyTorch: Python floats give float32 (the default dtype), ints int64,
bools bool, complex numbers complex64; NumPy arrays keep their dtype. ``device=None`` means cpu.
"""

from __future__ import annotations

import math

import numpy as np

from .._runtime import device as _device, dispatch as _dispatch
from .._runtime.select import accelerator_backend
from .. import _dtype
from . import autograd as _autograd, transfer as _transfer
from .tensor import Tensor

__all__ = ["tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "empty", "full",
           "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace", "eye"]


_MAX_BYTES = (1 << 63) - 1  # PyTorch's storage sizes are int64 byte counts


def _shape(args) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    shape = []
    for size in args:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"sizes must be ints, got {type(size).__name__} {size!r}")
        if size < 0:
            raise ValueError(f"sizes must be non-negative, got {tuple(args)}")
        shape.append(int(size))
    return tuple(shape)


def _check_storage_size(shape: tuple[int, ...], dtype: _dtype.dtype) -> None:
    """Refuse a shape whose byte count overflows int64, as PyTorch does, before an allocator
    sees it (which would report an absurd out-of-memory instead)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _MAX_BYTES:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}: "
                           f"that many {dtype.name} elements take {float(nbytes):.3g} bytes, "
                           f"more than the 2**63 - 1 a tensor can address")


def _target(device, dtype, default: _dtype.dtype):
    device = _device.resolve(device, default_cpu=True)
    dtype = default if dtype is None else _dtype.to_dtype(dtype)
    _dispatch.check_dtype_supported(device, dtype)
    return device, dtype


def _host_array(data, dtype=None) -> np.ndarray:
    """NumPy data for ``data``: in ``dtype``'s precision when one is given (the caller casts),
    else with PyTorch's dtype inference.

    Python numbers (and nested lists of them) are checked as PyTorch checks each value it
    stores: RuntimeError for a value that overflows the dtype it is stored as (``dtype``, or
    int64 for ints), ValueError/TypeError for ragged nesting. NumPy arrays are taken as they
    are (a later cast wraps, as in PyTorch); tensor() copies a Tensor itself.
    """
    if isinstance(data, np.ndarray):
        return data
    if dtype is None and data.__class__ is list and data and \
            all(value.__class__ is int for value in data):
        # a flat list of Python ints (a token, a position: what a loop feeds its model each
        # step) is int64 as it is, unless a value is beyond int64 (the general path says so)
        try:
            return np.array(data, dtype=np.int64)
        except OverflowError:
            pass
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flatten(data)):
        data = _nested_values(data)
    target = None if dtype is None else _dtype.to_dtype(dtype)
    try:
        array = np.array(data)
    except ValueError:
        _check_nesting(data)
        raise
    if array.dtype == np.float64 and (target is None or not (
            target.is_floating_point or target.is_complex)) and array.size and \
            np.abs(array).max() >= 2.0 ** 63:
        # NumPy turns ints that no one 64-bit dtype holds (2**63 beside -1) into floats
        exact = np.array(data, dtype=object)
        if all(isinstance(v, (int, np.integer)) for v in exact.flat):
            array = exact
    if array.dtype == object:
        _check_nesting(data)
        array = _wide_ints(array, data, target)
    elif array.dtype.kind not in "biufc":
        raise TypeError(f"tensor() cannot make a tensor from {type(data).__name__} data of "
                        f"NumPy dtype {array.dtype}; give numbers, nested lists or arrays")
    elif not isinstance(data, np.generic) and (target or array.dtype.kind in "iu"):
        _check_data_fits(array, target)
    if target is not None or isinstance(data, np.generic):
        return array
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype == np.complex128:
        return array.astype(np.complex64)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    return array


def _check_nesting(data) -> None:
    """PyTorch's errors for ragged nested sequences, shaped by the first item at each depth:
    ValueError for a sequence of another length, TypeError for a number where a sequence
    belongs or a sequence where a number belongs."""
    sizes = []
    item = data
    while isinstance(item, (list, tuple)):
        sizes.append(len(item))
        if not item:
            break
        item = item[0]

    def walk(item, dim: int) -> None:
        if dim == len(sizes):
            if isinstance(item, (list, tuple)):
                raise TypeError(f"expected a number at dim {dim} (got a sequence of length "
                                f"{len(item)})")
            return
        if not isinstance(item, (list, tuple)):
            raise TypeError(f"expected sequence of length {sizes[dim]} at dim {dim} (got "
                            f"{type(item).__name__} {item!r}, not a sequence)")
        if len(item) != sizes[dim]:
            raise ValueError(f"expected sequence of length {sizes[dim]} at dim {dim} (got "
                             f"{len(item)})")
        for element in item:
            walk(element, dim + 1)
    walk(data, 0)


def _wide_ints(array: np.ndarray, data, target: _dtype.dtype | None) -> np.ndarray:
    """The object array NumPy makes of Python ints that no 64-bit dtype holds together
    (``2**64``, or ``2**63`` beside ``-1``) as numbers ``target`` can take: the values are
    checked against it first (int64 when None), then given as float64 for a floating target, or
    as uint64 two's complement bits (which the cast to ``target`` keeps)."""
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
               for v in array.flat):
        raise TypeError(f"tensor() cannot make a tensor from {type(data).__name__} data holding "
                        f"non-numbers; give numbers, nested lists or arrays")
    _check_data_fits(array, target)
    target = target or _dtype.int64
    if target is _dtype.bool:
        return array.astype(np.bool_)
    if target.is_floating_point or target.is_complex:
        try:
            return array.astype(np.float64)
        except OverflowError:  # an int too large for a Python float
            raise _dtype.overflow_error("tensor()", max(array.flat, key=abs), target) from None
    return np.array([int(v) % (1 << 64) for v in array.flat],
                    dtype=np.uint64).reshape(array.shape)


def _check_data_fits(array: np.ndarray, requested: _dtype.dtype | None) -> None:
    """Raise if a value of ``array`` (Python data) overflows the dtype, as PyTorch's ``tensor()``
    checks each value it stores: RuntimeError for a ``requested`` dtype, ValueError for the
    int64 inferred for Python ints (PyTorch: "Overflow when unpacking long long"). Only integer
    dtypes are checked (PyTorch stores 1e39 into float32 unchecked, as inf)."""
    try:
        _check_fits(array, requested or _dtype.int64)
    except RuntimeError as error:
        if requested is None:
            raise ValueError(f"Overflow when unpacking long long: {error}; pass dtype= (e.g. "
                             f"tp.uint64 or tp.float64) for larger values") from None
        raise


def _check_fits(array: np.ndarray, dtype: _dtype.dtype) -> None:
    if array.size == 0 or array.dtype.kind not in "iufO" or dtype is _dtype.bool or \
            dtype.is_floating_point or dtype.is_complex:
        return
    from_float = array.dtype.kind == "f"
    if from_float and np.isnan(array).any():
        raise _dtype.overflow_error("tensor()", float("nan"), dtype)
    low, high = _dtype.int_range(dtype, from_float)
    if array.dtype == object:  # Python ints, some beyond 64 bits
        smallest, largest = min(array.flat), max(array.flat)
    else:
        smallest, largest = array.min().item(), array.max().item()
    if smallest < low:
        raise _dtype.overflow_error("tensor()", smallest, dtype)
    if largest > high:
        raise _dtype.overflow_error("tensor()", largest, dtype)


def _flatten(data):
    for item in data:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


def _nested_values(data):
    if isinstance(data, (list, tuple)):
        return [_nested_values(x) for x in data]
    if isinstance(data, Tensor):
        return data.tolist()
    return data


def _from_host(array: np.ndarray, device, dtype) -> Tensor:
    array_dtype = _dtype.from_numpy_dtype(array.dtype)
    device, dtype = _target(device, dtype, array_dtype)
    if device.type == "cpu":
        with np.errstate(over="ignore", invalid="ignore"):  # casts wrap silently, as PyTorch's
            data = np.array(array, dtype=dtype.numpy, copy=True, order="C")
        return Tensor._make(data, device, dtype)
    out = Tensor._make(_dispatch.empty(device, array.shape, dtype), device, dtype)
    _transfer._copy_from_host(out, array)
    return out


def _leaf(tensor: Tensor, requires_grad: bool) -> Tensor:
    """A factory's result, made a leaf that requires grad when asked (``requires_grad=True``)."""
    if requires_grad:
        _autograd.set_requires_grad(tensor, requires_grad)
    return tensor


def tensor(data, dtype=None, device=None, *, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (numbers, nested lists, NumPy arrays, tensors).

    Raises:
        RuntimeError: a Python value that ``dtype`` cannot hold without overflow
            (``tensor([300], dtype=int8)``), as in PyTorch; NumPy arrays and tensors are cast,
            which wraps.
        ValueError: with no ``dtype``, a Python int beyond int64 (``tensor([2**63])``), as in
            PyTorch.
        ValueError, TypeError: ragged nested lists (``expected sequence of length 2 at dim 1``).

    A Tensor ``data`` is copied on its own device unless ``device`` is given, as PyTorch's
    ``torch.tensor(t)`` does (``t.clone().detach()`` says the same more plainly).
    """
    if isinstance(data, Tensor):
        return _leaf(data.to(device=data.device if device is None else device,
                       dtype=data.dtype if dtype is None else dtype, copy=True), requires_grad)
    out = _from_host(_host_array(data, dtype), device, dtype)
    if requires_grad:   # inline: a warm tp.tensor() enters no extra frame
        _autograd.set_requires_grad(out, requires_grad)
    return out


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor`, but shares memory with a Tensor or a host NumPy array when no
    conversion is needed."""
    if isinstance(data, Tensor):
        return data.to(device=data.device if device is None else device,
                       dtype=data.dtype if dtype is None else dtype)
    if isinstance(data, np.ndarray) and _device.resolve(device, default_cpu=True).type == "cpu":
        wanted = _dtype.from_numpy_dtype(data.dtype) if dtype is None else _dtype.to_dtype(dtype)
        if wanted.numpy == data.dtype:
            return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A cpu tensor sharing memory with a NumPy array (writes show through both ways)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy() expects a numpy.ndarray, got {type(array).__name__}")
    return Tensor._make(array, _device.CPU, _dtype.from_numpy_dtype(array.dtype))


def from_dlpack(obj) -> Tensor:
    """A tensor sharing memory with any object that implements the DLPack protocol (NumPy,
    PyTorch, CuPy, JAX). Host data becomes a cpu tensor; CUDA data a cuda tensor when this
    build's accelerator is cuda."""
    if isinstance(obj, Tensor):
        return obj
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"from_dlpack() expects an object implementing the DLPack protocol "
                        f"(__dlpack__ and __dlpack_device__), got {type(obj).__name__}; use "
                        f"tensorplay.tensor() for Python data")
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) == 1:  # kDLCPU
        return from_numpy(np.from_dlpack(obj))
    backend = accelerator_backend()
    if backend is None or int(device_type) not in _dispatch.capability(backend,
                                                                  "dlpack_device_types"):
        raise TypeError(f"from_dlpack: data on DLPack device type {int(device_type)} cannot be "
                        f"imported: this build holds cpu data"
                        + ("" if backend is None else f" and {backend.device_type} data"))
    array = backend.xp.from_dlpack(obj)
    return Tensor._make(array, _device._canonical(backend.device_type, int(device_id)))


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor.

    Raises:
        RuntimeError: sizes whose byte count overflows int64 ("Storage size calculation
            overflowed"), as in PyTorch.
    """
    shape = _shape(size)
    device, dtype = _target(device, dtype, _dtype.get_default_dtype())
    _check_storage_size(shape, dtype)
    return _leaf(Tensor._make(_dispatch.empty(device, shape, dtype), device, dtype), requires_grad)


def full(size, fill_value, dtype=None, device=None, *, requires_grad: bool = False) -> Tensor:
    """A tensor filled with ``fill_value`` (its dtype inferred from the value by default).

    Raises:
        RuntimeError: a value the dtype cannot hold without overflow (300 for int8; a complex
            value with a nonzero imaginary part for a real dtype), as in PyTorch. A float into
            an integer dtype is truncated toward zero, as in PyTorch.
    """
    if dtype is None:
        dtype = _dtype.result_type(fill_value)
    elif isinstance(fill_value, (complex, np.complexfloating)):
        fill_value = _dtype.storable_value(fill_value, _dtype.to_dtype(dtype), "full")
    out = empty(*_shape((size,) if isinstance(size, int) else (size,)), dtype=dtype,
                device=device)
    return _leaf(out.fill_(fill_value), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros of shape ``size`` (ints, or one sequence of them), as :func:`empty`
    takes it."""
    return _leaf(empty(*size, dtype=dtype, device=device).fill_(0), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones of shape ``size`` (ints, or one sequence of them), as :func:`empty`
    takes it."""
    return _leaf(empty(*size, dtype=dtype, device=device).fill_(1), requires_grad)


def _like(other: Tensor, dtype, device):
    if not isinstance(other, Tensor):
        raise TypeError(f"expected a Tensor, got {type(other).__name__}")
    return (other.dtype if dtype is None else dtype,
            other.device if device is None else device)


def empty_like(other: Tensor, dtype=None, device=None, *, requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor of ``other``'s shape, dtype and device (unless ``dtype`` or
    ``device`` says otherwise)."""
    dtype, device = _like(other, dtype, device)
    return _leaf(empty(other.shape, dtype=dtype, device=device), requires_grad)


def zeros_like(other: Tensor, dtype=None, device=None, *, requires_grad: bool = False) -> Tensor:
    """Zeros of ``other``'s shape, dtype and device (unless ``dtype`` or ``device`` says
    otherwise)."""
    dtype, device = _like(other, dtype, device)
    return _leaf(zeros(other.shape, dtype=dtype, device=device), requires_grad)


def ones_like(other: Tensor, dtype=None, device=None, *, requires_grad: bool = False) -> Tensor:
    """Ones of ``other``'s shape, dtype and device (unless ``dtype`` or ``device`` says
    otherwise)."""
    dtype, device = _like(other, dtype, device)
    return _leaf(ones(other.shape, dtype=dtype, device=device), requires_grad)


def full_like(other: Tensor, fill_value, dtype=None, device=None, *,
              requires_grad: bool = False) -> Tensor:
    """``fill_value`` in ``other``'s shape, dtype and device (unless ``dtype`` or ``device``
    says otherwise), as :func:`full`."""
    dtype, device = _like(other, dtype, device)
    return _leaf(full(other.shape, fill_value, dtype=dtype, device=device), requires_grad)


_REAL_SCALARS = (int, float, np.integer, np.floating, np.bool_)
_SCALARS = _REAL_SCALARS + (complex, np.complexfloating)


def _host_scalar(value, call: str, name: str):
    """``value`` as a host number: a 0-d Tensor is read on the host (waiting for its device),
    as PyTorch reads a tensor given for a number argument."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise TypeError(f"{call}(): argument '{name}' must be a number or a 0-d tensor, got "
                            f"a tensor of shape {tuple(value.shape)} (PyTorch takes 0-d tensors "
                            f"only; index it, e.g. t[0])")
        return value.item()
    if not isinstance(value, _SCALARS):
        raise TypeError(f"{call}(): argument '{name}' must be a number or a 0-d tensor, not "
                        f"{type(value).__name__}")
    return value


def _generated(shape, dtype, device, name, make):
    """A tensor whose kernel fills it with ``make(xp, out)`` (no host data involved)."""
    out = empty(*shape, dtype=dtype, device=device)
    data = out._data
    xp = _dispatch.xp_of(out.device)

    def kernel():
        make(xp, data)
    _dispatch.launch(out.device, _dispatch.named(name, kernel))
    return out


def arange(start, end=None, step=1, dtype=None, device=None, *,
           requires_grad: bool = False) -> Tensor:
    """Values from ``start`` (inclusive) to ``end`` (exclusive) by ``step``; each may be a
    number or a 0-d tensor (read on the host). The dtype is int64 when all three are
    integral, else the default dtype, as in PyTorch.

    Raises:
        RuntimeError: an infinite or nan bound or step ("unsupported range"), a zero step, or a
            step that points away from ``end``, as in PyTorch.
    """
    if end is None:
        start, end = 0, start
    start, end, step = (_host_scalar(start, "arange", "start"), _host_scalar(end, "arange", "end"),
                        _host_scalar(step, "arange", "step"))
    if not (isinstance(start, _REAL_SCALARS) and isinstance(end, _REAL_SCALARS) and
            isinstance(step, _REAL_SCALARS)):
        raise RuntimeError(f"arange: complex bounds or step ({start}, {end}, {step}) are not "
                           f"supported; give real numbers")
    for value in (start, end, step):
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise RuntimeError(f"arange: unsupported range: {start} -> {end} with step {step} "
                               f"(start, end and step must be finite)")
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) * step < 0:  # type: ignore[operator]   # NumPy's stubs: bool - np.bool_
        raise RuntimeError(f"arange: the range from {start} to {end} with step {step} is empty "
                           f"in the wrong direction; upper bound and step must agree in sign")
    exact = all(isinstance(v, (int, np.integer, np.bool_)) for v in (start, end, step))
    if exact:  # Python ints: no NumPy fixed-width overflow in the bounds' arithmetic
        start, end, step = int(start), int(end), int(step)
    if dtype is None:  # PyTorch: int64 when all three are integral (bool counts), else default
        dtype = _dtype.int64 if exact else _dtype.get_default_dtype()
    count = max(0, math.ceil((end - start) / step))

    def make(xp, out):
        if exact:
            out[...] = xp.arange(start, start + count * step, step, dtype=np.int64)
        else:
            out[...] = xp.arange(count, dtype=np.float64) * step + start
    return _leaf(_generated((count,), dtype, device, "arange", make), requires_grad)


def linspace(start, end, steps: int, dtype=None, device=None, *,
             requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (numbers or
    0-d tensors, read on the host). The dtype is the default dtype, or the default
    complex dtype (complex64) when ``start`` or ``end`` is complex, as in PyTorch.

    Raises:
        TypeError: ``steps`` is not an int (``2.5``, ``True``).
        RuntimeError: a negative ``steps``; a complex ``start`` or ``end`` with a real
            ``dtype``; both as in PyTorch.
    """
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__} {steps!r}")
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    start, end = _host_scalar(start, "linspace", "start"), _host_scalar(end, "linspace", "end")
    if not (isinstance(start, _REAL_SCALARS) and isinstance(end, _REAL_SCALARS)):
        complex_dtype = _dtype.complex64  # the default complex dtype (the default is float32)
        if dtype is None:
            dtype = complex_dtype
        elif not _dtype.to_dtype(dtype).is_complex:
            raise RuntimeError(f"linspace: inferred dtype {complex_dtype.name} (start={start}, "
                               f"end={end}) can't be safely cast to passed dtype "
                               f"{_dtype.to_dtype(dtype).name}; pass a complex dtype")
    dtype = _dtype.get_default_dtype() if dtype is None else dtype
    if isinstance(start, _REAL_SCALARS) and isinstance(end, _REAL_SCALARS):
        return _leaf(_generated((steps,), dtype, device, "linspace", lambda xp, out: (
            out.__setitem__(Ellipsis, xp.linspace(start, end, steps)))), requires_grad)
    start, end = complex(start), complex(end)

    def complex_linspace(xp, out):   # CuPy's linspace takes no complex bounds
        if steps:
            step = (end - start) / (steps - 1) if steps > 1 else 0j
            values = start + xp.arange(steps, dtype=np.float64) * step
            values[-1] = end
            out[...] = values
    return _leaf(_generated((steps,), dtype, device, "linspace", complex_linspace), requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None, *,
        requires_grad: bool = False) -> Tensor:
    """A 2-D tensor with ones on the diagonal."""
    m = n if m is None else m
    return _leaf(_generated((n, m), dtype, device, "eye",
                      lambda xp, out: out.__setitem__(Ellipsis, xp.eye(n, m))), requires_grad)
