"""``tensorplay.nn.functional``: the functional ops models are made of, with PyTorch's names,
signatures, result dtypes and exception types (``import tensorplay.nn.functional as F``).

``linear relu gelu silu softmax log_softmax layer_norm dropout one_hot``. Each function here
checks its arguments as PyTorch does and calls the one implementation in ``tensorplay._tensor``
(``linalg.linear``; ``activations``; ``normalization`` for ``layer_norm``, ``dropout``,
``one_hot`` and in-place ``silu``).

Inside a captured graph (``tensorplay.accelerator.Graph``) every function here records device
work only, so replays are cheap and correct, except ``one_hot(t)`` without ``num_classes``: it
reads ``t.max()`` on the host, which a capture cannot do (RuntimeError, the capture is
invalidated). ``dropout`` draws its mask from the device's generator as the kernel runs: every
replay drops a fresh set of elements.

Exception types follow PyTorch, so they differ in places from the ``tensorplay.*`` functions of
the same name: ``F.gelu``/``F.silu``/``F.softmax``/``F.log_softmax`` raise RuntimeError for a
bool/integer input (``tp.gelu`` raises TypeError), and ``F.gelu`` raises RuntimeError for an
unknown ``approximate`` (``tp.gelu``: ValueError).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from .. import _dtype
from .._tensor import activations as _activations, linalg as _linalg
from .._tensor import normalization as _normalization
from .._tensor.tensor import Tensor

__all__ = ["linear", "relu", "gelu", "silu", "softmax", "log_softmax", "layer_norm", "dropout",
           "one_hot"]


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
    return _linalg.linear(input, weight, bias)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``, keeping the dtype (integers too); ``inplace=True`` writes into ``input``
    and returns it.

    Raises:
        RuntimeError: a bool or complex input.
    """
    return _activations.relu_(input) if inplace else _activations.relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``: the exact form with ``erf`` (``approximate="none"``) or PyTorch's tanh
    approximation (``"tanh"``). float16/bfloat16 compute in float32 and round once.

    Raises:
        TypeError: ``approximate`` not a str. RuntimeError: ``approximate`` other than "none"
            or "tanh"; a bool/integer/complex input.
    """
    if type(input) is Tensor and input._dtype.is_floating_point and (
            approximate == "none" or approximate == "tanh"):
        return _activations.gelu(input, approximate)
    if not isinstance(approximate, str):
        raise TypeError(f"gelu(): argument 'approximate' must be str, not "
                        f"{type(approximate).__name__}")
    if approximate != "none" and approximate != "tanh":
        raise RuntimeError(f"approximate argument must be either none or tanh, got "
                           f"{approximate!r}")
    _floating("gelu", _tensor(input, "gelu", "input", 1))   # a subclass passes
    return _activations.gelu(input, approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``; ``inplace=True`` writes into ``input`` and returns it.

    Raises:
        RuntimeError: a bool/integer input.
    """
    tensor = _tensor(input, "silu", "input", 1)
    if not tensor.dtype.is_complex:
        _floating("silu", tensor)
    return _normalization.silu_(input) if inplace else _activations.silu(input)


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
    return _activations.softmax(tensor, dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: _dtype.dtype | None = None) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, computed stably; arguments as :func:`softmax`."""
    tensor, dim, dtype = _softmax_args("log_softmax", input, dim, _stacklevel, dtype)
    return _activations.log_softmax(tensor, dim, dtype)


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
    tensor = _tensor(input, "layer_norm", "input", 1)
    shape = _int_sequence(normalized_shape, "layer_norm", "normalized_shape")
    weight = _optional_tensor(weight, "layer_norm", "weight", 3)
    bias = _optional_tensor(bias, "layer_norm", "bias", 4)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"layer_norm(): argument 'eps' must be a float, not "
                        f"{type(eps).__name__}")
    return _normalization.layer_norm(tensor, shape, weight, bias, float(eps))


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
    return _normalization.dropout(_tensor(input, "dropout", "input", 1), float(p),
                                  bool(training), bool(inplace))


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
