"""``tensorplay.nn.functional`` against NumPy references, on every device: values, result dtypes
and shapes, every error with PyTorch's exception type, and (on an accelerator) each function
inside a captured graph, dropout drawing a fresh mask on every replay.

Oracles: NumPy in float64 (erf from ``math.erf``); for dropout the generator itself (after
``tp.manual_seed(s)`` the mask is ``tp.rand(shape) >= p``, the same on every device); for
captured graphs the eager run of the same code.
"""

import math
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from support import (accelerator_device, requires_accelerator,
                     requires_captured_products, supports, to_numpy)

RNG = np.random.default_rng(2026)
HALF = [tp.float16, tp.bfloat16]
ULP = {tp.float16: 2.0 ** -10, tp.bfloat16: 2.0 ** -7, tp.float32: 2.0 ** -23,
       tp.float64: 2.0 ** -52}


def data(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, size=shape)


def on(device, array, dtype=tp.float32):
    return tp.tensor(np.asarray(array), dtype=dtype, device=device)


def as64(tensor) -> np.ndarray:
    return to_numpy(tensor).astype(np.float64)


def rounded(array, dtype) -> np.ndarray:
    """``array`` rounded to ``dtype`` (as the op stores it), back in float64."""
    return as64(tp.tensor(np.asarray(array, np.float64)).to(dtype))


def close(result, expected, dtype, *, ulps=4.0, atol=None):
    """``result`` has ``dtype`` and the shape of ``expected``, and equals it within a few of
    ``dtype``'s rounding units (relative), or ``atol``."""
    assert result.dtype == dtype, (result.dtype, dtype)
    expected = np.asarray(expected, np.float64)
    got = as64(result)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    tol = ulps * ULP[dtype]
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol if atol is None else atol,
                               equal_nan=True)


def float_dtypes(device):
    return [d for d in (tp.float32, tp.float64, *HALF) if supports(device, d)]


def erf(array):
    return np.vectorize(math.erf)(np.asarray(array, np.float64))


