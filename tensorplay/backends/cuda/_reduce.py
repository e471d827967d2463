"""Reductions over one axis of a C-contiguous float array, raw kernels of the cuda backend
launched through :class:`._launch.PackedLaunch` (the ``reduce_axis`` hook).

``reduce_axis(op, shape, axis, dtype, acc, out)`` gives a launcher ``fn(x, out_array)`` of
``op`` ("sum", "mean", "amax", "amin"; "argmax" and "argmin", a block per row of the last
dimension, NaN first and ties to the lowest index) over

- the last dimension (:func:`rows_source`): a warp per row for rows of at most 4096 elements,
  else a block of 512 threads per row; each thread streams its share, eight loads of up to 16
  bytes in flight, and the warp (then the block's warps) combines by shuffles. One launch.
- the first dimension of an array of two or more (:func:`columns_source`): 32 columns (of 16
  bytes each where aligned) by 8 row lanes a block, the rows split over ``gridDim.y`` blocks
  (about a thousand blocks in all, at least 64 rows each). With one split the block writes the
  result; with more, each writes its partial results (in the accumulation dtype, into a
  workspace from CuPy's allocator) and a second launch combines them in order. The order of
  every combination is fixed: the results do not depend on timing.

float16 and bfloat16 load into float, float64 into double; sums and means accumulate in the
dtype the caller passes (``acc``: float32 or float64; float64 for float64), amax and amin work
in the compute type and propagate NaN (as NumPy's and CuPy's do); each result is rounded once
into ``out`` (a float64 accumulation into a 16-bit result goes through float). Kernels are made
once per signature in the one kernel cache (``_kernels``) and compiled and loaded on first use
per device under relaxed capture mode. Nothing here synchronizes the host.
"""

from __future__ import annotations

import math
from typing import Callable

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["reduce_axis", "REDUCE_OPS", "rows_source", "columns_source"]

REDUCE_OPS = frozenset(("sum", "mean", "amax", "amin"))
ARG_OPS = frozenset(("argmax", "argmin"))   # the last dimension only, into int64
_I64 = np.dtype(np.int64)
_ARG_THREADS = 1024
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FLOATS = frozenset((np.dtype(np.float16), np.dtype("bfloat16"), _F32, _F64))
_CTYPE = {_F32: "float", _F64: "double"}
_GRID_CAP = 1 << 20         # blocks of a row launch; each strides over the rows past it
_ROWS_PER_BLOCK = 4         # warps (rows) a block of the warp-per-row kernel runs
_WARP_ROW_LIMIT = 4096      # the longest row one warp reduces; longer rows get a block
_BLOCK_THREADS = 512        # threads of the block-per-row kernel
_UNROLL = 8                 # loads a row-kernel thread has in flight
_LONG_ROW = 1 << 16         # rows longer than this ...
_FEW_ROWS = 512             # ... and fewer than this many are left to CuPy (one block a row)
_MIN_COLUMNS = 32           # narrower column reductions are left to CuPy (idle lanes)
_COLUMN_BLOCKS = 1024       # about this many blocks per column launch ...
_COLUMN_MIN_ROWS = 64       # ... each of at least this many rows (eight a row lane)

# op -> (identity, combine(a, b)) over the compute C type {T}; the extremes propagate NaN
_OPS = {"sum": ("({T})0", "a + b"), "mean": ("({T})0", "a + b"),
        "amax": ("-{inf}", "(a != a || a >= b) ? a : b"),
        "amin": ("{inf}", "(a != a || a <= b) ? a : b")}
_INF = {"float": "__int_as_float(0x7f800000)",
        "double": "__longlong_as_double(0x7ff0000000000000LL)"}


