"""Device-agnostic capture/replay graphs for the current accelerator.

:class:`Graph` records a sequence of operations on the active accelerator backend and replays it
with reduced launch overhead. Everything below is the same on sim and cuda; the backends only
record and launch (``tensorplay.backends``).

What to know before capturing:

- **Memory.** Tensors allocated while a stream captures come from the graph's private pool (or a
  pool shared with ``pool=``). That memory stays valid for every replay and is handed to nobody
  else while the graph or a tensor from it lives (Note [graph pool lifetime] in
  ``_runtime/allocator.py``). Graphs that share a pool may reuse each other's memory, so they
  must replay in the order they were captured.
- **Inputs are kept.** Device memory the captured work reads or writes that lies outside the
  graph's pool (tensors made before the capture) stays allocated while the graph holds its
  capture, even when your last reference to the tensor is gone, because every replay touches
  it again (Note [captured inputs]). ``reset()`` lets go of it. Change such an input in place
  (``copy_``, ``stage_and_launch``) to feed a replay new values; rebinding a name does not.
- **Outputs are overwritten.** A replay writes the same memory every time: tensors produced during
  capture hold the values of the latest replay. ``clone()`` what you want to keep.
- **Unsafe calls.** Anything that waits for the device — ``item``, ``tolist``, ``numpy``/``cpu``,
  a copy to or from the host, ``synchronize``, an event wait — raises ``RuntimeError`` during a
  capture under ``capture_error_mode`` "global" (any thread) or "thread_local" (the capturing
  thread); the capture is invalidated and ``capture_end`` raises. "relaxed" skips the guards
  for other threads (Note [capture-unsafe calls] in ``_runtime/capture.py``).
- **Conditionals.** ``begin_capture_to_if_node(p)`` / ``begin_capture_to_while_node(p)`` take a
  one-element bool tensor on the capturing device. A while body repeats while ``p`` is true
  when the body ends, so the body must update ``p`` in place (``p.copy_(...)``; ``p = ...``
  makes a new tensor the node never reads, and ``end_capture_to_conditional_node`` refuses a
  body that never writes ``p``: Note [write records] in ``_runtime/writes.py``). Random
  ops draw fresh numbers on every iteration (unlike a PyTorch graph, whose RNG offset is fixed
  per replay). ``tp.cond``, ``tp.while_loop``, ``tp.fori_loop`` and ``tp.switch``
  (``control_flow.py``) build these nodes from plain functions; :func:`current_capturing_graph`
  tells them which graph the current stream records into.
- **Threads.** A "global" or "thread_local" capture ends only on the thread that began it (as in
  CUDA); ``capture_end``/``reset`` from another thread raise and leave it open. If that thread
  exits with the capture open, the capture is discarded on its way out (Note [capture owner
  thread] in ``_runtime/capture.py``). A "relaxed" capture may end on any thread.
- **Differences from PyTorch.** ``with g:`` discards a failed capture (the graph is as if never
  captured) and restores the caller's stream; the executable is always compiled at
  ``capture_end``; the captured graph is always kept, so ``debug_dump`` works after any capture.
"""

from __future__ import annotations

import gc
import itertools
import os
import threading
import weakref
from typing import Any, Callable

from .._runtime import capture as _capture, device as _device, state as _state
from .._runtime.allocator import device_allocator as _allocator
from .._runtime.dispatch import launch_watchers as _launch_watchers
from .._runtime.select import require_accelerator
from .._runtime.writes import WhileBodyWatch, referenced_arrays
from ..backends import capability as _capability
from .._tensor import random as _random
from ._staging import plan_staging
from . import _streams
from ._streams import Stream, wrong_kind

_thread = _state._local   # this thread's {device index: native stream}, read inline below

__all__ = ["Graph", "current_capturing_graph", "graph_pool_handle", "is_current_stream_capturing"]

_UNSET = "__unset__"
_pool_ids = itertools.count(1)
_pool_lock = threading.Lock()


def graph_pool_handle() -> tuple:
    """A new memory-pool id to share between graphs (``Graph(pool=...)``).

    The pool exists once a graph captures into it and lives while any graph that captured into
    it lives; graphs sharing it must replay in capture order.
    """
    require_accelerator()
    with _pool_lock:
        return (0, next(_pool_ids))


def is_current_stream_capturing() -> bool:
    """Whether this thread's current stream on the current device is capturing."""
    backend = require_accelerator()
    return backend.is_capturing(_state.current_native_stream(_state.current_device_index()))


