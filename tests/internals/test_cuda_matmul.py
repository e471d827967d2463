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

from tensorplay.backends.cuda import _matmul, _skinny  # noqa: E402

HALF = {np.float16: np.float16, "bfloat16": ml_dtypes.bfloat16}

#: cuBLASLt itself (without nvmath-python the products go through CuPy and cannot be captured:
#: test_without_nvmath_* checks that path with cuBLASLt patched out)
needs_cublaslt = pytest.mark.skipif(not _matmul.available(),
                                    reason="nvmath-python (cuBLASLt) is not installed")


def _host(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.fixture(autouse=True)
def clean():
    yield
    cupy.cuda.Device().synchronize()
    _BACKEND.set_current_stream(_BACKEND.default_stream(0))


@needs_cublaslt
def test_engine_is_cublaslt_and_reported():
    assert _matmul.available(), _matmul.ENGINE
    assert _BACKEND.matrix_engine.startswith("cuBLASLt")
    assert _BACKEND.matmul_epilogues == {None, "relu", "gelu_tanh", "gelu", "silu"}


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


@needs_cublaslt
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


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_without_nvmath_eager_products_and_epilogues_go_through_cupy(monkeypatch, dtype):
    # the cuda backend without the matrix engine (nvmath-python missing): cupy.matmul, bfloat16
    # computed in float32 (cuBLAS through CuPy has none), bias and activation as kernels
    monkeypatch.setattr(_matmul, "_lt", None)
    monkeypatch.setattr(_matmul, "_direct", {})   # no cached cuBLASLt plan may answer
    ha, hb, hbias = _host((16, 64), dtype), _host((64, 24), dtype, 1), _host((24,), dtype, 2)
    wide = ha.astype(np.float64) @ hb.astype(np.float64)
    tol = 1e-4 if dtype in (np.float32, np.float64) else 5e-2
    got = _BACKEND.matmul(cupy.asarray(ha), cupy.asarray(hb))
    assert got.dtype == np.dtype(dtype) and got.shape == (16, 24)
    np.testing.assert_allclose(got.get().astype(np.float64), wide, rtol=tol, atol=tol * 4)
    out = cupy.empty((16, 24), dtype)
    _BACKEND.matmul_epilogue(cupy.asarray(ha), cupy.asarray(hb), out, cupy.asarray(hbias),
                             "relu")
    np.testing.assert_allclose(out.get().astype(np.float64),
                               np.maximum(wide + hbias.astype(np.float64), 0),
                               rtol=tol, atol=tol * 4)
    # a product into out= is remembered: the same operands go straight to CuPy next time
    product = cupy.empty((16, 24), dtype)
    for _ in range(2):
        product.fill(0)
        _BACKEND.matmul(cupy.asarray(ha), cupy.asarray(hb), product)
        np.testing.assert_allclose(product.get().astype(np.float64), wide, rtol=tol,
                                   atol=tol * 4)
    assert any(getattr(plan, "func", None) is _matmul._cupy_product
               for plan in _matmul._direct.values())


_ACTIVATIONS = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "gelu_tanh": _gelu_tanh,
                "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
                "silu": lambda x: x / (1 + np.exp(-x))}


@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("form", ["nn", "nt"])
@pytest.mark.parametrize("activation", sorted(_ACTIVATIONS, key=str))
def test_skinny_products_take_one_kernel_with_bias_and_activation(rows, form, activation):
    x = cupy.asarray(_host((rows, 136), np.float32))
    stored = cupy.asarray(_host((136, 40) if form == "nn" else (40, 136), np.float32, 1))
    w = stored if form == "nn" else stored.T
    out = cupy.empty((rows, 40), np.float32)
    assert _skinny.plan(x, w, out, True, activation) is not None
    expected = x.get().astype(np.float64) @ w.get().astype(np.float64)
    for seed in (2, 3):   # the second call takes the cached launcher with another bias
        bias = _host((40,), np.float32, seed)
        _BACKEND.matmul_epilogue(x, w, out, cupy.asarray(bias), activation)
        want = _ACTIVATIONS[activation](expected + bias)
        np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_BACKEND.matmul(x, w).get(), expected, rtol=1e-5, atol=1e-5)


def test_products_the_skinny_kernels_do_not_take_are_still_right():
    base = cupy.asarray(_host((20, 68), np.float32))
    w = cupy.asarray(_host((66, 24), np.float32, 1))
    bias = cupy.asarray(_host((24,), np.float32, 2))
    cases = [base[:9, :64], base[:8, :66], base[:8, 1:65], base[:8, :64].astype(np.float64)]
    for x in cases:
        ww = w[:x.shape[1]].astype(x.dtype)
        out = cupy.empty((x.shape[0], 24), x.dtype)
        if x.dtype == np.float32:
            assert _skinny.plan(x, ww, out, True, "gelu") is None
            _BACKEND.matmul_epilogue(x, ww, out, bias, "gelu")
            want = _ACTIVATIONS["gelu"](x.get().astype(np.float64) @ ww.get() + bias.get())
        else:
            _BACKEND.matmul(x, ww, out)
            want = x.get() @ ww.get()
        np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)


@needs_cublaslt
def test_skinny_products_inside_a_raw_capture_replay():
    hx = _host((8, 64), np.float32)
    x = cupy.zeros((8, 64), np.float32)
    w = cupy.asarray(_host((64, 32), np.float32, 1))
    bias = cupy.asarray(_host((32,), np.float32, 2))
    out = cupy.empty((8, 32), np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        _BACKEND.matmul_epilogue(x, w, out, bias, "silu")   # compiled outside the capture
        stream.begin_capture()
        _BACKEND.matmul_epilogue(x, w, out, bias, "silu")
        graph = stream.end_capture()
    x[...] = cupy.asarray(hx)
    cupy.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    want = _ACTIVATIONS["silu"](hx.astype(np.float64) @ w.get() + bias.get())
    np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)