def gelu_exact(x):
    return x * 0.5 * (1 + erf(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def silu_ref(x):
    return x / (1 + np.exp(-x))


def layer_norm_ref(x, count, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(-count, 0))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def is_cpu(device) -> bool:
    return tp.device(device).type == "cpu"


# -- the module ---------------------------------------------------------------------------------

def test_reachable_as_tp_nn_functional():
    import tensorplay.nn as nn
    assert tp.nn is nn and tp.nn.functional is F
    assert tp.nn.functional.gelu is F.gelu
    assert sorted(F.__all__) == sorted([
        "linear", "relu", "gelu", "silu", "softmax", "log_softmax", "layer_norm", "dropout",
        "one_hot", "embedding", "tanh", "sigmoid", "logsigmoid", "mse_loss", "l1_loss",
        "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits",
        "scaled_dot_product_attention"])
    for name in F.__all__:
        assert callable(getattr(F, name)) and getattr(F, name).__doc__


# -- linear -------------------------------------------------------------------------------------

@pytest.mark.parametrize("in_shape, w_shape, b_shape", [
    ((5,), (3, 5), (3,)), ((4, 5), (3, 5), (3,)), ((2, 4, 5), (3, 5), (3,)),
    ((4, 5), (3, 5), None), ((2, 4, 5), (3, 5), None), ((4, 5), (5,), None),
    ((5,), (5,), None), ((4, 5), (3, 5), ()), ((4, 5), (3, 5), (1,)),
    ((0, 5), (3, 5), (3,)), ((4, 5), (0, 5), (0,)),
])
def test_linear_values_and_shapes(device, in_shape, w_shape, b_shape):
    x, w = data(*in_shape), data(*w_shape)
    b = None if b_shape is None else data(*b_shape)
    result = F.linear(on(device, x), on(device, w), None if b is None else on(device, b))
    expected = x @ w.T + (0 if b is None else b)
    close(result, expected, tp.float32, ulps=64, atol=1e-5)
    assert result.device == tp.device(device)


def test_linear_dtypes(device):
    x, w, b = data(3, 8), data(4, 8), data(4)
    for dtype in float_dtypes(device):
        result = F.linear(on(device, x, dtype), on(device, w, dtype), on(device, b, dtype))
        xr, wr, br = (rounded(a, dtype) for a in (x, w, b))
        close(result, xr @ wr.T + br, dtype, ulps=8, atol=8 * 8 * ULP[dtype])


def test_linear_errors(device):
    x, w, b = on(device, data(4, 5)), on(device, data(3, 5)), on(device, data(3))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        F.linear(x, on(device, data(3, 6)))
    with pytest.raises(RuntimeError):
        F.linear(x, w.double())
    with pytest.raises(RuntimeError):
        F.linear(x, w, on(device, data(4)))          # bias does not broadcast to (4, 3)
    with pytest.raises(RuntimeError):
        F.linear(x, on(device, data(2, 3, 5)))       # a 3-d weight
    with pytest.raises(RuntimeError):
        F.linear(on(device, 1.0), w)                  # a 0-d input
    with pytest.raises(TypeError):
        F.linear(data(4, 5), w)
    with pytest.raises(TypeError):
        F.linear(x, w, [1.0, 2.0, 3.0])
    assert F.linear(x, w, b).shape == (4, 3)


# -- relu, gelu, silu ---------------------------------------------------------------------------

def test_relu(device):
    a = data(4, 6, low=-5, high=5)
    a[0, :3] = [0.0, -0.0, np.nan]
    for dtype in float_dtypes(device):
        close(F.relu(on(device, a, dtype)), np.maximum(rounded(a, dtype), 0), dtype, ulps=0)
    ints = on(device, [-3, 0, 4], tp.int64)
    result = F.relu(ints)
    assert result.dtype == tp.int64 and to_numpy(result).tolist() == [0, 0, 4]
    t = on(device, a)
    assert F.relu(t, inplace=True) is t
    close(t, np.maximum(a.astype(np.float32), 0), tp.float32, ulps=0)
    with pytest.raises(RuntimeError):
        F.relu(on(device, [True, False], tp.bool))
    with pytest.raises(TypeError):
        F.relu([1.0])


@pytest.mark.parametrize("approximate, reference", [("none", gelu_exact), ("tanh", gelu_tanh)])
def test_gelu(device, approximate, reference):
    a = data(300, low=-7, high=7)
    for dtype in float_dtypes(device):
        x = rounded(a, dtype)
        result = F.gelu(on(device, a, dtype), approximate=approximate)
        close(result, reference(x), dtype, ulps=16 if dtype is tp.float64 else 4,
              atol=16 * ULP[dtype] if dtype is tp.float64 else 2e-6 if dtype is tp.float32
              else 4 * ULP[dtype])
    assert np.abs(gelu_exact(a) - gelu_tanh(a)).max() > 1e-4   # the two forms really differ


def test_gelu_errors(device):
    t = on(device, data(3))
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(t, approximate="fast")
    with pytest.raises(TypeError, match="approximate"):
        F.gelu(t, approximate=None)
    for dtype in (tp.int64, tp.int32, tp.bool):
        with pytest.raises(RuntimeError, match='"gelu" is not implemented for'):
            F.gelu(on(device, [1, 0], dtype))
    with pytest.raises(TypeError, match="must be Tensor"):
        F.gelu(1.0)


def test_silu(device):
    a = data(200, low=-30, high=30)
    for dtype in float_dtypes(device):
        x = rounded(a, dtype)
        close(F.silu(on(device, a, dtype)), silu_ref(x), dtype,
              atol=1e-6 if dtype is tp.float32 else 4 * ULP[dtype])
    t = on(device, a, tp.float64)
    assert F.silu(t, inplace=True) is t
    close(t, silu_ref(a), tp.float64, ulps=64, atol=1e-13)
    for dtype in (tp.int64, tp.bool):
        with pytest.raises(RuntimeError, match='"silu" is not implemented for'):
            F.silu(on(device, [1, 0], dtype))
        with pytest.raises(RuntimeError, match='"silu" is not implemented for'):
            F.silu(on(device, [1, 0], dtype), inplace=True)
    with pytest.raises(TypeError):
        F.silu(np.zeros(3))


# -- softmax, log_softmax -------------------------------------------------------------------------

def softmax_ref(x, dim):
    shifted = np.exp(x - x.max(axis=dim, keepdims=True))
    return shifted / shifted.sum(axis=dim, keepdims=True)


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_softmax_and_log_softmax_values(device, dim):
    a = data(3, 4, 5, low=-60, high=60)
    for dtype in float_dtypes(device):
        x = rounded(a, dtype)
        expected = softmax_ref(x, dim)
        close(F.softmax(on(device, a, dtype), dim=dim), expected, dtype, ulps=8,
              atol=2e-7 if dtype is tp.float32 else 1e-15 if dtype is tp.float64
              else ULP[dtype] / 8)
        close(F.log_softmax(on(device, a, dtype), dim), np.log(expected), dtype, ulps=8,
              atol=4e-5 if dtype is tp.float32 else 1e-12 if dtype is tp.float64
              else 64 * ULP[dtype])


def test_softmax_dtype_argument(device):
    a = data(2, 6)
    for op, reference in ((F.softmax, softmax_ref),
                          (F.log_softmax, lambda x, d: np.log(softmax_ref(x, d)))):
        ints = on(device, [[1, 2, 3]], tp.int64)
        close(op(ints, 1, dtype=tp.float64), reference(np.array([[1.0, 2, 3]]), 1), tp.float64,
              ulps=16)
        if supports(device, tp.float16):
            x = rounded(a, tp.float16)
            close(op(on(device, a, tp.float16), -1, dtype=tp.float32), reference(x, -1),
                  tp.float32, ulps=16, atol=1e-6)
        for bad in (tp.int64, tp.bool, tp.int32):
            with pytest.raises(RuntimeError, match="is not implemented for"):
                op(on(device, a), 0, dtype=bad)
            with pytest.raises(RuntimeError, match="is not implemented for"):
                op(on(device, [1, 0], bad), 0)
        with pytest.raises(IndexError):
            op(on(device, a), 2)
        with pytest.raises(TypeError):
            op(a, 0)


@pytest.mark.parametrize("shape, chosen", [((), 0), ((5,), 0), ((3, 4), 1), ((2, 3, 4), 0),
                                           ((2, 3, 4, 2), 1)])
def test_softmax_without_dim_warns_and_picks_pytorchs_dim(device, shape, chosen):
    a = data(*shape)
    t = on(device, a)
    for op, name in ((F.softmax, "softmax"), (F.log_softmax, "log_softmax")):
        with pytest.warns(UserWarning, match=f"Implicit dimension choice for {name}") as caught:
            result = op(t)
        assert caught[0].filename == __file__   # the warning points at the caller
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            want = op(t, chosen)
        np.testing.assert_array_equal(to_numpy(result), to_numpy(want))


# -- layer_norm -----------------------------------------------------------------------------------

@pytest.mark.parametrize("in_shape, normalized", [
    ((6,), (6,)), ((4, 6), (6,)), ((2, 3, 6), (6,)), ((2, 3, 6), (3, 6)), ((2, 3, 6), (2, 3, 6)),
    ((5, 1), (1,)),
])
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_layer_norm_values(device, in_shape, normalized, affine):
    a = data(*in_shape, low=-4, high=9)
    w = data(*normalized, low=0.5, high=2) if affine in ("weight", "both") else None
    b = data(*normalized) if affine in ("bias", "both") else None
    for dtype in float_dtypes(device):
        x = rounded(a, dtype)
        wr = None if w is None else rounded(w, dtype)
        br = None if b is None else rounded(b, dtype)
        result = F.layer_norm(on(device, a, dtype), normalized,
                              None if w is None else on(device, w, dtype),
                              None if b is None else on(device, b, dtype))
        expected = layer_norm_ref(x, len(normalized), wr, br)
        # float32 and wider: a few ulps of the result's scale; half types: computed in float32
        # and rounded once, so within one unit of the rounding (a float16-computed one is not)
        close(result, expected, dtype, ulps=64 if dtype in (tp.float32, tp.float64) else 1.01,
              atol=64 * 4 * ULP[dtype] if dtype in (tp.float32, tp.float64) else 4 * ULP[dtype])


def test_layer_norm_half_precision_rounds_once(device):
    """A row with a large offset: computing the mean and variance in float16 would lose the
    small spread (and overflow the sum of squares); computed in float32 it round-trips."""
    a = np.array([[1000.0, 1001.0, 1002.0, 1003.0, 1004.0, 1005.0, 1006.0, 1007.0]] * 2)
    expected = layer_norm_ref(a, 1)
    for dtype in HALF:
        if not supports(device, dtype):
            continue
        x = rounded(a, dtype)
        result = F.layer_norm(on(device, x, dtype), (8,))
        close(result, layer_norm_ref(x, 1), dtype, ulps=1.01, atol=ULP[dtype])
    if supports(device, tp.float16):
        result = F.layer_norm(on(device, a, tp.float16), [8])
        close(result, expected, tp.float16, ulps=1.01, atol=ULP[tp.float16])


def test_layer_norm_mixed_half_input_float32_params(device):
    """As PyTorch: its cpu kernel takes float32 weight and bias for a half input, its CUDA
    kernel refuses them (so do accelerators here)."""
    a, w, b = data(3, 8), data(8, low=0.5, high=2), data(8)
    for dtype in HALF:
        if not supports(device, dtype):
            continue
        x = rounded(a, dtype)
        args = [(on(device, w), on(device, b)), (on(device, w), None), (None, on(device, b))]
        for weight, bias in args:
            if not is_cpu(device):
                with pytest.raises(RuntimeError, match="float32 ones only on cpu"):
                    F.layer_norm(on(device, a, dtype), (8,), weight, bias)
                continue
            result = F.layer_norm(on(device, a, dtype), (8,), weight, bias)
            close(result, layer_norm_ref(x, 1, None if weight is None else w.astype(np.float32),
                                         None if bias is None else b.astype(np.float32)),
                  dtype, ulps=1.01, atol=4 * ULP[dtype])


def test_layer_norm_eps_and_constant_rows(device):
    t = on(device, [[2.0, 2.0, 2.0], [0.0, 1.0, 2.0]])
    got = as64(F.layer_norm(t, (3,), eps=0.5))
    np.testing.assert_allclose(got, layer_norm_ref(np.array([[2.0, 2, 2], [0, 1, 2]]), 1,
                                                   eps=0.5), rtol=1e-6, atol=1e-7)
    assert got[0].tolist() == [0.0, 0.0, 0.0]
    close(F.layer_norm(t, (3,), eps=1), layer_norm_ref(as64(t), 1, eps=1.0), tp.float32,
          ulps=8)
    assert F.layer_norm(t, tp.zeros(2, 3).shape[-1:]).shape == (2, 3)   # a Size-like tuple


def test_layer_norm_empty(device):
    result = F.layer_norm(on(device, np.zeros((0, 4))), (4,))
    assert result.shape == (0, 4) and result.dtype == tp.float32
    result = F.layer_norm(on(device, np.zeros((3, 0)), tp.float64), (0,))
    assert result.shape == (3, 0) and result.dtype == tp.float64


def test_layer_norm_errors(device):
    t = on(device, data(2, 3, 4))
    w = on(device, data(4))
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 3\], but got input "
                                           r"of size\[2, 3, 4\]"):
        F.layer_norm(t, (3,))
    with pytest.raises(RuntimeError, match="expected input with shape"):
        F.layer_norm(t, (1, 2, 3, 4))
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        F.layer_norm(t, ())
    with pytest.raises(RuntimeError, match="Expected weight to be of same shape"):
        F.layer_norm(t, (4,), on(device, data(3)))
    with pytest.raises(RuntimeError, match="Expected bias to be of same shape"):
        F.layer_norm(t, (3, 4), None, w)
    with pytest.raises(RuntimeError, match="expected weight and bias of dtype float32, the "
                                           "input's, but got weight float64"):
        F.layer_norm(t, (4,), w.double())
    with pytest.raises(RuntimeError, match="expected weight and bias of dtype float64, the "
                                           "input's, but got bias float32"):
        F.layer_norm(t.double(), (4,), None, w)
    if supports(device, tp.float16):
        with pytest.raises(RuntimeError, match="weight and bias of dtype float16.* but got "
                                               "weight float32, bias float16"):
            F.layer_norm(t.half(), (4,), w, w.half())   # mixed only when all are float32
    for dtype in (tp.int64, tp.bool, tp.complex64):
        if supports(device, dtype):
            with pytest.raises(RuntimeError, match='"layer_norm" is not implemented for'):
                F.layer_norm(t.to(dtype), (4,))
    with pytest.raises(TypeError, match="normalized_shape"):
        F.layer_norm(t, 4)
    with pytest.raises(TypeError, match="normalized_shape"):
        F.layer_norm(t, (4.0,))
    with pytest.raises(TypeError):
        F.layer_norm(t, (4,), data(4))
    with pytest.raises(TypeError):
        F.layer_norm(data(4), (4,))
    with pytest.raises(TypeError, match="eps"):
        F.layer_norm(t, (4,), eps="small")
    if not is_cpu(device):
        with pytest.raises(RuntimeError, match="one device"):
            F.layer_norm(t, (4,), w.cpu())


