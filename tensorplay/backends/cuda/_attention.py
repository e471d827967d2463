"""Scaled dot-product attention kernels of the cuda backend, each launched through
:class:`._launch.PackedLaunch`.

``attention(q, k, v, mask, out, scale, causal)``
    Scaled dot-product attention for queries ``(B, H, L, D)`` against keys and values
    ``(B, Hkv, S, D)`` (``H`` a multiple of ``Hkv``: grouped-query attention), ``D <= 256``,
    ``L`` small (the decode step). The keys are split into chunks so that about two blocks
    per multiprocessor run (flash-decoding); a block takes one query row and one chunk. Where
    the rows of ``k`` and ``v`` can be read 16 bytes at a time (the usual cache layout), a
    group of lanes reads one key row with one vector load per lane, so a warp reads several
    whole rows per instruction; each group keeps its own running maximum, sum and output
    (online softmax), and the block merges its groups through shared memory. Other layouts
    take a plainer kernel (each thread scores whole key rows). With one chunk the block writes
    the output; with more each writes its maximum, sum and partial output, and a second
    kernel rescales and adds the chunks. The
    mask is read through its strides (broadcast dimensions have stride 0): bool (True keeps a
    key) or additive in the query's dtype or float32. ``causal`` keeps key ``j`` for query row
    ``i`` when ``j <= i`` (PyTorch's top-left alignment). A row whose keys are all masked is
    NaN, as the composed softmax gives. Scores and sums are float; float64 is not taken here.
    With more than ``DECODE_QUERIES`` query rows (a prompt) and heads up to
    ``TILED_HEAD_DIM`` wide, a tiled kernel runs instead (flash-attention style, on the CUDA
    cores, specialised on the head width): a block takes sixteen query rows of one head, two
    per warp; tiles of 32 keys and values go through shared memory, each lane scores one key
    of the tile against the warp's rows (so each value read from shared memory serves both),
    and the online softmax rescales the running outputs, so the scores are never written out.
    With ``causal`` a block stops at the last key its rows see.
    Longer prompts without a mask (``causal`` or none, as many key heads as query heads, at
    most ``PRODUCT_MAX_KEYS`` keys) take products instead: the float32 scores of every head
    in one batched cuBLASLt product (the tensor cores, where the tiled kernel computes on
    the CUDA cores), one softmax kernel (a warp a row, the scale and the causal cut inside)
    that writes the probabilities in the query's dtype over the scores, and the batched
    product with the values: three launches and ``B*H*L*S`` float32 scores of scratch memory
    (one block), but at GPT-2's 512-token prompt several times faster than the tiled kernel.

Kernels are made once per signature in the one kernel cache (``_kernels``) and compiled and
loaded on first use per device under relaxed capture mode. Nothing here synchronizes the host;
the flash-decoding partials come from CuPy's allocator, which tensorplay routes into the
graph's pool while a stream captures.
"""
from __future__ import annotations

from array import array
from typing import Any

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from . import _copy, _matmul
from ._launch import PackedLaunch, thread_ident

__all__ = ["attention", "ATTENTION_DTYPES", "MAX_HEAD_DIM", "DECODE_QUERIES", "TILED_HEAD_DIM",
           "PRODUCT_QUERIES", "PRODUCT_MAX_KEYS"]

_U8 = np.dtype(np.uint8)
ATTENTION_DTYPES = frozenset((np.dtype(np.float16), np.dtype("bfloat16"), np.dtype(np.float32)))
MAX_HEAD_DIM = 256
CHUNK = 1024          # keys per block of the plain kernel at most
DECODE_QUERIES = 16   # up to this many query rows the split kernels run, above it the tiled
TILED_HEAD_DIM = 128  # the tiled kernel's widest head (its key and value tiles in shared memory)
PRODUCT_QUERIES = 64  # from this many query rows an unmasked attention takes the products
PRODUCT_MAX_KEYS = 1024   # the most keys the products' softmax holds in a warp's registers
_PRODUCT_SCORES_LIMIT = 1 << 28   # the most float32 scores (1 GiB) the products path makes
_TILED_WARPS = 8      # warps per block of the tiled kernel
_ROWS_PER_WARP = 2    # query rows per warp of the tiled kernel
_GRID_Y_CAP = 65535   # the grid's second dimension at most
_THREADS = 256        # threads of a plain block
_VECTOR_WARPS = 4     # warps of a vectorised block
_BLOCKS_WANTED = 264  # about two blocks per multiprocessor of an H100


# -- the split kernels (few query rows) -------------------------------------------------
# mask kinds
_NO_MASK, _BOOL_MASK, _ADD_MASK, _CAUSAL = 0, 1, 2, 3
# parameter slots: pointers q k v mask out part, then counts, then strides, then the scale
_ATTENTION_SLOTS = 29   # the vectorised kernel's counters last; the others take 28
_PLAIN_BLOCKS_WANTED = 64   # the plain kernel splits the keys until this many blocks run


