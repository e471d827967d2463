"""Graph nodes of the simulated accelerator: what a capture records and what a replay runs.

A captured graph is a list of nodes run in order (the sim serializes every capture, which is one
valid schedule of the DAG CUDA would build). An ``if``/``while`` node holds its body as a nested
list. The same node objects also sit in stream queues, so eager work and replayed work run through
one code path: ``node.run(copy_bytes, condition)``, where ``copy_bytes(dst, src, nbytes)`` copies
raw device bytes and ``condition`` is the runtime state of the innermost conditional node (None
outside conditional bodies).

Note [sim conditional handles]: CUDA gives every conditional node a *handle* that a kernel sets
and the node reads. The sim models it so: when the node starts, its handle is read from the
predicate it was created with; a ``set_conditional`` step in its body sets the handle from another
predicate and makes that predicate the one the node re-reads; a while node re-reads its current
predicate at the end of every iteration and loops while the handle is true. The handle state lives
per node *execution*, so every replay starts from the node's own predicate again.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["SimGraph", "SimExecutable", "Capture", "NodeFailure", "KernelNode", "MemcpyNode",
           "HostCopyNode", "StageNode", "GraphNode", "EventNode", "ConditionalNode",
           "SetConditionalNode", "run_nodes", "WHILE_ITERATION_LIMIT"]

#: A while node that has run this many iterations with its handle still true raises (a replay
#: that never ends would hang the host; on a GPU it hangs the device). Tests lower it.
WHILE_ITERATION_LIMIT = 10_000_000

CopyBytes = Callable[[int, int, int], None]


class NodeFailure(Exception):
    """A node failed while running; ``str()`` says which node and why (the cause is chained)."""


class SimGraph:
    """A captured graph: ``nodes`` in execution order, on device ``device_index``."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self.nodes: list[Any] = []
        self.destroyed = False

    def __repr__(self) -> str:
        state = ", destroyed" if self.destroyed else ""
        return f"SimGraph(sim:{self.device_index}, {len(self.nodes)} nodes{state})"


class SimExecutable:
    """An instantiated graph. It keeps its own node list, so destroying the graph leaves it
    launchable (as ``cudaGraphExec_t`` outlives ``cudaGraph_t``), between the two staging nodes
    of Note [fused staging] (``cuda/_stage_node.py``): ``stage_in`` runs before the nodes and
    ``stage_out`` after them, each copying what the latest ``stage_and_launch`` set (nothing
    until then, and after ``unstage``)."""

    def __init__(self, graph: SimGraph):
        self.device_index = graph.device_index
        self.nodes = tuple(graph.nodes)
        self.stage_in = self.stage_out = StageNode()
        self.destroyed = False

    def __repr__(self) -> str:
        state = ", destroyed" if self.destroyed else ""
        return f"SimExecutable(sim:{self.device_index}, {len(self.nodes)} nodes{state})"


class _ConditionState:
    """The handle of one running conditional node (Note [sim conditional handles])."""

    def __init__(self, predicate: Any):
        self.predicate = predicate
        self.handle = read_predicate(predicate)

    def set(self, predicate: Any) -> None:
        self.predicate = predicate
        self.handle = read_predicate(predicate)


def read_predicate(predicate: Any) -> int:
    """The value of a one-element predicate (bool: 0 or 1) or switch index array, read now."""
    return int(predicate.reshape(-1)[0])


def run_nodes(nodes, copy_bytes: CopyBytes, condition: _ConditionState | None = None) -> None:
    """Run ``nodes`` in order; a failing node raises :class:`NodeFailure` and stops the list."""
    for node in nodes:
        node.run(copy_bytes, condition)


class KernelNode:
    """A launched kernel: a zero-argument closure, its ``__name__`` and its ``tp_attrs``."""

    kind = "kernel"

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn
        self.name = getattr(fn, "__name__", "kernel")
        self.attrs = dict(getattr(fn, "tp_attrs", None) or {})

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        try:
            self.fn()
        except Exception as exc:  # noqa: BLE001 - reported at the sync point, like CUDA
            raise NodeFailure(f"kernel {self.name!r} raised {type(exc).__name__}: {exc}") from exc

    def details(self) -> list[str]:
        return [f"name={self.name}"] + [f"{key}={value}" for key, value in self.attrs.items()]


