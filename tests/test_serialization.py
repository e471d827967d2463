"""``tp.save`` / ``tp.load``: safetensors files of a tensor or a flat dict of tensors, on every
device, with ``map_location`` as in ``torch.load``."""

import io
import json
import pathlib

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import tensorplay as tp
from support import DEVICES, supports, to_numpy

SAVABLE = [tp.bool, tp.uint8, tp.int8, tp.int16, tp.int32, tp.int64, tp.uint16, tp.uint32,
           tp.uint64, tp.float16, tp.bfloat16, tp.float32, tp.float64, tp.complex64]


def sample(dtype, shape=(3, 4)) -> np.ndarray:
    count = int(np.prod(shape))
    if dtype is tp.bool:
        return (np.arange(count) % 3 == 0).reshape(shape)
    if dtype.is_complex:
        values = np.arange(count) - 2.5 + 1j * (np.arange(count) * 0.5)
    elif dtype.is_floating_point:
        values = np.arange(count) * 0.75 - 3.0
    elif dtype.is_signed:
        values = np.arange(count) - count // 2
    else:
        values = np.arange(count) + 200
    return values.astype(dtype.numpy).reshape(shape)


def assert_same(loaded, expected: np.ndarray, dtype, device):
    assert isinstance(loaded, tp.Tensor)
    assert loaded.dtype is dtype
    assert loaded.device == tp.device(device)
    assert loaded.shape == expected.shape
    assert loaded.is_contiguous()
    np.testing.assert_array_equal(to_numpy(loaded), expected)


@pytest.mark.parametrize("dtype", SAVABLE, ids=str)
def test_round_trip_every_dtype(device, dtype, tmp_path):
    if not supports(device, dtype):
        pytest.skip(f"{device} has no {dtype}")
    values = sample(dtype)
    t = tp.tensor(values, dtype=dtype, device=device)
    path = tmp_path / "t.safetensors"
    tp.save(t, path)
    assert_same(tp.load(path), values, dtype, device)
    loaded = tp.load(str(path), map_location="cpu")
    assert_same(loaded, values, dtype, "cpu")


def test_bfloat16_bits_survive(device, tmp_path):
    if not supports(device, tp.bfloat16):
        pytest.skip(f"{device} has no bfloat16")
    values = np.array([1.0, -0.0, np.inf, 3.140625, 1e-38], dtype=ml_dtypes.bfloat16)
    tp.save(tp.tensor(values, device=device), tmp_path / "b.safetensors")
    loaded = to_numpy(tp.load(tmp_path / "b.safetensors"))
    assert loaded.dtype == ml_dtypes.bfloat16
    assert loaded.view(np.uint16).tolist() == values.view(np.uint16).tolist()
    header = safetensors.deserialize((tmp_path / "b.safetensors").read_bytes())
    assert header[0][1]["dtype"] == "BF16"


def test_round_trip_dict(device, tmp_path):
    tensors = {"weight": tp.tensor(sample(tp.float32), device=device),
               "bias": tp.tensor([1.0, 2.0], device=device),
               "step": tp.tensor(7, device=device),
               "mask": tp.tensor([True, False], device=device),
               "empty": tp.zeros(0, 3, device=device)}
    tp.save(tensors, tmp_path / "d.safetensors")
    loaded = tp.load(tmp_path / "d.safetensors")
    assert isinstance(loaded, dict) and set(loaded) == set(tensors)
    for key, t in tensors.items():
        assert_same(loaded[key], to_numpy(t), t.dtype, device)
    assert loaded["step"].shape == () and loaded["empty"].shape == (0, 3)


def test_empty_dict(tmp_path):
    tp.save({}, tmp_path / "e.safetensors")
    assert tp.load(tmp_path / "e.safetensors") == {}


@pytest.mark.parametrize("make", [
    lambda t: t.t(),                     # transposed
    lambda t: t[:, ::2],                 # strided columns
    lambda t: t[1:, 1:3],                # offset slice
    lambda t: t.reshape(2, 2, 3).permute(2, 0, 1),
    lambda t: t[2],                      # a row view
    lambda t: t.unsqueeze(0).expand(2, 3, 4),  # a broadcast view (stride 0)
], ids=["t", "step", "offset", "permute", "row", "expand"])
def test_strided_and_non_contiguous(device, make, tmp_path):
    base = tp.tensor(sample(tp.float32), device=device)
    view = make(base)
    expected = to_numpy(view).copy()
    tp.save({"view": view, "base": base}, tmp_path / "v.safetensors")
    loaded = tp.load(tmp_path / "v.safetensors")
    assert_same(loaded["view"], expected, tp.float32, device)
    assert loaded["view"].stride() == tuple(
        int(np.prod(expected.shape[i + 1:])) for i in range(expected.ndim))
    # shared memory is not preserved: writing one loaded tensor leaves the other alone
    loaded["base"].fill_(0.0)
    np.testing.assert_array_equal(to_numpy(loaded["view"]), expected)


