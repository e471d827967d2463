"""Moving and copying data: ``Tensor.to``, ``clone`` and ``copy_`` (same device, host to device,
device to host, device to device).

Ordering across devices follows PyTorch: a copy between two accelerator devices runs on the
destination's current stream after the source's current stream has reached the copy, and the
source stream then waits for the copy, so that memory the copy reads cannot be reused early.
"""

from __future__ import annotations

import numpy as np

from .._runtime import capture as _capture, device as _device, dispatch as _dispatch
from .._runtime import state as _state
from .._runtime import writes as _writes
from .. import _dtype
from .tensor import Tensor

#: installed on Tensor by ``methods.py`` (with ``copy_`` and ``type``)
TENSOR_METHODS = ("to", "cpu", "cuda", "clone", "contiguous")


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
    """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(other_tensor)``; returns
    ``tensor`` itself when nothing changes, unless ``copy=True``."""
    device, dtype, copy = _parse_to(tensor, args, kwargs)
    if device == tensor.device and dtype is tensor.dtype and not copy:
        return tensor
    _dispatch.check_dtype_supported(device, dtype)
    out = Tensor._make(_dispatch.empty(device, tensor.shape, dtype), device, dtype)
    return copy_(out, tensor)


def cpu(tensor: Tensor) -> Tensor:
    """This tensor on the host (itself if already there)."""
    return to(tensor, "cpu")


def cuda(tensor: Tensor, device=None) -> Tensor:
    """This tensor on a cuda device (the current one by default).

    Raises:
        ValueError: ``device`` is not an accelerator device (``"cpu"``), as PyTorch refuses a
            non-cuda device here, or a device this build does not have.
        RuntimeError: on a host-only build.
    """
    index = _device.resolve_accelerator_index("cuda" if device is None else device)
    return to(tensor, index)


def tensor_type(tensor: Tensor, dtype=None):
    """``Tensor.type()``: the type name (``"tensorplay.float32"``) with no argument, else the
    tensor converted to ``dtype``."""
    if dtype is None:
        return f"tensorplay.{tensor.dtype.name}"
    return to(tensor, _dtype.to_dtype(dtype))


def contiguous(tensor: Tensor) -> Tensor:
    """``tensor`` itself if it is C-contiguous, else a contiguous copy."""
    return tensor if tensor.is_contiguous() else clone(tensor)


def clone(tensor: Tensor) -> Tensor:
    """A contiguous copy on the same device."""
    tensor._check_guard()
    device, dtype, data = tensor._device, tensor._dtype, tensor._data
    out = _dispatch.empty(device, data.shape, dtype)
    _dispatch.launch(device, assign_kernel(device, out, data, "copy", shape=data.shape))
    return Tensor._make(out, device, dtype)


#: device -> its backend's one-kernel ``copy`` hook, or None (host, sim: ``dst[...] = src``)
_copy_hooks: dict = {}


def assign_kernel(device, dst, src, name: str, **attrs):
    """A kernel writing the ``xp`` array ``src`` into ``dst`` (broadcast and cast as
    ``dst[...] = src``), named ``name`` (``attrs`` as :func:`dispatch.named`). On an
    accelerator ``device`` whose backend offers the ``copy`` hook, a same-dtype copy takes the
    backend's kernel (a strided copy costs several times less host time there than ``xp``'s);
    ``device`` None: the device ``dst`` lives on is not known (any copy through ``xp``)."""
    copy = None
    if device is not None and device.type != "cpu" and dst.dtype == src.dtype:
        try:
            copy = _copy_hooks[device]
        except KeyError:
            copy = _copy_hooks[device] = _dispatch.hook(_dispatch.backend_of(device), "copy")
    if copy is None:
        def kernel():
            dst[...] = src
    else:
        def kernel():
            if not copy(dst, src):
                dst[...] = src
    return _dispatch.named(name, kernel, **attrs)