def test_layer_norm_errors_are_checked_after_a_cached_call(device):
    t = on(device, data(2, 4))
    F.layer_norm(t, (4,))
    with pytest.raises(RuntimeError, match="expected input with shape"):
        F.layer_norm(t, (2,))
    F.layer_norm(t, (4,), on(device, data(4)))
    with pytest.raises(RuntimeError, match="Expected weight"):
        F.layer_norm(t, (2, 4), on(device, data(4)))


# -- dropout --------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_is_the_generators_and_scales(device, p):
    shape = (16, 33)
    a = data(*shape)
    for dtype in float_dtypes(device):
        t = on(device, a, dtype)
        tp.manual_seed(77)
        result = F.dropout(t, p)
        tp.manual_seed(77)
        keep = to_numpy(tp.rand(*shape, device=device)) >= np.float32(p)
        x = rounded(a, dtype)
        close(result, np.where(keep, x / (1 - p), 0.0), dtype, ulps=1.01,
              atol=1e-300 if dtype is tp.float64 else 0)
        assert 0 < keep.sum() < keep.size


def test_dropout_keeps_about_one_minus_p():
    t = tp.ones(200_000)
    for p in (0.2, 0.7):
        kept = (to_numpy(F.dropout(t, p)) != 0).mean()
        assert abs(kept - (1 - p)) < 0.005, (p, kept)   # 5+ standard deviations


