"""Tensor creation, dtype inference, copies vs sharing, and moving data, on every device."""

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, accelerator_device, supports, to_numpy


@pytest.mark.parametrize("data,dtype", [
    ([1.0, 2.0], tp.float32), ([1, 2], tp.int64), ([True, False], tp.bool),
    ([1, 2.5], tp.float32), ([True, 1], tp.int64), ([1 + 1j], tp.complex64), (3.5, tp.float32),
    (7, tp.int64), ([], tp.float32), ([[1, 2], [3, 4]], tp.int64),
    (np.array([1, 2], dtype=np.int32), tp.int32), (np.float64(2.0), tp.float64),
    (np.array([1.0], dtype=np.float16), tp.float16),
])
def test_tensor_infers_pytorch_dtypes(device, data, dtype):
    t = tp.tensor(data, device=device)
    assert t.dtype == dtype
    assert t.device == tp.device(device)
    np.testing.assert_array_equal(to_numpy(t), np.asarray(data).astype(dtype.numpy))


def test_tensor_with_dtype_and_from_tensors(device):
    t = tp.tensor([1.7, -2.2], dtype=tp.int32, device=device)
    assert t.dtype == tp.int32 and to_numpy(t).tolist() == [1, -2]
    nested = tp.tensor([tp.tensor(1.0), tp.tensor(2.0)], device=device)
    assert to_numpy(nested).tolist() == [1.0, 2.0]
    copy = tp.tensor(t)   # a copy on t's device, as torch.tensor(t)
    assert copy.device == t.device and copy.tolist() == [1, -2]


def test_tensor_copies_as_tensor_and_from_numpy_share():
    array = np.array([1.0, 2.0], dtype=np.float32)
    copied = tp.tensor(array)
    shared = tp.as_tensor(array)
    aliased = tp.from_numpy(array)
    array[0] = 9.0
    assert copied[0].item() == 1.0
    assert shared[0].item() == 9.0 and aliased[0].item() == 9.0
    aliased[1] = 5.0
    assert array[1] == 5.0
    converted = tp.as_tensor(array, dtype=tp.float64)  # a conversion copies
    array[0] = 0.0
    assert converted[0].item() == 9.0
    t = tp.ones(2)
    assert tp.as_tensor(t) is t
    with pytest.raises(TypeError, match="expects a numpy.ndarray"):
        tp.from_numpy([1, 2])


@pytest.mark.parametrize("name,reference", [("zeros", np.zeros), ("ones", np.ones)])
def test_zeros_ones(device, name, reference):
    fn = getattr(tp, name)
    t = fn(2, 3, device=device)
    assert t.shape == (2, 3) and t.dtype == tp.float32
    np.testing.assert_array_equal(to_numpy(t), reference((2, 3)))
    assert fn((4,), dtype=tp.int8, device=device).dtype == tp.int8
    assert fn([2, 2], device=device).shape == (2, 2)
    assert fn(device=device).shape == ()
    like = getattr(tp, f"{name}_like")(tp.ones(3, dtype=tp.int32, device=device))
    assert like.dtype == tp.int32 and like.device == tp.device(device)
    np.testing.assert_array_equal(to_numpy(like), reference(3))


def test_empty_and_full(device):
    e = tp.empty(3, 4, dtype=tp.float64, device=device)
    assert e.shape == (3, 4) and e.dtype == tp.float64 and e.is_contiguous()
    assert tp.empty_like(e).shape == (3, 4)
    assert to_numpy(tp.full((2, 2), 7, device=device)).tolist() == [[7, 7], [7, 7]]
    assert tp.full((2,), 7, device=device).dtype == tp.int64
    assert tp.full((2,), 1.5, device=device).dtype == tp.float32
    assert tp.full((2,), True, device=device).dtype == tp.bool
    assert tp.full(3, 2.0, dtype=tp.float16 if supports(device, tp.float16) else tp.float32,
                   device=device).shape == (3,)
    like = tp.full_like(tp.zeros(2, device=device), 4)
    assert like.dtype == tp.float32 and to_numpy(like).tolist() == [4.0, 4.0]


