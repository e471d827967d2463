"""Softmax as one kernel, and ``erf`` as one, for the cuda backend.

The op layer (``_tensor/activations.py``) composes softmax from ``xp`` calls, which on CuPy would
launch one kernel per call. Here :func:`softmax` ``(x, dim, out, log)`` is ONE raw kernel
(``_elementwise_source.softmax_rows_source`` over the last dimension: a warp, or for rows
longer than 1024 a block, reads each row once into registers, reduces its maximum and the sum of
``exp(x - max)`` by warp shuffles and writes the result once; ``softmax_source`` along any other
dimension and for rows too long for registers), launched through
:class:`._launch.PackedLaunch`. The elementwise activations (gelu, silu, sigmoid, erf) are raw
kernels of ``_elementwise.py``.

float16 and bfloat16 compute in float32 and round once when stored; float64 computes in double.
Kernels are made once per (dtype, log, row plan) in the backend's one kernel cache
(``_kernels``) and compiled and loaded on first use per device under relaxed capture mode
(loading a module inside a global-mode capture is refused). A non-contiguous input or output
takes a contiguous copy from CuPy's allocator, which tensorplay routes into the graph's pool
while a stream captures. Nothing here synchronizes the host.
"""

from __future__ import annotations

import math
from typing import Any

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["softmax", "softmax_launcher", "erf"]

_BF16 = np.dtype("bfloat16")   # registered by ml_dtypes, which tensorplay imports first
_SOFTMAX_DTYPES = frozenset((np.dtype(np.float16), _BF16, np.dtype(np.float32),
                             np.dtype(np.float64)))


def _check_pair(x, out, what: str) -> None:
    if not isinstance(x, cupy.ndarray) or not isinstance(out, cupy.ndarray):
        raise TypeError(f"{what} needs CuPy arrays, got {type(x).__name__} and "
                        f"{type(out).__name__}")
    if x.dtype != out.dtype or x.shape != out.shape:
        raise ValueError(f"{what}: out must match x (got {out.dtype}{out.shape} for "
                         f"{x.dtype}{x.shape})")


def _softmax_kernel(dtype: np.dtype, log: bool) -> PackedLaunch:
    """The softmax kernel's launcher for ``dtype`` (x, y, length, inner, rows), made once."""
    def make() -> PackedLaunch:
        kernel = cupy.RawKernel(_source.softmax_source(dtype, log),
                                _source.softmax_name(dtype, log))
        return PackedLaunch(kernel, 5)
    return _kernel_cache.cached(("softmax", dtype, log), make)


def _softmax_rows_kernel(dtype: np.dtype, log: bool, plan: tuple) -> PackedLaunch:
    """The register row kernel's launcher for ``plan`` (``_source.row_plan``'s ``(warp, width,
    vectors, threads)``; parameters x, y, length, rows), made once per kernel."""
    warp, width, vectors, _ = plan

    def make() -> PackedLaunch:
        kernel = cupy.RawKernel(_source.softmax_rows_source(dtype, log, warp, width, vectors),
                                _source.softmax_rows_name(dtype, log, warp, width, vectors))
        return PackedLaunch(kernel, 4)
    return _kernel_cache.cached(("softmax-rows", dtype, log, warp, width, vectors), make)


#: softmax's call signature (shapes, strides, dtypes, dim, log, device, 16-byte alignment)
#: -> ``(packed, blocks, threads, length, rows)``: its register row kernel's launch
_row_launches: dict = {}


def _softmax_rows(x, target, length: int, log: bool) -> tuple | None:
    """Softmax over the last dimension of C-contiguous ``x`` into ``target`` by the register
    row kernel (``_source.softmax_rows_source``): each row read once and written once, 16
    bytes a load where both arrays and every row start on 16-byte boundaries. Returns the
    launch ``(packed, blocks, threads, length, rows)`` (kept per signature by the caller);
    None, launching nothing, for rows too long to keep in registers."""
    itemsize = x.dtype.itemsize
    vectorized = not ((x.data.ptr | target.data.ptr | length * itemsize) % _source.VECTOR_BYTES)
    plan = _source.row_plan(length, x.dtype, vectorized) or ()
    if not plan:
        return None
    packed = _softmax_rows_kernel(x.dtype, log, plan)
    key = ("softmax-rows", x.dtype, log) + plan[:3]
    device = x.data.device_id
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    rows = x.size // length
    values[0], values[1], values[2], values[3] = x.data.ptr, target.data.ptr, length, rows
    blocks, threads = _source.row_grid(plan, rows)
    packed(blocks, threads, found[1])
    return packed, blocks, threads, length, rows


