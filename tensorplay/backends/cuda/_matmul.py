"""Matrix products on cuda: cuBLASLt through nvmath-python's bindings, eager and captured alike.

Why cuBLASLt and not ``cupy.matmul``: CuPy refuses cuBLAS while a stream captures, so a product
inside a tensorplay graph needs another route; nvmath-python's low-level ``cublasLt`` binding
captures cleanly when it is handed a preallocated workspace and the stream on every call. It also
offers epilogues (bias, ReLU, tanh-GELU) that run inside the GEMM.

How a call runs (:func:`matmul`): the operands' shapes, strides and alignments, the dtype, the
float32 precision and the epilogue form the key of a :class:`_Plan`, built once: a matmul
descriptor, three matrix layouts and the algorithm cuBLASLt's heuristic picks. A call then takes
its workspace (when the algorithm wants one) from CuPy's allocator, which tensorplay routes into
its caching allocator (so it is counted, and while capturing it comes from the graph's pool), and
makes one ``cublasLtMatmul`` on CuPy's current stream.

Layout (Note [row-major through column-major]): cuBLASLt is column-major. Row-major
``C = A @ B`` is computed as ``C^T = B^T @ A^T``; a row-major matrix read column-major IS its
transpose, so no data moves. A transposed view (unit stride on its rows) is passed with
``TRANS=T`` instead, so ``x @ w.T`` needs no copy either. Batch dimensions must collapse to one
uniform stride per operand (stride 0 broadcasts); operands that do not (or that overlap
themselves, as expanded views do) are copied to contiguous memory first. A 2-D right operand
with a batched left one whose rows are uniformly strided folds the batch into the rows: one GEMM.

Products of at most 8 rows (a small batch through a layer, a decode step's token) of float32,
float16 or bfloat16 skip cuBLASLt where ``_skinny.plan`` takes their layout: one kernel of
``_skinny.py`` computes them with the bias and activation, or the bias and a residual, where
cuBLASLt is latency (and, for half weights, a fraction of the memory's bandwidth). Other small
products (up to ``_small.MAX_MULTIPLY_ADDS`` multiply-adds, float16 to float64) are one tiled
kernel of ``_small.py``: a prepacked launch costs the host less than half of what a
``cublasLtMatmul`` call does, and such a product's arithmetic is under a microsecond.

Without nvmath-python (:data:`ENGINE` says which path is used): ``cupy.matmul`` (cuBLAS) eagerly,
and a clear ``RuntimeError`` while capturing. Integer and bool products use ``cupy.matmul``
(CuPy's own kernels) on both paths.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from typing import Any

import cupy
import numpy as np

from cuda.bindings import runtime

from . import _elementwise, _skinny, _small
from ._graphs import _roots as _capturing_roots   # non-empty while a capture is open
from ._runtime import is_capturing, relaxed_capture_mode

__all__ = ["ENGINE", "EPILOGUES", "matmul", "matmul_epilogue", "matmul_residual", "launcher",
           "available"]

log = logging.getLogger("tensorplay.cuda")

try:
    from nvmath.bindings import cublas as _cublas
    from nvmath.bindings import cublasLt as _lt
except Exception as _exc:  # noqa: BLE001 - optional: the fallback path says why in ENGINE
    _lt = None
    ENGINE = (f"cupy.matmul (cuBLAS) eagerly; products inside captured graphs need "
              f"nvmath-python ({type(_exc).__name__}: {_exc})")
else:
    ENGINE = "cuBLASLt through nvmath-python (eager and captured)"

# the activations cuBLASLt's own epilogues compute (None: the bias alone)
_LT_ACTIVATIONS = frozenset({None, "relu", "gelu_tanh"})
#: Activations :func:`matmul_epilogue` fuses (None: the bias alone): cuBLASLt's epilogues, and
#: exact GELU and SiLU, which skinny products (Note [skinny products]) apply in their one kernel
#: and other products as one kernel after cuBLASLt's BIAS epilogue.
EPILOGUES = _LT_ACTIVATIONS | {"gelu", "silu"} if _lt is not None else frozenset()
_BFLOAT16 = np.dtype("bfloat16")
_F32 = np.dtype(np.float32)
_HALVES = frozenset({np.dtype(np.float16), _BFLOAT16})   # may store float32 sums (see matmul)
_EPILOGUE_DTYPES = frozenset({np.dtype(np.float16), np.dtype("bfloat16"), np.dtype(np.float32)})

_WORKSPACE_LIMIT = 32 << 20   # the most workspace an algorithm may ask for
# Eager products of at most this many multiply-adds ask for an algorithm without workspace: a
# workspace is one more allocation per call, which costs more host time than such a product
# takes on the device. Inside a capture the allocation is paid once, so captures may use one.
_LEAN_LIMIT = 1 << 27
#: Whether captured products of that size also go without workspace (a tuning switch, read when
#: a product is planned; benchmarks/profile_mlp.py measures both).
LEAN_IN_CAPTURE = False
_CUDA_R_32F, _CUDA_R_64F, _CUDA_R_16F, _CUDA_C_32F, _CUDA_C_64F, _CUDA_R_16BF = 0, 1, 2, 4, 5, 14
# numpy dtype -> (cudaDataType of the data, cudaDataType of alpha/beta, compute type name)
_TYPES = {
    np.dtype(np.float16): (_CUDA_R_16F, _CUDA_R_32F, "COMPUTE_32F"),
    np.dtype("bfloat16"): (_CUDA_R_16BF, _CUDA_R_32F, "COMPUTE_32F"),
    np.dtype(np.float32): (_CUDA_R_32F, _CUDA_R_32F, "COMPUTE_32F"),
    np.dtype(np.float64): (_CUDA_R_64F, _CUDA_R_64F, "COMPUTE_64F"),
    np.dtype(np.complex64): (_CUDA_C_32F, _CUDA_C_32F, "COMPUTE_32F"),
    np.dtype(np.complex128): (_CUDA_C_64F, _CUDA_C_64F, "COMPUTE_64F"),
}
_FLOAT32_COMPUTE = {"highest": "COMPUTE_32F", "high": "COMPUTE_32F_FAST_TF32",
                    "medium": "COMPUTE_32F_FAST_16BF"}
_SCALE_NUMPY = {_CUDA_R_32F: np.float32, _CUDA_R_64F: np.float64, _CUDA_C_32F: np.complex64,
                _CUDA_C_64F: np.complex128}
# alpha = 1 and beta = 0 per scale type, read by cuBLASLt from host memory at each call
_ONE = {code: np.ones(1, dtype) for code, dtype in _SCALE_NUMPY.items()}
_ZERO = {code: np.zeros(1, dtype) for code, dtype in _SCALE_NUMPY.items()}
_EPILOGUE_NAMES = {(False, None): "DEFAULT", (True, None): "BIAS", (True, "relu"): "RELU_BIAS",
                   (True, "gelu_tanh"): "GELU_BIAS", (False, "relu"): "RELU",
                   (False, "gelu_tanh"): "GELU"}

_handles: dict[int, int] = {}
_plans: dict[tuple, "_Plan"] = {}
_lock = threading.Lock()
_announced = False


def available() -> bool:
    """Whether products go through cuBLASLt (nvmath-python imported)."""
    return _lt is not None


def _announce() -> None:
    global _announced
    if not _announced:
        _announced = True
        log.info("tensorplay cuda matrix products: %s", ENGINE)


def _handle(device: int) -> int:
    handle = _handles.get(device)
    if handle is None:
        with _lock, relaxed_capture_mode():
            handle = _handles.get(device)
            if handle is None:
                handle = _handles[device] = _lt.create()
        _announce()
    return handle


def _set(setter, obj: int, attr, dtype_of, value) -> None:
    """Set one cuBLASLt attribute from a Python value, in the binding's declared dtype."""
    buffer = np.asarray([value], dtype=dtype_of(attr))
    setter(obj, attr, buffer.ctypes.data, buffer.itemsize)