def current_capturing_graph(device=None) -> "Graph | None":
    """The :class:`Graph` that this thread's current stream on ``device`` (None: the current
    device) records into: its capture stream, or one of its open conditional bodies. None when
    that stream does not capture into a Graph, and on a host-only build.

    Work issued now lands in that graph, inside its innermost open conditional body if any; the
    functional control flow (``tp.cond`` and the rest) uses this to choose between running
    eagerly and building conditional nodes. Costs one dict test while nothing captures.
    """
    if not _capturing_streams:
        return None
    index = _state.current_device_index() if device is None else \
        _device.resolve_accelerator_index(device)
    native = _state.current_native_stream(index)
    entry = _capturing_streams.get(id(native))
    if entry is None or entry[0] is not native:
        return None
    return entry[1]()


# Note [capturing graphs]: id(native stream) -> (native stream, weak Graph) for every stream a
# Graph records into: its capture stream from capture_begin to the end of the capture, each
# conditional body stream while the body is open. Keyed by id (the entry holds the stream, so
# the id is not reused while listed); the graph is held weakly, and removes its entries itself
# when the capture ends, is discarded, or the graph dies.
_capturing_streams: dict[int, tuple] = {}
_capturing_lock = threading.Lock()


def _note_capturing(native, graph: "Graph") -> None:
    with _capturing_lock:
        _capturing_streams[id(native)] = (native, weakref.ref(graph))


def _forget_capturing(native) -> None:
    with _capturing_lock:
        entry = _capturing_streams.get(id(native))
        if entry is not None and entry[0] is native:
            del _capturing_streams[id(native)]


