"""The simulated accelerator: the executable specification of a GPU runtime, in NumPy.

Everything here mirrors a CUDA rule a reviewer can check (see ``tensorplay.backends.Backend``).
One concept a file: this module wires the backend together and holds streams and events;
``memory.py`` the device memory (segments, malloc/free, views); ``graph.py`` what a capture
records and a replay runs; ``dot.py`` the Graphviz output.

- **Memory** (``memory.py``). Each device has a byte limit and fake device addresses; queued work
  keeps no tensor's memory alive, as a kernel's raw pointers do not (Note [sim queue ownership]).
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
- **Capture** follows CUDA stream capture: capturing streams record nodes instead of queueing;
  waiting on a capture event forks another stream into the capture, which must be joined back
  before ``capture_end`` (cudaErrorStreamCaptureUnjoined); waiting across the capture boundary
  is refused (cudaErrorStreamCaptureIsolation). Conditional bodies record through their own
  body streams; a closed body stream is an ordinary stream again, as on cuda. Graph nodes and
  their execution live in ``graph.py``.

Policy lives above this module: the caching allocator, current device/stream per thread, Graph
objects, pools, RNG, and every capture rule (``_runtime/capture.py``: modes, no capture on a
default stream, the thread that ends a capture, predicate checks, calls that wait during a
capture). The sim does not re-check them; called directly, it records what it is given.

Note [sim locks]: each device has an RLock. Queueing work (launch, memcpy, copies, graph
launches) takes the stream's device lock. Running work, recording into a capture, and event
record/wait take every device's lock, in index order: running one stream can pull in a stream
of another device (a cross-device event wait) and a capture can span devices, and acquiring in
one order keeps that free of deadlock.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _dtype
from .dot import to_dot
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
from .memory import DeviceMemory, SimMemory, unowned, unowned_kernel

__all__ = ["SimBackend", "SimStream", "SimEvent", "SimGraph", "SimExecutable", "create_backend"]

_ENV_DEVICES = "TENSORPLAY_SIM_DEVICES"
_ENV_MEMORY = "TENSORPLAY_SIM_MEMORY"
_QUEUE_DEPTH = 1024     # items a stream queues before a launch waits for room, as on a GPU
_ids = itertools.count()


def _queue_item(item: Any) -> Any:
    """What a stream queues for ``item``: a kernel or host copy over owner-less arrays."""
    kind = type(item)
    if kind is KernelNode:
        fn = unowned_kernel(item.fn)
        return item if fn is item.fn else KernelNode(fn)
    if kind is HostCopyNode:
        array = unowned(item.array)
        return item if array is item.array else HostCopyNode(array, item.data)
    return item


def _raise_as_is(error: BaseException, stream) -> None:
    """A sim launch raises tensorplay's own errors: they pass through ``Graph.replay``."""
    raise error


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


class _Device(DeviceMemory):
    """One simulated device: its memory, lock and default stream."""

    def __init__(self, index: int, limit: int):
        super().__init__(index, limit)
        self.default_stream = SimStream(index, 0, True)
        self.busy: set[SimStream] = set()            # streams with pending work (kept alive)