class _Plan:
    """Everything decided once for a product signature: descriptor, layouts, algorithm."""

    __slots__ = ("desc", "layouts", "algo", "workspace", "alpha", "beta", "beta_one", "bias",
                 "bias_buffer", "bias_address", "bias_set", "_keep")

    def __init__(self, device: int, dtype: np.dtype, precision: str, a_op, b_op, d_layout,
                 batch: int, bias: bool, activation: str | None, alignments,
                 out_dtype: np.dtype, workspace_limit: int):
        data_type, scale_type, compute = _TYPES[dtype]
        if dtype == np.float32:
            compute = _FLOAT32_COMPUTE[precision]
        self.alpha, self.beta = _ONE[scale_type].ctypes.data, _ZERO[scale_type].ctypes.data
        self.beta_one = self.alpha   # beta = 1: the C input (a residual) is added
        desc_attr = _lt.MatmulDescAttribute
        desc = self.desc = _lt.matmul_desc_create(int(getattr(_cublas.ComputeType, compute)),
                                                  scale_type)
        dtype_of = _lt.get_matmul_desc_attribute_dtype
        set_desc = _lt.matmul_desc_set_attribute
        _set(set_desc, desc, desc_attr.TRANSA, dtype_of, a_op[0])
        _set(set_desc, desc, desc_attr.TRANSB, dtype_of, b_op[0])
        epilogue = getattr(_lt.Epilogue, _EPILOGUE_NAMES[(bias, activation)])
        self.bias = bias
        self.bias_buffer = np.zeros(1, dtype_of(desc_attr.BIAS_POINTER))
        self.bias_address = self.bias_buffer.ctypes.data
        self.bias_set = None   # the bias address the descriptor holds
        if bias or activation is not None:
            _set(set_desc, desc, desc_attr.EPILOGUE, dtype_of, int(epilogue))
        layouts = [self._layout(kind, rows, cols, ld, stride, batch)
                   for kind, (rows, cols, ld, stride) in zip(
                       (data_type, data_type, _TYPES[out_dtype][0]),
                       (a_op[1:], b_op[1:], d_layout))]
        self.layouts = layouts
        preference = _lt.matmul_preference_create()
        try:
            pref_attr = _lt.MatmulPreferenceAttribute
            pref_dtype = _lt.get_matmul_preference_attribute_dtype
            set_pref = _lt.matmul_preference_set_attribute
            _set(set_pref, preference, pref_attr.MAX_WORKSPACE_BYTES, pref_dtype,
                 workspace_limit)
            for attr, alignment in zip((pref_attr.MIN_ALIGNMENT_A_BYTES,
                                        pref_attr.MIN_ALIGNMENT_B_BYTES,
                                        pref_attr.MIN_ALIGNMENT_C_BYTES,
                                        pref_attr.MIN_ALIGNMENT_D_BYTES), alignments):
                _set(set_pref, preference, attr, pref_dtype, alignment)
            result = _lt.MatmulHeuristicResult()
            count = np.zeros(1, np.int32)
            a_layout, b_layout, d_layout_handle = layouts
            _lt.matmul_algo_get_heuristic(_handle(device), desc, a_layout, b_layout,
                                          d_layout_handle, d_layout_handle, preference, 1,
                                          result.ptr, count.ctypes.data)
        except _lt.cuBLASLtError as exc:
            count[0] = 0
            if "NOT_SUPPORTED" not in str(exc):
                self.destroy()
                raise _cublas_error("cublasLtMatmulAlgoGetHeuristic", exc) from exc
        finally:
            _lt.matmul_preference_destroy(preference)
        if count[0] < 1:
            self.destroy()
            raise _NoAlgorithm(f"cuBLASLt has no algorithm for this {dtype} product "
                               f"(epilogue {_EPILOGUE_NAMES[(bias, activation)]})")
        self._keep = result               # the algorithm struct lives in it
        self.algo = result.ptr            # cublasLtMatmulAlgo_t is the result's first member
        self.workspace = int(result.workspace_size)

    @staticmethod
    def _layout(data_type: int, rows: int, cols: int, ld: int, batch_stride: int,
                batch: int) -> int:
        layout = _lt.matrix_layout_create(data_type, rows, cols, ld)
        if batch > 1:
            attr = _lt.MatrixLayoutAttribute
            dtype_of = _lt.get_matrix_layout_attribute_dtype
            _set(_lt.matrix_layout_set_attribute, layout, attr.BATCH_COUNT, dtype_of, batch)
            _set(_lt.matrix_layout_set_attribute, layout, attr.STRIDED_BATCH_OFFSET, dtype_of,
                 batch_stride)
        return layout

    def destroy(self) -> None:
        for layout in self.layouts:
            _lt.matrix_layout_destroy(layout)
        _lt.matmul_desc_destroy(self.desc)


