"""The simulated accelerator: the executable specification of a GPU runtime, in NumPy.

Everything here mirrors a CUDA rule a reviewer can check (see ``tensorplay.backends.Backend``):

- **Memory.** Each device has a byte limit. ``malloc`` hands out a fresh ``uint8`` segment at a
  fake device address (device ``d`` lives at ``(d + 1) << 40``, 512-byte aligned, never reused);
  ``as_array`` views a segment. Queued work keeps no tensor's memory alive, as a kernel's raw
  pointers do not (Note [sim queue ownership]).
- **Streams run lazily.** A stream is a FIFO of pending items; nothing runs at launch. Work runs
  when something waits (``stream_synchronize``, ``event_synchronize``, ``to_host``,
  ``synchronize_device``) or polls (``stream_query``/``event_query`` run what they ask about,
  then answer, so a poll loop ends). A reader on another stream that did not wait on an event
  therefore sees the *old* value, as a racy GPU program may. A launch queue is finite, as on a
  GPU: a launch that fills a stream's queue past ``_QUEUE_DEPTH`` items first runs its oldest
  items, so a long loop without a synchronize runs in bounded memory.
- **Events are positions.** ``event_record`` remembers (stream, queue length); waiting on the
  event first runs that stream up to that position.
- **Asynchronous errors.** A kernel that raises while running deferred is reported as
  ``RuntimeError`` at the sync point that ran it; the backend stays usable.
- **Capture** follows CUDA stream capture: no capture on the default stream; capturing streams
  record nodes instead of queueing; synchronizing a capturing stream invalidates the capture;
  waiting on a capture event forks another stream into the capture, which must be joined back
  before ``capture_end`` (cudaErrorStreamCaptureUnjoined); waiting across the capture boundary
  is refused (cudaErrorStreamCaptureIsolation). Conditional bodies record through their own
  body streams. Graph nodes and their execution live in ``_sim_graph``.

Policy (the caching allocator, current device/stream per thread, capture_error_mode guards
across threads, Graph objects, pools, RNG) lives above this module.

Note [sim locks]: each device has an RLock. Queueing work (launch, memcpy, copies, graph
launches) takes the stream's device lock. Running work, recording into a capture, and event
record/wait take every device's lock, in index order: running one stream can pull in a stream
of another device (a cross-device event wait) and a capture can span devices, and acquiring in
one order keeps that free of deadlock.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
import itertools
import os
import threading
import time
import types
from collections import deque
from typing import Any

import numpy as np

from ... import _dtype
from . import graph as graph_nodes
from .graph import (
    Capture,
    ConditionalNode,
    GraphNode,
    HostCopyNode,
    KernelNode,
    MemcpyNode,
    NodeFailure,
    SetConditionalNode,
    SimExecutable,
    SimGraph,
    StageNode,
)

__all__ = ["SimBackend", "SimStream", "SimEvent", "SimGraph", "SimExecutable", "create_backend"]

_ENV_DEVICES = "TENSORPLAY_SIM_DEVICES"
_ENV_MEMORY = "TENSORPLAY_SIM_MEMORY"
_ALIGNMENT = 512
_ADDRESS_SHIFT = 40
_CAPTURE_MODES = ("global", "thread_local", "relaxed")
_QUEUE_DEPTH = 1024     # items a stream queues before a launch waits for room, as on a GPU
_ids = itertools.count()


_LAUNCHED = (None,)


# Note [sim queue ownership]
# --------------------------
# A GPU kernel takes raw pointers: a launch keeps no tensor alive, so a tensor freed while work
# using it is still queued returns its block to the caching allocator at once, and the allocator
# hands it out again on the same stream, where stream order makes that safe (a use on another
# stream is the caller's to keep alive: the allocator's documented pitfall, no record_stream).
# Sim kernels are closures over NumPy arrays whose ``base`` keeps the Allocation alive
# (``as_array``), so a queue holding them would keep every block taken until the queue ran: an
# eager loop grew without bound until a synchronize. So what a stream *queues* holds owner-less
# views of the same bytes: ``_queue_item`` rebuilds a kernel (a function's closure cells, a
# partial's arguments, and the tuples, lists and dicts directly among them) and a host copy's
# target with raw views; whatever lies deeper keeps its owner, which only returns memory later,
# never too early. A rebuilt container is a copy, made only when it held a device array. Nodes
# recorded into a capture keep their arrays: a graph holds what it replays.

_UNOWNED_DEPTH = 2      # levels of containers looked into inside a cell or partial argument


def _unowned_array(array: np.ndarray) -> np.ndarray:
    """A view of the same bytes that keeps no Allocation alive, or ``array`` itself when it
    does not view owned sim memory."""
    base = array.base
    while type(base) is np.ndarray:     # a view of a view: NumPy stops collapsing at as_array's
        base = base.base
    segment = getattr(base, "_tensorplay_segment", None)
    if segment is None or array.size == 0:
        return array
    offset = array.__array_interface__["data"][0] - ctypes.addressof(base)
    raw = np.ndarray(array.shape, array.dtype, buffer=segment, offset=offset,
                     strides=array.strides)
    if not array.flags.writeable:
        raw.flags.writeable = False
    return raw


def _unowned(value: Any, depth: int = _UNOWNED_DEPTH) -> Any:
    """``value`` with the device arrays in it made owner-less (Note [sim queue ownership]);
    ``value`` itself when nothing changed."""
    kind = type(value)
    if kind is np.ndarray:
        return _unowned_array(value)
    if depth and (kind is tuple or kind is list):
        items = [_unowned(item, depth - 1) for item in value]
        changed = any(new is not old for new, old in zip(items, value))
        return kind(items) if changed else value
    if depth and kind is dict:
        items = {key: _unowned(item, depth - 1) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    return value


def _unowned_kernel(fn: Any) -> Any:
    """``fn`` rebuilt over owner-less arrays, or ``fn`` when it holds none directly."""
    if type(fn) is functools.partial:
        args, keywords = _unowned(fn.args), _unowned(fn.keywords)
        if args is fn.args and keywords is fn.keywords:
            return fn
        rebuilt = functools.partial(fn.func, *args, **keywords)
    elif type(fn) is types.FunctionType and fn.__closure__:
        cells = []
        for cell in fn.__closure__:
            try:
                content = cell.cell_contents
            except ValueError:          # an empty cell: keep it shared
                cells.append(cell)
                continue
            new = _unowned(content)
            cells.append(cell if new is content else types.CellType(new))
        if all(new is old for new, old in zip(cells, fn.__closure__)):
            return fn
        rebuilt = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                     tuple(cells))
        rebuilt.__kwdefaults__ = fn.__kwdefaults__
        rebuilt.__qualname__ = fn.__qualname__
    else:
        return fn
    rebuilt.__dict__.update(fn.__dict__)    # __name__ of a partial, tp_attrs
    return rebuilt


def _queue_item(item: Any) -> Any:
    """What a stream queues for ``item``: a kernel or host copy over owner-less arrays."""
    kind = type(item)
    if kind is KernelNode:
        fn = _unowned_kernel(item.fn)
        return item if fn is item.fn else KernelNode(fn)
    if kind is HostCopyNode:
        array = _unowned(item.array)
        return item if array is item.array else HostCopyNode(array, item.data)
    return item


def _never_fails(result, stream) -> None:
    raise AssertionError(f"sim graph launch reported {result!r} on {stream!r}")


class SimStream:
    """A stream: a FIFO of pending items, or (while capturing) a recorder into a graph.

    A *body stream* (``begin_conditional``) never queues: it records into one conditional
    node's body until ``end_conditional`` closes it.
    """

    def __init__(self, device_index: int, priority: int, is_default: bool):
        self.device_index = device_index
        self.priority = priority
        self.is_default = is_default
        self.id = next(_ids)
        self._queue: deque = deque()
        self._done = 0                # items run so far; an item's position is its 1-based rank
        self._capture: Capture | None = None
        self._target: list | None = None        # where recorded nodes go
        self._clock: dict | None = None         # Note [capture clocks]
        self._body_node: ConditionalNode | None = None
        self._parent: SimStream | None = None
        self._open_child: SimStream | None = None
        self._closed = False

    @property
    def _enqueued(self) -> int:
        return self._done + len(self._queue)

    @property
    def _is_body(self) -> bool:
        return self._body_node is not None

    def __repr__(self) -> str:
        kind = "default" if self.is_default else ("body" if self._is_body else "side")
        return f"SimStream(sim:{self.device_index}, id={self.id}, {kind})"


class SimEvent:
    """An event: the position (stream, queue length) of its latest record, or a capture event."""

    def __init__(self, device_index: int, enable_timing: bool):
        self.device_index = device_index
        self.enable_timing = bool(enable_timing)
        self.id = next(_ids)
        self._stream: SimStream | None = None
        self._position = 0
        self._token = 0               # which record the timestamp belongs to
        self._time: float | None = None
        self._capture: Capture | None = None   # set when last recorded on a capturing stream
        self._capture_stream: SimStream | None = None
        self._clock: dict | None = None

    def __repr__(self) -> str:
        return f"SimEvent(sim:{self.device_index}, id={self.id})"


class _RecordMarker:
    """Queue item of ``event_record``: stamps the event's time when it runs."""

    def __init__(self, event: SimEvent, token: int):
        self.event, self.token = event, token

    def run(self, copy_bytes, condition) -> None:
        if self.event._token == self.token:
            self.event._time = time.perf_counter()