def _prelude(op: str, dtype: np.dtype, acc: np.dtype, width: int) -> tuple[str, str, str]:
    """(the helpers, the identity, the compute C type) of ``op``'s kernels."""
    ctype = _CTYPE[acc]
    identity, combine = _OPS[op]
    identity = identity.format(T=ctype, inf=_INF[ctype])
    text = "\n".join([
        _source.HELPERS,
        f"struct alignas({dtype.itemsize * width}) tp_vec {{ "
        f"{_source.storage_type(dtype)} s[{width}]; }};",
        f"constexpr int W = {width};",
        f"__device__ __forceinline__ {ctype} tp_combine(const {ctype} a, const {ctype} b) {{",
        f"    return {combine.format(T=ctype)};",
        "}",
        f"__device__ __forceinline__ {ctype} tp_warp_reduce({ctype} v) {{",
        "    for (int o = 16; o > 0; o >>= 1)",
        "        v = tp_combine(v, __shfl_xor_sync(0xffffffffu, v, o));",
        "    return v;",
        "}",
    ])
    return text, identity, ctype


def _finish(op: str, dtype: np.dtype, ctype: str, value: str, count: str) -> str:
    """The store of a combined ``value`` (a mean divides by ``count`` first)."""
    if op == "mean":
        value = f"{value} / ({ctype}){count}"
    return _source.store_expr(dtype, value)


def rows_name(op: str, dtype, acc, warp: bool, width: int) -> str:
    """The ``extern "C"`` name of :func:`rows_source`'s kernel."""
    return (f"tp_reduce_rows_{op}_{np.dtype(dtype).name}_{np.dtype(acc).name}_"
            f"{'warp' if warp else 'block'}{width}")


def rows_source(op: str, dtype, acc, warp: bool, width: int) -> str:
    """The CUDA source of ``op`` over the last dimension: ``NAME(const STORAGE* x, STORAGE* out,
    long long length, long long rows)`` writes ``out[r]`` for each of the ``rows`` rows of
    ``length`` elements. ``warp``: a warp per row (blocks of any multiple of 32 threads), else
    a block per row (at most 512 threads). ``acc``: the accumulation dtype of a sum or mean,
    the compute dtype of an extreme. Pitfall: ``width > 1`` needs ``x`` on a 16-byte boundary
    and ``length`` a multiple of ``width`` (not checked)."""
    dtype, acc = np.dtype(dtype), np.dtype(acc)
    prelude, identity, ctype = _prelude(op, dtype, acc, width)
    if warp:
        loop = ["    const int tid = threadIdx.x & 31, nthreads = 32;",
                "    const tp_i64 step = (tp_i64)gridDim.x * (blockDim.x >> 5);",
                "    const tp_i64 first = (tp_i64)blockIdx.x * (blockDim.x >> 5) "
                "+ (threadIdx.x >> 5);"]
        combine = ["        a = tp_warp_reduce(a);"]
    else:
        loop = ["    __shared__ " + ctype + " shared[32];",
                "    const int tid = threadIdx.x, nthreads = blockDim.x;",
                "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
                "    const tp_i64 step = gridDim.x, first = blockIdx.x;"]
        combine = ["        a = tp_warp_reduce(a);",
                   "        if (lane == 0) shared[warp] = a;",
                   "        __syncthreads();",
                   f"        a = tp_warp_reduce(lane < (int)(blockDim.x >> 5) ? shared[lane] "
                   f": {identity});",
                   "        __syncthreads();"]
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "q[u].s[t]")
    bounds = "" if warp else f"__launch_bounds__({_BLOCK_THREADS}) "
    return "\n".join([
        prelude,
        f"constexpr int U = {_UNROLL};",
        f'extern "C" __global__ void {bounds}{rows_name(op, dtype, acc, warp, width)}(',
        f"        const {storage}* __restrict__ x, {storage}* __restrict__ out,",
        "        const tp_i64 length, const tp_i64 rows) {",
        *loop,
        "    const tp_i64 n = length / W;",
        "    for (tp_i64 r = first; r < rows; r += step) {",
        "        const tp_vec* src = reinterpret_cast<const tp_vec*>(x + r * length);",
        f"        {ctype} a = {identity};",
        "        for (tp_i64 base = tid; base < n; base += (tp_i64)nthreads * U) {",
        "            tp_vec q[U];",
        "            #pragma unroll",
        "            for (int u = 0; u < U; ++u) {",
        "                const tp_i64 i = base + (tp_i64)u * nthreads;",
        "                if (i < n) q[u] = src[i];",
        "            }",
        "            #pragma unroll",
        "            for (int u = 0; u < U; ++u) {",
        "                if (base + (tp_i64)u * nthreads < n) {",
        "                    #pragma unroll",
        "                    for (int t = 0; t < W; ++t)",
        f"                        a = tp_combine(a, ({ctype}){load});",
        "                }",
        "            }",
        "        }",
        *combine,
        f"        if (tid == 0) out[r] = {_finish(op, dtype, ctype, 'a', 'length')};",
        "    }",
        "}",
        "",
    ])