def test_dropout_fresh_mask_per_call(device):
    t = tp.ones(1000, device=device)
    first, second = to_numpy(F.dropout(t, 0.5)), to_numpy(F.dropout(t, 0.5))
    assert not np.array_equal(first, second)
    assert set(np.unique(first).tolist()) == {0.0, 2.0}


def test_dropout_returns_input_itself_when_it_does_nothing(device):
    t = on(device, data(3, 4))
    before = to_numpy(t).copy()
    assert F.dropout(t, 0.5, training=False) is t
    assert F.dropout(t, 0.5, False, True) is t
    assert F.dropout(t, 0.0) is t
    assert F.dropout(t, 0) is t
    empty = tp.zeros(0, 3, device=device)
    assert F.dropout(empty, 0.5) is empty
    np.testing.assert_array_equal(to_numpy(t), before)
    ints = on(device, [1, 2], tp.int64)
    assert F.dropout(ints, 0.5, training=False) is ints


def test_dropout_inplace(device):
    a = data(10, 10)
    t = on(device, a)
    tp.manual_seed(5)
    out = F.dropout(t, 0.25, inplace=True)
    assert out is t
    tp.manual_seed(5)
    keep = to_numpy(tp.rand(10, 10, device=device)) >= np.float32(0.25)
    close(t, np.where(keep, a.astype(np.float32) / 0.75, 0), tp.float32, ulps=1.01, atol=0)