class _NoAlgorithm(RuntimeError):
    pass


# -- operand layouts ------------------------------------------------------------------------------
def _as_op(rows: int, cols: int, s_rows: int, s_cols: int):
    """How a row-major (rows x cols) matrix with element strides (s_rows, s_cols) enters
    cuBLASLt as the column-major operand that is its transpose (Note [row-major through
    column-major]): ``(trans, layout rows, layout cols, ld)``, or None when only a copy will do.
    ``trans`` 0 = N (the memory read column-major is already the transpose), 1 = T."""
    if (cols == 1 or s_cols == 1) and (rows == 1 or s_rows >= cols):
        return (0, cols, rows, s_rows if rows > 1 else cols)
    if (rows == 1 or s_rows == 1) and (cols == 1 or s_cols >= rows):
        return (1, rows, cols, s_cols if cols > 1 else rows)
    return None


def _alignment(pointer: int) -> int:
    return min(pointer & -pointer, 256) if pointer else 256


def _batch_stride(array, batch_shape: tuple[int, ...]) -> int | None:
    """The one element stride stepping ``array``'s batch dims in C order over ``batch_shape``
    (0 when it broadcasts), or None when its batch dims do not collapse to one stride."""
    lead = len(batch_shape) - (array.ndim - 2)
    strides = [0] * lead + [s // array.itemsize if size != 1 else 0
                            for size, s in zip(array.shape[:-2], array.strides[:-2])]
    sizes = list(batch_shape)
    live = [(size, stride) for size, stride in zip(sizes, strides) if size != 1]
    if not live:
        return 0
    if all(stride == 0 for _, stride in live):
        return 0
    inner_size, inner_stride = live[-1]
    expected = inner_stride
    total = inner_size
    for size, stride in reversed(live[:-1]):
        if stride != expected * total:
            return None
        total *= size
    return inner_stride


