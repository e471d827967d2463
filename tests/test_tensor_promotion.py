"""Type promotion against a table of PyTorch results written out by hand (PyTorch 2.x).

Each row is checked through real ops on every device, not just ``result_type``: the result's
dtype and its values.
"""

import numpy as np
import pytest

import tensorplay as tp
from support import supports, to_numpy

# (left dtype, right dtype, result of add) for two 1-D tensors
TENSOR_TENSOR = [
    ("int64", "float16", "float16"),
    ("uint8", "int8", "int16"),
    ("int8", "uint8", "int16"),
    ("uint8", "int16", "int16"),
    ("uint8", "int64", "int64"),
    ("int32", "int64", "int64"),
    ("bool", "bool", "bool"),
    ("bool", "int8", "int8"),
    ("bool", "float16", "float16"),
    ("int32", "float32", "float32"),
    ("float16", "bfloat16", "float32"),
    ("float32", "float64", "float64"),
    ("bfloat16", "float64", "float64"),
    ("float32", "complex64", "complex64"),
    ("float64", "complex64", "complex128"),
    ("int64", "complex64", "complex64"),
    ("uint16", "uint16", "uint16"),
    ("uint16", "bool", "uint16"),
    ("uint64", "uint64", "uint64"),
]


def _operand(dtype_name, device, values, ndim=1):
    dtype = getattr(tp, dtype_name)
    if not supports(device, dtype):
        pytest.skip(f"{device} cannot hold {dtype_name}")
    array = np.array(values).astype(dtype.numpy)
    return tp.tensor(array if ndim else array.reshape(()), dtype=dtype, device=device)


@pytest.mark.parametrize("left,right,expected", TENSOR_TENSOR)
def test_tensor_tensor_promotion(device, left, right, expected):
    a = _operand(left, device, [1, 0, 1])
    b = _operand(right, device, [1, 1, 0])
    result = a + b
    assert result.dtype == getattr(tp, expected)
    assert tp.promote_types(getattr(tp, left), getattr(tp, right)) == getattr(tp, expected)
    if expected == "bool":
        assert to_numpy(result).tolist() == [True, True, True]
    else:
        assert to_numpy(result).astype(np.complex128).real.tolist() == [2.0, 1.0, 1.0]


def test_uint8_plus_int8_does_not_overflow(device):
    a = tp.tensor([200, 255], dtype=tp.uint8, device=device)
    b = tp.tensor([-100, 1], dtype=tp.int8, device=device)
    assert to_numpy(a + b).tolist() == [100, 256]


# (tensor dtype, Python scalar, op, result dtype)
TENSOR_SCALAR = [
    ("int32", 2.5, "add", "float32"),
    ("float16", 2.5, "add", "float16"),
    ("bfloat16", 2.5, "mul", "bfloat16"),
    ("float64", 2.5, "add", "float64"),
    ("uint8", 1, "add", "uint8"),
    ("int8", 1000, "add", "int8"),  # the scalar's category is not higher: int8, wrapping
    ("int32", 2, "mul", "int32"),
    ("bool", 1, "add", "int64"),
    ("bool", 1.5, "add", "float32"),
    ("bool", True, "add", "bool"),
    ("float32", 1j, "add", "complex64"),
    ("float64", 1j, "add", "complex128"),
    ("int64", 1j, "add", "complex64"),
    ("int64", 2.0, "pow", "float32"),
    ("int64", 3, "div", "float32"),
    ("int16", 3, "floor_divide", "int16"),
    ("float16", 1, "gt", "bool"),
]


