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