def columns_names(op: str, dtype, acc, width: int) -> tuple[str, str]:
    """The ``extern "C"`` names of :func:`columns_source`'s two kernels."""
    base = f"{op}_{np.dtype(dtype).name}_{np.dtype(acc).name}"
    return f"tp_reduce_columns_{base}_{width}", f"tp_reduce_columns_finish_{base}"


def columns_source(op: str, dtype, acc, width: int) -> str:
    """The CUDA source of ``op`` over the first dimension of an array seen as ``(rows, cols)``,
    two kernels of 256 threads a block (:func:`columns_names`):

    - ``NAME(const STORAGE* x, STORAGE* out, ACC* partial, long long rows, long long cols,
      long long chunk)`` over a grid of ``(ceil(cols / width / 32), splits)`` blocks: block
      ``(bx, by)`` combines rows ``[by * chunk, min(rows, (by + 1) * chunk))`` of its 32
      column groups of ``width``; with one split (``gridDim.y == 1``) it writes ``out``, else
      row ``by`` of ``partial`` (``splits`` by ``cols``, in the compute type).
    - ``NAME_finish(const ACC* partial, STORAGE* out, long long parts, long long cols, long
      long count)`` over ``ceil(cols / 32)`` blocks combines the ``parts`` rows of
      ``partial`` into ``out`` (a mean divides by ``count``).

    Pitfall: ``width > 1`` needs ``x`` on a 16-byte boundary and ``cols`` a multiple of
    ``width`` (not checked)."""
    dtype, acc = np.dtype(dtype), np.dtype(acc)
    prelude, identity, ctype = _prelude(op, dtype, acc, width)
    storage = _source.storage_type(dtype)
    name, finish = columns_names(op, dtype, acc, width)
    load, load_one = _source.load_expr(dtype, "q[u].s[t]"), _source.load_expr(dtype, "q.s[t]")
    return "\n".join([
        prelude,
        f'extern "C" __global__ void __launch_bounds__(256) {name}(',
        f"        const {storage}* __restrict__ x, {storage}* __restrict__ out,",
        f"        {ctype}* __restrict__ partial, const tp_i64 rows, const tp_i64 cols,",
        "        const tp_i64 chunk) {",
        f"    __shared__ {ctype} shared[8][32 * W];",
        "    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;",
        "    const tp_i64 groups = cols / W;",
        "    const tp_i64 g = (tp_i64)blockIdx.x * 32 + tx;",
        "    const tp_i64 start = (tp_i64)blockIdx.y * chunk;",
        "    const tp_i64 end = start + chunk < rows ? start + chunk : rows;",
        f"    {ctype} a[W];",
        "    #pragma unroll",
        f"    for (int t = 0; t < W; ++t) a[t] = {identity};",
        "    if (g < groups) {",
        "        const tp_vec* p = reinterpret_cast<const tp_vec*>(x) + g;",
        "        tp_i64 r = start + ty;",
        "        for (; r + 24 < end; r += 32) {   // rows r, r + 8, r + 16, r + 24 in flight",
        "            tp_vec q[4];",
        "            #pragma unroll",
        "            for (int u = 0; u < 4; ++u) q[u] = p[(r + 8 * u) * groups];",
        "            #pragma unroll",
        "            for (int u = 0; u < 4; ++u) {",
        "                #pragma unroll",
        f"                for (int t = 0; t < W; ++t) a[t] = tp_combine(a[t], ({ctype}){load});",
        "            }",
        "        }",
        "        for (; r < end; r += 8) {",
        "            const tp_vec q = p[r * groups];",
        "            #pragma unroll",
        f"            for (int t = 0; t < W; ++t) a[t] = tp_combine(a[t], ({ctype}){load_one});",
        "        }",
        "    }",
        "    #pragma unroll",
        "    for (int t = 0; t < W; ++t) shared[ty][tx * W + t] = a[t];",
        "    __syncthreads();",
        "    if (ty == 0 && g < groups) {",
        "        #pragma unroll",
        "        for (int t = 0; t < W; ++t) {",
        f"            {ctype} v = shared[0][tx * W + t];",
        "            for (int l = 1; l < 8; ++l) v = tp_combine(v, shared[l][tx * W + t]);",
        "            const tp_i64 c = g * W + t;",
        f"            if (gridDim.y == 1) out[c] = {_finish(op, dtype, ctype, 'v', 'rows')};",
        "            else partial[(tp_i64)blockIdx.y * cols + c] = v;",
        "        }",
        "    }",
        "}",
        f'extern "C" __global__ void __launch_bounds__(256) {finish}(',
        f"        const {ctype}* __restrict__ partial, {storage}* __restrict__ out,",
        "        const tp_i64 parts, const tp_i64 cols, const tp_i64 count) {",
        f"    __shared__ {ctype} shared[8][32];",
        "    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;",
        "    const tp_i64 c = (tp_i64)blockIdx.x * 32 + tx;",
        f"    {ctype} a = {identity};",
        "    if (c < cols)",
        "        for (tp_i64 p = ty; p < parts; p += 8) a = tp_combine(a, partial[p * cols + c]);",
        "    shared[ty][tx] = a;",
        "    __syncthreads();",
        "    if (ty == 0 && c < cols) {",
        "        for (int l = 1; l < 8; ++l) a = tp_combine(a, shared[l][tx]);",
        f"        out[c] = {_finish(op, dtype, ctype, 'a', 'count')};",
        "    }",
        "}",
        "",
    ])


