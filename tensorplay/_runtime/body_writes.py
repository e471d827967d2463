"""Which device memory the work of an open while body touches.

Note [while predicate writes]
-----------------------------
A while body repeats while its predicate is true when the body ends, so some work in the body must
write the predicate. The classic slip is ``flag = counter < 5``: it binds the name ``flag`` to a
new tensor, the node keeps reading the old one, and the replay never ends. The capture cannot look
inside a kernel, but every tensor op hands ``_dispatch.launch`` a kernel that closes over the
arrays it reads and writes (the contract in ``_dispatch``). So while a while body is open, ``Graph``
registers the body's stream (and the streams of bodies nested in it) in
``_dispatch.body_watchers``, and each kernel launched there is scanned for the device memory it
references. The scan is conservative: an object it cannot see into (a fused kernel object, a
backend method), too many objects, or a graph replayed inside the body means "may write
anything". ``end_capture_to_conditional_node()`` refuses the body only when every piece of work
was seen through and none references the predicate's bytes. The scan uses only the backend
protocol (``xp`` and ``array_ptr``), so every backend refuses the same bodies.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from .. import _dtype
from .writes import byte_span

__all__ = ["WhileBodyWatch"]

_MAX_OBJECTS = 512   # past this many objects in one kernel, stop looking: "may write anything"


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
    (Note [while predicate writes])."""
    from .._tensor.tensor import Tensor

    device_array = backend.xp.ndarray
    leaves = _leaf_types(backend)
    ranges: list[tuple[int, int]] = []
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
            span = array_range(item, backend)
            if span is not None:
                ranges.append(span)
        elif isinstance(item, leaves):
            continue
        elif isinstance(item, Tensor):
            pending.append(item._data)
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
    return ranges


def _cell_values(cells) -> list:
    values = []
    for cell in cells:
        try:
            values.append(cell.cell_contents)
        except ValueError:   # a closure variable not yet assigned
            pass
    return values
