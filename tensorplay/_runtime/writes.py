"""Write tracking: which device memory the work of a stretch of code writes (or may write).

Note [write records]
--------------------
Two callers ask what some work wrote, and both answer with byte ranges (:func:`byte_span`).

*Compile's write records.* ``tensorplay.compile`` must leave in the caller's tensors what the
function wrote into them (API.md, Compiler), yet it captures the function over private clones of
the inputs. So it asks, after the capture, which clones a captured op wrote: every op that writes
into an existing tensor (``op_`` forms and ``+=``, ``out=``, ``copy_``, ``fill_``,
``__setitem__``, ``masked_fill_``, in-place random fills) calls :func:`note` where it checks that
the tensor may be written (``_tensor.transfer.check_no_overlap``, or its own fast path). While a
:func:`recording` block is open, ``note`` keeps the byte range written; a clone was written when a
range overlaps it, so a write through any view of it counts. Outside a recording a write pays one
truthiness test. Why byte ranges rather than PyTorch's version counter: tensorplay has no storage
object that a tensor shares with its views, so a counter would have to be threaded through every
op that makes a view; a byte range is known at the write and covers views by itself. Writes made
outside tensorplay's ops (through DLPack or CuPy) are not seen.

*While predicate writes* (the check formerly under that name). A while body repeats while its
predicate is true when the body ends, so some work in the body must write the predicate. The
classic slip is ``flag = counter < 5``: it binds the name ``flag`` to a new tensor, the node keeps
reading the old one, and the replay never ends. The capture cannot look inside a kernel, but
every tensor op hands ``dispatch.launch`` a kernel that closes over the arrays it reads and writes
(the contract in ``dispatch``). So while a while body is open, ``Graph`` registers the body's
stream (and the streams of bodies nested in it) in ``dispatch.launch_watchers``, and each kernel
launched there is scanned (:func:`referenced_ranges`) for the device memory it references. The
scan is conservative: an object it cannot see into (a fused kernel object, a backend method), too
many objects, or a graph replayed inside the body means "may write anything".
``end_capture_to_conditional_node()`` refuses the body only when every piece of work was seen
through and none references the predicate's bytes. A callable (or the object of a bound method)
with the attribute ``tp_arguments_only = True`` touches only the memory it is called with (a
backend's kernel launcher, an elementwise plan): the scan skips its insides and looks at the
arguments the kernel passes it. The scan uses only the backend protocol (``xp`` and
``array_ptr``), so every backend refuses the same bodies. Tensors are recognised by
their layout (:func:`is_tensor`), as this floor knows no Tensor class.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import types
from typing import Any, Iterator

import numpy as np

from .. import _dtype

__all__ = ["active", "byte_span", "extent", "overlaps", "note", "recording", "is_tensor",
           "WhileBodyWatch", "array_range", "referenced_ranges"]

_lock = threading.Lock()

#: The open recordings, each a list of extents. A tuple replaced whole, so a writer on another
#: thread iterates a consistent snapshot without taking the lock.
active: tuple = ()

Extent = tuple[Any, int, int]

_MAX_OBJECTS = 512   # past this many objects in one kernel, stop looking: "may write anything"
_TENSOR_SLOTS = ("_data", "_device", "_dtype")
_tensor_types: dict[type, bool] = {}


def byte_span(first: int, array) -> tuple[int, int]:
    """``(low, high)``: the bytes a non-empty strided ``array`` whose first element is at
    address ``first`` spans (``high`` exclusive; negative strides reach below ``first``)."""
    low = high = first
    for size, stride in zip(array.shape, array.strides):
        if stride > 0:
            high += stride * (size - 1)
        else:
            low += stride * (size - 1)
    return low, high + array.itemsize


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a tensorplay tensor: its class lays out ``_data`` (the ``xp`` array),
    ``_device`` and ``_dtype`` as slots."""
    kind = type(obj)
    known = _tensor_types.get(kind)
    if known is None:
        known = _tensor_types[kind] = all(
            isinstance(getattr(kind, name, None), types.MemberDescriptorType)
            for name in _TENSOR_SLOTS)
    return known


# -- compile's write records -------------------------------------------------------------------

def extent(tensor) -> Extent | None:
    """``(device, low, high)``: the bytes ``tensor`` spans (``high`` exclusive); None if empty."""
    data = tensor._data
    if data.size == 0:
        return None
    return (tensor._device, *byte_span(tensor.data_ptr(), data))