class Graph:
    """Capture/replay graph on the current accelerator device.

    Args:
        keep_graph: accepted for generic code: the captured graph is always kept (for
            :meth:`debug_dump`), and the executable is compiled at ``capture_end``.
        pool: None captures into a fresh private pool; otherwise a pool id from
            :func:`graph_pool_handle`, another Graph, or another graph's ``pool_id`` shares it.
        capture_error_mode: "global" fails the capture on unsafe calls anywhere in the process,
            "thread_local" only in this thread, "relaxed" skips the guards.

    Use as a context manager (``with g: ...``): it synchronizes, moves to a side stream, captures,
    and returns to the caller's stream on exit. If the block raises, the capture is discarded
    and the graph is as if never captured.

    .. warning:: The next replay overwrites every tensor the graph produced; replays of graphs
       sharing a pool must follow capture order; ``reset()`` releases the pool reference but
       never frees memory that a live tensor still uses. Captures do not nest on one stream:
       ``with h:`` inside ``with g:`` raises (capture the graphs one after the other).
    """

    def __init__(self, keep_graph: bool = False, *, pool=None,
                 capture_error_mode: str = "global"):
        self._backend = require_accelerator()
        self._keep_graph = bool(keep_graph)
        self._pool_arg = self._check_pool(pool)
        self._mode = _capture.check_mode(capture_error_mode)
        self._debug = False
        self._native_graph = None
        self._exec = None
        self._launch: Callable[..., Any] | None = None
        self._launch_failed: Callable[..., Any] = None  # type: ignore[assignment]   # with _launch
        self._staged = False
        self._pool_id: tuple[int, int] | None = None
        # set by capture_begin and read only after it: typed without their first None
        self._device_index: int = None  # type: ignore[assignment]
        self._capture_stream: Stream = None  # type: ignore[assignment]
        self._previous_stream: Stream = None  # type: ignore[assignment]
        self._record: _capture.CaptureRecord | None = None
        self._refusal: str | None = None          # why capture_end must discard the capture
        self._discarded_because: str | None = None
        # open conditional bodies, innermost last: (body stream, parent stream, while watch,
        # the node's kind, how many of its bodies come after this one)
        self._bodies: list[tuple[Stream, Stream, WhileBodyWatch | None, str, int]] = []
        self._context_streams: list[Stream] = []
        self._staging_plan = None
        self._write_back: tuple[int, ...] = ()
        # Note [captured inputs]: id -> the arrays (or opaque kernels) the capture reads that
        # lie outside its pool, and the launch watcher the capture stream had before it
        self._kept: dict[int, Any] = {}
        self._outer_watcher: Callable | None = None

    # -- pools ------------------------------------------------------------------------------
    @staticmethod
    def _check_pool(pool):
        if pool is None or pool is _UNSET:
            return pool
        if isinstance(pool, Graph):
            return pool.pool()
        if isinstance(pool, tuple) and len(pool) == 2 and all(isinstance(x, int) for x in pool):
            return pool
        raise TypeError(f"pool must be None, a graph_pool_handle(), a Graph or a Graph's "
                        f"pool_id, got {type(pool).__name__} {pool!r}")

    def pool(self) -> tuple:
        """Opaque id of this graph's memory pool, shareable with others (``Graph(pool=...)``)."""
        if self._pool_id is None:
            if self._pool_arg is None:
                self._pool_arg = graph_pool_handle()
            return self._pool_arg
        return self._pool_id

    @property
    def pool_id(self) -> tuple:
        """Allocator pool id this graph captured (or will capture) against."""
        return self.pool()

    # -- capture ----------------------------------------------------------------------------
    def enable_debug_mode(self) -> None:
        """Make :meth:`debug_dump` write every node's attributes (kernel names, sizes,
        conditional bodies). Call it before the capture.

        Raises:
            RuntimeError: the graph has already captured (call it before ``capture_begin()`` /
                ``with g:``, or ``reset()`` and capture again).
        """
        if self._exec is not None:
            raise RuntimeError("enable_debug_mode() comes too late: this graph has already "
                               "captured. Call it before capture_begin() / with g:, or reset() "
                               "the graph and capture again")
        self._debug = True

    def capture_begin(self, pool=_UNSET, capture_error_mode=_UNSET, stream=None) -> None:
        """Begin capture on the current stream (or ``stream``, made current until
        ``capture_end``) with the stored settings, or with the ones given here.

        Raises:
            RuntimeError: already capturing or captured (call ``reset()``), the stream is a
                default stream (capture needs a side stream; ``with g:`` provides one), or it
                already captures into another graph (captures do not nest on one stream).
        """
        if self._record is not None:
            raise RuntimeError("capture_begin: this graph is already capturing")
        if self._exec is not None:
            raise RuntimeError("capture_begin: this graph already holds a capture; call "
                               "reset() before capturing again")
        if pool is not _UNSET:
            self._pool_arg = self._check_pool(pool)
        if capture_error_mode is not _UNSET:
            self._mode = _capture.check_mode(capture_error_mode)
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"capture_begin(stream=...) takes a Stream, got "
                            f"{type(stream).__name__}")
        index = _state.current_device_index() if stream is None else stream.device_index
        stream = _streams.current_stream(index) if stream is None else stream
        _capture.check_capture_stream("capture_begin", stream._native, index)
        _random.generator_for(_device.device(self._backend.device_type, index)).state()
        pool_id = self.pool()
        allocator = _allocator(index)
        allocator.create_or_retain_pool(pool_id)
        allocator.begin_allocate_to_pool(pool_id, stream._native)
        try:
            self._backend.capture_begin(stream._native, self._mode)
        except BaseException:
            allocator.end_allocate_to_pool(pool_id, stream._native)
            allocator.release_pool(pool_id)
            raise
        self._pool_id, self._device_index, self._capture_stream = pool_id, index, stream
        self._previous_stream = _streams.current_stream(index)
        _streams.set_current_stream(stream)
        on_exit = None if self._mode == "relaxed" else \
            weakref.WeakMethod(self._discard_after_thread_exit)
        self._record = _capture.CaptureRecord(stream._native, index, self._mode, on_exit)
        self._refusal = self._discarded_because = None
        _capture.register_capture(self._record)
        _note_capturing(stream._native, self)
        self._kept = {}
        self._outer_watcher = _launch_watchers.get(stream._native)
        _launch_watchers[stream._native] = self._watch_capture_stream

    def capture_end(self) -> None:
        """End capture and compile the executable (paid here, not on first replay).

        The caller's stream is restored on the thread that began the capture; a "relaxed"
        capture ended from another thread leaves that thread's current stream as it is
        (current streams are per thread).

        Raises:
            RuntimeError: not capturing; called on another thread than the one that began a
                "global" or "thread_local" capture (the capture stays open: end it on that
                thread); a conditional body is still open; or the capture was invalidated
                (then the graph is as if never captured).
        """
        if self._record is None:
            if self._discarded_because is not None:
                reason, self._discarded_because = self._discarded_because, None
                raise RuntimeError(f"capture_end: this graph is not capturing: its capture was "
                                   f"discarded because {reason}; capture again")
            raise RuntimeError("capture_end: this graph is not capturing (call capture_begin "
                               "first)")
        self._record.check_owner_thread("capture_end")
        _capture.check_bodies_closed(self._record, "capture_end")
        stream, record = self._capture_stream, self._record
        try:
            native_graph = self._backend.capture_end(stream._native)
        except BaseException:
            self._abandon()
            raise
        self._finish_capture()
        if record.invalidated_by is not None or self._refusal is not None:
            self._backend.graph_destroy(native_graph, None)
            self._release_pool()
            why = self._refusal or (f"{record.invalidated_by} (a capture-unsafe call under "
                                    f"capture_error_mode={record.mode!r})")
            self._refusal = None
            raise RuntimeError(f"capture_end: the capture was invalidated by {why}; nothing "
                               f"was captured")
        try:
            self._exec = self._backend.instantiate(native_graph)
            self._launch, self._launch_failed = self._backend.launcher(self._exec)
        except BaseException:
            self._backend.graph_destroy(native_graph, None)
            self._release_pool()
            raise
        # Kept on every backend (cuda keeps it alive for the executable anyway: Note [fused
        # staging]), so a plain debug_dump works after any capture.
        self._native_graph = native_graph

    def _finish_capture(self, restore_stream: bool = True) -> None:
        """Stop routing allocations to the pool and restore the caller's stream (on the thread
        that began the capture: the current stream is per thread)."""
        record: _capture.CaptureRecord = self._record  # type: ignore[assignment]   # capturing
        _capture.unregister_capture(record)
        _forget_capturing(self._capture_stream._native)
        if self._outer_watcher is None:
            _launch_watchers.pop(self._capture_stream._native, None)
        else:
            _launch_watchers[self._capture_stream._native] = self._outer_watcher
        self._outer_watcher = None
        _allocator(self._device_index).end_allocate_to_pool(self._pool_id,
                                                            self._capture_stream._native)
        if restore_stream and record.thread_id == threading.get_ident():
            _streams.set_current_stream(self._previous_stream)
        self._record = None

    def _release_pool(self) -> None:
        if self._pool_id is not None:
            _allocator(self._device_index).release_pool(self._pool_id)
        self._pool_id = None

    def _abandon(self, restore_stream: bool = True) -> None:
        """Discard an open capture: close bodies, end the native capture, drop everything.
        Callers have checked the thread (``CaptureRecord.check_owner_thread``)."""
        backend = self._backend
        while self._bodies:
            body = self._bodies.pop()[0]
            _launch_watchers.pop(body._native, None)
            _forget_capturing(body._native)
            try:
                backend.end_conditional(body._native)
            except Exception:  # noqa: BLE001 - discarding; the original error matters
                pass
            _allocator(self._device_index).end_allocate_to_pool(self._pool_id, body._native)
        native_graph = None
        if backend.is_capturing(self._capture_stream._native):
            try:
                native_graph = backend.capture_end(self._capture_stream._native)
            except Exception:  # noqa: BLE001
                native_graph = None
        self._finish_capture(restore_stream)
        self._refusal = None
        self._kept = {}
        backend.graph_destroy(native_graph, None)
        self._release_pool()

    def _discard_after_thread_exit(self) -> None:
        """Run by the exiting thread that began the capture (Note [capture owner thread])."""
        record = self._record
        if record is None or record.thread_id != threading.get_ident():
            return
        # The thread's current streams are being torn down: nothing to restore.
        self._abandon(restore_stream=False)
        self._discarded_because = (f"the thread that began it ({record.thread_name!r}) exited "
                                   f"before capture_end()")

    # -- conditional nodes ------------------------------------------------------------------
    def _begin_conditional(self, kind: str, scalar_pred, call: str) -> None:
        self._open_node(kind, _capture.check_predicate(call, self._record, scalar_pred))

    def _open_node(self, kind: str, predicate, count: int = 1) -> None:
        """Add a ``kind`` node of ``count`` bodies gated on ``predicate`` (a checked ``xp``
        array) and open its first body."""
        parent = _streams.current_stream(self._device_index)
        body_native = self._backend.begin_conditional(parent._native, kind, predicate, count)
        watch = WhileBodyWatch(predicate) if kind == "while" else None
        self._enter_body(Stream._wrap(body_native, self._device_index), parent, watch, kind,
                         count - 1)

    def _enter_body(self, body: Stream, parent: Stream, watch: WhileBodyWatch | None,
                    kind: str, later: int) -> None:
        """Make ``body`` (a conditional body the backend opened, of a ``kind`` node with
        ``later`` bodies after it) the innermost open body: its allocations come from the
        graph's pool and the current stream is it."""
        body_native = body._native
        _allocator(self._device_index).begin_allocate_to_pool(self._pool_id, body_native)
        self._bodies.append((body, parent, watch, kind, later))
        self._record.body_streams.append(body_native)  # type: ignore[union-attr]   # capturing
        _note_capturing(body_native, self)
        _launch_watchers[body_native] = self._note_body_work
        _streams.set_current_stream(body)

    def _leave_body(self, body: Stream) -> None:
        """Forget ``body`` (the innermost open body, whose capture the backend ended)."""
        self._bodies.pop()
        _launch_watchers.pop(body._native, None)
        _forget_capturing(body._native)
        self._record.body_streams.remove(body._native)  # type: ignore[union-attr]   # capturing
        _allocator(self._device_index).end_allocate_to_pool(self._pool_id, body._native)

    def _watch_capture_stream(self, kernel) -> None:
        """The capture stream's launch watcher: keep the kernel's inputs, then hand it to the
        watcher the stream had before the capture, if any."""
        self._keep_inputs(kernel)
        if self._outer_watcher is not None:
            self._outer_watcher(kernel)

    def _keep_inputs(self, kernel) -> None:
        """Note [captured inputs]: keep what ``kernel`` (None: a graph launch, whose own graph
        keeps its inputs) references outside this graph's pool."""
        if kernel is None:
            return
        arrays = referenced_arrays(kernel, self._backend)
        if arrays is None:   # cannot be seen into: keep the kernel, and all it holds
            self._kept[id(kernel)] = kernel
            return
        allocator, pool_id, pointer = _allocator(self._device_index), self._pool_id, \
            self._backend.array_ptr
        for array in arrays:
            if id(array) in self._kept or array.size == 0:
                continue
            try:
                inside = allocator.pool_contains(pool_id, pointer(array))
            except (TypeError, ValueError):   # host memory (a sim kernel's NumPy constant)
                continue
            if not inside:
                self._kept[id(array)] = array

    def _note_body_work(self, kernel) -> None:
        """Note [write records]: ``kernel`` (None: a graph launch) was recorded into
        a body; every open while body of this graph may have been written by it. Its inputs
        are kept as the capture stream's are (Note [captured inputs])."""
        self._keep_inputs(kernel)
        for entry in self._bodies:
            watch = entry[2]
            if watch is not None:
                watch.note(kernel, self._backend)

    def begin_capture_to_if_node(self, scalar_pred) -> None:
        """Inside an open capture, gate the following work on an if node.

        ``scalar_pred`` must be a one-element bool tensor on the capturing device; at replay
        time its value is read and the body captured between this call and
        :meth:`end_capture_to_conditional_node` runs only when it is true.
        """
        self._begin_conditional("if", scalar_pred, "begin_capture_to_if_node")

    def begin_capture_to_if_else_node(self, scalar_pred) -> None:
        """Like :meth:`begin_capture_to_if_node`, but the node has a second body: after the
        work that runs when the predicate is true, :meth:`begin_capture_to_else_body` starts
        the work that runs when it is false, and :meth:`end_capture_to_conditional_node`
        closes the node (no else body: nothing runs when false). CUDA 12.8's two-body IF node,
        on drivers that have it (``tp.cond`` uses it there; see
        :meth:`supports_if_else_nodes`).

        Raises:
            RuntimeError: the backend or driver has no two-body if node (use two
                :meth:`begin_capture_to_if_node` on ``p`` and ``p.logical_not()`` instead);
                not inside an open capture.
            TypeError, ValueError: as :meth:`begin_capture_to_if_node`.
        """
        call = "begin_capture_to_if_else_node"
        if not self.supports_if_else_nodes():
            raise RuntimeError(f"{call}: this {self._backend_name()} backend (or its driver: "
                               f"CUDA 12.8+ is needed) records no two-body if node; gate the "
                               f"else work on a second begin_capture_to_if_node over the "
                               f"negated predicate instead")
        self._open_node("if_else", _capture.check_predicate(call, self._record, scalar_pred), 2)

    def begin_capture_to_else_body(self) -> None:
        """Inside the first body of the innermost if/else node
        (:meth:`begin_capture_to_if_else_node`), close it and capture the following work into
        the node's second body, run when the predicate is false.

        Raises:
            RuntimeError: not inside an open capture, or the innermost open body is not the
                first body of an if/else node (an if node, a while node, or an else body).
        """
        self._next_body("begin_capture_to_else_body", "if_else",
                        "the first body of an if/else node; open one with "
                        "begin_capture_to_if_else_node (if and while nodes, and else bodies, "
                        "take no else body)")

    def begin_capture_to_switch_node(self, scalar_index, num_cases: int) -> None:
        """Inside an open capture, a switch node of ``num_cases`` bodies: at replay time the
        value of ``scalar_index`` (a one-element int64 tensor on the capturing device) picks
        the body that runs, and a value outside ``[0, num_cases)`` runs none (CUDA's rule; the
        functional ``tp.switch`` clamps instead, as JAX). The work captured from here on is
        case 0; :meth:`begin_capture_to_next_case` starts each next case and
        :meth:`end_capture_to_conditional_node` closes the node (cases never begun are empty).
        CUDA 12.8's SWITCH node, on drivers that have it (see :meth:`supports_switch_nodes`).

        Raises:
            RuntimeError: the backend or driver has no switch node (gate each case on an if
                node over ``index == k`` instead); not inside an open capture.
            TypeError: ``scalar_index`` is not an int64 tensor, or ``num_cases`` not an int.
            ValueError: ``num_cases < 1``; an index of more than one element or on another
                device.
        """
        call = "begin_capture_to_switch_node"
        if not self.supports_switch_nodes():
            raise RuntimeError(f"{call}: this {self._backend_name()} backend (or its driver: "
                               f"CUDA 12.8+ is needed) records no switch node; gate each case "
                               f"on a begin_capture_to_if_node over (index == k) instead")
        if isinstance(num_cases, bool) or not isinstance(num_cases, int):
            raise TypeError(f"{call}: num_cases must be an int, got "
                            f"{type(num_cases).__name__}")
        if num_cases < 1:
            raise ValueError(f"{call}: num_cases must be >= 1, got {num_cases}")
        index = _capture.check_predicate(call, self._record, scalar_index, index=True)
        self._open_node("switch", index, num_cases)

    def begin_capture_to_next_case(self) -> None:
        """Inside a case of the innermost switch node (:meth:`begin_capture_to_switch_node`),
        close it and capture the following work into the next case.

        Raises:
            RuntimeError: not inside an open capture, or the innermost open body is not a case
                of a switch node with a case after it.
        """
        self._next_body("begin_capture_to_next_case", "switch",
                        "a case of a switch node with a case after it (its last case, and if, "
                        "if/else and while bodies, have no next case)")

    def _next_body(self, call: str, kind: str, what: str) -> None:
        """Move the innermost open body of a ``kind`` node on to the node's next body."""
        if self._record is None:
            raise RuntimeError(f"{call}: only inside an open capture (capture_begin or with g:)")
        _capture.check_body_open(self._record, call)
        body, parent, watch, node_kind, later = self._bodies[-1]
        if node_kind != kind or later < 1:
            raise RuntimeError(f"{call}: the innermost open conditional body is not {what}")
        next_native = self._backend.begin_next_body(body._native)
        self._leave_body(body)
        self._enter_body(Stream._wrap(next_native, self._device_index), parent, watch, kind,
                         later - 1)

    @staticmethod
    def supports_if_else_nodes() -> bool:
        """Whether the accelerator records two-body if nodes
        (:meth:`begin_capture_to_if_else_node`): sim does; cuda does with a CUDA 12.8+ driver."""
        return "if_else" in _capability(require_accelerator(), "conditional_kinds")

    @staticmethod
    def supports_switch_nodes() -> bool:
        """Whether the accelerator records switch nodes (:meth:`begin_capture_to_switch_node`):
        sim does; cuda does with a CUDA 12.8+ driver."""
        return "switch" in _capability(require_accelerator(), "conditional_kinds")

    def _backend_name(self) -> str:
        return getattr(self._backend, "name", "accelerator")

    def begin_capture_to_while_node(self, scalar_pred) -> None:
        """Like :meth:`begin_capture_to_if_node`, but the body loops while the predicate is true
        when the body ends (a device-side while node: no host round trip per iteration)."""
        self._begin_conditional("while", scalar_pred, "begin_capture_to_while_node")

    def set_conditional_handle_for_current_node(self, scalar_pred) -> None:
        """Refresh the predicate consumed by the innermost open conditional node from
        ``scalar_pred`` at this point of its body (used for nested conditionals); a while node
        re-reads this predicate when its body ends."""
        call = "set_conditional_handle_for_current_node"
        predicate = _capture.check_predicate(call, self._record, scalar_pred)
        _capture.check_body_open(self._record, call)  # type: ignore[arg-type]   # checked above
        body, _, watch = self._bodies[-1][:3]
        self._backend.set_conditional(body._native, predicate)
        if watch is not None:
            watch.predicate = predicate   # the predicate the while node re-reads from now on

    def end_capture_to_conditional_node(self) -> None:
        """Close the open conditional body; capture continues on the parent stream.

        Raises:
            RuntimeError: no body is open; or a while body never writes its predicate (Note
                [write records]): the loop could never end. The body is closed and the
                capture invalidated (``capture_end`` raises; ``with g:`` discards it).
        """
        if self._record is None:
            raise RuntimeError("end_capture_to_conditional_node: only inside an open capture "
                               "(capture_begin or with g:)")
        _capture.check_body_open(self._record, "end_capture_to_conditional_node")
        body, parent, watch = self._bodies[-1][:3]
        self._leave_body(body)
        self._backend.end_conditional(body._native)
        _streams.set_current_stream(parent)
        if watch is not None and self._record.invalidated_by is None and \
                self._refusal is None and not watch.may_write_predicate(self._backend):
            self._refusal = ("a while body that never writes its predicate "
                             "(end_capture_to_conditional_node)")
            raise RuntimeError(
                "end_capture_to_conditional_node: the while body never writes its predicate, "
                "so once the loop starts it never ends. Update the predicate in place inside "
                "the body, e.g. flag.copy_(counter < 5) rather than flag = counter < 5 (which "
                "binds the name to a new tensor the while node never reads). The capture is "
                "invalidated")

    def _body_depth(self) -> int:
        """How many conditional bodies are open (``tensorplay.accelerator.control_flow``
        closes down to its own depth after an error)."""
        return len(self._bodies)

    def _invalidate(self, reason: str) -> None:
        """Make ``capture_end`` refuse the open capture, saying it was invalidated by
        ``reason`` (as a refused while body does; ``with g:`` discards it). The first reason
        is kept, and a capture already invalidated by a capture-unsafe call keeps that one.
        Used by ``control_flow`` when a function raised halfway through a conditional body."""
        record = self._record
        if record is not None and record.invalidated_by is None and self._refusal is None:
            self._refusal = reason

    # -- running ----------------------------------------------------------------------------
    def instantiate(self) -> None:
        """No-op once instantiated (``capture_end`` already compiled); kept for late callers.

        Raises:
            RuntimeError: before a capture has ended.
        """
        if self._exec is None:
            raise RuntimeError("instantiate: nothing captured yet")

    def replay(self, stream: Stream | None = None) -> None:
        """Run the graph: launch the cached executable on the current stream.

        Args:
            stream: launch on this explicit stream instead of querying the current one — shaves
                a thread-local lookup off hot loops pinned to one stream.

        Raises:
            RuntimeError: nothing captured. TypeError: ``stream`` is not a Stream.
            ValueError: ``stream`` is on another device than the graph.
        """
        launch = self._launch
        if launch is None:
            raise RuntimeError("replay: nothing captured yet (capture first, or after reset())")
        if stream is None:
            stream = _streams.current_stream(self._device_index)
            handle = stream._handle
        else:
            try:   # free unless it raises: the type is checked only on the way out
                handle = stream._handle
                same_device = stream.device_index == self._device_index
            except AttributeError:
                same_device = False
            if not same_device:
                self._refuse_replay_stream(stream)
        if self._staged:
            self._backend.unstage(self._exec)
            self._staged = False
        try:
            launch(handle)
        except Exception as error:
            self._launch_failed(error, stream._native)
        if _launch_watchers:   # replayed inside a while body: Note [write records]
            _note_graph_launch(stream._native)

    def _refuse_replay_stream(self, stream) -> None:
        if not isinstance(stream, Stream):
            raise wrong_kind("Graph.replay(stream=...)", "a tensorplay Stream or None", stream)
        raise ValueError(f"replay: the graph was captured on device {self._device_index}, the "
                         f"stream is on {stream.device}")

    def stage_and_launch(self, static_inputs, inputs) -> None:
        """Stage every input onto its static buffer and replay, in one call.

        Args:
            static_inputs: a list (or tuple) of the buffers captured by the graph (kept alive by
                the caller).
            inputs: a list (or tuple) of fresh tensors whose contents overwrite the matching
                static buffer this iteration. Contiguous same-dtype, same-shape, same-device
                pairs take a raw device-to-device copy fused with the launch; anything else
                falls back to full ``copy_`` semantics (broadcasting, casting, other devices)
                before the launch.

        Raises:
            ValueError: lengths differ, or a pair cannot be copied (naming the index).
            TypeError: either argument is not a list or tuple, or holds a non-Tensor.
        """
        exe = self._exec
        if exe is None:
            raise RuntimeError("stage_and_launch: nothing captured yet")
        native = _thread.native.get(self._device_index) or \
            _state.current_native_stream(self._device_index)
        copies, copies_out, slow_out, self._staging_plan = plan_staging(
            static_inputs, inputs, self._device_index, self._backend, self._staging_plan,
            self._write_back)
        self._staged = True   # a launch that fails may leave the staging nodes set
        self._backend.stage_and_launch(exe, native, copies, copies_out)
        if _launch_watchers:   # Note [write records]
            _note_graph_launch(native)
        self._staged = bool(copies or copies_out)
        for index in slow_out:
            inputs[index].copy_(static_inputs[index])

    def _copy_back_after_launch(self, indices: tuple[int, ...]) -> None:
        """After every ``stage_and_launch``, copy the static inputs at ``indices`` back into the
        fresh inputs (fused with the end of the launch where the pair is fast).

        Internal, for ``tensorplay.compile``: a compiled function that changes an input in place
        must leave in the caller's tensor what an eager call would have. Set once per graph, so
        the public ``stage_and_launch`` keeps the seed's signature and no per-call argument.
        """
        self._write_back = tuple(indices)
        self._staging_plan = None

    def reset(self) -> None:
        """Destroy the executable and release the pool reference.

        Tensors allocated during the capture keep their memory until they are freed; the pool
        is returned to the device only when no graph and no tensor needs it. A capture still
        open from ``capture_begin()`` is discarded.

        Raises:
            RuntimeError: inside ``with g:`` (leave the block first; the capture is left open
                and usable), or called on another thread than the one that began a "global"
                or "thread_local" capture (Note [capture owner thread]; the capture is left
                open).
        """
        if self._context_streams:
            raise RuntimeError("reset: this graph is capturing inside its `with g:` block; "
                               "reset() after the block ends (an exception leaving the block "
                               "discards the capture). The capture continues")
        if self._record is not None:
            self._record.check_owner_thread("reset")
            self._abandon()
        self._discarded_because = None
        self._backend.graph_destroy(self._native_graph, self._exec)
        self._native_graph = self._exec = self._launch = None
        self._staged = False
        self._kept = {}
        self._release_pool()
        self._pool_arg = None if not isinstance(self._pool_arg, tuple) else self._pool_arg
        self._staging_plan = None
        self._write_back = ()

    def debug_dump(self, path: "str | os.PathLike") -> None:
        """Write a Graphviz DOT rendering of the captured graph to ``path``.

        Works after any capture; call :meth:`enable_debug_mode` before capturing for a dump
        with every node's attributes.

        Raises:
            TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
            RuntimeError: nothing captured (or the graph was reset).
        """
        if not isinstance(path, (str, os.PathLike)):
            raise wrong_kind("debug_dump()", "a path (str or os.PathLike)", path)
        if self._native_graph is None:
            raise RuntimeError("debug_dump: nothing captured yet (capture first, or after "
                               "reset())")
        self._backend.graph_to_dot(self._native_graph, os.fsdecode(os.fspath(path)),
                                   self._debug)

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> "Graph":
        index = _state.current_device_index()
        caller = _streams.current_stream(index)
        _capture.check_not_capturing("with Graph()", caller._native, index)
        _capture.wait_for_device(index)
        gc.collect()
        side = _side_stream(index)
        side.wait_stream(caller)
        side.__enter__()
        self._context_streams.append(side)
        try:
            self.capture_begin()
        except BaseException:
            side.__exit__(None, None, None)
            self._context_streams.pop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        side = self._context_streams.pop()
        try:
            if exc_type is not None:
                if self._record is not None:
                    self._abandon()
            else:
                try:
                    self.capture_end()
                except BaseException:
                    if self._record is not None:
                        self._abandon()
                    raise
        finally:
            side.__exit__(None, None, None)

    def __del__(self):
        try:
            record = self._record
            if record is not None and record.owned_elsewhere():
                # Only its own thread may end it: keep this graph alive (resurrected) for that
                # thread's exit hook (Note [capture owner thread]).
                record.on_thread_exit = lambda graph=self: graph._discard_after_thread_exit
                return
            if record is not None:
                self._abandon()   # a capture left open by a graph nobody holds any more
            if self._exec is not None or self._pool_id is not None:
                self.reset()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self._record is not None:
            state = "capturing"
        elif self._exec is not None:
            state = "captured"
        else:
            state = "empty"
        return f"<tensorplay.accelerator.Graph {state}, pool={self.pool()}>"