def test_dropout_p_one_and_non_finite_values(device):
    t = on(device, [1.5, -2.0, np.nan, np.inf])
    result = F.dropout(t, 1.0)
    assert result is not t
    np.testing.assert_array_equal(to_numpy(result), [0.0, -0.0, np.nan, np.nan])
    ints = on(device, [3, -4], tp.int64)
    zeros = F.dropout(ints, 1)
    assert zeros.dtype == tp.int64 and to_numpy(zeros).tolist() == [0, 0]
    assert F.dropout(t, 1.0, inplace=True) is t
    assert np.isnan(to_numpy(t)[2:]).all()
    # a dropped NaN stays NaN (the mask multiplies, as PyTorch's kernels do)
    nans = tp.full((64,), float("nan"), device=device)
    assert np.isnan(to_numpy(F.dropout(nans, 0.5))).all()


def test_dropout_errors(device):
    t = on(device, data(4))
    for p in (-0.1, 1.5, -1, 2):
        with pytest.raises(ValueError, match=f"dropout probability has to be between 0 and 1, "
                                             f"but got {p}"):
            F.dropout(t, p)
        with pytest.raises(ValueError, match="dropout probability"):
            F.dropout(t, p, training=False)
    with pytest.raises(RuntimeError, match="dropout probability"):
        F.dropout(t, float("nan"))
    for dtype in (tp.int64, tp.bool, tp.complex64):
        if supports(device, dtype):
            with pytest.raises(RuntimeError, match='"dropout" is not implemented for'):
                F.dropout(t.to(dtype), 0.5)
    with pytest.raises(TypeError, match="'p'"):
        F.dropout(t, "0.5")
    with pytest.raises(TypeError, match="must be Tensor"):
        F.dropout([1.0, 2.0], 0.5)


