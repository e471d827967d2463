"""The ops behind ``tensorplay.nn.functional`` that the tensor API lacks: ``layer_norm``,
``dropout``, ``one_hot`` and ``silu_`` (in-place SiLU).

Each op is composed of existing machinery (``layer_norm`` uses a backend hook where one exists):

- ``layer_norm`` is ONE kernel: the backend's ``layer_norm`` hook (cuda: a raw kernel, a block
  per row) for one normalized dim of a contiguous input, else one formula kernel of the
  elementwise engine (``elementwise.formula``'s plan, as ``softmax`` in ``activations.py``):
  mean and biased variance over the normalized dimensions,
  ``(x - mean) / sqrt(var + eps) * weight + bias``. float16 and bfloat16 compute in float32 and
  round once when stored, as PyTorch does; the plan is kept per signature (and ``eps``).
- ``dropout`` draws its mask from the device's Philox generator (``random.uniform_`` into a
  fresh float32 tensor on the input's device), so inside a captured graph every replay draws
  fresh numbers, and after ``manual_seed(s)`` k replays drop what k eager calls drop. The keep
  mask is ``rand(input.shape, dtype=float32) >= float32(p)``: the same on cpu, sim and cuda for
  one seed. Then one formula kernel computes ``x * keep * (1 / (1 - p))``.
- ``one_hot`` compares ``input.unsqueeze(-1)`` with ``arange(num_classes)`` in one formula
  kernel (after ``arange``'s own).

Shape, dtype and device checks are made from metadata, with PyTorch's exception types; the
arguments' Python types are checked above, in ``tensorplay.nn.functional``.
"""

from __future__ import annotations

import functools

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import activations as _activations
from . import creation as _creation
from . import autograd as _autograd
from . import elementwise as _ops
from . import join as _join
from . import random as _random
from . import reductions as _reductions
from .tensor import Tensor, layout_of

__all__ = ["layer_norm", "dropout", "one_hot", "silu_"]


# -- layer_norm -----------------------------------------------------------------------------------
#: a plan per (normalized_shape, input, weight, bias signature): Note [elementwise plans]
_layer_norm_plans: dict = {}
_PLAN_LIMIT = 1024


@functools.cache
def _layer_norm_formula(count: int, has_weight: bool, has_bias: bool, eps: float):
    """The formula ``fn(xp, x, [weight], [bias])`` normalizing the last ``count`` dims."""
    axes = tuple(range(-count, 0))

    def formula(xp, x, *rest):
        mean = xp.mean(x, axis=axes, keepdims=True)
        centered = x - mean
        variance = xp.mean(centered * centered, axis=axes, keepdims=True)
        y = centered * (1 / xp.sqrt(variance + x.dtype.type(eps)))
        if has_weight:
            y = y * rest[0]
        if has_bias:
            y = y + rest[-1]
        return y
    return formula


def _layer_norm_native(input: Tensor, normalized_shape: tuple[int, ...], weight, bias,
                       eps: float):
    """The backend's one-kernel layer norm as a formula's ``native(*arrays, out_array)``, or
    None: no ``layer_norm`` hook, more than one normalized dim, a strided input, or
    parameters of another dtype than the input's."""
    hook = _dispatch._hook_for(_dispatch.xp_of(input.device), "layer_norm")
    if hook is None or len(normalized_shape) != 1 or not input.is_contiguous() or any(
            p is not None and (p.dtype is not input.dtype or not p.is_contiguous())
            for p in (weight, bias)):
        return None
    if weight is not None and bias is not None:
        return lambda x, w, b, out: hook(x, w, b, out, eps)
    if weight is not None:
        return lambda x, w, out: hook(x, w, None, out, eps)
    if bias is not None:
        return lambda x, b, out: hook(x, None, b, out, eps)
    return lambda x, out: hook(x, None, None, out, eps)


