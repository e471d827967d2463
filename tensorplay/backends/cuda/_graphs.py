"""Stream capture, conditional nodes, executables and DOT dumps for the cuda backend.

A capture begun on an origin stream may pull other streams in (event fork/join); conditional
bodies are captured on body streams of their own (``cudaStreamBeginCaptureToGraph`` into the
node's body graph). Every capture and body is registered by its CUDA capture id so that a
conditional begun on any stream of a capture finds the capture's mode and bookkeeping.

Note [fused staging]
--------------------
``stage_and_launch`` must copy N small inputs and launch the graph in one native call: eight
``cudaMemcpyAsync`` of 1 KiB cost ~5 us each on the device and several us each on the host.
So every capture records, as its FIRST work (``begin_capture``), a one-block kernel
``tp_stage_fetch`` and a whole-grid kernel ``tp_stage`` (``_kernels.py``), and each graph owns:

- a ring of ``SLOTS`` (64) slots in pinned host memory (``cudaHostAlloc`` portable|mapped; on
  64-bit UVA systems the device reads it through the pointer ``cudaHostGetDevicePointer``
  returns, which is the host pointer itself). A slot is uint64 words ``[count, then count
  triplets dst, src, nbytes]`` with up to ``MAX_COPIES`` (64) triplets. A pinned "consumed"
  word (int64, -1 at first) sits before the slots;
- a small device-memory state: the launch counter, then the fetched count and triplets.

Launches of one executable run in launch order on the device (CUDA orders every launch of a
graph exec behind its previous launches, whatever the stream), so device launch n is host
launch n. Host launch n uses slot ``n % SLOTS``. On the device, ``tp_stage_fetch`` copies that
slot's count and triplets into the device state (the only read of host memory, by one block),
sets the slot's count to 0 (consumed), writes n into the consumed word (after a system fence)
and increments the counter; ``tp_stage`` then copies every triplet (grid-stride over bytes,
16-byte vectors when dst and src are 16-aligned). ``graph_launch`` writes nothing: the slot it
will read is 0 because its previous use consumed it. ``stage_and_launch`` first checks
``consumed >= n - SLOTS`` (slot ``n % SLOTS`` was last used by launch n - SLOTS), spinning with
``time.sleep(0)`` only when the device lags 64 launches behind; then one store writes the
triplets and a second the count (last, so that a bad triplet leaves the slot empty), and one
``cudaGraphLaunch`` follows. Copies past the 64th go
out as ``cudaMemcpyAsync`` before the launch.

(The brief's first design had the grid kernel read the slot and a one-thread kernel retire it;
fetching in one block first reads host memory once instead of once per block, which for 64
triplets and ~132 blocks is the difference between 1.5 KiB and 200 KiB over PCIe per launch.)

The ring and state are made at ``capture_begin``, before any executable exists, so they hang on
the :class:`Capture`, move to the :class:`CudaGraph` at ``capture_end`` and to the
:class:`CudaExecutable` at ``instantiate`` (a graph instantiates once: its kernel nodes point at
this one ring). ``graph_destroy`` retires them; they are freed once no capture is in flight,
after a device synchronization if the executable was ever launched (``_graphs.sweep``).

Pitfalls: the triplets of one call must not overlap each other (memcpy semantics, copied in
parallel); launching the executable *into another capture* (a child graph) would advance the
device counter out of step with the host's count, so it is not supported with staging.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

import cupy
from cuda.bindings import runtime

from . import _kernels, _streams
from ._runtime import (SUCCESS, CudaRuntimeError, check, device_guard, error_text,
                       relaxed_capture_mode)

__all__ = ["Capture", "Conditional", "StagingRing", "CudaGraph", "CudaExecutable",
           "begin_capture", "end_capture", "begin_conditional", "set_conditional",
           "end_conditional", "is_capturing", "instantiate", "to_dot", "captures_in_flight",
           "retire", "sweep", "SLOTS", "SLOT_WORDS"]

SLOTS = 64
SLOT_WORDS = 200           # >= 1 + 3 * MAX_COPIES; 1600 bytes keeps slots 64-byte aligned
_HEADER_WORDS = 8          # the consumed word, padded to a cache line
_STAGE_BLOCK = 512
_FETCH_BLOCK = 256         # >= 3 * MAX_COPIES: one pass reads every triplet

MODES = {"global": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal,
         "thread_local": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal,
         "relaxed": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed}
_STATUS_NONE = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone
_STATUS_ACTIVE = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive
_IMPLICIT = runtime.cudaError_t.cudaErrorStreamCaptureImplicit
_KINDS = {"if": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeIf,
          "while": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile}
_SET_DEPENDENCIES = \
    runtime.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies

_registry_lock = threading.Lock()
_by_id: dict[int, "Capture"] = {}     # capture id (origin and bodies) -> its Capture
_roots: set = set()                   # Captures in flight
_retired: list = []                   # (StagingRing, launches) waiting to be freed


def captures_in_flight() -> int:
    """How many captures begun here have not ended (any thread)."""
    return len(_roots)


def retire(ring: "StagingRing | None", launches: int) -> None:
    """Free ``ring`` once no capture is in flight (``cudaFree`` and the device sync before it
    are forbidden during a capture); until then keep it."""
    if ring is not None:
        with _registry_lock:
            _retired.append((ring, launches))
    sweep()


def sweep() -> None:
    """Free every retired ring, unless a capture is in flight. A ring that was ever launched is
    freed after a device synchronization: the host cannot see when the last launch's
    ``tp_stage`` (which reads the device state) has finished."""
    if _roots or not _retired:
        return
    with _registry_lock:
        if _roots:
            return
        entries = list(_retired)
        _retired.clear()
    for index in sorted({ring.device_index for ring, launches in entries if launches}):
        with device_guard(index):
            check(runtime.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    for ring, _ in entries:
        ring.free()


class StagingRing:
    """The pinned slot ring, consumed word and device launch counter of one graph."""

    __slots__ = ("device_index", "host_ptr", "device_ptr", "state_ptr", "words", "consumed",
                 "offsets")

    def __init__(self, device_index: int, stream):
        self.device_index = device_index
        self.host_ptr = self.state_ptr = 0
        total = _HEADER_WORDS + SLOTS * SLOT_WORDS
        flags = runtime.cudaHostAllocPortable | runtime.cudaHostAllocMapped
        try:
            with device_guard(device_index):
                self._allocate(total, flags, stream)
        except BaseException:
            self.free()
            raise
        self.offsets = [_HEADER_WORDS + slot * SLOT_WORDS for slot in range(SLOTS)]

    def _allocate(self, total: int, flags: int, stream) -> None:
        """Pinned ring (zeroed, consumed = -1), its device address, and the zeroed state."""
        self.host_ptr = check(runtime.cudaHostAlloc(total * 8, flags), "cudaHostAlloc")
        ctypes.memset(self.host_ptr, 0, total * 8)
        self.words = (ctypes.c_uint64 * total).from_address(self.host_ptr)
        self.consumed = ctypes.c_int64.from_address(self.host_ptr)
        self.consumed.value = -1
        try:
            self.device_ptr = int(check(runtime.cudaHostGetDevicePointer(self.host_ptr, 0),
                                        "cudaHostGetDevicePointer"))
        except CudaRuntimeError:
            self.device_ptr = self.host_ptr   # UVA: the host pointer works on the device
        state_bytes = _kernels.STATE_WORDS * 8
        self.state_ptr = check(runtime.cudaMalloc(state_bytes), "cudaMalloc")
        check(runtime.cudaMemsetAsync(self.state_ptr, 0, state_bytes, stream.handle),
              "cudaMemsetAsync")
        check(runtime.cudaStreamSynchronize(stream.handle), "cudaStreamSynchronize")

    def kernel_args(self) -> tuple[tuple, tuple]:
        """Arguments of tp_stage_fetch and of tp_stage."""
        slots_ptr = _kernels.pointer(self.device_ptr + _HEADER_WORDS * 8)
        state = _kernels.pointer(self.state_ptr)
        fetch = (slots_ptr, state, _kernels.pointer(self.device_ptr), _kernels.word(SLOT_WORDS),
                 _kernels.word(SLOTS))
        return fetch, (state,)

    def wait_for_slot(self, launch: int, stream) -> None:
        """Spin until the device has consumed launch ``launch - SLOTS``'s slot; raise if the
        stream failed meanwhile (a sticky error would otherwise spin forever)."""
        spins = 0
        while self.consumed.value < launch - SLOTS:
            time.sleep(0)
            spins += 1
            if spins % 4096:
                continue
            err = runtime.cudaStreamQuery(stream.handle)[0]
            if err is runtime.cudaError_t.cudaErrorNotReady:
                continue
            if err is not SUCCESS:
                check((err,), "cudaStreamQuery (waiting for a staging slot)")
            # The stream is idle: wait for the whole device once, then the slot must be free.
            with device_guard(self.device_index):
                check(runtime.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
            if self.consumed.value < launch - SLOTS:
                raise RuntimeError(
                    f"stage_and_launch: the staging ring of cuda:{self.device_index} is out of "
                    f"step (launch {launch}, the device consumed up to {self.consumed.value}); "
                    f"was this executable launched inside another capture? (Note [fused "
                    f"staging])")

    def free(self) -> None:
        """Release the memory (idempotent). The caller ensures the device no longer uses it."""
        state, self.state_ptr = self.state_ptr, 0
        host, self.host_ptr = self.host_ptr, 0
        with device_guard(self.device_index):
            if state:
                check(runtime.cudaFree(state), "cudaFree")
            if host:
                check(runtime.cudaFreeHost(host), "cudaFreeHost")


class Capture:
    """One capture in flight: its origin stream, mode, staging ring and open conditionals."""

    __slots__ = ("stream", "mode_name", "mode", "ring", "ids", "open", "thread")

    def __init__(self, stream, mode_name: str, ring: StagingRing):
        self.stream = stream
        self.thread = threading.get_ident()
        self.mode_name = mode_name
        self.mode = MODES[mode_name]
        self.ring = ring
        self.ids: list[int] = []
        self.open: list[Conditional] = []


class Conditional:
    """An if/while node being captured: its handle, current predicate and streams."""

    __slots__ = ("kind", "handle", "handle_arg", "predicate", "parent", "body", "capture",
                 "body_id")

    def __init__(self, kind, handle, predicate, parent, body, capture, body_id):
        self.kind = kind
        self.handle = handle
        self.handle_arg = _kernels.pointer(int(handle))
        self.predicate = predicate
        self.parent, self.body, self.capture, self.body_id = parent, body, capture, body_id


class CudaGraph:
    """A captured ``cudaGraph_t`` (owned: destroyed by ``graph_destroy``)."""

    __slots__ = ("handle", "device_index", "ring", "destroyed", "instantiated")

    def __init__(self, handle, device_index: int, ring: StagingRing | None):
        self.handle = handle
        self.device_index = device_index
        self.ring = ring
        self.destroyed = False
        self.instantiated = False

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "live"
        return f"CudaGraph(cuda:{self.device_index}, {state})"


class CudaExecutable:
    """An instantiated graph (``cudaGraphExec_t``) and its staging ring; ``launches`` counts
    successful launches (Note [fused staging])."""

    __slots__ = ("handle", "device_index", "ring", "launches", "destroyed", "words", "offsets",
                 "consumed")

    def __init__(self, handle, device_index: int, ring: StagingRing | None):
        self.handle = handle
        self.device_index = device_index
        self.ring = ring
        self.launches = 0
        self.destroyed = False
        self.words = ring.words if ring is not None else None
        self.offsets = ring.offsets if ring is not None else None
        self.consumed = ring.consumed if ring is not None else None

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else f"{self.launches} launches"
        return f"CudaExecutable(cuda:{self.device_index}, {state})"


# -- capture ---------------------------------------------------------------------------------

def _capture_id(stream) -> tuple:
    status, capture_id, *_ = check(runtime.cudaStreamGetCaptureInfo(stream.handle),
                                   "cudaStreamGetCaptureInfo")
    return status, int(capture_id or 0)


def begin_capture(stream, mode_name: str, stage_blocks: int) -> Capture:
    """Begin capturing ``stream`` and record the staging kernels as its first work.

    The caller has checked the mode and the stream. The ring allocation (cudaHostAlloc,
    cudaMalloc, a sync of ``stream``) runs in relaxed capture mode when another capture is in
    flight, which would otherwise forbid those calls.
    """
    index = stream.device_index
    with relaxed_capture_mode():
        _kernels.ensure(index, _kernels.SET_CONDITIONAL, _kernels.STAGE_FETCH, _kernels.STAGE)
        ring = StagingRing(index, stream)
    try:
        check(runtime.cudaStreamBeginCapture(stream.handle, MODES[mode_name]),
              "cudaStreamBeginCapture")
    except BaseException:
        retire(ring, 0)
        raise
    capture = Capture(stream, mode_name, ring)
    try:
        fetch_args, stage_args = ring.kernel_args()
        _kernels.launch(_kernels.STAGE_FETCH, stream, 1, _FETCH_BLOCK, fetch_args)
        _kernels.launch(_kernels.STAGE, stream, stage_blocks, _STAGE_BLOCK, stage_args)
        status, capture_id = _capture_id(stream)
    except BaseException:
        result = runtime.cudaStreamEndCapture(stream.handle)
        if result[0] is SUCCESS and result[1] is not None:
            runtime.cudaGraphDestroy(result[1])
        retire(ring, 0)
        raise
    capture.ids.append(capture_id)
    with _registry_lock:
        _by_id[capture_id] = capture
        _roots.add(capture)
    stream.capture = capture
    return capture


def _forget(capture: Capture) -> None:
    with _registry_lock:
        for capture_id in capture.ids:
            if _by_id.get(capture_id) is capture:
                del _by_id[capture_id]
        _roots.discard(capture)


def end_capture(stream) -> CudaGraph:
    """End the capture begun on ``stream`` and return its graph (owning the ring).

    Raises:
        RuntimeError: a conditional body is still open (all are closed, the capture is
            discarded), or CUDA refused the capture (invalidated, unjoined ...), naming the
            error. In every error case nothing is left capturing and the ring is released.
    """
    capture = stream.capture
    index = stream.device_index
    if capture is None:
        what = "a conditional body stream" if stream.body is not None else "not capturing"
        raise RuntimeError(f"capture_end: {stream!r} is {what} (capture_end() ends the capture "
                           f"on the stream that began it)")
    if capture.mode_name != "relaxed" and threading.get_ident() != capture.thread:
        raise RuntimeError(f"capture_end: a capture begun with mode {capture.mode_name!r} must "
                           f"end on the thread that began it (use 'relaxed' to allow another "
                           f"thread); it is still capturing")
    still_open = list(capture.open)
    for conditional in reversed(still_open):   # innermost first
        runtime.cudaStreamEndCapture(conditional.body.handle)
        _close(conditional)
    result = runtime.cudaStreamEndCapture(stream.handle)
    stream.capture = None
    _forget(capture)
    err, graph = result[0], result[1]
    if err is not SUCCESS or still_open:
        if err is SUCCESS and graph is not None:
            runtime.cudaGraphDestroy(graph)
        retire(capture.ring, 0)   # never launched: freed once no capture is in flight
        if still_open:
            raise RuntimeError(f"capture_end: {len(still_open)} conditional body(ies) still "
                               f"open on cuda:{index}; call end_conditional() first. The "
                               f"capture is discarded")
        name, description = error_text(err)
        raise RuntimeError(f"capture_end: the capture on cuda:{index} failed: "
                           f"cudaStreamEndCapture returned {name} ({description}); the capture "
                           f"is discarded")
    return CudaGraph(graph, index, capture.ring)


def is_capturing(stream) -> bool:
    """Whether ``stream`` records into a capture (an invalidated capture still counts: it must
    be ended with capture_end, as in CUDA)."""
    result = runtime.cudaStreamIsCapturing(stream.handle)
    if result[0] is SUCCESS:
        return result[1] != _STATUS_NONE
    if stream.is_default and result[0] is _IMPLICIT:
        return False   # the legacy stream would join another stream's capture: it is not one
    return check(result, "cudaStreamIsCapturing") != _STATUS_NONE


# -- conditional nodes -----------------------------------------------------------------------

def check_predicate(call: str, predicate, device_index: int) -> None:
    """A one-element bool CuPy array on ``device_index``, or TypeError/ValueError."""
    if not isinstance(predicate, cupy.ndarray):
        raise TypeError(f"{call}: the predicate must be a cuda device array (cupy.ndarray), got "
                        f"{type(predicate).__name__}")
    if predicate.dtype != bool:
        raise TypeError(f"{call}: the predicate must be of dtype bool, got {predicate.dtype}")
    if predicate.size != 1:
        raise ValueError(f"{call}: the predicate must have exactly one element, got shape "
                         f"{predicate.shape}")
    if predicate.device.id != device_index:
        raise ValueError(f"{call}: the predicate must live on cuda:{device_index}, it is on "
                         f"cuda:{predicate.device.id}")


def _body_graph(params, node):
    """The body graph the driver made for a conditional node (read back from the params the
    node was added with, else from the node)."""
    body = params.conditional.phGraph_out[0]
    if body is not None and int(body) != 0:
        return body
    node_params = check(runtime.cudaGraphNodeGetParams(node), "cudaGraphNodeGetParams")
    return node_params.conditional.phGraph_out[0]


def _add_conditional_node(stream, kind: str, handle):
    """Add the node after the stream's current capture dependencies; make it the only one."""
    status, _, graph, deps, edges, count = check(
        runtime.cudaStreamGetCaptureInfo(stream.handle), "cudaStreamGetCaptureInfo")
    params = runtime.cudaGraphNodeParams()
    params.type = runtime.cudaGraphNodeType.cudaGraphNodeTypeConditional
    params.conditional.handle = handle
    params.conditional.type = _KINDS[kind]
    params.conditional.size = 1
    count = int(count or 0)
    node = check(runtime.cudaGraphAddNode(graph, deps if count else None,
                                          edges if count else None, count, params),
                 "cudaGraphAddNode")
    check(runtime.cudaStreamUpdateCaptureDependencies(stream.handle, [node], None, 1,
                                                      _SET_DEPENDENCIES),
          "cudaStreamUpdateCaptureDependencies")
    return _body_graph(params, node)


