"""The sim backend on its own: native semantics that the public layer builds on.

Every test builds a small ``SimBackend`` and drives it directly: arrays come from ``as_array`` over
``malloc``'d memory and kernels are closures doing NumPy writes. The capture rules (modes, default
streams, the ending thread, predicate checks, calls that wait during a capture) are not the
backend's: ``tests/internals/test_capture_rules.py`` tests them where they live.
"""

from __future__ import annotations

import functools
import gc
import re
import threading
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplay import _dtype
from tensorplay.backends import sim
from tensorplay.backends.sim import dot as _sim_dot, graph as _sim_graph, memory as _sim_memory
from tensorplay.backends.sim import SimBackend, SimEvent, SimExecutable, SimGraph, SimStream


@pytest.fixture
def backend():
    return SimBackend(device_count=2, memory_bytes=1 << 20)


def device_array(backend, count, dtype=np.float32, device=0, fill=0):
    """A fresh 1-d device array of ``count`` elements (filled now, bypassing the streams)."""
    dtype = np.dtype(dtype)
    ptr = backend.malloc(device, count * dtype.itemsize)
    array = backend.as_array(device, ptr, count * dtype.itemsize, dtype, (count,),
                             (dtype.itemsize,), None)
    array[...] = fill
    return ptr, array


def kernel(fn, name=None, **attrs):
    """Name a closure and give it tp_attrs, as tensor ops do."""
    if name is not None:
        fn.__name__ = name
    if attrs:
        fn.tp_attrs = attrs
    return fn


def assign(array, value, name="assign"):
    def run():
        array[...] = value
    return kernel(run, name)


def increment(array, name="increment"):
    def run():
        array[...] += 1
    return kernel(run, name)


def capture(backend, stream, body, mode="global"):
    backend.capture_begin(stream, mode)
    body()
    return backend.capture_end(stream)


# -- machine shape ------------------------------------------------------------------------------

def test_capability_and_shape():
    backend = SimBackend(device_count=3, memory_bytes=4096)
    assert (backend.name, backend.device_type, backend.xp) == ("sim", "sim", np)
    assert backend.device_count() == 3
    capability = backend.device_capability(2)
    assert capability["name"] == "tensorplay simulated accelerator"
    assert capability["total_memory"] == 4096
    assert capability["supported_dtypes"] == frozenset(_dtype.all_dtypes)
    assert capability["compute_capability"] is None
    assert (capability["multi_processor_count"], capability["backend"]) == (1, "sim")
    with pytest.raises(ValueError, match=r"sim:3.*out of range.*3 sim devices"):
        backend.device_capability(3)
    assert backend.mem_get_info(0) == (4096, 4096)


def test_supported_dtypes_restriction_passes_through():
    backend = SimBackend(supported_dtypes=[_dtype.float32, _dtype.int64])
    assert backend.device_capability(0)["supported_dtypes"] == {_dtype.float32, _dtype.int64}
    with pytest.raises(TypeError, match="tensorplay dtypes"):
        SimBackend(supported_dtypes=["float32"])


@pytest.mark.parametrize("label, value", [("device_count", 0), ("memory_bytes", -1),
                                          ("device_count", 1.5)])
def test_constructor_validates(label, value):
    with pytest.raises(ValueError, match=label):
        SimBackend(**{label: value})


def test_create_backend_reads_environment(monkeypatch):
    monkeypatch.delenv("TENSORPLAY_SIM_DEVICES", raising=False)
    monkeypatch.delenv("TENSORPLAY_SIM_MEMORY", raising=False)
    default = sim.create_backend()
    assert default.device_count() == 2
    assert default.device_capability(1)["total_memory"] == 1073741824
    monkeypatch.setenv("TENSORPLAY_SIM_DEVICES", "3")
    monkeypatch.setenv("TENSORPLAY_SIM_MEMORY", "8192")
    shaped = sim.create_backend()
    assert shaped.device_count() == 3 and shaped.mem_get_info(2) == (8192, 8192)


@pytest.mark.parametrize("name, value", [("TENSORPLAY_SIM_DEVICES", "0"),
                                         ("TENSORPLAY_SIM_DEVICES", "two"),
                                         ("TENSORPLAY_SIM_MEMORY", "1.5e9"),
                                         ("TENSORPLAY_SIM_MEMORY", "-4")])
def test_create_backend_rejects_bad_environment(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"{name}='{re.escape(value)}'.*integer >= 1"):
        sim.create_backend()
    monkeypatch.delenv(name)
    assert sim.create_backend().device_count() >= 1


# -- memory -------------------------------------------------------------------------------------

def test_memory_limit_and_mem_get_info():
    backend = SimBackend(device_count=1, memory_bytes=1000)
    first = backend.malloc(0, 600)
    assert backend.mem_get_info(0) == (400, 1000)
    with pytest.raises(MemoryError, match=r"sim:0 has 400 bytes free, 500 requested"):
        backend.malloc(0, 500)
    backend.free(0, first)
    assert backend.mem_get_info(0) == (1000, 1000)
    assert backend.malloc(0, 1000) != first  # addresses are never handed out twice
    with pytest.raises(ValueError, match="nbytes > 0"):
        backend.malloc(0, 0)


