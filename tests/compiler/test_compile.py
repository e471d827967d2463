"""tensorplay.compile with the cudagraphs backend: signature cache, eviction, eager fallbacks and
their log lines, output invalidation, RNG, and equality with eager runs (public API only)."""

import logging

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, requires_devices, to_numpy


def mlp_like(x, scale=2.0):
    return tp.gelu(x * scale + 1).sum(dim=-1)


def test_decorator_forms_and_eager_backend():
    @tp.compile
    def f(x):
        return x + 1

    @tp.compile(backend="eager")
    def g(x):
        return x + 1

    h = tp.compile(lambda x: x + 1, backend="eager")
    x = tp.arange(3)
    for fn in (f, g, h):
        assert to_numpy(fn(x)).tolist() == [1, 2, 3]


@pytest.mark.parametrize("bad", ["inductor", "", None])
def test_unknown_backend_is_a_value_error(bad):
    with pytest.raises(ValueError, match="unknown compile backend.*cudagraphs"):
        tp.compile(lambda x: x, backend=bad)
    with pytest.raises(ValueError, match="cache_size"):
        tp.compile(lambda x: x, cache_size=0)
    assert tp.compile(lambda x: x * 2)(tp.ones(2)).tolist() == [2.0, 2.0]


@requires_accelerator
def test_cache_hits_misses_and_equality_with_eager():
    dev = accelerator_device(0)
    compiled = tp.compile(mlp_like)
    for step in range(4):
        x = tp.rand(4, 8, device=dev)
        np.testing.assert_allclose(to_numpy(compiled(x)), to_numpy(mlp_like(x)), rtol=1e-5)
    assert compiled.cache_info == {"graphs": 1, "eager": 0, "calls": 4}
    compiled(tp.rand(2, 8, device=dev))               # a new shape: a new graph
    compiled(tp.rand(4, 8, device=dev), scale=3.0)    # a new non-tensor value: a new graph
    assert compiled.cache_info["graphs"] == 3
    x = tp.rand(4, 8, device=dev)
    np.testing.assert_allclose(to_numpy(compiled(x, scale=3.0)),
                               to_numpy(mlp_like(x, scale=3.0)), rtol=1e-5)
    assert compiled.cache_info["graphs"] == 3


@requires_accelerator
def test_a_new_layout_is_a_new_signature_and_keeps_its_strides():
    """A transposed input is captured as transposed (what the function sees is what eager sees),
    and never replays a graph captured for the contiguous layout."""
    dev = accelerator_device(0)
    scaled = tp.compile(lambda a: a * (2.0 if a.is_contiguous() else 3.0))
    flat = tp.compile(lambda a: a.view(-1) * 2)
    a, t = tp.ones(2, 3, device=dev), tp.ones(3, 2, device=dev).T
    for _ in range(3):
        assert scaled(a)[0, 0].item() == 2.0
        flat(a)
    for _ in range(3):
        assert scaled(t)[0, 0].item() == 3.0
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            flat(t)
    assert scaled.cache_info["graphs"] == 2
    base = tp.zeros(3, 2, device=dev)
    bump = tp.compile(lambda x, y: x.add_(y))
    for _ in range(4):
        bump(base.T, tp.ones(2, 3, device=dev))
    assert to_numpy(base).tolist() == [[4.0, 4.0]] * 3


@requires_accelerator
def test_lru_eviction_resets_the_oldest_graph():
    dev = accelerator_device(0)
    compiled = tp.compile(lambda x: x * 2, cache_size=2)
    shapes = [(1,), (2,), (3,)]
    for shape in shapes:
        compiled(tp.ones(*shape, device=dev))
        compiled(tp.ones(*shape, device=dev))
    assert compiled.cache_info["graphs"] == 2
    # the evicted (1,) signature is captured again, and still right
    assert to_numpy(compiled(tp.full((1,), 4.0, device=dev))).tolist() == [8.0]
    assert to_numpy(compiled(tp.full((1,), 5.0, device=dev))).tolist() == [10.0]


