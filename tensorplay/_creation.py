"""Tensor creation: ``tensor``, ``as_tensor``, ``from_numpy``, ``from_dlpack``, ``zeros``/``ones``/
``empty``/``full`` and their ``_like`` forms, ``arange``, ``linspace``, ``eye``.

Dtype inference follows PyTorch: Python floats give float32 (the default dtype), ints int64,
bools bool, complex numbers complex64; NumPy arrays keep their dtype. ``device=None`` means cpu.
"""

from __future__ import annotations

import math

import numpy as np

from . import _device, _dispatch, _dtype
from ._tensor import Tensor

__all__ = ["tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "empty", "full",
           "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace", "eye"]


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


def _target(device, dtype, default: _dtype.dtype):
    device = _device.resolve(device, default_cpu=True)
    dtype = default if dtype is None else _dtype.to_dtype(dtype)
    _dispatch.check_dtype_supported(device, dtype)
    return device, dtype


def _host_array(data) -> np.ndarray:
    """NumPy data for ``data`` with PyTorch's dtype inference."""
    if isinstance(data, Tensor):
        return np.array(data._host_copy("tensor(Tensor)"), copy=True)
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flatten(data)):
        data = _nested_values(data)
    array = np.array(data)
    if array.dtype == np.float64 and not isinstance(data, np.floating):
        return array.astype(np.float32)
    if array.dtype == np.complex128 and not isinstance(data, np.complexfloating):
        return array.astype(np.complex64)
    if array.dtype.kind in "iu" and not isinstance(data, np.integer):
        return array.astype(np.int64)
    if array.dtype.kind not in "biufc":
        raise TypeError(f"tensor() cannot make a tensor from {type(data).__name__} data of "
                        f"NumPy dtype {array.dtype}; give numbers, nested lists or arrays")
    return array


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
        return Tensor._make(np.array(array, dtype=dtype.numpy, copy=True, order="C"), device,
                            dtype)
    out = Tensor._make(_dispatch.empty(device, array.shape, dtype), device, dtype)
    from . import _transfer

    _transfer._copy_from_host(out, array)
    return out


def tensor(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of ``data`` (numbers, nested lists, NumPy arrays, tensors)."""
    return _from_host(_host_array(data), device, dtype)


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
    from .backends import accelerator_backend

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
    if backend is None or backend.name != "cuda" or int(device_type) not in (2, 13):
        raise TypeError(f"from_dlpack: data on DLPack device type {int(device_type)} cannot be "
                        f"imported: this build holds cpu data"
                        + ("" if backend is None else f" and {backend.device_type} data"))
    array = backend.xp.from_dlpack(obj)
    return Tensor._make(array, _device._canonical("cuda", int(device_id)))


def empty(*size, dtype=None, device=None) -> Tensor:
    """An uninitialised tensor."""
    shape = _shape(size)
    device, dtype = _target(device, dtype, _dtype.get_default_dtype())
    return Tensor._make(_dispatch.empty(device, shape, dtype), device, dtype)


def full(size, fill_value, dtype=None, device=None) -> Tensor:
    """A tensor filled with ``fill_value`` (its dtype inferred from the value by default)."""
    if dtype is None:
        dtype = _dtype.result_type(fill_value)
    out = empty(*_shape((size,) if isinstance(size, int) else (size,)), dtype=dtype,
                device=device)
    return out.fill_(fill_value)


def zeros(*size, dtype=None, device=None) -> Tensor:
    return empty(*size, dtype=dtype, device=device).fill_(0)


def ones(*size, dtype=None, device=None) -> Tensor:
    return empty(*size, dtype=dtype, device=device).fill_(1)


def _like(other: Tensor, dtype, device):
    if not isinstance(other, Tensor):
        raise TypeError(f"expected a Tensor, got {type(other).__name__}")
    return (other.dtype if dtype is None else dtype,
            other.device if device is None else device)


def empty_like(other: Tensor, dtype=None, device=None) -> Tensor:
    dtype, device = _like(other, dtype, device)
    return empty(other.shape, dtype=dtype, device=device)


def zeros_like(other: Tensor, dtype=None, device=None) -> Tensor:
    dtype, device = _like(other, dtype, device)
    return zeros(other.shape, dtype=dtype, device=device)


def ones_like(other: Tensor, dtype=None, device=None) -> Tensor:
    dtype, device = _like(other, dtype, device)
    return ones(other.shape, dtype=dtype, device=device)


def full_like(other: Tensor, fill_value, dtype=None, device=None) -> Tensor:
    dtype, device = _like(other, dtype, device)
    return full(other.shape, fill_value, dtype=dtype, device=device)


def _generated(shape, dtype, device, name, make):
    """A tensor whose kernel fills it with ``make(xp, out)`` (no host data involved)."""
    out = empty(*shape, dtype=dtype, device=device)
    data = out._data
    xp = _dispatch.xp_of(out.device)

    def kernel():
        make(xp, data)
    _dispatch.launch(out.device, _dispatch.named(name, kernel))
    return out


def arange(start, end=None, step=1, dtype=None, device=None) -> Tensor:
    """Values from ``start`` (inclusive) to ``end`` (exclusive) by ``step``."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(f"arange: the range from {start} to {end} with step {step} is empty "
                         f"in the wrong direction; upper bound and step must agree in sign")
    if dtype is None:
        dtype = _dtype.result_type(start, end, step)
    count = max(0, math.ceil((end - start) / step))
    exact = all(isinstance(v, (int, np.integer)) for v in (start, end, step))

    def make(xp, out):
        if exact:
            out[...] = xp.arange(start, start + count * step, step, dtype=np.int64)
        else:
            out[...] = xp.arange(count, dtype=np.float64) * step + start
    return _generated((count,), dtype, device, "arange", make)


def linspace(start, end, steps: int, dtype=None, device=None) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dtype = _dtype.get_default_dtype() if dtype is None else dtype
    return _generated((steps,), dtype, device, "linspace",
                      lambda xp, out: out.__setitem__(Ellipsis, xp.linspace(start, end, steps)))


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    """A 2-D tensor with ones on the diagonal."""
    m = n if m is None else m
    return _generated((n, m), dtype, device, "eye",
                      lambda xp, out: out.__setitem__(Ellipsis, xp.eye(n, m)))