@pytest.mark.parametrize("args,expected", [
    ((5,), np.arange(5)), ((2, 7, 2), np.arange(2, 7, 2)), ((5, 0, -2), np.arange(5, 0, -2)),
    ((0, 1, 0.25), np.arange(0, 1, 0.25, dtype=np.float32)), ((1, 2.5, 0.5), np.array(
        [1.0, 1.5, 2.0], np.float32)), ((0,), np.arange(0)),
])
def test_arange(device, args, expected):
    t = tp.arange(*args, device=device)
    assert t.dtype == (tp.int64 if expected.dtype.kind == "i" else tp.float32)
    np.testing.assert_allclose(to_numpy(t), expected)


def test_arange_errors_and_dtype(device):
    assert tp.arange(3, dtype=tp.float64, device=device).dtype == tp.float64
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        tp.arange(0, 3, 0)
    with pytest.raises(RuntimeError, match="wrong direction"):
        tp.arange(0, 3, -1)
    assert tp.arange(3, device=device).sum().item() == 3


def test_linspace_eye(device):
    np.testing.assert_allclose(to_numpy(tp.linspace(0, 1, 5, device=device)),
                               np.linspace(0, 1, 5, dtype=np.float32))
    assert tp.linspace(-1, 1, 3, device=device).dtype == tp.float32
    assert tp.linspace(0, 1, 0, device=device).shape == (0,)
    np.testing.assert_array_equal(to_numpy(tp.eye(3, device=device)), np.eye(3))
    np.testing.assert_array_equal(to_numpy(tp.eye(2, 3, dtype=tp.int64, device=device)),
                                  np.eye(2, 3))
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        tp.linspace(0, 1, -1)


def test_to_clone_copy(device):
    t = tp.tensor([1.5, 2.5], device=device)
    assert t.to(device) is t
    assert t.to(device, copy=True) is not t
    as_int = t.to(tp.int64)
    assert as_int.dtype == tp.int64 and to_numpy(as_int).tolist() == [1, 2]
    assert t.to(tp.zeros(1, dtype=tp.float64)).dtype == tp.float64
    c = t.clone()
    c.fill_(0)
    assert to_numpy(t).tolist() == [1.5, 2.5]
    dst = tp.zeros(3, 2, device=device)
    dst.copy_(t)  # broadcasts
    assert to_numpy(dst).tolist() == [[1.5, 2.5]] * 3
    dst.copy_(tp.tensor([1, 2]))  # from the host, with a cast
    assert to_numpy(dst)[0].tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        dst.copy_(tp.ones(4))
    assert t.cpu().device == tp.device("cpu")


def test_tensor_attributes(device):
    t = tp.zeros(2, 3, 4, dtype=tp.float64, device=device)
    assert (t.ndim, t.dim(), t.numel(), t.nbytes, t.element_size()) == (3, 3, 24, 192, 8)
    assert t.size() == (2, 3, 4) and t.size(-1) == 4
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12
    assert len(t) == 2
    assert t.is_contiguous() and t.is_floating_point() and not t.is_complex()
    assert tp.zeros(0, 4, device=device).is_contiguous()
    assert t.type() == "tensorplay.float64"
    assert tp.tensor([3], device=device).tolist() == [3]
    assert int(tp.tensor(3.7, device=device)) == 3
    assert float(tp.tensor(2, device=device)) == 2.0


