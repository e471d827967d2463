"""The cuda backend on its own, driven through its methods (runs only on a machine with a GPU).

Arrays come from ``malloc`` + ``as_array`` (freed at teardown), kernels are CuPy calls with
``out=`` so that nothing allocates while a stream captures (these tests bypass
``tensorplay.accelerator.Graph`` and its pools on purpose). Each test makes its own streams.

.. warning:: A broken while node spins on the device forever; run this file under a timeout
   (``timeout 300 python -m pytest tests/internals/test_cuda.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from support import cuda_backend_or_skip

_BACKEND = cuda_backend_or_skip("the cuda backend's internals")

import cupy  # noqa: E402
from cuda.bindings import runtime  # noqa: E402

from tensorplay import _dtype  # noqa: E402
from tensorplay.backends import cuda as cuda_backend  # noqa: E402
from tensorplay.backends.cuda import (CudaEvent, CudaExecutable, CudaGraph,  # noqa: E402
                                      CudaStream, _cupy_bridge, _graphs, _runtime)

_SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin_then_set(int* flag, long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
    *flag = 1;
}
""", "spin_then_set")


@pytest.fixture
def backend():
    yield _BACKEND
    for left_open in list(_graphs._roots):   # a failed test must not leave a capture behind
        try:
            _BACKEND.capture_end(left_open.stream)
        except RuntimeError:
            pass
    _BACKEND.synchronize_device(0)
    _BACKEND.set_current_stream(_BACKEND.default_stream(0))


@pytest.fixture
def make(backend):
    """``make(shape, dtype, fill)``: a device array over raw memory, filled and synchronized."""
    pointers = []
    default = backend.default_stream(0)

    def make_array(shape, dtype=np.float32, fill=0):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
        ptr = backend.malloc(0, nbytes)
        pointers.append(ptr)
        strides = tuple(int(s) for s in np.empty(shape, dtype).strides)
        array = backend.as_array(0, ptr, nbytes, dtype, shape, strides, None)
        backend.launch(default, lambda: array.fill(fill))
        backend.stream_synchronize(default)
        return array

    yield make_array
    backend.synchronize_device(0)
    for ptr in pointers:
        backend.free(0, ptr)


def host(backend, stream, array):
    return backend.to_host(stream, array)


def capture(backend, stream, body, mode="global"):
    backend.capture_begin(stream, mode)
    body()
    return backend.capture_end(stream)


# -- runtime checker and devices ----------------------------------------------------------------

def test_checker_names_the_call_and_the_error(backend):
    with pytest.raises(RuntimeError, match=r"cudaSetDevice failed: cudaErrorInvalidDevice \("):
        _runtime.check(runtime.cudaSetDevice(10_000), "cudaSetDevice")
    assert _runtime.check(runtime.cudaGetDevice(), "cudaGetDevice") >= 0
    free, total = backend.mem_get_info(0)
    assert 0 < free <= total


def test_absurd_malloc_is_memory_error_and_the_device_still_works(backend, make):
    with pytest.raises(MemoryError, match="cudaMalloc failed: cudaErrorMemoryAllocation"):
        backend.malloc(0, 1 << 50)
    assert runtime.cudaGetLastError()[0] == runtime.cudaError_t.cudaSuccess
    array = make(4, fill=3)
    assert host(backend, backend.default_stream(0), array).tolist() == [3.0] * 4


def test_capability_and_supported_dtypes(backend):
    capability = backend.device_capability(0)
    assert capability["backend"] == "cuda" and isinstance(capability["name"], str)
    assert capability["total_memory"] > 0 and capability["multi_processor_count"] > 0
    major, minor = capability["compute_capability"]
    assert major >= 7 and minor >= 0
    supported = capability["supported_dtypes"]
    assert _dtype.float32 in supported and _dtype.int64 in supported and _dtype.bool in supported
    assert backend.device_capability(0)["supported_dtypes"] is supported   # probed once
    # indices are checked above the backend (_runtime.device.check_index); natively, CUDA's error
    with pytest.raises(RuntimeError, match="cudaGetDeviceProperties.*cudaErrorInvalidDevice"):
        backend.device_capability(backend.device_count())


# -- streams and events -------------------------------------------------------------------------

