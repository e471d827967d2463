"""The backend protocol, and the one-time choice of the accelerator.

A backend is the small native surface that a device runtime offers; everything with policy in it
(the caching allocator, capture-mode guards, the graph lifecycle, RNG offsets, tensor ops) lives
above it and is shared, so that one fix reaches every backend. Three backends implement
:class:`Backend`:

- ``host`` (device type ``cpu``): NumPy, synchronous, always present. Its streams, events and
  graphs do not exist; those methods raise ``RuntimeError``.
- ``sim`` (``TENSORPLAY_ACCELERATOR=sim``): the executable specification of an accelerator on
  the host. Streams are ordered queues that run lazily, events are positions in them, a graph is
  a recorded node list whose if/while nodes hold sub-lists.
- ``cuda``: NVIDIA GPUs through CuPy (array math) and cuda-bindings (runtime, graphs,
  conditional nodes).

How a backend plugs in
----------------------
1. Implement every method of :class:`Backend` in ``backends/<name>.py`` (or a package), with a
   class named ``<Name>Backend``; native handles (streams, events, graphs, executables) are
   objects of the backend's own, and the layer above never looks inside them except for
   ``device_index``.
2. Memory: the backend hands out raw device allocations (``malloc``/``free``) and makes array
   views over them (``as_array``). It never caches: ``_runtime.allocator`` does, for every
   accelerator backend (see Note [graph pool lifetime] there).
3. Work: every tensor op builds a zero-argument *kernel* (a closure over ``xp`` arrays that writes
   into preallocated outputs) and hands it to ``launch(stream, kernel)``. Host runs it at once;
   cuda runs it at once on the bound CuPy stream (the driver records it when that stream
   captures); sim queues it, or records it into the open graph.
4. Add the name to ``_ACCELERATORS`` below. Nothing else reads ``TENSORPLAY_ACCELERATOR``.

The conformance suite under ``tests/`` (everything but ``tests/backends/``) uses only the public
API; a backend is supported when that suite passes on it unchanged.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Backend", "accelerator_backend", "backend_for", "host_backend", "host_only_reason",
           "no_accelerator_advice", "requested_accelerator", "require_accelerator",
           "selection_report"]

Kernel = Callable[[], None]


class Backend(Protocol):
    """What a device runtime gives tensorplay. Indices are device indices of this backend."""

    name: str          #: "cpu" for host, "sim", "cuda"
    device_type: str   #: the type in device spellings ("cpu", "sim", "cuda")
    xp: Any            #: the array namespace ops call: numpy or cupy

    # -- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        """Number of devices; 0 when none is visible."""

    def device_capability(self, index: int) -> dict[str, Any]:
        """Capability map: at least ``name``, ``total_memory`` (bytes) and ``supported_dtypes``
        (a frozenset of tensorplay dtypes this backend can allocate *and* compute with)."""

    def set_device(self, index: int) -> None:
        """Make ``index`` the native current device of the calling thread."""

    def mem_get_info(self, index: int) -> tuple[int, int]:
        """(free, total) device bytes, as ``cudaMemGetInfo`` reports them."""

    # -- raw memory (the caching allocator sits on top) -------------------------------------
    def malloc(self, index: int, nbytes: int) -> int:
        """Reserve ``nbytes`` (>0) of device memory, return its address; raise ``MemoryError``
        when the device has no room. Never caches."""

    def free(self, index: int, ptr: int) -> None:
        """Release an address ``malloc`` returned. Waits for no work: the caller ensures none
        is pending on it."""

    def as_array(self, index: int, ptr: int, nbytes: int, numpy_dtype: Any,
                 shape: tuple[int, ...], strides: tuple[int, ...], owner: Any) -> Any:
        """An ``xp`` array viewing device memory at ``ptr`` (strides in bytes); the array keeps
        ``owner`` alive."""

    def array_ptr(self, array: Any) -> int:
        """The device address of an ``xp`` array's first element (views included)."""

    # -- streams and events -----------------------------------------------------------------
    def default_stream(self, index: int) -> Any:
        """The device's default stream (never capturable)."""

    def create_stream(self, index: int, priority: int) -> Any:
        """A new non-default stream; its handle has ``device_index``."""

    def set_current_stream(self, stream: Any) -> None:
        """Tell the array namespace which stream this thread's ops on that device go to."""

    def stream_query(self, stream: Any) -> bool:
        """Whether all work queued on the stream is done (may make progress)."""

    def stream_synchronize(self, stream: Any) -> None:
        """Wait for all work queued on the stream; RuntimeError if it is capturing."""

    def synchronize_device(self, index: int) -> None:
        """Wait for all work on every stream of the device."""

    def create_event(self, index: int, enable_timing: bool) -> Any:
        """A new event; its handle has ``device_index``."""

    def event_record(self, event: Any, stream: Any) -> None:
        """Mark the current end of ``stream``'s queue with ``event``."""

    def stream_wait_event(self, stream: Any, event: Any) -> None:
        """Make later work on ``stream`` wait until ``event``'s recorded position is done."""

    def event_query(self, event: Any) -> bool:
        """Whether the work before the event's recorded position is done (may make progress)."""

    def event_synchronize(self, event: Any) -> None:
        """Wait until the event's recorded position is done."""

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two completed timing events."""

    # -- work -------------------------------------------------------------------------------
    def launch(self, stream: Any, kernel: Kernel) -> None:
        """Run ``kernel`` on ``stream``: now (host), queued in stream order (sim), or recorded
        into the graph when the stream captures."""

    def memcpy(self, stream: Any, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """Asynchronous device-to-device copy of raw bytes on ``stream`` (may cross devices)."""

    def to_host(self, stream: Any, array: Any) -> Any:
        """A NumPy copy of a device array, after the work queued on ``stream`` is done."""

    def from_host(self, stream: Any, array: Any, host_array: Any) -> None:
        """Copy a NumPy array into a device array in stream order (the source is copied first,
        so the caller may reuse it at once)."""

    # -- capture and graphs -----------------------------------------------------------------
    def capture_begin(self, stream: Any, mode: str) -> None:
        """Start recording ``stream``'s work into a new graph. ``mode`` is "global",
        "thread_local" or "relaxed". RuntimeError on the default stream or if already capturing."""

    def capture_end(self, stream: Any) -> Any:
        """Stop recording and return the graph; RuntimeError if the capture was invalidated or a
        conditional body is still open."""

    def is_capturing(self, stream: Any) -> bool:
        """Whether ``stream`` (or the body stream of one of its conditionals) is recording."""

    def begin_conditional(self, stream: Any, kind: str, predicate: Any) -> Any:
        """Inside a capture, add an "if" or "while" node gated on ``predicate`` (a one-element
        bool ``xp`` array) and return the stream that records its body."""

    def set_conditional(self, body_stream: Any, predicate: Any) -> None:
        """Record, at this point of the innermost body, a refresh of its node's condition from
        ``predicate``; a while node also re-reads that predicate when its body ends."""

    def end_conditional(self, body_stream: Any) -> None:
        """Close the body recorded on ``body_stream``; recording resumes on its parent."""

    def instantiate(self, graph: Any) -> Any:
        """Compile (and upload) a captured graph; return the executable."""

    def graph_launch(self, executable: Any, stream: Any) -> None:
        """Launch an executable on ``stream``."""

    def launcher(self, executable: Any) -> tuple[Callable, Any, Callable]:
        """``Graph.replay``'s hot path, bound once per executable: ``(launch, ok, failed)``.

        ``launch(handle)`` launches the executable on the stream whose :meth:`stream_handle` is
        ``handle`` and returns a tuple whose first item ``is ok`` on success; otherwise
        ``failed(result, stream)`` raises. ``launch`` leaves staging as the last
        ``stage_and_launch`` set it (call :meth:`unstage` first), and is valid until the
        executable is destroyed (the caller drops it then)."""

    def stream_handle(self, stream: Any) -> Any:
        """What a launcher's ``launch`` takes for ``stream`` (cached per public Stream)."""

    def unstage(self, executable: Any) -> None:
        """Make the executable's next launch copy nothing (after a ``stage_and_launch``)."""

    def stage_and_launch(self, executable: Any, stream: Any, copies: list[tuple[int, int, int]],
                         copies_out: list[tuple[int, int, int]] = ()) -> None:
        """Copy each ``(dst_ptr, src_ptr, nbytes)`` of ``copies`` device-to-device, launch, then
        copy each of ``copies_out``, all in stream order, in as few native calls as the backend
        can (Note [fused staging] in ``cuda/_stage_node.py``)."""

    def graph_destroy(self, graph: Any, executable: Any) -> None:
        """Free the native graph and executable (either may be None)."""

    def graph_to_dot(self, graph: Any, path: str, verbose: bool) -> None:
        """Write Graphviz DOT for the graph; ``verbose`` adds every node's attributes."""