def _check_broadcast(dst: Tensor, src_shape) -> None:
    try:
        shape = np.broadcast_shapes(tuple(src_shape), dst.shape)
    except ValueError:
        shape = None
    if shape != dst.shape:
        raise RuntimeError(f"copy_: the source of shape {tuple(src_shape)} cannot be broadcast "
                           f"to the destination's shape {dst.shape}")


def check_no_overlap(tensor: Tensor, op: str) -> None:
    """Refuse to write into a tensor whose elements share memory (an ``expand()``ed view), as
    PyTorch does: the result would depend on the order the elements are written in."""
    shape = tensor._data.shape
    if 0 not in shape and any(stride == 0 and size > 1
                              for stride, size in zip(tensor._data.strides, shape)):
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the "
                           f"written-to tensor refers to a single memory location (an "
                           f"expand()ed view?). Please clone() the tensor before performing "
                           f"the operation.")
    note_write(tensor)


def note_write(tensor: Tensor) -> None:
    """Record a write into an existing tensor while writes are being recorded: every such write
    passes here (Note [write records])."""
    if _writes.active:
        _writes.note(tensor)


def copy_(dst: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` into ``dst``, broadcasting and casting; ``src`` may be on another device (a
    copy from or to the host waits for the device). ``Tensor.copy_`` also takes Python data and
    NumPy arrays (``methods.py`` turns them into a cpu tensor first)."""
    dst._check_guard()
    src._check_guard()
    _check_broadcast(dst, src.shape)
    check_no_overlap(dst, "copy_")
    if src.device == dst.device:
        _dispatch.launch(dst.device, assign_kernel(dst.device, dst._data, src._data, "copy",
                                                   shape=tuple(dst.shape)))
    elif dst.device.type == "cpu":
        host = src._host_copy("copy to the host (Tensor.cpu()/copy_)")
        # a cast stays silent
        _dispatch.launch(dst.device, assign_kernel(None, dst._data, host, "copy",
                                                   shape=tuple(dst.shape)))
    elif src.device.type == "cpu":
        _copy_from_host(dst, src._data)
    else:
        _copy_between_devices(dst, src)
    return dst


def _copy_from_host(dst: Tensor, host: np.ndarray) -> None:
    native = _state.current_native_stream(dst.device.index)
    _capture.check_capture_safe("copy from the host (tensor creation/copy_)", native)
    backend = _dispatch.backend_of(dst.device)
    if host.shape == dst._data.shape and host.dtype == dst.dtype.numpy and \
            host.flags.c_contiguous:
        staged = host   # already what the device array holds (tensor(...) makes it so)
    else:
        # np.array, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,)
        with np.errstate(over="ignore", invalid="ignore"):  # casts are silent, as PyTorch's
            staged = np.array(np.broadcast_to(host, dst.shape), dtype=dst.dtype.numpy,
                              order="C")
    if dst.is_contiguous():
        backend.from_host(native, dst._data, staged)
        return
    tmp = _dispatch.empty(dst.device, dst.shape, dst.dtype)
    backend.from_host(native, tmp, staged)
    _dispatch.launch(dst.device, assign_kernel(dst.device, dst._data, tmp, "copy",
                                               shape=tuple(dst.shape)))


def _copy_between_devices(dst: Tensor, src: Tensor) -> None:
    backend = _dispatch.backend_of(dst.device)
    source = src.contiguous()
    staged = _dispatch.empty(dst.device, source.shape, source.dtype)
    src_stream = _state.current_native_stream(src.device.index)
    dst_stream = _state.current_native_stream(dst.device.index)
    _order_after(backend, dst_stream, src_stream)
    backend.memcpy(dst_stream, backend.array_ptr(staged), backend.array_ptr(source._data),
                   source.nbytes)
    _order_after(backend, src_stream, dst_stream)
    _dispatch.launch(dst.device, assign_kernel(dst.device, dst._data, staged, "copy",
                                               shape=tuple(dst.shape)))


def _order_after(backend, later, earlier) -> None:
    """Make work queued later on native stream ``later`` wait for ``earlier``'s queue so far."""
    event = backend.create_event(earlier.device_index, False)
    backend.event_record(event, earlier)
    backend.stream_wait_event(later, event)