def test_event_orders_streams_and_times_work(backend, make):
    flag, seen = make(1, np.int32, 0), make(1, np.int32, -1)
    producer, consumer = backend.create_stream(0, 0), backend.create_stream(0, 0)
    assert isinstance(producer, CudaStream) and not producer.is_default and producer.ptr != 0
    start, end = backend.create_event(0, True), backend.create_event(0, True)
    done = backend.create_event(0, False)
    assert isinstance(done, CudaEvent)
    backend.event_record(start, producer)
    backend.launch(producer, lambda: _SPIN((1,), (1,), (flag, np.int64(20_000_000))))
    backend.event_record(end, producer)
    backend.event_record(done, producer)
    backend.stream_wait_event(consumer, done)
    backend.launch(consumer, lambda: cupy.copyto(seen, flag))
    assert backend.event_query(done) is False and backend.stream_query(producer) is False
    backend.event_synchronize(done)
    backend.stream_synchronize(consumer)
    assert host(backend, consumer, seen).tolist() == [1]
    assert backend.event_query(done) is True and backend.stream_query(producer) is True
    assert backend.event_elapsed_ms(start, end) > 0.5
    with pytest.raises(RuntimeError, match="without enable_timing"):
        backend.event_elapsed_ms(start, done)


def test_default_stream_is_per_device_and_refuses_capture(backend):
    """The rule with its message is ``_runtime/capture.py``'s (test_capture_rules.py); called
    directly, CUDA itself refuses to capture the legacy stream."""
    default = backend.default_stream(0)
    assert default is backend.default_stream(0) and default.is_default and default.ptr == 0
    assert backend.is_capturing(default) is False
    with pytest.raises(RuntimeError, match="cudaStreamBeginCapture"):
        backend.capture_begin(default, "global")
    assert backend.is_capturing(default) is False


def test_memcpy_and_host_transfers(backend, make):
    stream = backend.create_stream(0, 0)
    source, target = make(256, np.float32), make(256, np.float32, -1)
    data = np.arange(256, dtype=np.float32)
    backend.from_host(stream, source, data)
    data[:] = -7   # the caller may reuse its buffer at once
    backend.memcpy(stream, backend.array_ptr(target), backend.array_ptr(source), 256 * 4)
    assert host(backend, stream, target).tolist() == list(range(256))
    scalar = make((), np.int32)
    backend.from_host(stream, scalar, np.int32(5))
    assert int(host(backend, stream, scalar)) == 5


def test_cupy_temporaries_go_through_tensorplays_allocator(backend):
    from tensorplay._runtime.allocator import device_allocator

    allocator = device_allocator(0)
    stream = backend.create_stream(0, 0)
    backend.set_current_stream(stream)
    assert cupy.cuda.get_allocator() is _cupy_bridge.hook
    assert _cupy_bridge.stream_key(0) is stream
    seen = {}

    def kernel():
        before = allocator.memory_allocated()
        temporary = cupy.ones(1 << 18, dtype=cupy.float32)   # 1 MiB
        seen["grew"] = allocator.memory_allocated() - before
        seen["sum"] = float(temporary.sum())

    backend.launch(stream, kernel)
    assert seen["grew"] >= 1 << 20 and seen["sum"] == float(1 << 18)


# -- capture and replay -------------------------------------------------------------------------

def test_capture_and_replay_k_times(backend, make):
    stream = backend.create_stream(0, 0)
    counter = make(8, np.float32, 0)
    graph = capture(backend, stream,
                    lambda: backend.launch(stream, lambda: cupy.add(counter, 1, out=counter)))
    assert isinstance(graph, CudaGraph)
    assert host(backend, stream, counter).tolist() == [0.0] * 8   # capture runs nothing
    executable = backend.instantiate(graph)
    assert isinstance(executable, CudaExecutable)
    for _ in range(5):
        backend.graph_launch(executable, stream)
    assert host(backend, stream, counter).tolist() == [5.0] * 8
    backend.graph_destroy(graph, executable)
    backend.graph_destroy(graph, executable)   # idempotent
    backend.graph_destroy(None, None)
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.graph_launch(executable, stream)


def test_capture_errors(backend, make):
    stream = backend.create_stream(0, 0)
    with pytest.raises(RuntimeError, match="not capturing"):
        backend.capture_end(stream)
    x = make(4, np.float32, 0)
    backend.capture_begin(stream, "relaxed")
    assert backend.is_capturing(stream)
    with pytest.raises(RuntimeError, match="already capturing"):
        backend.capture_begin(stream, "relaxed")
    backend.launch(stream, lambda: cupy.add(x, 1, out=x))
    with pytest.raises(RuntimeError, match="cudaStreamSynchronize failed: cudaError"):
        backend.stream_synchronize(stream)       # illegal during capture: invalidates it
    assert backend.is_capturing(stream)          # still to be ended
    with pytest.raises(RuntimeError, match=r"capture_end: the capture on cuda:0 failed: "
                                           r"cudaStreamEndCapture returned cudaError"):
        backend.capture_end(stream)
    assert not backend.is_capturing(stream)
    backend.launch(stream, lambda: cupy.add(x, 1, out=x))   # the stream works again
    assert host(backend, stream, x).tolist() == [1.0] * 4


