"""Small products: ``activation(x @ w + bias)`` or ``x @ w + bias + residual`` of two small
matrices in ONE tiled kernel launched through :class:`._launch.PackedLaunch`.

Why: a product of small matrices (64 x 64 by 64 x 64 takes a quarter of a million
multiply-adds, under a microsecond of arithmetic) costs what issuing it costs. A
``cublasLtMatmul`` call with a kept plan takes about 7 us of host time on an H100 (the
library's own per-call work), while a prepacked kernel launch takes about 3 us
(``benchmarks/results/eager_layers_probe_h100_session10_final.txt``): through the backend hook
a float32 64 x 64 x 64 product took 5.7 us of host time against cuBLASLt's 9.5 on an H200, and
2.6 us of device time against 3.1 (``benchmarks/small_matmul_probe.py``). For products of at
most :data:`MAX_MULTIPLY_ADDS` multiply-adds of their dtype (and a ``k`` of at most
:data:`MAX_K`, so that no block walks a long inner dimension alone) this kernel is issued
instead, and the same kernel runs eagerly and inside captures, so a captured small product
gives the eager one's bits.

The kernel: blocks of 16 x 16 threads, each thread one element of the result; the block
stages 16 x 16 tiles of ``x`` and ``w`` in shared memory, any strides (transposed operands
included, as ``linear``'s ``x @ w.T`` has it), and applies the bias, the activation (any of
``_elementwise_source``'s unary activations) or the residual before its one store.

What it takes (:func:`plan` says, None otherwise): two 2-D operands and a C-contiguous (m, n)
result of one dtype, float16, bfloat16, float32 or float64, non-negative strides;
``m * n * k <= MAX_MULTIPLY_ADDS[dtype]`` and ``k <= MAX_K``; a residual only without an
activation.

Precision: float16 and bfloat16 accumulate in float32, float32 in float32 with fused
multiply-adds at every float32 matmul precision (TF32 and bfloat16 tensor cores are
permissions, not obligations, as in PyTorch), float64 in float64. The bias and residual are
added in the accumulator's type before the one rounding. The summation order (k ascending, one
fused multiply-add per term) is not promised to be cuBLAS's, so results may differ from a
cuBLASLt product in the last bits.
"""

from __future__ import annotations

from collections.abc import Callable

import cupy
import ml_dtypes
import numpy as np

from . import _elementwise_source as _source
from . import _kernels
from ._launch import PackedLaunch, thread_ident

__all__ = ["MAX_MULTIPLY_ADDS", "MAX_K", "ACTIVATIONS", "plan"]

_F64 = np.dtype(np.float64)
#: the most multiply-adds (m * n * k) a small product takes, per dtype: up to there the kernel
#: also takes no more device time than cuBLASLt's (float32 up to 128 x 128 x 128 on an H100 and
#: an H200; float16, bfloat16 and float64 products run on cuBLASLt's tensor cores from
#: 64 x 64 x 64 on, faster on the device, which is what a captured graph pays for)
MAX_MULTIPLY_ADDS = {np.dtype(np.float32): 1 << 21, _F64: 1 << 15,
                     np.dtype(np.float16): 1 << 15, np.dtype(ml_dtypes.bfloat16): 1 << 15}
