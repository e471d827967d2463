"""The optional backend hooks ``elementwise_kernel(op, compute, kinds, out)`` and
``softmax(x, dim, out, log)``: where the device's backend has them (cuda: one raw kernel per
activation and one per softmax), gelu/silu/sigmoid/erf/where and (log_)softmax call them from
their one launch; elsewhere they compose the formula. Checked here on sim with recording hooks,
so the wiring is tested without a GPU."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._runtime import dispatch as _dispatch
from tensorplay._tensor import activations as _activations
from tensorplay._tensor import elementwise as _elementwise

pytestmark = pytest.mark.skipif(tp.accelerator.current_accelerator() is None,
                                reason="hooks are looked up on the accelerator backend")


@pytest.fixture
def calls(monkeypatch):
    backend = _dispatch.backend_of(tp.device(tp.accelerator.current_accelerator().type, 0))
    seen = []

    def elementwise_kernel(op, compute, kinds, out):
        if op not in ("gelu", "gelu_tanh", "silu", "sigmoid", "erf"):
            return None

        def launch(x, out_array):
            seen.append((op, x.dtype, out_array.shape))
            out_array[...] = 7
        return launch

    def softmax(x, out, dim, log):
        seen.append(("log_softmax" if log else "softmax", dim, out.shape))
        out[...] = -1 if log else 0.5

    monkeypatch.setattr(backend, "elementwise_kernel", elementwise_kernel, raising=False)
    monkeypatch.setattr(backend, "softmax", softmax, raising=False)
    monkeypatch.setattr(backend, "softmax_launcher", None, raising=False)   # (cuda's)
    _clear_plans()
    yield seen
    _clear_plans()


def _clear_plans():
    """Plans keep the kernel a hook gave (Note [elementwise plans]): forget them."""
    _elementwise._plans.clear()
    _activations._softmax_plans.clear()


def _dev():
    return tp.accelerator.current_accelerator().type


@pytest.mark.parametrize("call, name", [
    (lambda x: tp.gelu(x), "gelu"), (lambda x: tp.gelu(x, approximate="tanh"), "gelu_tanh"),
    (tp.silu, "silu"), (tp.sigmoid, "sigmoid"), (tp.erf, "erf"),
    (lambda x: x.sigmoid_(), "sigmoid"), (lambda x: x.erf_(), "erf")])
def test_activation_calls_the_backend_kernel(calls, call, name):
    x = tp.tensor([[-1.0, 0.5], [2.0, 3.0]], dtype=tp.float16, device=_dev())
    y = call(x)
    assert y.tolist() == [[7.0, 7.0], [7.0, 7.0]] and y.dtype is tp.float16
    assert calls == [(name, np.float16, (2, 2))]


@pytest.mark.parametrize("log", [False, True])
def test_softmax_calls_the_backend_kernel_with_the_dim(calls, log):
    x = tp.ones(2, 3, device=_dev())
    y = (tp.log_softmax if log else tp.softmax)(x, dim=-1)
    assert y.tolist() == [[-1.0 if log else 0.5] * 3] * 2
    assert calls == [("log_softmax" if log else "softmax", 1, (2, 3))]


@pytest.mark.parametrize("log", [False, True])
def test_softmax_keeps_the_launcher_the_backend_gives_for_the_layout(calls, monkeypatch, log):
    """A kept softmax plan launches through ``softmax_launcher``'s launcher for its layout,
    made once; a backend that has none for a layout (None) keeps the plain hook."""
    backend = _dispatch.backend_of(tp.device(_dev(), 0))
    made = []

    def softmax_launcher(x, dim, log_):
        made.append((x.shape, dim, log_))
        if x.shape[-1] == 5:
            return None

        def launch(x_array, out_array):
            calls.append(("launcher", out_array.shape))
            out_array[...] = 0.25
        return launch

    monkeypatch.setattr(backend, "softmax_launcher", softmax_launcher, raising=False)
    fn = tp.log_softmax if log else tp.softmax
    x = tp.ones(2, 3, device=_dev())
    assert [fn(x, 1).tolist() for _ in range(3)] == [[[0.25] * 3] * 2] * 3
    wide = tp.ones(2, 5, device=_dev())
    assert [fn(wide, -1).tolist() for _ in range(2)] == [[[-1.0 if log else 0.5] * 5] * 2] * 2
    assert made == [((2, 3), 1, log), ((2, 5), 1, log)]
    name = "log_softmax" if log else "softmax"
    assert calls == [("launcher", (2, 3))] * 3 + [(name, 1, (2, 5))] * 2


def test_layer_norm_keeps_the_launcher_the_backend_gives_for_the_layout(monkeypatch):
    """A kept layer_norm plan with weight and bias launches through ``layer_norm_launcher``'s
    launcher for its layout and eps, made once per plan; without a bias, or where the backend
    has no launcher for a layout (None), the plain ``layer_norm`` hook runs."""
    from tensorplay._tensor import normalization

    backend = _dispatch.backend_of(tp.device(_dev(), 0))
    seen, made = [], []

    def layer_norm(x, weight, bias, out, eps):
        seen.append(("hook", out.shape, eps))
        out[...] = 1

    def layer_norm_launcher(x, weight, bias, eps):
        made.append((x.shape, eps))
        if x.shape[-1] == 5:
            return None

        def launch(x_array, w_array, b_array, out_array):
            seen.append(("launcher", out_array.shape, eps))
            out_array[...] = 2
        return launch

    monkeypatch.setattr(backend, "layer_norm", layer_norm, raising=False)
    monkeypatch.setattr(backend, "layer_norm_launcher", layer_norm_launcher, raising=False)
    monkeypatch.setattr(normalization, "_layer_norm_plans", {})
    F = tp.nn.functional
    x, wide = tp.ones(2, 3, device=_dev()), tp.ones(2, 5, device=_dev())
    w3, w5 = tp.ones(3, device=_dev()), tp.ones(5, device=_dev())
    for _ in range(2):
        assert F.layer_norm(x, (3,), w3, w3).tolist() == [[2.0] * 3] * 2
        assert F.layer_norm(x, (3,), w3, w3, eps=0.5).tolist() == [[2.0] * 3] * 2
        assert F.layer_norm(x, (3,), w3).tolist() == [[1.0] * 3] * 2
        assert F.layer_norm(wide, (5,), w5, w5).tolist() == [[1.0] * 5] * 2
    assert made == [((2, 3), 1e-5), ((2, 3), 0.5), ((2, 5), 1e-5)]
    assert seen == [("launcher", (2, 3), 1e-5), ("launcher", (2, 3), 0.5),
                    ("hook", (2, 3), 1e-5), ("hook", (2, 5), 1e-5)] * 2


#: what the ``filling`` fixture's kernels write, per op (others: 6)
FILLS = {"exp": 3, "add": 4, "gelu": 5}


@pytest.fixture
def filling(monkeypatch):
    """The backend's ``elementwise_kernel`` replaced by launchers that write :data:`FILLS` and
    record ``(op, number of arrays)``; plans cleared before and after."""
    backend = _dispatch.backend_of(tp.device(_dev(), 0))
    seen = []

    def elementwise_kernel(op, compute, kinds, out):
        def launch(*arrays):
            seen.append((op, len(arrays)))
            arrays[-1][...] = FILLS.get(op, 6)
        launch.tp_arguments_only = True
        return launch

    monkeypatch.setattr(backend, "elementwise_kernel", elementwise_kernel, raising=False)
    _clear_plans()
    yield seen
    _clear_plans()


def test_direct_plans_launch_the_backend_kernel_and_check_guards(filling):
    """A plan whose kernel is the backend's launcher over arrays only (exp, a + b, gelu,
    where) launches it alone from its second call on (``_execute_one`` / ``_execute_two`` /
    ``_execute``), and still refuses a stale compiled output."""
    x, y = tp.ones(2, 3, device=_dev()), tp.ones(2, 3, device=_dev())
    m = tp.ones(2, 3, dtype=tp.bool, device=_dev())
    for _ in range(3):
        assert x.exp().tolist() == [[3.0] * 3] * 2
        assert (x + y).tolist() == [[4.0] * 3] * 2
        assert tp.gelu(x).tolist() == [[5.0] * 3] * 2
        assert tp.where(m, x, y).tolist() == [[6.0] * 3] * 2
    assert filling == [("exp", 2), ("add", 3), ("gelu", 2), ("where", 4)] * 3
    compiled = tp.compile(lambda t: t * 2)
    compiled(x)
    stale = compiled(x)
    compiled(y)   # overwrites ``stale``
    for call in (lambda t: t.exp(), lambda t: t + y, tp.gelu, lambda t: tp.where(m, x, t)):
        with pytest.raises(RuntimeError, match="overwritten by a later call"):
            call(stale)


def test_direct_plans_launch_by_call_where_the_backend_offers_it(filling, monkeypatch):
    """Where the backend offers ``launch_call`` (cuda), a direct plan's launch makes no kernel
    object: ``launch_call(stream, launcher, *arrays)``; while a launch watcher is set (a
    capture keeping its inputs), the named kernel goes through ``launch`` as before."""
    backend = _dispatch.backend_of(tp.device(_dev(), 0))
    by_call = []

    def launch_call(stream, fn, *args):
        by_call.append(len(args))
        backend.launch(stream, _dispatch.named("by_call", functools.partial(fn, *args)))

    monkeypatch.setattr(backend, "launch_call", launch_call, raising=False)
    x, y = tp.ones(2, 3, device=_dev()), tp.ones(2, 3, device=_dev())
    m = tp.ones(2, 3, dtype=tp.bool, device=_dev())
    for _ in range(3):
        assert x.exp().tolist() == [[3.0] * 3] * 2
        assert (x + y).tolist() == [[4.0] * 3] * 2
        assert tp.where(m, x, y).tolist() == [[6.0] * 3] * 2
    assert by_call == [2, 3, 4] * 2   # the first call of each plans it
    graph = tp.accelerator.Graph()
    with graph:
        out = tp.where(m, x.exp(), y) + y
    graph.replay()
    assert out.tolist() == [[4.0] * 3] * 2 and by_call == [2, 3, 4] * 2


def test_integer_input_and_0d_softmax_compose_the_formula(calls):
    dev = _dev()
    y = tp.sigmoid(tp.tensor([0, 1], device=dev))   # int64 in, float32 out: no kernel for it
    assert y.dtype is tp.float32 and abs(y[0].item() - 0.5) < 1e-7
    assert tp.softmax(tp.tensor(3.0, device=dev), 0).item() == 1.0
    assert calls == []


def test_without_hooks_the_composed_formulas_run():
    x = tp.tensor([-2.0, 0.0, 1.5], device=_dev())
    gelu = tp.gelu(x).cpu().numpy()
    ref = np.array([v * 0.5 * (1 + math.erf(v / 2 ** 0.5)) for v in (-2, 0, 1.5)])
    np.testing.assert_allclose(gelu, ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tp.softmax(x, 0).cpu().numpy(),
                               np.exp([-2, 0, 1.5]) / np.exp([-2, 0, 1.5]).sum(), rtol=1e-6)


def test_a_launcher_failing_inside_a_capture_leaves_the_next_capture_working(monkeypatch):
    """A backend launcher that raises while it is built inside a capture (an H200 run once saw a
    later capture invalidated after such a failure): the op raises that error, the capture
    still ends, and the next capture on the same stream replays the right values."""
    backend = _dispatch.backend_of(tp.device(_dev(), 0))
    real = getattr(backend, "elementwise_kernel", None)
    failed: list = []

    def fails_once(op, compute, kinds, out):
        if op == "mul" and not failed:
            failed.append(op)
            raise ValueError("the launcher could not be built")
        return None if real is None else real(op, compute, kinds, out)

    monkeypatch.setattr(backend, "elementwise_kernel", fails_once, raising=False)
    _elementwise._plans.clear()
    dev = tp.device(_dev(), 0)
    x = tp.arange(32, dtype=tp.float32, device=dev).reshape(4, 8)
    stream = tp.accelerator.Stream(device=dev)
    first = tp.accelerator.Graph()
    first.capture_begin(stream=stream)
    try:
        x + 1   # a kernel already captured before the failure
        with pytest.raises(ValueError, match="could not be built"):
            x * 3
    finally:
        first.capture_end()
    assert failed == ["mul"]
    again = tp.accelerator.Graph()
    again.capture_begin(stream=stream)
    y = x * 3 + 1
    again.capture_end()
    again.replay()
    tp.accelerator.synchronize()
    want = np.arange(32, dtype=np.float32).reshape(4, 8) * 3 + 1
    np.testing.assert_array_equal(y.cpu().numpy(), want)
    np.testing.assert_array_equal((x * 3 + 1).cpu().numpy(), want)
    _elementwise._plans.clear()
