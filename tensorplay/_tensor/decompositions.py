"""``tp.linalg``'s computations: norms, solves, inverses, determinants and decompositions, with
``torch.linalg``'s names, signatures, named tuples, dtypes and errors (the public namespace is
``tensorplay/linalg.py``), plus the Tensor methods PyTorch has for them (``det logdet slogdet
inverse cholesky qr svd pinverse``, with ``torch.<name>``'s own semantics: ``Tensor.svd`` gives
``V``, not ``Vh``; ``Tensor.qr(some=)``; ``Tensor.cholesky(upper=)``).

Each op decides its results' shapes and dtypes from metadata, takes their memory from the
runtime allocator and launches ONE kernel closure written against ``xp`` (NumPy on the host and
sim, CuPy on cuda, whose ``xp.linalg`` runs cuSOLVER), so host, sim and cuda run the same code.
Inputs are matrices with any number of leading batch dims (``(*, m, n)``); results are
C-contiguous (PyTorch often returns decomposition results column-major: same values, other
strides).

Dtypes. Decompositions and solves take float32, float64, complex64 and complex128; float16,
bfloat16 (``Low precision dtypes not supported``) and bool/integer input raise RuntimeError, as
PyTorch. The norms also take float16/bfloat16 (computed in float32, rounded once) except those
that need singular values (``matrix_norm`` with ord ``'nuc'``, 2, -2).

Capture. cuSOLVER through CuPy is not capture-safe (CuPy refuses library handles while a stream
captures, and its error checks read device memory), so every decomposition, solve, inverse and
determinant (``solve inv det slogdet cholesky qr eigh svd svdvals lstsq pinv`` and
``matrix_norm``/``norm`` with ord ``'nuc'``, 2 or -2) raises RuntimeError while a capture
records on its device, on sim exactly as on cuda. Capture-safe (elementwise ops and reductions
only): ``vector_norm``, ``matrix_norm``/``norm`` with ord ``'fro'``, 1, -1, inf, -inf, and
``norm`` without ord.

Errors that depend on the values (checked eagerly on every device, as PyTorch does on cuda):
``inv``/``solve`` of a singular matrix (an exactly zero pivot of the LU factorization) and
``cholesky`` of a matrix that is not positive-definite raise :class:`LinAlgError` (a
RuntimeError, as ``torch.linalg.LinAlgError``), naming the batch element, the zero diagonal
element / the order of the failing leading minor; ``eigh``/``svd`` that do not converge raise it
too. The kernel writes one flag per matrix on the device and the op reads the flags on the host:
on an accelerator these ops therefore WAIT for the device (one synchronization per call), as
torch's cuda does. ``det``, ``slogdet``, ``qr``, ``pinv`` and the norms never read values back.
A matrix holding NaN or infinity is not reported singular (its results are NaN, as LAPACK's).

Numerical notes. Singularity is decided by ``xp.linalg.slogdet`` (one extra LU factorization):
``logabsdet == -inf``. ``lstsq`` solves through the SVD (the minimum-norm solution, which is what
gelsy/gelsd/gelss give; gels assumes full rank), so ``rank`` for the default cpu driver
``gelsy`` is the count of singular values above ``rcond * largest`` rather than gelsy's
pivoted-QR estimate (they differ only for nearly rank-deficient matrices). Singular vectors,
eigenvectors and Q are unique only up to a phase per column: compare products, not factors.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple
from typing import Any

import numpy as np

from .. import _dtype
from .._runtime import capture as _capture, dispatch as _dispatch
from .reductions import _summing_dtype
from .tensor import Tensor, _normalize_dim

__all__ = ["det", "logdet", "slogdet", "inverse", "cholesky", "qr", "svd", "pinverse"]

#: installed as Tensor methods by ``methods.py`` (torch.Tensor's linear-algebra methods)
TENSOR_METHODS = ("det", "logdet", "slogdet", "inverse", "cholesky", "qr", "svd", "pinverse")


class LinAlgError(RuntimeError):
    """A matrix the operation cannot handle: singular (``inv``, ``solve``), not
    positive-definite (``cholesky``), or an eigen/singular value iteration that did not
    converge. A RuntimeError subclass, as ``torch.linalg.LinAlgError``, so ``except
    RuntimeError`` catches it too."""


class return_types:
    """The named tuples ``tp.linalg`` and the Tensor methods return (torch.return_types)."""

    linalg_slogdet = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
    linalg_qr = namedtuple("linalg_qr", ["Q", "R"])
    linalg_eigh = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
    linalg_svd = namedtuple("linalg_svd", ["U", "S", "Vh"])
    linalg_lstsq = namedtuple("linalg_lstsq",
                              ["solution", "residuals", "rank", "singular_values"])
    slogdet = namedtuple("slogdet", ["sign", "logabsdet"])
    qr = namedtuple("qr", ["Q", "R"])
    svd = namedtuple("svd", ["U", "S", "V"])


#: PyTorch's ScalarType names, as its error messages spell dtypes
_TORCH_NAME = {"float32": "Float", "float64": "Double", "float16": "Half",
               "bfloat16": "BFloat16", "complex64": "ComplexFloat",
               "complex128": "ComplexDouble", "int64": "Long", "int32": "Int", "int16": "Short",
               "int8": "Char", "uint8": "Byte", "uint16": "UInt16", "uint32": "UInt32",
               "uint64": "UInt64", "bool": "Bool"}
_FULL_PRECISION = frozenset({_dtype.float32, _dtype.float64, _dtype.complex64, _dtype.complex128})
_REAL = {_dtype.complex64: _dtype.float32, _dtype.complex128: _dtype.float64}


def _name(dtype: _dtype.dtype) -> str:
    return _TORCH_NAME.get(dtype.name, dtype.name)


def _real(dtype: _dtype.dtype) -> _dtype.dtype:
    return _REAL.get(dtype, dtype)


# -- shared checks ----------------------------------------------------------------------------
def _tensor(value, op: str, name: str = "A") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    value._check_guard()
    return value


def _check_dtype(op: str, tensor: Tensor, low_precision: bool = False) -> None:
    dtype = tensor.dtype
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                           f"{_name(dtype)}")
    if not low_precision and dtype not in _FULL_PRECISION:
        raise RuntimeError(f"{op}: Low precision dtypes not supported. Got {_name(dtype)} "
                           f"(use float32, float64, complex64 or complex128)")


def _matrix(op: str, value, name: str = "A", square: bool = True) -> Tensor:
    """``value`` as a batch of (square) matrices of a full-precision dtype."""
    tensor = _tensor(value, op, name)
    if tensor.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor {name} must have at least 2 dimensions "
                           f"(got shape {list(tensor.shape)})")
    _check_dtype(op, tensor)
    if square and tensor.shape[-1] != tensor.shape[-2]:
        raise RuntimeError(f"{op}: {name} must be batches of square matrices, but they are "
                           f"{tensor.shape[-2]} by {tensor.shape[-1]} matrices")
    return tensor


def _refuse_in_capture(op: str, device) -> None:
    """RuntimeError while a capture records on accelerator ``device`` (any stream): cuSOLVER
    through CuPy cannot be captured. One rule for sim and cuda."""
    if device.type == "cpu":
        return
    for record in _capture.active_captures():
        if record.device_index == device.index:
            raise RuntimeError(
                f"{op} is not capture-safe: it runs cuSOLVER (through CuPy), which cannot be "
                f"recorded into a graph, and a graph capture is recording on {device}. Call it "
                f"before or after the capture (only vector_norm and matrix_norm with ord 'fro', "
                f"1, -1, inf or -inf may be captured)")


def _new(device, shape, dtype: _dtype.dtype):
    _dispatch.check_dtype_supported(device, dtype)
    return _dispatch.empty(device, tuple(shape), dtype)


def _launch(op: str, device, kernel, shape=()) -> None:
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tuple(shape)))


def _make(data, device, dtype: _dtype.dtype) -> Tensor:
    return Tensor._make(data, device, dtype)


def _host_flags(op: str, flags, device) -> np.ndarray:
    """The per-matrix failure flags on the host (waits for the device on an accelerator)."""
    return np.asarray(_make(flags, device, _dtype.bool)._host_copy(f"{op}()"))


def _failed(flags: np.ndarray) -> int | None:
    """The linear batch index of the first flagged matrix, or None."""
    flat = flags.reshape(-1)
    hits = np.flatnonzero(flat)
    return int(hits[0]) if hits.size else None


def _batch_text(batched: bool, index: int) -> str:
    return f": (Batch element {index})" if batched else ""


def _identity_where(xp, mask, a):
    """``a`` with the matrices flagged in ``mask`` (batch-shaped) replaced by the identity."""
    n = a.shape[-1]
    eye = xp.eye(n, dtype=a.dtype)
    return xp.where(mask[..., None, None], eye, a)


def _guarded(xp, fn, a, identity: bool):
    """``(fn(a), failed)``: NumPy's LAPACK raises ``LinAlgError`` for the whole batch when one
    matrix fails; then each matrix is tried alone and the failing ones are replaced by the
    identity (``identity``) or zeros before ``fn`` runs again. ``failed`` is a batch-shaped bool
    array (all False when nothing raised; CuPy does not raise, its failures show in the
    results)."""
    batch = a.shape[:-2]
    try:
        return fn(a), xp.zeros(batch, dtype=np.bool_)
    except np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        failed = np.zeros(flat.shape[0], dtype=np.bool_)
        for i in range(flat.shape[0]):
            try:
                fn(flat[i])
            except np.linalg.LinAlgError:
                failed[i] = True
        mask = xp.asarray(failed.reshape(batch))
        safe = _identity_where(xp, mask, a) if identity else \
            xp.where(mask[..., None, None], xp.zeros((), dtype=a.dtype), a)
        return fn(safe), mask


def _singular(xp, a):
    """Batch-shaped bool: the matrices whose LU factorization meets an exactly zero pivot
    (``logabsdet == -inf``) and that hold no NaN or infinity."""
    if a.shape[-1] == 0:
        return xp.zeros(a.shape[:-2], dtype=np.bool_)
    _, logabs = xp.linalg.slogdet(a)
    return (logabs == -np.inf) & xp.all(xp.isfinite(a), axis=(-2, -1))


def _first_zero_pivot(a: np.ndarray) -> int:
    """The 1-based index of the first zero pivot of LU with partial pivoting (getrf's info),
    on the host (error messages only)."""
    a = np.array(a, copy=True)
    n = a.shape[-1]
    for j in range(n):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        if a[p, j] == 0:
            return j + 1
        if p != j:
            a[[j, p]] = a[[p, j]]
        a[j + 1:, j] /= a[j, j]
        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return n


def _hermitian(xp, a, upper: bool):
    """The Hermitian matrix that ``a``'s lower (upper) triangle and real diagonal describe."""
    n = a.shape[-1]
    if upper:
        a = xp.conj(xp.swapaxes(a, -1, -2))
    strict = xp.tril(a, -1)
    diagonal = xp.real(xp.diagonal(a, axis1=-2, axis2=-1))
    eye = xp.eye(n, dtype=np.bool_)
    full = strict + xp.conj(xp.swapaxes(strict, -1, -2))
    return xp.where(eye, diagonal[..., None].astype(a.dtype), full)


def _failing_minor(h: np.ndarray) -> int:
    """The order of the first leading minor of Hermitian ``h`` that is not positive-definite
    (potrf's info), on the host (error messages only)."""
    n = h.shape[-1]
    low = np.zeros_like(h)
    for j in range(n):
        d = np.real(h[j, j]) - np.sum(np.abs(low[j, :j]) ** 2)
        if not d > 0:
            return j + 1
        low[j, j] = np.sqrt(d)
        low[j + 1:, j] = (h[j + 1:, j] - low[j + 1:, :j] @ np.conj(low[j, :j])) / low[j, j]
    return n


def _ct(xp, a):
    """Conjugate transpose of the last two dims."""
    return xp.conj(xp.swapaxes(a, -1, -2))


# -- norms (capture-safe unless they need singular values) -------------------------------------
def _number(op: str, value, name: str = "ord") -> float:
    if isinstance(value, builtins.bool) or not isinstance(value, (int, float, np.integer,
                                                                   np.floating)):
        raise TypeError(f"{op}(): argument '{name}' must be a real number, not "
                        f"{type(value).__name__} ({value!r})")
    return float(value)


def _norm_dtypes(op: str, tensor: Tensor, dtype) -> tuple[Any, _dtype.dtype]:
    """(the NumPy dtype to compute in, the result dtype) for a norm of ``tensor``."""
    if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                           f"{_name(tensor.dtype)}")
    source = tensor.dtype
    if dtype is not None:
        wanted = _dtype.to_dtype(dtype)
        if not (wanted.is_floating_point or wanted.is_complex):
            raise RuntimeError(f"{op}: dtype should be floating point or complex. Got "
                               f"{_name(wanted)}")
        if wanted.is_complex != source.is_complex:
            kind = "complex" if source.is_complex else "real"
            raise RuntimeError(f"{op}: dtype should be {kind} if input is {kind}, but got "
                               f"{_name(wanted)} for a {_name(source)} input")
        source = wanted
    return _dtype.accumulation_dtype(source).numpy, _real(source)


