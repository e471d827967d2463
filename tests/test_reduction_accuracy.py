"""Sum-like reductions over dims other than the innermost contiguous run keep float32 accuracy.

NumPy-like summation adds pairwise only along the innermost loop; over any other dim it adds one
by one, and a float32 result drifts with the number of elements (``ones(2e7, 2).sum(0)`` stopped
at 2**24). PyTorch's cascade sums get these right. Oracle: float64 NumPy over the same float32
values, with tolerances a few float32 roundings wide; the result keeps its dtype.
"""

import warnings

import numpy as np
import pytest

import tensorplay as tp
from support import supports, to_numpy

RNG = np.random.default_rng(2024)
N = 200_000


def check(result, expected, dtype, rtol=2e-6, atol=0.0):
    assert result.dtype == dtype
    got = to_numpy(result)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=atol)


def offset(rows, cols, base=1000.0):
    """float32 values ``base + U(0, 1)``: a large mean over a small spread."""
    return (base + RNG.random((rows, cols))).astype(np.float32)


def test_sum_and_mean_over_the_leading_dim(device):
    a = np.full((N, 3), 0.1, np.float32)
    t = tp.tensor(a, device=device)
    check(t.sum(0), a.astype(np.float64).sum(0), tp.float32)
    check(t.mean(0), a.astype(np.float64).mean(0), tp.float32)
    check(tp.sum(t, 0, keepdim=True), a.astype(np.float64).sum(0, keepdims=True), tp.float32)
    check(tp.mean(t, dim=(0,), keepdim=True), a.astype(np.float64).mean(0, keepdims=True),
          tp.float32)


def test_sum_counts_past_float32_integers(device):
    # 2**24 + 1000 ones in each column (an expanded view: no memory); a float32 sum adding one
    # by one stops at 2**24
    count = 2 ** 24 + 1000
    ones = tp.ones(1, 2, device=device).expand(count, 2)
    check(ones.sum(0), [float(count)] * 2, tp.float32, rtol=0)
    check(ones.mean(0), [1.0] * 2, tp.float32, rtol=0)