_ACCELERATORS = {"sim": "tensorplay.backends.sim", "cuda": "tensorplay.backends.cuda"}
_ENV = "TENSORPLAY_ACCELERATOR"


class _Selection:
    def __init__(self):
        self.host: Backend | None = None
        self.accelerator: Backend | None = None
        self.requested: str = ""
        self.failure: BaseException | None = None


_selection = _Selection()


def _load(name: str) -> Backend:
    module = importlib.import_module(_ACCELERATORS.get(name, f"tensorplay.backends.{name}"))
    return module.create_backend()


def _select() -> None:
    """Choose the backends once, at import. The only reader of TENSORPLAY_ACCELERATOR.

    A typo in the variable raises here. An accelerator that was asked for (or, unset, ``cuda``)
    but whose ``create_backend`` fails (``ImportError`` when its runtime does not import) leaves a
    host-only build that keeps the reason: ``selection_report`` shows it and every accelerator
    call raises with it (``require_accelerator``), so ``python -m tensorplay info`` can say why.
    """
    _selection.host = _load("host")
    requested = os.environ.get(_ENV, "").strip().lower()
    _selection.requested = requested or "auto"
    if requested == "none":
        return
    if requested not in ("", "auto", *_ACCELERATORS):
        valid = ", ".join(repr(n) for n in (*_ACCELERATORS, "none"))
        raise ValueError(f"{_ENV}={requested!r} is not a known accelerator; valid values: {valid}")
    try:
        _selection.accelerator = _load(requested if requested in _ACCELERATORS else "cuda")
    except Exception as exc:  # noqa: BLE001 - kept and shown by selection_report / require_*
        _selection.failure = exc


