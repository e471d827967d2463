"""Gradients against ``torch.autograd``: every case of the finite-difference table
(``tests/autograd/test_gradcheck.py``) run once in tensorplay and once in torch on the same
inputs, in float64 and float32, from two draws of inputs; both gradients must agree.

The case functions are written with tensorplay's names, which are PyTorch's: each runs again with
``tp`` and ``F`` bound to ``torch`` and ``torch.nn.functional``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorplay as tp  # noqa: E402
from autograd import test_gradcheck as table  # noqa: E402
from support import to_numpy  # noqa: E402
from torch_differential._compare import torch_device  # noqa: E402

#: cases whose tensorplay and torch results are random (their draws differ by design)
RANDOM = {"dropout"}
TOLERANCE = {"float64": (1e-9, 1e-11), "float32": (2e-4, 2e-5)}


def _torch_constants(device: str):
    cache: dict = {}

    def idx(values, _device):
        key = ("idx", repr(values))
        if key not in cache:
            cache[key] = torch.tensor(values, dtype=torch.int64, device=device)
        return cache[key]

    def mask(values, _device):
        key = ("mask", repr(values))
        if key not in cache:
            cache[key] = torch.tensor(values, dtype=torch.bool, device=device)
        return cache[key]
    return idx, mask


def _in_torch(fn, device: str):
    """``fn`` with the names it reads from the table's module bound to torch's."""
    idx, mask = _torch_constants(device)
    scope = dict(fn.__globals__, tp=torch, F=torch.nn.functional, idx=idx, mask=mask)
    for name, value in list(scope.items()):   # the table's helpers (_setitem ...) too
        if isinstance(value, types.FunctionType) and value.__module__ == table.__name__ and \
                name.startswith("_"):
            scope[name] = types.FunctionType(value.__code__, scope, name, value.__defaults__)
    return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)


CASES = [case for case in table.CASES if case[0] not in RANDOM]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name, specs, fn, capturable", CASES, ids=[c[0] for c in CASES])
def test_gradients_equal_torch_autograd(device, name, specs, fn, capturable, dtype, seed):
    inputs = table.make_inputs(specs, device, seed=seed)
    if dtype == "float32":
        inputs = [t.detach().float().requires_grad_() for t in inputs]
    weights = [w.to(inputs[0].dtype) for w in table._weights(fn, device, inputs)]
    got = tp.autograd.grad(table._scalar(fn, device, inputs, weights), inputs)
    where = torch_device(device)
    t_inputs = [torch.tensor(to_numpy(t), device=where, requires_grad=True) for t in inputs]
    t_weights = [torch.tensor(to_numpy(w), device=where, dtype=t_inputs[0].dtype)
                 for w in weights]
    t_fn = _in_torch(fn, where)
    out = t_fn(where, *t_inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * w).sum() for o, w in zip(outs, t_weights))
    expected = torch.autograd.grad(loss, t_inputs)
    rtol, atol = TOLERANCE[dtype]
    for position, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(to_numpy(g), e.detach().cpu().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{name}: input {position} ({dtype})")
