"""Capture-safe ``matmul`` and a one-kernel ``erf`` for the cuda backend.

Why this module exists: CuPy refuses cuBLAS while a stream captures ("calling cuBLAS API during
stream capture is currently unsupported"), so ``cupy.matmul`` cannot appear inside a tensorplay
graph. :func:`matmul` calls ``cupy.matmul`` (cuBLAS, fast) when the current CuPy stream is not
capturing, and otherwise launches tensorplay's own NVRTC GEMM (``tp_matmul_{e,f,d}``): a
shared-memory tiled kernel over arbitrary element strides, so transposed and broadcast operands
need no copies and ``out`` is written in place. It allocates nothing itself (temporaries, when
needed, come from CuPy's allocator, which tensorplay routes into the graph's pool), and it never
synchronizes the host.

:func:`erf` is one elementwise kernel (``cupyx.scipy.special.erf`` for float32/float64, an
``ElementwiseKernel`` over CUDA's ``erff`` for float16), instead of the ~40 ops the generic
composition in ``_combine.py`` launches.

Nothing here compiles at import: each GEMM is compiled at its first use per dtype (NVRTC through
``cupy.RawKernel``, with CuPy's on-disk cache) and loaded at its first use per device, the load
under relaxed capture mode (loading a module inside a global-mode capture is refused).
:func:`ensure` does both ahead of a capture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy
import numpy as np
from cuda.bindings import runtime

from . import _kernels
from ._runtime import is_capturing as _stream_is_capturing

__all__ = ["matmul", "erf", "ensure", "is_capturing", "GEMM_SOURCE", "TILE"]

TILE = 32   #: output tile edge (and k-slice depth) of the GEMM; a 16x16 block computes 2x2 each
_THREADS = 16
_BATCH_DIMS = 3       # batch dims the kernel walks itself; more are looped over here
_GRID_LIMIT = 65535   # gridDim.y and gridDim.z; the kernel strides over the rest

# One source, specialised per dtype by three macros: T (storage), ACC (accumulator: float for
# half and float, double for double), LOAD/STORE (half goes through PTX conversions, so the
# source needs no cuda_fp16.h and compiles under plain NVRTC). Operand tiles are staged in shared
# memory as ACC, k-major, padded to TILE + 1 against bank conflicts. The loader maps consecutive
# threads along whichever operand axis has unit stride (a_k_fast / b_n_fast), so row-major and
# transposed operands both load coalesced. Strides are in elements and signed (0 = broadcast).
GEMM_SOURCE = r"""
#define TP_TILE %(tile)d
#define TP_THREADS %(threads)d
typedef long long tp_i64;

__device__ __forceinline__ float tp_load_e(const unsigned short* p) {
    float f; unsigned short h = *p;
    asm("cvt.f32.f16 %%0, %%1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ void tp_store_e(unsigned short* p, float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %%0, %%1;" : "=h"(h) : "f"(f));
    *p = h;
}
__device__ __forceinline__ float tp_load_f(const float* p) { return *p; }
__device__ __forceinline__ void tp_store_f(float* p, float v) { *p = v; }
__device__ __forceinline__ double tp_load_d(const double* p) { return *p; }
__device__ __forceinline__ void tp_store_d(double* p, double v) { *p = v; }