def _output_strides(out, batch_shape: tuple[int, ...], m: int, n: int) -> tuple[int, int] | None:
    """``(row stride, batch stride)`` in elements of a product's output that cuBLASLt can
    write in place though it is not C-contiguous, or None: unit column stride, batch dims that
    collapse to one stride, and rows and matrices that never overlap, in either order (rows
    ``n`` or more apart with matrices past each other's last row, or, as the heads of an
    attention output laid out ``(B, L, H, D)``, matrices ``n`` or more apart inside rows wide
    enough for all of them)."""
    item = out.itemsize
    if n > 1 and out.strides[-1] != item:
        return None
    row = out.strides[-2] // item if m > 1 else n
    batch = math.prod(batch_shape)
    step = _batch_stride(out, batch_shape) if batch > 1 else m * row
    if step is None or row < n or step <= 0 or out.strides[-2] % item or \
            (row * item) % 16 or (step * item) % 16:
        return None   # (16-byte strides: cuBLASLt's algorithms take those)
    if batch == 1 or step >= (m - 1) * row + n:
        return row, step
    if step >= n and step * (batch - 1) + n <= row:
        return row, step
    return None


def _matrix_view(array, one_d_as_row: bool):
    """``array`` with a 1-D operand given the matrix shape numpy's matmul gives it."""
    if array.ndim == 1:
        return array[None, :] if one_d_as_row else array[:, None]
    return array


