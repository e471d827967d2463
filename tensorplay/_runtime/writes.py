"""Write records: which memory the tensor ops of a stretch of code write into.

Note [write records]
--------------------
``tensorplay.compile`` must leave in the caller's tensors what the function wrote into them
(API.md, Compiler), yet it captures the function over private clones of the inputs. So it asks,
after the capture, which clones a captured op wrote: every op that writes into an existing tensor
(``op_`` forms and ``+=``, ``out=``, ``copy_``, ``fill_``, ``__setitem__``, ``masked_fill_``,
in-place random fills) calls :func:`note` where it checks that the tensor may be written
(``_ops.check_no_overlap``, or its own fast path). While a :func:`recording` block is open,
``note`` keeps the byte range written; a clone was written when a range overlaps it, so a write
through any view of it counts. Outside a recording a write pays one truthiness test.

Why byte ranges rather than PyTorch's version counter: tensorplay has no storage object that a
tensor shares with its views, so a counter would have to be threaded through every op that makes
a view; a byte range is known at the write and covers views by itself. Writes made outside
tensorplay's ops (through DLPack or CuPy) are not seen.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

__all__ = ["active", "byte_span", "extent", "overlaps", "note", "recording"]

_lock = threading.Lock()

#: The open recordings, each a list of extents. A tuple replaced whole, so a writer on another
#: thread iterates a consistent snapshot without taking the lock.
active: tuple = ()

Extent = tuple[Any, int, int]


def extent(tensor) -> Extent | None:
    """``(device, low, high)``: the bytes ``tensor`` spans (``high`` exclusive); None if empty."""
    data = tensor._data
    if data.size == 0:
        return None
    return (tensor._device, *byte_span(tensor.data_ptr(), data))


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