@requires_accelerator
def test_outputs_of_an_earlier_call_are_invalidated():
    dev = accelerator_device(0)
    compiled = tp.compile(lambda x: x + 1)
    compiled(tp.zeros(3, device=dev))                 # warm-up + capture
    first = compiled(tp.zeros(3, device=dev))
    kept = first.clone()
    second = compiled(tp.ones(3, device=dev))
    assert to_numpy(second).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="overwritten by a later call.*clone"):
        first.tolist()
    with pytest.raises(RuntimeError, match="clone"):
        first + 1
    assert to_numpy(kept).tolist() == [1.0, 1.0, 1.0]
    assert to_numpy(second + 1).tolist() == [3.0, 3.0, 3.0]


def test_host_tensors_run_eagerly_with_a_logged_reason(caplog):
    compiled = tp.compile(lambda x: x * 3)
    with caplog.at_level(logging.WARNING, logger="tensorplay.compiler"):
        assert compiled(tp.ones(2)).tolist() == [3.0, 3.0]
        assert compiled(tp.ones(2)).tolist() == [3.0, 3.0]
    reasons = [r.getMessage() for r in caplog.records if r.name == "tensorplay.compiler"]
    assert len(reasons) == 1, reasons
    assert "eagerly" in reasons[0] and ("host" in reasons[0] or "accelerator" in reasons[0])
    assert compiled.cache_info["graphs"] == 0


@requires_accelerator
def test_unsafe_call_during_capture_falls_back_with_the_reason(caplog):
    dev = accelerator_device(0)

    def reads_a_value(x):
        scale = float(x.sum().item())
        return x * scale
    compiled = tp.compile(reads_a_value)
    with caplog.at_level(logging.WARNING, logger="tensorplay.compiler"):
        for _ in range(3):
            x = tp.rand(4, device=dev)
            np.testing.assert_allclose(to_numpy(compiled(x)), to_numpy(reads_a_value(x)),
                                       rtol=1e-6)
    messages = [r.getMessage() for r in caplog.records if r.name == "tensorplay.compiler"]
    assert len(messages) == 1 and "item" in messages[0], messages
    assert compiled.cache_info == {"graphs": 0, "eager": 1, "calls": 3}
    assert not tp.accelerator.is_current_stream_capturing()
    assert to_numpy(tp.ones(2, device=dev) * 2).tolist() == [2.0, 2.0]


@requires_devices(2)
def test_tensors_on_two_devices_run_eagerly(caplog):
    compiled = tp.compile(lambda a, b: a.sum() + b.sum().to(a.device))
    a = tp.ones(2, device=accelerator_device(0))
    b = tp.ones(3, device=accelerator_device(1))
    with caplog.at_level(logging.WARNING, logger="tensorplay.compiler"):
        assert compiled(a, b).item() == 5.0
    assert any("more than one device" in r.getMessage() for r in caplog.records)


@requires_accelerator
def test_random_ops_draw_fresh_numbers_like_eager_code():
    dev = accelerator_device(0)

    def noisy(x):
        return x + tp.rand(x.shape, device=x.device)
    compiled = tp.compile(noisy)
    x = tp.zeros(64, device=dev)
    tp.manual_seed(123)
    eager = [to_numpy(noisy(x)) for _ in range(4)]
    tp.manual_seed(123)
    compiled_runs = [to_numpy(compiled(x)) for _ in range(4)]
    for a, b in zip(eager, compiled_runs):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(compiled_runs[2], compiled_runs[3])


@requires_accelerator
def test_all_graphs_of_one_function_share_one_pool():
    dev = accelerator_device(0)
    compiled = tp.compile(lambda x: (x * 2).sum())
    for n in (4, 8, 16):
        compiled(tp.ones(n, device=dev))
        assert compiled(tp.ones(n, device=dev)).item() == 2.0 * n
    pools = {entry.graph.pool() for entry in compiled._entries.values()}
    assert len(pools) == 1


