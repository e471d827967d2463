"""Per-thread current device and current stream, and the capture-safety guard.

Nothing here is public; ``accelerator/__init__.py`` and the tensor layer build on it.

Note [capture-unsafe calls]
---------------------------
CUDA decides whether a call that waits for the device is allowed during a capture by the calling
thread and by the modes of the captures in flight: a call from thread T is prohibited when T has
its own capture whose mode is not ``relaxed``, or when any other thread has a ``global`` capture.
tensorplay applies that rule here, before any backend is asked to wait, so that sim and cuda fail
the same way with the same message: the call raises ``RuntimeError`` naming the call and the mode,
and every capture that prohibited it is invalidated (its ``capture_end`` raises). Independently of
the mode, no call may wait on a stream that is itself capturing (the backends refuse that too).
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
        from ._streams import default_stream

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


class CaptureRecord:
    """One capture in flight: which stream, thread and mode, and whether it was invalidated."""

    __slots__ = ("native_stream", "body_streams", "device_index", "thread_id", "mode",
                 "invalidated_by")

    def __init__(self, native_stream, device_index: int, mode: str):
        self.native_stream = native_stream
        self.body_streams: list = []  # open conditional bodies record into this capture too
        self.device_index = device_index
        self.thread_id = threading.get_ident()
        self.mode = mode
        self.invalidated_by: str | None = None


_captures: list[CaptureRecord] = []
_captures_lock = threading.Lock()


def register_capture(record: CaptureRecord) -> None:
    with _captures_lock:
        _captures.append(record)


def unregister_capture(record: CaptureRecord) -> None:
    with _captures_lock:
        if record in _captures:
            _captures.remove(record)


def active_captures() -> list[CaptureRecord]:
    with _captures_lock:
        return list(_captures)


def _records_into(record: CaptureRecord, native_stream) -> bool:
    if native_stream is None:
        return False
    return record.native_stream is native_stream or any(
        body is native_stream for body in record.body_streams)


def check_capture_safe(call: str, native_stream=None) -> None:
    """Raise if ``call`` (which waits for the device) is prohibited now; see Note
    [capture-unsafe calls]. ``native_stream``: the stream the call would wait on, if any."""
    if not _captures:
        return
    me = threading.get_ident()
    with _captures_lock:
        prohibiting = [c for c in _captures
                       if c.invalidated_by is None and (
                           (c.thread_id == me and c.mode != "relaxed")
                           or (c.thread_id != me and c.mode == "global")
                           or _records_into(c, native_stream))]
        for record in prohibiting:
            record.invalidated_by = call
    if prohibiting:
        first = prohibiting[0]
        backend = accelerator_backend()
        where = f"{backend.device_type}:{first.device_index}"
        if _records_into(first, native_stream):
            why = (f"it would wait on the capturing stream itself, which no mode allows "
                   f"(capture_error_mode={first.mode!r})")
        elif first.thread_id == me:
            why = f"capture_error_mode={first.mode!r} forbids it in the capturing thread"
        else:
            why = (f"capture_error_mode={first.mode!r} forbids it in every thread while "
                   f"another thread captures")
        raise RuntimeError(f"{call} waits for the device, which is not allowed during the graph "
                           f"capture on {where}: {why}; the capture is invalidated (capture_end() "
                           f"will raise). Move the call out of the captured region, or use "
                           f"capture_error_mode='relaxed' for calls from other threads.")
