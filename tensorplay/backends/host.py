"""The host backend (device type ``cpu``): NumPy, synchronous, one device.

This is the array half of the protocol only (``backends.HostArrays``: ``Devices`` and ``Work``,
plus ``empty``). Host tensors are plain NumPy arrays, allocated with ``np.empty`` (the host needs
no caching allocator); kernels run at launch. Raw memory, streams, events and graphs belong to
accelerators: asking the host for one raises ``RuntimeError``, and its optional hooks read as
absent (``backends.hook`` gives None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtype import all_dtypes

__all__ = ["HostBackend", "create_backend"]


class _NotOnHost(RuntimeError, AttributeError):
    """Asked the host for an accelerator facility; also an AttributeError so that optional
    backend hooks (``backends.hook(host, "matmul")``) read as absent."""


class HostBackend:
    """The host: implements ``backends.HostArrays``; no raw memory, streams or graphs."""

    name = "cpu"
    device_type = "cpu"
    xp = np
    dlpack_device_types = frozenset({1})   #: kDLCPU (NumPy exports and imports it)

    def device_count(self) -> int:
        return 1

    def device_capability(self, index: int) -> dict[str, Any]:
        return {"name": "host CPU (NumPy)", "total_memory": None, "backend": "cpu",
                "supported_dtypes": frozenset(all_dtypes)}

    def set_device(self, index: int) -> None:
        pass

    def mem_get_info(self, index: int) -> tuple[int, int]:
        raise RuntimeError("the host backend does not report device memory")

    def empty(self, shape: tuple[int, ...], numpy_dtype: Any) -> np.ndarray:
        """A fresh host array (the host's allocation seam)."""
        return np.empty(shape, numpy_dtype)

    def launch(self, stream: Any, kernel: Callable[[], None]) -> None:
        kernel()

    def to_host(self, stream: Any, array: Any) -> np.ndarray:
        return np.array(array, copy=True)

    def from_host(self, stream: Any, array: Any, host_array: Any) -> None:
        array[...] = host_array

    def __getattr__(self, name: str) -> Any:
        raise _NotOnHost(f"the host backend ('cpu') has no {name}(): streams, events, graphs "
                           f"and raw device memory belong to an accelerator")


def create_backend() -> HostBackend:
    """The host backend (always available)."""
    return HostBackend()
