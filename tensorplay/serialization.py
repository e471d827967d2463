"""``tensorplay.save`` / ``tensorplay.load``: tensors in files, in the safetensors format.

A file holds a tensor or a flat ``dict`` of ``str -> Tensor`` and nothing else: no pickle, so
loading a file never runs code. The files are plain safetensors (``safetensors.numpy.load_file``
and ``safetensors.torch.load_file`` read them), written with the ``safetensors`` package.

What is stored:

- each tensor's values, copied to the host in C order (strided and non-contiguous views are
  saved as their values; tensors that share memory are saved as independent copies, and come
  back unshared);
- a single tensor under the reserved key ``"__tensor__"`` (:data:`TENSOR_KEY`), marked in the
  file's metadata so that :func:`load` returns a Tensor again;
- in the metadata, the device each tensor was saved from (``"tensorplay.devices"``, JSON), which
  :func:`load` uses when ``map_location`` is None.

Pitfalls: safetensors has no complex128 (saving one raises TypeError; cast it to complex64 or
save real and imaginary parts); nested dicts, lists and non-tensor values are refused rather than
pickled (PyTorch's ``torch.save`` would pickle them). A file written by another library loads as
a dict, on the cpu unless ``map_location`` says otherwise.
"""

from __future__ import annotations

import json
import os
from typing import Any, Union

import ml_dtypes
import numpy as np
import safetensors
from safetensors import numpy as _st_numpy

from . import _dtype
from ._runtime import device as _device
from ._tensor import creation as _creation
from ._tensor.tensor import Tensor

__all__ = ["TENSOR_KEY", "load", "save"]

#: the key a single saved tensor is stored under
TENSOR_KEY = "__tensor__"
_KIND_KEY = "tensorplay.object"
_DEVICES_KEY = "tensorplay.devices"

#: safetensors header dtype -> NumPy dtype, for the dtypes tensorplay has
_FROM_SAFETENSORS = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64),
    "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32), "F64": np.dtype(np.float64), "C64": np.dtype(np.complex64),
}
#: the tensorplay dtypes a safetensors file can hold
_SAVABLE = frozenset(_dtype.from_numpy_dtype(d) for d in _FROM_SAFETENSORS.values())

PathLike = Union[str, "os.PathLike[str]"]
MapLocation = Union[None, str, _device.device, "dict[str, Any]"]


def _savable_names() -> str:
    return ", ".join(d.name for d in _dtype.all_dtypes if d in _SAVABLE)


def _check_obj(obj) -> dict[str, Tensor]:
    """The tensors to store, by key (TypeError for anything but a tensor or a flat dict)."""
    valid = ("valid: a Tensor or a flat dict of str -> Tensor (the safetensors format; nothing "
             "is pickled)")
    if isinstance(obj, Tensor):
        return {TENSOR_KEY: obj}
    if not isinstance(obj, dict):
        raise TypeError(f"save() got {type(obj).__name__}; {valid}")
    for key, value in obj.items():
        if not isinstance(key, str):
            raise TypeError(f"save() got a dict with key {key!r} of type {type(key).__name__}; "
                            f"keys must be str; {valid}")
        if not isinstance(value, Tensor):
            what = "a nested dict (flatten it yourself)" if isinstance(value, dict) else \
                type(value).__name__
            raise TypeError(f"save() got a dict whose value for key {key!r} is {what}; {valid}")
    return obj


def _host_array(key: str, tensor: Tensor) -> np.ndarray:
    if tensor.dtype not in _SAVABLE:
        raise TypeError(f"save(): tensor {key!r} has dtype {tensor.dtype}, which the "
                        f"safetensors format cannot store; savable dtypes: {_savable_names()}")
    array = tensor._host_copy("tensorplay.save()")
    return np.asarray(array, order="C")   # not ascontiguousarray: it makes 0-d arrays 1-d


def save(obj: Tensor | dict[str, Tensor], f: PathLike | Any) -> None:
    """Write a tensor, or a flat dict of ``str -> Tensor``, to ``f`` as a safetensors file.

    ``f`` is a path (``str`` / ``os.PathLike``) or a binary file object with ``write``. Tensors
    on an accelerator are copied to the host first (this waits for the current stream and is
    refused during graph capture); the device each came from is recorded for :func:`load`.

    Raises:
        TypeError: ``obj`` is not a Tensor or a flat dict of str -> Tensor (nested dicts, lists,
            numbers ... are refused, never pickled), or a tensor's dtype has no safetensors
            equivalent (complex128).
    """
    tensors = _check_obj(obj)
    arrays = {key: _host_array(key, tensor) for key, tensor in tensors.items()}
    metadata = {
        _KIND_KEY: "tensor" if isinstance(obj, Tensor) else "dict",
        _DEVICES_KEY: json.dumps({key: str(t.device) for key, t in tensors.items()}),
    }
    data = _st_numpy.save(arrays, metadata=metadata)
    if hasattr(f, "write"):
        f.write(data)
        return
    with open(_check_path(f, "save"), "wb") as handle:
        handle.write(data)


