"""Skinny products: ``activation(x @ w + bias)`` or ``x @ w + bias + residual`` for at most 8
rows, in ONE kernel that reads the weight once.

Why: a product of a few rows (a batch of 8 through a layer, or a decode step's one token) is
latency and memory traffic, not arithmetic. On the H200 cuBLASLt's best algorithm for float32
8x512x512 takes 5.8 us of device time (the bias epilogue 6.0 us), and exact GELU needs a kernel
of its own after it (1.35 us), while the whole weight is 1 MiB, a fraction of a microsecond of
memory traffic. In a GPT-2 decode step (bfloat16, one row) cuBLASLt takes 4.4 us for the
768x2304 product on an H100 (0.8 TB/s), where the 3.5 MB weight streams in about 1.2 us. These
kernels read the weight once, keep the rows' partial sums in registers, and apply the bias and
activation (any of ``_elementwise_source``'s unary activations, exact GELU and SiLU included) or
the residual before the one store.

float32 (``benchmarks/mlp_device_probe.py`` measures both engines side by side; on the H200,
``benchmarks/results/mlp_device_probe_h200.txt``): 8x512x512 takes 5.2 us ("nn") and 3.0 us
("nt") against cuBLASLt's 5.9 us, up to 2048x2048 weights they stay ahead, and past 8 rows or
4M weight elements cuBLASLt's tiles win, hence :data:`MAX_ROWS` and :data:`MAX_WEIGHT`.

float16 and bfloat16: every thread loads the weight 16 bytes (8 halves) at a time, and the grid
is made wide enough to keep the memory busy (:func:`_nn_shape`, :func:`_nt_split`: the compiler
issues only a few of a thread's loads ahead of the arithmetic that waits for them, so the bytes
in flight grow with the warps in flight). With at most 8 rows a product does at most 8
multiply-adds per 2-byte weight element, so a kernel that streams the weight at bandwidth is as
fast as any at every size; :data:`MAX_WEIGHT` only bounds it where that is unmeasured (GPT-2
XL's LM head, 1600 x 50257 = 80M elements, is within it). The "nn" kernel gives each thread 8
adjacent columns and a slice of k (blocks of 8 to 64 columns and 256 to 1024 threads); the "nt"
kernel gives each output column one to eight warps whose lanes read the weight's row 8 halves
apart. They accumulate in float32 and round once, when storing.

What they take (:func:`plan` says, None otherwise):

- one dtype for ``x``, ``w``, ``y`` (and the bias and residual): float32, float16 or bfloat16;
  ``x`` (m, k) with ``m <= MAX_ROWS`` and unit stride along k; ``w`` (k, n) with
  ``k * n <= MAX_WEIGHT[dtype]``; ``y`` a C-contiguous (m, n) array; no negative strides.
- float32: ``x``'s row stride a multiple of 4 elements and its start 16-byte aligned; ``w``
  either with unit stride along n ("nn": ``x @ w``) or with unit stride along k, a row stride
  that is a multiple of 4 and a 16-byte aligned start ("nt": ``x @ w.T`` of a row-major (n, k)
  weight, as ``linear`` has it); ``k`` a multiple of 4.
- float16/bfloat16 "nn": ``w`` with unit stride along n, a row stride that is a multiple of 8
  elements and a 16-byte aligned start (any ``x`` row stride, any k; n need not be a multiple
  of 8: the last 8 columns are loaded one by one).
- float16/bfloat16 "nt": ``w`` with unit stride along k, a row stride that is a multiple of 8
  elements and a 16-byte aligned start; ``x``'s row stride a multiple of 8 and its start
  16-byte aligned; ``k`` a multiple of 8.
- a residual (``with_residual``) only without an activation: ``y = x @ w + bias + residual``.

Precision: float32 products compute in float32 with fused multiply-adds at every float32 matmul
precision (TF32 and bfloat16 tensor cores are permissions, not obligations, as in PyTorch), so
results are as accurate as "highest"; half products accumulate in float32 (as cuBLASLt's do)
and add the bias and residual in float32 before rounding. The summation order differs from
cuBLAS's.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Template
from typing import Any

import cupy
import ml_dtypes
import numpy as np

from . import _elementwise_source as _source
from . import _kernels
from ._launch import PackedLaunch, thread_ident

__all__ = ["MAX_ROWS", "MAX_WEIGHT", "ACTIVATIONS", "plan"]

_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)

MAX_ROWS = 8   #: the most rows of ``x`` a skinny product takes
#: the most weight elements (k * n) a skinny product takes, per dtype (see the module docstring)
MAX_WEIGHT = {_F32: 1 << 22, _F16: 1 << 27, _BF16: 1 << 27}
#: the activations the kernels apply after the bias (None: none)
ACTIVATIONS = frozenset({None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"})

_THREADS = 256
_NN_COLS = 16                        # output columns per block of the float32 "nn" kernel
_NN_SLICES = _THREADS // _NN_COLS    # k slices per block (their partial sums meet in shared)
_NT_COLS = _THREADS // 32            # one warp per output column in the "nt" kernels
_CHUNK = 8                           # unrolled steps of k whose weight loads are issued together
_BLOCKS = 128   # blocks the half "nn" kernel's column tiles should make (see _nn_shape)
_WARPS = 4096   # warps the half kernels' grids should make (an H100 runs 132 x 64 at once)

# Every kernel is specialised on the row count and the inner size k (layer widths are few), so the
# loop over k unrolls: a thread issues the weight loads of CHUNK steps back to back and waits for
# memory once per chunk, not once per step (for float32 the latency, not the bytes, bounds them).
_NN_SOURCE = r"""
#define STEPS ((KDIM + 4 * SLICES - 1) / (4 * SLICES))
extern "C" __global__ void __launch_bounds__(256) NAME(
        const float* __restrict__ x, const long long ldx, const float* __restrict__ w,
        const long long ldw, const float* __restrict__ bias, const float* residual,
        float* __restrict__ y, const long long n) {
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
            y[r * n + out_col] = ACTIVATION RESIDUAL;
        }
    }
}
"""

_NT_SOURCE = r"""
#define STEPS ((KDIM + 127) / 128)
extern "C" __global__ void __launch_bounds__(256) NAME(
        const float* __restrict__ x, const long long ldx, const float* __restrict__ w,
        const long long ldw, const float* __restrict__ bias, const float* residual,
        float* __restrict__ y, const long long n) {
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
            y[r * n + col] = ACTIVATION RESIDUAL;
        }
    }
}
"""

# The half kernels: x, w, bias, residual and y of one 16-bit dtype (``unsigned short`` storage,
# converted by HELPERS). Parameters as the float32 kernels': x, ldx, w, ldw, bias, residual, y, n.
# ``residual`` may be ``y`` itself: each element is read by the thread that then writes it.
_HALF_COMMON = r"""
$helpers
static constexpr int ROWS = $rows;
static constexpr int KDIM = $k;
static constexpr int CHUNK = $chunk;

