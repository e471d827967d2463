"""``tp.save`` / ``tp.load``: safetensors files of a tensor, a flat dict of tensors or a nested
checkpoint (dicts, lists, tuples, tensors and scalars, as an optimizer's ``state_dict()``), on
every device, with ``map_location`` as in ``torch.load``. Atomic saving and a save killed midway:
``test_serialization_atomic.py``."""

import collections
import io
import json
import math
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


# -- nested structures -------------------------------------------------------------------------
def optimizer_state(device) -> dict:
    """An ``optimizer.state_dict()`` as PyTorch's Adam makes it: int keys under "state", a tuple
    of betas, None and bool options, a list of parameter ids."""
    return {
        "state": {
            0: {"step": tp.tensor(3.0, device=device),
                "exp_avg": tp.tensor(sample(tp.float32), device=device),
                "exp_avg_sq": tp.tensor(sample(tp.float32) ** 2, device=device)},
            1: {"step": tp.tensor(3.0, device=device),
                "exp_avg": tp.tensor([0.5, -0.25], device=device),
                "exp_avg_sq": tp.tensor([0.25, 0.0625], device=device)},
        },
        "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": 0,
                          "amsgrad": False, "maximize": False, "foreach": None,
                          "capturable": False, "differentiable": False, "fused": None,
                          "params": [0, 1]}],
    }


def assert_same_structure(loaded, expected, device):
    """Equal nesting, container types, key types and order, scalars and tensor values."""
    assert type(loaded) is type(expected) or (
        isinstance(expected, dict) and type(loaded) is dict), (loaded, expected)
    if isinstance(expected, tp.Tensor):
        assert_same(loaded, to_numpy(expected), expected.dtype, device)
    elif isinstance(expected, dict):
        assert list(loaded) == list(expected)
        assert [type(k) for k in loaded] == [type(k) for k in expected]
        for key in expected:
            assert_same_structure(loaded[key], expected[key], device)
    elif isinstance(expected, (list, tuple)):
        assert len(loaded) == len(expected)
        for got, want in zip(loaded, expected):
            assert_same_structure(got, want, device)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(loaded)
    else:
        assert loaded == expected
        if isinstance(expected, float):
            assert math.copysign(1.0, loaded) == math.copysign(1.0, expected)   # -0.0


def test_round_trip_optimizer_state(device, tmp_path):
    state = optimizer_state(device)
    path = tmp_path / "optim.safetensors"
    tp.save(state, path)
    loaded = tp.load(path)
    assert_same_structure(loaded, state, device)
    assert list(loaded["state"]) == [0, 1]                        # int keys stay ints
    assert loaded["param_groups"][0]["betas"] == (0.9, 0.999)     # tuples stay tuples
    assert loaded["param_groups"][0]["params"] == [0, 1]          # lists stay lists
    assert loaded["param_groups"][0]["foreach"] is None
    assert loaded["param_groups"][0]["amsgrad"] is False
    assert type(loaded["param_groups"][0]["weight_decay"]) is int
    # everything on the host, by map_location
    on_host = tp.load(path, map_location="cpu")
    assert_same_structure(on_host, {"state": {k: {n: t.to("cpu") for n, t in v.items()}
                                              for k, v in state["state"].items()},
                                    "param_groups": state["param_groups"]}, "cpu")


def test_round_trip_checkpoint_of_model_and_optimizer(device, tmp_path):
    """A training checkpoint bundles a model's flat state dict, the optimizer's and counters."""
    model = collections.OrderedDict(
        [("fc.weight", tp.tensor(sample(tp.float32), device=device)),
         ("fc.bias", tp.tensor([0.0, 1.0, 2.0], device=device))])
    checkpoint = {"epoch": 7, "model": model, "optimizer": optimizer_state(device),
                  "best_loss": 0.125, "note": "resume me", "rng": [tp.tensor([1, 2, 3])]}
    tp.save(checkpoint, tmp_path / "ckpt.safetensors")
    loaded = tp.load(tmp_path / "ckpt.safetensors")
    assert list(loaded) == list(checkpoint)
    assert type(loaded["model"]) is dict       # an OrderedDict comes back as a plain dict
    assert_same_structure(loaded["model"], dict(model), device)
    assert_same_structure(loaded["optimizer"], checkpoint["optimizer"], device)
    assert (loaded["epoch"], loaded["best_loss"], loaded["note"]) == (7, 0.125, "resume me")
    assert_same(loaded["rng"][0], np.array([1, 2, 3]), tp.int64, "cpu")   # saved from the cpu


