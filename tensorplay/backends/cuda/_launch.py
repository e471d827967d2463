"""Launching a compiled kernel through the driver's ``cuLaunchKernel`` (CuPy's binding of it),
over one parameter buffer written in place (device pointers and ``long long`` counts, and
scalars of one type).

A ``cupy.RawKernel`` call converts every argument on every launch (an array to its pointer, a
NumPy scalar to its bytes) and builds the parameter table anew. A :class:`PackedLaunch` builds
the table once; a launch writes only the values that change and makes one driver call
(``benchmarks/results/eager_probe_h200.txt`` has both costs side by side). The elementwise
kernels, the single-block sum, the skinny products and softmax launch this way.

Pitfalls:

- Every parameter has an 8-byte slot. Pointers and ``long long`` counts fill theirs; scalars of
  one smaller or equal type (``scalar_format``: a ``struct`` letter such as ``"f"`` for a
  ``float``) go in the low bytes of theirs, written through :data:`Buffer`'s typed view: the
  driver reads each parameter's own size from its slot's address (little-endian hosts).
- Each thread writes its own buffer (:meth:`PackedLaunch.buffer`), so threads sharing a launcher
  never mix their values and no lock is taken; the driver copies the values when the launch is
  queued, so a buffer is free again as soon as the call returns.
- The function handle is CuPy's for the device of the current CuPy stream (tensorplay binds its
  own stream and device before every kernel); it is looked up once per stream and kept.
"""

from __future__ import annotations

import array
import threading
from typing import Any

import cupy
from cuda.bindings import driver

from ._runtime import DRIVER_SUCCESS, raise_error

__all__ = ["PackedLaunch"]

# CuPy's own Cython binding of cuLaunchKernel takes plain integers and converts them in C; it
# costs less per call than cuda-bindings' generic wrapper (``eager_probe_h200.txt``). A CuPy
# without it launches through cuda-bindings.
_cupy_launch = getattr(cupy.cuda.driver, "launchKernel", None)
_CupyDriverError: Any = getattr(cupy.cuda.driver, "CUDADriverError", RuntimeError)
_launch_kernel = driver.cuLaunchKernel
_current_stream = cupy.cuda.get_current_stream
thread_ident = threading.get_ident   #: the key of :attr:`PackedLaunch.buffers`
_CAP = 256   # streams, and threads, remembered per launcher; forgotten past this (both are few)

#: ``(values, table address, table, scalars)``: one thread's parameter buffer (the table kept
#: alive); ``scalars`` views the same bytes as the scalar type (None without ``scalar_format``):
#: slot ``i``'s scalar is ``scalars[i * 8 // size]``
Buffer = tuple[array.array, int, array.array, Any]


class PackedLaunch:
    """``count`` parameter slots of ``kernel`` (a ``cupy.RawKernel``); ``constants`` maps
    parameter positions to values that never change (written once into every buffer);
    ``scalar_format`` the ``struct`` letter of the kernel's scalar parameters, if any.

    Use::

        buffer = packed.buffers.get(thread_ident()) or packed.buffer()
        values = buffer[0]
        values[0] = x.data.ptr   # non-negative ints only
        ...
        packed(grid, block, buffer[1])
    """

    __slots__ = ("kernel", "count", "constants", "scalar_format", "buffers", "_targets")

    def __init__(self, kernel: Any, count: int, constants: dict[int, int] | None = None,
                 scalar_format: str | None = None) -> None:
        self.kernel = kernel
        self.count = count
        self.constants = dict(constants or {})
        self.scalar_format = scalar_format
        #: thread ident -> that thread's :data:`Buffer`
        self.buffers: dict[int, Buffer] = {}
        self._targets: dict[Any, tuple[Any, int]] = {}

    def buffer(self) -> Buffer:
        """This thread's buffer, made at its first launch."""
        ident = thread_ident()
        found = self.buffers.get(ident)
        if found is None:
            values = array.array("Q", [0] * self.count)
            for position, value in self.constants.items():
                values[position] = value
            start = values.buffer_info()[0]
            table = array.array("Q", [start + 8 * i for i in range(self.count)])
            scalars: Any = None
            if self.scalar_format is not None:   # a letter the stubs cannot see is a Literal
                scalars = memoryview(values).cast("B").cast(self.scalar_format)  # type: ignore[call-overload]
            if len(self.buffers) >= _CAP:
                self.buffers.clear()   # a thread still launching holds its own buffer
            found = self.buffers[ident] = (values, table.buffer_info()[0], table, scalars)
        return found

    def __call__(self, grid: int, block: int, params: int) -> None:
        """Launch ``grid`` blocks of ``block`` threads on CuPy's current stream with the
        parameter table at address ``params`` (a buffer's second item)."""
        stream = _current_stream()
        target = self._targets.get(stream) or self._target(stream)
        if _cupy_launch is not None:
            try:
                _cupy_launch(target[0], grid, 1, 1, block, 1, 1, 0, target[1], params, 0)
            except _CupyDriverError as error:
                raise_error(driver.CUresult(error.status), "cuLaunchKernel")
            return
        err = _launch_kernel(target[0], grid, 1, 1, block, 1, 1, 0, target[1], params, 0)[0]
        if err is not DRIVER_SUCCESS:
            raise_error(err, "cuLaunchKernel")

    def launch_2d(self, grid_x: int, grid_y: int, block: int, params: int) -> None:
        """:meth:`__call__` over a ``grid_x`` by ``grid_y`` grid."""
        stream = _current_stream()
        target = self._targets.get(stream) or self._target(stream)
        if _cupy_launch is not None:
            try:
                _cupy_launch(target[0], grid_x, grid_y, 1, block, 1, 1, 0, target[1], params, 0)
            except _CupyDriverError as error:
                raise_error(driver.CUresult(error.status), "cuLaunchKernel")
            return
        err = _launch_kernel(target[0], grid_x, grid_y, 1, block, 1, 1, 0, target[1], params,
                             0)[0]
        if err is not DRIVER_SUCCESS:
            raise_error(err, "cuLaunchKernel")

    def _target(self, stream: Any) -> tuple[Any, int]:
        """``(function handle, native stream handle)`` for launches on CuPy stream ``stream``:
        plain integers for CuPy's binding, a ``CUfunction`` for cuda-bindings'."""
        device = stream.device_id
        if device < 0:
            device = cupy.cuda.runtime.getDevice()
        with cupy.cuda.Device(device):
            function: Any = int(self.kernel.kernel.ptr)
        if _cupy_launch is None:
            function = driver.CUfunction(function)
        if len(self._targets) >= _CAP:
            self._targets.clear()
        target = self._targets[stream] = (function, int(stream.ptr))
        return target
