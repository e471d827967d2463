"""Per-thread current device and current stream.

Nothing here is public; ``accelerator/__init__.py`` and the tensor layer build on it.
"""

from __future__ import annotations

import threading

from ..backends import accelerator_backend

_local = threading.local()


def current_device_index() -> int:
    """Index of this thread's current accelerator device (0 until set)."""
    return getattr(_local, "device_index", 0)


def set_current_device_index(index: int) -> None:
    _local.device_index = index
    backend = accelerator_backend()
    if backend is not None:
        backend.set_device(index)


def _streams_of_thread() -> dict:
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    return streams


def current_stream(index: int):
    """This thread's current public Stream on device ``index`` (the default stream until set)."""
    stream = _streams_of_thread().get(index)
    if stream is None:
        from ..accelerator._streams import default_stream

        stream = default_stream(index)
    return stream


def current_native_stream(index: int):
    """The native handle of :func:`current_stream` (hot path of every accelerator op)."""
    try:
        return _local.streams[index]._native
    except (AttributeError, KeyError):   # no stream set on this thread (for this device) yet
        return current_stream(index)._native


def set_current_stream(stream) -> None:
    """Make a public Stream current on its device for this thread, and bind the backend to it."""
    _streams_of_thread()[stream.device_index] = stream
    accelerator_backend().set_current_stream(stream._native)