@pytest.mark.parametrize("obj", [
    None, True, False, 0, -5, 2**80, -2**70, 1.5, -0.0, 1e-310, float("inf"), float("-inf"),
    float("nan"), "", "text", "ünïcødé ✓ \ud800", [], (), {},
    [1, [2, [3, (4, (5,))]]], ((), [], {}), {"a": None, "b": [None, True, 2, 3.0, "4"]},
    {0: "int", -1: "negative", 2.5: "float", True: "bool", None: "none", "0": "str zero"},
    {"nan": float("nan"), "inf": [float("inf"), -float("inf")], "tiny": 5e-324},
    {"nested": {"deeper": {"deepest": (1, 2.0, "3", None, False)}}},
], ids=repr)
def test_round_trip_scalars_and_containers(obj, tmp_path):
    tp.save(obj, tmp_path / "s.safetensors")
    assert_same_structure(tp.load(tmp_path / "s.safetensors"), obj, "cpu")


def test_round_trip_nested_every_dtype(device, tmp_path):
    tensors = [tp.tensor(sample(dtype, (2, 3)), dtype=dtype, device=device)
               for dtype in SAVABLE if supports(device, dtype)]
    obj = {"list": tensors, "tuple": tuple(tensors), "scalar": tp.tensor(1.5, device=device)}
    tp.save(obj, tmp_path / "n.safetensors")
    assert_same_structure(tp.load(tmp_path / "n.safetensors"), obj, device)


def test_nested_file_is_plain_safetensors(device, tmp_path):
    """The tensors are readable by other tools under names made from their place; the structure
    is one JSON document in the metadata, readable by any JSON parser (no NaN literals)."""
    path = tmp_path / "optim.safetensors"
    state = optimizer_state(device)
    state["param_groups"][0]["lr"] = float("nan")
    tp.save(state, path)
    plain = safetensors.numpy.load_file(str(path))
    assert sorted(plain) == ["state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step",
                             "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.step"]
    np.testing.assert_array_equal(plain["state.0.exp_avg"], sample(tp.float32))
    with safetensors.safe_open(str(path), framework="np") as handle:
        metadata = handle.metadata()
    assert metadata["tensorplay.object"] == "structure"
    assert json.loads(metadata["tensorplay.devices"])["state.1.step"] == str(tp.device(device))

    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")
    document = json.loads(metadata[tp.serialization.STRUCTURE_KEY], parse_constant=refuse)
    assert document["format"] == 1


def test_generated_names_never_collide(tmp_path):
    """Keys with dots can spell the same name as a nested place; safetensors' own
    ``__metadata__`` name is never used for a tensor."""
    obj = {"a.b": tp.tensor([1.0]), "a": {"b": tp.tensor([2.0])}, "n": 0,
           "__metadata__": tp.tensor([3.0]), 1: tp.tensor([4.0]), "1": tp.tensor([5.0])}
    tp.save(obj, tmp_path / "c.safetensors")
    assert_same_structure(tp.load(tmp_path / "c.safetensors"), obj, "cpu")
    assert len(safetensors.numpy.load_file(str(tmp_path / "c.safetensors"))) == 5


def test_flat_dict_with_reserved_name_round_trips(tmp_path):
    """A flat dict cannot use safetensors' own ``__metadata__`` key as a tensor name (the file
    would not load): such a dict is stored with generated names instead."""
    obj = {"__metadata__": tp.tensor([1.0]), "w": tp.tensor([2.0])}
    tp.save(obj, tmp_path / "r.safetensors")
    assert_same_structure(tp.load(tmp_path / "r.safetensors"), obj, "cpu")