def _check_layer_norm(input: Tensor, normalized_shape: tuple[int, ...], weight, bias) -> None:
    """PyTorch's checks of ``layer_norm``'s operands (all RuntimeError), from metadata."""
    if not normalized_shape:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., "
                           "containing at least one element, but got normalized_shape = []")
    dtype = input.dtype
    if not dtype.is_floating_point:
        raise RuntimeError(f'"layer_norm" is not implemented for {dtype.name}: it needs a '
                           f"floating point input (float16, bfloat16, float32 or float64); "
                           f"convert it with .float() first")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        if param.shape != normalized_shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {list(param.shape)} and normalized_shape "
                               f"= {list(normalized_shape)}")
    count = len(normalized_shape)
    if input.ndim < count or input.shape[input.ndim - count:] != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input "
                           f"with shape [*, {', '.join(map(str, normalized_shape))}], but got "
                           f"input of size{list(input.shape)}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.device != input.device:
            raise RuntimeError(f"layer_norm: expected all tensors on one device, but the input "
                               f"is on {input.device} and {name} on {param.device}; move them "
                               f"with .to() first")
    params = [p for p in (weight, bias) if p is not None]
    if any(p.dtype is not dtype for p in params):
        half = dtype in (_dtype.float16, _dtype.bfloat16)
        on_cpu = input.device.type == "cpu"
        if half and on_cpu and all(p.dtype is _dtype.float32 for p in params):
            return   # PyTorch's cpu kernel takes float32 parameters for a half input
        given = ", ".join(f"{name} {p.dtype.name}" for name, p in
                          (("weight", weight), ("bias", bias)) if p is not None)
        if half and on_cpu:
            raise RuntimeError(f"layer_norm: a {dtype.name} input takes weight and bias of "
                               f"dtype {dtype.name}, or all of them float32, but got {given}")
        also = (" (float32 ones only on cpu: PyTorch's CUDA kernel refuses them too)"
                if half else "")
        raise RuntimeError(f"layer_norm: expected weight and bias of dtype {dtype.name}, the "
                           f"input's{also}, but got {given}")


def _input_dtype(operands) -> _dtype.dtype:
    """A ``promote`` rule: the result has the first operand's dtype (PyTorch's layer_norm
    returns the input's dtype, also for a float16 input with float32 weight and bias on cpu)."""
    return operands[0].dtype


