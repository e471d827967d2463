"""Streams and events: current stream per thread and device, ordering, events, timing."""

import threading

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICE_COUNT, accelerator_device, requires_accelerator, requires_devices, \
    to_numpy

pytestmark = requires_accelerator


@pytest.fixture(autouse=True)
def _device_zero_current():
    tp.accelerator.set_device_index(0)
    yield
    tp.accelerator.set_device_index(0)


def test_current_stream_is_the_default_stream_until_set():
    dev = accelerator_device(0)
    stream = tp.accelerator.current_stream()
    assert isinstance(stream, tp.Stream)
    assert stream == tp.accelerator.current_stream(0)
    assert stream == tp.accelerator.current_stream(dev)
    assert stream == tp.accelerator.current_stream(tp.device(dev))
    assert stream.device == tp.device(dev)


def test_with_stream_makes_it_current_and_restores():
    caller = tp.accelerator.current_stream()
    side = tp.Stream()
    other = tp.Stream(accelerator_device(0), priority=0)
    assert side != caller and side.device == tp.device(accelerator_device(0))
    with side:
        assert tp.accelerator.current_stream() == side
        with other:
            assert tp.accelerator.current_stream() == other
        assert tp.accelerator.current_stream() == side
    assert tp.accelerator.current_stream() == caller


def test_with_stream_restores_after_an_exception():
    caller = tp.accelerator.current_stream()
    with pytest.raises(ZeroDivisionError):
        with tp.Stream():
            1 / 0
    assert tp.accelerator.current_stream() == caller


def test_set_stream():
    caller = tp.accelerator.current_stream()
    side = tp.Stream()
    tp.accelerator.set_stream(side)
    try:
        assert tp.accelerator.current_stream() == side
    finally:
        tp.accelerator.set_stream(caller)
    assert tp.accelerator.current_stream() == caller
    with pytest.raises(TypeError, match="Stream"):
        tp.accelerator.set_stream("not a stream")


def test_current_stream_is_per_thread():
    caller = tp.accelerator.current_stream()
    side = tp.Stream()
    seen = []
    with side:
        thread = threading.Thread(target=lambda: seen.append(tp.accelerator.current_stream()))
        thread.start()
        thread.join()
    assert seen == [caller]


def test_stream_constructor_validation():
    with pytest.raises(TypeError):
        tp.Stream(priority="high")
    with pytest.raises(ValueError):
        tp.Stream("cpu")
    with pytest.raises(ValueError):
        tp.Stream(DEVICE_COUNT)
    assert isinstance(tp.Stream(0), tp.Stream)


def test_work_on_a_side_stream_ordered_by_wait_stream():
    dev = accelerator_device(0)
    caller = tp.accelerator.current_stream()
    x = tp.arange(8, dtype=tp.float32, device=dev)
    side = tp.Stream()
    side.wait_stream(caller)
    with side:
        y = x * 10
        y.add_(1)
    caller.wait_stream(side)
    assert to_numpy(y).tolist() == [1.0 + 10 * i for i in range(8)]


def test_events_order_streams():
    dev = accelerator_device(0)
    caller = tp.accelerator.current_stream()
    side = tp.Stream()
    x = tp.ones(4, device=dev)
    ready = caller.record_event()
    assert isinstance(ready, tp.Event)
    side.wait_event(ready)
    with side:
        x.mul_(3)
        done = tp.Event()
        done.record()
    done.wait(caller)
    assert to_numpy(x).tolist() == [3.0] * 4
    done.synchronize()
    assert done.query() is True


def test_record_event_into_a_given_event_and_stream_queries():
    side = tp.Stream()
    event = tp.Event()
    assert side.record_event(event) is event
    event.synchronize()
    assert event.query() is True
    side.synchronize()
    assert side.query() is True


def test_never_recorded_event_is_complete():
    event = tp.Event()
    assert event.query() is True
    event.synchronize()
    event.wait()
    tp.accelerator.current_stream().wait_event(event)


def test_wait_event_and_wait_stream_check_their_argument():
    side = tp.Stream()
    with pytest.raises(TypeError):
        side.wait_event(side)
    with pytest.raises(TypeError):
        side.wait_stream(tp.Event())