def _mask_access(mask_dtype: np.dtype | None) -> tuple[str, str]:
    """(the C type a mask is read as, the float expression of its element ``mo``): a bool
    mask (``_U8``) or none is read as bytes."""
    if mask_dtype is None or mask_dtype == _U8:
        return "unsigned char", "mask[mo]"
    return _source.storage_type(mask_dtype), _source.load_expr(mask_dtype, "mask[mo]")


def _parameters(storage: str, mask_storage: str) -> list[str]:
    """The parameter lines every attention kernel starts with, up to its scale (one slot
    layout: ``_ATTENTION_SLOTS``, which ``attention`` fills the same way for each)."""
    return [
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
    ]


def _masking(indent: int, score: str, mask_load: str) -> list[str]:
    """The lines deciding whether key ``j`` stays for query row ``i`` (``keep``, true on entry
    for a key that exists) and adding an additive mask to ``score``: causal keeps ``j <= i``,
    a bool mask its true entries (mask kinds as ``_CAUSAL`` and the others)."""
    pad = " " * indent
    return [f"{pad}if (mask_kind == 3) {{",
            f"{pad}    keep = keep && j <= i;",
            f"{pad}}} else if (mask_kind != 0 && keep) {{",
            f"{pad}    const tp_i64 mo = bi * mb + h * mh + i * ml + j * ms;",
            f"{pad}    const float mv = (float){mask_load};",
            f"{pad}    if (mask_kind == 1) keep = mv != 0.0f;",
            f"{pad}    else {score} += mv;",
            f"{pad}}}"]


def _attention_source(dtype: np.dtype, mask_dtype: np.dtype | None, name: str) -> str:
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "{}")
    mask_storage, mask_load = _mask_access(mask_dtype)
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
        *_parameters(storage, mask_storage),
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