def layer_norm(input: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dims: ``(x - mean) / sqrt(var + eps)``
    (biased variance), times ``weight`` and plus ``bias`` (each of shape ``normalized_shape``)
    when given. The result has the input's dtype; float16/bfloat16 compute in float32 and round
    once. ``normalized_shape``: a tuple of ints (``nn.functional`` normalizes it).

    Raises:
        RuntimeError: an empty ``normalized_shape``; an input whose trailing dims are not
            ``normalized_shape``; a weight/bias of another shape; a bool/integer/complex input;
            a weight/bias of another dtype than the input's (on cpu float32 ones are also
            accepted for a float16/bfloat16 input, as PyTorch's cpu kernel does; its CUDA kernel
            refuses them, and so do accelerators here); tensors on different devices.
    """
    # the plan's key and operands without a Python frame per operand (the eager hot path)
    key = ("layer_norm", normalized_shape,
           (input._layout or layout_of(input)) if type(input) is Tensor else None,
           None if weight is None else (weight._layout or layout_of(weight))
           if type(weight) is Tensor else _ops._signature(weight),
           None if bias is None else (bias._layout or layout_of(bias))
           if type(bias) is Tensor else _ops._signature(bias), eps)
    plan = _layer_norm_plans.get(key)
    if weight is not None and bias is not None:
        operands = [input, weight, bias]
    else:
        operands = [input] + [p for p in (weight, bias) if p is not None]
    if plan is None:
        _check_layer_norm(input, normalized_shape, weight, bias)
        if input.numel() == 0:   # nothing to normalize (and NumPy would warn on empty means)
            return _creation.empty(input.shape, dtype=input.dtype, device=input.device)
        eps = float(eps)
        formula = _layer_norm_formula(len(normalized_shape), weight is not None,
                                      bias is not None, eps)
        native = _layer_norm_native(input, normalized_shape, weight, bias, eps)
        plan = _ops._plan("layer_norm", None, operands, None, None, None, None, formula,
                          native, _input_dtype)
        if len(operands) == 3:   # the launcher takes the weight and the bias
            _ops.adopt_launcher(plan, native, "layer_norm_launcher", input._data,
                                weight._data, bias._data, eps)  # type: ignore[union-attr]
        _dispatch.remember(_layer_norm_plans, key, plan, _PLAN_LIMIT)
    return _ops._execute(plan, operands, None)


# -- mse_loss -------------------------------------------------------------------------------------
def _squared_difference(xp, a, b):
    d = a - b
    return d * d


#: the same as one program of the backend's elementwise ops (cuda: one raw kernel)
_SQUARED_DIFFERENCE = (("sub", (0, 1)), ("mul", (-1, -1)))


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """``(input - target) ** 2`` (one formula kernel), then its mean or sum (one reduction)
    unless ``reduction == "none"``: recorded by autograd as ONE op whose derivative is one
    kernel, ``2 * (input - target) * grad`` (divided by the count for the mean). The caller
    (``nn.functional.mse_loss``) has checked the operands and ``reduction``. The mean of an
    empty input is NaN."""
    loss = _ops.formula("mse_loss", [input, target], _squared_difference,
                        native=_SQUARED_DIFFERENCE, cache=True)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return _reductions.sum(loss)
    if loss.numel() == 0:
        return _reductions.sum(loss) / 0
    return _reductions.mean(loss)


# -- dropout --------------------------------------------------------------------------------------
def _drop(xp, x, noise, p, scale):
    return x * (noise >= p) * scale


def _times_zero(xp, x):
    return x * x.dtype.type(0)


def dropout(input: Tensor, p: float, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the kept ones by ``1 / (1 - p)``.

    ``p`` must already lie in ``[0, 1]`` (``nn.functional.dropout`` checks it). As PyTorch:
    ``training=False``, ``p == 0`` or an empty input return ``input`` itself (not a copy);
    ``p == 1`` multiplies by zero (NaN and inf stay NaN, as in PyTorch), for any dtype. A dropped
    NaN or inf also gives NaN (the kept mask multiplies). ``inplace=True`` writes into
    ``input`` and returns it.

    Graph-safe: the mask comes from the device's generator when the kernel runs (see the module
    docstring), so a captured dropout draws a fresh mask on every replay.

    Raises:
        RuntimeError: for ``0 < p < 1`` in training, an input that is not floating point
            (bool, integer, complex), as PyTorch's kernels refuse them.
    """
    if not training or p == 0 or input.numel() == 0:
        return input
    out = input if inplace else None
    recorded = input._ag is not None
    if p == 1:
        if recorded:
            return input.mul_(0) if inplace else input * 0
        return _ops.formula("dropout_all", [input], _times_zero, out=out, cache=True)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f'"dropout" is not implemented for {input.dtype.name}: with '
                           f"0 < p < 1 it needs a floating point input; convert it with "
                           f".float() first")
    device = input.device
    noise = Tensor._make(_dispatch.empty(device, input.shape, _dtype.float32), device,
                         _dtype.float32)
    _random.uniform_(noise)
    threshold = float(np.float32(p))   # the mask compares float32 uniforms on every dtype
    if recorded:   # the derivative needs the noise: record the masking as an op of its own
        return _autograd.dispatch("dropout_masked", _dropout_masked_into if inplace else
                                  dropout_masked, (input, noise, threshold, 1.0 / (1.0 - p)),
                                  {}, inplace)
    return dropout_masked(input, noise, threshold, 1.0 / (1.0 - p), out=out)


dropout._tp_differentiable = "dropout"   # type: ignore[attr-defined]   # records itself


