"""Edge cases of the elementwise ops against PyTorch's semantics: ``abs`` of complex tensors is
real, ``sign`` of bool tensors, ``square`` of bool tensors (``pow(x, 2)``: int64), Python ints
beyond int64 as number operands (RuntimeError, never a wrapped value), and the comparison
operators with operands they cannot take (``NotImplemented``, so Python compares by identity).
"""

import numpy as np
import pytest

import tensorplay as tp
from support import supports, to_numpy

REAL_OF = {tp.complex64: tp.float32, tp.complex128: tp.float64}


def _skip_unless(device, dtype):
    if not supports(device, dtype):
        pytest.skip(f"{device} has no {dtype.name}")


# -- abs of complex tensors -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [tp.complex64, tp.complex128])
@pytest.mark.parametrize("spelling", ["function", "method", "absolute", "builtin"])
def test_abs_of_complex_is_real(device, dtype, spelling):
    _skip_unless(device, dtype)
    z = tp.tensor([3 + 4j, -1j, 0j, -2 + 0j], dtype=dtype, device=device)
    result = {"function": lambda: tp.abs(z), "method": lambda: z.abs(),
              "absolute": lambda: tp.absolute(z), "builtin": lambda: abs(z)}[spelling]()
    assert result.dtype == REAL_OF[dtype]
    np.testing.assert_allclose(to_numpy(result), [5.0, 1.0, 0.0, 2.0], rtol=1e-6)


def test_abs_of_complex_into_out(device):
    _skip_unless(device, tp.complex64)
    z = tp.tensor([3 + 4j, -1j], device=device)
    real = tp.zeros(2, device=device)
    assert tp.abs(z, out=real) is real
    np.testing.assert_allclose(to_numpy(real), [5.0, 1.0])
    into_complex = tp.zeros(2, dtype=tp.complex64, device=device)   # real cast to complex
    tp.abs(z, out=into_complex)
    np.testing.assert_allclose(to_numpy(into_complex), [5 + 0j, 1 + 0j])


@pytest.mark.parametrize("dtype", [tp.complex64, tp.complex128])
def test_inplace_abs_of_complex_raises(device, dtype):
    _skip_unless(device, dtype)
    z = tp.tensor([3 + 4j], dtype=dtype, device=device)
    tp.abs(z, out=tp.zeros(1, dtype=dtype, device=device))   # a plan of the same signature
    with pytest.raises(RuntimeError, match="In-place abs is not supported for complex tensors"):
        z.abs_()
    np.testing.assert_array_equal(to_numpy(z), [3 + 4j])   # untouched
    x = tp.tensor([-2.0, 3.0], device=device)
    assert x.abs_() is x and to_numpy(x).tolist() == [2.0, 3.0]


# -- sign and square of bool tensors ---------------------------------------------------------------
def test_sign_of_bool_is_itself(device):
    b = tp.tensor([True, False, True], device=device)
    result = tp.sign(b)
    assert result.dtype == tp.bool and to_numpy(result).tolist() == [True, False, True]
    assert b.sign().dtype == tp.bool
    assert b.sign_() is b and to_numpy(b).tolist() == [True, False, True]
    into = tp.zeros(3, dtype=tp.int64, device=device)
    tp.sign(b, out=into)
    assert to_numpy(into).tolist() == [1, 0, 1]


def test_square_of_bool_is_int64(device):
    b = tp.tensor([True, False], device=device)
    for result in (tp.square(b), b.square()):
        assert result.dtype == tp.int64
        assert to_numpy(result).tolist() == [1, 0]
    with pytest.raises(RuntimeError, match="int64 can't be cast to the desired output type bool"):
        b.square_()
    # every other dtype keeps its own (an int exponent does not promote)
    assert tp.square(tp.tensor([3], dtype=tp.int8, device=device)).dtype == tp.int8
    assert tp.square(tp.tensor([3.0], device=device)).dtype == tp.float32


# -- Python ints beyond int64 (as torch 2.11: tests/torch_differential/test_torch_probes.py) ------
BEYOND = [-(2 ** 63) - 1, 2 ** 64, 10 ** 30]


