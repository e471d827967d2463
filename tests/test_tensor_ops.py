"""Elementwise ops, reductions, matmul, joins and activations against NumPy, on every device."""

import math
import warnings

import numpy as np
import pytest

import tensorplay as tp
from support import supports, to_numpy

RNG = np.random.default_rng(1234)


def data(*shape, dtype=np.float32, low=-3.0, high=3.0):
    return RNG.uniform(low, high, size=shape).astype(dtype)


def check(result, expected, *, dtype=None, rtol=1e-5, atol=1e-6):
    got = to_numpy(result)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype is not None:
        assert result.dtype == dtype
    if got.dtype == np.bool_ or got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)


# -- elementwise -----------------------------------------------------------------------------
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_float_broadcasting(device, op):
    a, b = data(3, 1, 4), data(2, 4)
    b[0, 0] = a[0, 0, 0]  # one tie for the comparisons
    result = getattr(tp, op)(tp.tensor(a, device=device), tp.tensor(b, device=device))
    check(result, BINARY[op](a, b))
    assert result.device == tp.device(device)


@pytest.mark.parametrize("op,reference", [
    ("floor_divide", np.floor_divide), ("remainder", np.remainder),
    ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
    ("bitwise_xor", np.bitwise_xor), ("mul", np.multiply), ("sub", np.subtract)])
def test_binary_integer(device, op, reference):
    a = np.array([[-7, -3, 0, 5, 9]], dtype=np.int64)
    b = np.array([[2], [-3], [4]], dtype=np.int64)
    result = getattr(tp, op)(tp.tensor(a, device=device), tp.tensor(b, device=device))
    check(result, reference(a, b), dtype=tp.int64)