class MemcpyNode:
    """A raw device-to-device copy of ``nbytes`` from ``src`` to ``dst`` (may cross devices)."""

    kind = "memcpy"

    def __init__(self, dst: int, src: int, nbytes: int):
        self.dst, self.src, self.nbytes = dst, src, nbytes
        self.name = "memcpy"

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        try:
            copy_bytes(self.dst, self.src, self.nbytes)
        except Exception as exc:  # noqa: BLE001 - e.g. the memory was freed before the copy ran
            raise NodeFailure(f"memcpy of {self.nbytes} bytes 0x{self.src:x} -> 0x{self.dst:x} "
                              f"raised {type(exc).__name__}: {exc}") from exc

    def details(self) -> list[str]:
        return [f"nbytes={self.nbytes}", f"dst=0x{self.dst:x}", f"src=0x{self.src:x}"]


class HostCopyNode:
    """A host-to-device copy; ``data`` is the host copy taken when the call was made."""

    kind = "from_host"

    def __init__(self, array: Any, data: np.ndarray):
        self.array, self.data = array, data
        self.name = "from_host"

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        try:
            self.array[...] = self.data
        except Exception as exc:  # noqa: BLE001
            raise NodeFailure(f"from_host copy raised {type(exc).__name__}: {exc}") from exc

    def details(self) -> list[str]:
        return [f"nbytes={self.data.nbytes}", f"shape={tuple(self.array.shape)}",
                f"dtype={self.array.dtype}"]


class StageNode:
    """A staging node of an executable: ``copies`` (MemcpyNodes) run in order. Never changed
    once made: staging anew replaces the executable's node, so a launch already queued keeps the
    copies it was given, as CUDA applies new node parameters to later launches only."""

    kind = "stage"

    def __init__(self, copies=()):
        self.copies = tuple(copies)
        self.name = "stage"

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        run_nodes(self.copies, copy_bytes, condition)

    def details(self) -> list[str]:
        return [f"copies={len(self.copies)}"]


class GraphNode:
    """A launch of an executable: on a stream it is one queue item, in a capture a child graph.
    It takes the executable's staging nodes as they stand at the launch."""

    kind = "graph"

    def __init__(self, executable: SimExecutable):
        self.nodes = executable.nodes
        self.stage_in, self.stage_out = executable.stage_in, executable.stage_out
        self.name = "graph"

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        # A child graph has no handle of its own parent's conditional: start fresh.
        self.stage_in.run(copy_bytes, None)
        run_nodes(self.nodes, copy_bytes, None)
        self.stage_out.run(copy_bytes, None)

    def details(self) -> list[str]:
        return [f"nodes={len(self.nodes)}"]


class EventNode:
    """A cross-stream dependency inside a capture (``event_record`` or ``event_wait``). The sim
    runs a graph in order, so it does nothing at replay; it is kept so the DOT shows the fork."""

    def __init__(self, kind: str, stream_label: str, event_label: str):
        self.kind = kind
        self.name = event_label
        self.stream_label = stream_label

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        return None

    def details(self) -> list[str]:
        return [f"event={self.name}", f"stream={self.stream_label}"]


