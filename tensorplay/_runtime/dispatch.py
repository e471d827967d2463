"""The seam between tensor ops and backends: where result memory comes from, where kernels go.

Every op is written once against an array namespace (``xp``: NumPy for ``cpu`` and ``sim``, CuPy
for ``cuda``). An op (1) checks its arguments and works out the result's shape and dtype,
(2) asks :func:`empty` for the result's memory, and (3) hands a zero-argument kernel that writes
the result to :func:`launch`. So:

- on ``cpu`` the memory is a fresh NumPy array and the kernel runs at once;
- on an accelerator the memory is a block of ``tensorplay._runtime.allocator`` taken on the current
  stream (from the graph's pool while that stream captures), and the kernel goes to the backend:
  queued (sim), run on the bound CuPy stream (cuda), or recorded while capturing.

Because kernels may run later (sim) or again on every replay (graphs), a kernel must read its
inputs only when it runs and must close over arrays, never over values read from them. A launch
keeps no memory alive, as a GPU kernel's raw pointers do not: the tensors own it, and a tensor
freed while its kernels are still queued gives its block back at once for reuse in stream order
(sim queues a copy of the kernel over owner-less views, Note [sim queue ownership]; so a kernel
must not expect to see a name rebound after its launch).
"""

from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from .device import device as _device_cls
from ..backends import accelerator_backend, host_backend

_accelerator = None
_host = None

# NumPy's floating-point warnings are switched off around each host kernel (see launch). NumPy 2
# keeps that state in a context variable; setting it directly costs a fifth of entering
# ``np.errstate`` (which rebuilds the state object each time) on the eager hot path.
try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _QUIET = _make_extobj(all="ignore")
    _set_numpy_errors, _reset_numpy_errors = _extobj_contextvar.set, _extobj_contextvar.reset
except ImportError:   # a NumPy that moved it: the public, slower spelling
    _QUIET = {"all": "ignore"}

    def _set_numpy_errors(quiet):
        return np.seterr(**quiet)

    def _reset_numpy_errors(previous) -> None:
        np.seterr(**previous)


_supported: dict[int, frozenset] = {}


def _backends():
    global _accelerator, _host
    _host = host_backend()
    _accelerator = accelerator_backend()


def backend_of(device: _device_cls):
    """The backend owning ``device``."""
    if _host is None:
        _backends()
    return _host if device.type == "cpu" else _accelerator


def xp_of(device: _device_cls):
    """The array namespace of ``device``'s backend."""
    return backend_of(device).xp


def check_dtype_supported(device: _device_cls, dtype: _dtype.dtype) -> None:
    """Raise TypeError if ``device`` cannot hold ``dtype``."""
    if device.type == "cpu":
        return
    supported = _supported.get(device.index)
    if supported is None:
        supported = _supported[device.index] = frozenset(
            backend_of(device).device_capability(device.index)["supported_dtypes"])
    if dtype not in supported:
        names = ", ".join(d.name for d in _dtype.all_dtypes if d in supported)
        raise TypeError(f"{device} cannot hold {dtype}: its supported dtypes are {names} "
                        f"(see get_device_capability()['supported_dtypes'])")


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def empty(device: _device_cls, shape: tuple[int, ...], dtype: _dtype.dtype):
    """A new C-contiguous ``xp`` array for a result on ``device`` (contents undefined)."""
    if device.type == "cpu":
        return host_backend().empty(shape, dtype.numpy)
    from .allocator import device_allocator

    index = device.index
    nbytes = math.prod(shape) * dtype.itemsize
    allocation = device_allocator(index).malloc(max(nbytes, 1), _current_native_stream(index))
    return _accelerator.as_array(index, allocation.ptr, max(nbytes, 1), dtype.numpy, shape,
                                 c_strides(shape, dtype.itemsize), allocation)


#: native stream -> ``watcher(kernel)`` for the streams recording an open while body (Note
#: [while predicate writes] in ``accelerator/_body_writes.py``); empty outside such bodies.
body_watchers: dict = {}


def launch(device: _device_cls, kernel) -> None:
    """Run ``kernel`` for ``device``: at once on cpu, else on the device's current stream.

    Kernels run with NumPy's floating-point warnings off (overflow, divide by zero, invalid):
    PyTorch gives inf/nan silently, and so do we. This covers host kernels and kernels an
    accelerator runs at launch (CuPy casts a Python scalar operand through NumPy and warns when
    it overflows the dtype); sim silences them where its queue runs kernels later.
    """
    token = _set_numpy_errors(_QUIET)
    try:
        if device.type == "cpu":
            kernel()
            return
        stream = _current_native_stream(device.index)
        _accelerator.launch(stream, kernel)
    finally:
        _reset_numpy_errors(token)
    if body_watchers:
        watcher = body_watchers.get(stream)
        if watcher is not None:
            watcher(kernel)


def _current_native_stream(index: int):
    global _current_native_stream
    from .state import current_native_stream

    _current_native_stream = current_native_stream
    return current_native_stream(index)


def named(name: str, kernel, **attrs):
    """Give a kernel a name (and attributes) for graph dumps; returns the kernel."""
    kernel.__name__ = name
    if attrs:
        kernel.tp_attrs = attrs
    return kernel


def current_native_stream(device: _device_cls):
    from . import state as _state

    return _state.current_native_stream(device.index)


def matmul_of(device: _device_cls):
    """The backend's ``matmul(a, b, out=None)``: its own if it has one (cuda: one that also works
    during stream capture, where CuPy refuses cuBLAS), else ``xp.matmul``."""
    backend = backend_of(device)
    return getattr(backend, "matmul", None) or backend.xp.matmul


def erf_for(xp):
    """The elementwise ``erf(x)`` of the backend whose namespace is ``xp``, if it has one (cuda:
    one fused kernel), else None (callers compose it from xp ops)."""
    return _hook_for(xp, "erf")


def fuse_hook(xp):
    """The ``fuse(name, function)`` hook of the backend whose namespace is ``xp`` (cuda: one
    kernel through ``cupy.fuse``), or None (the function runs op by op): ``_fusion.fused``."""
    return _hook_for(xp, "fuse")


def _hook_for(xp, name: str):
    """The optional method ``name`` of the accelerator backend whose namespace is ``xp``."""
    if _host is None:
        _backends()
    if _accelerator is not None and _accelerator.xp is xp:
        return getattr(_accelerator, name, None)
    return None
