"""The cuda backend's one-kernel strided copy (``backends/cuda/_copy.py``) against CuPy's own
``dst[...] = src``, over the layouts a model makes (transposed heads, cache slices, broadcast
rows, misaligned views) and every element width; and the copies the tensor layer routes
through it (``clone`` of a strided view, a copying ``reshape``, a basic-index write, ``copy_``).
Skipped without CuPy and a visible GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from support import cuda_backend_or_skip

_BACKEND = cuda_backend_or_skip("the cuda backend's strided copy")

import cupy  # noqa: E402
import ml_dtypes  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay.backends.cuda import _copy  # noqa: E402

DTYPES = (np.bool_, np.int8, np.float16, ml_dtypes.bfloat16, np.float32, np.int64,
          np.complex128)


def _random(shape, dtype, seed=0):
    values = np.asarray(np.random.default_rng(seed).standard_normal(shape) * 100)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * np.flip(values)
    return cupy.asarray(values.astype(dtype))


def _check(dst, src) -> bool:
    expected = dst.copy()
    expected[...] = src
    taken = _copy.copy(dst, src)
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(dst).reshape(-1).view(np.uint8),
                                  cupy.asnumpy(expected).reshape(-1).view(np.uint8))
    return taken


def _layouts(dtype):
    """(dst, src) pairs of one dtype and different layouts."""
    base = _random((3, 5, 8, 16), dtype)
    yield cupy.empty((5, 3, 8, 16), dtype), base.transpose(1, 0, 2, 3)      # heads transposed
    yield cupy.empty((3, 8, 5, 16), dtype), base.transpose(0, 2, 1, 3)
    cache = cupy.zeros((2, 5, 40, 16), dtype)
    yield cache[:, :, 4:12], base[:2, :, :8]                                 # a cache slice
    yield cupy.empty((3, 5, 8, 16), dtype), base[:, :, :, :1]                # broadcast last dim
    yield cupy.empty((4, 3, 5, 8, 16), dtype), base                          # broadcast leading
    yield cupy.empty((3, 5, 8, 16), dtype), base[0]                          # broadcast a row
    yield cupy.empty((8, 4), dtype), base[0, 0, :, ::5]                      # every fifth
    yield cupy.empty((16, 8), dtype)[:, ::2], base[0, 0, :4].T               # strided both
    flat = _random((4 * 16 + 1,), dtype, 1)
    yield cupy.empty((4, 16), dtype), flat[1:].reshape(4, 16)                # misaligned
    yield cupy.empty(7, dtype), cupy.asarray(_random((), dtype, 2))          # a 0-d source
    yield cupy.empty((0, 4), dtype), _random((0, 4), dtype)                  # empty
    yield cupy.empty((), dtype), _random((), dtype, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_copies_match_cupy(dtype):
    for dst, src in _layouts(dtype):
        assert _check(dst, src), (dst.shape, dst.strides, src.shape, src.strides)


def test_wide_words_for_head_rows():
    """A bfloat16 head row of 64 elements moves as 16-byte words."""
    qkv = cupy.zeros((512, 3, 12, 64), ml_dtypes.bfloat16)
    keys = qkv.transpose(1, 2, 0, 3)[1:]
    cache = cupy.zeros((2, 1, 12, 1024, 64), ml_dtypes.bfloat16)[:, 0, :, :512]
    assert _check(cache, keys)
    plan = _copy._plans[(cache.shape, cache.strides, keys.shape, keys.strides, cache.dtype,
                         keys.dtype, cache.data.device_id)]
    assert plan.widest == 16 and len(plan.sizes) == 3


def test_refused_cases_copy_nothing():
    a = _random((6, 8), np.float32)
    assert not _copy.copy(a[1:], a[:-1])                        # overlapping memory
    assert not _copy.copy(cupy.empty((6, 8), np.float64), a)    # a cast
    assert not _copy.copy(cupy.empty((6, 8), np.float32), a[::-1])   # negative strides
    many = cupy.empty((2,) * 8, np.float32)
    assert not _copy.copy(many, _random((2,) * 8, np.float32).transpose(*range(7, -1, -1)))


def test_tensor_copies_take_the_kernel(monkeypatch):
    """clone of a strided view, a copying reshape, a slice write and copy_ all reach the
    backend's copy, and give NumPy's values."""
    calls = []
    real = _copy.copy

    def counting(dst, src):
        calls.append(dst.shape)
        return real(dst, src)
    monkeypatch.setattr(_copy, "copy", counting)
    x = np.random.default_rng(0).standard_normal((4, 6, 8)).astype(np.float32)
    t = tp.tensor(x, device="cuda")
    np.testing.assert_array_equal(t.transpose(0, 1).clone().cpu().numpy(), x.transpose(1, 0, 2))
    np.testing.assert_array_equal(t.transpose(0, 1).reshape(6, 32).cpu().numpy(),
                                  x.transpose(1, 0, 2).reshape(6, 32))
    cache = tp.zeros(4, 10, 8, device="cuda")
    for _ in range(2):   # the second write takes the kept path
        cache[:, 2:8] = t[:, :6]
    expected = np.zeros((4, 10, 8), np.float32)
    expected[:, 2:8] = x[:, :6]
    np.testing.assert_array_equal(cache.cpu().numpy(), expected)
    out = tp.empty(8, 6, device="cuda")
    out.copy_(t[1].T)
    np.testing.assert_array_equal(out.cpu().numpy(), x[1].T)
    assert len(calls) == 5


@pytest.mark.parametrize("shape,perm", list(itertools.product(
    [(2, 3, 4), (5, 1, 7, 2)], ["reverse", "rotate"])))
def test_permuted_clones_in_a_graph(shape, perm):
    """The kept copy inside a captured graph reads the replay's inputs."""
    order = tuple(reversed(range(len(shape)))) if perm == "reverse" else \
        tuple(range(1, len(shape))) + (0,)
    x = tp.randn(*shape, device="cuda")
    graph = tp.accelerator.Graph()
    with graph:
        y = x.permute(*order).contiguous()
    x.copy_(tp.randn(*shape, device="cuda"))
    graph.replay()
    np.testing.assert_array_equal(y.cpu().numpy(), x.cpu().numpy().transpose(order))
