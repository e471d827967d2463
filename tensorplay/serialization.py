"""``tensorplay.save`` / ``tensorplay.load``: tensors and checkpoints in files, in the
safetensors format.

No pickle: loading a file never runs code. The files are plain safetensors
(``safetensors.numpy.load_file`` and ``safetensors.torch.load_file`` read them), written with the
``safetensors`` package. Three layouts, chosen by :func:`save` from the object it is given:

- a single tensor: stored under the reserved key ``"__tensor__"`` (:data:`TENSOR_KEY`), marked
  in the file's metadata so that :func:`load` returns a Tensor again;
- a flat ``dict`` of ``str -> Tensor`` (a model's ``state_dict()``): each tensor under its own
  key, so other tools see the same names;
- anything else that is made of dicts, lists, tuples, tensors, ``str``, ``int``, ``float``,
  ``bool`` and ``None`` (an optimizer's ``state_dict()``, a training checkpoint that bundles
  both with the epoch number): the tensors under names made from their place in the structure
  (``state.0.exp_avg``), and the structure itself as one JSON document in the metadata
  (``"tensorplay.structure"``, :data:`STRUCTURE_KEY`).

What is stored for each tensor:

- its values, copied to the host in C order (strided and non-contiguous views are saved as their
  values; tensors that share memory, or one tensor that appears twice, are saved as independent
  copies and come back unshared: safetensors has no notion of shared storage);
- in the metadata, the device it was saved from (``"tensorplay.devices"``, JSON), which
  :func:`load` uses when ``map_location`` is None.

Saving to a path is atomic: the file is written next to the target under a temporary name,
flushed to disk and renamed over the target, so a crash or kill in the middle of a save leaves
the previous file whole.

Pitfalls: safetensors has no complex128 (saving one raises TypeError; cast it to complex64 or
save real and imaginary parts); objects other than the types above (sets, NumPy arrays and
scalars, instances of other classes) are refused rather than pickled (PyTorch's ``torch.save``
would pickle them). A file written by another library loads as a dict, on the cpu unless
``map_location`` says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import stat
from typing import Any, Union

import ml_dtypes
import numpy as np
import safetensors
from safetensors import numpy as _st_numpy

from . import _dtype
from ._runtime import device as _device
from ._tensor import creation as _creation
from ._tensor.tensor import Tensor

__all__ = ["STRUCTURE_KEY", "TENSOR_KEY", "load", "save"]

#: the key a single saved tensor is stored under
TENSOR_KEY = "__tensor__"
#: the metadata key that holds the JSON structure of a nested object
STRUCTURE_KEY = "tensorplay.structure"
_KIND_KEY = "tensorplay.object"
_DEVICES_KEY = "tensorplay.devices"
#: the version of the JSON layout under STRUCTURE_KEY (its "format" field)
_STRUCTURE_FORMAT = 1
#: safetensors keeps its own metadata under this name in the header: no tensor may have it
_RESERVED_NAME = "__metadata__"

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

_SUPPORTED = ("supported: Tensor, dict, list, tuple, str, int, float, bool and None, nested "
              "freely; nothing is pickled")
#: the exact types stored as JSON scalars. Subclasses (NumPy scalars, enums, str subclasses) are
#: refused: load would hand back the base type, not what was saved.
_SCALARS = (str, int, float, bool, type(None))


def _savable_names() -> str:
    return ", ".join(d.name for d in _dtype.all_dtypes if d in _SAVABLE)


def _host_array(where: str, tensor: Tensor) -> np.ndarray:
    if tensor.dtype not in _SAVABLE:
        raise TypeError(f"save(): tensor {where} has dtype {tensor.dtype}, which the "
                        f"safetensors format cannot store; savable dtypes: {_savable_names()}")
    array = tensor._host_copy("tensorplay.save()")
    return np.asarray(array, order="C")   # not ascontiguousarray: it makes 0-d arrays 1-d


def _type_name(value) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _refusal(value, path: str) -> TypeError:
    hint = ""
    if isinstance(value, np.ndarray):
        hint = " (make it a tensor: tensorplay.from_numpy(array))"
    elif isinstance(value, np.generic):
        hint = " (convert it with .item())"
    else:
        base = next((t for t in (bool, int, float, str, list, tuple) if isinstance(value, t)),
                    None)
        if base is not None:
            hint = (f" (a subclass of {base.__name__}, which would come back as a plain "
                    f"{base.__name__}: convert it with {base.__name__}(...))")
    return TypeError(f"save(): {path} is of type {_type_name(value)}{hint}; {_SUPPORTED}")


def _is_flat(obj) -> bool:
    """Whether ``obj`` is stored in the flat layout (a dict of str -> Tensor)."""
    return isinstance(obj, dict) and all(
        isinstance(key, str) and key != _RESERVED_NAME and isinstance(value, Tensor)
        for key, value in obj.items())


class _Flattener:
    """Turns a nested object into a JSON-able tree plus the tensors it refers to, by name.

    The tree (the ``"root"`` of the document under STRUCTURE_KEY) is made of:

    - JSON ``null``, ``true``/``false``, numbers and strings for None, bool, int, float, str;
    - JSON arrays for lists;
    - one-key objects for the rest: ``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``
      (pairs, so that int and other non-str keys survive and the order is kept),
      ``{"tensor": name}``, and ``{"float": "nan" | "inf" | "-inf"}`` (JSON has no such
      numbers).
    """

    def __init__(self) -> None:
        self.tensors: dict[str, np.ndarray] = {}
        self.devices: dict[str, str] = {}
        self._open: set[int] = set()   # ids of the containers on the path being walked

    def node(self, value, path: str, parts: tuple[str, ...]):
        kind = type(value)
        if kind in _SCALARS:
            return self._scalar(value)
        if isinstance(value, Tensor):   # subclasses (parameters) come back as plain tensors
            name = self._name(parts)
            self.tensors[name] = _host_array(path, value)
            self.devices[name] = str(value.device)
            return {"tensor": name}
        if isinstance(value, dict) or kind is list or kind is tuple:
            return self._container(value, path, parts)
        raise _refusal(value, path)

    def _container(self, value, path: str, parts: tuple[str, ...]):
        if id(value) in self._open:
            raise ValueError(f"save(): {path} contains itself (a reference cycle), which a "
                             f"file cannot hold")
        self._open.add(id(value))
        try:
            if isinstance(value, dict):
                pairs = []
                for key, item in value.items():
                    if type(key) not in _SCALARS:
                        raise TypeError(f"save(): {path} has a key {key!r} of type "
                                        f"{_type_name(key)}; dict keys must be str, int, float, "
                                        f"bool or None")
                    pairs.append([self._scalar(key),
                                  self.node(item, f"{path}[{key!r}]", (*parts, str(key)))])
                return {"dict": pairs}
            items = [self.node(item, f"{path}[{index}]", (*parts, str(index)))
                     for index, item in enumerate(value)]
            return items if type(value) is list else {"tuple": items}
        finally:
            self._open.discard(id(value))

    @staticmethod
    def _scalar(value):
        if type(value) is float and not math.isfinite(value):
            return {"float": repr(value)}   # 'nan', 'inf', '-inf'
        return value

    def _name(self, parts: tuple[str, ...]) -> str:
        """A unique tensor name from the place in the structure: ``state.0.exp_avg``."""
        base = ".".join(parts) or "_"
        name, number = base, 1
        while name in self.tensors or name == _RESERVED_NAME:
            # keys that contain dots can spell the same name as a nested place
            name, number = f"{base}#{number}", number + 1
        return name


def _serialize(obj) -> bytes:
    """The bytes of the file that holds ``obj`` (every check is made here, before any file is
    touched)."""
    if isinstance(obj, Tensor):
        arrays = {TENSOR_KEY: _host_array("obj", obj)}
        metadata = {_KIND_KEY: "tensor",
                    _DEVICES_KEY: json.dumps({TENSOR_KEY: str(obj.device)})}
    elif _is_flat(obj):
        # the layout of every version so far: names as given, so other tools see them
        arrays = {key: _host_array(f"obj[{key!r}]", tensor) for key, tensor in obj.items()}
        metadata = {_KIND_KEY: "dict",
                    _DEVICES_KEY: json.dumps({key: str(t.device) for key, t in obj.items()})}
    else:
        flattener = _Flattener()
        root = flattener.node(obj, "obj", ())
        arrays = flattener.tensors
        document = {"format": _STRUCTURE_FORMAT, "root": root}
        metadata = {_KIND_KEY: "structure",
                    _DEVICES_KEY: json.dumps(flattener.devices),
                    # ASCII only, and no NaN/Infinity literals: any JSON parser reads it
                    STRUCTURE_KEY: json.dumps(document, ensure_ascii=True, allow_nan=False,
                                              separators=(",", ":"))}
    return _st_numpy.save(arrays, metadata=metadata)


def save(obj: Any, f: PathLike | Any) -> None:
    """Write a tensor, a dict of tensors or a nested checkpoint to ``f`` as a safetensors file.

    ``obj`` may be:

    - a Tensor (:func:`load` returns a Tensor);
    - a flat dict of ``str -> Tensor`` (a model's ``state_dict()``), stored under its own keys,
      readable by ``safetensors.numpy.load_file`` with the same names;
    - any nesting of ``dict``, ``list`` and ``tuple`` whose leaves are tensors, ``str``,
      ``int``, ``float`` (NaN and infinities too), ``bool`` and ``None``, such as an
      optimizer's ``state_dict()``: ``{"state": {0: {"step": t, "exp_avg": t}},
      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1]}]}``. Dict keys
      may be ``str``, ``int``, ``float``, ``bool`` or ``None`` and keep their type (int keys
      come back as ints) and their order. The tensors are stored under names made from their
      place (``state.0.exp_avg``), the rest as JSON in the file's metadata.

    :func:`load` gives back the same structure, with two changes: dict subclasses (``OrderedDict``,
    ``defaultdict``) come back as plain dicts, and tensor subclasses as plain tensors (as with
    every tensor: values, dtype and device only; no ``requires_grad``, no shared memory).
    Tuples come back as tuples and lists as lists, as with ``torch.load``. Scalars must be of the
    exact built-in types: NumPy scalars, enums and other subclasses are refused, since they would
    come back as their base type.

    ``f`` is a path (``str`` / ``os.PathLike``) or a binary file object with ``write``, which
    gets the bytes directly. A path is written atomically: the file is written under a temporary
    name in the same folder (``.<name>.<random>.tmp``), flushed and fsynced, then renamed over
    ``f``, so that ``f`` holds the old file or the new one, whole, even if the process is killed
    or the machine fails mid-save. A process killed mid-save can leave its temporary file behind
    (never under the name ``f``); it may be deleted. If ``f`` is a symbolic link, the file it
    points to is replaced and the link kept. A file that replaces an existing one keeps its
    permission bits, but it is a new file: the folder must be writable (not only the file), and
    other hard links to the old file keep the old contents. Nothing is written, and an existing
    ``f`` is left untouched, when ``obj`` is refused.

    Tensors on an accelerator are copied to the host first (this waits for the current stream and
    is refused during graph capture); the device each came from is recorded for :func:`load`. The
    whole file is assembled in memory before it is written.

    Raises:
        TypeError: ``obj`` holds something else (a set, a NumPy array, an instance of another
            class, a dict key that is not a str/int/float/bool/None); the message names its
            place (``obj['param_groups'][0]['foo']``) and type. Or a tensor's dtype has no
            safetensors equivalent (complex128). Or ``f`` is neither a path nor a file object.
        ValueError: ``obj`` contains itself.
        OSError: the file cannot be written (its folder is missing or not writable, the disk is
            full ...); the temporary file is removed and ``f`` is untouched.
    """
    if not hasattr(f, "write"):
        _check_path(f, "save")
    data = _serialize(obj)
    if hasattr(f, "write"):
        f.write(data)
        return
    _write_atomically(f, data)


def _write_atomically(path: PathLike, data: bytes) -> None:
    # Opening the target with "wb" would truncate the previous checkpoint before the new one is
    # written, and a kill in between would lose both. os.replace within one folder (one file
    # system) is atomic: readers see the old file or the new one.
    target = os.path.realpath(os.fspath(path))   # keep a symbolic link, replace what it names
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"save(): no such folder {folder!r} to write "
                                f"{os.fspath(path)!r} in")
    if os.path.isdir(target):
        raise IsADirectoryError(f"save(): {os.fspath(path)!r} is a folder")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None   # a new file: os.open's 0o666 and the umask give what open("wb") would
    # a hidden name that ends in .tmp: globs for the checkpoint's suffix never pick it up
    prefix = "." + os.path.basename(target)[:200]   # room for the suffix within NAME_MAX
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temporary = os.path.join(folder, f"{prefix}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temporary, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.chmod(temporary, mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())   # the data is on disk before the name points at it
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    """Make the rename durable (POSIX: fsync the folder). Windows cannot open a folder, and some
    file systems refuse to fsync one; the file is in place either way, so that is not an
    error."""
    if os.name == "nt":
        return
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


class _Corrupt(Exception):
    """A structure document that :func:`save` cannot have written."""


def _rebuild(node, tensors: dict[str, Tensor]):
    """The object a node of the structure tree stands for (see :class:`_Flattener`)."""
    if node is None or type(node) in (str, int, float, bool):
        return node
    if type(node) is list:
        return [_rebuild(item, tensors) for item in node]
    if type(node) is dict and len(node) == 1:
        (tag, value), = node.items()
        if tag == "tensor" and type(value) is str:
            if value not in tensors:
                raise _Corrupt(f"it refers to a tensor {value!r} that the file does not hold")
            return tensors[value]
        if tag == "tuple" and type(value) is list:
            return tuple(_rebuild(item, tensors) for item in value)
        if tag == "dict" and type(value) is list:
            out = {}
            for pair in value:
                if type(pair) is not list or len(pair) != 2:
                    raise _Corrupt(f"a dict entry {pair!r} is not a [key, value] pair")
                key = _rebuild(pair[0], tensors)
                if type(key) not in _SCALARS:
                    raise _Corrupt(f"a dict key {pair[0]!r} is not a scalar")
                out[key] = _rebuild(pair[1], tensors)
            return out
        if tag == "float" and value in ("nan", "inf", "-inf"):
            return float(value)
    raise _Corrupt(f"unknown node {json.dumps(node)[:200]}")


def load(f: PathLike | Any, map_location: MapLocation = None) -> Any:
    """Read a file that :func:`save` wrote (or any safetensors file).

    Returns what was saved: a Tensor if :func:`save` was given one; a dict of ``str -> Tensor``
    for a flat dict, for a file written by another library, and for files of earlier tensorplay
    versions; and for a nested object, the same nesting of dicts (plain ``dict``, keys with their
    types, in their order), lists, tuples (as tuples), tensors and scalars. Every tensor owns
    its memory: tensors that shared memory (or were one tensor) when saved are independent.

    ``map_location`` places the tensors, as in ``torch.load``: ``None`` (the device each was
    saved from, or cpu for a file without tensorplay's metadata), a device string or
    ``tensorplay.device`` (all tensors there), or a dict from saved location strings (exactly as
    recorded: ``'sim:0'``, ``'cuda:1'``, ``'cpu'``) to devices; locations missing from the dict
    stay where they were saved. Loaded cpu tensors own fresh, writable memory.

    Raises:
        FileNotFoundError: no file at the path.
        RuntimeError: the data is not a safetensors file, or its structure document is damaged
            or from a newer tensorplay; or a tensor was saved from a device this build does not
            have and ``map_location`` does not move it.
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
    kind = metadata.get(_KIND_KEY)
    if kind == "tensor" and set(out) == {TENSOR_KEY}:
        return out[TENSOR_KEY]
    if kind == "structure":
        return _load_structure(metadata.get(STRUCTURE_KEY), out, f)
    return out


def _load_structure(text: str | None, tensors: dict[str, Tensor], f) -> Any:
    where = getattr(f, "name", f)
    try:
        document = json.loads(text)  # type: ignore[arg-type]   # None: the TypeError below
        version = document["format"]
        root = document["root"]
    except (ValueError, TypeError, KeyError) as error:   # TypeError: no document at all
        raise RuntimeError(f"load(): the structure in {where!r} is damaged ({error!r})") from None
    if version != _STRUCTURE_FORMAT:
        raise RuntimeError(f"load(): {where!r} holds a structure of format {version!r}; this "
                           f"tensorplay reads format {_STRUCTURE_FORMAT} (a newer tensorplay "
                           f"wrote it?)")
    try:
        return _rebuild(root, tensors)
    except (_Corrupt, RecursionError) as error:
        raise RuntimeError(f"load(): the structure in {where!r} is damaged ({error})") from None