def dropout_masked(input: Tensor, noise: Tensor, threshold: float, scale: float,
                   out: Tensor | None = None) -> Tensor:
    """``input * (noise >= threshold) * scale``: dropout once its uniform noise is drawn."""
    return _ops.formula("dropout", [input, noise, threshold, scale], _drop, out=out,
                        promote=_input_dtype, cache=True)


def _dropout_masked_into(input: Tensor, noise: Tensor, threshold: float, scale: float) -> Tensor:
    return dropout_masked(input, noise, threshold, scale, out=input)


# -- one_hot --------------------------------------------------------------------------------------
def _equal(xp, values, classes):
    return values == classes


def _int64(promoted: _dtype.dtype) -> _dtype.dtype:
    return _dtype.int64


def one_hot(input: Tensor, num_classes: int = -1) -> Tensor:
    """int64 tensor of shape ``input.shape + (num_classes,)``, 1 at each value's class.

    ``num_classes=-1`` takes ``input.max() + 1``: a read of the values by the host (it waits
    for the device, and inside a graph capture it raises RuntimeError, invalidating the
    capture). With ``num_classes`` given nothing is read on an accelerator: the op is two
    kernels (``arange`` and a comparison) and capture-safe.

    Value checks, as PyTorch: on cpu (where the values are at hand) every call checks them; on
    an accelerator only ``num_classes=-1`` does (it reads them anyway). With ``num_classes``
    given an accelerator does NOT check: a value outside ``[0, num_classes)`` gives a row of
    zeros (PyTorch's CUDA kernel fires a device-side assert instead, which a graph could not
    report and which ends the CUDA context).

    Raises:
        RuntimeError: an input that is not int64 ("one_hot is only applicable to index tensor
            of type LongTensor"); an empty input with ``num_classes <= 0`` (nothing to infer
            from); a negative value ("Class values must be non-negative.") or one
            ``>= num_classes`` ("Class values must be smaller than num_classes."), where checked
            (above); on an accelerator, ``num_classes < 1`` with a non-empty input
            ("num_classes should be positive", as PyTorch on CUDA).
    """
    if input.dtype is not _dtype.int64:
        raise RuntimeError(f"one_hot is only applicable to index tensor of type LongTensor "
                           f"(int64), got {input.dtype.name}; convert it with .long() first")
    device = input.device
    if input.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError(f"Can not infer total number of classes from empty tensor "
                               f"(shape {input.shape}); pass num_classes > 0")
        return _creation.zeros(input.shape + (num_classes,), dtype=_dtype.int64, device=device)
    if device.type == "cpu" or num_classes == -1:
        if device.type == "cpu":
            values = input._host_copy("one_hot")
            low, high = int(values.min()), int(values.max())
        else:   # one read of both
            low, high = (int(v) for v in _join.stack(
                [_reductions.amin(input), _reductions.amax(input)])._host_copy(
                    "one_hot(num_classes=-1)"))
        if low < 0:
            raise RuntimeError(f"Class values must be non-negative. (got the value {low})")
        if num_classes == -1:
            num_classes = high + 1
        elif high >= num_classes:
            raise RuntimeError(f"Class values must be smaller than num_classes. (got the "
                               f"value {high} with num_classes={num_classes})")
    elif num_classes < 1:
        raise RuntimeError(f"num_classes should be positive, got {num_classes}")
    classes = _creation.arange(num_classes, dtype=_dtype.int64, device=device)
    return _ops.formula("one_hot", [input.unsqueeze(-1), classes], _equal, result=_int64,
                        cache=True)


# -- silu_ ----------------------------------------------------------------------------------------
def silu_(input: Tensor) -> Tensor:
    """In-place :func:`activations.silu` (``x * sigmoid(x)``) on a floating or complex tensor;
    returns it."""
    return _ops.formula("silu_", [input], _activations._silu,
                        result=_join._inexact("silu_"), out=input, native="silu",
                        cache=True)

