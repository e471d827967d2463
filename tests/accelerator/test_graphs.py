"""Graph capture and replay: every constructor parameter, the explicit and context-manager
lifecycles, replay on streams, reset and recapture, debug dumps, pools, several devices.

Oracle: the eager run of the captured code (NumPy for the values of the eager run).
"""

import re
import threading

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICE_COUNT, accelerator_device, requires_accelerator, \
    requires_captured_products, requires_devices, to_numpy

pytestmark = requires_accelerator
Graph = tp.accelerator.Graph
MODES = ("global", "thread_local", "relaxed")


@pytest.fixture(autouse=True)
def _device_zero_current():
    tp.accelerator.set_device_index(0)
    yield
    assert not tp.accelerator.is_current_stream_capturing()
    tp.accelerator.set_device_index(0)



def put(static, values):
    """Copy host ``values`` into a device tensor (outside capture)."""
    static.copy_(tp.tensor(np.asarray(values, dtype=static.dtype.numpy), device=static.device))


def affine_graph(dev, **kwargs):
    """A graph computing ``y = 2 * x + 1`` on a static ``x`` of 4 float32."""
    x = tp.zeros(4, device=dev)
    g = Graph(**kwargs)
    with g:
        y = x * 2 + 1
    return g, x, y


# -- the basic lifecycle --------------------------------------------------------------------------

def test_capture_and_replay_with_new_inputs(dev):
    g, x, y = affine_graph(dev)
    for values in ([0, 1, 2, 3], [5, 5, 5, 5], [-1, 0.5, 10, 2]):
        put(x, values)
        g.replay()
        np.testing.assert_allclose(to_numpy(y), np.asarray(values, np.float32) * 2 + 1)


def test_each_replay_runs_the_work_once(dev):
    counter = tp.zeros(3, dtype=tp.int64, device=dev)
    g = Graph()
    with g:
        counter.add_(1)
    assert to_numpy(counter).tolist() == [0, 0, 0]
    for expected in range(1, 6):
        g.replay()
        assert to_numpy(counter).tolist() == [expected] * 3


def test_graph_replay_equals_eager_for_many_ops(dev):
    requires_captured_products(dev)
    rng = np.random.default_rng(0)
    host_a = rng.standard_normal((4, 6)).astype(np.float32)
    host_b = rng.standard_normal((6, 3)).astype(np.float32)

    def program(a, b):
        c = a @ b
        d = tp.softmax(c, dim=1) + c.sum(dim=0, keepdim=True)
        e = tp.where(d > 0, d, -d).clamp(0.1, 2.0)
        f = tp.cat([e, e.exp()], dim=0).transpose(0, 1).reshape(3, 8)
        g_ = tp.stack([f[:, 1:5], f[:, 2:6]], dim=0).tanh().sigmoid()
        h = a.relu().mean(dim=1) + (a[:, ::2] ** 2).sum(dim=1)
        return g_, h

    a = tp.tensor(host_a, device=dev)
    b = tp.tensor(host_b, device=dev)
    eager = [to_numpy(t) for t in program(a, b)]
    static_a, static_b = tp.zeros(4, 6, device=dev), tp.zeros(6, 3, device=dev)
    g = Graph()
    with g:
        outputs = program(static_a, static_b)
    static_a.copy_(a)
    static_b.copy_(b)
    g.replay()
    for got, want in zip(outputs, eager):
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5, atol=1e-6)


def test_capture_end_compiles_and_instantiate_is_a_no_op(dev):
    x = tp.ones(2, device=dev)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph()
    g.capture_begin(stream=s)
    y = x + 41
    g.capture_end()
    g.instantiate()
    g.instantiate()
    g.replay()
    assert to_numpy(y).tolist() == [42.0, 42.0]


def test_capture_begin_with_explicit_pool_mode_and_stream(dev):
    caller = tp.accelerator.current_stream()
    x = tp.full((3,), 2.0, device=dev)
    handle = tp.accelerator.graph_pool_handle()
    s = tp.Stream()
    s.wait_stream(caller)
    g = Graph()
    g.capture_begin(pool=handle, capture_error_mode="thread_local", stream=s)
    assert tp.accelerator.current_stream() == s
    assert tp.accelerator.is_current_stream_capturing()
    y = x * x
    g.capture_end()
    assert tp.accelerator.current_stream() == caller
    assert not tp.accelerator.is_current_stream_capturing()
    assert g.pool_id == handle and g.pool() == handle
    g.replay()
    assert to_numpy(y).tolist() == [4.0] * 3


