"""``__getitem__``/``__setitem__`` and the named indexing ops against NumPy, on every device."""

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, to_numpy


def base(device, *shape):
    size = int(np.prod(shape))
    return (tp.arange(size, device=device).reshape(*shape),
            np.arange(size, dtype=np.int64).reshape(shape))


BASIC_KEYS = [
    1, -1, slice(1, 3), slice(None, None, 2), (1, 2), (slice(None), 1), (Ellipsis, 0),
    (None, 1), (1, None, slice(0, 2)), (slice(None), None, Ellipsis, None), (-2, -1, -3),
    (slice(-3, None), slice(1, -1, 2)), Ellipsis, (), (slice(5, 10),), (slice(2, 1),),
]


@pytest.mark.parametrize("key", BASIC_KEYS, ids=repr)
def test_basic_indexing_is_a_view(device, key):
    t, a = base(device, 3, 4, 5)
    view = t[key]
    expected = a[key]
    np.testing.assert_array_equal(to_numpy(view), expected)
    assert view.shape == expected.shape
    view.fill_(-1)  # aliasing: the base changes where the view looks
    a[key] = -1
    np.testing.assert_array_equal(to_numpy(t), a)


def test_bool_scalar_index(device):
    t, a = base(device, 2, 3)
    assert t[True].shape == (1, 2, 3)
    assert t[False].shape == (0, 2, 3)
    assert t[1, True].shape == (1, 3)


ADVANCED_KEYS = [
    [0, 2], [[0, 1], [2, 2]], (slice(None), [3, 0, 1]), ([0, 2], [1, 3]),
    ([0, 2], slice(None), [1, 4]),  # separated: the index dims go first (NumPy's rule)
    (slice(None), [1, 2], [0, 4]), ([-1, 0],), (Ellipsis, [4, 0]),
    ([[0], [2]], slice(1, 3), [[1, 2]]), (None, [1, 2]),
]


@pytest.mark.parametrize("key", ADVANCED_KEYS, ids=repr)
def test_advanced_indexing_copies(device, key):
    t, a = base(device, 3, 4, 5)
    result = t[key]
    expected = a[key]
    assert result.shape == expected.shape
    np.testing.assert_array_equal(to_numpy(result), expected)
    result.fill_(-1)  # a copy: the base is untouched
    np.testing.assert_array_equal(to_numpy(t), np.arange(60).reshape(3, 4, 5))


def test_int_then_advanced_follows_pytorch(device):
    # PyTorch applies ints first (as select), so t[0, :, [1, 2]] is (4, 2), where NumPy gives
    # (2, 4): the int counts as an advanced index there.
    t, a = base(device, 3, 4, 5)
    result = t[0, :, [1, 2]]
    assert result.shape == (4, 2)
    np.testing.assert_array_equal(to_numpy(result), a[0][:, [1, 2]])


def test_index_tensors(device):
    t, a = base(device, 4, 3)
    index = tp.tensor([3, 0, 3], device=device)
    np.testing.assert_array_equal(to_numpy(t[index]), a[[3, 0, 3]])
    index32 = tp.tensor([[1], [2]], dtype=tp.int32, device=device)
    np.testing.assert_array_equal(to_numpy(t[index32, tp.tensor([0, 2], device=device)]),
                                  a[[[1], [2]], [0, 2]])
    np.testing.assert_array_equal(to_numpy(t[tp.tensor(2, device=device)]), a[2])
    np.testing.assert_array_equal(to_numpy(t[np.array([1, 1])]), a[[1, 1]])
    cpu_index = tp.tensor([0, 1])  # a host index for a device tensor is copied over
    np.testing.assert_array_equal(to_numpy(t[cpu_index]), a[[0, 1]])


def test_boolean_masks(device):
    t, a = base(device, 3, 4)
    mask = a % 3 == 0
    np.testing.assert_array_equal(to_numpy(t[tp.tensor(mask, device=device)]), a[mask])
    np.testing.assert_array_equal(to_numpy(t[t > 5]), a[a > 5])
    rows = np.array([True, False, True])
    np.testing.assert_array_equal(to_numpy(t[tp.tensor(rows, device=device)]), a[rows])
    np.testing.assert_array_equal(to_numpy(t[:, tp.tensor([True, False, False, True],
                                                           device=device)]),
                                  a[:, [True, False, False, True]])
    np.testing.assert_array_equal(to_numpy(t[[True, False, True], 1:3]), a[rows, 1:3])
    assert t[t > 100].shape == (0,)
    np.testing.assert_array_equal(to_numpy(t[tp.tensor(True, device=device)]), a[None])