def _check_path(f, call: str) -> str | os.PathLike:
    if isinstance(f, (str, os.PathLike)):
        return f
    raise TypeError(f"{call}() takes a path (str or os.PathLike) or a binary file object, got "
                    f"{type(f).__name__}")


def _read(f) -> bytes:
    if hasattr(f, "read"):
        return f.read()
    path = _check_path(f, "load")
    if not os.path.exists(path):
        raise FileNotFoundError(f"load(): no such file {os.fspath(path)!r}")
    with open(path, "rb") as handle:
        return handle.read()


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors header (8-byte little-endian length, then JSON)."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    return header.get("__metadata__") or {}


def _resolve_target(map_location: MapLocation, saved: str) -> _device.device:
    """Where a tensor saved from ``saved`` goes, as ``torch.load``'s ``map_location`` says."""
    target: Any = saved
    if map_location is None:
        pass
    elif isinstance(map_location, (str, _device.device)):
        target = map_location
    elif isinstance(map_location, dict):
        target = map_location.get(saved, saved)
        if not isinstance(target, (str, _device.device)):
            raise TypeError(f"load(): map_location maps {saved!r} to {type(target).__name__} "
                            f"{target!r}; valid targets are device strings or tensorplay.device")
    else:
        raise TypeError(f"load(): map_location must be None, a device string, a "
                        f"tensorplay.device or a dict from saved location strings (such as "
                        f"'sim:0') to devices; got {type(map_location).__name__} (callables are "
                        f"not supported: tensorplay has no storages to hand them)")
    try:
        return _device.resolve(target)
    except ValueError as error:
        if target is saved:
            raise RuntimeError(f"load(): a tensor was saved from {saved!r}, which this build "
                               f"does not have ({error}); pass map_location='cpu' (or another "
                               f"device) to place it elsewhere") from None
        raise


def load(f: PathLike | Any, map_location: MapLocation = None) -> Tensor | dict[str, Tensor]:
    """Read a safetensors file: a Tensor if :func:`save` was given one, else a dict.

    ``map_location`` places the tensors, as in ``torch.load``: ``None`` (the device each was
    saved from, or cpu for a file without tensorplay's metadata), a device string or
    ``tensorplay.device`` (all tensors there), or a dict from saved location strings (exactly as
    recorded: ``'sim:0'``, ``'cuda:1'``, ``'cpu'``) to devices; locations missing from the dict
    stay where they were saved. Loaded cpu tensors own fresh, writable memory.

    Raises:
        FileNotFoundError: no file at the path.
        RuntimeError: the data is not a safetensors file; or a tensor was saved from a device
            this build does not have and ``map_location`` does not move it.
        TypeError: a bad ``map_location`` (callables included), or a tensor whose dtype
            tensorplay does not have (float8 ...).
        ValueError: a target device that this build does not have.
    """
    data = _read(f)
    try:
        entries = safetensors.deserialize(data)
        metadata = _metadata(data)
    except (safetensors.SafetensorError, ValueError) as error:
        raise RuntimeError(f"load(): {getattr(f, 'name', f)!r} is not a safetensors file "
                           f"({error})") from None
    devices = json.loads(metadata.get(_DEVICES_KEY, "{}"))
    out: dict[str, Tensor] = {}
    for key, entry in sorted(entries, key=lambda item: item[0]):
        np_dtype = _FROM_SAFETENSORS.get(entry["dtype"])
        if np_dtype is None:
            raise TypeError(f"load(): tensor {key!r} has safetensors dtype {entry['dtype']}, "
                            f"which tensorplay has no dtype for; loadable: "
                            f"{', '.join(_FROM_SAFETENSORS)}")
        array = np.frombuffer(entry["data"], dtype=np_dtype).reshape(entry["shape"])
        if not (array.flags.writeable and array.flags.aligned):
            array = array.copy()
        target = _resolve_target(map_location, devices.get(key, "cpu"))
        tensor = _creation.from_numpy(array)
        out[key] = tensor if target.type == "cpu" else tensor.to(target)
    if metadata.get(_KIND_KEY) == "tensor" and set(out) == {TENSOR_KEY}:
        return out[TENSOR_KEY]
    return out