# -- one_hot --------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, num_classes", [
    ([0, 2, 1, 2], -1), ([0, 2, 1, 2], 5), ([[3, 0], [1, 1]], -1), ([[3, 0], [1, 1]], 4),
    (4, -1), (0, 3), ([7], -1), ([0, 0, 0], 1),
])
def test_one_hot_values(device, values, num_classes):
    v = np.asarray(values, np.int64)
    result = F.one_hot(on(device, v, tp.int64), num_classes)
    n = int(v.max()) + 1 if num_classes == -1 else num_classes
    assert result.dtype == tp.int64 and result.shape == v.shape + (n,)
    np.testing.assert_array_equal(to_numpy(result), np.eye(n, dtype=np.int64)[v])


def test_one_hot_empty(device):
    empty = tp.zeros(0, 2, dtype=tp.int64, device=device)
    result = F.one_hot(empty, 3)
    assert result.shape == (0, 2, 3) and result.dtype == tp.int64
    for num_classes in (-1, 0):
        with pytest.raises(RuntimeError, match="Can not infer total number of classes from "
                                               "empty tensor"):
            F.one_hot(empty, num_classes)


def test_one_hot_errors(device):
    for dtype in (tp.int32, tp.uint8, tp.float32, tp.bool):
        with pytest.raises(RuntimeError, match="one_hot is only applicable to index tensor"):
            F.one_hot(on(device, [0, 1], dtype), 3)
    good = on(device, [0, 1], tp.int64)
    with pytest.raises(TypeError, match="num_classes"):
        F.one_hot(good, 3.0)
    with pytest.raises(TypeError, match="must be Tensor"):
        F.one_hot([0, 1], 3)
    # num_classes=-1 reads the values on every device, so it checks them everywhere
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        F.one_hot(on(device, [0, -1], tp.int64))
    if is_cpu(device):
        with pytest.raises(RuntimeError, match="Class values must be non-negative"):
            F.one_hot(on(device, [0, -1], tp.int64), 3)
        for num_classes in (2, 0, -2):
            with pytest.raises(RuntimeError, match="Class values must be smaller than "
                                                   "num_classes"):
                F.one_hot(on(device, [0, 2], tp.int64), num_classes)
    else:
        for num_classes in (0, -2):
            with pytest.raises(RuntimeError, match="num_classes should be positive"):
                F.one_hot(good, num_classes)