def begin_conditional(stream, kind: str, predicate) -> "_streams.CudaStream":
    """Add an if/while node to ``stream``'s capture and start capturing its body.

    Order matters: the handle is created, then ``tp_set_conditional(handle, predicate)`` is
    captured on ``stream`` *before* the node, the node is added after the stream's (updated)
    dependencies, the stream is made to depend on the node alone, and the body graph is captured
    on a new stream with the capture's mode. Returns that body stream.
    """
    if kind not in _KINDS:
        raise ValueError(f"begin_conditional: kind must be 'if' or 'while', got {kind!r}")
    index = stream.device_index
    if stream.closed:
        raise RuntimeError(f"begin_conditional: conditional body was closed ({stream!r})")
    check_predicate("begin_conditional", predicate, index)
    info = check(runtime.cudaStreamGetCaptureInfo(stream.handle), "cudaStreamGetCaptureInfo")
    status, capture_id, graph = info[0], int(info[1] or 0), info[2]
    if status != _STATUS_ACTIVE:
        what = "not capturing" if status == _STATUS_NONE else "capturing an invalidated graph"
        raise RuntimeError(f"begin_conditional: {stream!r} is {what}; conditional nodes exist "
                           f"only inside an active capture")
    with _registry_lock:
        capture = _by_id.get(capture_id)
    if capture is None:
        raise RuntimeError(f"begin_conditional: {stream!r} captures into a graph that "
                           f"capture_begin() of this backend did not start")
    with device_guard(index):
        handle = check(runtime.cudaGraphConditionalHandleCreate(graph, 0, 0),
                       "cudaGraphConditionalHandleCreate")
        _kernels.launch(_kernels.SET_CONDITIONAL, stream, 1, 1,
                        (_kernels.pointer(int(handle)), predicate))
        body_graph = _add_conditional_node(stream, kind, handle)
        with relaxed_capture_mode():   # stream creation inside a capture: be permissive
            body = _streams.new_stream(index, stream.priority)
        check(runtime.cudaStreamBeginCaptureToGraph(body.handle, body_graph, None, None, 0,
                                                    capture.mode),
              "cudaStreamBeginCaptureToGraph")
    _, body_id = _capture_id(body)
    conditional = Conditional(kind, handle, predicate, stream, body, capture, body_id)
    body.body = conditional
    stream.open_nodes.append(conditional)
    capture.open.append(conditional)
    capture.ids.append(body_id)
    with _registry_lock:
        _by_id[body_id] = capture
    return body


