"""The seam between tensor ops and backends: where result memory comes from, where kernels go.

Every op is written once against an array namespace (``xp``: NumPy for ``cpu`` and ``sim``, CuPy
for ``cuda``). An op (1) checks its arguments and works out the result's shape and dtype,
(2) asks :func:`empty` for the result's memory, and (3) hands a zero-argument kernel that writes
the result to :func:`launch`. So:

- on ``cpu`` the memory is a fresh NumPy array and the kernel runs at once;
- on an accelerator the memory is a block of the caching allocator (``allocator.py``) taken on
  this thread's current native stream (``state.py``, one lookup; from the graph's pool while
  that stream captures), and the kernel goes to the backend: queued (sim), run on the bound
  CuPy stream (cuda), or recorded while capturing.

Because kernels may run later (sim) or again on every replay (graphs), a kernel must read its
inputs only when it runs and must close over arrays, never over values read from them. A launch
keeps no memory alive, as a GPU kernel's raw pointers do not: the tensors own it, and a tensor
freed while its kernels are still queued gives its block back at once for reuse in stream order
(sim queues a copy of the kernel over owner-less views, Note [sim queue ownership]; so a kernel
must not expect to see a name rebound after its launch).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import _dtype
from . import state as _state
from .allocator import allocators as _allocators, device_allocator
from .device import device as _device_cls
from ..backends import capability, hook
from .select import _selection

# NumPy's floating-point warnings are switched off around each host kernel (see launch). NumPy 2
# keeps that state in a context variable; setting it directly costs a fifth of entering
# ``np.errstate`` (which rebuilds the state object each time) on the eager hot path.
try:
    # private NumPy names, absent from its stubs
    from numpy._core._ufunc_config import (  # type: ignore[attr-defined]
        _extobj_contextvar, _make_extobj)

    _QUIET: Any = _make_extobj(all="ignore")
    _set_numpy_errors, _reset_numpy_errors = _extobj_contextvar.set, _extobj_contextvar.reset
except ImportError:   # a NumPy that moved it: the public, slower spelling
    _QUIET = {"all": "ignore"}

    def _set_numpy_errors(quiet):
        return np.seterr(**quiet)

    def _reset_numpy_errors(previous) -> None:
        np.seterr(**previous)


_thread = _state._local   # this thread's {device index: native stream}, read inline below
_supported: dict[int, frozenset] = {}
_strides: dict[tuple, tuple[int, ...]] = {}


def backend_of(device: _device_cls) -> Any:
    """The backend owning ``device``."""
    return _selection.host if device.type == "cpu" else _selection.accelerator


def xp_of(device: _device_cls) -> Any:
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
    """Byte strides of a C-contiguous array (cached: shapes repeat)."""
    key = (shape, itemsize)
    found = _strides.get(key)
    if found is None:
        strides = []
        step = itemsize
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        found = tuple(reversed(strides))
        remember(_strides, key, found, 4096)
    return found


#: the call signatures an op's table of kept decisions holds before it starts over (the
#: quick paths of the ops a model repeats: a model has few signatures, a sweep many)
SIGNATURES_KEPT = 1024


def remember(cache: dict, key, value, limit: int = SIGNATURES_KEPT) -> None:
    """Keep ``value`` under ``key`` in a per-signature cache (strides here; the op layer's
    plans), emptied first when it holds ``limit`` entries: signatures that never repeat must not
    grow it without bound."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value


def result_nbytes(shape: tuple[int, ...], dtype: _dtype.dtype) -> int:
    """The bytes :func:`empty` allocates for a result (at least one: a block per result)."""
    return math.prod(shape) * dtype.itemsize or 1


