"""Property tests (hypothesis): elementwise ops, broadcasting, reductions, views and slicing
against NumPy on every device. Examples are few per test so the suite stays fast."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorplay as tp
from support import DEVICES, to_numpy

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)
DTYPES = {"float32": tp.float32, "float64": tp.float64, "int32": tp.int32, "int64": tp.int64,
          "int8": tp.int8, "bool": tp.bool}


def arrays(dtype_name, shape):
    dtype = np.dtype(DTYPES[dtype_name].numpy)
    if dtype.kind == "f":
        elements = st.floats(-1e3, 1e3, width=dtype.itemsize * 8, allow_subnormal=False)
    elif dtype.kind == "b":
        elements = st.booleans()
    else:
        elements = st.integers(-100, 100)
    return hnp.arrays(dtype, shape, elements=elements)


@st.composite
def broadcast_pairs(draw, dtypes=("float32", "float64", "int32", "int64", "int8")):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                    max_side=4))
    left, right = draw(st.sampled_from(dtypes)), draw(st.sampled_from(dtypes))
    return (draw(arrays(left, shapes.input_shapes[0])), draw(arrays(right, shapes.input_shapes[1])),
            shapes.result_shape)


EXACT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
                "minimum": np.minimum, "eq": np.equal, "lt": np.less, "ge": np.greater_equal}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(EXACT_BINARY))
@SETTINGS
@given(pair=broadcast_pairs())
def test_binary_ops_match_numpy_in_the_promoted_dtype(device, op, pair):
    a, b, shape = pair
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    result = getattr(tp, op)(ta, tb)
    assert result.shape == tuple(shape)
    promoted = tp.result_type(ta, tb)
    compute = promoted.numpy
    expected = EXACT_BINARY[op](a.astype(compute), b.astype(compute))
    with np.errstate(over="ignore"):
        expected = expected.astype(result.dtype.numpy)
    np.testing.assert_array_equal(to_numpy(result), expected)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(pair=broadcast_pairs(dtypes=("float32", "float64")), scalar=st.floats(-10, 10))
def test_scalar_operands_keep_the_tensor_dtype(device, pair, scalar):
    a, _, _ = pair
    t = tp.tensor(a, device=device)
    result = t * scalar + 1
    assert result.dtype == t.dtype
    expected = a * a.dtype.type(scalar) + a.dtype.type(1)
    np.testing.assert_array_equal(to_numpy(result), expected)


UNARY = {"exp": np.exp, "tanh": np.tanh, "sin": np.sin, "abs": np.abs, "neg": np.negative,
         "floor": np.floor, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
         "relu": lambda x: np.maximum(x, 0)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(UNARY))
@SETTINGS
@given(a=st.sampled_from(["float32", "float64"]).flatmap(
    lambda d: arrays(d, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))))
def test_unary_ops_match_numpy(device, op, a):
    a = np.clip(a, -50, 50)
    result = getattr(tp, op)(tp.tensor(a, device=device))
    assert result.dtype == DTYPES[a.dtype.name]
    with np.errstate(over="ignore"):
        expected = UNARY[op](a.astype(np.float64))
    rtol = 1e-6 if a.dtype == np.float32 else 1e-13
    np.testing.assert_allclose(to_numpy(result), expected, rtol=rtol, atol=1e-30)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(a=arrays("float64", hnp.array_shapes(min_dims=1, max_dims=4, max_side=4)),
       data=st.data())
def test_reductions_match_numpy(device, a, data):
    dims = data.draw(st.lists(st.integers(0, a.ndim - 1), unique=True, min_size=1))
    keepdim = data.draw(st.booleans())
    t = tp.tensor(a, device=device)
    axes = tuple(dims)
    for name, reference in (("sum", np.sum), ("mean", np.mean), ("amax", np.amax)):
        result = getattr(t, name)(dim=axes, keepdim=keepdim)
        np.testing.assert_allclose(to_numpy(result), reference(a, axis=axes, keepdims=keepdim),
                                   rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), data=st.data())
def test_permute_then_reshape_matches_numpy(device, shape, data):
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    order = data.draw(st.permutations(range(len(shape))))
    t = tp.tensor(a, device=device).permute(*order)
    expected = a.transpose(order)
    np.testing.assert_array_equal(to_numpy(t), expected)
    assert t.stride() == tuple(s // 8 for s in expected.strides)
    new_shape = data.draw(st.sampled_from([(-1,), (expected.shape[0], -1)]))
    np.testing.assert_array_equal(to_numpy(t.reshape(*new_shape)), expected.reshape(new_shape))


@st.composite
def basic_keys(draw, shape):
    key, dim = [], 0
    for _ in range(draw(st.integers(0, len(shape) + 1))):
        kind = draw(st.sampled_from(["int", "slice", "none"]))
        if kind == "none" or dim == len(shape):
            key.append(None)  # consumes no dimension
            continue
        size = shape[dim]
        dim += 1
        if kind == "int" and size:
            key.append(draw(st.integers(-size, size - 1)))
        else:
            start = draw(st.none() | st.integers(-size - 2, size + 2))
            stop = draw(st.none() | st.integers(-size - 2, size + 2))
            key.append(slice(start, stop, draw(st.none() | st.integers(1, 3))))
    return tuple(key)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), data=st.data())
def test_basic_indexing_matches_numpy_and_aliases(device, shape, data):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    key = data.draw(basic_keys(shape))
    t = tp.tensor(a, device=device)
    view = t[key]
    np.testing.assert_array_equal(to_numpy(view), a[key])
    t[key] = -1.0
    a[key] = -1.0
    np.testing.assert_array_equal(to_numpy(t), a)


@pytest.mark.parametrize("device", DEVICES)
@SETTINGS
@given(pair=broadcast_pairs(dtypes=("float32",)))
def test_inplace_add_matches_out_of_place(device, pair):
    a, b, shape = pair
    if tuple(shape) != a.shape:
        return  # in-place ops never broadcast self
    t = tp.tensor(a, device=device)
    expected = to_numpy(t + tp.tensor(b, device=device))
    t += tp.tensor(b, device=device)
    np.testing.assert_array_equal(to_numpy(t), expected)
