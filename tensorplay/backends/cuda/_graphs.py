"""Stream capture, conditional nodes, executables and DOT dumps for the cuda backend.

A capture begun on an origin stream may pull other streams in (event fork/join); conditional
bodies are captured on body streams of their own (``cudaStreamBeginCaptureToGraph`` into the
node's body graph). Every capture and body is registered by its CUDA capture id so that a
conditional begun on any stream of a capture finds the capture's mode and bookkeeping.

Every capture begins and ends with a staging kernel node of ``stage_and_launch`` (Note [fused
staging] in ``_stage_node.py``); the nodes belong to the captured graph, which therefore lives as
long as the executable made from it.
"""

from __future__ import annotations

import os
import threading

from cuda.bindings import runtime

from . import _kernels, _streams
from ._runtime import SUCCESS, check, device_guard, error_text, relaxed_capture_mode
from ._runtime import is_capturing as _runtime_is_capturing
from ._stage_node import StageNode

__all__ = ["Capture", "Conditional", "CudaGraph", "CudaExecutable", "begin_capture",
           "end_capture", "begin_conditional", "begin_next_body", "set_conditional",
           "end_conditional",
           "is_capturing", "instantiate", "to_dot", "destroy_executable", "destroy_graph"]

MODES = {"global": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal,
         "thread_local": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal,
         "relaxed": runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed}
_STATUS_NONE = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone
_STATUS_ACTIVE = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive
_KINDS = {"if": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeIf,
          "if_else": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeIf,
          "switch": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeSwitch,
          "while": runtime.cudaGraphConditionalNodeType.cudaGraphCondTypeWhile}
#: bodies per node kind: an "if_else" node is CUDA 12.8's IF node of size 2 (the second body
#: runs when the condition is zero); a "switch" node has as many as asked
_BODIES = {"if": 1, "if_else": 2, "while": 1}
#: the oldest driver (cudaDriverGetVersion) that records two-body IF and SWITCH nodes
IF_ELSE_DRIVER = 12080
_SET_DEPENDENCIES = \
    runtime.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies

_registry_lock = threading.Lock()
_by_id: dict[int, "Capture"] = {}     # capture id (origin and bodies) -> its Capture
_roots: set = set()                   # Captures in flight


class Capture:
    """One capture in flight: its origin stream, mode, staging nodes and open conditionals."""

    __slots__ = ("stream", "mode_name", "mode", "stage_in", "stage_out", "ids", "open")

    def __init__(self, stream, mode_name: str, stage_in: StageNode, stage_out: StageNode):
        self.stream = stream
        self.mode_name = mode_name
        self.mode = MODES[mode_name]
        self.stage_in, self.stage_out = stage_in, stage_out
        self.ids: list[int] = []
        self.open: list[Conditional] = []


class Conditional:
    """An if/while node being captured: its handle, current predicate and streams."""

    __slots__ = ("kind", "handle", "handle_arg", "predicate", "parent", "body", "capture",
                 "body_id", "later")

    def __init__(self, kind, handle, predicate, parent, body, capture, body_id, later=()):
        self.kind = kind
        self.handle = handle
        self.handle_arg = _kernels.pointer(int(handle))
        self.predicate = predicate
        self.parent, self.body, self.capture, self.body_id = parent, body, capture, body_id
        self.later = list(later)   # the node's body graphs still to capture (if_else, switch)


class CudaGraph:
    """A captured ``cudaGraph_t``. ``destroyed`` once its owner let go of it (``graph_destroy``);
    the native graph is freed then, or with its executable if it has one (Note [fused
    staging])."""

    __slots__ = ("handle", "device_index", "stage_in", "stage_out", "destroyed", "executable",
                 "released")

    def __init__(self, handle, device_index: int, stage_in: StageNode, stage_out: StageNode):
        self.handle = handle
        self.device_index = device_index
        self.stage_in, self.stage_out = stage_in, stage_out
        self.destroyed = False
        self.executable: CudaExecutable | None = None
        self.released = False

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "live"
        return f"CudaGraph(cuda:{self.device_index}, {state})"