def empty(device: _device_cls, shape: tuple[int, ...], dtype: _dtype.dtype) -> Any:
    """A new C-contiguous ``xp`` array for a result on ``device`` (contents undefined): on an
    accelerator, a block of the caching allocator taken on this thread's current stream."""
    # The selection is made at import and a device names a present backend, so neither is None
    # here; the hot path checks nothing (hence the ignores).
    if device.type == "cpu":
        return _selection.host.empty(shape, dtype.numpy)  # type: ignore[union-attr]
    index = device.index
    try:
        stream = _thread.native[index]
    except KeyError:
        stream = _state.current_native_stream(index)
    nbytes = math.prod(shape) * dtype.itemsize or 1   # result_nbytes, inlined
    allocation = (_allocators.get(index) or device_allocator(index)).malloc(nbytes, stream)
    return _selection.accelerator.as_array(  # type: ignore[union-attr]
        index, allocation.ptr, nbytes, dtype.numpy, shape, None, allocation)


#: native stream -> ``watcher(kernel)``, called after each launch on that stream: a capture
#: keeps its inputs (Note [captured inputs] in ``accelerator/graphs.py``), an open while body
#: notes what its kernels write (Note [write records] in ``_runtime/writes.py``), ``tp.compile``
#: records its warm-up (``_tensor/rewrite.py``); empty outside these.
launch_watchers: dict = {}


def launch(device: _device_cls, kernel: Callable[[], None]) -> None:
    """Run ``kernel`` for ``device``: at once on cpu, else on this thread's current stream.

    Kernels run with NumPy's floating-point warnings off (overflow, divide by zero, invalid):
    PyTorch gives inf/nan silently, and so do we. This covers host kernels and kernels an
    accelerator runs at launch (CuPy casts a Python scalar operand through NumPy and warns when
    it overflows the dtype); sim silences them where its queue runs kernels later.
    """
    token = _set_numpy_errors(_QUIET)
    try:
        if device.type == "cpu":
            kernel()
        else:
            launch_native(device, kernel)
    finally:
        _reset_numpy_errors(token)


def launch_native(device: _device_cls, kernel: Callable[[], None]) -> None:
    """:func:`launch` on an accelerator ``device`` for a kernel that touches no NumPy (a
    backend's own launcher over arrays, as the elementwise plans' ``fast`` kernels): no warning
    state to set, so none is set (the eager hot path)."""
    index = device.index
    try:
        stream = _thread.native[index]
    except KeyError:
        stream = _state.current_native_stream(index)
    _selection.accelerator.launch(stream, kernel)  # type: ignore[union-attr]  # as in empty
    if launch_watchers:
        watcher = launch_watchers.get(stream)
        if watcher is not None:
            watcher(kernel)


def call_into_new(device: _device_cls, shape: tuple[int, ...], nbytes: int, numpy_dtype: Any,
                  fn: Callable[..., None], *arrays: Any) -> Any:
    """:func:`empty` and then :func:`launch_native` of ``functools.partial(fn, *arrays, out)``
    in one frame, without making the partial, through the backend's ``launch_call``; returns
    ``out``. ``nbytes`` is :func:`result_nbytes` of the shape and dtype (a caller's plan keeps
    it). The caller checks that the backend offers it (:func:`launches_by_call`) and that
    ``launch_watchers`` is empty (a watcher is handed the kernel object)."""
    index = device.index
    try:
        stream = _thread.native[index]
    except KeyError:
        stream = _state.current_native_stream(index)
    allocation = (_allocators.get(index) or device_allocator(index)).malloc(nbytes, stream)
    backend = _selection.accelerator
    out = backend.as_array(  # type: ignore[union-attr]  # as in empty
        index, allocation.ptr, nbytes, numpy_dtype, shape, None, allocation)
    backend.launch_call(stream, fn, *arrays, out)  # type: ignore[union-attr]
    return out


def launches_by_call(device: _device_cls) -> bool:
    """Whether ``device``'s backend runs a launch at once through ``launch_call`` (cuda)."""
    return device.type != "cpu" and hook(backend_of(device), "launch_call") is not None


def named(name: str, kernel, **attrs):
    """Give a kernel a name (and attributes) for graph dumps; returns the kernel."""
    kernel.__name__ = name
    if attrs:
        kernel.tp_attrs = attrs
    return kernel