class _WaitMarker:
    """Queue item of ``stream_wait_event``: runs the event's stream up to its position first."""

    def __init__(self, backend: SimBackend, stream: SimStream, position: int):
        self.backend, self.stream, self.position = backend, stream, position

    def run(self, copy_bytes, condition) -> None:
        self.backend._run_stream_to(self.stream, self.position)


class _Device:
    """One simulated device: its memory segments, lock and default stream."""

    def __init__(self, index: int, limit: int):
        self.index = index
        self.limit = limit
        self.used = 0
        self.segments: dict[int, np.ndarray] = {}   # base address -> uint8 buffer
        self.bases: list[int] = []                   # sorted live base addresses
        self.host_starts: list[int] = []             # sorted host addresses of the buffers
        self.host_to_base: dict[int, int] = {}
        self.next_address = (index + 1) << _ADDRESS_SHIFT
        self.lock = threading.RLock()
        self.default_stream = SimStream(index, 0, True)
        self.busy: set[SimStream] = set()            # streams with pending work (kept alive)


class SimBackend:
    """The simulated accelerator backend (``TENSORPLAY_ACCELERATOR=sim``).

    Args:
        device_count: number of devices (>= 1).
        memory_bytes: memory limit of each device in bytes (>= 1).
        supported_dtypes: tensorplay dtypes the devices report and hold; None means all.

    Raises:
        ValueError: for a count or limit below 1. TypeError: for a non-dtype in supported_dtypes.
    """

    name = "sim"
    device_type = "sim"
    xp = np

    def __init__(self, device_count: int = 2, memory_bytes: int = 1 << 30,
                 supported_dtypes=None):
        for label, value in (("device_count", device_count), ("memory_bytes", memory_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SimBackend {label} must be an int >= 1, got {value!r}")
        if supported_dtypes is None:
            supported_dtypes = _dtype.all_dtypes
        supported = frozenset(supported_dtypes)
        for item in supported:
            if not isinstance(item, _dtype.dtype):
                raise TypeError(f"supported_dtypes must hold tensorplay dtypes, got {item!r}")
        self._supported = supported
        self._devices = [_Device(i, memory_bytes) for i in range(device_count)]
        self._captures: list[Capture] = []
        self._errors: list | None = None     # failures of the run in progress

    # -- devices -------------------------------------------------------------------------------
    def _device(self, index: int) -> _Device:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"sim device index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self._devices):
            names = ", ".join(f"sim:{i}" for i in range(len(self._devices)))
            raise ValueError(f"device 'sim:{index}' is out of range: this backend has "
                             f"{len(self._devices)} sim devices ({names})")
        return self._devices[index]

    def device_count(self) -> int:
        return len(self._devices)

    def device_capability(self, index: int) -> dict[str, Any]:
        device = self._device(index)
        return {"name": "tensorplay simulated accelerator", "total_memory": device.limit,
                "supported_dtypes": self._supported, "compute_capability": None,
                "multi_processor_count": 1, "backend": "sim"}

    def set_device(self, index: int) -> None:
        """No native current device in the sim; only checks the index."""
        self._device(index)

    def mem_get_info(self, index: int) -> tuple[int, int]:
        device = self._device(index)
        return device.limit - device.used, device.limit

    # -- raw memory ----------------------------------------------------------------------------
    def malloc(self, index: int, nbytes: int) -> int:
        device = self._device(index)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"malloc needs nbytes > 0 (an int), got {nbytes!r}")
        with device.lock:
            if device.used + nbytes > device.limit:
                raise MemoryError(f"sim:{index} has {device.limit - device.used} bytes free, "
                                  f"{nbytes} requested")
            base = device.next_address
            if base + nbytes > (index + 2) << _ADDRESS_SHIFT:
                raise MemoryError(f"sim:{index} ran out of fresh device addresses")
            device.next_address += -(-nbytes // _ALIGNMENT) * _ALIGNMENT
            segment = np.empty(nbytes, np.uint8)
            device.segments[base] = segment
            bisect.insort(device.bases, base)
            host = segment.ctypes.data
            bisect.insort(device.host_starts, host)
            device.host_to_base[host] = base
            device.used += nbytes
        return base

    def free(self, index: int, ptr: int) -> None:
        device = self._device(index)
        with device.lock:
            segment = device.segments.pop(ptr, None)
            if segment is None:
                raise ValueError(f"free: 0x{ptr:x} is not an address malloc returned on "
                                 f"sim:{index} (or it was freed already){self._owner_hint(ptr)}")
            device.bases.remove(ptr)
            host = segment.ctypes.data
            device.host_starts.remove(host)
            del device.host_to_base[host]
            device.used -= segment.nbytes

    def _owner_hint(self, ptr: int) -> str:
        found = self._find_segment(ptr, 0)
        if found is None:
            return ""
        base, _ = found
        return f"; it lies inside the allocation at 0x{base:x} on sim:{self._device_of(base)}"

    @staticmethod
    def _device_of(ptr: int) -> int:
        return (ptr >> _ADDRESS_SHIFT) - 1

    def _find_segment(self, ptr: int, nbytes: int) -> tuple[int, np.ndarray] | None:
        """The live (base, segment) holding ``[ptr, ptr + nbytes)``, on whichever device."""
        index = self._device_of(ptr)
        if not 0 <= index < len(self._devices):
            return None
        device = self._devices[index]
        position = bisect.bisect_right(device.bases, ptr) - 1
        if position < 0:
            return None
        base = device.bases[position]
        segment = device.segments[base]
        if ptr + nbytes > base + segment.nbytes:
            return None
        return base, segment

    def _segment_or_raise(self, what: str, ptr: int, nbytes: int) -> tuple[int, np.ndarray]:
        found = self._find_segment(ptr, nbytes)
        if found is None:
            raise ValueError(f"{what}: [0x{ptr:x}, 0x{ptr + nbytes:x}) is not inside one live "
                             f"sim allocation")
        return found

    def as_array(self, index: int, ptr: int, nbytes: int, numpy_dtype: Any,
                 shape: tuple[int, ...], strides: tuple[int, ...], owner: Any) -> Any:
        """A NumPy view of ``[ptr, ptr + nbytes)``; strides in bytes (0 broadcasts). The view
        (and every view of it) keeps ``owner`` alive through its ``.base`` chain."""
        with self._device(index).lock:
            base, segment = self._segment_or_raise("as_array", ptr, nbytes)
        if self._device_of(base) != index:
            raise ValueError(f"as_array: 0x{ptr:x} is memory of sim:{self._device_of(base)}, "
                             f"not sim:{index}")
        buffer: Any = segment
        if owner is not None:
            # A ctypes view is not an ndarray, so NumPy's base-collapsing stops at it and the
            # owner it carries lives exactly as long as some view of this memory. The segment
            # lets a queue hold owner-less views instead (Note [sim queue ownership]).
            buffer = (ctypes.c_uint8 * segment.nbytes).from_buffer(segment)
            buffer._tensorplay_owner = owner
            buffer._tensorplay_segment = segment
        return np.ndarray(tuple(shape), np.dtype(numpy_dtype), buffer=buffer,
                          offset=ptr - base, strides=tuple(strides))

    def _locate_host_array(self, array: np.ndarray) -> tuple[int, int] | None:
        """(device index, device address) of a NumPy array viewing sim memory, else None."""
        host = array.__array_interface__["data"][0]
        for device in self._devices:
            position = bisect.bisect_right(device.host_starts, host) - 1
            if position < 0:
                continue
            start = device.host_starts[position]
            base = device.host_to_base[start]
            if host < start + device.segments[base].nbytes:
                return device.index, base + (host - start)
        return None

    def array_ptr(self, array: Any) -> int:
        """The device address of ``array``'s first element (views included).

        Raises:
            TypeError: not a NumPy array. ValueError: an array that does not view sim memory.
        """
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array_ptr needs a sim device array, got {type(array).__name__}")
        location = self._locate_host_array(array)
        if location is None:
            raise ValueError("array_ptr: the array does not view live sim device memory (it is "
                             "host memory, or its allocation was freed)")
        return location[1]

    def _copy_bytes(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        dst_base, dst_segment = self._segment_or_raise("memcpy destination", dst, nbytes)
        src_base, src_segment = self._segment_or_raise("memcpy source", src, nbytes)
        dst_segment[dst - dst_base:dst - dst_base + nbytes] = \
            src_segment[src - src_base:src - src_base + nbytes]

    # -- running queued work -------------------------------------------------------------------
    @contextlib.contextmanager
    def _all_locks(self):
        """Every device lock, in index order (Note [sim locks])."""
        with contextlib.ExitStack() as stack:
            for device in self._devices:
                stack.enter_context(device.lock)
            yield

    def _run_stream_to(self, stream: SimStream, position: int) -> None:
        """Run ``stream``'s items in order until ``position`` have run; failures are collected
        into ``self._errors``. The caller holds every lock. NumPy's floating-point warnings
        are off while kernels run: a GPU gives inf/nan (and an unspecified integer quotient by
        zero) silently."""
        with np.errstate(all="ignore"):
            while stream._done < position and stream._queue:
                item = stream._queue.popleft()
                stream._done += 1   # before running, so a wait on this same stream cannot recurse
                try:
                    item.run(self._copy_bytes, None)
                except Exception as exc:  # noqa: BLE001 - surfaces at the sync point
                    self._errors.append((stream.device_index, exc))
        if not stream._queue:
            self._devices[stream.device_index].busy.discard(stream)

    def _drain(self, targets: list[tuple[SimStream, int]]) -> None:
        """Run each (stream, position); raise the first deferred failure of this run, if any."""
        with self._all_locks():
            outermost = self._errors is None
            if outermost:
                self._errors = []
            try:
                for stream, position in targets:
                    self._run_stream_to(stream, position)
                errors = self._errors
            finally:
                if outermost:
                    self._errors = None
        if outermost and errors:
            index, first = errors[0]
            text = str(first) if isinstance(first, NodeFailure) else \
                f"{type(first).__name__}: {first}"
            more = f" (and {len(errors) - 1} more failures)" if len(errors) > 1 else ""
            cause = first.__cause__ if isinstance(first, NodeFailure) else first
            raise RuntimeError(f"a kernel launched earlier on sim:{index} failed: {text}{more}") \
                from (cause or first)

    # -- streams and events --------------------------------------------------------------------
    def default_stream(self, index: int) -> SimStream:
        return self._device(index).default_stream

    def create_stream(self, index: int, priority: int) -> SimStream:
        self._device(index)
        return SimStream(index, int(priority), False)

    def set_current_stream(self, stream: SimStream) -> None:
        """No-op: sim kernels name their stream at launch."""

    def _refuse_while_capturing(self, stream: SimStream, call: str) -> None:
        if self.is_capturing(stream):
            capture = stream._capture
            with self._all_locks():
                capture.invalidate(call)
            raise RuntimeError(f"{call} on a capturing stream of sim:{stream.device_index} is not "
                               f"allowed during capture: the capture is invalidated and "
                               f"capture_end() will raise")

    def stream_query(self, stream: SimStream) -> bool:
        """Runs the stream's queued work, then answers True (a poll loop always ends)."""
        self._refuse_while_capturing(stream, "stream_query")
        self._drain([(stream, stream._enqueued)])
        return True

    def stream_synchronize(self, stream: SimStream) -> None:
        self._refuse_while_capturing(stream, "stream_synchronize")
        self._drain([(stream, stream._enqueued)])

    def synchronize_device(self, index: int) -> None:
        """Run every stream of the device to its end. RuntimeError (invalidating the captures)
        while any stream of the device captures: a device sync would include the capture."""
        device = self._device(index)
        with self._all_locks():
            capturing = [c for c in self._captures
                         if any(m.device_index == index for m in c.members)]
            for capture in capturing:
                capture.invalidate("synchronize_device")
            targets = [(s, s._enqueued) for s in [device.default_stream, *device.busy]]
        if capturing:
            raise RuntimeError(f"synchronize_device(sim:{index}) while a stream of that device is "
                               f"capturing is not allowed: the capture is invalidated and "
                               f"capture_end() will raise")
        self._drain(targets)

    def create_event(self, index: int, enable_timing: bool) -> SimEvent:
        self._device(index)
        return SimEvent(index, enable_timing)

    def event_record(self, event: SimEvent, stream: SimStream) -> None:
        """Mark the end of ``stream``'s queue; on a capturing stream, make a capture event."""
        if event.device_index != stream.device_index:
            raise ValueError(f"event_record: {event!r} belongs to sim:{event.device_index} but "
                             f"{stream!r} is on sim:{stream.device_index}; record an event on a "
                             f"stream of its own device")
        with self._all_locks():
            self._check_not_closed_body(stream)
            event._token += 1
            event._time = None
            if self.is_capturing(stream):
                stream._capture.record_event(stream, event)
                return
            event._capture = event._capture_stream = event._clock = None
            self._enqueue(stream, _RecordMarker(event, event._token))
            event._stream, event._position = stream, stream._enqueued

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        """Later work on ``stream`` waits for ``event``; a capture event forks ``stream`` into
        that capture (or, from a member, orders it after the event's stream)."""
        with self._all_locks():
            self._check_not_closed_body(stream)
            if event._capture is not None:
                event._capture.wait_event(stream, event)
            elif event._stream is None:
                return   # waiting on a never-recorded event is a no-op, as in CUDA
            elif self.is_capturing(stream):
                stream._capture.invalidate("stream_wait_event")
                raise RuntimeError(
                    "stream_wait_event: a capturing stream cannot wait on an event recorded "
                    "outside the capture (cudaErrorStreamCaptureIsolation); the capture is "
                    "invalidated. Make the stream wait before capture_begin, or record the "
                    "event inside the capture")
            else:
                self._enqueue(stream, _WaitMarker(self, event._stream, event._position))

    def _check_event_not_captured(self, event: SimEvent, call: str) -> None:
        if event._capture is not None:
            raise RuntimeError(f"{call}: {event!r} was last recorded on a capturing stream; it "
                               f"marks a point in a graph, not in device work, so it cannot be "
                               f"waited on or queried (cudaErrorCapturedEvent)")

    def event_query(self, event: SimEvent) -> bool:
        """Runs the work before the event's position, then answers True."""
        self._check_event_not_captured(event, "event_query")
        if event._stream is not None:
            self._drain([(event._stream, event._position)])
        return True

    def event_synchronize(self, event: SimEvent) -> None:
        self._check_event_not_captured(event, "event_synchronize")
        if event._stream is not None:
            self._drain([(event._stream, event._position)])

    def event_elapsed_ms(self, start: SimEvent, end: SimEvent) -> float:
        """Milliseconds between two timing events whose records have run (nothing is run here).

        Raises:
            RuntimeError: naming the event that lacks timing, was never recorded, was recorded
                in a capture, or has not completed yet.
        """
        for label, event in (("start", start), ("end", end)):
            if not event.enable_timing:
                raise RuntimeError(f"event_elapsed_ms: the {label} event was created without "
                                   f"enable_timing=True")
            if event._capture is not None:
                raise RuntimeError(f"event_elapsed_ms: the {label} event was recorded during a "
                                   f"capture")
            if event._stream is None:
                raise RuntimeError(f"event_elapsed_ms: the {label} event was never recorded")
            if event._stream._done < event._position or event._time is None:
                raise RuntimeError(f"event_elapsed_ms: the {label} event has not completed; "
                                   f"synchronize it first")
        if start.device_index != end.device_index:
            raise RuntimeError(f"event_elapsed_ms: the events are on different devices "
                               f"(sim:{start.device_index}, sim:{end.device_index})")
        return (end._time - start._time) * 1000.0

    # -- work ----------------------------------------------------------------------------------
    def _enqueue(self, stream: SimStream, item: Any) -> None:
        """Append to a non-capturing stream's queue (caller holds the device lock); the queue
        holds no tensor's memory alive (Note [sim queue ownership])."""
        stream._queue.append(_queue_item(item))
        self._devices[stream.device_index].busy.add(stream)

    def _make_room(self, stream: SimStream) -> None:
        """Run ``stream``'s oldest items until at most half of ``_QUEUE_DEPTH`` are left: a
        launch into a full queue waits for the device, as on a GPU. A failure among them is
        raised here, as a GPU reports an earlier kernel's error at the next call."""
        with self._all_locks():
            excess = len(stream._queue) - _QUEUE_DEPTH // 2
            if excess > 0:
                self._drain([(stream, stream._done + excess)])

    def _check_not_closed_body(self, stream: SimStream) -> None:
        if stream._is_body and stream._closed:
            raise RuntimeError(f"conditional body was closed: {stream!r} records nothing after "
                               f"end_conditional(); use its parent stream")

    def _put(self, stream: SimStream, nodes: list) -> None:
        if self.is_capturing(stream):
            for node in nodes:
                self._record(stream, node)
        else:
            for node in nodes:
                self._enqueue(stream, node)

    def _submit(self, stream: SimStream, nodes: list) -> None:
        """Queue ``nodes`` on ``stream``, or record them when it captures, as one step. A
        stream's capture state only changes under every lock, so its device lock pins it."""
        with self._devices[stream.device_index].lock:
            self._check_not_closed_body(stream)
            queued = not self.is_capturing(stream)
            if queued:
                self._put(stream, nodes)
                full = len(stream._queue) > _QUEUE_DEPTH
        if queued:
            if full:   # after letting go of the device lock: _make_room takes every lock
                self._make_room(stream)
            return
        with self._all_locks():   # recording touches the capture, which may span devices
            self._check_not_closed_body(stream)
            self._put(stream, nodes)

    def launch(self, stream: SimStream, kernel) -> None:
        """Queue ``kernel`` (it does not run now; a full queue first runs its oldest items), or
        record it into the capture."""
        if not callable(kernel):
            raise TypeError(f"launch needs a zero-argument callable, got {type(kernel).__name__}")
        self._submit(stream, [KernelNode(kernel)])

    def _memcpy_node(self, dst_ptr: int, src_ptr: int, nbytes: int) -> MemcpyNode:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"memcpy needs nbytes >= 0 (an int), got {nbytes!r}")
        if nbytes:
            self._segment_or_raise("memcpy destination", dst_ptr, nbytes)
            self._segment_or_raise("memcpy source", src_ptr, nbytes)
        return MemcpyNode(dst_ptr, src_ptr, nbytes)

    def memcpy(self, stream: SimStream, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """Queue (or record) a raw copy; addresses are checked now and again when it runs."""
        self._submit(stream, [self._memcpy_node(dst_ptr, src_ptr, nbytes)])

    def to_host(self, stream: SimStream, array: Any) -> np.ndarray:
        """Run ``stream`` to its end, then return a NumPy copy of ``array``."""
        self._refuse_while_capturing(stream, "to_host")
        self._drain([(stream, stream._enqueued)])
        return np.array(array, copy=True)

    def from_host(self, stream: SimStream, array: Any, host_array: Any) -> None:
        """Copy ``host_array`` now, then queue (or record) writing the copy into ``array``."""
        data = np.array(host_array, copy=True)
        try:
            fits = np.broadcast_shapes(data.shape, array.shape) == tuple(array.shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"from_host: host data of shape {data.shape} cannot be written into "
                             f"a device array of shape {tuple(array.shape)}")
        self._submit(stream, [HostCopyNode(array, data)])

    # -- capture -------------------------------------------------------------------------------
    def _record(self, stream: SimStream, node: Any) -> None:
        """Append ``node`` to the stream's recording target (caller holds every lock)."""
        stream._capture.record(stream, node)

    def capture_begin(self, stream: SimStream, mode: str) -> None:
        if mode not in _CAPTURE_MODES:
            raise ValueError(f"capture mode {mode!r} is not valid; valid modes: "
                             f"{', '.join(repr(m) for m in _CAPTURE_MODES)}")
        index = stream.device_index
        if stream.is_default:
            raise RuntimeError(f"cannot capture on the default stream of sim:{index}; capture "
                               f"needs a side stream (with Graph(): provides one)")
        if stream._is_body:
            raise RuntimeError(f"{stream!r} is a conditional body stream; it cannot begin a "
                               f"capture of its own")
        with self._all_locks():
            if stream._capture is not None:
                raise RuntimeError(f"{stream!r} is already capturing; call capture_end() first")
            self._captures.append(Capture(stream, mode, threading.get_ident()))

    def capture_end(self, stream: SimStream) -> SimGraph:
        """Stop capturing and return the graph. On any error the capture is discarded (every
        stream of it stops capturing) and RuntimeError says why."""
        with self._all_locks():
            capture = stream._capture
            if capture is None or stream._is_body:
                what = "a conditional body stream" if stream._is_body else "not capturing"
                raise RuntimeError(f"capture_end: {stream!r} is {what}")
            if stream is not capture.origin:
                raise RuntimeError(f"capture_end must be called on the stream that began the "
                                   f"capture ({capture.origin!r}), not on {stream!r}, which "
                                   f"joined it")
            if capture.mode != "relaxed" and threading.get_ident() != capture.thread:
                raise RuntimeError(f"capture_end: a capture begun with mode {capture.mode!r} must "
                                   f"end on the thread that began it (use 'relaxed' to allow "
                                   f"another thread); it is still capturing")
            error = capture.end_error()
            capture.finish()
            self._captures.remove(capture)
        if error is not None:
            raise RuntimeError(error + "; the capture is discarded")
        return capture.graph

    def is_capturing(self, stream: SimStream) -> bool:
        if stream._is_body:
            return not stream._closed
        return stream._capture is not None

    def _check_predicate(self, call: str, predicate: Any, index: int) -> int:
        """Validate a one-element bool predicate on sim:``index``; return its device address."""
        if not isinstance(predicate, np.ndarray):
            raise TypeError(f"{call}: the predicate must be a sim device array, got "
                            f"{type(predicate).__name__}")
        if predicate.dtype != np.bool_:
            raise TypeError(f"{call}: the predicate must be of dtype bool, got {predicate.dtype}")
        if predicate.size != 1:
            raise ValueError(f"{call}: the predicate must have exactly one element, got shape "
                             f"{predicate.shape}")
        location = self._locate_host_array(predicate)
        if location is None or location[0] != index:
            where = "host memory" if location is None else f"sim:{location[0]}"
            raise ValueError(f"{call}: the predicate must live on sim:{index}, it is in {where}")
        return location[1]

    def begin_conditional(self, stream: SimStream, kind: str, predicate: Any) -> SimStream:
        """Record an if/while node into ``stream``'s target; return the stream of its body."""
        if not self.is_capturing(stream):
            raise RuntimeError(f"begin_conditional: {stream!r} is not capturing; conditional "
                               f"nodes exist only inside a capture")
        if kind not in ("if", "while"):
            raise ValueError(f"begin_conditional: kind must be 'if' or 'while', got {kind!r}")
        address = self._check_predicate("begin_conditional", predicate, stream.device_index)
        body = SimStream(stream.device_index, stream.priority, False)
        with self._all_locks():
            stream._capture.open_body(stream, ConditionalNode(kind, predicate, address), body)
        return body

    def _check_open_body(self, call: str, body_stream: SimStream) -> None:
        if not body_stream._is_body:
            raise RuntimeError(f"{call}: {body_stream!r} is not a conditional body stream "
                               f"(no conditional node is open on it)")
        if body_stream._closed:
            raise RuntimeError(f"{call}: conditional body was closed ({body_stream!r})")

    def set_conditional(self, body_stream: SimStream, predicate: Any) -> None:
        """Record a step that sets the body's node handle from ``predicate`` when it runs."""
        self._check_open_body("set_conditional", body_stream)
        address = self._check_predicate("set_conditional", predicate, body_stream.device_index)
        with self._all_locks():
            self._record(body_stream, SetConditionalNode(predicate, address))

    def end_conditional(self, body_stream: SimStream) -> None:
        """Close the body; its stream records nothing afterwards."""
        self._check_open_body("end_conditional", body_stream)
        with self._all_locks():
            body_stream._capture.close_body(body_stream)

    # -- graphs --------------------------------------------------------------------------------
    def instantiate(self, graph: SimGraph) -> SimExecutable:
        if graph.destroyed:
            raise RuntimeError(f"instantiate: {graph!r} was destroyed")
        return SimExecutable(graph)

    def _launch_node(self, executable: SimExecutable) -> GraphNode:
        if executable.destroyed:
            raise RuntimeError(f"graph launch: {executable!r} was destroyed")
        return GraphNode(executable)

    def graph_launch(self, executable: SimExecutable, stream: SimStream) -> None:
        """Queue the whole graph as one item (a child-graph node when ``stream`` captures); its
        staging nodes are emptied first, as cuda disables them."""
        self.unstage(executable)
        self._submit(stream, [self._launch_node(executable)])

    def launcher(self, executable: SimExecutable):
        def launch(stream: SimStream):
            self._submit(stream, [self._launch_node(executable)])
            return _LAUNCHED
        return launch, None, _never_fails

    def stream_handle(self, stream: SimStream) -> SimStream:
        return stream

    def unstage(self, executable: SimExecutable) -> None:
        """Make the executable's next launches copy nothing (Note [fused staging])."""
        executable.stage_in = executable.stage_out = StageNode()

    def stage_and_launch(self, executable: SimExecutable, stream: SimStream,
                         copies: list[tuple[int, int, int]],
                         copies_out: list[tuple[int, int, int]] = ()) -> None:
        """Make the executable's staging nodes copy every ``(dst_ptr, src_ptr, nbytes)`` of
        ``copies`` before its nodes and of ``copies_out`` after them, then queue the launch: the
        copies run inside it, as on cuda (Note [fused staging] in ``cuda/_stage_node.py``).
        Addresses are checked now and again when the copies run."""
        stage_in = StageNode([self._memcpy_node(dst, src, nbytes) for dst, src, nbytes in copies])
        stage_out = StageNode([self._memcpy_node(dst, src, nbytes)
                               for dst, src, nbytes in copies_out])
        if executable.destroyed:
            raise RuntimeError(f"stage_and_launch: {executable!r} was destroyed")
        executable.stage_in, executable.stage_out = stage_in, stage_out
        self._submit(stream, [self._launch_node(executable)])

    def graph_destroy(self, graph: SimGraph | None, executable: SimExecutable | None) -> None:
        if graph is not None:
            graph.destroyed = True
        if executable is not None:
            executable.destroyed = True

    def graph_to_dot(self, graph: SimGraph, path: str, verbose: bool) -> None:
        if graph.destroyed:
            raise RuntimeError(f"graph_to_dot: {graph!r} was destroyed")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(graph_nodes.to_dot(graph.nodes, bool(verbose)))


def _read_env_int(name: str, default: int, what: str) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={raw!r} is not valid: expected an integer >= 1 ({what}; "
                         f"default {default})")
    return value


def create_backend() -> SimBackend:
    """The sim backend shaped by ``TENSORPLAY_SIM_DEVICES`` (default 2) and
    ``TENSORPLAY_SIM_MEMORY`` (bytes per device, default 1 GiB).

    Raises:
        ValueError: for a value that is not an integer >= 1, naming the variable and the value.
    """
    devices = _read_env_int(_ENV_DEVICES, 2, "the number of simulated devices")
    memory = _read_env_int(_ENV_MEMORY, 1 << 30, "bytes of memory per simulated device")
    return SimBackend(device_count=devices, memory_bytes=memory)