def test_operators_and_reflected_forms(device):
    a = data(2, 3)
    t = tp.tensor(a, device=device)
    check(t + 1, a + 1)
    check(2 - t, 2 - a)
    check(3 * t, 3 * a)
    check(1 / (t.abs() + 1), 1 / (np.abs(a) + 1))
    check(t ** 2, a ** 2)
    check(2 ** t, 2 ** a, rtol=1e-5)
    check(-t, -a)
    check(t @ t.T, a @ a.T, rtol=1e-5)
    check(~tp.tensor([True, False], device=device), np.array([False, True]))
    check(tp.tensor([6, 7], device=device) % 4, np.array([2, 3]))
    check(tp.tensor([6, 7], device=device) // 4, np.array([1, 1]))


UNARY = {
    "exp": (np.exp, -3, 3), "exp2": (np.exp2, -3, 3), "expm1": (np.expm1, -1, 1),
    "log": (np.log, 0.1, 5), "log2": (np.log2, 0.1, 5), "log10": (np.log10, 0.1, 5),
    "log1p": (np.log1p, -0.5, 5), "sqrt": (np.sqrt, 0, 9), "sin": (np.sin, -3, 3),
    "cos": (np.cos, -3, 3), "tan": (np.tan, -1, 1), "asin": (np.arcsin, -0.9, 0.9),
    "acos": (np.arccos, -0.9, 0.9), "atan": (np.arctan, -3, 3), "sinh": (np.sinh, -2, 2),
    "cosh": (np.cosh, -2, 2), "tanh": (np.tanh, -3, 3), "abs": (np.abs, -3, 3),
    "neg": (np.negative, -3, 3), "sign": (np.sign, -3, 3), "square": (np.square, -3, 3),
    "floor": (np.floor, -3, 3), "ceil": (np.ceil, -3, 3), "round": (np.rint, -3, 3),
    "trunc": (np.trunc, -3, 3), "reciprocal": (np.reciprocal, 0.5, 3),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_float(device, op):
    reference, low, high = UNARY[op]
    a = data(4, 5, low=low, high=high)
    t = tp.tensor(a, device=device)
    check(getattr(tp, op)(t), reference(a), rtol=2e-5, atol=1e-6)
    check(getattr(t, op)(), reference(a), rtol=2e-5, atol=1e-6)


def test_unary_integer_promotes_to_float(device):
    t = tp.tensor([1, 4, 9], device=device)
    check(t.sqrt(), np.array([1.0, 2.0, 3.0], np.float32), dtype=tp.float32)
    check(tp.exp(tp.tensor([0], device=device)), np.array([1.0], np.float32), dtype=tp.float32)
    check(t.abs(), np.array([1, 4, 9]), dtype=tp.int64)


def test_inplace_ops_write_into_self(device):
    a = data(2, 3)
    t = tp.tensor(a, device=device)
    before = t.data_ptr()
    t += 1
    t.mul_(2)
    t.exp_()
    assert t.data_ptr() == before
    check(t, np.exp((a + 1) * 2), rtol=1e-5)
    u = tp.tensor([1.0, 2.0], device=device)
    u.add_(tp.tensor([1, 1], device=device))  # an integer operand into a float tensor is fine
    check(u, np.array([2.0, 3.0]), dtype=tp.float32)


def test_inplace_float_into_integer_is_refused(device):
    t = tp.tensor([1, 2, 3], device=device)
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired "
                                           "output type int64"):
        t.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t /= 2
    check(t + 1, np.array([2, 3, 4]))


def test_add_sub_alpha_and_div_rounding(device):
    a, b = tp.tensor([1.0, 2.0], device=device), tp.tensor([10.0, 20.0], device=device)
    check(tp.add(a, b, alpha=2), np.array([21.0, 42.0]))
    check(tp.sub(a, b, alpha=0.5), np.array([-4.0, -8.0]))
    check(a.add(b, alpha=3), np.array([31.0, 62.0]))
    i, j = tp.tensor([7, -7, 6], device=device), tp.tensor([2, 2, -4], device=device)
    check(tp.div(i, j, rounding_mode="trunc"), np.array([3, -3, -1]), dtype=tp.int64)
    check(tp.div(i, j, rounding_mode="floor"), np.array([3, -4, -2]), dtype=tp.int64)
    check(tp.div(i, j), np.array([3.5, -3.5, -1.5]), dtype=tp.float32)
    check(tp.div(tp.tensor([7.5, -7.5], device=device), 2, rounding_mode="trunc"),
          np.array([3.0, -3.0]))
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        tp.add(i, j, alpha=0.5)
    with pytest.raises(ValueError, match="rounding_mode"):
        tp.div(i, j, rounding_mode="ceil")
    check(i + j, np.array([9, -5, 2]))


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
def test_fmod_takes_the_sign_of_the_dividend(device, dtype):
    a = np.array([-7, 7, -8, 9, 5], dtype)
    b = np.array([3, -3, 3, 4, -5], dtype)
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    check(tp.fmod(ta, tb), np.fmod(a, b), dtype=ta.dtype)
    check(ta.fmod(2), np.fmod(a, dtype(2)))
    check(tp.fmod(ta, tb), np.array([-1, 1, -2, 1, 0]))
    check(tp.remainder(ta, tb), np.array([2, -2, 1, 1, 0]))   # the sign of the divisor
    ta.fmod_(tb)
    check(ta, np.fmod(a, b))
    if dtype is np.int32:
        check(tp.fmod(ta, 2.5), np.fmod(np.fmod(a, b), np.float32(2.5)), dtype=tp.float32)


def test_round_halves_to_even_and_decimals(device):
    a = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 1.2345, 1234.5678, -0.051], np.float32)
    t = tp.tensor(a, device=device)
    check(tp.round(t), np.array([0, 2, 2, -2, -0, 1, 1235, -0], np.float32), rtol=0, atol=0)
    for decimals in (1, 2, 3, -1, -2):   # PyTorch's formula is NumPy's: rint(x * 10**n) / 10**n
        check(tp.round(t, decimals=decimals), np.round(a, decimals), rtol=0, atol=0)
        check(t.round(decimals=decimals), np.round(a, decimals), rtol=0, atol=0)
    check(tp.round(t, decimals=2), np.array([0.5, 1.5, 2.5, -2.5, -0.5, 1.23, 1234.57, -0.05]))
    check(tp.round(tp.tensor([0.125, 0.375], dtype=tp.float64, device=device), decimals=2),
          np.array([0.12, 0.38]), dtype=tp.float64, rtol=0, atol=1e-15)   # ties to even
    check(tp.round(t.half(), decimals=1), np.round(a.astype(np.float16), 1), dtype=tp.float16)
    check(tp.round(tp.tensor([3, -4], device=device)), np.array([3, -4]), dtype=tp.int64)
    u = t.clone()
    u.round_(decimals=1)
    check(u, np.round(a, 1), rtol=0, atol=0)
    out = tp.empty(8, device=device)
    tp.round(t, decimals=-1, out=out)
    check(out, np.round(a, -1), rtol=0, atol=0)
    with pytest.raises(TypeError, match="decimals must be an int, got float"):
        t.round(decimals=1.0)
    check(t.round(), np.round(a))