@requires_accelerator
def test_moving_between_host_and_accelerator():
    device = accelerator_device()
    host = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    moved = host.to(device)
    assert moved.device == tp.device(device)
    assert moved.cpu().tolist() == host.tolist()
    transposed = host.T.to(device)  # a strided host tensor
    assert transposed.cpu().tolist() == host.T.tolist()
    back = tp.zeros(3, 2)
    back.copy_(moved.T)
    assert back.tolist() == host.T.tolist()
    assert tp.zeros(2, device=device).device == tp.device(device)
    assert tp.zeros(2, device=0).device == tp.device(accelerator_device(0))


def test_fill_casts_like_pytorch(device):
    assert to_numpy(tp.zeros(2, dtype=tp.uint8, device=device).fill_(-1)).tolist() == [255, 255]
    assert to_numpy(tp.full((2,), 2.7, dtype=tp.int32, device=device)).tolist() == [2, 2]
    assert to_numpy(tp.zeros(1, dtype=tp.bool, device=device).fill_(2)).tolist() == [True]
    assert to_numpy(tp.zeros(1, device=device).fill_(1 + 0j)).tolist() == [1.0]
    with pytest.raises(RuntimeError, match="cannot be converted to type float32"):
        tp.zeros(1, device=device).fill_(1 + 2j)   # an imaginary part "overflows", as in torch
    assert to_numpy(tp.ones(2, device=device).zero_()).tolist() == [0.0, 0.0]


# -- values that do not fit, ragged data, impossible sizes (PyTorch raises; nothing wraps) --------

@pytest.mark.parametrize("data,dtype,shown", [
    ([2 ** 63], None, "9223372036854775808 cannot be converted to type int64"),
    ([2 ** 64], None, "18446744073709551616 cannot be converted to type int64"),
    ([[2 ** 63, -1]], None, "9223372036854775808 cannot be converted to type int64"),
    (-(2 ** 63) - 1, None, "-9223372036854775809 cannot be converted to type int64"),
    ([300], tp.int8, "300 cannot be converted to type int8"),
    ([1, -129], tp.int8, "-129 cannot be converted to type int8"),
    ([256], tp.uint8, "256 cannot be converted to type uint8"),
    ([-256], tp.uint8, "-256 cannot be converted to type uint8"),
    ([-1.0], tp.uint8, "-1.0 cannot be converted to type uint8"),
    ([127.5], tp.int8, "127.5 cannot be converted to type int8"),
    ([1.0, float("nan")], tp.int32, "nan cannot be converted to type int32"),
    ([2 ** 64], tp.uint64, "18446744073709551616 cannot be converted to type uint64"),
])
def test_tensor_refuses_python_values_that_overflow_the_dtype(device, data, dtype, shown):
    # PyTorch: ValueError for ints beyond the inferred int64, RuntimeError for a given dtype
    error = ValueError if dtype is None else RuntimeError
    with pytest.raises(error, match=f"tensor\\(\\): value {shown} without overflow"):
        tp.tensor(data, dtype=dtype, device=device)
    assert to_numpy(tp.tensor([1, 2], dtype=dtype, device=device)).tolist() == [1, 2]


def test_tensor_stores_values_that_fit_as_pytorch_does(device):
    def values(data, dtype):
        return to_numpy(tp.tensor(data, dtype=dtype, device=device)).tolist()
    # negative ints down to -max wrap into unsigned dtypes, as PyTorch's checked conversion allows
    assert values([-1, -255, 255], tp.uint8) == [255, 1, 255]
    assert values([-128, 127, 1.9, -2.9], tp.int8) == [-128, 127, 1, -2]
    assert values([2 ** 64], tp.float32) == [float(2 ** 64)]
    if supports(device, tp.uint64):
        assert values([2 ** 63, -1], tp.uint64) == [2 ** 63, 2 ** 64 - 1]
    assert values([2 ** 63 - 1, -(2 ** 63)], None) == [2 ** 63 - 1, -(2 ** 63)]
    # NumPy arrays are cast, which wraps (PyTorch checks Python values only)
    assert values(np.array([300]), tp.int8) == [44]


