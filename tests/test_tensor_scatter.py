"""The scatter family (``scatter scatter_add scatter_reduce index_add index_copy index_put
index_fill masked_scatter take_along_dim`` and the in-place forms) on every device: values
against loop-by-loop NumPy references, dtypes, shapes, every error, in-place aliasing and write
records, and use inside a captured graph.
"""

import itertools

import numpy as np
import pytest

import tensorplay as tp
from support import check_result, make_tensor, requires_accelerator, to_numpy

RNG = np.random.default_rng(15)


T = make_tensor
check = check_result


# -- references: one element at a time ---------------------------------------------------------
def ref_scatter(x, dim, index, src, reduce=None, include_self=True):
    out = np.array(x, dtype=np.float64 if x.dtype.kind == "f" else x.dtype, copy=True)
    groups: dict = {}
    for pos in itertools.product(*(range(s) for s in index.shape)):
        target = list(pos)
        target[dim] = int(index[pos])
        groups.setdefault(tuple(target), []).append(src[pos] if np.ndim(src) else src)
    for target, values in groups.items():
        if reduce is None:
            out[target] = values[-1]
            continue
        pool = ([x[target]] if include_self else []) + values
        if reduce == "sum":
            out[target] = np.sum(pool)
        elif reduce == "prod":
            out[target] = np.prod(pool)
        elif reduce == "amax":
            out[target] = np.max(pool)
        elif reduce == "amin":
            out[target] = np.min(pool)
        elif reduce == "mean":
            total = np.sum(pool)
            out[target] = total / len(pool) if x.dtype.kind == "f" else total // len(pool)
    return out


def scatter_case(shape=(4, 5), dim=0, index_shape=(3, 4), dtype=np.float32):
    x = RNG.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f" else \
        RNG.integers(-5, 6, shape).astype(dtype)
    src_shape = tuple(s + 1 for s in index_shape)
    src = RNG.standard_normal(src_shape).astype(dtype) if np.dtype(dtype).kind == "f" else \
        RNG.integers(-5, 6, src_shape).astype(dtype)
    index = RNG.integers(0, shape[dim], index_shape).astype(np.int64)
    return x, src, index


