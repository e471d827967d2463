"""Pointing CuPy at tensorplay: its allocator hook and its current stream.

Allocations. ``cupy.cuda.set_allocator(hook)`` routes every CuPy allocation (a result CuPy makes
itself, and the temporaries of reductions, matmul, sorting ...) into tensorplay's caching
allocator, so that ``memory_allocated()`` counts them and, while a stream captures, they come
from the graph's pool (Note [graph pool lifetime] in ``tensorplay/_runtime/allocator.py``). The
runtime hands that allocator in (:func:`use_allocator`, at selection): a backend never imports
the floors above it. The hook wraps the ``Allocation`` it gets in ``UnownedMemory`` with the
Allocation as owner: the block returns to the cache when the last CuPy array over it dies. It is
installed at the backend's first use, never at import (importing tensorplay must not change CuPy
for other code in the process).

Streams. tensorplay calls ``backend.set_current_stream(stream)`` on every change of the current
stream; this module makes the stream's CuPy stream current for its device in this thread and
remembers which CudaStream it bound per (thread, device). The hook maps CuPy's current stream
back to that CudaStream, so the stream key the allocator sees is the same object tensorplay
passes for its own tensors. A CuPy stream tensorplay does not know is keyed by its ``ptr``.
"""

from __future__ import annotations

import threading

import cupy

from . import _streams
from ._runtime import check, runtime

__all__ = ["install", "bind", "make_current", "stream_key", "hook", "use_allocator"]

_local = threading.local()
_installed = False
_install_lock = threading.Lock()
_device_allocator = None

_get_current_stream = cupy.cuda.get_current_stream
_get_device = cupy.cuda.runtime.getDevice
_set_device = cupy.cuda.runtime.setDevice
_MemoryPointer = cupy.cuda.MemoryPointer
_UnownedMemory = cupy.cuda.UnownedMemory


def _bound() -> dict:
    bound = getattr(_local, "bound", None)
    if bound is None:
        bound = _local.bound = {}
    return bound


def use_allocator(allocator_of) -> None:
    """Make :func:`hook` allocate through ``allocator_of(index).malloc(nbytes, stream_key)``
    (the runtime's ``device_allocator``; handed in once, at selection)."""
    global _device_allocator
    _device_allocator = allocator_of


def install() -> None:
    """Route CuPy's allocations through tensorplay's caching allocator (idempotent)."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if not _installed:
            cupy.cuda.set_allocator(hook)
            _installed = True


def stream_key(device_index: int):
    """The stream key for a CuPy allocation on ``device_index`` made now in this thread."""
    current = _get_current_stream(device_index)
    stream = _bound().get(device_index)
    if stream is not None and stream.cupy is current:
        return stream
    known = _streams.stream_for(device_index, int(current.ptr))
    return known if known is not None else int(current.ptr)


def hook(nbytes: int):
    """CuPy's allocator: a block of tensorplay's allocator on CuPy's current device."""
    device_index = _get_device()
    if nbytes == 0:
        return _MemoryPointer(_UnownedMemory(0, 0, None, device_index), 0)
    if _device_allocator is None:
        raise RuntimeError("the cuda backend's CuPy allocator hook was installed before the "
                           "runtime handed in its allocator (CudaBackend.use_allocator)")
    allocation = _device_allocator(device_index).malloc(nbytes, stream_key(device_index))
    memory = _UnownedMemory(allocation.ptr, nbytes, allocation, device_index)
    return _MemoryPointer(memory, 0)


def bind(stream) -> None:
    """Make ``stream``'s device current and its CuPy stream current there (this thread).

    The device stays switched afterwards: the next launch for another device switches again.
    This is the slow path of ``CudaBackend.launch``; the fast path is one ``is`` comparison.
    """
    if not _installed:
        install()
    relax_this_thread()
    index = stream.device_index
    if _get_device() != index:
        _set_device(index)
    stream.cupy.use()
    _bound()[index] = stream


_relaxed = threading.local()


def relax_this_thread() -> None:
    """Put this thread's CUDA capture interaction mode to relaxed, once and for good.

    Note [capture modes are enforced above the driver]: tensorplay enforces capture_error_mode
    itself, identically on sim and cuda (Note [capture-unsafe calls] in _runtime/capture.py).
    Left at CUDA's default, a thread's harmless first-use work — a kernel module load, a
    cudaMalloc for a new segment — would invalidate another thread's global capture behind
    tensorplay's back. Waits on a capturing stream stay illegal for CUDA in every mode, and the
    layer above refuses them before they reach the driver.
    """
    if getattr(_relaxed, "done", False):
        return
    check(runtime.cudaThreadExchangeStreamCaptureMode(
        runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed),
        "cudaThreadExchangeStreamCaptureMode")
    _relaxed.done = True


def make_current(stream) -> None:
    """Make ``stream`` CuPy's current stream for its device in this thread, leaving the current
    device as it was (``backend.set_current_stream``)."""
    if not _installed:
        install()
    relax_this_thread()
    index = stream.device_index
    previous = _get_device()
    if previous == index:
        stream.cupy.use()
    else:
        _set_device(index)
        try:
            stream.cupy.use()
        finally:
            _set_device(previous)
    _bound()[index] = stream
