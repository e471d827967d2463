"""Devices of the built accelerator: selection, capability, synchronization, multi-device tensors.

Conformance tests: public API only, no backend names; they skip on a build without an accelerator
(``tests/accelerator/test_host_only.py`` covers that build).
"""

import threading

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICE_COUNT, accelerator_device, requires_accelerator, requires_devices, \
    to_numpy

pytestmark = requires_accelerator

ALL_DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32",
                   "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
                   "complex128")


@pytest.fixture(autouse=True)
def _device_zero_current():
    """Every test starts and ends with device 0 current in this thread."""
    tp.accelerator.set_device_index(0)
    yield
    tp.accelerator.set_device_index(0)


FORMS = ("int", "spelling", "device", "none")


def device_form(kind, index=0):
    """Accelerator device ``index`` spelled as ``kind``: an int, "<type>:<i>", a device object,
    or None (the current device, which these tests keep at 0)."""
    name = accelerator_device(index)
    return {"int": index, "spelling": name, "device": tp.device(name), "none": None}[kind]


# -- the accelerator ------------------------------------------------------------------------------

def test_current_accelerator_is_a_device_type():
    accelerator = tp.accelerator.current_accelerator()
    assert isinstance(accelerator, tp.device)
    assert accelerator.type != "cpu"
    assert accelerator_device(0) == f"{accelerator.type}:0"
    assert tp.accelerator.current_accelerator(check_available=True) == accelerator
    assert tp.accelerator.current_accelerator(False) == accelerator


def test_is_available_and_device_count():
    assert tp.accelerator.is_available() is True
    count = tp.accelerator.device_count()
    assert isinstance(count, int) and count >= 1
    assert count == DEVICE_COUNT


