"""The backend protocol: what a device runtime offers tensorplay, declared and nothing more.

A backend is the small native surface that a device runtime offers; everything with policy in it
(the choice of backend, device spellings, the caching allocator, capture rules, the graph
lifecycle, RNG offsets, tensor ops) lives above it, in ``tensorplay._runtime`` and up, and is
shared, so that one fix reaches every backend. This module holds the protocols only; the choice
of backends and the registry of device types are ``tensorplay._runtime.select``.

Three backends exist:

- ``host`` (device type ``cpu``): NumPy, synchronous, always present. It implements the array
  half only (:class:`HostArrays`): no raw memory, streams, events or graphs.
- ``sim`` (``TENSORPLAY_ACCELERATOR=sim``): the executable specification of an accelerator on
  the host. Streams are ordered queues that run lazily, events are positions in them, a graph is
  a recorded node list whose if/while nodes hold sub-lists.
- ``cuda``: NVIDIA GPUs through CuPy (array math) and cuda-bindings (runtime, graphs,
  conditional nodes).

How a backend plugs in
----------------------
1. Write ``backends/<name>.py`` (or a package) with a ``create_backend()`` that returns an
   object implementing :class:`Backend`: :class:`Devices`, :class:`Memory`, :class:`Work`,
   :class:`Streams` and :class:`Graphs`. ``create_backend`` raises ``ImportError`` when the
   runtime it needs is missing; the selection keeps that reason for ``python -m tensorplay
   info``. Native handles (streams, events, graphs, executables) are objects of the backend's own;
   the layers above read only what :class:`NativeStream` / :class:`NativeEvent` declare.
2. Memory: the backend hands out raw device allocations (``malloc``/``free``) and makes array
   views over them (``as_array``). It never caches: ``_runtime.allocator`` does, for every
   accelerator backend. An array library that allocates on its own (CuPy) is pointed at that
   allocator through the ``use_allocator`` hook, which the runtime calls at selection time: a
   backend never imports the layers above it.
3. Work: every tensor op builds a zero-argument *kernel* (a closure over ``xp`` arrays that writes
   into preallocated outputs) and hands it to ``launch(stream, kernel)``. Host runs it at once;
   cuda runs it at once on the bound CuPy stream (the driver records it when that stream
   captures); sim queues it, or records it into the open graph.
4. Validation lives above: indices, devices and capture rules are checked once by
   ``tensorplay._runtime`` (``device``, ``capture``) before a backend is called; a backend
   reports what its native runtime reports (an invalid device, a refused wait).
5. Optional speed-ups and capabilities are the members of :class:`OptionalHooks`, each with a
   documented fallback. Layers above look them up only through :func:`hook` (None when absent)
   or :func:`require_hook` (``NotImplementedError`` naming the hook and the backend) and
   :func:`capability` (the declared default when absent): never by ``getattr``.
6. Add one line to ``DEVICE_TYPES`` in ``tensorplay/_runtime/select.py``: device spellings,
   their errors and ``TENSORPLAY_ACCELERATOR`` read that registry.

The conformance suite under ``tests/`` (everything but ``tests/internals/``) uses only the
public API; a backend is supported when that suite passes on it unchanged.
``tests/internals/test_backend_contract.py`` checks the native contract of every backend present.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Backend", "Devices", "Graphs", "HostArrays", "Kernel", "Memory", "NativeEvent",
           "NativeStream", "OPTIONAL_HOOKS", "CAPABILITIES", "OptionalHooks", "Streams", "Work",
           "capability", "hook", "require_hook"]

Kernel = Callable[[], None]


@runtime_checkable
class NativeStream(Protocol):
    """What the layers above read of a backend's stream handle."""

    device_index: int   #: the device the stream belongs to
    is_default: bool    #: the device's default stream (never capturable)


@runtime_checkable
class NativeEvent(Protocol):
    """What the layers above read of a backend's event handle."""

    device_index: int   #: the device the event belongs to


