"""Views: shapes, strides and aliasing (writing through a view changes its base) on every device."""

import numpy as np
import pytest

import tensorplay as tp
from support import to_numpy


def base(device, *shape):
    size = int(np.prod(shape))
    return tp.arange(size, dtype=tp.float32, device=device).reshape(*shape), \
        np.arange(size, dtype=np.float32).reshape(shape)


def assert_aliases(view, parent):
    """Writing through ``view`` shows in ``parent`` (checked through the public API)."""
    before = to_numpy(parent).copy()
    view.fill_(-1.0)
    after = to_numpy(parent)
    assert (after != before).any(), "the view does not alias its base"
    assert (after == -1).sum() == view.numel()


@pytest.mark.parametrize("make", [
    lambda t: t.view(4, 6), lambda t: t.view(-1), lambda t: t.reshape(2, -1, 4),
    lambda t: t.flatten(), lambda t: t.unflatten(2, (2, 2)), lambda t: t.permute(2, 0, 1),
    lambda t: t.transpose(0, 2), lambda t: t.unsqueeze(1), lambda t: t[None].squeeze(0),
    lambda t: t.narrow(2, 1, 2), lambda t: t.select(1, 2), lambda t: t.chunk(2, dim=2)[1],
    lambda t: t.split([1, 2], dim=1)[1], lambda t: t.movedim(0, -1), lambda t: t.swapaxes(1, 2),
    lambda t: t.unbind(0)[1], lambda t: t.diagonal(dim1=1, dim2=2), lambda t: t.mT,
    lambda t: t.T, lambda t: t[1, :, ::2], lambda t: t[..., 1], lambda t: t.view_as(t),
    lambda t: t.view(tp.int32),
])
def test_views_alias_their_base(device, make):
    t, _ = base(device, 2, 3, 4)
    view = make(t)
    if view.dtype == tp.int32:
        view.fill_(0)
        assert (to_numpy(t) == 0).sum() == 24
        return
    assert_aliases(view, t)


def test_view_and_reshape_values(device):
    t, a = base(device, 2, 3, 4)
    np.testing.assert_array_equal(to_numpy(t.view(6, 4)), a.reshape(6, 4))
    np.testing.assert_array_equal(to_numpy(t.reshape(-1, 2)), a.reshape(-1, 2))
    np.testing.assert_array_equal(to_numpy(t.flatten(1)), a.reshape(2, 12))
    np.testing.assert_array_equal(to_numpy(t.flatten(0, 1)), a.reshape(6, 4))
    np.testing.assert_array_equal(to_numpy(tp.tensor(5.0, device=device).flatten()), [5.0])
    assert t.reshape(4, 6).stride() == (6, 1)
    assert t.view(2, 12).is_contiguous()


def test_reshape_copies_when_no_view_exists(device):
    t, a = base(device, 3, 4)
    transposed = t.t()
    assert not transposed.is_contiguous()
    with pytest.raises(RuntimeError, match="view size is not compatible.*Use .reshape"):
        transposed.view(12)
    flat = transposed.reshape(12)
    np.testing.assert_array_equal(to_numpy(flat), a.T.reshape(12))
    flat.fill_(0)  # a copy: the base is untouched
    np.testing.assert_array_equal(to_numpy(t), a)
    still_a_view = transposed.reshape(4, 3, 1)  # adding a size-1 dim keeps the view
    assert_aliases(still_a_view, t)
    assert transposed.contiguous().is_contiguous()


def test_view_merges_only_contiguous_dims(device):
    t, a = base(device, 4, 6)
    sliced = t[:, :4]  # rows are contiguous, but the row stride is 6
    np.testing.assert_array_equal(to_numpy(sliced.view(4, 2, 2)), a[:, :4].reshape(4, 2, 2))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        sliced.view(16)
    np.testing.assert_array_equal(to_numpy(sliced.reshape(16)), a[:, :4].reshape(16))