def softmax(x, out, dim: int, log: bool) -> None:
    """``out[...] = softmax(x, dim)`` (``log``: log-softmax) in one kernel on CuPy's current
    stream: along the last dimension (and any dimension followed by ones only), rows that fit in
    registers (``_elementwise_source.row_plan``: up to 32768 float32, 16384 float16 or bfloat16
    elements, 8192 float64 or off 16-byte boundaries) are read once and written once; other
    dimensions and longer rows take the kernel that reads a row three times.

    Raises:
        ValueError: ``out`` of another dtype or shape; ``dim`` out of range for ``x``.
        TypeError: arrays that are not CuPy arrays of float16/bfloat16/float32/float64.
    """
    if type(x) is cupy.ndarray and type(out) is cupy.ndarray:
        # the hot path: a signature whose launch is kept (C-contiguous arrays whose rows fit
        # in registers; the 16-byte alignment of this call's addresses is part of the key)
        x_ptr, y_ptr = x.data.ptr, out.data.ptr
        key = (x.shape, x.strides, out.shape, out.strides, x.dtype, out.dtype, dim, log,
               x.data.device_id, not (x_ptr | y_ptr) % _source.VECTOR_BYTES)
        launch = _row_launches.get(key)
        if launch is not None:
            packed, blocks, threads, length, rows = launch
            found = packed.buffers.get(thread_ident()) or packed.buffer()
            values = found[0]
            values[0], values[1], values[2], values[3] = x_ptr, y_ptr, length, rows
            packed(blocks, threads, found[1])
            return
    else:
        key = None
    _check_pair(x, out, "softmax")
    if x.dtype not in _SOFTMAX_DTYPES:
        raise TypeError(f"softmax needs a CuPy array of float16, bfloat16, float32 or float64, "
                        f"got {x.dtype}")
    if not -x.ndim <= dim < max(x.ndim, 1) or x.ndim == 0:
        raise ValueError(f"softmax: dim {dim} is out of range for {x.ndim} dimension(s)")
    if x.size == 0:
        return
    given = x
    axis = dim % x.ndim
    length = x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    rows = x.size // length
    if not x.flags.c_contiguous:
        x = cupy.ascontiguousarray(x)
    target = out if out.flags.c_contiguous else cupy.empty(out.shape, out.dtype)
    launch = _softmax_rows(x, target, length, log) if inner == 1 else None
    if launch is not None:
        if target is not out:
            out[...] = target
        elif key is not None and x is given:   # both C-contiguous: the launch is kept
            _kernel_cache.remember(_row_launches, key, launch)
        return
    packed = _softmax_kernel(x.dtype, log)
    device = x.data.device_id
    if not _kernel_cache.is_warm(("softmax", x.dtype, log), device):
        _kernel_cache.warm(("softmax", x.dtype, log), device, lambda: packed.kernel.kernel)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    values[0], values[1] = x.data.ptr, target.data.ptr
    values[2], values[3], values[4] = length, inner, rows
    threads = min(1024, max(32, 1 << (length - 1).bit_length()))
    packed(min(rows, _source.ROW_GRID_CAP), threads, found[1])
    if target is not out:
        out[...] = target


def softmax_launcher(x, dim: int, log: bool):
    """A launcher ``fn(x, out)`` of :func:`softmax` along ``dim`` for arrays laid out as ``x``
    (its shape, strides, dtype and device; ``out`` C-contiguous of the same shape and dtype),
    or None where the register row kernel does not take that layout (a C-contiguous ``x`` whose
    rows along ``dim`` fit in registers, ``dim`` followed by ones only).

    The launcher writes the two addresses and launches the kernel chosen here: nothing of the
    signature is looked at again, which is what makes it cheaper per call than
    :func:`softmax`. Where the layout allows 16-byte loads, an address off a 16-byte boundary
    (a view into the middle of a buffer) takes :func:`softmax`, which picks the scalar kernel.
    Pitfall: arrays of another layout give wrong results; the caller keeps one launcher per
    layout (``_tensor``'s softmax plan).
    """
    if type(x) is not cupy.ndarray or x.dtype not in _SOFTMAX_DTYPES or x.ndim == 0 or \
            x.size == 0 or not x.flags.c_contiguous or not -x.ndim <= dim < x.ndim:
        return None
    axis = dim % x.ndim
    length = x.shape[axis]
    if math.prod(x.shape[axis + 1:]) != 1:
        return None
    dtype = x.dtype
    vectorizable = not (length * dtype.itemsize) % _source.VECTOR_BYTES
    plan = _source.row_plan(length, dtype, vectorizable)
    if not plan:
        return None
    packed = _softmax_rows_kernel(dtype, log, plan)
    key = ("softmax-rows", dtype, log) + plan[:3]
    device = x.data.device_id
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    rows = x.size // length
    blocks, threads = _source.row_grid(plan, rows)
    buffers, buffer, ident = packed.buffers, packed.buffer, thread_ident
    misaligned = _source.VECTOR_BYTES - 1 if vectorizable else 0

    def launch(x, out) -> None:
        x_ptr, y_ptr = x.data.ptr, out.data.ptr
        if (x_ptr | y_ptr) & misaligned:
            softmax(x, out, dim, log)
            return
        found = buffers.get(ident()) or buffer()
        values = found[0]
        values[0], values[1], values[2], values[3] = x_ptr, y_ptr, length, rows
        packed(blocks, threads, found[1])
    launch.tp_arguments_only = True  # type: ignore[attr-defined]  # Note [write records]
    return launch


# -- erf --------------------------------------------------------------------------------------
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
    if _kernel_cache.is_warm(key, x.device.id):
        return _kernel_cache.cached(key, None)(x)   # made by the warm-up below
    # the first call per device imports, compiles and loads under relaxed capture mode
    y = _kernel_cache.warm(
        key, x.device.id, lambda: _kernel_cache.cached(key, lambda: _make_erf(dtype))(x))
    # None: another thread warmed it
    return _kernel_cache.cached(key, None)(x) if y is None else y