def test_loaded_cpu_tensor_is_writable_and_owned(tmp_path):
    tp.save(tp.arange(4), tmp_path / "w.safetensors")
    a = tp.load(tmp_path / "w.safetensors")
    b = tp.load(tmp_path / "w.safetensors")
    a[0] = 10
    assert a.tolist() == [10, 1, 2, 3] and b.tolist() == [0, 1, 2, 3]


def test_file_is_plain_safetensors(device, tmp_path):
    path = tmp_path / "plain.safetensors"
    tp.save({"a": tp.tensor(sample(tp.int32), device=device),
             "b": tp.tensor(sample(tp.float64), device=device)}, path)
    plain = safetensors.numpy.load_file(str(path))
    np.testing.assert_array_equal(plain["a"], sample(tp.int32))
    np.testing.assert_array_equal(plain["b"], sample(tp.float64))
    with safetensors.safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata()
    assert json.loads(metadata["tensorplay.devices"]) == {"a": str(tp.device(device)),
                                                          "b": str(tp.device(device))}


def test_single_tensor_key(tmp_path):
    tp.save(tp.tensor([1.0, 2.0]), tmp_path / "s.safetensors")
    plain = safetensors.numpy.load_file(str(tmp_path / "s.safetensors"))
    assert list(plain) == [tp.serialization.TENSOR_KEY]
    # a dict that happens to use the reserved key stays a dict
    tp.save({tp.serialization.TENSOR_KEY: tp.tensor([1.0])}, tmp_path / "k.safetensors")
    assert isinstance(tp.load(tmp_path / "k.safetensors"), dict)


def test_load_foreign_file(device, tmp_path):
    path = tmp_path / "foreign.safetensors"
    safetensors.numpy.save_file({"x": np.arange(6, dtype=np.int16).reshape(2, 3)}, str(path))
    loaded = tp.load(path)    # no tensorplay metadata: a dict, on the cpu
    assert_same(loaded["x"], np.arange(6, dtype=np.int16).reshape(2, 3), tp.int16, "cpu")
    moved = tp.load(path, map_location=device)
    assert_same(moved["x"], np.arange(6, dtype=np.int16).reshape(2, 3), tp.int16, device)


@pytest.mark.parametrize("target", DEVICES)
def test_map_location_string_and_device(device, target, tmp_path):
    values = sample(tp.float32)
    tp.save({"w": tp.tensor(values, device=device)}, tmp_path / "m.safetensors")
    assert_same(tp.load(tmp_path / "m.safetensors", map_location=target)["w"],
                values, tp.float32, target)
    assert_same(tp.load(tmp_path / "m.safetensors", map_location=tp.device(target))["w"],
                values, tp.float32, target)


def test_map_location_dict(device, tmp_path):
    values = sample(tp.float32)
    tensors = {"here": tp.tensor(values, device=device), "host": tp.tensor(values)}
    tp.save(tensors, tmp_path / "m.safetensors")
    saved_from = str(tp.device(device))
    loaded = tp.load(tmp_path / "m.safetensors", map_location={saved_from: "cpu"})
    assert_same(loaded["here"], values, tp.float32, "cpu")
    assert_same(loaded["host"], values, tp.float32, "cpu")
    # locations missing from the dict stay where they were saved
    loaded = tp.load(tmp_path / "m.safetensors", map_location={"nowhere:7": "cpu"})
    assert_same(loaded["here"], values, tp.float32, device)
    loaded = tp.load(tmp_path / "m.safetensors", map_location={"cpu": tp.device(device)})
    assert_same(loaded["host"], values, tp.float32, device)
    assert_same(loaded["here"], values, tp.float32, device)


def test_file_objects(device):
    buffer = io.BytesIO()
    tp.save({"a": tp.arange(3, device=device)}, buffer)
    buffer.seek(0)
    assert_same(tp.load(buffer)["a"], np.arange(3), tp.int64, device)


