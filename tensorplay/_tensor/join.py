"""Ops that combine tensors or evaluate a formula per element: ``matmul`` (``mm bmm dot addmm
outer``), ``cat``/``stack``, ``where``, ``clamp``, ``flip``, ``tril``/``triu``, and the
activations (``relu gelu sigmoid silu softmax log_softmax erf erfc lerp``).

Every op checks its operands, works out the result's shape and dtype from metadata alone, takes
its memory from ``_dispatch.empty`` and launches ONE kernel that computes the whole formula with
``xp`` (temporaries live only inside the kernel). float16 and bfloat16 compute in float32 and
round once when the result is stored.

``erf`` (and so ``gelu(approximate="none")``) is computed here because NumPy has none: for
float16/bfloat16/float32 a Taylor series below ``|x| = 0.8`` and the Numerical-Recipes
Chebyshev fit of erfc above it, max abs error 1.3e-7 (about two float32 ulps near 1); for float64
a positive-term series up to ``|x| = 3`` and a 40-term continued fraction for erfc beyond it,
max abs error 1.4e-15 (tested against ``math.erf``).
"""

from __future__ import annotations

import math

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import elementwise as _ops
from .reductions import _accumulate
from .tensor import Tensor, _normalize_dim

__all__ = ["matmul", "mm", "bmm", "dot", "addmm", "outer", "cat", "concat", "concatenate",
           "stack", "where", "clamp", "clip", "clamp_min", "clamp_max", "flip", "tril", "triu",
           "relu", "gelu", "sigmoid", "silu", "softmax", "log_softmax", "erf", "erfc", "lerp"]

TENSOR_METHODS = ("matmul", "mm", "bmm", "dot", "addmm", "outer", "clamp", "clip",
                  "clamp_", "clip_", "clamp_min", "clamp_max", "flip", "tril", "triu", "relu",
                  "relu_", "gelu", "sigmoid", "sigmoid_", "silu", "softmax", "log_softmax",
                  "erf", "erf_", "erfc", "lerp")


def _tensor_arg(value, op: str, name: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be a Tensor, not "
                        f"{type(value).__name__}")
    value._check_guard()
    return value


def _result(op: str, device, shape, dtype: _dtype.dtype, out: Tensor | None):
    """The output array: new memory, or ``out``'s after checking shape and castability."""
    if out is None:
        _dispatch.check_dtype_supported(device, dtype)
        array = _dispatch.empty(device, shape, dtype)
        return array, Tensor._make(array, device, dtype)
    if tuple(shape) != out.shape:
        raise RuntimeError(f"{op}: the result of shape {tuple(shape)} cannot be written into the "
                           f"tensor of shape {out.shape} (in-place ops don't broadcast self)")
    if not _dtype.can_cast(dtype, out.dtype):
        raise RuntimeError(f"{op}: result type {dtype.name} can't be cast to the desired output "
                           f"type {out.dtype.name}")
    _ops.check_no_overlap(out, op)
    return out._data, out


def _apply(op: str, operands, formula, *, result=None, compute=None,
           out: Tensor | None = None) -> Tensor:
    """``out[...] = formula(xp, *operands)`` for Tensors/numbers with broadcasting.

    ``result(promoted)`` gives the result dtype (default: the promoted dtype); operands are cast
    in the kernel to ``compute(promoted)`` (default: the result dtype, float32 for half floats).
    """
    operands = [_ops._check_operand(v, op) for v in operands]
    device = _ops._operand_device(operands, op)
    promoted = _dtype.result_type(*operands)
    _dtype.check_op(op, promoted, operands)
    result = promoted if result is None else result(promoted)
    shape = _ops._broadcast_shape(op, *(_ops._shape_of(v) for v in operands))
    out_array, out_tensor = _result(op, device, shape, result, out)
    compute_dtype = _accumulate(result if compute is None else compute(promoted))
    compute = compute_dtype.numpy
    arrays = [_ops._array_of(v, device) for v in operands]
    xp = _dispatch.xp_of(device)
    if op in _ops.INTEGER_DIVISIONS and device.type == "cpu":
        _ops.check_host_divisor(op, compute_dtype, arrays[1])

    def kernel():
        out_array[...] = formula(xp, *[_ops._cast(a, compute, xp) for a in arrays])
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
    return out_tensor


