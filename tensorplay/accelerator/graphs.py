"""Device-agnostic capture/replay graphs for the current accelerator.

:class:`Graph` records a sequence of operations on the active accelerator backend and replays it
with reduced launch overhead. Everything below is the same on sim and cuda; the backends only
record and launch (``tensorplay.backends``).

What to know before capturing:

- **Memory.** Tensors allocated while a stream captures come from the graph's private pool (or a
  pool shared with ``pool=``). That memory stays valid for every replay and is handed to nobody
  else while the graph or a tensor from it lives (Note [graph pool lifetime] in
  ``tensorplay/_allocator.py``). Graphs that share a pool may reuse each other's memory, so they
  must replay in the order they were captured.
- **Outputs are overwritten.** A replay writes the same memory every time: tensors produced during
  capture hold the values of the latest replay. ``clone()`` what you want to keep.
- **Unsafe calls.** Anything that waits for the device — ``item``, ``tolist``, ``numpy``/``cpu``,
  a copy to or from the host, ``synchronize``, an event wait — raises ``RuntimeError`` during a
  capture under ``capture_error_mode`` "global" (any thread) or "thread_local" (the capturing
  thread); the capture is invalidated and ``capture_end`` raises. "relaxed" skips the guards
  for other threads (Note [capture-unsafe calls] in ``accelerator/_state.py``).
- **Conditionals.** ``begin_capture_to_if_node(p)`` / ``begin_capture_to_while_node(p)`` take a
  one-element bool tensor on the capturing device. A while body repeats while ``p`` is true
  when the body ends, so the body must update ``p``. Random ops draw fresh numbers on every
  iteration (unlike a PyTorch graph, whose RNG offset is fixed per replay).
- **Differences from PyTorch.** ``with g:`` discards a failed capture (the graph is as if never
  captured) and restores the caller's stream; the executable is always compiled at
  ``capture_end``.
"""

from __future__ import annotations

import gc
import itertools
import threading

from .. import _device, _random
from .._staging import plan_staging
from ..backends import require_accelerator
from . import _state
from ._streams import Stream

__all__ = ["Graph", "graph_pool_handle", "is_current_stream_capturing"]

_MODES = ("global", "thread_local", "relaxed")
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


def _check_mode(mode) -> str:
    if mode not in _MODES:
        raise ValueError(f"capture_error_mode must be one of {', '.join(map(repr, _MODES))}, "
                         f"got {mode!r}")
    return mode


def _allocator(index: int):
    from .._allocator import device_allocator

    return device_allocator(index)


