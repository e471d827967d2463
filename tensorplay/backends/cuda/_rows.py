"""The ``layer_norm`` row kernel of the cuda backend: ONE raw kernel launched through
:class:`._launch.PackedLaunch`.

``layer_norm(x, weight, bias, out, eps)``
    Per row of the last dimension: the mean, then the biased variance of the centred values
    (the two-pass form, as accurate as the composed one), then ``(x - mean) * rsqrt(var + eps)
    * weight + bias``. Rows that fit in registers (``_elementwise_source.row_plan``: up to
    32768 float32, 16384 float16 or bfloat16 elements, 8192 float64 or off 16-byte boundaries)
    are read once into registers (a warp per row up to 1024 elements, else a block; 16-byte
    loads where every operand and row start on 16-byte boundaries) and written once; longer
    rows take one block per row that reads the row three times. float16, bfloat16 and float32
    compute in float, float64 in double; each element is rounded once when stored.

Kernels are made once per signature in the one kernel cache (``_kernels``) and compiled and
loaded on first use per device under relaxed capture mode. Nothing here synchronizes the host.
"""

from __future__ import annotations

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["layer_norm", "layer_norm_launcher", "LAYER_NORM_DTYPES"]

_BF16 = np.dtype("bfloat16")   # registered by ml_dtypes, which tensorplay imports first
_F32 = np.dtype(np.float32)
LAYER_NORM_DTYPES = frozenset((np.dtype(np.float16), _BF16, _F32, np.dtype(np.float64)))


# -- layer_norm ------------------------------------------------------------------------------
#: layer_norm's call signature (shapes, dtypes, device, 16-byte alignment) -> ``(packed,
#: blocks, threads, length, rows)``: its kernel's launch, made and checked at the first call
_launches: dict = {}


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


def _layer_norm_rows_source(dtype: np.dtype, name: str, warp: bool, width: int,
                            vectors: int) -> str:
    """The register row kernel of ``layer_norm`` for a plan of ``_source.row_plan``: each
    thread loads its ``vectors`` loads of ``width`` elements of a row once, the mean and then
    the biased variance of the centred values come from those registers (the two-pass form,
    one read), and each element is written once. Parameters as the two-pass kernel's. Pitfall:
    ``width > 1`` needs ``x``, ``y``, ``w`` and ``b`` on 16-byte boundaries and ``length`` a
    multiple of ``width`` (not checked)."""
    storage, acc = _source.storage_type(dtype), _source.compute_type(dtype)
    rsqrt = "rsqrt" if acc == "double" else "rsqrtf"
    reduce_sum = "tp_warp_sum(s)" if warp else "tp_block_sum(s, shared)"
    reduce_drift = "tp_warp_sum(drift)" if warp else "tp_block_sum(drift, shared)"
    bounds = "" if warp else f"__launch_bounds__({_source.ROW_BLOCK_LIMIT}) "
    return "\n".join([
        _source.row_helpers(dtype, width),
        f"constexpr int W = {width};",
        f'extern "C" __global__ void {bounds}{name}(',
        f"        const {storage}* __restrict__ x, const {storage}* __restrict__ w,",
        f"        const {storage}* __restrict__ b, {storage}* __restrict__ y,",
        "        const tp_i64 length, const tp_i64 rows, const double eps) {",
        "" if warp else f"    __shared__ {acc} shared[32];",
        *_source.row_loop(warp, vectors),
        *_source.row_registers(dtype, acc, f"{acc} s = 0;", "s += v[k * W + t];"),
        f"        {acc} mean = {reduce_sum} / ({acc})length;",
        "        s = 0;",
        f"        {acc} drift = 0;",
        "        #pragma unroll",
        "        for (int k = 0; k < K; ++k) {",
        "            if (k * nthreads + tid < n) {",
        "                #pragma unroll",
        "                for (int t = 0; t < W; ++t) {",
        f"                    const {acc} c = v[k * W + t] - mean;",
        "                    s += c * c;",
        "                    drift += c;",
        "                }",
        "            }",
        "        }",
        # the corrected two-pass form: the centred values' own sum is the rounding error of
        # the first mean (large when a common offset dwarfs the spread), taken out of both
        f"        const {acc} shift = {reduce_drift} / ({acc})length;",
        f"        const {acc} spread = {reduce_sum} / ({acc})length - shift * shift;",
        f"        const {acc} inv = {rsqrt}(fmax(spread, ({acc})0) + ({acc})eps);",
        "        mean += shift;",
        *_source.row_stores(
            ["                tp_vec wq, bq;",
             "                if (w) wq = reinterpret_cast<const tp_vec*>(w)[i];",
             "                if (b) bq = reinterpret_cast<const tp_vec*>(b)[i];"],
            [f"                    {acc} o = (v[j] - mean) * inv;",
             f"                    if (w) o *= ({acc}){_source.load_expr(dtype, 'wq.s[t]')};",
             f"                    if (b) o += ({acc}){_source.load_expr(dtype, 'bq.s[t]')};",
             f"                    q.s[t] = {_source.store_expr(dtype, 'o')};"]),
    ])