def host_backend() -> Backend:
    """The host (NumPy) backend; always present."""
    return _selection.host


def accelerator_backend() -> Backend | None:
    """The accelerator chosen at import, or None on a host-only build."""
    return _selection.accelerator


def backend_for(device_type: str) -> Backend:
    """The backend owning a device type ("cpu" or the accelerator's)."""
    if device_type == "cpu":
        return _selection.host
    return _selection.accelerator


def requested_accelerator() -> str:
    """What ``TENSORPLAY_ACCELERATOR`` asked for at import: ``"auto"`` (unset), ``"none"``, or an
    accelerator name (which may have failed to import: see :func:`selection_report`)."""
    return _selection.requested


def host_only_reason() -> str:
    """Why no accelerator was built, as a sentence without its final stop ("" when one was)."""
    if _selection.accelerator is not None:
        return ""
    if _selection.failure is not None:
        asked = ("" if _selection.requested == "auto"
                 else f"{_ENV}={_selection.requested} was set, but ")
        return (f"{asked}the {_selection.requested if asked else 'cuda'} backend did not "
                f"import: {type(_selection.failure).__name__}: {_selection.failure}")
    if _selection.requested == "none":
        return f"{_ENV}=none was set"
    return ""


def selection_report() -> str:
    """One line: which accelerator was selected, or why none was."""
    if _selection.accelerator is not None:
        return _selection.accelerator.name
    why = host_only_reason()
    return f"none (host-only build: {why})" if why else "none (host-only build)"


def no_accelerator_advice() -> str:
    """Why this build is host-only and how to get an accelerator, for error messages: names
    ``TENSORPLAY_ACCELERATOR=sim`` (the simulated accelerator, no GPU needed)."""
    sim = f"set {_ENV}=sim before importing tensorplay for the simulated accelerator."
    why = host_only_reason()
    if _selection.failure is not None:   # its message says how to install what is missing
        return f"{why[0].upper()}{why[1:]}. Without a GPU, {sim}"
    return ((f"{why}. " if why else "") + "Install the CUDA extra (pip install "
            f"'tensorplay[cuda]') on a machine with an NVIDIA GPU, or {sim}")


def require_accelerator() -> Backend:
    """The accelerator backend, or RuntimeError saying that none was built, why, and how to get
    one (``TENSORPLAY_ACCELERATOR=sim`` for the simulated accelerator)."""
    if _selection.accelerator is not None:
        return _selection.accelerator
    raise RuntimeError("no accelerator was built: tensorplay is running host-only. "
                       + no_accelerator_advice())
