"""The cuda backend's row kernels: softmax and log_softmax (``_activations.py``, sources in
``_elementwise_source.py``), layer_norm (``_rows.py``) and the one-axis reductions of the
``reduce_axis`` hook (``_reduce.py``), against float64 NumPy.

Three parts: the register row plan and sources (plain text, runs everywhere: the source module
is loaded by file path, as ``test_cuda_elementwise.py`` does); the op layer's use of the
``reduce_axis`` hook, checked on any accelerator with a recording NumPy stand-in; and the
kernels themselves on a GPU (skipped without CuPy and a visible GPU).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tensorplay as tp
from tensorplay._runtime import dispatch as _dispatch
from tensorplay._tensor import reductions as _reductions

_PATH = Path(__file__).resolve().parents[2] / "tensorplay/backends/cuda/_elementwise_source.py"
_spec = importlib.util.spec_from_file_location("tp_rows_source_under_test", _PATH)
src = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(src)

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOATS = (F16, BF16, F32, F64)
TP = {F16: tp.float16, BF16: tp.bfloat16, F32: tp.float32, F64: tp.float64}
# relative tolerances against float64: a few units of the dtype's last place
RTOL = {F16: 4e-3, BF16: 3e-2, F32: 2e-5, F64: 1e-12}
LENGTHS = (1, 7, 768, 1000, 1024, 4097, 50257)


# -- plans and sources (everywhere) -------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_row_plans_cover_every_row_once(dtype):
    width = src.vector_width(dtype)
    for length in list(range(1, 2100)) + [4096, 4097, 8192, 8193, 16384, 32768, 32769, 50257]:
        for vectorized in (False, True):
            if vectorized and length % width:
                continue
            plan = src.row_plan(length, dtype, vectorized)
            if plan is None:
                assert length > 8192
                continue
            warp, w, vectors, threads = plan
            assert w == (width if vectorized else 1)
            assert warp == (length <= src.ROW_WARP_LIMIT)
            assert vectors * w * threads >= length   # every element has a thread's load
            if warp:
                assert threads == 32 and (vectors - 1) * w * 32 < length
            else:
                assert threads % 32 == 0 and 128 <= threads <= src.ROW_BLOCK_LIMIT
                assert vectors & (vectors - 1) == 0
            assert vectors * w <= (32 if warp else src.ROW_REGISTER_VALUES)


def test_row_plans_keep_the_benchmarked_shapes_in_registers():
    assert src.row_plan(768, F32, True) == (True, 4, 6, 32)
    assert src.row_plan(1024, BF16, True) == (True, 8, 4, 32)
    assert src.row_plan(32768, F32, True) == (False, 4, 8, 1024)
    assert src.row_plan(50257, F32, False) is None   # three reads of the row instead


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_softmax_rows_source_is_one_kernel(dtype, log):
    for warp, vectors in ((True, 6), (False, 4)):
        source = src.softmax_rows_source(dtype, log, warp, src.vector_width(dtype), vectors)
        name = src.softmax_rows_name(dtype, log, warp, src.vector_width(dtype), vectors)
        assert source.count("__global__") == 1 and f"{name}(" in source
        assert ("__launch_bounds__" in source) != warp   # a block kernel: 64 registers
        assert f"constexpr int K = {vectors};" in source
        assert ("logsum" in source) == log and "#include" not in source
    assert src.softmax_rows_source(np.int32, False, True, 1, 1) is None


# -- the op layer's use of reduce_axis (any accelerator, a NumPy stand-in) -----------------------
_needs_accelerator = pytest.mark.skipif(tp.accelerator.current_accelerator() is None,
                                        reason="hooks are looked up on the accelerator backend")


@pytest.fixture
def recorded(monkeypatch):
    """A ``reduce_axis`` hook computing with NumPy (sim's xp), recording its calls."""
    backend = _dispatch.backend_of(tp.device(tp.accelerator.current_accelerator().type, 0))
    if backend.xp is not np:
        pytest.skip("the stand-in computes with NumPy")
    seen = []

    def reduce_axis(op, shape, axis, dtype, acc, out):
        if axis != len(shape) - 1 and (axis != 0 or len(shape) < 2):
            return None   # as cuda's: the last axis or the first
        seen.append((op, tuple(shape), axis, np.dtype(dtype),
                     None if acc is None else np.dtype(acc), np.dtype(out)))

        def launch(x, out_array):
            if op in ("sum", "mean"):
                value = getattr(np, op)(x, axis=axis, dtype=acc)
            else:
                value = getattr(np, op)(x, axis=axis)
            out_array[...] = value.reshape(out_array.shape)
        return launch

    monkeypatch.setattr(backend, "reduce_axis", reduce_axis, raising=False)
    _reductions._sum_plans.clear()   # plans keep the kernel a hook gave
    yield seen
    _reductions._sum_plans.clear()


def _acc_dev():
    return tp.accelerator.current_accelerator().type


@_needs_accelerator
@pytest.mark.parametrize("call, op, axis, acc", [
    (lambda t: t.sum(-1), "sum", 1, F32), (lambda t: t.sum(0), "sum", 0, F64),
    (lambda t: t.sum(1, keepdim=True), "sum", 1, F32), (lambda t: t.mean(-1), "mean", 1, F32),
    (lambda t: t.mean(0, keepdim=True), "mean", 0, F64), (lambda t: t.amax(-1), "amax", 1, None),
    (lambda t: t.amin(0), "amin", 0, None), (lambda t: t.max(-1).values, None, None, None),
])
def test_one_axis_reductions_call_the_hook(recorded, call, op, axis, acc):
    data = np.random.default_rng(0).standard_normal((20, 6))
    x = tp.tensor(data, dtype=tp.float32, device=_acc_dev())
    got = call(x)
    want = call(tp.tensor(data, dtype=tp.float32))   # cpu
    assert got.dtype is tp.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)
    if op is None:
        assert recorded == []   # max(dim) gives indices too: the xp path
    else:
        assert [(c[0], c[2], c[4]) for c in recorded] == [(op, axis, acc)]
        assert recorded[0][1] == (20, 6) and recorded[0][3] == recorded[0][5] == F32


