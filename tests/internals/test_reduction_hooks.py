"""The optional backend hooks a loss's mean and ``mse_loss`` use where the device's backend has
them (cuda: ``reduce_axis``'s row kernels, ``elementwise_program``'s one kernel per chain of
elementwise ops): a mean over every element of a contiguous tensor is one row kernel, or for
float32/float64 the mean of its rows' means when one row is too long for the kernel, and a
repeated mean runs the kernels it kept; ``mse_loss`` and its float32 derivative are one program
each. Checked here on sim with NumPy stand-ins for the hooks, so the wiring is tested without a
GPU."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._runtime import dispatch as _dispatch
from tensorplay._tensor import elementwise as _elementwise
from tensorplay._tensor import reductions as _reductions
from support import to_numpy

pytestmark = pytest.mark.skipif(tp.accelerator.current_accelerator() is None,
                                reason="hooks are looked up on the accelerator backend")

ROW_LIMIT = 1000   # the stand-in's longest row: a longer one takes the rows' means


@pytest.fixture
def calls(monkeypatch):
    backend = _dispatch.backend_of(tp.device(tp.accelerator.current_accelerator().type, 0))
    seen = []

    def reduce_axis(op, shape, axis, dtype, acc, out):
        if op != "mean" or axis != len(shape) - 1 or shape[-1] > ROW_LIMIT:
            return None

        def launch(x, out_array):
            seen.append(("mean", x.shape))
            out_array[...] = x.astype(acc).mean(axis=-1).reshape(out_array.shape)
        return launch

    def elementwise_program(steps, compute, kinds, out):
        def launch(*operands):
            *externals, out_array = operands
            seen.append(("program", tuple(op for op, _ in steps), kinds))
            value = None
            for op, refs in steps:
                args = [value if ref == -1 else externals[ref] for ref in refs]
                value = getattr(np, {"sub": "subtract", "mul": "multiply"}[op])(*args)
            out_array[...] = value
        return launch

    monkeypatch.setattr(backend, "reduce_axis", reduce_axis, raising=False)
    monkeypatch.setattr(backend, "elementwise_program", elementwise_program, raising=False)
    for plans in (_elementwise._plans, _reductions._mean_plans):
        plans.clear()   # plans keep the kernels a hook gave
    yield seen
    for plans in (_elementwise._plans, _reductions._mean_plans):
        plans.clear()


def _dev():
    return tp.accelerator.current_accelerator().type


@pytest.mark.parametrize("shape, stages", [((2, 300), [(600,)]),
                                           ((4, 500), [(4, 500), (4,)]),
                                           ((3, 2, 400), [(6, 400), (6,)])])
def test_a_mean_of_every_element_runs_the_row_kernels(calls, shape, stages):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x = tp.tensor(a, device=_dev())
    for _ in range(2):   # the second call runs the kept kernels
        calls.clear()
        out = x.mean()
        tp.accelerator.synchronize()   # (sim runs its queued kernels)
        assert calls == [("mean", s) for s in stages]
        assert out.shape == () and out.dtype == tp.float32
        np.testing.assert_allclose(to_numpy(out), a.astype(np.float64).mean(), rtol=1e-6)
    keep = x.mean(dim=tuple(range(len(shape))), keepdim=True)
    assert keep.shape == (1,) * len(shape)


def test_a_half_mean_past_one_row_composes_instead_of_rounding_twice(calls):
    x = tp.ones(4, 500, dtype=tp.bfloat16, device=_dev())
    calls.clear()
    assert x.mean().item() == 1.0
    assert calls == []


def test_mse_loss_and_its_float32_derivative_are_one_program_each(calls):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    x = tp.tensor(a, device=_dev(), requires_grad=True)
    loss = tp.nn.functional.mse_loss(x, tp.tensor(b, device=_dev()))
    tp.accelerator.synchronize()
    assert calls == [("program", ("sub", "mul"), "aa"), ("mean", (128,))]
    np.testing.assert_allclose(loss.item(), ((a - b) ** 2).mean(), rtol=1e-6)
    calls.clear()
    loss.backward()
    tp.accelerator.synchronize()
    assert ("program", ("sub", "mul", "mul"), "aars") in calls
    np.testing.assert_allclose(to_numpy(x.grad), 2 * (a - b) / a.size, rtol=1e-5)