@requires_accelerator
def test_one_hot_out_of_range_on_an_accelerator_gives_zero_rows():
    """Documented: with num_classes given, an accelerator reads nothing, so it cannot check."""
    dev = accelerator_device(0)
    result = F.one_hot(on(dev, [1, -1, 3, 0], tp.int64), 3)
    np.testing.assert_array_equal(to_numpy(result),
                                  [[0, 1, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0]])


# -- inside captured graphs ------------------------------------------------------------------------

def _activations(h, labels, gamma, beta):
    """Every capture-safe function but linear."""
    h = F.layer_norm(h, (8,), gamma, beta)
    a = F.gelu(h) + F.gelu(h, approximate="tanh") + F.silu(h) + F.relu(h)
    a = F.relu(F.silu(a.clone(), inplace=True), inplace=True)
    hot = F.one_hot(labels, 8)
    loss = -(F.log_softmax(a, -1) * hot).sum(-1)
    return loss, F.softmax(a, dim=1), hot, a


def _model(x, labels, w1, b1, w2, gamma, beta):
    """A small model: linear, the functions above, linear."""
    h = F.linear(x, w1, b1)
    *outputs, a = _activations(h, labels, gamma, beta)
    return (*outputs, F.linear(a, w2))


def _check_replays(program, params, in_shape):
    dev = accelerator_device(0)
    x = tp.zeros(*in_shape, device=dev)
    labels = tp.zeros(in_shape[0], dtype=tp.int64, device=dev)
    g = tp.accelerator.Graph()
    with g:
        outputs = program(x, labels, *params)
    for _ in range(3):
        new_x = on(dev, data(*in_shape))
        new_labels = on(dev, RNG.integers(0, 8, size=in_shape[0]), tp.int64)
        g.stage_and_launch([x, labels], [new_x, new_labels])
        want = program(new_x, new_labels, *params)
        for got, expected in zip(outputs, want):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6,
                                       atol=1e-6)
        np.testing.assert_array_equal(to_numpy(outputs[2]),
                                      np.eye(8, dtype=np.int64)[to_numpy(new_labels)])


@requires_accelerator
def test_capture_safe_functions_replay_like_eager():
    dev = accelerator_device(0)
    _check_replays(_activations, [on(dev, data(8, low=0.5, high=2)), on(dev, data(8))], (5, 8))


@requires_accelerator
def test_a_model_with_linear_replays_like_eager():
    dev = accelerator_device(0)
    requires_captured_products(dev)
    params = [on(dev, data(8, 6)), on(dev, data(8)), on(dev, data(4, 8)),
              on(dev, data(8, low=0.5, high=2)), on(dev, data(8))]
    _check_replays(_model, params, (5, 6))


@requires_accelerator
def test_dropout_draws_a_fresh_mask_on_every_replay():
    dev = accelerator_device(0)
    x = tp.ones(4, 256, device=dev)
    g = tp.accelerator.Graph()
    with g:
        y = F.dropout(x, 0.5)
        z = F.dropout(y.clone(), 0.25, inplace=True)
    tp.manual_seed(123)
    replays = []
    for _ in range(3):
        g.replay()
        replays.append((to_numpy(y), to_numpy(z)))
    masks = [r[0].tobytes() for r in replays]
    assert len(set(masks)) == 3                       # fresh numbers on every replay
    tp.manual_seed(123)
    for got_y, got_z in replays:                      # k replays drop what k eager calls drop
        want_y = F.dropout(x, 0.5)
        want_z = F.dropout(want_y.clone(), 0.25, inplace=True)
        np.testing.assert_array_equal(got_y, to_numpy(want_y))
        np.testing.assert_array_equal(got_z, to_numpy(want_z))
        assert set(np.unique(got_y).tolist()) <= {0.0, 2.0}


@requires_accelerator
def test_one_hot_inferring_num_classes_is_not_capture_safe():
    dev = accelerator_device(0)
    labels = on(dev, [0, 2, 1], tp.int64)
    with pytest.raises(RuntimeError, match="one_hot"):
        with tp.accelerator.Graph():
            F.one_hot(labels)
    assert not tp.accelerator.is_current_stream_capturing()
    np.testing.assert_array_equal(to_numpy(F.one_hot(labels)), np.eye(3, dtype=np.int64)[
        [0, 2, 1]])