# -- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("obj,given", [
    ([tp.zeros(2)], "list"), ((tp.zeros(2),), "tuple"), (3.0, "float"), (None, "NoneType"),
    (np.zeros(2), "ndarray"), ({"a": {"b": tp.zeros(2)}}, "nested dict"),
    ({"a": np.zeros(2)}, "ndarray"), ({"a": 1}, "int"), ({1: tp.zeros(2)}, "key 1"),
    ({"a": [tp.zeros(2)]}, "list"),
])
def test_save_refuses_non_tensors(obj, given, tmp_path):
    path = tmp_path / "bad.safetensors"
    with pytest.raises(TypeError, match=given) as info:
        tp.save(obj, path)
    assert "flat dict of str -> Tensor" in str(info.value)
    assert not path.exists()


def test_save_refuses_complex128(device, tmp_path):
    if not supports(device, tp.complex128):
        pytest.skip(f"{device} has no complex128")
    with pytest.raises(TypeError, match="complex128.*complex64"):
        tp.save({"z": tp.zeros(2, dtype=tp.complex128, device=device)}, tmp_path / "z")
    assert not (tmp_path / "z").exists()


def test_save_bad_destination():
    with pytest.raises(TypeError, match="path"):
        tp.save(tp.zeros(2), 42)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        tp.load(tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError):
        tp.load(str(tmp_path / "missing.safetensors"), map_location="cpu")


def test_load_not_safetensors(tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(RuntimeError, match="not a safetensors file"):
        tp.load(path)
    pathlib.Path(tmp_path / "short.bin").write_bytes(b"abc")
    with pytest.raises(RuntimeError, match="not a safetensors file"):
        tp.load(tmp_path / "short.bin")


@pytest.mark.parametrize("bad", [3, lambda storage, location: storage, ["cpu"]])
def test_load_bad_map_location(bad, tmp_path):
    tp.save(tp.zeros(2), tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="map_location"):
        tp.load(tmp_path / "x.safetensors", map_location=bad)
    with pytest.raises(TypeError, match="map_location"):
        tp.load(tmp_path / "x.safetensors", map_location={"cpu": 3})


def test_load_to_missing_device(tmp_path):
    tp.save(tp.zeros(2), tmp_path / "x.safetensors")
    with pytest.raises(ValueError):
        tp.load(tmp_path / "x.safetensors", map_location="sim:99")


def test_load_from_device_this_build_lacks(tmp_path):
    """A file saved on a device this build does not have needs a map_location (as torch)."""
    path = tmp_path / "far.safetensors"
    payload = {tp.serialization.TENSOR_KEY: np.arange(3, dtype=np.float32)}
    safetensors.numpy.save_file(payload, str(path), metadata={
        "tensorplay.object": "tensor",
        "tensorplay.devices": json.dumps({tp.serialization.TENSOR_KEY: "sim:99"})})
    with pytest.raises(RuntimeError, match="sim:99.*map_location"):
        tp.load(path)
    assert_same(tp.load(path, map_location="cpu"), np.arange(3, dtype=np.float32),
                tp.float32, "cpu")
    assert_same(tp.load(path, map_location={"sim:99": "cpu"}),
                np.arange(3, dtype=np.float32), tp.float32, "cpu")


def test_load_unknown_dtype(tmp_path):
    path = tmp_path / "f8.safetensors"
    data = np.zeros(4, dtype=ml_dtypes.float8_e4m3fn)
    spec = safetensors.TensorSpec(dtype="float8_e4m3fn", shape=[4], data_ptr=data.ctypes.data,
                                  data_len=4)
    path.write_bytes(bytes(safetensors.serialize({"q": spec})))
    with pytest.raises(TypeError, match="F8_E4M3"):
        tp.load(path)


@pytest.mark.skipif(not tp.accelerator.is_available(),
                    reason="needs an accelerator (run with TENSORPLAY_ACCELERATOR=sim)")
def test_save_is_refused_during_capture(tmp_path):
    t = tp.ones(2, device=DEVICES[1])
    g = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="tensorplay.save"):
        with g:
            tp.save(t + 1, tmp_path / "c.safetensors")
    assert not (tmp_path / "c.safetensors").exists()
    tp.save(t, tmp_path / "c.safetensors")
    assert tp.load(tmp_path / "c.safetensors").tolist() == [1.0, 1.0]
