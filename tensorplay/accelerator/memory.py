"""Device-agnostic memory queries for the current accelerator.

Every function targets the active accelerator backend and accepts a device object, a spelling
such as ``"cuda:1"``, an integer index, or None for the current device. Figures come from
tensorplay's caching allocator (``_runtime.allocator``), which every byte of the accelerator's
tensors — and, on cuda, of CuPy's temporaries — goes through; statistics use PyTorch's
``memory_stats`` key names (``allocated_bytes.all.current``, ``reserved_bytes.all.peak``,
``num_alloc_retries``, ``num_ooms``, ...). Memory of graph pools counts like any other.

.. note:: ``empty_cache`` returns cached, unused blocks to the device. It never releases memory a
   live graph may replay into, nor memory a live tensor uses (Note [graph pool lifetime] in
   ``tensorplay/_runtime/allocator.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .._runtime import device as _device
from ..backends import hook
from .._runtime.select import accelerator_backend, require_accelerator
from .._runtime import capture as _capture
from .._runtime.allocator import device_allocator

__all__ = ["empty_cache", "empty_host_cache", "get_memory_info", "max_memory_allocated",
           "max_memory_reserved", "memory_allocated", "memory_reserved", "memory_stats",
           "reset_accumulated_memory_stats", "reset_peak_memory_stats"]


def _allocator(device):
    return device_allocator(_device.resolve_accelerator_index(device))


def empty_cache() -> None:
    """Release every cached, unused block of every device back to the device (no-op host-only).

    .. note:: Like ``torch.cuda.empty_cache``, this waits for the device before releasing.

    Raises:
        RuntimeError: while any stream of a device captures: waiting for the device is a
            capture-unsafe call (the capture is invalidated; see ``Graph``).
    """
    backend = accelerator_backend()
    if backend is None:
        return
    indices = range(backend.device_count())
    _capture.check_capture_safe("empty_cache()", devices=indices)
    for index in indices:
        device_allocator(index).empty_cache()


def empty_host_cache() -> None:
    """Release cached pinned host memory the backend keeps for transfers (no-op where the
    backend keeps none, including a host-only build)."""
    backend = accelerator_backend()
    release = hook(backend, "empty_host_cache")
    if release is not None:
        release()


def get_memory_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of the device, as the runtime reports them."""
    index = _device.resolve_accelerator_index(device)
    free, total = require_accelerator().mem_get_info(index)
    return free, total


def memory_stats(device=None) -> "OrderedDict[str, Any]":
    """The allocator's statistics for ``device`` under PyTorch's key names."""
    return OrderedDict(sorted(_allocator(device).memory_stats().items()))


def memory_allocated(device=None) -> int:
    """Bytes currently held by live tensors (and CuPy temporaries) on ``device``."""
    return _allocator(device).memory_allocated()


def max_memory_allocated(device=None) -> int:
    """Peak of :func:`memory_allocated` since start or the last :func:`reset_peak_memory_stats`."""
    return _allocator(device).max_memory_allocated()


def memory_reserved(device=None) -> int:
    """Bytes the allocator holds from the device, cached blocks included."""
    return _allocator(device).memory_reserved()


def max_memory_reserved(device=None) -> int:
    """Peak of :func:`memory_reserved` since start or the last :func:`reset_peak_memory_stats`."""
    return _allocator(device).max_memory_reserved()


def reset_peak_memory_stats(device=None) -> None:
    """Set every ``peak`` statistic to its current value."""
    _allocator(device).reset_peak_memory_stats()


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the ``allocated``/``freed`` counters and the ``num_*`` counts."""
    _allocator(device).reset_accumulated_memory_stats()