def overlaps(a: Extent | None, b: Extent | None) -> bool:
    """Whether two extents share a byte (on one device)."""
    return (a is not None and b is not None and a[1] < b[2] and b[1] < a[2]
            and a[0] == b[0])


def note(tensor) -> None:
    """Record, in every open recording, that ``tensor``'s memory is written."""
    span = extent(tensor)
    for record in active:
        record.append(span)


@contextlib.contextmanager
def recording() -> Iterator[list]:
    """Collect the extents that tensorplay ops write (on any thread) inside the block."""
    global active
    record: list = []
    with _lock:
        active = active + (record,)
    try:
        yield record
    finally:
        with _lock:
            active = tuple(r for r in active if r is not record)


# -- while predicate writes --------------------------------------------------------------------

class WhileBodyWatch:
    """What the work recorded into one while body touches, and the predicate it must write.

    ``predicate``: the ``xp`` array the node re-reads when the body ends (the one given to
    ``begin_capture_to_while_node``, or the latest ``set_conditional_handle_for_current_node``
    one). ``opaque``: some work could not be seen through.
    """

    __slots__ = ("opaque", "predicate", "ranges")

    def __init__(self, predicate):
        self.predicate = predicate
        self.ranges: set[tuple[int, int]] = set()
        self.opaque = False

    def note(self, kernel, backend) -> None:
        """Record what ``kernel`` references; None stands for work that cannot be seen into
        (a graph launch)."""
        if self.opaque:
            return
        ranges = None if kernel is None else referenced_ranges(kernel, backend)
        if ranges is None:
            self.opaque = True
        else:
            self.ranges.update(ranges)

    def may_write_predicate(self, backend) -> bool:
        """False only when no work of the body can have written the predicate."""
        if self.opaque:
            return True
        span = array_range(self.predicate, backend)
        if span is None:
            return True
        low, high = span
        return any(start < high and low < end for start, end in self.ranges)


def array_range(array, backend) -> tuple[int, int] | None:
    """``[low, high)`` device bytes an ``xp`` array spans, or None (empty, or host memory)."""
    if array.size == 0:
        return None
    try:
        first = backend.array_ptr(array)
    except (TypeError, ValueError):   # a host array: never the predicate
        return None
    return byte_span(first, array)


def _leaf_types(backend) -> tuple:
    """Objects that hold no device memory of their own."""
    return (type(None), bool, int, float, complex, str, bytes, slice, type(Ellipsis), type,
            types.ModuleType, np.generic, np.dtype, np.ufunc, np.ndarray, _dtype.dtype,
            type(backend.xp.add))


def referenced_ranges(kernel, backend) -> list[tuple[int, int]] | None:
    """The device byte ranges of every ``xp`` array ``kernel`` can reach through its closure,
    partial arguments, bound objects and containers; None when something cannot be seen into
    (Note [write records])."""
    arrays = referenced_arrays(kernel, backend)
    if arrays is None:
        return None
    spans = (array_range(array, backend) for array in arrays)
    return [span for span in spans if span is not None]


def referenced_arrays(kernel, backend) -> list | None:
    """Every ``xp`` array ``kernel`` can reach through its closure, partial arguments, bound
    objects and containers (host arrays of sim included); None when something cannot be seen
    into."""
    device_array = backend.xp.ndarray
    leaves = _leaf_types(backend)
    arrays: list = []
    seen: set[int] = set()
    pending = [kernel]
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if len(seen) > _MAX_OBJECTS:
            return None
        if isinstance(item, device_array):
            arrays.append(item)
        elif isinstance(item, leaves):
            continue
        elif is_tensor(item):
            pending.append(item._data)
        elif getattr(item, "tp_arguments_only", False) or getattr(
                getattr(item, "__self__", None), "tp_arguments_only", False):
            continue
        elif isinstance(item, types.FunctionType):
            pending.extend(_cell_values(item.__closure__ or ()))
            pending.extend(item.__defaults__ or ())
            pending.extend((item.__kwdefaults__ or {}).values())
        elif isinstance(item, functools.partial):
            pending.append(item.func)
            pending.extend(item.args)
            pending.extend(item.keywords.values())
        elif isinstance(item, (types.MethodType, types.BuiltinFunctionType)):
            pending.append(item.__self__)   # a bound method writes through its object
            pending.append(getattr(item, "__func__", None))
        elif isinstance(item, (tuple, list, set, frozenset)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        else:
            return None
    return arrays


def _cell_values(cells) -> list:
    values = []
    for cell in cells:
        try:
            values.append(cell.cell_contents)
        except ValueError:   # a closure variable not yet assigned
            pass
    return values