def test_debug_dot_names_kernels(backend, make, tmp_path):
    stream = backend.create_stream(0, 0)
    x = make(4, np.float32, 1)
    graph = capture(backend, stream,
                    lambda: backend.launch(stream, lambda: cupy.multiply(x, 2, out=x)))
    verbose, plain = tmp_path / "verbose.dot", tmp_path / "plain.dot"
    backend.graph_to_dot(graph, str(verbose), True)
    backend.graph_to_dot(graph, str(plain), False)
    text = verbose.read_text()
    assert "digraph" in text and "tp_stage" in text and "multiply" in text
    assert "digraph" in plain.read_text()
    backend.graph_destroy(graph, None)
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.graph_to_dot(graph, str(plain), False)


# -- conditional nodes --------------------------------------------------------------------------

def test_if_node(backend, make):
    stream = backend.create_stream(0, 0)
    x, predicate = make(1, np.int32, 0), make(1, np.bool_, False)

    def body():
        inner = backend.begin_conditional(stream, "if", predicate)
        assert backend.is_capturing(inner) and inner is not stream
        backend.launch(inner, lambda: cupy.add(x, 1, out=x))
        backend.end_conditional(inner)
        assert not backend.is_capturing(inner)

    executable = backend.instantiate(capture(backend, stream, body))
    for value in (True, False, True, True):
        backend.launch(stream, lambda value=value: predicate.fill(value))
        backend.graph_launch(executable, stream)
    assert host(backend, stream, x).tolist() == [3]
    backend.graph_destroy(None, executable)


def test_while_node_counts_down(backend, make):
    stream = backend.create_stream(0, 0)
    counter, steps = make(1, np.int32, 0), make(1, np.int32, 0)
    predicate = make(1, np.bool_, False)

    def step():
        cupy.subtract(counter, 1, out=counter)
        cupy.add(steps, 1, out=steps)
        cupy.greater(counter, 0, out=predicate)

    def body():
        backend.launch(stream, lambda: cupy.greater(counter, 0, out=predicate))
        loop = backend.begin_conditional(stream, "while", predicate)
        backend.launch(loop, step)
        backend.end_conditional(loop)

    executable = backend.instantiate(capture(backend, stream, body))
    for start in (5, 0, 2):
        backend.launch(stream, lambda start=start: counter.fill(start))
        backend.launch(stream, lambda: steps.fill(0))
        backend.graph_launch(executable, stream)
        assert host(backend, stream, counter).tolist() == [0]
        assert host(backend, stream, steps).tolist() == [start]
    backend.graph_destroy(None, executable)


def test_nested_conditionals_two_deep(backend, make):
    stream = backend.create_stream(0, 0)
    i, evens, parity = make(1, np.int32, 4), make(1, np.int32, 0), make(1, np.int32, 0)
    loop_predicate, even_predicate = make(1, np.bool_, False), make(1, np.bool_, False)

    def step():
        cupy.subtract(i, 1, out=i)
        cupy.remainder(i, 2, out=parity)
        cupy.equal(parity, 0, out=even_predicate)

    def body():
        backend.launch(stream, lambda: cupy.greater(i, 0, out=loop_predicate))
        loop = backend.begin_conditional(stream, "while", loop_predicate)
        backend.launch(loop, step)
        branch = backend.begin_conditional(loop, "if", even_predicate)
        backend.launch(branch, lambda: cupy.add(evens, 1, out=evens))
        with pytest.raises(RuntimeError, match="still open"):
            backend.end_conditional(loop)
        backend.end_conditional(branch)
        backend.launch(loop, lambda: cupy.greater(i, 0, out=loop_predicate))
        backend.end_conditional(loop)
        with pytest.raises(RuntimeError, match="closed"):
            backend.end_conditional(loop)

    executable = backend.instantiate(capture(backend, stream, body))
    backend.graph_launch(executable, stream)   # i: 4 -> 0; even after the step at i = 2, 0
    assert host(backend, stream, evens).tolist() == [2]
    assert host(backend, stream, i).tolist() == [0]
    backend.graph_destroy(None, executable)


