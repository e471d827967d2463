"""Order statistics, counting and searching (``median mode kthvalue unique bincount histc cummax
cummin nansum nanmean searchsorted bucketize``) on every device: values against NumPy
references, dtypes, shapes, named tuples, every error, and use inside a captured graph (all but
``unique``/``bincount``, which read the data on the host and raise there).
"""

import warnings

import numpy as np
import pytest

import tensorplay as tp
from support import check_result, make_tensor, requires_accelerator, to_numpy

RNG = np.random.default_rng(1515)


T = make_tensor
check = check_result


def distinct(shape, dtype=np.float32):
    """Values without ties (so every index is determined)."""
    return RNG.permutation(int(np.prod(shape))).reshape(shape).astype(dtype) - 7


# -- median, kthvalue, mode -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_median_all_elements_is_the_lower_median(device, dtype):
    for shape in [(5,), (4,), (3, 4), (2, 3, 2)]:
        x = distinct(shape, dtype)
        want = np.sort(x.reshape(-1))[(x.size - 1) // 2]
        check(tp.median(T(x, device)), want, tp.from_numpy(x).dtype)
        check(T(x, device).median(), want, tp.from_numpy(x).dtype)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_median_kthvalue_with_dim(device, dim, keepdim):
    x = distinct((4, 5))
    order = np.argsort(x, axis=dim)
    n = x.shape[dim]
    for name, rank, call in (
            ("median", (n - 1) // 2, lambda t: tp.median(t, dim, keepdim=keepdim)),
            ("kthvalue", 1, lambda t: tp.kthvalue(t, 2, dim, keepdim=keepdim)),
            ("kthvalue", n - 1, lambda t: t.kthvalue(n, dim=dim, keepdim=keepdim))):
        result = call(T(x, device))
        assert type(result).__name__ == name and result._fields == ("values", "indices")
        idx = np.take(order, [rank], axis=dim)
        vals = np.take_along_axis(x, idx, dim)
        if not keepdim:
            idx, vals = idx.squeeze(dim), vals.squeeze(dim)
        check(result.values, vals, tp.float32)
        check(result.indices, idx, tp.int64)


def test_median_nan_and_empty(device):
    x = np.array([[1.0, np.nan, 3.0], [2.0, 0.0, 5.0]], np.float32)
    assert np.isnan(to_numpy(tp.median(T(x, device))))
    values, indices = tp.median(T(x, device), 1)
    assert np.isnan(to_numpy(values)[0]) and to_numpy(values)[1] == 2.0
    check(indices, [1, 0], tp.int64)
    k = tp.kthvalue(T(x, device), 3, 1)   # kthvalue orders NaN last
    assert np.isnan(to_numpy(k.values)[0]) and to_numpy(k.indices)[0] == 1
    k = tp.kthvalue(T(x, device), 2, 1)
    check(k.values, [3.0, 2.0], tp.float32)
    check(k.indices, [2, 0], tp.int64)
    assert np.isnan(to_numpy(tp.median(T(np.zeros(0, np.float32), device))))
    with pytest.raises(RuntimeError):
        tp.median(T(np.zeros(0, np.int64), device))
    with pytest.raises(IndexError):
        tp.median(T(np.zeros((0, 3), np.float32), device), 0)
    with pytest.raises(RuntimeError, match="complex"):
        tp.median(T(np.ones(3, np.complex64), device))


def test_zero_d_inputs(device):
    x = T(4.0, device)
    check(tp.median(x), 4.0, tp.float32)
    check(tp.median(x, 0).indices, 0, tp.int64)
    check(tp.kthvalue(x, 1).values, 4.0, tp.float32)
    check(tp.mode(x).values, 4.0, tp.float32)
    check(tp.cummax(x, 0).indices, 0, tp.int64)


def test_kthvalue_errors(device):
    x = T(np.ones((2, 3), np.float32), device)
    with pytest.raises(RuntimeError, match="out of range"):
        tp.kthvalue(x, 4)
    with pytest.raises(RuntimeError, match="out of range"):
        tp.kthvalue(x, 0)
    with pytest.raises(TypeError):
        tp.kthvalue(x, 1.5)
    with pytest.raises(IndexError):
        tp.kthvalue(x, 1, dim=2)


def ref_mode(row):
    values, counts = np.unique(row, return_counts=True)
    value = values[np.argmax(counts)]   # the smallest of the most frequent
    return value, np.nonzero(row == value)[0][-1]


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.int8])
@pytest.mark.parametrize("dim", [0, 1])
def test_mode(device, dtype, dim):
    x = RNG.integers(0, 4, (6, 7)).astype(dtype)
    result = tp.mode(T(x, device), dim)
    assert result._fields == ("values", "indices")
    moved = np.moveaxis(x, dim, -1)
    want = [ref_mode(row) for row in moved]
    check(result.values, [v for v, _ in want], tp.from_numpy(x).dtype)
    check(result.indices, [i for _, i in want], tp.int64)
    kept = T(x, device).mode(dim, keepdim=True)
    assert kept.values.shape == tuple(1 if d == dim else s for d, s in enumerate(x.shape))