def _rows_kernel(op: str, dtype: np.dtype, acc: np.dtype, warp: bool, width: int,
                 device: int) -> PackedLaunch:
    """:func:`rows_source`'s launcher (x, out, length, rows), made once, loaded on ``device``."""
    def make() -> PackedLaunch:
        kernel = cupy.RawKernel(rows_source(op, dtype, acc, warp, width),
                                rows_name(op, dtype, acc, warp, width))
        return PackedLaunch(kernel, 4)

    key = ("reduce-rows", op, dtype, acc, warp, width)
    made = _kernel_cache.cached(key, make)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: made.kernel.kernel)
    return made


def _columns_kernels(op: str, dtype: np.dtype, acc: np.dtype, width: int,
                     device: int) -> tuple[PackedLaunch, PackedLaunch]:
    """:func:`columns_source`'s two launchers, made once, loaded on ``device``."""
    def make() -> tuple[PackedLaunch, PackedLaunch]:
        source = columns_source(op, dtype, acc, width)
        name, finish = columns_names(op, dtype, acc, width)
        return (PackedLaunch(cupy.RawKernel(source, name), 6),
                PackedLaunch(cupy.RawKernel(source, finish), 5))

    key = ("reduce-columns", op, dtype, acc, width)
    made = _kernel_cache.cached(key, make)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: (made[0].kernel.kernel, made[1].kernel.kernel))
    return made


