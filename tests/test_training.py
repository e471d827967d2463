"""Training end to end: an MLP trained 200 steps with SGD and with AdamW matches a NumPy
reference; the whole step captured in one Graph, and compiled with tp.compile, gives the eager
losses."""

import math

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator

F = tp.nn.functional
WIDTH, BATCH, LAYERS, STEPS = 12, 6, 3, 200
_erf = np.vectorize(math.erf)


def initial():
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((WIDTH, WIDTH)) / WIDTH ** 0.5 for _ in range(LAYERS)]
    biases = [rng.uniform(-0.1, 0.1, WIDTH) for _ in range(LAYERS)]
    x = rng.standard_normal((BATCH, WIDTH))
    y = rng.standard_normal((BATCH, WIDTH)) * 0.5
    return weights, biases, x, y


# -- the NumPy reference: forward, backward and the optimizers written out ---------------------
def reference_losses(optimizer: str, steps: int = STEPS) -> list[float]:
    weights, biases, x, y = initial()
    params = [p.copy() for pair in zip(weights, biases) for p in pair]
    state = [dict(m=np.zeros_like(p), v=np.zeros_like(p), buf=None) for p in params]
    losses = []
    for t in range(1, steps + 1):
        hs, pre = [x], []
        for i in range(LAYERS):
            z = hs[-1] @ params[2 * i] + params[2 * i + 1]
            pre.append(z)
            hs.append(0.5 * z * (1 + _erf(z / math.sqrt(2))))
        diff = hs[-1] - y
        losses.append(float(np.mean(diff ** 2)))
        g = 2 * diff / diff.size
        grads = [None] * len(params)
        for i in reversed(range(LAYERS)):
            z = pre[i]
            g = g * (0.5 * (1 + _erf(z / math.sqrt(2))) + z * np.exp(-0.5 * z * z)
                     / math.sqrt(2 * math.pi))
            grads[2 * i] = hs[i].T @ g
            grads[2 * i + 1] = g.sum(axis=0)
            g = g @ params[2 * i].T
        for p, grad, s in zip(params, grads, state):
            if optimizer == "sgd":   # momentum 0.9, weight decay 1e-3, lr 0.1
                grad = grad + 1e-3 * p
                s["buf"] = grad.copy() if s["buf"] is None else 0.9 * s["buf"] + grad
                p -= 0.1 * s["buf"]
            else:                    # AdamW lr 1e-2, betas (0.9, 0.999), eps 1e-8, wd 1e-2
                p *= 1 - 1e-2 * 1e-2
                s["m"] = 0.9 * s["m"] + 0.1 * grad
                s["v"] = 0.999 * s["v"] + 0.001 * grad * grad
                m_hat = s["m"] / (1 - 0.9 ** t)
                v_hat = s["v"] / (1 - 0.999 ** t)
                p -= 1e-2 * m_hat / (np.sqrt(v_hat) + 1e-8)
    return losses


def make_step(optimizer: str, device, dtype=tp.float64):
    weights, biases, x, y = initial()
    params = [tp.tensor(p, dtype=dtype, device=device, requires_grad=True)
              for pair in zip(weights, biases) for p in pair]
    data = tp.tensor(x, dtype=dtype, device=device)
    target = tp.tensor(y, dtype=dtype, device=device)
    if optimizer == "sgd":
        opt = tp.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
    else:
        opt = tp.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)

    def step():
        opt.zero_grad(set_to_none=False)
        h = data
        for i in range(LAYERS):
            h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
        loss = F.mse_loss(h, target)
        loss.backward()
        opt.step()
        return loss
    return step


def check_losses(got, expected, steps=STEPS):
    got, expected = np.array(got), np.array(expected)
    np.testing.assert_allclose(got[:50], expected[:50], rtol=1e-5)
    np.testing.assert_allclose(got[steps - 1], expected[steps - 1], rtol=1e-3)
    assert got[-1] < 0.7 * got[0]   # it learns


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mlp_training_matches_numpy(device, optimizer):
    step = make_step(optimizer, device)
    losses = [step().item() for _ in range(STEPS)]
    check_losses(losses, reference_losses(optimizer))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mlp_training_in_float32_stays_within_the_tolerances(device, optimizer):
    step = make_step(optimizer, device, tp.float32)
    losses = [step().item() for _ in range(STEPS)]
    check_losses(losses, reference_losses(optimizer))


@requires_accelerator
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_whole_step_in_one_graph_gives_the_eager_losses(dev, optimizer):
    eager = make_step(optimizer, dev)
    expected = [eager().item() for _ in range(30)]
    step = make_step(optimizer, dev)
    losses = [step().item() for _ in range(2)]   # the .grad tensors and state exist now
    graph = tp.accelerator.Graph()
    with graph:
        static_loss = step()
    for _ in range(28):
        graph.replay()
        losses.append(static_loss.item())
    np.testing.assert_allclose(losses, expected, rtol=1e-12)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_tp_compile_of_a_training_step_gives_the_eager_losses(device, optimizer):
    eager = make_step(optimizer, device)
    expected = [eager().item() for _ in range(30)]
    compiled = tp.compile(make_step(optimizer, device))
    losses = [compiled().item() for _ in range(30)]
    np.testing.assert_allclose(losses, expected, rtol=1e-12)
    # a step of no tensor argument is captured on the device its results are on (one graph,
    # replayed 29 times); on the host it runs eagerly
    on_host = tp.device(device).type == "cpu"
    assert compiled.cache_info == {"graphs": 0 if on_host else 1, "eager": 1 if on_host else 0,
                                   "calls": 30}
