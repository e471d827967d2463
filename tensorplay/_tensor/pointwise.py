"""Comparison and elementwise functions of PyTorch's pointwise surface: ``allclose isclose equal
nan_to_num hypot logaddexp addcmul addcdiv lerp copysign heaviside erfinv lgamma digamma sinc
logit xlogy`` (functions, Tensor methods and the in-place ``_`` forms PyTorch has).

Every op except ``allclose``/``equal`` is ONE kernel of the one elementwise engine
(``elementwise.formula``): dtypes, broadcasting, ``out=`` and every error are decided from
metadata before anything is allocated, the plan is kept per operand signature, and nothing reads
the device, so all of them may be used inside a captured graph. ``allclose`` and ``equal`` return
Python bools: they read the result back (as ``.item()`` does), so they wait for the device and
raise inside a capture; use ``isclose(...).all()`` / ``eq(...).all()`` there.

Special functions. NumPy has no ``erfinv``/``lgamma``/``digamma`` and SciPy is not a dependency,
so they are written once here as ``xp`` formulas and every backend (host, sim, cuda) computes the
same thing. They evaluate in float64 whatever the input dtype and round once into the result
(float16/bfloat16/float32 results are so within half an ulp of the float64 value):

- ``erfinv``: PyTorch's rational first guess, then three Newton steps on ``erf`` (on ``erfc``
  for ``|y| > 0.5``, whose ``1 - |y|`` is exact). Relative error below 1e-12 (measured against
  ``math.erf``/``math.erfc`` round trips and SciPy), limited by the float64 ``erf`` of
  ``activations.py`` and the ``erfc`` here (2.5e-11 relative below ``x = 3``).
  ``erfinv(+-1) = +-inf``, NaN outside ``[-1, 1]``.
- ``lgamma``: the Lanczos sum (g = 7, 9 terms; Gamma to 2e-15 relative) for ``x >= 0.5``,
  ``lgamma(x + 1) - log(x)`` on ``(0, 0.5)`` and the reflection formula with an exact argument
  reduction of ``sin(pi x)`` below 0. Absolute error below 6e-15 where ``|lgamma| < 1`` (near the
  zeros at 1 and 2), relative 6e-15 elsewhere (against ``math.lgamma``). ``+inf`` at 0, at the
  negative integers and at ``+-inf``.
- ``digamma``: the recurrence up to ``x >= 10`` and the asymptotic series to ``x**-14``
  (truncation below 1e-16), the reflection formula (exact reduction of ``pi x``) below 0.
  Absolute error below 2e-15 where ``|digamma| < 1``, relative 2e-13 elsewhere (the worst next
  to the poles at the negative integers; against SciPy). At 0:
  ``-inf`` (``+inf`` at ``-0.0``), NaN at the negative integers and ``-inf``, as PyTorch.

The others compute in the result's dtype (float16/bfloat16 in float32) as PyTorch does:
``sinc`` as ``sin(pi x) / (pi x)`` (so ``sinc(1)`` is about 4e-17, not 0, as in PyTorch),
``logaddexp`` as ``max + log1p(exp(-|a - b|))``.
"""

from __future__ import annotations

import builtins
import functools
import math

import numpy as np

from .. import _dtype
from . import elementwise as _ops
from .activations import _erf64
from .join import _tensor_arg
from .tensor import Tensor

__all__ = ["allclose", "isclose", "equal", "nan_to_num", "hypot", "logaddexp", "addcmul",
           "addcdiv", "lerp", "copysign", "heaviside", "erfinv", "lgamma", "digamma", "sinc",
           "logit", "xlogy"]

TENSOR_METHODS = ("allclose", "isclose", "equal", "nan_to_num", "nan_to_num_", "hypot",
                  "hypot_", "logaddexp", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp",
                  "lerp_", "copysign", "copysign_", "heaviside", "heaviside_", "erfinv",
                  "erfinv_", "lgamma", "lgamma_", "digamma", "digamma_", "sinc", "sinc_",
                  "logit", "logit_", "xlogy", "xlogy_")