def _vector_source(dtype: np.dtype, mask_dtype: np.dtype | None, dim: int,
                   name: str) -> str:
    """The vectorised split kernel for heads ``dim`` wide (see the module docstring)."""
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "{}")
    lanes_per_key, per_lane, vector = _vector_shape(dtype, dim)
    groups = 32 // lanes_per_key
    slots = _VECTOR_WARPS * groups
    mask_storage, mask_load = _mask_access(mask_dtype)
    if dtype.itemsize == 4:
        unpack = ["            vals[4 * r + 0] = __uint_as_float(raw.x);",
                  "            vals[4 * r + 1] = __uint_as_float(raw.y);",
                  "            vals[4 * r + 2] = __uint_as_float(raw.z);",
                  "            vals[4 * r + 3] = __uint_as_float(raw.w);"]
    else:
        half = "tp_ld_bf16" if dtype == np.dtype("bfloat16") else "tp_ld_f16"
        unpack = ["            const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};",
                  "            for (int t = 0; t < 4; ++t) {",
                  f"                vals[8 * r + 2 * t] = {half}((unsigned short)(words[t] & "
                  "0xffffu));",
                  f"                vals[8 * r + 2 * t + 1] = {half}((unsigned short)(words[t] "
                  ">> 16));",
                  "            }"]

    def read_row(pointer: str) -> list[str]:
        return [f"        for (int r = 0; r < {per_lane}; ++r) {{",
                f"            const uint4 raw = valid ? ((const uint4*)({pointer}))"
                f"[r * {lanes_per_key} + sub] : make_uint4(0u, 0u, 0u, 0u);",
                *unpack,
                "        }"]
    return "\n".join([
        _source.HELPERS,
        "#define TP_NEG_INF (-__int_as_float(0x7f800000))",
        f'extern "C" __global__ void __launch_bounds__({32 * _VECTOR_WARPS}) {name}(',
        *_parameters(storage, mask_storage),
        "        const double scale, unsigned int* __restrict__ done) {",
        f"    __shared__ float slot_max[{slots}], slot_sum[{slots}];",
        "    __shared__ bool last_block;",
        f"    __shared__ float slot_out[{slots}][{dim}];",
        "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;",
        f"    const int g = lane / {lanes_per_key}, sub = lane % {lanes_per_key};",
        f"    const int slot = warp * {groups} + g;",
        "    const tp_i64 row = blockIdx.x;               // (batch, head, query row)",
        "    const tp_i64 i = row % length, bh = row / length;",
        "    const tp_i64 h = bh % heads, bi = bh / heads, hk = h / group;",
        "    const tp_i64 first = (tp_i64)blockIdx.y * chunk;",
        "    const tp_i64 last = min(keys, first + chunk);",
        f"    float qv[{per_lane * vector}], acc[{per_lane * vector}], vals[{per_lane * vector}];",
        f"    for (int r = 0; r < {per_lane}; ++r)",
        f"        for (int e = 0; e < {vector}; ++e) {{",
        f"            const tp_i64 d = (tp_i64)(r * {lanes_per_key} + sub) * {vector} + e;",
        f"            qv[r * {vector} + e] = "
        f"(float){load.format('q[bi * qb + h * qh + i * ql + d]')} * (float)scale;",
        f"            acc[r * {vector} + e] = 0.0f;",
        "        }",
        f"    const {storage}* kr = k + bi * kb + hk * kh;",
        f"    const {storage}* vr = v + bi * vb + hk * vh;",
        "    float m = TP_NEG_INF, l = 0.0f;",
        # the loop's trip count is the same for the whole warp: its shuffles need every lane
        f"    for (tp_i64 base = first + warp * {groups}; base < last; base += {slots}) {{",
        "        const tp_i64 j = base + g;",
        "        const bool valid = j < last;",
        *read_row("kr + j * ks"),
        "        float s = 0.0f;",
        f"        for (int e = 0; e < {per_lane * vector}; ++e) s += qv[e] * vals[e];",
        f"        for (int o = {lanes_per_key // 2}; o > 0; o >>= 1)",
        "            s += __shfl_xor_sync(0xffffffffu, s, o);",
        "        bool keep = valid;",
        *_masking(8, "s", mask_load),
        "        if (!keep) s = TP_NEG_INF;",
        "        const float m_new = fmaxf(m, s);",
        "        if (m_new != TP_NEG_INF) {   // else nothing is kept yet in this group",
        "            const float rescale = __expf(m - m_new), p = __expf(s - m_new);",
        "            l = l * rescale + p;",
        "            m = m_new;",
        *read_row("vr + j * vs"),
        f"            for (int e = 0; e < {per_lane * vector}; ++e)",
        "                acc[e] = acc[e] * rescale + p * vals[e];",
        "        }",
        "    }",
        "    if (sub == 0) { slot_max[slot] = m; slot_sum[slot] = l; }",
        "    __syncthreads();",
        "    float top = TP_NEG_INF;",
        f"    for (int t = 0; t < {slots}; ++t) top = fmaxf(top, slot_max[t]);",
        "    const float mine = m == TP_NEG_INF ? 0.0f : __expf(m - top);",
        f"    for (int r = 0; r < {per_lane}; ++r)",
        f"        for (int e = 0; e < {vector}; ++e)",
        f"            slot_out[slot][(r * {lanes_per_key} + sub) * {vector} + e] = "
        f"acc[r * {vector} + e] * mine;",
        "    __syncthreads();",
        "    float total_sum = 0.0f;",
        f"    for (int t = 0; t < {slots}; ++t)",
        "        if (slot_max[t] != TP_NEG_INF)",
        "            total_sum += slot_sum[t] * __expf(slot_max[t] - top);",
        f"    for (int d = threadIdx.x; d < {dim}; d += blockDim.x) {{",
        "        float total = 0.0f;",
        f"        for (int t = 0; t < {slots}; ++t) total += slot_out[t][d];",
        "        if (chunks == 1) {",
        f"            out[row * {dim} + d] = {_source.store_expr(dtype, 'total / total_sum')};",
        "        } else {",
        f"            float* partial = part + (row * chunks + blockIdx.y) * {dim + 2};",
        "            partial[2 + d] = total;",
        "            if (d == 0) { partial[0] = top; partial[1] = total_sum; }",
        "        }",
        "    }",
        "    if (chunks == 1) return;",
        # the row's last block to finish merges the chunks (no second kernel); it resets the
        # row's counter for the next launch
        "    __threadfence();",
        "    __syncthreads();",
        "    if (threadIdx.x == 0)",
        "        last_block = atomicAdd(done + row, 1u) == (unsigned int)(chunks - 1);",
        "    __syncthreads();",
        "    if (!last_block) return;",
        "    __threadfence();",
        f"    const float* parts = part + row * chunks * {dim + 2};",
        "    float best = TP_NEG_INF;",
        "    for (tp_i64 c = 0; c < chunks; ++c)",
        f"        best = fmaxf(best, __ldcg(parts + c * {dim + 2}));",
        f"    for (int d = threadIdx.x; d < {dim}; d += blockDim.x) {{",
        "        float total = 0.0f, weight_sum = 0.0f;",
        "        for (tp_i64 c = 0; c < chunks; ++c) {",
        f"            const float* p = parts + c * {dim + 2};",
        "            const float chunk_max = __ldcg(p);",
        "            const float w = chunk_max == TP_NEG_INF ? 0.0f : __expf(chunk_max - best);",
        "            total += w * __ldcg(p + 2 + d);",
        "            weight_sum += w * __ldcg(p + 1);",
        "        }",
        f"        out[row * {dim} + d] = {_source.store_expr(dtype, 'total / weight_sum')};",
        "    }",
        "    if (threadIdx.x == 0) done[row] = 0u;",
        "}",
        "",
    ])