# -- the product ------------------------------------------------------------------------------
def matmul(a, b, out=None, precision: str = "highest", bias=None, with_bias: bool = False,
           activation: str | None = None, residual=None):
    """``numpy.matmul(a, b, out=out)`` for CuPy arrays, eager and during stream capture.

    Args:
        a, b: CuPy arrays of one dtype (float16, bfloat16, float32, float64, complex64/128 go
            through cuBLASLt; other dtypes through ``cupy.matmul``). 1-D operands, batch
            broadcasting and strided views as numpy's matmul.
        out: optional array of the result's shape and dtype, written in place. For float16
            and bfloat16 operands ``out`` may also be float32: cuBLASLt then stores its
            float32 sums unrounded (no bias, activation or residual with such an ``out``).
        precision: float32 only: "highest" (full float32), "high" (TF32 tensor cores),
            "medium" (bfloat16 tensor cores), as ``torch.set_float32_matmul_precision``.
        bias, with_bias, activation, residual: the epilogue, as :func:`matmul_epilogue` and
            :func:`matmul_residual` pass it (the one implementation of all three: a warm eager
            product enters no other frame before its launch).

    Returns:
        ``out``, or a new C-contiguous array (from CuPy's allocator, so from the graph's pool
        while capturing).

    Raises:
        RuntimeError: capturing without nvmath-python, or capturing an integer/bool product.
    """
    if out is not None:
        memory = out.data   # its device_id is a plain attribute (out.device builds a Device)
        pa, pb, pc = a.data.ptr, b.data.ptr, memory.ptr
        direct = _direct_key(a, b, out, pa, pb, pc, memory.device_id, precision, with_bias,
                             activation, residual)
        plan = _direct.get(direct)
        if plan is not None:    # the steady state: operands as last time, no copies needed
            if plan.__class__ is _Plan:
                _run(plan, memory.device_id, pb, pa, pc, bias, residual)
            elif residual is None:   # a skinny product's launcher, or CuPy's
                plan(a, b, bias, out)
            else:               # a skinny product's launcher (the only other one with a residual)
                plan(a, b, bias, out, residual)
            return out
    else:
        direct = None
    if residual is not None and (out is None or not out.flags.c_contiguous or
                                 not residual.flags.c_contiguous or
                                 residual.shape != out.shape or residual.dtype != out.dtype):
        out = matmul(a, b, out, precision, bias, with_bias, activation)
        out += residual
        return out
    dtype = a.dtype
    if dtype != b.dtype or dtype not in _TYPES:
        result = _cupy_product(with_bias, activation, a, b, bias, out,
                               direct if residual is None else None)
        if residual is not None:
            result += residual
        return result
    a2, b2 = _matrix_view(a, True), _matrix_view(b, False)
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    if b2.shape[-2] != k:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not match in the inner "
                         f"dimension ({k} != {b2.shape[-2]})")
    batch_shape = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    shape = batch_shape + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    if out is None:
        out = cupy.empty(shape, dtype)
    elif tuple(out.shape) != shape or out.dtype != dtype and not (
            out.dtype == _F32 and dtype in _HALVES and not with_bias and activation is None
            and residual is None):
        raise ValueError(f"matmul: out has shape {tuple(out.shape)} and dtype {out.dtype}; the "
                         f"product needs {shape} and {dtype}")
    if m == 0 or n == 0 or 0 in batch_shape:
        return out
    if k == 0:
        out.fill(0)
        _finish_epilogue(out, bias, with_bias, activation)
        if residual is not None:
            out += residual
        return out
    if out.flags.c_contiguous:
        result = out.reshape(batch_shape + (m, n))
    elif residual is None and a.ndim > 1 and b.ndim > 1 and \
            _output_strides(out, batch_shape, m, n) is not None:
        result = out   # cuBLASLt writes the strided rows itself (an attention's heads)
    else:
        direct = None
        result = cupy.empty(batch_shape + (m, n), out.dtype)
    if b2.ndim == 2 and a2.ndim > 2 and result.flags.c_contiguous:
        rows = _fold_rows(a2)
        if rows is not None:   # one GEMM: the batch folds into a's rows
            a2, batch_shape, result = rows, (), result.reshape(-1, n)
    launch = (_skinny.plan(a2, b2, result, with_bias, activation, residual is not None)
              or _small.plan(a2, b2, result, with_bias, activation, residual is not None)) \
        if not batch_shape and result.dtype == dtype else None
    if launch is not None:   # a few rows or a small product: one kernel, epilogue included
        if residual is None:
            launch(a2, b2, bias, result)
        else:                # result is out, which has the residual's shape and layout
            launch(a2, b2, bias, result, residual)
        plan = launch if a.ndim == 2 and b.ndim == 2 else None
    elif _lt is None:
        result = _cupy_product(with_bias, activation, a, b, bias, out,
                               direct if residual is None else None)
        if residual is not None:
            result += residual
        return result
    elif activation not in _LT_ACTIVATIONS:   # the BIAS epilogue, then the activation's kernel
        _gemm(a2, b2, result, batch_shape, dtype, precision, bias, with_bias, None)
        _finish_epilogue(result, None, True, activation)
        plan = None
    else:
        plan = _gemm(a2, b2, result, batch_shape, dtype, precision, bias, with_bias,
                     activation, residual)
    if plan is not None and direct is not None:
        _remember_direct(direct, plan)
    if result.data.ptr != out.data.ptr:
        out[...] = result.reshape(out.shape)
    return out


def matmul_epilogue(a, b, out, bias, activation: str | None, precision: str = "highest"):
    """``out[...] = activation(a @ b + bias)`` in one cuBLASLt call (its BIAS, RELU_BIAS or
    GELU_BIAS epilogue; "gelu_tanh" is GELU's tanh approximation, as cuBLASLt computes it).

    For float16, bfloat16 and float32 operands of one dtype with a contiguous 1-D ``bias`` of
    the result's last dimension and dtype (what :data:`EPILOGUES` promises). Should cuBLASLt
    offer no algorithm with the epilogue for some shape, the product runs without it and the
    bias and activation follow as CuPy kernels.
    """
    return matmul(a, b, out, precision, bias, True, activation)