def test_shifts(device):
    a = np.array([1, -8, 5, 1 << 20], np.int32)
    t = tp.tensor(a, device=device)
    check(t << 2, a << 2, dtype=tp.int32)
    check(t >> 1, a >> 1, dtype=tp.int32)
    check(tp.bitwise_left_shift(t, tp.tensor([1, 2, 3, 4], dtype=tp.int32, device=device)),
          a << np.array([1, 2, 3, 4], np.int32))
    check(3 << tp.tensor([1, 4], device=device), np.array([6, 48]), dtype=tp.int64)
    check(t.bitwise_right_shift(2), a >> 2)
    u = t.clone()
    u <<= 1
    check(u, a << 1)
    u >>= 2
    check(u, (a << 1) >> 2)


def test_integer_pow_with_negative_tensor_exponents(device):
    base = tp.tensor([2, 1, -1, -1, 3, 0, 5], device=device)
    exponent = tp.tensor([-1, -3, -3, -2, 2, 3, 0], device=device)
    # PyTorch truncates: 2**-1 -> 0; only bases 1 and -1 give nonzero results
    check(base ** exponent, np.array([0, 1, -1, 1, 9, 0, 1]), dtype=tp.int64)
    check(2 ** exponent, np.array([0, 0, 0, 0, 4, 8, 1]), dtype=tp.int64)
    check(base.int() ** exponent.to(tp.int8), np.array([0, 1, -1, 1, 9, 0, 1]), dtype=tp.int32)
    check(base ** tp.tensor(-1, device=device), np.array([0, 1, -1, -1, 0, 0, 0]))
    check(base ** 2, np.array([4, 1, 1, 1, 9, 0, 25]))
    check(base.float() ** -1, np.array([0.5, 1, -1, -1, 1 / 3, math.inf, 0.2]))