def test_shared_and_repeated_tensors_in_a_structure(device, tmp_path):
    """As with flat dicts (and safetensors): values are saved, sharing is not; a tensor that
    appears twice comes back as two independent tensors."""
    base = tp.tensor(sample(tp.float32), device=device)
    obj = {"base": base, "again": [base, (base.t(), base[1:, ::2])], "row": base[2]}
    expected = {"base": to_numpy(base).copy(),
                "again": [to_numpy(base).copy(), (to_numpy(base).T.copy(),
                                                  to_numpy(base)[1:, ::2].copy())],
                "row": to_numpy(base)[2].copy()}
    tp.save(obj, tmp_path / "v.safetensors")
    loaded = tp.load(tmp_path / "v.safetensors")
    assert_same(loaded["base"], expected["base"], tp.float32, device)
    assert_same(loaded["again"][0], expected["again"][0], tp.float32, device)
    assert_same(loaded["again"][1][0], expected["again"][1][0], tp.float32, device)
    assert_same(loaded["again"][1][1], expected["again"][1][1], tp.float32, device)
    assert_same(loaded["row"], expected["row"], tp.float32, device)
    assert loaded["again"][0] is not loaded["base"]
    loaded["base"].fill_(0.0)
    np.testing.assert_array_equal(to_numpy(loaded["again"][0]), expected["again"][0])
    np.testing.assert_array_equal(to_numpy(loaded["row"]), expected["row"])


def test_nested_file_objects(device):
    buffer = io.BytesIO()
    tp.save(optimizer_state(device), buffer)
    buffer.seek(0)
    assert_same_structure(tp.load(buffer), optimizer_state(device), device)


