"""Devices: parsing and validation of every device spelling. All device errors are worded here.

A device is ``cpu`` (the host) or one device of the accelerator chosen at import
(``sim`` or ``cuda``; see ``tensorplay.backends``). Spellings accepted wherever a device is taken:
a :class:`device`, a string (``"cpu"``, ``"sim:1"``, ``"cuda"``), an ``int`` (an accelerator
index) or ``None`` (the current accelerator device, or ``cpu`` where the context says so).
"""

from __future__ import annotations

import re
from typing import Any

from . import state as _state
from .select import DEVICE_TYPES, accelerator_backend, no_accelerator_advice, require_accelerator

__all__ = ["device"]

_SPELLING = re.compile(r"^([a-z]+)(?::(-?\d+))?$")
_KNOWN_TYPES = tuple(DEVICE_TYPES)


class device:
    """A device: ``device("cpu")``, ``device("sim:1")``, ``device("cuda", 1)``, ``device(1)``
    (an int is an index of this build's accelerator, as ``torch.device(1)``).

    ``index`` is ``None`` for a type-only spelling (``device("cuda")``), meaning the current
    device of that type when it is used: every function that takes a device turns it into the
    concrete one. Construction checks the spelling only; whether the
    device exists in this build is checked where it is used.

    Raises:
        ValueError: for a malformed spelling, an unknown device type, a negative index, or an
            int index on a build without an accelerator.
    """

    __slots__ = ("type", "index")
    #: The device type (``"cpu"``, ``"sim"`` or ``"cuda"``).
    type: str
    # an int, or None for a type-only spelling; Any because the layers that take a device
    # (dispatch, allocator) receive resolved ones, which the type cannot tell apart
    #: The device index (an int, 0 for ``cpu``), or None for a type-only spelling.
    index: Any

    def __init__(self, type_or_spelling, index: int | None = None):
        if isinstance(type_or_spelling, device):
            if index is not None:
                raise ValueError(f"device({type_or_spelling!r}, {index!r}): an index cannot be "
                                 f"given with a device object")
            self.type, self.index = type_or_spelling.type, type_or_spelling.index
            return
        if isinstance(type_or_spelling, int) and not isinstance(type_or_spelling, bool):
            # an int is an accelerator index wherever a device is taken, here too
            if index is not None:
                raise ValueError(f"device({type_or_spelling!r}, {index!r}): an index cannot be "
                                 f"given with an int device index")
            accelerator = accelerator_backend()
            if accelerator is None:
                raise ValueError(f"device index {type_or_spelling} given, but "
                                 + _valid_devices_text(None))
            if type_or_spelling < 0:
                raise ValueError(f"device index must be non-negative, got {type_or_spelling}")
            type_or_spelling, index = accelerator.device_type, type_or_spelling
        elif not isinstance(type_or_spelling, str):
            raise TypeError(f"device() takes a string such as 'cpu' or 'sim:0' or an int "
                            f"accelerator index, got "
                            f"{type(type_or_spelling).__name__} {type_or_spelling!r}")
        match = _SPELLING.match(type_or_spelling.strip())
        if match is None or match.group(1) not in _KNOWN_TYPES:
            raise ValueError(f"invalid device spelling {type_or_spelling!r}: expected "
                             f"'cpu', '<type>' or '<type>:<index>' with type one of "
                             f"{', '.join(repr(t) for t in _KNOWN_TYPES)}")
        kind, text_index = match.group(1), match.group(2)
        if text_index is not None and index is not None:
            raise ValueError(f"device({type_or_spelling!r}, {index!r}): the index is given twice")
        if text_index is not None:
            index = int(text_index)
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(f"device index must be an int, got {type(index).__name__}")
            if index < 0:
                raise ValueError(f"device index must be non-negative, got {index} in "
                                 f"{type_or_spelling!r}")
        if kind == "cpu" and index not in (None, 0):
            raise ValueError(f"invalid device 'cpu:{index}': the host has one device, 'cpu'")
        self.type = kind
        self.index = 0 if kind == "cpu" else index

    def __repr__(self) -> str:
        if self.type == "cpu" or self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        if self.type == "cpu":
            return "cpu"
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (ValueError, TypeError):
                return False
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))


CPU = device("cpu")
_concrete: dict[tuple[str, int], device] = {("cpu", 0): CPU}