class ConditionalNode:
    """An ``if`` (its body runs once when the handle is true), ``if_else`` (the first of its two
    bodies when the handle is true, the second when it is false: CUDA 12.8's two-body IF),
    ``switch`` (body number ``handle``, none when the handle is past the last: CUDA 12.8's
    SWITCH) or ``while`` node (its body repeats while the handle is true at the end of each
    iteration); see Note [sim conditional handles]. ``bodies`` holds the node lists, ``body``
    the first."""

    def __init__(self, kind: str, predicate: Any, predicate_ptr: int, count: int = 1):
        self.kind = kind
        self.name = kind
        self.predicate = predicate
        self.predicate_ptr = predicate_ptr
        self.bodies: list[list[Any]] = [[] for _ in range(count)]
        self.body = self.bodies[0]

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        state = _ConditionState(self.predicate)
        if self.kind != "while":
            handle = state.handle
            if self.kind == "if":
                chosen = 0 if handle else None
            elif self.kind == "if_else":
                chosen = 0 if handle else 1
            else:
                chosen = handle if 0 <= handle < len(self.bodies) else None
            if chosen is not None:
                run_nodes(self.bodies[chosen], copy_bytes, state)
            return
        iterations = 0
        while state.handle:
            if iterations >= WHILE_ITERATION_LIMIT:
                raise NodeFailure(
                    f"a while loop of a replayed graph (begin_capture_to_while_node) ran "
                    f"{iterations:,} iterations and its predicate never became false. The body "
                    f"must write the predicate in place until it is false, e.g. "
                    f"flag.copy_(counter < limit), or hand a predicate that becomes false to "
                    f"set_conditional_handle_for_current_node()")
            run_nodes(self.body, copy_bytes, state)
            iterations += 1
            state.set(state.predicate)

    def details(self) -> list[str]:
        found = [f"predicate=0x{self.predicate_ptr:x}", f"body_nodes={len(self.body)}"]
        found += [f"body{k}_nodes={len(body)}" for k, body in enumerate(self.bodies) if k]
        return found


class SetConditionalNode:
    """Sets the innermost conditional's handle from ``predicate`` and makes it the predicate that
    node re-reads (``set_conditional_handle_for_current_node``)."""

    kind = "set_conditional"

    def __init__(self, predicate: Any, predicate_ptr: int):
        self.predicate = predicate
        self.predicate_ptr = predicate_ptr
        self.name = "set_conditional"

    def run(self, copy_bytes: CopyBytes, condition) -> None:
        if condition is None:
            raise NodeFailure("set_conditional_handle_for_current_node() ran outside a "
                              "conditional body")
        condition.set(self.predicate)

    def details(self) -> list[str]:
        return [f"predicate=0x{self.predicate_ptr:x}"]


# -- capture recording ----------------------------------------------------------------------

