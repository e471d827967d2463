"""tp.compile's fusion rewrite (Note [fusion rewrite]): matmul + bias add [+ activation] and
linear + activation become one fused product in the captured graph, with results equal to the
unfused eager ops; anything that keeps or looks at an intermediate, and captures that stray from
the warm-up, are captured as written. On host compile runs eagerly: nothing is fused."""

import logging

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._tensor.linalg import linear
from support import requires_captured_products, to_numpy

ACTIVATIONS = {
    "relu": tp.relu, "gelu": tp.gelu, "silu": tp.silu,
    "gelu_tanh": lambda t: tp.gelu(t, approximate="tanh"), None: lambda t: t,
}


def on_graphs(device, count: int) -> int:
    """The fused products expected: host tensors are not captured (compile runs them eagerly)."""
    return 0 if str(device) == "cpu" else count


def params(device, layers=3, width=32, dtype=tp.float32, seed=0):
    rng = np.random.default_rng(seed)
    ws = [tp.tensor(rng.standard_normal((width, width)) / width ** 0.5, dtype=dtype,
                    device=device) for _ in range(layers)]
    bs = [tp.tensor(rng.standard_normal(width), dtype=dtype, device=device)
          for _ in range(layers)]
    return ws, bs


def inputs(device, count=3, width=32, dtype=tp.float32):
    rng = np.random.default_rng(7)
    return [tp.tensor(rng.standard_normal((4, width)), dtype=dtype, device=device)
            for _ in range(count)]


def check_calls(fn, device, dtype=tp.float32, rtol=1e-5):
    compiled = tp.compile(fn)
    for x in inputs(device, dtype=dtype):
        got, want = compiled(x), fn(x)
        got, want = (got[0], want[0]) if isinstance(got, tuple) else (got, want)
        np.testing.assert_allclose(to_numpy(got.float()), to_numpy(want.float()), rtol=rtol,
                                   atol=rtol)
    return compiled


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_mlp_layers_are_fused_and_equal_eager(device, activation):
    ws, bs = params(device)
    act = ACTIVATIONS[activation]

    def mlp(x):
        for w, b in zip(ws, bs):
            x = act(x @ w + b)
        return x
    compiled = check_calls(mlp, device)
    assert compiled.fused_products == on_graphs(device, 3)


@pytest.mark.parametrize("dtype", [tp.float16, tp.float64])
def test_other_dtypes(device, dtype):
    requires_captured_products(device)
    ws, bs = params(device, dtype=dtype)

    def mlp(x):
        return tp.gelu(x @ ws[0] + bs[0], approximate="tanh")
    compiled = check_calls(mlp, device, dtype, rtol=2e-2 if dtype is tp.float16 else 1e-10)
    assert compiled.fused_products == on_graphs(device, 1)


def test_bias_on_the_left_and_linear_with_activation(device):
    ws, bs = params(device, layers=2)

    def f(x):
        h = tp.relu(bs[0] + x @ ws[0])
        return tp.silu(linear(h, ws[1], bs[1]))
    compiled = check_calls(f, device)
    assert compiled.fused_products == on_graphs(device, 2)


@pytest.mark.parametrize("dtype, rtol", [(tp.float32, 1e-5), (tp.bfloat16, 3e-2)])
def test_residual_adds_and_addmm_fold_into_their_products(device, dtype, rtol):
    """A transformer block's products: addmm then GELU(tanh) (the epilogue), then a product
    plus its bias plus the residual stream, as addmm and as @ and +, each one fused product."""
    if dtype is tp.bfloat16:
        requires_captured_products(device)
    ws, bs = params(device, layers=3, dtype=dtype)

    def block(x):
        hidden = tp.gelu(tp.addmm(bs[0], x, ws[0]), approximate="tanh")
        x = x + tp.addmm(bs[1], hidden, ws[1])
        return (x @ ws[2] + bs[2]) + x
    compiled = check_calls(block, device, dtype, rtol=rtol)
    assert compiled.fused_products == on_graphs(device, 3)


def test_fuse_false_captures_as_written(device):
    ws, bs = params(device, layers=1)
    compiled = tp.compile(lambda x: tp.relu(x @ ws[0] + bs[0]), fuse=False)
    x = inputs(device)[0]
    np.testing.assert_allclose(to_numpy(compiled(x)), to_numpy(tp.relu(x @ ws[0] + bs[0])),
                               rtol=1e-6)
    compiled(x)
    assert compiled.fused_products == 0