def _canonical(kind: str, index: int) -> device:
    """The one shared object for a concrete device, so that hot paths compare with ``is``."""
    found = _concrete.get((kind, index))
    if found is None:
        found = _concrete.setdefault((kind, index), device(kind, index))
    return found


#: explicit spellings already resolved ("sim:1" -> its canonical device); a device's existence
#: does not change after import, so the answer stays true
_resolved: dict[str, device] = {}


def _valid_devices_text(accelerator, host: bool = True) -> str:
    """The devices this build has, for error messages (``host``: 'cpu' is valid there too)."""
    if accelerator is None:
        return ("this build has no accelerator, so the only device is 'cpu'. "
                + no_accelerator_advice())
    count = accelerator.device_count()
    names = ", ".join(f"{accelerator.device_type}:{i}" for i in range(count))
    return (f"this build has {count} {accelerator.device_type} device(s) ({names})"
            + (" and 'cpu'" if host else ""))


def resolve(spelling, *, default_cpu: bool = False) -> device:
    """Turn any device spelling into a concrete device (type and index), checking it exists.
    The result is the one shared object for that device (compare with ``is`` on hot paths).

    ``None`` means the current accelerator device, or ``cpu`` when ``default_cpu`` is set (tensor
    creation) or no accelerator was built and ``default_cpu`` is set.

    Raises:
        ValueError: a device type this build does not have, or an index out of range.
        TypeError: something that is not a device spelling at all.
    """
    if type(spelling) is str:   # the hot spelling ("sim:0", "cuda:1", "cpu"): checked once
        found = _resolved.get(spelling)
        if found is not None:
            return found
    elif spelling.__class__ is device and spelling.index is not None and \
            _concrete.get((spelling.type, spelling.index)) is spelling:
        return spelling
    accelerator = accelerator_backend()
    if spelling is None:
        if default_cpu:
            return CPU
        if accelerator is None:
            raise ValueError("no device given and this build has no accelerator: "
                             + _valid_devices_text(None))
        return _canonical(accelerator.device_type, _state.current_device_index())
    if isinstance(spelling, bool):
        raise TypeError(f"expected a device, a device string or an int index, got {spelling!r}")
    if isinstance(spelling, int):
        if accelerator is None:
            raise ValueError(f"device index {spelling} given, but " + _valid_devices_text(None))
        spelling = device(accelerator.device_type, spelling) if spelling >= 0 else spelling
        if isinstance(spelling, int):
            raise ValueError(f"device index must be non-negative, got {spelling}")
    elif isinstance(spelling, str):
        text = spelling
        spelling = device(spelling)
        if spelling.type == "cpu" or spelling.index is not None:
            found = resolve(spelling)
            if len(_resolved) < 256:
                _resolved[text] = found
            return found
    elif not isinstance(spelling, device):
        raise TypeError(f"expected a device, a device string or an int index, got "
                        f"{type(spelling).__name__} {spelling!r}")
    if spelling.type == "cpu":
        return CPU
    if accelerator is None or spelling.type != accelerator.device_type:
        raise ValueError(f"device {str(spelling)!r} is not available: "
                         + _valid_devices_text(accelerator))
    if spelling.index is None:
        return _canonical(spelling.type, _state.current_device_index())
    return _canonical(spelling.type, check_index(accelerator, spelling.index))


def resolve_accelerator_index(spelling) -> int:
    """Like :func:`resolve` for functions that need an accelerator device; returns its index.

    Raises:
        RuntimeError: on a host-only build (via ``backends.require_accelerator``).
        ValueError: for ``cpu`` or a bad spelling.
    """
    accelerator = require_accelerator()
    resolved = resolve(spelling)
    if resolved.type == "cpu":
        raise ValueError(f"expected an accelerator device, got {spelling!r}: "
                         + _valid_devices_text(accelerator, host=False))
    return resolved.index


def check_index(accelerator, index) -> int:
    """The one check of an accelerator device index (``resolve``, the allocator and every other
    caller use it; backends do not re-check). Returns ``index``.

    Raises:
        TypeError: ``index`` is not an int (``bool`` included).
        ValueError: ``index`` is negative or not below ``accelerator.device_count()``; the
            message names the device and lists the devices this build has.
    """
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"device index must be an int, got {type(index).__name__} {index!r}")
    if not 0 <= index < accelerator.device_count():
        raise ValueError(f"device index {index} is out of range ('{accelerator.device_type}:"
                         f"{index}' does not exist): " + _valid_devices_text(accelerator))
    return index