# -- the layout of flat dicts and single tensors, and older files ---------------------------------
def split_file(data: bytes) -> tuple[dict, bytes]:
    """A safetensors file's header, parsed (safetensors writes the metadata entries in no fixed
    order), and its data bytes."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]), data[8 + length:]


def test_flat_dict_layout_is_unchanged(device, tmp_path):
    """A flat dict of str -> Tensor is written as before nested structures were supported: the
    same header (its own names, the same metadata, no structure document) and data bytes."""
    tensors = {"fc.weight": tp.tensor(sample(tp.float32), device=device),
               "fc.bias": tp.tensor([1.0, 2.0], device=device)}
    path = tmp_path / "flat.safetensors"
    for obj in (tensors, collections.OrderedDict(tensors)):
        tp.save(obj, path)
        where = str(tp.device(device))
        expected = safetensors.numpy.save(
            {k: to_numpy(t) for k, t in tensors.items()},
            metadata={"tensorplay.object": "dict",
                      "tensorplay.devices": json.dumps({k: where for k in tensors})})
        assert split_file(path.read_bytes()) == split_file(expected)
        plain = safetensors.numpy.load_file(str(path))
        assert sorted(plain) == ["fc.bias", "fc.weight"]
        loaded = tp.load(path)
        assert type(loaded) is dict and sorted(loaded) == ["fc.bias", "fc.weight"]


@pytest.mark.parametrize("kind", ["tensor", "dict"])
def test_files_of_earlier_versions_load(device, kind, tmp_path):
    """Files written before nested structures were supported: the same metadata keys, no
    structure document."""
    path = tmp_path / "old.safetensors"
    values = sample(tp.float32)
    key = tp.serialization.TENSOR_KEY if kind == "tensor" else "w"
    saved_from = str(tp.device(device))
    safetensors.numpy.save_file({key: values}, str(path), metadata={
        "tensorplay.object": kind, "tensorplay.devices": json.dumps({key: saved_from})})
    loaded = tp.load(path)
    if kind == "tensor":
        assert_same(loaded, values, tp.float32, device)
    else:
        assert list(loaded) == ["w"]
        assert_same(loaded["w"], values, tp.float32, device)
        assert_same(tp.load(path, map_location="cpu")["w"], values, tp.float32, "cpu")


# -- errors --------------------------------------------------------------------------------------
class Opaque:
    pass


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize("obj,where,given", [
    ({"param_groups": [{"lr": 0.1, "foo": {1, 2}}]}, "obj['param_groups'][0]['foo']", "set"),
    ({"state": {0: {"step": Opaque()}}}, "obj['state'][0]['step']", "Opaque"),
    ({"a": (1, frozenset())}, "obj['a'][1]", "frozenset"),
    (np.zeros(2), "obj", "numpy.ndarray"),
    ({"a": np.zeros(2)}, "obj['a']", "numpy.ndarray"),
    ({"lr": np.float64(0.1)}, "obj['lr']", "numpy.float64"),
    ([np.int64(3)], "obj[0]", "numpy.int64"),
    ({"p": Point(1, 2)}, "obj['p']", "Point"),
    ({"b": b"bytes"}, "obj['b']", "bytes"),
    ({"c": 1 + 2j}, "obj['c']", "complex"),
    ({"f": len}, "obj['f']", "builtin_function_or_method"),
    ({"t": tp.float32}, "obj['t']", "dtype"),
])
def test_save_refuses_unsupported_objects(obj, where, given, tmp_path):
    path = tmp_path / "bad.safetensors"
    tp.save({"old": tp.tensor([1.0])}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError) as info:
        tp.save(obj, path)
    message = str(info.value)
    assert f"{where} is of type " in message and given in message
    assert "nothing is pickled" in message
    assert path.read_bytes() == before                       # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.safetensors"]   # no temp file
    with pytest.raises(TypeError, match=given):
        tp.save(obj, io.BytesIO())


@pytest.mark.parametrize("key", [(1, 2), frozenset(), b"k", tp.float32])
def test_save_refuses_unsupported_keys(key, tmp_path):
    with pytest.raises(TypeError, match=r"obj\['state'\] has a key .* dict keys must be"):
        tp.save({"state": {key: tp.zeros(1)}}, tmp_path / "k.safetensors")
    assert not (tmp_path / "k.safetensors").exists()


def test_save_refuses_cycles(tmp_path):
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(ValueError, match=r"obj\[1\]\['again'\] contains itself"):
        tp.save(loop, tmp_path / "cycle.safetensors")
    assert not (tmp_path / "cycle.safetensors").exists()
    shared = [1]
    tp.save([shared, shared], tmp_path / "shared.safetensors")   # not a cycle: saved twice
    assert tp.load(tmp_path / "shared.safetensors") == [[1], [1]]


def test_save_refuses_complex128_in_a_structure(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['s'\]\[0\].*complex128"):
        tp.save({"s": [tp.zeros(2, dtype=tp.complex128)]}, tmp_path / "z")
    assert not (tmp_path / "z").exists()


@pytest.mark.parametrize("document", [
    "not json", json.dumps({"root": 1}), json.dumps({"format": 1, "root": {"set": [1]}}),
    json.dumps({"format": 1, "root": {"tensor": "missing"}}),
    json.dumps({"format": 1, "root": {"dict": [[[1], 2]]}}),
    json.dumps({"format": 1, "root": {"dict": [[1]]}}),
    json.dumps({"format": 1, "root": {"float": "1.0"}}), None,
])
def test_load_damaged_structure(document, tmp_path):
    path = tmp_path / "damaged.safetensors"
    metadata = {"tensorplay.object": "structure", "tensorplay.devices": "{}"}
    if document is not None:
        metadata[tp.serialization.STRUCTURE_KEY] = document
    safetensors.numpy.save_file({"x": np.zeros(2)}, str(path), metadata=metadata)
    with pytest.raises(RuntimeError, match="structure .* is damaged"):
        tp.load(path)


def test_load_structure_of_a_newer_format(tmp_path):
    path = tmp_path / "newer.safetensors"
    safetensors.numpy.save_file({"x": np.zeros(2)}, str(path), metadata={
        "tensorplay.object": "structure",
        tp.serialization.STRUCTURE_KEY: json.dumps({"format": 2, "root": None})})
    with pytest.raises(RuntimeError, match="format 2.*reads format 1"):
        tp.load(path)


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
