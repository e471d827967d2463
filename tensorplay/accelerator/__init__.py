"""Device-agnostic access to the accelerator chosen when tensorplay was imported.

The accelerator is ``sim`` or ``cuda`` (or none: a host-only build), chosen once from
``TENSORPLAY_ACCELERATOR``. Every function taking ``device`` accepts a device object, a spelling
such as ``"cuda:1"``, an integer index, or ``None`` for the current device.

On a host-only build: :func:`current_accelerator` is None, :func:`is_available` is False,
:func:`device_count` is 0, :func:`synchronize` and ``empty_cache`` do nothing, and every call that
needs a device raises ``RuntimeError`` saying how to get one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .._runtime import device as _device
from .._runtime.select import accelerator_backend, require_accelerator
from .._runtime import capture as _capture, state as _state
from . import _streams
from ._streams import Event, Stream
from .graphs import Graph, graph_pool_handle, is_current_stream_capturing
from .graphed import make_graphed_callables
from .memory import (
    empty_cache,
    empty_host_cache,
    get_memory_info,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from . import memory, random  # noqa: F401

__all__ = [
    "current_accelerator", "current_device_index", "device_count", "get_device_capability",
    "is_available", "set_device_index", "synchronize", "device_index", "current_stream",
    "set_stream", "Graph", "graph_pool_handle", "is_current_stream_capturing",
    "make_graphed_callables", "Stream", "Event",
    "empty_cache", "empty_host_cache", "get_memory_info", "max_memory_allocated",
    "max_memory_reserved", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats", "memory", "random",
]


def current_accelerator(check_available: bool = False) -> _device.device | None:
    """The accelerator device type selected at build time, if any.

    Returns:
        ``device("sim")`` or ``device("cuda")``; None on a host-only build, and also when
        ``check_available`` is set and :func:`is_available` is False.
    """
    backend = accelerator_backend()
    if backend is None or (check_available and not is_available()):
        return None
    return _device.device(backend.device_type)


def current_device_index() -> int:
    """Index of this thread's currently selected accelerator device.

    Raises:
        RuntimeError: on a host-only build.
    """
    require_accelerator()
    return _state.current_device_index()


def device_count() -> int:
    """Number of devices of the current accelerator; 0 without one."""
    backend = accelerator_backend()
    return 0 if backend is None else backend.device_count()


def get_device_capability(device=None) -> dict[str, Any]:
    """Capability map of an accelerator device.

    The map has ``supported_dtypes``, the set of tensorplay dtypes that can be allocated (and
    computed with) on the device; ``matmul_in_capture``, whether floating-point matrix products
    can be captured into a graph (on cuda only with nvmath-python installed: without it a
    product inside a capture raises a RuntimeError saying so); plus backend facts such as
    ``name`` and ``total_memory``.
    """
    index = _device.resolve_accelerator_index(device)
    return dict(require_accelerator().device_capability(index))


def is_available() -> bool:
    """Whether an accelerator was built and at least one of its devices is visible."""
    return device_count() > 0


def set_device_index(device) -> None:
    """Select this thread's accelerator device. Negative indices are no-ops.

    Raises:
        ValueError: for an index out of range or a device of another type.
        RuntimeError: on a host-only build (unless the index is negative).
    """
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        return
    _state.set_current_device_index(_device.resolve_accelerator_index(device))


@contextlib.contextmanager
def device_index(device) -> Iterator[None]:
    """Context manager that makes ``device`` current and restores the previous one on exit.

    ``None`` or a negative index leaves the current device alone.
    """
    if device is None or (isinstance(device, int) and not isinstance(device, bool)
                          and device < 0):
        yield
        return
    previous = current_device_index()
    set_device_index(device)
    try:
        yield
    finally:
        _state.set_current_device_index(previous)


def synchronize(device=None) -> None:
    """Wait for all work on an accelerator device to complete (a no-op on a host-only build).

    Raises:
        RuntimeError: during a capture that forbids waiting (see ``Graph``).
    """
    if accelerator_backend() is None:
        return
    _capture.wait_for_device(_device.resolve_accelerator_index(device), "synchronize()")


def current_stream(device=None) -> Stream:
    """This thread's current stream on ``device`` (its default stream until one is set)."""
    return _streams.current_stream(_device.resolve_accelerator_index(device))


def set_stream(stream: Stream) -> None:
    """Make ``stream`` current on its device for this thread (prefer ``with stream:``)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream() takes a tensorplay Stream, got {type(stream).__name__}")
    _streams.set_current_stream(stream)
