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

from tensorplay.backends.cuda import _matmul, _skinny, _small  # noqa: E402

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
@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_strided_outputs_are_written_in_place_by_one_product(monkeypatch, dtype):
    """An output whose rows or matrices are strided (an attention's heads laid out (B, L, H,
    D), rows with padding) is written by cuBLASLt in place, with no scratch and copy; outputs
    it cannot describe still come out right through the scratch."""
    dtype = HALF.get(dtype, dtype)
    tol = 1e-4 if dtype == np.float32 else 2e-2
    empties = []
    real_empty = cupy.empty
    monkeypatch.setattr(_matmul.cupy, "empty",
                        lambda *args, **kw: empties.append(args[0]) or real_empty(*args, **kw))
    probs = cupy.asarray(_host((1, 12, 80, 96), dtype))
    values = cupy.asarray(_host((1, 12, 96, 64), dtype, 1))
    expected = probs.get().astype(np.float64) @ values.get().astype(np.float64)
    heads = cupy.zeros((1, 80, 12, 64), dtype)
    out = heads.transpose(0, 2, 1, 3)                 # (B, H, L, D) over (B, L, H, D) memory
    for _ in range(2):                                # planned, then the kept plan
        empties.clear()
        assert _BACKEND.matmul(probs, values, out) is out
        assert not [shape for shape in empties if shape == out.shape]
        np.testing.assert_allclose(out.get().astype(np.float64), expected, rtol=tol, atol=tol)
    padded = cupy.zeros((80, 72), dtype)[:, :64]      # rows 72 apart
    a, b = cupy.asarray(_host((80, 32), dtype, 2)), cupy.asarray(_host((32, 64), dtype, 3))
    assert _BACKEND.matmul(a, b, padded) is padded
    np.testing.assert_allclose(padded.get().astype(np.float64),
                               a.get().astype(np.float64) @ b.get().astype(np.float64),
                               rtol=tol, atol=tol)
    overlapping = cupy.lib.stride_tricks.as_strided(   # rows 8 apart, 64 wide: no in place
        cupy.zeros(80 * 8 + 64, dtype), (80, 64), (8 * np.dtype(dtype).itemsize,
                                                    np.dtype(dtype).itemsize))
    assert _matmul._output_strides(overlapping, (), 80, 64) is None


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