def matmul_residual(a, b, out, bias, residual, precision: str = "highest"):
    """``out[...] = a @ b + bias + residual`` (``bias`` None: none) in one kernel: a skinny
    product's (``_skinny.py``, a few rows), a small one's (``_small.py``) or one cuBLASLt call
    (the residual its C input with beta = 1, the bias its BIAS epilogue). ``residual`` a
    C-contiguous array of ``out``'s shape and dtype (it may be ``out`` itself), ``out``
    C-contiguous; otherwise, or where none takes the product (other dtypes, no nvmath-python),
    the product, then the adds as kernels of their own."""
    return matmul(a, b, out, precision, bias, bias is not None, None, residual)


def _direct_key(a, b, out, pa: int, pb: int, pc: int, device: int, precision: str,
                with_bias: bool, activation: str | None, residual) -> tuple:
    """The key of :data:`_direct`: the operands' layouts, the addresses' low bytes (the
    alignment the kept plan was chosen for), the epilogue, and whether no capture is open."""
    return (a.shape, a.strides, b.shape, b.strides, out.shape, out.strides, a.dtype, b.dtype,
            out.dtype, precision, with_bias, activation, pa & 255, pb & 255, pc & 255, device,
            not _capturing_roots,
            None if residual is None else (residual.shape, residual.strides, residual.dtype,
                                           residual.data.ptr & 255))


def launcher(a, b, out, bias=None, activation: str | None = None,
             precision: str = "highest"):
    """A launcher ``fn(a, b, bias, out)`` of the product :func:`matmul` (``bias`` given:
    :func:`matmul_epilogue` with ``activation``) just ran on these arrays, for arrays laid out
    as these (shapes, strides, dtypes, device): it calls what was kept for them (one cuBLASLt
    call or a skinny kernel) without building the signature's key again. None when nothing
    was kept for them (copied operands, a product planned inside a capture).

    The launcher takes :func:`matmul` itself while a capture is open, for addresses whose low
    byte differs from these (the kept plan was chosen for this alignment), and once kept plans
    were forgotten. Pitfall: arrays of another layout give wrong results; the caller keeps one
    launcher per layout (``_tensor``'s product plans).
    """
    memory = out.data
    with_bias = bias is not None
    pa, pb, pc = a.data.ptr, b.data.ptr, memory.ptr
    device = memory.device_id
    kept = _direct.get(_direct_key(a, b, out, pa, pb, pc, device, precision, with_bias,
                                   activation, None))
    if kept is None or _capturing_roots:
        return None
    lows, generation = (pa & 255, pb & 255, pc & 255), _generation

    if kept.__class__ is _Plan:
        def launch(a, b, bias, out):
            pa, pb, pc = a.data.ptr, b.data.ptr, out.data.ptr
            if _capturing_roots or (pa & 255, pb & 255, pc & 255) != lows or \
                    _generation != generation:
                return matmul(a, b, out, precision, bias, with_bias, activation)
            _run(kept, device, pb, pa, pc, bias)
            return out
    else:   # a skinny kernel's launcher, or CuPy's product
        def launch(a, b, bias, out):
            if _capturing_roots or (a.data.ptr & 255, b.data.ptr & 255,
                                    out.data.ptr & 255) != lows or _generation != generation:
                return matmul(a, b, out, precision, bias, with_bias, activation)
            kept(a, b, bias, out)
            return out
    launch.tp_arguments_only = True  # type: ignore[attr-defined]  # Note [write records]
    return launch


# the backend's hooks are these functions: they touch only the arrays they are given (and a
# fresh workspace): Note [write records]
for _hook in (matmul, matmul_epilogue, matmul_residual):
    _hook.tp_arguments_only = True  # type: ignore[union-attr]
del _hook


# a _Plan, or a launcher(a, b, bias, out): skinny or CuPy's; with a residual in the key, a _Plan
# or a skinny launcher(a, b, bias, out, residual)
_direct: dict[tuple, Any] = {}
_generation = 0   # bumped when kept plans are destroyed: launchers made before stop using theirs