def test_set_conditional_redirects_the_while_predicate(backend, make):
    stream = backend.create_stream(0, 0)
    counter = make(1, np.int32, 3)
    first, second = make(1, np.bool_, True), make(1, np.bool_, False)

    def step():
        cupy.subtract(counter, 1, out=counter)
        first.fill(False)                       # were set_conditional ignored: one iteration
        cupy.greater(counter, 0, out=second)

    def body():
        loop = backend.begin_conditional(stream, "while", first)
        backend.launch(loop, step)
        backend.set_conditional(loop, second)
        backend.end_conditional(loop)

    executable = backend.instantiate(capture(backend, stream, body))
    backend.graph_launch(executable, stream)
    assert host(backend, stream, counter).tolist() == [0]
    backend.graph_destroy(None, executable)


def test_conditional_errors(backend, make):
    stream = backend.create_stream(0, 0)
    predicate = make(1, np.bool_, True)
    with pytest.raises(RuntimeError, match="not capturing"):
        backend.begin_conditional(stream, "if", predicate)
    with pytest.raises(RuntimeError, match="not a conditional body stream"):
        backend.end_conditional(stream)
    backend.capture_begin(stream, "global")
    with pytest.raises(ValueError, match="kind must be one of"):
        backend.begin_conditional(stream, "until", predicate)
    body = backend.begin_conditional(stream, "if", predicate)
    with pytest.raises(RuntimeError, match="conditional body.*still open"):
        backend.capture_end(stream)
    assert not backend.is_capturing(stream) and not backend.is_capturing(body)


# -- stage_and_launch ---------------------------------------------------------------------------

def _doubling_graph(backend, stream, static, out):
    graph = capture(backend, stream,
                    lambda: backend.launch(stream, lambda: cupy.multiply(static, 2, out=out)))
    return backend.instantiate(graph), graph


def test_stage_and_launch_eight_inputs_over_100_launches(backend, make):
    stream = backend.create_stream(0, 0)
    static, out = make((8, 256), np.float32, 0), make((8, 256), np.float32, 0)
    history = make((100, 8, 256), np.float32, -1)
    sources = make((100, 8, 256), np.float32, 0)
    expected = np.arange(100 * 8 * 256, dtype=np.float32).reshape(100, 8, 256)
    backend.from_host(stream, sources, expected)
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    for launch in range(100):
        copies = [(ptr(static[k]), ptr(sources[launch, k]), 1024) for k in range(8)]
        backend.stage_and_launch(executable, stream, copies)
        backend.launch(stream, lambda launch=launch: cupy.copyto(history[launch], out))
    np.testing.assert_array_equal(host(backend, stream, history), expected * 2)
    backend.launch(stream, lambda: out.fill(0))
    backend.graph_launch(executable, stream)   # no staging: the statics keep the last inputs
    np.testing.assert_array_equal(host(backend, stream, out), expected[-1] * 2)
    backend.graph_destroy(graph, executable)


def test_stage_and_launch_same_triplets_again_copies_the_new_contents(backend, make):
    # the second load of the same triplets skips the parameter update: the node still copies
    stream = backend.create_stream(0, 0)
    static, out = make(256, np.float32, 0), make(256, np.float32, 0)
    source = make(256, np.float32, 0)
    executable, graph = _doubling_graph(backend, stream, static, out)
    copies = [(backend.array_ptr(static), backend.array_ptr(source), 1024)]
    for value in (1, 2):
        backend.from_host(stream, source, np.full(256, value, np.float32))
        backend.stage_and_launch(executable, stream, list(copies))
        assert host(backend, stream, out)[0] == 2 * value
    backend.from_host(stream, source, np.full(256, 5, np.float32))
    backend.graph_launch(executable, stream)    # unstaged: the static keeps 2
    assert host(backend, stream, out)[0] == 4
    backend.stage_and_launch(executable, stream, list(copies))   # enabled again, same triplets
    assert host(backend, stream, out)[0] == 10
    backend.graph_destroy(graph, executable)


def test_stage_and_launch_more_than_64_copies(backend, make):
    stream = backend.create_stream(0, 0)
    static, out = make((70, 16), np.float32, 0), make((70, 16), np.float32, 0)
    sources = make((70, 16), np.float32, 0)
    data = np.arange(70 * 16, dtype=np.float32).reshape(70, 16) + 1
    backend.from_host(stream, sources, data)
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, stream,
                             [(ptr(static[k]), ptr(sources[k]), 64) for k in range(70)])
    np.testing.assert_array_equal(host(backend, stream, out), data * 2)
    backend.graph_destroy(graph, executable)