# Note [captured inputs]
# ----------------------
# A captured kernel keeps raw device addresses; on cuda nothing else holds the tensors it reads.
# A tensor made before the capture and dropped afterwards (the initial values of a while_loop
# built before ``with g:``, a weight replaced by rebinding) would return its block to the
# caching allocator, the next eager tensor of that size would take it, and every later replay
# would read, or write, that tensor's bytes instead. Sim's graphs hold their kernels' closures,
# so there it could not happen: the difference made a green sim run prove nothing. So while a
# graph captures, a launch watcher on each of its streams scans every kernel's closure for the
# arrays it references (``writes.referenced_arrays``, the scan the while-body write check
# uses) and keeps those that lie outside the graph's pool until ``reset()`` (the pool's own
# memory has its lifetime already: Note [graph pool lifetime]). A kernel the scan cannot see
# into is kept whole. Only captures pay for the scan; an eager launch is unchanged.


def _note_graph_launch(native_stream) -> None:
    """A graph launched into an open body: what it writes cannot be seen (Note [write
    records])."""
    watcher = _launch_watchers.get(native_stream)
    if watcher is not None:
        watcher(None)


_side_streams: dict[tuple[int, int], Stream] = {}


def _side_stream(index: int) -> Stream:
    """A per-thread, per-device side stream for ``with g:`` capture."""
    key = (threading.get_ident(), index)
    stream = _side_streams.get(key)
    if stream is None:
        stream = _side_streams[key] = Stream(index)
    return stream
