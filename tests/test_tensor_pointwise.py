"""Comparison and elementwise functions (``allclose isclose equal nan_to_num hypot logaddexp
addcmul addcdiv lerp copysign heaviside erfinv lgamma digamma sinc logit xlogy``) on every
device: values against NumPy/``math`` references in float64, dtypes, broadcasting, ``out=``,
in-place forms, errors, and use inside a captured graph.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, supports, to_numpy

RNG = np.random.default_rng(2024)
#: (rtol, atol) of a result against its float64 reference, per result dtype
TOL = {tp.float64: (1e-12, 1e-13), tp.float32: (2e-6, 1e-6), tp.float16: (2e-3, 2e-3),
       tp.bfloat16: (1.6e-2, 1.6e-2), tp.complex128: (1e-12, 1e-13),
       tp.complex64: (2e-6, 1e-6)}
FLOATS = (tp.float32, tp.float64, tp.float16, tp.bfloat16)


def T(values, device, dtype=None):  # noqa: N802
    """A tensor of ``values``; Python/NumPy floats default to float32, complex to complex64."""
    values = np.asarray(values)
    if dtype is None:
        dtype = {"f": tp.float32, "c": tp.complex64}.get(values.dtype.kind)
    return tp.tensor(values, dtype=dtype, device=device)


def check(result, expected, dtype, *, tol=None):
    assert result.dtype == dtype, (result.dtype, dtype)
    got = to_numpy(result)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype in (tp.bool,) or not (dtype.is_floating_point or dtype.is_complex):
        np.testing.assert_array_equal(got, expected)
        return
    rtol, atol = tol or TOL[dtype]
    np.testing.assert_allclose(got.astype(np.complex128 if dtype.is_complex else np.float64),
                               expected, rtol=rtol, atol=atol, equal_nan=True)


def rounded(values, dtype):
    """float64 data rounded to ``dtype`` (the inputs both sides see)."""
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(dtype.numpy).astype(np.float64)


def skip_unsupported(device, dtype):
    if not supports(device, dtype):
        pytest.skip(f"{device} does not hold {dtype}")


# -- references --------------------------------------------------------------------------------
def ref_erfinv(y):
    """erfinv by bisection on math.erf/math.erfc (to float64 resolution)."""
    out = np.empty_like(y)
    for i, v in enumerate(y.ravel()):
        if math.isnan(v) or abs(v) > 1:
            out.flat[i] = math.nan
        elif abs(v) == 1:
            out.flat[i] = math.copysign(math.inf, v)
        else:
            a, gap = abs(v), 1 - abs(v)   # beyond 0.5 on erfc, whose 1 - |v| is exact
            lo, hi = 0.0, 6.0
            for _ in range(200):
                mid = (lo + hi) / 2
                if (math.erf(mid) < a) if a <= 0.5 else (math.erfc(mid) > gap):
                    lo = mid
                else:
                    hi = mid
            out.flat[i] = math.copysign((lo + hi) / 2, v)
    return out


def ref_lgamma(x):
    x = np.asarray(x, dtype=np.float64)
    return np.vectorize(lambda v: math.inf if math.isinf(v) or (v <= 0 and v == math.floor(v))
                        else math.lgamma(v), otypes=[np.float64])(x)


def ref_digamma(x):
    """digamma from mpmath when importable, else a 60-step recurrence + asymptotic series in
    float64 (independent of the implementation's constants)."""
    try:
        import mpmath
    except ImportError:
        mpmath = None

    def one(v):
        if math.isnan(v) or (v < 0 and v == math.floor(v)):
            return math.nan
        if v == 0:
            return math.copysign(math.inf, -v)
        if math.isinf(v):
            return math.inf if v > 0 else math.nan
        if mpmath is not None:
            return float(mpmath.digamma(v))
        if v < 0:
            return one(1 - v) - math.pi / math.tan(math.pi * v)
        acc = 0.0
        while v < 60:
            acc += 1 / v
            v += 1
        return (math.log(v) - 0.5 / v - 1 / (12 * v * v) + 1 / (120 * v ** 4)
                - 1 / (252 * v ** 6) - acc)
    return np.vectorize(one, otypes=[np.float64])(x)


def ref_sinc(x):
    with np.errstate(all="ignore"):
        return np.where(x == 0, 1.0, np.sin(np.pi * x) / (np.pi * x))


def ref_logit(x, eps=None):
    if eps is not None and eps >= 0:
        x = np.where(x < eps, eps, np.where(x > 1 - eps, 1 - eps, x))
    with np.errstate(all="ignore"):
        return np.log(x / (1 - x))


def ref_xlogy(x, y):
    with np.errstate(all="ignore"):
        return np.where(np.isnan(y), np.nan, np.where(x == 0, 0.0, x * np.log(y)))


def ref_logaddexp(a, b):
    with np.errstate(all="ignore"):
        return np.logaddexp(a, b)


def ref_heaviside(x, v):
    return np.where(x == 0, v, (x > 0).astype(np.float64))


SPECIAL = {"erfinv": ref_erfinv, "lgamma": ref_lgamma, "digamma": ref_digamma,
           "sinc": ref_sinc, "logit": ref_logit}
SPECIAL_DATA = {
    "erfinv": np.concatenate([np.linspace(-0.999, 0.999, 41), [-1, 1, 0, -0.0, 1.5, -2, np.nan,
                                                             0.99999, -1 + 1e-9, 1e-20]]),
    "lgamma": np.concatenate([np.linspace(-7.3, 30, 60), [0, -0.0, -1, -4, 1, 2, 1e-8, 0.5,
                                                          1e5, np.inf, -np.inf, np.nan, -2.5]]),
    "digamma": np.concatenate([np.linspace(-7.3, 30, 60), [0, -0.0, -1, -4, 1, 2, 1e-8, 0.5,
                                                           1e5, np.inf, np.nan, -2.5, 1.4616]]),
    "sinc": np.concatenate([np.linspace(-4.3, 4.3, 41), [0, 1e-9, np.inf, np.nan, 100.5]]),
    "logit": np.concatenate([np.linspace(0.01, 0.99, 30), [0, 1, -0.5, 2, np.nan, 0.5]]),
}


# -- unary special functions -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_unary_values(device, op, dtype):
    skip_unsupported(device, dtype)
    x = rounded(SPECIAL_DATA[op], dtype)
    result = getattr(tp, op)(T(x, device, dtype))
    tol = TOL[dtype]
    if op == "sinc" and dtype is tp.float32:
        tol = (2e-6, 3e-6)   # sin(pi x) rounds pi x first: absolute error near the zeros
    check(result, SPECIAL[op](x), dtype, tol=tol)


def test_special_accuracy_float64():
    """The float64 formulas against the references on dense grids (module docstring's claims)."""
    y = np.concatenate([np.linspace(-0.9999, 0.9999, 801), 1 - np.logspace(-15, -1, 40)])
    got = to_numpy(tp.erfinv(tp.tensor(y, dtype=tp.float64)))
    np.testing.assert_allclose(got, ref_erfinv(y), rtol=2e-12, atol=1e-300)
    x = np.concatenate([np.linspace(-20.25, 40, 2001), np.logspace(-8, 8, 200)])
    got = to_numpy(tp.lgamma(tp.tensor(x, dtype=tp.float64)))
    want = ref_lgamma(x)
    assert np.all(np.abs(got - want) <= 1e-14 * np.maximum(np.abs(want), 1))
    got = to_numpy(tp.digamma(tp.tensor(x, dtype=tp.float64)))
    want = ref_digamma(x)
    assert np.all(np.abs(got - want) <= 1e-12 * np.maximum(np.abs(want), 1))


def test_special_edge_values(device):
    x = T([0.0, -0.0, -3.0, 1.0, 2.0, np.inf, -np.inf, np.nan], device, tp.float64)
    check(tp.lgamma(x), [np.inf, np.inf, np.inf, 0, 0, np.inf, np.inf, np.nan], tp.float64)
    check(tp.digamma(x), [-np.inf, np.inf, np.nan, -0.5772156649015329, 0.4227843350984671,
                          np.inf, np.nan, np.nan], tp.float64)
    check(tp.erfinv(T([1.0, -1.0, 0.0, -0.0, 1.0000001, np.nan], device, tp.float64)),
          [np.inf, -np.inf, 0, -0.0, np.nan, np.nan], tp.float64)
    assert math.copysign(1, tp.erfinv(T([-0.0], device, tp.float64)).item()) == -1.0
    check(tp.logit(T([0.0, 1.0], device)), [-np.inf, np.inf], tp.float32)


@pytest.mark.parametrize("op", sorted(SPECIAL))
@pytest.mark.parametrize("dtype", (tp.int64, tp.int32, tp.uint8, tp.bool), ids=str)
def test_unary_integer_and_bool_give_float32(device, op, dtype):
    values = [0, 1] if dtype is tp.bool else [0, 1, 2, 5]
    x = np.asarray(values, dtype=np.float64)
    check(getattr(tp, op)(T(values, device, dtype)), SPECIAL[op](x), tp.float32)


@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_unary_methods_out_and_inplace(device, op):
    x = rounded(SPECIAL_DATA[op][:20], tp.float32)
    want = SPECIAL[op](x)
    t = T(x, device, tp.float32)
    check(getattr(t, op)(), want, tp.float32)
    out = tp.empty(x.shape, dtype=tp.float64, device=device)
    assert getattr(tp, op)(t, out=out) is out
    check(out, want, tp.float64, tol=TOL[tp.float32])
    assert getattr(t, op + "_")() is t
    check(t, want, tp.float32)
    with pytest.raises(RuntimeError):
        getattr(T([1, 2], device, tp.int64), op + "_")()   # float result into int64
    with pytest.raises(RuntimeError):
        getattr(tp, op)(t, out=tp.empty(3, device=device))   # wrong shape


@pytest.mark.parametrize("op", ["erfinv", "lgamma", "digamma", "logit"])
def test_unary_complex_refused(device, op):
    with pytest.raises(NotImplementedError, match=op):
        getattr(tp, op)(T([0.5 + 1j], device, tp.complex64))


def test_sinc_complex(device):
    z = np.array([0, 0.5 + 0.25j, -1.5j], dtype=np.complex128)
    with np.errstate(all="ignore"):
        want = np.where(z == 0, 1, np.sin(np.pi * z) / (np.pi * z))
    check(tp.sinc(T(z, device, tp.complex128)), want, tp.complex128)


def test_unary_type_errors(device):
    for op in SPECIAL:
        with pytest.raises(TypeError, match="Tensor"):
            getattr(tp, op)([0.5])


def test_logit_eps(device):
    x = rounded([-1, 0, 0.05, 0.5, 0.97, 1, np.nan], tp.float32)
    t = T(x, device)
    check(tp.logit(t, eps=0.1), ref_logit(x, 0.1), tp.float32)
    check(tp.logit(t, 0.0), ref_logit(x, 0.0), tp.float32)
    check(tp.logit(t, eps=-1.0), ref_logit(x), tp.float32)   # negative eps: no clamping
    check(t.logit(0.1), ref_logit(x, 0.1), tp.float32)
    t.logit_(eps=0.1)
    check(t, ref_logit(x, 0.1), tp.float32)
    with pytest.raises(TypeError, match="eps"):
        tp.logit(t, eps="0.1")


# -- binary ----------------------------------------------------------------------------------------
BINARY = {"hypot": np.hypot, "logaddexp": ref_logaddexp, "copysign": np.copysign,
          "xlogy": ref_xlogy}


def binary_data(op):
    a = RNG.uniform(-4, 4, size=(3, 1, 5))
    b = RNG.uniform(-4, 4, size=(4, 5))
    if op == "xlogy":
        b = np.abs(b)
        a[0, 0, :3] = 0
        b[0, :2] = [0, np.nan]
    a[1, 0, 0], b[1, 1] = np.inf, -np.inf
    a[2, 0, 1], b[2, 2] = np.nan, np.inf
    return a, b


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_values_broadcast(device, op, dtype):
    skip_unsupported(device, dtype)
    a, b = (rounded(v, dtype) for v in binary_data(op))
    result = getattr(tp, op)(T(a, device, dtype), T(b, device, dtype))
    check(result, BINARY[op](a, b), dtype)
    check(getattr(T(a, device, dtype), op)(T(b, device, dtype)), BINARY[op](a, b), dtype)


def test_logaddexp_infinities(device):
    a = T([np.inf, -np.inf, np.inf, -np.inf, 1.0, np.nan], device, tp.float64)
    b = T([np.inf, -np.inf, -np.inf, 2.0, -np.inf, 0.0], device, tp.float64)
    check(tp.logaddexp(a, b), [np.inf, -np.inf, np.inf, 2.0, 1.0, np.nan], tp.float64)


def test_binary_promotion(device):
    f32 = T([1.5, -2.0], device, tp.float32)
    f64 = T([3.0, 4.0], device, tp.float64)
    i64 = T([3, -4], device, tp.int64)
    assert tp.hypot(f32, f64).dtype == tp.float64
    check(tp.hypot(i64, f32), np.hypot([3, -4], [1.5, -2.0]), tp.float32)
    check(tp.copysign(i64, -1), [-3.0, -4.0], tp.float32)
    check(tp.copysign(T([True, False], device), f32), [1.0, -0.0], tp.float32)
    check(tp.copysign(f32, T([-0.0, 1.0], device, tp.float16)), [-1.5, 2.0], tp.float32)
    check(tp.xlogy(i64, T([2, 3], device, tp.int32)), [3 * math.log(2), -4 * math.log(3)],
          tp.float32)
    check(tp.xlogy(2, f64), 2 * np.log([3.0, 4.0]), tp.float64)   # a number first
    check(tp.xlogy(f32, 3), np.array([1.5, -2.0]) * math.log(3), tp.float32)
    check(tp.logaddexp(f32, f64), ref_logaddexp(np.array([1.5, -2.0]), [3.0, 4.0]),
          tp.float64)


@pytest.mark.parametrize("op", ["hypot", "logaddexp"])
def test_binary_integer_refused(device, op):
    i = T([1, 2], device, tp.int64)
    with pytest.raises(NotImplementedError, match=op):
        getattr(tp, op)(i, i)
    with pytest.raises(NotImplementedError, match=op):
        getattr(tp, op)(T([True], device), T([False], device))
    if op == "hypot":
        with pytest.raises(NotImplementedError):
            tp.hypot(T([1j], device), T([1j], device))
    with pytest.raises(TypeError, match="other"):
        getattr(tp, op)(T([1.0], device), 2.0)


def test_logaddexp_complex(device):
    a = np.array([1 + 1j, -2j, 0.5 + 3j, 40 - 1j], np.complex128)
    b = np.array([0.5 - 1j, 3 + 0j, 0.5 + 3j, -40 + 2j], np.complex128)
    check(tp.logaddexp(T(a, device, tp.complex128), T(b, device, tp.complex128)),
          np.log(np.exp(a) + np.exp(b)), tp.complex128)


def test_binary_out_and_inplace(device):
    a, b = [1.5, -3.0, 0.25], [2.0, 4.0, -1.0]
    t, u = T(a, device), T(b, device)
    for op, reference in BINARY.items():
        out = tp.empty(3, dtype=tp.float64, device=device)
        assert getattr(tp, op)(t, u, out=out) is out
        check(out, reference(np.array(a), np.array(b)), tp.float64, tol=TOL[tp.float32])
        with pytest.raises(RuntimeError, match="shape"):
            getattr(tp, op)(t, u, out=tp.empty(2, device=device))
    for op in ("hypot", "copysign", "xlogy"):
        x = T(a, device)
        assert getattr(x, op + "_")(u) is x
        check(x, BINARY[op](np.array(a), np.array(b)), tp.float32)
        with pytest.raises(RuntimeError):   # float result into an integer tensor
            getattr(T([1, 2, 3], device, tp.int64), op + "_")(u)
        with pytest.raises(RuntimeError, match="broadcast"):   # self does not broadcast
            getattr(T([1.0], device), op + "_")(u)


def test_xlogy_errors(device):
    with pytest.raises(TypeError, match="at least one Tensor"):
        tp.xlogy(1.0, 2.0)
    with pytest.raises(NotImplementedError):
        tp.xlogy(T([1j], device), 2.0)


def test_heaviside(device):
    x = np.array([-2.0, 0.0, -0.0, 3.0, np.nan, np.inf])
    v = np.array([7.0])
    check(tp.heaviside(T(x, device), T(v, device)), ref_heaviside(x, v), tp.float32)
    xi, vi = np.array([[-2, 0, 5]]), np.array([[9], [4]])
    check(tp.heaviside(T(xi, device), T(vi, device)), ref_heaviside(xi, vi).astype(np.int64),
          tp.int64)
    check(tp.heaviside(T([False, True], device), T([True, False], device)), [True, True],
          tp.bool)
    t = T(x, device)
    assert t.heaviside_(T(v, device)) is t
    check(t, ref_heaviside(x, v), tp.float32)
    check(T(x, device).heaviside(T(v, device)), ref_heaviside(x, v), tp.float32)
    out = tp.empty(6, dtype=tp.float32, device=device)
    assert tp.heaviside(T(x, device), T(v, device), out=out) is out
    check(out, ref_heaviside(x, v), tp.float32)
    with pytest.raises(RuntimeError, match="different dtypes"):
        tp.heaviside(T(x, device), T(v, device, tp.float64))
    with pytest.raises(RuntimeError, match="different dtypes"):   # an out= of another dtype too
        tp.heaviside(T(x, device), T(v, device), out=tp.empty(6, dtype=tp.float64,
                                                              device=device))
    with pytest.raises(RuntimeError, match="complex"):
        tp.heaviside(T([1j], device), T([1j], device))
    with pytest.raises(TypeError, match="values"):
        tp.heaviside(T(x, device), 1.0)


# -- ternary ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_addcmul_addcdiv_values(device, dtype):
    skip_unsupported(device, dtype)
    x = rounded(RNG.uniform(-2, 2, (2, 3)), dtype)
    t1 = rounded(RNG.uniform(-2, 2, (3,)), dtype)
    t2 = rounded(RNG.uniform(0.5, 2, (2, 1)), dtype)
    args = (T(x, device, dtype), T(t1, device, dtype), T(t2, device, dtype))
    check(tp.addcmul(*args), x + t1 * t2, dtype)
    check(tp.addcmul(*args, value=-0.5), x - 0.5 * t1 * t2, dtype)
    check(tp.addcdiv(*args, value=2), x + 2 * t1 / t2, dtype)
    check(args[0].addcdiv(args[1], args[2], value=0.25), x + 0.25 * t1 / t2, dtype)
    check(args[0].addcmul(args[1], args[2]), x + t1 * t2, dtype)


def test_addcmul_addcdiv_dtypes_out_inplace(device):
    i = T([[1, 2], [3, 4]], device, tp.int64)
    check(tp.addcmul(i, i, i, value=2), [[3, 10], [21, 36]], tp.int64)
    check(tp.addcmul(i, i, T([0.5, 1.0], device)), [[1.5, 4], [4.5, 8]], tp.float32)
    check(tp.addcdiv(i, i, T([2.0, 4.0], device)), [[1.5, 2.5], [4.5, 5.0]], tp.float32)
    check(tp.addcmul(T([1], device, tp.int8), T([2], device, tp.int16), T([3], device, tp.uint8)),
          [7], tp.int16)
    x = T([1.0, 2.0], device)
    assert x.addcmul_(T([2.0, 3.0], device), T([4.0], device), value=0.5) is x
    check(x, [5.0, 8.0], tp.float32)
    assert x.addcdiv_(T([2.0, 3.0], device), T([4.0], device)) is x
    check(x, [5.5, 8.75], tp.float32)
    out = tp.empty(2, dtype=tp.float64, device=device)
    assert tp.addcdiv(x, x, x, out=out) is out
    check(out, [6.5, 9.75], tp.float64)
    with pytest.raises(RuntimeError, match="integer division"):
        tp.addcdiv(T([1.0], device), i, i)
    with pytest.raises(RuntimeError, match="integer division"):
        tp.addcdiv(T([1.0], device), T([True], device), T([True], device))
    with pytest.raises(NotImplementedError, match="addcmul"):
        b = T([True], device)
        tp.addcmul(b, b, b)
    with pytest.raises(TypeError, match="value"):
        tp.addcmul(x, x, x, value="2")
    with pytest.raises(TypeError, match="tensor1"):
        tp.addcmul(x, 2.0, x)
    with pytest.raises(RuntimeError):   # float result into an integer tensor
        i.addcmul_(i, T([0.5], device))
    with pytest.raises(RuntimeError, match="broadcast"):
        T([1.0], device).addcmul_(x, x)
    with pytest.raises(ValueError, match="broadcast"):
        tp.addcmul(x, T([1.0, 2.0, 3.0], device), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lerp_values(device, dtype):
    skip_unsupported(device, dtype)
    a = rounded(RNG.uniform(-3, 3, (3, 4)), dtype)
    b = rounded(RNG.uniform(-3, 3, (4,)), dtype)
    w = rounded(RNG.uniform(-0.5, 1.5, (3, 1)), dtype)
    ta, tb, tw = T(a, device, dtype), T(b, device, dtype), T(w, device, dtype)
    check(tp.lerp(ta, tb, tw), a + w * (b - a), dtype)
    check(tp.lerp(ta, tb, 0.75), a + 0.75 * (b - a), dtype)
    check(ta.lerp(tb, 0.25), a + 0.25 * (b - a), dtype)
    # exact at weight 0 and 1
    check(tp.lerp(ta, tb, 0.0), np.broadcast_to(a, (3, 4)), dtype, tol=(0, 0))
    check(tp.lerp(ta, tb, 1.0), np.broadcast_to(b, (3, 4)), dtype, tol=(0, 0))


def test_lerp_out_inplace_errors(device):
    a, b = T([0.0, 10.0], device), T([1.0, 20.0], device)
    assert a.lerp_(b, 0.5) is a
    check(a, [0.5, 15.0], tp.float32)
    out = tp.empty(2, dtype=tp.float64, device=device)
    assert tp.lerp(a, b, T([1.0, 0.0], device), out=out) is out
    check(out, [1.0, 15.0], tp.float64)
    with pytest.raises(RuntimeError, match="end"):
        tp.lerp(a, T([1.0, 2.0], device, tp.float64), 0.5)
    with pytest.raises(RuntimeError, match="weight"):
        tp.lerp(a, b, T([0.5], device, tp.float64))
    with pytest.raises(NotImplementedError, match="lerp"):
        tp.lerp(T([1, 2], device), T([3, 4], device), 0.5)
    with pytest.raises(TypeError, match="weight"):
        tp.lerp(a, b, "0.5")
    with pytest.raises(TypeError, match="end"):
        tp.lerp(a, 1.0, 0.5)
    with pytest.raises(RuntimeError, match="broadcast"):
        T([1.0], device).lerp_(b, 0.5)


# -- nan_to_num ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_to_num(device, dtype):
    skip_unsupported(device, dtype)
    x = np.array([[np.nan, np.inf], [-np.inf, 1.5]])
    t = T(x, device, dtype)
    big = float(ml_dtypes.finfo(dtype.numpy).max)
    check(tp.nan_to_num(t), [[0, big], [-big, 1.5]], dtype, tol=(1e-7, 0))
    check(tp.nan_to_num(t, nan=2.0, posinf=9.0, neginf=-8.0), [[2, 9], [-8, 1.5]], dtype)
    check(t.nan_to_num(1.0, neginf=-1.0), [[1, big], [-1, 1.5]], dtype, tol=(1e-7, 0))
    assert t.nan_to_num_(posinf=3.0) is t
    check(t, [[0, 3], [-big, 1.5]], dtype, tol=(1e-7, 0))


def test_nan_to_num_other_dtypes(device):
    i = T([1, -2], device, tp.int64)
    r = tp.nan_to_num(i, nan=5.0)
    check(r, [1, -2], tp.int64)
    assert r is not i
    check(tp.nan_to_num(T([True, False], device)), [True, False], tp.bool)
    z = T([complex(np.nan, np.inf), complex(-np.inf, 2)], device, tp.complex64)
    big = float(np.finfo(np.float32).max)
    check(tp.nan_to_num(z, nan=1.0), [complex(1, big), complex(-big, 2)], tp.complex64,
          tol=(1e-7, 0))
    out = tp.empty(2, dtype=tp.float64, device=device)
    assert tp.nan_to_num(T([np.nan, 1e39], device, tp.float64), out=out, posinf=1e300) is out
    check(out, [0, 1e39], tp.float64)
    # a replacement beyond float32's range becomes inf, as a cast does
    check(tp.nan_to_num(T([np.inf], device), posinf=1e300), [np.inf], tp.float32)
    with pytest.raises(TypeError, match="posinf"):
        tp.nan_to_num(T([1.0], device), posinf="big")
    with pytest.raises(TypeError, match="input"):
        tp.nan_to_num([1.0])
    with pytest.raises(RuntimeError, match="shape"):
        tp.nan_to_num(T([1.0], device), out=tp.empty(2, device=device))


# -- comparison ------------------------------------------------------------------------------------
def test_isclose_values(device):
    a = np.array([1.0, 1.0, np.inf, np.inf, np.nan, 0.0, 1e-9, 100.0])
    b = np.array([1.0 + 1e-6, 1.1, np.inf, -np.inf, np.nan, 1e-9, 0.0, 100.0011])
    for dtype in (tp.float32, tp.float64):
        ta, tb = T(a, device, dtype), T(b, device, dtype)
        ra, rb = rounded(a, dtype), rounded(b, dtype)
        check(tp.isclose(ta, tb), np.isclose(ra, rb), tp.bool)
        check(tp.isclose(ta, tb, equal_nan=True), np.isclose(ra, rb, equal_nan=True), tp.bool)
        check(tp.isclose(ta, tb, rtol=0.2, atol=0.0), np.isclose(ra, rb, rtol=0.2, atol=0.0),
              tp.bool)
        check(ta.isclose(tb, 0, 0), ra == rb, tp.bool)
        assert tp.allclose(ta[:4], ta[:4]) is True
        assert tp.allclose(ta, ta) is False   # NaN is not close to NaN by default
        assert tp.allclose(ta[:4], tb[:4]) is False
        assert tp.allclose(ta, ta, equal_nan=True) is True
        assert ta[4:5].allclose(tb[4:5], equal_nan=True) is True
        assert tp.allclose(ta[4:5], tb[4:5]) is False


def test_isclose_broadcast_and_dtypes(device):
    a = T([[1.0], [2.0]], device)
    b = T([1.0, 2.0, 2.00001], device)
    check(tp.isclose(a, b), [[True, False, False], [False, True, True]], tp.bool)
    i, j = T([1, 5, -3], device), T([1, 6, -3], device)
    check(tp.isclose(i, j), [True, False, True], tp.bool)
    check(tp.isclose(i, j, rtol=0.2), [True, True, True], tp.bool)
    check(tp.isclose(T([True, False], device), T([True, True], device)), [True, False], tp.bool)
    h = T([1.0, 1.001], device, tp.float16)
    check(tp.isclose(h, T([1.0, 1.0], device, tp.float16), rtol=1e-3), [True, True], tp.bool)
    z = T([1 + 1j], device, tp.complex64)
    check(tp.isclose(z, z), [True], tp.bool)
    assert tp.allclose(i, i) is True


def test_isclose_errors(device):
    a = T([1.0], device)
    with pytest.raises(RuntimeError, match="float64"):
        tp.isclose(a, T([1.0], device, tp.float64))
    with pytest.raises(RuntimeError, match="rtol"):
        tp.isclose(a, a, rtol=-1.0)
    with pytest.raises(RuntimeError, match="atol"):
        tp.allclose(a, a, atol=-1e-8)
    with pytest.raises(TypeError, match="other"):
        tp.isclose(a, 1.0)
    with pytest.raises(TypeError, match="rtol"):
        tp.isclose(a, a, rtol="big")
    with pytest.raises(ValueError, match="broadcast"):
        tp.isclose(a.expand(2) + 0, T([1.0, 2.0, 3.0], device))


def test_equal(device):
    a = T([[1.0, 2.0], [3.0, np.nan]], device)
    assert tp.equal(a[:, :1], T([[1.0], [3.0]], device)) is True
    assert tp.equal(a, a) is False   # NaN is never equal
    assert a[0].equal(T([1.0, 2.0], device)) is True
    assert tp.equal(a[0], T([1.0, 2.5], device)) is False
    assert tp.equal(a[0], T([[1.0, 2.0]], device)) is False   # shapes differ, no broadcasting
    assert tp.equal(T([], device), T([], device)) is True
    assert tp.equal(T([1, 2], device), T([1, 2], device)) is True
    # different dtypes compare after promotion (torch 2.11, cpu and cuda alike)
    assert tp.equal(T([1, 2], device), T([1.0, 2.0], device)) is True
    assert tp.equal(T([0.1], device), T([0.1], device, tp.float64)) is False
    with pytest.raises(TypeError, match="other"):
        tp.equal(a, [1.0])


# -- inside a captured graph -----------------------------------------------------------------------
@requires_accelerator
def test_captured_graph_replays_every_op():
    dev = tp.accelerator.current_accelerator().type + ":0"
    x = tp.zeros(4, device=dev)
    y = tp.zeros(4, device=dev)
    g = tp.accelerator.Graph()
    with g:
        results = {
            "erfinv": tp.erfinv(x * 0.5), "lgamma": tp.lgamma(x), "digamma": tp.digamma(x),
            "sinc": tp.sinc(x), "logit": tp.logit(x * 0.1 + 0.5, eps=1e-3),
            "hypot": tp.hypot(x, y), "logaddexp": tp.logaddexp(x, y),
            "copysign": tp.copysign(x, y), "xlogy": tp.xlogy(x, y),
            "heaviside": tp.heaviside(x, y), "nan_to_num": tp.nan_to_num(x / y, posinf=7.0),
            "addcmul": tp.addcmul(x, x, y, value=2), "addcdiv": tp.addcdiv(x, x, y),
            "lerp": tp.lerp(x, y, 0.25), "isclose": tp.isclose(x, y, atol=0.1),
        }
        inplace = x.clone()
        inplace.lgamma_()
    with pytest.raises(RuntimeError):   # Python-bool results read the device
        with tp.accelerator.Graph():
            tp.allclose(x, y)
    for xs, ys in (([0.5, 1.5, 2.5, 3.0], [1.0, 2.0, -1.0, 0.0]),
                   ([1.25, -0.5, 0.75, 4.0], [2.0, 0.5, 3.0, 1.0])):
        x.copy_(tp.tensor(xs, device=dev))
        y.copy_(tp.tensor(ys, device=dev))
        g.replay()
        xa, ya = np.asarray(xs), np.asarray(ys)
        with np.errstate(all="ignore"):
            want = {
                "erfinv": ref_erfinv(xa * 0.5), "lgamma": ref_lgamma(xa),
                "digamma": ref_digamma(xa), "sinc": ref_sinc(xa),
                "logit": ref_logit(xa * 0.1 + 0.5, 1e-3), "hypot": np.hypot(xa, ya),
                "logaddexp": ref_logaddexp(xa, ya), "copysign": np.copysign(xa, ya),
                "xlogy": ref_xlogy(xa, ya), "heaviside": ref_heaviside(xa, ya),
                "nan_to_num": np.nan_to_num(xa / ya, posinf=7.0,
                                            neginf=-float(np.finfo(np.float32).max)),
                "addcmul": xa + 2 * xa * ya, "addcdiv": xa + xa / ya,
                "lerp": xa + 0.25 * (ya - xa), "isclose": np.isclose(xa, ya, atol=0.1),
            }
        for name, result in results.items():
            expected = want[name]
            check(result, expected, tp.bool if name == "isclose" else tp.float32,
                  tol=(1e-5, 1e-5))
        check(inplace, ref_lgamma(xa), tp.float32, tol=(1e-5, 1e-5))