@_needs_accelerator
def test_last_axis_argmax_calls_the_hook_others_do_not(recorded):
    data = np.random.default_rng(1).standard_normal((20, 6))
    x = tp.tensor(data, dtype=tp.float32, device=_acc_dev())
    assert x.argmax(-1).cpu().numpy().tolist() == data.argmax(-1).tolist()
    assert x.argmin(1, keepdim=True).cpu().numpy().tolist() == \
        data.argmin(1, keepdims=True).tolist()
    assert x.argmax(0).cpu().numpy().tolist() == data.argmax(0).tolist()   # not the last: xp
    assert x.argmax().item() == data.argmax()                              # flat: xp
    assert [(c[0], c[1], c[2], c[5]) for c in recorded] == [
        ("argmax", (20, 6), 1, np.dtype(np.int64)), ("argmin", (20, 6), 1, np.dtype(np.int64))]


@_needs_accelerator
def test_halves_pass_their_accumulation_dtype(recorded):
    x = tp.ones((30, 8), dtype=tp.bfloat16, device=_acc_dev())
    assert x.sum(-1).dtype is tp.bfloat16 and x.mean(0).dtype is tp.bfloat16
    assert x.max().item() == 1.0   # two dims: the xp path
    assert x.view(240).max().item() == 1.0   # one dim: the last
    assert recorded == [("sum", (30, 8), 1, BF16, F32, BF16), ("mean", (30, 8), 0, BF16, F64, BF16),
                        ("amax", (240,), 0, BF16, None, BF16)]


@_needs_accelerator
@pytest.mark.parametrize("call", [
    lambda t: t.sum((0, 1)), lambda t: t.sum(-1, dtype=tp.float64), lambda t: t.t().sum(0),
    lambda t: t.int().sum(-1), lambda t: t[:, :0].sum(-1), lambda t: t[:0].mean(0),
    lambda t: t.view(2, 10, 6).sum(1), lambda t: t.mean(-1, dtype=tp.float64),
])
def test_other_reductions_keep_the_xp_path(recorded, call):
    data = np.random.default_rng(1).standard_normal((20, 6))
    got = call(tp.tensor(data, dtype=tp.float32, device=_acc_dev()))
    want = call(tp.tensor(data, dtype=tp.float32))
    assert got.dtype is want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)
    assert recorded == []


# -- the kernels on a GPU ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda():
    from support import cuda_backend_or_skip

    cuda_backend_or_skip("the cuda backend's row kernels")
    import cupy

    return cupy