@pytest.mark.parametrize("mode", MODES)
def test_every_capture_error_mode_captures(dev, mode):
    g, x, y = affine_graph(dev, capture_error_mode=mode)
    put(x, [1, 2, 3, 4])
    g.replay()
    assert to_numpy(y).tolist() == [3.0, 5.0, 7.0, 9.0]


@pytest.mark.parametrize("mode", MODES)
def test_capture_begin_mode_overrides_the_stored_one(dev, mode):
    x = tp.ones(2, device=dev)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph(capture_error_mode="global")
    g.capture_begin(capture_error_mode=mode, stream=s)
    y = x * 3
    g.capture_end()
    g.replay()
    assert to_numpy(y).tolist() == [3.0, 3.0]


def test_bad_capture_error_mode_is_a_value_error(dev):
    with pytest.raises(ValueError, match="strict") as caught:
        Graph(capture_error_mode="strict")
    assert all(mode in str(caught.value) for mode in MODES)
    g = Graph()
    s = tp.Stream()
    with pytest.raises(ValueError, match="bogus"):
        g.capture_begin(capture_error_mode="bogus", stream=s)
    assert not tp.accelerator.is_current_stream_capturing()
    g2, x, y = affine_graph(dev)
    g2.replay()
    assert to_numpy(y).tolist() == [1.0] * 4


def test_capture_on_the_default_stream_is_refused(dev):
    g = Graph()
    with pytest.raises(RuntimeError, match="default stream"):
        g.capture_begin()
    assert not tp.accelerator.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="default stream"):
        g.capture_begin(stream=tp.accelerator.current_stream())
    with g:
        y = tp.ones(2, device=dev) * 5
    g.replay()
    assert to_numpy(y).tolist() == [5.0, 5.0]


def test_lifecycle_errors(dev):
    g = Graph()
    with pytest.raises(RuntimeError):
        g.replay()
    with pytest.raises(RuntimeError):
        g.capture_end()
    s = tp.Stream()
    g.capture_begin(stream=s)
    with pytest.raises(RuntimeError):
        g.capture_begin(stream=tp.Stream())
    y = tp.ones(1, device=dev) + 1
    g.capture_end()
    with pytest.raises(RuntimeError, match="reset"):
        g.capture_begin(stream=s)
    g.replay()
    assert to_numpy(y).tolist() == [2.0]


def test_replay_on_an_explicit_stream(dev):
    caller = tp.accelerator.current_stream()
    g, x, y = affine_graph(dev)
    put(x, [1, 1, 1, 1])
    s = tp.Stream()
    s.wait_stream(caller)
    g.replay(stream=s)
    caller.wait_stream(s)
    assert to_numpy(y).tolist() == [3.0] * 4
    with s:
        put(x, [2, 2, 2, 2])
        g.replay(stream=s)
        assert to_numpy(y).tolist() == [5.0] * 4
    caller.wait_stream(s)


@pytest.mark.parametrize("make_bad", [lambda: 3, lambda: "stream", tp.Event])
def test_replay_on_something_that_is_not_a_stream_is_a_type_error(dev, make_bad):
    g, _, y = affine_graph(dev)
    bad = make_bad()
    with pytest.raises(TypeError, match=r"replay\(stream=\.\.\.\) expects a tensorplay Stream "
                                        r"or None, got " + type(bad).__name__):
        g.replay(stream=bad)
    g.replay(stream=tp.accelerator.current_stream())
    assert to_numpy(y).tolist() == [1.0] * 4