# -- cummax, cummin ---------------------------------------------------------------------------
def ref_cumulative(x, axis, largest):
    moved = np.moveaxis(x, axis, -1)
    values, indices = np.empty_like(moved), np.empty(moved.shape, np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        best, where = None, 0
        for i, v in enumerate(moved[pos]):
            if best is None or (np.isnan(v) or (not np.isnan(best) and
                                                (v >= best if largest else v <= best))):
                best, where = v, i
            values[pos + (i,)], indices[pos + (i,)] = best, where
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_cummin(device, op, dim):
    x = RNG.integers(0, 4, (4, 6)).astype(np.float32)   # ties: the last index wins
    x[1, 2] = np.nan
    x[2, 3] = np.nan
    result = getattr(tp, op)(T(x, device), dim)
    assert type(result).__name__ == op
    values, indices = ref_cumulative(x, dim % 2, op == "cummax")
    check(result.values, values, tp.float32)
    check(result.indices, indices, tp.int64)
    xi = RNG.integers(-9, 9, (3, 5)).astype(np.int32)
    result = getattr(T(xi, device), op)(1)
    values, indices = ref_cumulative(xi, 1, op == "cummax")
    check(result.values, values, tp.int32)
    check(result.indices, indices, tp.int64)
    empty = getattr(tp, op)(T(np.zeros((0, 3), np.float32), device), 0)
    assert empty.values.shape == (0, 3) and empty.indices.dtype == tp.int64
    with pytest.raises(RuntimeError, match="complex"):
        getattr(tp, op)(T(np.ones(2, np.complex64), device), 0)


# -- nansum, nanmean --------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_nansum_nanmean(device, dim, keepdim):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[0, 1] = x[2, 2] = np.nan
    x[:, 3] = np.nan
    check(tp.nansum(T(x, device), dim, keepdim), np.nansum(x, axis=dim, keepdims=keepdim),
          tp.float32)
    with warnings.catch_warnings():   # NumPy warns about the all-NaN column
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanmean(x, axis=dim, keepdims=keepdim)
    check(T(x, device).nanmean(dim, keepdim), want, tp.float32)


def test_nan_reductions_dtypes_and_errors(device):
    xi = np.array([[1, 2], [3, 4]], np.int32)
    check(tp.nansum(T(xi, device)), 10, tp.int64)
    check(tp.nansum(T(xi, device), dtype=tp.float64), 10.0, tp.float64)
    check(tp.nanmean(T(xi.astype(np.float32), device), dtype=tp.float64), 2.5, tp.float64)
    with pytest.raises(RuntimeError, match="floating"):
        tp.nanmean(T(xi, device), dtype=tp.float32)   # PyTorch checks the input's dtype
    check(tp.nansum(T(np.array([np.nan, 1.0], np.float16), device)), 1.0, tp.float16)
    with pytest.raises(RuntimeError, match="floating"):
        tp.nanmean(T(xi, device))
    with pytest.raises(RuntimeError, match="complex"):
        tp.nansum(T(np.ones(2, np.complex64), device))


# -- unique, bincount, histc ------------------------------------------------------------------
def test_unique(device):
    x = RNG.integers(0, 5, (3, 4))
    values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    check(tp.unique(T(x, device)), values, tp.int64)
    got = T(x, device).unique(return_inverse=True, return_counts=True)
    check(got[0], values, tp.int64)
    check(got[1], inverse.reshape(x.shape), tp.int64)
    check(got[2], counts, tp.int64)
    got = tp.unique(T(x, device), return_counts=True)
    assert len(got) == 2
    rows = np.array([[1, 2], [0, 5], [1, 2], [0, 5], [9, 9]], np.float32)
    values, inverse, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    got = tp.unique(T(rows, device), dim=0, return_inverse=True, return_counts=True)
    check(got[0], values, tp.float32)
    check(got[1], inverse.reshape(-1), tp.int64)
    check(got[2], counts, tp.int64)
    nan = tp.unique(T(np.array([np.nan, 1.0, np.nan], np.float32), device))
    assert to_numpy(nan).shape == (3,)   # NaNs are all distinct, as PyTorch
    with pytest.raises(RuntimeError, match="complex"):
        tp.unique(T(np.ones(2, np.complex64), device))


def test_bincount(device):
    x = np.array([0, 3, 3, 1, 7], np.int64)
    check(tp.bincount(T(x, device)), np.bincount(x), tp.int64)
    check(T(x, device).bincount(minlength=10), np.bincount(x, minlength=10), tp.int64)
    w = RNG.standard_normal(5)
    check(tp.bincount(T(x, device), T(w.astype(np.float32), device)),
          np.bincount(x, w.astype(np.float32)), tp.float32)
    check(tp.bincount(T(x, device), weights=T(w, device)), np.bincount(x, w), tp.float64)
    check(tp.bincount(T(x.astype(np.int32), device), weights=T(x, device)),
          np.bincount(x, x), tp.float64)
    check(tp.bincount(T(np.zeros(0, np.int64), device), minlength=3), [0, 0, 0], tp.int64)
    with pytest.raises(RuntimeError, match="non-negative"):
        tp.bincount(T(np.array([1, -1]), device))
    with pytest.raises(RuntimeError, match="1-d"):
        tp.bincount(T(np.ones((2, 2), np.int64), device))
    with pytest.raises(RuntimeError, match="1-d"):
        tp.bincount(T(np.ones(2, np.float32), device))
    with pytest.raises(RuntimeError, match="minlength"):
        tp.bincount(T(x, device), minlength=-1)
    with pytest.raises(RuntimeError, match="same length"):
        tp.bincount(T(x, device), T(np.ones(4), device))


def ref_histc(x, bins, low, high):
    x = x.astype(np.float64).reshape(-1)
    x = x[~np.isnan(x)]
    if low == high and x.size:
        low, high = x.min(), x.max()
    if low == high:
        low, high = low - 1, high + 1
    inside = x[(x >= low) & (x <= high)]
    position = np.minimum(np.floor((inside - low) * bins / (high - low)), bins - 1)
    return np.bincount(position.astype(np.int64), minlength=bins).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_histc(device, dtype):
    x = (RNG.standard_normal(50) * 3).astype(dtype)
    x[4] = np.nan
    for bins, low, high in ((10, 0, 0), (7, -2, 2), (1, -1, 1), (5, 3.5, 3.5)):
        check(tp.histc(T(x, device), bins, low, high), ref_histc(x, bins, low, high),
              tp.from_numpy(x).dtype)
    check(T(np.array([2.0, 2.0], dtype), device).histc(bins=4), [0, 0, 2, 0],
          tp.from_numpy(x).dtype)   # a constant input: the range widens to [1, 3]
    check(tp.histc(T(np.array([0.0, 1.0], dtype), device), 2, 0, 1), [1, 1],
          tp.from_numpy(x).dtype)   # max falls in the last bin
    ints = T(np.array([0, 1, 1, 5], np.int64), device)
    if device == "cpu":   # torch's CPU kernel is floating only; its CUDA one counts integers
        with pytest.raises(NotImplementedError, match="histogram_cpu"):
            tp.histc(ints)
    else:
        check(tp.histc(ints, 4), [3, 0, 0, 1], tp.int64)        # values torch 2.11 gives on
        check(tp.histc(ints, 5, 0, 5), [1, 2, 0, 0, 1], tp.int64)   # the H200
        check(tp.histc(ints.to(tp.uint8), 3), [3, 0, 1], tp.uint8)
    with pytest.raises(NotImplementedError, match="not implemented"):
        tp.histc(T(np.ones(3, bool), device))
    with pytest.raises(RuntimeError, match="bins"):
        tp.histc(T(x, device), bins=0)
    with pytest.raises(RuntimeError, match="larger than min"):
        tp.histc(T(x, device), 3, 2, 1)
    with pytest.raises(RuntimeError, match="finite"):
        tp.histc(T(x, device), 3, 0, float("inf"))


# -- searchsorted, bucketize ------------------------------------------------------------------
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_one_d(device, right):
    seq = np.sort(RNG.integers(0, 10, 12)).astype(np.float32)
    values = RNG.integers(-1, 12, (3, 4)).astype(np.float32)
    side = "right" if right else "left"
    want = np.searchsorted(seq, values, side=side)
    check(tp.searchsorted(T(seq, device), T(values, device), right=right), want, tp.int64)
    check(tp.searchsorted(T(seq, device), T(values, device), side=side, out_int32=True), want,
          tp.int32)
    check(tp.searchsorted(T(seq, device), 4.0, right=right), np.searchsorted(seq, 4.0, side),
          tp.int64)
    check(tp.bucketize(T(values, device), T(seq, device), right=right), want, tp.int64)
    check(tp.bucketize(5.0, T(seq, device), right=right), np.searchsorted(seq, 5.0, side),
          tp.int64)
    order = RNG.permutation(12)
    shuffled = np.empty_like(seq)
    shuffled[order] = seq
    check(tp.searchsorted(T(shuffled, device), T(values, device), right=right,
                          sorter=T(np.argsort(shuffled, kind="stable"), device)), want,
          tp.int64)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_batched_and_nan(device, right):
    seq = np.sort(RNG.integers(0, 6, (2, 3, 5)), axis=-1).astype(np.float64)
    seq[0, 0, -1] = np.nan
    values = RNG.integers(-1, 7, (2, 3, 4)).astype(np.float64)
    values[1, 1, 0] = np.nan
    values[0, 0, 1] = np.nan
    want = np.empty(values.shape, np.int64)
    for pos in np.ndindex(values.shape):
        want[pos] = torch_bound(seq[pos[:-1]], values[pos], right)
    check(tp.searchsorted(T(seq, device), T(values, device), right=right), want, tp.int64)
    flat = T(seq[0, 0], device)   # the 1-D path, whose sequence ends in NaN
    want = [torch_bound(seq[0, 0], v, right) for v in values[0, 0]]
    check(tp.searchsorted(flat, T(values[0, 0], device), right=right), want, tp.int64)


def torch_bound(seq, value, right: bool) -> int:
    """PyTorch's binary search (lower or upper bound), where every comparison with NaN is
    false: it steps past NaN boundaries, and a NaN value lands at the end."""
    start, end = 0, len(seq)
    while start < end:
        mid = (start + end) // 2
        go_right = not (seq[mid] > value) if right else not (seq[mid] >= value)
        start, end = (mid + 1, end) if go_right else (start, mid)
    return start


def test_searchsorted_errors(device):
    seq = T(np.array([1.0, 2.0], np.float32), device)
    with pytest.raises(RuntimeError, match="opposites"):
        tp.searchsorted(seq, seq, right=True, side="left")
    with pytest.raises(RuntimeError, match="side"):
        tp.searchsorted(seq, seq, side="middle")
    # different dtypes compare in the promoted dtype (torch 2.11)
    check(tp.searchsorted(seq, T(np.array([1.5, 2.0]), device).double()), [1, 1], tp.int64)
    with pytest.raises(RuntimeError, match="first N-1"):
        tp.searchsorted(T(np.ones((2, 3), np.float32), device), T(np.ones((3, 1), np.float32),
                                                                   device))
    with pytest.raises(RuntimeError, match="scalar"):
        tp.searchsorted(T(np.ones((2, 3), np.float32), device), 1.0)
    with pytest.raises(RuntimeError, match="1 or more"):
        tp.searchsorted(T(1.0, device), seq)
    with pytest.raises(RuntimeError, match="long"):
        tp.searchsorted(seq, seq, sorter=T(np.array([0, 1], np.int32), device))
    with pytest.raises(RuntimeError, match="same size"):
        tp.searchsorted(seq, seq, sorter=T(np.array([0]), device))
    with pytest.raises(TypeError):
        tp.searchsorted(seq, "a")
    with pytest.raises(RuntimeError, match="1 dimension"):
        tp.bucketize(seq, T(np.ones((2, 2), np.float32), device))


# -- inside a captured graph ------------------------------------------------------------------
def capture_safe_ops(x, seq) -> dict:
    """Every capture-safe op of this file on ``x`` (3 x 5) and a sorted ``seq``, by name."""
    return {
        "median": tp.median(x), "median_dim": tp.median(x, 1).values,
        "kthvalue": tp.kthvalue(x, 2, 0).indices, "mode": tp.mode(x.round(), 1).values,
        "cummax": tp.cummax(x, 1).indices, "cummin": tp.cummin(x, 0).values,
        "nansum": tp.nansum(x, 1), "nanmean": tp.nanmean(x, 0),
        "histc": tp.histc(x, 4), "searchsorted": tp.searchsorted(seq, x, right=True),
        "bucketize": tp.bucketize(x, seq),
    }


@requires_accelerator
def test_captured_graph_replays_every_capture_safe_op():
    dev = tp.accelerator.current_accelerator().type + ":0"
    x = tp.zeros(3, 5, device=dev)
    seq = tp.zeros(6, device=dev)
    g = tp.accelerator.Graph()
    with g:
        results = capture_safe_ops(x, seq)
    for name in ("unique", "bincount"):   # their result's size is read on the host
        with pytest.raises(RuntimeError):
            with tp.accelerator.Graph():
                getattr(tp, name)(seq.long())
    for seed in (3, 4):
        rng = np.random.default_rng(seed)
        xs = (rng.standard_normal((3, 5)) * 3).astype(np.float32)
        xs[1, 1] = np.nan
        ss = np.sort(rng.standard_normal(6) * 3).astype(np.float32)
        x.copy_(tp.tensor(xs, device=dev))
        seq.copy_(tp.tensor(ss, device=dev))
        g.replay()
        cx, cs = T(xs, "cpu"), T(ss, "cpu")
        eager = capture_safe_ops(cx, cs)
        for name, result in results.items():
            np.testing.assert_allclose(to_numpy(result), to_numpy(eager[name]), rtol=1e-6,
                                       err_msg=name)