@requires_accelerator
def test_containers_and_non_tensor_outputs():
    dev = accelerator_device(0)

    @tp.compile
    def split(x, offset):
        return {"low": x - offset, "pair": (x + offset, offset)}
    for _ in range(3):
        x = tp.rand(5, device=dev)
        out = split(x, 1)
        np.testing.assert_allclose(to_numpy(out["low"]), to_numpy(x) - 1, rtol=1e-6)
        np.testing.assert_allclose(to_numpy(out["pair"][0]), to_numpy(x) + 1, rtol=1e-6)
        assert out["pair"][1] == 1


# -- inputs changed in place --------------------------------------------------------------------

def _iadd(buf, x):
    buf += x
    return buf.sum()


def _setitem(buf, x):
    buf[:, 1:] = x[:, 1:] * 3


def _through_views(buf, x):
    buf.t()[0].mul_(x[:, 0])
    buf.view(-1)[-1].fill_(5.0)
    return buf[1]


def _writes_the_second_argument(buf, x):
    x.sub_(buf)
    return x + buf


MUTATIONS = {
    "add_": lambda buf, x: buf.add_(x),
    "iadd": _iadd,
    "chained op_ forms": lambda buf, x: buf.mul_(2).add_(x).clamp_(max=4.0),
    "copy_": lambda buf, x: buf.copy_(x * 2),
    "fill_ from a tensor": lambda buf, x: buf.fill_(x.sum()),
    "setitem": _setitem,
    "views": _through_views,
    "masked_fill_": lambda buf, x: buf.masked_fill_(x > 0.5, 7.0),
    "out=": lambda buf, x: tp.add(buf, x, out=buf),
    "second argument": _writes_the_second_argument,
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_inputs_changed_in_place_hold_what_eager_leaves(device, name):
    fn = MUTATIONS[name]
    compiled = tp.compile(fn)
    rng = np.random.default_rng(7)
    start = rng.random((2, 3), dtype=np.float32)
    eager_buf, compiled_buf = (tp.tensor(start, device=device) for _ in range(2))
    for step in range(4):
        x = rng.random((2, 3), dtype=np.float32)
        eager_x, compiled_x = (tp.tensor(x, device=device) for _ in range(2))
        want = fn(eager_buf, eager_x)
        got = compiled(compiled_buf, compiled_x)
        np.testing.assert_allclose(to_numpy(compiled_buf), to_numpy(eager_buf), rtol=1e-6,
                                   err_msg=f"{name}, call {step}")
        np.testing.assert_allclose(to_numpy(compiled_x), to_numpy(eager_x), rtol=1e-6)
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=1e-6)
    if device != "cpu":
        assert compiled.cache_info == {"graphs": 1, "eager": 0, "calls": 4}


@requires_accelerator
def test_warm_up_and_capture_change_the_inputs_once():
    dev = accelerator_device(0)
    counter = tp.compile(lambda buf, x: buf.add_(x))
    b, one = tp.zeros(1, device=dev), tp.ones(1, device=dev)
    for calls in range(1, 5):
        returned = counter(b, one)
        assert to_numpy(b).tolist() == [float(calls)]
        assert returned is b                      # as eager: add_ returns its tensor
    assert counter.cache_info["graphs"] == 1
    assert to_numpy(one).tolist() == [1.0]


@requires_accelerator
def test_random_fill_of_an_input_matches_eager():
    dev = accelerator_device(0)

    def refill(buf, scale):
        buf.uniform_()
        return buf * scale
    compiled = tp.compile(refill)
    runs = []
    for fn in (refill, compiled):
        tp.manual_seed(5)
        buf = tp.zeros(8, device=dev)
        runs.append([(to_numpy(fn(buf, 2.0)), to_numpy(buf)) for _ in range(3)])
    for (want_out, want_buf), (got_out, got_buf) in zip(*runs):
        np.testing.assert_array_equal(got_buf, want_buf)
        np.testing.assert_array_equal(got_out, want_out)
    assert not np.array_equal(runs[1][1][1], runs[1][2][1])