class Devices(Protocol):
    """Which devices exist and what they can do. Indices are this backend's device indices,
    already checked by ``_runtime.device`` (a backend reports a bad one as its runtime does)."""

    name: str          #: "cpu" for host, "sim", "cuda"
    device_type: str   #: the type in device spellings ("cpu", "sim", "cuda")
    xp: Any            #: the array namespace ops call (numpy or cupy)

    def device_count(self) -> int:
        """Number of devices; 0 when none is visible."""

    def device_capability(self, index: int) -> dict[str, Any]:
        """Capability map: at least ``name``, ``total_memory`` (bytes), ``supported_dtypes``
        (a frozenset of tensorplay dtypes this backend can allocate *and* compute with) and
        ``matmul_in_capture`` (whether matrix products of floating dtypes can be captured into
        a graph; where not, a product inside a capture raises an error saying why)."""

    def set_device(self, index: int) -> None:
        """Make ``index`` the native current device of the calling thread."""

    def mem_get_info(self, index: int) -> tuple[int, int]:
        """(free, total) device bytes, as ``cudaMemGetInfo`` reports them."""


class Memory(Protocol):
    """Raw device memory; the caching allocator (``_runtime.allocator``) sits on top."""

    def malloc(self, index: int, nbytes: int) -> int:
        """Reserve ``nbytes`` (>0) of device memory, return its address; raise ``MemoryError``
        when the device has no room. Never caches."""

    def free(self, index: int, ptr: int) -> None:
        """Release an address ``malloc`` returned. Waits for no work: the caller ensures none
        is pending on it."""

    def as_array(self, index: int, ptr: int, nbytes: int, numpy_dtype: Any,
                 shape: tuple[int, ...], strides: tuple[int, ...] | None, owner: Any) -> Any:
        """An ``xp`` array viewing device memory at ``ptr`` (strides in bytes; None: C order,
        what every new result has); the array keeps ``owner`` alive."""

    def array_ptr(self, array: Any) -> int:
        """The device address of an ``xp`` array's first element (views included)."""

    def memcpy(self, stream: Any, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """Asynchronous device-to-device copy of raw bytes on ``stream`` (may cross devices)."""


class Work(Protocol):
    """Running kernels and moving arrays between host and device (the host implements it)."""

    def launch(self, stream: Any, kernel: Kernel) -> None:
        """Run ``kernel`` on ``stream``: now (host), queued in stream order (sim), or recorded
        into the graph when the stream captures."""

    def to_host(self, stream: Any, array: Any) -> Any:
        """A NumPy copy of a device array, after the work queued on ``stream`` is done."""

    def from_host(self, stream: Any, array: Any, host_array: Any) -> None:
        """Copy a NumPy array into a device array in stream order (the source is copied first,
        so the caller may reuse it at once)."""


class Streams(Protocol):
    """Streams (ordered queues of work) and events (positions in them)."""

    def default_stream(self, index: int) -> NativeStream:
        """The device's default stream (never capturable)."""

    def create_stream(self, index: int, priority: int) -> NativeStream:
        """A new non-default stream."""

    def set_current_stream(self, stream: NativeStream) -> None:
        """Tell the array namespace which stream this thread's ops on that device go to."""

    def stream_query(self, stream: NativeStream) -> bool:
        """Whether all work queued on the stream is done (may make progress)."""

    def stream_synchronize(self, stream: NativeStream) -> None:
        """Wait for all work queued on the stream; RuntimeError if it is capturing."""

    def synchronize_device(self, index: int) -> None:
        """Wait for all work on every stream of the device."""

    def create_event(self, index: int, enable_timing: bool) -> NativeEvent:
        """A new event."""

    def event_record(self, event: NativeEvent, stream: NativeStream) -> None:
        """Mark the current end of ``stream``'s queue with ``event``."""

    def stream_wait_event(self, stream: NativeStream, event: NativeEvent) -> None:
        """Make later work on ``stream`` wait until ``event``'s recorded position is done."""

    def event_query(self, event: NativeEvent) -> bool:
        """Whether the work before the event's recorded position is done (may make progress)."""

    def event_synchronize(self, event: NativeEvent) -> None:
        """Wait until the event's recorded position is done."""

    def event_elapsed_ms(self, start: NativeEvent, end: NativeEvent) -> float:
        """Milliseconds between two completed timing events."""


class Graphs(Protocol):
    """Stream capture into graphs, conditional nodes, and replay."""

    def capture_begin(self, stream: NativeStream, mode: str) -> None:
        """Start recording ``stream``'s work into a new graph. ``mode`` is "global",
        "thread_local" or "relaxed". The runtime has applied the capture rules
        (``_runtime/capture.py``: the mode, no default stream); RuntimeError if already
        capturing."""

    def capture_end(self, stream: NativeStream) -> Any:
        """Stop recording and return the graph; RuntimeError if the capture was invalidated or a
        conditional body is still open."""

    def is_capturing(self, stream: NativeStream) -> bool:
        """Whether ``stream`` (or the body stream of one of its conditionals) is recording."""

    def begin_conditional(self, stream: NativeStream, kind: str, predicate: Any,
                          count: int = 1) -> NativeStream:
        """Inside a capture, add an "if" or "while" node gated on ``predicate`` (a one-element
        bool ``xp`` array) and return the stream that records its (first) body. Where the
        capability ``conditional_kinds`` lists them, ``kind`` may also be "if_else" (CUDA
        12.8's two-body IF: the first body runs when the predicate is true, the second when it
        is false) or "switch" (CUDA 12.8's SWITCH: ``count`` bodies, ``predicate`` a
        one-element int64 array whose value picks the body; a value outside ``[0, count)``
        runs none). :meth:`begin_next_body` moves on to the next body."""

    def begin_next_body(self, body_stream: NativeStream) -> NativeStream:
        """Close this body of the "if_else" or "switch" node open on ``body_stream`` and return
        the stream that records the node's next body; ending the last one begun with
        :meth:`end_conditional` closes the node (bodies never begun stay empty). RuntimeError
        for the last body, and for if and while bodies."""

    def set_conditional(self, body_stream: NativeStream, predicate: Any) -> None:
        """Record, at this point of the innermost body, a refresh of its node's condition from
        ``predicate``; a while node also re-reads that predicate when its body ends."""

    def end_conditional(self, body_stream: NativeStream) -> None:
        """Close the body recorded on ``body_stream``; recording resumes on its parent."""

    def instantiate(self, graph: Any) -> Any:
        """Compile (and upload) a captured graph; return the executable."""

    def graph_launch(self, executable: Any, stream: NativeStream) -> None:
        """Launch an executable on ``stream``."""

    def launcher(self, executable: Any) -> tuple[Callable[[Any], Any], Callable]:
        """``Graph.replay``'s hot path, bound once per executable: ``(launch, failed)``.

        ``launch(handle)`` launches the executable on the stream whose :meth:`stream_handle` is
        ``handle``, or raises whatever its native binding raises; the caller then calls
        ``failed(error, stream)`` inside its ``except``, which raises tensorplay's error for it
        (``error`` itself when it is not the binding's). ``launch`` leaves staging as the last
        ``stage_and_launch`` set it (call :meth:`unstage` first), and is valid until the
        executable is destroyed (the caller drops it then)."""

    def stream_handle(self, stream: NativeStream) -> Any:
        """What a launcher's ``launch`` takes for ``stream`` (cached per public Stream)."""

    def unstage(self, executable: Any) -> None:
        """Make the executable's next launch copy nothing (after a ``stage_and_launch``)."""

    def stage_and_launch(self, executable: Any, stream: NativeStream,
                         copies: Sequence[tuple[int, int, int]],
                         copies_out: Sequence[tuple[int, int, int]] = ()) -> None:
        """Copy each ``(dst_ptr, src_ptr, nbytes)`` of ``copies`` device-to-device, launch, then
        copy each of ``copies_out``, all in stream order, in as few native calls as the backend
        can (Note [fused staging] in ``cuda/_stage_node.py``)."""

    def graph_destroy(self, graph: Any, executable: Any) -> None:
        """Free the native graph and executable (either may be None)."""

    def graph_to_dot(self, graph: Any, path: str, verbose: bool) -> None:
        """Write Graphviz DOT for the graph; ``verbose`` adds every node's attributes."""


class Backend(Devices, Memory, Work, Streams, Graphs, Protocol):
    """An accelerator backend: every concern above."""


class HostArrays(Devices, Work, Protocol):
    """The host backend: devices and work only (NumPy arrays, kernels run at launch), plus its
    allocation seam; it has no raw memory, streams, events or graphs."""

    def empty(self, shape: tuple[int, ...], numpy_dtype: Any) -> Any:
        """A fresh host array (the host needs no caching allocator)."""


class OptionalHooks(Protocol):
    """Hooks a backend MAY offer. Each one's docstring says who asks for it and what happens
    without it (the fallback). Look them up with :func:`hook` / :func:`require_hook`."""

    def matmul(self, a: Any, b: Any, out: Any = None, precision: str = "highest") -> Any:
        """``numpy.matmul(a, b, out=out)`` for ``xp`` arrays of one dtype (cuda: cuBLASLt, which
        also works while the stream captures, where CuPy refuses cuBLAS). ``precision`` is
        ``torch.set_float32_matmul_precision``'s ("highest", "high": TF32, "medium": bfloat16
        tensor cores) and matters for float32 only; a backend may compute more exactly than
        asked. ``out`` must not overlap ``a`` or ``b``. Fallback: ``xp.matmul``."""

    def matmul_epilogue(self, a: Any, b: Any, out: Any, bias: Any, activation: str | None,
                        precision: str = "highest") -> None:
        """``out[...] = activation(a @ b + bias)`` in one call, for what the capability
        ``matmul_epilogues`` lists: ``activation`` one of its members (None: bias only, "relu",
        "gelu", "gelu_tanh", "silu"), ``a`` and ``b`` float16, bfloat16 or float32 of one
        dtype, ``bias`` a contiguous 1-D array of ``out``'s last dimension and dtype, ``out``
        C-contiguous and the inner dimension not empty. Fallback: ``matmul`` then the bias and
        activation as ops of their own (``_tensor/linalg.py``)."""

    def matmul_residual(self, a: Any, b: Any, out: Any, bias: Any, residual: Any,
                        precision: str = "highest") -> None:
        """``out[...] = a @ b + bias + residual`` (``bias`` None: none) in one call, for
        operands ``matmul_epilogue`` takes and a C-contiguous ``residual`` of ``out``'s shape and
        dtype. Fallback: the product (with its bias), then an add (``linalg.fused_matmul``)."""

    def launch_call(self, stream: Any, fn: Callable[..., None], *args: Any) -> None:
        """``launch(stream, functools.partial(fn, *args))`` without the kernel object, for a
        backend whose launches run at once (cuda: the launch is queued on the device by the
        call itself). The op layer takes it for its direct plans while no launch watcher is
        set (a watcher is handed the kernel object). Fallback: ``launch`` with a named
        partial (sim keeps the kernel in its queue, under its name)."""

    def matmul_launcher(self, a: Any, b: Any, out: Any, bias: Any, activation: str | None,
                        precision: str = "highest") -> Callable | None:
        """Right after ``matmul(a, b, out, precision)`` (``bias`` None) or ``matmul_epilogue(a,
        b, out, bias, activation, precision)`` ran, a launcher ``fn(a, b, bias, out)`` (``bias``
        None without one) of the same product for arrays laid out as these (shapes, strides,
        dtypes, device), cheaper per call; None where it has none. It touches only its
        arguments and has ``tp_arguments_only``; the result comes last, as the op layer's
        direct launches (``launch_call``) pass it. Pitfall: it may not check the layout of
        what it is given. Fallback: the ``matmul`` and ``matmul_epilogue`` hooks on every
        call."""

    def erf(self, x: Any) -> Any:
        """The error function of a float ``xp`` array in one kernel. Fallback: composed from xp
        ops (``_tensor``'s series / continued fraction)."""

    def softmax(self, x: Any, out: Any, dim: int, log: bool) -> None:
        """One kernel writing the softmax (``log``: log-softmax) of ``x`` along ``dim`` into
        ``out``. Fallback: composed from xp ops (max, subtract, exp, sum, divide)."""

    def softmax_launcher(self, x: Any, dim: int, log: bool) -> Callable | None:
        """A launcher ``fn(x, out)`` doing what ``softmax(x, out, dim, log)`` does for arrays
        laid out as ``x`` (shape, strides, dtype, device), cheaper per call, or None for a
        layout it has none for. It touches only its arguments and has ``tp_arguments_only``.
        Pitfall: it may not check the layout of what it is given. Fallback: ``softmax`` with
        ``dim`` and ``log`` bound."""

    def check_index_range(self, idx: Any, size: int, dim: int, wrap: bool, op: str,
                          exception: type, note: str) -> None:
        """Check a device index array against ``[0, size)`` (``[-size, size)`` with ``wrap``)
        without waiting for the device: the next synchronization raises ``RuntimeError("a
        kernel launched earlier on DEVICE failed: EXCEPTION: OP(): index V is out of bounds
        ...")``, as sim reports a failed kernel. Fallback: none (an out-of-range index gives an
        unspecified result; sim's queued kernels check their NumPy indices themselves)."""

    def index_copy(self, dst: Any, axis: int, idx: Any, src: Any, op: str) -> bool:
        """``dst``'s slices ``idx`` (1-D int64) along ``axis`` replaced by ``src``'s in one
        kernel that checks the indices as ``check_index_range`` does (an out-of-range index
        writes nothing; the next synchronization raises ``op``'s IndexError); False, touching
        nothing, for a case it does not take. Fallback: the op's bounds check, then ``xp``
        fancy-index assignment."""

    def copy(self, dst: Any, src: Any) -> bool:
        """``dst[...] = src`` in one kernel for arrays of one dtype (``src`` broadcast to
        ``dst``'s shape), whatever their strides; False, touching nothing, for a case it does
        not take (the caller then copies with ``xp``). Fallback: ``dst[...] = src``."""

    def index_select(self, dst: Any, axis: int, idx: Any, src: Any, op: str, note: str) -> bool:
        """``dst[...] = src.take(idx, axis)`` (``idx`` 1-D int64, ``dst`` of the result's
        shape) in one kernel that checks the indices as ``check_index_range`` does (the next
        synchronization raises ``op``'s IndexError, ``note`` appended); False, touching nothing,
        for a case it does not take. Fallback: the op's bounds check, then ``xp.take``."""

    def layer_norm(self, x: Any, weight: Any, bias: Any, out: Any, eps: float) -> None:
        """One kernel writing the layer norm of C-contiguous ``x`` over its last dimension into
        ``out`` (``weight``/``bias``: 1-D arrays of that length and ``x``'s dtype, or None).
        Fallback: one formula kernel of ``xp`` calls (``_tensor/normalization.py``)."""

    def layer_norm_launcher(self, x: Any, weight: Any, bias: Any, eps: float) -> Callable | None:
        """A launcher ``fn(x, weight, bias, out)`` doing what ``layer_norm(x, weight, bias, out,
        eps)`` does for arrays laid out as these (shapes, strides, dtypes, device), cheaper per
        call, or None for a layout it has none for. It touches only its arguments and has
        ``tp_arguments_only``. Pitfall: it may not check the layout of what it is given.
        Fallback: ``layer_norm`` with ``eps`` bound."""

    def attention(self, q: Any, k: Any, v: Any, mask: Any, out: Any, scale: float,
                  causal: bool) -> bool:
        """Scaled dot-product attention of ``q`` ``(B, H, L, D)`` against ``k``/``v`` ``(B,
        Hkv, S, D)`` into C-contiguous ``out``, with ``mask`` (None, bool or additive,
        broadcastable to ``(B, H, L, S)``) or ``causal``, in one kernel (``_tensor/attention.py``
        states the semantics); returns False, touching nothing, for a case it does not take.
        Fallback: the same formula from ``xp`` calls inside the one launch."""

    def elementwise_kernel(self, op: str, compute: Any, kinds: str, out: Any) -> Callable | None:
        """A launcher ``fn(*operands, out_array)`` of one cached kernel for the elementwise
        ``op`` over operands of ``kinds`` ("a" array of the output's shape, "r" contiguous array
        repeated along the output's leading dimensions, "s" scalar) in ``compute`` dtype, writing
        an ``out``-dtype array; None for a combination it has no kernel for. The launcher
        touches only the memory it is called with and says so with the attribute
        ``tp_arguments_only = True`` (the while-body scan of ``_runtime/writes.py`` then looks at
        its arguments). Fallback (hook absent or None): the op calls ``xp`` ufuncs."""

    def elementwise_program(self, steps: Any, compute: Any, kinds: str,
                            out: Any) -> Callable | None:
        """A launcher ``fn(*externals, out_array)`` of ONE cached kernel computing a chain of
        elementwise ops in registers: ``steps`` is ``((op, refs), ...)``, each ``op`` a name
        ``elementwise_kernel`` takes and each ref ``-1`` (the previous step's result) or the
        index of an external operand; ``compute``, ``kinds`` and ``out`` as there. None when
        it has no kernel for the chain. Marked ``tp_arguments_only`` as those are. Fallback:
        one kernel closure runs the ops' ``xp`` forms one after the other
        (``_tensor/rewrite.py``)."""

    def sum_kernel(self, compute: Any, out: Any) -> Callable | None:
        """A launcher ``fn(x, out_array)`` summing a C-contiguous array of ``compute`` dtype
        into a 0-d ``out``-dtype array in ONE launch; the hook has ``limit``, the largest size
        it takes. None for a combination it has no kernel for. Fallback: ``xp.sum``."""

    def reduce_axis(self, op: str, shape: tuple[int, ...], axis: int, dtype: Any, acc: Any,
                    out: Any) -> Callable | None:
        """A launcher ``fn(x, out_array)`` of the reduction ``op`` ("sum", "mean", "amax" or
        "amin"; or "argmax"/"argmin", into int64 ``out``: the index of the first extreme, a NaN
        counting as one) of a non-empty C-contiguous ``x`` of ``shape`` and float ``dtype`` over
        its one
        dimension ``axis`` (normalized), written into the C-contiguous ``out_array`` of dtype
        ``out`` (the other dimensions' elements in order, keepdim or not), or None for a case
        it has no kernel for (cuda: the last dimension, or the first of two or more, of
        float16, bfloat16, float32 or float64 with ``out == dtype``). Sums and means accumulate
        in ``acc`` (the dtype the op layer chose: float32 or float64), amax and amin propagate
        NaN; each result is rounded once. The launcher touches only its arguments (and
        workspace of its own) and has ``tp_arguments_only``. Pitfall: the launcher is for
        ``shape``; it may not check another. Fallback: the ``xp`` reduction
        (``_tensor/reductions.py``)."""

    def adam_update(self, param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any,
                    max_exp_avg_sq: Any, step: Any, lr: Any, beta1: float, beta2: float,
                    eps: float, weight_decay: float, decoupled: bool, maximize: bool) -> bool:
        """One Adam/AdamW update (``torch.optim`` semantics) of contiguous arrays of one shape
        and dtype, in place and in one kernel: ``param``, ``exp_avg``, ``exp_avg_sq`` and, for
        AMSGrad, ``max_exp_avg_sq`` (else None) are written; ``step`` and ``lr`` are one-element
        device arrays read when the kernel runs. Returns False, doing nothing, for a dtype it
        has no kernel for. Fallback: the same arithmetic as ``xp`` calls in one launch
        (``_tensor/optimizers.py``)."""

    def fuse(self, name: str, function: Callable) -> Callable:
        """``function`` (of ``xp`` arrays) compiled as one kernel named ``name`` (cuda:
        ``cupy.fuse``). Fallback: ``function`` runs op by op."""

    def empty_host_cache(self) -> None:
        """Release cached pinned host memory kept for transfers. Fallback: nothing to release."""

    def use_allocator(self, allocator_of: Callable[[int], Any]) -> None:
        """Route the array library's own allocations to ``allocator_of(index).malloc(nbytes,
        stream)`` (the runtime's caching allocator; called once, at selection). Fallback: the
        backend allocates only through :meth:`Memory.malloc`, so nothing needs routing."""

    def raw_graph_launchers(self, executable: Any,
                            stream: NativeStream) -> dict[str, Callable[[], Any]]:
        """``{binding: launch}``: zero-argument callables doing only the native launch of
        ``executable`` on ``stream`` through each native binding the backend can use, the one
        ``Graph.replay`` uses first (the benchmark's peers of ``Graph.replay``). Fallback: no
        raw peer to measure."""


#: The hook names of :class:`OptionalHooks`.
OPTIONAL_HOOKS: frozenset[str] = frozenset(
    name for name, value in vars(OptionalHooks).items()
    if callable(value) and not name.startswith("_"))

#: Capabilities a backend may declare as class attributes, with the value assumed when absent.
#: ``dlpack_device_types``: the DLPack device type codes (``__dlpack_device__()[0]``) whose data
#: this backend's arrays can export and import; empty: no DLPack exchange (sim's memory is not
#: visible to other libraries).
#: ``matmul_epilogues``: the activations the ``matmul_epilogue`` hook fuses (see it); empty: none.
#: ``matrix_engine``: a line saying what computes matrix products (``python -m tensorplay info``).
#: ``conditional_kinds``: the ``begin_conditional`` kinds the backend records ("if_else": a
#: two-body if node, "switch": a switch node; without them ``tp.cond`` and ``tp.switch`` build
#: their branches from if nodes).
CAPABILITIES: dict[str, Any] = {"conditional_kinds": frozenset({"if", "while"}),
                                "dlpack_device_types": frozenset(),
                                "matmul_epilogues": frozenset(),
                                "matrix_engine": "the array library's matmul (xp.matmul)"}


def hook(backend: Any, name: str) -> Callable | None:
    """The bound optional hook ``name`` of ``backend``, or None when the backend (or a host-only
    build's missing accelerator, ``backend is None``) does not offer it: the caller then uses
    the fallback :class:`OptionalHooks` documents.

    Raises:
        KeyError: ``name`` is not a hook :class:`OptionalHooks` declares.
    """
    if name not in OPTIONAL_HOOKS:
        raise KeyError(f"{name!r} is not a declared backend hook; declared: "
                       f"{', '.join(sorted(OPTIONAL_HOOKS))}")
    return getattr(backend, name, None)


def require_hook(backend: Any, name: str) -> Callable:
    """The bound optional hook ``name`` of ``backend``, for callers with no fallback.

    Raises:
        NotImplementedError: the backend does not offer it (naming the hook and the backend).
        KeyError: ``name`` is not a hook :class:`OptionalHooks` declares.
    """
    found = hook(backend, name)
    if found is None:
        which = "no backend (host-only build)" if backend is None else \
            f"the {getattr(backend, 'name', type(backend).__name__)!r} backend"
        raise NotImplementedError(f"backend hook {name}() is not implemented by {which}")
    return found


def capability(backend: Any, name: str) -> Any:
    """The capability ``name`` of ``backend`` (a class attribute), or its declared default
    (:data:`CAPABILITIES`) when the backend does not declare it or ``backend`` is None.

    Raises:
        KeyError: ``name`` is not a declared capability.
    """
    default = CAPABILITIES[name]
    return default if backend is None else getattr(backend, name, default)