def test_stage_and_launch_unaligned_and_odd_sizes(backend, make):
    stream = backend.create_stream(0, 0)
    static, out = make(4096, np.uint8, 0), make(4096, np.uint8, 0)
    source = make(4096, np.uint8, 0)
    data = (np.arange(4096) % 251).astype(np.uint8)
    backend.from_host(stream, source, data)
    graph = capture(backend, stream,
                    lambda: backend.launch(stream, lambda: cupy.copyto(out, static)))
    executable = backend.instantiate(graph)
    ptr = backend.array_ptr
    copies = [(ptr(static), ptr(source), 1003),                      # aligned, odd tail
              (ptr(static[2048:]), ptr(source[2049:]), 1000),         # unaligned source
              (ptr(static[3101:]), ptr(source[3101:]), 17)]           # unaligned both
    backend.stage_and_launch(executable, stream, copies)
    expected = np.zeros(4096, np.uint8)
    expected[:1003] = data[:1003]
    expected[2048:3048] = data[2049:3049]
    expected[3101:3118] = data[3101:3118]
    np.testing.assert_array_equal(host(backend, stream, out), expected)
    backend.graph_destroy(graph, executable)


def test_replay_after_stage_does_not_stage_again(backend, make):
    """The staging node is disabled again by a plain launch: the static keeps what was
    written into it since, and a later staged launch copies the new triplets."""
    stream = backend.create_stream(0, 0)
    static, out = make(256, np.float32, 0), make(256, np.float32, 0)
    first, second = make(256, np.float32, 3), make(256, np.float32, 5)
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, stream, [(ptr(static), ptr(first), 1024)])
    assert host(backend, stream, out)[0] == 6
    backend.launch(stream, lambda: static.fill(7))
    backend.graph_launch(executable, stream)
    assert host(backend, stream, out)[0] == 14
    backend.stage_and_launch(executable, stream, [(ptr(static), ptr(second), 1024)])
    assert host(backend, stream, out)[0] == 10
    backend.stage_and_launch(executable, stream, [])   # nothing to stage: a plain launch
    backend.launch(stream, lambda: static.fill(1))
    backend.graph_launch(executable, stream)
    assert host(backend, stream, out)[0] == 2
    backend.graph_destroy(graph, executable)


def test_stage_and_launch_large_copies_use_many_blocks(backend, make):
    stream = backend.create_stream(0, 0)
    n = 3 << 20   # 12 MiB of float32 per copy: many blocks per row of the grid
    static, out = make((2, n), np.float32, 0), make((2, n), np.float32, 0)
    source = make((2, n), np.float32, 0)
    data = np.random.default_rng(0).random((2, n), dtype=np.float32)
    backend.from_host(stream, source, data)
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, stream,
                             [(ptr(static[k]), ptr(source[k]), n * 4) for k in range(2)])
    np.testing.assert_array_equal(host(backend, stream, out), data * 2)
    params = executable.stage_in.params
    assert params.gridDimX > 1 and params.gridDimY == 2
    backend.graph_destroy(graph, executable)


def test_write_back_runs_after_the_graph_in_the_same_launch(backend, make):
    """The tail staging node copies what the graph wrote; each node stages only when given
    triplets, and a plain launch turns both off."""
    stream = backend.create_stream(0, 0)
    static, out = make(256, np.float32, 0), make(256, np.float32, 0)
    fresh, first, second = (make(256, np.float32, fill) for fill in (3, -1, -1))
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, stream, [(ptr(static), ptr(fresh), 1024)],
                             [(ptr(first), ptr(out), 1024)])
    assert host(backend, stream, first).tolist() == [6.0] * 256
    assert executable.stage_in.enabled and executable.stage_out.enabled
    backend.launch(stream, lambda: static.fill(4))
    backend.stage_and_launch(executable, stream, [], [(ptr(second), ptr(out), 1024)])
    assert not executable.stage_in.enabled          # the head did not copy fresh again
    assert host(backend, stream, second).tolist() == [8.0] * 256
    backend.launch(stream, lambda: (static.fill(5), second.fill(0)))
    backend.graph_launch(executable, stream)
    assert not executable.stage_out.enabled
    assert host(backend, stream, out)[0] == 10 and host(backend, stream, second)[0] == 0
    backend.graph_destroy(graph, executable)