def _floating(op: str):
    """A result rule: floating stays, bool/integer becomes float32; complex is refused."""
    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if promoted.is_complex:
            raise TypeError(f"{op}(): complex tensors are not supported")
        return promoted if promoted.is_floating_point else _dtype.get_default_dtype()
    return rule


def _only_floating(op: str):
    """A result rule that refuses bool/integer input (PyTorch has no integer kernel)."""
    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if not promoted.is_floating_point:
            raise TypeError(f"{op}(): expected a floating point tensor, got {promoted.name}; "
                            f"convert it with .float() first")
        return promoted
    return rule


# -- matrix products --------------------------------------------------------------------------
def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: expected both operands to have the same dtype, got "
                           f"{a.dtype.name} and {b.dtype.name}")
    if a.dtype is _dtype.bool:
        raise RuntimeError(f"{op}: bool tensors are not supported; convert them first")


def _matmul_shape(a_shape, b_shape) -> tuple[int, ...]:
    if not a_shape or not b_shape:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{len(a_shape)}D and {len(b_shape)}D")
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    if a2[-1] != b2[-2]:
        raise RuntimeError(f"matmul: shapes {a_shape} and {b_shape} cannot be multiplied "
                           f"({a2[-1]} != {b2[-2]}: the first's last dim must equal the "
                           f"second's {'only' if len(b_shape) == 1 else 'second-to-last'} dim)")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise RuntimeError(f"matmul: the batch dimensions of shapes {a_shape} and {b_shape} "
                           f"do not broadcast ({a2[:-2]} vs {b2[:-2]})") from None
    return batch + a2[-2:-1] * (len(a_shape) > 1) + b2[-1:] * (len(b_shape) > 1)


def _launch_matmul(op: str, a: Tensor, b: Tensor, shape) -> Tensor:
    device = _ops._operand_device([a, b], op)
    out, result = _result(op, device, shape, a.dtype, None)
    compute = _accumulate(a.dtype).numpy
    left, right = a._data, b._data
    matmul = _dispatch.matmul_of(device)
    exact = compute == a.dtype.numpy

    def kernel():
        if exact:
            matmul(left, right, out=out)
        else:
            out[...] = matmul(left.astype(compute), right.astype(compute))
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tuple(shape)))
    return result


def matmul(input, other) -> Tensor:
    """Matrix product with PyTorch's rules: 1-D @ 1-D is a dot product, a 1-D operand gets a
    dimension added (and removed from the result), batch dimensions broadcast.

    Raises:
        RuntimeError: for 0-d operands, mismatched inner sizes or batch shapes (naming both
            shapes), or operands of different dtypes.
    """
    a, b = _tensor_arg(input, "matmul", "input"), _tensor_arg(other, "matmul", "other")
    _same_dtype("matmul", a, b)
    return _launch_matmul("matmul", a, b, _matmul_shape(a.shape, b.shape))


def mm(input, mat2) -> Tensor:
    """The product of two 2-D tensors (no broadcasting)."""
    a, b = _tensor_arg(input, "mm", "input"), _tensor_arg(mat2, "mm", "mat2")
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected two 2-D tensors, got shapes {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x"
                           f"{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    _same_dtype("mm", a, b)
    return _launch_matmul("mm", a, b, (a.shape[0], b.shape[1]))


def bmm(input, mat2) -> Tensor:
    """Batched product of two 3-D tensors with the same batch size (no broadcasting)."""
    a, b = _tensor_arg(input, "bmm", "input"), _tensor_arg(mat2, "bmm", "mat2")
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected two 3-D tensors, got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"bmm: shapes {a.shape} and {b.shape} cannot be multiplied: expected "
                           f"mat2 of shape ({a.shape[0]}, {a.shape[2]}, *)")
    _same_dtype("bmm", a, b)
    return _launch_matmul("bmm", a, b, (a.shape[0], a.shape[1], b.shape[2]))