def test_var_std_over_the_leading_dim(device):
    a = offset(N // 2, 8)
    t = tp.tensor(a, device=device)
    ref = a.astype(np.float64)
    check(t.var(0), ref.var(0, ddof=1), tp.float32, rtol=1e-5)
    check(t.std(0, correction=0), ref.std(0), tp.float32, rtol=1e-5)
    check(tp.var(t, dim=0, keepdim=True), ref.var(0, ddof=1, keepdims=True), tp.float32,
          rtol=1e-5)


def test_trailing_dim_of_a_transposed_view(device):
    a = offset(N, 2, base=100.0)
    t = tp.tensor(a, device=device).T            # (2, N), not contiguous
    ref = a.T.astype(np.float64)
    check(t.std(1), ref.std(1, ddof=1), tp.float32, rtol=1e-5)
    check(t.sum(1), ref.sum(1), tp.float32)
    check(t.mean(-1), ref.mean(-1), tp.float32)


def test_trailing_dims_of_a_permuted_view(device):
    a = np.full((N // 8, 2, 4), 0.1, np.float32)
    t = tp.tensor(a, device=device).permute(1, 2, 0)     # (2, 4, N/8): dim 2 is strided
    ref = a.transpose(1, 2, 0).astype(np.float64)
    check(t.sum((1, 2)), ref.sum((1, 2)), tp.float32)
    check(t.mean(-1), ref.mean(-1), tp.float32)
    check(t.norm(dim=(1, 2)), np.sqrt((ref * ref).sum((1, 2))), tp.float32)


def test_several_dims_not_innermost(device):
    a = np.full((N // 4, 2, 4), 0.1, np.float32)
    t = tp.tensor(a, device=device)
    ref = a.astype(np.float64)
    check(t.sum((0, 2)), ref.sum((0, 2)), tp.float32)
    check(t.mean((0, 1)), ref.mean((0, 1)), tp.float32)
    check(t.var((0, 2)), ref.var((0, 2), ddof=1), tp.float32, atol=1e-9)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_norms_over_the_leading_dim(device, p):
    a = np.full((N, 2), 0.1, np.float32)
    t = tp.tensor(a, device=device)
    ref = (np.abs(a.astype(np.float64)) ** p).sum(0) ** (1.0 / p)
    check(t.norm(p=p, dim=0), ref, tp.float32)
    check(tp.linalg.vector_norm(t, ord=p, dim=0), ref, tp.float32)
    check(tp.linalg.norm(t, dim=0), np.sqrt((a.astype(np.float64) ** 2).sum(0)), tp.float32)


def test_logsumexp_over_the_leading_dim(device):
    a = RNG.random((N, 2)).astype(np.float32)
    t = tp.tensor(a, device=device)
    ref = a.astype(np.float64)
    top = ref.max(0)
    # within 2 float32 ulps of log(N) (~12); adding one by one was ~8 ulps off
    check(tp.logsumexp(t, 0), np.log(np.exp(ref - top).sum(0)) + top, tp.float32, rtol=0,
          atol=2e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_sums_over_the_leading_dim(device, dtype):
    half = getattr(tp, dtype)
    if not supports(device, half):
        pytest.skip(f"{device} does not hold {dtype}")
    t = tp.full((N, 2), 0.1, device=device).to(half)
    ref = to_numpy(t.float()).astype(np.float64)
    eps = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7  # one rounding into the result
    check(t.sum(0), ref.sum(0), half, rtol=eps)
    check(t.mean(0), ref.mean(0), half, rtol=eps)
    check(t.sum(0, dtype=tp.float32), ref.sum(0), tp.float32)


def test_complex64_over_the_leading_dim(device):
    a = (offset(N // 2, 2, 10.0) + 1j * offset(N // 2, 2, 10.0)).astype(np.complex64)
    t = tp.tensor(a, device=device)
    ref = a.astype(np.complex128)
    check(t.var(0), ref.var(0, ddof=1), tp.float32, rtol=1e-5)
    got = to_numpy(t.sum(0))
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, ref.sum(0), rtol=2e-6)
    check(t.norm(dim=0), np.sqrt((np.abs(ref) ** 2).sum(0)), tp.float32)


def test_contiguous_trailing_sums_keep_numpys_float32_values(device):
    # the fast cases (full and last-dim reductions of contiguous data) are unchanged: where the
    # arrays are NumPy's (cpu, sim), the same float32 pairwise sums as NumPy's own, bit for bit
    if tp.device(device).type not in ("cpu", "sim"):
        pytest.skip("CuPy's float32 reductions add in another order than NumPy's")
    a = RNG.random((64, 3000)).astype(np.float32)
    t = tp.tensor(a, device=device)
    np.testing.assert_array_equal(to_numpy(t.sum(1)), a.sum(1))
    np.testing.assert_array_equal(to_numpy(t.sum()), a.sum())
    np.testing.assert_array_equal(to_numpy(t.mean(-1)), a.mean(-1))
    np.testing.assert_array_equal(to_numpy(t.var(1)), a.var(1, ddof=1))
    assert t.sum(1).dtype == tp.float32 and t.var(1).dtype == tp.float32


def test_nansum_and_nanmean_over_a_leading_dim_stay_accurate(device):
    x = tp.full((1_000_000, 2), 0.1, device=device)
    x[0, 0] = float("nan")
    np.testing.assert_allclose(to_numpy(x.nansum(0)), [99_999.9, 100_000.0], rtol=1e-6)
    np.testing.assert_allclose(to_numpy(tp.nanmean(x, 0)), [0.1, 0.1], rtol=1e-6)


def test_mean_of_an_empty_tensor_is_nan_without_a_warning(device):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = tp.zeros(0, 3, device=device)
        assert np.isnan(empty.mean().item())
        assert np.isnan(to_numpy(empty.mean(dim=0))).all()


@pytest.mark.parametrize("shape", [(8, 512), (4, 16384), (256, 512), (3, 200_000), (7, 5, 3)])
@pytest.mark.parametrize("dtype", [tp.float32, tp.bfloat16, tp.float64])
def test_mean_of_every_element(device, shape, dtype):
    """A loss's mean over a whole tensor (on cuda one row kernel, or the mean of the rows'
    means past one row's limit for float32/float64): float64 NumPy's value, keepdim's shape."""
    if not supports(device, dtype):
        pytest.skip(f"{dtype} is not supported on {device}")
    a = offset(*shape[:2], base=3.0)[..., None].repeat(shape[2] if len(shape) > 2 else 1, -1)
    a = a.reshape(shape)
    t = tp.tensor(a, device=device).to(dtype)
    exact = to_numpy(t.double()).mean()
    rtol = 1e-2 if dtype is tp.bfloat16 else 2e-6
    check(t.mean(), exact, dtype, rtol=rtol)
    check(t.mean(dim=tuple(range(len(shape))), keepdim=True),
          np.full((1,) * len(shape), exact), dtype, rtol=rtol)
