"""CUDA streams and events: the native handles behind ``tensorplay.Stream`` and ``Event``.

A :class:`CudaStream` wraps a CuPy stream (so CuPy kernels can be pointed at it) and keeps the
raw handle twice: ``ptr`` (an int, for CuPy and the ``__cuda_stream__`` protocol) and ``handle``
(a prebuilt ``cudaStream_t``, which cuda-bindings converts fastest; the graph-launch hot path
passes it). Side streams are non-blocking: they never synchronize with the legacy default
stream, which is what stream capture needs.

The default stream of each device wraps the legacy NULL stream (``ptr == 0``), as PyTorch's
does. It has its own per-device CuPy stream object (CuPy's ``Stream.null`` singleton is shared
by all devices, so ``is`` could not tell device 0's default stream from device 1's).
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

import cupy
from cuda.bindings import runtime

from ._runtime import check, device_guard

__all__ = ["CudaStream", "CudaEvent", "new_stream", "default_stream", "stream_for"]

_known: "weakref.WeakValueDictionary[tuple[int, int], CudaStream]" = weakref.WeakValueDictionary()
_defaults: dict[int, "CudaStream"] = {}
_defaults_lock = threading.Lock()


class CudaStream:
    """A CUDA stream of one device.

    Attributes:
        device_index: the device it belongs to.
        priority: the priority it was created with (lower is higher priority; CUDA clamps).
        ptr: the ``cudaStream_t`` as an int (0 for the default stream).
        handle: the same as a ``cudaStream_t`` object, for cuda-bindings calls.
        cupy: the ``cupy.cuda.Stream`` that CuPy kernels use when this stream is current.
        is_default: True for the device's default (legacy NULL) stream; it cannot capture.
    """

    __slots__ = ("device_index", "priority", "ptr", "handle", "cupy", "is_default", "capture",
                 "body", "open_nodes", "closed", "__weakref__")

    def __init__(self, device_index: int, priority: int, cupy_stream, is_default: bool):
        self.device_index = device_index
        self.priority = priority
        self.cupy = cupy_stream
        self.ptr = int(cupy_stream.ptr)
        self.handle = runtime.cudaStream_t(self.ptr)
        self.is_default = is_default
        self.capture: Any = None      # the _graphs.Capture this stream began (origin streams only)
        self.body: Any = None         # the _graphs.Conditional whose body this stream records
        self.open_nodes: list[Any] = []     # conditionals begun on this stream and not yet ended
        self.closed = False      # a body stream after end_conditional
        _known[(device_index, self.ptr)] = self

    def __cuda_stream__(self):
        """The CUDA stream protocol: ``(version, cudaStream_t as int)``."""
        return (0, self.ptr)

    def __repr__(self) -> str:
        kind = "default" if self.is_default else ("body" if self.body is not None else "side")
        return f"CudaStream(cuda:{self.device_index}, 0x{self.ptr:x}, {kind})"


def new_stream(device_index: int, priority: int = 0) -> CudaStream:
    """A new non-blocking stream on ``device_index`` (created with that device current)."""
    with device_guard(device_index):
        try:
            cupy_stream = cupy.cuda.Stream(non_blocking=True, priority=priority)
        except TypeError:   # a CuPy without stream priorities
            cupy_stream = cupy.cuda.Stream(non_blocking=True)
    return CudaStream(device_index, priority, cupy_stream, False)


class _NullStreamHandle:
    """Speaks the CUDA stream protocol for the legacy NULL stream (for Stream.from_external)."""

    def __cuda_stream__(self):
        return (0, 0)


def _null_cupy_stream(device_index: int):
    """A CuPy stream object for the legacy NULL stream that belongs to ``device_index``."""
    with device_guard(device_index):
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        if from_external is not None:
            return from_external(_NullStreamHandle())   # takes the current device's id
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return cupy.cuda.ExternalStream(0, device_index)


def default_stream(device_index: int) -> CudaStream:
    """The device's default stream: one object per device for the process."""
    stream = _defaults.get(device_index)
    if stream is None:
        with _defaults_lock:
            stream = _defaults.get(device_index)
            if stream is None:
                stream = CudaStream(device_index, 0, _null_cupy_stream(device_index), True)
                _defaults[device_index] = stream
    return stream


def stream_for(device_index: int, ptr: int) -> CudaStream | None:
    """The live CudaStream of ``device_index`` whose handle is ``ptr``, if tensorplay made one."""
    return _known.get((device_index, ptr))


class CudaEvent:
    """A CUDA event of one device (``cudaEventDisableTiming`` unless ``enable_timing``)."""

    __slots__ = ("device_index", "enable_timing", "handle", "__weakref__")

    def __init__(self, device_index: int, enable_timing: bool):
        self.device_index = device_index
        self.enable_timing = bool(enable_timing)
        self.handle = None
        flags = runtime.cudaEventDefault if self.enable_timing else runtime.cudaEventDisableTiming
        with device_guard(device_index):
            self.handle = check(runtime.cudaEventCreateWithFlags(flags),
                                "cudaEventCreateWithFlags")

    def __del__(self):
        handle, self.handle = self.handle, None
        if handle is None:
            return
        try:
            runtime.cudaEventDestroy(handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the runtime may be gone
            pass

    def __repr__(self) -> str:
        timing = ", timing" if self.enable_timing else ""
        return f"CudaEvent(cuda:{self.device_index}{timing})"