def test_no_numpy_warnings(device):
    """PyTorch computes inf/nan silently; NumPy's RuntimeWarnings must not reach the user."""
    t = tp.tensor([100.0, 0.0, -1.0], device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [t.exp(), t * 1e38, t / 0, t.log(), t.sqrt(), t ** 1e10, tp.tensor(
            [60000.0], dtype=tp.float16, device=device) * 2, t.exp().sum(), (t * 1e30).std(),
            t.exp().cumprod(0), t.exp().norm(), tp.tensor([3.0e38], device=device) + 3.0e38,
            t % 0, t + 1e300, tp.logsumexp(t / 0, 0), tp.softmax(t.exp(), 0)]
        if device != "cpu":   # the host refuses an integer division by zero instead
            results += [tp.tensor([1, 2], device=device) // 0]
        values = [r.tolist() for r in results]
    assert values[0][0] == math.inf and math.isnan(values[3][2])


def test_zero_dim_tensors(device):
    s = tp.tensor(2.5, device=device)
    assert s.shape == () and s.ndim == 0
    check(s * tp.tensor([1.0, 2.0], device=device), np.array([2.5, 5.0]))
    check(s.exp(), np.exp(np.float32(2.5)), rtol=1e-6)
    assert (s + 1).item() == 3.5
    assert tp.tensor(3, device=device).sum().item() == 3


# -- reductions ------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_prod_amax_amin(device, dim, keepdim):
    a = data(3, 4, 5, low=0.5, high=1.5)
    t = tp.tensor(a, device=device)
    axis = dim
    for name, reference in (("sum", np.sum), ("mean", np.mean), ("prod", np.prod),
                            ("amax", np.amax), ("amin", np.amin)):
        kwargs = {} if dim is None else {"dim": dim}
        result = getattr(t, name)(**kwargs, keepdim=keepdim)
        check(result, reference(a, axis=axis, keepdims=keepdim), rtol=2e-5)


def test_reduction_dtypes(device):
    ints = tp.tensor([[1, 2], [3, 4]], dtype=tp.int32, device=device)
    assert ints.sum().dtype == tp.int64 and ints.sum().item() == 10
    assert ints.prod().dtype == tp.int64 and ints.prod().item() == 24
    assert ints.cumsum(0).dtype == tp.int64
    bools = tp.tensor([True, True, False], device=device)
    assert bools.sum().dtype == tp.int64 and bools.sum().item() == 2
    assert ints.sum(dtype=tp.float32).dtype == tp.float32
    assert ints.mean(dtype=tp.float64).item() == 2.5
    assert ints.amax().dtype == tp.int32 and ints.amax().item() == 4
    if supports(device, tp.float16):
        halves = tp.tensor([0.1] * 2000, dtype=tp.float16, device=device)
        total = halves.sum()
        assert total.dtype == tp.float16
        assert abs(total.item() - 2000 * 0.0999755859375) < 1.0  # accumulated in float32
    with pytest.raises(RuntimeError, match="mean.*floating point.*Got: int32"):
        ints.mean()
    check(ints.sum(dim=1), np.array([3, 7]))


def test_max_min_forms(device):
    a = np.array([[1.0, 5.0, 3.0], [7.0, 2.0, 7.0]], np.float32)
    t = tp.tensor(a, device=device)
    assert t.max().shape == () and t.max().item() == 7.0
    assert tp.min(t).item() == 1.0
    values, indices = t.max(dim=1)
    check(values, np.array([5.0, 7.0]))
    check(indices, np.array([1, 0]), dtype=tp.int64)  # the first of equal maxima
    result = tp.min(t, 0, keepdim=True)
    assert type(result).__name__ == "min"
    check(result.values, np.array([[1.0, 2.0, 3.0]]))
    check(result.indices, np.array([[0, 1, 0]]))
    other = tp.tensor([4.0, 4.0, 4.0], device=device)
    check(tp.max(t, other), np.maximum(a, 4.0))
    check(t.argmax(), np.array(3))
    check(t.argmin(dim=1, keepdim=True), np.array([[0], [1]]))
    with pytest.raises(RuntimeError, match="numel\\(\\) == 0"):
        tp.zeros(0, device=device).max()


def test_max_propagates_nan(device):
    t = tp.tensor([1.0, float("nan"), 3.0], device=device)
    assert math.isnan(t.max().item())
    assert math.isnan(t.amin().item())
    assert t.argmax().item() == 1


def test_all_any_count_nonzero(device):
    a = np.array([[0, 1, 2], [3, 4, 5]])
    t = tp.tensor(a, device=device)
    check(t.all(), np.array(False), dtype=tp.bool)
    check(t.any(dim=0), np.array([True, True, True]))
    check(t.all(dim=1, keepdim=True), np.array([[False], [True]]))
    check(tp.count_nonzero(t, dim=1), np.array([2, 3]), dtype=tp.int64)


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_std_var(device, correction):
    a = data(4, 6)
    t = tp.tensor(a, device=device)
    check(t.var(dim=1, correction=correction), np.var(a, axis=1, ddof=correction), rtol=1e-4)
    check(t.std(correction=correction), np.std(a, ddof=correction), rtol=1e-4)
    check(tp.var(t, 0, keepdim=True, correction=correction),
          np.var(a, axis=0, ddof=correction, keepdims=True), rtol=1e-4)


def test_std_var_defaults_and_unbiased(device):
    a = data(10)
    t = tp.tensor(a, device=device)
    check(t.var(), np.var(a, ddof=1), rtol=1e-5)
    check(t.var(unbiased=False), np.var(a), rtol=1e-5)
    check(t.std(0, unbiased=True), np.std(a, ddof=1), rtol=1e-5)
    with pytest.raises(RuntimeError, match="floating point"):
        tp.tensor([1, 2], device=device).var()


@pytest.mark.parametrize("p", [2, 1, 3, float("inf"), float("-inf"), 0, "fro"])
def test_norm(device, p):
    a = data(3, 4)
    t = tp.tensor(a, device=device)
    flat = np.abs(a.reshape(-1)).astype(np.float64)
    expected = {2: np.sqrt((flat ** 2).sum()), "fro": np.sqrt((flat ** 2).sum()),
                1: flat.sum(), 3: (flat ** 3).sum() ** (1 / 3), float("inf"): flat.max(),
                float("-inf"): flat.min(), 0: float(np.count_nonzero(flat))}[p]
    check(t.norm(p), np.float32(expected), rtol=1e-5)
    check(tp.norm(t, p=2, dim=1), np.sqrt((a.astype(np.float64) ** 2).sum(1)), rtol=1e-5)


def test_logsumexp(device):
    a = data(3, 5, low=-50, high=50)
    t = tp.tensor(a, device=device)
    top = a.max(axis=1, keepdims=True)
    expected = (np.log(np.exp(a - top).sum(axis=1, keepdims=True)) + top)
    check(t.logsumexp(1, keepdim=True), expected, rtol=1e-5)
    check(tp.logsumexp(t, dim=1), expected[:, 0], rtol=1e-5)
    inf = tp.tensor([float("-inf"), float("-inf")], device=device)
    assert inf.logsumexp(0).item() == float("-inf")
    assert tp.tensor([1000.0, 1000.0], device=device).logsumexp(0).item() == \
        pytest.approx(1000 + math.log(2))


def test_cumsum_cumprod(device):
    a = data(3, 4, low=0.5, high=1.5)
    t = tp.tensor(a, device=device)
    check(t.cumsum(1), np.cumsum(a, axis=1), rtol=1e-5)
    check(tp.cumprod(t, dim=0), np.cumprod(a, axis=0), rtol=1e-5)
    check(tp.tensor([1, 2, 3], dtype=tp.int8, device=device).cumsum(0), np.array([1, 3, 6]),
          dtype=tp.int64)
    check(t.cumsum(-1, dtype=tp.float64), np.cumsum(a.astype(np.float64), axis=1),
          dtype=tp.float64)


# -- matmul -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
                                    ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 1, 2, 3),
                                                                           (3, 3, 2)),
                                    ((3,), (2, 3, 4)), ((2, 2, 3), (3,))])