#define TP_GEMM(NAME, T, ACC, LOAD, STORE)                                                    \
extern "C" __global__ void __launch_bounds__(TP_THREADS * TP_THREADS)                         \
NAME(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,                     \
     tp_i64 m, tp_i64 n, tp_i64 k, tp_i64 d0, tp_i64 d1, tp_i64 d2,                           \
     tp_i64 sa0, tp_i64 sa1, tp_i64 sa2, tp_i64 sam, tp_i64 sak,                              \
     tp_i64 sb0, tp_i64 sb1, tp_i64 sb2, tp_i64 sbk, tp_i64 sbn,                              \
     tp_i64 sc0, tp_i64 sc1, tp_i64 sc2, tp_i64 scm, tp_i64 scn,                              \
     int a_k_fast, int b_n_fast) {                                                            \
    __shared__ ACC as[TP_TILE][TP_TILE + 1];                                                  \
    __shared__ ACC bs[TP_TILE][TP_TILE + 1];                                                  \
    const int tx = threadIdx.x, ty = threadIdx.y;                                             \
    const int tid = ty * TP_THREADS + tx;                                                     \
    const int half = TP_TILE / 2;                                                             \
    const tp_i64 batch = d0 * d1 * d2;                                                        \
    const tp_i64 col0 = (tp_i64)blockIdx.x * TP_TILE;                                         \
    for (tp_i64 z = blockIdx.z; z < batch; z += gridDim.z) {                                  \
        const tp_i64 i2 = z %% d2, rest = z / d2, i1 = rest %% d1, i0 = rest / d1;             \
        const T* ab = a + i0 * sa0 + i1 * sa1 + i2 * sa2;                                     \
        const T* bb = b + i0 * sb0 + i1 * sb1 + i2 * sb2;                                     \
        T* cb = c + i0 * sc0 + i1 * sc1 + i2 * sc2;                                           \
        for (tp_i64 row0 = (tp_i64)blockIdx.y * TP_TILE; row0 < m;                            \
             row0 += (tp_i64)gridDim.y * TP_TILE) {                                           \
            ACC acc00 = 0, acc01 = 0, acc10 = 0, acc11 = 0;                                   \
            for (tp_i64 k0 = 0; k0 < k; k0 += TP_TILE) {                                      \
                for (int l = tid; l < TP_TILE * TP_TILE; l += TP_THREADS * TP_THREADS) {      \
                    const int hi = l / TP_TILE, lo = l %% TP_TILE;                             \
                    int r = a_k_fast ? hi : lo, kk = a_k_fast ? lo : hi;                      \
                    tp_i64 gr = row0 + r, gk = k0 + kk;                                       \
                    as[kk][r] = (gr < m && gk < k) ? (ACC)LOAD(ab + gr * sam + gk * sak)      \
                                                   : (ACC)0;                                  \
                    const int cc = b_n_fast ? lo : hi;                                        \
                    kk = b_n_fast ? hi : lo;                                                  \
                    const tp_i64 gc = col0 + cc;                                              \
                    gk = k0 + kk;                                                             \
                    bs[kk][cc] = (gc < n && gk < k) ? (ACC)LOAD(bb + gk * sbk + gc * sbn)     \
                                                    : (ACC)0;                                 \
                }                                                                             \
                __syncthreads();                                                              \
                _Pragma("unroll")                                                             \
                for (int kk = 0; kk < TP_TILE; ++kk) {                                        \
                    const ACC a0 = as[kk][ty], a1 = as[kk][ty + half];                        \
                    const ACC b0 = bs[kk][tx], b1 = bs[kk][tx + half];                        \
                    acc00 += a0 * b0; acc01 += a0 * b1;                                       \
                    acc10 += a1 * b0; acc11 += a1 * b1;                                       \
                }                                                                             \
                __syncthreads();                                                              \
            }                                                                                 \
            const tp_i64 r0 = row0 + ty, r1 = r0 + half, c0 = col0 + tx, c1 = c0 + half;      \
            if (r0 < m && c0 < n) STORE(cb + r0 * scm + c0 * scn, acc00);                     \
            if (r0 < m && c1 < n) STORE(cb + r0 * scm + c1 * scn, acc01);                     \
            if (r1 < m && c0 < n) STORE(cb + r1 * scm + c0 * scn, acc10);                     \
            if (r1 < m && c1 < n) STORE(cb + r1 * scm + c1 * scn, acc11);                     \
        }                                                                                     \
    }                                                                                         \
}

