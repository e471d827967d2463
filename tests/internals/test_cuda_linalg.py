"""The cuda backend's capture-safe matmul and one-kernel erf (runs only on a machine with a GPU).

Three ways in: the GEMM kernel called directly (``_linalg._captured_matmul``, no capture), the
backend's ``matmul`` inside a raw CuPy capture (inputs and ``out`` preallocated, so nothing
allocates while the stream captures), and ``a @ b`` inside ``tensorplay.accelerator.Graph``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from support import cuda_backend_or_skip

_BACKEND = cuda_backend_or_skip("the cuda backend's matmul and erf")

import cupy  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay.backends.cuda import _linalg  # noqa: E402

FLOATS = [np.float16, np.float32, np.float64]

# (a shape, b shape, transpose a, transpose b): transposed operands are non-contiguous views.
CASES = [
    ((5,), (5,), False, False),
    ((5,), (5, 7), False, False),
    ((6, 5), (5,), False, False),
    ((3, 6, 5), (5,), False, False),
    ((5,), (2, 5, 7), False, False),
    ((2, 1, 6, 5), (3, 5, 7), False, False),          # batch broadcast both ways
    ((4, 33, 65), (65, 17), True, True),              # ragged tiles, both transposed
    ((31, 64), (64, 33), True, False),
    ((8, 512), (512, 512), False, False),
    ((2, 3, 4, 5, 6, 7), (1, 3, 1, 5, 7, 2), False, False),   # more batch dims than the kernel
    ((70000, 2, 3), (3, 2), False, False),            # batch beyond gridDim.z
    ((0, 3), (3, 4), False, False),
    ((3, 0), (0, 4), False, False),                   # empty k: zeros
]
CASE_IDS = [f"{a}@{b}{'T' if ta else ''}{'T' if tb else ''}" for a, b, ta, tb in CASES]


@pytest.fixture(autouse=True)
def clean():
    yield
    cupy.cuda.Device().synchronize()
    _BACKEND.set_current_stream(_BACKEND.default_stream(0))


def _host(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _device(host, transpose):
    if not transpose or host.ndim < 2:
        return cupy.asarray(host)
    flipped = cupy.asarray(np.ascontiguousarray(np.swapaxes(host, -1, -2)))
    view = cupy.swapaxes(flipped, -1, -2)
    assert not view.flags.c_contiguous or min(view.shape[-2:]) <= 1
    return view


def _expected(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _close(got, want, dtype, k):
    tol = {np.float16: 2e-2, np.float32: 2e-5, np.float64: 1e-12}[np.dtype(dtype).type]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol,
                               atol=tol * max(1.0, math.sqrt(k)))


def _operands(case, dtype):
    a_shape, b_shape, ta, tb = case
    ha, hb = _host(a_shape, dtype, 1), _host(b_shape, dtype, 2)
    return ha, hb, _device(ha, ta), _device(hb, tb)


def _capture(work):
    """Capture ``work()`` on a fresh non-blocking stream; launch the graph once."""
    cupy.cuda.Device().synchronize()   # inputs were written on the legacy stream
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            work()
        finally:
            graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    return graph, stream


# -- the kernel itself ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gemm_kernel_matches_numpy(case, dtype):
    ha, hb, a, b = _operands(case, dtype)
    got = _linalg._captured_matmul(a, b, None)
    assert got.dtype == dtype and got.shape == _expected(ha, hb).shape
    _close(got.get(), _expected(ha, hb), dtype, a.shape[-1])


@pytest.mark.parametrize("dtype", FLOATS)
def test_gemm_kernel_writes_a_strided_out(dtype):
    ha, hb = _host((3, 40, 50), dtype, 3), _host((50, 36), dtype, 4)
    out = cupy.zeros((3, 36, 40), dtype).swapaxes(-1, -2)
    assert _linalg._captured_matmul(cupy.asarray(ha), cupy.asarray(hb), out) is out
    _close(out.get(), _expected(ha, hb), dtype, 50)


def test_gemm_kernel_handles_out_overlapping_an_operand():
    ha, hb = _host((16, 16), np.float32, 5), _host((16, 16), np.float32, 6)
    a, b = cupy.asarray(ha), cupy.asarray(hb)
    _linalg._captured_matmul(a, b, a)
    _close(a.get(), _expected(ha, hb), np.float32, 16)


def test_gemm_kernel_promotes_mixed_floats_and_casts_into_out():
    ha, hb = _host((9, 7), np.float16, 7), _host((7, 5), np.float32, 8)
    out = cupy.empty((9, 5), np.float64)
    _linalg._captured_matmul(cupy.asarray(ha), cupy.asarray(hb), out)
    _close(out.get(), _expected(ha, hb), np.float32, 7)


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3, 4), (3, 4, 5)), ((), (3,))])
def test_gemm_kernel_rejects_bad_shapes(shapes):
    a, b = (cupy.ones(s, np.float32) for s in shapes)
    with pytest.raises(ValueError, match="matmul"):
        _linalg._captured_matmul(a, b, None)


def test_gemm_kernel_rejects_a_wrong_out_shape():
    a, b = cupy.ones((3, 4), np.float32), cupy.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"out has shape \(5, 3\)"):
        _linalg._captured_matmul(a, b, cupy.empty((5, 3), np.float32))


# -- outside a capture: cuBLAS --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.complex64, np.int32])
def test_matmul_outside_capture_is_cupys(dtype):
    assert not _linalg.is_capturing()
    ha = (np.arange(12) % 5).reshape(3, 4).astype(dtype)
    hb = (np.arange(20) % 3).reshape(4, 5).astype(dtype)
    got = _BACKEND.matmul(cupy.asarray(ha), cupy.asarray(hb))
    np.testing.assert_allclose(got.get(), ha @ hb, rtol=1e-3)


# -- inside a raw CuPy capture --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != (70000, 2, 3)],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0] != (70000, 2, 3)])
def test_matmul_inside_a_capture_matches_numpy_and_replays(case, dtype):
    _linalg.ensure(0, [dtype])
    ha, hb, a, b = _operands(case, dtype)
    out = cupy.zeros(_expected(ha, hb).shape, dtype)
    seen = []

    def work():
        seen.append(_linalg.is_capturing())
        _BACKEND.matmul(a, b, out=out)
    graph, stream = _capture(work)
    assert seen == [True]
    _close(out.get(), _expected(ha, hb), dtype, a.shape[-1])
    a[...] = cupy.asarray(2 * ha)          # new inputs, same buffers: the replay sees them
    cupy.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    _close(out.get(), _expected(2 * ha, hb), dtype, a.shape[-1])


@pytest.mark.parametrize("dtype", [np.complex64, np.int64])
def test_matmul_of_a_non_float_dtype_refuses_capture(dtype):
    a, b = cupy.ones((4, 4), dtype), cupy.ones((4, 4), dtype)
    out = cupy.empty((4, 4), dtype)
    errors = []

    def work():
        try:
            _BACKEND.matmul(a, b, out=out)
        except RuntimeError as exc:
            errors.append(str(exc))
    _capture(work)
    assert len(errors) == 1 and "not capturable on cuda" in errors[0]


# -- through tensorplay.accelerator.Graph ---------------------------------------------------------
@pytest.mark.parametrize("dtype", [tp.float16, tp.float32, tp.float64])
@pytest.mark.parametrize("shapes", [((8, 512), (512, 512)), ((2, 1, 6, 5), (3, 5, 7)),
                                    ((5,), (5, 7)), ((5,), (5,))])
def test_matmul_in_a_tensorplay_graph(shapes, dtype):
    ha, hb = (_host(s, dtype.numpy, seed) for seed, s in enumerate(shapes))
    a = tp.tensor(np.zeros_like(ha), device="cuda")
    b = tp.tensor(hb, device="cuda")
    g = tp.accelerator.Graph()
    with g:
        y = a @ b
    a.copy_(tp.tensor(ha, device="cuda"))
    g.replay()
    tp.accelerator.synchronize()
    _close(y.cpu().numpy(), _expected(ha, hb), dtype.numpy, shapes[0][-1])


# -- erf ------------------------------------------------------------------------------------------
_ERF_POINTS = np.concatenate([np.linspace(-6, 6, 1001), [0.0, -0.0, 1e-8, -1e-8, 30.0, -30.0]])


@pytest.mark.parametrize("dtype", FLOATS)
def test_erf_matches_math_erf(dtype):
    x = _ERF_POINTS.astype(dtype)
    got = _BACKEND.erf(cupy.asarray(x))
    assert got.dtype == dtype and got.shape == x.shape
    want = np.array([math.erf(float(v)) for v in x])
    tol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-15}[dtype]
    np.testing.assert_allclose(got.get().astype(np.float64), want, rtol=tol, atol=tol)


def test_erf_keeps_nan_and_infinities():
    got = _BACKEND.erf(cupy.asarray([np.nan, np.inf, -np.inf], np.float32)).get()
    assert np.isnan(got[0]) and got[1] == 1.0 and got[2] == -1.0


@pytest.mark.parametrize("dtype", [np.int32, np.complex64])
def test_erf_rejects_non_float_input(dtype):
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        _BACKEND.erf(cupy.ones(3, dtype))


@pytest.mark.parametrize("dtype", [tp.float16, tp.float32, tp.float64])
def test_erf_in_a_tensorplay_graph(dtype):
    x = tp.tensor(np.zeros(101, dtype.numpy), device="cuda")
    g = tp.accelerator.Graph()
    with g:
        y = tp.erf(x)
    host = np.linspace(-3, 3, 101).astype(dtype.numpy)
    x.copy_(tp.tensor(host, device="cuda"))
    g.replay()
    tp.accelerator.synchronize()
    want = np.array([math.erf(float(v)) for v in host])
    tol = 1e-3 if dtype is tp.float16 else 1e-6
    np.testing.assert_allclose(y.cpu().numpy().astype(np.float64), want, rtol=tol, atol=tol)
