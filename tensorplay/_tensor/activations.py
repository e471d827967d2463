"""Activations and the error function: ``relu gelu sigmoid silu softmax log_softmax erf erfc``.

Each is ONE kernel. Where the device's backend offers the optional hooks ``activation(name, x,
out)`` and ``softmax(x, out, dim, log)`` (cuda: one raw kernel per activation and one per
softmax), the kernel calls them; elsewhere (host, sim) it evaluates the formulas below with
``xp`` inside one launch. Both give the same values within float tolerance; float16 and bfloat16
compute in float32 and round once.

``erf`` (and so ``gelu(approximate="none")``) is composed here because NumPy has none: for
float16/bfloat16/float32 a Taylor series below ``|x| = 0.8`` and the Numerical-Recipes
Chebyshev fit of erfc above it, max abs error 1.3e-7 (about two float32 ulps near 1); for float64
a positive-term series up to ``|x| = 3`` and a 40-term continued fraction for erfc beyond it,
max abs error 1.4e-15 (tested against ``math.erf``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import autograd as _autograd
from . import elementwise as _ops
from .autograd import grad_mode as _grad_mode
from .join import _apply, _floating, _inexact, _only_floating, _tensor_arg
from .tensor import Tensor, _normalize_dim, layout_of

__all__ = ["relu", "gelu", "sigmoid", "silu", "softmax", "log_softmax", "erf", "erfc"]

TENSOR_METHODS = ("relu", "relu_", "gelu", "sigmoid", "sigmoid_", "silu", "softmax",
                  "log_softmax", "erf", "erf_", "erfc")


def _hook(tensor: Tensor, name: str):
    """The optional hook ``name`` of ``tensor``'s backend (cuda: CuPy kernels), or None."""
    return _dispatch._hook_for(_dispatch.xp_of(tensor.device), name)


def relu(input) -> Tensor:
    """``max(x, 0)``, keeping the dtype (NaN stays NaN). RuntimeError for bool and complex."""
    tensor = _tensor_arg(input, "relu", "input")
    return _apply("relu", [tensor], _relu, native="relu", cache=True)


def relu_(input) -> Tensor:
    """In-place :func:`relu`; returns ``input``."""
    tensor = _tensor_arg(input, "relu_", "input")
    return _apply("relu_", [tensor], _relu, out=tensor, native="relu", cache=True)


def _relu(xp, x):
    return xp.maximum(x, x.dtype.type(0))


def _sigmoid(xp, x):
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


def sigmoid(input) -> Tensor:
    """``1 / (1 + exp(-x))``, accurate in both tails; bool/integer input gives float32."""
    tensor = _tensor_arg(input, "sigmoid", "input")
    return _apply("sigmoid", [tensor], _sigmoid, result=_floating("sigmoid"), native="sigmoid",
                  cache=True)


def sigmoid_(input) -> Tensor:
    """In-place :func:`sigmoid` (floating-point tensors); returns ``input``."""
    tensor = _tensor_arg(input, "sigmoid_", "input")
    return _apply("sigmoid_", [tensor], _sigmoid, result=_floating("sigmoid_"), out=tensor,
                  native="sigmoid", cache=True)


def _silu(xp, x):
    if x.dtype.kind == "c":
        return x / (1 + xp.exp(-x))
    return x * _sigmoid(xp, x)


def silu(input) -> Tensor:
    """``x * sigmoid(x)`` (complex too, as ``x / (1 + exp(-x))``).

    Raises:
        TypeError: bool or integer input.
    """
    tensor = _tensor_arg(input, "silu", "input")
    return _apply("silu", [tensor], _silu, result=_inexact("silu"), native="silu",
                  cache=True)


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
    tensor = _tensor_arg(input, "erf", "input")
    return _apply("erf", [tensor], _erf, result=_floating("erf"), native="erf", cache=True)


def erf_(input) -> Tensor:
    """In-place :func:`erf` (floating-point tensors); returns ``input``."""
    tensor = _tensor_arg(input, "erf_", "input")
    return _apply("erf_", [tensor], _erf, result=_floating("erf_"), out=tensor, native="erf",
                  cache=True)


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
    if input.__class__ is Tensor:
        if input._ag is not None and _grad_mode.enabled:
            return _autograd.dispatch("gelu", gelu, (input, approximate), {})
        if input._guard is None and approximate.__class__ is str:
            key = (input._layout or layout_of(input), approximate)
            plan = _gelu_plans.get(key)
            if plan is not None:
                return _ops._execute_one(plan, input)
        else:
            key = None
    else:
        key = None
    if approximate == "none":
        name, rule = "gelu", _gelu_exact
    elif approximate == "tanh":
        name, rule = "gelu_tanh", _gelu_tanh
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    tensor = _tensor_arg(input, "gelu", "input") if key is None else input
    plan = _ops._plan(name, None, [tensor], None, _GELU_RESULT, None, None, rule, name)
    if key is not None:
        _dispatch.remember(_gelu_plans, key, plan)
    return _ops._execute_one(plan, tensor)