def test_free_of_bad_address(backend):
    ptr = backend.malloc(0, 256)
    with pytest.raises(ValueError, match=r"0x[0-9a-f]+ is not an address malloc returned"):
        backend.free(0, ptr + 8)
    with pytest.raises(ValueError, match="not an address malloc returned on sim:1"):
        backend.free(1, ptr)   # another device's address
    backend.free(0, ptr)
    with pytest.raises(ValueError, match="freed already"):
        backend.free(0, ptr)
    assert backend.mem_get_info(0)[0] == 1 << 20


def test_memory_is_its_own_concept(backend):
    """Segments, malloc/free and views live in sim/memory.py, mixed into the backend."""
    assert isinstance(backend, _sim_memory.SimMemory)
    assert SimBackend.malloc is _sim_memory.SimMemory.malloc
    assert all(isinstance(device, _sim_memory.DeviceMemory) for device in backend._devices)


def test_address_ranges_per_device(backend):
    on_zero = [backend.malloc(0, n) for n in (1, 700, 3)]
    on_one = backend.malloc(1, 10)
    assert all(p >> 40 == 1 for p in on_zero) and on_one >> 40 == 2
    assert all(p % 512 == 0 for p in on_zero + [on_one])
    assert len(set(on_zero)) == 3 and on_zero[2] - on_zero[1] >= 700


def test_as_array_views_and_keeps_owner_alive(backend):
    ptr = backend.malloc(0, 64)

    class Owner:
        pass

    owner = Owner()
    alive = weakref.ref(owner)
    array = backend.as_array(0, ptr + 16, 16, np.int32, (2, 2), (8, 4), owner)
    assert type(array) is np.ndarray and array.flags.writeable
    array[...] = [[1, 2], [3, 4]]
    whole = backend.as_array(0, ptr, 64, np.int32, (16,), (4,), None)
    assert whole[4:8].tolist() == [1, 2, 3, 4]
    view = array[1:, ::-1].T
    del owner, array
    gc.collect()
    assert alive() is not None  # the slice still holds it
    assert view.tolist() == [[4], [3]]
    del view
    gc.collect()
    assert alive() is None
    assert backend.array_ptr(whole) == ptr and backend.array_ptr(whole[5:]) == ptr + 20
    assert backend.array_ptr(whole[::-1]) == ptr + 60
    other = backend.malloc(1, 8)
    assert backend.array_ptr(backend.as_array(1, other, 8, np.uint8, (8,), (1,), None)) == other
    with pytest.raises(ValueError, match="does not view live sim device memory"):
        backend.array_ptr(np.zeros(3))
    broadcast = backend.as_array(0, ptr + 16, 4, np.int32, (3, 2), (0, 0), None)
    assert broadcast.tolist() == [[1, 1]] * 3
    with pytest.raises(ValueError, match="not inside one live"):
        backend.as_array(0, ptr + 32, 64, np.uint8, (64,), (1,), None)
    with pytest.raises(ValueError, match="memory of sim:0, not sim:1"):
        backend.as_array(1, ptr, 4, np.int32, (1,), (4,), None)


# -- streams: lazy, ordered, events are positions ----------------------------------------------

def test_nothing_runs_before_a_sync_and_order_is_kept(backend):
    stream = backend.create_stream(0, 0)
    log = []
    for i in range(5):
        backend.launch(stream, kernel(lambda i=i: log.append(i)))
    assert log == []
    backend.stream_synchronize(stream)
    assert log == [0, 1, 2, 3, 4]
    backend.stream_synchronize(stream)
    assert log == [0, 1, 2, 3, 4]  # each item runs once


def test_to_host_runs_its_stream_and_copies(backend):
    stream = backend.default_stream(0)
    assert stream.is_default and backend.default_stream(0) is stream
    _, array = device_array(backend, 4)
    backend.launch(stream, assign(array, 7.0))
    host = backend.to_host(stream, array)
    assert host.tolist() == [7.0] * 4 and type(host) is np.ndarray
    host[0] = -1
    assert array[0] == 7.0


def test_event_wait_orders_streams_and_missing_wait_races(backend):
    producer, consumer = backend.create_stream(0, 0), backend.create_stream(0, -1)
    _, source = device_array(backend, 1, fill=1.0)
    _, with_wait = device_array(backend, 1)
    _, without_wait = device_array(backend, 1)
    backend.launch(producer, assign(source, 42.0))
    event = backend.create_event(0, False)
    backend.event_record(event, producer)

    def copy_into(target):
        def run():
            target[...] = source
        return run

    backend.launch(consumer, copy_into(without_wait))       # no wait: a race
    backend.stream_wait_event(consumer, event)
    backend.launch(consumer, copy_into(with_wait))
    backend.stream_synchronize(consumer)
    assert without_wait[0] == 1.0   # saw the old value
    assert with_wait[0] == 42.0     # the wait ran the producer first


def test_wait_uses_the_position_at_wait_time(backend):
    producer, consumer = backend.create_stream(0, 0), backend.create_stream(0, 0)
    log = []
    backend.launch(producer, kernel(lambda: log.append("before")))
    event = backend.create_event(0, False)
    backend.event_record(event, producer)
    backend.stream_wait_event(consumer, event)
    backend.launch(producer, kernel(lambda: log.append("after")))
    backend.launch(consumer, kernel(lambda: log.append("consumer")))
    backend.stream_synchronize(consumer)
    assert log == ["before", "consumer"]
    unrecorded = backend.create_event(0, False)
    backend.stream_wait_event(consumer, unrecorded)   # a no-op, as in CUDA
    assert backend.event_query(unrecorded)