def test_reset_inside_with_raises_and_the_capture_continues(dev):
    """reset() cannot pull the capture out from under its ``with`` block: it raises, and the
    block goes on capturing."""
    x = tp.ones(3, device=dev)
    g = Graph()
    with g:
        y = x + 1
        with pytest.raises(RuntimeError, match=r"reset.*with g:.*after the block ends"):
            g.reset()
        y = y * 10
    g.replay()
    assert to_numpy(y).tolist() == [20.0] * 3
    g.reset()
    with g:
        z = x - 1
    g.replay()
    assert to_numpy(z).tolist() == [0.0] * 3


def test_replay_runs_on_the_current_stream(dev):
    caller = tp.accelerator.current_stream()
    g, x, y = affine_graph(dev)
    s = tp.Stream()
    s.wait_stream(caller)
    with s:
        put(x, [3, 3, 3, 3])
        g.replay()
        out = y.clone()
    caller.wait_stream(s)
    assert to_numpy(out).tolist() == [7.0] * 4


def test_reset_and_recapture(dev):
    x = tp.full((2,), 3.0, device=dev)
    g = Graph()
    with g:
        first = x + 1
    g.replay()
    assert to_numpy(first).tolist() == [4.0, 4.0]
    g.reset()
    with pytest.raises(RuntimeError):
        g.replay()
    assert to_numpy(first).tolist() == [4.0, 4.0]
    with g:
        second = x * 10
    g.replay()
    assert to_numpy(second).tolist() == [30.0, 30.0]
    g.reset()
    g.reset()


def test_is_current_stream_capturing(dev):
    assert tp.accelerator.is_current_stream_capturing() is False
    g = Graph()
    with g:
        assert tp.accelerator.is_current_stream_capturing() is True
        tp.ones(1, device=dev)
    assert tp.accelerator.is_current_stream_capturing() is False


# -- the context manager --------------------------------------------------------------------------

def test_with_graph_uses_a_side_stream_and_restores_the_callers(dev):
    caller = tp.accelerator.current_stream()
    g = Graph()
    with g as entered:
        assert entered is g
        assert tp.accelerator.current_stream() != caller
        tp.ones(1, device=dev)
    assert tp.accelerator.current_stream() == caller
    side = tp.Stream()
    with side:
        with Graph():
            tp.ones(1, device=dev)
        assert tp.accelerator.current_stream() == side


def test_with_graph_synchronizes_pending_work_first(dev):
    x = tp.ones(1000, device=dev)
    for _ in range(10):
        x.add_(1)
    g = Graph()
    with g:
        y = x * 2
    g.replay()
    assert float(to_numpy(y.sum())) == 22000.0


def test_exception_inside_with_discards_the_capture(dev, tmp_path):
    caller = tp.accelerator.current_stream()
    x = tp.ones(2, device=dev)
    g = Graph(keep_graph=True)
    with pytest.raises(KeyError, match="inside"):
        with g:
            x * 2
            raise KeyError("inside")
    assert tp.accelerator.current_stream() == caller
    assert not tp.accelerator.is_current_stream_capturing()
    with pytest.raises(RuntimeError):
        g.replay()
    with pytest.raises(RuntimeError):
        g.debug_dump(tmp_path / "unused.dot")
    with g:
        y = x * 7
    g.replay()
    assert to_numpy(y).tolist() == [7.0, 7.0]
    tp.accelerator.synchronize()


def test_a_host_side_exception_does_not_break_an_explicit_capture(dev):
    """A Python error that never reached the device leaves the capture open and valid."""
    x = tp.ones(2, device=dev)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph()
    g.capture_begin(stream=s)
    with pytest.raises(TypeError):
        x + "text"
    assert tp.accelerator.is_current_stream_capturing()
    y = x + 1
    g.capture_end()
    g.replay()
    assert to_numpy(y).tolist() == [2.0, 2.0]


# -- debug dumps ----------------------------------------------------------------------------------

def test_a_plain_debug_dump_works_after_any_capture(dev, tmp_path):
    """As on the GPU: no enable_debug_mode() and no keep_graph needed (keep_graph is accepted
    for generic code)."""
    g, x, y = affine_graph(dev)
    g.debug_dump(tmp_path / "g.dot")
    assert re.search(r"digraph", (tmp_path / "g.dot").read_text())
    g.replay()
    assert to_numpy(y).tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="nothing captured"):
        Graph(keep_graph=True).debug_dump(tmp_path / "empty.dot")
    g.reset()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.debug_dump(tmp_path / "after_reset.dot")
    with g:
        y = x + 5
    g.debug_dump(str(tmp_path / "again.dot"))
    g.replay()
    assert to_numpy(y).tolist() == [5.0] * 4