def _open_conditional(call: str, body_stream) -> Conditional:
    conditional = body_stream.body
    if conditional is None:
        raise RuntimeError(f"{call}: {body_stream!r} is not a conditional body stream (no "
                           f"conditional node is open on it)")
    if body_stream.closed:
        raise RuntimeError(f"{call}: conditional body was closed ({body_stream!r})")
    return conditional


def set_conditional(body_stream, predicate) -> None:
    """Capture, at this point of the body, a refresh of its node's handle from ``predicate``;
    a while node also re-reads this predicate when its body ends."""
    conditional = _open_conditional("set_conditional", body_stream)
    check_predicate("set_conditional", predicate, body_stream.device_index)
    _kernels.launch(_kernels.SET_CONDITIONAL, body_stream, 1, 1,
                    (conditional.handle_arg, predicate))
    conditional.predicate = predicate


def _close(conditional: Conditional) -> None:
    """Bookkeeping of a body whose capture has ended."""
    conditional.body.closed = True
    parent_nodes = conditional.parent.open_nodes
    if conditional in parent_nodes:
        parent_nodes.remove(conditional)
    if conditional in conditional.capture.open:
        conditional.capture.open.remove(conditional)
    with _registry_lock:
        if _by_id.get(conditional.body_id) is conditional.capture:
            del _by_id[conditional.body_id]