@pytest.mark.parametrize("value", BEYOND)
@pytest.mark.parametrize("dtype", [tp.int64, tp.int32, tp.float32, tp.bool])
def test_int_operand_beyond_the_convertible_range_raises(device, value, dtype):
    t = tp.tensor([1], dtype=dtype, device=device)
    t + 1   # the plan for (tensor, int) is cached: the value is still checked per call
    for call in (lambda: t + value, lambda: value + t, lambda: t * value, lambda: t == value,
                 lambda: t < value, lambda: t.ne(value)):
        with pytest.raises(OverflowError, match=f"int too big to convert.*{value}"):
            call()


@pytest.mark.parametrize("value", BEYOND)
def test_inplace_with_an_unconvertible_int_raises_and_writes_nothing(device, value):
    t = tp.tensor([1, 2], device=device)
    with pytest.raises(OverflowError, match=f"{value}"):
        t += value
    with pytest.raises(OverflowError, match=f"{value}"):
        t.sub_(value)
    assert to_numpy(t).tolist() == [1, 2]


def test_ints_up_to_2_to_the_64_convert_as_torch(device):
    t = tp.tensor([0], device=device)
    assert to_numpy(t + (2 ** 63 - 1)).tolist() == [2 ** 63 - 1]
    assert to_numpy(t + -(2 ** 63)).tolist() == [-(2 ** 63)]
    assert to_numpy(tp.tensor([1], device=device) + 2 ** 63).tolist() == [-(2 ** 63) + 1]
    assert to_numpy(tp.tensor([1.0], device=device) + 2 ** 63).tolist() == [2.0 ** 63]
    assert to_numpy(tp.tensor([1], dtype=tp.int8, device=device) + 1000).tolist() == [-23]
    assert to_numpy(tp.tensor([1.0], device=device) + float(2 ** 64)).tolist() == [2.0 ** 64]


def test_uint64_takes_ints_up_to_its_max(device):
    _skip_unless(device, tp.uint64)
    u = tp.tensor([1], dtype=tp.uint64, device=device)
    assert to_numpy(u + 2 ** 63).tolist() == [2 ** 63 + 1]
    assert to_numpy(u + (2 ** 64 - 2)).tolist() == [2 ** 64 - 1]
    with pytest.raises(OverflowError, match="int too big to convert.*18446744073709551616"):
        u + 2 ** 64


# -- comparison operators with operands they cannot take -------------------------------------------
@pytest.mark.parametrize("other", [None, "a", object(), [1.0, 1.0]],
                         ids=["None", "str", "object", "list"])
def test_eq_ne_with_unsupported_operand_fall_back_to_identity(device, other):
    t = tp.ones(2, device=device)
    assert (t == other) is False
    assert (t != other) is True
    assert (other == t) is False
    assert (other != t) is True


def test_tensor_found_in_lists_with_none(device):
    t = tp.ones(2, device=device)
    assert t in [None, t]
    assert [None, "x", t].index(t) == 2
    assert None not in [t]


def test_ordering_and_functions_with_none_raise_type_error(device):
    t = tp.ones(2, device=device)
    with pytest.raises(TypeError, match="not supported between instances of 'Tensor' and "
                                        "'NoneType'"):
        t < None
    for call in (lambda: tp.eq(t, None), lambda: tp.ne(t, None), lambda: t.eq(None)):
        with pytest.raises(TypeError, match="unsupported operand type NoneType"):
            call()
    assert to_numpy(t == 1).tolist() == [True, True]   # numbers and tensors still compare


# --- complex numbers stored into real tensors ----------------------------------------------------

def test_complex_values_into_real_tensors_follow_pytorch(device):
    """An imaginary part cannot be stored into a real dtype (RuntimeError, the tensor left as
    it was); a zero one converts; bool takes the truthiness."""
    x = tp.zeros(2, device=device)
    mask = tp.tensor([True, False], device=device)
    for call, write in [("fill_", lambda: x.fill_(1 + 1j)),
                        ("masked_fill", lambda: x.masked_fill(mask, 1j)),
                        ("__setitem__", lambda: x.__setitem__(0, 2j))]:
        with pytest.raises(RuntimeError, match=f"{call}: value .*j\\)? cannot be converted to "
                                               f"type float32 without overflow"):
            write()
    assert to_numpy(x).tolist() == [0.0, 0.0]
    assert to_numpy(x.fill_(2 + 0j)).tolist() == [2.0, 2.0]
    flags = tp.zeros(2, dtype=tp.bool, device=device)
    assert to_numpy(flags.fill_(1j)).tolist() == [True, True]