def current_native_stream(device: _device_cls) -> Any:
    """This thread's current native stream on an accelerator ``device``."""
    return _state.current_native_stream(device.index)


def matmul_of(device: _device_cls) -> Callable:
    """The backend's ``matmul(a, b, out=None, precision="highest")``: its own if it has one
    (cuda: cuBLASLt, which also works during stream capture), else ``xp.matmul``, float16 and
    bfloat16 computed in float32 and rounded once (as PyTorch's products accumulate)."""
    backend = backend_of(device)
    own = hook(backend, "matmul")
    if own is not None:
        return own
    xp_matmul = backend.xp.matmul

    def matmul(a, b, out=None, precision: str = "highest"):
        if a.dtype in _HALF_NUMPY:
            wide = xp_matmul(a.astype(np.float32), b.astype(np.float32))
            if out is None:
                return wide.astype(a.dtype)
            out[...] = wide
            return out
        return xp_matmul(a, b, out=out)
    matmul.tp_arguments_only = True  # type: ignore[attr-defined]  # Note [write records]
    return matmul


_HALF_NUMPY = frozenset({_dtype.float16.numpy, _dtype.bfloat16.numpy})


def matmul_epilogue_of(device: _device_cls) -> tuple[Callable | None, frozenset]:
    """The backend's ``matmul_epilogue`` hook (None when it has none) and the activations it
    fuses (the capability ``matmul_epilogues``; empty without the hook)."""
    backend = backend_of(device)
    own = hook(backend, "matmul_epilogue")
    return own, (capability(backend, "matmul_epilogues") if own is not None else frozenset())


def matrix_engine(device: _device_cls) -> str:
    """What computes ``device``'s matrix products, in words (``python -m tensorplay info``)."""
    return capability(backend_of(device), "matrix_engine")


def elementwise_hook(device: _device_cls) -> Callable | None:
    """The backend's ``elementwise_kernel(op, compute, kinds, out)`` (cuda: cached raw kernels
    that launch cheaper than CuPy's ufuncs), or None (the ops call ``xp`` ufuncs)."""
    return hook(backend_of(device), "elementwise_kernel")


def elementwise_program_hook(device: _device_cls) -> Callable | None:
    """The backend's ``elementwise_program(steps, compute, kinds, out)`` (cuda: one raw kernel
    per chain of elementwise ops), or None."""
    return hook(backend_of(device), "elementwise_program")


def sum_hook(device: _device_cls) -> Callable | None:
    """The backend's ``sum_kernel(compute, out)`` for small whole-tensor sums in one launch
    (cuda: one thread block), or None (``xp.sum`` runs). The hook has ``limit``: the largest
    element count it takes."""
    return hook(backend_of(device), "sum_kernel")


def erf_for(xp) -> Callable | None:
    """The elementwise ``erf(x)`` of the backend whose namespace is ``xp``, if it has one (cuda:
    one fused kernel), else None (callers compose it from xp ops)."""
    return _hook_for(xp, "erf")


def fuse_hook(xp) -> Callable | None:
    """The ``fuse(name, function)`` hook of the backend whose namespace is ``xp`` (cuda: one
    kernel through ``cupy.fuse``), or None (the function runs op by op): ``_fusion.fused``."""
    return _hook_for(xp, "fuse")


def accelerator_hook(name: str) -> Callable | None:
    """The optional hook ``name`` of the selected accelerator backend, or None (none selected,
    or it has no such hook)."""
    accelerator = _selection.accelerator
    return None if accelerator is None else hook(accelerator, name)


def _hook_for(xp, name: str) -> Callable | None:
    """The optional method ``name`` of the accelerator backend whose namespace is ``xp``."""
    accelerator = _selection.accelerator
    if accelerator is not None and accelerator.xp is xp:
        return hook(accelerator, name)
    return None


def dlpack_device_types(device: _device_cls) -> frozenset:
    """The DLPack device types ``device``'s backend can export to and import from (empty for
    sim: its memory is not visible to other libraries)."""
    return capability(backend_of(device), "dlpack_device_types")
