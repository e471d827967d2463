"""The host backend (device type ``cpu``): NumPy, synchronous, one device.

Host tensors are plain NumPy arrays, allocated with ``np.empty`` (the host needs no caching
allocator); kernels run at launch. Streams, events and graphs belong to accelerators: asking the
host for one raises ``RuntimeError``.
"""

from __future__ import annotations

import numpy as np

from .._dtype import all_dtypes

__all__ = ["HostBackend", "create_backend"]


class _NotOnHost(RuntimeError, AttributeError):
    """Asked the host for an accelerator facility; also an AttributeError so that optional
    backend hooks (``getattr(backend, "matmul", None)``) read as absent."""


class HostBackend:
    """The host: implements the array half of the Backend protocol; no streams or graphs."""

    name = "cpu"
    device_type = "cpu"
    xp = np

    def device_count(self) -> int:
        return 1

    def device_capability(self, index: int) -> dict:
        return {"name": "host CPU (NumPy)", "total_memory": None, "backend": "cpu",
                "supported_dtypes": frozenset(all_dtypes)}

    def set_device(self, index: int) -> None:
        pass

    def mem_get_info(self, index: int):
        raise RuntimeError("the host backend does not report device memory")

    def empty(self, shape, numpy_dtype):
        """A fresh host array (the host's allocation seam)."""
        return np.empty(shape, numpy_dtype)

    def launch(self, stream, kernel) -> None:
        kernel()

    def to_host(self, stream, array):
        return np.array(array, copy=True)

    def from_host(self, stream, array, host_array) -> None:
        array[...] = host_array

    def __getattr__(self, name):
        raise _NotOnHost(f"the host backend ('cpu') has no {name}(): streams, events, graphs "
                           f"and raw device memory belong to an accelerator")


def create_backend() -> HostBackend:
    return HostBackend()
