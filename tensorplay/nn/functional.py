"""``tensorplay.nn.functional``: the functional ops models are made of, with PyTorch's names,
signatures, result dtypes and exception types (``import tensorplay.nn.functional as F``).

Layers: ``linear embedding layer_norm dropout``. Activations: ``relu gelu silu tanh sigmoid
logsigmoid softmax log_softmax``. Losses: ``mse_loss l1_loss nll_loss cross_entropy
binary_cross_entropy_with_logits``. Other: ``one_hot``.

Every function here is differentiable: with an input that requires grad (``requires_grad=True``,
a ``tensorplay.nn.Parameter``) and grad mode on, the result carries a ``grad_fn`` and
``backward()`` reaches the inputs. ``linear``, ``layer_norm`` and the activations run their one
fused implementation in ``tensorplay._tensor`` and record one node with its derivative;
``embedding``, ``dropout`` (with a grad) and the losses are compositions of differentiable
tensor ops.

Inside a captured graph (``tensorplay.accelerator.Graph``) every function here records device
work only, so replays are cheap and correct, except ``one_hot(t)`` without ``num_classes``: it
reads ``t.max()`` on the host, which a capture cannot do (RuntimeError, the capture is
invalidated). ``dropout`` draws its mask from the device's generator as the kernel runs: every
replay drops a fresh set of elements. The losses read no value on the host, so they check no
value either: a class index outside ``[0, C)`` (other than ``ignore_index``) raises on cpu
(where the gather reads it anyway) but is not detected on an accelerator (PyTorch's CUDA kernels
fire a device-side assert instead).

Exception types follow PyTorch, so they differ in places from the ``tensorplay.*`` functions of
the same name: ``F.gelu``/``F.silu``/``F.softmax``/``F.log_softmax`` raise RuntimeError for a
bool/integer input (``tp.gelu`` raises TypeError), and ``F.gelu`` raises RuntimeError for an
unknown ``approximate`` (``tp.gelu``: ValueError). A bad ``reduction`` is a ValueError
(``"... is not a valid value for reduction"``).
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import _dtype
from .._runtime import dispatch as _dispatch
from .._tensor import attention as _attention, creation as _creation, linalg as _linalg
from .._tensor import autograd as _autograd
from .._tensor import functional as _functional
from .._tensor import normalization as _normalization
from .._tensor.tensor import Tensor, layout_of

__all__ = ["linear", "embedding", "layer_norm", "dropout", "relu", "gelu", "silu", "tanh",
           "sigmoid", "logsigmoid", "softmax", "log_softmax", "one_hot", "mse_loss", "l1_loss",
           "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits",
           "scaled_dot_product_attention"]

# The fused implementations: each is recorded by autograd as one node under its derivative
# rule where it lives (``methods.install`` makes the op modules' functions differentiable).
_linear = _linalg.linear
_layer_norm = _normalization.layer_norm
_silu_ = _normalization.silu_


def _tensor(value, op: str, name: str, position: int) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not "
                        f"{type(value).__name__}")
    return value


def _optional_tensor(value, op: str, name: str, position: int) -> Tensor | None:
    return None if value is None else _tensor(value, op, name, position)


def _floating(op: str, tensor: Tensor, dtype: _dtype.dtype | None = None) -> None:
    """RuntimeError unless ``dtype`` (default: the tensor's) is a real floating dtype, as
    PyTorch's kernels refuse the others ("... not implemented for 'Long'")."""
    dtype = tensor.dtype if dtype is None else dtype
    if not dtype.is_floating_point:
        raise RuntimeError(f'"{op}" is not implemented for {dtype.name}: it takes float16, '
                           f"bfloat16, float32 or float64 tensors; convert with .float() first")


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``: ``input`` of shape ``(*, in)``, ``weight`` ``(out, in)``
    (or ``(in,)``: the ``out`` dim is dropped), ``bias`` ``(out,)`` or any shape that
    broadcasts to the result, or None.

    Raises:
        TypeError: a non-Tensor operand. RuntimeError: shapes that cannot be multiplied or
            broadcast, operands of different dtypes or devices, a 0-d operand.
    """
    return _linear(input, weight, bias)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``, keeping the dtype (integers too); ``inplace=True`` writes into ``input``
    and returns it.

    Raises:
        RuntimeError: a bool or complex input.
    """
    if inplace:
        return _tensor(input, "relu", "input", 1).relu_()
    return _functional.relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``: the exact form with ``erf`` (``approximate="none"``) or PyTorch's tanh
    approximation (``"tanh"``). float16/bfloat16 compute in float32 and round once.

    Raises:
        TypeError: ``approximate`` not a str. RuntimeError: ``approximate`` other than "none"
            or "tanh"; a bool/integer/complex input.
    """
    if type(input) is Tensor and input._dtype.is_floating_point and (
            approximate == "none" or approximate == "tanh"):
        return _functional.gelu(input, approximate)
    if not isinstance(approximate, str):
        raise TypeError(f"gelu(): argument 'approximate' must be str, not "
                        f"{type(approximate).__name__}")
    if approximate != "none" and approximate != "tanh":
        raise RuntimeError(f"approximate argument must be either none or tanh, got "
                           f"{approximate!r}")
    _floating("gelu", _tensor(input, "gelu", "input", 1))   # a subclass passes
    return _functional.gelu(input, approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``; ``inplace=True`` writes into ``input`` and returns it.

    Raises:
        RuntimeError: a bool/integer input.
    """
    tensor = _tensor(input, "silu", "input", 1)
    if not tensor.dtype.is_complex:
        _floating("silu", tensor)
    return _silu_(input) if inplace else _functional.silu(input)


def _implicit_dim(op: str, ndim: int, stacklevel: int) -> int:
    """PyTorch's deprecated choice of ``dim`` when none is given: 0 for 0-, 1- and 3-d inputs,
    else 1; it warns, as PyTorch does."""
    warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call to "
                  f"include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_args(op: str, input, dim, stacklevel: int, dtype):
    tensor = _tensor(input, op, "input", 1)
    if dim is None:
        dim = _implicit_dim(op, tensor.ndim, stacklevel + 1)
    if dtype is not None:
        dtype = _dtype.to_dtype(dtype)
    _floating(op, tensor, dtype)
    return tensor, dim, dtype


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: _dtype.dtype | None = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably. ``dtype``: cast the input to it
    first (its result dtype). ``dim=None`` picks a dim as PyTorch's deprecated rule does (0 for
    0-, 1- and 3-d inputs, else 1) and warns (UserWarning); pass ``dim``.

    Raises:
        IndexError: ``dim`` out of range. RuntimeError: a bool/integer/complex input without a
            floating ``dtype``, or a non-floating ``dtype``.
    """
    tensor, dim, dtype = _softmax_args("softmax", input, dim, _stacklevel, dtype)
    return _functional.softmax(tensor, dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: _dtype.dtype | None = None) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, computed stably; arguments as :func:`softmax`."""
    tensor, dim, dtype = _softmax_args("log_softmax", input, dim, _stacklevel, dtype)
    return _functional.log_softmax(tensor, dim, dtype)