TP_GEMM(tp_matmul_e, unsigned short, float, tp_load_e, tp_store_e)
TP_GEMM(tp_matmul_f, float, float, tp_load_f, tp_store_f)
TP_GEMM(tp_matmul_d, double, double, tp_load_d, tp_store_d)
""" % {"tile": TILE, "threads": _THREADS}

_GEMM_DTYPES = {np.dtype(np.float16): "e", np.dtype(np.float32): "f",
                np.dtype(np.float64): "d"}

_cupy_stream_is_capturing: Callable[[int], int] | None = getattr(
    cupy.cuda.runtime, "streamIsCapturing", None)

# -- capture detection and kernels ----------------------------------------------------------------
def is_capturing(stream=None) -> bool:
    """Whether CuPy's current stream (or ``stream``) is capturing: one cudaStreamIsCapturing.

    The legacy NULL stream while another stream captures in global mode makes CUDA answer with
    an error rather than a status; that reads as "not capturing", so the caller's own CuPy call
    then reports the real problem (work on the legacy stream invalidates that capture).
    """
    ptr = (stream or cupy.cuda.get_current_stream()).ptr
    if _cupy_stream_is_capturing is not None:
        try:   # CuPy's Cython binding: a fraction of a cuda-bindings call with its handle
            return _cupy_stream_is_capturing(ptr) != 0
        except Exception:  # noqa: BLE001 - the legacy stream's implicit-capture error
            pass
    return _stream_is_capturing(runtime.cudaStream_t(int(ptr)), ptr == 0)


def _gemm(code: str, device_index: int, capturing: bool) -> "cupy.RawKernel":
    """The GEMM for dtype ``code``, compiled and loaded on ``device_index`` (the current one)."""
    name = f"tp_matmul_{code}"
    kernel = _kernels.cached(name, lambda: cupy.RawKernel(GEMM_SOURCE, name))
    if not _kernels.is_warm(name, device_index):
        _kernels.warm(name, device_index, lambda: kernel.kernel)   # compiles, then loads
    return kernel


def ensure(device_index: int, dtypes=tuple(_GEMM_DTYPES)) -> None:
    """Compile and load the capture-time GEMM for ``dtypes`` on ``device_index`` now.

    Optional: :func:`matmul` does this itself at first use (under relaxed capture mode when it
    captures). Calling it before a capture keeps NVRTC time out of the capture.

    Raises:
        TypeError: a dtype without a capture-time GEMM (only float16/32/64 have one).
    """
    with cupy.cuda.Device(device_index):
        for dtype in dtypes:
            code = _GEMM_DTYPES.get(np.dtype(dtype))
            if code is None:
                raise TypeError(f"ensure: no capture-time matmul kernel for dtype "
                                f"{np.dtype(dtype)}; valid: float16, float32, float64")
            _gemm(code, device_index, is_capturing())


# -- matmul ---------------------------------------------------------------------------------------
def matmul(a, b, out=None):
    """``numpy.matmul(a, b, out=out)`` for CuPy arrays, also while the stream captures.

    Not capturing: ``cupy.matmul`` (cuBLAS). Capturing: tensorplay's GEMM for float16, float32
    and float64 (float16 accumulates in float32, float32 in float32, float64 in float64).

    Args:
        a: CuPy array ``(..., m, k)`` or ``(k,)``.
        b: CuPy array ``(..., k, n)`` or ``(k,)``; batch dims broadcast against ``a``'s.
        out: optional CuPy array of the result's shape (any strides); written in place.

    Returns:
        ``out`` when given, else a new C-contiguous array (from CuPy's allocator).

    Raises:
        ValueError: 0-d operands, mismatched inner sizes, batch dims that do not broadcast, an
            ``out`` of the wrong shape, or arrays on different devices (capture path).
        TypeError: a non-CuPy operand (capture path), or an ``out`` dtype the result cannot be
            cast to under ``same_kind``.
        RuntimeError: capturing with a dtype that has no capture-time GEMM (complex, integer,
            bool): its matmul needs cuBLAS or CuPy's integer path, neither capturable.

    .. note:: Mixed float dtypes are promoted (as numpy does) while capturing, through CuPy
       casts that allocate from the graph's pool. An ``out`` that overlaps ``a`` or ``b`` is
       computed into a temporary first, then copied.
    """
    if not is_capturing():
        return cupy.matmul(a, b, out=out)
    return _captured_matmul(a, b, out)


def _captured_matmul(a, b, out):
    for label, array in (("a", a), ("b", b), ("out", out)):
        if array is not None and not isinstance(array, cupy.ndarray):
            raise TypeError(f"matmul during capture needs CuPy arrays, got {label} of type "
                            f"{type(array).__name__}")
    dtype = np.result_type(a.dtype, b.dtype)
    code = _GEMM_DTYPES.get(dtype)
    if code is None:
        raise RuntimeError(f"matmul of {dtype} is not capturable on cuda (CuPy's {dtype} matmul "
                           f"uses cuBLAS or host-side code); only float16, float32 and float64 "
                           f"matmul can be captured. Run it outside the graph or cast first")
    device = a.device.id
    if b.device.id != device or (out is not None and out.device.id != device):
        raise ValueError(f"matmul: operands on different devices (a on cuda:{device}, b on "
                         f"cuda:{b.device.id}" + (f", out on cuda:{out.device.id})"
                                                    if out is not None else ")"))
    a, b = (x if x.dtype == dtype else x.astype(dtype) for x in (a, b))
    shape, a3, b3 = _operands(a, b)
    if out is None:
        result = cupy.empty(shape, dtype)
        target = result
    else:
        if tuple(out.shape) != shape:
            raise ValueError(f"matmul: out has shape {tuple(out.shape)} but the product of "
                             f"{tuple(a.shape)} and {tuple(b.shape)} has shape {shape}")
        result = out
        clash = out.dtype != dtype or _overlaps(out, a) or _overlaps(out, b)
        target = cupy.empty(shape, dtype) if clash else out
    with cupy.cuda.Device(device):
        _launch(_gemm(code, device, True), a3, b3, _as_3d_view(target, a.ndim, b.ndim))
    if target is not result:
        try:
            cupy.copyto(result, target, casting="same_kind")
        except TypeError as exc:
            raise TypeError(f"matmul: cannot write the {dtype} result into out of dtype "
                            f"{out.dtype} ({exc})") from None
    return result


def _operands(a, b):
    """Result shape, and a and b as >= 2-D views (1-D operands as numpy promotes them)."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must be at least 1-D, got shapes {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not match "
                         f"in the inner dimension ({a2.shape[-1]} != {b2.shape[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise ValueError(f"matmul: the batch dims of {tuple(a.shape)} and {tuple(b.shape)} do "
                         f"not broadcast ({a2.shape[:-2]} vs {b2.shape[:-2]})") from None
    shape = batch + ((a2.shape[-2],) if a.ndim > 1 else ()) + ((b2.shape[-1],) if b.ndim > 1
                                                                else ())
    return shape, a2, b2


