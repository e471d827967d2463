"""Moving and copying data: ``Tensor.to``, ``clone`` and ``copy_`` (same device, host to device,
device to host, device to device).

Ordering across devices follows PyTorch: a copy between two accelerator devices runs on the
destination's current stream after the source's current stream has reached the copy, and the
source stream then waits for the copy, so that memory the copy reads cannot be reused early.
"""

from __future__ import annotations

import numpy as np

from .._runtime import device as _device, dispatch as _dispatch
from .. import _dtype
from .tensor import Tensor


def _parse_to(tensor: Tensor, args, kwargs):
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, (_dtype.dtype, type)) or (isinstance(arg, str) and
                                                       arg in _dtype._BY_NAME):
            dtype = arg
        elif isinstance(arg, (str, _device.device, int)) and not isinstance(arg, bool):
            device = arg
        elif isinstance(arg, bool):
            copy = arg if len(args) > 1 else copy
        else:
            raise TypeError(f"to() takes a device, a dtype or a tensor, got {arg!r}")
    device = tensor.device if device is None else _device.resolve(device)
    dtype = tensor.dtype if dtype is None else _dtype.to_dtype(dtype)
    return device, dtype, copy


def to(tensor: Tensor, *args, **kwargs) -> Tensor:
    device, dtype, copy = _parse_to(tensor, args, kwargs)
    if device == tensor.device and dtype is tensor.dtype and not copy:
        return tensor
    _dispatch.check_dtype_supported(device, dtype)
    out = Tensor._make(_dispatch.empty(device, tensor.shape, dtype), device, dtype)
    return copy_(out, tensor)


def clone(tensor: Tensor) -> Tensor:
    out = Tensor._make(_dispatch.empty(tensor.device, tensor.shape, tensor.dtype),
                       tensor.device, tensor.dtype)
    return copy_(out, tensor)


def _assign_kernel(dst, src):
    def kernel():
        dst[...] = src
    return _dispatch.named("copy", kernel, shape=tuple(dst.shape))


def _check_broadcast(dst: Tensor, src_shape) -> None:
    try:
        shape = np.broadcast_shapes(tuple(src_shape), dst.shape)
    except ValueError:
        shape = None
    if shape != dst.shape:
        raise RuntimeError(f"copy_: the source of shape {tuple(src_shape)} cannot be broadcast "
                           f"to the destination's shape {dst.shape}")


def copy_(dst: Tensor, src) -> Tensor:
    """Copy ``src`` (Tensor, NumPy array or Python value) into ``dst`` with broadcasting."""
    dst._check_guard()
    if not isinstance(src, Tensor):
        from . import creation as _creation

        src = _creation.tensor(src)
    src._check_guard()
    _check_broadcast(dst, src.shape)
    from . import elementwise as _ops

    _ops.check_no_overlap(dst, "copy_")
    if src.device == dst.device:
        _dispatch.launch(dst.device, _assign_kernel(dst._data, src._data))
    elif dst.device.type == "cpu":
        host = src._host_copy("copy to the host (Tensor.cpu()/copy_)")
        _dispatch.launch(dst.device, _assign_kernel(dst._data, host))  # a cast stays silent
    elif src.device.type == "cpu":
        _copy_from_host(dst, src._data)
    else:
        _copy_between_devices(dst, src)
    return dst


def _copy_from_host(dst: Tensor, host: np.ndarray) -> None:
    from .._runtime import capture as _capture, state as _state

    native = _state.current_native_stream(dst.device.index)
    _capture.check_capture_safe("copy from the host (tensor creation/copy_)", native)
    backend = _dispatch.backend_of(dst.device)
    # np.array, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,)
    with np.errstate(over="ignore", invalid="ignore"):  # casts are silent, as PyTorch's
        staged = np.array(np.broadcast_to(host, dst.shape), dtype=dst.dtype.numpy, order="C")
    if dst.is_contiguous():
        backend.from_host(native, dst._data, staged)
        return
    tmp = _dispatch.empty(dst.device, dst.shape, dst.dtype)
    backend.from_host(native, tmp, staged)
    _dispatch.launch(dst.device, _assign_kernel(dst._data, tmp))


def _copy_between_devices(dst: Tensor, src: Tensor) -> None:
    from .._runtime import state as _state
    from ..accelerator._streams import Event

    backend = _dispatch.backend_of(dst.device)
    source = src.contiguous()
    staged = _dispatch.empty(dst.device, source.shape, source.dtype)
    src_stream = _state.current_stream(src.device.index)
    dst_stream = _state.current_stream(dst.device.index)
    dst_stream.wait_event(src_stream.record_event())
    backend.memcpy(dst_stream._native, backend.array_ptr(staged),
                   backend.array_ptr(source._data), source.nbytes)
    src_stream.wait_event(dst_stream.record_event(Event()))
    _dispatch.launch(dst.device, _assign_kernel(dst._data, staged))
