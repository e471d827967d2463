"""Every capture rule, once: modes, the streams a capture may begin on, which thread may end one,
conditional bodies and their predicates, which calls that wait for the device a capture forbids,
and the registry of captures in flight. ``Graph`` calls these before it asks a backend to record;
backends (floor 1, below this module) do not re-check: they record, replay and report what their
native runtime refuses.

Rules (each raises before anything changes, so a refused call leaves the capture as it was):

- **Modes** (:func:`check_mode`): "global", "thread_local" or "relaxed" (ValueError otherwise).
- **Streams** (:func:`check_capture_stream`): never a device's default stream (capture needs a
  side stream; ``with g:`` provides one), and never a stream that already captures (captures do
  not nest on one stream).
- **Ending thread** (:meth:`CaptureRecord.check_owner_thread`): Note [capture owner thread].
- **Conditional bodies** (:func:`check_body_open`, :func:`check_bodies_closed`): a body is
  refreshed or closed only while one is open; a capture ends only once every body is closed.
  Open bodies record into their capture (``CaptureRecord.body_streams``), so a wait on one is a
  wait on the capture.
- **Predicates** (:func:`check_predicate`): a one-element bool tensor on the capturing device,
  given inside an open capture.
- **Capture-unsafe calls** (:func:`check_capture_safe`, :func:`wait_for_device`): Note
  [capture-unsafe calls].

Note [capture-unsafe calls]
---------------------------
CUDA decides whether a call that waits for the device is allowed during a capture by the calling
thread and by the modes of the captures in flight: a call from thread T is prohibited when T has
its own capture whose mode is not ``relaxed``, or when any other thread has a ``global`` capture.
tensorplay applies that rule here, before any backend is asked to wait, so that sim and cuda fail
the same way with the same message: the call raises ``RuntimeError`` naming the call and the mode,
and every capture that prohibited it is invalidated (its ``capture_end`` raises). Independently of
the mode, no call may wait on a stream that is itself capturing (cuda's runtime refuses that
too; sim relies on this rule), and a device-wide wait (``synchronize()``, ``empty_cache()``)
waits on every stream of the device, capturing ones included.

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

from .. import _dtype
from .select import accelerator_backend
from .writes import is_tensor

#: The capture modes, as PyTorch's ``capture_error_mode`` spells them (CUDA's
#: cudaStreamCaptureMode); backends map each to their native mode.
MODES = ("global", "thread_local", "relaxed")


def _where(index: int) -> str:
    backend = accelerator_backend()
    assert backend is not None   # capture rules run only with an accelerator
    return f"{backend.device_type}:{index}"


def check_mode(mode) -> str:
    """``mode`` if it is a capture mode, else ValueError naming the valid ones."""
    if mode not in MODES:
        raise ValueError(f"capture_error_mode must be one of {', '.join(map(repr, MODES))}, "
                         f"got {mode!r}")
    return mode


def check_not_capturing(call: str, native_stream, index: int) -> None:
    """RuntimeError if ``native_stream`` (on device ``index``) already captures: captures do not
    nest on one stream."""
    backend = accelerator_backend()
    assert backend is not None   # a native stream exists only with an accelerator
    if backend.is_capturing(native_stream):
        raise RuntimeError(
            f"{call}: nested capture on one stream is not supported: this thread's current "
            f"stream on {_where(index)} is already capturing into another graph (an enclosing "
            f"`with g:` or capture_begin()). End that capture first and capture this graph "
            f"after it, or record this work into the enclosing graph; the enclosing capture "
            f"is unaffected")


def check_capture_stream(call: str, native_stream, index: int) -> None:
    """RuntimeError unless a capture may begin on ``native_stream`` (device ``index``): not a
    default stream, not already capturing."""
    if getattr(native_stream, "is_default", False):
        raise RuntimeError(f"cannot capture on the default stream of {_where(index)}; capture "
                           f"needs a side stream (with Graph(): provides one)")
    check_not_capturing(call, native_stream, index)


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

    def check_owner_thread(self, call: str) -> None:
        """RuntimeError if only another thread may end this capture (Note [capture owner
        thread]); nothing is touched, so the capture stays open."""
        if self.owned_elsewhere():
            raise RuntimeError(
                f"{call}: this graph's capture was begun on thread {self.thread_name!r} with "
                f"capture_error_mode={self.mode!r}, and only that thread may end it (as in "
                f"CUDA); it is still capturing, untouched. Call capture_end() (or reset() to "
                f"discard it) on that thread, or capture with capture_error_mode='relaxed' to "
                f"end it from another thread")


def check_body_open(record: CaptureRecord, call: str) -> None:
    """RuntimeError unless a conditional body of ``record`` is open (a refresh or an end needs
    one: each begin_capture_to_if_node/while_node is closed by one
    end_capture_to_conditional_node)."""
    if not record.body_streams:
        raise RuntimeError(f"{call}: no conditional node is open (unbalanced with "
                           f"begin_capture_to_if_node/while_node)")


def check_bodies_closed(record: CaptureRecord, call: str) -> None:
    """RuntimeError while a conditional body of ``record`` is open: a capture ends only with
    every body closed."""
    if record.body_streams:
        raise RuntimeError(f"{call}: {len(record.body_streams)} conditional body(ies) still "
                           f"open; call end_capture_to_conditional_node() first")


def check_predicate(call: str, record: CaptureRecord | None, predicate, index: bool = False):
    """The ``xp`` array of ``predicate`` if it may gate a conditional node of ``record``: a
    one-element bool tensor (with ``index``: int64, a switch node's index) on the capturing
    device, inside an open capture.

    Raises:
        RuntimeError: no capture is open. TypeError: not a bool (int64) Tensor. ValueError: not
            one element, or not on the capturing device.
    """
    what, dtype = ("index", _dtype.int64) if index else ("predicate", _dtype.bool)
    if record is None:
        raise RuntimeError(f"{call}: only inside an open capture (capture_begin or with g:)")
    if not is_tensor(predicate):
        raise TypeError(f"{call}: the {what} must be a one-element {dtype.name} Tensor, got "
                        f"{type(predicate).__name__}")
    if predicate.dtype is not dtype:
        raise TypeError(f"{call}: the {what} must be a {dtype.name} tensor, got "
                        f"{predicate.dtype.name}" + (" (convert it with .long())" if index
                                                     else ""))
    if predicate.numel() != 1:
        raise ValueError(f"{call}: the {what} must have exactly one element, got shape "
                         f"{predicate.shape}")
    device = predicate.device
    if device.type == "cpu" or device.index != record.device_index:
        raise ValueError(f"{call}: the {what} must be on the capturing device "
                         f"{_where(record.device_index)}, got {device}")
    return predicate._data


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
        where = _where(first.device_index)
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


def wait_for_device(index: int, call: str = "synchronize()") -> None:
    """Wait for every stream of device ``index``, unless a capture forbids it (Note
    [capture-unsafe calls]: a device-wide wait includes any capturing stream of the device)."""
    check_capture_safe(call, devices=(index,))
    backend = accelerator_backend()
    assert backend is not None   # ``index`` was resolved on the accelerator
    backend.synchronize_device(index)