def end_conditional(body_stream) -> None:
    """Close the body captured on ``body_stream``; capture resumes on its parent.

    A while node first captures ``tp_set_conditional(handle, predicate)`` at the end of its body:
    the body repeats while the predicate is true when the body ends.

    Raises:
        RuntimeError: not an open body stream, a conditional begun inside this body is still
            open, or CUDA refused to end the body's capture (naming the error).
    """
    conditional = _open_conditional("end_conditional", body_stream)
    if body_stream.open_nodes:
        raise RuntimeError(f"end_conditional: a conditional begun inside {body_stream!r} is "
                           f"still open; end it first (unbalanced begin/end)")
    if conditional.parent.open_nodes[-1:] != [conditional]:
        raise RuntimeError("end_conditional: conditionals must end innermost first "
                           "(unbalanced begin/end)")
    try:
        if conditional.kind == "while":
            _kernels.launch(_kernels.SET_CONDITIONAL, body_stream, 1, 1,
                            (conditional.handle_arg, conditional.predicate))
    finally:
        result = runtime.cudaStreamEndCapture(body_stream.handle)
        _close(conditional)
    check(result, "cudaStreamEndCapture (conditional body)")


# -- executables -----------------------------------------------------------------------------

def instantiate(graph: CudaGraph, upload_stream) -> CudaExecutable:
    """Instantiate and upload ``graph``; the executable takes over its staging ring."""
    if graph.destroyed:
        raise RuntimeError(f"instantiate: {graph!r} was destroyed")
    if graph.instantiated:
        raise RuntimeError(f"instantiate: {graph!r} was already instantiated; its staging "
                           f"kernels belong to that executable (capture again for another)")
    with device_guard(graph.device_index):
        handle = check(runtime.cudaGraphInstantiateWithFlags(graph.handle, 0),
                       "cudaGraphInstantiateWithFlags")
        try:
            check(runtime.cudaGraphUpload(handle, upload_stream.handle), "cudaGraphUpload")
            check(runtime.cudaStreamSynchronize(upload_stream.handle), "cudaStreamSynchronize")
        except BaseException:
            runtime.cudaGraphExecDestroy(handle)
            raise
    executable = CudaExecutable(handle, graph.device_index, graph.ring)
    graph.ring = None
    graph.instantiated = True
    return executable


def to_dot(graph: CudaGraph, path: str, verbose: bool) -> None:
    """Write Graphviz DOT for ``graph`` (verbose: every node's attributes)."""
    if graph.destroyed:
        raise RuntimeError(f"graph_to_dot: {graph!r} was destroyed")
    flags = int(runtime.cudaGraphDebugDotFlags.cudaGraphDebugDotFlagsVerbose) if verbose else 0
    check(runtime.cudaGraphDebugDotPrint(graph.handle, os.fsencode(path), flags),
          "cudaGraphDebugDotPrint")
