"""Row kernels of the transformer ops for the cuda backend: ``layer_norm`` and attention (few
query rows, the decode step, or many, a prompt), each ONE raw kernel launched through
:class:`._launch.PackedLaunch`.

``layer_norm(x, weight, bias, out, eps)``
    One block per row of the last dimension: the mean, then the biased variance of the
    centred values (two passes over a row that stays in cache, as accurate as the composed
    form), then ``(x - mean) * rsqrt(var + eps) * weight + bias``. float16, bfloat16 and
    float32 compute in float, float64 in double; each element is rounded once when stored.

``attention(q, k, v, mask, out, scale, causal)``
    Scaled dot-product attention for queries ``(B, H, L, D)`` against keys and values
    ``(B, Hkv, S, D)`` (``H`` a multiple of ``Hkv``: grouped-query attention), ``D <= 256``,
    ``L`` small (the decode step). One block per query row and per chunk of at most
    ``CHUNK`` keys: each thread scores whole key rows against the query held in shared memory,
    the block reduces the maximum and the sum of ``exp`` (the softmax of its chunk), then the
    threads sum ``p * v`` over the chunk, a group of keys per thread group. With one chunk
    (``S <= CHUNK``) the block writes the output; with more (flash-decoding) each writes its
    maximum, sum and partial output, and a second kernel rescales and adds the chunks. The
    mask is read through its strides (broadcast dimensions have stride 0): bool (True keeps a
    key) or additive in the query's dtype or float32. ``causal`` keeps key ``j`` for query row
    ``i`` when ``j <= i`` (PyTorch's top-left alignment). A row whose keys are all masked is
    NaN, as the composed softmax gives. Scores and sums are float; float64 is not taken here.
    With more than ``DECODE_QUERIES`` query rows (a prompt) and heads up to
    ``TILED_HEAD_DIM`` wide, a tiled kernel runs instead (flash-attention style, on the CUDA
    cores): a block takes eight query rows of one head, a warp each; tiles of 32 keys and
    values go through shared memory, each lane scores one key of the tile, and the online
    softmax rescales the running output, so the scores are never written out. With
    ``causal`` a block stops at the last key its rows see.

Kernels are made once per signature in the one kernel cache (``_kernels``) and compiled and
loaded on first use per device under relaxed capture mode. Nothing here synchronizes the host;
the flash-decoding partials come from CuPy's allocator, which tensorplay routes into the
graph's pool while a stream captures.
"""

from __future__ import annotations

from array import array

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["layer_norm", "attention", "ATTENTION_DTYPES", "LAYER_NORM_DTYPES", "MAX_HEAD_DIM"]

_BF16 = np.dtype("bfloat16")   # registered by ml_dtypes, which tensorplay imports first
_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)
LAYER_NORM_DTYPES = frozenset((np.dtype(np.float16), _BF16, _F32, np.dtype(np.float64)))
ATTENTION_DTYPES = frozenset((np.dtype(np.float16), _BF16, _F32))
MAX_HEAD_DIM = 256
CHUNK = 1024          # keys per block; longer key sequences are split (flash-decoding)
DECODE_QUERIES = 16   # up to this many query rows the per-row kernel runs, above it the tiled
TILED_HEAD_DIM = 128  # the tiled kernel's widest head (its key and value tiles in shared memory)
_TILED_ROWS = 8       # query rows per block of the tiled kernel, a warp each
_GRID_Y_CAP = 65535   # batch * heads of one tiled launch (the grid's second dimension)
_THREADS = 256
_GRID_CAP = 1 << 20   # rows per layer_norm launch; each block strides over the rows past it