@pytest.mark.parametrize("dtype,scalar,op,expected", TENSOR_SCALAR)
def test_tensor_scalar_promotion(device, dtype, scalar, op, expected):
    t = _operand(dtype, device, [1, 2, 3])
    result = getattr(tp, op)(t, scalar)
    assert result.dtype == getattr(tp, expected)
    reference = {"add": np.add, "mul": np.multiply, "pow": np.power, "div": np.true_divide,
                 "floor_divide": np.floor_divide, "gt": np.greater}[op]
    wanted = reference(np.array([1, 2, 3], dtype=np.float64 if expected != "bool" else None),
                       scalar)
    got = to_numpy(result)
    if dtype == "int8":
        assert got.tolist() == [-23, -22, -21]  # (1 + 1000) wraps in int8, as in PyTorch
    elif dtype == "bool" and expected == "bool":
        assert got.tolist() == [True, True, True]
    elif expected != "bool" and dtype != "bool":
        np.testing.assert_allclose(got.astype(np.complex128), wanted, rtol=1e-2)
    # reflected forms agree
    if op in ("add", "mul"):
        assert getattr(tp, op)(scalar, t).dtype == getattr(tp, expected)


# (0-d dtype, 1-D dtype, result): a 0-d tensor takes part only with a higher category
ZERO_DIM = [
    ("float64", "float32", "float32"),
    ("float32", "int64", "float32"),
    ("float64", "int32", "float64"),
    ("int64", "int8", "int8"),
    ("int64", "uint8", "uint8"),
    ("int32", "bool", "int32"),
    ("complex128", "int32", "complex128"),
    ("float16", "float64", "float64"),
]


@pytest.mark.parametrize("zero_dim,one_dim,expected", ZERO_DIM)
def test_zero_dim_tensor_promotion(device, zero_dim, one_dim, expected):
    scalar = _operand(zero_dim, device, [1], ndim=0)
    vector = _operand(one_dim, device, [1, 2])
    assert (scalar + vector).dtype == getattr(tp, expected)
    assert (vector * scalar).dtype == getattr(tp, expected)


def test_two_zero_dim_tensors_promote_fully(device):
    a = tp.tensor(1.0, dtype=tp.float16, device=device)
    b = tp.tensor(2.0, dtype=tp.float64, device=device)
    assert (a + b).dtype == tp.float64


def test_host_zero_dim_tensor_joins_an_accelerator_op(device):
    vector = tp.tensor([1.0, 2.0], device=device)
    result = vector + tp.tensor(3.0)  # a cpu 0-d tensor is allowed, as in PyTorch
    assert result.device == tp.device(device)
    assert to_numpy(result).tolist() == [4.0, 5.0]


def test_integer_division_gives_float(device):
    a, b = tp.tensor([1, 2], device=device), tp.tensor([2, 4], device=device)
    assert (a / b).dtype == tp.float32
    assert to_numpy(a / b).tolist() == [0.5, 0.5]
    assert (a // b).dtype == tp.int64


@pytest.mark.parametrize("left,right", [("uint16", "int32"), ("uint32", "int64"),
                                        ("uint64", "float32"), ("uint16", "uint32")])
def test_unsupported_unsigned_promotion(device, left, right):
    a, b = _operand(left, device, [1]), _operand(right, device, [1])
    with pytest.raises(TypeError, match="promote only with themselves and bool"):
        a + b
    assert (a + a).dtype == getattr(tp, left)  # the process keeps working


def test_promotion_in_other_ops(device):
    i = tp.tensor([1, 2], dtype=tp.int32, device=device)
    h = tp.tensor([0.5, 1.5], dtype=tp.float16, device=device) \
        if supports(device, tp.float16) else None
    cond = tp.tensor([True, False], device=device)
    assert tp.where(cond, i, 2.5).dtype == tp.float32
    assert tp.where(cond, i, 2).dtype == tp.int32
    assert tp.clamp(i, 0.5).dtype == tp.float32
    assert tp.sigmoid(i).dtype == tp.float32
    assert i.sum().dtype == tp.int64
    if h is not None:
        assert tp.cat([i, h]).dtype == tp.float16
        assert h.mean().dtype == tp.float16
        assert tp.maximum(i, h).dtype == tp.float16
    assert tp.result_type(i, 2.5) == tp.float32
