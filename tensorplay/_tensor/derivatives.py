"""Every op's derivative, in one table, and the wrapper that makes an op differentiable.

One entry per op, formulas by argument name, in the manner of PyTorch's
``tools/autograd/derivatives.yaml``: ``grad`` is the gradient of the op's output (a list of
them for ops with several outputs), ``c`` reads the op's arguments (``c.self`` is the first,
``c.result`` the output where the entry saves it). A formula may return a gradient of the
broadcast shape, or in a wider dtype: the engine sums it down to the argument's shape and casts
it to the argument's dtype, so no formula repeats that. Formulas run the same public ops a
forward does (with grad mode off), so backward is captured into graphs like any other work.

An op absent from the table still records a node when an argument requires grad; ``backward``
through it raises "the derivative for OP is not implemented". Ops whose results never carry a
gradient (``zeros_like``, comparisons ...) are declared ``nondiff``.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

from .. import _dtype
from .._runtime import capture as _capture, dispatch as _dispatch
from . import autograd as _ag
from . import activations as _activations, creation as _creation, elementwise as _ops
from . import reductions as _reductions
from . import views as _views, join as _join, linalg as _linalg, shapes as _shapes
from . import decompositions as _decompositions
from .autograd import RULES, Rule, dispatch
from .tensor import Tensor


# -- helpers the formulas share ------------------------------------------------------------------
def sum_to(grad: Tensor, shape) -> Tensor:
    """``grad`` summed down to ``shape`` (the inverse of broadcasting ``shape`` to
    ``grad.shape``)."""
    shape = tuple(shape)
    have = grad._data.shape   # (a formula's result: its guard is passed)
    if have == shape:
        return grad
    lead = len(have) - len(shape)
    if lead < 0:
        return grad.reshape(shape)
    # dims as tuples: a sum over a tuple keeps its plan per signature (a list is not hashable)
    kept = tuple([lead + i for i, size in enumerate(shape) if size == 1 and have[lead + i] != 1])
    if not kept:   # leading dimensions only (a bias): one sum, no reshape
        return _reductions.sum(grad, tuple(range(lead)))
    grad = _reductions.sum(grad, tuple(range(lead)) + kept, keepdim=True)
    return grad.reshape(shape) if tuple(grad.shape) != shape else grad


_ag.ops.zeros = _creation.zeros
_ag.ops.sum_to = sum_to


def _dims(dim, ndim: int) -> list[int]:
    if dim is None or dim == () or dim == []:
        return list(range(ndim))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return sorted(int(d) % max(ndim, 1) for d in dims)


def _unreduce(grad: Tensor, c, dim_name: str = "dim") -> Tensor:
    """A reduction's output gradient broadcast back over the input's shape."""
    source = c.self
    dim = c.get(dim_name)
    if not c.get("keepdim", False) and source.ndim:
        for d in _dims(dim, source.ndim):
            grad = grad.unsqueeze(d)
    return grad.expand(source.shape)


def _count(c, dim_name: str = "dim") -> int:
    source = c.self
    count = 1
    for d in _dims(c.get(dim_name), source.ndim):
        count *= source.shape[d] if source.ndim else 1
    return count


def _is_tensor(value) -> bool:
    return type(value) is Tensor


def rule(names, grads: dict, saves=(), **flags) -> None:
    for name in (names.split() if isinstance(names, str) else names):
        RULES[name] = Rule(grads, saves, **flags)


def nondiff(*names: str) -> None:
    for name in names:
        RULES[name] = Rule({}, nondiff=True)


# -- elementwise --------------------------------------------------------------------------------
def _scaled(g, alpha):
    return g if alpha == 1 else g * alpha


#: (rows, dtype, device, native stream) -> a (1, rows) tensor of ones, made eagerly once on
#: that stream (so the products that read it there are ordered after its fill) and never written
_ONE_ROWS: dict = {}


def _accumulate_bias(g: Tensor, target: Tensor, overwrite: bool, alpha=1) -> bool:
    """``target += g`` summed over its leading rows (``overwrite``: ``=``), for a bias: one
    product ``ones(1, rows) @ g`` that adds into ``target`` (the reduction and the add in one
    launch), where the backend has such a product and ``g`` is a C-contiguous ``(rows, n)`` of
    ``target``'s dtype, ``target`` of shape ``(n,)``. The row of ones is kept per signature,
    made outside any capture (a graph must not own memory the cache keeps) and per stream;
    a capture reads a row made before it began (its stream has none of its own): that row's
    fill was issued first, and ``with graph:`` waits for the device before capturing (a raw
    ``capture_begin`` leaves ordering earlier work to its caller, as PyTorch's does), so
    the captured step computes exactly what the eager step computes. Returns False, touching
    nothing, otherwise."""
    shape, have = target._data.shape, g._data.shape
    if alpha != 1 or len(shape) != 1 or len(have) != 2 or have[1] != shape[0] or \
            have[0] < 2 or g._dtype is not target._dtype or not g._data.flags.c_contiguous or \
            g._device.type == "cpu":
        return False
    key = (have[0], g._dtype, g._device, _dispatch.current_native_stream(g._device))
    ones = _ONE_ROWS.get(key)
    if ones is None:
        if _dispatch.accelerator_hook("matmul_residual") is None:
            return False
        if _capture.active_captures():
            ones = next((row for kept, row in _ONE_ROWS.items() if kept[:3] == key[:3]), None)
            if ones is None:
                return False
        else:
            ones = _creation.ones((1, have[0]), dtype=g._dtype, device=g._device)
            _dispatch.remember(_ONE_ROWS, key, ones, 64)
    row = Tensor._make(target._data.reshape(1, shape[0]), target._device, target._dtype)
    return _linalg.accumulate_product_(row, ones, g, overwrite)


rule("add", {"self": lambda c, g: g, "other": lambda c, g: _scaled(g, c.get("alpha", 1))},
     accumulate={"self": lambda c, g, t, o: _accumulate_bias(g, t, o),
                 "other": lambda c, g, t, o: _accumulate_bias(g, t, o, c.get("alpha", 1))})
rule("sub", {"self": lambda c, g: g, "other": lambda c, g: -_scaled(g, c.get("alpha", 1))})
rule("rsub", {"self": lambda c, g: -(g * c.get("alpha", 1)), "other": lambda c, g: g})
rule("mul", {"self": lambda c, g: g * c.other, "other": lambda c, g: g * c.self},
     saves=("self", "other"))
rule("div true_divide divide", {
    "self": lambda c, g: g * 0 if c.get("rounding_mode") else g / c.other,
    "other": lambda c, g: g * 0 if c.get("rounding_mode") else -g * c.self / (c.other * c.other)},
    saves=("self", "other"))


def _pow_self(c, g):
    exponent = c.other
    if not _is_tensor(exponent) and exponent == 0:
        return g * 0
    return g * exponent * c.self ** (exponent - 1)


def _pow_other(c, g):
    base = c.self
    safe = _join.where(base > 0, base, 1) if _is_tensor(base) else base
    log = safe.log() if _is_tensor(safe) else math.log(safe) if safe > 0 else 0.0
    return g * c.result * log


rule("pow", {"self": _pow_self, "other": _pow_other}, saves=("self", "other", "result"))


def _max_mask(c, first: bool):
    a, b = c.self, c.other
    win = (a > b) if first else (b > a)
    return win.to(a.dtype if _is_tensor(a) else b.dtype) + (a == b).to(
        a.dtype if _is_tensor(a) else b.dtype) * 0.5


def _min_mask(c, first: bool):
    a, b = c.self, c.other
    win = (a < b) if first else (b < a)
    dtype = a.dtype if _is_tensor(a) else b.dtype
    return win.to(dtype) + (a == b).to(dtype) * 0.5


rule("maximum fmax", {"self": lambda c, g: g * _max_mask(c, True),
                      "other": lambda c, g: g * _max_mask(c, False)}, saves=("self", "other"))
rule("minimum fmin", {"self": lambda c, g: g * _min_mask(c, True),
                      "other": lambda c, g: g * _min_mask(c, False)}, saves=("self", "other"))
rule("atan2", {"self": lambda c, g: g * c.other / (c.self * c.self + c.other * c.other),
               "other": lambda c, g: -g * c.self / (c.self * c.self + c.other * c.other)},
     saves=("self", "other"))
rule("fmod", {"self": lambda c, g: g,
              "other": lambda c, g: -g * _ops.unary("trunc", c.self / c.other)},
     saves=("self", "other"))
rule("remainder", {"self": lambda c, g: g,
                   "other": lambda c, g: -g * _ops.unary("floor", c.self / c.other)},
     saves=("self", "other"))
rule("floor_divide", {"self": lambda c, g: g * 0, "other": lambda c, g: g * 0})
rule("hypot", {"self": lambda c, g: g * c.self / c.result,
               "other": lambda c, g: g * c.other / c.result}, saves=("self", "other", "result"))
rule("logaddexp", {"self": lambda c, g: g * (c.self - c.result).exp(),
                   "other": lambda c, g: g * (c.other - c.result).exp()},
     saves=("self", "other", "result"))
rule("xlogy", {"self": lambda c, g: g * _join.where(c.self == 0, 0, c.other.log()
                                                    if _is_tensor(c.other) else math.log(c.other)),
               "other": lambda c, g: g * c.self / c.other}, saves=("self", "other"))
rule("copysign", {"self": lambda c, g: g * _join.where(c.self == 0, 0, c.result / c.self)},
     saves=("self", "result"))
rule("lerp", {"self": lambda c, g: g * (1 - c.weight), "end": lambda c, g: g * c.weight,
              "weight": lambda c, g: g * (c.end - c.self)}, saves=("self", "end", "weight"))
rule("addcmul", {"self": lambda c, g: g,
                 "tensor1": lambda c, g: g * c.get("value", 1) * c.tensor2,
                 "tensor2": lambda c, g: g * c.get("value", 1) * c.tensor1},
     saves=("tensor1", "tensor2"))
rule("addcdiv", {"self": lambda c, g: g,
                 "tensor1": lambda c, g: g * c.get("value", 1) / c.tensor2,
                 "tensor2": lambda c, g: -g * c.get("value", 1) * c.tensor1 /
                 (c.tensor2 * c.tensor2)}, saves=("tensor1", "tensor2"))

_UNARY_GRADS: dict[str, Callable] = {
    "neg": lambda c, g: -g,
    "exp": lambda c, g: g * c.result,
    "exp2": lambda c, g: g * c.result * math.log(2.0),
    "expm1": lambda c, g: g * (c.result + 1),
    "log": lambda c, g: g / c.self,
    "log2": lambda c, g: g / (c.self * math.log(2.0)),
    "log10": lambda c, g: g / (c.self * math.log(10.0)),
    "log1p": lambda c, g: g / (c.self + 1),
    "sqrt": lambda c, g: g / (2 * c.result),
    "rsqrt": lambda c, g: -0.5 * g * c.result * c.result * c.result,
    "square": lambda c, g: 2 * g * c.self,
    "reciprocal": lambda c, g: -g * c.result * c.result,
    "abs": lambda c, g: g * _ops.unary("sign", c.self),
    "sin": lambda c, g: g * c.self.cos(),
    "cos": lambda c, g: -g * c.self.sin(),
    "tan": lambda c, g: g * (1 + c.result * c.result),
    "asin": lambda c, g: g / (1 - c.self * c.self).sqrt(),
    "acos": lambda c, g: -g / (1 - c.self * c.self).sqrt(),
    "atan": lambda c, g: g / (1 + c.self * c.self),
    "sinh": lambda c, g: g * c.self.cosh(),
    "cosh": lambda c, g: g * c.self.sinh(),
    "tanh": lambda c, g: _activations.activation_backward("tanh", c.result, g),
    "asinh": lambda c, g: g / (c.self * c.self + 1).sqrt(),
    "acosh": lambda c, g: g / (c.self * c.self - 1).sqrt(),
    "atanh": lambda c, g: g / (1 - c.self * c.self),
    "sigmoid": lambda c, g: _activations.activation_backward("sigmoid", c.result, g),
    "relu": lambda c, g: _activations.activation_backward("relu", c.result, g),
    "erf": lambda c, g: g * (2 / math.sqrt(math.pi)) * (-(c.self * c.self)).exp(),
    "erfc": lambda c, g: g * (-2 / math.sqrt(math.pi)) * (-(c.self * c.self)).exp(),
    "erfinv": lambda c, g: g * (math.sqrt(math.pi) / 2) * (c.result * c.result).exp(),
    "logit": lambda c, g: g / (c.self * (1 - c.self)),
    "sinc": lambda c, g: g * _join.where(
        c.self == 0, 0, ((math.pi * c.self).cos() * math.pi * c.self - (math.pi * c.self).sin())
        / (math.pi * c.self * c.self)),
    "frac": lambda c, g: g,
    "positive": lambda c, g: g,
}
_SAVES = {"exp": ("result",), "exp2": ("result",), "expm1": ("result",), "sqrt": ("result",),
          "rsqrt": ("result",), "reciprocal": ("result",), "tan": ("result",),
          "tanh": ("result",), "sigmoid": ("result",), "relu": ("result",),
          "erfinv": ("result",)}
for _name, _formula in _UNARY_GRADS.items():
    rule(_name, {"self": _formula}, saves=_SAVES.get(_name, ("self",)))
for _name in ("floor", "ceil", "round", "trunc", "sign", "sgn", "fix"):
    rule(_name, {"self": lambda c, g: g * 0})


def _silu(c, g):
    return _activations.activation_backward("silu", c.self, g)


def _gelu(c, g):
    name = "gelu_tanh" if c.get("approximate", "none") == "tanh" else "gelu"
    return _activations.activation_backward(name, c.self, g)


rule("silu", {"self": _silu}, saves=("self",))
rule("gelu", {"self": _gelu}, saves=("self",))


def _clamp_mask(c):
    x, low, high = c.self, c.get("min"), c.get("max")
    mask = None
    if low is not None:
        mask = x >= low
    if high is not None:
        upper = x <= high
        mask = upper if mask is None else mask & upper
    return mask


rule("clamp clip", {
    "self": lambda c, g: g * _clamp_mask(c) if _clamp_mask(c) is not None else g,
    "min": lambda c, g: g * (c.self < c.min),
    "max": lambda c, g: g * (c.self > c.max)}, saves=("self", "min", "max"))
rule("clamp_min", {"self": lambda c, g: g * (c.self >= c.min),
                   "min": lambda c, g: g * (c.self < c.min)}, saves=("self", "min"))
rule("clamp_max", {"self": lambda c, g: g * (c.self <= c.max),
                   "max": lambda c, g: g * (c.self > c.max)}, saves=("self", "max"))
rule("where", {"input": lambda c, g: _join.where(c.condition, g, 0),
               "other": lambda c, g: _join.where(c.condition, 0, g)}, saves=("condition",))
rule("tensor_where", {"self": lambda c, g: _join.where(c.condition, g, 0),
                      "other": lambda c, g: _join.where(c.condition, 0, g)},
     saves=("condition",))
rule("masked_fill", {"self": lambda c, g: g.masked_fill(c.mask, 0),
                     "value": lambda c, g: _join.where(c.mask, g, 0).sum()}, saves=("mask",))
nondiff("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
        "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
        "bitwise_left_shift", "bitwise_right_shift", "isnan", "isinf", "isfinite", "isclose",
        "allclose", "equal", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
        "randn_like", "randint_like", "new_zeros", "new_ones", "new_empty", "new_full",
        "new_tensor", "argmax", "argmin", "argsort", "count_nonzero", "nonzero", "bincount",
        "histc", "unique", "heaviside", "signbit", "is_nonzero", "isreal", "searchsorted",
        "bucketize", "one_hot", "multinomial", "bernoulli", "poisson")


# -- reductions ---------------------------------------------------------------------------------
rule("sum", {"self": lambda c, g: _unreduce(g, c)})
rule("nansum", {"self": lambda c, g: _join.where(c.self.isnan(), 0, _unreduce(g, c))},
     saves=("self",))
rule("mean", {"self": lambda c, g: _unreduce(g, c) / _count(c)})


def _extreme(c, g):
    """amax/amin (and max/min without dim): the gradient split evenly among the ties."""
    source = c.self
    value = c.result if not isinstance(c.result, list) else c.result[0]
    expanded = _unreduce(value, c) if c.get("dim") not in (None, ()) or source.ndim == 0 \
        else value.expand(source.shape)
    mask = (source == expanded).to(source.dtype)
    if c.get("dim") in (None, ()):
        return mask * (g / mask.sum())
    count = _unreduce(_reductions.sum(mask, _dims(c.get("dim"), source.ndim),
                                      keepdim=c.get("keepdim", False)), c)
    return mask * _unreduce(g, c) / count


rule("amax amin", {"self": _extreme}, saves=("self", "result"))


def _values_by_indices(c, grads):
    """max/min/sort/topk/kthvalue/median/mode with a dim: the values' gradient lands where
    the indices point."""
    result = c.result
    if not isinstance(result, list):      # median() of everything: one value
        return _extreme(c, grads[0])
    grad, indices = grads[0], result[1]
    source = c.self
    if source.ndim == 0:
        return grad.reshape(())
    dim = c.get("dim")
    dim = -1 if dim is None else dim
    if c._op not in ("sort", "topk") and not c.get("keepdim", False):
        grad, indices = grad.unsqueeze(dim), indices.unsqueeze(dim)
    out = _creation.zeros(source.shape, dtype=grad.dtype, device=grad.device)
    return out.scatter(dim, indices, grad)


def _max_min(c, grads, first: bool = True):
    if c.get("other") is not None:      # max(input, other=...): maximum / minimum
        mask = _max_mask(c, first) if c._op == "max" else _min_mask(c, first)
        return grads[0] * mask
    if c.get("dim") is None:
        return _extreme(c, grads[0])
    return _values_by_indices(c, grads)


rule("max min", {"self": _max_min, "other": lambda c, grads: _max_min(c, grads, False)},
     saves=("self", "other", "result"), multi=True)
rule("sort topk kthvalue median mode", {"self": _values_by_indices}, saves=("self", "result"),
     multi=True)


def _var(c, g, root: bool):
    source = c.self
    dims = _dims(c.get("dim"), source.ndim)
    correction = c.get("correction")
    if correction is None:
        unbiased = c.get("unbiased")
        correction = 0 if unbiased is False else 1
    count = _count(c)
    mean = _reductions.mean(source, dims, keepdim=True)
    grad = _unreduce(g, c)
    scale = 2.0 / max(count - correction, 0) if count - correction > 0 else float("nan")
    out = grad * (source - mean) * scale
    if root:
        out = out / (2 * _unreduce(c.result, c))
    return out


rule("var", {"self": lambda c, g: _var(c, g, False)}, saves=("self",))
rule("std", {"self": lambda c, g: _var(c, g, True)}, saves=("self", "result"))
rule("logsumexp", {"self": lambda c, g: _unreduce(g, c) * (c.self - _unreduce(c.result, c))
                   .exp()}, saves=("self", "result"))


def _norm(c, g):
    p = c.get("p", "fro")
    source = c.self
    if p in ("fro", 2, 2.0, None):
        return _unreduce(g, c) * source / _unreduce(c.result, c)
    if p in (1, 1.0):
        return _unreduce(g, c) * _ops.unary("sign", source)
    if p in (float("inf"), "inf"):
        return _extreme_abs(c, g)
    p = float(p)
    return _unreduce(g, c) * source * source.abs() ** (p - 2) / _unreduce(c.result, c) ** (p - 1)


def _extreme_abs(c, g):
    source = c.self
    mask = (source.abs() == _unreduce(c.result, c)).to(source.dtype)
    return mask * _ops.unary("sign", source) * _unreduce(g, c) / _unreduce(
        _reductions.sum(mask, _dims(c.get("dim"), source.ndim), keepdim=c.get("keepdim", False)),
        c)


rule("norm", {"self": _norm}, saves=("self", "result"))
rule("prod", {"self": lambda c, g: _unreduce(g, c) * _unreduce(c.result, c) / c.self},
     saves=("self", "result"))


def _reverse_cumsum(grad: Tensor, dim: int) -> Tensor:
    return _reductions.cumsum(grad.flip(dim), dim).flip(dim)


rule("cumsum", {"self": lambda c, g: _reverse_cumsum(g, c.dim)})
rule("cumprod", {"self": lambda c, g: _reverse_cumsum(g * c.result, c.dim) / c.self},
     saves=("self", "result"))


# -- products -----------------------------------------------------------------------------------
def _matmul_operands(a: Tensor, b: Tensor, g: Tensor):
    """``a``, ``b`` and ``g`` as batched matrices (a vector operand gets its unit dimension)."""
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = g2.unsqueeze(-2) if g2.ndim else g2.reshape(1, 1)
    if b.ndim == 1 and a.ndim != 1:
        g2 = g2.unsqueeze(-1)
    return a2, b2, g2


def _transposed(x: Tensor) -> Tensor:
    """A 2-D tensor's transpose as a plain alias (the formulas run outside autograd, so no
    view bookkeeping: one frame instead of transpose's checks)."""
    return Tensor._make(x._data.T, x._device, x._dtype)


def _matmul_grad_a(a: Tensor, b: Tensor, g: Tensor) -> Tensor:
    if a._data.ndim == 2 and b._data.ndim == 2:   # the common case, without the reshapes
        return _linalg.matmul(g, _transposed(b))
    a2, b2, g2 = _matmul_operands(a, b, g)
    return sum_to(_linalg.matmul(g2, b2.mT), a2.shape).reshape(a.shape)


def _matmul_grad_b(a: Tensor, b: Tensor, g: Tensor) -> Tensor:
    if a._data.ndim == 2 and b._data.ndim == 2:
        return _linalg.matmul(_transposed(a), g)
    a2, b2, g2 = _matmul_operands(a, b, g)
    if a2.ndim > 2 and b2.ndim == 2:   # a batch against one matrix: one product, not a sum
        flat_a = a2.reshape(-1, a2.shape[-1])
        return _linalg.matmul(flat_a.mT, g2.reshape(-1, g2.shape[-1])).reshape(b.shape)
    return sum_to(_linalg.matmul(a2.mT, g2), b2.shape).reshape(b.shape)


def _second(c):
    for name in ("other", "mat2", "vec2"):
        value = c.get(name)
        if value is not None:
            return value
    raise AttributeError("matmul: no second operand")


def _accumulate_grad_b(a: Tensor, b: Tensor, g: Tensor, target: Tensor, overwrite: bool,
                       alpha=1) -> bool:
    """``target += a.mT @ g`` (``overwrite``: ``=``) in one product, for 2-D operands."""
    if a._data.ndim != 2 or b._data.ndim != 2 or g._data.ndim != 2 or alpha != 1:
        return False
    return _linalg.accumulate_product_(target, _transposed(a), g, overwrite)


rule("matmul mm bmm dot inner", {
    "self": lambda c, g: _matmul_grad_a(c.self, _second(c), g),
    "other": lambda c, g: _matmul_grad_b(c.self, c.other, g),
    "mat2": lambda c, g: _matmul_grad_b(c.self, c.mat2, g),
    "vec2": lambda c, g: _matmul_grad_b(c.self, c.vec2, g)},
    saves=("self", "other", "mat2", "vec2"),
    accumulate={"other": lambda c, g, t, o: _accumulate_grad_b(c.self, c.other, g, t, o),
                "mat2": lambda c, g, t, o: _accumulate_grad_b(c.self, c.mat2, g, t, o)})
rule("outer ger", {"self": lambda c, g: _linalg.matmul(g, c.vec2),
                   "vec2": lambda c, g: _linalg.matmul(g.mT, c.self)}, saves=("self", "vec2"))
rule("addmm", {"self": lambda c, g: _scaled(g, c.get("beta", 1)),
               "mat1": lambda c, g: _scaled(_linalg.matmul(g, _transposed(c.mat2)),
                                            c.get("alpha", 1)),
               "mat2": lambda c, g: _scaled(_linalg.matmul(_transposed(c.mat1), g),
                                            c.get("alpha", 1))},
     saves=("mat1", "mat2"),
     accumulate={"mat2": lambda c, g, t, o: _accumulate_grad_b(c.mat1, c.mat2, g, t, o,
                                                               c.get("alpha", 1))})


def _linear_weight(c, g):
    x = c.self
    g2 = g.reshape(-1, g.shape[-1]) if g.ndim != 1 else g.unsqueeze(0)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim != 1 else x.unsqueeze(0)
    return _linalg.matmul(g2.mT, x2)


rule("linear", {"self": lambda c, g: _linalg.matmul(g, c.weight),
                "weight": _linear_weight,
                "bias": lambda c, g: g}, saves=("self", "weight"))


def _einsum_grads(c, g):
    args = c.args
    equation, operands = args[0], list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    equation = equation.replace(" ", "")
    if "..." in equation:
        raise NotImplementedError("the derivative of einsum with '...' is not implemented")
    lhs, _, out = equation.partition("->")
    inputs = lhs.split(",")
    if not _:
        letters = sorted(ch for ch in set(lhs.replace(",", "")) if lhs.count(ch) == 1)
        out = "".join(letters)
    grads: list = [None]
    for number, (subscripts, operand) in enumerate(zip(inputs, operands)):
        if len(set(subscripts)) != len(subscripts):
            raise NotImplementedError("the derivative of einsum with a repeated index in one "
                                      "operand (a diagonal) is not implemented")
        others = [s for k, s in enumerate(inputs) if k != number]
        present = set(out) | set("".join(others))
        kept = "".join(ch for ch in subscripts if ch in present)
        spec = ",".join([out] + others) + "->" + kept
        value = _shapes.einsum(spec, g, *[o for k, o in enumerate(operands) if k != number])
        for position, ch in enumerate(subscripts):
            if ch not in present:
                value = value.unsqueeze(position)
        grads.append(value.expand(operand.shape))
    return grads[1:]


rule("einsum", {"self": lambda c, g: [None] + _einsum_grads(c, g)})


# -- views and shapes ---------------------------------------------------------------------------
def _as_shape(c, g):
    return g.reshape(c.self.shape)


rule("view unflatten view_as squeeze", {"self": _as_shape}, view=True)
rule("reshape flatten reshape_as contiguous clone", {"self": _as_shape})
rule("unsqueeze", {"self": lambda c, g: g.squeeze(c.dim)}, view=True)


def _inverse_permutation(dims, ndim: int) -> list[int]:
    dims = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
    inverse = [0] * ndim
    for position, d in enumerate(dims):
        inverse[d % ndim] = position
    return inverse


rule("permute", {"self": lambda c, g: g.permute(*_inverse_permutation(c.dims, g.ndim))},
     view=True)
rule("transpose swapaxes swapdims", {
    "self": lambda c, g: g.transpose(c.get("dim0", c.get("axis0")),
                                     c.get("dim1", c.get("axis1")))}, view=True)
rule("t T mT adjoint H mH", {"self": lambda c, g: g.mT if g.ndim >= 2 else g}, view=True)
rule("movedim moveaxis", {"self": lambda c, g: g.movedim(c.destination, c.source)}, view=True)
rule("expand expand_as broadcast_to", {"self": lambda c, g: g}, view=True)


def _into_zeros(c, g, put: Callable) -> Tensor:
    out = _creation.zeros(c.self.shape, dtype=g.dtype, device=g.device)
    put(out).copy_(g)
    return out


rule("narrow", {"self": lambda c, g: _into_zeros(
    c, g, lambda z: z.narrow(c.dim, c.start, c.length))}, view=True)
rule("select", {"self": lambda c, g: _into_zeros(c, g, lambda z: z.select(c.dim, c.index))},
     view=True)
rule("diagonal", {"self": lambda c, g: _into_zeros(
    c, g, lambda z: z.diagonal(c.get("offset", 0), c.get("dim1", 0), c.get("dim2", 1)))},
    view=True)


def _split_dim(c) -> int:
    return int(c.get("dim", 0))


rule("split chunk tensor_split", {
    "self": lambda c, grads: _join.cat(list(grads), _split_dim(c))}, view=True, multi=True)
rule("unbind", {"self": lambda c, grads: _join.stack(list(grads), _split_dim(c))}, view=True,
     multi=True)


def _cat_grads(c, g):
    dim = c.get("dim", 0)
    tensors = c.tensors
    dim = dim % max(g.ndim, 1)
    sizes = [t.shape[dim] if t.ndim else 0 for t in tensors]
    pieces: list[Tensor | None]
    pieces, start = [], 0
    for t, size in zip(tensors, sizes):
        if t.ndim == 1 and t.shape[0] == 0 and g.ndim != 1:
            pieces.append(None)
            continue
        pieces.append(g.narrow(dim, start, size))
        start += size
    return pieces


rule("cat concat concatenate", {"self": _cat_grads})
rule("stack", {"self": lambda c, g: list(_views.unbind(g, c.get("dim", 0)))})
rule("tril", {"self": lambda c, g: g.tril(c.get("diagonal", 0))})
rule("triu", {"self": lambda c, g: g.triu(c.get("diagonal", 0))})


def _flip_dims(c):
    dims = c.get("dims", ())
    if not isinstance(dims, (list, tuple)):
        dims = (dims,)
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    return tuple(dims)


rule("flip tensor_flip", {"self": lambda c, g: g.flip(*_flip_dims(c))})


def _roll_back(c, g):
    shifts = c.shifts
    shifts = [-s for s in shifts] if isinstance(shifts, (list, tuple)) else -shifts
    return g.roll(shifts, c.get("dims"))


rule("roll", {"self": _roll_back})


def _repeat_grad(c, g):
    source = c.self
    sizes = c.get("sizes", c.get("dims"))
    if isinstance(sizes, (list, tuple)) and len(sizes) == 1 and isinstance(sizes[0],
                                                                           (list, tuple)):
        sizes = sizes[0]
    sizes = list(sizes) if isinstance(sizes, (list, tuple)) else [sizes]
    more = c.get("more", ())
    sizes += list(more or ())
    shape = list(source.shape)
    sizes = [1] * (len(shape) - len(sizes)) + sizes
    shape = [1] * (len(sizes) - len(shape)) + shape
    split = []
    for repeat, size in zip(sizes, shape):
        split += [repeat, size]
    total = _reductions.sum(g.reshape(split), list(range(0, 2 * len(sizes), 2)))
    return total.reshape(source.shape)


rule("repeat tile", {"self": _repeat_grad})


def _to_like_input(c, g):
    source = c.self
    return g.to(source.device) if g.device != source.device else g


def _to_like_src(c, g):
    source = c.src
    return g.to(source.device) if g.device != source.device else g


rule("to tensor_type type_as float double half bfloat16 cpu cuda",
     {"self": _to_like_input})
nondiff("int", "long", "short", "char", "byte", "bool")


# -- indexing and scatter -----------------------------------------------------------------------
def _index_key(key) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return any(type(part) is Tensor or isinstance(part, list) for part in parts)


def _getitem(c, g):
    key = c.key
    out = _creation.zeros(c.self.shape, dtype=g.dtype, device=g.device)
    if not _index_key(key):
        out[key] = g
        return out
    parts = key if isinstance(key, tuple) else (key,)
    index = parts[0]
    if len(parts) == 1 and type(index) is Tensor and index.dtype.name == "bool":
        out[index] = g
        return out
    if len(parts) == 1 and type(index) is Tensor:
        flat = index.reshape(-1)
        rows = g.reshape((flat.shape[0],) + tuple(c.self.shape[1:]))
        return out.index_add_(0, flat, rows)
    if all(type(part) is Tensor for part in parts):
        return out.index_put_(tuple(parts), g, accumulate=True)
    raise NotImplementedError("the derivative of indexing that mixes index tensors with slices "
                              "is not implemented; index with one tensor, or with tensors only")


rule("getitem", {"self": _getitem}, view=lambda args: not _index_key(args[1]))


def _setitem_self(c, g):
    out = g.clone()
    out[c.key] = 0
    return out


rule("setitem", {"self": _setitem_self, "value": lambda c, g: g[c.key]})
rule("copy", {"self": lambda c, g: g * 0, "src": _to_like_src})
rule("fill", {"self": lambda c, g: g * 0, "value": lambda c, g: g.sum()})
rule("zero", {"self": lambda c, g: g * 0})
for _name in ("uniform", "normal", "exponential", "geometric", "random", "cauchy",
              "log_normal"):
    rule(_name, {"self": lambda c, g: g * 0})


def _zeros_like_self(c, g):
    return _creation.zeros(c.self.shape, dtype=g.dtype, device=g.device)


rule("gather", {"self": lambda c, g: _zeros_like_self(c, g).scatter_add_(c.dim, c.index, g)},
     saves=("index",))
rule("take_along_dim", {"self": lambda c, g: _zeros_like_self(c, g).scatter_add_(
    c.dim, c.indices.expand(g.shape), g)}, saves=("indices",))
rule("index_select", {"self": lambda c, g: _zeros_like_self(c, g).index_add_(c.dim, c.index, g)},
     saves=("index",))
rule("scatter", {"self": lambda c, g: g.scatter(c.dim, c.index, 0),
                 "src": lambda c, g: g.gather(c.dim, c.index)}, saves=("index",))
rule("scatter_add", {"self": lambda c, g: g, "src": lambda c, g: g.gather(c.dim, c.index)},
     saves=("index",))
rule("index_add", {"self": lambda c, g: g,
                   "source": lambda c, g: g.index_select(c.dim, c.index) * c.get("alpha", 1)},
     saves=("index",))
rule("index_copy", {"self": lambda c, g: g.index_fill(c.dim, c.index, 0),
                    "source": lambda c, g: g.index_select(c.dim, c.index)}, saves=("index",))
rule("index_fill", {"self": lambda c, g: g.index_fill(c.dim, c.index, 0),
                    "value": lambda c, g: g.index_select(c.dim, c.index).sum()},
     saves=("index",))
rule("masked_select", {"self": lambda c, g: _zeros_like_self(c, g).masked_scatter(
    c.mask.expand(c.self.shape) if tuple(c.mask.shape) != tuple(c.self.shape) else c.mask, g)},
    saves=("mask",))
rule("masked_scatter", {"self": lambda c, g: g.masked_fill(c.mask, 0),
                        "source": lambda c, g: _masked_source(c, g)}, saves=("mask",))


def _masked_source(c, g):
    values = g.masked_select(c.mask)
    out = _creation.zeros(c.source.numel(), dtype=g.dtype, device=g.device)
    out[:values.shape[0]] = values
    return out.reshape(c.source.shape)


# -- activations and normalization --------------------------------------------------------------
rule("softmax", {"self": lambda c, g: c.result * (g - _reductions.sum(g * c.result, c.dim,
                                                                       keepdim=True))},
     saves=("result",))
rule("log_softmax", {"self": lambda c, g: g - c.result.exp() * _reductions.sum(
    g, c.dim, keepdim=True)}, saves=("result",))


def _layer_norm_parts(c):
    x = c.self
    shape = c.normalized_shape
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dims = list(range(x.ndim - len(shape), x.ndim))
    mean = _reductions.mean(x, dims, keepdim=True)
    centered = x - mean
    var = _reductions.mean(centered * centered, dims, keepdim=True)
    rstd = (var + c.get("eps", 1e-5)).rsqrt()
    return dims, centered * rstd, rstd


def _layer_norm_input(c, g):
    dims, xhat, rstd = _layer_norm_parts(c)
    weight = c.get("weight")
    dxhat = g * weight if weight is not None else g
    mean_d = _reductions.mean(dxhat, dims, keepdim=True)
    mean_dx = _reductions.mean(dxhat * xhat, dims, keepdim=True)
    return rstd * (dxhat - mean_d - xhat * mean_dx)


rule("layer_norm", {"self": _layer_norm_input,
                    "weight": lambda c, g: g * _layer_norm_parts(c)[1],
                    "bias": lambda c, g: g}, saves=("self", "weight"))


def _mse_grad(c, g, sign: float):
    """One kernel: ``sign * 2 * (input - target) * grad``, over the count for the mean."""
    scale = sign * 2.0
    if c.get("reduction", "mean") == "mean":
        shape, other = c.self._data.shape, c.target._data.shape
        scale /= max(1, math.prod(shape if shape == other else
                                  _ops._broadcast_shape("mse_loss", shape, other)))
    # one program of the backend's ops (cuda: one raw kernel) for float32 and float64; a
    # program's number operand has the operands' dtype, so a half dtype's scale would round
    native = _MSE_BACKWARD if c.self._dtype in _WIDE_FLOATS else None
    return _ops.formula("mse_loss_backward", [c.self, c.target, g, scale], _mse_backward,
                        native=native, cache=True)


def _mse_backward(xp, a, b, g, scale):
    return (a - b) * g * scale


_MSE_BACKWARD = (("sub", (0, 1)), ("mul", (-1, 2)), ("mul", (-1, 3)))
_WIDE_FLOATS = (_dtype.float32, _dtype.float64)


rule("mse_loss", {"self": lambda c, g: _mse_grad(c, g, 1.0),
                  "target": lambda c, g: _mse_grad(c, g, -1.0)}, saves=("self", "target"))
rule("dropout_masked", {"self": lambda c, g: g * (c.noise >= c.threshold) * c.scale},
     saves=("noise",))


# -- linear algebra -----------------------------------------------------------------------------
def _solve_grads(c, g):
    a = c.A
    x = c.result
    left = c.get("left", True)
    if not left:
        raise NotImplementedError("the derivative of linalg.solve(left=False) is not "
                                  "implemented")
    vector = x.ndim == a.ndim - 1
    gb = _linalg_solve(a.mT, g)
    if vector:
        ga = -_linalg.matmul(gb.unsqueeze(-1), x.unsqueeze(-1).mT)
    else:
        ga = -_linalg.matmul(gb, x.mT)
    return ga, gb


def _linalg_solve(a, b):
    return _decompositions.solve(a, b)


rule("linalg_solve", {"self": lambda c, g: _solve_grads(c, g)[0],
                            "B": lambda c, g: _solve_grads(c, g)[1]}, saves=("A", "result"))


def _inv_grad(c, g):
    y = c.result
    return -_linalg.matmul(_linalg.matmul(y.mT, g), y.mT)


rule("linalg_inv linalg_inverse", {"self": _inv_grad}, saves=("result",))


def _det_grad(c, g):
    a = c.self
    inverse = _decompositions.inv(a)
    return (g * c.result).unsqueeze(-1).unsqueeze(-1) * inverse.mT


rule("linalg_det", {"self": _det_grad}, saves=("self", "result"))


def _cholesky_grad(c, g):
    lower = c.result
    if c.get("upper", False):
        raise NotImplementedError("the derivative of cholesky(upper=True) is not implemented")
    phi = _linalg.matmul(lower.mT, g).tril()
    phi = phi - 0.5 * _diag_embed(phi.diagonal(0, -2, -1))
    inverse = _decompositions.inv(lower)
    s = _linalg.matmul(_linalg.matmul(inverse.mT, phi), inverse)
    return 0.5 * (s + s.mT)


def _diag_embed(diagonal: Tensor) -> Tensor:
    n = diagonal.shape[-1]
    eye = _creation.eye(n, dtype=diagonal.dtype, device=diagonal.device)
    return diagonal.unsqueeze(-1) * eye


rule("linalg_cholesky", {"self": _cholesky_grad}, saves=("result",))


# -- making ops differentiable --------------------------------------------------------------------
def differentiable(op: str, fn: Callable, inplace: bool = False) -> Callable:
    """``fn`` as a public op: it runs as it is while no argument has autograd state, else
    through :func:`autograd.dispatch` under the rule ``op`` (``inplace``: ``fn`` changes its
    first argument)."""

    def wrapper(*args, **kwargs):
        for value in args:
            cls = value.__class__
            if cls is Tensor:
                if value._ag is not None:
                    return dispatch(op, fn, args, kwargs, inplace)
            elif cls is list or cls is tuple:
                for item in value:
                    if item.__class__ is Tensor and item._ag is not None:
                        return dispatch(op, fn, args, kwargs, inplace)
        if kwargs:
            for value in kwargs.values():
                if value.__class__ is Tensor and value._ag is not None:
                    return dispatch(op, fn, args, kwargs, inplace)
        return fn(*args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    wrapper._tp_differentiable = op   # type: ignore[attr-defined]
    return wrapper

