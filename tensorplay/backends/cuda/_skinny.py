"""Skinny float32 products: ``activation(x @ w + bias)`` for at most 8 rows, in ONE kernel.

Why: a product of a few rows (a batch of 8 through a 512-wide layer) is pure latency for
cuBLASLt: on the H200 its best algorithm for 8x512x512 takes 5.8 us of device time (the bias
epilogue 6.0 us), and exact GELU needs a kernel of its own after it (1.35 us), while the whole
weight is 1 MiB, a fraction of a microsecond of memory traffic. These kernels read the weight
once, keep the rows' partial sums in registers, and apply the bias and activation (any of
``_elementwise_source``'s unary activations, exact GELU and SiLU included) before the one store.
``benchmarks/mlp_device_probe.py`` measures both engines side by side; on the H200
(``benchmarks/results/mlp_device_probe_h200.txt``) 8x512x512 takes 5.2 us ("nn") and 3.0 us
("nt") against cuBLASLt's 5.9 us, up to 2048x2048 weights they stay ahead, and past 8 rows or
4M weight elements cuBLASLt's tiles win, hence :data:`MAX_ROWS` and :data:`MAX_WEIGHT`.

What they take (:func:`plan` says, None otherwise): float32 operands; ``x`` (m, k) with
``m <= MAX_ROWS``, unit stride along k, a row stride that is a multiple of 4 elements and a
16-byte aligned start; ``w`` (k, n) either with unit stride along n ("nn": ``x @ w``) or with unit
stride along k, a row stride that is a multiple of 4 and a 16-byte aligned start ("nt":
``x @ w.T`` of a row-major (n, k) weight, as ``linear`` has it); ``k`` a multiple of 4 and
``k * n <= MAX_WEIGHT`` (past that, memory bandwidth rules and cuBLASLt's tiles are as fast);
``y`` a C-contiguous (m, n) array. They compute in float32 with fused multiply-adds at every
float32 matmul precision (TF32 and bfloat16 tensor cores are permissions, not obligations, as in
PyTorch), so results are as accurate as "highest"; the summation order differs from cuBLAS's.
"""

from __future__ import annotations

from collections.abc import Callable

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels
from ._launch import PackedLaunch, thread_ident

__all__ = ["MAX_ROWS", "MAX_WEIGHT", "ACTIVATIONS", "plan"]