def test_setitem_basic(device):
    t, a = base(device, 3, 4)
    t[0] = 100
    a[0] = 100
    t[1, 1:3] = tp.tensor([7, 8], device=device)
    a[1, 1:3] = [7, 8]
    t[:, -1] = tp.tensor([[9], [9], [9]], device=device)[:, 0]
    a[:, -1] = 9
    t[2] = tp.tensor([[1, 2, 3, 4]], device=device)  # leading size-1 dims are dropped
    a[2] = [1, 2, 3, 4]
    t[..., 0] = 2.9  # cast to the tensor's dtype (truncated), as in PyTorch
    a[..., 0] = 2
    np.testing.assert_array_equal(to_numpy(t), a)
    u = tp.zeros(3, dtype=tp.uint8, device=device)
    u[0] = -1  # wraps like a cast
    u[1] = tp.tensor(300.0)  # from a host 0-d tensor
    assert to_numpy(u).tolist() == [255, 44, 0]


def test_setitem_advanced_and_masks(device):
    t, a = base(device, 3, 4)
    t[[0, 2], [1, 3]] = -5
    a[[0, 2], [1, 3]] = -5
    t[t > 8] = 0
    a[a > 8] = 0
    t[tp.tensor([True, False, True], device=device), 0] = tp.tensor([40, 41], device=device)
    a[[True, False, True], 0] = [40, 41]
    t[:, [0]] = tp.tensor([[1], [2], [3]], device=device)
    a[:, [0]] = [[1], [2], [3]]
    np.testing.assert_array_equal(to_numpy(t), a)
    f = tp.zeros(2, 3, device=device)
    f[f == 0] = tp.tensor(2.5, device=device)
    assert to_numpy(f).tolist() == [[2.5] * 3] * 2


def test_setitem_value_from_another_device(device):
    t = tp.zeros(2, 2, device=device)
    t[0] = tp.tensor([1.0, 2.0])  # from the host
    assert to_numpy(t).tolist() == [[1.0, 2.0], [0.0, 0.0]]
    host = tp.zeros(2, 2)
    host[1] = tp.tensor([3.0, 4.0], device=device)
    assert host.tolist() == [[0.0, 0.0], [3.0, 4.0]]


def test_indexing_errors(device):
    t, _ = base(device, 3, 4)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        t[0, -5]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        t[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[:, ::0]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]
    with pytest.raises(IndexError, match="must be long, int, byte or bool"):
        t[tp.tensor([0.0, 1.0], device=device)]
    with pytest.raises(IndexError, match="shape of the mask \\[2\\] at index 0 does not match"):
        t[tp.tensor([True, False], device=device)]
    with pytest.raises(IndexError, match="could not be broadcast together"):
        t[[0, 1], [0, 1, 2]]
    with pytest.raises(RuntimeError, match="value tensor of shape \\[3\\] cannot be broadcast "
                                           "to indexing result of shape \\[4\\]"):
        t[0] = tp.tensor([1, 2, 3], device=device)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        t[t > 5] = tp.tensor([1, 2], device=device)
    assert t[2, 3].item() == 11  # still works after the errors


def test_out_of_range_index_tensor_on_host():
    t = tp.arange(3)
    with pytest.raises(IndexError):
        t[tp.tensor([5])]
    assert t[tp.tensor([2])].tolist() == [2]


@requires_accelerator
def test_capturable_indexing_replays_with_fresh_inputs():
    # basic indexing, index tensors and mask writes need no host read, so they capture; each
    # replay reads the inputs as they are then
    t = tp.arange(6, dtype=tp.float32, device=0)
    index = tp.tensor([4, 1], device=0)
    g = tp.accelerator.Graph()
    with g:
        picked = t[index] * 10
        t[t > 3.5] = -1.0
        t[1:3] += 100.0
    t.copy_(tp.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]))
    index.copy_(tp.tensor([5, 0]))
    g.replay()
    assert picked.tolist() == [50.0, 0.0]
    assert t.tolist() == [0.0, 101.0, 102.0, 3.0, -1.0, -1.0]