gelu._tp_differentiable = "gelu"   # type: ignore[attr-defined]   # checks autograd inline
_GELU_RESULT = _only_floating("gelu")
#: (the input's Layout, approximate) -> gelu's elementwise plan: a repeated call (every layer of
#: a model) goes straight to the launch, its checks done at the first
_gelu_plans: dict = {}


# -- derivatives: one kernel each (the composed formulas would launch a dozen) -------------------
def _gelu_backward(xp, x, grad):
    cdf = 0.5 * (1 + _erf(xp, x * (1 / math.sqrt(2))))
    return grad * (cdf + x * xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi)))


def _gelu_tanh_backward(xp, x, grad):
    t = xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI
                   * (1 + 3 * 0.044715 * x * x))


def _silu_backward(xp, x, grad):
    s = _sigmoid(xp, x)
    return grad * s * (1 + x * (1 - s))


def _sigmoid_backward(xp, y, grad):
    return grad * y * (1 - y)


def _tanh_backward(xp, y, grad):
    return grad * (1 - y * y)


def _relu_backward(xp, y, grad):
    return xp.where(y > 0, grad, 0)


_BACKWARD = {"gelu": _gelu_backward, "gelu_tanh": _gelu_tanh_backward,
             "silu": _silu_backward, "sigmoid": _sigmoid_backward, "tanh": _tanh_backward,
             "relu": _relu_backward}


def activation_backward(name: str, saved: Tensor, grad: Tensor) -> Tensor:
    """The gradient of activation ``name`` (``gelu gelu_tanh silu``: ``saved`` is the input;
    ``sigmoid tanh relu``: ``saved`` is the result) given the output's ``grad``, in one kernel
    (the backend's ``<name>_backward`` where it has one)."""
    op = f"{name}_backward"
    return _apply(op, [saved, grad], _BACKWARD[name], native=op, cache=True)


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


@functools.cache
def _softmax_kernel(axis: int, zero_d: bool, rule, hook, log: bool):
    """The formula and the backend's one kernel (or None) of a softmax along ``axis``, made once
    each, so the op's plan is kept per signature. The kernel is the hook with ``dim`` and
    ``log`` bound (a partial: no Python frame of its own on the launch)."""
    native = None if hook is None else functools.partial(hook, dim=axis, log=log)
    return _along(axis, zero_d, rule), native


#: (op, the input's Layout, dim) -> the elementwise plan of a softmax without ``dtype``: a
#: repeated call (a decode step's) goes straight to the launch, its checks done at the first
_softmax_plans: dict = {}


def _softmax(op: str, input, dim, dtype, rule) -> Tensor:
    """The first call of a signature (checked, its plan kept when it may be), and every call
    with ``dtype`` or a dim that is not an int."""
    # the key of a call that may keep its plan (no dtype, an int dim), None otherwise
    key = (op, input._layout or layout_of(input), dim) \
        if dtype is None and type(input) is Tensor and type(dim) is int else None
    tensor, axis = _softmax_input(op, input, dim, dtype)
    if tensor.numel() == 0:
        return tensor.clone()
    hook = _hook(tensor, "softmax") if tensor.ndim else None
    fn, native = _softmax_kernel(axis, tensor.ndim == 0, rule, hook, op == "log_softmax")
    if key is None:
        return _apply(op, [tensor], fn, native=native, cache=True)
    plan = _ops._plan(op, None, [tensor], None, None, None, None, fn, native)
    _ops.adopt_launcher(plan, native, "softmax_launcher", tensor._data, axis,
                        op == "log_softmax")
    _dispatch.remember(_softmax_plans, key, plan)
    return _ops._execute_one(plan, tensor)


def _softmax_op(op: str, rule, doc: str):
    """The public ``op`` (softmax or log_softmax): it checks autograd state itself, and a warm
    call without ``dtype`` goes from its kept plan straight to the launch (one frame: the eager
    hot path of every attention layer written with products and softmax)."""

    def function(input, dim: int, dtype=None) -> Tensor:
        if input.__class__ is Tensor:
            if input._ag is not None and _grad_mode.enabled:
                return _autograd.dispatch(op, function, (input, dim, dtype), {})
            if dtype is None and dim.__class__ is int:   # _execute_one checks the guard
                plan = _softmax_plans.get((op, input._layout or layout_of(input), dim))
                if plan is not None:
                    return _ops._execute_one(plan, input)
        return _softmax(op, input, dim, dtype, rule)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = doc
    function._tp_differentiable = op   # type: ignore[attr-defined]   # checks autograd inline
    return function


softmax = _softmax_op("softmax", _softmax_rule, """``exp(x) / sum(exp(x))`` along ``dim``, computed
    stably (the maximum subtracted).""")
log_softmax = _softmax_op("log_softmax", _log_softmax_rule, """``x - logsumexp(x)`` along
    ``dim``, computed stably.""")