class CudaExecutable:
    """An instantiated graph (``cudaGraphExec_t``), the graph it came from and its staging
    nodes."""

    __slots__ = ("handle", "ptr", "device_index", "stage_in", "stage_out", "source",
                 "destroyed")

    def __init__(self, handle, device_index: int, source: CudaGraph):
        self.handle = handle
        self.ptr: int | None = int(handle)   # for CuPy's binding; None once destroyed
        self.device_index = device_index
        self.source = source
        self.stage_in, self.stage_out = source.stage_in, source.stage_out
        self.destroyed = False

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "live"
        return f"CudaExecutable(cuda:{self.device_index}, {state})"


def _release(graph: CudaGraph) -> None:
    if not graph.released:
        graph.released = True
        check(runtime.cudaGraphDestroy(graph.handle), "cudaGraphDestroy")


def destroy_graph(graph: CudaGraph) -> None:
    """The owner lets go of ``graph`` (idempotent); freed now unless an executable uses it."""
    if graph.destroyed:
        return
    graph.destroyed = True
    if graph.executable is None or graph.executable.destroyed:
        _release(graph)


def destroy_executable(executable: CudaExecutable, handle_after) -> None:
    """Destroy ``executable`` (idempotent), and its graph if the owner already let go of it.
    ``handle_after`` replaces the handle (a value cuda-bindings rejects, for clear errors)."""
    if executable.destroyed:
        return
    executable.destroyed = True
    # nothing to disable on a destroyed executable
    executable.stage_in.enabled = executable.stage_out.enabled = False
    handle, executable.handle = executable.handle, handle_after
    executable.ptr = None   # CuPy's binding rejects None: no launch of a freed handle
    try:
        check(runtime.cudaGraphExecDestroy(handle), "cudaGraphExecDestroy")
    finally:
        if executable.source.destroyed:
            _release(executable.source)


# -- capture ---------------------------------------------------------------------------------

def _capture_id(stream) -> tuple:
    status, capture_id, *_ = check(runtime.cudaStreamGetCaptureInfo(stream.handle),
                                   "cudaStreamGetCaptureInfo")
    return status, int(capture_id or 0)


def begin_capture(stream, mode_name: str, stage_blocks: int) -> Capture:
    """Begin capturing ``stream`` and record the head staging kernel as its first work.

    The caller applied the capture rules (``_runtime/capture.py``: the mode, no default stream).
    Kernels are compiled before the capture begins (relaxed, in case another capture is in
    flight).
    """
    index = stream.device_index
    with relaxed_capture_mode():
        _kernels.ensure(index, _kernels.SET_CONDITIONAL, _kernels.SET_CONDITIONAL_INDEX,
                        _kernels.STAGE)
        stage_in, stage_out = StageNode(index, stage_blocks), StageNode(index, stage_blocks)
    check(runtime.cudaStreamBeginCapture(stream.handle, MODES[mode_name]),
          "cudaStreamBeginCapture")
    capture = Capture(stream, mode_name, stage_in, stage_out)
    try:
        stage_in.record(stream, "capture_begin")
        status, capture_id = _capture_id(stream)
    except BaseException:
        result = runtime.cudaStreamEndCapture(stream.handle)
        if result[0] is SUCCESS and result[1] is not None:
            runtime.cudaGraphDestroy(result[1])
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
    """End the capture begun on ``stream`` and return its graph.

    Raises:
        RuntimeError: a conditional body is still open (all are closed, the capture is
            discarded), or CUDA refused the capture (invalidated, unjoined ...), naming the
            error. In every error case nothing is left capturing.
    """
    capture = stream.capture
    index = stream.device_index
    if capture is None:
        what = "a conditional body stream" if stream.body is not None else "not capturing"
        raise RuntimeError(f"capture_end: {stream!r} is {what} (capture_end() ends the capture "
                           f"on the stream that began it)")
    still_open = list(capture.open)
    for conditional in reversed(still_open):   # innermost first
        runtime.cudaStreamEndCapture(conditional.body.handle)
        _close(conditional)
    tail_error = None
    if not still_open and _is_active(stream):
        try:
            with device_guard(index):   # capture_end may come from another thread (relaxed)
                capture.stage_out.record(stream, "capture_end")
        except Exception as exc:  # noqa: BLE001 - the capture must end all the same
            tail_error = exc
    result = runtime.cudaStreamEndCapture(stream.handle)
    stream.capture = None
    _forget(capture)
    err, graph = result[0], result[1]
    if err is not SUCCESS or still_open or tail_error is not None:
        if err is SUCCESS and graph is not None:
            runtime.cudaGraphDestroy(graph)
        if still_open:
            raise RuntimeError(f"capture_end: {len(still_open)} conditional body(ies) still "
                               f"open on cuda:{index}; call end_conditional() first. The "
                               f"capture is discarded")
        if tail_error is not None:
            raise RuntimeError(f"capture_end: recording the closing staging kernel on "
                               f"cuda:{index} failed ({tail_error}); the capture is "
                               f"discarded") from tail_error
        name, description = error_text(err)
        raise RuntimeError(f"capture_end: the capture on cuda:{index} failed: "
                           f"cudaStreamEndCapture returned {name} ({description}); the capture "
                           f"is discarded")
    return CudaGraph(graph, index, capture.stage_in, capture.stage_out)