def test_what_is_not_fused(device):
    ws, bs = params(device, layers=1)
    w, b = ws[0], bs[0]
    def returned(x):
        h = x @ w
        return tp.relu(h + b), h

    cases = {
        # an intermediate returned to the caller
        "returned": returned,
        # a bias of another dtype promotes, so the add is not a bias epilogue
        "promoting bias": lambda x: tp.relu(x @ w + b.double()),
        # the add broadcasts the product to a larger shape
        "broadcast up": lambda x: tp.relu(x @ w + b.reshape(1, 1, -1).expand(2, 1, 32)),
        # a scalar add is not a bias
        "scalar": lambda x: tp.relu(x @ w + 1.0),
    }
    for name, fn in cases.items():
        compiled = check_calls(fn, device)
        assert compiled.fused_products == 0, name
        # the add of a number and the activation still make one elementwise chain
        assert compiled.fused_chains == (on_graphs(device, 1) if name == "scalar" else 0), name


def test_a_capture_that_uses_an_intermediate_is_captured_as_written(device, caplog):
    ws, bs = params(device, layers=1)

    def reads_shape(x):
        h = x @ ws[0]
        y = h + bs[0]
        return tp.relu(y) * h.shape[0]

    for fn in (reads_shape,):
        with caplog.at_level(logging.INFO, logger="tensorplay.compiler"):
            compiled = check_calls(fn, device)
        assert compiled.fused_products == 0
        if str(device) != "cpu":
            assert "capturing without fusion: a fused-away intermediate" in caplog.text
        caplog.clear()


def test_a_view_of_a_fused_away_intermediate_says_so(device):
    ws, bs = params(device, layers=1)
    kept = []

    def keeps_a_view(x):
        h = x @ ws[0]
        kept.append(h[0])        # a view of the product outlives the call
        return tp.relu(h + bs[0])
    compiled = check_calls(keeps_a_view, device)
    x = inputs(device)[-1]       # the input of the last call, whose view was kept last
    np.testing.assert_allclose(to_numpy(kept[-1]), to_numpy((x @ ws[0])[0]), rtol=1e-5)
    if str(device) != "cpu":
        assert compiled.fused_products == 1
        with pytest.raises(RuntimeError, match="fused away"):
            to_numpy(kept[1])    # the one taken while capturing views no computed values


def test_control_flow_that_changes_between_warm_up_and_capture(device, caplog):
    ws, bs = params(device, layers=1)
    calls = []

    def flips(x):
        calls.append(1)
        h = x @ ws[0] + bs[0]
        return tp.relu(h) if len(calls) % 2 else tp.silu(h)
    compiled = tp.compile(flips)
    x = inputs(device)[0]
    with caplog.at_level(logging.INFO, logger="tensorplay.compiler"):
        compiled(x)   # warm-up with relu, fused capture with silu, capture as written: relu
    if str(device) != "cpu":
        assert "op #2 of the capture is silu, the warm-up's was relu" in caplog.text
        assert compiled.fused_products == 0
        expected = to_numpy(tp.relu(x @ ws[0] + bs[0]))   # what the graph captured
        np.testing.assert_allclose(to_numpy(compiled(x)), expected, rtol=1e-5, atol=1e-6)


def test_fused_graph_replays_with_new_inputs_and_rng(device):
    ws, bs = params(device, layers=2)

    def noisy(x):
        h = tp.gelu(x @ ws[0] + bs[0])
        h = h + tp.rand(h.shape, device=h.device) * 0    # RNG between groups
        return tp.gelu(h @ ws[1] + bs[1])
    compiled = check_calls(noisy, device)
    assert compiled.fused_products == on_graphs(device, 2)
    assert compiled.fused_chains == on_graphs(device, 1)   # rand * 0, then + h


def test_elementwise_chains_become_one_kernel(device):
    a = tp.tensor(np.linspace(-2, 2, 128, dtype=np.float32).reshape(4, 32), device=device)

    def chain(x, y):
        z = tp.exp((x * 0.5 + y) * y) - 1.0
        return tp.sigmoid(tp.tanh(z)), x + y   # x + y is a chain of one: left alone
    compiled = check_calls(lambda x: chain(x, a), device)
    assert compiled.fused_chains == on_graphs(device, 1)
    for dtype in (tp.float16, tp.float64):
        b = a.to(dtype)
        compiled = check_calls(lambda x, b=b: chain(x, b), device, dtype,
                               rtol=2e-2 if dtype is tp.float16 else 1e-10)
        assert compiled.fused_chains == on_graphs(device, 1)


def test_chains_stop_at_promotion_broadcasting_and_integers(device):
    row = tp.ones(32, device=device)

    def mixed(x):
        y = (x * 2).double() + 1           # a conversion between: two separate ops
        z = x * 3 + row                    # the add broadcasts a row: not a chain member
        w = (x > 0) * 1.5                  # a comparison gives bool: not a chain member
        n = tp.arange(4, device=x.device) * 2 + 1   # integers are not fused
        return y, z, w, n
    compiled = check_calls(mixed, device)
    assert compiled.fused_chains == 0