def _layer_norm_rows_kernel(dtype: np.dtype, plan: tuple) -> PackedLaunch:
    """The register row kernel's launcher for ``plan`` (``_source.row_plan``'s ``(warp, width,
    vectors, threads)``), made once per kernel."""
    warp, width, vectors, _ = plan
    name = f"tp_layer_norm_rows_{dtype.name}_{'warp' if warp else 'block'}{width}x{vectors}"

    def make() -> PackedLaunch:
        source = _layer_norm_rows_source(dtype, name, warp, width, vectors)
        return PackedLaunch(cupy.RawKernel(source, name), 7, scalar_format="d")
    return _kernel_cache.cached(("layer_norm-rows", dtype, warp, width, vectors), make)


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
    if type(x) is cupy.ndarray and type(out) is cupy.ndarray:
        # the hot path: a signature whose launch is kept (the 16-byte alignment of this call's
        # addresses is part of the key)
        x_ptr, y_ptr = x.data.ptr, out.data.ptr
        w_ptr = 0 if weight is None else weight.data.ptr
        b_ptr = 0 if bias is None else bias.data.ptr
        signature = (x.shape, x.dtype, out.shape, out.dtype,
                     None if weight is None else (weight.shape, weight.dtype),
                     None if bias is None else (bias.shape, bias.dtype), x.data.device_id,
                     not (x_ptr | y_ptr | w_ptr | b_ptr) % _source.VECTOR_BYTES)
        launch = _launches.get(signature)
        if launch is not None:
            packed, blocks, threads, length, rows = launch
            found = packed.buffers.get(thread_ident()) or packed.buffer()
            values = found[0]
            values[0], values[1], values[2], values[3] = x_ptr, w_ptr, b_ptr, y_ptr
            values[4], values[5] = length, rows
            found[3][6] = eps
            packed(blocks, threads, found[1])
            return
    else:
        signature = None
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
    pointers = x.data.ptr | out.data.ptr | length * x.dtype.itemsize
    for param in (weight, bias):
        if param is not None:
            pointers |= param.data.ptr
    vectorized = not pointers % _source.VECTOR_BYTES
    plan = _source.row_plan(length, dtype, vectorized) or ()
    if plan:
        packed = _layer_norm_rows_kernel(dtype, plan)
        key: tuple = ("layer_norm-rows", dtype) + plan[:3]
    else:
        packed = _layer_norm_kernel(dtype)
        key = ("layer_norm", dtype)
    device = x.data.device_id
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
    if not plan:
        blocks = min(rows, _source.ROW_GRID_CAP)
        threads = min(1024, max(32, 1 << ((length + 3) // 4 - 1).bit_length()))
    else:
        blocks, threads = _source.row_grid(plan, rows)
    packed(blocks, threads, found[1])
    if signature is not None:
        _kernel_cache.remember(_launches, signature, (packed, blocks, threads, length, rows))


def layer_norm_launcher(x, weight, bias, eps: float):
    """A launcher ``fn(x, weight, bias, out)`` of :func:`layer_norm` with ``eps`` for arrays
    laid out as these (``x`` C-contiguous, its rows fitting in registers; ``weight`` and
    ``bias`` 1-D of its last dimension's length and dtype, C-contiguous; ``out`` as ``x``), or
    None for other layouts or a missing weight or bias.

    The launcher writes the four addresses and launches the kernel chosen here: nothing of the
    signature is looked at again, which makes it cheaper per call than :func:`layer_norm` (a
    transformer layer norms twice per layer per step). Where the layout allows 16-byte loads,
    an address off a 16-byte boundary takes :func:`layer_norm`, which picks the scalar kernel.
    Pitfall: arrays of another layout give wrong results; the caller keeps one launcher per
    layout (``_tensor``'s layer_norm plan).
    """
    if type(x) is not cupy.ndarray or x.dtype not in LAYER_NORM_DTYPES or x.ndim == 0 or \
            x.size == 0 or not x.flags.c_contiguous:
        return None
    dtype, length = x.dtype, x.shape[-1]
    for param in (weight, bias):
        if type(param) is not cupy.ndarray or param.dtype != dtype or \
                param.shape != (length,) or not param.flags.c_contiguous:
            return None
    vectorizable = not (length * dtype.itemsize) % _source.VECTOR_BYTES
    plan = _source.row_plan(length, dtype, vectorizable)
    if not plan:
        return None
    packed = _layer_norm_rows_kernel(dtype, plan)
    key = ("layer_norm-rows", dtype) + plan[:3]
    device = x.data.device_id
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    rows = x.size // length
    blocks, threads = _source.row_grid(plan, rows)
    buffers, buffer, ident = packed.buffers, packed.buffer, thread_ident
    misaligned = _source.VECTOR_BYTES - 1 if vectorizable else 0

    def launch(x, weight, bias, out) -> None:
        x_ptr, w_ptr, b_ptr, y_ptr = x.data.ptr, weight.data.ptr, bias.data.ptr, out.data.ptr
        if (x_ptr | w_ptr | b_ptr | y_ptr) & misaligned:
            layer_norm(x, weight, bias, out, eps)
            return
        found = buffers.get(ident()) or buffer()
        values = found[0]
        values[0], values[1], values[2], values[3] = x_ptr, w_ptr, b_ptr, y_ptr
        values[4], values[5] = length, rows
        found[3][6] = eps   # the buffer is shared by every eps this kernel is launched with
        packed(blocks, threads, found[1])
    launch.tp_arguments_only = True  # type: ignore[attr-defined]  # Note [write records]
    return launch