# -- scatter, scatter_add, scatter_reduce -----------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_and_value(device, dim):
    x, src, index = scatter_case(dim=dim)
    index = np.stack([RNG.permutation(x.shape[dim])[:index.shape[dim]]
                      for _ in range(index.shape[1 - dim % 2])], axis=1 - dim % 2)
    # unique targets per line: the result does not depend on which write wins
    got = tp.scatter(T(x, device), dim, T(index, device), T(src, device))
    check(got, ref_scatter(x, dim % 2, index, src), tp.float32)
    check(T(x, device).scatter(dim, T(index, device), 2.5),
          ref_scatter(x, dim % 2, index, np.float32(2.5)), tp.float32)
    check(tp.scatter(T(x, device), dim, T(index, device), value=-1.0),
          ref_scatter(x, dim % 2, index, np.float32(-1)), tp.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_scatter_add_accumulates_every_repeat(device, dtype):
    x, src, index = scatter_case(dtype=dtype)
    index[:] = index[0]   # every row hits the same targets
    got = tp.scatter_add(T(x, device), 0, T(index, device), T(src, device))
    check(got, ref_scatter(x, 0, index, src, "sum"), tp.from_numpy(x).dtype)
    y = T(x, device)
    assert y.scatter_add_(1, T(index, device), T(src, device)) is y
    check(y, ref_scatter(x, 1, index, src, "sum"), tp.from_numpy(x).dtype)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_scatter_reduce(device, reduce, include_self, dtype):
    x, src, index = scatter_case(shape=(3, 6), dim=1, index_shape=(3, 7), dtype=dtype)
    got = tp.scatter_reduce(T(x, device), 1, T(index, device), T(src, device), reduce,
                            include_self=include_self)
    want = ref_scatter(x, 1, index, src, reduce, include_self)
    check(got, want.astype(x.dtype), tp.from_numpy(x).dtype)
    y = T(x, device)
    assert y.scatter_reduce_(1, T(index, device), T(src, device), reduce,
                             include_self=include_self) is y
    check(y, want.astype(x.dtype), tp.from_numpy(x).dtype)


@pytest.mark.parametrize("count", [1, 2, 5, 37])
def test_scatter_prod_many_repeats(device, count):
    """Products go through a segmented scan (not ``multiply.at``): exercise several scan steps,
    zeros, negatives, a 3-d index and an input view."""
    x = RNG.integers(-2, 3, (2, 3, 4)).astype(np.int64)
    src = RNG.integers(-2, 3, (2, count, 4)).astype(np.int64)
    index = RNG.integers(0, 3, (2, count, 4))
    for include_self in (True, False):
        got = tp.scatter_reduce(T(x, device), 1, T(index, device), T(src, device), "prod",
                                include_self=include_self)
        check(got, ref_scatter(x, 1, index, src, "prod", include_self), tp.int64)
    base = T(np.ones((2, 3, 8), np.int64), device)
    view = base[:, :, ::2]   # strided: the in-place form writes through the view
    view.scatter_reduce_(1, T(index, device), T(src, device), "prod")
    want = np.ones((2, 3, 8), np.int64)
    want[:, :, ::2] = ref_scatter(np.ones((2, 3, 4), np.int64), 1, index, src, "prod")
    check(base, want, tp.int64)


def test_scatter_legacy_reduce_and_nan(device):
    x, src, index = scatter_case()
    check(tp.scatter(T(x, device), 0, T(index, device), T(src, device), reduce="multiply"),
          ref_scatter(x, 0, index, src, "prod"), tp.float32)
    check(tp.scatter(T(x, device), 0, T(index, device), T(src, device), reduce="add"),
          ref_scatter(x, 0, index, src, "sum"), tp.float32)
    src[0, 0] = np.nan
    got = to_numpy(tp.scatter_reduce(T(x, device), 0, T(index, device), T(src, device), "amax"))
    assert np.isnan(got[index[0, 0], 0])


def test_scatter_zero_d_and_empty_index(device):
    x = T(3.0, device)
    check(tp.scatter(x, 0, T(np.int64(0), device), T(7.0, device)), 7.0, tp.float32)
    empty = T(np.zeros((0, 5), np.int64), device)
    base = T(np.ones((2, 5), np.float32), device)
    check(tp.scatter_add(base, 0, empty, T(np.ones((0, 5), np.float32), device)),
          np.ones((2, 5)), tp.float32)


def test_scatter_errors(device):
    x = T(np.zeros((3, 4), np.float32), device)
    index = T(np.zeros((2, 4), np.int64), device)
    src = T(np.ones((2, 4), np.float32), device)
    with pytest.raises(RuntimeError, match="int64 or int32"):
        tp.scatter(x, 0, index.to(tp.int16), src)
    # int32 indices scatter as int64 ones (torch 2.11), and "max"/"min" spell amax/amin
    check(tp.scatter(x, 0, index.to(tp.int32), src), to_numpy(tp.scatter(x, 0, index, src)),
          tp.float32)
    check(tp.scatter_reduce(x, 0, index.to(tp.int32), src, "max"),
          to_numpy(tp.scatter_reduce(x, 0, index, src, "amax")), tp.float32)
    check(tp.scatter_reduce(x, 0, index, -src, "min"),
          to_numpy(tp.scatter_reduce(x, 0, index, -src, "amin")), tp.float32)
    with pytest.raises(RuntimeError, match="dtype"):
        tp.scatter(x, 0, index, src.double())
    with pytest.raises(RuntimeError, match="number of dimensions"):
        tp.scatter(x, 0, T(np.zeros(2, np.int64), device), src)
    with pytest.raises(RuntimeError, match="smaller than self"):
        tp.scatter(x, 0, T(np.zeros((2, 5), np.int64), device),
                   T(np.ones((2, 5), np.float32), device))
    with pytest.raises(RuntimeError, match="smaller than src"):
        tp.scatter(x, 0, index, T(np.ones((1, 4), np.float32), device))
    with pytest.raises(RuntimeError, match="reduce"):
        tp.scatter_reduce(x, 0, index, src, "maximum")
    with pytest.raises(RuntimeError, match="'add' or 'multiply'"):
        tp.scatter(x, 0, index, src, reduce="sum")
    with pytest.raises(TypeError):
        tp.scatter(x, 0, index)
    with pytest.raises(TypeError):
        tp.scatter_add(x, 0, index, 1.0)
    with pytest.raises(IndexError):
        tp.scatter(x, 2, index, src)
    with pytest.raises(RuntimeError):   # an expanded view cannot be written in place
        T(np.zeros(4, np.float32), device).expand(3, 4).scatter_(0, index, src)
    if device == "cpu":   # accelerators do not read indices (module notes)
        with pytest.raises(RuntimeError, match="out of bounds"):
            tp.scatter(x, 0, T(np.full((2, 4), 3, np.int64), device), src)
        with pytest.raises(RuntimeError, match="out of bounds"):
            tp.scatter_add(x, 1, T(np.full((2, 4), -1, np.int64), device), src)


def test_inplace_aliasing_reads_the_values_before_the_call(device):
    base = np.arange(6, dtype=np.float32)
    index = np.array([1, 1, 2, 5, 0, 0], np.int64)
    y = T(base, device)
    y.scatter_add_(0, T(index, device), y)
    check(y, ref_scatter(base, 0, index, base, "sum"), tp.float32)
    y = T(base, device)
    y.index_add_(0, T(index, device), y, alpha=2)
    want = base.copy()
    np.add.at(want, index, 2 * base)
    check(y, want, tp.float32)
    y = T(base, device)
    y.index_copy_(0, T(np.array([5, 4, 3, 2, 1, 0]), device), y)
    check(y, base[::-1], tp.float32)
    y = T(base, device)
    view = y[1:4]
    view.scatter_(0, T(np.array([2, 1, 0]), device), y[0:3])   # overlapping source and target
    check(y, np.array([0, 2, 1, 0, 4, 5], np.float32), tp.float32)


def test_inplace_writes_are_recorded():
    from tensorplay._runtime import writes
    x = tp.zeros(4)
    with writes.recording() as record:
        x.index_fill_(0, tp.tensor([1]), 3.0)
        x.scatter_add_(0, tp.tensor([0]), tp.ones(1))
        tp.index_fill(x, 0, tp.tensor([1]), 3.0)   # out of place: writes no existing tensor
    assert record.count(writes.extent(x)) == 2


# -- index_add, index_copy, index_fill --------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add(device, dim):
    x = RNG.standard_normal((4, 3, 5)).astype(np.float64)
    index = np.array([1, 0, 1, 3, 3, 0], np.int64) % x.shape[dim]
    source_shape = list(x.shape)
    source_shape[dim] = len(index)
    source = RNG.standard_normal(source_shape)
    want = np.moveaxis(x.copy(), dim, 0)
    np.add.at(want, index, np.moveaxis(source, dim, 0) * 1.5)
    want = np.moveaxis(want, 0, dim)
    got = tp.index_add(T(x, device, tp.float64), dim, T(index, device),
                       T(source, device, tp.float64), alpha=1.5)
    check(got, want, tp.float64)
    got = T(x, device, tp.float64).index_add(dim, T(index.astype(np.int32), device),
                                             T(source, device, tp.float64), alpha=1.5)
    check(got, want, tp.float64)


def test_index_add_integers_and_errors(device):
    x = T(np.zeros((3, 2), np.int64), device)
    got = x.index_add(0, T(np.array([2, 2]), device), T(np.ones((2, 2), np.int64), device),
                      alpha=3)
    check(got, [[0, 0], [0, 0], [6, 6]], tp.int64)
    src = T(np.ones((2, 2), np.int64), device)
    # a float alpha is cast to the integral dtype (truncated), as torch 2.11 on cpu and cuda
    check(x.index_add(0, T(np.array([0, 1]), device), src, alpha=1.7), to_numpy(x) +
          [[1, 1], [1, 1], [0, 0]], tp.int64)
    check(x.index_add(0, T(np.array([0, 1]), device), src, alpha=0.5), to_numpy(x), tp.int64)
    with pytest.raises(RuntimeError, match="int64 or int32"):
        x.index_add(0, T(np.array([0, 1], np.int16), device), src)
    with pytest.raises(RuntimeError, match="same scalar type"):
        x.index_add(0, T(np.array([0, 1]), device), src.double())
    with pytest.raises(RuntimeError, match="shape"):
        x.index_add(0, T(np.array([0, 1, 2]), device), src)
    with pytest.raises(IndexError, match="vector"):
        x.index_add(0, T(np.array([[0, 1]]), device), src)
    if device == "cpu":
        with pytest.raises(IndexError, match="out of bounds"):
            x.index_add(0, T(np.array([0, 3]), device), src)


def test_index_copy_and_fill(device):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    source = RNG.standard_normal((4, 2)).astype(np.float32)
    want = x.copy()
    want[:, [2, 0]] = source
    check(tp.index_copy(T(x, device), 1, T(np.array([2, 0]), device), T(source, device)), want,
          tp.float32)
    y = T(x, device)
    assert y.index_copy_(1, T(np.array([2, 0]), device), T(source, device)) is y
    check(y, want, tp.float32)
    want = x.copy()
    want[[0, 3]] = -2
    check(T(x, device).index_fill(0, T(np.array([0, -1]), device), -2), want, tp.float32)
    check(T(x, device).index_fill(0, T(np.array([0, 3]), device), T(-2.0, device)), want,
          tp.float32)
    y = T(x, device)
    assert y.index_fill_(0, T(np.array([0, 3]), device), -2) is y
    check(y, want, tp.float32)
    with pytest.raises(RuntimeError, match="int64"):
        tp.index_copy(T(x, device), 1, T(np.array([0], np.int32), device), T(source[:, :1],
                                                                              device))
    with pytest.raises(IndexError, match="int64"):   # torch's type for index_fill
        tp.index_fill(T(x, device), 1, T(np.array([0], np.int32), device), 1)
    with pytest.raises(RuntimeError, match="0-dimensional"):
        tp.index_fill(T(x, device), 1, T(np.array([0]), device), T([1.0, 2.0], device))
    with pytest.raises(TypeError):
        tp.index_fill(T(x, device), 1, T(np.array([0]), device), "1")
    with pytest.raises(RuntimeError, match="fits|overflow|range"):
        tp.index_fill(T(np.zeros(3, np.uint8), device), 0, T(np.array([0]), device), 300)
    if device == "cpu":
        with pytest.raises(IndexError, match="out of bounds"):
            tp.index_copy(T(x, device), 1, T(np.array([3]), device), T(source[:, :1], device))
        with pytest.raises(IndexError, match="out of bounds"):
            tp.index_fill(T(x, device), 0, T(np.array([-5]), device), 1)


# -- index_put --------------------------------------------------------------------------------
def test_index_put(device):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    rows, cols = np.array([0, 2, 0]), np.array([1, 4, 1])
    values = np.array([1.0, 2.0, 3.0], np.float32)
    want = x.copy()
    np.add.at(want, (rows, cols), values)
    got = tp.index_put(T(x, device), (T(rows, device), T(cols, device)), T(values, device),
                       accumulate=True)
    check(got, want, tp.float32)
    want = x.copy()
    want[[1, -1]] = np.float32(9)
    y = T(x, device)
    assert y.index_put_((T(np.array([1, -1]), device),), T(np.float32(9), device)) is y
    check(y, want, tp.float32)
    mask = x > 0
    want = x.copy()
    want[mask] = 0
    check(T(x, device).index_put((T(mask, device),), T(np.float32(0), device)), want,
          tp.float32)
    want = x.copy()
    np.add.at(want, (np.nonzero(mask[:, 0])[0],), np.ones(5, np.float32))
    check(T(x, device).index_put([T(mask[:, 0], device)], T(np.ones(5, np.float32), device),
                                 accumulate=True), want, tp.float32)


def test_index_put_errors(device):
    x = T(np.zeros((3, 4), np.float32), device)
    i = T(np.array([0, 1]), device)
    with pytest.raises(TypeError, match="tuple"):
        x.index_put(i, T(np.float32(1), device))
    with pytest.raises(RuntimeError, match="dtypes match"):
        x.index_put((i,), T(1.0, device, tp.float64))
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x.index_put((i.float(),), T(np.float32(1), device))
    with pytest.raises(IndexError, match="too many"):
        x.index_put((i, i, i), T(np.float32(1), device))
    with pytest.raises(IndexError, match="broadcast"):
        x.index_put((i, T(np.array([0, 1, 2]), device)), T(np.float32(1), device))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.index_put((i,), T(np.ones(3, np.float32), device))
    with pytest.raises(IndexError, match="mask"):
        x.index_put((T(np.array([True, False]), device),), T(np.float32(1), device))
    if device == "cpu":
        with pytest.raises(IndexError, match="out of bounds"):
            x.index_put((T(np.array([3]), device),), T(np.float32(1), device))


# -- masked_scatter, take_along_dim -----------------------------------------------------------
def test_masked_scatter(device):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    mask = RNG.random((3, 4)) > 0.5
    source = RNG.standard_normal(12).astype(np.float32)
    want = x.copy()
    want[mask] = source[:mask.sum()]
    check(tp.masked_scatter(T(x, device), T(mask, device), T(source, device)), want,
          tp.float32)
    y = T(x, device)
    assert y.masked_scatter_(T(mask, device), T(source.reshape(3, 4), device)) is y
    check(y, want, tp.float32)
    row = np.array([True, False, False, True])
    want = x.copy()
    want[np.broadcast_to(row, x.shape)] = source[:6]
    check(T(x, device).masked_scatter(T(row, device), T(source, device)), want, tp.float32)
    want = np.broadcast_to(x[0], (3, 4)).copy()   # out of place, self broadcasts with the mask
    want[mask] = source[:mask.sum()]
    check(T(x[0], device).masked_scatter(T(mask, device), T(source, device)), want, tp.float32)
    with pytest.raises(RuntimeError, match="boolean"):
        T(x, device).masked_scatter(T(mask.astype(np.uint8), device), T(source, device))
    with pytest.raises(RuntimeError, match="same dtypes"):
        T(x, device).masked_scatter(T(mask, device), T(source, device).double())
    with pytest.raises(RuntimeError, match="broadcast"):
        T(x[0], device).masked_scatter_(T(mask, device), T(source, device))
    if device == "cpu":
        with pytest.raises(RuntimeError, match="Number of elements of source"):
            T(x, device).masked_scatter(T(np.ones((3, 4), bool), device), T(source[:3], device))


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_take_along_dim(device, dim):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    if dim is None:
        index = RNG.integers(0, 12, (2, 5))
        check(tp.take_along_dim(T(x, device), T(index, device)), x.reshape(-1)[index.reshape(-1)],
              tp.float32)
        return
    index = np.argsort(x, axis=dim)
    check(tp.take_along_dim(T(x, device), T(index, device), dim),
          np.take_along_axis(x, index, dim), tp.float32)
    # broadcasting outside dim
    small = index[:1] if dim % 2 == 1 else index[:, :1]
    want = np.take_along_axis(x, np.broadcast_to(small, (3, small.shape[1]) if dim % 2 == 1
                                                 else (small.shape[0], 4)), dim)
    check(T(x, device).take_along_dim(T(small, device), dim), want, tp.float32)


def test_take_along_dim_errors(device):
    x = T(np.zeros((3, 4), np.float32), device)
    with pytest.raises(RuntimeError, match="int64"):
        tp.take_along_dim(x, T(np.zeros((3, 1), np.int32), device), 1)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        tp.take_along_dim(x, T(np.zeros(3, np.int64), device), 1)
    with pytest.raises(RuntimeError, match="broadcast"):
        tp.take_along_dim(x, T(np.zeros((2, 1), np.int64), device), 1)
    with pytest.raises(TypeError):
        tp.take_along_dim(x, [0, 1], 1)
    if device == "cpu":
        with pytest.raises(RuntimeError, match="out of bounds"):
            tp.take_along_dim(x, T(np.full((3, 1), 4), device), 1)
        with pytest.raises(RuntimeError, match="out of bounds"):
            tp.take_along_dim(x, T(np.array([12]), device))


# -- inside a captured graph ------------------------------------------------------------------
@requires_accelerator
def test_captured_graph_replays_every_op():
    dev = tp.accelerator.current_accelerator().type + ":0"
    x = tp.zeros(3, 4, device=dev)
    src = tp.zeros(3, 4, device=dev)
    index = tp.zeros(3, 4, dtype=tp.int64, device=dev)
    vec = tp.zeros(2, dtype=tp.int64, device=dev)
    mask = tp.zeros(3, 4, dtype=tp.bool, device=dev)
    g = tp.accelerator.Graph()
    with g:
        results = {
            "scatter": tp.scatter(x, 0, index, src),
            "scatter_add": tp.scatter_add(x, 0, index, src),
            "mean": tp.scatter_reduce(x, 0, index, src, "mean", include_self=False),
            "amax": tp.scatter_reduce(x, 1, index, src, "amax"),
            "index_add": tp.index_add(x, 1, vec, src[:, :2], alpha=2),
            "index_copy": tp.index_copy(x, 0, vec[:1], src[:1]),
            "index_fill": tp.index_fill(x, 1, vec, 5.0),
            "index_put": tp.index_put(x, (vec, vec), src[0, :2], accumulate=True),
            "masked_scatter": tp.masked_scatter(x, mask, src),
            "take_along_dim": tp.take_along_dim(x, index, 1),
        }
        inplace = x.clone()
        inplace.scatter_add_(1, index, src)
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        xs = rng.standard_normal((3, 4)).astype(np.float32)
        ss = rng.standard_normal((3, 4)).astype(np.float32)
        ix = rng.integers(0, 3, (3, 4))
        vs = np.array([seed % 2, 2])
        ms = rng.random((3, 4)) > 0.5
        for static, host in ((x, xs), (src, ss), (index, ix), (vec, vs), (mask, ms)):
            static.copy_(tp.tensor(host, dtype=static.dtype, device=dev))
        g.replay()
        eager = {
            "scatter": tp.scatter(T(xs, "cpu"), 0, T(ix, "cpu"), T(ss, "cpu")),
            "scatter_add": tp.scatter_add(T(xs, "cpu"), 0, T(ix, "cpu"), T(ss, "cpu")),
            "mean": tp.scatter_reduce(T(xs, "cpu"), 0, T(ix, "cpu"), T(ss, "cpu"), "mean",
                                      include_self=False),
            "amax": tp.scatter_reduce(T(xs, "cpu"), 1, T(ix, "cpu"), T(ss, "cpu"), "amax"),
            "index_add": tp.index_add(T(xs, "cpu"), 1, T(vs, "cpu"), T(ss[:, :2], "cpu"),
                                      alpha=2),
            "index_copy": tp.index_copy(T(xs, "cpu"), 0, T(vs[:1], "cpu"), T(ss[:1], "cpu")),
            "index_fill": tp.index_fill(T(xs, "cpu"), 1, T(vs, "cpu"), 5.0),
            "index_put": tp.index_put(T(xs, "cpu"), (T(vs, "cpu"), T(vs, "cpu")),
                                      T(ss[0, :2], "cpu"), accumulate=True),
            "masked_scatter": tp.masked_scatter(T(xs, "cpu"), T(ms, "cpu"), T(ss, "cpu")),
            "take_along_dim": tp.take_along_dim(T(xs, "cpu"), T(ix, "cpu"), 1),
        }
        for name, result in results.items():
            if name == "scatter":   # repeated indices: which write wins is unspecified
                continue
            np.testing.assert_allclose(to_numpy(result), to_numpy(eager[name]), rtol=1e-6,
                                       err_msg=name)
        np.testing.assert_allclose(to_numpy(inplace), ref_scatter(xs, 1, ix, ss, "sum"),
                                   rtol=1e-6)