_STREAM_OPS = st.lists(st.tuples(st.sampled_from(["launch", "launch", "record", "wait", "sync",
                                                  "query_event"]),
                                 st.integers(0, 2), st.integers(0, 2)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(_STREAM_OPS)
def test_streams_match_a_reference_queue_model(ops):
    """Random launches/records/waits/syncs over three streams on two devices run exactly what a
    plain model of "queues run lazily, events are positions" runs, in the same order."""
    backend = SimBackend(device_count=2, memory_bytes=1 << 12)
    streams = [backend.create_stream(0, 0), backend.create_stream(1, 0),
               backend.create_stream(0, 0)]
    events = [backend.create_event(s.device_index, False) for s in streams]
    log, expected = [], []
    model_items = [[], [], []]
    model_done = [0, 0, 0]
    model_events = [None, None, None]    # (stream, position)

    def model_run(index, position):
        while model_done[index] < position:
            item = model_items[index][model_done[index]]
            model_done[index] += 1
            if item[0] == "kernel":
                expected.append(item[1])
            elif item[0] == "wait":
                model_run(item[1], item[2])

    for number, (op, first, second) in enumerate(ops):
        stream = streams[first]
        if op == "launch":
            backend.launch(stream, kernel(lambda n=number: log.append(n)))
            model_items[first].append(("kernel", number))
        elif op == "record":
            backend.event_record(events[first], stream)
            model_items[first].append(("record",))
            model_events[first] = (first, len(model_items[first]))
        elif op == "wait":
            backend.stream_wait_event(stream, events[second])
            if model_events[second] is not None:
                model_items[first].append(("wait", *model_events[second]))
        elif op == "sync":
            backend.stream_synchronize(stream)
            model_run(first, len(model_items[first]))
        else:
            backend.event_query(events[first])
            if model_events[first] is not None:
                model_run(*model_events[first])
        assert log == expected
    for index in (0, 1):
        backend.synchronize_device(index)
    assert sorted(log) == [n for n, (op, _, _) in enumerate(ops) if op == "launch"]


def test_query_makes_progress(backend):
    stream = backend.create_stream(1, 0)
    _, array = device_array(backend, 1, device=1)
    backend.launch(stream, increment(array))
    event = backend.create_event(1, False)
    backend.event_record(event, stream)
    backend.launch(stream, increment(array))
    assert backend.event_query(event) and array[0] == 1.0   # ran up to the event only
    polls = 0
    while not backend.stream_query(stream):
        polls += 1
    assert polls == 0 and array[0] == 2.0


def test_synchronize_device_runs_every_stream_even_dropped_ones(backend):
    _, array = device_array(backend, 4)
    for i in range(3):
        stream = backend.create_stream(0, 0)
        backend.launch(stream, assign(array[i:i + 1], i + 1.0))
    del stream
    gc.collect()
    backend.launch(backend.default_stream(0), increment(array[3:]))
    backend.synchronize_device(1)
    assert array.tolist() == [0.0] * 4
    backend.synchronize_device(0)
    assert array.tolist() == [1.0, 2.0, 3.0, 1.0]


def test_threads_exchanging_events_across_devices_do_not_deadlock(backend):
    """Two threads, one per device, each waiting on the other's events (Note [sim locks])."""
    _, counters = device_array(backend, 2, np.int64)
    failures = []

    def worker(device, other_events, my_events):
        try:
            stream = backend.create_stream(device, 0)
            for step in range(200):
                backend.launch(stream, increment(counters[device:device + 1]))
                event = backend.create_event(device, False)
                backend.event_record(event, stream)
                my_events.append(event)
                if other_events:
                    backend.stream_wait_event(stream, other_events[-1])
                if step % 10 == 0:
                    backend.stream_synchronize(stream)
            backend.stream_synchronize(stream)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    events = ([], [])
    threads = [threading.Thread(target=worker, args=(d, events[1 - d], events[d]))
               for d in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads) and failures == []
    assert counters.tolist() == [200, 200]


def test_timing_events(backend):
    stream = backend.create_stream(0, 0)
    start, end = backend.create_event(0, True), backend.create_event(0, True)
    with pytest.raises(RuntimeError, match="start event was never recorded"):
        backend.event_elapsed_ms(start, end)
    backend.event_record(start, stream)
    backend.launch(stream, kernel(lambda: sum(range(10000))))
    backend.event_record(end, stream)
    with pytest.raises(RuntimeError, match="start event has not completed"):
        backend.event_elapsed_ms(start, end)
    backend.event_synchronize(end)
    elapsed = backend.event_elapsed_ms(start, end)
    assert isinstance(elapsed, float) and elapsed >= 0.0
    plain = backend.create_event(0, False)
    backend.event_record(plain, stream)
    backend.event_synchronize(plain)
    with pytest.raises(RuntimeError, match="end event was created without enable_timing"):
        backend.event_elapsed_ms(start, plain)


def test_deferred_kernel_error_surfaces_at_sync_and_backend_stays_usable(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 2)

    def broken():
        raise ZeroDivisionError("boom")

    backend.launch(stream, kernel(broken, "broken"))   # launching does not raise
    backend.launch(stream, assign(array, 5.0))
    with pytest.raises(RuntimeError, match=r"a kernel launched earlier on sim:0 failed: "
                                           r"kernel 'broken' raised ZeroDivisionError: boom"):
        backend.stream_synchronize(stream)
    assert array.tolist() == [5.0, 5.0]     # later work still ran
    backend.stream_synchronize(stream)      # reported once
    backend.launch(stream, increment(array))
    assert backend.to_host(stream, array).tolist() == [6.0, 6.0]


def test_memcpy_crosses_devices_in_stream_order(backend):
    src_ptr, source = device_array(backend, 4, np.int64, device=0)
    dst_ptr, target = device_array(backend, 4, np.int64, device=1)
    stream = backend.create_stream(0, 0)
    backend.launch(stream, assign(source, np.arange(4)))
    backend.memcpy(stream, dst_ptr + 8, src_ptr, 16)
    assert target.tolist() == [0, 0, 0, 0]
    backend.stream_synchronize(stream)
    assert target.tolist() == [0, 0, 1, 0]
    with pytest.raises(ValueError, match="memcpy source"):
        backend.memcpy(stream, dst_ptr, src_ptr + 24, 16)


def test_from_host_copies_the_source_at_call_time(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 3)
    host = np.array([1.0, 2.0, 3.0], np.float32)
    backend.from_host(stream, array, host)
    host[:] = 0
    assert array.tolist() == [0.0] * 3
    backend.stream_synchronize(stream)
    assert array.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        backend.from_host(stream, array, np.zeros(2))


# -- queues hold no tensor memory; a full queue makes room --------------------------------------

class Owner:
    """Stands for the Allocation that as_array keeps alive."""


def owned_array(backend, count, dtype=np.float32):
    """(array keeping an Owner alive, weak reference to that owner, owner-less view)."""
    dtype = np.dtype(dtype)
    ptr = backend.malloc(0, count * dtype.itemsize)
    owner = Owner()
    shape, strides = (count,), (dtype.itemsize,)
    array = backend.as_array(0, ptr, count * dtype.itemsize, dtype, shape, strides, owner)
    plain = backend.as_array(0, ptr, count * dtype.itemsize, dtype, shape, strides, None)
    return array, weakref.ref(owner), plain


def queue_sum(backend, stream):
    """Queue kernels and a host copy over owned arrays, and drop the arrays (as ops returning
    drop their temporaries). Returns the owners' weak references and an owner-less view of the
    result."""
    a, a_alive, _ = owned_array(backend, 4)
    b, b_alive, _ = owned_array(backend, 4)
    c, c_alive, _ = owned_array(backend, 4)
    d, d_alive, _ = owned_array(backend, 4)
    out, out_alive, result = owned_array(backend, 4)
    a[...] = [1, 2, 3, 4]
    result[...] = 0
    sources = [a, a[::-1]]                              # a list in a closure cell, and a view

    def add():
        np.add(*sources, out=b)

    backend.launch(stream, kernel(add, "add", shape=(4,)))
    scale = functools.partial(np.multiply, b, 3, out=c)  # a partial with a keyword
    scale.__name__ = "scale"
    backend.launch(stream, scale)
    backend.from_host(stream, d, np.full(4, 5.0, np.float32))
    backend.launch(stream, kernel(lambda: np.add(c, d, out=out), "sum"))
    return [a_alive, b_alive, c_alive, d_alive, out_alive], result


def test_queued_work_keeps_no_owner_alive_and_still_runs(backend):
    # A GPU kernel holds raw pointers: a tensor freed with work queued returns its memory at
    # once, and the allocator reuses it in stream order (Note [sim queue ownership]).
    stream = backend.create_stream(0, 0)
    owners, result = queue_sum(backend, stream)
    assert [item.name for item in stream._queue] == ["add", "scale", "from_host", "sum"]
    assert stream._queue[0].attrs == {"shape": (4,)}
    gc.collect()
    assert [ref() for ref in owners] == [None] * 5
    assert result.tolist() == [0.0] * 4                 # nothing ran yet
    backend.stream_synchronize(stream)
    assert result.tolist() == [20.0] * 4                # (x + reversed x) * 3 + 5
    frozen, _, _ = owned_array(backend, 2)
    frozen.flags.writeable = False
    backend.launch(stream, kernel(lambda: frozen.fill(1), "write"))
    with pytest.raises(RuntimeError, match="read-only"):  # a read-only view stays read-only
        backend.stream_synchronize(stream)


def test_captured_work_keeps_its_arrays(backend):
    stream = backend.create_stream(0, 0)
    array, alive, plain = owned_array(backend, 2)
    plain[...] = 0
    graph = capture(backend, stream, functools.partial(backend.launch, stream, increment(array)))
    del array
    gc.collect()
    assert alive() is not None                          # a graph holds what it replays
    backend.graph_launch(backend.instantiate(graph), stream)
    backend.stream_synchronize(stream)
    assert plain.tolist() == [1.0, 1.0]
    del graph
    gc.collect()
    assert alive() is None


def test_a_full_queue_runs_its_oldest_items_first(backend):
    stream, other = backend.create_stream(0, 0), backend.create_stream(0, 0)
    log, other_log = [], []
    backend.launch(other, kernel(lambda: other_log.append("other")))
    start, end = backend.create_event(0, True), backend.create_event(0, True)
    backend.event_record(start, stream)
    depth = sim._QUEUE_DEPTH
    for i in range(3 * depth):
        backend.launch(stream, kernel(lambda i=i: log.append(i)))
        assert len(stream._queue) <= depth
    assert 2 * depth <= len(log) < 3 * depth and log == list(range(len(log)))
    assert other_log == []                              # other streams stay lazy
    backend.event_record(end, stream)
    backend.event_synchronize(end)
    assert log == list(range(3 * depth))
    assert backend.event_elapsed_ms(start, end) >= 0.0


def test_a_failure_in_the_items_run_to_make_room_is_raised_by_that_launch(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)

    def broken():
        raise ZeroDivisionError("boom")

    backend.launch(stream, kernel(broken, "broken"))
    for _ in range(sim._QUEUE_DEPTH - 1):
        backend.launch(stream, increment(array))
    with pytest.raises(RuntimeError, match=r"kernel 'broken' raised ZeroDivisionError: boom"):
        backend.launch(stream, increment(array))        # this launch overflows the queue
    backend.stream_synchronize(stream)                  # the failure was reported once
    assert array[0] == sim._QUEUE_DEPTH                 # every increment ran, the last too


def test_a_capture_records_past_the_queue_depth(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)
    count = sim._QUEUE_DEPTH + 10

    def body():
        for _ in range(count):
            backend.launch(stream, increment(array))

    graph = capture(backend, stream, body)
    assert len(graph.nodes) == count and array[0] == 0 and not stream._queue
    backend.graph_launch(backend.instantiate(graph), stream)
    backend.stream_synchronize(stream)
    assert array[0] == count


# -- capture ------------------------------------------------------------------------------------

def test_capture_begins_once_and_ends_once(backend):
    stream = backend.create_stream(0, 0)
    backend.capture_begin(stream, "relaxed")
    with pytest.raises(RuntimeError, match="already capturing"):
        backend.capture_begin(stream, "global")
    assert backend.capture_end(stream).nodes == []
    with pytest.raises(RuntimeError, match="not capturing"):
        backend.capture_end(stream)


def test_capture_records_instead_of_running(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)
    backend.launch(stream, assign(array, 10.0))        # queued before capture: runs normally
    backend.capture_begin(stream, "global")
    assert backend.is_capturing(stream)
    assert not backend.is_capturing(backend.create_stream(0, 0))
    backend.launch(stream, increment(array))
    graph = backend.capture_end(stream)
    assert isinstance(graph, SimGraph) and not backend.is_capturing(stream)
    assert [node.name for node in graph.nodes] == ["increment"]
    backend.stream_synchronize(stream)
    assert array[0] == 10.0                             # the captured kernel never ran


def test_replay_k_times(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 2)
    graph = capture(backend, stream, lambda: (backend.launch(stream, increment(array)),
                                              backend.launch(stream, increment(array[:1]))))
    executable = backend.instantiate(graph)
    assert isinstance(executable, SimExecutable)
    for _ in range(4):
        backend.graph_launch(executable, stream)
    assert array.tolist() == [0.0, 0.0]
    backend.stream_synchronize(stream)
    assert array.tolist() == [8.0, 4.0]


def test_stage_and_launch_copies_then_replays(backend):
    stream = backend.create_stream(0, 0)
    static_ptr, static = device_array(backend, 2)
    fresh_ptr, _ = device_array(backend, 2, fill=3.0)
    _, out = device_array(backend, 2)

    def double():
        out[...] = static * 2
    executable = backend.instantiate(capture(backend, stream,
                                             lambda: backend.launch(stream, double)))
    backend.stage_and_launch(executable, stream, [(static_ptr, fresh_ptr, 8)])
    assert backend.to_host(stream, out).tolist() == [6.0, 6.0]


def test_sync_on_capturing_stream_runs_nothing_of_the_capture(backend):
    """The sim does not refuse waits during a capture (``_runtime/capture.py`` does, for every
    backend): a capturing stream has nothing queued, so a wait runs nothing of the capture."""
    stream = backend.create_stream(1, 0)
    _, array = device_array(backend, 1, device=1)
    backend.launch(stream, increment(array))              # queued before the capture
    backend.capture_begin(stream, "global")
    backend.launch(stream, increment(array))
    backend.stream_synchronize(stream)
    backend.synchronize_device(1)
    assert backend.is_capturing(stream) and array[0] == 1.0
    graph = backend.capture_end(stream)
    assert [node.name for node in graph.nodes] == ["increment"]
    assert backend.to_host(stream, array)[0] == 1.0


def test_fork_and_join_record_into_one_graph(backend):
    origin, side = backend.create_stream(0, 0), backend.create_stream(0, 0)
    _, array = device_array(backend, 2)
    log = []
    backend.capture_begin(origin, "global")
    fork, join = backend.create_event(0, False), backend.create_event(0, False)
    backend.launch(origin, kernel(lambda: log.append("a"), "a"))
    backend.event_record(fork, origin)
    for call in (backend.event_query, backend.event_synchronize):
        with pytest.raises(RuntimeError, match="cudaErrorCapturedEvent"):
            call(fork)
    backend.stream_wait_event(side, fork)
    assert backend.is_capturing(side)
    backend.launch(side, kernel(lambda: log.append("b"), "b"))
    backend.launch(origin, kernel(lambda: log.append("c"), "c"))
    backend.event_record(join, side)
    backend.stream_wait_event(origin, join)
    backend.launch(origin, kernel(lambda: log.append("d"), "d"))
    graph = backend.capture_end(origin)
    assert not backend.is_capturing(side)
    kinds = [node.kind for node in graph.nodes]
    assert kinds.count("kernel") == 4 and "event_wait" in kinds
    assert log == []
    backend.graph_launch(backend.instantiate(graph), side)   # side is an ordinary stream again
    backend.stream_synchronize(side)
    assert log == ["a", "b", "c", "d"]
    array[...] = 0


def test_unjoined_fork_fails_capture_end(backend):
    origin, side, third = (backend.create_stream(0, 0) for _ in range(3))
    backend.capture_begin(origin, "global")
    fork = backend.create_event(0, False)
    backend.event_record(fork, origin)
    backend.stream_wait_event(side, fork)
    backend.launch(side, kernel(lambda: None, "side_work"))
    with pytest.raises(RuntimeError, match="stream forked from the capture was not joined back"):
        backend.capture_end(origin)
    assert not backend.is_capturing(origin) and not backend.is_capturing(side)
    # Joined back through another stream: side -> third -> origin counts (as in CUDA).
    backend.capture_begin(origin, "global")
    backend.event_record(fork, origin)
    backend.stream_wait_event(side, fork)
    backend.stream_wait_event(third, fork)
    backend.launch(side, kernel(lambda: None))
    hop, back = backend.create_event(0, False), backend.create_event(0, False)
    backend.event_record(hop, side)
    backend.stream_wait_event(third, hop)
    backend.event_record(back, third)
    backend.stream_wait_event(origin, back)
    assert isinstance(backend.capture_end(origin), SimGraph)


def test_capture_isolation_errors(backend):
    origin, other = backend.create_stream(0, 0), backend.create_stream(0, 0)
    outside = backend.create_event(0, False)
    backend.event_record(outside, other)
    backend.capture_begin(origin, "global")
    with pytest.raises(RuntimeError, match="cudaErrorStreamCaptureIsolation"):
        backend.stream_wait_event(origin, outside)
    with pytest.raises(RuntimeError, match="invalidated by stream_wait_event"):
        backend.capture_end(origin)
    backend.capture_begin(origin, "global")
    fork = backend.create_event(0, False)
    backend.event_record(fork, origin)
    with pytest.raises(RuntimeError, match="default stream of sim:0 cannot join"):
        backend.stream_wait_event(backend.default_stream(0), fork)
    with pytest.raises(RuntimeError, match="invalidated"):
        backend.capture_end(origin)
    with pytest.raises(RuntimeError, match="capture that has ended"):
        backend.stream_wait_event(other, fork)
    backend.stream_synchronize(other)


def test_capture_end_only_on_the_stream_that_began_it(backend):
    origin, side = backend.create_stream(0, 0), backend.create_stream(0, 0)
    backend.capture_begin(origin, "global")
    fork = backend.create_event(0, False)
    backend.event_record(fork, origin)
    backend.stream_wait_event(side, fork)
    with pytest.raises(RuntimeError, match="not the stream that began the capture"):
        backend.capture_end(side)
    assert backend.is_capturing(origin) and backend.is_capturing(side)
    join = backend.create_event(0, False)
    backend.event_record(join, side)
    backend.stream_wait_event(origin, join)
    assert isinstance(backend.capture_end(origin), SimGraph)


def test_graph_launch_inside_capture_is_a_child_graph(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)
    inner = backend.instantiate(capture(backend, stream,
                                        lambda: backend.launch(stream, increment(array))))
    outer = capture(backend, stream, lambda: (backend.graph_launch(inner, stream),
                                              backend.graph_launch(inner, stream)))
    assert [node.kind for node in outer.nodes] == ["graph", "graph"]
    backend.graph_launch(backend.instantiate(outer), stream)
    assert backend.to_host(stream, array)[0] == 2.0


def test_destroyed_graph_errors(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)
    graph = capture(backend, stream, lambda: backend.launch(stream, increment(array)))
    executable = backend.instantiate(graph)
    backend.graph_destroy(graph, None)
    with pytest.raises(RuntimeError, match="instantiate.*destroyed"):
        backend.instantiate(graph)
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.graph_to_dot(graph, "unused.dot", False)
    backend.graph_launch(executable, stream)   # the executable outlives its graph, as in CUDA
    backend.graph_destroy(None, executable)
    with pytest.raises(RuntimeError, match="graph launch.*destroyed"):
        backend.graph_launch(executable, stream)
    with pytest.raises(RuntimeError, match="destroyed"):
        backend.stage_and_launch(executable, stream, [])
    assert backend.to_host(stream, array)[0] == 1.0


# -- conditional nodes --------------------------------------------------------------------------

def predicate(backend, value, device=0):
    ptr = backend.malloc(device, 1)
    array = backend.as_array(device, ptr, 1, np.bool_, (1,), (1,), None)
    array[...] = value
    return array


def test_while_with_nested_if_and_while_three_deep(backend):
    """while (outer > 0): { outer -= 1; if (outer is even): { inner = 2; while (inner > 0):
    { inner -= 1; hits += 1 } } }, with every predicate computed by kernels."""
    stream = backend.create_stream(0, 0)
    _, outer = device_array(backend, 1, np.int64)
    _, inner = device_array(backend, 1, np.int64)
    _, hits = device_array(backend, 1, np.int64)
    _, iterations = device_array(backend, 1, np.int64)
    keep_outer, is_even, keep_inner = (predicate(backend, False) for _ in range(3))

    def refresh_outer():
        keep_outer[0] = outer[0] > 0

    def step_outer():
        outer[0] -= 1
        iterations[0] += 1
        is_even[0] = outer[0] % 2 == 0
        inner[0] = 2
        keep_inner[0] = True

    def step_inner():
        inner[0] -= 1
        hits[0] += 1
        keep_inner[0] = inner[0] > 0

    backend.capture_begin(stream, "global")
    backend.launch(stream, refresh_outer)
    loop = backend.begin_conditional(stream, "while", keep_outer)
    assert isinstance(loop, SimStream) and not loop.is_default and backend.is_capturing(loop)
    backend.launch(loop, step_outer)
    branch = backend.begin_conditional(loop, "if", is_even)
    inner_loop = backend.begin_conditional(branch, "while", keep_inner)
    backend.launch(inner_loop, step_inner)
    backend.end_conditional(inner_loop)
    backend.end_conditional(branch)
    backend.launch(loop, refresh_outer)
    backend.end_conditional(loop)
    graph = backend.capture_end(stream)
    executable = backend.instantiate(graph)

    for start in (5, 0, 2):
        outer[0], hits[0], iterations[0] = start, 0, 0
        backend.graph_launch(executable, stream)
        backend.stream_synchronize(stream)
        evens = sum(1 for value in range(start) if value % 2 == 0)
        assert (outer[0], iterations[0], hits[0]) == (0, start, 2 * evens)


def test_if_node_reads_its_predicate_at_node_start(backend):
    stream = backend.create_stream(0, 0)
    _, array = device_array(backend, 1)
    flag = predicate(backend, False)
    backend.capture_begin(stream, "global")
    backend.launch(stream, assign(flag, True))          # runs before the node in replay
    body = backend.begin_conditional(stream, "if", flag)
    backend.launch(body, increment(array))
    backend.launch(body, assign(flag, False))           # no re-read for an if node
    backend.launch(body, increment(array))
    backend.end_conditional(body)
    executable = backend.instantiate(backend.capture_end(stream))
    backend.graph_launch(executable, stream)
    assert backend.to_host(stream, array)[0] == 2.0


def test_set_conditional_switches_the_predicate_a_while_node_rereads(backend):
    stream = backend.create_stream(0, 0)
    _, count = device_array(backend, 1, np.int64)
    start_flag = predicate(backend, True)
    more = predicate(backend, False)

    def step():
        count[0] += 1
        more[0] = count[0] < 4
    backend.capture_begin(stream, "global")
    body = backend.begin_conditional(stream, "while", start_flag)
    backend.launch(body, step)
    backend.set_conditional(body, more)
    backend.end_conditional(body)
    executable = backend.instantiate(backend.capture_end(stream))
    for _ in range(2):   # each replay starts again from the node's own predicate
        count[0] = 0
        backend.graph_launch(executable, stream)
        backend.stream_synchronize(stream)
        assert count[0] == 4 and start_flag[0]
    with pytest.raises(RuntimeError, match="not a conditional body"):
        backend.set_conditional(stream, more)


def test_while_guard_stops_a_loop_that_never_ends(backend, monkeypatch):
    monkeypatch.setattr(_sim_graph, "WHILE_ITERATION_LIMIT", 50)
    stream = backend.create_stream(0, 0)
    _, count = device_array(backend, 1, np.int64)
    forever = predicate(backend, True)
    backend.capture_begin(stream, "global")
    body = backend.begin_conditional(stream, "while", forever)
    backend.launch(body, increment(count))
    backend.end_conditional(body)
    executable = backend.instantiate(backend.capture_end(stream))
    backend.graph_launch(executable, stream)
    with pytest.raises(RuntimeError, match="ran 50 iterations and its predicate never became "
                                           "false") as caught:
        backend.stream_synchronize(stream)
    message = str(caught.value)   # public names only: no raw address, no internal call
    assert "0x" not in message and "set_conditional " not in message, message
    assert "flag.copy_(" in message and "set_conditional_handle_for_current_node" in message
    assert count[0] == 50
    forever[0] = False
    backend.graph_launch(executable, stream)
    backend.stream_synchronize(stream)                   # usable afterwards


def test_conditional_misuse_errors(backend):
    stream = backend.create_stream(0, 0)
    flag = predicate(backend, True)
    with pytest.raises(RuntimeError, match="not capturing"):
        backend.begin_conditional(stream, "if", flag)
    backend.capture_begin(stream, "global")
    with pytest.raises(ValueError, match="kind must be one of"):
        backend.begin_conditional(stream, "until", flag)
    with pytest.raises(ValueError, match="host memory"):      # the node needs a device address
        backend.begin_conditional(stream, "if", np.ones(1, bool))
    with pytest.raises(TypeError, match="device array"):
        backend.begin_conditional(stream, "if", True)
    body = backend.begin_conditional(stream, "if", flag)
    with pytest.raises(RuntimeError, match="already has an open conditional body"):
        backend.begin_conditional(stream, "while", flag)
    child = backend.begin_conditional(body, "while", flag)
    with pytest.raises(RuntimeError, match="open conditional body of its own"):
        backend.end_conditional(body)
    with pytest.raises(RuntimeError, match="not a conditional body stream"):
        backend.end_conditional(stream)
    backend.end_conditional(child)
    with pytest.raises(RuntimeError, match="conditional body was closed"):
        backend.end_conditional(child)
    with pytest.raises(RuntimeError, match="conditional body was closed"):
        backend.set_conditional(child, flag)
    assert not backend.is_capturing(child)
    backend.end_conditional(body)
    graph = backend.capture_end(stream)
    assert [len(node.body) for node in graph.nodes] == [1]   # the if node holds the while node


def test_capture_end_with_an_open_body_fails_and_discards(backend):
    stream = backend.create_stream(0, 0)
    flag = predicate(backend, True)
    backend.capture_begin(stream, "global")
    body = backend.begin_conditional(stream, "while", flag)
    with pytest.raises(RuntimeError, match=r"still open; call end_capture_to_conditional_node\(\) "
                                           r"first"):
        backend.capture_end(stream)
    assert not backend.is_capturing(stream) and not backend.is_capturing(body)
    _, array = device_array(backend, 1)
    backend.launch(body, increment(array))    # a closed body is an ordinary stream, as on cuda
    assert backend.to_host(body, array)[0] == 1.0


# -- Graphviz -----------------------------------------------------------------------------------

def test_graph_to_dot(backend, tmp_path):
    stream = backend.create_stream(0, 0)
    src_ptr, _ = device_array(backend, 4)
    dst_ptr, out = device_array(backend, 4)
    flag = predicate(backend, False)
    backend.capture_begin(stream, "global")
    backend.launch(stream, kernel(lambda: None, "fill_kernel", numel=4, dtype="float32"))
    backend.memcpy(stream, dst_ptr, src_ptr, 16)
    body = backend.begin_conditional(stream, "while", flag)
    backend.launch(body, kernel(lambda: None, "body_kernel"))
    branch = backend.begin_conditional(body, "if", flag)
    backend.launch(branch, kernel(lambda: None, "branch_kernel"))
    backend.end_conditional(branch)
    backend.end_conditional(body)
    backend.from_host(stream, out, np.ones(4, np.float32))
    graph = backend.capture_end(stream)

    backend.graph_to_dot(graph, str(tmp_path / "plain.dot"), False)
    backend.graph_to_dot(graph, str(tmp_path / "full.dot"), True)
    plain = (tmp_path / "plain.dot").read_text()
    full = (tmp_path / "full.dot").read_text()
    for text in (plain, full):
        assert text.startswith("digraph tensorplay_graph {") and text.rstrip().endswith("}")
        assert text.count("{") == text.count("}")
        assert re.search(r'subgraph cluster_\d+ \{\s*label="while', text)
        assert re.search(r'subgraph cluster_\d+ \{\s*label="if', text)
        for name in ("fill_kernel", "body_kernel", "branch_kernel", "memcpy", "from_host"):
            assert name in text
        assert len(re.findall(r"^\s*n\d+ \[", text, re.M)) == 7     # one per node
        assert "->" in text
    assert "numel=4" not in plain and "nbytes" not in plain
    assert "numel=4" in full and "dtype=float32" in full and "nbytes=16" in full
    assert f"predicate=0x{backend._locate_host_array(flag)[1]:x}" in full
    assert full == _sim_dot.to_dot(graph.nodes, True)       # the DOT lives in sim/dot.py


def test_handles_are_plain_objects(backend):
    event = backend.create_event(1, True)
    stream = backend.create_stream(1, -1)
    assert isinstance(event, SimEvent) and event.device_index == 1
    assert stream.device_index == 1 and stream.priority == -1 and not stream.is_default
    with pytest.raises(ValueError, match="record an event on a stream of its own device"):
        backend.event_record(event, backend.create_stream(0, 0))
    backend.set_current_stream(stream)   # no-op
    backend.set_device(1)
    with pytest.raises(ValueError):
        backend.set_device(2)


def test_a_sync_from_a_finalizer_while_the_queue_runs_keeps_stream_order(backend):
    """Dropping a queued item after it ran can free memory whose release synchronizes (runs the
    stream) from a finalizer. That nested run must take the later items in order: it once ran
    them before the item already taken off the queue (a compiled function's first result read a
    tensor before the kernel filling it had run)."""
    stream = backend.default_stream(0)
    _, array = device_array(backend, 1)
    order = []

    class SyncsWhenDropped:
        def __call__(self):
            order.append("first")

        def __del__(self):
            backend.stream_synchronize(stream)

    first = SyncsWhenDropped()
    backend.launch(stream, first)
    del first
    for name in ("second", "third"):
        backend.launch(stream, functools.partial(order.append, name))
    backend.launch(stream, lambda: array.__setitem__(0, len(order)))
    backend.stream_synchronize(stream)
    assert order == ["first", "second", "third"]
    assert array[0] == 3
