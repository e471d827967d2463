"""Public streams and events: ``tensorplay.Stream`` and ``tensorplay.Event``.

Work on one stream runs in order; work on different streams is unordered unless an event orders
it (``b.wait_stream(a)`` or ``e = a.record_event(); b.wait_event(e)``). Every device has a
default stream, current until ``with stream:`` or ``set_stream`` makes another current in this
thread. Capture needs a non-default stream; ``with Graph():`` provides one.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .._runtime import device as _device
from .._runtime.select import require_accelerator

if TYPE_CHECKING:
    from ..backends import NativeEvent
from .._runtime import capture as _capture, state as _state

__all__ = ["Stream", "Event"]

_defaults: dict[int, "Stream"] = {}
_defaults_lock = threading.Lock()


def wrong_kind(call: str, expected: str, value) -> TypeError:
    """The TypeError for an argument of the wrong kind: what was expected, what was given."""
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return TypeError(f"{call} expects {expected}, got {type(value).__name__} ({shown})")


def default_stream(index: int) -> "Stream":
    """The public default Stream of device ``index`` (one object per device)."""
    stream = _defaults.get(index)
    if stream is None:
        with _defaults_lock:
            stream = _defaults.get(index)
            if stream is None:
                stream = Stream._wrap(_state.default_native_stream(index), index)
                _defaults[index] = stream
    return stream


#: native stream -> a weak reference to its public Stream, for every Stream made here (default
#: ones included; an entry goes when its Stream does)
_public: dict[Any, weakref.ref] = {}
_thread = _state._local   # this thread's {device index: native stream}, read inline below


def _register(native, stream: "Stream") -> None:
    def forget(ref, key=native) -> None:
        if _public.get(key) is ref:
            del _public[key]
    _public[native] = weakref.ref(stream, forget)


def current_stream(index: int) -> "Stream":
    """This thread's current public Stream on device ``index``: the one over its native stream
    while that Stream lives, else a new one (``Graph.replay()``'s lookup: one frame)."""
    native = _thread.native.get(index)
    if native is None:
        native = _state.current_native_stream(index)
    ref = _public.get(native)
    stream = None if ref is None else ref()
    return Stream._wrap(native, index) if stream is None else stream


def set_current_stream(stream: "Stream") -> None:
    """Make a public Stream current on its device for this thread."""
    _state.set_current_native_stream(stream.device_index, stream._native)


class Stream:
    """An ordered queue of work on one accelerator device.

    Args:
        device: the device (any spelling; None = the current device).
        priority: lower numbers are higher priority where the backend supports priorities.

    ``with stream:`` makes it current on its device for this thread and restores the previous
    stream on exit. Libraries that speak the ``__cuda_stream__`` protocol can run on it.
    """

    def __init__(self, device=None, priority: int = 0):
        backend = require_accelerator()
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"Stream priority must be an int, got {priority!r}")
        self.device_index = _device.resolve_accelerator_index(device)
        self.priority = priority
        self._native = backend.create_stream(self.device_index, priority)
        self._handle = backend.stream_handle(self._native)
        self._previous: list = []
        _register(self._native, self)

    @classmethod
    def _wrap(cls, native, index: int) -> "Stream":
        stream = cls.__new__(cls)
        stream.device_index = index
        stream.priority = 0
        stream._native = native
        stream._handle = require_accelerator().stream_handle(native)
        stream._previous = []
        _register(native, stream)
        return stream

    @property
    def device(self):
        """The :class:`tensorplay.device` this stream belongs to."""
        return _device._canonical(require_accelerator().device_type, self.device_index)

    def query(self) -> bool:
        """Whether all work queued on this stream has completed."""
        return require_accelerator().stream_query(self._native)

    def synchronize(self) -> None:
        """Wait for all work queued on this stream.

        Raises:
            RuntimeError: during a capture that forbids waiting (Note [capture-unsafe calls]).
        """
        _capture.check_capture_safe("Stream.synchronize()", self._native)
        require_accelerator().stream_synchronize(self._native)

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new one if None) at the current end of this stream; return it.

        Raises:
            TypeError: ``event`` is neither an Event nor None.
        """
        if event is None:
            event = Event()
        elif not isinstance(event, Event):
            raise wrong_kind("Stream.record_event()", "a tensorplay Event or None", event)
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        """Make work queued later on this stream wait for ``event``.

        Raises:
            TypeError: ``event`` is not an Event.
        """
        if not isinstance(event, Event):
            raise wrong_kind("Stream.wait_event()", "a tensorplay Event", event)
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        """Make work queued later on this stream wait for everything queued on ``stream``.

        Raises:
            TypeError: ``stream`` is not a Stream.
        """
        if not isinstance(stream, Stream):
            raise wrong_kind("Stream.wait_stream()", "a tensorplay Stream", stream)
        self.wait_event(stream.record_event())

    def __enter__(self) -> "Stream":
        self._previous.append(current_stream(self.device_index))
        set_current_stream(self)
        return self

    def __exit__(self, *exc) -> None:
        set_current_stream(self._previous.pop())

    def __cuda_stream__(self):
        """The CUDA stream protocol: ``(0, stream pointer)`` (CUDA streams only)."""
        ptr = getattr(self._native, "ptr", None)
        if ptr is None:
            raise TypeError(f"__cuda_stream__ exists only for CUDA streams, not {self.device}")
        return (0, ptr)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other._native is self._native

    def __hash__(self) -> int:
        return id(self._native)

    def __repr__(self) -> str:
        kind = "default " if self._native.is_default else ""
        return f"<tensorplay.Stream {kind}on {self.device}>"


class Event:
    """A marker in a stream's work, for ordering streams and timing.

    Args:
        enable_timing: record timestamps so that :meth:`elapsed_time` works.

    The native event is created on the device of the first stream it is recorded on.
    """

    def __init__(self, enable_timing: bool = False):
        self.enable_timing = bool(enable_timing)
        self._native: NativeEvent | None = None
        self.device_index: int | None = None

    def _ensure(self, index: int):
        if self._native is None:
            self._native = require_accelerator().create_event(index, self.enable_timing)
            self.device_index = index
        elif index != self.device_index:
            raise ValueError(f"Event was first recorded on device {self.device_index} and cannot "
                             f"be recorded on device {index}")
        return self._native

    def record(self, stream: Stream | None = None) -> None:
        """Mark the current end of ``stream`` (the current stream if None).

        Raises:
            TypeError: ``stream`` is neither a Stream nor None.
        """
        stream = _stream_or_current(stream, "Event.record()")
        require_accelerator().event_record(self._ensure(stream.device_index), stream._native)

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (current if None) wait for this event. A never-recorded
        event is already complete, as in CUDA.

        Raises:
            TypeError: ``stream`` is neither a Stream nor None.
        """
        stream = _stream_or_current(stream, "Event.wait()")
        if self._native is None:
            return
        require_accelerator().stream_wait_event(stream._native, self._native)

    def query(self) -> bool:
        """Whether the work before the recorded position has completed."""
        if self._native is None:
            return True
        return require_accelerator().event_query(self._native)

    def synchronize(self) -> None:
        """Wait for the work before the recorded position.

        Raises:
            RuntimeError: during a capture that forbids waiting (Note [capture-unsafe calls]).
        """
        _capture.check_capture_safe("Event.synchronize()")
        if self._native is not None:
            require_accelerator().event_synchronize(self._native)

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event to ``end_event``; both need ``enable_timing=True`` and
        must have been recorded and completed.

        Raises:
            TypeError: ``end_event`` is not an Event. RuntimeError: an event without timing,
                not recorded, recorded on another device than the other, or not completed.
        """
        if not isinstance(end_event, Event):
            raise wrong_kind("Event.elapsed_time()", "a tensorplay Event (the end event)",
                             end_event)
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time() needs both events created with "
                               "enable_timing=True")
        if self._native is None or end_event._native is None:
            raise RuntimeError("elapsed_time() needs both events to have been recorded")
        if self.device_index != end_event.device_index:
            raise RuntimeError(f"elapsed_time() needs both events on one device, got device "
                               f"{self.device_index} and device {end_event.device_index}")
        return require_accelerator().event_elapsed_ms(self._native, end_event._native)

    def __repr__(self) -> str:
        where = "unrecorded" if self._native is None else f"device {self.device_index}"
        return f"<tensorplay.Event {where}>"


def _stream_or_current(stream, call: str) -> Stream:
    """``stream``, or this thread's current stream when None; TypeError for anything else."""
    if stream is None:
        require_accelerator()   # host-only: say so, not fail inside the state lookup
        return current_stream(_state.current_device_index())
    if not isinstance(stream, Stream):
        raise wrong_kind(call, "a tensorplay Stream or None", stream)
    return stream
