"""The cuda backend's one kernel cache, and tensorplay's own CUDA kernels (NVRTC through
``cupy.RawKernel``), compiled lazily per device.

Every kernel object the backend builds (these, the elementwise and fused-chain kernels of
``_elementwise.py``, ``_activations.py``'s erf and softmax kernels) is made once through
:func:`cached` and loaded once per device through :func:`warm`; nothing compiles at import.

- ``tp_set_conditional(handle, const bool* pred)``: sets a conditional node's handle from a
  device predicate with ``cudaGraphSetConditional`` (a device-runtime builtin the driver resolves
  when it loads the module, so no relocatable-device-code link step is needed).
- ``tp_stage(args)``: the fused staging of ``stage_and_launch``, its copy list passed by value
  (Note [fused staging] in ``_stage_node.py``).

Each kernel is compiled (and its module loaded) on a device the first time :func:`ensure` asks
for it there. Capture code calls :func:`ensure` *before* ``cudaStreamBeginCapture``: compiling
and loading a module inside a capture is slow at best and, under some capture modes, refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

import cupy
import numpy as np

from . import _cupy_bridge
from ._runtime import relaxed_capture_mode

__all__ = ["MAX_COPIES", "cached", "ensure", "function_handle", "is_warm", "launch", "warm",
           "remember", "SET_CONDITIONAL", "SET_CONDITIONAL_INDEX", "STAGE"]

MAX_COPIES = 64   #: triplets one staged launch carries (Note [fused staging])

SET_CONDITIONAL = "tp_set_conditional"
SET_CONDITIONAL_INDEX = "tp_set_conditional_index"
STAGE = "tp_stage"

_SET_CONDITIONAL_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void tp_set_conditional(cudaGraphConditionalHandle handle,
                                              const bool* pred) {
    cudaGraphSetConditional(handle, *pred ? 1u : 0u);
}

// a SWITCH node's case from an int64 index; one out of [0, 2^32 - 1) selects no case
extern "C" __global__ void tp_set_conditional_index(cudaGraphConditionalHandle handle,
                                                    const long long* index) {
    const long long value = *index;
    cudaGraphSetConditional(handle, (value < 0 || value >= 0xFFFFFFFFll)
                                        ? 0xFFFFFFFFu : (unsigned int)value);
}
"""

# The staging kernel takes its copy list BY VALUE: one struct of (count, then count triplets dst,
# src, nbytes). Its node's parameters are replaced on the executable before each staged launch
# (Note [fused staging] in ``_stage_node.py``), so no host memory is read on the device. Block
# (x, k) copies a share of triplet k: gridDim.y is the count, gridDim.x the blocks per copy.
_STAGE_SOURCE = r"""
typedef unsigned long long tp_u64;
struct tp_stage_args { tp_u64 count; tp_u64 words[3 * %(max_copies)d]; };

extern "C" __global__ void tp_stage(const tp_stage_args args) {
    const unsigned int k = blockIdx.y;
    if (k >= args.count) return;
    unsigned char* dst = (unsigned char*)args.words[3 * k];
    const unsigned char* src = (const unsigned char*)args.words[3 * k + 1];
    const tp_u64 nbytes = args.words[3 * k + 2];
    const tp_u64 start = (tp_u64)blockIdx.x * blockDim.x + threadIdx.x;
    const tp_u64 stride = (tp_u64)gridDim.x * blockDim.x;
    tp_u64 vectors = 0;
    if ((((tp_u64)dst | (tp_u64)src) & 15) == 0) {
        vectors = nbytes >> 4;
        uint4* dst4 = (uint4*)dst;
        const uint4* src4 = (const uint4*)src;
        for (tp_u64 i = start; i < vectors; i += stride) dst4[i] = src4[i];
    }
    for (tp_u64 i = (vectors << 4) + start; i < nbytes; i += stride) dst[i] = src[i];
}
""" % {"max_copies": MAX_COPIES}

