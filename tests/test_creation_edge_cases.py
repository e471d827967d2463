"""Creation edge cases against PyTorch: complex linspace, complex fill values for real dtypes,
tensors and NumPy scalars as arange/linspace bounds, and tensor(t) keeping t's device."""

import warnings

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_devices, to_numpy


# --- linspace with complex bounds -------------------------------------------------------------

@pytest.mark.parametrize("start,end,expected", [
    (0, 1j, [0, 0.5j, 1j]), (1j, 0, [1j, 0.5j, 0]), (1 + 1j, 3 + 1j, [1 + 1j, 2 + 1j, 3 + 1j]),
    (np.complex128(2j), 0.0, [2j, 1j, 0]),
])
def test_linspace_complex_bounds_infer_complex64(device, start, end, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # NumPy's ComplexWarning was the symptom
        t = tp.linspace(start, end, 3, device=device)
    assert t.dtype == tp.complex64 and t.device == tp.device(device)
    np.testing.assert_allclose(to_numpy(t), np.array(expected, np.complex64))


def test_linspace_complex_bounds_keep_a_complex_dtype(device):
    t = tp.linspace(0, 2j, 3, dtype=tp.complex128, device=device)
    assert t.dtype == tp.complex128 and to_numpy(t).tolist() == [0, 1j, 2j]


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int64])
def test_linspace_complex_bounds_refuse_a_real_dtype(device, dtype):
    with pytest.raises(RuntimeError, match=f"complex64 .*passed dtype {dtype.name}"):
        tp.linspace(0, 1j, 3, dtype=dtype, device=device)


def test_linspace_takes_one_element_tensor_bounds(device):
    t = tp.linspace(tp.tensor(0, device=device), tp.tensor(1.0, device=device), 3, device=device)
    assert t.dtype == tp.float32 and to_numpy(t).tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("steps", [2.5, 3.0, True, "3", None])
def test_linspace_refuses_a_non_int_steps_with_typeerror(device, steps):
    with pytest.raises(TypeError, match=f"steps must be an int, got {type(steps).__name__}"):
        tp.linspace(0, 1, steps, device=device)
    assert to_numpy(tp.linspace(0, 1, 3, device=device)).tolist() == [0.0, 0.5, 1.0]


def test_linspace_refuses_negative_steps_with_runtimeerror(device):
    with pytest.raises(RuntimeError, match="number of steps must be non-negative, got -1"):
        tp.linspace(0, 1, -1, device=device)
    assert tp.linspace(0, 1, 0, device=device).shape == (0,)


# --- complex values into real dtypes ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int64, tp.uint8])
def test_full_refuses_complex_value_for_real_dtype(device, dtype):
    with pytest.raises(RuntimeError, match=f"value 1j cannot be converted to type {dtype.name}"):
        tp.full((2,), 1j, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match="cannot be converted"):
        tp.full((2,), np.complex64(2 - 1j), dtype=dtype, device=device)


def test_full_like_and_new_full_refuse_complex_value_for_real_tensor(device):
    real = tp.zeros(2, device=device)
    with pytest.raises(RuntimeError, match="value 1j cannot be converted to type float32"):
        tp.full_like(real, 1j)
    with pytest.raises(RuntimeError, match="value 1j cannot be converted to type float32"):
        real.new_full((3,), 1j)


def test_full_keeps_pytorchs_accepted_conversions(device):
    # a zero imaginary part converts; bool takes any number; a float truncates into an int
    assert to_numpy(tp.full((2,), 1 + 0j, dtype=tp.float32, device=device)).tolist() == [1, 1]
    assert to_numpy(tp.full((2,), 1j, dtype=tp.bool, device=device)).tolist() == [True, True]
    assert to_numpy(tp.full((2,), -1.7, dtype=tp.int64, device=device)).tolist() == [-1, -1]
    t = tp.full((2,), 1j, device=device)
    assert t.dtype == tp.complex64 and to_numpy(t).tolist() == [1j, 1j]


# --- tensors and NumPy scalars as arange bounds -----------------------------------------------

@pytest.mark.parametrize("make,expected,dtype", [
    (lambda d: tp.arange(tp.tensor(1, device=d), tp.tensor(3, device=d), device=d), [1, 2],
     tp.int64),
    (lambda d: tp.arange(0, 3, tp.tensor(1, device=d), device=d), [0, 1, 2], tp.int64),
    (lambda d: tp.arange(tp.tensor(1), tp.tensor(4), tp.tensor(2), device=d), [1, 3], tp.int64),
    (lambda d: tp.arange(tp.tensor(1, dtype=tp.int32), 3, device=d), [1, 2], tp.int64),
    (lambda d: tp.arange(tp.tensor(0), tp.tensor(1.0), 0.5, device=d), [0.0, 0.5], tp.float32),
    # a float64 tensor is read as a number: the default dtype, as torch
    (lambda d: tp.arange(tp.tensor(2.0, dtype=tp.float64), device=d), [0.0, 1.0], tp.float32),
    (lambda d: tp.arange(np.int32(1), np.int64(3), np.int16(1), device=d), [1, 2], tp.int64),
    (lambda d: tp.arange(np.float64(0.5), 2, device=d), [0.5, 1.5], tp.float32),
    (lambda d: tp.arange(tp.tensor(2, device=d), dtype=tp.float64, device=d), [0.0, 1.0],
     tp.float64),
])
def test_arange_takes_one_element_tensors_and_numpy_scalars(device, make, expected, dtype):
    t = make(device)
    assert t.dtype == dtype and t.device == tp.device(device)
    assert to_numpy(t).tolist() == expected


def test_arange_refuses_multi_element_tensors_and_non_numbers(device):
    with pytest.raises(TypeError, match="argument 'end' must be a number .*shape \\(2,\\)"):
        tp.arange(tp.tensor([1, 2], device=device))
    with pytest.raises(TypeError, match="PyTorch takes 0-d tensors only"):   # as torch 2.11
        tp.arange(tp.tensor([5], device=device))
    with pytest.raises(TypeError, match="argument 'step' must be a number .*not str"):
        tp.arange(0, 3, "1", device=device)
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        tp.arange(0, 3, tp.tensor(0, device=device), device=device)


# --- tensor(t) copies on t's device -----------------------------------------------------------

def test_tensor_of_a_tensor_copies_on_its_device(device):
    source = tp.tensor([1.5, -2.5], device=device)
    copy = tp.tensor(source)
    assert copy.device == source.device and copy.dtype == tp.float32
    source.fill_(0.0)
    assert to_numpy(copy).tolist() == [1.5, -2.5]   # a copy, not a view
    converted = tp.tensor(copy, dtype=tp.int32)
    assert converted.device == source.device and converted.dtype == tp.int32
    assert to_numpy(converted).tolist() == [1, -2]
    on_host = tp.tensor(copy, device="cpu")
    assert on_host.device == tp.device("cpu") and on_host.tolist() == [1.5, -2.5]


@requires_devices(2)
def test_tensor_of_a_tensor_on_device_1():
    source = tp.ones(2, device=accelerator_device(1))
    assert tp.tensor(source).device == tp.device(accelerator_device(1))
    moved = tp.tensor(source, dtype=tp.float64, device=accelerator_device(0))
    assert moved.device == tp.device(accelerator_device(0)) and moved.dtype == tp.float64
    assert to_numpy(moved).tolist() == [1.0, 1.0]
