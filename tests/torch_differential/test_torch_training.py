"""Training against PyTorch: the same model, initial weights and data trained 200 steps with
SGD and with AdamW in tensorplay and in torch; the losses agree to 1e-5 (relative) over the
first 50 steps and to 1e-3 at step 200. Two models: a GELU MLP and a pre-LN transformer block
(layer_norm, a linear QKV, causal attention written with products + masked_fill + softmax, a
linear projection and a GELU MLP, with residuals)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorplay as tp  # noqa: E402
from torch_differential._compare import torch_device  # noqa: E402

STEPS = 200


def mlp_weights(rng):
    width, layers = 16, 3
    shapes = []
    for _ in range(layers):
        shapes += [(width, width), (width,)]
    weights = [rng.standard_normal(s) / math.sqrt(s[0]) if len(s) == 2
               else rng.uniform(-0.1, 0.1, s) for s in shapes]
    x = rng.standard_normal((8, width))
    y = rng.standard_normal((8, width)) * 0.5
    return weights, x, y


def mlp_loss(lib, F, params, x, y):
    h = x
    for i in range(len(params) // 2):
        h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
    return F.mse_loss(h, y)


D, HEADS, T = 16, 2, 6


def block_weights(rng):
    shapes = [(D,), (D,), (D, 3 * D), (3 * D,), (D, D), (D,), (D,), (D,), (D, 4 * D), (4 * D,),
              (4 * D, D), (D,)]
    weights = []
    for k, shape in enumerate(shapes):
        if k in (0, 6):
            weights.append(np.ones(shape))
        elif len(shape) == 1:
            weights.append(rng.uniform(-0.05, 0.05, shape))
        else:
            weights.append(rng.standard_normal(shape) / math.sqrt(shape[0]))
    x = rng.standard_normal((2, T, D))
    y = rng.standard_normal((2, T, D)) * 0.5
    return weights, x, y


def block_loss(lib, F, params, x, y):
    ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2 = params
    batch = x.shape[0]
    h = F.layer_norm(x, (D,), ln1_w, ln1_b)
    q, k, v = (h @ w_qkv + b_qkv).split(D, dim=-1)

    def heads(t):
        return t.reshape(batch, T, HEADS, D // HEADS).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // HEADS))
    causal = lib.ones(T, T, dtype=lib.bool, device=x.device).triu(1)
    attention = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
    mixed = (attention @ v).transpose(1, 2).reshape(batch, T, D)
    x = x + (mixed @ w_o + b_o)
    h = F.layer_norm(x, (D,), ln2_w, ln2_b)
    x = x + (F.gelu(h @ w_1 + b_1) @ w_2 + b_2)
    return F.mse_loss(x, y)


MODELS = {"mlp": (mlp_weights, mlp_loss), "transformer block": (block_weights, block_loss)}
OPTIMIZERS = {"sgd": dict(lr=0.01, momentum=0.9, weight_decay=1e-3),
              "adamw": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)}


def train(lib, model: str, optimizer: str, device) -> list[float]:
    make_weights, loss_fn = MODELS[model]
    weights, x, y = make_weights(np.random.default_rng(0))
    F = lib.nn.functional
    params = [lib.tensor(w, dtype=lib.float32, device=device, requires_grad=True)
              for w in weights]
    data = lib.tensor(x, dtype=lib.float32, device=device)
    target = lib.tensor(y, dtype=lib.float32, device=device)
    options = OPTIMIZERS[optimizer]
    opt = (lib.optim.SGD if optimizer == "sgd" else lib.optim.AdamW)(params, **options)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(lib, F, params, data, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("model", list(MODELS))
def test_training_losses_equal_torch(device, model, optimizer):
    got = np.array(train(tp, model, optimizer, device))
    expected = np.array(train(torch, model, optimizer, torch_device(device)))
    np.testing.assert_allclose(got[:50], expected[:50], rtol=1e-5)
    np.testing.assert_allclose(got[-1], expected[-1], rtol=1e-3)
    assert got[-1] < got[0]