class Graph:
    """Capture/replay graph on the current accelerator device.

    Args:
        keep_graph: keep the captured graph after instantiation (``debug_dump`` needs it; so
            does ``enable_debug_mode()``). The executable is compiled at ``capture_end`` either
            way.
        pool: None captures into a fresh private pool; otherwise a pool id from
            :func:`graph_pool_handle`, another Graph, or another graph's ``pool_id`` shares it.
        capture_error_mode: "global" fails the capture on unsafe calls anywhere in the process,
            "thread_local" only in this thread, "relaxed" skips the guards.

    Use as a context manager (``with g: ...``): it synchronizes, moves to a side stream, captures,
    and returns to the caller's stream on exit. If the block raises, the capture is discarded
    and the graph is as if never captured.

    .. warning:: The next replay overwrites every tensor the graph produced; replays of graphs
       sharing a pool must follow capture order; ``reset()`` releases the pool reference but
       never frees memory that a live tensor still uses.
    """

    def __init__(self, keep_graph: bool = False, *, pool=None,
                 capture_error_mode: str = "global"):
        self._backend = require_accelerator()
        self._keep_graph = bool(keep_graph)
        self._pool_arg = self._check_pool(pool)
        self._mode = _check_mode(capture_error_mode)
        self._debug = False
        self._native_graph = None
        self._exec = None
        self._launch = self._launch_ok = self._launch_failed = None
        self._staged = False
        self._pool_id = None
        self._device_index: int | None = None
        self._capture_stream: Stream | None = None
        self._previous_stream: Stream | None = None
        self._record: _state.CaptureRecord | None = None
        self._bodies: list[tuple[Stream, Stream]] = []
        self._context_streams: list[Stream] = []
        self._staging_plan = None

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
        """Keep the captured graph with full node attributes for :meth:`debug_dump`."""
        self._debug = True

    def capture_begin(self, pool=_UNSET, capture_error_mode=_UNSET, stream=None) -> None:
        """Begin capture on the current stream (or ``stream``, made current until
        ``capture_end``) with the stored settings, or with the ones given here.

        Raises:
            RuntimeError: already capturing or captured (call ``reset()``), or the stream is a
                default stream (capture needs a side stream; ``with g:`` provides one).
        """
        if self._record is not None:
            raise RuntimeError("capture_begin: this graph is already capturing")
        if self._exec is not None:
            raise RuntimeError("capture_begin: this graph already holds a capture; call "
                               "reset() before capturing again")
        if pool is not _UNSET:
            self._pool_arg = self._check_pool(pool)
        if capture_error_mode is not _UNSET:
            self._mode = _check_mode(capture_error_mode)
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"capture_begin(stream=...) takes a Stream, got "
                            f"{type(stream).__name__}")
        index = _state.current_device_index() if stream is None else stream.device_index
        stream = _state.current_stream(index) if stream is None else stream
        if getattr(stream._native, "is_default", False):
            raise RuntimeError(f"cannot capture on the default stream of {stream.device}; "
                               f"capture needs a side stream (with Graph(): provides one)")
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
        self._previous_stream = _state.current_stream(index)
        _state.set_current_stream(stream)
        self._record = _state.CaptureRecord(stream._native, index, self._mode)
        _state.register_capture(self._record)

    def capture_end(self) -> None:
        """End capture and compile the executable (paid here, not on first replay).

        Raises:
            RuntimeError: not capturing; a conditional body is still open; or the capture was
                invalidated (then the graph is as if never captured).
        """
        if self._record is None:
            raise RuntimeError("capture_end: this graph is not capturing (call capture_begin "
                               "first)")
        if self._bodies:
            raise RuntimeError(f"capture_end: {len(self._bodies)} conditional body(ies) still "
                               f"open; call end_capture_to_conditional_node() first")
        stream, record = self._capture_stream, self._record
        try:
            native_graph = self._backend.capture_end(stream._native)
        except BaseException:
            self._abandon()
            raise
        self._finish_capture()
        if record.invalidated_by is not None:
            self._backend.graph_destroy(native_graph, None)
            self._release_pool()
            raise RuntimeError(f"capture_end: the capture was invalidated by "
                               f"{record.invalidated_by} (a capture-unsafe call under "
                               f"capture_error_mode={record.mode!r}); nothing was captured")
        try:
            self._exec = self._backend.instantiate(native_graph)
            self._launch, self._launch_ok, self._launch_failed = \
                self._backend.launcher(self._exec)
        except BaseException:
            self._backend.graph_destroy(native_graph, None)
            self._release_pool()
            raise
        if self._keep_graph or self._debug:
            self._native_graph = native_graph
        else:
            self._backend.graph_destroy(native_graph, None)

    def _finish_capture(self) -> None:
        """Stop routing allocations to the pool and restore the caller's stream."""
        _state.unregister_capture(self._record)
        _allocator(self._device_index).end_allocate_to_pool(self._pool_id,
                                                            self._capture_stream._native)
        _state.set_current_stream(self._previous_stream)
        self._record = None

    def _release_pool(self) -> None:
        if self._pool_id is not None:
            _allocator(self._device_index).release_pool(self._pool_id)
        self._pool_id = None

    def _abandon(self) -> None:
        """Discard an open capture: close bodies, end the native capture, drop everything."""
        backend = self._backend
        while self._bodies:
            body, parent = self._bodies.pop()
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
        self._finish_capture()
        backend.graph_destroy(native_graph, None)
        self._release_pool()

    # -- conditional nodes ------------------------------------------------------------------
    def _check_predicate(self, scalar_pred, call: str):
        from .._dtype import bool as bool_dtype
        from .._tensor import Tensor

        if self._record is None:
            raise RuntimeError(f"{call}: only inside an open capture (capture_begin or with g:)")
        if not isinstance(scalar_pred, Tensor):
            raise TypeError(f"{call}: the predicate must be a one-element bool Tensor, got "
                            f"{type(scalar_pred).__name__}")
        if scalar_pred.dtype is not bool_dtype:
            raise TypeError(f"{call}: the predicate must be a bool tensor, got "
                            f"{scalar_pred.dtype.name}")
        if scalar_pred.numel() != 1:
            raise ValueError(f"{call}: the predicate must have exactly one element, got shape "
                             f"{scalar_pred.shape}")
        if scalar_pred.device.type == "cpu" or scalar_pred.device.index != self._device_index:
            raise ValueError(f"{call}: the predicate must be on the capturing device "
                             f"{self._capture_stream.device}, got {scalar_pred.device}")
        return scalar_pred._data

    def _begin_conditional(self, kind: str, scalar_pred, call: str) -> None:
        predicate = self._check_predicate(scalar_pred, call)
        parent = _state.current_stream(self._device_index)
        body_native = self._backend.begin_conditional(parent._native, kind, predicate)
        body = Stream._wrap(body_native, self._device_index)
        _allocator(self._device_index).begin_allocate_to_pool(self._pool_id, body_native)
        self._bodies.append((body, parent))
        self._record.body_streams.append(body_native)
        _state.set_current_stream(body)

    def begin_capture_to_if_node(self, scalar_pred) -> None:
        """Inside an open capture, gate the following work on an if node.

        ``scalar_pred`` must be a one-element bool tensor on the capturing device; at replay
        time its value is read and the body captured between this call and
        :meth:`end_capture_to_conditional_node` runs only when it is true.
        """
        self._begin_conditional("if", scalar_pred, "begin_capture_to_if_node")

    def begin_capture_to_while_node(self, scalar_pred) -> None:
        """Like :meth:`begin_capture_to_if_node`, but the body loops while the predicate is true
        when the body ends (a device-side while node: no host round trip per iteration)."""
        self._begin_conditional("while", scalar_pred, "begin_capture_to_while_node")

    def set_conditional_handle_for_current_node(self, scalar_pred) -> None:
        """Refresh the predicate consumed by the innermost open conditional node from
        ``scalar_pred`` at this point of its body (used for nested conditionals); a while node
        re-reads this predicate when its body ends."""
        predicate = self._check_predicate(scalar_pred, "set_conditional_handle_for_current_node")
        if not self._bodies:
            raise RuntimeError("set_conditional_handle_for_current_node: no conditional node is "
                               "open")
        self._backend.set_conditional(self._bodies[-1][0]._native, predicate)

    def end_capture_to_conditional_node(self) -> None:
        """Close the open conditional body; capture continues on the parent stream."""
        if not self._bodies:
            raise RuntimeError("end_capture_to_conditional_node: no conditional node is open "
                               "(unbalanced with begin_capture_to_if_node/while_node)")
        body, parent = self._bodies.pop()
        self._record.body_streams.remove(body._native)
        self._backend.end_conditional(body._native)
        _allocator(self._device_index).end_allocate_to_pool(self._pool_id, body._native)
        _state.set_current_stream(parent)

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
        """
        launch = self._launch
        if launch is None:
            raise RuntimeError("replay: nothing captured yet (capture first, or after reset())")
        if stream is None:
            stream = _state.current_stream(self._device_index)
        elif stream.device_index != self._device_index:
            raise ValueError(f"replay: the graph was captured on device {self._device_index}, "
                             f"the stream is on {stream.device}")
        if self._staged:
            self._backend.unstage(self._exec)
            self._staged = False
        result = launch(stream._handle)
        if result[0] is not self._launch_ok:
            self._launch_failed(result, stream._native)

    def stage_and_launch(self, static_inputs, inputs) -> None:
        """Stage every input onto its static buffer and replay, in one call.

        Args:
            static_inputs: buffers captured by the graph (kept alive by the caller).
            inputs: fresh tensors whose contents overwrite the matching static buffer this
                iteration. Contiguous same-dtype, same-shape, same-device pairs take a raw
                device-to-device copy fused with the launch; anything else falls back to full
                ``copy_`` semantics (broadcasting, casting, other devices) before the launch.

        Raises:
            ValueError: lengths differ, or a pair cannot be copied (naming the index).
            TypeError: a non-Tensor in either sequence.
        """
        exe = self._exec
        if exe is None:
            raise RuntimeError("stage_and_launch: nothing captured yet")
        native = _state.current_native_stream(self._device_index)
        copies, self._staging_plan = plan_staging(static_inputs, inputs, self._device_index,
                                                  self._backend, self._staging_plan)
        self._backend.stage_and_launch(exe, native, copies)
        self._staged = bool(copies)

    def reset(self) -> None:
        """Destroy the executable and release the pool reference.

        Tensors allocated during the capture keep their memory until they are freed; the pool
        is returned to the device only when no graph and no tensor needs it.
        """
        if self._record is not None:
            self._abandon()
        self._backend.graph_destroy(self._native_graph, self._exec)
        self._native_graph = self._exec = self._launch = None
        self._staged = False
        self._release_pool()
        self._pool_arg = None if not isinstance(self._pool_arg, tuple) else self._pool_arg
        self._staging_plan = None

    def debug_dump(self, path) -> None:
        """Write a Graphviz DOT rendering of the captured graph to ``path``.

        Call :meth:`enable_debug_mode` before capturing for a dump with full node attributes.

        Raises:
            RuntimeError: nothing captured, or the graph was not kept (``keep_graph=False``
                without debug mode).
        """
        if self._native_graph is None:
            raise RuntimeError("debug_dump: no captured graph is kept; call enable_debug_mode() "
                               "(or create Graph(keep_graph=True)) before capturing")
        self._backend.graph_to_dot(self._native_graph, str(path), self._debug)

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> "Graph":
        from . import synchronize

        index = _state.current_device_index()
        synchronize(index)
        gc.collect()
        caller = _state.current_stream(index)
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
            if self._record is not None:
                self._abandon()   # a capture left open (its thread died mid-capture)
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


_side_streams: dict[tuple[int, int], Stream] = {}


def _side_stream(index: int) -> Stream:
    """A per-thread, per-device side stream for ``with g:`` capture."""
    key = (threading.get_ident(), index)
    stream = _side_streams.get(key)
    if stream is None:
        stream = _side_streams[key] = Stream(index)
    return stream