def test_enable_debug_mode_after_the_capture_is_too_late(dev, tmp_path):
    g, x, y = affine_graph(dev)
    with pytest.raises(RuntimeError, match=r"too late.*before capture_begin\(\) / with g:"):
        g.enable_debug_mode()
    g.debug_dump(tmp_path / "plain.dot")
    plain = (tmp_path / "plain.dot").read_text()
    g.reset()
    g.enable_debug_mode()            # after reset() it comes in time for the next capture
    with g:
        y = x * 2 + 1
    g.debug_dump(tmp_path / "verbose.dot")
    assert len((tmp_path / "verbose.dot").read_text()) > len(plain)
    g.replay()
    assert to_numpy(y).tolist() == [1.0] * 4


@pytest.mark.parametrize("path", [None, 3, b"bytes.dot"])
def test_debug_dump_needs_a_path(dev, tmp_path, monkeypatch, path):
    """Not a file named ``None`` or ``3`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    g, _, y = affine_graph(dev)
    with pytest.raises(TypeError, match=r"debug_dump\(\) expects a path \(str or "
                                        r"os\.PathLike\), got " + type(path).__name__):
        g.debug_dump(path)
    assert list(tmp_path.iterdir()) == []
    g.debug_dump(tmp_path / "ok.dot")
    g.replay()
    assert to_numpy(y).tolist() == [1.0] * 4


def test_debug_dump_writes_dot(dev, tmp_path):
    kept, x, y = affine_graph(dev, keep_graph=True)
    kept.debug_dump(tmp_path / "kept.dot")
    plain = (tmp_path / "kept.dot").read_text()
    assert re.search(r"digraph", plain)
    assert "->" in plain or plain.count("[") >= 2
    kept.replay()
    assert to_numpy(y).tolist() == [1.0] * 4

    verbose_graph = Graph()
    verbose_graph.enable_debug_mode()
    x2 = tp.zeros(4, device=dev)
    with verbose_graph:
        x2 * 2 + 1
    verbose_graph.debug_dump(str(tmp_path / "debug.dot"))
    verbose = (tmp_path / "debug.dot").read_text()
    assert re.search(r"digraph", verbose)
    assert len(verbose) > len(plain)
    verbose_graph.replay()


def test_debug_dump_shows_conditional_bodies(dev, tmp_path):
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.zeros(1, device=dev)
    g = Graph()
    g.enable_debug_mode()
    with g:
        g.begin_capture_to_while_node(flag)
        x.add_(1)
        flag.copy_(x < 3)
        g.end_capture_to_conditional_node()
    g.debug_dump(tmp_path / "while.dot")
    assert re.search("while", (tmp_path / "while.dot").read_text(), re.IGNORECASE)
    g.replay()
    assert to_numpy(x).tolist() == [3.0]


# -- pools ----------------------------------------------------------------------------------------

def _pool_graph(dev, pool, x, factor):
    g = Graph(pool=pool)
    with g:
        y = x * factor
    return g, y


@pytest.mark.parametrize("form", ["None", "handle", "graph", "pool_id", "pool()"])
def test_every_pool_form(dev, form):
    x = tp.full((4,), 2.0, device=dev)
    first, y1 = _pool_graph(dev, None, x, 3)
    pool = {"None": None, "handle": tp.accelerator.graph_pool_handle(), "graph": first,
            "pool_id": first.pool_id, "pool()": first.pool()}[form]
    second, y2 = _pool_graph(dev, pool, x, 5)
    if form in ("graph", "pool_id", "pool()"):
        assert second.pool_id == first.pool_id
    elif form == "handle":
        assert second.pool_id == pool
    else:
        assert second.pool_id != first.pool_id
    first.replay()
    second.replay()
    assert to_numpy(y1).tolist() == [6.0] * 4
    assert to_numpy(y2).tolist() == [10.0] * 4


def test_sharing_the_pool_of_a_graph_that_has_not_captured_yet(dev):
    x = tp.full((4,), 3.0, device=dev)
    first = Graph()
    second = Graph(pool=first)
    third = Graph(pool=first.pool_id)
    assert second.pool_id == first.pool_id == third.pool_id
    with first:
        y1 = x + 1
    with second:
        y2 = y1 * 2
    with third:
        y3 = y2 - 1
    assert first.pool_id == second.pool_id == third.pool_id
    for g in (first, second, third):
        g.replay()
    assert to_numpy(y3).tolist() == [7.0] * 4


def test_bad_pool_is_refused():
    for bad in ("pool", 3.5, object()):
        with pytest.raises((TypeError, ValueError)):
            Graph(pool=bad)


def test_graph_pool_handles_are_distinct_and_shareable():
    a, b = tp.accelerator.graph_pool_handle(), tp.accelerator.graph_pool_handle()
    assert a != b
    g = Graph(pool=a)
    assert g.pool() == a == g.pool_id


def test_graphs_sharing_a_pool_replay_in_capture_order(dev):
    handle = tp.accelerator.graph_pool_handle()
    x = tp.zeros(8, device=dev)
    g1 = Graph(pool=handle)
    with g1:
        tmp = x * 2
        y1 = tmp + 1
        del tmp
    g2 = Graph(pool=handle)
    with g2:
        tmp = y1 * y1
        y2 = tmp - 1
        del tmp
    for value in (0.0, 1.0, 3.0):
        x.fill_(value)
        g1.replay()
        g2.replay()
        assert to_numpy(y1).tolist() == [2 * value + 1] * 8
        assert to_numpy(y2).tolist() == [(2 * value + 1) ** 2 - 1] * 8


# -- several devices ------------------------------------------------------------------------------

@requires_devices(2)
def test_graph_on_device_one_replays_while_device_zero_is_current():
    dev1 = accelerator_device(1)
    x = tp.zeros(4, device=dev1)
    with tp.accelerator.device_index(1):
        g = Graph()
        with g:
            y = (x + 1) * 3
    assert y.device == tp.device(dev1)
    assert tp.accelerator.current_device_index() == 0
    for value in (0.0, 2.0):
        x.fill_(value)
        g.replay()
        assert to_numpy(y).tolist() == [(value + 1) * 3] * 4
    tp.accelerator.synchronize(1)


@requires_devices(2)
def test_graph_on_device_one_while_another_thread_works_on_device_zero():
    dev0, dev1 = accelerator_device(0), accelerator_device(1)
    x = tp.zeros(16, device=dev1)
    with tp.accelerator.device_index(1):
        g = Graph()
        with g:
            y = x * 2 + 1
    errors, results = [], []
    started = threading.Event()

    def worker():
        try:
            tp.accelerator.set_device_index(0)
            a = tp.ones(1000, device=dev0)
            started.set()
            for _ in range(20):
                a = a + 1
            results.append(float(to_numpy(a.sum())))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(10)
    outs = []
    for value in range(5):
        x.fill_(float(value))
        g.replay()
        outs.append(to_numpy(y).tolist())
    thread.join()
    assert not errors
    assert results == [21000.0]
    assert outs == [[2.0 * v + 1] * 16 for v in range(5)]


@requires_devices(2)
def test_replay_on_a_stream_of_another_device_is_refused():
    g, x, y = affine_graph(accelerator_device(0))
    with pytest.raises(ValueError):
        g.replay(stream=tp.Stream(1))
    g.replay()
    assert to_numpy(y).tolist() == [1.0] * 4


@requires_devices(2)
def test_capture_on_a_stream_of_device_one_via_capture_begin():
    dev1 = accelerator_device(1)
    x = tp.full((2,), 4.0, device=dev1)
    s = tp.Stream(dev1)
    s.wait_stream(tp.accelerator.current_stream(1))
    g = Graph()
    g.capture_begin(stream=s)
    y = x.sqrt()
    g.capture_end()
    assert tp.accelerator.current_stream(1) != s
    g.replay()
    assert to_numpy(y).tolist() == [2.0, 2.0]
    assert DEVICE_COUNT >= 2