def test_tensor_keeps_the_precision_of_the_requested_dtype(device):
    if supports(device, tp.float64):
        assert tp.tensor([0.1], dtype=tp.float64, device=device).item() == 0.1
        assert tp.tensor(0.1, dtype=tp.float64, device=device).item() == 0.1
        assert tp.tensor([2 ** 60 + 1], dtype=tp.float64, device=device).item() == 2.0 ** 60
    if supports(device, tp.complex128):
        assert tp.tensor([0.1 + 0.2j], dtype=tp.complex128, device=device).item() == 0.1 + 0.2j
    assert tp.tensor([0.1], device=device).dtype == tp.float32  # the default is unchanged


@pytest.mark.parametrize("make,shown", [
    (lambda d: tp.full((1,), 300, dtype=tp.int8, device=d), "300 cannot be converted to type int8"),
    (lambda d: tp.full((2,), 2 ** 63, device=d), "9223372036854775808 .* type int64"),
    (lambda d: tp.zeros(2, dtype=tp.int8, device=d).fill_(300), "300 cannot be converted"),
    (lambda d: tp.zeros(2, dtype=tp.uint8, device=d).fill_(-256), "-256 cannot be converted"),
    (lambda d: tp.zeros(2, dtype=tp.int32, device=d).fill_(float("nan")), "nan cannot be"),
    (lambda d: tp.zeros(2, device=d).fill_(1e39), "1e\\+39 cannot be converted to type float32"),
    (lambda d: tp.full_like(tp.zeros(2, dtype=tp.int16, device=d), 40000), "40000 cannot be"),
])
def test_full_and_fill_refuse_values_that_overflow_the_dtype(device, make, shown):
    with pytest.raises(RuntimeError, match=f"fill_: value {shown}.*without overflow"):
        make(device)
    t = tp.zeros(2, dtype=tp.uint8, device=device).fill_(-1)  # -1 wraps, as in PyTorch
    assert to_numpy(t).tolist() == [255, 255]
    assert to_numpy(tp.full((2,), float("inf"), device=device)).tolist() == [np.inf, np.inf]


@pytest.mark.parametrize("data,error,message", [
    ([[1, 2], [3]], ValueError, "expected sequence of length 2 at dim 1 \\(got 1\\)"),
    ([[[1], [2]], [[1], [2, 3]]], ValueError, "expected sequence of length 1 at dim 2 \\(got 2\\)"),
    ([[1, 2], 3], TypeError, "expected sequence of length 2 at dim 1 \\(got int 3"),
    ([1, [2, 3]], TypeError, "expected a number at dim 1 \\(got a sequence of length 2\\)"),
])
def test_ragged_nested_lists_raise_like_pytorch(device, data, error, message):
    with pytest.raises(error, match=message):
        tp.tensor(data, device=device)
    assert tp.tensor([[1, 2], [3, 4]], device=device).shape == (2, 2)


@pytest.mark.parametrize("bounds", [(0, float("inf")), (0, float("nan")), (float("-inf"), 0),
                                    (0, 1, float("nan"))])
def test_arange_refuses_infinite_and_nan_bounds(device, bounds):
    with pytest.raises(RuntimeError, match="arange: unsupported range: .* must be finite"):
        tp.arange(*bounds, device=device)
    assert to_numpy(tp.arange(0, 2.0, device=device)).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("make", [
    lambda d: tp.empty(2 ** 62, 2 ** 62, device=d),
    lambda d: tp.zeros((2 ** 40, 2 ** 40), device=d),
    lambda d: tp.ones(2 ** 61, dtype=tp.int64, device=d),
    lambda d: tp.arange(2 ** 62, device=d),
    lambda d: tp.rand(2 ** 31, 2 ** 31, device=d),
])
def test_a_shape_whose_size_overflows_says_so(device, make):
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed with sizes=\\["):
        make(device)
    assert tp.empty(2, 3, device=device).shape == (2, 3)