def test_matmul_shapes(device, shapes):
    a, b = data(*shapes[0]), data(*shapes[1])
    result = tp.matmul(tp.tensor(a, device=device), tp.tensor(b, device=device))
    check(result, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_mm_bmm_dot_addmm_outer(device):
    a, b, c = data(2, 3), data(3, 4), data(4)
    ta, tb, tc = (tp.tensor(x, device=device) for x in (a, b, c))
    check(tp.mm(ta, tb), a @ b, rtol=1e-5)
    check(ta.mm(tb), a @ b, rtol=1e-5)
    x, y = data(5, 2, 3), data(5, 3, 4)
    check(tp.bmm(tp.tensor(x, device=device), tp.tensor(y, device=device)), x @ y, rtol=1e-5)
    check(tp.dot(tc, tc), np.dot(c, c), rtol=1e-5)
    check(tp.addmm(tc, ta, tb, beta=0.5, alpha=2), 0.5 * c + 2 * (a @ b), rtol=1e-5)
    nan_bias = tp.full((2, 4), float("nan"), device=device)
    check(tp.addmm(nan_bias, ta, tb, beta=0), a @ b, rtol=1e-5)
    check(tp.outer(tc, tc), np.outer(c, c), rtol=1e-6)
    ints = tp.tensor([[1, 2], [3, 4]], device=device)
    if device == "cpu":
        check(ints @ ints, np.array([[7, 10], [15, 22]]), dtype=tp.int64)
    else:   # as PyTorch on CUDA ("addmm_cuda" not implemented for 'Long')
        with pytest.raises(NotImplementedError, match="int64 tensors are not implemented"):
            ints @ ints


def test_matmul_half_precision(device):
    for dtype in (tp.float16, tp.bfloat16):
        if not supports(device, dtype):
            continue
        a, b = data(4, 8), data(8, 3)
        result = tp.tensor(a, dtype=dtype, device=device) @ tp.tensor(b, dtype=dtype,
                                                                      device=device)
        assert result.dtype == dtype
        check(result.float(), a @ b, rtol=5e-2, atol=5e-2)


# -- joining, selecting, bounding --------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(device, dim):
    a, b = data(2, 3), data(2, 3)
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    check(tp.cat([ta, tb], dim=dim), np.concatenate([a, b], axis=dim))
    check(tp.stack([ta, tb], dim=dim), np.stack([a, b], axis=dim))
    check(tp.concat((ta, tb, ta), dim), np.concatenate([a, b, a], axis=dim))


def test_cat_promotes_and_skips_legacy_empty(device):
    i = tp.tensor([[1, 2]], device=device)
    f = tp.tensor([[0.5, 1.5]], device=device)
    result = tp.cat([i, f])
    check(result, np.array([[1.0, 2.0], [0.5, 1.5]]), dtype=tp.float32)
    empty = tp.zeros(0, device=device)
    check(tp.cat([i, empty, i], dim=1), np.array([[1.0, 2.0, 1.0, 2.0]]), dtype=tp.float32)
    check(tp.stack([tp.tensor(1, device=device), tp.tensor(2, device=device)]),
          np.array([1, 2]))


def test_where(device):
    a, b = data(2, 3), data(1, 3)
    cond = a > 0
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    tcond = tp.tensor(cond, device=device)
    check(tp.where(tcond, ta, tb), np.where(cond, a, b))
    check(tp.where(tcond, ta, 0.0), np.where(cond, a, 0.0))
    result = tp.where(tcond, 1, 0)
    check(result, cond.astype(np.int64), dtype=tp.int64)
    check(tp.where(tcond, tp.tensor([1, 2, 3], device=device), 0.5),
          np.where(cond, [1, 2, 3], 0.5), dtype=tp.float32)
    rows, cols = tp.where(tcond)
    expected_rows, expected_cols = np.nonzero(cond)
    check(rows, expected_rows)
    check(cols, expected_cols)


def test_tensor_where_method_takes_the_condition_first(device):
    a, b = data(2, 3), data(2, 3)
    cond = a > 0
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    tcond = tp.tensor(cond, device=device)
    check(ta.where(tcond, tb), np.where(cond, a, b))   # PyTorch: x.where(c, y) == where(c, x, y)
    check(ta.where(tcond, 0.0), np.where(cond, a, 0.0))


def test_clamp(device):
    a = data(3, 4)
    t = tp.tensor(a, device=device)
    check(t.clamp(-1, 1), np.clip(a, -1, 1))
    check(tp.clamp(t, min=0.5), np.maximum(a, 0.5))
    check(tp.clip(t, max=0.0), np.minimum(a, 0.0))
    low = tp.tensor([-1.0, 0.0, 1.0, 2.0], device=device)
    check(t.clamp(min=low), np.maximum(a, [-1.0, 0.0, 1.0, 2.0]))
    check(t.clamp(2.0, 1.0), np.full_like(a, 1.0))  # min > max: everything is max
    ints = tp.tensor([-5, 0, 5], device=device)
    check(ints.clamp(-2, 2), np.array([-2, 0, 2]), dtype=tp.int64)
    u = tp.tensor(a, device=device)
    assert u.clamp_(-0.5, 0.5) is u
    check(u, np.clip(a, -0.5, 0.5))
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints.clamp_(0.5, 1.5)
    with pytest.raises(ValueError, match="at least one of 'min' or 'max'"):
        t.clamp()
    check(tp.clamp(tp.tensor([float("nan")], device=device), 0, 1), np.array([np.nan]))


def test_flip_tril_triu(device):
    a = data(3, 4)
    t = tp.tensor(a, device=device)
    check(t.flip(0), a[::-1])
    check(tp.flip(t, (0, 1)), a[::-1, ::-1])
    check(t.tril(), np.tril(a))
    check(tp.triu(t, 1), np.triu(a, 1))
    check(tp.tril(tp.ones(2, 3, 3, device=device), -1), np.tril(np.ones((2, 3, 3)), -1))


# -- activations ------------------------------------------------------------------------------
def _sigmoid(a):
    return 1 / (1 + np.exp(-a.astype(np.float64)))


def test_relu_sigmoid_silu(device):
    a = data(4, 5, low=-40, high=40)
    t = tp.tensor(a, device=device)
    check(tp.relu(t), np.maximum(a, 0))
    check(t.sigmoid(), _sigmoid(a), rtol=1e-6, atol=0)  # relative accuracy in both tails
    check(tp.silu(t), a * _sigmoid(a), rtol=1e-5, atol=1e-6)
    check(tp.relu(tp.tensor([-2, 3], device=device)), np.array([0, 3]), dtype=tp.int64)
    check(tp.sigmoid(tp.tensor([0], device=device)), np.array([0.5]), dtype=tp.float32)
    u = tp.tensor(a, device=device)
    assert u.relu_() is u
    check(u, np.maximum(a, 0))
    assert math.isnan(tp.relu(tp.tensor([float("nan")], device=device)).item())


def _erf(a):
    return np.vectorize(math.erf)(np.asarray(a, np.float64))


def test_erf_accuracy(device):
    x64 = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, 0.79999, 0.8, 3.0, 1e-30]])
    x32 = x64.astype(np.float32)
    got32 = to_numpy(tp.erf(tp.tensor(x32, device=device))).astype(np.float64)
    assert np.abs(got32 - _erf(x32)).max() < 1.5e-7
    got64 = to_numpy(tp.erf(tp.tensor(x64, dtype=tp.float64, device=device)))
    assert np.abs(got64 - _erf(x64)).max() < 5e-15
    assert to_numpy(tp.erf(tp.tensor([float("inf"), float("-inf")], device=device))).tolist() \
        == [1.0, -1.0]
    check(tp.erfc(tp.tensor(x32[:50], device=device)), 1 - _erf(x32[:50]), atol=2e-7)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