class Capture:
    """One capture sequence and the streams recording into it (the sim backend's streams and
    events carry the fields it sets: ``_capture``, ``_target``, ``_clock`` and the body links).

    Note [capture clocks]: every top-level member stream keeps a clock ``{stream: seq}`` of the
    latest recorded step of each stream it depends on. Recording an event snapshots the clock;
    waiting on it merges the snapshot. A forked stream is joined back when the origin's clock
    covers that stream's own latest seq, directly or through other streams, as CUDA allows.
    The caller (``SimBackend``) holds every device lock around each method. The capture rules
    (mode, stream, ending thread, predicates) are the caller's (``_runtime/capture.py``).
    """

    def __init__(self, origin: Any):
        self.origin = origin
        self.graph = SimGraph(origin.device_index)
        self.members = [origin]
        self.open_bodies: list[Any] = []
        self.invalidated_by: str | None = None
        self.active = True
        self.seq = 0
        origin._capture, origin._target, origin._clock = self, self.graph.nodes, {origin: 0}

    def invalidate(self, call: str) -> None:
        """Remember the first call that broke the capture; capture_end will raise."""
        if self.active and self.invalidated_by is None:
            self.invalidated_by = call

    def check_valid(self) -> None:
        if self.invalidated_by is not None:
            raise RuntimeError(f"capture on sim:{self.origin.device_index} was invalidated by "
                               f"{self.invalidated_by}; call capture_end() to discard it")

    def record(self, stream: Any, node: Any) -> None:
        """Append ``node`` to the stream's target (the graph, or a conditional body)."""
        self.check_valid()
        stream._target.append(node)
        if stream._clock is not None:
            self.seq += 1
            stream._clock[stream] = self.seq

    def record_event(self, stream: Any, event: Any) -> None:
        """Make ``event`` a capture event at the current end of ``stream``'s recording."""
        self.check_valid()
        event._capture, event._capture_stream, event._stream = self, stream, None
        self.record(stream, EventNode("event_record", repr(stream), repr(event)))
        event._clock = dict(stream._clock) if stream._clock is not None else None

    def _refuse(self, message: str, *captures: "Capture") -> None:
        for capture in captures:
            capture.invalidate("stream_wait_event")
        raise RuntimeError(f"stream_wait_event: {message}")

    def wait_event(self, stream: Any, event: Any) -> None:
        """``stream`` waits on ``event``, a capture event of this capture: a member orders its
        later work after the event's stream; any other side stream forks into the capture."""
        if not self.active:
            raise RuntimeError(f"stream_wait_event: {event!r} was last recorded during a capture "
                               f"that has ended; record it again outside capture first")
        self.check_valid()
        if event._capture_stream._body_node is not None or stream._body_node is not None:
            if stream is event._capture_stream:
                return
            self._refuse("a conditional body cannot exchange events with other streams "
                         "(cudaErrorStreamCaptureIsolation); the capture is invalidated",
                         *([self] if stream._capture is self else []))
        if stream._capture is not None and stream._capture is not self:
            self._refuse("cannot merge two captures by waiting on an event of another capture "
                         "(cudaErrorStreamCaptureIsolation); both captures are invalidated",
                         stream._capture, self)
        if stream._capture is None:
            if stream.is_default:
                self._refuse(f"the default stream of sim:{stream.device_index} cannot join a "
                             f"capture (cudaErrorStreamCaptureImplicit); the capture is "
                             f"invalidated", self)
            stream._capture, stream._target, stream._clock = self, self.graph.nodes, {}
            self.members.append(stream)
        for member, seq in event._clock.items():
            stream._clock[member] = max(stream._clock.get(member, 0), seq)
        self.record(stream, EventNode("event_wait", repr(stream), repr(event)))

    def open_body(self, stream: Any, node: ConditionalNode, body: Any) -> None:
        """Record conditional ``node`` on ``stream`` and make ``body`` record into its body."""
        self.check_valid()
        if stream._open_child is not None:
            raise RuntimeError(f"begin_conditional: {stream!r} already has an open conditional "
                               f"body; end it first")
        self.record(stream, node)
        body._capture, body._target = self, node.body
        body._body_node, body._parent = node, stream
        stream._open_child = body
        self.open_bodies.append(body)

    def switch_body(self, body: Any, successor: Any, target: list) -> None:
        """Close ``body`` and make ``successor`` record into ``target``, another body of the
        same node (an if_else node's else body, a switch node's next case)."""
        if body._open_child is not None:
            raise RuntimeError(f"begin_next_body: {body!r} has an open conditional body of its "
                               f"own; end that one first")
        parent, node = body._parent, body._body_node
        self.open_bodies.remove(body)
        _close(body)
        successor._capture, successor._target = self, target
        successor._body_node, successor._parent = node, parent
        parent._open_child = successor
        self.open_bodies.append(successor)

    def close_body(self, body: Any) -> None:
        if body._open_child is not None:
            raise RuntimeError(f"end_conditional: {body!r} has an open conditional body of its "
                               f"own; end that one first")
        body._parent._open_child = None
        self.open_bodies.remove(body)
        _close(body)

    def end_error(self) -> str | None:
        """Why capture_end must fail, or None."""
        index = self.origin.device_index
        if self.invalidated_by is not None:
            return f"capture on sim:{index} was invalidated by {self.invalidated_by}"
        if self.open_bodies:
            return (f"a conditional body opened on sim:{index} is still open; call "
                    f"end_capture_to_conditional_node() first")
        origin_clock = self.origin._clock
        unjoined = [m for m in self.members[1:] if origin_clock.get(m, 0) < m._clock[m]]
        if unjoined:
            names = ", ".join(repr(m) for m in unjoined)
            return (f"a stream forked from the capture was not joined back into the capturing "
                    f"stream before capture_end ({names}); make the capturing stream wait on an "
                    f"event recorded on it after its last work (cudaErrorStreamCaptureUnjoined)")
        return None

    def finish(self) -> None:
        """Every member stops capturing and every open body closes."""
        self.active = False
        for member in self.members:
            member._capture = member._target = member._clock = member._open_child = None
        for body in self.open_bodies:
            _close(body)
        self.open_bodies.clear()


def _close(body: Any) -> None:
    """A closed body stream records nothing more: it is an ordinary stream again, as on cuda."""
    body._closed, body._capture, body._target = True, None, None