MAX_K = 256   #: the longest inner dimension a small product takes (one block walks all of it)
#: the activations the kernel applies after the bias (None: none)
ACTIVATIONS = frozenset({None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"})
_TILE = 16

_SOURCE = """
extern "C" __global__ void NAME(
        const STORAGE* __restrict__ x, const long long x_row, const long long x_col,
        const STORAGE* __restrict__ w, const long long w_row, const long long w_col,
        const STORAGE* __restrict__ bias, const STORAGE* __restrict__ residual,
        STORAGE* __restrict__ y, const long long m, const long long n, const long long k) {
    __shared__ ACC xs[16][17];
    __shared__ ACC ws[16][17];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const long long tiles_n = (n + 15) >> 4;
    const long long row = (blockIdx.x / tiles_n) * 16 + ty;
    const long long col = (blockIdx.x % tiles_n) * 16 + tx;
    ACC a = 0;
    for (long long k0 = 0; k0 < k; k0 += 16) {
        const long long kx = k0 + tx, kw = k0 + ty;
        xs[ty][tx] = row < m && kx < k ? LOAD_X : (ACC)0;
        ws[ty][tx] = kw < k && col < n ? LOAD_W : (ACC)0;
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < 16; ++i) a = FMA(xs[ty][i], ws[i][tx], a);
        __syncthreads();
    }
    if (row < m && col < n) {
EPILOGUE
    }
}
"""


def plan(x, w, y, with_bias: bool, activation: str | None,
         with_residual: bool = False) -> Callable | None:
    """A launcher ``fn(x, w, bias, y[, residual])`` of the small-product kernel for these
    operands' layout, or None when the product is not one it takes (see the module
    docstring).

    ``bias``: a contiguous (n,) array of the operands' dtype, or None when ``with_bias`` is
    False. ``residual`` (only with ``with_residual``, which takes no activation): a C-contiguous
    array of ``y``'s dtype and element count, added before the store; it may be ``y`` itself.
    The launcher checks nothing: call it only with arrays of the layout it was planned for (the
    same shapes, strides and dtype)."""
    dtype = x.dtype
    limit = MAX_MULTIPLY_ADDS.get(dtype)
    if (limit is None or w.dtype != dtype or y.dtype != dtype or x.ndim != 2
            or w.ndim != 2 or activation not in ACTIVATIONS
            or (with_residual and activation is not None)):
        return None
    m, k = x.shape
    n = w.shape[1]
    if not (0 < m and 0 < k <= MAX_K and 0 < n and m * n * k <= limit):
        return None
    item = dtype.itemsize
    strides = x.strides + w.strides
    if not y.flags.c_contiguous or tuple(y.shape) != (m, n) or \
            any(s < 0 or s % item for s in strides):
        return None
    kernel, key = _kernel(dtype, with_bias, activation, with_residual)
    device = x.data.device_id
    if not _kernels.is_warm(key, device):
        # the property compiles and loads the module for that device
        _kernels.warm(key, device, lambda: kernel.kernel)
    grid = -(-m // _TILE) * -(-n // _TILE)
    # x, x_row, x_col, w, w_row, w_col, bias, residual, y, m, n, k: the layout written once
    x_row, x_col, w_row, w_col = (s // item for s in strides)
    packed = PackedLaunch(kernel, 12, {1: x_row, 2: x_col, 4: w_row, 5: w_col, 9: m, 10: n,
                                       11: k})
    buffers, buffer = packed.buffers, packed.buffer

    def launch(x, w, bias, y, residual=None):
        found = buffers.get(thread_ident()) or buffer()
        values = found[0]
        values[0] = x.data.ptr
        values[3] = w.data.ptr
        values[6] = 0 if bias is None else bias.data.ptr
        values[7] = 0 if residual is None else residual.data.ptr
        values[8] = y.data.ptr
        packed(grid, _TILE * _TILE, found[1])

    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def _kernel(dtype: np.dtype, with_bias: bool, activation: str | None, with_residual: bool):
    """The cached kernel of this signature and its key."""
    key = ("small", dtype, with_bias, activation, with_residual)
    kernel = _kernels._cache.get(key)
    if kernel is None:
        kernel = _kernels.cached(key, lambda: cupy.RawKernel(*_kernel_source(key)))
    return kernel, key


def _kernel_source(key: tuple) -> tuple[str, str]:
    """The CUDA source and kernel name of a small-product kernel's cache key."""
    _, dtype, with_bias, activation, with_residual = key
    name = f"tp_small_{dtype.name}_{'b' if with_bias else 'n'}_{activation or 'id'}" + \
        ("_r" if with_residual else "")
    acc = _source.compute_type(dtype)
    lines = []
    if with_bias:
        lines.append(f"a += {_source.load_expr(dtype, 'bias[col]')};")
    if activation is not None:
        compute = _F64 if dtype == _F64 else np.dtype(np.float32)
        lines.append(f"a = {_source.unary_expression(activation, compute)};")
    if with_residual:
        lines.append(f"a += {_source.load_expr(dtype, 'residual[row * n + col]')};")
    lines.append(f"y[row * n + col] = {_source.store_expr(dtype, 'a')};")
    source = _SOURCE.replace("NAME", name).replace("STORAGE", _source.storage_type(dtype)) \
        .replace("ACC", acc).replace("FMA", "fma" if acc == "double" else "fmaf") \
        .replace("LOAD_X", _source.load_expr(dtype, "x[row * x_row + kx * x_col]")) \
        .replace("LOAD_W", _source.load_expr(dtype, "w[kw * w_row + col * w_col]")) \
        .replace("EPILOGUE", "\n".join(" " * 8 + line for line in lines))
    return _source.HELPERS + source, name