WRONG_KIND = {
    "Stream.record_event(3)": r"Stream\.record_event\(\) expects a tensorplay Event or None, "
                              r"got int",
    "Stream.wait_event(3)": r"Stream\.wait_event\(\) expects a tensorplay Event, got int",
    "Stream.wait_stream(3)": r"Stream\.wait_stream\(\) expects a tensorplay Stream, got int",
    "Event.record(3)": r"Event\.record\(\) expects a tensorplay Stream or None, got int",
    "Event.wait(3)": r"Event\.wait\(\) expects a tensorplay Stream or None, got int",
    "Event.elapsed_time(None)": r"Event\.elapsed_time\(\) expects a tensorplay Event .*got "
                                r"NoneType",
}


@pytest.mark.parametrize("call", sorted(WRONG_KIND))
def test_arguments_of_the_wrong_kind_are_type_errors(call):
    """Not AttributeError from deep inside: TypeError naming what was given and expected."""
    stream, event = tp.Stream(), tp.Event(enable_timing=True)
    calls = {"Stream.record_event(3)": lambda: stream.record_event(3),
             "Stream.wait_event(3)": lambda: stream.wait_event(3),
             "Stream.wait_stream(3)": lambda: stream.wait_stream(3),
             "Event.record(3)": lambda: event.record(3),
             "Event.wait(3)": lambda: event.wait(3),
             "Event.elapsed_time(None)": lambda: event.elapsed_time(None)}
    with pytest.raises(TypeError, match=WRONG_KIND[call]):
        calls[call]()
    end = tp.Event(enable_timing=True)
    event.record(stream)
    end.record(stream)
    stream.wait_event(event)
    end.synchronize()
    assert event.elapsed_time(end) >= 0.0


def test_elapsed_time():
    dev = accelerator_device(0)
    start, end = tp.Event(enable_timing=True), tp.Event(enable_timing=True)
    start.record()
    x = tp.ones(10000, device=dev)
    for _ in range(3):
        x = x * 1.5
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float) and elapsed >= 0.0


def test_elapsed_time_needs_timing_events():
    start, end = tp.Event(), tp.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(RuntimeError, match="enable_timing"):
        start.elapsed_time(end)


@requires_devices(2)
def test_elapsed_time_refuses_events_of_two_devices_before_waiting_for_them():
    start, end = tp.Event(enable_timing=True), tp.Event(enable_timing=True)
    start.record(tp.Stream(device=0))
    end.record(tp.Stream(device=1))
    with pytest.raises(RuntimeError, match="needs both events on one device, got device 0 "
                                           "and device 1"):
        start.elapsed_time(end)


def test_many_small_ops_across_two_streams_give_numpy_results():
    dev = accelerator_device(0)
    caller = tp.accelerator.current_stream()
    a, b = tp.Stream(), tp.Stream()
    base = tp.arange(16, dtype=tp.float32, device=dev)
    a.wait_stream(caller)
    b.wait_stream(caller)
    with a:
        left = (base + 1).reshape(4, 4)
    with b:
        right = (base * 2).reshape(4, 4)
    caller.wait_stream(a)
    caller.wait_stream(b)
    product = left @ right
    ref = (np.arange(16, dtype=np.float32) + 1).reshape(4, 4) @ \
        (np.arange(16, dtype=np.float32) * 2).reshape(4, 4)
    np.testing.assert_allclose(to_numpy(product), ref, rtol=1e-6)


@requires_devices(2)
def test_streams_of_device_one():
    dev1 = accelerator_device(1)
    stream = tp.Stream(dev1)
    assert stream.device == tp.device(dev1)
    current0 = tp.accelerator.current_stream(0)
    with stream:
        assert tp.accelerator.current_stream(1) == stream
        assert tp.accelerator.current_stream(0) == current0
        x = tp.ones(4, device=dev1) * 2
    tp.accelerator.current_stream(1).wait_stream(stream)
    assert to_numpy(x).tolist() == [2.0] * 4
    assert tp.accelerator.current_stream(1) != stream


@requires_devices(2)
def test_an_event_stays_on_its_first_device():
    event = tp.Event()
    event.record(tp.Stream(0))
    with pytest.raises(ValueError):
        event.record(tp.Stream(1))
    event.synchronize()