def _data(shape, seed=0, scale=3.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def _on_gpu(values, dtype):
    """(the tensor on cuda, its values as stored, in float64)."""
    tensor = tp.tensor(values, dtype=TP[dtype], device="cuda")
    return tensor, tensor.double().cpu().numpy()


def _softmax_ref(x, axis, log):
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


def _close(got, want, dtype, scale=1.0):
    rtol = RTOL[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_softmax_last_dim(cuda, dtype, length, log):
    lead = (3,) if length > 4096 else (2, 5)
    x, stored = _on_gpu(_data(lead + (length,), seed=length), dtype)
    got = (tp.log_softmax if log else tp.softmax)(x, -1)
    assert got.dtype is x.dtype and got.shape == x.shape
    want = _softmax_ref(stored, -1, log)
    _close(got.double().cpu().numpy(), want, dtype, scale=10.0 if log else 1.0 / length)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, dim", [((4, 33, 5), 1), ((4, 33, 5), 0), ((6, 1000), 0),
                                        ((7, 768, 1), 1), ((8192, 3), -1)])
def test_gpu_softmax_other_dims_and_shapes(cuda, dtype, shape, dim, log):
    x, stored = _on_gpu(_data(shape, seed=sum(shape)), dtype)
    got = (tp.log_softmax if log else tp.softmax)(x, dim)
    _close(got.double().cpu().numpy(), _softmax_ref(stored, dim, log), dtype,
           scale=10.0 if log else 1.0)


@pytest.mark.parametrize("length", [7, 768, 1000, 4096, 4097])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_softmax_rows_off_16_byte_boundaries(cuda, dtype, length):
    """A row-aligned view at an odd element offset takes the scalar-load kernels."""
    from tensorplay.backends.cuda import _activations

    rows = 5
    flat = cuda.asarray(_data(rows * length + 1, seed=3).astype(dtype))
    x = flat[1:].reshape(rows, length)
    out_flat = cuda.empty(rows * length + 1, dtype)
    out = out_flat[1:].reshape(rows, length)
    for log in (False, True):
        _activations.softmax(x, out, 1, log)
        want = _softmax_ref(cuda.asnumpy(x).astype(F64), 1, log)
        _close(cuda.asnumpy(out).astype(F64), want, dtype, scale=10.0 if log else 1.0)


@pytest.mark.parametrize("length", [7, 768, 4096, 50257])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_softmax_launcher_matches_the_hook(cuda, dtype, length):
    """The launcher ``softmax_launcher`` makes for a layout writes what ``softmax`` writes, at
    a 16-byte boundary and off one (the hook's scalar kernel takes that)."""
    from tensorplay.backends.cuda import _activations

    rows = 3
    flat = cuda.asarray(_data(rows * length + 8, seed=5).astype(dtype))
    out_flat = cuda.zeros(rows * length + 8, dtype)
    for log in (False, True):
        aligned = flat[:rows * length].reshape(rows, length)
        launch = _activations.softmax_launcher(aligned, -1, log)
        if not src.row_plan(length, dtype, not length * dtype.itemsize % 16):
            assert launch is None   # longer than registers hold: the hook's three-pass kernel
            continue
        assert launch is not None
        for offset in (0, 1, 8):
            x = flat[offset:offset + rows * length].reshape(rows, length)
            out = out_flat[offset:offset + rows * length].reshape(rows, length)
            out[...] = 0
            launch(x, out)
            want = _softmax_ref(cuda.asnumpy(x).astype(F64), 1, log)
            _close(cuda.asnumpy(out).astype(F64), want, dtype, scale=10.0 if log else 1.0)


def test_gpu_softmax_launcher_is_none_for_layouts_its_kernel_does_not_take(cuda):
    from tensorplay.backends.cuda import _activations

    x = cuda.zeros((4, 6, 5), np.float32)
    assert _activations.softmax_launcher(x, 1, False) is None                 # not the last
    assert _activations.softmax_launcher(x.transpose(0, 2, 1), 2, False) is None   # strided
    assert _activations.softmax_launcher(x, 3, False) is None                 # out of range
    assert _activations.softmax_launcher(x.astype(np.int32), -1, False) is None
    assert _activations.softmax_launcher(cuda.zeros((2, 3, 1), np.float32), 1, False) is not None


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_softmax_nan_and_infinite_rows(cuda, dtype):
    values = _data((4, 768))
    values[1, 5] = np.nan
    values[2] = -np.inf
    values[3, 7] = np.inf
    x, _ = _on_gpu(values, dtype)
    for fn in (tp.softmax, tp.log_softmax):
        got = fn(x, -1).double().cpu().numpy()
        assert np.isfinite(got[0]).all()
        assert np.isnan(got[1:]).all()   # as PyTorch: NaN, -inf - -inf, inf - inf