def _is_active(stream) -> bool:
    """Whether ``stream``'s capture can still record (not invalidated)."""
    result = runtime.cudaStreamGetCaptureInfo(stream.handle)
    return result[0] is SUCCESS and result[1] == _STATUS_ACTIVE


def is_capturing(stream) -> bool:
    """Whether ``stream`` records into a capture (an invalidated capture still counts: it must
    be ended with capture_end, as in CUDA); False at once while no tensorplay capture is open
    in the process."""
    return bool(_roots) and _runtime_is_capturing(stream.handle, stream.is_default)



# -- conditional nodes -----------------------------------------------------------------------

def _body_graphs(params, node, count: int) -> list:
    """The ``count`` body graphs the driver made for a conditional node (read back from the
    params the node was added with, else from the node)."""
    bodies = [params.conditional.phGraph_out[k] for k in range(count)]
    if all(body is not None and int(body) != 0 for body in bodies):
        return bodies
    node_params = check(runtime.cudaGraphNodeGetParams(node), "cudaGraphNodeGetParams")
    return [node_params.conditional.phGraph_out[k] for k in range(count)]


def _add_conditional_node(stream, kind: str, handle, count: int) -> list:
    """Add the node (of ``count`` bodies) after the stream's current capture dependencies; make
    it the only one. Returns its body graphs."""
    status, _, graph, deps, edges, deps_count = check(
        runtime.cudaStreamGetCaptureInfo(stream.handle), "cudaStreamGetCaptureInfo")
    params = runtime.cudaGraphNodeParams()
    params.type = runtime.cudaGraphNodeType.cudaGraphNodeTypeConditional
    params.conditional.handle = handle
    params.conditional.type = _KINDS[kind]
    params.conditional.size = size = count
    count = int(deps_count or 0)
    node = check(runtime.cudaGraphAddNode(graph, deps if count else None,
                                          edges if count else None, count, params),
                 "cudaGraphAddNode")
    check(runtime.cudaStreamUpdateCaptureDependencies(stream.handle, [node], None, 1,
                                                      _SET_DEPENDENCIES),
          "cudaStreamUpdateCaptureDependencies")
    return _body_graphs(params, node, size)


def begin_conditional(stream, kind: str, predicate, count: int = 1) -> "_streams.CudaStream":
    """Add an if/if_else/switch/while node to ``stream``'s capture and start capturing its
    (first) body. A switch node has ``count`` bodies and an int64 index for a predicate
    (:func:`begin_next_body` moves on to the next body).

    Order matters: the handle is created, then ``tp_set_conditional(handle, predicate)`` is
    captured on ``stream`` *before* the node, the node is added after the stream's (updated)
    dependencies, the stream is made to depend on the node alone, and the body graph is captured
    on a new stream with the capture's mode. Returns that body stream. ``predicate`` (a
    one-element bool CuPy array on the stream's device) was checked by the caller
    (``_runtime/capture.py``).
    """
    if kind not in _KINDS:
        raise ValueError(f"begin_conditional: kind must be one of {sorted(_KINDS)}, got "
                         f"{kind!r}")
    index = stream.device_index
    if stream.closed:
        raise RuntimeError(f"begin_conditional: conditional body was closed ({stream!r})")
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
        setter = _kernels.SET_CONDITIONAL_INDEX if kind == "switch" else _kernels.SET_CONDITIONAL
        _kernels.launch(setter, stream, 1, 1, (_kernels.pointer(int(handle)), predicate))
        bodies = _add_conditional_node(stream, kind, handle, _BODIES.get(kind, count))
        return _capture_body(kind, handle, predicate, stream, capture, bodies[0], bodies[1:])


