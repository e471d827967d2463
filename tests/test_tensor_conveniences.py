"""Conveniences PyTorch users reach for: ``Tensor.__format__``, ``set_printoptions``,
``tp.Size``, ``is_cpu``, ``get_device``, ``numel``, ``element_size``, ``nbytes``, ``itemsize``;
on every device."""

import math
import pickle

import numpy as np
import pytest

import tensorplay as tp
from support import supports


@pytest.fixture
def default_printoptions():
    yield
    tp.set_printoptions(profile="default")   # also resets sci_mode to None


# -- __format__ ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,value,expected", [
    (".3f", 1.23456, "1.235"), (".2e", 12345.0, "1.23e+04"), ("8.1f", 2.5, "     2.5"),
    ("", 1.5, "1.5"), ("+.1f", -0.25, "-0.2"),
])
def test_format_0d_float(device, spec, value, expected):
    t = tp.tensor(value, dtype=tp.float64, device=device)
    assert format(t, spec) == expected
    assert f"{t:{spec}}" == expected


def test_format_0d_int_bool_complex(device):
    assert f"{tp.tensor(42, device=device):05d}" == "00042"
    assert f"{tp.tensor(7, device=device):x}" == "7"
    assert f"{tp.tensor(True, device=device)}" == "True"
    assert f"{tp.tensor(1 + 2j, device=device):.1f}" == "1.0+2.0j"


def test_format_empty_spec_0d_is_the_value_not_the_repr(device):
    # as PyTorch: f"{torch.tensor(1.5)}" == "1.5"
    assert f"{tp.tensor(1.5, device=device)}" == "1.5"
    assert f"{tp.tensor(3, device=device)}" == "3"


def test_format_non_scalar_empty_spec_is_str(device):
    t = tp.tensor([1.0, 2.0], device=device)
    assert f"{t}" == str(t) == repr(t)
    one = tp.tensor([1.5], device=device)
    assert format(one, "") == repr(one)


@pytest.mark.parametrize("shape", [(2,), (1,), (1, 1), (0,), (2, 3)])
def test_format_non_scalar_with_spec_raises_type_error(device, shape):
    t = tp.ones(*shape, device=device)
    with pytest.raises(TypeError, match="0-d"):
        format(t, ".3f")


def test_format_bfloat16_and_half(device):
    for dtype in (tp.float16, tp.bfloat16):
        if supports(device, dtype):
            assert f"{tp.tensor(1.5, dtype=dtype, device=device):.2f}" == "1.50"


# -- set_printoptions --------------------------------------------------------------------------
def test_printoptions_precision(device, default_printoptions):
    t = tp.tensor([1.23456, 2.5], device=device)
    tp.set_printoptions(precision=2)
    assert repr(t).startswith("tensor([1.23, 2.50]")
    tp.set_printoptions(precision=6)
    assert repr(t).startswith("tensor([1.234560, 2.500000]")


def test_printoptions_precision_in_sci_mode(default_printoptions):
    tp.set_printoptions(precision=2)
    assert repr(tp.tensor([1e-5, 1.0])) == "tensor([1.00e-05, 1.00e+00])"


def test_printoptions_threshold_and_edgeitems(device, default_printoptions):
    t = tp.arange(10, device=device)
    suffix = "" if device == "cpu" else f", device='{device}'"
    assert repr(t) == f"tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]{suffix})"
    tp.set_printoptions(threshold=5)
    assert repr(t) == f"tensor([0, 1, 2,  ..., 7, 8, 9]{suffix})"
    tp.set_printoptions(edgeitems=1)   # threshold kept from the previous call
    assert repr(t) == f"tensor([0,  ..., 9]{suffix})"


def test_printoptions_summarizes_2d(default_printoptions):
    tp.set_printoptions(threshold=4, edgeitems=1)
    assert repr(tp.arange(16).reshape(4, 4)) == ("tensor([[ 0,  ...,  3],\n"
                                                  "        ...,\n"
                                                  "        [12,  ..., 15]])")


def test_printoptions_linewidth(default_printoptions):
    t = tp.arange(10)
    tp.set_printoptions(linewidth=20)
    assert repr(t) == "tensor([0, 1, 2, 3,\n        4, 5, 6, 7,\n        8, 9])"


def test_printoptions_sci_mode(device, default_printoptions):
    t = tp.tensor([1.5, 2.0], device=device)
    tp.set_printoptions(sci_mode=True)
    assert repr(t).startswith("tensor([1.5000e+00, 2.0000e+00]")
    assert repr(tp.tensor([1.0, 2.0], device=device)).startswith(
        "tensor([1.0000e+00, 2.0000e+00]")
    tp.set_printoptions(sci_mode=False)
    assert repr(tp.tensor([1e-6, 1.0], device=device)).startswith("tensor([0.0000, 1.0000]")
    tp.set_printoptions()   # sci_mode is always set: leaving it out resets it to automatic
    assert repr(tp.tensor([1e-6, 1.0], device=device)).startswith(
        "tensor([1.0000e-06, 1.0000e+00]")


