"""The cuda backend's cuBLASLt products (``backends/cuda/_matmul.py``): the hooks called
directly on CuPy arrays, eager and inside a raw capture, with epilogues (runs only on a GPU)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from support import cuda_backend_or_skip

_BACKEND = cuda_backend_or_skip("the cuda backend's matmul")

import cupy  # noqa: E402
import ml_dtypes  # noqa: E402

from tensorplay.backends.cuda import _matmul  # noqa: E402

HALF = {np.float16: np.float16, "bfloat16": ml_dtypes.bfloat16}


def _host(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.fixture(autouse=True)
def clean():
    yield
    cupy.cuda.Device().synchronize()
    _BACKEND.set_current_stream(_BACKEND.default_stream(0))


def test_engine_is_cublaslt_and_reported():
    assert _matmul.available(), _matmul.ENGINE
    assert _BACKEND.matrix_engine.startswith("cuBLASLt")
    assert _BACKEND.matmul_epilogues == {None, "relu", "gelu_tanh"}


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh"])
def test_epilogue_values_and_a_second_bias_on_the_same_plan(dtype, activation):
    a, b = _host((8, 64), dtype), _host((64, 48), dtype, 1)
    expected_product = a.astype(np.float64) @ b.astype(np.float64)
    out = cupy.empty((8, 48), dtype)
    apply = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "gelu_tanh": _gelu_tanh}
    tol = 1e-4 if dtype == np.float32 else 5e-2
    for seed in (2, 3):   # the plan is reused; its bias pointer must follow the call
        bias = _host((48,), dtype, seed)
        _BACKEND.matmul_epilogue(cupy.asarray(a), cupy.asarray(b), out, cupy.asarray(bias),
                                 activation)
        want = apply[activation](expected_product + bias.astype(np.float64))
        np.testing.assert_allclose(out.get().astype(np.float64), want, rtol=tol, atol=tol * 4)


def test_transposed_weight_takes_no_copy_and_strided_out_is_written():
    w = cupy.asarray(_host((48, 64), np.float32))
    x = cupy.asarray(_host((8, 64), np.float32, 1))
    got = _BACKEND.matmul(x, w.T)
    np.testing.assert_allclose(got.get(), x.get() @ w.get().T, rtol=1e-4, atol=1e-4)
    out = cupy.zeros((48, 8), np.float32).T          # an F-ordered out
    assert _BACKEND.matmul(x, w.T, out) is out
    np.testing.assert_allclose(out.get(), x.get() @ w.get().T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
def test_products_inside_a_raw_capture_replay(dtype):
    ha, hb = _host((3, 6, 40), dtype), _host((40, 24), dtype, 1)
    a, b = cupy.asarray(np.zeros_like(ha)), cupy.asarray(hb)
    out = cupy.empty((3, 6, 24), dtype)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        _BACKEND.matmul(a, b, out)            # plan and workspace outside the capture
        stream.begin_capture()
        _BACKEND.matmul(a, b, out)
        graph = stream.end_capture()
    a[...] = cupy.asarray(ha)
    cupy.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(out.get(), ha @ hb, rtol=tol, atol=tol)


def test_integer_products_use_cupys_kernels():
    a = cupy.arange(12, dtype=cupy.int64).reshape(3, 4)
    np.testing.assert_array_equal(_BACKEND.matmul(a, a.T).get(), a.get() @ a.get().T)