def _capture_body(kind: str, handle, predicate, parent, capture: Capture, body_graph,
                  later) -> "_streams.CudaStream":
    """Start capturing ``body_graph`` (a body of the node ``handle`` gates) on a new stream
    with the capture's mode, registered as ``parent``'s open conditional; returns the stream.
    Runs under the device's guard."""
    with relaxed_capture_mode():   # stream creation inside a capture: be permissive
        body = _streams.new_stream(parent.device_index, parent.priority)
    check(runtime.cudaStreamBeginCaptureToGraph(body.handle, body_graph, None, None, 0,
                                                capture.mode),
          "cudaStreamBeginCaptureToGraph")
    _, body_id = _capture_id(body)
    conditional = Conditional(kind, handle, predicate, parent, body, capture, body_id, later)
    body.body = conditional
    parent.open_nodes.append(conditional)
    capture.open.append(conditional)
    capture.ids.append(body_id)
    with _registry_lock:
        _by_id[body_id] = capture
    return body


def begin_next_body(body_stream) -> "_streams.CudaStream":
    """End the capture of this body of an if_else or switch node (on ``body_stream``) and start
    capturing the node's next body on a new stream (returned); ending the last one with
    :func:`end_conditional` closes the node (bodies never begun stay empty).

    Raises:
        RuntimeError: ``body_stream`` is not an open body with a next one, a conditional begun
            inside it is still open, or CUDA refused to end its capture.
    """
    conditional = _open_conditional("begin_next_body", body_stream)
    if not conditional.later:
        raise RuntimeError(f"begin_next_body: {body_stream!r} records the last body of its node "
                           f"(or of an if or while node, which have one)")
    if body_stream.open_nodes:
        raise RuntimeError(f"begin_next_body: a conditional begun inside {body_stream!r} is "
                           f"still open; end it first (unbalanced begin/end)")
    parent = conditional.parent
    result = runtime.cudaStreamEndCapture(body_stream.handle)
    _close(conditional)
    check(result, "cudaStreamEndCapture (conditional body)")
    with device_guard(parent.device_index):
        return _capture_body(conditional.kind, conditional.handle, conditional.predicate, parent,
                             conditional.capture, conditional.later[0], conditional.later[1:])


def _open_conditional(call: str, body_stream) -> Conditional:
    conditional = body_stream.body
    if conditional is None:
        raise RuntimeError(f"{call}: {body_stream!r} is not a conditional body stream (no "
                           f"conditional node is open on it)")
    if body_stream.closed:
        raise RuntimeError(f"{call}: conditional body was closed ({body_stream!r})")
    return conditional


def set_conditional(body_stream, predicate) -> None:
    """Capture, at this point of the body, a refresh of its node's handle from ``predicate``
    (checked by the caller); a while node also re-reads this predicate when its body ends."""
    conditional = _open_conditional("set_conditional", body_stream)
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
    """Instantiate and upload ``graph``; the executable takes over its staging nodes
    (disabled)."""
    if graph.destroyed:
        raise RuntimeError(f"instantiate: {graph!r} was destroyed")
    if graph.executable is not None:
        raise RuntimeError(f"instantiate: {graph!r} was already instantiated; its staging "
                           f"nodes belong to that executable (capture again for another)")
    with device_guard(graph.device_index):
        handle = check(runtime.cudaGraphInstantiateWithFlags(graph.handle, 0),
                       "cudaGraphInstantiateWithFlags")
        try:
            graph.stage_in.bind(handle)
            graph.stage_out.bind(handle)
            check(runtime.cudaGraphUpload(handle, upload_stream.handle), "cudaGraphUpload")
            check(runtime.cudaStreamSynchronize(upload_stream.handle), "cudaStreamSynchronize")
        except BaseException:
            runtime.cudaGraphExecDestroy(handle)
            raise
    executable = CudaExecutable(handle, graph.device_index, graph)
    graph.executable = executable
    return executable


def to_dot(graph: CudaGraph, path: str, verbose: bool) -> None:
    """Write Graphviz DOT for ``graph`` (verbose: every node's attributes)."""
    if graph.destroyed:
        raise RuntimeError(f"graph_to_dot: {graph!r} was destroyed")
    flags = int(runtime.cudaGraphDebugDotFlags.cudaGraphDebugDotFlagsVerbose) if verbose else 0
    check(runtime.cudaGraphDebugDotPrint(graph.handle, os.fsencode(path), flags),
          "cudaGraphDebugDotPrint")