@pytest.mark.parametrize("shape", [(128, 128, 128), (64, 64, 64), (1, 768, 96)],
                         ids=["cublaslt", "small", "skinny"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_launcher_repeats_the_kept_product_for_arrays_laid_out_alike(monkeypatch, shape,
                                                                       with_bias):
    """``launcher`` keeps what the product ran (one cuBLASLt call, a small or skinny kernel) for
    arrays laid out alike; another alignment, or kept plans forgotten since, take matmul."""
    m, k, n = shape
    a, b = cupy.asarray(_host((m, k), np.float32)), cupy.asarray(_host((k, n), np.float32, 1))
    bias = cupy.asarray(_host((n,), np.float32, 2)) if with_bias else None
    out = cupy.empty((m, n), np.float32)
    _matmul.matmul(a, b, out, "highest", bias, with_bias, None)
    launch = _matmul.launcher(a, b, out, bias, None, "highest")
    assert launch is not None and launch.tp_arguments_only

    def check(a, b, out, seed):
        fresh = cupy.asarray(_host((m, k), np.float32, seed))
        a[...] = fresh
        bias_now = cupy.asarray(_host((n,), np.float32, seed + 1)) if with_bias else None
        assert launch(a, b, bias_now, out) is out
        want = fresh.get().astype(np.float64) @ b.get()
        if with_bias:
            want = want + bias_now.get()
        np.testing.assert_allclose(out.get(), want, rtol=1e-4, atol=1e-4)

    check(a, b, out, 3)
    check(cupy.empty_like(a), b, cupy.empty_like(out), 4)          # other buffers
    flat = cupy.empty(m * k + 1, np.float32)
    check(flat[1:].reshape(m, k), b, out, 5)                      # off the kept alignment
    monkeypatch.setattr(_matmul, "_generation", _matmul._generation + 1)
    check(a, b, out, 6)                                           # plans forgotten since


def test_no_launcher_for_a_product_that_copied_its_operands():
    # strided columns: copied first (a product too large for the small kernel, which takes
    # any strides)
    a = cupy.asarray(_host((512, 512), np.float32))[:, ::2]
    b = cupy.asarray(_host((256, 64), np.float32, 1))
    out = cupy.empty((512, 64), np.float32)
    assert _small.plan(a, b, out, False, None) is None
    _matmul.matmul(a, b, out)
    assert _matmul.launcher(a, b, out, None, None, "highest") is None


def test_integer_products_use_cupys_kernels():
    a = cupy.arange(12, dtype=cupy.int64).reshape(3, 4)
    np.testing.assert_array_equal(_BACKEND.matmul(a, a.T).get(), a.get() @ a.get().T)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_without_nvmath_eager_products_and_epilogues_go_through_cupy(monkeypatch, dtype):
    # the cuda backend without the matrix engine (nvmath-python missing): cupy.matmul, bfloat16
    # computed in float32 (cuBLAS through CuPy has none), bias and activation as kernels
    monkeypatch.setattr(_matmul, "_lt", None)
    monkeypatch.setattr(_matmul, "_direct", {})   # no cached cuBLASLt plan may answer
    monkeypatch.setattr(_small, "plan", lambda *args: None)   # (products this small)
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


# -- half-precision skinny products (a decode step's shapes) ---------------------------------------
_HALVES = [np.float16, ml_dtypes.bfloat16]


def _half_tolerance(dtype) -> float:
    """Twice the output's rounding (float32 accumulation adds far less at these sizes)."""
    return 2.0 ** -7 if dtype == ml_dtypes.bfloat16 else 2.0 ** -10


def _scaled(shape, dtype, seed, k):
    """Random values of a layer's weight for an inner size k (so products stay near 1)."""
    return (np.random.default_rng(seed).standard_normal(shape) / np.sqrt(k)).astype(dtype)


def _weight(form: str, k: int, n: int, dtype, seed: int, pad: int = 0):
    """A (k, n) CuPy weight: stored (k, n + pad) and sliced ("nn"), or the transpose of a
    row-major (n, k + pad) one sliced to k ("nt", as ``linear`` holds it)."""
    if form == "nn":
        return cupy.asarray(_scaled((k, n + pad), dtype, seed, k))[:, :n]
    return cupy.asarray(_scaled((n, k + pad), dtype, seed, k))[:, :k].T


def _poison(array) -> None:
    """Fill a CuPy array with NaN (copied from the host: no CuPy kernel of its dtype needed)."""
    array.set(np.full(array.shape, np.nan, array.dtype))


def _want(x, w, bias=None, activation=None, residual=None):
    value = x.get().astype(np.float64) @ w.get().astype(np.float64)
    if bias is not None:
        value = value + bias.get().astype(np.float64)
    value = _ACTIVATIONS[activation](value)
    if residual is not None:
        value = value + residual.get().astype(np.float64)
    return value


def _close(out, want, dtype):
    tol = _half_tolerance(dtype)
    np.testing.assert_allclose(out.get().astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", _HALVES)
@pytest.mark.parametrize("form", ["nn", "nt"])
@pytest.mark.parametrize("rows", range(1, 9))
def test_half_skinny_products_take_one_kernel(dtype, form, rows):
    # GPT-2's decode products (k 768 or 3072), a k of no 256-multiple, and n with a tail
    for k, n in ((768, 2304), (3072, 768), (40, 5)):
        x = cupy.asarray(_host((rows, k), dtype, rows))
        w = _weight(form, k, n, dtype, 1, pad=(-n) % 8 if form == "nn" else 0)
        out = cupy.empty((rows, n), dtype)
        for with_bias, activation in ((False, None), (True, None), (True, "gelu_tanh")):
            assert _skinny.plan(x, w, out, with_bias, activation) is not None, (k, n)
            bias = cupy.asarray(_host((n,), dtype, 2)) if with_bias else None
            for _ in range(2):   # the second call takes the remembered launcher
                _poison(out)
                if with_bias:
                    _BACKEND.matmul_epilogue(x, w, out, bias, activation)
                else:
                    _BACKEND.matmul(x, w, out)
                _close(out, _want(x, w, bias, activation), dtype)


@pytest.mark.parametrize("dtype", _HALVES)
@pytest.mark.parametrize("form", ["nn", "nt"])
def test_half_skinny_lm_head_width(dtype, form):
    # GPT-2's LM head: 768 x 50257, its width a multiple of nothing ("nn" needs its row stride
    # padded to a multiple of 8 elements; a contiguous one goes to cuBLASLt)
    k, n = 768, 50257
    w = _weight(form, k, n, dtype, 1, pad=7 if form == "nn" else 0)
    for rows in (1, 3, 8):
        x = cupy.asarray(_host((rows, k), dtype, rows))
        out = cupy.empty((rows, n), dtype)
        _poison(out)
        assert _skinny.plan(x, w, out, False, None) is not None
        _BACKEND.matmul(x, w, out)
        _close(out, _want(x, w), dtype)
    if form == "nn":
        contiguous = cupy.asarray(_scaled((k, n), dtype, 1, k))
        assert _skinny.plan(x, contiguous, out, False, None) is None
        _close(_BACKEND.matmul(x, contiguous), _want(x, contiguous), dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("form", ["nn", "nt"])
@pytest.mark.parametrize("rows", [1, 5, 8])
def test_skinny_residual_through_matmul_residual(dtype, form, rows):
    k, n = (768, 2304) if dtype != np.float32 else (128, 40)
    x = cupy.asarray(_host((rows, k), dtype, rows))
    w = _weight(form, k, n, dtype, 1)
    bias = cupy.asarray(_host((n,), dtype, 2))
    out = cupy.empty((rows, n), dtype)
    assert _skinny.plan(x, w, out, True, None, True) is not None
    assert _skinny.plan(x, w, out, True, "gelu_tanh", True) is None   # no activation with it
    tol = _half_tolerance(dtype) if dtype != np.float32 else 1e-5
    for seed, with_bias in ((3, True), (4, True), (5, False)):   # the launcher follows each call
        residual = cupy.asarray(_host((rows, n), dtype, seed))
        _poison(out)
        _BACKEND.matmul_residual(x, w, out, bias if with_bias else None, residual)
        want = _want(x, w, bias if with_bias else None, None, residual)
        np.testing.assert_allclose(out.get().astype(np.float64), want, rtol=tol, atol=tol)
    # the residual may be the output itself (accumulate_product_ adds a product into .grad)
    accumulated = cupy.asarray(_host((rows, n), dtype, 6))
    want = _want(x, w, None, None, accumulated)
    _BACKEND.matmul_residual(x, w, accumulated, None, accumulated)
    np.testing.assert_allclose(accumulated.get().astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", _HALVES)
def test_half_products_the_skinny_kernels_do_not_take_fall_back(dtype):
    base = cupy.asarray(_host((12, 800), dtype))
    odd = cupy.asarray(_host((12, 804), dtype))                 # rows 1608 bytes apart
    stored = cupy.asarray(_scaled((2304, 776), dtype, 1, 768))  # "nt" rows of 776 elements
    nn = cupy.asarray(_scaled((768, 2312), dtype, 2, 768))      # "nn" rows of 2312 elements
    nn_odd = cupy.asarray(_scaled((768, 2308), dtype, 3, 768))  # "nn" rows 4616 bytes apart
    cases = [
        (base[:4, 1:769], stored[:, :768].T),    # "nt": x starts 2 bytes past 16-byte alignment
        (odd[:4, :768], stored[:, :768].T),      # "nt": x's rows not 16 bytes apart
        (base[:4, :768], stored[:, 1:769].T),    # "nt": the weight's start likewise
        (base[:4, :44], stored[:24, :44].T),     # "nt": k not a multiple of 8
        (base[:4, :768], nn_odd[:, :2304]),      # "nn": the weight's rows likewise
        (base[:4, :768], nn[:, ::2]),            # no unit stride in the weight
        (base[:9, :768], stored[:, :768].T),     # 9 rows
    ]
    for x, w in cases:
        out = cupy.empty((x.shape[0], w.shape[1]), dtype)
        assert _skinny.plan(x, w, out, False, None) is None, (x.strides, w.strides)
        _BACKEND.matmul(x, w, out)
        _close(out, _want(x, w), dtype)
    # "nn" reads x an element at a time: an unaligned x is taken
    x, w = base[:4, 1:769], nn[:, :2304]
    out = cupy.empty((4, 2304), dtype)
    assert _skinny.plan(x, w, out, False, None) is not None
    _BACKEND.matmul(x, w, out)
    _close(out, _want(x, w), dtype)


def test_half_skinny_products_without_nvmath(monkeypatch):
    # the skinny kernels need no cuBLASLt: without nvmath-python half products of a few rows
    # still take them (and so can be captured)
    monkeypatch.setattr(_matmul, "_lt", None)
    monkeypatch.setattr(_matmul, "_direct", {})
    dtype = ml_dtypes.bfloat16
    x = cupy.asarray(_host((2, 768), dtype))
    w = _weight("nt", 768, 2304, dtype, 1)
    bias = cupy.asarray(_host((2304,), dtype, 2))
    residual = cupy.asarray(_host((2, 2304), dtype, 3))
    out = cupy.empty((2, 2304), dtype)
    _BACKEND.matmul_residual(x, w, out, bias, residual)
    _close(out, _want(x, w, bias, None, residual), dtype)
    assert not any(getattr(plan, "func", None) is _matmul._cupy_product
                   for plan in _matmul._direct.values())


@pytest.mark.parametrize("dtype", _HALVES)
def test_half_skinny_products_inside_a_raw_capture_replay(dtype):
    # a decode step's products: qkv with its bias, the MLP's with GELU, a projection with the
    # residual, and the LM head ("nt", no bias)
    hx = _host((1, 768), dtype)
    x = cupy.zeros((1, 768), dtype)
    w_qkv, w_fc = _weight("nn", 768, 2304, dtype, 1), _weight("nn", 768, 3072, dtype, 2)
    w_proj, wte = _weight("nn", 3072, 768, dtype, 3), _weight("nt", 768, 50257, dtype, 4)
    b_qkv, b_fc = cupy.asarray(_host((2304,), dtype, 5)), cupy.asarray(_host((3072,), dtype, 6))
    b_proj = cupy.asarray(_host((768,), dtype, 7))
    hidden = cupy.asarray(_host((1, 3072), dtype, 8))
    residual = cupy.asarray(_host((1, 768), dtype, 9))
    qkv, fc = cupy.empty((1, 2304), dtype), cupy.empty((1, 3072), dtype)
    proj, logits = cupy.empty((1, 768), dtype), cupy.empty((1, 50257), dtype)

    def step():
        _BACKEND.matmul_epilogue(x, w_qkv, qkv, b_qkv, None)
        _BACKEND.matmul_epilogue(x, w_fc, fc, b_fc, "gelu_tanh")
        _BACKEND.matmul_residual(hidden, w_proj, proj, b_proj, residual)
        _BACKEND.matmul(x, wte, logits)

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        step()                   # compiled and planned outside the capture
        stream.begin_capture()
        step()
        graph = stream.end_capture()
    for array in (qkv, fc, proj, logits):
        _poison(array)
    x.set(hx)
    cupy.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    _close(qkv, _want(x, w_qkv, b_qkv), dtype)
    _close(fc, _want(x, w_fc, b_fc, "gelu_tanh"), dtype)
    _close(proj, _want(hidden, w_proj, b_proj, None, residual), dtype)
    _close(logits, _want(x, wte), dtype)


# -- small products (_small.py) ------------------------------------------------------------------
_SMALL_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _small_tolerance(dtype) -> float:
    return {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}.get(
        np.dtype(dtype)) or _half_tolerance(dtype)


def _small_close(out, want, dtype):
    tol = _small_tolerance(dtype)
    np.testing.assert_allclose(out.get().astype(np.float64), want, rtol=tol, atol=tol)


def _kept_small() -> bool:
    return bool(_matmul._direct) and all(getattr(kept, "__module__", "").endswith("._small")
               for kept in _matmul._direct.values())


@pytest.mark.parametrize("dtype", _SMALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("form", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(9, 7, 13), (32, 32, 32), (17, 96, 20), (40, 1, 5)])
def test_small_products_take_one_kernel_with_bias_activation_or_residual(monkeypatch, dtype,
                                                                         form, shape):
    """Products of small matrices (past the skinny kernels' 8 rows) are one tiled kernel with
    any strides, the bias, an activation or a residual applied before the store, for every
    float dtype, right at tile edges; a second call takes the kept launcher."""
    monkeypatch.setattr(_matmul, "_direct", {})   # what this test's products keep, alone
    m, k, n = shape
    x = cupy.asarray(_scaled((m, k), dtype, 1, k))
    w = _weight(form, k, n, dtype, 2)
    out = cupy.empty((m, n), dtype)
    assert _small.plan(x, w, out, False, None) is not None
    for seed in (3, 4):
        bias = cupy.asarray(_host((n,), dtype, seed))
        for activation in sorted(_ACTIVATIONS, key=str):
            _poison(out)
            _BACKEND.matmul_epilogue(x, w, out, bias, activation)
            _small_close(out, _want(x, w, bias, activation), dtype)
        residual = cupy.asarray(_host((m, n), dtype, seed + 10))
        _poison(out)
        _BACKEND.matmul_residual(x, w, out, bias, residual)
        _small_close(out, _want(x, w, bias, None, residual), dtype)
        _poison(out)
        _BACKEND.matmul(x, w, out)
        _small_close(out, _want(x, w), dtype)
    assert _kept_small()


def test_products_past_the_small_limits_are_still_right():
    """Past MAX_K or MAX_MULTIPLY_ADDS, with batch dimensions, negative strides or mixed
    dtypes the small kernel takes nothing; the products still come out right."""
    dtype = np.float32
    cases = [(64, _small.MAX_K + 4, 16), (256, 256, 64), (128, 128, 128), (9, 64, 64)]
    for m, k, n in cases:
        x, w = cupy.asarray(_scaled((m, k), dtype, 1, k)), _weight("nn", k, n, dtype, 2)
        out = cupy.empty((m, n), dtype)
        taken = m * n * k <= _small.MAX_MULTIPLY_ADDS[np.dtype(dtype)] and k <= _small.MAX_K
        assert (_small.plan(x, w, out, False, None) is not None) == taken
        _BACKEND.matmul(x, w, out)
        _small_close(out, _want(x, w), dtype)
    x = cupy.asarray(_scaled((16, 32), dtype, 3, 32))
    w = cupy.asarray(_scaled((32, 24), dtype, 4, 32))
    out = cupy.empty((16, 24), dtype)
    assert _small.plan(x[::-1], w, out, False, None) is None           # negative stride
    assert _small.plan(x, w.astype(np.float64), out, False, None) is None
    assert _small.plan(x, w, out.T.copy().T, False, None) is None      # an F-ordered out
    assert _small.plan(x.astype(np.complex64), w.astype(np.complex64),
                       out.astype(np.complex64), False, None) is None
    assert _small.plan(x, w, out, False, "gelu", True) is None         # residual + activation
    batched = cupy.asarray(_scaled((3, 16, 32), dtype, 5, 32))
    got = _BACKEND.matmul(batched, cupy.stack([w] * 3))
    np.testing.assert_allclose(got.get(), batched.get() @ w.get(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_small_products_inside_a_raw_capture_give_the_eager_bits(dtype):
    """The small kernel runs eagerly and inside captures alike: a replay writes exactly what
    the eager call wrote."""
    hx = _scaled((24, 32), dtype, 1, 32)
    x = cupy.zeros((24, 32), dtype)
    w = _weight("nt", 32, 40, dtype, 2)
    bias = cupy.asarray(_host((40,), dtype, 3))
    out = cupy.empty((24, 40), dtype)
    assert _small.plan(x, w, out, True, "gelu_tanh") is not None
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        _BACKEND.matmul_epilogue(x, w, out, bias, "gelu_tanh")   # compiled outside the capture
        stream.begin_capture()
        _BACKEND.matmul_epilogue(x, w, out, bias, "gelu_tanh")
        graph = stream.end_capture()
    x.set(hx)
    eager = cupy.empty_like(out)
    _BACKEND.matmul_epilogue(x, w, eager, bias, "gelu_tanh")
    cupy.cuda.Device().synchronize()
    _poison(out)
    graph.launch(stream)
    stream.synchronize()
    assert (out.view(np.uint8) == eager.view(np.uint8)).all()
    _small_close(out, _want(x, w, bias, "gelu_tanh"), dtype)