_formula = _ops.formula


# -- dtype rules (checked at the call, from metadata: Note [op dtype rules]) --------------------
def _not_implemented(op: str, dtype: _dtype.dtype, valid: str) -> NotImplementedError:
    # PyTorch raises NotImplementedError (a RuntimeError) for a dtype a kernel lacks
    return NotImplementedError(f'"{op}" is not implemented for {dtype.name}; it takes {valid}')


@functools.cache
def _float_result(op: str, integers: bool = True, complex_ok: bool = False):
    """Result rule: floating stays; bool/integer give float32 (``integers``) or are refused;
    complex stays (``complex_ok``) or is refused."""
    valid = ("floating" + (", complex" if complex_ok else "") +
             (", integer and bool" if integers else "") + " tensors")

    def rule(promoted: _dtype.dtype) -> _dtype.dtype:
        if promoted.is_floating_point or (complex_ok and promoted.is_complex):
            return promoted
        if promoted.is_complex or not integers:
            raise _not_implemented(op, promoted, valid)
        return _dtype.get_default_dtype()
    return rule


def _float64(_promoted) -> _dtype.dtype:
    return _dtype.float64


def _to_bool(_promoted) -> _dtype.dtype:
    return _dtype.bool


def _first_two(operands) -> _dtype.dtype:
    return _dtype.result_type(*operands[:2])


def _first_three(operands) -> _dtype.dtype:
    return _dtype.result_type(*operands[:3])


def _first(operands) -> _dtype.dtype:
    return operands[0].dtype


# -- comparison ----------------------------------------------------------------------------------
def _check_tolerances(op: str, rtol, atol) -> None:
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, builtins.bool) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{op}(): argument '{name}' must be a float, not "
                            f"{type(value).__name__}")
        if not value >= 0:
            raise RuntimeError(f"{op}(): {name} must be greater than or equal to zero, but got "
                               f"{value}")


def _isclose_compute(promoted: _dtype.dtype) -> _dtype.dtype:
    # bool/integer tensors are compared in float64 (exact for |values| < 2**53)
    return promoted if promoted.is_floating_point or promoted.is_complex else _dtype.float64


def _isclose(xp, a, b, rtol, atol):
    error = xp.abs(a - b)
    return (a == b) | (xp.isfinite(error) & (error <= atol + xp.abs(rtol * b)))