def _remember_direct(direct: tuple, plan) -> None:
    with _lock:
        if len(_direct) >= 4096:
            _direct.pop(next(iter(_direct)))
        _direct[direct] = plan


def _cupy_product(with_bias, activation, a, b, bias, out, direct=None):
    """:func:`_fallback` for a product cuBLASLt does not take; with ``direct`` (the operands'
    key, outside a capture of ours), later calls with the same key go straight here."""
    if direct is not None:
        _remember_direct(direct, functools.partial(_cupy_product, with_bias, activation))
    return _fallback(a, b, out, bias, with_bias, activation)


def _fold_rows(a):
    """A batched (..., m, k) operand as one (batch * m, k) matrix view, when its rows step
    uniformly in C order, else None."""
    item = a.itemsize
    step, size = (a.strides[-2] // item if a.shape[-2] > 1 else None), a.shape[-2]
    for dim_size, stride in zip(reversed(a.shape[:-2]), reversed(a.strides[:-2])):
        if dim_size == 1:
            continue
        if step is None:
            step = stride // item
        elif stride // item != step * size:
            return None
        size *= dim_size
    if step is None:
        step = a.shape[-1]
    return cupy.lib.stride_tricks.as_strided(a, (size, a.shape[-1]), (step * item, a.strides[-1]))


def _gemm(a, b, c, batch_shape, dtype, precision, bias, with_bias, activation, residual=None):
    """``c = a @ b`` (+ epilogue) with ``c`` (batch..., m, n) C-contiguous and ``a``, ``b``
    broadcasting over ``batch_shape``. Returns the plan when no operand had to be copied (so
    the same call can skip straight to it next time), else None."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    item = a.itemsize
    batch = int(np.prod(batch_shape)) if batch_shape else 1
    a_stride = _batch_stride(a, batch_shape) if batch > 1 else 0
    b_stride = _batch_stride(b, batch_shape) if batch > 1 else 0
    a_op = _as_op(m, k, a.strides[-2] // item, a.strides[-1] // item)
    b_op = _as_op(k, n, b.strides[-2] // item, b.strides[-1] // item)
    copied = False
    if a_op is None or a_stride is None:
        a = cupy.ascontiguousarray(cupy.broadcast_to(a, batch_shape + (m, k)))
        a_stride, a_op, copied = m * k, (0, k, m, k), True
    if b_op is None or b_stride is None:
        b = cupy.ascontiguousarray(cupy.broadcast_to(b, batch_shape + (k, n)))
        b_stride, b_op, copied = k * n, (0, n, k, n), True
    pa, pb, pc = a.data.ptr, b.data.ptr, c.data.ptr
    device = c.device.id
    lean = (LEAN_IN_CAPTURE or not _capturing_roots) and batch * m * n * k <= _LEAN_LIMIT
    # the C input (the residual) shares D's layout, and so the alignment promised for both
    align_c = _alignment(pc) if residual is None else min(_alignment(pc),
                                                           _alignment(residual.data.ptr))
    # D's row and batch strides: C order, or a strided output _output_strides took
    d_strides = (n, m * n) if c.flags.c_contiguous else _output_strides(c, batch_shape, m, n)
    key = (device, dtype, precision, b_op, a_op, b_stride, a_stride, batch, m, n, with_bias,
           activation, _alignment(pb), _alignment(pa), align_c, lean, c.dtype, d_strides)
    plan = _plans.get(key)
    if plan is None:
        try:
            plan = _make_plan(key)
        except _NoAlgorithm:
            if not with_bias:
                raise
            _gemm(a, b, c, batch_shape, dtype, precision, None, False, None)
            _finish_epilogue(c, bias, True, activation)
            if residual is not None:
                c += residual.reshape(c.shape)
            return None
    _run(plan, device, pb, pa, pc, bias, residual)
    return None if copied else plan


def _run(plan: _Plan, device: int, pa: int, pb: int, pc: int, bias, residual=None) -> None:
    """One cublasLtMatmul of ``plan`` (cuBLASLt's A = ``pa``, B = ``pb``, D = ``pc``; C =
    ``pc`` with beta = 0, or the ``residual`` array with beta = 1)."""
    if plan.bias:
        pointer = bias.data.ptr
        if pointer != plan.bias_set:   # the descriptor keeps the last one it was given
            plan.bias_buffer[0] = pointer
            _lt.matmul_desc_set_attribute(plan.desc, _BIAS_POINTER, plan.bias_address,
                                          plan.bias_buffer.itemsize)
            plan.bias_set = pointer
    size = plan.workspace
    workspace = cupy.empty(size, np.uint8) if size else None
    a_layout, b_layout, d_layout = plan.layouts
    try:
        if residual is None:
            beta, c_ptr = plan.beta, pc
        else:
            beta, c_ptr = plan.beta_one, residual.data.ptr
        _lt.matmul(_handles.get(device) or _handle(device), plan.desc, plan.alpha, pa, a_layout,
                   pb, b_layout, beta, c_ptr, d_layout, pc, d_layout, plan.algo,
                   workspace.data.ptr if workspace is not None else 0, size,
                   cupy.cuda.get_current_stream().ptr)
    except _lt.cuBLASLtError as exc:
        raise _cublas_error("cublasLtMatmul", exc) from exc


def _cublas_error(call: str, exc: Exception) -> RuntimeError:
    """The one error every failed cuBLASLt call becomes: a RuntimeError naming the call and
    cuBLAS's status."""
    return RuntimeError(f"{call} failed: {exc}")


_BIAS_POINTER = _lt.MatmulDescAttribute.BIAS_POINTER if _lt is not None else None


def _make_plan(key) -> _Plan:
    (device, dtype, precision, b_op, a_op, b_stride, a_stride, batch, m, n, with_bias,
     activation, align_b, align_a, align_c, lean, out_dtype, (d_ld, d_stride)) = key
    # cuBLASLt's A is our b (C^T = B^T A^T); its D is c^T: n rows, m cols, ld the row stride
    arguments = (device, dtype, precision, b_op + (b_stride,), a_op + (a_stride,),
                 (n, m, d_ld, d_stride), batch, with_bias, activation,
                 (align_b, align_a, align_c, align_c), out_dtype)
    try:
        plan = _Plan(*arguments, 0 if lean else _WORKSPACE_LIMIT)
    except _NoAlgorithm:
        if not lean:
            raise
        plan = _Plan(*arguments, _WORKSPACE_LIMIT)
    global _generation
    with _lock:
        if len(_plans) >= 4096:   # forget every direct entry: one may name the evicted plan
            _direct.clear()
            _generation += 1      # and every launcher's
            _plans.pop(next(iter(_plans))).destroy()
        _plans[key] = plan
    return plan


# -- without cuBLASLt ---------------------------------------------------------------------------
def _is_capturing() -> bool:
    pointer = cupy.cuda.get_current_stream().ptr
    return is_capturing(runtime.cudaStream_t(pointer), pointer == 0)


def _fallback(a, b, out, bias, with_bias, activation):
    # the capture query only while one of ours is open (an eager product skips it)
    if _capturing_roots and (a.dtype.kind in "fc" or b.dtype.kind in "fc") and _is_capturing():
        why = ("nvmath-python is not installed" if _lt is None else
               f"cuBLASLt has no {a.dtype} x {b.dtype} product")
        raise RuntimeError(f"matmul of {a.dtype} and {b.dtype} cannot be captured on cuda: "
                           f"{why}, and CuPy refuses cuBLAS during stream capture. Install "
                           f"nvmath-python (pip install 'tensorplay[cuda]') or run the product "
                           f"outside the graph")
    _announce()
    if a.dtype == _BFLOAT16 or b.dtype == _BFLOAT16:
        # cuBLAS through CuPy has no bfloat16: computed in float32, rounded once (as cuBLASLt's
        # bfloat16 products accumulate in float32)
        wide = cupy.matmul(a.astype(np.float32), b.astype(np.float32))
        if out is None:
            out = cupy.empty(wide.shape, _BFLOAT16)
        out[...] = wide
        result = out
    else:
        result = cupy.matmul(a, b, out=out)
    return _finish_epilogue(result, bias, with_bias, activation) if with_bias else result


def _finish_epilogue(out, bias, with_bias, activation):
    """The bias and activation of :func:`matmul_epilogue` as kernels of their own, in place
    (the activation is ``_elementwise``'s raw kernel of the same name)."""
    if not with_bias:
        return out
    if bias is not None:
        cupy.add(out, bias, out=out)
    if activation is not None:
        launch = _elementwise.elementwise_kernel(activation, out.dtype, "a", out.dtype)
        if launch is None or not out.flags.c_contiguous:
            raise RuntimeError(f"matmul epilogue: no {activation} kernel for {out.dtype}")
        launch(out, out)
    return out