def _vector_shape(dtype: np.dtype, dim: int) -> tuple[int, int, int]:
    """``(lanes per key row, 16-byte vectors per lane, elements per vector)`` of the vectorised
    kernel for heads ``dim`` wide, or ``(0, 0, 0)`` where it does not apply."""
    vector = 16 // dtype.itemsize
    if dim % vector:
        return 0, 0, 0
    loads = dim // vector
    if loads <= 32 and 32 % loads == 0:
        return loads, 1, vector
    if loads % 32 == 0:
        return 32, loads // 32, vector
    return 0, 0, 0


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


def _tiled_source(dtype: np.dtype, mask_dtype: np.dtype | None, dim: int, name: str,
                  interleaved: bool = False) -> str:
    """The tiled kernel for heads ``dim`` wide (see the module docstring): a warp takes
    ``_ROWS_PER_WARP`` query rows, so each key and value read from shared memory serves them
    all."""
    storage = _source.storage_type(dtype)
    load = _source.load_expr(dtype, "{}")
    mask_storage, mask_load = _mask_access(mask_dtype)
    per_lane = -(-dim // 32)
    rows, warps = _ROWS_PER_WARP, _TILED_WARPS
    return "\n".join([
        _source.HELPERS,
        "#define TP_NEG_INF (-__int_as_float(0x7f800000))",
        f"#define D {dim}",
        f"#define R {rows}",
        f"#define PL {per_lane}",
        f'extern "C" __global__ void __launch_bounds__({32 * warps}) {name}(',
        *_parameters(storage, mask_storage),
        "        const double scale) {",
        # a key row padded to an odd length: lane j reads row j at one d without bank conflicts
        "    __shared__ float kt[32][D + 1];",
        "    __shared__ float vt[32][D];",
        f"    __shared__ float qs[{warps} * R][D];",
        "    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;",
        "    const tp_i64 bh = blockIdx.y, h = bh % heads, bi = bh / heads, hk = h / group;",
        f"    const tp_i64 first_row = (tp_i64)blockIdx.x * ({warps} * R) + warp * R;",
        "    for (int r = 0; r < R; ++r) {",
        "        const tp_i64 i = first_row + r;",
        "        for (int d = lane; d < D; d += 32)",
        f"            qs[warp * R + r][d] = i < length ? "
        f"(float){load.format('q[bi * qb + h * qh + i * ql + d]')} * (float)scale : 0.0f;",
        "    }",
        f"    const tp_i64 block_last = min(length, (tp_i64)(blockIdx.x + 1) * ({warps} * R)) - 1;",
        "    const tp_i64 end = mask_kind == 3 ? min(keys, block_last + 1) : keys;",
        f"    const {storage}* kr = k + bi * kb + hk * kh;",
        f"    const {storage}* vr = v + bi * vb + hk * vh;",
        "    float m[R], l[R], acc[R][PL];",
        "    for (int r = 0; r < R; ++r) {",
        "        m[r] = TP_NEG_INF;",
        "        l[r] = 0.0f;",
        "        for (int c = 0; c < PL; ++c) acc[r][c] = 0.0f;",
        "    }",
        "    for (tp_i64 t0 = 0; t0 < end; t0 += 32) {",
        "        __syncthreads();   // the previous tile is consumed (the first: qs is written)",
        f"        for (int r = warp; r < 32; r += {warps}) {{",
        "            const tp_i64 j = t0 + r;",
        "            const bool inside = j < keys;",
        "            for (int d = lane; d < D; d += 32) {",
        f"                kt[r][d] = inside ? (float){load.format('kr[j * ks + d]')} : 0.0f;",
        f"                vt[r][d] = inside ? (float){load.format('vr[j * vs + d]')} : 0.0f;",
        "            }",
        "        }",
        "        __syncthreads();",
        "        if (first_row >= length) continue;   // the same for the whole warp",
        "        const tp_i64 j = t0 + lane;",
        "        float s[R];",
        "        for (int r = 0; r < R; ++r) s[r] = 0.0f;",
        "#pragma unroll 16",
        "        for (int d = 0; d < D; ++d) {",
        "            const float kv = kt[lane][d];",
        "            for (int r = 0; r < R; ++r) s[r] += qs[warp * R + r][d] * kv;",
        "        }",
        "        float p[R];",
        "        for (int r = 0; r < R; ++r) {",
        "            const tp_i64 i = first_row + r;",
        "            bool keep = j < keys && i < length;",
        *_masking(12, "s[r]", mask_load),
        "            const float score = keep ? s[r] : TP_NEG_INF;",
        "            float top = score;",
        "            for (int o = 16; o > 0; o >>= 1)",
        "                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));",
        "            const float m_new = fmaxf(m[r], top);",
        "            p[r] = m_new == TP_NEG_INF ? 0.0f : __expf(score - m_new);",
        "            const float rescale = m[r] == TP_NEG_INF ? 0.0f : __expf(m[r] - m_new);",
        "            float total = p[r];",
        "            for (int o = 16; o > 0; o >>= 1)",
        "                total += __shfl_xor_sync(0xffffffffu, total, o);",
        "            l[r] = l[r] * rescale + total;",
        "            m[r] = m_new;",
        "            for (int c = 0; c < PL; ++c) acc[r][c] *= rescale;",
        "        }",
        "#pragma unroll 4",
        "        for (int jj = 0; jj < 32; ++jj) {",
        "            float pj[R];",
        "            for (int r = 0; r < R; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], jj);",
        "            for (int c = 0; c < PL; ++c) {",
        "                const int d = lane + 32 * c;",
        "                if (d < D) {",
        "                    const float vv = vt[jj][d];",
        "                    for (int r = 0; r < R; ++r) acc[r][c] += pj[r] * vv;",
        "                }",
        "            }",
        "        }",
        "    }",
        "    for (int r = 0; r < R; ++r) {",
        "        const tp_i64 i = first_row + r;",
        "        if (i >= length) break;",
        # the output's row of (B, H, L, D), or with ``interleaved`` of (B, L, H, D) memory
        "        const tp_i64 row = " + ("(bi * length + i) * heads + h;" if interleaved
                                        else "bh * length + i;"),
        "        for (int c = 0; c < PL; ++c) {",
        "            const int d = lane + 32 * c;",
        "            if (d < D)",
        f"                out[row * D + d] = {_source.store_expr(dtype, 'acc[r][c] / l[r]')};",
        "        }",
        "    }",
        "}",
        "",
    ])


def _attention_kernels(dtype: np.dtype, mask_dtype: np.dtype | None):
    """``(plain split kernel, its combining kernel)`` for these dtypes."""
    mask_name = "none" if mask_dtype is None else mask_dtype.name
    name = f"tp_attention_{dtype.name}_{mask_name}"

    def make():
        kernel = cupy.RawKernel(_attention_source(dtype, mask_dtype, name), name)
        return PackedLaunch(kernel, _ATTENTION_SLOTS, scalar_format="d")

    def make_combine():
        combine = f"tp_attention_combine_{dtype.name}"
        return PackedLaunch(cupy.RawKernel(_combine_source(dtype, combine), combine), 4)

    return (_kernel_cache.cached(("attention", dtype, mask_dtype), make),
            _kernel_cache.cached(("attention_combine", dtype), make_combine))


def _loaded(key: tuple, make, device: int) -> PackedLaunch:
    """The launcher cached under ``key`` (made by ``make``), its kernel compiled and loaded on
    ``device`` (under relaxed capture mode when a capture is open)."""
    packed = _kernel_cache.cached(key, make)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    return packed


def _head_kernel(kind: str, dtype: np.dtype, mask_dtype: np.dtype | None, dim: int,
                 device: int, interleaved: bool = False) -> PackedLaunch:
    """The kernel specialised on the head width ``dim``, loaded on ``device``: ``kind``
    "tiled" (``_tiled_source``; ``interleaved``: it writes an output of ``(B, L, H, D)``
    memory) or "vector" (``_vector_source``)."""
    mask_name = "none" if mask_dtype is None else mask_dtype.name
    name = f"tp_attention_{kind}_{dtype.name}_{mask_name}_{dim}{'_bl' if interleaved else ''}"

    def make():
        source = _tiled_source(dtype, mask_dtype, dim, name, interleaved) if kind == "tiled" \
            else _vector_source(dtype, mask_dtype, dim, name)
        return PackedLaunch(cupy.RawKernel(source, name), _ATTENTION_SLOTS, scalar_format="d")
    return _loaded(("attention_" + kind, dtype, mask_dtype, dim, interleaved), make, device)


def _vector_applies(q, k, v, dim: int) -> bool:
    """Whether the vectorised kernel can read ``k`` and ``v`` (16-byte aligned rows)."""
    if not _vector_shape(q.dtype, dim)[0]:
        return False
    vector = 16 // q.dtype.itemsize
    return all(a.data.ptr % 16 == 0 and all(s % vector == 0 for s in _strides(a)[:3])
               for a in (k, v))


def _strides(array) -> tuple[int, ...]:
    itemsize = array.dtype.itemsize
    return tuple(s // itemsize if n > 1 else 0 for s, n in zip(array.strides, array.shape))


# -- the products path (long prompts) --------------------------------------------------------
_SOFTMAX_WARPS = 8


def _scores_softmax_source(dtype: np.dtype, per_lane: int, name: str) -> str:
    """``probs = softmax(scores * scale)`` over rows of ``keys`` float32 scores, one warp a row
    holding ``per_lane`` values a lane; with ``causal`` row ``r`` keeps keys ``j <= r %
    length`` (its query's index), the others get probability 0. Row ``r`` of ``probs`` starts
    ``pitch`` elements after row ``r - 1``: the products path writes the probabilities over
    the scores (a row's own, which its warp has read by then), so the two pointers alias."""
    storage = _source.storage_type(dtype)
    store = _source.store_expr(dtype, "v[t] * inv")
    return "\n".join([
        _source.HELPERS,
        f"#define PL {per_lane}",
        f'extern "C" __global__ void __launch_bounds__({32 * _SOFTMAX_WARPS}) {name}(',
        f"        const float* scores, {storage}* probs,",
        "        const tp_i64 rows, const tp_i64 length, const tp_i64 keys, const tp_i64 causal,",
        "        const tp_i64 pitch, const double scale) {",
        f"    const tp_i64 row = (tp_i64)blockIdx.x * {_SOFTMAX_WARPS} + (threadIdx.x >> 5);",
        "    if (row >= rows) return;   // the whole warp",
        "    const int lane = threadIdx.x & 31;",
        "    const tp_i64 last = causal ? min(row % length, keys - 1) : keys - 1;",
        "    const float* s = scores + row * keys;",
        "    const float sc = (float)scale * 1.4426950408889634f;   // exp2 of log2(e) * x",
        "    const float neg_inf = -__int_as_float(0x7f800000);",
        "    float v[PL];",
        "    float m = neg_inf;",
        "#pragma unroll",
        "    for (int t = 0; t < PL; ++t) {",
        "        const tp_i64 j = lane + 32 * t;",
        "        v[t] = j <= last ? s[j] * sc : neg_inf;",
        "        m = fmaxf(m, v[t]);",
        "    }",
        "    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));",
        "    float sum = 0.0f;",
        "#pragma unroll",
        "    for (int t = 0; t < PL; ++t) {",
        "        v[t] = lane + 32 * t <= last ? exp2f(v[t] - m) : 0.0f;",
        "        sum += v[t];",
        "    }",
        "    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);",
        "    const float inv = 1.0f / sum;",
        f"    {storage}* p = probs + row * pitch;",
        "#pragma unroll",
        "    for (int t = 0; t < PL; ++t) {",
        "        const tp_i64 j = lane + 32 * t;",
        f"        if (j < keys) p[j] = {store};",
        "    }",
        "}",
    ])


def _scores_softmax_kernel(dtype: np.dtype, per_lane: int, device: int) -> PackedLaunch:
    name = f"tp_attention_scores_softmax_{dtype.name}_{per_lane}"

    def make():
        kernel = cupy.RawKernel(_scores_softmax_source(dtype, per_lane, name), name)
        return PackedLaunch(kernel, 8, scalar_format="d")
    return _loaded(("attention_scores_softmax", dtype, per_lane), make, device)


class _ProductsPlan:
    """The products path of one call signature (see the module docstring): the scores'
    shape, the softmax kernel and its grid, and the probabilities' strides: they are written
    over the scores (one scratch block), each row where its float32 scores began."""

    __slots__ = ("scores_shape", "softmax", "grid", "static", "scale", "probs_strides",
                 "dtype")

    def __init__(self, q, k, scale: float, causal: bool):
        batch, heads, length, _ = q.shape
        keys = k.shape[2]
        self.scores_shape = (batch, heads, length, keys)
        rows = batch * heads * length
        per_lane = 1 << (-(-keys // 32) - 1).bit_length()
        self.softmax = _scores_softmax_kernel(q.dtype, per_lane, q.data.device_id)
        self.grid = -(-rows // _SOFTMAX_WARPS)
        self.dtype = q.dtype
        pitch = keys * 4 // q.dtype.itemsize   # a float32 score row, in the query's elements
        self.static = array("Q", (rows, length, keys, int(causal), pitch))
        self.probs_strides = (heads * length * keys * 4, length * keys * 4, keys * 4,
                              q.dtype.itemsize)
        self.scale = scale

    def run(self, q, k, v, out) -> None:
        scores = cupy.empty(self.scores_shape, np.float32)
        _matmul.matmul(q, k.swapaxes(-1, -2), scores)
        memory = scores.data
        probs = scores if self.dtype == scores.dtype else cupy.ndarray(
            self.scores_shape, self.dtype, memory, self.probs_strides)
        packed = self.softmax
        found = packed.buffers.get(thread_ident()) or packed.buffer()
        values = found[0]
        values[0] = values[1] = memory.ptr
        values[2:7] = self.static
        found[3][7] = self.scale
        packed(self.grid, 32 * _SOFTMAX_WARPS, found[1])
        _matmul.matmul(probs, v, out)


def _products_apply(q, k, v, mask, dim: int) -> bool:
    """Whether a call takes the products path (see the module docstring)."""
    batch, heads, length, _ = q.shape
    keys = k.shape[2]
    return (mask is None and length >= PRODUCT_QUERIES and 0 < keys <= PRODUCT_MAX_KEYS
            and k.shape[1] == heads and batch * heads * length * keys <= _PRODUCT_SCORES_LIMIT
            and _matmul.available() and dim > 0)


class _Plan:
    """What one call signature launches: the kernels, grids and every parameter that is not
    an address (``static``, slots 6 to 26), and the flash-decoding partials' size."""

    __slots__ = ("packed", "grid", "chunks", "threads", "static", "scale", "combine",
                 "combine_threads", "part_size", "counters", "writes_layout")

    def __init__(self, packed, grid, chunks, threads, static, scale, combine, part_size,
                 combine_threads, merges_itself=False):
        self.packed, self.grid, self.chunks, self.threads = packed, grid, chunks, threads
        self.static, self.scale = static, scale
        self.combine, self.part_size = combine, part_size
        self.combine_threads = combine_threads
        # the vectorised kernel merges its chunks itself, counting finished blocks per row in
        # a zeroed array that its last block resets: one per stream, so that launches on two
        # streams never share one (None: a separate combining kernel merges)
        self.counters: dict[int, Any] | None = {} if merges_itself else None
        #: whether the kernel writes the output's own layout when it is not C order (the
        #: tiled kernel's interleaved heads); else such an output goes through scratch
        self.writes_layout = False


#: the plan of a signature whose kernels take it but whose output is not C-contiguous
_THROUGH_SCRATCH = object()
#: call signature -> its plan, or None for a signature the kernels do not take
_plans: dict[tuple, Any] = {}
_PLANS_KEPT = 512   # signatures remembered at most (shapes of a model are few)


def attention(q, k, v, mask, out, scale: float, causal: bool) -> bool:
    """``out[...] = softmax(q @ k.mT * scale + mask) @ v`` (see the module docstring) on
    CuPy's current stream: ``q`` ``(B, H, L, D)``, ``k``/``v`` ``(B, Hkv, S, D)`` of one dtype
    (``H`` a multiple of ``Hkv``); ``mask`` None or broadcastable to ``(B, H, L, S)`` (bool,
    or additive of the query's dtype or float32); ``out`` ``(B, H, L, D)``, C-contiguous or
    any layout: the products path writes it in place through cuBLASLt and the tiled kernel
    the heads of a ``(B, L, H, D)`` output; the other kernels write C order into scratch,
    copied into another layout.
    Returns False, launching nothing, for what the kernels do not take (float64, heads over
    ``MAX_HEAD_DIM``, a last dimension that is not contiguous, negative strides, another mask
    dtype). Everything but the addresses is worked out once per call signature (the eager
    hot path: a decode step calls this with the same shapes every token)."""
    if out.size == 0:
        return True
    key = (q.shape, q.strides, k.shape, k.strides, v.strides, q.dtype, k.dtype, v.dtype,
           causal, scale, k.data.ptr & 15, v.data.ptr & 15, q.data.device_id,
           None if mask is None else (mask.shape, mask.strides, mask.dtype), out.strides)
    try:
        plan = _plans[key]
    except KeyError:
        plan = _plan(q, k, v, mask, out, scale, causal)
        if plan is not None and not isinstance(plan, _ProductsPlan) and \
                not out.flags.c_contiguous and not plan.writes_layout:
            plan = _THROUGH_SCRATCH
        if len(_plans) < _PLANS_KEPT:
            _plans[key] = plan
    if plan is None:
        return False
    if isinstance(plan, _ProductsPlan):
        plan.run(q, k, v, out)   # the product with the values writes out's strides itself
        return True
    if plan is _THROUGH_SCRATCH:   # the kernels write C order: into scratch, then one copy
        target = cupy.empty(out.shape, out.dtype)
        attention(q, k, v, mask, target, scale, causal)
        if not _copy.copy(out, target):
            out[...] = target
        return True
    part = None if not plan.part_size else cupy.empty(plan.part_size, np.float32)
    packed = plan.packed
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    values[0], values[1], values[2] = q.data.ptr, k.data.ptr, v.data.ptr
    values[3] = 0 if mask is None else mask.data.ptr
    values[4], values[5] = out.data.ptr, 0 if part is None else part.data.ptr
    values[6:27] = plan.static
    found[3][27] = plan.scale
    counters = plan.counters
    if counters is not None and part is not None:
        stream = cupy.cuda.get_current_stream().ptr
        done = counters.get(stream)
        if done is None:
            done = counters[stream] = cupy.zeros(plan.grid, np.uint32)
        values[28] = done.data.ptr
        packed.launch_2d(plan.grid, plan.chunks, plan.threads, found[1])
        return True
    packed.launch_2d(plan.grid, plan.chunks, plan.threads, found[1])
    if part is not None:
        combine = plan.combine
        found = combine.buffers.get(thread_ident()) or combine.buffer()
        values = found[0]
        values[0], values[1] = part.data.ptr, out.data.ptr
        values[2], values[3] = q.shape[3], plan.chunks
        combine(plan.grid, plan.combine_threads, found[1])
    return True


def _plan(q, k, v, mask, out, scale: float, causal: bool) -> _Plan | _ProductsPlan | None:
    """The plan of a call signature (see :func:`attention`), or None where the kernels do not
    apply; compiles and loads the kernels on first use per device.

    Raises:
        ValueError: shapes that are not attention's (the caller checked them).
    """
    dtype = q.dtype
    itemsize = dtype.itemsize
    if dtype not in ATTENTION_DTYPES or k.dtype != dtype or v.dtype != dtype or \
            out.dtype != dtype or q.shape[-1] > MAX_HEAD_DIM or (q.shape[-1] > 1 and (
                q.strides[-1] != itemsize or k.strides[-1] != itemsize
                or v.strides[-1] != itemsize)):
        return None
    if mask is not None and mask.dtype != np.bool_ and mask.dtype != dtype and \
            mask.dtype != np.float32:
        return None
    if min(q.strides + k.strides + v.strides + (mask.strides if mask is not None else ())
           + (0,)) < 0:
        return None   # the kernels take their strides unsigned
    batch, heads, length, dim = q.shape
    keys = k.shape[2]
    if k.ndim != 4 or v.shape != k.shape or k.shape[0] != batch or k.shape[3] != dim or \
            heads % k.shape[1] or out.shape != q.shape:
        raise ValueError(f"attention: unsupported shapes or layouts q {q.shape}, k {k.shape}, "
                         f"v {v.shape}, out {out.shape}")
    mask_strides: tuple[int, ...]   # in elements, one per dimension of the 4-d scores
    if mask is None:
        mask_dtype, mask_strides = None, (0, 0, 0, 0)
    else:   # read in place through its strides: 0 along the broadcast dimensions
        mask_dtype = mask.dtype
        if mask_dtype == np.bool_:
            mask_dtype = _U8   # bool is one byte: read as unsigned char
        pad = 4 - mask.ndim
        mask_strides = tuple(
            0 if i < pad or mask.shape[i - pad] == 1 else mask.strides[i - pad] // mask.itemsize
            for i in range(4))
    kind = _CAUSAL if causal else (_NO_MASK if mask is None else
                                   _BOOL_MASK if mask_dtype == _U8 else _ADD_MASK)
    packed, combine = _attention_kernels(dtype, mask_dtype)
    device = q.data.device_id
    rows = batch * heads * length

    def static(chunks: int, chunk: int) -> array:
        return array("Q", (heads, heads // k.shape[1], length, keys, dim, kind, chunks, chunk)
                     + _strides(q)[:3] + _strides(k)[:3] + _strides(v)[:3] + mask_strides)
    if _products_apply(q, k, v, mask, dim):
        return _ProductsPlan(q, k, scale, causal)
    if length > DECODE_QUERIES and dim <= TILED_HEAD_DIM and batch * heads <= _GRID_Y_CAP:
        item = out.itemsize
        interleaved = out.strides == (length * heads * dim * item, dim * item,
                                      heads * dim * item, item)
        tiled = _head_kernel("tiled", dtype, mask_dtype, dim, device, interleaved)
        rows_per_block = _TILED_WARPS * _ROWS_PER_WARP
        plan = _Plan(tiled, -(-length // rows_per_block), batch * heads, 32 * _TILED_WARPS,
                     static(1, keys), scale, None, 0, 32)
        plan.writes_layout = interleaved
        return plan
    vector = _vector_applies(q, k, v, dim)
    if vector:   # merges its own chunks: no combining kernel
        packed = _head_kernel("vector", dtype, mask_dtype, dim, device)
        blocks_wanted, step, threads = _BLOCKS_WANTED, 32, 32 * _VECTOR_WARPS
    else:
        if not _kernel_cache.is_warm(("attention", dtype, mask_dtype), device):
            _kernel_cache.warm(("attention", dtype, mask_dtype), device,
                               lambda: (packed.kernel.kernel, combine.kernel.kernel))
        blocks_wanted, step, threads = _PLAIN_BLOCKS_WANTED, 128, _THREADS
    wanted = -(-blocks_wanted // rows)
    chunk = min(CHUNK, max(step, (-(-keys // wanted) + step - 1) // step * step))
    chunks = -(-keys // chunk)
    if chunks > _GRID_Y_CAP:
        chunk = -(-keys // _GRID_Y_CAP)
        chunks = -(-keys // chunk)
    part_size = 0 if chunks == 1 else rows * chunks * (dim + 2)
    return _Plan(packed, rows, chunks, threads, static(chunks, chunk), scale, combine,
                 part_size, min(1024, max(32, dim)), merges_itself=vector)