def test_current_device_index_starts_at_zero_in_a_new_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(tp.accelerator.current_device_index()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert isinstance(tp.accelerator.current_device_index(), int)


def test_set_device_index_negative_is_a_no_op():
    for negative in (-1, -2, -1000):
        tp.accelerator.set_device_index(negative)
        assert tp.accelerator.current_device_index() == 0


@pytest.mark.parametrize("form", ["int", "spelling", "device"])
def test_set_device_index_accepts_every_form(form):
    last = DEVICE_COUNT - 1
    name = accelerator_device(last)
    value = {"int": last, "spelling": name, "device": tp.device(name)}[form]
    tp.accelerator.set_device_index(value)
    assert tp.accelerator.current_device_index() == last
    tp.accelerator.set_device_index(-1)
    assert tp.accelerator.current_device_index() == last


def test_set_device_index_rejects_bad_devices():
    out_of_range = accelerator_device(DEVICE_COUNT)
    with pytest.raises(ValueError, match=out_of_range):
        tp.accelerator.set_device_index(DEVICE_COUNT)
    with pytest.raises(ValueError, match=out_of_range):
        tp.accelerator.set_device_index(out_of_range)
    with pytest.raises(ValueError, match="cpu"):
        tp.accelerator.set_device_index("cpu")
    with pytest.raises(ValueError, match="bogus"):
        tp.accelerator.set_device_index("bogus:0")
    assert tp.accelerator.current_device_index() == 0
    assert to_numpy(tp.ones(2, device=accelerator_device(0)) + 1).tolist() == [2.0, 2.0]


def test_device_index_context_manager_restores():
    with tp.accelerator.device_index(DEVICE_COUNT - 1):
        assert tp.accelerator.current_device_index() == DEVICE_COUNT - 1
        with tp.accelerator.device_index(0):
            assert tp.accelerator.current_device_index() == 0
        assert tp.accelerator.current_device_index() == DEVICE_COUNT - 1
    assert tp.accelerator.current_device_index() == 0


@pytest.mark.parametrize("kind", ["int", "spelling", "device"])
def test_device_index_accepts_every_form(kind):
    last = DEVICE_COUNT - 1
    with tp.accelerator.device_index(device_form(kind, last)):
        assert tp.accelerator.current_device_index() == last
    assert tp.accelerator.current_device_index() == 0


def test_device_index_none_and_negative_leave_the_device_alone():
    with tp.accelerator.device_index(None):
        assert tp.accelerator.current_device_index() == 0
    with tp.accelerator.device_index(-1):
        assert tp.accelerator.current_device_index() == 0


def test_device_index_restores_after_an_exception():
    with pytest.raises(KeyError):
        with tp.accelerator.device_index(DEVICE_COUNT - 1):
            raise KeyError("boom")
    assert tp.accelerator.current_device_index() == 0


def test_current_device_is_per_thread():
    tp.accelerator.set_device_index(DEVICE_COUNT - 1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(tp.accelerator.current_device_index()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert tp.accelerator.current_device_index() == DEVICE_COUNT - 1


# -- capability -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", FORMS)
def test_get_device_capability_every_form(kind):
    form = device_form(kind)
    capability = tp.accelerator.get_device_capability(form)
    assert isinstance(capability, dict)
    supported = capability["supported_dtypes"]
    assert isinstance(supported, (set, frozenset))
    assert supported and all(isinstance(d, tp.dtype) for d in supported)
    assert capability == tp.accelerator.get_device_capability()


def test_every_supported_dtype_allocates_and_the_rest_are_refused():
    dev = accelerator_device(0)
    supported = tp.accelerator.get_device_capability(dev)["supported_dtypes"]
    for name in ALL_DTYPE_NAMES:
        dtype = getattr(tp, name)
        if dtype in supported:
            zeros = tp.zeros(3, dtype=dtype, device=dev)
            ones = tp.ones((2, 2), dtype=dtype, device=dev)
            assert zeros.dtype == dtype and zeros.device == tp.device(dev)
            assert to_numpy(zeros).shape == (3,) and np.all(to_numpy(zeros) == 0)
            assert np.all(to_numpy(ones) == 1)
        else:
            with pytest.raises(TypeError, match=name):
                tp.zeros(3, dtype=dtype, device=dev)
    assert supported <= {getattr(tp, n) for n in ALL_DTYPE_NAMES}


def test_get_device_capability_rejects_bad_devices():
    with pytest.raises(ValueError):
        tp.accelerator.get_device_capability(DEVICE_COUNT)
    with pytest.raises(ValueError):
        tp.accelerator.get_device_capability("cpu")
    assert "supported_dtypes" in tp.accelerator.get_device_capability(0)


# -- synchronize ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", FORMS + ("type-only",))
def test_synchronize_every_form(kind):
    if kind == "type-only":
        form = tp.accelerator.current_accelerator().type
    else:
        form = device_form(kind)
    dev = accelerator_device(0)
    x = tp.arange(1000, dtype=tp.float32, device=dev)
    y = (x * 2).sum()
    tp.accelerator.synchronize(form)
    event = tp.accelerator.current_stream().record_event()
    assert event.query() is True
    assert y.item() == pytest.approx(999 * 1000)


def test_synchronize_rejects_bad_devices():
    with pytest.raises(ValueError, match=accelerator_device(DEVICE_COUNT)):
        tp.accelerator.synchronize(DEVICE_COUNT)
    with pytest.raises(ValueError):
        tp.accelerator.synchronize("cpu")
    tp.accelerator.synchronize()


# -- tensors on devices ---------------------------------------------------------------------------

def test_tensor_device_attributes():
    dev = accelerator_device(0)
    x = tp.zeros(2, 3, device=dev)
    assert x.device == tp.device(dev)
    assert str(x.device) == dev
    assert x.device.type == tp.accelerator.current_accelerator().type
    assert x.device.index == 0
    assert tp.zeros(2).device == tp.device("cpu")


def test_int_and_type_only_spellings_mean_the_accelerator():
    x = tp.ones(2, device=0)
    assert x.device == tp.device(accelerator_device(0))
    y = tp.ones(2, device=tp.accelerator.current_accelerator().type)
    assert y.device == tp.device(accelerator_device(0))


def test_out_of_range_device_for_tensors_is_a_value_error():
    with pytest.raises(ValueError, match=accelerator_device(DEVICE_COUNT)):
        tp.zeros(2, device=accelerator_device(DEVICE_COUNT))
    assert to_numpy(tp.ones(1, device=accelerator_device(0))).tolist() == [1.0]


def test_mixing_cpu_and_accelerator_in_one_op_is_an_error():
    with pytest.raises(RuntimeError, match="device"):
        tp.ones(3, device=accelerator_device(0)) + tp.ones(3)


def test_host_round_trip_and_to():
    dev = accelerator_device(0)
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tp.tensor(host, device=dev)
    assert np.array_equal(to_numpy(x), host)
    assert x.to("cpu").device == tp.device("cpu")
    assert x.to(dev) is x
    assert np.array_equal(to_numpy(tp.from_numpy(host).to(dev)), host)
    as_int = x.to(tp.int64)
    assert as_int.dtype == tp.int64 and as_int.device == x.device
    assert np.array_equal(to_numpy(as_int), host.astype(np.int64))


# -- several devices ------------------------------------------------------------------------------

@requires_devices(2)
def test_tensors_on_device_one():
    dev1 = accelerator_device(1)
    x = tp.arange(6, dtype=tp.float32, device=dev1).reshape(2, 3)
    y = x * 2 + 1
    assert y.device == tp.device(dev1) and y.device.index == 1
    assert to_numpy(y).tolist() == [[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]]
    assert tp.accelerator.current_device_index() == 0


@requires_devices(2)
def test_copies_between_devices():
    dev0, dev1 = accelerator_device(0), accelerator_device(1)
    host = np.arange(10, dtype=np.float32)
    a = tp.tensor(host, device=dev0)
    b = a.to(dev1)
    assert b.device == tp.device(dev1)
    assert np.array_equal(to_numpy(b), host)
    b.mul_(3)
    c = tp.zeros(10, device=dev0)
    c.copy_(b)
    assert np.array_equal(to_numpy(c), host * 3)
    assert np.array_equal(to_numpy(a), host)
    strided = tp.arange(20, dtype=tp.float32, device=dev0)[::2]
    assert np.array_equal(to_numpy(strided.to(dev1)), np.arange(0, 20, 2, dtype=np.float32))
    cast = a.to(dev1, tp.float64)
    assert cast.dtype == tp.float64 and np.array_equal(to_numpy(cast), host)


@requires_devices(2)
def test_device_one_work_then_copy_back_is_ordered():
    dev0, dev1 = accelerator_device(0), accelerator_device(1)
    x = tp.ones(1000, device=dev1)
    for _ in range(5):
        x.add_(1)
    back = x.to(dev0)
    assert float(to_numpy(back.sum())) == 6000.0


@requires_devices(2)
def test_mixing_two_accelerator_devices_in_one_op_is_an_error():
    a = tp.ones(2, device=accelerator_device(0))
    b = tp.ones(2, device=accelerator_device(1))
    with pytest.raises(RuntimeError, match="device"):
        a + b
    assert to_numpy(a + a).tolist() == [2.0, 2.0]


@requires_devices(2)
def test_set_device_index_changes_where_the_default_device_is():
    tp.accelerator.set_device_index(1)
    assert tp.accelerator.current_device_index() == 1
    assert tp.ones(1, device=tp.accelerator.current_accelerator().type).device.index == 1
    with tp.accelerator.device_index(0):
        assert tp.ones(1, device=tp.accelerator.current_accelerator().type).device.index == 0
    assert tp.accelerator.current_device_index() == 1


@requires_devices(2)
@pytest.mark.parametrize("kind", ["int", "spelling", "device", "current"])
def test_synchronize_device_one(kind):
    if kind == "current":
        tp.accelerator.set_device_index(1)
        form = None
    else:
        form = device_form(kind, 1)
    x = tp.ones(100, device=accelerator_device(1))
    x.mul_(5)
    tp.accelerator.synchronize(form)
    assert float(to_numpy(x.sum())) == 500.0


@requires_devices(2)
def test_capability_per_device():
    for index in range(DEVICE_COUNT):
        capability = tp.accelerator.get_device_capability(index)
        assert capability == tp.accelerator.get_device_capability(accelerator_device(index))
        assert capability["supported_dtypes"]