def test_view_shape_errors(device):
    t, _ = base(device, 2, 3)
    with pytest.raises(RuntimeError, match=r"shape '\[4, 2\]' is invalid for input of size 6"):
        t.view(4, 2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        t.reshape(-1, -1)
    assert t.view(3, 2).shape == (3, 2)


def test_permute_transpose_t(device):
    t, a = base(device, 2, 3, 4)
    p = t.permute(2, 0, 1)
    assert p.shape == (4, 2, 3)
    assert p.stride() == (1, 12, 4)
    np.testing.assert_array_equal(to_numpy(p), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(to_numpy(tp.transpose(t, 0, 1)), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(to_numpy(t.T), a.T)
    np.testing.assert_array_equal(to_numpy(t.mT), a.swapaxes(-1, -2))
    m, b = base(device, 3, 5)
    np.testing.assert_array_equal(to_numpy(m.t()), b.T)
    v = tp.arange(3, device=device)
    assert v.t().shape == (3,)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        t.t()
    with pytest.raises(RuntimeError, match="repeated dim"):
        t.permute(0, 0, 1)
    with pytest.raises(RuntimeError, match="number of dims"):
        t.permute(0, 1)
    np.testing.assert_array_equal(to_numpy(tp.movedim(t, (0, 1), (2, 0))),
                                  np.moveaxis(a, (0, 1), (2, 0)))


def test_squeeze_unsqueeze(device):
    t = tp.zeros(1, 3, 1, 2, device=device)
    assert t.squeeze().shape == (3, 2)
    assert t.squeeze(0).shape == (3, 1, 2)
    assert t.squeeze(1).shape == (1, 3, 1, 2)  # a dim of another size is left alone
    assert t.squeeze((0, 2)).shape == (3, 2)
    assert tp.squeeze(t, -2).shape == (1, 3, 2)
    assert t.unsqueeze(0).shape == (1, 1, 3, 1, 2)
    assert t.unsqueeze(-1).shape == (1, 3, 1, 2, 1)
    assert tp.unsqueeze(tp.tensor(1.0, device=device), 0).shape == (1,)
    with pytest.raises(IndexError, match="out of range"):
        t.unsqueeze(6)


def test_expand_broadcast_to(device):
    t = tp.tensor([[1.0], [2.0]], device=device)
    e = t.expand(2, 3)
    assert e.shape == (2, 3) and e.stride() == (1, 0)
    np.testing.assert_array_equal(to_numpy(e), [[1, 1, 1], [2, 2, 2]])
    assert t.expand(4, -1, 3).shape == (4, 2, 3)
    assert tp.broadcast_to(t, (2, 2, 5)).shape == (2, 2, 5)
    assert t.expand_as(tp.zeros(2, 7)).shape == (2, 7)
    with pytest.raises(RuntimeError, match="must match the existing size \\(2\\) at "
                                           "non-singleton dimension 0"):
        t.expand(3, 3)
    for bad in [(-2, 3), (2, -3)]:   # NumPy's "negative dimensions" must not leak through
        with pytest.raises(RuntimeError, match=f"expanded size of the tensor \\({min(bad)}\\) "
                                               f"at dimension {bad.index(min(bad))} is invalid"):
            tp.ones(1, 3, device=device).expand(*bad)
    with pytest.raises(RuntimeError, match="single memory location.*clone"):
        e.fill_(5.0)  # several elements share one memory location
    with pytest.raises(RuntimeError, match="single memory location"):
        e[0] = 5.0
    with pytest.raises(RuntimeError, match="single memory location"):
        e.add_(1)
    e[0, 1] = 5.0  # one element: allowed, and every element sharing it shows it (as torch)
    np.testing.assert_array_equal(to_numpy(e)[0], [5, 5, 5])
    t[1, 0] = 7.0  # the base stays writable, and the expanded view sees it
    np.testing.assert_array_equal(to_numpy(e)[1], [7, 7, 7])


def test_narrow_select_split_chunk_unbind(device):
    t, a = base(device, 5, 4)
    np.testing.assert_array_equal(to_numpy(t.narrow(0, 1, 3)), a[1:4])
    np.testing.assert_array_equal(to_numpy(t.narrow(1, -2, 2)), a[:, 2:])
    np.testing.assert_array_equal(to_numpy(t.select(1, -1)), a[:, -1])
    pieces = t.split(2)
    assert [p.shape for p in pieces] == [(2, 4), (2, 4), (1, 4)]
    pieces = tp.split(t, [1, 3], dim=1)
    assert [p.shape for p in pieces] == [(5, 1), (5, 3)]
    chunks = t.chunk(3)
    assert [c.shape[0] for c in chunks] == [2, 2, 1]
    assert len(tp.arange(6, device=device).chunk(4)) == 3  # ceil(6/4)=2 per chunk, as torch
    rows = t.unbind()
    assert len(rows) == 5
    np.testing.assert_array_equal(to_numpy(rows[3]), a[3])
    parts = tp.tensor_split(tp.arange(7, device=device), 3)
    assert [p.numel() for p in parts] == [3, 2, 2]
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        t.narrow(0, 3, 3)
    with pytest.raises(IndexError, match="index 5 out of range"):
        t.select(0, 5)
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum"):
        t.split([1, 1], dim=0)


def test_diagonal(device):
    t, a = base(device, 3, 4)
    for offset in (-2, -1, 0, 1, 3, 5):
        np.testing.assert_array_equal(to_numpy(t.diagonal(offset)), np.diagonal(a, offset))
    b, c = base(device, 2, 3, 3)
    np.testing.assert_array_equal(to_numpy(b.diagonal(0, 1, 2)), np.diagonal(c, 0, 1, 2))
    np.testing.assert_array_equal(to_numpy(b.diagonal(1, -1, 0)), np.diagonal(c, 1, -1, 0))


def test_complex_real_imag_views(device):
    z = tp.tensor([1 + 2j, 3 - 4j], device=device)
    assert z.real.dtype == tp.float32
    np.testing.assert_array_equal(to_numpy(z.imag), [2.0, -4.0])
    z.real.fill_(0.0)
    np.testing.assert_array_equal(to_numpy(z), [2j, -4j])
    pairs = tp.view_as_real(z)
    assert pairs.shape == (2, 2)


def test_views_of_views_keep_aliasing(device):
    t, _ = base(device, 4, 4)
    deep = t.T[1:3].unsqueeze(0).permute(2, 0, 1).narrow(0, 0, 2)
    assert_aliases(deep, t)
    view = t.view(16)
    view += 100  # an in-place op on a view writes the base
    assert to_numpy(t).min() == 99  # the -1s written above, plus 100


def test_iteration_gives_views(device):
    t, a = base(device, 3, 2)
    rows = list(t)
    assert len(rows) == 3
    np.testing.assert_array_equal(to_numpy(rows[2]), a[2])
    rows[0].fill_(-1)
    assert to_numpy(t)[0].tolist() == [-1.0, -1.0]
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(tp.tensor(1.0, device=device))


@pytest.mark.parametrize("make,shape,strides", [
    # PyTorch's unsqueeze: a new size-1 dim spans the dim it goes in front of (1 at the end)
    (lambda a: a.unsqueeze(0), (1, 3, 4), (12, 4, 1)),
    (lambda a: a.unsqueeze(1), (3, 1, 4), (4, 4, 1)),
    (lambda a: a.unsqueeze(-1), (3, 4, 1), (4, 1, 1)),
    (lambda a: a.T.unsqueeze(1), (4, 1, 3), (1, 12, 4)),
    (lambda a: a[0].unsqueeze(0).unsqueeze(0), (1, 1, 4), (4, 4, 1)),
    # indexing with None or a bool inserts dims as unsqueeze does, in front of the next dim
    (lambda a: a[None], (1, 3, 4), (12, 4, 1)),
    (lambda a: a[:, None], (3, 1, 4), (4, 4, 1)),
    (lambda a: a[..., None], (3, 4, 1), (4, 1, 1)),
    (lambda a: a[None, 1:2], (1, 1, 4), (12, 4, 1)),
    (lambda a: a[0, None], (1, 4), (4, 1)),
    (lambda a: a[None, None], (1, 1, 3, 4), (12, 12, 4, 1)),
    (lambda a: a[True], (1, 3, 4), (12, 4, 1)),
    # new tensors, reshapes, and views that keep a size-1 dim
    (lambda a: tp.empty(3, 1, 4, device=a.device), (3, 1, 4), (4, 4, 1)),
    (lambda a: a.reshape(3, 1, 4), (3, 1, 4), (4, 4, 1)),
    (lambda a: a.view(1, 12), (1, 12), (12, 1)),
    (lambda a: a[:, 1:2], (3, 1), (4, 1)),
    (lambda a: a.unsqueeze(1).squeeze(1), (3, 4), (4, 1)),
    (lambda a: a.unsqueeze(1).permute(1, 2, 0), (1, 4, 3), (4, 1, 4)),
    # expand: 0 for repeated dims, the base's for kept ones, the next extent for new size-1 dims
    (lambda a: a[0].expand(1, 4), (1, 4), (4, 1)),
    (lambda a: a[0].expand(2, 1, 4), (2, 1, 4), (0, 4, 1)),
    (lambda a: a[:, :1].expand(3, 5), (3, 5), (4, 0)),
    (lambda a: tp.tensor(1.0, device=a.device).expand(1, 2), (1, 2), (0, 0)),
])
def test_size_one_dims_have_pytorch_strides(device, make, shape, strides):
    a, _ = base(device, 3, 4)
    t = make(a)
    assert (t.shape, t.stride()) == (shape, strides)
    np.testing.assert_array_equal(to_numpy(t), to_numpy(t.contiguous()))
