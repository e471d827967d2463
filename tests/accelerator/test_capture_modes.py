"""``capture_error_mode`` with two threads: which capture-unsafe calls raise, in which thread,
which captures they invalidate, and that everything keeps working afterwards.

Note [capture-unsafe calls]: a call from thread T is prohibited when T has its own capture whose
mode is not "relaxed", or when another thread has a "global" capture; a prohibited call raises
``RuntimeError`` naming the call and the mode and invalidates the captures that prohibited it.
Barriers keep the two threads in step, so each test is deterministic.
"""

import re
import threading

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, to_numpy

pytestmark = requires_accelerator
Graph = tp.accelerator.Graph
MODES = ("global", "thread_local", "relaxed")
TIMEOUT_S = 30

# name -> (call on a tensor that lives on this thread's current, non-capturing stream, pattern
# its error message must match)
UNSAFE = {
    "item": (lambda t: t.sum().item(), r"item"),
    "tolist": (lambda t: t.tolist(), r"tolist"),
    "cpu": (lambda t: t.cpu(), r"cpu|host"),
    "tensor_from_host": (lambda t: tp.tensor([1.0], device=t.device), r"tensor|host"),
    "synchronize": (lambda t: tp.accelerator.synchronize(), r"synchronize"),
    "Event.synchronize": (lambda t: tp.accelerator.current_stream().record_event().synchronize(),
                          r"Event\.synchronize"),
    "Stream.synchronize": (lambda t: tp.accelerator.current_stream().synchronize(),
                           r"Stream\.synchronize"),
}
# Device-wide synchronize also waits for the capturing stream itself, which no mode allows; the
# other calls wait only for this thread's own, non-capturing stream.
UNSAFE_UNLESS_MODE_ALLOWS = [name for name in UNSAFE if name != "synchronize"]


@pytest.fixture(autouse=True)
def _warm_and_check():
    tp.accelerator.set_device_index(0)
    tp.rand(1, device=accelerator_device(0))    # the generator state exists before any capture
    tp.accelerator.synchronize()
    yield
    assert not tp.accelerator.is_current_stream_capturing()
    tp.accelerator.synchronize()
    assert tp.ones(2, device=accelerator_device(0)).sum().item() == 2.0


class Worker(threading.Thread):
    """Runs ``fn`` in a thread; ``join_checked`` re-raises what it raised."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.error = None

    def run(self):
        try:
            self.fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            self.error = exc

    def join_checked(self):
        self.join(TIMEOUT_S)
        assert not self.is_alive(), "worker thread hung"
        if self.error is not None:
            raise self.error


def begin_side_capture(graph, mode):
    """Capture on a fresh side stream that first waits for the caller's stream."""
    stream = tp.Stream()
    stream.wait_stream(tp.accelerator.current_stream())
    graph.capture_begin(capture_error_mode=mode, stream=stream)
    return stream


def still_works(dev):
    """The process keeps working: eager ops, waits, and a new capture with replay."""
    x = tp.arange(4, dtype=tp.float32, device=dev)
    assert to_numpy(x * 2).tolist() == [0.0, 2.0, 4.0, 6.0]
    tp.accelerator.synchronize()
    g = Graph()
    with g:
        y = x + 1
    g.replay()
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]