def _layer_norm_ref(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    y = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_layer_norm(cuda, dtype, length, affine):
    lead = (3,) if length > 4096 else (2, 5)
    x, stored = _on_gpu(_data(lead + (length,), seed=length) + 5.0, dtype)
    w, w_stored = _on_gpu(_data(length, seed=1), dtype) if affine in ("both", "weight") \
        else (None, None)
    b, b_stored = _on_gpu(_data(length, seed=2), dtype) if affine in ("both", "bias") \
        else (None, None)
    got = tp.nn.functional.layer_norm(x, (length,), w, b, eps=1e-5)
    assert got.dtype is x.dtype and got.shape == x.shape
    want = _layer_norm_ref(stored, w_stored, b_stored, 1e-5)
    _close(got.double().cpu().numpy(), want, dtype, scale=10.0)


@pytest.mark.parametrize("length", [7, 768, 1000, 4097])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_layer_norm_off_16_byte_boundaries(cuda, dtype, length):
    from tensorplay.backends.cuda import _rows

    rows = 6
    flat = cuda.asarray((_data(rows * length + 1, seed=4) - 2.0).astype(dtype))
    x = flat[1:].reshape(rows, length)
    params = cuda.asarray(_data(2 * length + 1, seed=5).astype(dtype))
    w, b = params[1:length + 1], params[length + 1:]
    out = cuda.empty((rows, length), dtype)
    _rows.layer_norm(x, w, b, out, 1e-5)
    want = _layer_norm_ref(*(cuda.asnumpy(a).astype(F64) for a in (x, w, b)), 1e-5)
    _close(cuda.asnumpy(out).astype(F64), want, dtype, scale=10.0)


@pytest.mark.parametrize("length", [7, 768, 4096, 50257])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_layer_norm_launcher_matches_the_hook(cuda, dtype, length):
    """The launcher ``layer_norm_launcher`` makes for a layout writes what ``layer_norm``
    writes, at a 16-byte boundary and off one (the hook's scalar kernel takes that), and two
    launchers of one kernel with different eps each keep their own."""
    from tensorplay.backends.cuda import _rows

    rows = 3
    flat = cuda.asarray((_data(rows * length + 8, seed=7) - 2.0).astype(dtype))
    params = cuda.asarray(_data(2 * length + 16, seed=8).astype(dtype))
    out_flat = cuda.zeros(rows * length + 8, dtype)
    aligned = flat[:rows * length].reshape(rows, length)
    launches = {eps: _rows.layer_norm_launcher(aligned, params[:length],
                                               params[length:2 * length], eps)
                for eps in (1e-5, 0.5)}
    if not src.row_plan(length, dtype, not length * dtype.itemsize % 16):
        assert set(launches.values()) == {None}   # longer than registers hold
        return
    for offset in (0, 1, 8):
        x = flat[offset:offset + rows * length].reshape(rows, length)
        w, b = params[offset:offset + length], params[offset + length:offset + 2 * length]
        out = out_flat[offset:offset + rows * length].reshape(rows, length)
        for eps, launch in launches.items():
            out[...] = 0
            launch(x, w, b, out)
            want = _layer_norm_ref(*(cuda.asnumpy(a).astype(F64) for a in (x, w, b)), eps)
            _close(cuda.asnumpy(out).astype(F64), want, dtype, scale=10.0)


def test_gpu_layer_norm_launcher_is_none_for_layouts_its_kernel_does_not_take(cuda):
    from tensorplay.backends.cuda import _rows

    x, w = cuda.zeros((4, 6), np.float32), cuda.ones(6, np.float32)
    assert _rows.layer_norm_launcher(x, w, w, 1e-5) is not None
    assert _rows.layer_norm_launcher(x, None, w, 1e-5) is None                # no weight
    assert _rows.layer_norm_launcher(x, w, None, 1e-5) is None                # no bias
    assert _rows.layer_norm_launcher(x.T, w[:4], w[:4], 1e-5) is None         # strided
    assert _rows.layer_norm_launcher(x, w.astype(np.float64), w, 1e-5) is None   # dtypes
    assert _rows.layer_norm_launcher(x, w[:5], w, 1e-5) is None               # lengths
    assert _rows.layer_norm_launcher(x.astype(np.int32), w, w, 1e-5) is None


def test_gpu_layer_norm_keeps_the_eps_of_each_call_on_one_layout(cuda):
    """Warm calls of the tensor op on one layout, eps alternating (two kept plans, one kernel
    with one argument buffer), and a view off a 16-byte boundary of the same shape."""
    values = _data((4, 64), seed=9)
    x, stored = _on_gpu(values, F32)
    w, w_stored = _on_gpu(_data(64, seed=10), F32)
    b, b_stored = _on_gpu(_data(64, seed=11), F32)
    for _ in range(3):
        for eps in (1e-5, 2.0):
            got = tp.nn.functional.layer_norm(x, (64,), w, b, eps=eps).double().cpu().numpy()
            np.testing.assert_allclose(got, _layer_norm_ref(stored, w_stored, b_stored, eps),
                                       rtol=1e-5, atol=1e-5)
    flat, flat_stored = _on_gpu(_data(257, seed=12), F32)
    view = flat[1:].reshape(4, 64)   # contiguous, 4 bytes off the boundary
    assert view.is_contiguous()
    got = tp.nn.functional.layer_norm(view, (64,), w, b).double().cpu().numpy()
    want = _layer_norm_ref(flat_stored[1:].reshape(4, 64), w_stored, b_stored, 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gpu_layer_norm_keeps_the_variance_of_an_offset_row(cuda):
    """The variance of the centred values: a large common offset does not cancel it away."""
    values = 1e4 + _data((16, 1024), seed=6) * 1e-2
    x, stored = _on_gpu(values, F32)
    got = tp.nn.functional.layer_norm(x, (1024,)).double().cpu().numpy()
    np.testing.assert_allclose(got, _layer_norm_ref(stored, None, None, 1e-5), atol=2e-2)


_REDUCERS = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def _reduce(t, op, dim, keepdim):
    return getattr(t, op)(dim, keepdim=keepdim)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", sorted(_REDUCERS))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, dim", [
    ((64, 768), -1), ((300, 1000), 1), ((5, 4097), -1), ((3, 7), -1), ((2, 70000), -1),
    ((600, 70001), -1), ((4, 3, 50257), 2), ((1024,), 0), ((8192, 1), -1),
    ((64, 768), 0), ((1000, 33), 0), ((7, 768), 0), ((8192, 64), 0), ((3, 5, 40), 0),
    ((70000, 40), 0), ((1, 1000), 0), ((20000, 3), 0)])
def test_gpu_one_axis_reductions(cuda, dtype, op, shape, dim, keepdim):
    values = _data(shape, seed=len(shape) + shape[-1]) + (1.0 if op == "mean" else 0.0)
    x, stored = _on_gpu(values, dtype)
    got = _reduce(x, op, dim, keepdim)
    want = _REDUCERS[op](stored, axis=dim, keepdims=keepdim)
    assert got.dtype is x.dtype and got.shape == want.shape
    got = got.double().cpu().numpy()
    if op in ("amax", "amin"):
        np.testing.assert_array_equal(got, want)
    else:
        count = shape[dim]
        scale = np.sqrt(count) * 3 if op == "sum" else 3 / np.sqrt(count)
        _close(got, want, dtype, scale=scale * 4)


def _check_reductions(x, stored, dtype, cases):
    """Each ``(op, dim)`` of ``cases`` on ``x`` against NumPy on ``stored`` (its values as
    stored): extremes exactly, sums and means within the dtype's tolerance."""
    for op, dim in cases:
        got = getattr(x, op)(dim).double().cpu().numpy()
        want = _REDUCERS[op](stored, axis=dim)
        if op in ("amax", "amin"):
            np.testing.assert_array_equal(got, want)
        else:
            _close(got, want, dtype, scale=300.0 if op == "sum" else 1.0)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_reductions_take_the_hook_at_the_benchmarked_shapes(cuda, dtype):
    from tensorplay.backends.cuda import _kernels

    x, stored = _on_gpu(_data((8192, 768), seed=7), dtype)
    _check_reductions(x, stored, dtype, (("sum", -1), ("amax", -1), ("mean", 0), ("amin", 0),
                                         ("mean", -1)))
    made = {key[:2] for key in _kernels._cache if isinstance(key, tuple) and key
            and str(key[0]).startswith("reduce-")}
    assert {("reduce-rows", "sum"), ("reduce-rows", "amax"), ("reduce-columns", "mean"),
            ("reduce-columns", "amin"), ("reduce-rows", "mean")} <= made


@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("dim", [0, -1])
def test_gpu_extremes_propagate_nan(cuda, dtype, op, dim):
    values = _data((300, 768), seed=8)
    values[17, 5] = np.nan
    values[299, 767] = np.nan
    values[0, 0] = np.inf if op == "amax" else -np.inf
    x, stored = _on_gpu(values, dtype)
    got = getattr(x, op)(dim).double().cpu().numpy()
    np.testing.assert_array_equal(got, _REDUCERS[op](stored, axis=dim))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(1, 50257), (7, 1000), (3, 5), (2, 3, 2049), (4,)])
