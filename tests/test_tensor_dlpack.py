"""DLPack both ways: NumPy always (memory is shared), PyTorch/CuPy/JAX when importable."""

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICES, requires_accelerator, accelerator_device

DTYPES = [tp.float32, tp.float64, tp.float16, tp.int8, tp.int64, tp.uint8, tp.uint16, tp.bool,
          tp.complex64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_numpy_imports_a_tensor_sharing_memory(dtype):
    t = tp.zeros(2, 3, dtype=dtype)
    array = np.from_dlpack(t)
    assert array.dtype == dtype.numpy and array.shape == (2, 3)
    t[0, 1] = 1
    assert array[0, 1] == 1  # the same memory, seen from NumPy
    array[1, 2] = 1
    assert t[1, 2].item() == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensorplay_imports_a_numpy_array_sharing_memory(dtype):
    array = np.zeros((3, 2), dtype=dtype.numpy)
    t = tp.from_dlpack(array)
    assert t.dtype == dtype and t.shape == (3, 2) and t.device == tp.device("cpu")
    array[2, 1] = 1
    assert t[2, 1].item() == 1
    t[0, 0] = 1
    assert array[0, 0] == 1


def test_strided_and_zero_dim_round_trips():
    t = tp.arange(12, dtype=tp.float32).reshape(3, 4).T[1:]
    array = np.from_dlpack(t)
    np.testing.assert_array_equal(array, np.arange(12, dtype=np.float32).reshape(3, 4).T[1:])
    assert array.strides == tuple(s * 4 for s in t.stride())
    back = tp.from_dlpack(array)
    assert back.stride() == t.stride() and back.data_ptr() == t.data_ptr()
    scalar = tp.tensor(2.5)
    assert np.from_dlpack(scalar).shape == ()
    assert tp.from_dlpack(np.array(1.5)).item() == 1.5
    with pytest.raises(TypeError, match="DLPack protocol"):
        tp.from_dlpack([1, 2])


def test_from_dlpack_of_a_tensor_is_itself():
    t = tp.ones(3)
    assert tp.from_dlpack(t) is t
    assert t.__dlpack_device__() == (1, 0)


@requires_accelerator
def test_accelerator_tensors_do_not_export_to_numpy():
    t = tp.ones(3, device=accelerator_device())
    with pytest.raises((TypeError, BufferError, RuntimeError)):
        np.from_dlpack(t)  # NumPy holds host memory only
    np.testing.assert_array_equal(np.from_dlpack(t.cpu()), np.ones(3, np.float32))


def test_torch_round_trip():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    t = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    shared = torch.from_dlpack(t)
    shared[0, 0] = 100.0
    assert t[0, 0].item() == 100.0
    source = torch.arange(4, dtype=torch.int32)
    imported = tp.from_dlpack(source)
    source[1] = 7
    assert imported.dtype == tp.int32 and imported.tolist() == [0, 7, 2, 3]


def test_jax_round_trip():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    jnp = jax.numpy
    # Host arrays only: a JAX GPU array freed later (inside some other test's capture) would
    # make XLA synchronize the device and invalidate that capture.
    with jax.default_device(jax.devices("cpu")[0]):
        t = tp.arange(4, dtype=tp.float32)
        imported = jnp.from_dlpack(t)
        np.testing.assert_array_equal(np.asarray(imported), np.arange(4, dtype=np.float32))
        back = tp.from_dlpack(jnp.arange(3, dtype=jnp.float32))
        assert back.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("device", DEVICES)
def test_cupy_round_trip(device):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    t = tp.arange(4, dtype=tp.float32, device=device)
    try:
        device_type = t.__dlpack_device__()[0]
    except TypeError:
        device_type = None  # memory no other library can see
    if device_type != 2:  # kDLCUDA
        pytest.skip(f"{device} memory is not CUDA memory, which CuPy imports")
    shared = cupy.from_dlpack(t)
    shared[0] = 9.0
    assert t[0].item() == 9.0
    source = cupy.arange(3, dtype=cupy.float32)
    imported = tp.from_dlpack(source)
    assert imported.device.type == "cuda" and imported.tolist() == [0.0, 1.0, 2.0]