def _int_sequence(value, op: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{op}(): argument '{name}' must be a tuple of ints (e.g. x.shape[-1:]), "
                        f"not {type(value).__name__}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"{op}(): argument '{name}' must be a tuple of ints, but found "
                            f"element of type {type(item).__name__} in {value!r}")
    return tuple(int(item) for item in value)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing dims ``normalized_shape`` (a tuple or list of ints, e.g.
    ``x.shape[-1:]``): ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased
    variance; ``weight`` and ``bias`` (shape ``normalized_shape``) are optional. The result has
    the input's dtype; float16/bfloat16 compute in float32 and round once. On cpu a
    float16/bfloat16 input also takes float32 ``weight`` and ``bias``, as PyTorch's cpu kernel
    does; on an accelerator they must have the input's dtype (PyTorch's CUDA kernel raises).

    Raises:
        TypeError: a ``normalized_shape`` that is not a tuple/list of ints (a bare int too, as
            in PyTorch), non-Tensor operands, a non-number ``eps``.
        RuntimeError: an empty ``normalized_shape``, an input whose trailing dims differ from
            it, a weight/bias of another shape or dtype, a non-floating input, tensors on
            different devices.
    """
    # the usual call (a transformer's, every step) checked without a Python frame: tensors,
    # one int in a tuple, a float eps; anything else takes the checks below
    if type(input) is Tensor and type(eps) is float and type(weight) is type(bias) is Tensor \
            and type(normalized_shape) is tuple and len(normalized_shape) == 1 \
            and type(normalized_shape[0]) is int:
        return _layer_norm(input, normalized_shape, weight, bias, eps)
    tensor = _tensor(input, "layer_norm", "input", 1)
    shape = _int_sequence(normalized_shape, "layer_norm", "normalized_shape")
    weight = _optional_tensor(weight, "layer_norm", "weight", 3)
    bias = _optional_tensor(bias, "layer_norm", "bias", 4)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"layer_norm(): argument 'eps' must be a float, not "
                        f"{type(eps).__name__}")
    return _layer_norm(tensor, shape, weight, bias, float(eps))


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` (a fresh mask per call, and per replay inside a
    graph) and scale the others by ``1 / (1 - p)``. ``training=False``, ``p=0`` or an empty
    input return ``input`` itself, as PyTorch does; ``p=1`` gives ``input * 0`` (zeros, NaN for
    NaN/inf). ``inplace=True`` writes into ``input`` and returns it. The mask is
    ``rand(input.shape, dtype=float32) >= p`` from the device's generator: after
    ``tp.manual_seed(s)`` it is the same on cpu, sim and cuda.

    Raises:
        TypeError: ``p`` not a real number, a non-Tensor input.
        ValueError: ``p`` outside ``[0, 1]`` ("dropout probability has to be between 0 and 1").
        RuntimeError: ``p`` NaN; for ``0 < p < 1`` in training, a non-floating input.
    """
    if not isinstance(p, numbers.Real):
        raise TypeError(f"dropout(): argument 'p' must be float, not {type(p).__name__}")
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p != p:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    tensor = _tensor(input, "dropout", "input", 1)
    return _normalization.dropout(tensor, float(p), bool(training), bool(inplace))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 tensor of shape ``tensor.shape + (num_classes,)`` with a 1 at each value's class.

    ``num_classes=-1`` infers ``tensor.max() + 1``: that reads the values on the host (waits
    for the device; NOT capture-safe). With ``num_classes`` given it is capture-safe and, on an
    accelerator, reads nothing and so checks no value: a value outside ``[0, num_classes)``
    gives a row of zeros there (PyTorch's CUDA fires a device-side assert). cpu checks values.

    Raises:
        TypeError: a non-Tensor, a non-int ``num_classes``.
        RuntimeError: a tensor that is not int64; negative values or values
            ``>= num_classes`` (where checked, above); an empty tensor with
            ``num_classes <= 0``; on an accelerator ``num_classes < 1`` (other than -1).
    """
    tensor = _tensor(tensor, "one_hot", "tensor", 1)
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
        raise TypeError(f"one_hot(): argument 'num_classes' must be int, not "
                        f"{type(num_classes).__name__}")
    return _normalization.one_hot(tensor, int(num_classes))


def tanh(input: Tensor) -> Tensor:
    """Elementwise ``tanh`` (``torch.nn.functional.tanh``)."""
    return _functional.tanh(_tensor(input, "tanh", "input", 1))


def sigmoid(input: Tensor) -> Tensor:
    """Elementwise ``1 / (1 + exp(-x))`` (``torch.nn.functional.sigmoid``)."""
    return _functional.sigmoid(_tensor(input, "sigmoid", "input", 1))


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed stably as ``min(x, 0) - log1p(exp(-|x|))`` (no overflow for
    large ``|x|``); its gradient is ``sigmoid(-x)``, also at ``x = 0``.

    Raises:
        RuntimeError: a bool/integer input.
    """
    tensor = _tensor(input, "logsigmoid", "input", 1)
    _floating("log_sigmoid_forward", tensor)
    return _log_sigmoid(tensor)


def _log_sigmoid(x: Tensor) -> Tensor:
    # min(x, 0) written as (x - |x|) / 2: its derivative at 0 is 1/2 (with sign(0) = 0), which
    # with the log1p term's 0 gives sigmoid(-0) = 1/2 exactly; clamp(max=0) would give 1 there
    magnitude = x.abs()
    return (x - magnitude) * 0.5 - (-magnitude).exp().log1p()


# -- embedding ------------------------------------------------------------------------------------
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` (``(num_embeddings, embedding_dim)``) picked by the indices ``input``
    (int64 or int32, any shape): the result has shape ``input.shape + (embedding_dim,)``.

    The gradient of ``weight`` adds up the gradients of every lookup of a row (an index that
    appears twice gets both). ``padding_idx`` (negative counts from the end): lookups of that row
    return it as it is but send it no gradient, so it stays what it is (``nn.Embedding`` zeroes
    it at init). ``max_norm``: before the lookup, each looked-up row whose ``norm_type``-norm
    exceeds ``max_norm`` is scaled in place (under no_grad) to norm ``max_norm``, as PyTorch.

    Indices are not range-checked on an accelerator (no host read); cpu raises IndexError.
    Pitfall (as PyTorch): ``max_norm`` changes ``weight`` in place, so a graph that saved
    ``weight`` before this call (a tied output projection computed first) fails at backward;
    compute the lookup first, or pass a clone.

    Raises:
        RuntimeError: indices that are not int64/int32; a weight that is not 2-D.
        AssertionError: ``padding_idx`` outside ``[-num_embeddings, num_embeddings)`` (PyTorch's
            type for it).
        NotImplementedError: ``scale_grad_by_freq=True`` or ``sparse=True``.
    """
    indices = _tensor(input, "embedding", "input", 1)
    weight = _tensor(weight, "embedding", "weight", 2)
    if indices.dtype is not _dtype.int64 and indices.dtype is not _dtype.int32:
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {indices.dtype.name} "
                           f"instead (while checking arguments for embedding)")
    if weight.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got a weight of shape {tuple(weight.shape)}")
    rows = weight.shape[0]
    if padding_idx is not None:
        padding_idx = int(padding_idx)
        if not -rows <= padding_idx < rows:
            raise AssertionError(f"Padding_idx must be within num_embeddings: got "
                                 f"padding_idx={padding_idx} for {rows} embeddings")
        padding_idx %= rows
    if scale_grad_by_freq:
        raise NotImplementedError("embedding(scale_grad_by_freq=True) is not supported by "
                                  "tensorplay yet; scale the gradient after backward instead")
    if sparse:
        raise NotImplementedError("embedding(sparse=True): tensorplay has no sparse gradients; "
                                  "use sparse=False (a dense gradient)")
    flat = indices.reshape(-1)
    if max_norm is not None:
        _embedding_renorm_(weight, flat, float(max_norm), float(norm_type))
    looked_up = weight.index_select(0, flat)
    if padding_idx is not None and looked_up._ag is not None:
        # the padding rows keep their values but pass no gradient: where() routes the
        # gradient of those positions to a detached copy
        keep = (flat != padding_idx).unsqueeze(1)
        looked_up = _functional.where(keep, looked_up, looked_up.detach())
    return looked_up.reshape(*indices.shape, weight.shape[1])


def _embedding_renorm_(weight: Tensor, flat: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale the rows ``flat`` of ``weight`` whose norm exceeds ``max_norm`` down to norm
    ``max_norm`` (PyTorch's ``embedding_renorm_``: ``row * max_norm / (norm + 1e-7)``), on the
    device: a row looked up twice is written twice with the same value."""
    with _autograd.no_grad():
        rows = weight.index_select(0, flat)
        norms = rows.norm(norm_type, dim=1, keepdim=True)
        scale = _functional.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight.index_copy_(0, flat, rows * scale.to(weight.dtype))


# -- losses ---------------------------------------------------------------------------------------
_REDUCTIONS = ("none", "mean", "sum")


def _legacy_reduction(size_average, reduce) -> str:
    """PyTorch's mapping of the deprecated ``size_average``/``reduce`` pair (either given) to a
    ``reduction``, with its warning."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", UserWarning, stacklevel=3)
    return reduction


def _reduction(reduction, size_average=None, reduce=None) -> str:
    if size_average is not None or reduce is not None:
        return _legacy_reduction(size_average, reduce)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use "
                      "reduction='mean' instead.", UserWarning, stacklevel=3)
        return "mean"
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction: use 'none', 'mean' "
                         f"or 'sum'")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    """The mean of an empty loss is NaN, as PyTorch's (without NumPy's empty-mean warning)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if loss.numel() == 0:
        return loss.sum() / 0
    return loss.mean()


def _warn_target_size(target: Tensor, input: Tensor, stacklevel: int) -> None:
    """PyTorch's warning for a loss whose target and input shapes differ (they broadcast);
    ``stacklevel`` as ``warnings.warn`` takes it, counted from the caller."""
    warnings.warn(f"Using a target size ({target.shape!s}) that is different to the input "
                  f"size ({input.shape!s}). This will likely lead to incorrect results due "
                  f"to broadcasting. Please ensure they have the same size.", UserWarning,
                  stacklevel=stacklevel + 1)


def _pointwise_loss(op: str, input, target, reduction: str, size_average, reduce,
                    form) -> Tensor:
    input = _tensor(input, op, "input", 1)
    target = _tensor(target, op, "target", 2)
    if tuple(target.shape) != tuple(input.shape):
        _warn_target_size(target, input, 3)
    reduction = _reduction(reduction, size_average, reduce)
    difference = input - target
    _floating(op, difference)
    return _reduce(form(difference), reduction)


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """``(input - target) ** 2``, reduced by ``reduction`` (``'mean'``: over every element;
    ``'sum'``; ``'none'``: the elementwise losses). Shapes broadcast, with PyTorch's warning when
    they differ (usually a bug: a ``(N, 1)`` prediction against a ``(N,)`` target gives
    ``(N, N)``). ``size_average``/``reduce`` are PyTorch's deprecated spellings of
    ``reduction``. The mean of an empty input is NaN.

    Raises:
        ValueError: an unknown ``reduction``. RuntimeError: shapes that do not broadcast; a
            bool/integer result dtype ("not implemented for int64").
    """
    input = _tensor(input, "mse_loss", "input", 1)
    target = _tensor(target, "mse_loss", "target", 2)
    reduction = _reduction(reduction, size_average, reduce)
    if target._data.shape != input._data.shape:
        _warn_target_size(target, input, 2)
    _floating("mse_loss", input, input._dtype if input._dtype is target._dtype else
              _dtype.result_type(input, target))
    return _normalization.mse_loss(input, target, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
            reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """``|input - target|``, reduced as :func:`mse_loss`; its gradient at ``input == target``
    is 0 (``sign(0)``), as PyTorch's."""
    return _pointwise_loss("l1_loss", input, target, reduction, size_average, reduce,
                           lambda d: d.abs())


def _check_class_weight(op: str, weight: Tensor | None, input: Tensor, classes: int) -> None:
    if weight is None:
        return
    if weight.ndim != 1 or weight.shape[0] != classes:
        raise RuntimeError(f"{op}: weight tensor should be defined either for all {classes} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"{op}: expected weight of the input's dtype {input.dtype.name}, "
                           f"but found {weight.dtype.name}")


def _check_class_target(op: str, input: Tensor, target: Tensor) -> None:
    """PyTorch's shape and dtype checks of class-index targets (``nll_loss_nd``)."""
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if target.dtype is not _dtype.int64:
        raise RuntimeError(f"{op}: expected target of scalar type Long (int64 class indices) "
                           f"but found {target.dtype.name}; convert with .long(), or pass "
                           f"class probabilities of the input's shape")
    if input.ndim == 1:
        if target.ndim != 0:
            raise RuntimeError(f"size mismatch (got input: {list(input.shape)}, target: "
                               f"{list(target.shape)}): an input of shape (C,) takes a 0-d "
                               f"target")
        return
    if target.ndim == 0 or target.shape[0] != input.shape[0]:
        got = "a 0-d target" if target.ndim == 0 else target.shape[0]
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({got}).")
    if input.ndim == 2 and target.ndim != 1:
        raise RuntimeError(f"0D or 1D target tensor expected, multi-target not supported (got "
                           f"target of shape {list(target.shape)} for input of shape "
                           f"{list(input.shape)})")
    if tuple(target.shape[1:]) != tuple(input.shape[2:]):
        expected = [input.shape[0]] + list(input.shape[2:])
        raise RuntimeError(f"Expected target size {expected}, got {list(target.shape)}")


def _class_weights(target: Tensor, valid: Tensor, safe: Tensor, weight: Tensor | None,
                   dtype: _dtype.dtype) -> Tensor:
    """Each target's weight: ``weight[target]``, 0 where ignored (``valid`` is False)."""
    if weight is None:
        return valid.to(dtype)
    return weight.index_select(0, safe.reshape(-1)).reshape(target.shape) * valid


def _nll(log_probs: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int,
         reduction: str) -> Tensor:
    """The checked ``nll_loss``: ``-log_probs[n, target[n], ...]`` times the target's weight,
    0 for ignored targets; ``'mean'`` divides by the summed weights of the targets kept."""
    class_dim = 0 if log_probs.ndim == 1 else 1
    ignored = target == ignore_index
    valid = ignored.logical_not()
    safe = target.masked_fill(ignored, 0)   # an index gather can read for every position
    picked = log_probs.gather(class_dim, safe.unsqueeze(class_dim)).squeeze(class_dim)
    picked = picked.masked_fill(ignored, 0)
    weights = _class_weights(target, valid, safe, weight, log_probs.dtype)
    loss = -picked if weight is None else -(picked * weights)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / weights.sum()


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """The negative log likelihood of class indices: ``input`` holds log-probabilities of shape
    ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``; ``target`` int64 class indices of shape ``()``,
    ``(N,)`` or ``(N, d1, ...)``. Each position's loss is ``-weight[t] * input[n, t, ...]`` with
    ``t = target[n, ...]``, and 0 where ``t == ignore_index``.

    ``'mean'`` divides the sum by the summed weights of the targets not ignored (their count
    without ``weight``): NaN when every target is ignored, as PyTorch. ``'sum'``; ``'none'``
    (shape of ``target``). Index values are not checked on an accelerator (see the module
    docstring).

    Raises:
        ValueError: a 0-d input; batch sizes that differ; an unknown ``reduction``.
        RuntimeError: a target that is not int64; target dims that do not match the input's;
            a ``weight`` that is not ``(C,)`` or not of the input's dtype.
    """
    input = _tensor(input, "nll_loss", "input", 1)
    target = _tensor(target, "nll_loss", "target", 2)
    weight = _optional_tensor(weight, "nll_loss", "weight", 3)
    reduction = _reduction(reduction, size_average, reduce)
    _check_class_target("nll_loss", input, target)
    _check_class_weight("nll_loss", weight, input, input.shape[0 if input.ndim == 1 else 1])
    return _nll(input, target, weight, int(ignore_index), reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100,
                  reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """The cross entropy between ``log_softmax(input)`` over the class dim and ``target``.

    ``input``: unnormalized logits of shape ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)`` (the
    class dim is 1, or 0 for a 1-d input). ``target`` is either

    - int64 class indices of shape ``()``, ``(N,)`` or ``(N, d1, ...)`` (a shape other than the
      input's): as :func:`nll_loss` of the log-softmax, with ``weight``, ``ignore_index`` and
      ``'mean'`` dividing by the summed weights of the targets kept; or
    - class probabilities, a floating tensor of the input's shape: the loss is
      ``-sum_c weight[c] * target[c] * log_softmax(input)[c]``; ``ignore_index`` is not
      supported, and ``'mean'`` divides by the number of positions ``N * d1 * ...`` (not by
      the weights), as PyTorch.

    ``label_smoothing`` (in ``[0, 1]``) mixes the target with the uniform distribution:
    ``(1 - s) * target + s / C``. For class indices that is PyTorch's
    ``(1 - s) * nll + s / C * smooth`` with ``smooth = -sum_c weight[c] * log_softmax[c]``,
    0 at ignored positions and, for ``'mean'``, divided by the same denominator as the nll.

    Raises:
        ValueError: an unknown ``reduction``; batch sizes that differ.
        RuntimeError: class-index targets that are not int64 or whose dims do not match;
            probability targets that are not floating, or with ``ignore_index >= 0``;
            ``label_smoothing > 1``; a ``weight`` that is not ``(C,)`` of the input's dtype.
    """
    input = _tensor(input, "cross_entropy", "input", 1)
    target = _tensor(target, "cross_entropy", "target", 2)
    weight = _optional_tensor(weight, "cross_entropy", "weight", 3)
    reduction = _reduction(reduction, size_average, reduce)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"cross_entropy(): argument 'label_smoothing' must be float, not "
                        f"{type(label_smoothing).__name__}")
    label_smoothing = float(label_smoothing)
    ignore_index = int(ignore_index)
    if label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")
    if input.ndim == 0:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    _floating("cross_entropy", input)
    if tuple(target.shape) == tuple(input.shape):
        if not target.dtype.is_floating_point:
            raise RuntimeError(f"Expected floating point type for target with class "
                               f"probabilities, got {target.dtype.name}")
        if ignore_index >= 0:
            raise RuntimeError(f"ignore_index is not supported for floating point target "
                               f"(got ignore_index={ignore_index})")
        _check_class_weight("cross_entropy", weight, input, classes)
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing,
                                   class_dim)
    _check_class_target("cross_entropy", input, target)
    _check_class_weight("cross_entropy", weight, input, classes)
    log_probs = _functional.log_softmax(input, class_dim)
    loss = _nll(log_probs, target, weight, ignore_index, reduction)
    if label_smoothing <= 0.0:
        return loss
    if weight is not None:
        smooth = -(log_probs * _along_class_dim(weight, input.ndim)).sum(class_dim)
    else:
        smooth = -log_probs.sum(class_dim)
    ignored = target == ignore_index
    smooth = smooth.masked_fill(ignored, 0)
    if reduction == "sum":
        smooth = smooth.sum()
    elif reduction == "mean":
        valid = ignored.logical_not()
        safe = target.masked_fill(ignored, 0)
        smooth = smooth.sum() / _class_weights(target, valid, safe, weight, input.dtype).sum()
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


def _along_class_dim(weight: Tensor, ndim: int) -> Tensor:
    """``weight`` (C,) shaped to broadcast along dim 1 of an ``ndim``-d input (as is for 1-d)."""
    if ndim <= 1:
        return weight
    return weight.reshape((1, weight.shape[0]) + (1,) * (ndim - 2))


def _soft_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                        label_smoothing: float, class_dim: int) -> Tensor:
    classes = input.shape[class_dim]
    log_probs = _functional.log_softmax(input, class_dim)
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = log_probs * target
    if weight is not None:
        terms = terms * _along_class_dim(weight, input.ndim)
    if reduction == "none":
        return -terms.sum(class_dim)
    total = -terms.sum()
    if reduction == "sum":
        return total
    if input.numel() == 0:
        return total / 0   # NaN, as PyTorch's mean over no positions
    return total / (input.numel() // classes)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None,
                                     size_average: bool | None = None,
                                     reduce: bool | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """The binary cross entropy of ``sigmoid(input)`` against ``target`` (probabilities of the
    input's shape), from the logits in a stable form (no ``log(0)``, no overflow):
    ``(1 - t) * x - (1 + (pos_weight - 1) * t) * logsigmoid(x)``, times ``weight``
    (broadcast to the input), reduced by ``reduction``. ``pos_weight`` weighs the positive
    term of each class (broadcast along the last dim: shape ``(C,)`` for an ``(N, C)`` input).

    Raises:
        ValueError: a target of another shape than the input's; an unknown ``reduction``.
        RuntimeError: a non-floating input or target; shapes of ``weight``/``pos_weight``
            that do not broadcast.
    """
    input = _tensor(input, "binary_cross_entropy_with_logits", "input", 1)
    target = _tensor(target, "binary_cross_entropy_with_logits", "target", 2)
    weight = _optional_tensor(weight, "binary_cross_entropy_with_logits", "weight", 3)
    pos_weight = _optional_tensor(pos_weight, "binary_cross_entropy_with_logits", "pos_weight",
                                  7)
    reduction = _reduction(reduction, size_average, reduce)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.shape!s}) must be the same as input size "
                         f"({input.shape!s})")
    _floating("binary_cross_entropy_with_logits", input)
    _floating("binary_cross_entropy_with_logits", target)
    log_sigmoid = _log_sigmoid(input)
    if pos_weight is not None:
        log_sigmoid = log_sigmoid * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input - log_sigmoid
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(query @ key^T * scale + bias) @ value`` over the last two dimensions, with
    ``torch.nn.functional.scaled_dot_product_attention``'s semantics.

    ``query`` is ``(..., L, E)``, ``key`` ``(..., S, E)``, ``value`` ``(..., S, Ev)``; the result
    is ``(..., L, Ev)``. ``scale`` defaults to ``1 / sqrt(E)``. ``attn_mask``, broadcast to
    ``(..., L, S)``: a bool mask keeps the positions where it is True (the others get ``-inf``),
    any other dtype is added to the scores. ``is_causal=True`` keeps key ``j`` for query ``i``
    when ``j <= i``, aligned at the top left as PyTorch's (so with a single query only key 0 is
    kept: for decoding with a cache, pass an explicit mask instead). ``dropout_p`` drops
    attention weights (always, as PyTorch's function does: pass 0 when evaluating).
    ``enable_gqa=True`` lets ``key`` and ``value`` have fewer heads (dimension -3) than
    ``query``, each shared by ``query``'s heads in groups.

    Which path runs:

    - ONE op (one node of a captured graph) for 4-D operands when no gradient is recorded and
      ``dropout_p`` is 0. On cuda, for float16, bfloat16 and float32: with at most 16 query
      rows (the decode step) a kernel that splits the keys into chunks (online softmax, a
      second small kernel combining the chunks, flash-decoding style), for head dimensions up
      to 256; with 64 or more query rows, no ``attn_mask`` (causal or not), as many key heads
      as query heads and at most 1024 keys, three launches: the float32 scores of every head
      in one batched cuBLASLt product, one softmax kernel (scale and causal cut inside), and
      the product with the values (``B*H*L*S`` float32 scores of scratch memory); other
      prompts a tiled kernel (flash-attention style: tiles of keys and values in shared
      memory, online softmax, the scores never written out), for head dimensions up to 128.
      The three launches are one op all the same (one call of the backend's hook; captured,
      three nodes). Elsewhere, and for float64 or wider heads, the same formula
      from the backend's array calls in that one launch (the scores in float32).
    - otherwise the composed ops on every backend (products, ``masked_fill`` or an add,
      ``softmax``, products), so it works under autograd too.

    Both work eagerly and inside graphs; a row whose every key is masked gives NaN, as
    PyTorch's math path does. The one-op result is laid out in memory as ``(B, L, H, Ev)``
    (PyTorch's flash kernels lay theirs out so): merging the heads back into rows,
    ``out.transpose(1, 2).reshape(B, L, H * Ev)``, is a view, not a copy; ``view`` across the
    heads of the ``(B, H, L, Ev)`` result itself needs ``contiguous()`` first, as in PyTorch.

    Raises:
        RuntimeError: query, key and value of different dtypes; both ``attn_mask`` and
            ``is_causal``; head counts that ``enable_gqa`` cannot group (or differ without it);
            an embedding size that differs between query and key.
        TypeError: a non-Tensor argument.
    """
    # the hot path (a decode step's attention, every layer and token): a signature the one-op
    # path took before, checked then; only the gradient question is asked again. ``signature``
    # is None for a call whose arguments cannot key the table.
    signature = (
        query._layout or layout_of(query), key._layout or layout_of(key),
        value._layout or layout_of(value),
        None if attn_mask is None else attn_mask._layout or layout_of(attn_mask),
        is_causal, scale, enable_gqa) \
        if type(query) is Tensor and type(key) is Tensor and type(value) is Tensor and \
        (attn_mask is None or type(attn_mask) is Tensor) and dropout_p == 0.0 and \
        (scale is None or type(scale) is float) and type(is_causal) is bool else None
    if signature is not None:
        factor = _fused_attention_calls.get(signature)
        if factor is not None and (not _autograd.grad_mode.enabled or (
                query._ag is key._ag is value._ag is None and
                (attn_mask is None or attn_mask._ag is None))):
            for tensor in (query, key, value):
                if tensor._guard is not None:
                    tensor._check_guard()
            return _attention.attention(query, key, value, attn_mask, factor, is_causal)
    query = _tensor(query, "scaled_dot_product_attention", "query", 1)
    key = _tensor(key, "scaled_dot_product_attention", "key", 2)
    value = _tensor(value, "scaled_dot_product_attention", "value", 3)
    if not (query.dtype is key.dtype is value.dtype):
        raise RuntimeError(f"scaled_dot_product_attention: Expected query, key, and value to "
                           f"have the same dtype, but got query.dtype: {query.dtype.name} "
                           f"key.dtype: {key.dtype.name} and value.dtype: {value.dtype.name} "
                           f"instead.")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention: query and key must have the same "
                           f"embedding size, got {query.shape[-1]} and {key.shape[-1]}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if kv_heads == 0 or heads % kv_heads or value.shape[-3] != kv_heads:
            raise RuntimeError(f"scaled_dot_product_attention: with enable_gqa, query's heads "
                               f"({heads}) must be a multiple of key's and value's "
                               f"({kv_heads}, {value.shape[-3]})")
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if dropout_p == 0.0 and _fused_attention_applies(query, key, value, attn_mask, enable_gqa):
        if attn_mask is not None:
            attn_mask = _tensor(attn_mask, "scaled_dot_product_attention", "attn_mask", 4)
        if signature is not None:
            _dispatch.remember(_fused_attention_calls, signature, factor)
        return _attention.attention(query, key, value, attn_mask, factor, is_causal)
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        groups = query.shape[-3] // key.shape[-3]
        key, value = _share_heads(key, groups), _share_heads(value, groups)
    length, source = query.shape[-2], key.shape[-2]
    scores = (query @ key.mT) * factor
    if is_causal:
        future = _creation.ones(length, source, dtype=_dtype.bool, device=query.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    elif attn_mask is not None:
        attn_mask = _tensor(attn_mask, "scaled_dot_product_attention", "attn_mask", 4)
        if attn_mask.dtype is _dtype.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


#: (the Layouts of query, key, value and mask, is_causal, scale, enable_gqa) -> the scale
#: factor, for the calls that took the one-op path (which the Layouts decide, but for the
#: gradient question)
_fused_attention_calls: dict = {}


def _fused_attention_applies(query: Tensor, key: Tensor, value: Tensor, mask,
                             enable_gqa: bool) -> bool:
    """Whether ``scaled_dot_product_attention`` takes the one-kernel op: 4-D operands of one
    float dtype on one device, at least one query row, nothing empty,
    values as wide as the keys, as many key heads as the query's (or, with ``enable_gqa``, a
    divisor of them), a bool mask or one of the query's dtype broadcastable to the scores, and
    no gradient to record."""
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        return False
    batch, heads, length, dim = query.shape
    if length == 0 or not query.dtype.is_floating_point or \
            key.shape != value.shape or key.shape[0] != batch or key.shape[3] != dim or \
            heads % max(key.shape[1], 1) or 0 in key.shape or dim == 0 or \
            (key.shape[1] != heads and not enable_gqa):
        return False
    device = query.device
    if key.device != device or value.device != device:
        return False
    operands: tuple[Tensor, ...] = (query, key, value)
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.device != device or mask.ndim > 4 or not (
                mask.dtype is _dtype.bool or mask.dtype is query.dtype):
            return False
        scores = (batch, heads, length, key.shape[2])
        if any(n not in (1, m) for n, m in zip(mask.shape[::-1], scores[::-1])):
            return False
        operands += (mask,)
    return not (_autograd.is_grad_enabled() and any(t.requires_grad for t in operands))


def _share_heads(tensor: Tensor, groups: int) -> Tensor:
    """``tensor.repeat_interleave(groups, dim=-3)`` as a broadcast and one reshape."""
    shape = tuple(tensor.shape)
    spread = tensor.unsqueeze(-3).expand(*shape[:-2], groups, *shape[-2:])
    return spread.reshape(*shape[:-3], shape[-3] * groups, *shape[-2:])