# -- two threads, both capturing ------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_two_threads_capture_and_compute_at_once(mode):
    dev = accelerator_device(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    results = {}

    def capture_in_this_thread(k):
        x = tp.full((16,), float(k), device=dev)
        g = Graph(capture_error_mode=mode)
        begin_side_capture(g, mode)
        barrier.wait()                      # both captures are open
        assert tp.accelerator.is_current_stream_capturing()
        y = x * 10 + k
        z = tp.softmax(y.reshape(4, 4), dim=1).sum(dim=1)
        barrier.wait()
        g.capture_end()
        barrier.wait()                      # both captures have ended
        x.fill_(k + 1.0)
        g.replay()
        results[k] = (to_numpy(y), to_numpy(z))

    worker = Worker(lambda: capture_in_this_thread(1))
    worker.start()
    capture_in_this_thread(2)
    worker.join_checked()
    for k in (1, 2):
        y, z = results[k]
        assert y.tolist() == [(k + 1.0) * 10 + k] * 16
        np.testing.assert_allclose(z, np.ones(4), rtol=1e-6)
    still_works(dev)


@pytest.mark.parametrize("mode", MODES)
def test_unsafe_call_in_one_of_two_capturing_threads(mode):
    """Thread B makes an unsafe call on its non-capturing default stream while both capture:
    global invalidates both captures, thread_local only B's, relaxed neither."""
    dev = accelerator_device(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    outcome = {}

    def thread_b():
        t = tp.arange(8, dtype=tp.float32, device=dev)
        home = tp.accelerator.current_stream()
        g = Graph(capture_error_mode=mode)
        begin_side_capture(g, mode)
        barrier.wait()
        with home:
            try:
                outcome["value"] = t.sum().item()
            except RuntimeError as exc:
                outcome["error"] = exc
        barrier.wait()
        try:
            g.capture_end()
            outcome["b_end"] = "ok"
        except RuntimeError as exc:
            outcome["b_end"] = exc
        barrier.wait()

    worker = Worker(thread_b)
    worker.start()
    x = tp.ones(4, device=dev)
    g = Graph(capture_error_mode=mode)
    begin_side_capture(g, mode)
    barrier.wait()
    barrier.wait()
    a_end = "ok"
    try:
        y = x * 3
        g.capture_end()
    except RuntimeError as exc:
        a_end = exc
        if tp.accelerator.is_current_stream_capturing():
            with pytest.raises(RuntimeError):
                g.capture_end()
    barrier.wait()
    worker.join_checked()

    if mode == "relaxed":
        assert outcome.get("value") == 28.0
        assert outcome["b_end"] == "ok" and a_end == "ok"
        g.replay()
        assert to_numpy(y).tolist() == [3.0] * 4
    else:
        assert "error" in outcome, "the unsafe call should have raised"
        assert "item" in str(outcome["error"]) and mode in str(outcome["error"])
        assert isinstance(outcome["b_end"], RuntimeError)
        if mode == "global":
            assert isinstance(a_end, RuntimeError)
        else:
            assert a_end == "ok"
            g.replay()
            assert to_numpy(y).tolist() == [3.0] * 4
    still_works(dev)


# -- one thread captures, the other computes ------------------------------------------------------

@pytest.mark.parametrize("mode, call", [(mode, call) for mode in MODES for call in UNSAFE
                                         if call in UNSAFE_UNLESS_MODE_ALLOWS
                                         or mode == "global"])
def test_other_thread_computes_and_waits_during_a_capture(mode, call):
    dev = accelerator_device(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    outcome = {}
    fn, pattern = UNSAFE[call]

    def other_thread():
        t = tp.arange(8, dtype=tp.float32, device=dev)
        barrier.wait()                       # the capture is open
        w = t * 3 + 1                        # plain kernels are always fine
        try:
            fn(t)
            outcome["ok"] = True
        except RuntimeError as exc:
            outcome["error"] = exc
        barrier.wait()
        barrier.wait()                       # the capture has ended
        outcome["w"] = to_numpy(w).tolist()

    worker = Worker(other_thread)
    worker.start()
    x = tp.full((4,), 2.0, device=dev)
    g = Graph(capture_error_mode=mode)
    begin_side_capture(g, mode)
    barrier.wait()
    barrier.wait()
    if mode == "global":
        with pytest.raises(RuntimeError):
            g.capture_end()
    else:
        y = x * x
        g.capture_end()
    barrier.wait()
    worker.join_checked()

    assert outcome["w"] == [3.0 * i + 1 for i in range(8)]
    if mode == "global":
        assert "error" in outcome, f"{call} in another thread should raise under 'global'"
        message = str(outcome["error"])
        assert re.search(pattern, message), message
        assert "global" in message, message
    else:
        assert outcome.get("ok"), f"{call} in another thread should work under {mode!r}: " \
                                  f"{outcome.get('error')}"
        g.replay()
        assert to_numpy(y).tolist() == [4.0] * 4
    still_works(dev)


# -- the capturing thread itself ------------------------------------------------------------------

@pytest.mark.parametrize("call", sorted(UNSAFE))
@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_unsafe_call_in_the_capturing_thread(mode, call):
    dev = accelerator_device(0)
    fn, pattern = UNSAFE[call]
    t = tp.arange(8, dtype=tp.float32, device=dev)
    g = Graph(capture_error_mode=mode)
    begin_side_capture(g, mode)
    t * 2
    with pytest.raises(RuntimeError) as caught:
        fn(t)
    with pytest.raises(RuntimeError):
        g.capture_end()
    assert not tp.accelerator.is_current_stream_capturing()
    message = str(caught.value)
    assert re.search(pattern, message), message
    assert mode in message, f"the error should name capture_error_mode={mode!r}: {message}"
    assert to_numpy(t).tolist() == [float(i) for i in range(8)]
    still_works(dev)
    with g:
        again = t + 100
    g.replay()
    assert to_numpy(again)[0] == 100.0


def test_relaxed_capturing_thread_may_wait_for_work_outside_the_capture():
    dev = accelerator_device(0)
    t = tp.arange(4, dtype=tp.float32, device=dev)
    done = tp.accelerator.current_stream().record_event()
    home = tp.accelerator.current_stream()
    g = Graph(capture_error_mode="relaxed")
    begin_side_capture(g, "relaxed")
    y = t * 5
    done.synchronize()
    with home:
        assert t.sum().item() == 6.0
    y = y + 1
    g.capture_end()
    g.replay()
    assert to_numpy(y).tolist() == [1.0, 6.0, 11.0, 16.0]


@pytest.mark.parametrize("call", ["synchronize()", "empty_cache()"])
@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_device_wide_waits_from_another_thread_name_the_public_call(mode, call):
    """A device-wide wait includes the capturing stream, which no mode allows; the error names
    the call the user made, not a backend internal, and the device works afterwards."""
    dev = accelerator_device(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    outcome = {}
    fn = tp.accelerator.synchronize if call == "synchronize()" else tp.accelerator.empty_cache

    def other_thread():
        barrier.wait()                       # the capture is open
        try:
            fn()
        except RuntimeError as exc:
            outcome["error"] = exc
        barrier.wait()

    worker = Worker(other_thread)
    worker.start()
    g = Graph(capture_error_mode=mode)
    begin_side_capture(g, mode)
    barrier.wait()
    barrier.wait()
    with pytest.raises(RuntimeError, match="invalidated"):
        g.capture_end()
    worker.join_checked()
    message = str(outcome.get("error"))
    assert message.startswith(f"{call} waits for the device"), message
    assert "every stream of the device" in message and "synchronize_device" not in message
    still_works(dev)


# -- ending a capture from another thread -------------------------------------------------------

@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_capture_end_from_another_thread_leaves_the_capture_open_for_its_owner(mode):
    """Note [capture owner thread]: only the thread that began a non-relaxed capture may end
    it. capture_end()/reset() elsewhere raise and touch nothing; the owner then ends it."""
    dev = accelerator_device(0)
    barrier = threading.Barrier(2, timeout=TIMEOUT_S)
    x = tp.full((4,), 3.0, device=dev)
    g = Graph(capture_error_mode=mode)
    out = {}

    def owner():
        with tp.Stream():
            g.capture_begin()
            out["y"] = x * 2
            barrier.wait()                 # the capture is open
            barrier.wait()                 # the main thread has tried to end it
            g.capture_end()

    worker = Worker(owner)
    worker.start()
    caller = tp.accelerator.current_stream()
    barrier.wait()
    for call in (g.capture_end, g.reset):
        with pytest.raises(RuntimeError, match=r"only that thread may end it.*still capturing"):
            call()
    assert tp.accelerator.current_stream() == caller
    assert not tp.accelerator.is_current_stream_capturing()
    barrier.wait()
    worker.join_checked()
    g.replay()
    assert to_numpy(out["y"]).tolist() == [6.0] * 4
    still_works(dev)


def test_relaxed_capture_end_from_another_thread_keeps_this_threads_stream():
    """A relaxed capture may end on any thread; the stream the owner made current stays the
    owner's business, never the ending thread's current stream."""
    dev = accelerator_device(0)
    x = tp.full((4,), 3.0, device=dev)
    g = Graph(capture_error_mode="relaxed")
    out = {}

    def owner():
        side = tp.Stream()
        with side:
            g.capture_begin()
            out["y"] = x + 1
        out["side"] = side

    worker = Worker(owner)
    worker.start()
    worker.join_checked()
    caller = tp.accelerator.current_stream()
    g.capture_end()
    assert tp.accelerator.current_stream() == caller
    assert tp.accelerator.current_stream() != out["side"]
    g.replay()
    assert to_numpy(out["y"]).tolist() == [4.0] * 4
    still_works(dev)


@pytest.mark.parametrize("mode", MODES)
def test_a_thread_that_dies_mid_capture_leaves_the_device_usable(mode):
    """The worker begins a capture and dies. A non-relaxed capture is discarded as the thread
    exits (nobody else may end it; capture_end() says so); a relaxed one stays open and another
    thread ends it. Either way reset(), synchronize() and new captures work."""
    dev = accelerator_device(0)
    x = tp.full((4,), 3.0, device=dev)
    g = Graph(capture_error_mode=mode)
    out = {}

    def doomed():
        with tp.Stream():
            g.capture_begin()
            out["y"] = x * 5
            raise ValueError("the worker dies mid-capture")

    worker = Worker(doomed)
    worker.start()
    with pytest.raises(ValueError, match="dies mid-capture"):
        worker.join_checked()
    if mode == "relaxed":
        g.capture_end()
        g.replay()
        assert to_numpy(out["y"]).tolist() == [15.0] * 4
    else:
        with pytest.raises(RuntimeError, match=r"discarded because the thread that began it "
                                               r".* exited before capture_end\(\)"):
            g.capture_end()
    g.reset()
    tp.accelerator.synchronize()
    with g:
        y = x - 1
    g.replay()
    assert to_numpy(y).tolist() == [2.0] * 4
    still_works(dev)


@pytest.mark.parametrize("mode", MODES)
def test_with_graph_in_two_threads_one_after_the_other(mode):
    """``with g:`` from several threads, one capture at a time (it synchronizes the device)."""
    dev = accelerator_device(0)
    lock = threading.Lock()
    results = []

    def job(k):
        x = tp.full((3,), float(k), device=dev)
        with lock:    # a wait in one thread must not meet the other's open capture
            g = Graph(capture_error_mode=mode)
            with g:
                y = x * x
            g.replay()
            results.append((k, to_numpy(y).tolist()))

    workers = [Worker(lambda k=k: job(k)) for k in range(1, 4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join_checked()
    assert sorted(results) == [(k, [float(k * k)] * 3) for k in range(1, 4)]


@pytest.mark.parametrize("where", ["capture", "if-body", "while-body"])
@pytest.mark.parametrize("call", ["item", "tolist", "cpu", "tensor_from_host",
                                  "Stream.synchronize"])
def test_relaxed_still_refuses_waits_on_the_capture_itself(call, where):
    """Relaxed skips the guards, but waiting on (or copying host data into) a stream that is
    capturing can never work: in the capture and inside conditional bodies alike."""
    dev = accelerator_device(0)
    fn, _ = UNSAFE[call]
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    t = tp.arange(4, dtype=tp.float32, device=dev)
    g = Graph(capture_error_mode="relaxed")
    begin_side_capture(g, "relaxed")
    if where == "if-body":
        g.begin_capture_to_if_node(flag)
    elif where == "while-body":
        g.begin_capture_to_while_node(flag)
    inside = t * 2            # a tensor of the capture, on the capturing stream
    raised = None
    try:
        fn(inside)
    except RuntimeError as exc:
        raised = exc
    if where != "capture":
        g.end_capture_to_conditional_node()
    try:
        g.capture_end()
        ended = True
    except RuntimeError:
        ended = False
    assert not tp.accelerator.is_current_stream_capturing()
    assert raised is not None, f"{call} on a capturing stream ({where}) did not raise"
    assert not ended, "capture_end should raise: the unsafe call invalidated the capture"
    still_works(dev)