def test_write_back_past_64_copies_goes_after_the_launch(backend, make):
    stream = backend.create_stream(0, 0)
    static, out = make((70, 16), np.float32, 0), make((70, 16), np.float32, 0)
    sources, results = make((70, 16), np.float32, 0), make((70, 16), np.float32, -1)
    data = np.arange(70 * 16, dtype=np.float32).reshape(70, 16) + 1
    backend.from_host(stream, sources, data)
    executable, graph = _doubling_graph(backend, stream, static, out)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, stream,
                             [(ptr(static[k]), ptr(sources[k]), 64) for k in range(70)],
                             [(ptr(results[k]), ptr(out[k]), 64) for k in range(70)])
    np.testing.assert_array_equal(host(backend, stream, results), data * 2)
    backend.graph_destroy(graph, executable)


def test_write_back_follows_work_joined_from_a_forked_stream(backend, make):
    origin, side = backend.create_stream(0, 0), backend.create_stream(0, 0)
    n = 1 << 22   # 16 MiB: long enough that a tail not ordered after the side's work would race
    static, out = make(n, np.float32, 0), make(n, np.float32, 0)
    source, result = make(n, np.float32, 2), make(n, np.float32, -1)
    fork, join = backend.create_event(0, False), backend.create_event(0, False)

    def body():
        backend.event_record(fork, origin)
        backend.stream_wait_event(side, fork)
        backend.launch(side, lambda: cupy.multiply(static, 3, out=out))
        backend.event_record(join, side)
        backend.stream_wait_event(origin, join)
    graph = capture(backend, origin, body)
    executable = backend.instantiate(graph)
    ptr = backend.array_ptr
    backend.stage_and_launch(executable, origin, [(ptr(static), ptr(source), 4 * n)],
                             [(ptr(result), ptr(out), 4 * n)])
    assert (host(backend, origin, result) == 6).all()
    backend.graph_destroy(graph, executable)


def test_graph_outlives_owner_release_until_its_executable_goes(backend, make):
    stream = backend.create_stream(0, 0)
    static, out = make(256, np.float32, 1), make(256, np.float32, 0)
    executable, graph = _doubling_graph(backend, stream, static, out)
    backend.graph_destroy(graph, None)           # the owner lets go: the exec still needs it
    assert graph.destroyed and not graph.released
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.graph_to_dot(graph, "/dev/null", False)
    backend.stage_and_launch(executable, stream, [(backend.array_ptr(static),
                                                   backend.array_ptr(out), 1024)])
    assert host(backend, stream, out)[0] == 0    # static <- out (zeros), out = 2 * static
    backend.graph_destroy(None, executable)
    assert graph.released
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.graph_launch(executable, stream)
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.stage_and_launch(executable, stream, [(1, 2, 3)])


def test_launcher_binds_graph_launch_once(backend, make, monkeypatch):
    stream = backend.create_stream(0, 0)
    static, out = make(256, np.float32, 3), make(256, np.float32, 0)
    executable, graph = _doubling_graph(backend, stream, static, out)
    launch, failed = backend.launcher(executable)
    assert launch(backend.stream_handle(stream)) is None
    assert host(backend, stream, out)[0] == 6
    monkeypatch.setattr(cuda_backend, "_cupy_graph_launch", None)   # a CuPy without the binding
    fallback, _ = backend.launcher(executable)
    backend.from_host(stream, static, np.full(256, 5, np.float32))
    assert fallback(backend.stream_handle(stream)) is None
    assert host(backend, stream, out)[0] == 10
    monkeypatch.undo()
    backend.stage_and_launch(executable, stream, [(backend.array_ptr(static),
                                                   backend.array_ptr(out), 1024)])
    assert executable.stage_in.enabled and not executable.stage_out.enabled
    backend.stage_and_launch(executable, stream, [], [(backend.array_ptr(static),
                                                       backend.array_ptr(out), 1024)])
    assert not executable.stage_in.enabled and executable.stage_out.enabled
    backend.unstage(executable)
    assert not executable.stage_in.enabled and not executable.stage_out.enabled
    refusal = cupy.cuda.runtime.CUDARuntimeError(int(runtime.cudaError_t.cudaErrorInvalidValue))
    with pytest.raises(RuntimeError, match="cudaGraphLaunch failed: cudaErrorInvalidValue"):
        failed(refusal, stream)
    with pytest.raises(KeyError, match="not the binding's"):   # anything else: raised as it is
        failed(KeyError("not the binding's"), stream)
    backend.graph_destroy(graph, executable)
