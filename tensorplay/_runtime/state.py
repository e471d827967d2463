"""Per-thread current device and current NATIVE stream: the one lookup every eager op makes.

State holds the backend's native stream handles, never public ``Stream`` objects: the layer
above (``accelerator/_streams.py``) finds the public Stream of a native one, not the other way
round, so an op reads its stream with one dict lookup and builds nothing.

Pitfall: the per-thread table starts empty in each thread; a device's default stream is filled
in on first use (:func:`current_native_stream`'s slow path), so a thread that never set a stream
works on the default stream, as CUDA's legacy default stream semantics say.
"""

from __future__ import annotations

import threading
from typing import Any

from .select import accelerator_backend


class _ThreadState(threading.local):
    """This thread's current device index and ``{device index: native stream}``."""

    def __init__(self) -> None:
        self.device_index = 0
        self.native: dict[int, Any] = {}


_local = _ThreadState()
_default_native: dict[int, Any] = {}


def current_device_index() -> int:
    """Index of this thread's current accelerator device (0 until set)."""
    return _local.device_index


def set_current_device_index(index: int) -> None:
    """Make ``index`` this thread's current device (and the backend's native current device)."""
    _local.device_index = index
    backend = accelerator_backend()
    if backend is not None:
        backend.set_device(index)


def default_native_stream(index: int) -> Any:
    """The backend's default stream of device ``index`` (one handle per device)."""
    native = _default_native.get(index)
    if native is None:
        native = _default_native.setdefault(
            index, accelerator_backend().default_stream(index))  # type: ignore[union-attr]
    return native


def current_native_stream(index: int) -> Any:
    """This thread's current native stream on device ``index`` (the default stream until set).
    Hot path: callers that run per op read ``_local.native[index]`` themselves and call this only
    on a ``KeyError``."""
    native = _local.native.get(index)
    if native is None:
        native = _local.native[index] = default_native_stream(index)
    return native


def set_current_native_stream(index: int, native: Any) -> None:
    """Make ``native`` current on device ``index`` for this thread and bind the backend to it."""
    _local.native[index] = native
    accelerator_backend().set_current_stream(native)  # type: ignore[union-attr]
