"""``make_graphed_callables``: forward and backward each replay one captured graph, with the
gradients an eager run gives."""

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, to_numpy

pytestmark = requires_accelerator
F = tp.nn.functional


def layer(x, w, b):
    return F.gelu(x @ w + b).sum(dim=1)


def params(dev):
    tp.manual_seed(0)
    return (tp.randn(4, 3, device=dev, requires_grad=True),
            tp.zeros(3, device=dev, requires_grad=True))


def test_graphed_function_gives_eager_outputs_and_gradients(dev):
    w, b = params(dev)
    sample = tp.randn(5, 4, device=dev, requires_grad=True)
    graphed = tp.accelerator.make_graphed_callables(layer, (sample, w, b))
    assert w.grad is None and b.grad is None     # the warm-up leaves .grad alone
    for seed in range(3):
        tp.manual_seed(seed + 10)
        x = tp.randn(5, 4, device=dev, requires_grad=True)
        out = graphed(x, w, b)
        out.sum().backward()
        got = [to_numpy(t) for t in (out, x.grad, w.grad, b.grad)]
        w.grad = b.grad = None
        x_eager = x.detach().requires_grad_()
        expected_out = layer(x_eager, w, b)
        expected_out.sum().backward()
        for g, e in zip(got, [to_numpy(t) for t in (expected_out, x_eager.grad, w.grad,
                                                    b.grad)]):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
        w.grad = b.grad = None


def test_several_callables_share_one_pool_and_chain(dev):
    w, b = params(dev)
    first = lambda x: (x * 2).tanh()   # noqa: E731
    second = lambda h, w, b: layer(h, w, b)   # noqa: E731
    x = tp.randn(5, 4, device=dev, requires_grad=True)
    h = first(x).detach().requires_grad_()
    g1, g2 = tp.accelerator.make_graphed_callables((first, second), ((x,), (h, w, b)))
    out = g2(g1(x), w, b)
    out.sum().backward()
    grad_x, grad_w = to_numpy(x.grad), to_numpy(w.grad)
    x.grad = w.grad = b.grad = None
    second(first(x), w, b).sum().backward()
    np.testing.assert_allclose(grad_x, to_numpy(x.grad), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_w, to_numpy(w.grad), rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise_at_the_call(dev):
    w, b = params(dev)
    x = tp.randn(5, 4, device=dev)
    with pytest.raises(TypeError, match="sample_args\\[0\\] must be a tuple of Tensors, got "
                                        "Tensor"):
        tp.accelerator.make_graphed_callables(layer, x)
    with pytest.raises(TypeError, match="sample_args\\[0\\]\\[1\\] must be a Tensor"):
        tp.accelerator.make_graphed_callables(layer, (x, 3.0, b))
    with pytest.raises(ValueError, match="got 2 callables and 1 sample_args"):
        tp.accelerator.make_graphed_callables((layer, layer), ((x, w, b),))
    graphed = tp.accelerator.make_graphed_callables(layer, (x, w, b))
    with pytest.raises(TypeError, match="expected 3 tensor arguments"):
        graphed(x, w)
    assert graphed(x, w, b).shape == (5,)