def test_gelu(device, dtype):
    a = data(200, low=-6, high=6).astype(dtype.numpy)
    t = tp.tensor(a, device=device)
    x = a.astype(np.float64)
    exact = x * 0.5 * (1 + _erf(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    tol = 1e-6 if dtype is tp.float32 else 1e-13
    check(tp.gelu(t), exact, rtol=tol, atol=tol, dtype=dtype)
    check(t.gelu(approximate="tanh"), tanh, rtol=tol, atol=tol)
    assert np.abs(exact - tanh).max() > 1e-5  # the two forms really differ
    with pytest.raises(ValueError, match="approximate"):
        tp.gelu(t, approximate="fast")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(device, dim):
    a = data(3, 4, low=-80, high=80)
    t = tp.tensor(a, device=device)
    x = a.astype(np.float64)
    shifted = np.exp(x - x.max(axis=dim, keepdims=True))
    expected = shifted / shifted.sum(axis=dim, keepdims=True)
    check(tp.softmax(t, dim=dim), expected, rtol=1e-5, atol=1e-7)
    check(t.log_softmax(dim), np.log(expected), rtol=1e-5, atol=1e-5)
    check(tp.softmax(tp.tensor([1, 2], device=device), 0, dtype=tp.float64),
          np.exp([1, 2]) / np.exp([1, 2]).sum(), dtype=tp.float64)
    assert tp.softmax(tp.tensor(3.0, device=device), 0).item() == 1.0


def test_lerp(device):
    a, b, w = data(5), data(5), data(5, low=0, high=1)
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    check(tp.lerp(ta, tb, 0.25), a + 0.25 * (b - a), rtol=1e-5, atol=1e-6)
    check(ta.lerp(tb, tp.tensor(w, device=device)), a + w * (b - a), rtol=1e-5, atol=1e-6)
    check(tp.lerp(ta, tb, 1.0), b)  # exact at weight 1
    with pytest.raises(RuntimeError, match="expected dtype float32 for `end`"):
        tp.lerp(ta, tb.double(), 0.5)


def test_half_precision_activations(device):
    for dtype in (tp.float16, tp.bfloat16):
        if not supports(device, dtype):
            continue
        a = data(50, low=-4, high=4)
        t = tp.tensor(a, dtype=dtype, device=device)
        rounded = to_numpy(t.float()).astype(np.float64)
        for name, reference in (("gelu", lambda x: x * 0.5 * (1 + _erf(x / math.sqrt(2)))),
                                ("sigmoid", _sigmoid), ("exp", np.exp)):
            result = getattr(tp, name)(t)
            assert result.dtype == dtype
            check(result.float(), reference(rounded), rtol=1e-2, atol=1e-2)


def test_functional_table_covers_the_ops():
    for name in ("add", "sub", "mul", "div", "exp", "log", "sqrt", "tanh", "sigmoid", "relu",
                 "gelu", "softmax", "log_softmax", "silu", "sum", "mean", "max", "matmul", "mm",
                 "bmm", "dot", "cat", "concat", "stack", "where", "clamp", "clip", "reshape",
                 "permute", "transpose", "squeeze", "unsqueeze", "flatten", "broadcast_to",
                 "erf", "lerp", "logsumexp", "cumsum", "std", "var", "norm", "nonzero"):
        assert name in tp._functional_all and callable(getattr(tp, name)), name
    for name in tp._functional_all:
        assert hasattr(tp, name), name


def test_conversion_and_new_methods(device):
    t = tp.tensor([1.7, -2.2], device=device)
    check(t.int(), np.array([1, -2]), dtype=tp.int32)
    check(t.long(), np.array([1, -2]), dtype=tp.int64)
    check(t.double(), np.array([1.7, -2.2], np.float32), dtype=tp.float64)
    check(t.bool(), np.array([True, True]), dtype=tp.bool)
    assert t.is_floating_point() and not t.long().is_floating_point()
    z = t.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype == tp.float32 and z.device == tp.device(device)
    check(t.new_full((2,), 7), np.array([7.0, 7.0]), dtype=tp.float32)
    check(t.new_tensor([1, 2]), np.array([1.0, 2.0]), dtype=tp.float32)


def test_sort_argsort_topk(device):
    a = np.array([[3.0, 1.0, np.nan, 1.0, 2.0], [5.0, 5.0, 4.0, 4.0, 1.0]], np.float32)
    t = tp.tensor(a, device=device)
    values, indices = t.sort()
    check(values, np.sort(a, axis=-1))
    check(indices, np.argsort(a, axis=-1, kind="stable"))
    descending = tp.sort(t, dim=1, descending=True)
    check(descending.values, np.array([[np.nan, 3, 2, 1, 1], [5, 5, 4, 4, 1]]))
    check(descending.indices, np.array([[2, 0, 4, 1, 3], [0, 1, 2, 3, 4]]))  # ties stay in order
    check(tp.argsort(t, dim=0), np.argsort(a, axis=0, kind="stable"))
    top = t[1].topk(2)
    check(top.values, np.array([5.0, 5.0]))
    check(top.indices, np.array([0, 1]))
    check(t.topk(3, dim=1, largest=False).values, np.sort(a, axis=1)[:, :3])
    with pytest.raises(RuntimeError, match="k=6 is out of range"):
        t.topk(6)


def test_predicates_and_rsqrt(device):
    a = np.array([1.0, np.nan, np.inf, -np.inf, 4.0], np.float32)
    t = tp.tensor(a, device=device)
    check(tp.isnan(t), np.isnan(a), dtype=tp.bool)
    check(t.isinf(), np.isinf(a))
    check(tp.isfinite(t), np.isfinite(a))
    check(tp.isnan(tp.tensor([1, 2], device=device)), np.array([False, False]))
    check(tp.rsqrt(tp.tensor([4, 16], device=device)), np.array([0.5, 0.25]), dtype=tp.float32)