@requires_accelerator
def test_boolean_mask_read_is_refused_while_capturing():
    t = tp.arange(4, device=0)
    mask = t > 1
    t[mask] = 0  # writing through a mask needs no host read: fine everywhere
    g = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="boolean mask indexing"):
        with g:
            t[mask]
    assert t.tolist() == [0, 1, 0, 0]


def test_nonzero_masked_ops(device):
    t, a = base(device, 3, 4)
    np.testing.assert_array_equal(to_numpy(tp.nonzero(t % 5 == 0)), np.argwhere(a % 5 == 0))
    rows, cols = (t > 6).nonzero(as_tuple=True)
    np.testing.assert_array_equal(to_numpy(rows), np.nonzero(a > 6)[0])
    np.testing.assert_array_equal(to_numpy(cols), np.nonzero(a > 6)[1])
    mask = tp.tensor([True, False, False, True], device=device)
    np.testing.assert_array_equal(to_numpy(t.masked_fill(mask, -1)),
                                  np.where([True, False, False, True], -1, a))
    np.testing.assert_array_equal(to_numpy(t.masked_select(mask)),
                                  a[np.broadcast_to([True, False, False, True], a.shape)])
    f = tp.zeros(2, 4, device=device)
    assert f.masked_fill_(mask, 1.5) is f
    assert to_numpy(f).tolist() == [[1.5, 0, 0, 1.5]] * 2
    f.masked_fill_(mask, tp.tensor(3.0, device=device))
    assert to_numpy(f)[0, 0] == 3.0


def test_index_select_gather_take(device):
    t, a = base(device, 3, 4)
    index = tp.tensor([2, 0], device=device)
    np.testing.assert_array_equal(to_numpy(t.index_select(0, index)), a[[2, 0]])
    np.testing.assert_array_equal(to_numpy(tp.index_select(t, 1, index)), a[:, [2, 0]])
    g = tp.tensor([[0, 3], [1, 1]], device=device)
    np.testing.assert_array_equal(to_numpy(t.gather(1, g)),
                                  np.take_along_axis(a[:2], np.array([[0, 3], [1, 1]]), 1))
    np.testing.assert_array_equal(to_numpy(tp.take(t, tp.tensor([[0, 11]], device=device))),
                                  [[0, 11]])
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        t.gather(0, index)


@pytest.mark.parametrize("key,shown", [
    (1.5, "a Python float: 1.5"), ((0, 2.0), "a Python float: 2.0"),
    (np.float64(1.0), "a NumPy float64"), ((1j,), "a Python complex"),
])
def test_a_float_index_says_a_float_was_given(device, key, shown):
    t, a = base(device, 3, 4)
    with pytest.raises(IndexError, match=f"only integers, slices .* are valid indices \\(got "
                                         f"{shown}"):
        t[key]
    with pytest.raises(IndexError, match="valid indices"):
        t[key] = 1.0
    np.testing.assert_array_equal(to_numpy(t[1]), a[1])


def test_writing_values_that_overflow_the_dtype_raises(device):
    t = tp.zeros(3, dtype=tp.int8, device=device)
    with pytest.raises(RuntimeError, match="__setitem__: value 300 cannot be converted to type "
                                           "int8 without overflow"):
        t[0] = 300
    with pytest.raises(RuntimeError, match="tensor\\(\\): value -129 cannot be converted"):
        t[:2] = [1, -129]
    with pytest.raises(RuntimeError, match="masked_fill: value 128 cannot be converted"):
        t.masked_fill(tp.tensor([True, False, True], device=device), 128)
    t[1] = 127
    t[:2] = [-128, 5]
    u = tp.zeros(2, dtype=tp.uint8, device=device)
    u[0] = -1  # wraps, as in PyTorch
    assert to_numpy(t).tolist() == [-128, 5, 0] and to_numpy(u).tolist() == [255, 0]