def _dims(op: str, tensor: Tensor, dim) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(tensor.ndim))
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    normalized = tuple(_normalize_dim(d, tensor.ndim) for d in dims)
    if tensor.ndim == 0:
        normalized = ()
    if len(set(normalized)) != len(normalized):
        raise RuntimeError(f"{op}: dim {list(dims)} names a dimension more than once")
    return normalized if dims else tuple(range(tensor.ndim))


def _kept_shape(shape, axes, keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _vector_reduce(xp, x, ord: float, axis, keepdim: bool, dtype=None):
    """The ``ord`` vector norm of the non-negative real array ``x`` over ``axis``; sums
    accumulate in ``dtype`` (Note [accurate sums] in ``reductions``)."""
    if ord == math.inf:
        return xp.max(x, axis=axis, keepdims=keepdim)
    if ord == -math.inf:
        return xp.min(x, axis=axis, keepdims=keepdim)
    if ord == 0:
        return xp.sum(x != 0, axis=axis, keepdims=keepdim).astype(x.dtype)
    if ord == 1:
        return xp.sum(x, axis=axis, keepdims=keepdim, dtype=dtype)
    if ord == 2:
        return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=keepdim, dtype=dtype))
    return xp.sum(x ** ord, axis=axis, keepdims=keepdim, dtype=dtype) ** (1.0 / ord)