# -- gradients ----------------------------------------------------------------------------------
def _central_differences(fn, x, cotangent, step=1e-6):
    """Central differences of ``sum(cotangent * fn(x))`` with respect to ``x`` (float64)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + step
        up = np.sum(cotangent * fn(x))
        x[i] = saved - step
        down = np.sum(cotangent * fn(x))
        x[i] = saved
        grad[i] = (up - down) / (2 * step)
    return grad


_W = RNG.normal(size=(2, 4))
_B = RNG.normal(size=2)
GRADIENT_CASES = {
    "linear": lambda t: F.linear(t, on(t.device, _W, tp.float64), on(t.device, _B, tp.float64)),
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
    "silu_inplace": lambda t: F.silu(t * 1, inplace=True),
    "relu": F.relu,
    "relu_inplace": lambda t: F.relu(t * 1, inplace=True),
    "softmax": lambda t: F.softmax(t, 1),
    "log_softmax": lambda t: F.log_softmax(t, 0),
    "layer_norm": lambda t: F.layer_norm(t, (4,)),
    "layer_norm_affine": lambda t: F.layer_norm(t, [4], on(t.device, _W[0], tp.float64),
                                                on(t.device, _W[1], tp.float64)),
    "layer_norm_2d": lambda t: F.layer_norm(t, (3, 4)),
    "tanh": F.tanh,
    "sigmoid": F.sigmoid,
    "logsigmoid": F.logsigmoid,
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_gradients_match_central_differences(device, name):
    """Each function records a node whose backward gives the float64 central differences of
    the function itself (the forward is checked against NumPy above)."""
    fn = GRADIENT_CASES[name]
    x = RNG.normal(size=(3, 4))

    def values(array):
        with tp.no_grad():
            return as64(fn(on(device, array, tp.float64)))

    inp = on(device, x, tp.float64)
    inp.requires_grad_()
    out = fn(inp)
    assert out.requires_grad and out.grad_fn is not None
    cotangent = RNG.normal(size=tuple(out.shape))
    out.backward(on(device, cotangent, tp.float64))
    np.testing.assert_allclose(as64(inp.grad), _central_differences(values, x, cotangent),
                               rtol=1e-6, atol=1e-8)


def test_gradients_reach_weight_and_bias(device):
    x = on(device, RNG.normal(size=(5, 4)), tp.float64)
    w = on(device, RNG.normal(size=(3, 4)), tp.float64).requires_grad_()
    b = on(device, RNG.normal(size=3), tp.float64).requires_grad_()
    F.linear(x, w, b).sum().backward()
    np.testing.assert_allclose(as64(w.grad), np.ones((5, 3)).T @ as64(x), rtol=1e-12)
    np.testing.assert_allclose(as64(b.grad), [5.0, 5.0, 5.0])
    g = on(device, np.ones(4), tp.float64).requires_grad_()
    h = on(device, np.zeros(4), tp.float64).requires_grad_()
    y = F.layer_norm(x, (4,), g, h)
    y.sum().backward()
    np.testing.assert_allclose(as64(h.grad), [5.0] * 4)
    xhat = as64(F.layer_norm(x, (4,)))
    np.testing.assert_allclose(as64(g.grad), xhat.sum(0), rtol=1e-9, atol=1e-12)


def test_recorded_dropout_matches_the_kernel_and_refuses_a_leaf_in_place(device):
    x = on(device, RNG.normal(size=(64,)), tp.float32)
    tp.manual_seed(9)
    fused = to_numpy(F.dropout(x, 0.3))
    tp.manual_seed(9)
    leaf = x.clone().requires_grad_()
    recorded = F.dropout(leaf, 0.3)
    np.testing.assert_array_equal(to_numpy(recorded), fused)
    recorded.sum().backward()
    np.testing.assert_array_equal(to_numpy(leaf.grad), (fused != 0) * np.float32(1.0 / 0.7))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.dropout(leaf, 0.3, inplace=True)
    assert F.dropout(leaf, 0.3, training=False) is leaf
    zeros = F.dropout(leaf, 1.0)
    zeros.sum().backward()
    assert not to_numpy(zeros).any()