class SimBackend(SimMemory[_Device]):
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
    conditional_kinds = frozenset({"if", "if_else", "switch", "while"})
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
        self._errors: list | None = None     # failures of the run in progress

    # -- devices -------------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._devices)

    def device_capability(self, index: int) -> dict[str, Any]:
        device = self._device(index)
        return {"name": "tensorplay simulated accelerator", "total_memory": device.limit,
                "supported_dtypes": self._supported, "compute_capability": None,
                "multi_processor_count": 1, "backend": "sim", "matmul_in_capture": True}

    def set_device(self, index: int) -> None:
        """No native current device in the sim; only checks the index."""
        self._device(index)

    def mem_get_info(self, index: int) -> tuple[int, int]:
        device = self._device(index)
        return device.limit - device.used, device.limit

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
                    assert self._errors is not None   # set by _drain, the only caller
                    self._errors.append((stream.device_index, exc))
                # Let go of the item before taking the next: dropping it can free the last
                # reference to memory, whose release may synchronize (run this stream) from a
                # finalizer. That nested run must find every later item still queued; were the
                # next one already popped, it would run after the items queued behind it.
                del item
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

    def stream_query(self, stream: SimStream) -> bool:
        """Runs the stream's queued work, then answers True (a poll loop always ends)."""
        self._drain([(stream, stream._enqueued)])
        return True

    def stream_synchronize(self, stream: SimStream) -> None:
        self._drain([(stream, stream._enqueued)])

    def synchronize_device(self, index: int) -> None:
        """Run every stream of the device to its end (a capturing stream has nothing queued)."""
        device = self._device(index)
        with self._all_locks():
            targets = [(s, s._enqueued) for s in [device.default_stream, *device.busy]]
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
            event._token += 1
            event._time = None
            if self.is_capturing(stream):
                assert stream._capture is not None
                stream._capture.record_event(stream, event)
                return
            event._capture = event._capture_stream = event._clock = None
            self._enqueue(stream, _RecordMarker(event, event._token))
            event._stream, event._position = stream, stream._enqueued

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        """Later work on ``stream`` waits for ``event``; a capture event forks ``stream`` into
        that capture (or, from a member, orders it after the event's stream)."""
        with self._all_locks():
            if event._capture is not None:
                event._capture.wait_event(stream, event)
            elif event._stream is None:
                return   # waiting on a never-recorded event is a no-op, as in CUDA
            elif self.is_capturing(stream):
                assert stream._capture is not None
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
        assert end._time is not None and start._time is not None   # checked above
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
            queued = not self.is_capturing(stream)
            if queued:
                self._put(stream, nodes)
                full = len(stream._queue) > _QUEUE_DEPTH
        if queued:
            if full:   # after letting go of the device lock: _make_room takes every lock
                self._make_room(stream)
            return
        with self._all_locks():   # recording touches the capture, which may span devices
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
        assert stream._capture is not None   # callers record only on a capturing stream
        stream._capture.record(stream, node)

    def capture_begin(self, stream: SimStream, mode: str) -> None:
        """Make ``stream`` record into a new graph. ``mode`` is recorded, not checked: the
        capture rules (``_runtime/capture.py``) are applied by the caller."""
        with self._all_locks():
            if stream._capture is not None:
                raise RuntimeError(f"{stream!r} is already capturing; call capture_end() first")
            Capture(stream)

    def capture_end(self, stream: SimStream) -> SimGraph:
        """Stop capturing and return the graph. On any error the capture is discarded (every
        stream of it stops capturing) and RuntimeError says why."""
        with self._all_locks():
            capture = stream._capture
            if capture is None or stream is not capture.origin:
                what = "not capturing" if capture is None else \
                    f"not the stream that began the capture ({capture.origin!r})"
                raise RuntimeError(f"capture_end: {stream!r} is {what}")
            error = capture.end_error()
            capture.finish()
        if error is not None:
            raise RuntimeError(error + "; the capture is discarded")
        return capture.graph

    def is_capturing(self, stream: SimStream) -> bool:
        return stream._capture is not None

    def begin_conditional(self, stream: SimStream, kind: str, predicate: Any,
                          count: int = 1) -> SimStream:
        """Record an if/if_else/switch/while node into ``stream``'s target; return the stream
        of its (first) body. A switch node has ``count`` bodies."""
        if not self.is_capturing(stream):
            raise RuntimeError(f"begin_conditional: {stream!r} is not capturing; conditional "
                               f"nodes exist only inside a capture")
        if kind not in self.conditional_kinds:
            raise ValueError(f"begin_conditional: kind must be one of "
                             f"{sorted(self.conditional_kinds)}, got {kind!r}")
        count = {"if": 1, "while": 1, "if_else": 2}.get(kind, count)   # the caller checked it
        address = self.array_ptr(predicate)
        body = SimStream(stream.device_index, stream.priority, False)
        node = ConditionalNode(kind, predicate, address, count)
        with self._all_locks():
            assert stream._capture is not None   # is_capturing, checked above
            stream._capture.open_body(stream, node, body)
        return body

    def _check_open_body(self, call: str, body_stream: SimStream) -> None:
        if body_stream._closed:
            raise RuntimeError(f"{call}: conditional body was closed ({body_stream!r})")
        if not body_stream._is_body:
            raise RuntimeError(f"{call}: {body_stream!r} is not a conditional body stream "
                               f"(no conditional node is open on it)")

    def begin_next_body(self, body_stream: SimStream) -> SimStream:
        """Close this body of an if_else or switch node; return the stream of its next one."""
        self._check_open_body("begin_next_body", body_stream)
        node = body_stream._body_node
        bodies = [] if node is None else node.bodies
        position = next((k for k, body in enumerate(bodies) if body is body_stream._target),
                        len(bodies))
        if position + 1 >= len(bodies):
            raise RuntimeError(f"begin_next_body: {body_stream!r} records the last body of its "
                               f"node (or of an if or while node, which have one)")
        successor = SimStream(body_stream.device_index, body_stream.priority, False)
        with self._all_locks():
            assert body_stream._capture is not None   # an open body: checked above
            body_stream._capture.switch_body(body_stream, successor, bodies[position + 1])
        return successor

    def set_conditional(self, body_stream: SimStream, predicate: Any) -> None:
        """Record a step that sets the body's node handle from ``predicate`` when it runs."""
        self._check_open_body("set_conditional", body_stream)
        address = self.array_ptr(predicate)
        with self._all_locks():
            self._record(body_stream, SetConditionalNode(predicate, address))

    def end_conditional(self, body_stream: SimStream) -> None:
        """Close the body; its stream is an ordinary stream afterwards, as on cuda."""
        self._check_open_body("end_conditional", body_stream)
        with self._all_locks():
            assert body_stream._capture is not None   # an open body: checked above
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
        return launch, _raise_as_is

    def stream_handle(self, stream: SimStream) -> SimStream:
        return stream

    def unstage(self, executable: SimExecutable) -> None:
        """Make the executable's next launches copy nothing (Note [fused staging])."""
        executable.stage_in = executable.stage_out = StageNode()

    def stage_and_launch(self, executable: SimExecutable, stream: SimStream,
                         copies: list[tuple[int, int, int]],
                         copies_out: Sequence[tuple[int, int, int]] = ()) -> None:
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
            handle.write(to_dot(graph.nodes, bool(verbose)))


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