@requires_accelerator
def test_written_input_that_is_not_contiguous():
    dev = accelerator_device(0)
    compiled = tp.compile(lambda buf, x: buf.mul_(x).add_(1))
    eager_buf = tp.arange(6, dtype=tp.float32, device=dev).reshape(3, 2).t()
    compiled_buf = eager_buf.clone().t().contiguous().t()
    assert not compiled_buf.is_contiguous()
    for step in range(3):
        x = tp.full((2, 3), float(step + 2), device=dev)
        eager_buf.mul_(x).add_(1)
        compiled(compiled_buf, x)
        np.testing.assert_array_equal(to_numpy(compiled_buf), to_numpy(eager_buf))


@requires_accelerator
def test_many_written_inputs():
    dev = accelerator_device(0)

    def bump_all(*buffers):
        for k, buffer in enumerate(buffers):
            buffer.add_(k)
    compiled = tp.compile(bump_all)
    buffers = [tp.zeros(4, device=dev) for _ in range(70)]
    for _ in range(3):
        compiled(*buffers)
    assert compiled.cache_info["graphs"] == 1
    for k, buffer in enumerate(buffers):
        assert to_numpy(buffer).tolist() == [3.0 * k] * 4


@requires_accelerator
def test_written_inputs_that_share_memory_run_eagerly(caplog):
    dev = accelerator_device(0)

    def bump_then_read(a, b):
        a.add_(1)
        return b * 10
    compiled = tp.compile(bump_then_read)
    for _ in range(2):
        compiled(tp.zeros(2, device=dev), tp.zeros(2, device=dev))
    shared = tp.zeros(2, device=dev)
    with caplog.at_level(logging.WARNING, logger="tensorplay.compiler"):
        for calls in range(1, 3):
            out = compiled(shared, shared)
            assert to_numpy(shared).tolist() == [float(calls)] * 2
            assert to_numpy(out).tolist() == [10.0 * calls] * 2
    messages = [r.getMessage() for r in caplog.records if r.name == "tensorplay.compiler"]
    assert len(messages) == 1 and "share memory" in messages[0], messages
    separate = tp.zeros(2, device=dev)
    assert to_numpy(compiled(separate, tp.ones(2, device=dev))).tolist() == [10.0, 10.0]
    assert to_numpy(separate).tolist() == [1.0, 1.0]


@requires_accelerator
def test_written_input_that_is_an_earlier_output_runs_eagerly():
    dev = accelerator_device(0)
    step = tp.compile(lambda state, x: state.add_(x) * 2)
    state, x = tp.zeros(2, device=dev), tp.ones(2, device=dev)
    step(state, x)
    doubled = step(state, x)                      # a replay: doubled is graph memory
    assert to_numpy(doubled).tolist() == [4.0, 4.0]
    result = step(doubled, x)                     # writes doubled: eagerly, as eager code does
    assert to_numpy(doubled).tolist() == [5.0, 5.0]
    assert to_numpy(result).tolist() == [10.0, 10.0]
    assert to_numpy(state).tolist() == [2.0, 2.0]


@requires_accelerator
def test_capture_failure_leaves_inputs_changed_once():
    dev = accelerator_device(0)

    def bump_and_read(buf):
        buf.add_(1)
        return buf * buf.sum().item()
    compiled = tp.compile(bump_and_read)
    b = tp.zeros(2, device=dev)
    for calls in range(1, 4):
        np.testing.assert_allclose(to_numpy(compiled(b)), [2.0 * calls * calls] * 2)
        assert to_numpy(b).tolist() == [float(calls)] * 2
    assert compiled.cache_info["eager"] == 1


def test_compile_documents_the_in_place_contract():
    doc = tp.compile.__doc__
    assert "in place" in doc and "eager" in doc
    from tensorplay.compiler.backends import cudagraphs
    assert "happen to the static copies" not in cudagraphs.__doc__
