"""Every capture rule, once: the captures in flight, which thread may end one, and which calls
that wait for the device a capture forbids. Graph, sim and cuda call these; backends do not
re-check.

Note [capture-unsafe calls]
---------------------------
CUDA decides whether a call that waits for the device is allowed during a capture by the calling
thread and by the modes of the captures in flight: a call from thread T is prohibited when T has
its own capture whose mode is not ``relaxed``, or when any other thread has a ``global`` capture.
tensorplay applies that rule here, before any backend is asked to wait, so that sim and cuda fail
the same way with the same message: the call raises ``RuntimeError`` naming the call and the mode,
and every capture that prohibited it is invalidated (its ``capture_end`` raises). Independently of
the mode, no call may wait on a stream that is itself capturing (the backends refuse that too),
and a device-wide wait (``synchronize()``, ``empty_cache()``) waits on every stream of the device,
capturing ones included.

Note [capture owner thread]
---------------------------
CUDA lets only the thread that began a "global" or "thread_local" capture end it
(cudaErrorStreamCaptureWrongThread); a "relaxed" capture may end on any thread. ``Graph`` checks
this before it touches anything, so a refused ``capture_end``/``reset`` leaves the capture open
and intact and says which thread must end it. If that thread exits with the capture still open,
nobody could end it any more, and the device would stay blocked (a "global" capture forbids
device waits in every thread). So each thread that begins a capture holds a
:class:`_ThreadExitHook` in a thread-local: CPython drops a thread's locals on that very thread as
it exits, before ``join()`` returns, and the hook discards every non-relaxed capture the thread
left open, from the one thread CUDA accepts.
"""

from __future__ import annotations

import contextlib
import threading

from ..backends import accelerator_backend


class CaptureRecord:
    """One capture in flight: which stream, thread and mode, and whether it was invalidated.

    ``on_thread_exit``: a weak reference to the callable that discards the capture if its
    thread exits with it open (Note [capture owner thread]); None for "relaxed" captures, which
    another thread may still end.
    """

    __slots__ = ("native_stream", "body_streams", "device_index", "thread_id", "thread_name",
                 "mode", "invalidated_by", "on_thread_exit")

    def __init__(self, native_stream, device_index: int, mode: str, on_thread_exit=None):
        self.native_stream = native_stream
        self.body_streams: list = []  # open conditional bodies record into this capture too
        self.device_index = device_index
        self.thread_id = threading.get_ident()
        self.thread_name = threading.current_thread().name
        self.mode = mode
        self.invalidated_by: str | None = None
        self.on_thread_exit = on_thread_exit

    def owned_elsewhere(self) -> bool:
        """Whether only another thread may end this capture (Note [capture owner thread])."""
        return self.mode != "relaxed" and self.thread_id != threading.get_ident()


_captures: list[CaptureRecord] = []
_captures_lock = threading.Lock()
_exit_hooks = threading.local()


class _ThreadExitHook:
    """Held in a thread-local of a thread that began a capture; see Note [capture owner
    thread]. ``__del__`` runs on that thread as it exits."""

    __slots__ = ("thread_id",)

    def __init__(self):
        self.thread_id = threading.get_ident()

    def __del__(self):
        if not _captures:   # nothing open (or the interpreter is shutting down)
            return
        for record in active_captures():
            if record.thread_id != self.thread_id or record.on_thread_exit is None:
                continue
            discard = record.on_thread_exit()
            if discard is not None:
                with contextlib.suppress(Exception):   # a dying thread has no caller to tell
                    discard()


def register_capture(record: CaptureRecord) -> None:
    if getattr(_exit_hooks, "hook", None) is None:
        _exit_hooks.hook = _ThreadExitHook()
    with _captures_lock:
        _captures.append(record)


def unregister_capture(record: CaptureRecord) -> None:
    with _captures_lock:
        if record in _captures:
            _captures.remove(record)


def active_captures() -> list[CaptureRecord]:
    with _captures_lock:
        return list(_captures)


def _records_into(record: CaptureRecord, native_stream, devices) -> bool:
    if devices is not None and record.device_index in devices:
        return True
    if native_stream is None:
        return False
    return record.native_stream is native_stream or any(
        body is native_stream for body in record.body_streams)


def _mode_forbids(record: CaptureRecord, me: int) -> bool:
    """Whether ``record``'s mode forbids waiting in thread ``me`` (Note [capture-unsafe
    calls])."""
    if record.thread_id == me:
        return record.mode != "relaxed"
    return record.mode == "global"


def check_capture_safe(call: str, native_stream=None, devices=None) -> None:
    """Raise if ``call`` (which waits for the device) is prohibited now; see Note
    [capture-unsafe calls]. ``native_stream``: the stream the call would wait on, if any;
    ``devices``: the device indices whose every stream a device-wide wait waits on."""
    if not _captures:
        return
    me = threading.get_ident()
    with _captures_lock:
        prohibiting = [c for c in _captures
                       if c.invalidated_by is None and (
                           _mode_forbids(c, me) or _records_into(c, native_stream, devices))]
        for record in prohibiting:
            record.invalidated_by = call
    if prohibiting:
        first = prohibiting[0]
        backend = accelerator_backend()
        where = f"{backend.device_type}:{first.device_index}"
        advice = ("Move the call out of the captured region, or use "
                  "capture_error_mode='relaxed' for calls from other threads.")
        if _records_into(first, native_stream, None):
            why = (f"it would wait on the capturing stream itself, which no mode allows "
                   f"(capture_error_mode={first.mode!r})")
            advice = "Move the call out of the captured region."
        elif not _mode_forbids(first, me):
            why = (f"it waits for every stream of the device, the capturing one included, "
                   f"which no mode allows (capture_error_mode={first.mode!r})")
            advice = "Make the call after capture_end(), or wait on one stream instead."
        elif first.thread_id == me:
            why = f"capture_error_mode={first.mode!r} forbids it in the capturing thread"
        else:
            why = (f"capture_error_mode={first.mode!r} forbids it in every thread while "
                   f"another thread captures")
        raise RuntimeError(f"{call} waits for the device, which is not allowed during the graph "
                           f"capture on {where}: {why}; the capture is invalidated (capture_end() "
                           f"will raise). {advice}")