def test_printoptions_profiles(default_printoptions):
    big = tp.arange(2000)
    tp.set_printoptions(profile="full")
    assert "..." not in repr(big) and repr(big).count(",") == 1999
    tp.set_printoptions(profile="short")
    assert repr(tp.tensor([1.23456])) == "tensor([1.23])"
    assert repr(big) == "tensor([   0,    1,  ..., 1998, 1999])"
    tp.set_printoptions(profile="short", precision=3)   # explicit arguments override a profile
    assert repr(tp.tensor([1.23456])) == "tensor([1.235])"
    tp.set_printoptions(profile="default")
    assert repr(tp.tensor([1.23456])) == "tensor([1.2346])"
    assert "..." in repr(big)


def test_printoptions_threshold_inf(default_printoptions):
    tp.set_printoptions(threshold=math.inf)
    assert "..." not in repr(tp.arange(1500))


def test_printoptions_errors(default_printoptions):
    with pytest.raises(ValueError, match="profile"):
        tp.set_printoptions(profile="long")
    with pytest.raises(TypeError, match="precision"):
        tp.set_printoptions(precision=2.5)
    with pytest.raises(ValueError, match="edgeitems"):
        tp.set_printoptions(edgeitems=-1)
    with pytest.raises(TypeError, match="sci_mode"):
        tp.set_printoptions(sci_mode="yes")
    with pytest.raises(TypeError, match="linewidth"):
        tp.set_printoptions(linewidth=True)
    # a refused call changes nothing
    assert repr(tp.tensor([1.23456])) == "tensor([1.2346])"


# -- Size ------------------------------------------------------------------------------------------
def test_shape_and_size_are_size(device):
    t = tp.zeros(2, 3, device=device)
    for shape in (t.shape, t.size()):
        assert type(shape) is tp.Size and isinstance(shape, tuple)
        assert shape == (2, 3) and shape == tp.Size([2, 3]) and hash(shape) == hash((2, 3))
        assert repr(shape) == str(shape) == "tensorplay.Size([2, 3])"
    assert t.size(1) == 3 and t.size(-2) == 2 and type(t.size(0)) is int
    assert repr(tp.tensor(1.0, device=device).shape) == "tensorplay.Size([])"


def test_size_numel():
    assert tp.Size([2, 3, 4]).numel() == 24
    assert tp.Size([]).numel() == 1
    assert tp.Size([3, 0]).numel() == 0
    assert tp.zeros(5, 2).shape.numel() == 10


def test_size_constructor_and_ops():
    assert tp.Size() == () and tp.Size((1, np.int64(2))) == (1, 2)
    assert type(tp.Size([1])[0]) is int
    assert tp.Size([tp.tensor(4)]) == (4,)
    combined = tp.Size([2]) + (3,)
    assert type(combined) is tp.Size and combined == (2, 3)
    rows, cols = tp.zeros(4, 5).shape
    assert (rows, cols) == (4, 5)
    assert pickle.loads(pickle.dumps(tp.Size([2, 3]))) == tp.Size([2, 3])
    assert type(pickle.loads(pickle.dumps(tp.Size([2, 3])))) is tp.Size


@pytest.mark.parametrize("bad", [[1.5], ["2"], [True], [tp.tensor(1.0)], 3, None])
def test_size_constructor_errors(bad):
    with pytest.raises(TypeError, match="Size"):
        tp.Size(bad)


def test_size_usable_where_shapes_are(device):
    t = tp.zeros(2, 3, device=device)
    assert tp.zeros(t.shape, device=device).shape == (2, 3)
    assert t.reshape(t.shape[::-1]).shape == (3, 2)
    assert t.view(tp.Size([6])).shape == (6,)


# -- device and size properties -------------------------------------------------------------------
def test_is_cpu_and_get_device(device):
    t = tp.zeros(2, device=device)
    if device == "cpu":
        assert t.is_cpu is True and t.get_device() == -1
    else:
        assert t.is_cpu is False and t.get_device() == tp.device(device).index == 0
    assert t.to("cpu").is_cpu and t.to("cpu").get_device() == -1


ALL_DTYPES = [tp.bool, tp.uint8, tp.int8, tp.int16, tp.int32, tp.int64, tp.uint16, tp.uint32,
              tp.uint64, tp.float16, tp.bfloat16, tp.float32, tp.float64, tp.complex64,
              tp.complex128]
ITEMSIZES = [1, 1, 1, 2, 4, 8, 2, 4, 8, 2, 2, 4, 8, 8, 16]


@pytest.mark.parametrize("dtype,itemsize", zip(ALL_DTYPES, ITEMSIZES), ids=str)
def test_element_size_itemsize_nbytes(device, dtype, itemsize):
    if not supports(device, dtype):
        pytest.skip(f"{device} has no {dtype}")
    t = tp.zeros(3, 4, dtype=dtype, device=device)
    assert t.element_size() == t.itemsize == itemsize
    assert t.numel() == t.nelement() == 12
    assert t.nbytes == 12 * itemsize
    view = t[:, ::2]
    assert view.numel() == 6 and view.nbytes == 6 * itemsize   # the view's elements only
    assert tp.zeros(0, 4, dtype=dtype, device=device).nbytes == 0
    assert tp.zeros((), dtype=dtype, device=device).numel() == 1


def test_properties_are_properties_and_methods_are_methods(device):
    t = tp.zeros(2, device=device)
    assert isinstance(t.itemsize, int) and isinstance(t.nbytes, int)
    assert isinstance(t.is_cpu, bool)
    assert callable(t.numel) and callable(t.element_size) and callable(t.get_device)