# -- layer_norm ------------------------------------------------------------------------------
def _layer_norm_source(dtype: np.dtype, name: str) -> str:
    storage, acc = _source.storage_type(dtype), _source.compute_type(dtype)
    rsqrt = "rsqrt" if acc == "double" else "rsqrtf"
    load = _source.load_expr(dtype, "{}")
    return "\n".join([
        _source.HELPERS,
        f"__device__ __forceinline__ {acc} tp_block_sum({acc} v, {acc}* shared) {{",
        "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    if (lane == 0) shared[warp] = v;",
        "    __syncthreads();",
        f"    v = lane < (blockDim.x >> 5) ? shared[lane] : ({acc})0;",
        "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
        "    __syncthreads();",
        "    return v;",
        "}",
        f'extern "C" __global__ void {name}(',
        f"        const {storage}* __restrict__ x, const {storage}* __restrict__ w,",
        f"        const {storage}* __restrict__ b, {storage}* __restrict__ y,",
        "        const tp_i64 length, const tp_i64 rows, const double eps) {",
        f"    __shared__ {acc} shared[32];",
        "    for (tp_i64 r = blockIdx.x; r < rows; r += gridDim.x) {",
        f"        const {storage}* row = x + r * length;",
        f"        {acc} s = 0;",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x)",
        f"            s += ({acc}){load.format('row[j]')};",
        f"        const {acc} mean = tp_block_sum(s, shared) / ({acc})length;",
        "        s = 0;",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x) {",
        f"            const {acc} c = ({acc}){load.format('row[j]')} - mean;",
        "            s += c * c;",
        "        }",
        f"        const {acc} inv = {rsqrt}(tp_block_sum(s, shared) / ({acc})length "
        f"+ ({acc})eps);",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x) {",
        f"            {acc} v = (({acc}){load.format('row[j]')} - mean) * inv;",
        f"            if (w) v *= ({acc}){load.format('w[j]')};",
        f"            if (b) v += ({acc}){load.format('b[j]')};",
        f"            y[r * length + j] = {_source.store_expr(dtype, 'v')};",
        "        }",
        "    }",
        "}",
        "",
    ])


def _layer_norm_kernel(dtype: np.dtype) -> PackedLaunch:
    name = f"tp_layer_norm_{dtype.name}"

    def make() -> PackedLaunch:
        kernel = cupy.RawKernel(_layer_norm_source(dtype, name), name)
        return PackedLaunch(kernel, 7, scalar_format="d")
    return _kernel_cache.cached(("layer_norm", dtype), make)


