"""The cuda backend's fused Adam update (``backends/cuda/_optim.py``) against the same update
written with CuPy's array calls (``_tensor.optimizers._adam_xp``, what every other backend
runs): every option (AMSGrad, decoupled or L2 weight decay, maximize), buffer lengths around
the kernel's block of elements, both parameter dtypes and both scalar dtypes, several steps.
Skipped without CuPy and a visible GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from support import cuda_backend_or_skip

_BACKEND = cuda_backend_or_skip("the cuda backend's fused Adam update")

import cupy  # noqa: E402

from tensorplay._tensor.optimizers import _adam_xp  # noqa: E402
from tensorplay.backends.cuda import _optim  # noqa: E402


def _state(n: int, dtype, seed: int):
    rng = np.random.default_rng(seed)
    param = cupy.asarray(rng.standard_normal(n).astype(dtype))
    exp_avg = cupy.asarray((rng.standard_normal(n) * 0.1).astype(dtype))
    exp_avg_sq = cupy.asarray(np.abs(rng.standard_normal(n) * 0.01).astype(dtype))
    max_sq = cupy.asarray(np.abs(rng.standard_normal(n) * 0.02).astype(dtype))
    return [param, exp_avg, exp_avg_sq, max_sq]


@pytest.mark.parametrize("n", [1, 255, 1024, 1025, 4099, 300_001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("amsgrad, decoupled, maximize, weight_decay", [
    (False, True, False, 1e-2), (True, False, False, 1e-2), (False, False, True, 0.0),
    (True, True, True, 0.1)])
def test_matches_the_array_formula(n, dtype, amsgrad, decoupled, maximize, weight_decay):
    rng = np.random.default_rng(n)
    fused, reference = _state(n, dtype, 1), _state(n, dtype, 1)
    scalar = np.float64 if dtype == np.float64 else np.float32
    lr = cupy.asarray(np.array([1e-3], scalar))
    for t in (1, 2, 7):
        grad = cupy.asarray(rng.standard_normal(n).astype(dtype))
        step = cupy.asarray(np.array([t], np.float32))
        options = (0.9, 0.999, 1e-8, weight_decay, decoupled, maximize)
        assert _optim.adam_update(fused[0], grad, fused[1], fused[2],
                                  fused[3] if amsgrad else None, step, lr, *options)
        _adam_xp(cupy, reference[0], grad, reference[1], reference[2],
                 reference[3] if amsgrad else None, step, lr, *options)
    tolerance = 1e-12 if dtype == np.float64 else 1e-5
    for got, expected in zip(fused, reference):
        np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(expected), rtol=tolerance,
                                   atol=tolerance)


def test_scalar_dtypes_and_what_it_declines():
    for step_dtype, lr_dtype in itertools.product((np.float32, np.float64), repeat=2):
        fused, reference = _state(3000, np.float32, 2), _state(3000, np.float32, 2)
        grad = cupy.linspace(-1, 1, 3000, dtype=np.float32)
        step = cupy.asarray(np.array([3], step_dtype))
        lr = cupy.asarray(np.array([0.01], lr_dtype))
        options = (0.8, 0.99, 1e-6, 0.0, True, False)
        assert _optim.adam_update(fused[0], grad, fused[1], fused[2], None, step, lr, *options)
        _adam_xp(cupy, reference[0], grad, reference[1], reference[2], None, step, lr, *options)
        np.testing.assert_allclose(cupy.asnumpy(fused[0]), cupy.asnumpy(reference[0]),
                                   rtol=1e-5)
    half = cupy.ones(8, np.float16)
    one = cupy.ones(1, np.float32)
    assert not _optim.adam_update(half, half, half, half, None, one, one, 0.9, 0.999, 1e-8,
                                  0.0, True, False)
    assert cupy.asnumpy(half).tolist() == [1.0] * 8   # declined: nothing touched
