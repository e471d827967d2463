"""tensorplay's own CUDA kernels (NVRTC through ``cupy.RawKernel``), compiled lazily per device.

- ``tp_set_conditional(handle, const bool* pred)``: sets a conditional node's handle from a
  device predicate with ``cudaGraphSetConditional`` (a device-runtime builtin the driver resolves
  when it loads the module, so no relocatable-device-code link step is needed).
- ``tp_stage_fetch`` and ``tp_stage``: the fused staging of ``stage_and_launch`` (Note [fused
  staging] in ``_graphs.py``).

Each kernel is compiled (and its module loaded) on a device the first time :func:`ensure` asks
for it there. Capture code calls :func:`ensure` *before* ``cudaStreamBeginCapture``: compiling
and loading a module inside a capture is slow at best and, under some capture modes, refused.
"""

from __future__ import annotations

import threading

import cupy
import numpy as np

from . import _cupy_bridge

__all__ = ["MAX_COPIES", "STATE_WORDS", "ensure", "launch", "SET_CONDITIONAL", "STAGE_FETCH",
           "STAGE"]

MAX_COPIES = 64   #: triplets one staging slot holds (Note [fused staging])

SET_CONDITIONAL = "tp_set_conditional"
STAGE_FETCH = "tp_stage_fetch"
STAGE = "tp_stage"

_SET_CONDITIONAL_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void tp_set_conditional(cudaGraphConditionalHandle handle,
                                              const bool* pred) {
    cudaGraphSetConditional(handle, *pred ? 1u : 0u);
}
"""

# One slot of the staging ring, in uint64 words: [count, dst0, src0, nbytes0, dst1, ...]. The ring
# lives in pinned host memory (the device reads it over PCIe). ``state`` lives in device memory:
# state[0] is the launch counter, state[1] the count of this launch, state[2:] its triplets.
# tp_stage_fetch (one block) copies slot (state[0] % slots) into state, marks the slot consumed
# (count = 0), publishes the launch number to the host and advances the counter; tp_stage (the
# next node, whole grid) then copies the bytes. Only one block reads host memory, once.
_STAGE_SOURCE = r"""
typedef unsigned long long tp_u64;
#define TP_MAX_COPIES %(max_copies)d

extern "C" __global__ void tp_stage_fetch(volatile tp_u64* ring, tp_u64* state,
                                          volatile long long* consumed,
                                          unsigned int slot_words, unsigned int slots) {
    __shared__ unsigned int count;
    const tp_u64 launch = state[0];
    volatile tp_u64* slot = ring + (launch %% slots) * (tp_u64)slot_words;
    if (threadIdx.x == 0) {
        const tp_u64 words = slot[0];
        count = words > TP_MAX_COPIES ? TP_MAX_COPIES : (unsigned int)words;
    }
    __syncthreads();
    const unsigned int n = count;
    for (unsigned int i = threadIdx.x; i < 3 * n; i += blockDim.x) state[2 + i] = slot[1 + i];
    __syncthreads();
    if (threadIdx.x == 0) {
        state[1] = n;
        slot[0] = 0;
        __threadfence_system();
        *consumed = (long long)launch;
        state[0] = launch + 1;
    }
}

extern "C" __global__ void tp_stage(const tp_u64* state) {
    const unsigned int n = (unsigned int)state[1];
    if (n == 0) return;
    const tp_u64 start = (tp_u64)blockIdx.x * blockDim.x + threadIdx.x;
    const tp_u64 stride = (tp_u64)gridDim.x * blockDim.x;
    for (unsigned int k = 0; k < n; ++k) {
        unsigned char* dst = (unsigned char*)state[2 + 3 * k];
        const unsigned char* src = (const unsigned char*)state[3 + 3 * k];
        const tp_u64 nbytes = state[4 + 3 * k];
        tp_u64 vectors = 0;
        if ((((tp_u64)dst | (tp_u64)src) & 15) == 0) {
            vectors = nbytes >> 4;
            uint4* dst4 = (uint4*)dst;
            const uint4* src4 = (const uint4*)src;
            for (tp_u64 i = start; i < vectors; i += stride) dst4[i] = src4[i];
        }
        for (tp_u64 i = (vectors << 4) + start; i < nbytes; i += stride) dst[i] = src[i];
    }
}
""" % {"max_copies": MAX_COPIES}

STATE_WORDS = 2 + 3 * MAX_COPIES   #: device words of the staging state (counter, count, triplets)

_SOURCES = {SET_CONDITIONAL: _SET_CONDITIONAL_SOURCE, STAGE: _STAGE_SOURCE,
            STAGE_FETCH: _STAGE_SOURCE}

_kernels: dict[str, "cupy.RawKernel"] = {}
_loaded: set[tuple[str, int]] = set()
_lock = threading.Lock()


def _raw_kernel(name: str) -> "cupy.RawKernel":
    kernel = _kernels.get(name)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(name)
            if kernel is None:
                kernel = _kernels[name] = cupy.RawKernel(_SOURCES[name], name)
    return kernel


def ensure(device_index: int, *names: str) -> None:
    """Compile and load ``names`` on ``device_index`` now, if not done yet (thread-safe)."""
    missing = [name for name in names if (name, device_index) not in _loaded]
    if not missing:
        return
    previous = cupy.cuda.runtime.getDevice()
    try:
        if previous != device_index:
            cupy.cuda.runtime.setDevice(device_index)
        for name in missing:
            _raw_kernel(name).kernel   # the property compiles and loads for the current device
            _loaded.add((name, device_index))
    finally:
        if previous != device_index:
            cupy.cuda.runtime.setDevice(previous)


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