def layer_norm(x, weight, bias, out, eps: float) -> None:
    """``out[...] = layer_norm(x)`` over the last dimension of ``x`` (any leading shape), with
    ``weight`` and ``bias`` (1-D of the last dimension's length, or None), all of one float
    dtype, in one kernel on CuPy's current stream.

    Pitfall: the layouts are the caller's promise, not checked here (the eager hot path): ``x``,
    ``out``, ``weight`` and ``bias`` C-contiguous, ``out`` of ``x``'s shape.

    Raises:
        TypeError: not CuPy arrays of float16, bfloat16, float32 or float64.
        ValueError: a weight or bias of another dtype or length, or ``out`` of another dtype
            or shape.
    """
    dtype = x.dtype
    if dtype not in LAYER_NORM_DTYPES or not isinstance(x, cupy.ndarray):
        raise TypeError(f"layer_norm needs CuPy arrays of float16, bfloat16, float32 or "
                        f"float64, got {type(x).__name__} {getattr(x, 'dtype', '')}")
    length = x.shape[-1] if x.ndim else 1
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and (param.dtype != dtype or param.shape != (length,)):
            raise ValueError(f"layer_norm: {name} must be a {dtype} array of shape "
                             f"({length},), got {param.dtype}{param.shape}")
    if out.dtype != dtype or out.shape != x.shape:
        raise ValueError("layer_norm: out must have x's dtype and shape")
    if x.size == 0:
        return
    packed = _layer_norm_kernel(x.dtype)
    device = x.data.device_id
    key = ("layer_norm", x.dtype)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    rows = x.size // length
    values[0], values[3] = x.data.ptr, out.data.ptr
    values[1] = 0 if weight is None else weight.data.ptr
    values[2] = 0 if bias is None else bias.data.ptr
    values[4], values[5] = length, rows
    found[3][6] = eps
    threads = min(1024, max(32, 1 << ((length + 3) // 4 - 1).bit_length()))
    packed(min(rows, _GRID_CAP), threads, found[1])


# -- attention -------------------------------------------------------------------------------
# mask kinds
_NO_MASK, _BOOL_MASK, _ADD_MASK, _CAUSAL = 0, 1, 2, 3
# parameter slots: pointers q k v mask out part, then counts, then strides, then the scale
_ATTENTION_SLOTS = 28
_BLOCKS_WANTED = 64   # split the keys into chunks until about this many blocks run


def _attention_source(dtype: np.dtype, mask_dtype: np.dtype | None, name: str) -> str:
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "{}")
    if mask_dtype is None or mask_dtype == _U8:
        mask_storage, mask_load = "unsigned char", "mask[mo]"
    else:
        mask_storage = _source.storage_type(mask_dtype)
        mask_load = _source.load_expr(mask_dtype, "mask[mo]")
    return "\n".join([
        _source.HELPERS,
        "__device__ __forceinline__ float tp_block_reduce(float v, float* shared, int is_max) {",
        "    for (int o = 16; o > 0; o >>= 1) {",
        "        const float other = __shfl_xor_sync(0xffffffffu, v, o);",
        "        v = is_max ? fmaxf(v, other) : v + other;",
        "    }",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    if (lane == 0) shared[warp] = v;",
        "    __syncthreads();",
        "    const float none = is_max ? -__int_as_float(0x7f800000) : 0.0f;",
        "    v = lane < (blockDim.x >> 5) ? shared[lane] : none;",
        "    for (int o = 16; o > 0; o >>= 1) {",
        "        const float other = __shfl_xor_sync(0xffffffffu, v, o);",
        "        v = is_max ? fmaxf(v, other) : v + other;",
        "    }",
        "    __syncthreads();",
        "    return v;",
        "}",
        f'extern "C" __global__ void {name}(',
        f"        const {storage}* __restrict__ q, const {storage}* __restrict__ k,",
        f"        const {storage}* __restrict__ v, const {mask_storage}* __restrict__ mask,",
        f"        {storage}* __restrict__ out, float* __restrict__ part,",
        "        const tp_i64 heads, const tp_i64 group, const tp_i64 length, const tp_i64 keys,",
        "        const tp_i64 dim, const tp_i64 mask_kind, const tp_i64 chunks,",
        "        const tp_i64 chunk,",
        "        const tp_i64 qb, const tp_i64 qh, const tp_i64 ql,",
        "        const tp_i64 kb, const tp_i64 kh, const tp_i64 ks,",
        "        const tp_i64 vb, const tp_i64 vh, const tp_i64 vs,",
        "        const tp_i64 mb, const tp_i64 mh, const tp_i64 ml, const tp_i64 ms,",
        "        const double scale) {",
        f"    __shared__ float query[{MAX_HEAD_DIM}];",
        f"    __shared__ float scores[{CHUNK}];",
        "    __shared__ float shared[32];",
        f"    __shared__ float sums[{_THREADS}];",
        "    const tp_i64 row = blockIdx.x;               // (batch, head, query row)",
        "    const tp_i64 i = row % length, bh = row / length;",
        "    const tp_i64 h = bh % heads, bi = bh / heads, hk = h / group;",
        "    const tp_i64 first = (tp_i64)blockIdx.y * chunk;",
        "    const int tid = threadIdx.x;",
        "    for (tp_i64 d = tid; d < dim; d += blockDim.x)",
        f"        query[d] = (float){load.format('q[bi * qb + h * qh + i * ql + d]')} "
        "* (float)scale;",
        "    __syncthreads();",
        "    const tp_i64 last = min(keys, first + chunk);",
        f"    const {storage}* kr = k + bi * kb + hk * kh;",
        f"    const {storage}* vr = v + bi * vb + hk * vh;",
        "    float m = -__int_as_float(0x7f800000);",
        "    for (tp_i64 j = first + tid; j < last; j += blockDim.x) {",
        f"        const {storage}* key = kr + j * ks;",
        "        float s = 0.0f;",
        "        for (tp_i64 d = 0; d < dim; ++d)",
        f"            s += query[d] * (float){load.format('key[d]')};",
        "        if (mask_kind == 3) {",
        "            if (j > i) s = -__int_as_float(0x7f800000);",
        "        } else if (mask_kind != 0) {",
        "            const tp_i64 mo = bi * mb + h * mh + i * ml + j * ms;",
        f"            const float mv = (float){mask_load};",
        "            if (mask_kind == 1) { if (mv == 0.0f) s = -__int_as_float(0x7f800000); }",
        "            else s += mv;",
        "        }",
        "        scores[j - first] = s;",
        "        m = fmaxf(m, s);",
        "    }",
        "    m = tp_block_reduce(m, shared, 1);",
        "    float l = 0.0f;",
        "    for (tp_i64 j = first + tid; j < last; j += blockDim.x) {",
        "        const float p = (m == -__int_as_float(0x7f800000)) ? 0.0f "
        ": __expf(scores[j - first] - m);",
        "        scores[j - first] = p;",
        "        l += p;",
        "    }",
        "    l = tp_block_reduce(l, shared, 0);   // its barrier also publishes scores",
        "    const int groups = blockDim.x / (int)dim;",
        "    const int g = tid / (int)dim, d = tid - g * (int)dim;",
        "    float acc = 0.0f;",
        "    if (g < groups) {",
        "        for (tp_i64 j = first + g; j < last; j += groups)",
        f"            acc += scores[j - first] * (float){load.format('vr[j * vs + d]')};",
        "    }",
        "    sums[tid] = acc;",
        "    __syncthreads();",
        "    if (tid < dim) {",
        "        float total = 0.0f;",
        "        for (int e = 0; e < groups; ++e) total += sums[e * (int)dim + tid];",
        "        if (chunks == 1) {",
        f"            out[row * dim + tid] = {_source.store_expr(dtype, 'total / l')};",
        "        } else {",
        "            float* mine = part + (row * chunks + blockIdx.y) * (dim + 2);",
        "            mine[2 + tid] = total;",
        "            if (tid == 0) { mine[0] = m; mine[1] = l; }",
        "        }",
        "    }",
        "}",
        "",
    ])


def _combine_source(dtype: np.dtype, name: str) -> str:
    storage = _source.storage_type(dtype)
    return "\n".join([
        _source.HELPERS,
        f'extern "C" __global__ void {name}(const float* __restrict__ part,',
        f"        {storage}* __restrict__ out, const tp_i64 dim, const tp_i64 chunks) {{",
        "    const tp_i64 row = blockIdx.x;",
        "    const float* parts = part + row * chunks * (dim + 2);",
        "    float m = -__int_as_float(0x7f800000);",
        "    for (tp_i64 c = 0; c < chunks; ++c) m = fmaxf(m, parts[c * (dim + 2)]);",
        "    for (tp_i64 d = threadIdx.x; d < dim; d += blockDim.x) {",
        "        float total = 0.0f, l = 0.0f;",
        "        for (tp_i64 c = 0; c < chunks; ++c) {",
        "            const float* p = parts + c * (dim + 2);",
        "            const float w = (p[0] == -__int_as_float(0x7f800000)) ? 0.0f "
        ": __expf(p[0] - m);",
        "            total += w * p[2 + d];",
        "            l += w * p[1];",
        "        }",
        f"        out[row * dim + d] = {_source.store_expr(dtype, 'total / l')};",
        "    }",
        "}",
        "",
    ])


def _tiled_source(dtype: np.dtype, mask_dtype: np.dtype | None, name: str) -> str:
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "{}")
    if mask_dtype is None or mask_dtype == _U8:
        mask_storage, mask_load = "unsigned char", "mask[mo]"
    else:
        mask_storage = _source.storage_type(mask_dtype)
        mask_load = _source.load_expr(mask_dtype, "mask[mo]")
    per_lane = TILED_HEAD_DIM // 32
    return "\n".join([
        _source.HELPERS,
        "#define TP_NEG_INF (-__int_as_float(0x7f800000))",
        f'extern "C" __global__ void {name}(',
        f"        const {storage}* __restrict__ q, const {storage}* __restrict__ k,",
        f"        const {storage}* __restrict__ v, const {mask_storage}* __restrict__ mask,",
        f"        {storage}* __restrict__ out, float* __restrict__ part,",
        "        const tp_i64 heads, const tp_i64 group, const tp_i64 length, const tp_i64 keys,",
        "        const tp_i64 dim, const tp_i64 mask_kind, const tp_i64 chunks,",
        "        const tp_i64 chunk,",
        "        const tp_i64 qb, const tp_i64 qh, const tp_i64 ql,",
        "        const tp_i64 kb, const tp_i64 kh, const tp_i64 ks,",
        "        const tp_i64 vb, const tp_i64 vh, const tp_i64 vs,",
        "        const tp_i64 mb, const tp_i64 mh, const tp_i64 ml, const tp_i64 ms,",
        "        const double scale) {",
        # a key row padded to an odd length: lane j reads row j at one d without bank conflicts
        f"    __shared__ float kt[32][{TILED_HEAD_DIM + 1}];",
        f"    __shared__ float vt[32][{TILED_HEAD_DIM}];",
        f"    __shared__ float qs[{_TILED_ROWS}][{TILED_HEAD_DIM}];",
        "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;",
        "    const tp_i64 bh = blockIdx.y, h = bh % heads, bi = bh / heads, hk = h / group;",
        f"    const tp_i64 i = (tp_i64)blockIdx.x * {_TILED_ROWS} + warp;   // this warp's row",
        "    const bool live = i < length;",
        "    if (live)",
        "        for (tp_i64 d = lane; d < dim; d += 32)",
        f"            qs[warp][d] = (float){load.format('q[bi * qb + h * qh + i * ql + d]')}"
        " * (float)scale;",
        f"    const tp_i64 block_last = min(length, (tp_i64)(blockIdx.x + 1) * {_TILED_ROWS}) - 1;",
        "    const tp_i64 end = mask_kind == 3 ? min(keys, block_last + 1) : keys;",
        f"    const {storage}* kr = k + bi * kb + hk * kh;",
        f"    const {storage}* vr = v + bi * vb + hk * vh;",
        f"    float m = TP_NEG_INF, l = 0.0f, acc[{per_lane}];",
        f"    for (int c = 0; c < {per_lane}; ++c) acc[c] = 0.0f;",
        "    for (tp_i64 t0 = 0; t0 < end; t0 += 32) {",
        "        __syncthreads();   // the previous tile is consumed (the first: qs is written)",
        "        for (tp_i64 e = threadIdx.x; e < 32 * dim; e += blockDim.x) {",
        "            const tp_i64 r = e / dim, d = e - r * dim, j = t0 + r;",
        "            float kv = 0.0f, vv = 0.0f;",
        "            if (j < keys) {",
        f"                kv = (float){load.format('kr[j * ks + d]')};",
        f"                vv = (float){load.format('vr[j * vs + d]')};",
        "            }",
        "            kt[r][d] = kv;",
        "            vt[r][d] = vv;",
        "        }",
        "        __syncthreads();",
        "        if (!live) continue;",
        "        const tp_i64 j = t0 + lane;",
        "        float s = 0.0f;",
        "        for (tp_i64 d = 0; d < dim; ++d) s += qs[warp][d] * kt[lane][d];",
        "        bool keep = j < keys;",
        "        if (mask_kind == 3) {",
        "            keep = keep && j <= i;",
        "        } else if (mask_kind != 0 && keep) {",
        "            const tp_i64 mo = bi * mb + h * mh + i * ml + j * ms;",
        f"            const float mv = (float){mask_load};",
        "            if (mask_kind == 1) keep = mv != 0.0f;",
        "            else s += mv;",
        "        }",
        "        if (!keep) s = TP_NEG_INF;",
        "        float top = s;",
        "        for (int o = 16; o > 0; o >>= 1)",
        "            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));",
        "        const float m_new = fmaxf(m, top);",
        "        const float p = m_new == TP_NEG_INF ? 0.0f : __expf(s - m_new);",
        "        const float rescale = m == TP_NEG_INF ? 0.0f : __expf(m - m_new);",
        "        float total = p;",
        "        for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);",
        "        l = l * rescale + total;",
        "        m = m_new;",
        f"        for (int c = 0; c < {per_lane}; ++c) acc[c] *= rescale;",
        "        for (int jj = 0; jj < 32; ++jj) {",
        "            const float pj = __shfl_sync(0xffffffffu, p, jj);",
        f"            for (int c = 0; c < {per_lane}; ++c) {{",
        "                const int d = lane + 32 * c;",
        "                if (d < dim) acc[c] += pj * vt[jj][d];",
        "            }",
        "        }",
        "    }",
        "    if (!live) return;",
        "    const tp_i64 row = bh * length + i;",
        f"    for (int c = 0; c < {per_lane}; ++c) {{",
        "        const tp_i64 d = lane + 32 * c;",
        f"        if (d < dim) out[row * dim + d] = {_source.store_expr(dtype, 'acc[c] / l')};",
        "    }",
        "}",
        "",
    ])


def _attention_kernels(dtype: np.dtype, mask_dtype: np.dtype | None):
    mask_name = "none" if mask_dtype is None else mask_dtype.name
    name = f"tp_attention_{dtype.name}_{mask_name}"

    def make():
        kernel = cupy.RawKernel(_attention_source(dtype, mask_dtype, name), name)
        return PackedLaunch(kernel, _ATTENTION_SLOTS, scalar_format="d")

    def make_combine():
        combine = f"tp_attention_combine_{dtype.name}"
        return PackedLaunch(cupy.RawKernel(_combine_source(dtype, combine), combine), 4)
    def make_tiled():
        tiled = f"tp_attention_tiled_{dtype.name}_{mask_name}"
        kernel = cupy.RawKernel(_tiled_source(dtype, mask_dtype, tiled), tiled)
        return PackedLaunch(kernel, _ATTENTION_SLOTS, scalar_format="d")
    return (_kernel_cache.cached(("attention", dtype, mask_dtype), make),
            _kernel_cache.cached(("attention_combine", dtype), make_combine),
            _kernel_cache.cached(("attention_tiled", dtype, mask_dtype), make_tiled))


def _fill(found, q, k, v, mask, out, part, heads: int, length: int, keys: int, dim: int,
          kind: int, chunks: int, chunk: int, mask_strides: tuple[int, ...],
          scale: float) -> None:
    """Write the attention kernels' parameters (one slot layout for both) into ``found``."""
    values = found[0]
    values[0], values[1], values[2] = q.data.ptr, k.data.ptr, v.data.ptr
    values[3] = 0 if mask is None else mask.data.ptr
    values[4], values[5] = out.data.ptr, 0 if part is None else part.data.ptr
    values[6], values[7], values[8], values[9] = heads, heads // k.shape[1], length, keys
    values[10], values[11], values[12], values[13] = dim, kind, chunks, chunk
    values[14:23] = array("Q", _strides(q)[:3] + _strides(k)[:3] + _strides(v)[:3])
    values[23:27] = array("Q", mask_strides)
    found[3][27] = scale


def _strides(array) -> tuple[int, ...]:
    itemsize = array.dtype.itemsize
    return tuple(s // itemsize if n > 1 else 0 for s, n in zip(array.strides, array.shape))


def attention(q, k, v, mask, out, scale: float, causal: bool) -> None:
    """``out[...] = softmax(q @ k.mT * scale + mask) @ v`` (see the module docstring) on
    CuPy's current stream: ``q`` ``(B, H, L, D)``, ``k``/``v`` ``(B, Hkv, S, D)``, all of one
    dtype with unit stride along ``D``; ``mask`` None or broadcastable to ``(B, H, L, S)``
    (bool, or additive of the query's dtype or float32); ``out`` C-contiguous ``(B, H, L,
    D)``.

    Pitfall: the unit stride along ``D`` and ``out``'s contiguity are the caller's promise, not
    checked here (the backend's ``attention`` hook checks the strides).

    Raises:
        TypeError: dtypes this kernel does not take (see ``ATTENTION_DTYPES``).
        ValueError: shapes or layouts it does not take.
    """
    dtype = q.dtype
    if dtype not in ATTENTION_DTYPES or k.dtype != dtype or v.dtype != dtype or \
            out.dtype != dtype:
        raise TypeError(f"attention needs q, k, v and out of one dtype among float16, "
                        f"bfloat16 and float32, got {q.dtype}, {k.dtype}, {v.dtype}, "
                        f"{out.dtype}")
    batch, heads, length, dim = q.shape
    keys = k.shape[2]
    if k.ndim != 4 or v.shape != k.shape or k.shape[0] != batch or k.shape[3] != dim or \
            heads % k.shape[1] or dim > MAX_HEAD_DIM or out.shape != q.shape:
        raise ValueError(f"attention: unsupported shapes or layouts q {q.shape}, k {k.shape}, "
                         f"v {v.shape}, out {out.shape}")
    if out.size == 0:
        return
    mask_strides: tuple[int, ...]   # in elements, one per dimension of the 4-d scores
    if mask is None:
        mask_dtype, mask_strides = None, (0, 0, 0, 0)
    else:   # read in place through its strides: 0 along the broadcast dimensions
        mask_dtype = mask.dtype
        if mask_dtype == np.bool_:
            mask_dtype = _U8   # bool is one byte: read as unsigned char
        itemsize = mask.itemsize
        pad = 4 - mask.ndim
        mask_strides = tuple(
            0 if i < pad or mask.shape[i - pad] == 1 else mask.strides[i - pad] // itemsize
            for i in range(4))
    kind = _CAUSAL if causal else (_NO_MASK if mask is None else
                                   _BOOL_MASK if mask_dtype == _U8 else _ADD_MASK)
    packed, combine, tiled = _attention_kernels(dtype, mask_dtype)
    device = q.data.device_id
    rows = batch * heads * length
    if length > DECODE_QUERIES and dim <= TILED_HEAD_DIM and batch * heads <= _GRID_Y_CAP:
        key = ("attention_tiled", dtype, mask_dtype)
        if not _kernel_cache.is_warm(key, device):
            _kernel_cache.warm(key, device, lambda: tiled.kernel.kernel)
        found = tiled.buffers.get(thread_ident()) or tiled.buffer()
        _fill(found, q, k, v, mask, out, None, heads, length, keys, dim, kind, 1, keys,
              mask_strides, scale)
        tiled.launch_2d(-(-length // _TILED_ROWS), batch * heads, 32 * _TILED_ROWS, found[1])
        return
    warm_key = ("attention", dtype, mask_dtype)
    if not _kernel_cache.is_warm(warm_key, device):
        _kernel_cache.warm(warm_key, device, lambda: (packed.kernel.kernel,
                                                      combine.kernel.kernel))
    wanted = -(-_BLOCKS_WANTED // rows)
    chunk = min(CHUNK, max(128, (-(-keys // wanted) + 127) // 128 * 128))
    chunks = -(-keys // chunk)
    part = None if chunks == 1 else cupy.empty(rows * chunks * (dim + 2), np.float32)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    _fill(found, q, k, v, mask, out, part, heads, length, keys, dim, kind, chunks, chunk,
          mask_strides, scale)
    packed.launch_2d(rows, chunks, _THREADS, found[1])
    if part is not None:
        found = combine.buffers.get(thread_ident()) or combine.buffer()
        values = found[0]
        values[0], values[1], values[2], values[3] = part.data.ptr, out.data.ptr, dim, chunks
        combine(rows, min(1024, max(32, dim)), found[1])
