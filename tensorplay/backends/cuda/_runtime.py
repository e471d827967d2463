"""The one checker every cuda-bindings call goes through (runtime and driver API alike), the one
capture-status query, and small runtime helpers.

cuda-bindings returns ``(err, *values)`` tuples instead of raising; ``err`` is a ``cudaError_t``
(runtime API) or a ``CUresult`` (driver API). :func:`check` turns them into values or into an
exception that names the call and the CUDA error:

- ``cudaErrorMemoryAllocation`` / ``CUDA_ERROR_OUT_OF_MEMORY`` becomes ``MemoryError`` (after
  clearing the runtime's last error), so that ``tensorplay._runtime.allocator`` can empty its
  cache, retry once, and then raise ``tensorplay.OutOfMemoryError`` with its figures;
- every other error becomes :class:`CudaRuntimeError` (a ``RuntimeError``):
  ``"cudaMalloc failed: cudaErrorInvalidValue (invalid argument)"``.

The success path is one or two identity comparisons with the success enum members (cuda-bindings
hands out enum singletons) and a tuple index; no string work happens unless the call failed.
"""

from __future__ import annotations

import contextlib

from cuda.bindings import driver, runtime

__all__ = ["CudaRuntimeError", "check", "error_text", "raise_error", "SUCCESS", "DRIVER_SUCCESS",
           "NOT_READY", "device_guard", "relaxed_capture_mode", "current_device", "is_capturing"]

SUCCESS = runtime.cudaError_t.cudaSuccess
DRIVER_SUCCESS = driver.CUresult.CUDA_SUCCESS
NOT_READY = runtime.cudaError_t.cudaErrorNotReady
MEMORY_ALLOCATION = runtime.cudaError_t.cudaErrorMemoryAllocation
_RELAXED = runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed


_CAPTURE_NONE = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone
_CAPTURE_IMPLICIT = runtime.cudaError_t.cudaErrorStreamCaptureImplicit


class CudaRuntimeError(RuntimeError):
    """A failed CUDA runtime or driver call. ``error`` is the ``cudaError_t`` or ``CUresult``;
    ``call`` the call's name."""

    def __init__(self, message: str, error, call: str):
        super().__init__(message)
        self.error = error
        self.call = call


def error_text(err) -> tuple[str, str]:
    """(name, description) of a ``cudaError_t`` or ``CUresult``, e.g. ("cudaErrorInvalidValue",
    "invalid argument"); falls back to the number when the runtime cannot name it."""
    try:
        if isinstance(err, driver.CUresult):
            name = driver.cuGetErrorName(err)[1]
            description = driver.cuGetErrorString(err)[1]
        else:
            name = runtime.cudaGetErrorName(err)[1]
            description = runtime.cudaGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        description = description.decode() if isinstance(description, bytes) else str(description)
    except Exception:  # noqa: BLE001 - naming must never hide the original failure
        code = _code(err)
        return f"cudaError {code}", "unknown CUDA error"
    return name, description


def _code(err) -> int:
    try:
        return int(err)
    except (TypeError, ValueError):
        return -1


def check(result, call_name: str):
    """Unwrap a cuda-bindings result tuple.

    Args:
        result: ``(err, *values)`` as every cuda-bindings runtime or driver function returns.
        call_name: the runtime function's name, for the message (``"cudaMalloc"``).

    Returns:
        None for ``(err,)``, the value for ``(err, value)``, else the tuple of values.

    Raises:
        MemoryError: out of device memory (the runtime's last error is cleared).
        CudaRuntimeError: any other error, naming the call and the error.
    """
    err = result[0]
    if err is not SUCCESS and err is not DRIVER_SUCCESS:
        raise_error(err, call_name)
    count = len(result)
    if count == 2:
        return result[1]
    if count == 1:
        return None
    return result[1:]


def raise_error(err, call_name: str, hint: str = ""):
    """Raise the exception :func:`check` raises for ``err``. Returns only when ``err`` is in
    fact success (hot paths compare by identity first and call this when that fails)."""
    if _code(err) == 0:
        return
    name, description = error_text(err)
    try:
        runtime.cudaGetLastError()   # clear the (non-sticky) error so later calls start clean
    except Exception:  # noqa: BLE001
        pass
    message = f"{call_name} failed: {name} ({description})"
    if hint:
        message += f"; {hint}"
    if err is MEMORY_ALLOCATION or _code(err) == _code(MEMORY_ALLOCATION):   # = out of memory
        raise MemoryError(message)
    raise CudaRuntimeError(message, err, call_name)


def is_capturing(handle, is_default: bool = False) -> bool:
    """Whether the stream ``handle`` (a ``cudaStream_t``) records into a capture: one
    cudaStreamIsCapturing. An invalidated capture still counts (it must be ended, as in CUDA).

    The legacy NULL stream (``is_default``) while another stream captures in global mode makes
    CUDA answer with cudaErrorStreamCaptureImplicit rather than a status; that reads as "not
    capturing" (the legacy stream would join another stream's capture: it is not one itself).
    """
    result = runtime.cudaStreamIsCapturing(handle)
    if result[0] is SUCCESS:
        return result[1] != _CAPTURE_NONE
    if is_default and result[0] is _CAPTURE_IMPLICIT:
        return False
    return check(result, "cudaStreamIsCapturing") != _CAPTURE_NONE


def current_device() -> int:
    """The calling thread's current CUDA device (cudaGetDevice)."""
    return check(runtime.cudaGetDevice(), "cudaGetDevice")


class device_guard:
    """``with device_guard(i):`` makes device ``i`` current and restores the previous one.

    A class with ``__slots__`` rather than a generator context manager: it is entered on every
    malloc/free, event and stream creation.
    """

    __slots__ = ("index", "previous")

    def __init__(self, index: int):
        self.index = index
        self.previous = -1

    def __enter__(self) -> "device_guard":
        self.previous = check(runtime.cudaGetDevice(), "cudaGetDevice")
        if self.previous != self.index:
            check(runtime.cudaSetDevice(self.index), "cudaSetDevice")
        return self

    def __exit__(self, *exc_info) -> None:
        if self.previous != self.index and self.previous >= 0:
            check(runtime.cudaSetDevice(self.previous), "cudaSetDevice")


@contextlib.contextmanager
def relaxed_capture_mode(active: bool = True):
    """Let this thread make calls a capture would otherwise forbid (cudaMalloc, cudaFree,
    synchronizing a stream that is not capturing), as PyTorch's allocator does around cudaMalloc.

    ``cudaThreadExchangeStreamCaptureMode`` swaps this thread's mode to relaxed and back. With
    ``active`` False (no capture in flight) it does nothing, which keeps it free when unused.
    """
    if not active:
        yield
        return
    previous = check(runtime.cudaThreadExchangeStreamCaptureMode(_RELAXED),
                     "cudaThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(runtime.cudaThreadExchangeStreamCaptureMode(previous),
              "cudaThreadExchangeStreamCaptureMode")