__device__ __forceinline__ float tp_ld(const unsigned short h) { return $load; }
__device__ __forceinline__ unsigned short tp_st(const float f) { return $store; }

// the 8 halves of one 16-byte load as floats (element 2i is word i's low half: little-endian)
__device__ __forceinline__ void tp_unpack(const uint4 u, float (&f)[8]) {
    const unsigned int words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = tp_ld((unsigned short)(words[i] & 0xffffu));
        f[2 * i + 1] = tp_ld((unsigned short)(words[i] >> 16));
    }
}
"""

# Thread t of a block of THREADS owns the 8 columns of group t % GROUPS (one 16-byte load per row
# of k) and the rows t / GROUPS + i * SLICES of k. The lanes of a warp that share a group sum
# their values with shuffles, then the warps' sums meet in shared memory.
_HALF_NN_SOURCE = r"""
static constexpr int GROUPS = $groups;
static constexpr int THREADS = $threads;
static constexpr int WARPS = THREADS / 32;
static constexpr int COLS = 8 * GROUPS;
static constexpr int SLICES = THREADS / GROUPS;
static constexpr int STEPS = (KDIM + SLICES - 1) / SLICES;

// acc[r * 8 + j] += x[r, kk] * w[kk, j] over this thread's rows kk of k. FULL: the 8 columns
// exist (one 16-byte load a row); else only the first `width`, loaded one by one.
template <bool FULL>
__device__ __forceinline__ void tp_rows(const unsigned short* __restrict__ x, const long long ldx,
                                        const unsigned short* __restrict__ w, const long long ldw,
                                        const int width, const int slice,
                                        float (&acc)[ROWS * 8]) {
    const unsigned short* __restrict__ ws = w + slice * ldw;
    const long long stride = SLICES * ldw;
#pragma unroll 1
    for (int first = 0; first < STEPS; first += CHUNK) {
        uint4 u[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int kk = slice + (first + i) * SLICES;
            u[i] = make_uint4(0u, 0u, 0u, 0u);
            if (kk < KDIM) {
                const unsigned short* p = ws + (first + i) * stride;
                if constexpr (FULL) {
                    u[i] = __ldg(reinterpret_cast<const uint4*>(p));
                } else {
                    unsigned int h[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        h[j] = (j < width) ? (unsigned int)__ldg(p + j) : 0u;
                    u[i] = make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16),
                                      h[4] | (h[5] << 16), h[6] | (h[7] << 16));
                }
            }
        }
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int kk = slice + (first + i) * SLICES;
            if (kk < KDIM) {
                float wf[8];
                tp_unpack(u[i], wf);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const float xv = tp_ld(__ldg(x + r * ldx + kk));
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[r * 8 + j] = fmaf(xv, wf[j], acc[r * 8 + j]);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) $name(
        const unsigned short* __restrict__ x, const long long ldx,
        const unsigned short* __restrict__ w, const long long ldw,
        const unsigned short* __restrict__ bias, const unsigned short* residual,
        unsigned short* y, const long long n) {
    __shared__ float partial[WARPS][ROWS][COLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int group = threadIdx.x % GROUPS, slice = threadIdx.x / GROUPS;
    const long long col0 = ((long long)blockIdx.x * GROUPS + group) * 8;
    float v[ROWS * 8];
#pragma unroll
    for (int i = 0; i < ROWS * 8; ++i) v[i] = 0.0f;
    if (col0 + 8 <= n) {
        tp_rows<true>(x, ldx, w + col0, ldw, 8, slice, v);
    } else if (col0 < n) {
        tp_rows<false>(x, ldx, w + col0, ldw, (int)(n - col0), slice, v);
    }
    int base = 0;          // this lane's v[i] ends as the warp's sum of value base + i
    bool writer = true;    // one lane of those holding equal sums stores them
$reduce
    if (writer) {
#pragma unroll
        for (int i = 0; i < $left; ++i) {
            const int index = base + i;
            partial[warp][index / 8][8 * group + index % 8] = v[i];
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < ROWS * COLS; t += THREADS) {
        const int r = t / COLS, c = t % COLS;
        const long long col = (long long)blockIdx.x * COLS + c;
        if (col < n) {
            float a = 0.0f;
#pragma unroll
            for (int s = 0; s < WARPS; ++s) a += partial[s][r][c];
$epilogue
        }
    }
}
"""

# SPLIT warps per output column (COLS columns per block of 8 warps): lane l of the column's warp
# p reads halves 8 * l + 256 * (p + SPLIT * i) of the column's weight row, and the rows of x at
# the same k (16 bytes each). With SPLIT > 1 the warps' sums meet in shared memory.
_HALF_NT_SOURCE = r"""
static constexpr int SPLIT = $split;
static constexpr int COLS = 8 / SPLIT;
static constexpr int STEPS = (KDIM + 255) / 256;
static constexpr int WARP_STEPS = (STEPS + SPLIT - 1) / SPLIT;

extern "C" __global__ void __launch_bounds__(256) $name(
        const unsigned short* __restrict__ x, const long long ldx,
        const unsigned short* __restrict__ w, const long long ldw,
        const unsigned short* __restrict__ bias, const unsigned short* residual,
        unsigned short* y, const long long n) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int part = warp / COLS;
    const long long column = (long long)blockIdx.x * COLS + warp % COLS;
    if constexpr (SPLIT == 1) {
        if (column >= n) return;   // the whole warp: no barrier below
    }
    float v[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) v[r] = 0.0f;
    if (column < n) {
        // in 16-byte units: this warp's step i is wv[32 * SPLIT * i], row r's x beside it at
        // xv[r * ldx / 8 + 32 * SPLIT * i]
        const uint4* __restrict__ wv =
            reinterpret_cast<const uint4*>(w + column * ldw) + lane + 32 * part;
        const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(x) + lane + 32 * part;
        const long long ldxv = ldx / 8;
#pragma unroll 1
        for (int first = 0; first < WARP_STEPS; first += CHUNK) {
            uint4 u[CHUNK];
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                const int k0 = 8 * lane + (part + (first + i) * SPLIT) * 256;
                u[i] = (k0 < KDIM) ? __ldg(wv + 32 * SPLIT * (first + i))
                                   : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) {
                const int k0 = 8 * lane + (part + (first + i) * SPLIT) * 256;
                if (k0 < KDIM) {
                    float wf[8];
                    tp_unpack(u[i], wf);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        float xf[8];
                        tp_unpack(__ldg(xv + r * ldxv + 32 * SPLIT * (first + i)), xf);
#pragma unroll
                        for (int j = 0; j < 8; ++j) v[r] = fmaf(xf[j], wf[j], v[r]);
                    }
                }
            }
        }
    }
    int base = 0;          // this lane's v[i] ends as the warp's sum of row base + i
    bool writer = true;    // one lane of those holding equal sums stores them
$reduce
    if constexpr (SPLIT == 1) {
        if (writer) {
            const long long col = column;
#pragma unroll
            for (int i = 0; i < $left; ++i) {
                const int r = base + i;
                float a = v[i];
$epilogue
            }
        }
    } else {
        __shared__ float partial[SPLIT][ROWS][COLS];
        if (writer) {
#pragma unroll
            for (int i = 0; i < $left; ++i) partial[part][base + i][warp % COLS] = v[i];
        }
        __syncthreads();
        if (threadIdx.x < ROWS * COLS) {
            const int r = threadIdx.x / COLS, c = threadIdx.x % COLS;
            const long long col = (long long)blockIdx.x * COLS + c;
            if (col < n) {
                float a = 0.0f;
#pragma unroll
                for (int p = 0; p < SPLIT; ++p) a += partial[p][r][c];
$epilogue
            }
        }
    }
}
"""


def _reduce_source(count: int, lowest: int) -> tuple[str, int]:
    """C statements that sum ``float v[count]`` over the lanes of a warp that differ only in
    lane bits ``lowest`` to 16 (powers of two), and the number of values each lane is left with.

    While the count is even, a shuffle step halves it: the lanes with the step's bit keep the
    upper half of the values, their partners the lower half, and each adds what its partner
    sends (``count / 2`` shuffles instead of ``count``); ``base`` grows by the half a lane keeps.
    An odd count is summed whole (every lane then holds the same sums, and those with the bit
    stop being ``writer``). At the end the writers' values ``v[i]`` stand for the values
    ``base + i``, each exactly once among the lanes that differ in those bits."""
    lines = []
    offset = 16
    while offset >= lowest:
        if count % 2 == 0:
            half = count // 2
            lines.append(f"    {{   // lanes with bit {offset} keep values [{half}, {count})")
            lines.append(f"        const bool hi = (lane & {offset}) != 0;")
            for i in range(half):
                lines.append(f"        {{ const float send = hi ? v[{i}] : v[{i + half}];")
                lines.append(f"          const float keep = hi ? v[{i + half}] : v[{i}];")
                lines.append(f"          v[{i}] = keep + __shfl_xor_sync(0xffffffffu, send, "
                             f"{offset}); }}")
            lines.append(f"        if (hi) base += {half};")
            lines.append("    }")
            count = half
        else:
            for i in range(count):
                lines.append(f"    v[{i}] += __shfl_xor_sync(0xffffffffu, v[{i}], {offset});")
            lines.append(f"    if (lane & {offset}) writer = false;")
        offset //= 2
    return "\n".join(lines), count


def _aligned(array) -> bool:
    return array.data.ptr % 16 == 0


def _nn_shape(rows: int, k: int, n: int) -> tuple[int, int]:
    """``(groups, threads)`` of the half "nn" kernel: the most 8-column groups per block (up to
    8: a 128-byte line of each weight row per block) that still give :data:`_BLOCKS` blocks, at
    least 1; then the fewest threads a block (256 to 1024, fewer with more rows: their partial
    sums take the registers) that give :data:`_WARPS` warps, without more k slices than k.

    Why so many: the compiler issues only a few of a thread's loads ahead of the arithmetic that
    waits for them, so the bytes in flight, hence the bandwidth, grow with the warps in flight;
    fewer columns a block read less of each line, but keep every multiprocessor streaming."""
    groups = 1
    for wide in (8, 4, 2):
        if -(-n // (8 * wide)) >= _BLOCKS:
            groups = wide
            break
    tiles = -(-n // (8 * groups))
    most = 1024 if rows <= 2 else 512 if rows <= 4 else 256
    threads = 256
    while threads < most and tiles * threads // 32 < _WARPS and 2 * threads <= k * groups:
        threads *= 2
    return groups, threads


def _nt_split(k: int, n: int) -> int:
    """The warps per output column of the half "nt" kernel: 1, or more (up to 8, each with at
    least one 256-element step of k) until the grid has :data:`_WARPS` warps (see
    :func:`_nn_shape`)."""
    steps = -(-k // 256)
    split = 1
    while split < 8 and n * split < _WARPS and 2 * split <= steps:
        split *= 2
    return split


def _chunk(rows: int, steps: int, threads: int, values: int) -> int:
    """Steps of k whose 16-byte weight loads a half kernel's thread issues together: up to 16
    (8 with more than 2 rows), and no more than the registers that ``threads`` a block leave
    beside a thread's ``values`` partial sums (4 a load, about 24 for the rest)."""
    budget = min(255, 65536 // threads)
    return max(1, min(steps, 16 if rows <= 2 else 8, (budget - values - 24) // 4))


def plan(x, w, y, with_bias: bool, activation: str | None,
         with_residual: bool = False) -> Callable | None:
    """A launcher ``fn(x, w, bias, y[, residual])`` of one skinny kernel for these operands'
    layout, or None when the product is not one the kernels take (see the module docstring).

    ``bias``: a contiguous (n,) array of the operands' dtype, or None when ``with_bias`` is
    False. ``residual`` (only with ``with_residual``, which takes no activation): a C-contiguous
    array of ``y``'s dtype and element count, added before the store; it may be ``y`` itself.
    The launcher checks nothing: call it only with arrays of the layout it was planned for (the
    same shapes, strides, dtype and 16-byte alignments)."""
    dtype = x.dtype
    limit = MAX_WEIGHT.get(dtype)
    if (limit is None or w.dtype != dtype or y.dtype != dtype or x.ndim != 2 or w.ndim != 2
            or activation not in ACTIVATIONS or (with_residual and activation is not None)):
        return None
    m, k = x.shape
    n = w.shape[1]
    if not (0 < m <= MAX_ROWS and k > 0 and 0 < n and k * n <= limit):
        return None
    if not y.flags.c_contiguous or tuple(y.shape) != (m, n) or min(x.strides + w.strides) < 0:
        return None
    if dtype == _F32:
        found = _float32_layout(x, w, m, k, n)
    else:
        found = _half_layout(x, w, m, k, n)
    if found is None:
        return None
    form, ldx, ldw, shape = found
    kernel, key = _kernel(dtype, form, m, k, shape, with_bias, activation, with_residual)
    device = x.data.device_id
    if not _kernels.is_warm(key, device):
        # the property compiles and loads the module for that device
        _kernels.warm(key, device, lambda: kernel.kernel)
    block = _THREADS
    if shape is None:
        cols = _NN_COLS if form == "nn" else _NT_COLS
    elif form == "nn":
        cols, block = 8 * shape[0], shape[1]
    else:
        cols = _NT_COLS // shape
    grid = -(-n // cols)
    # x, ldx, w, ldw, bias, residual, y, n: the plan's own launcher, its strides and width
    # written once
    packed = PackedLaunch(kernel, 8, {1: ldx, 3: ldw, 7: n})
    buffers, buffer = packed.buffers, packed.buffer

    def launch(x, w, bias, y, residual=None):
        found = buffers.get(thread_ident()) or buffer()
        values = found[0]
        values[0] = x.data.ptr
        values[2] = w.data.ptr
        values[4] = 0 if bias is None else bias.data.ptr
        values[5] = 0 if residual is None else residual.data.ptr
        values[6] = y.data.ptr
        packed(grid, block, found[1])

    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def _float32_layout(x, w, m: int, k: int, n: int) -> tuple[str, int, int, None] | None:
    """``(form, ldx, ldw, None)`` of a float32 product the kernels take, else None."""
    item = 4
    if k % 4:
        return None
    if x.strides[1] != item and k > 1 or x.strides[0] % 16 or not _aligned(x):
        return None
    if w.strides[1] == item or n == 1:
        form, ldw = "nn", w.strides[0] // item
    elif w.strides[0] == item and w.strides[1] % 16 == 0 and _aligned(w):
        form, ldw = "nt", w.strides[1] // item
    else:
        return None
    if form == "nn" and w.strides[0] % item:
        return None
    return form, x.strides[0] // item, ldw, None


def _half_layout(x, w, m: int, k: int, n: int) -> tuple[str, int, int, Any] | None:
    """``(form, ldx, ldw, shape)`` of a float16/bfloat16 product the kernels take, else None
    (``shape``: :func:`_nn_shape`'s or :func:`_nt_split`'s answer):
    the 16-byte weight loads need a 16-byte aligned weight with a row stride of whole 16 bytes,
    and the "nt" kernel's 16-byte loads of x the same of x (and k a multiple of 8)."""
    item = 2
    if x.strides[1] != item and k > 1:
        return None
    ldx = x.strides[0] // item if m > 1 else 0   # one row: its stride is never used
    if (w.strides[1] == item or n == 1) and w.strides[0] % 16 == 0 and _aligned(w):
        return "nn", ldx, w.strides[0] // item, _nn_shape(m, k, n)
    if (w.strides[0] == item and (w.strides[1] % 16 == 0 or n == 1) and _aligned(w)
            and k % 8 == 0 and (m == 1 or x.strides[0] % 16 == 0) and _aligned(x)):
        return "nt", ldx, (w.strides[1] // item if n > 1 else 0), _nt_split(k, n)
    return None


def _kernel(dtype: np.dtype, form: str, rows: int, k: int, shape, with_bias: bool,
            activation: str | None, with_residual: bool):
    """The cached kernel of this signature and its key (``shape``: None for float32)."""
    key = ("skinny", dtype, form, rows, k, shape, with_bias, activation, with_residual)
    kernel = _kernels._cache.get(key)
    if kernel is None:
        kernel = _kernels.cached(key, lambda: cupy.RawKernel(*_kernel_source(key)))
    return kernel, key


def _kernel_source(key: tuple) -> tuple[str, str]:
    """The CUDA source and kernel name of a skinny kernel's cache key (see :func:`_kernel`)."""
    _, dtype, form, rows, k, shape, with_bias, activation, with_residual = key
    suffix = f"{rows}_{k}_{'b' if with_bias else 'n'}_{activation or 'id'}" + \
        ("_r" if with_residual else "")
    expression = "a" if activation is None else _source.unary_expression(activation, _F32)
    if dtype == _F32:
        name = f"tp_skinny_{form}_{suffix}"
        column = "out_col" if form == "nn" else "col"
        source = (_NN_SOURCE if form == "nn" else _NT_SOURCE) \
            .replace("NAME", name).replace("ROWS", str(rows)).replace("CHUNK", str(_CHUNK)) \
            .replace("KDIM", str(k)) \
            .replace("SLICES", str(_NN_SLICES)).replace("COLS", str(_NN_COLS if form == "nn"
                                                                     else _NT_COLS)) \
            .replace("BIAS", f"a += bias[{column}];" if with_bias else "") \
            .replace("ACTIVATION", f"({expression})") \
            .replace("RESIDUAL", f"+ residual[r * n + {column}]" if with_residual else "")
        return source, name
    tag = "bf16" if dtype == _BF16 else "f16"
    values: dict[str, Any] = {}
    if form == "nn":
        groups, threads = shape
        name = f"tp_skinny_{tag}_nn{8 * groups}x{threads}_{suffix}"
        steps = -(-k // (threads // groups))
        chunk = _chunk(rows, steps, threads, 8 * rows)
        reduce, left = _reduce_source(8 * rows, groups)
        template, indent = _HALF_NN_SOURCE, 12
        values.update(groups=groups, threads=threads)
    else:
        name = f"tp_skinny_{tag}_nt{shape}_{suffix}"
        steps = -(-k // (256 * shape))
        chunk = _chunk(rows, steps, _THREADS, rows)
        reduce, left = _reduce_source(rows, 1)
        template, indent = _HALF_NT_SOURCE, 16
        values.update(split=shape)
    epilogue = []
    if with_bias:
        epilogue.append("a += tp_ld(bias[col]);")
    if activation is not None:
        epilogue.append(f"a = {expression};")
    if with_residual:
        epilogue.append("a += tp_ld(residual[r * n + col]);")
    epilogue.append("y[r * n + col] = tp_st(a);")
    values.update(helpers=_source.HELPERS, rows=rows, k=k, chunk=chunk, name=name,
                  load=_source.load_expr(dtype, "h"), store=_source.store_expr(dtype, "f"),
                  reduce=reduce, left=left,
                  epilogue="\n".join(" " * indent + line for line in epilogue))
    return Template(_HALF_COMMON + template).substitute(values), name
