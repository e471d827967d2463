"""Memory of the simulated accelerator: segments at fake device addresses.

Each device has a byte limit. ``malloc`` hands out a fresh ``uint8`` segment at a fake device
address (device ``d`` lives at ``(d + 1) << 40``, 512-byte aligned, never reused); ``as_array``
views a segment. Queued work keeps no tensor's memory alive, as a kernel's raw pointers do not
(Note [sim queue ownership]).

Note [sim queue ownership]
--------------------------
A GPU kernel takes raw pointers: a launch keeps no tensor alive, so a tensor freed while work
using it is still queued returns its block to the caching allocator at once, and the allocator
hands it out again on the same stream, where stream order makes that safe (a use on another
stream is the caller's to keep alive: the allocator's documented pitfall, no record_stream).
Sim kernels are closures over NumPy arrays whose ``base`` keeps the Allocation alive
(``as_array``), so a queue holding them would keep every block taken until the queue ran: an
eager loop grew without bound until a synchronize. So what a stream *queues* holds owner-less
views of the same bytes: ``unowned_kernel`` rebuilds a kernel (a function's closure cells, a
partial's arguments, and the tuples, lists and dicts directly among them) and a host copy's
target with raw views; whatever lies deeper keeps its owner, which only returns memory later,
never too early. A rebuilt container is a copy, made only when it held a device array. Nodes
recorded into a capture keep their arrays: a graph holds what it replays.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import threading
import types
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["DeviceMemory", "SimMemory", "unowned", "unowned_kernel"]

_ALIGNMENT = 512
_ADDRESS_SHIFT = 40


class DeviceMemory:
    """One simulated device's memory: its limit, live segments and the device lock (Note [sim
    locks] in ``sim/__init__.py``)."""

    def __init__(self, index: int, limit: int):
        self.index = index
        self.limit = limit
        self.used = 0
        self.segments: dict[int, np.ndarray] = {}   # base address -> uint8 buffer
        self.bases: list[int] = []                   # sorted live base addresses
        self.host_starts: list[int] = []             # sorted host addresses of the buffers
        self.host_to_base: dict[int, int] = {}
        self.next_address = (index + 1) << _ADDRESS_SHIFT
        self.lock = threading.RLock()


Device = TypeVar("Device", bound=DeviceMemory)


class SimMemory(Generic[Device]):
    """The raw-memory half of ``SimBackend`` (mixed into it), over ``self._devices``, its
    :class:`DeviceMemory` (subclass) objects indexed by device."""

    _devices: list[Device]

    def _device(self, index: int) -> Device:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"sim device index must be an int, got {type(index).__name__}")
        if not 0 <= index < len(self._devices):
            names = ", ".join(f"sim:{i}" for i in range(len(self._devices)))
            raise ValueError(f"device 'sim:{index}' is out of range: this backend has "
                             f"{len(self._devices)} sim devices ({names})")
        return self._devices[index]

    def malloc(self, index: int, nbytes: int) -> int:
        device = self._device(index)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"malloc needs nbytes > 0 (an int), got {nbytes!r}")
        with device.lock:
            if device.used + nbytes > device.limit:
                raise MemoryError(f"sim:{index} has {device.limit - device.used} bytes free, "
                                  f"{nbytes} requested")
            base = device.next_address
            if base + nbytes > (index + 2) << _ADDRESS_SHIFT:
                raise MemoryError(f"sim:{index} ran out of fresh device addresses")
            device.next_address += -(-nbytes // _ALIGNMENT) * _ALIGNMENT
            segment = np.empty(nbytes, np.uint8)
            device.segments[base] = segment
            bisect.insort(device.bases, base)
            host = segment.ctypes.data
            bisect.insort(device.host_starts, host)
            device.host_to_base[host] = base
            device.used += nbytes
        return base

    def free(self, index: int, ptr: int) -> None:
        device = self._device(index)
        with device.lock:
            segment = device.segments.pop(ptr, None)
            if segment is None:
                raise ValueError(f"free: 0x{ptr:x} is not an address malloc returned on "
                                 f"sim:{index} (or it was freed already){self._owner_hint(ptr)}")
            device.bases.remove(ptr)
            host = segment.ctypes.data
            device.host_starts.remove(host)
            del device.host_to_base[host]
            device.used -= segment.nbytes

    def _owner_hint(self, ptr: int) -> str:
        found = self._find_segment(ptr, 0)
        if found is None:
            return ""
        base, _ = found
        return f"; it lies inside the allocation at 0x{base:x} on sim:{self._device_of(base)}"

    @staticmethod
    def _device_of(ptr: int) -> int:
        return (ptr >> _ADDRESS_SHIFT) - 1

    def _find_segment(self, ptr: int, nbytes: int) -> tuple[int, np.ndarray] | None:
        """The live (base, segment) holding ``[ptr, ptr + nbytes)``, on whichever device."""
        index = self._device_of(ptr)
        if not 0 <= index < len(self._devices):
            return None
        device = self._devices[index]
        position = bisect.bisect_right(device.bases, ptr) - 1
        if position < 0:
            return None
        base = device.bases[position]
        segment = device.segments[base]
        if ptr + nbytes > base + segment.nbytes:
            return None
        return base, segment

    def _segment_or_raise(self, what: str, ptr: int, nbytes: int) -> tuple[int, np.ndarray]:
        found = self._find_segment(ptr, nbytes)
        if found is None:
            raise ValueError(f"{what}: [0x{ptr:x}, 0x{ptr + nbytes:x}) is not inside one live "
                             f"sim allocation")
        return found

    def as_array(self, index: int, ptr: int, nbytes: int, numpy_dtype: Any,
                 shape: tuple[int, ...], strides: tuple[int, ...] | None, owner: Any) -> Any:
        """A NumPy view of ``[ptr, ptr + nbytes)``; strides in bytes (0 broadcasts; None: C
        order). The view (and every view of it) keeps ``owner`` alive through its ``.base``
        chain."""
        with self._device(index).lock:
            base, segment = self._segment_or_raise("as_array", ptr, nbytes)
        if self._device_of(base) != index:
            raise ValueError(f"as_array: 0x{ptr:x} is memory of sim:{self._device_of(base)}, "
                             f"not sim:{index}")
        buffer: Any = segment
        if owner is not None:
            # A ctypes view is not an ndarray, so NumPy's base-collapsing stops at it and the
            # owner it carries lives exactly as long as some view of this memory. The segment
            # lets a queue hold owner-less views instead (Note [sim queue ownership]).
            # numpy's stubs give ndarray a buffer protocol only on Python >= 3.12
            buffer = (ctypes.c_uint8 * segment.nbytes).from_buffer(segment)  # type: ignore[arg-type]
            buffer._tensorplay_owner = owner
            buffer._tensorplay_segment = segment
        return np.ndarray(tuple(shape), np.dtype(numpy_dtype), buffer=buffer,
                          offset=ptr - base, strides=None if strides is None else tuple(strides))

    def _locate_host_array(self, array: np.ndarray) -> tuple[int, int] | None:
        """(device index, device address) of a NumPy array viewing sim memory, else None."""
        host = array.__array_interface__["data"][0]
        for device in self._devices:
            position = bisect.bisect_right(device.host_starts, host) - 1
            if position < 0:
                continue
            start = device.host_starts[position]
            base = device.host_to_base[start]
            if host < start + device.segments[base].nbytes:
                return device.index, base + (host - start)
        return None

    def array_ptr(self, array: Any) -> int:
        """The device address of ``array``'s first element (views included).

        Raises:
            TypeError: not a NumPy array. ValueError: an array that does not view sim memory.
        """
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array_ptr needs a sim device array, got {type(array).__name__}")
        location = self._locate_host_array(array)
        if location is None:
            raise ValueError("array_ptr: the array does not view live sim device memory (it is "
                             "host memory, or its allocation was freed)")
        return location[1]

    def _copy_bytes(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        dst_base, dst_segment = self._segment_or_raise("memcpy destination", dst, nbytes)
        src_base, src_segment = self._segment_or_raise("memcpy source", src, nbytes)
        dst_segment[dst - dst_base:dst - dst_base + nbytes] = \
            src_segment[src - src_base:src - src_base + nbytes]


_UNOWNED_DEPTH = 2      # levels of containers looked into inside a cell or partial argument


def unowned_array(array: np.ndarray) -> np.ndarray:
    """A view of the same bytes that keeps no Allocation alive, or ``array`` itself when it
    does not view owned sim memory."""
    base: Any = array.base   # ends at as_array's ctypes view
    while type(base) is np.ndarray:     # a view of a view: NumPy stops collapsing at as_array's
        base = base.base
    segment = getattr(base, "_tensorplay_segment", None)
    if segment is None or array.size == 0:
        return array
    offset = array.__array_interface__["data"][0] - ctypes.addressof(base)
    raw = np.ndarray(array.shape, array.dtype, buffer=segment, offset=offset,
                     strides=array.strides)
    if not array.flags.writeable:
        raw.flags.writeable = False
    return raw


def unowned(value: Any, depth: int = _UNOWNED_DEPTH) -> Any:
    """``value`` with the device arrays in it made owner-less (Note [sim queue ownership]);
    ``value`` itself when nothing changed."""
    kind = type(value)
    if kind is np.ndarray:
        return unowned_array(value)
    if depth and (kind is tuple or kind is list):
        items: list[Any] | dict[Any, Any] = [unowned(item, depth - 1) for item in value]
        changed = any(new is not old for new, old in zip(items, value))
        return kind(items) if changed else value
    if depth and kind is dict:
        items = {key: unowned(item, depth - 1) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    return value


def unowned_kernel(fn: Any) -> Any:
    """``fn`` rebuilt over owner-less arrays, or ``fn`` when it holds none directly."""
    if type(fn) is functools.partial:
        args, keywords = unowned(fn.args), unowned(fn.keywords)
        if args is fn.args and keywords is fn.keywords:
            return fn
        rebuilt: functools.partial[Any] | types.FunctionType = functools.partial(
            fn.func, *args, **keywords)
    elif type(fn) is types.FunctionType and fn.__closure__:
        cells = []
        for cell in fn.__closure__:
            try:
                content = cell.cell_contents
            except ValueError:          # an empty cell: keep it shared
                cells.append(cell)
                continue
            new = unowned(content)
            cells.append(cell if new is content else types.CellType(new))
        if all(new is old for new, old in zip(cells, fn.__closure__)):
            return fn
        rebuilt = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                     tuple(cells))
        rebuilt.__kwdefaults__ = fn.__kwdefaults__
        rebuilt.__qualname__ = fn.__qualname__
    else:
        return fn
    rebuilt.__dict__.update(fn.__dict__)    # __name__ of a partial, tp_attrs
    return rebuilt