def _as_3d_view(target, a_ndim: int, b_ndim: int):
    """``target`` with the dims a 1-D operand removed put back (size-1 views, no copies)."""
    if a_ndim == 1:
        target = cupy.expand_dims(target, -1 if b_ndim == 1 else -2)
    if b_ndim == 1:
        target = cupy.expand_dims(target, -1)
    return target


def _extent(x) -> tuple[int, int]:
    lo = hi = x.data.ptr
    for size, stride in zip(x.shape, x.strides):
        if size == 0:
            return x.data.ptr, x.data.ptr
        lo += min(0, stride * (size - 1))
        hi += max(0, stride * (size - 1))
    return lo, hi + x.itemsize


def _overlaps(x, y) -> bool:
    (xlo, xhi), (ylo, yhi) = _extent(x), _extent(y)
    return xlo < yhi and ylo < xhi


def _batch_strides(x, batch: tuple[int, ...]) -> list[int]:
    """Element strides of ``x``'s batch dims against the broadcast ``batch`` (0 = broadcast)."""
    lead = len(batch) - (x.ndim - 2)
    strides = [0] * lead
    for size, stride, full in zip(x.shape[:-2], x.strides[:-2], batch[lead:]):
        strides.append(stride // x.itemsize if size == full and size != 1 else 0)
    return strides


def _collapse(batch, a_s, b_s, c_s):
    """Drop size-1 batch dims and merge neighbours that step uniformly in all three arrays."""
    dims = [[size, sa, sb, sc] for size, sa, sb, sc in zip(batch, a_s, b_s, c_s) if size != 1]
    merged: list[list[int]] = []
    for dim in dims:
        if merged and all(merged[-1][j] == dim[j] * dim[0] for j in (1, 2, 3)):
            merged[-1] = [merged[-1][0] * dim[0], dim[1], dim[2], dim[3]]
        else:
            merged.append(dim)
    return merged


def _launch(kernel, a, b, c) -> None:
    """Launch ``kernel`` over a (..., m, k), b (..., k, n) into c (batch..., m, n)."""
    batch, (m, n), k = tuple(c.shape[:-2]), c.shape[-2:], a.shape[-1]
    if m == 0 or n == 0 or 0 in batch:
        return
    item = c.itemsize
    dims = _collapse(batch, _batch_strides(a, batch), _batch_strides(b, batch),
                     [s // item for s in c.strides[:-2]])
    outer, inner = dims[:-_BATCH_DIMS] if len(dims) > _BATCH_DIMS else [], dims[-_BATCH_DIMS:]
    inner = [[1, 0, 0, 0]] * (_BATCH_DIMS - len(inner)) + inner
    count = int(np.prod([d[0] for d in inner]))
    grid = ((n + TILE - 1) // TILE, min((m + TILE - 1) // TILE, _GRID_LIMIT),
            min(count, _GRID_LIMIT))
    sam, sak = (s // item for s in a.strides[-2:])
    sbk, sbn = (s // item for s in b.strides[-2:])
    scm, scn = (s // item for s in c.strides[-2:])
    i64 = np.int64
    tail = ([i64(m), i64(n), i64(k)] + [i64(d[0]) for d in inner]
            + [i64(d[1]) for d in inner] + [i64(sam), i64(sak)]
            + [i64(d[2]) for d in inner] + [i64(sbk), i64(sbn)]
            + [i64(d[3]) for d in inner] + [i64(scm), i64(scn)]
            + [np.int32(sak == 1 or k == 1), np.int32(sbn == 1 or n == 1)])
    for index in np.ndindex(*[d[0] for d in outer]):
        offsets = [sum(i * d[j] for i, d in zip(index, outer)) * item for j in (1, 2, 3)]
        pointers: list[Any] = [np.uint64(x.data.ptr + off) for x, off in zip((a, b, c), offsets)]
        kernel(grid, (_THREADS, _THREADS), tuple(pointers + tail))


# -- erf ------------------------------------------------------------------------------------------
_ERF_SOURCES = {np.dtype(np.float16): "y = (T)erff((float)x)",
                np.dtype(np.float32): "y = erff(x)", np.dtype(np.float64): "y = erf(x)"}
def _make_erf(dtype: np.dtype):
    """One elementwise kernel for ``dtype``: cupyx's erf ufunc where it keeps the dtype
    (float32, float64; its float16 loop returns float64), else an ElementwiseKernel."""
    kernel: Any = None
    if dtype != np.float16:
        try:
            # untyped cupyx: mypy sees a second definition of ``kernel``
            from cupyx.scipy.special import erf as kernel  # type: ignore[no-redef]
        except Exception:  # noqa: BLE001 - cupyx missing or broken: use our own
            kernel = None
    if kernel is None:
        kernel = cupy.ElementwiseKernel("T x", "T y", _ERF_SOURCES[dtype], f"tp_erf_{dtype.char}")
    return kernel


def erf(x):
    """The error function of a float16/float32/float64 CuPy array: one elementwise kernel.

    Returns:
        A new array of ``x``'s dtype and shape (from CuPy's allocator, so capture-safe). float16
        is computed in float32 (``erff``) and rounded once.

    Raises:
        TypeError: ``x`` is not a CuPy array of float16, float32 or float64.

    .. note:: The first call per dtype and device compiles and loads the kernel; during a capture
       that load runs under relaxed capture mode.
    """
    dtype: Any = getattr(x, "dtype", None)
    if not isinstance(x, cupy.ndarray) or dtype not in _ERF_SOURCES:
        kind = f"a CuPy array of {dtype}" if isinstance(x, cupy.ndarray) else type(x).__name__
        raise TypeError(f"erf needs a CuPy array of float16, float32 or float64, got {kind}")
    key = f"tp_erf_{dtype.char}"
    if _kernels.is_warm(key, x.device.id):
        return _kernels.cached(key, None)(x)   # made by the warm-up below
    # the first call per device imports, compiles and loads under relaxed capture mode
    y = _kernels.warm(key, x.device.id, lambda: _kernels.cached(key, lambda: _make_erf(dtype))(x))
    return _kernels.cached(key, None)(x) if y is None else y   # None: another thread warmed it