_SOURCES = {SET_CONDITIONAL: _SET_CONDITIONAL_SOURCE,
            SET_CONDITIONAL_INDEX: _SET_CONDITIONAL_SOURCE, STAGE: _STAGE_SOURCE}

_cache: dict[Hashable, Any] = {}
_warm: set[tuple[Hashable, int]] = set()
_functions: dict[tuple[str, int], int] = {}
_lock = threading.RLock()   # reentrant: a warm-up may make the kernel it warms


LAUNCHES_KEPT = 1024   #: call signatures a kept-launch table holds before it starts over


def remember(table: dict, key: Hashable, launch: Any) -> None:
    """Keep a single op's ready launch for a call signature (its kernel made and warmed, its
    grid worked out), so that the next call with that signature only writes addresses and
    launches; a table of signatures that never repeat starts over past :data:`LAUNCHES_KEPT`."""
    if len(table) >= LAUNCHES_KEPT:
        table.clear()
    table[key] = launch


def cached(key: Hashable, make: Callable[[], Any] | None) -> Any:
    """The one kernel cache: the kernel object stored under ``key``, made by ``make()`` (a
    ``cupy.RawKernel``, ``ElementwiseKernel``, fused function ...) the first time (thread-safe).
    Making one compiles nothing yet: CuPy compiles and loads at first use per device."""
    kernel = _cache.get(key)
    if kernel is None:
        with _lock:
            kernel = _cache.get(key)
            if kernel is None:
                assert make is not None, f"kernel {key!r} is not cached yet"
                kernel = _cache[key] = make()
    return kernel


def is_warm(key: Hashable, device_index: int) -> bool:
    """Whether :func:`warm` already ran for ``key`` on ``device_index``."""
    return (key, device_index) in _warm


def warm(key: Hashable, device_index: int, load: Callable[[], Any]) -> Any:
    """Run ``load()`` (which compiles and loads the kernel ``key``) once per device, with the
    device current and under relaxed capture mode (loading a module inside a global-mode capture
    is refused); returns what ``load`` returned, or None when it already ran."""
    if (key, device_index) in _warm:
        return None
    with _lock, relaxed_capture_mode(), cupy.cuda.Device(device_index):
        if (key, device_index) in _warm:
            return None
        result = load()
        _warm.add((key, device_index))
    return result


def _raw_kernel(name: str) -> "cupy.RawKernel":
    return cached(name, lambda: cupy.RawKernel(_SOURCES[name], name))


def ensure(device_index: int, *names: str) -> None:
    """Compile and load ``names`` on ``device_index`` now, if not done yet (thread-safe)."""
    for name in names:
        if not is_warm(name, device_index):
            # the property compiles and loads for the current device
            # mypy cannot infer a lambda with a default argument (it binds this loop's name)
            warm(name, device_index, lambda name=name: _raw_kernel(name).kernel)  # type: ignore[misc]


def function_handle(name: str, device_index: int) -> int:
    """The ``CUfunction`` of kernel ``name`` loaded on ``device_index`` (compiled if needed), for
    launches through the driver API."""
    ensure(device_index, name)
    handle = _functions.get((name, device_index))
    if handle is None:
        with cupy.cuda.Device(device_index):
            handle = _functions[(name, device_index)] = int(_raw_kernel(name).kernel.ptr)
    return handle


def launch(name: str, stream, grid: int, block: int, args: tuple) -> None:
    """Launch kernel ``name`` on ``stream`` (recorded when the stream captures).

    CuPy's RawKernel launches on CuPy's current stream of the current device, so the stream is
    bound first (which leaves it current: callers rebind as tensorplay's current stream moves).
    """
    ensure(stream.device_index, name)
    _cupy_bridge.bind(stream)
    _raw_kernel(name)((grid,), (block,), args)


def pointer(value: int) -> np.uint64:
    """A device address as a kernel argument (8 bytes, like a pointer)."""
    return np.uint64(value)


def word(value: int) -> np.uint32:
    """An ``unsigned int`` kernel argument."""
    return np.uint32(value)