def vector_norm(x, ord: float = 2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The vector ``ord``-norm of ``x`` over ``dim`` (all elements when None; an int or a
    tuple): ``sum(|x|**ord)**(1/ord)``, ``max|x|`` for inf, ``min|x|`` for -inf, the count of
    non-zeros for 0. Real result (float32 for complex64). ``dtype``: cast ``x`` to it first
    (complex for complex input, real for real input). float16/bfloat16 are computed in
    float32. Capture-safe.

    Raises:
        RuntimeError: integer/bool input, a bad ``dtype``, ``ord`` inf or negative over an
            empty dimension (those norms have no identity), a repeated dim.
        TypeError: a non-number ``ord``. IndexError: a dim out of range.
    """
    op = "linalg.vector_norm"
    tensor = _tensor(x, op, "x")
    p = _number(op, ord)
    compute, result = _norm_dtypes(op, tensor, dtype)
    axes = _dims(op, tensor, dim)
    if (p < 0 or p == math.inf) and any(tensor.shape[a] == 0 for a in axes):
        raise RuntimeError(f"{op} cannot compute the {ord} norm on an empty tensor because the "
                           f"operation does not have an identity (shape {list(tensor.shape)}, "
                           f"dim {list(axes)})")
    shape = _kept_shape(tensor.shape, axes, keepdim)
    device = tensor.device
    out = _new(device, shape, result)
    data, xp = tensor._data, _dispatch.xp_of(device)
    axis = None if tensor.ndim == 0 else axes
    summed = _summing_dtype(data, axes, _dtype.accumulation_dtype(result).numpy)

    def kernel():
        out[...] = _vector_reduce(xp, xp.abs(data.astype(compute)), p, axis, keepdim, summed)
    _launch("vector_norm", device, kernel, shape)
    return _make(out, device, result)


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def _matrix_ord(op: str, ord):
    if isinstance(ord, str):
        if ord in ("fro", "nuc"):
            return ord
    elif not isinstance(ord, builtins.bool) and isinstance(ord, (int, float, np.integer,
                                                                 np.floating)):
        if float(ord) in (1, -1, 2, -2, math.inf, -math.inf):
            return float(ord)
    else:
        raise TypeError(f"{op}(): argument 'ord' must be a number or 'fro'/'nuc', not "
                        f"{type(ord).__name__}")
    raise RuntimeError(f"{op}: Order {ord} not supported (valid: 'fro', 'nuc', 1, -1, 2, -2, "
                       f"inf, -inf)")


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    """The matrix ``ord``-norm of ``A`` over the two dims ``dim``: ``'fro'`` (Frobenius),
    ``'nuc'`` (sum of singular values), 2 / -2 (largest / smallest singular value), 1 / -1
    (max / min column sum of ``|A|``), inf / -inf (max / min row sum). Real result.

    ``'fro'``, +-1 and +-inf are reductions: capture-safe, and float16/bfloat16 work (computed
    in float32). ``'nuc'`` and +-2 need an SVD: full-precision dtypes only, not capture-safe.

    Raises:
        RuntimeError: ``A`` with fewer than 2 dims, integer input, an unsupported ``ord``,
            ``dim`` not two distinct dims, a max/min norm over an empty dimension, a capture
            in progress (svd-based ords).
    """
    op = "linalg.matrix_norm"
    tensor = _tensor(A, op)
    if tensor.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor A must have at least 2 dimensions (got "
                           f"shape {list(tensor.shape)})")
    kind = _matrix_ord(op, ord)
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if len(dims) != 2:
        raise RuntimeError(f"{op}: dim must be a 2-tuple. Got {list(dims)}")
    d0, d1 = (_normalize_dim(d, tensor.ndim) for d in dims)
    if d0 == d1:
        raise RuntimeError(f"{op}: dims must be different. Got ({dims[0]}, {dims[1]})")
    compute, result = _norm_dtypes(op, tensor, dtype)
    if kind == "fro":
        return vector_norm(tensor, 2, (d0, d1), keepdim, dtype=dtype)
    shape = _kept_shape(tensor.shape, (d0, d1), keepdim)
    device = tensor.device
    data, xp = tensor._data, _dispatch.xp_of(device)
    if kind in ("nuc", 2.0, -2.0):
        effective = tensor.dtype if dtype is None else _dtype.to_dtype(dtype)
        if effective not in _FULL_PRECISION:
            raise RuntimeError(f"{op}: Low precision dtypes not supported. Got "
                               f"{_name(effective)} (ord={ord!r} needs singular values: use "
                               f"float32, float64, complex64 or complex128)")
        if kind != "nuc" and min(tensor.shape[d0], tensor.shape[d1]) == 0:
            raise RuntimeError(f"{op}: the {ord} norm (an extreme singular value) of "
                               f"{tensor.shape[d0]}x{tensor.shape[d1]} matrices is undefined")
        _refuse_in_capture(op + f"(ord={ord!r})", device)
        out = _new(device, shape, result)

        def svd_kernel():
            a = xp.moveaxis(data.astype(compute), (d0, d1), (-2, -1))
            s = xp.linalg.svd(a, compute_uv=False) if a.size else \
                xp.zeros(a.shape[:-2] + (min(a.shape[-2:]),), dtype=out.dtype)
            reduced = xp.sum(s, axis=-1) if kind == "nuc" else \
                xp.max(s, axis=-1) if kind == 2.0 else xp.min(s, axis=-1)
            out[...] = reduced.reshape(shape)
        _launch("matrix_norm", device, svd_kernel, shape)
        return _make(out, device, result)
    # +-1: column sums (over d0), extreme over d1; +-inf: row sums (over d1), extreme over d0
    summed, extreme = (d0, d1) if kind in (1.0, -1.0) else (d1, d0)
    largest = kind > 0
    if tensor.shape[extreme] == 0 and not largest:
        raise RuntimeError(f"{op}: the {ord} norm takes a min over dimension {extreme}, "
                           f"which has size 0 (shape {list(tensor.shape)})")
    empty = tensor.shape[extreme] == 0   # the max over no sums: 0, as torch 2.11 gives
    out = _new(device, shape, result)

    def kernel():
        if empty:
            out[...] = 0
            return
        sums = xp.sum(xp.abs(data.astype(compute)), axis=summed, keepdims=True)
        picked = xp.max(sums, axis=extreme, keepdims=True) if largest else \
            xp.min(sums, axis=extreme, keepdims=True)
        out[...] = picked.reshape(shape)
    _launch("matrix_norm", device, kernel, shape)
    return _make(out, device, result)


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """``vector_norm`` or ``matrix_norm``, as ``torch.linalg.norm`` chooses: with ``dim`` of
    one dim (an int or a 1-tuple) a vector norm (``ord`` default 2), with two dims a matrix
    norm (default ``'fro'``); without ``dim`` but with ``ord``, a vector norm of a 1-D input or
    a matrix norm of a 2-D input; with neither, the 2-norm of all elements (capture-safe).

    Raises:
        RuntimeError: ``ord`` without ``dim`` on an input that is not 1-D or 2-D, a ``dim``
            of another length, and every error of the norm chosen.
    """
    op = "linalg.norm"
    tensor = _tensor(A, op)
    if dim is not None:
        dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        if len(dims) == 1:
            if isinstance(ord, str):
                raise RuntimeError(f"{op}: ord {ord!r} is a matrix norm, which needs 2 dims; "
                                   f"got dim {list(dims)}")
            return vector_norm(tensor, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        if len(dims) == 2:
            return matrix_norm(tensor, "fro" if ord is None else ord, dims, keepdim,
                               dtype=dtype)
        raise RuntimeError(f"{op}: If dim is specified, it must be of length 1 or 2. Got "
                           f"{list(dims)}")
    if ord is None:
        return vector_norm(tensor, 2, None, keepdim, dtype=dtype)
    if tensor.ndim == 2 or isinstance(ord, str):   # a string ord is a matrix norm
        return matrix_norm(tensor, ord, (-2, -1), keepdim, dtype=dtype)
    if tensor.ndim == 1 and not isinstance(ord, str):
        return vector_norm(tensor, ord, None, keepdim, dtype=dtype)
    raise RuntimeError(f"{op}: If dim is not specified but ord is, the input must be 1D or 2D. "
                       f"Got {tensor.ndim}D")


# -- determinants -----------------------------------------------------------------------------
def _slogdet(op: str, A) -> tuple[Tensor, Tensor]:
    tensor = _matrix(op, A)
    device = tensor.device
    _refuse_in_capture(op, device)
    batch = tensor.shape[:-2]
    sign = _new(device, batch, tensor.dtype)
    logabs = _new(device, batch, _real(tensor.dtype))
    data, xp = tensor._data, _dispatch.xp_of(device)

    def kernel():
        s, la = xp.linalg.slogdet(data)
        sign[...] = s
        logabs[...] = la
    _launch("slogdet", device, kernel, batch)
    return _make(sign, device, tensor.dtype), _make(logabs, device, _real(tensor.dtype))


def linalg_slogdet(A) -> tuple[Tensor, Tensor]:
    """``(sign, logabsdet)`` of square matrices ``A`` (``*, n, n``): ``det = sign *
    exp(logabsdet)``; ``sign`` has ``A``'s dtype (a unit complex number for complex ``A``; 0
    for a singular matrix, whose ``logabsdet`` is -inf), ``logabsdet`` is real. Never raises
    for a singular matrix. Not capture-safe."""
    return return_types.linalg_slogdet(*_slogdet("linalg.slogdet", A))


def slogdet(A) -> tuple[Tensor, Tensor]:
    """``torch.slogdet`` / ``Tensor.slogdet``: as :func:`tensorplay.linalg.slogdet`, the named tuple
    ``slogdet(sign, logabsdet)``."""
    return return_types.slogdet(*_slogdet("linalg.slogdet", A))


def det(A) -> Tensor:
    """The determinant of square matrices ``A`` (``*, n, n``; 1 for 0x0), ``A``'s dtype; 0 for
    a singular matrix (no error). Not capture-safe."""
    tensor, device, data, xp = _eager_matrices("linalg.det", A)
    batch = tensor.shape[:-2]
    out = _new(device, batch, tensor.dtype)

    def kernel():
        out[...] = xp.linalg.det(data)
    _launch("det", device, kernel, batch)
    return _make(out, device, tensor.dtype)


def logdet(A) -> Tensor:
    """``torch.logdet``: ``log(det(A))``, NaN where a real determinant is negative, -inf where
    it is 0 (for complex ``A``, ``log(sign) + logabsdet``). Not capture-safe."""
    tensor, device, data, xp = _eager_matrices("logdet", A)
    batch = tensor.shape[:-2]
    out = _new(device, batch, tensor.dtype)
    complex_ = tensor.dtype.is_complex

    def kernel():
        s, la = xp.linalg.slogdet(data)
        if complex_:
            out[...] = xp.where(s == 0, -np.inf, xp.log(xp.where(s == 0, 1, s)) + la)
        else:
            out[...] = xp.where(s < 0, np.nan, la)
    _launch("logdet", device, kernel, batch)
    return _make(out, device, tensor.dtype)


# -- inverse and solve ------------------------------------------------------------------------
def _raise_singular(op: str, tensor: Tensor, flags: np.ndarray, solver: bool) -> None:
    index = _failed(flags)
    if index is None:
        return
    where = _batch_text(tensor.ndim > 2, index)
    if solver:
        raise LinAlgError(f"{op}{where}: The solver failed because the input matrix is "
                          f"singular.")
    host = np.asarray(tensor._host_copy(f"{op}()"))
    matrix = host.reshape((-1,) + host.shape[-2:])[index]
    raise LinAlgError(f"{op}{where}: The diagonal element {_first_zero_pivot(matrix)} is "
                      f"zero, the inversion could not be completed because the input matrix "
                      f"is singular.")


def inv(A) -> Tensor:
    """The inverse of square matrices ``A`` (``*, n, n``), ``A``'s dtype.

    Checks singularity eagerly on every device: on an accelerator this waits for the device
    (as torch's cuda). Not capture-safe.

    Raises:
        LinAlgError: a singular matrix (an exactly zero pivot), naming the batch element and
            the zero diagonal element of its LU factor.
        RuntimeError: non-square or non-matrix input, integer/low-precision dtypes, a capture.
    """
    op = "linalg.inv"
    tensor, device, shape, out, flags, data, xp = _square_eager(op, A)

    def kernel():
        singular = _singular(xp, data)
        result, failed = _guarded(xp, xp.linalg.inv, _identity_where(xp, singular, data), True)
        out[...] = result
        flags[...] = singular | failed
    _launch("inv", device, kernel, shape)
    _raise_singular(op, tensor, _host_flags(op, flags, device), False)
    return _make(out, device, tensor.dtype)


def inverse(A) -> Tensor:
    """``torch.inverse`` / ``Tensor.inverse``: :func:`tensorplay.linalg.inv`."""
    return inv(A)


def _same_device_dtype(op: str, a: Tensor, b: Tensor, names=("A", "B")) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: Expected {names[0]} and {names[1]} to have the same dtype, "
                           f"but found {names[0]} of type {_name(a.dtype)} and {names[1]} of "
                           f"type {_name(b.dtype)} instead")
    if a.device != b.device:
        raise RuntimeError(f"{op}: Expected {names[0]} and {names[1]} on one device, but found "
                           f"{names[0]} on {a.device} and {names[1]} on {b.device}")


def _broadcast_batch(op: str, a_batch, b_batch) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(tuple(a_batch), tuple(b_batch)))
    except ValueError:
        raise RuntimeError(f"{op}: the batch dimensions of A {list(a_batch)} and B "
                           f"{list(b_batch)} are not broadcastable") from None


def solve(A, B, *, left: bool = True) -> Tensor:
    """The solution ``X`` of ``A @ X = B`` (``X @ A = B`` with ``left=False``) for square
    ``A`` (``*, n, n``) and ``B`` (``*, n, k``), batch dims broadcast. ``B`` is a batch of
    vectors (``X`` then has ``B``'s shape, broadcast) when it is 1-D or has the shape
    ``A.shape[:-1]``. ``A`` and ``B`` share a dtype.

    Checks singularity eagerly (waits for an accelerator). Not capture-safe.

    Raises:
        LinAlgError: a singular ``A``.
        RuntimeError: shapes that do not fit, different dtypes or devices, vector ``B`` with
            ``left=False``, integer/low-precision dtypes, a capture.
    """
    op = "linalg.solve"
    a = _matrix(op, A)
    b = _tensor(B, op, "B")
    _same_device_dtype(op, a, b)
    if b.ndim < 1:
        raise RuntimeError(f"{op}: The input tensor B must have at least 1 dimension (got a "
                           f"0-d tensor)")
    n = a.shape[-1]
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector and not left:
        raise RuntimeError(f"{op}: Vector broadcasting of the left hand side is not supported "
                           f"for left=False. In this case linalg.solve is equivalent to B / "
                           f"A.squeeze(-1)")
    if vector:
        b_batch, rows, k = b.shape[:-1], b.shape[-1], 1
    else:
        b_batch = b.shape[:-2]
        rows, k = (b.shape[-2], b.shape[-1]) if left else (b.shape[-1], b.shape[-2])
    if rows != n:
        equation = "AX = B" if left else "XA = B"
        shown = f"{b.shape[-1]}" if vector else f"{b.shape[-2]}x{b.shape[-1]}"
        raise RuntimeError(f"{op}: Incompatible shapes of A and B for the equation {equation} "
                           f"({a.shape[-2]}x{a.shape[-1]} and {shown})")
    batch = _broadcast_batch(op, a.shape[:-2], b_batch)
    shape = batch + ((n,) if vector else ((n, k) if left else (k, n)))
    device = a.device
    _refuse_in_capture(op, device)
    out = _new(device, shape, a.dtype)
    flags = _new(device, batch, _dtype.bool)
    a_data, b_data, xp = a._data, b._data, _dispatch.xp_of(device)

    def kernel():
        am = a_data if left else xp.swapaxes(a_data, -1, -2)
        bm = b_data[..., None] if vector else (b_data if left else xp.swapaxes(b_data, -1, -2))
        am = xp.broadcast_to(am, batch + (n, n))
        bm = xp.broadcast_to(bm, batch + (n, k))
        singular = _singular(xp, am)
        safe = _identity_where(xp, singular, am)
        result, failed = _guarded(xp, lambda m: xp.linalg.solve(m, bm), safe, True)
        if vector:
            out[...] = result[..., 0]
        else:
            out[...] = result if left else xp.swapaxes(result, -1, -2)
        flags[...] = singular | failed
    _launch("solve", device, kernel, shape)
    _raise_singular(op, a, _host_flags(op, flags, device), True)
    return _make(out, device, a.dtype)


# -- cholesky, qr, eigh, svd ------------------------------------------------------------------
def _eager_matrices(op: str, A) -> tuple:
    """The common start of an eager-only op on (batches of) square matrices ``A``: checked and
    refused inside a capture; ``(tensor, device, data, xp)``."""
    tensor = _matrix(op, A)
    device = tensor.device
    _refuse_in_capture(op, device)
    return tensor, device, tensor._data, _dispatch.xp_of(device)


def _square_eager(op: str, A) -> tuple:
    """:func:`_eager_matrices` with results: ``(tensor, device, shape, out, flags, data,
    xp)``, ``out`` of ``A``'s shape and dtype and ``flags`` one bool per matrix for
    failures."""
    tensor, device, _, _ = _eager_matrices(op, A)
    shape = tensor.shape
    out = _new(device, shape, tensor.dtype)
    flags = _new(device, shape[:-2], _dtype.bool)
    return tensor, device, shape, out, flags, tensor._data, _dispatch.xp_of(device)


def _cholesky(op: str, A, upper: bool) -> Tensor:
    tensor, device, shape, out, flags, data, xp = _square_eager(op, A)

    def kernel():
        h = _hermitian(xp, data, upper)
        low, failed = _guarded(xp, xp.linalg.cholesky, h, True)
        positive = xp.all(xp.real(xp.diagonal(low, axis1=-2, axis2=-1)) > 0, axis=-1)
        out[...] = _ct(xp, low) if upper else low
        flags[...] = failed | ~positive
    _launch("cholesky", device, kernel, shape)
    index = _failed(_host_flags(op, flags, device))
    if index is not None:
        host = np.asarray(tensor._host_copy(f"{op}()"))
        matrix = host.reshape((-1,) + host.shape[-2:])[index]
        order = _failing_minor(_hermitian(np, matrix, upper))
        raise LinAlgError(f"{op}{_batch_text(tensor.ndim > 2, index)}: The factorization could "
                          f"not be completed because the input is not positive-definite (the "
                          f"leading minor of order {order} is not positive-definite).")
    return _make(out, device, tensor.dtype)


def linalg_cholesky(A, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of Hermitian positive-definite matrices ``A`` (``*, n, n``): lower
    ``L`` with ``A = L @ L.mH`` (upper ``U = L.mH`` with ``upper=True``). Only the lower
    triangle of ``A`` is read (the upper one with ``upper=True``), and the imaginary part of
    its diagonal is ignored, as LAPACK's potrf.

    Checks positive-definiteness eagerly (waits for an accelerator). Not capture-safe.

    Raises:
        LinAlgError: a matrix that is not positive-definite, naming the batch element and the
            order of its first leading minor that is not.
        RuntimeError: non-square input, integer/low-precision dtypes, a capture.
    """
    return _cholesky("linalg.cholesky", A, bool(upper))


def cholesky(A, upper: bool = False) -> Tensor:
    """``torch.cholesky`` / ``Tensor.cholesky(upper=False)``: :func:`tensorplay.linalg.cholesky`
    (its errors say ``cholesky``)."""
    return _cholesky("cholesky", A, bool(upper))


def _qr(op: str, A, mode: str) -> tuple[Tensor, Tensor]:
    tensor = _matrix(op, A, square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           f"'reduced' (default), 'r', or 'complete'")
    device = tensor.device
    _refuse_in_capture(op, device)
    batch, (m, n) = tensor.shape[:-2], tensor.shape[-2:]
    k = min(m, n)
    q_shape = (0,) if mode == "r" else batch + ((m, m) if mode == "complete" else (m, k))
    r_shape = batch + ((m, n) if mode == "complete" else (k, n))
    q = _new(device, q_shape, tensor.dtype)
    r = _new(device, r_shape, tensor.dtype)
    data, xp = tensor._data, _dispatch.xp_of(device)
    empty = 0 in tensor.shape

    def kernel():
        if empty:   # no factorization to run; a complete Q of m rows is the identity
            if mode != "r":
                q[...] = xp.eye(q_shape[-2], q_shape[-1], dtype=q.dtype)
            r[...] = 0
            return
        if mode == "r":
            r[...] = xp.linalg.qr(data, mode="r")
            return
        qq, rr = xp.linalg.qr(data, mode=mode)
        q[...] = qq
        r[...] = rr
    _launch("qr", device, kernel, r_shape)
    return _make(q, device, tensor.dtype), _make(r, device, tensor.dtype)


def linalg_qr(A, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """The QR factorization ``A = Q @ R`` of ``A`` (``*, m, n``; ``k = min(m, n)``): the named
    tuple ``(Q, R)``. ``mode='reduced'``: Q ``(*, m, k)``, R ``(*, k, n)``; ``'complete'``: Q
    ``(*, m, m)``, R ``(*, m, n)``; ``'r'``: R ``(*, k, n)`` and an empty Q (shape ``(0,)``).
    Householder QR (LAPACK geqrf / cuSOLVER): R's diagonal may be negative. Not capture-safe.

    Raises:
        RuntimeError: an unknown ``mode``, fewer than 2 dims, integer/low-precision dtypes, a
            capture.
    """
    return return_types.linalg_qr(*_qr("linalg.qr", A, mode))


def qr(A, some: bool = True) -> tuple[Tensor, Tensor]:
    """``torch.qr`` / ``Tensor.qr(some=True)``: reduced (``some``) or complete QR, the named
    tuple ``qr(Q, R)``."""
    return return_types.qr(*_qr("qr", A, "reduced" if some else "complete"))


def _converged(op: str, flags, device, what: str) -> None:
    index = _failed(_host_flags(op, flags, device))
    if index is not None:
        where = _batch_text(flags.ndim > 0, index)
        raise LinAlgError(f"{op}{where}: The algorithm failed to converge because the input "
                          f"matrix is ill-conditioned or has too many repeated {what}.")


def eigh(A, UPLO: str = "L") -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending, real) and eigenvectors (columns, ``A``'s dtype) of Hermitian
    matrices ``A`` (``*, n, n``): the named tuple ``(eigenvalues, eigenvectors)``. Only the
    lower (``UPLO='L'``) or upper (``'U'``) triangle is read. Each eigenvector is unique only
    up to a sign (a phase for complex input). Waits for an accelerator (the convergence
    check). Not capture-safe.

    Raises:
        LinAlgError: no convergence. RuntimeError: UPLO not 'L'/'U', non-square input,
            integer/low-precision dtypes, a capture.
    """
    op = "linalg.eigh"
    tensor = _matrix(op, A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"{op}: Expected UPLO argument to be 'L' or 'U', but got {UPLO!r}")
    device = tensor.device
    _refuse_in_capture(op, device)
    shape, batch, n = tensor.shape, tensor.shape[:-2], tensor.shape[-1]
    real = _real(tensor.dtype)
    values = _new(device, batch + (n,), real)
    vectors = _new(device, shape, tensor.dtype)
    flags = _new(device, batch, _dtype.bool)
    data, xp = tensor._data, _dispatch.xp_of(device)

    def kernel():
        if n == 0:
            flags[...] = False
            return
        (w, v), failed = _guarded(xp, lambda m: xp.linalg.eigh(m, UPLO=UPLO), data, False)
        values[...] = w
        vectors[...] = v
        flags[...] = failed | ~xp.all(xp.isfinite(w), axis=-1)
    _launch("eigh", device, kernel, shape)
    _converged(op, flags, device, "eigenvalues")
    return return_types.linalg_eigh(_make(values, device, real),
                                     _make(vectors, device, tensor.dtype))


def _svd(op: str, tensor: Tensor, full_matrices: bool, compute_uv: bool):
    """(U, S, Vh) arrays-as-tensors of ``tensor`` (U/Vh None without ``compute_uv``)."""
    device = tensor.device
    _refuse_in_capture(op, device)
    batch, (m, n) = tensor.shape[:-2], tensor.shape[-2:]
    k = min(m, n)
    real = _real(tensor.dtype)
    u_shape = batch + ((m, m) if full_matrices else (m, k))
    vh_shape = batch + ((n, n) if full_matrices else (k, n))
    s = _new(device, batch + (k,), real)
    u: Any = _new(device, u_shape, tensor.dtype) if compute_uv else None
    vh: Any = _new(device, vh_shape, tensor.dtype) if compute_uv else None
    flags = _new(device, batch, _dtype.bool)
    data, xp = tensor._data, _dispatch.xp_of(device)
    empty = 0 in tensor.shape

    def kernel():
        if empty:
            if compute_uv:
                u[...] = xp.eye(u_shape[-2], u_shape[-1], dtype=u.dtype)
                vh[...] = xp.eye(vh_shape[-2], vh_shape[-1], dtype=vh.dtype)
            flags[...] = False
            return
        if compute_uv:
            (uu, ss, vv), failed = _guarded(
                xp, lambda a: xp.linalg.svd(a, full_matrices=full_matrices), data, False)
            u[...] = uu
            vh[...] = vv
        else:
            ss, failed = _guarded(xp, lambda a: xp.linalg.svd(a, compute_uv=False), data,
                                  False)
        s[...] = ss
        flags[...] = failed | ~xp.all(xp.isfinite(ss), axis=-1)
    _launch("svd", device, kernel, batch + (m, n))
    _converged(op, flags, device, "singular values")
    u_t = None if u is None else _make(u, device, tensor.dtype)
    vh_t = None if vh is None else _make(vh, device, tensor.dtype)
    return u_t, _make(s, device, real), vh_t


def linalg_svd(A, full_matrices: bool = True, *, driver: str | None = None) -> tuple:
    """The singular value decomposition ``A = U @ diag(S) @ Vh`` of ``A`` (``*, m, n``;
    ``k = min(m, n)``): the named tuple ``(U, S, Vh)``; S real, descending, ``(*, k)``.
    ``full_matrices=True``: U ``(*, m, m)``, Vh ``(*, n, n)``; False: ``(*, m, k)`` and
    ``(*, k, n)``. Singular vectors are unique only up to a phase per pair. ``driver`` (cuda
    only in PyTorch: 'gesvd', 'gesvdj', 'gesvda') is accepted on accelerators and ignored (CuPy
    picks gesvd). Waits for an accelerator (the convergence check). Not capture-safe.

    Raises:
        LinAlgError: no convergence. RuntimeError: ``driver`` on cpu or unknown, fewer than 2
            dims, integer/low-precision dtypes, a capture.
    """
    op = "linalg.svd"
    tensor = _matrix(op, A, square=False)
    _check_driver(op, tensor, driver)
    return return_types.linalg_svd(*_svd(op, tensor, bool(full_matrices), True))


def _check_driver(op: str, tensor: Tensor, driver) -> None:
    if driver is None:
        return
    if tensor.device.type == "cpu":
        raise RuntimeError(f"torch.{op}: keyword argument `driver=` is only supported on CUDA "
                           f"inputs with cuSOLVER backend (got driver={driver!r} for a cpu "
                           f"tensor)")
    if driver not in ("gesvd", "gesvdj", "gesvda"):
        raise RuntimeError(f"torch.{op}: driver must be one of 'gesvd', 'gesvdj', 'gesvda', "
                           f"got {driver!r}")


def svdvals(A, *, driver: str | None = None) -> Tensor:
    """The singular values of ``A`` (``*, m, n``), real, descending, ``(*, min(m, n))``. Waits
    for an accelerator (the convergence check). Not capture-safe."""
    op = "linalg.svdvals"
    tensor = _matrix(op, A, square=False)
    _check_driver(op, tensor, driver)
    return _svd(op, tensor, False, False)[1]


def svd(A, some: bool = True, compute_uv: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.svd`` / ``Tensor.svd``: the named tuple ``svd(U, S, V)`` with ``V = Vh.mH``
    (not Vh), reduced when ``some``; with ``compute_uv=False`` U and V are zero matrices of
    shapes ``(*, m, m)`` and ``(*, n, n)``."""
    op = "svd"
    tensor = _matrix(op, A, square=False)
    batch, (m, n) = tensor.shape[:-2], tensor.shape[-2:]
    if not compute_uv:
        s = _svd(op, tensor, False, False)[1]
        device = tensor.device
        u, v = _new(device, batch + (m, m), tensor.dtype), _new(device, batch + (n, n),
                                                                  tensor.dtype)

        def zero():
            u[...] = 0
            v[...] = 0
        _launch("svd_zero_uv", device, zero, batch + (m, n))
        return return_types.svd(_make(u, device, tensor.dtype), s,
                                _make(v, device, tensor.dtype))
    u, s, vh = _svd(op, tensor, not some, True)
    device, xp = tensor.device, _dispatch.xp_of(tensor.device)
    v = _new(device, vh.shape[:-2] + (vh.shape[-1], vh.shape[-2]), tensor.dtype)
    vh_data = vh._data

    def transpose():
        v[...] = _ct(xp, vh_data)
    _launch("svd_v", device, transpose, v.shape)
    return return_types.svd(u, s, _make(v, device, tensor.dtype))


# -- least squares, pseudo-inverse ------------------------------------------------------------
_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _tolerance_value(op: str, value, name: str, device):
    """A float, or the ``xp`` array of a real tensor (broadcast against the batch)."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        value._check_guard()
        if value.dtype.is_complex:
            raise RuntimeError(f"{op}: {name} tensor of complex type is not supported "
                               f"(got {value.dtype.name})")
        if value.device != device:
            raise RuntimeError(f"{op}: {name} on {value.device}, A on {device}: put them on "
                               f"one device")
        return value._data
    return _number(op, value, name)


def lstsq(A, B, rcond: float | None = None, *, driver: str | None = None) -> tuple:
    """A least-squares solution ``X`` minimizing ``||A @ X - B||`` for ``A`` (``*, m, n``) and
    ``B`` (``*, m, k``, or ``(*, m)`` when it has one dim fewer than ``A``; batch dims
    broadcast): the named tuple ``(solution, residuals, rank, singular_values)``.

    ``driver``: 'gelsy' (the cpu default), 'gelsd', 'gelss' or 'gels'; on an accelerator
    only 'gels' (its default, as torch's cuda). The solution is the minimum-norm one
    (computed from the SVD), underdetermined systems (``m < n``) included. ``rank`` (int64,
    ``(*)``) is computed for every driver but 'gels'; ``singular_values`` (``(*, min(m, n))``)
    for 'gelsd'/'gelss';
    ``residuals`` (``(*, k)``, the squared column residuals) when ``m > n`` for 'gels', and for
    'gelsd'/'gelss' when every matrix has rank n; what is not computed is an empty tensor
    (shape ``(0,)``). ``rcond`` (default ``eps * max(m, n)``): singular values at most ``rcond``
    times the largest count as zero. Reads the ranks on the host for 'gelsd'/'gelss' with
    ``m > n`` (waits for an accelerator). Not capture-safe.

    Raises:
        RuntimeError: shapes that do not fit, different dtypes or devices, an unknown driver
            (or one other than 'gels' on an accelerator),
            integer/low-precision dtypes, a capture.
    """
    op = "torch.linalg.lstsq"
    a = _tensor(A, op, "input")
    b = _tensor(B, op, "other")
    if a.ndim < 2:
        raise RuntimeError(f"{op}: input must have at least 2 dimensions (got shape "
                           f"{list(a.shape)})")
    if b.ndim < 1:
        raise RuntimeError(f"{op}: other must have at least 1 dimension (got a 0-d tensor)")
    _check_dtype(op, a)
    _same_device_dtype(op, a, b, ("input", "other"))
    diff = a.ndim - b.ndim
    if diff not in (0, 1):
        raise RuntimeError(f"{op}: input.dim() must be greater or equal to other.dim() and "
                           f"(input.dim() - other.dim()) <= 1 (got {a.ndim} and {b.ndim})")
    vector = diff == 1
    m, n = a.shape[-2:]
    rows = b.shape[-1] if vector else b.shape[-2]
    if rows != m:
        which = "other.size(-1)" if vector else "other.size(-2)"
        raise RuntimeError(f"{op}: input.size(-2) should match {which} (got {m} and {rows})")
    accelerator = a.device.type != "cpu"
    if driver is None:
        driver = "gels" if accelerator else "gelsy"
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError(f"{op}: parameter `driver` should be one of "
                           f"({', '.join(_LSTSQ_DRIVERS)}), got {driver!r}")
    if accelerator and driver != "gels":
        raise RuntimeError(f"{op}: `driver` other than `gels` is not supported on "
                           f"{a.device.type} (got {driver!r})")
    k = 1 if vector else b.shape[-1]
    batch = _broadcast_batch(op, a.shape[:-2], b.shape[:-1] if vector else b.shape[:-2])
    real = _real(a.dtype)
    eps = float(np.finfo(real.numpy).eps)
    cutoff = eps * max(m, n) if rcond is None else _number(op, rcond, "rcond")
    device = a.device
    _refuse_in_capture(op, device)
    want_rank = driver != "gels"
    want_sv = driver in ("gelsd", "gelss")
    maybe_residuals = m > n and driver != "gelsy"
    x_shape = batch + ((n,) if vector else (n, k))
    solution = _new(device, x_shape, a.dtype)
    rank = _new(device, batch if want_rank else (0,), _dtype.int64)
    values = _new(device, batch + (min(m, n),) if want_sv else (0,), real)
    residuals = _new(device, batch + (k,), real) if maybe_residuals else None
    a_data, b_data, xp = a._data, b._data, _dispatch.xp_of(device)

    def kernel():
        am = xp.broadcast_to(a_data, batch + (m, n))
        bm = xp.broadcast_to(b_data[..., None] if vector else b_data, batch + (m, k))
        if 0 in (m, n):
            x = xp.zeros(batch + (n, k), dtype=am.dtype)
            s = xp.zeros(batch + (0,), dtype=real.numpy)
            kept = s > 0
        else:
            u, s, vh = xp.linalg.svd(am, full_matrices=False)
            kept = s > cutoff * s[..., :1]
            inverse = xp.where(kept, 1 / xp.where(kept, s, 1), 0).astype(s.dtype)
            x = _ct(xp, vh) @ (inverse[..., None] * (_ct(xp, u) @ bm))
        solution[...] = x[..., 0] if vector else x
        if want_rank:
            rank[...] = xp.sum(kept, axis=-1)
        if want_sv:
            values[...] = s
        if residuals is not None:
            residuals[...] = xp.sum(xp.abs(am @ x - bm) ** 2, axis=-2)
    _launch("lstsq", device, kernel, x_shape)
    rank_t = _make(rank, device, _dtype.int64)
    if residuals is not None and want_rank:
        full = bool(np.all(np.asarray(rank_t._host_copy(f"{op}()")) == n))
    else:
        full = residuals is not None
    if full:
        residuals_t = _make(residuals, device, real)
    else:
        residuals_t = _make(_new(device, (0,), real), device, real)
    return return_types.linalg_lstsq(_make(solution, device, a.dtype), residuals_t, rank_t,
                                     _make(values, device, real))


def pinv(A, rcond=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of ``A`` (``*, m, n``) -> ``(*, n, m)``, from its SVD
    (its eigendecomposition with ``hermitian=True``, reading the lower triangle). Singular
    values at most ``max(atol, rtol * largest)`` count as zero; ``atol`` and ``rtol`` are
    floats or real tensors broadcast against the batch. Defaults: ``atol=0``; ``rtol = eps *
    max(m, n)`` unless ``atol`` is given and positive (then 0). ``rcond`` is the old spelling
    of ``rtol``. Not capture-safe; reads nothing back.

    Raises:
        RuntimeError: ``rcond`` together with ``atol``/``rtol``, complex tolerances,
            integer/low-precision dtypes, non-square input with ``hermitian``, a capture.
    """
    op = "linalg.pinv"
    tensor = _matrix(op, A, square=bool(hermitian))
    device = tensor.device
    if rcond is not None:
        if atol is not None or rtol is not None:
            raise RuntimeError(f"{op}: rcond is the old name of rtol; give rcond or atol/rtol, "
                               f"not both")
        rtol = rcond
    atol_v = _tolerance_value(op, atol, "atol", device)
    rtol_v = _tolerance_value(op, rtol, "rtol", device)
    batch, (m, n) = tensor.shape[:-2], tensor.shape[-2:]
    real = _real(tensor.dtype)
    if rtol_v is None:
        positive_atol = atol_v is not None and (not isinstance(atol_v, float) or atol_v > 0)
        # a tensor atol counts as given and positive, as PyTorch decides from its presence
        rtol_v = 0.0 if positive_atol else float(np.finfo(real.numpy).eps) * max(m, n)
    if atol_v is None:
        atol_v = 0.0
    _refuse_in_capture(op, device)
    shape = batch + (n, m)
    out = _new(device, shape, tensor.dtype)
    data, xp = tensor._data, _dispatch.xp_of(device)
    empty = 0 in tensor.shape

    def kernel():
        if empty:
            out[...] = 0
            return
        if hermitian:
            w, v = xp.linalg.eigh(data)
            s, left, right = xp.abs(w), v, _ct(xp, v)
            scale = w
        else:
            left, s, right = xp.linalg.svd(data, full_matrices=False)
            scale = s
        largest = xp.max(s, axis=-1)
        limit = xp.maximum(xp.asarray(atol_v, dtype=s.dtype),
                           xp.asarray(rtol_v, dtype=s.dtype) * largest)
        kept = s > limit[..., None]
        inverse = xp.where(kept, 1 / xp.where(kept, scale, 1), 0).astype(left.dtype)
        out[...] = _ct(xp, right) @ (inverse[..., None] * _ct(xp, left))
    _launch("pinv", device, kernel, shape)
    return _make(out, device, tensor.dtype)


def pinverse(A, rcond: float = 1e-15) -> Tensor:
    """``torch.pinverse`` / ``Tensor.pinverse(rcond=1e-15)``: :func:`tensorplay.linalg.pinv` with
    ``rtol=rcond`` (``rcond`` relative to the largest singular value)."""
    return pinv(A, rtol=rcond)
