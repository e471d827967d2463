"""Softmax as three CuPy kernels, and ``erf`` as one, for the cuda backend.

The op layer (``_tensor/activations.py``) composes softmax from ``xp`` calls, which on CuPy would
launch one kernel per call. Here :func:`softmax` ``(x, dim, out, log)`` is a
``cupy.ReductionKernel`` for the row maximum, one for the sum of ``exp(x - max)``, and one
``ElementwiseKernel`` that writes the result (log-softmax: ``x - max - log(sum)``). The
elementwise activations (gelu, silu, sigmoid, erf) are raw kernels of ``_elementwise.py``.

float16 computes in float32 and rounds once when stored; float64 computes in double. Kernels are
made once per (kind, dtype) in the backend's one kernel cache (``_kernels``) and compiled and
loaded by CuPy on first use per device; that first call runs under relaxed capture mode (loading
a module inside a global-mode capture is refused). The two small temporaries come from CuPy's
allocator, which tensorplay routes into the graph's pool while a stream captures. Nothing here
synchronizes the host.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from . import _kernels as _kernel_cache

__all__ = ["softmax", "erf"]

# per compute type: (C type, numpy name for kernel parameters, math functions, -inf literal)
_DOUBLE = ("double", "float64", {"exp": "exp", "log": "log", "erf": "erf", "tanh": "tanh",
                                 "fabs": "fabs", "fmax": "fmax"},
           "-__longlong_as_double(0x7ff0000000000000LL)")
_FLOAT = ("float", "float32", {"exp": "expf", "log": "logf", "erf": "erff", "tanh": "tanhf",
                               "fabs": "fabsf", "fmax": "fmaxf"},
          "-__int_as_float(0x7f800000)")
_COMPUTE = {np.dtype(np.float16): _FLOAT, np.dtype(np.float32): _FLOAT,
            np.dtype(np.float64): _DOUBLE}

_BF16 = np.dtype("bfloat16")   # registered by ml_dtypes, which tensorplay imports first


def _check_dtype(dtype, what: str) -> None:
    if dtype not in _COMPUTE:
        raise TypeError(f"{what} needs a CuPy array of float16, bfloat16, float32 or float64, "
                        f"got {dtype}")


def _build(key: tuple):
    kind, dtype = key[0], key[-1]
    ctype, cname, functions, minus_inf = _COMPUTE[dtype]
    tag = f"{kind}_{dtype.char}"
    if kind == "max":
        return cupy.ReductionKernel("T x", f"{cname} m", f"({ctype})x",
                                    f"{functions['fmax']}(a, b)", "m = a", minus_inf,
                                    f"tp_softmax_max_{dtype.char}", reduce_type=ctype)
    if kind == "sumexp":
        return cupy.ReductionKernel(f"T x, {cname} m", f"{cname} s",
                                    f"{functions['exp']}(({ctype})x - m)", "a + b", "s = a",
                                    "0", f"tp_softmax_sum_{dtype.char}", reduce_type=ctype)
    formula = (f"{functions['exp']}(({ctype})x - m) / s" if kind == "softmax" else
               f"(({ctype})x - m) - {functions['log']}(s)")
    return cupy.ElementwiseKernel(f"T x, {cname} m, {cname} s", "T y",
                                  f"y = (T)({formula});", f"tp_{tag}")


def _kernel(key: tuple):
    """The CuPy kernel for ``key`` (``(kind, dtype)``), made once in the backend's kernel cache."""
    return _kernel_cache.cached(("softmax",) + key, lambda: _build(key))


def _check_pair(x, out, what: str) -> None:
    if not isinstance(x, cupy.ndarray) or not isinstance(out, cupy.ndarray):
        raise TypeError(f"{what} needs CuPy arrays, got {type(x).__name__} and "
                        f"{type(out).__name__}")
    if x.dtype != out.dtype or x.shape != out.shape:
        raise ValueError(f"{what}: out must match x (got {out.dtype}{out.shape} for "
                         f"{x.dtype}{x.shape})")


def _run(keys: tuple, device_id: int, call) -> None:
    """``call()`` now; the first time ``keys`` run on the device (where CuPy compiles and loads
    them) through the kernel cache's :func:`~._kernels.warm`, under relaxed capture mode."""
    warm_key = ("softmax",) + keys
    if _kernel_cache.is_warm(warm_key, device_id):
        call()
        return
    ran = []

    def first() -> None:
        call()
        ran.append(True)
    _kernel_cache.warm(warm_key, device_id, first)
    if not ran:   # another thread warmed them meanwhile
        call()


def softmax(x, dim: int, out, log: bool) -> None:
    """``out[...] = softmax(x, dim)`` (``log``: log-softmax) in three kernels: the maximum and
    the sum of ``exp(x - max)`` along ``dim`` (kept as size-1 dims, in the compute type), then
    the result.

    bfloat16 is computed in float32 (a widened copy, then one rounding into ``out``).

    Raises:
        ValueError: ``out`` of another dtype or shape; ``dim`` out of range for ``x``.
        TypeError: arrays that are not CuPy arrays of float16/bfloat16/float32/float64.
    """
    _check_pair(x, out, "softmax")
    if x.dtype == _BF16:
        wide = cupy.empty(out.shape, np.float32)
        softmax(x.astype(np.float32), dim, wide, log)
        out[...] = wide
        return
    _check_dtype(x.dtype, "softmax")
    if not -x.ndim <= dim < max(x.ndim, 1) or x.ndim == 0:
        raise ValueError(f"softmax: dim {dim} is out of range for {x.ndim} dimension(s)")
    axis = dim % x.ndim
    keys = (("max", x.dtype), ("sumexp", x.dtype),
            ("log_softmax" if log else "softmax", x.dtype))
    top, sumexp, finish = (_kernel(key) for key in keys)

    def call() -> None:
        peak = top(x, axis=axis, keepdims=True)
        total = sumexp(x, peak, axis=axis, keepdims=True)
        finish(x, peak, total, out)
    _run(keys, x.device.id, call)


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