def _isclose_nan(xp, a, b, rtol, atol):
    return _isclose(xp, a, b, rtol, atol) | (xp.isnan(a) & xp.isnan(b))


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Where ``|input - other| <= atol + rtol * |other|`` (a bool tensor, broadcast). Equal
    values (infinities included) are close; NaN is close to NaN only with ``equal_nan=True``.
    Bool and integer tensors are compared exactly in float64 (PyTorch: integer differences,
    float32 tolerances; they differ only at ties beyond float32's precision).

    Raises:
        TypeError: ``other`` not a Tensor, or a tolerance that is not a number.
        RuntimeError: different dtypes, or a negative ``rtol``/``atol``.
    """
    a = _tensor_arg(input, "isclose", "input")
    b = _tensor_arg(other, "isclose", "other")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"isclose(): {a.dtype.name} did not match {b.dtype.name}: both "
                           f"tensors must have the same dtype; convert one with .to()")
    _check_tolerances("isclose", rtol, atol)
    if equal_nan:
        return _formula("isclose.equal_nan", [a, b, rtol, atol], _isclose_nan, result=_to_bool,
                        compute=_isclose_compute, promote=_first_two, cache=True)
    return _formula("isclose", [a, b, rtol, atol], _isclose, result=_to_bool,
                    compute=_isclose_compute, promote=_first_two, cache=True)


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element of ``input`` is close to ``other`` (:func:`isclose`), as a Python
    bool. Reads the result back: waits for the device and is not capture-safe (raises inside a
    capture, as ``.item()`` does; use ``isclose(...).all()`` there). Errors as :func:`isclose`.
    """
    return builtins.bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def equal(input, other) -> bool:
    """True when both tensors have the same shape and the same elements (NaN is never equal),
    as a Python bool. Reads the result back: waits for the device and is not capture-safe
    (raises inside a capture, as ``.item()`` does; use ``eq(...).all()`` there).

    Tensors of different dtypes compare after promotion, as PyTorch 2.11's (so an int64 and an
    int32 tensor of the same values are equal).

    Raises:
        TypeError: an argument that is not a Tensor. RuntimeError: tensors on different
            devices.
    """
    a = _tensor_arg(input, "equal", "input")
    b = _tensor_arg(other, "equal", "other")
    if a.device != b.device:
        raise RuntimeError(f"equal(): cannot compare two tensors on different devices, got "
                           f"{a.device} and {b.device}; move one with .to()")
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return builtins.bool(_ops.binary("eq", a, b).all().item())


# -- nan_to_num ------------------------------------------------------------------------------------
def _replace(xp, x, nan, posinf, neginf):
    return xp.where(xp.isnan(x), nan, xp.where(x == xp.inf, posinf,
                                               xp.where(x == -xp.inf, neginf, x)))


def _nan_to_num(xp, x, nan, posinf, neginf):
    if x.dtype.kind == "c":
        nan, posinf, neginf = nan.real, posinf.real, neginf.real
        real = _replace(xp, x.real, nan, posinf, neginf)
        imag = _replace(xp, x.imag, nan, posinf, neginf)
        return real + 1j * imag
    return _replace(xp, x, nan, posinf, neginf)


def _replacement(op: str, name: str, value, default):
    if value is None:
        return default
    if isinstance(value, builtins.bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{op}(): argument '{name}' must be a float or None, not "
                        f"{type(value).__name__}")
    return value


def _nan_to_num_impl(op: str, input, nan, posinf, neginf, out) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    kind = tensor.dtype
    if not (kind.is_floating_point or kind.is_complex):
        _replacement(op, "nan", nan, 0.0)   # argument errors still apply
        _replacement(op, "posinf", posinf, 0.0)
        _replacement(op, "neginf", neginf, 0.0)
        if out is None:
            return tensor.clone()   # bool/integer tensors hold no NaN or inf
        return out if out is tensor else out.copy_(tensor)
    if out is not None and isinstance(out, Tensor) and out.dtype is not kind:
        raise RuntimeError(f"{op}: dtype of out: {out.dtype.name} should be same as input: "
                           f"{kind.name}")
    part = {_dtype.complex64: _dtype.float32, _dtype.complex128: _dtype.float64}.get(kind, kind)
    largest = _dtype.float_max(part)
    values = [_replacement(op, "nan", nan, 0.0), _replacement(op, "posinf", posinf, largest),
              _replacement(op, "neginf", neginf, -largest)]
    return _formula(op, [tensor, *values], _nan_to_num, promote=_first, out=out, cache=True)


def nan_to_num(input, nan: float | None = 0.0, posinf: float | None = None,
               neginf: float | None = None, *, out: Tensor | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf``; ``None`` infinities
    become the dtype's largest/lowest finite value (complex: real and imaginary parts apart).
    Bool/integer tensors come back as a copy. A replacement beyond the dtype's range becomes
    inf, as PyTorch's cast does.

    Raises:
        TypeError: ``input`` not a Tensor, or a replacement that is not a number.
    """
    return _nan_to_num_impl("nan_to_num", input, nan, posinf, neginf, out)


def nan_to_num_(input, nan: float | None = 0.0, posinf: float | None = None,
                neginf: float | None = None) -> Tensor:
    """In-place :func:`nan_to_num`."""
    return _nan_to_num_impl("nan_to_num_", input, nan, posinf, neginf, input)


# -- binary ----------------------------------------------------------------------------------------
def _hypot(xp, a, b):
    return xp.hypot(a, b)


def hypot(input, other, *, out: Tensor | None = None) -> Tensor:
    """``sqrt(input**2 + other**2)`` without overflow, broadcast and promoted.

    Raises:
        TypeError: an argument that is not a Tensor. NotImplementedError (a RuntimeError): bool,
            integer or complex tensors, as in PyTorch.
    """
    a = _tensor_arg(input, "hypot", "input")
    b = _tensor_arg(other, "hypot", "other")
    return _formula("hypot", [a, b], _hypot, result=_float_result("hypot", False), out=out,
                    cache=True)


def hypot_(input, other) -> Tensor:
    """In-place :func:`hypot`."""
    a = _tensor_arg(input, "hypot_", "input")
    return _formula("hypot_", [a, _tensor_arg(other, "hypot_", "other")], _hypot,
                    result=_float_result("hypot_", False), out=a, cache=True)


def _logaddexp(xp, a, b):
    if a.dtype.kind == "c":   # the operand with the larger real part leads, as PyTorch's
        first = a.real >= b.real
        larger, smaller = xp.where(first, a, b), xp.where(first, b, a)
        summed = larger + xp.log1p(xp.exp(smaller - larger))
        return xp.where(xp.isinf(larger.real), larger, summed)
    larger = xp.maximum(a, b)
    summed = larger + xp.log1p(xp.exp(-xp.abs(a - b)))
    return xp.where(xp.isinf(a) & (a == b), a, summed)   # inf - inf would give NaN


def logaddexp(input, other, *, out: Tensor | None = None) -> Tensor:
    """``log(exp(input) + exp(other))`` computed stably (``logaddexp(inf, inf) == inf``).
    Complex too: the operand with the larger real part leads, and an infinite real part
    there gives that operand.

    Raises:
        TypeError: an argument that is not a Tensor. NotImplementedError (a RuntimeError): bool
            or integer tensors.
    """
    a = _tensor_arg(input, "logaddexp", "input")
    b = _tensor_arg(other, "logaddexp", "other")
    return _formula("logaddexp", [a, b], _logaddexp,
                    result=_float_result("logaddexp", False, complex_ok=True), out=out,
                    cache=True)


def _copysign(xp, a, b):
    return xp.copysign(a, b)


def _copysign_impl(op: str, input, other, out) -> Tensor:
    a = _tensor_arg(input, op, "input")
    return _formula(op, [a, other], _copysign, result=_float_result(op), out=out, cache=True)


def copysign(input, other, *, out: Tensor | None = None) -> Tensor:
    """``|input|`` with the sign of ``other`` (a Tensor or a number; the sign bit, so -0.0
    counts as negative). Bool/integer inputs give float32.

    Raises:
        NotImplementedError: (a RuntimeError) complex operands. RuntimeError: an in-place or
            ``out=`` into an integer tensor (the result is floating).
    """
    return _copysign_impl("copysign", input, other, out)


def copysign_(input, other) -> Tensor:
    """In-place :func:`copysign`."""
    return _copysign_impl("copysign_", input, other, input)


def _heaviside(xp, x, values):
    return xp.where(x == 0, values, x > 0)


def _heaviside_impl(op: str, input, values, out) -> Tensor:
    x = _tensor_arg(input, op, "input")
    v = _tensor_arg(values, op, "values")
    if x.dtype.is_complex or v.dtype.is_complex:
        raise RuntimeError(f"{op}(): heaviside is not yet implemented for complex tensors (got "
                           f"{x.dtype.name} and {v.dtype.name})")
    if x.dtype is not v.dtype or (out is not None and isinstance(out, Tensor) and
                                  out.dtype is not x.dtype):
        got = f"{x.dtype.name} and {v.dtype.name}" + (
            "" if out is None else f", out {out.dtype.name}")
        raise RuntimeError(f"{op}(): heaviside is not yet implemented for tensors with "
                           f"different dtypes (got {got}); convert with .to()")
    return _formula(op, [x, v], _heaviside, out=out, cache=True)


def heaviside(input, values, *, out: Tensor | None = None) -> Tensor:
    """The step function: 0 where ``input < 0``, ``values`` where ``input == 0``, 1 where
    ``input > 0``; NaN input gives 0 (as PyTorch, unlike NumPy). Any real dtype.

    Raises:
        TypeError: an argument that is not a Tensor. RuntimeError: complex tensors, or
            ``input`` and ``values`` of different dtypes.
    """
    return _heaviside_impl("heaviside", input, values, out)


def heaviside_(input, values) -> Tensor:
    """In-place :func:`heaviside`."""
    return _heaviside_impl("heaviside_", input, values, input)


def _xlogy(xp, x, y):
    return xp.where(xp.isnan(y), y, xp.where(x == 0, 0, x * xp.log(y)))


def _xlogy_impl(op: str, input, other, out) -> Tensor:
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError(f"{op}(): expected at least one Tensor argument, got "
                        f"{type(input).__name__} and {type(other).__name__}")
    for value in (input, other):
        if isinstance(value, Tensor):
            value._check_guard()
    return _formula(op, [input, other], _xlogy, result=_float_result(op), out=out, cache=True)


def xlogy(input, other, *, out: Tensor | None = None) -> Tensor:
    """``input * log(other)``, 0 where ``input == 0`` (even for ``other`` 0 or inf) and NaN
    where ``other`` is NaN. Either argument may be a number. Bool/integer inputs give float32.

    Raises:
        TypeError: neither argument a Tensor. NotImplementedError (a RuntimeError): complex.
    """
    return _xlogy_impl("xlogy", input, other, out)


def xlogy_(input, other) -> Tensor:
    """In-place :func:`xlogy` (RuntimeError on an integer tensor: the result is floating)."""
    return _xlogy_impl("xlogy_", _tensor_arg(input, "xlogy_", "input"), other, input)


# -- ternary ---------------------------------------------------------------------------------------
def _addcmul(xp, x, t1, t2, value):
    return x + value * t1 * t2


def _addcdiv(xp, x, t1, t2, value):
    return x + value * t1 / t2


def _check_value(op: str, value) -> None:
    if not isinstance(value, (int, float, complex, np.number)):
        raise TypeError(f"{op}(): argument 'value' must be a number, not "
                        f"{type(value).__name__}")


def _addc(op: str, input, tensor1, tensor2, value, out, fn) -> Tensor:
    x = _tensor_arg(input, op, "input")
    t1 = _tensor_arg(tensor1, op, "tensor1")
    t2 = _tensor_arg(tensor2, op, "tensor2")
    _check_value(op, value)
    if fn is _addcdiv and not (t1.dtype.is_floating_point or t1.dtype.is_complex) and \
            not (t2.dtype.is_floating_point or t2.dtype.is_complex):
        raise RuntimeError(
            f"{op}(): integer division with addcdiv is no longer supported (got tensor1 "
            f"{t1.dtype.name} and tensor2 {t2.dtype.name}); for true division convert one to "
            f"floating point (tensor1.float()), for floor division use "
            f"input + value * tensor1.div(tensor2, rounding_mode='floor')")
    promoted = _first_three((x, t1, t2))
    if promoted is _dtype.bool:
        raise _not_implemented(op, promoted, "integer, floating and complex tensors")
    return _formula(op, [x, t1, t2, value], fn, promote=_first_three, out=out, cache=True)


def addcmul(input, tensor1, tensor2, *, value=1, out: Tensor | None = None) -> Tensor:
    """``input + value * tensor1 * tensor2``, broadcast; the three tensors promote, ``value``
    takes their dtype (a float ``value`` on integer tensors is truncated, as in PyTorch).

    Raises:
        TypeError: a non-Tensor tensor argument or a non-number ``value``.
        NotImplementedError: (a RuntimeError) bool tensors only.
    """
    return _addc("addcmul", input, tensor1, tensor2, value, out, _addcmul)


def addcmul_(input, tensor1, tensor2, *, value=1) -> Tensor:
    """In-place :func:`addcmul`."""
    return _addc("addcmul_", input, tensor1, tensor2, value, input, _addcmul)


def addcdiv(input, tensor1, tensor2, *, value=1, out: Tensor | None = None) -> Tensor:
    """``input + value * tensor1 / tensor2``, broadcast and promoted.

    Raises:
        TypeError: a non-Tensor tensor argument or a non-number ``value``. RuntimeError:
            ``tensor1`` and ``tensor2`` both bool/integer (PyTorch refuses integer division).
    """
    return _addc("addcdiv", input, tensor1, tensor2, value, out, _addcdiv)


def addcdiv_(input, tensor1, tensor2, *, value=1) -> Tensor:
    """In-place :func:`addcdiv`."""
    return _addc("addcdiv_", input, tensor1, tensor2, value, input, _addcdiv)


def _lerp(xp, start, end, weight):
    diff = end - start
    return xp.where(xp.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


def _lerp_impl(op: str, input, end, weight, out) -> Tensor:
    start = _tensor_arg(input, op, "input")
    stop = _tensor_arg(end, op, "end")
    if not isinstance(weight, Tensor):
        if isinstance(weight, builtins.bool) or not isinstance(weight, (int, float, complex,
                                                                        np.number)):
            raise TypeError(f"{op}(): argument 'weight' must be a Tensor or a number, not "
                            f"{type(weight).__name__}")
    else:
        weight._check_guard()
    for name, value in (("end", stop), ("weight", weight)):
        if isinstance(value, Tensor) and value.dtype is not start.dtype:
            raise RuntimeError(f"{op}(): expected dtype {start.dtype.name} for `{name}` but got "
                               f"dtype {value.dtype.name}")
    if not (start.dtype.is_floating_point or start.dtype.is_complex):
        raise _not_implemented(op, start.dtype, "floating and complex tensors")
    return _formula(op, [start, stop, weight], _lerp, promote=_first, out=out, cache=True)


def lerp(input, end, weight, *, out: Tensor | None = None) -> Tensor:
    """``input + weight * (end - input)``, in the form exact at ``weight`` 0 and 1 (PyTorch's:
    ``end - (end - input) * (1 - weight)`` where ``|weight| >= 0.5``). ``weight``: a number or
    a tensor; all broadcast.

    Raises:
        TypeError: a non-Tensor ``input``/``end``, a ``weight`` neither Tensor nor number.
        RuntimeError: ``end`` or a tensor ``weight`` of another dtype than ``input``.
        NotImplementedError: (a RuntimeError) bool/integer tensors.
    """
    return _lerp_impl("lerp", input, end, weight, out)


def lerp_(input, end, weight) -> Tensor:
    """In-place :func:`lerp`."""
    return _lerp_impl("lerp_", input, end, weight, input)


# -- unary -----------------------------------------------------------------------------------------
def _sinc(xp, x):
    product = x * math.pi
    return xp.where(x == 0, 1, xp.sin(product) / product)


def _logit(xp, x):
    return xp.log(x / (1 - x))


def _logit_eps(xp, x, eps):
    high = 1 - eps
    return _logit(xp, xp.where(x < eps, eps, xp.where(x > high, high, x)))


def _logit_impl(op: str, input, eps, out) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    rule = _float_result(op)
    if eps is None:
        return _formula(op, [tensor], _logit, result=rule, out=out, cache=True)
    if isinstance(eps, builtins.bool) or not isinstance(eps, (int, float, np.number)):
        raise TypeError(f"{op}(): argument 'eps' must be a float or None, not "
                        f"{type(eps).__name__}")
    if eps < 0:   # PyTorch: a negative eps means no clamping
        return _formula(op, [tensor], _logit, result=rule, out=out, cache=True)
    return _formula(op + ".eps", [tensor, eps], _logit_eps, result=rule, promote=_first,
                    out=out, cache=True)


def logit(input, eps: float | None = None, *, out: Tensor | None = None) -> Tensor:
    """``log(x / (1 - x))``; with ``eps`` (>= 0) ``x`` is first clamped to ``[eps, 1 - eps]``
    (NaN stays NaN). Outside ``[0, 1]`` gives NaN, 0 and 1 give -inf and inf. Bool/integer
    input gives float32.

    Raises:
        TypeError: ``eps`` not a number. NotImplementedError (a RuntimeError): complex input.
    """
    return _logit_impl("logit", input, eps, out)


def logit_(input, eps: float | None = None) -> Tensor:
    """In-place :func:`logit`."""
    return _logit_impl("logit_", input, eps, input)


# float64 special functions (accuracy in the module docstring)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


def _erfc64(xp, x):
    """erfc for ``x >= 0`` (float64), relatively accurate in the tail: ``1 - erf`` below 3,
    the continued fraction beyond."""
    big = xp.maximum(x, 3.0)
    fraction = big
    for k in range(60, 0, -1):
        fraction = big + (k / 2) / fraction
    tail = xp.exp(-big * big) / (math.sqrt(math.pi) * fraction)
    return xp.where(x <= 3.0, 1 - _erf64(xp, xp.minimum(x, 3.0)), tail)


def _erfinv64(xp, y):
    ay = xp.abs(y)
    z = y * y
    a0, a1, a2, a3 = _ERFINV_A
    b0, b1, b2, b3 = _ERFINV_B
    central = y * (((a3 * z + a2) * z + a1) * z + a0) / \
        ((((b3 * z + b2) * z + b1) * z + b0) * z + 1)
    c0, c1, c2, c3 = _ERFINV_C
    d0, d1 = _ERFINV_D
    w = xp.sqrt(-xp.log((1 - xp.minimum(ay, 0.75)) / 2))   # tail guess; clamped: finite
    w = xp.where(ay > 0.75, xp.sqrt(-xp.log((1 - xp.minimum(ay, 1.0)) / 2)), w)
    tail = (((c3 * w + c2) * w + c1) * w + c0) / ((d1 * w + d0) * w + 1)
    x = xp.where(ay <= 0.7, xp.abs(central), tail)
    x = xp.minimum(x, 6.0)   # erfinv(1 - 2**-53) is 5.86; keeps exp(-x*x) normal
    upper = ay > 0.5
    gap = 1 - ay   # exact for ay >= 0.5
    for _ in range(3):
        residual = xp.where(upper, gap - _erfc64(xp, x), _erf64(xp, x) - ay)
        x = x - residual / (_TWO_OVER_SQRT_PI * xp.exp(-x * x))
    x = xp.where(ay == 1, xp.inf, x)
    x = xp.where((ay > 1) | xp.isnan(y), xp.nan, x)
    return xp.copysign(x, y)


_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def lgamma_lanczos(xp, x):
    """lgamma for ``x >= 0.5`` (finite): an xp formula (Lanczos), shared with ``random.poisson``."""
    z = x - 1
    total = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], 1):
        total = total + c / (z + i)
    t = z + 7.5
    return _HALF_LOG_2PI + (z + 0.5) * xp.log(t) - t + xp.log(total)


def _abs_sinpi(xp, x):
    """``|sin(pi x)|`` with the argument reduced exactly (accurate near the integers)."""
    r = xp.abs(x - 2 * xp.rint(x / 2))   # in [0, 1], exact
    return xp.sin(math.pi * xp.minimum(r, 1 - r))


def _lgamma64(xp, x):
    finite = xp.where(xp.isfinite(x), x, 1.0)
    positive = lgamma_lanczos(xp, xp.maximum(finite, 0.5))
    small = xp.minimum(xp.maximum(finite, 0.0), 0.5)   # (0, 0.5): lgamma(x + 1) - log(x)
    shifted = lgamma_lanczos(xp, small + 1) - xp.log(small)
    negative = xp.minimum(finite, 0.0)   # reflection: log(pi / |sin(pi x)|) - lgamma(1 - x)
    reflected = math.log(math.pi) - xp.log(_abs_sinpi(xp, negative)) - \
        lgamma_lanczos(xp, 1 - negative)
    result = xp.where(finite >= 0.5, positive, xp.where(finite > 0, shifted, reflected))
    poles = (x <= 0) & (x == xp.floor(x))
    result = xp.where(poles | xp.isinf(x), xp.inf, result)
    return xp.where(xp.isnan(x), x, result)


def _digamma_positive(xp, x):
    """digamma for ``x > 0`` (inf allowed): recurrence to ``x >= 10``, asymptotic series."""
    total = 0.0
    for _ in range(10):
        small = x < 10
        total = total + xp.where(small, 1 / x, 0.0)
        x = xp.where(small, x + 1, x)
    inv2 = 1 / (x * x)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 * (1 / 132 - inv2 * (691 / 32760 - inv2 / 12))))))
    return xp.log(x) - 0.5 / x - series - total


def _digamma64(xp, x):
    safe = xp.where(xp.isnan(x) | (x == 0), 1.0, x)
    mirrored = xp.where(safe > 0, safe, 1 - safe)   # psi(1 - x) for the reflection
    base = _digamma_positive(xp, mirrored)
    r = safe - xp.rint(safe)   # in [-0.5, 0.5], exact: tan(pi x) == tan(pi r)
    reflected = base - math.pi / xp.tan(math.pi * r)
    result = xp.where(safe > 0, base, reflected)
    result = xp.where(x == 0, xp.copysign(xp.inf, -x), result)
    result = xp.where((x < 0) & (x == xp.floor(x)), xp.nan, result)
    return xp.where(xp.isnan(x), x, result)


def _erfinv(xp, x):
    return _erfinv64(xp, x)


def _lgamma(xp, x):
    return _lgamma64(xp, x)


def _digamma(xp, x):
    return _digamma64(xp, x)


_SPECIAL = {"erfinv": _erfinv, "lgamma": _lgamma, "digamma": _digamma}


def _unary(op: str, input, out, fn, inplace: bool) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    name = op + "_" if inplace else op
    special = op in _SPECIAL
    return _formula(name, [tensor], fn, result=_float_result(name, True, op == "sinc"),
                    compute=_float64 if special else None, out=tensor if inplace else out,
                    cache=True)


def erfinv(input, *, out: Tensor | None = None) -> Tensor:
    """The inverse error function on ``[-1, 1]`` (+-inf at +-1, NaN outside); accuracy in the
    module docstring. Bool/integer input gives float32.

    Raises:
        NotImplementedError: (a RuntimeError) complex input.
    """
    return _unary("erfinv", input, out, _erfinv, False)


def erfinv_(input) -> Tensor:
    """In-place :func:`erfinv` (RuntimeError on an integer tensor)."""
    return _unary("erfinv", input, None, _erfinv, True)


def lgamma(input, *, out: Tensor | None = None) -> Tensor:
    """``log |Gamma(x)|`` (+inf at 0, the negative integers and +-inf); accuracy in the module
    docstring. Bool/integer input gives float32.

    Raises:
        NotImplementedError: (a RuntimeError) complex input.
    """
    return _unary("lgamma", input, out, _lgamma, False)


def lgamma_(input) -> Tensor:
    """In-place :func:`lgamma` (RuntimeError on an integer tensor)."""
    return _unary("lgamma", input, None, _lgamma, True)


def digamma(input, *, out: Tensor | None = None) -> Tensor:
    """``Gamma'(x) / Gamma(x)``: -inf at +0 (+inf at -0), NaN at the negative integers;
    accuracy in the module docstring. Bool/integer input gives float32.

    Raises:
        NotImplementedError: (a RuntimeError) complex input.
    """
    return _unary("digamma", input, out, _digamma, False)


def digamma_(input) -> Tensor:
    """In-place :func:`digamma` (RuntimeError on an integer tensor)."""
    return _unary("digamma", input, None, _digamma, True)


def sinc(input, *, out: Tensor | None = None) -> Tensor:
    """The normalized sinc ``sin(pi x) / (pi x)``, 1 at 0; complex input allowed. Bool/integer
    input gives float32."""
    return _unary("sinc", input, out, _sinc, False)


def sinc_(input) -> Tensor:
    """In-place :func:`sinc` (RuntimeError on an integer tensor)."""
    return _unary("sinc", input, None, _sinc, True)
