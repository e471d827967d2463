"""The cuda backend: NVIDIA GPUs through CuPy (array math) and cuda-bindings (the runtime).

How the pieces fit:

- ``_runtime.py``: :func:`~._runtime.check`, the one checker every cuda-bindings call goes
  through (``MemoryError`` for cudaErrorMemoryAllocation, else a ``RuntimeError`` naming the call
  and the CUDA error), plus the device guard and the relaxed-capture-mode guard.
- ``_streams.py``: :class:`CudaStream` (a non-blocking CuPy stream, or the legacy NULL stream as
  each device's default) and :class:`CudaEvent`.
- ``_cupy_bridge.py``: CuPy's allocator hook into the caching allocator the runtime hands in
  (:meth:`CudaBackend.use_allocator`, at selection; installed at first use, not at import) and
  the binding of CuPy's current stream to tensorplay's.
- ``_kernels.py``: the one kernel cache, and tensorplay's NVRTC kernels (conditional-handle
  setter, fused staging).
- ``_matmul.py``: matrix products through cuBLASLt (nvmath-python), eager and captured, with
  fused bias/ReLU/GELU epilogues.
- ``_rows.py``, ``_attention.py``, ``_activations.py``, ``_optim.py``, ``_bounds.py``: raw
  kernels of single ops (layer_norm; scaled dot-product attention; softmax and erf; the fused
  Adam update; index bounds checks and index_copy), each behind an optional backend hook.
- ``_graphs.py``: capture, if/while nodes, instantiate/launch bookkeeping, DOT dumps.
- ``_stage_node.py``: the two staging kernel nodes of every capture and Note [fused staging],
  which ``stage_and_launch`` below implements.

Tensor ops reach the device through :meth:`CudaBackend.launch`: it binds CuPy to the stream (one
``is`` comparison when it already is) and runs the op's kernel closure, whose CuPy calls the
driver records when that stream captures. ``graph_launch`` and ``stage_and_launch`` are the
replay hot paths; everything they need is precomputed on the executable.

Device indices arrive checked (``tensorplay._runtime.device.check_index``); a bad one fails in
the runtime call it reaches (cudaErrorInvalidDevice), as in CUDA.

``create_backend()`` raises ``ImportError`` (kept and shown by the selection) when CuPy or
cuda-bindings cannot be imported; with both present and no GPU visible the backend exists and
``device_count()`` is 0.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _dtype

__all__ = ["CudaBackend", "CudaStream", "CudaEvent", "CudaGraph", "CudaExecutable",
           "create_backend"]

from ._elementwise_source import SUM_SMALL_LIMIT as _SUM_SMALL_LIMIT

try:
    import cupy
    from cuda.bindings import runtime
except Exception as exc:  # noqa: BLE001 - reported by create_backend, kept by the selection
    _IMPORT_ERROR: BaseException | None = exc
else:
    _IMPORT_ERROR = None
    from . import _activations, _attention, _bounds, _copy, _cupy_bridge, _elementwise, \
        _graphs, _kernels, _matmul, _optim, _reduce, _rows
    from . import _streams
    from ._graphs import CudaExecutable, CudaGraph

    _ndarray, _MemoryPointer, _UnownedMemory = (cupy.ndarray, cupy.cuda.MemoryPointer,
                                                cupy.cuda.UnownedMemory)
    from ._runtime import (
        NOT_READY,
        SUCCESS,
        check,
        device_guard,
        raise_error,
        relaxed_capture_mode,
    )
    from ._streams import CudaEvent, CudaStream

    _graph_launch = runtime.cudaGraphLaunch
    _raise_pending = _bounds.raise_pending
    _cupy_graph_launch = getattr(cupy.cuda.runtime, "graphLaunch", None)
    _CupyRuntimeError: Any = getattr(cupy.cuda.runtime, "CUDARuntimeError", RuntimeError)
    _memcpy_async = runtime.cudaMemcpyAsync
    _current_cupy_stream = cupy.cuda.get_current_stream
    _D2D = runtime.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    _DEFAULT_KIND = runtime.cudaMemcpyKind.cudaMemcpyDefault
    _DEVICE_MEMORY = runtime.cudaMemoryType.cudaMemoryTypeDevice
    _MAX_COPIES = _kernels.MAX_COPIES
    _DESTROYED = object()   # an executable's handle after destroy: cuda-bindings rejects it

    def _graph_launch_failed(error: BaseException, stream: CudaStream) -> None:
        """Raise tensorplay's error for CuPy's refusal of a replay's cudaGraphLaunch
        (:meth:`CudaBackend.launcher`); any other exception is raised as it is."""
        status = getattr(error, "status", None)
        if isinstance(error, _CupyRuntimeError) and isinstance(status, int):
            raise_error(runtime.cudaError_t(status), "cudaGraphLaunch")
        raise error


class CudaBackend:
    """The cuda backend (see the module docstring). Made by :func:`create_backend`."""

    name = "cuda"
    device_type = "cuda"
    dlpack_device_types = frozenset({2, 13})   #: kDLCUDA, kDLCUDAManaged

    def __init__(self):
        self.xp = cupy
        self.matrix_engine = _matmul.ENGINE
        self.matmul_epilogues = _matmul.EPILOGUES
        driver = check(runtime.cudaDriverGetVersion(), "cudaDriverGetVersion")
        #: two-body IF and SWITCH nodes need a CUDA 12.8 driver; older ones get tp.cond's and
        #: tp.switch's constructions from if nodes
        self.conditional_kinds = frozenset({"if", "while"} | (
            {"if_else", "switch"} if driver >= _graphs.IF_ELSE_DRIVER else set()))
        self._count: int | None = None
        self._properties: dict[int, dict] = {}
        self._supported: dict[int, frozenset] = {}
        self._service: dict[int, CudaStream] = {}
        self._probe_memory: dict[int, int] = {}
        self._lock = threading.Lock()

    # -- devices -------------------------------------------------------------------------------
    def device_count(self) -> int:
        """cudaGetDeviceCount; 0 when no driver or no device is visible (never raises)."""
        count = self._count
        if count is None:
            try:
                err, found = runtime.cudaGetDeviceCount()
                count = int(found) if err is SUCCESS else 0
                if err is not SUCCESS:
                    runtime.cudaGetLastError()
            except Exception:  # noqa: BLE001 - a missing runtime library means no devices
                count = 0
            self._count = count
        return count

    def _device_properties(self, index: int) -> dict:
        properties = self._properties.get(index)
        if properties is None:
            props = check(runtime.cudaGetDeviceProperties(index),
                          "cudaGetDeviceProperties")
            name = props.name
            if isinstance(name, (bytes, bytearray)):
                name = bytes(name).split(b"\0", 1)[0].decode(errors="replace")
            properties = {"name": str(name).strip(), "total_memory": int(props.totalGlobalMem),
                          "compute_capability": (int(props.major), int(props.minor)),
                          "multi_processor_count": int(props.multiProcessorCount),
                          "backend": "cuda"}
            self._properties[index] = properties
        return properties

    def device_capability(self, index: int) -> dict[str, Any]:
        """Name, memory, compute capability, SM count and the dtypes that probe OK (cached)."""
        capability = dict(self._device_properties(index))
        supported = self._supported.get(index)
        if supported is None:
            with self._lock:
                supported = self._supported.get(index)
                if supported is None:
                    supported = self._supported[index] = self._probe_dtypes(index)
        capability["supported_dtypes"] = supported
        capability["matmul_in_capture"] = _matmul.available()   # cuBLASLt; CuPy's cuBLAS refuses
        return capability

    def _probe_dtypes(self, index: int) -> frozenset:
        """The dtypes CuPy can hold and add on the device. Runs on a private stream over a
        private, never-freed block, so it neither allocates through tensorplay's allocator nor
        frees (which would synchronize the device) if asked during a capture."""
        with relaxed_capture_mode(), device_guard(index):
            block = self._probe_memory.get(index)
            if block is None:
                block = self._probe_memory[index] = check(runtime.cudaMalloc(2 * 64),
                                                          "cudaMalloc")
            stream = self._service_stream(index)
            previous = _current_cupy_stream()
            stream.cupy.use()
            try:
                return frozenset(d for d in _dtype.all_dtypes
                                 if self._probe_one(index, block, stream, d))
            finally:
                previous.use()

    def _probe_one(self, index: int, block: int, stream, dtype) -> bool:
        """Whether CuPy can hold ``dtype`` and add two arrays of it: one host copy, one add
        kernel (compiled once per dtype, then in CuPy's on-disk cache), one copy back."""
        try:
            a, c = (self.as_array(index, block + 64 * k, 64, dtype.numpy, (4,),
                                  (dtype.itemsize,), None) for k in range(2))
            ones = np.ones(4, dtype.numpy)
            a.set(ones, stream=stream.cupy)
            cupy.add(a, a, out=c)
            result = c.get(stream=stream.cupy)
            stream.cupy.synchronize()
            return bool(np.array_equal(result, np.add(ones, ones)))
        except Exception:  # noqa: BLE001 - any failure means "not supported here"
            return False

    def set_device(self, index: int) -> None:
        """cudaSetDevice, and CuPy's current device."""
        check(runtime.cudaSetDevice(index), "cudaSetDevice")
        cupy.cuda.Device(index).use()
        _cupy_bridge.install()

    def mem_get_info(self, index: int) -> tuple[int, int]:
        with device_guard(index):
            free, total = check(runtime.cudaMemGetInfo(), "cudaMemGetInfo")
        return int(free), int(total)

    def _service_stream(self, index: int) -> CudaStream:
        """A private side stream per device: graph uploads and the dtype probe."""
        stream = self._service.get(index)
        if stream is None:
            stream = self._service[index] = _streams.new_stream(index, 0)
        return stream

    # -- raw memory ----------------------------------------------------------------------------
    def malloc(self, index: int, nbytes: int) -> int:
        """cudaMalloc under the device; MemoryError when it has no room. During a capture the
        call runs in relaxed capture mode, as PyTorch's allocator does."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"malloc needs nbytes > 0 (an int), got {nbytes!r}")
        _cupy_bridge.install()
        with relaxed_capture_mode(), device_guard(index):
            try:
                return check(runtime.cudaMalloc(nbytes), "cudaMalloc")
            except MemoryError as exc:
                raise MemoryError(f"cuda:{index}: {nbytes:,} bytes requested: {exc}") from None

    def free(self, index: int, ptr: int) -> None:
        """cudaFree under the device (no waiting here: the caller made sure nothing uses it)."""
        with relaxed_capture_mode(), device_guard(index):
            check(runtime.cudaFree(ptr), "cudaFree")

    def as_array(self, index: int, ptr: int, nbytes: int, numpy_dtype: Any,
                 shape: tuple[int, ...], strides: tuple[int, ...] | None, owner: Any) -> Any:
        """A CuPy view of ``[ptr, ptr + nbytes)`` on device ``index`` that keeps ``owner``
        (``shape`` a tuple, ``strides`` a tuple or None for C order, ``numpy_dtype`` a NumPy
        dtype: the eager hot path; CuPy computes C strides faster than it takes given ones)."""
        # strides positional: CuPy's constructor parses a keyword argument slower
        return _ndarray(shape, numpy_dtype,
                        _MemoryPointer(_UnownedMemory(ptr, nbytes, owner, index), 0), strides)

    #: ``array_ptr(array)``: the device address of a CuPy array's first element (a C-level
    #: getter: ``stage_and_launch`` calls it once per input).
    array_ptr = staticmethod(operator.attrgetter("data.ptr"))

    # -- streams and events --------------------------------------------------------------------
    def default_stream(self, index: int) -> CudaStream:
        return _streams.default_stream(index)

    def create_stream(self, index: int, priority: int) -> CudaStream:
        _cupy_bridge.install()
        return _streams.new_stream(index, int(priority))

    def set_current_stream(self, stream: CudaStream) -> None:
        """Make ``stream``'s CuPy stream current for its device in this thread."""
        _cupy_bridge.make_current(stream)

    def stream_query(self, stream: CudaStream) -> bool:
        err = runtime.cudaStreamQuery(stream.handle)[0]
        if err is SUCCESS:
            _raise_pending(stream.device_index)
            return True
        if err is NOT_READY:
            return False
        raise_error(err, "cudaStreamQuery")
        return True

    def stream_synchronize(self, stream: CudaStream) -> None:
        """cudaStreamSynchronize; on a capturing stream CUDA refuses it and invalidates the
        capture (RuntimeError naming the error)."""
        check(runtime.cudaStreamSynchronize(stream.handle), "cudaStreamSynchronize")
        _raise_pending(stream.device_index)

    def synchronize_device(self, index: int) -> None:
        with device_guard(index):
            check(runtime.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        _raise_pending(index)

    def create_event(self, index: int, enable_timing: bool) -> CudaEvent:
        return CudaEvent(index, enable_timing)

    def event_record(self, event: CudaEvent, stream: CudaStream) -> None:
        if event.device_index != stream.device_index:
            raise ValueError(f"event_record: {event!r} belongs to cuda:{event.device_index} but "
                             f"{stream!r} is on cuda:{stream.device_index}; record an event on "
                             f"a stream of its own device")
        check(runtime.cudaEventRecord(event.handle, stream.handle), "cudaEventRecord")

    def stream_wait_event(self, stream: CudaStream, event: CudaEvent) -> None:
        check(runtime.cudaStreamWaitEvent(stream.handle, event.handle, 0), "cudaStreamWaitEvent")

    def event_query(self, event: CudaEvent) -> bool:
        err = runtime.cudaEventQuery(event.handle)[0]
        if err is SUCCESS:
            _raise_pending(event.device_index)
            return True
        if err is NOT_READY:
            return False
        raise_error(err, "cudaEventQuery")
        return True

    def event_synchronize(self, event: CudaEvent) -> None:
        check(runtime.cudaEventSynchronize(event.handle), "cudaEventSynchronize")
        _raise_pending(event.device_index)

    def event_elapsed_ms(self, start: CudaEvent, end: CudaEvent) -> float:
        for label, event in (("start", start), ("end", end)):
            if not event.enable_timing:
                raise RuntimeError(f"event_elapsed_ms: the {label} event was created without "
                                   f"enable_timing=True")
        return float(check(runtime.cudaEventElapsedTime(start.handle, end.handle),
                           "cudaEventElapsedTime"))

    # -- work ----------------------------------------------------------------------------------
    def launch(self, stream: CudaStream, kernel) -> None:
        """Run ``kernel`` now with CuPy bound to ``stream`` (the eager-op hot path: one ``is``
        comparison when it already is; the device stays switched after a rebind)."""
        if _current_cupy_stream() is not stream.cupy:
            _cupy_bridge.bind(stream)
        kernel()

    def launch_call(self, stream: CudaStream, fn, *args) -> None:
        """``fn(*args)`` now with CuPy bound to ``stream``: :meth:`launch` without a kernel
        object (the op layer's direct plans)."""
        if _current_cupy_stream() is not stream.cupy:
            _cupy_bridge.bind(stream)
        fn(*args)

    def memcpy(self, stream: CudaStream, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """Asynchronous copy of raw bytes on ``stream``.

        The device of each pointer comes from ``cudaPointerGetAttributes``: same device ->
        ``cudaMemcpyAsync`` DeviceToDevice; two devices -> ``cudaMemcpyPeerAsync``; anything
        that is not plain device memory (pinned or managed) -> ``cudaMemcpyAsync`` with
        cudaMemcpyDefault, which infers the direction under unified addressing.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"memcpy needs nbytes >= 0 (an int), got {nbytes!r}")
        if nbytes == 0:
            return
        dst = check(runtime.cudaPointerGetAttributes(dst_ptr), "cudaPointerGetAttributes")
        src = check(runtime.cudaPointerGetAttributes(src_ptr), "cudaPointerGetAttributes")
        if dst.type != _DEVICE_MEMORY or src.type != _DEVICE_MEMORY:
            check(_memcpy_async(dst_ptr, src_ptr, nbytes, _DEFAULT_KIND, stream.handle),
                  "cudaMemcpyAsync")
        elif dst.device == src.device:
            check(_memcpy_async(dst_ptr, src_ptr, nbytes, _D2D, stream.handle), "cudaMemcpyAsync")
        else:
            check(runtime.cudaMemcpyPeerAsync(dst_ptr, dst.device, src_ptr, src.device, nbytes,
                                              stream.handle), "cudaMemcpyPeerAsync")

    def to_host(self, stream: CudaStream, array: Any) -> np.ndarray:
        """A NumPy copy of ``array`` made in ``stream``'s order, after which we wait."""
        if _current_cupy_stream() is not stream.cupy:
            _cupy_bridge.bind(stream)
        host = array.get(stream=stream.cupy)
        check(runtime.cudaStreamSynchronize(stream.handle), "cudaStreamSynchronize")
        _raise_pending(stream.device_index)
        return host

    def from_host(self, stream: CudaStream, array: Any, host_array: Any) -> None:
        """Copy ``host_array`` into ``array`` in stream order. The copy from pageable memory
        returns once the driver has staged the bytes, so the caller may reuse the source."""
        host = np.asarray(host_array, dtype=array.dtype)   # keeps 0-d arrays 0-d
        shape = tuple(array.shape)
        if host.shape != shape:
            try:
                host = np.broadcast_to(host, shape)
            except ValueError:
                raise ValueError(f"from_host: host data of shape {host.shape} cannot be written "
                                 f"into a device array of shape {shape}") from None
        if not host.flags.c_contiguous:
            host = host.copy(order="C")
        if _current_cupy_stream() is not stream.cupy:
            _cupy_bridge.bind(stream)
        if array.flags.c_contiguous:
            array.set(host, stream=stream.cupy)
            return
        staged = cupy.empty(array.shape, array.dtype)
        staged.set(host, stream=stream.cupy)
        array[...] = staged

    # -- capture and graphs --------------------------------------------------------------------
    def capture_begin(self, stream: CudaStream, mode: str) -> None:
        """Begin capturing ``stream`` in ``mode`` (one of ``_graphs.MODES``); its first recorded
        work is the head staging kernel, and ``capture_end`` records the tail one last (Note
        [fused staging] in ``_stage_node.py``). The capture rules (a valid mode, no default
        stream, the ending thread) are the caller's: ``_runtime/capture.py``."""
        _cupy_bridge.relax_this_thread()
        index = stream.device_index
        if _graphs.is_capturing(stream):
            raise RuntimeError(f"{stream!r} is already capturing; call capture_end() first")
        blocks = 4 * max(1, self._device_properties(index)["multi_processor_count"])
        _graphs.begin_capture(stream, mode, blocks)

    def capture_end(self, stream: CudaStream) -> CudaGraph:
        """End the capture; RuntimeError (capture discarded) if a body is open or CUDA refused
        the capture, naming the CUDA error."""
        return _graphs.end_capture(stream)

    def is_capturing(self, stream: CudaStream) -> bool:
        return _graphs.is_capturing(stream)

    def begin_conditional(self, stream: CudaStream, kind: str, predicate: Any,
                          count: int = 1) -> CudaStream:
        if kind not in self.conditional_kinds:
            raise ValueError(f"begin_conditional: kind must be one of "
                             f"{sorted(self.conditional_kinds)} with this driver, got {kind!r}")
        return _graphs.begin_conditional(stream, kind, predicate, count)

    def begin_next_body(self, body_stream: CudaStream) -> CudaStream:
        return _graphs.begin_next_body(body_stream)

    def set_conditional(self, body_stream: CudaStream, predicate: Any) -> None:
        _graphs.set_conditional(body_stream, predicate)

    def end_conditional(self, body_stream: CudaStream) -> None:
        _graphs.end_conditional(body_stream)

    def instantiate(self, graph: CudaGraph) -> CudaExecutable:
        """cudaGraphInstantiateWithFlags, then cudaGraphUpload on a private stream."""
        with relaxed_capture_mode():
            return _graphs.instantiate(graph, self._service_stream(graph.device_index))

    def graph_launch(self, executable: CudaExecutable, stream: CudaStream) -> None:
        """cudaGraphLaunch; staging nodes left enabled by the previous ``stage_and_launch`` are
        disabled first. (``Graph.replay`` goes through :meth:`launcher` instead.)"""
        if isinstance(executable, CudaExecutable):
            self.unstage(executable)
        self._launch_now(executable, stream)

    def _launch_now(self, executable: CudaExecutable, stream: CudaStream) -> None:
        """cudaGraphLaunch as the executable's staging node stands (CuPy's binding where
        there is one: :meth:`launcher`)."""
        try:
            if _cupy_graph_launch is not None:
                _cupy_graph_launch(executable.ptr, stream.ptr)
                return
            err = _graph_launch(executable.handle, stream.handle)[0]
        except (TypeError, AttributeError):
            self._bad_launch(executable, stream)
            raise
        except _CupyRuntimeError as error:
            _graph_launch_failed(error, stream)   # raises
            raise
        if err is not SUCCESS:
            raise_error(err, "cudaGraphLaunch")

    def launcher(self, executable: CudaExecutable):
        """``(launch, failed)``: ``launch(stream_handle)`` is cudaGraphLaunch bound to the
        executable's integer handle. Through CuPy's Cython binding it is a C-level partial (no
        Python frame of ours on the replay path; a refusal raises CuPy's CUDARuntimeError,
        which ``failed`` turns into ours); cuda-bindings' (slower: it builds a result tuple
        and an enum per call) serves a CuPy without ``runtime.graphLaunch``."""
        handle = executable.ptr
        if _cupy_graph_launch is not None:
            return functools.partial(_cupy_graph_launch, handle), _graph_launch_failed

        def launch(stream_handle: int) -> None:
            err = _graph_launch(handle, stream_handle)[0]
            if err is not SUCCESS:
                raise_error(err, "cudaGraphLaunch")
        return launch, _graph_launch_failed

    def stream_handle(self, stream: CudaStream) -> int:
        return stream.ptr

    def unstage(self, executable: CudaExecutable) -> None:
        executable.stage_in.disable()
        executable.stage_out.disable()

    def stage_and_launch(self, executable: CudaExecutable, stream: CudaStream,
                         copies: list[tuple[int, int, int]],
                         copies_out: Sequence[tuple[int, int, int]] = ()) -> None:
        """Copy each ``(dst_ptr, src_ptr, nbytes)`` of ``copies``, launch, then copy each of
        ``copies_out``: the triplets become the parameters of the graph's head and tail staging
        nodes, so the copies run inside the launch (Note [fused staging] in
        ``_stage_node.py``). Triplets past the 64th of a list go out as cudaMemcpyAsync, before
        the launch for ``copies`` and after it for ``copies_out``."""
        if not copies and not copies_out:
            self.graph_launch(executable, stream)
            return
        if executable.destroyed:
            raise RuntimeError(f"stage_and_launch: {executable!r} was destroyed")
        if len(copies) > _MAX_COPIES:
            self._copy_each(stream, copies[_MAX_COPIES:])
            copies = copies[:_MAX_COPIES]
        executable.stage_in.stage(copies)
        stage_out = executable.stage_out
        if copies_out or stage_out.enabled:
            stage_out.stage(copies_out[:_MAX_COPIES])
        self._launch_now(executable, stream)
        if len(copies_out) > _MAX_COPIES:
            self._copy_each(stream, copies_out[_MAX_COPIES:])

    def _copy_each(self, stream: CudaStream, copies) -> None:
        handle = stream.handle
        for dst, src, nbytes in copies:
            check(_memcpy_async(dst, src, nbytes, _D2D, handle), "cudaMemcpyAsync")

    @staticmethod
    def _bad_launch(executable, stream) -> None:
        if getattr(executable, "destroyed", False):
            raise RuntimeError(f"graph launch: {executable!r} was destroyed")
        if not isinstance(stream, CudaStream):
            raise TypeError(f"graph launch needs a CudaStream, got {type(stream).__name__}")

    def graph_destroy(self, graph: CudaGraph | None,
                      executable: CudaExecutable | None) -> None:
        """cudaGraphExecDestroy / cudaGraphDestroy; None-safe and idempotent. A graph with a
        live executable is freed with it (its staging node identifies the exec's node)."""
        with relaxed_capture_mode():
            if executable is not None:
                _graphs.destroy_executable(executable, _DESTROYED)
            if graph is not None:
                _graphs.destroy_graph(graph)

    def graph_to_dot(self, graph: CudaGraph, path: str, verbose: bool) -> None:
        _graphs.to_dot(graph, str(path), bool(verbose))

    # -- optional hooks (backends.OptionalHooks) -------------------------------------------------
    #: ``matmul(a, b, out=None, precision="highest")``: ``numpy.matmul`` for CuPy arrays, eager
    #: and while the stream captures (cuBLASLt through nvmath-python); ``matmul_epilogue(a, b,
    #: out, bias, activation, precision="highest")``: ``out[...] = activation(a @ b + bias)`` in
    #: one cuBLASLt call; ``matmul_residual(a, b, out, bias, residual, precision="highest")``:
    #: ``out[...] = a @ b + bias + residual`` in one call (the residual its C input, beta = 1).
    #: The functions of ``_matmul`` themselves, so an eager product enters no method frame;
    #: they touch only the arrays they are given (``tp_arguments_only``: Note [write records]).
    #: (The class exists without CuPy too, for create_backend to say why it is unusable.)
    if _IMPORT_ERROR is None:
        matmul = staticmethod(_matmul.matmul)
        matmul_epilogue = staticmethod(_matmul.matmul_epilogue)
        matmul_residual = staticmethod(_matmul.matmul_residual)
        #: ``matmul_launcher(a, b, out, bias, activation, precision)``: after a product, a
        #: launcher for arrays laid out alike, or None: :func:`._matmul.launcher`
        matmul_launcher = staticmethod(_matmul.launcher)

    def erf(self, x):
        """The error function of a float CuPy array in one kernel: :func:`._activations.erf`."""
        return _activations.erf(x)

    def fuse(self, name: str, function):
        """``function`` (of CuPy arrays) as one kernel named ``name``: ``cupy.fuse``
        (``_tensor.fusion``)."""
        return cupy.fuse(kernel_name=name)(function)

    def empty_host_cache(self) -> None:
        """Release CuPy's cached pinned host memory."""
        cupy.get_default_pinned_memory_pool().free_all_blocks()

    def use_allocator(self, allocator_of) -> None:
        """Route CuPy's own allocations to ``allocator_of(index).malloc(nbytes, stream)`` (the
        runtime's caching allocator, handed in at selection): :mod:`._cupy_bridge`."""
        _cupy_bridge.use_allocator(allocator_of)

    def raw_graph_launchers(self, executable: CudaExecutable, stream: CudaStream):
        """Bare ``cudaGraphLaunch(executable, stream)`` calls (C-level partials) through CuPy's
        binding (the one ``Graph.replay`` uses) and cuda-bindings', the benchmark's peers of
        ``Graph.replay``; they check nothing and stage nothing."""
        handle, stream_handle = executable.ptr, stream.ptr
        launchers = {}
        if _cupy_graph_launch is not None:
            launchers["CuPy"] = functools.partial(_cupy_graph_launch, handle, stream_handle)
        launchers["cuda-bindings"] = functools.partial(_graph_launch, handle, stream_handle)
        return launchers

    def elementwise_kernel(self, op: str, compute, kinds: str, out):
        """A launcher ``fn(*operands, out_array)`` of one cached raw kernel for an elementwise
        op (cheaper to launch than CuPy's ufuncs), or None (the op calls CuPy's ufuncs):
        :func:`._elementwise.elementwise_kernel`."""
        return _elementwise.elementwise_kernel(op, compute, kinds, out)

    def elementwise_program(self, steps, compute, kinds: str, out):
        """A launcher ``fn(*externals, out_array)`` of ONE raw kernel running a chain of
        elementwise ops, or None: :func:`._elementwise.elementwise_program`."""
        return _elementwise.elementwise_program(steps, compute, kinds, out)

    def sum_kernel(self, compute, out):
        """A launcher ``fn(x, out_array)`` of a one-block sum of at most ``sum_kernel.limit``
        elements, or None: :func:`._elementwise.sum_kernel`."""
        return _elementwise.sum_kernel(compute, out)

    # the attribute OptionalHooks.sum_kernel documents; mypy types no function attributes
    sum_kernel.limit = _SUM_SMALL_LIMIT  # type: ignore[attr-defined]

    def reduce_axis(self, op: str, shape: tuple[int, ...], axis: int, dtype, acc, out):
        """A launcher ``fn(x, out_array)`` of a sum, mean, amax or amin over the last or the
        first dimension of a C-contiguous float array, or None: :func:`._reduce.reduce_axis`."""
        return _reduce.reduce_axis(op, shape, axis, dtype, acc, out)

    #: ``softmax(x, out, dim, log)``: ``out[...] = (log_)softmax(x, dim)`` in one raw kernel
    #: (the function itself: ``_tensor`` binds ``dim`` and ``log`` once per plan, and a launch
    #: enters no method frame)
    if _IMPORT_ERROR is None:   # as the products above
        softmax = staticmethod(_activations.softmax)
        #: ``softmax_launcher(x, dim, log)``: a launcher ``fn(x, out)`` for arrays laid out as
        #: ``x``, or None: :func:`._activations.softmax_launcher`
        softmax_launcher = staticmethod(_activations.softmax_launcher)

    def check_index_range(self, idx, size: int, dim: int, wrap: bool, op: str,
                          exception: type, note: str) -> None:
        """Queue the bounds check of a device index array; the next synchronization raises
        what it finds: :func:`._bounds.check`."""
        _bounds.check(idx, size, dim, wrap, op, exception, note)

    def index_copy(self, dst, axis: int, idx, src, op: str = "index_copy_") -> bool:
        """``dst``'s slices ``idx`` along ``axis`` replaced by ``src``'s in one raw kernel that
        also checks the indices (an error for ``op`` at the next synchronization):
        :func:`._bounds.index_copy`."""
        return _bounds.index_copy(dst, axis, idx, src, op)

    def copy(self, dst, src) -> bool:
        """``dst[...] = src`` for arrays of one dtype and any layout in one raw kernel, its
        layout worked out once per signature: :func:`._copy.copy`; False for what it does not
        take (a cast, negative strides, overlapping memory)."""
        return _copy.copy(dst, src)

    def index_select(self, dst, axis: int, idx, src, op: str, note: str) -> bool:
        """``dst[...] = src.take(idx, axis)`` in one raw kernel that also checks the indices
        (an error for ``op`` at the next synchronization): :func:`._bounds.index_select`."""
        return _bounds.index_select(dst, axis, idx, src, op, note)

    def layer_norm(self, x, weight, bias, out, eps: float) -> None:
        """``out[...] = layer_norm(x)`` over the last dimension in one raw kernel:
        :func:`._rows.layer_norm`."""
        _rows.layer_norm(x, weight, bias, out, eps)

    def layer_norm_launcher(self, x, weight, bias, eps: float):
        """A launcher ``fn(x, weight, bias, out)`` for arrays laid out as these, or None:
        :func:`._rows.layer_norm_launcher`."""
        return _rows.layer_norm_launcher(x, weight, bias, eps)

    def attention(self, q, k, v, mask, out, scale: float, causal: bool) -> bool:
        """Scaled dot-product attention in one raw kernel (two when the keys of few query rows
        are split; the tiled kernel for many rows and heads up to 128 wide):
        :func:`._attention.attention`; False for what it does not take (float64, head
        dimensions over 256, a last dimension that is not contiguous, a mask of another float
        dtype than the query's or float32)."""
        return _attention.attention(q, k, v, mask, out, scale, causal)

    def adam_update(self, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr,
                    beta1: float, beta2: float, eps: float, weight_decay: float,
                    decoupled: bool, maximize: bool) -> bool:
        """One fused Adam/AdamW update kernel: :func:`._optim.adam_update`."""
        return _optim.adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr,
                                  beta1, beta2, eps, weight_decay, decoupled, maximize)


def create_backend() -> CudaBackend:
    """The cuda backend.

    Raises:
        ImportError: CuPy or cuda-bindings is missing (or failed to import), naming which and
            how to install them.
    """
    if _IMPORT_ERROR is not None:
        missing = getattr(_IMPORT_ERROR, "name", None) or ""
        which = "cuda-bindings" if missing.startswith("cuda") else "CuPy"
        raise ImportError(
            f"the cuda backend needs CuPy and cuda-bindings, and {which} did not import "
            f"({type(_IMPORT_ERROR).__name__}: {_IMPORT_ERROR}). Install the CUDA extra: "
            f"pip install 'tensorplay[cuda]' (cupy-cuda13x and cuda-bindings)") from _IMPORT_ERROR
    return CudaBackend()