def dot(input, other) -> Tensor:
    """The dot product of two 1-D tensors of the same size (a 0-d tensor)."""
    a, b = _tensor_arg(input, "dot", "input"), _tensor_arg(other, "dot", "other")
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor {a.shape} and src "
                           f"{b.shape} to have the same number of elements, but got "
                           f"{a.shape[0]} and {b.shape[0]} elements respectively")
    _same_dtype("dot", a, b)
    return _launch_matmul("dot", a, b, ())


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)``; ``input`` broadcasts; ``beta=0`` ignores it
    (NaN in it does not propagate)."""
    product = mm(mat1, mat2)
    if alpha != 1:
        product = _ops.binary("mul", product, alpha)
    if beta == 0:
        return product
    bias = _tensor_arg(input, "addmm", "input")
    if beta != 1:
        bias = _ops.binary("mul", bias, beta)
    return _ops.binary("add", product, bias)


def outer(input, vec2) -> Tensor:
    """The outer product of two 1-D tensors."""
    a, b = _tensor_arg(input, "outer", "input"), _tensor_arg(vec2, "outer", "vec2")
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected two 1-D tensors, got shapes {a.shape} and "
                           f"{b.shape}")
    return _ops.binary("mul", a.unsqueeze(1), b.unsqueeze(0))


# -- joining ----------------------------------------------------------------------------------
def _tensor_list(tensors, op: str) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}(): expected a list or tuple of Tensors, got "
                        f"{type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{op}(): expected a non-empty list of Tensors")
    for i, item in enumerate(tensors):
        _tensor_arg(item, op, f"tensors[{i}]")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        names = " and ".join(sorted(str(d) for d in devices))
        raise RuntimeError(f"{op}: expected all tensors on one device, but found {names}; move "
                           f"them with .to() first")
    return tensors


def _launch_join(op: str, tensors, shape, keys, result: _dtype.dtype) -> Tensor:
    device = tensors[0].device
    out, tensor = _result(op, device, shape, result, None)
    arrays = [t._data for t in tensors]

    def kernel():
        for key, array in zip(keys, arrays):
            out[key] = array
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=tuple(shape)))
    return tensor


def cat(tensors, dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension; dtypes promote. 1-D empty tensors (shape
    ``(0,)``) are skipped, as in PyTorch.

    Raises:
        RuntimeError: empty list, 0-d tensors, different ndim, or sizes that differ outside
            ``dim`` (naming the tensor's position); tensors on different devices.
    """
    tensors = _tensor_list(tensors, "cat")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    kept = [t for t in tensors if t.shape != (0,)] or tensors[:1]
    ref = kept[0]
    axis = _normalize_dim(dim, ref.ndim)
    for i, t in enumerate(tensors):
        if t.shape == (0,) and ref.shape != (0,):
            continue
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} "
                               f"and {t.ndim}")
        for d in range(ref.ndim):
            if d != axis and t.shape[d] != ref.shape[d]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {axis}. "
                                   f"Expected size {ref.shape[d]} but got size {t.shape[d]} "
                                   f"for tensor number {i} in the list.")
    keys, offset = [], 0
    for t in kept:
        keys.append((slice(None),) * axis + (slice(offset, offset + t.shape[axis]),))
        offset += t.shape[axis]
    shape = ref.shape[:axis] + (offset,) + ref.shape[axis + 1:]
    # skipped empties still take part in promotion, as in PyTorch
    return _launch_join("cat", kept, shape, keys, _dtype.result_type(*tensors))


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dimension ``dim``; dtypes promote."""
    tensors = _tensor_list(tensors, "stack")
    ref = tensors[0]
    for i, t in enumerate(tensors):
        if t.shape != ref.shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(ref.shape)} at entry 0 and {list(t.shape)} at entry {i}")
    axis = _normalize_dim(dim, ref.ndim + 1)
    keys = [(slice(None),) * axis + (i,) for i in range(len(tensors))]
    shape = ref.shape[:axis] + (len(tensors),) + ref.shape[axis:]
    return _launch_join("stack", tensors, shape, keys, _dtype.result_type(*tensors))


# -- selection and bounds -----------------------------------------------------------------------
def where(condition, input=None, other=None) -> Tensor:
    """``input`` where ``condition`` is true, else ``other`` (Tensors or numbers, broadcast,
    promoted). ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)``.

    Raises:
        TypeError: a condition that is not a bool tensor.
    """
    condition = _tensor_arg(condition, "where", "condition")
    if input is None and other is None:
        from . import indexing as _indexing

        return _indexing.nonzero(condition, as_tuple=True)
    if condition.dtype is not _dtype.bool:
        raise TypeError(f"where expected condition to be a boolean tensor, but got a tensor "
                        f"with dtype {condition.dtype.name}")
    values = [_ops._check_operand(v, "where") for v in (input, other)]
    device = _ops._operand_device([condition, *values], "where")
    result = _dtype.result_type(*values)
    shape = _ops._broadcast_shape("where", condition.shape, *(_ops._shape_of(v) for v in values))
    out, tensor = _result("where", device, shape, result, None)
    cond = _ops._array_of(condition, device)
    first, second = (_ops._array_of(v, device) for v in values)
    compute, xp = result.numpy, _dispatch.xp_of(device)

    def kernel():
        out[...] = xp.where(cond, _ops._cast(first, compute, xp), _ops._cast(second, compute, xp))
    _dispatch.launch(device, _dispatch.named("where", kernel, shape=shape))
    return tensor


def tensor_where(self, condition, other) -> Tensor:
    """``Tensor.where(condition, other)``: this tensor where ``condition`` is true, else
    ``other`` (PyTorch's ``x.where(c, y) == where(c, x, y)``)."""
    return where(condition, self, other)


def _clamp(op: str, input, min, max, out=None) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    if min is None and max is None:
        raise ValueError(f"{op}: at least one of 'min' or 'max' must not be None")
    bounds = [b for b in (min, max) if b is not None]
    has_low, has_high = min is not None, max is not None

    def formula(xp, x, *limits):
        limits = list(limits)
        if has_low:
            x = xp.maximum(x, limits.pop(0))
        if has_high:
            x = xp.minimum(x, limits.pop(0))
        return x
    return _apply(op, [tensor, *bounds], formula, out=out)


def clamp(input, min=None, max=None) -> Tensor:
    """Limit every element to ``[min, max]`` (Tensors or numbers; either may be None). NaN
    propagates; where ``min > max`` the result is ``max``.

    Raises:
        ValueError: neither bound given. RuntimeError: complex operands (no ordering).
    """
    return _clamp("clamp", input, min, max)


def clamp_(input, min=None, max=None) -> Tensor:
    """In-place :func:`clamp`; the result must be castable to the tensor's dtype."""
    return _clamp("clamp_", input, min, max, out=input)


clip = clamp
clip_ = clamp_


def clamp_min(input, min) -> Tensor:
    return clamp(input, min=min)


def clamp_max(input, max) -> Tensor:
    return clamp(input, max=max)


def flip(input, dims) -> Tensor:
    """A copy with the order of elements reversed along ``dims`` (an int or a sequence)."""
    tensor = _tensor_arg(input, "flip", "input")
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    axes = tuple(_normalize_dim(d, tensor.ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"flip: dims {dims} has a repeated dim")
    if tensor.ndim == 0:
        return tensor.clone()
    return _apply("flip", [tensor], lambda xp, x: xp.flip(x, axis=axes))


def _triangle(op: str, input, diagonal: int) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    if tensor.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions, got shape "
                           f"{tensor.shape}")
    k = int(diagonal)
    return _apply(op, [tensor], lambda xp, x: getattr(xp, op)(x, k))


def tril(input, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (elements above ``diagonal`` set to 0)."""
    return _triangle("tril", input, diagonal)


def triu(input, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (elements below ``diagonal`` set to 0)."""
    return _triangle("triu", input, diagonal)


# -- activations ------------------------------------------------------------------------------
def relu(input) -> Tensor:
    """``max(x, 0)``, keeping the dtype (NaN stays NaN). RuntimeError for bool and complex."""
    tensor = _tensor_arg(input, "relu", "input")
    return _apply("relu", [tensor], lambda xp, x: xp.maximum(x, x.dtype.type(0)))


def relu_(input) -> Tensor:
    tensor = _tensor_arg(input, "relu_", "input")
    return _apply("relu_", [tensor], lambda xp, x: xp.maximum(x, x.dtype.type(0)), out=tensor)


def _sigmoid(xp, x):
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


def sigmoid(input) -> Tensor:
    """``1 / (1 + exp(-x))``, accurate in both tails; bool/integer input gives float32."""
    return _apply("sigmoid", [_tensor_arg(input, "sigmoid", "input")], _sigmoid,
                  result=_floating("sigmoid"))


def sigmoid_(input) -> Tensor:
    tensor = _tensor_arg(input, "sigmoid_", "input")
    return _apply("sigmoid_", [tensor], _sigmoid, result=_floating("sigmoid_"), out=tensor)


def silu(input) -> Tensor:
    """``x * sigmoid(x)``."""
    return _apply("silu", [_tensor_arg(input, "silu", "input")],
                  lambda xp, x: x * _sigmoid(xp, x), result=_only_floating("silu"))


# erf, float32 path: Taylor coefficients of erf (odd powers) and the Numerical Recipes erfc fit.
_ERF_TAYLOR = tuple((-1) ** n * 2 / (math.sqrt(math.pi) * math.factorial(n) * (2 * n + 1))
                    for n in range(11))
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
             -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf32(xp, x):
    kind = x.dtype.type
    ax = xp.abs(x)
    small = xp.minimum(ax, kind(0.8))
    x2 = small * small
    series = kind(_ERF_TAYLOR[-1])
    for c in _ERF_TAYLOR[-2::-1]:
        series = series * x2 + kind(c)
    big = xp.maximum(ax, kind(0.8))
    t = 1 / (1 + kind(0.5) * big)
    fit = kind(_ERFC_FIT[-1])
    for c in _ERFC_FIT[-2::-1]:
        fit = fit * t + kind(c)
    tail = 1 - t * xp.exp(-big * big + fit)
    return xp.copysign(xp.where(ax < 0.8, small * series, tail), x)


def _erf64(xp, x):
    ax = xp.abs(x)
    small = xp.minimum(ax, 3.0)
    x2 = small * small
    term, total = small, small
    for n in range(1, 50):  # erf = 2/sqrt(pi) e^-x^2 sum 2^n x^(2n+1) / (2n+1)!!
        term = term * (2 * x2) / (2 * n + 1)
        total = total + term
    series = (2 / math.sqrt(math.pi)) * xp.exp(-x2) * total
    big = xp.maximum(ax, 3.0)
    fraction = big
    for k in range(40, 0, -1):  # erfc continued fraction, evaluated from its tail
        fraction = big + (k / 2) / fraction
    tail = 1 - xp.exp(-big * big) / (math.sqrt(math.pi) * fraction)
    return xp.copysign(xp.where(ax <= 3.0, series, tail), x)


def _erf(xp, x):
    fused = _dispatch.erf_for(xp)
    if fused is not None:
        return fused(x)
    return _erf64(xp, x) if x.dtype == np.float64 else _erf32(xp, x)


def erf(input) -> Tensor:
    """The error function (accuracy in the module docstring); integer input gives float32."""
    return _apply("erf", [_tensor_arg(input, "erf", "input")], _erf, result=_floating("erf"))


def erf_(input) -> Tensor:
    tensor = _tensor_arg(input, "erf_", "input")
    return _apply("erf_", [tensor], _erf, result=_floating("erf_"), out=tensor)


def erfc(input) -> Tensor:
    """``1 - erf(x)`` (absolute, not relative, accuracy in the far right tail)."""
    return _apply("erfc", [_tensor_arg(input, "erfc", "input")], lambda xp, x: 1 - _erf(xp, x),
                  result=_floating("erfc"))


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu_exact(xp, x):
    return x * 0.5 * (1 + _erf(xp, x * (1 / math.sqrt(2))))


def _gelu_tanh(xp, x):
    return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def gelu(input, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: ``x * Phi(x)`` with the exact erf (``approximate="none"``)
    or the tanh approximation (``"tanh"``).

    Raises:
        ValueError: another ``approximate``. TypeError: bool/integer input.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    formula = _gelu_exact if approximate == "none" else _gelu_tanh
    return _apply("gelu", [_tensor_arg(input, "gelu", "input")], formula,
                  result=_only_floating("gelu"))


def _softmax_input(op: str, input, dim, dtype):
    tensor = _tensor_arg(input, op, "input")
    if dtype is not None:
        tensor = tensor.to(_dtype.to_dtype(dtype))
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"{op}(): expected a floating point tensor, got {tensor.dtype.name}; "
                        f"pass dtype=tensorplay.float32")
    return tensor, _normalize_dim(dim, tensor.ndim)


def _along(axis: int, zero_d: bool, rule):
    def formula(xp, x):
        if zero_d:
            return rule(xp, x.reshape(1), 0).reshape(())
        return rule(xp, x, axis)
    return formula


def _softmax_rule(xp, x, axis):
    shifted = xp.exp(x - xp.amax(x, axis=axis, keepdims=True))
    return shifted / xp.sum(shifted, axis=axis, keepdims=True)


def _log_softmax_rule(xp, x, axis):
    shifted = x - xp.amax(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def softmax(input, dim: int, dtype=None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably (the maximum subtracted)."""
    tensor, axis = _softmax_input("softmax", input, dim, dtype)
    if tensor.numel() == 0:
        return tensor.clone()
    return _apply("softmax", [tensor], _along(axis, tensor.ndim == 0, _softmax_rule))


def log_softmax(input, dim: int, dtype=None) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, computed stably."""
    tensor, axis = _softmax_input("log_softmax", input, dim, dtype)
    if tensor.numel() == 0:
        return tensor.clone()
    return _apply("log_softmax", [tensor], _along(axis, tensor.ndim == 0, _log_softmax_rule))


def lerp(input, end, weight) -> Tensor:
    """``input + weight * (end - input)``, in the form that is exact at ``weight`` 0 and 1.

    Raises:
        RuntimeError: ``input`` and ``end`` (or a tensor ``weight``) of different dtypes.
    """
    start = _tensor_arg(input, "lerp", "input")
    stop = _tensor_arg(end, "lerp", "end")
    for name, value in (("end", stop), ("weight", weight)):
        if isinstance(value, Tensor) and value.dtype is not start.dtype:
            raise RuntimeError(f"lerp: expected dtype {start.dtype.name} for `{name}` but got "
                               f"dtype {value.dtype.name}")
    if not start.dtype.is_floating_point:
        raise TypeError(f"lerp(): expected floating point tensors, got {start.dtype.name}")

    def formula(xp, s, e, w):
        diff = e - s
        return xp.where(xp.abs(w) < 0.5, s + w * diff, e - diff * (1 - w))
    return _apply("lerp", [start, stop, weight], formula)