def test_gpu_last_axis_argmax_and_argmin(cuda, dtype, op, shape):
    """One block per row: the first extreme, a NaN counting as one (NumPy's answer), and
    repeated extremes giving the lowest index."""
    values = _data(shape, seed=shape[-1])
    flat = values.reshape(-1, shape[-1])
    flat[0, shape[-1] // 2:] = flat[0, 0] = 1e4 if op == "argmax" else -1e4   # ties
    if flat.shape[0] > 1:
        flat[1, shape[-1] - 1] = np.nan
        flat[1, shape[-1] // 3] = np.nan
    x, stored = _on_gpu(values, dtype)
    for keepdim in (False, True):
        got = getattr(x, op)(-1, keepdim=keepdim)
        assert got.dtype is tp.int64
        np.testing.assert_array_equal(got.cpu().numpy(),
                                      getattr(np, op)(stored, axis=-1, keepdims=keepdim))


@pytest.mark.parametrize("dim", [0, -1])
def test_gpu_sums_propagate_nan_and_empty_reductions(cuda, dim):
    values = _data((300, 768), seed=9)
    values[3, 3] = np.nan
    x, _ = _on_gpu(values, F32)
    assert np.isnan(x.sum(dim).cpu().numpy()[3]) and np.isnan(x.mean(dim).cpu().numpy()[3])
    empty = tp.zeros((0, 5) if dim == 0 else (5, 0), device="cuda")
    np.testing.assert_array_equal(empty.sum(dim).cpu().numpy(), np.zeros(5, np.float32))
    assert np.isnan(empty.mean(dim).cpu().numpy()).all()
    with pytest.raises(IndexError):
        empty.amax(dim)


def test_gpu_column_means_accumulate_wide(cuda):
    """Note [accurate sums]: a float32 column mean accumulates in float64 and rounds once."""
    values = (_data((100000, 32), seed=12) + 1000.0).astype(F32)
    x = tp.tensor(values, device="cuda")
    want = values.astype(F64).mean(0).astype(F32)
    np.testing.assert_allclose(x.mean(0).cpu().numpy(), want, rtol=1.2e-7, atol=0)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_gpu_reductions_off_16_byte_boundaries(cuda, dtype):
    """A contiguous view at an odd element offset takes the scalar-load kernels."""
    rows, cols = 700, 768
    flat, stored = _on_gpu(_data(rows * cols + 1, seed=13), dtype)
    x, stored = flat[1:].view(rows, cols), stored[1:].reshape(rows, cols)
    _check_reductions(x, stored, dtype, (("sum", -1), ("mean", 0), ("amax", 0), ("amin", -1)))


def test_gpu_row_kernels_replay_in_a_graph(cuda):
    """Captured (the column reduction's workspace from the graph's pool), then replayed."""
    x = tp.tensor(_data((4096, 768), seed=10), dtype=tp.float32, device="cuda")
    w = tp.ones(768, device="cuda")
    graph = tp.accelerator.Graph()
    with graph:
        outs = (tp.softmax(x, -1), tp.nn.functional.layer_norm(x, (768,), w, None), x.sum(-1),
                x.mean(0), x.amax(0), x.amin(-1))
    fresh = _data((4096, 768), seed=11)
    graph.stage_and_launch([x], [tp.tensor(fresh, device="cuda")])
    stored = fresh.astype(np.float32).astype(F64)
    wants = (_softmax_ref(stored, -1, False), _layer_norm_ref(stored, None, None, 1e-5),
             stored.sum(-1), stored.mean(0), stored.max(0), stored.min(-1))
    for got, want in zip(outs, wants):
        np.testing.assert_allclose(got.double().cpu().numpy(), want, rtol=1e-4, atol=1e-4)