MAX_ROWS = 8           #: the most rows of ``x`` a skinny product takes
MAX_WEIGHT = 1 << 22   #: the most weight elements (k * n) a skinny product takes
#: the activations the kernels apply after the bias (None: none)
ACTIVATIONS = frozenset({None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"})

_F32 = np.dtype(np.float32)
_THREADS = 256
_NN_COLS = 16                        # output columns per block of the "nn" kernel
_NN_SLICES = _THREADS // _NN_COLS    # k slices per block (their partial sums meet in shared)
_NT_COLS = _THREADS // 32            # one warp per output column in the "nt" kernel
_CHUNK = 8                           # unrolled steps of k whose weight loads are issued together

# Both kernels are specialised on the row count and the inner size k (layer widths are few), so
# the loop over k unrolls: a thread issues the weight loads of CHUNK steps back to back and waits
# for memory once per chunk, not once per step (the latency, not the bytes, bounds these).
_NN_SOURCE = r"""
#define STEPS ((KDIM + 4 * SLICES - 1) / (4 * SLICES))
extern "C" __global__ void __launch_bounds__(256) NAME(
        const float* __restrict__ x, const long long ldx, const float* __restrict__ w,
        const long long ldw, const float* __restrict__ bias, float* __restrict__ y,
        const long long n) {
    __shared__ float partial[SLICES][ROWS][COLS];
    const int c = threadIdx.x % COLS, slice = threadIdx.x / COLS;
    const long long col = (long long)blockIdx.x * COLS + c;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
    if (col < n) {
#pragma unroll 1
        for (int first = 0; first < STEPS; first += CHUNK) {
            float wv[CHUNK][4];
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                const int k0 = 4 * slice + (first + i) * 4 * SLICES;
                const float* wp = w + (long long)k0 * ldw + col;
#pragma unroll
                for (int j = 0; j < 4; ++j) wv[i][j] = (k0 < KDIM) ? __ldg(wp + j * ldw) : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                const int k0 = 4 * slice + (first + i) * 4 * SLICES;
                if (k0 < KDIM) {
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        const float4 v = __ldg(reinterpret_cast<const float4*>(x + r * ldx + k0));
                        acc[r] = fmaf(v.x, wv[i][0], acc[r]);
                        acc[r] = fmaf(v.y, wv[i][1], acc[r]);
                        acc[r] = fmaf(v.z, wv[i][2], acc[r]);
                        acc[r] = fmaf(v.w, wv[i][3], acc[r]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) partial[slice][r][c] = acc[r];
    __syncthreads();
    for (int t = threadIdx.x; t < ROWS * COLS; t += blockDim.x) {
        const int r = t / COLS, cc = t % COLS;
        const long long out_col = (long long)blockIdx.x * COLS + cc;
        if (out_col < n) {
            float a = 0.0f;
#pragma unroll
            for (int s = 0; s < SLICES; ++s) a += partial[s][r][cc];
            BIAS
            y[r * n + out_col] = ACTIVATION;
        }
    }
}
"""

_NT_SOURCE = r"""
#define STEPS ((KDIM + 127) / 128)
extern "C" __global__ void __launch_bounds__(256) NAME(
        const float* __restrict__ x, const long long ldx, const float* __restrict__ w,
        const long long ldw, const float* __restrict__ bias, float* __restrict__ y,
        const long long n) {
    const int lane = threadIdx.x % 32;
    const long long col = (long long)blockIdx.x * COLS + threadIdx.x / 32;
    if (col >= n) return;   // the whole warp: no barrier below
    const float* wr = w + col * ldw;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
#pragma unroll 1
    for (int first = 0; first < STEPS; first += CHUNK) {
        float4 u[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int k0 = 4 * lane + (first + i) * 128;
            u[i] = (k0 < KDIM) ? __ldg(reinterpret_cast<const float4*>(wr + k0))
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int k0 = 4 * lane + (first + i) * 128;
            if (k0 < KDIM) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(x + r * ldx + k0));
                    acc[r] = fmaf(v.x, u[i].x, acc[r]);
                    acc[r] = fmaf(v.y, u[i].y, acc[r]);
                    acc[r] = fmaf(v.z, u[i].z, acc[r]);
                    acc[r] = fmaf(v.w, u[i].w, acc[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (lane == r) {
            float a = acc[r];
            BIAS
            y[r * n + col] = ACTIVATION;
        }
    }
}
"""


def _aligned(array) -> bool:
    return array.data.ptr % 16 == 0


def plan(x, w, y, with_bias: bool, activation: str | None) -> Callable | None:
    """A launcher ``fn(x, w, bias, y)`` of one skinny kernel for these operands' layout (the
    bias a contiguous float32 (n,) array, or None when ``with_bias`` is False), or None when
    the product is not one the kernels take (see the module docstring). The launcher checks
    nothing: call it only with arrays of the layout it was planned for."""
    if (x.dtype != _F32 or w.dtype != _F32 or y.dtype != _F32 or x.ndim != 2 or w.ndim != 2
            or activation not in ACTIVATIONS):
        return None
    m, k = x.shape
    n = w.shape[1]
    if not (0 < m <= MAX_ROWS and k > 0 and k % 4 == 0 and 0 < n and k * n <= MAX_WEIGHT):
        return None
    item = 4
    if x.strides[1] != item and k > 1 or x.strides[0] % 16 or not _aligned(x):
        return None
    if not y.flags.c_contiguous or tuple(y.shape) != (m, n):
        return None
    if w.strides[1] == item or n == 1:
        form, ldw = "nn", w.strides[0] // item
    elif w.strides[0] == item and w.strides[1] % 16 == 0 and _aligned(w):
        form, ldw = "nt", w.strides[1] // item
    else:
        return None
    if form == "nn" and w.strides[0] % item:
        return None
    kernel = _kernel(form, m, k, with_bias, activation)
    cols = _NN_COLS if form == "nn" else _NT_COLS
    grid = -(-n // cols)
    block = _THREADS
    # x, ldx, w, ldw, bias, y, n: the plan's own launcher, its strides and width written once
    packed = PackedLaunch(kernel, 7, {1: x.strides[0] // item, 3: ldw, 6: n})
    buffers, buffer = packed.buffers, packed.buffer

    def launch(x, w, bias, y):
        found = buffers.get(thread_ident()) or buffer()
        values = found[0]
        values[0] = x.data.ptr
        values[2] = w.data.ptr
        values[4] = 0 if bias is None else bias.data.ptr
        values[5] = y.data.ptr
        packed(grid, block, found[1])

    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def _kernel(form: str, rows: int, k: int, with_bias: bool, activation: str | None):
    key = ("skinny", form, rows, k, with_bias, activation)
    kernel = _kernels._cache.get(key)
    if kernel is None:
        kernel = _kernels.cached(key, lambda: _make(key, form, rows, k, with_bias, activation))
    return kernel


def _make(key, form: str, rows: int, k: int, with_bias: bool, activation: str | None):
    name = f"tp_skinny_{form}_{rows}_{k}_{'b' if with_bias else 'n'}_{activation or 'id'}"
    expression = "a" if activation is None else _source.unary_expression(activation, _F32)
    source = (_NN_SOURCE if form == "nn" else _NT_SOURCE) \
        .replace("NAME", name).replace("ROWS", str(rows)).replace("CHUNK", str(_CHUNK)) \
        .replace("KDIM", str(k)) \
        .replace("SLICES", str(_NN_SLICES)).replace("COLS", str(_NN_COLS if form == "nn"
                                                                 else _NT_COLS)) \
        .replace("BIAS", "a += bias[out_col];" if with_bias and form == "nn" else
                 "a += bias[col];" if with_bias else "") \
        .replace("ACTIVATION", f"({expression})")
    kernel = cupy.RawKernel(source, name)
    # the property compiles and loads the module for the current device
    _kernels.warm(key, cupy.cuda.runtime.getDevice(), lambda: kernel.kernel)
    return kernel