def _rows_launcher(op: str, dtype: np.dtype, acc: np.dtype) -> Callable:
    itemsize, wide = dtype.itemsize, _source.vector_width(dtype)

    def launch(x, out_array) -> None:
        length = x.shape[-1]
        rows = x.size // length
        width = 1 if (x.data.ptr | length * itemsize) % _source.VECTOR_BYTES else wide
        warp = length <= _WARP_ROW_LIMIT
        packed = _rows_kernel(op, dtype, acc, warp, width, x.data.device_id)
        found = packed.buffers.get(thread_ident()) or packed.buffer()
        values = found[0]
        values[0], values[1], values[2], values[3] = x.data.ptr, out_array.data.ptr, length, rows
        if warp:
            packed(min(-(-rows // _ROWS_PER_BLOCK), _GRID_CAP), 32 * _ROWS_PER_BLOCK, found[1])
        else:
            packed(min(rows, _GRID_CAP), _BLOCK_THREADS, found[1])

    # the while-body scan looks at its arguments only (a function attribute mypy cannot type)
    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def _arg_source(op: str, dtype: np.dtype, name: str) -> str:
    """argmax/argmin over the last dimension: a block per row; NaN counts as the extreme and
    ties go to the lowest index (NumPy's and PyTorch's answer)."""
    ctype = "double" if dtype == _F64 else "float"
    better = ">" if op == "argmax" else "<"
    load = _source.load_expr(dtype, "row[j]")
    return "\n".join([
        _source.HELPERS,
        # (a, ia) against (b, ib): an empty side (-1) loses, NaN wins, then the extreme, then
        # the lower index
        f"__device__ __forceinline__ void tp_pick({ctype}& a, long long& ia, const {ctype} b,",
        "        const long long ib) {",
        "    if (ib < 0) return;",
        "    bool take;",
        "    if (ia < 0) take = true;",
        "    else if (a != a) take = (b != b) && ib < ia;",
        "    else if (b != b) take = true;",
        f"    else take = (b {better} a) || (b == a && ib < ia);",
        "    if (take) { a = b; ia = ib; }",
        "}",
        f'extern "C" __global__ void __launch_bounds__({_ARG_THREADS}) {name}(',
        f"        const {_source.storage_type(dtype)}* __restrict__ x,",
        "        long long* __restrict__ out, const tp_i64 length, const tp_i64 rows) {",
        f"    __shared__ {ctype} shared_value[32];",
        "    __shared__ long long shared_index[32];",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    for (tp_i64 r = blockIdx.x; r < rows; r += gridDim.x) {",
        f"        const {_source.storage_type(dtype)}* row = x + r * length;",
        f"        {ctype} best = 0;",
        "        long long at = -1;",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x)",
        f"            tp_pick(best, at, ({ctype}){load}, j);",
        "        for (int o = 16; o > 0; o >>= 1) {",
        f"            const {ctype} other = __shfl_xor_sync(0xffffffffu, best, o);",
        "            const long long where = __shfl_xor_sync(0xffffffffu, at, o);",
        "            tp_pick(best, at, other, where);",
        "        }",
        "        if (lane == 0) { shared_value[warp] = best; shared_index[warp] = at; }",
        "        __syncthreads();",
        "        if (warp == 0) {",
        "            best = lane < (int)(blockDim.x >> 5) ? shared_value[lane] : 0;",
        "            at = lane < (int)(blockDim.x >> 5) ? shared_index[lane] : -1;",
        "            for (int o = 16; o > 0; o >>= 1) {",
        f"                const {ctype} other = __shfl_xor_sync(0xffffffffu, best, o);",
        "                const long long where = __shfl_xor_sync(0xffffffffu, at, o);",
        "                tp_pick(best, at, other, where);",
        "            }",
        "            if (lane == 0) out[r] = at;",
        "        }",
        "        __syncthreads();",
        "    }",
        "}",
        "",
    ])


def _arg_launcher(op: str, dtype: np.dtype) -> Callable:
    name = f"tp_{op}_rows_{dtype.name}"
    packed = _kernel_cache.cached(("reduce-arg", op, dtype), lambda: PackedLaunch(
        cupy.RawKernel(_arg_source(op, dtype, name), name), 4))

    def launch(x, out_array) -> None:
        length = x.shape[-1]
        rows = x.size // length
        device = x.data.device_id
        if not _kernel_cache.is_warm(("reduce-arg", op, dtype), device):
            _kernel_cache.warm(("reduce-arg", op, dtype), device, lambda: packed.kernel.kernel)
        found = packed.buffers.get(thread_ident()) or packed.buffer()
        values = found[0]
        values[0], values[1], values[2], values[3] = x.data.ptr, out_array.data.ptr, length, rows
        threads = min(_ARG_THREADS, max(32, 1 << (length - 1).bit_length()))
        packed(min(rows, _GRID_CAP), threads, found[1])

    # the while-body scan looks at its arguments only (a function attribute mypy cannot type)
    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def _columns_launcher(op: str, dtype: np.dtype, acc: np.dtype) -> Callable:
    itemsize, wide = dtype.itemsize, _source.vector_width(dtype)

    def launch(x, out_array) -> None:
        rows = x.shape[0]
        cols = x.size // rows
        width = 1 if (x.data.ptr | cols * itemsize) % _source.VECTOR_BYTES else wide
        main, finish = _columns_kernels(op, dtype, acc, width, x.data.device_id)
        across = -(-cols // (32 * width))
        splits = max(1, min(-(-_COLUMN_BLOCKS // across), -(-rows // _COLUMN_MIN_ROWS)))
        chunk = -(-rows // splits)
        splits = -(-rows // chunk)
        partial = cupy.empty((splits, cols), acc) if splits > 1 else None
        found = main.buffers.get(thread_ident()) or main.buffer()
        values = found[0]
        values[0], values[1] = x.data.ptr, out_array.data.ptr
        values[2] = 0 if partial is None else partial.data.ptr
        values[3], values[4], values[5] = rows, cols, chunk
        main.launch_2d(across, splits, 256, found[1])
        if partial is not None:
            found = finish.buffers.get(thread_ident()) or finish.buffer()
            values = found[0]
            values[0], values[1] = partial.data.ptr, out_array.data.ptr
            values[2], values[3], values[4] = splits, cols, rows
            finish(-(-cols // 32), 256, found[1])

    # the while-body scan looks at its arguments only (a function attribute mypy cannot type)
    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    return launch


def reduce_axis(op: str, shape: tuple[int, ...], axis: int, dtype, acc, out) -> Callable | None:
    """A launcher ``fn(x, out_array)`` of ``op`` ("sum", "mean", "amax", "amin"; "argmax" and
    "argmin" over the last dimension only, into int64, a block per row) over dimension
    ``axis`` of a C-contiguous CuPy array ``x`` of ``shape`` and ``dtype`` (float16, bfloat16,
    float32, float64), into the C-contiguous ``out_array`` of dtype ``out`` (``dtype`` itself)
    holding the other dimensions' elements in order (keepdim or not), or None for a case it
    does not take: another op or dtype, an empty ``x``, an axis that is neither the last nor
    (with two or more dimensions) the first, fewer than 512 rows longer than 65536 elements,
    or fewer than 32 columns.

    Sums and means accumulate in ``acc`` (float32 or float64; float64 for a float64 input),
    amax and amin propagate NaN. The launcher runs one kernel (a column reduction split over
    many blocks: two, with a workspace from CuPy's allocator) on CuPy's current stream, checks
    nothing, and touches only its arguments and that workspace
    (``tp_arguments_only``). Pitfall: ``x`` must have ``shape`` (the plan is the caller's).
    """
    dtype, out = np.dtype(dtype), np.dtype(out)
    if op in ARG_OPS:
        if dtype not in _FLOATS or out != _I64 or not shape or axis != len(shape) - 1 or \
                math.prod(shape) == 0:
            return None
        return _kernel_cache.cached(("reduce-arg-launcher", op, dtype),
                                    lambda: _arg_launcher(op, dtype))
    if op not in REDUCE_OPS or dtype not in _FLOATS or out != dtype or not shape:
        return None
    if op in ("sum", "mean"):
        acc = np.dtype(acc)
        if acc not in _CTYPE or (dtype == _F64 and acc != _F64):
            return None
    else:
        acc = _F64 if dtype == _F64 else _F32
    size = math.prod(shape)
    if size == 0:
        return None
    if axis == len(shape) - 1:
        if shape[-1] > _LONG_ROW and size // shape[-1] < _FEW_ROWS:
            return None
        key: tuple = ("reduce-rows-launcher", op, dtype, acc)
        make = _rows_launcher
    elif axis == 0 and len(shape) >= 2:
        if size // shape[0] < _MIN_COLUMNS:
            return None
        key = ("reduce-columns-launcher", op, dtype, acc)
        make = _columns_launcher
    else:
        return None
    return _kernel_cache.cached(key, lambda: make(op, dtype, acc))
