"""``tensorplay.nn.init``: PyTorch's parameter initializations, by name, formula and default.

Each function fills its tensor in place under ``no_grad`` (so it works on parameters that require
grad) and returns it. Random ones draw from the tensor's device generator, or from
``generator=``: after ``tp.manual_seed(s)`` the same shape gives the same uniforms on cpu and on
every accelerator (counter-based generators), so a model initializes identically wherever it is
built. The values are NOT those ``torch`` draws for the same seed (another generator); the
distributions are the same.

Pitfalls, as in PyTorch: the fan of a tensor is ``size(1) * prod(size[2:])`` (fan in) and
``size(0) * prod(size[2:])`` (fan out), so a ``Linear`` weight ``(out, in)`` has fan in ``in``;
1-d tensors have no fan (ValueError). A tensor with no elements is left as it is, with a
warning.
"""

from __future__ import annotations

import math
import numbers
import warnings

from .._tensor import autograd as _autograd
from .._tensor.creation import eye as _eye
from .._tensor.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_"]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity: 1 for linear/conv/sigmoid, 5/3 for tanh,
    sqrt(2) for relu, ``sqrt(2 / (1 + slope**2))`` for leaky_relu (``param``: the negative
    slope, default 0.01), 3/4 for selu.

    Raises:
        ValueError: an unknown nonlinearity, or a leaky_relu slope that is not a number.
    """
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, numbers.Real):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}: use one of "
                     f"{', '.join(_LINEAR)}, sigmoid, tanh, relu, leaky_relu, selu")


def _check(tensor, name: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init.{name}(): tensor must be a tensorplay.Tensor, got "
                        f"{type(tensor).__name__}")
    return tensor


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError(f"Fan in and fan out can not be computed for tensor with fewer than 2 "
                         f"dimensions (got shape {tuple(tensor.shape)})")
    receptive = 1
    for size in tensor.shape[2:]:
        receptive *= size
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with uniform numbers in ``[a, b)``."""
    _check(tensor, "uniform_")
    with _autograd.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with normal numbers of mean ``mean`` and standard deviation ``std``."""
    _check(tensor, "normal_")
    with _autograd.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """Fill with a normal distribution of mean ``mean`` and std ``std`` truncated to
    ``[a, b]`` (``a``, ``b`` are absolute bounds, not in stds): inverse-CDF sampling of
    uniforms, as PyTorch. Warns when ``mean`` is more than 2 std outside ``[a, b]``."""
    _check(tensor, "trunc_normal_")

    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    with _autograd.no_grad():
        low = norm_cdf((a - mean) / std)
        high = norm_cdf((b - mean) / std)
        tensor.uniform_(2 * low - 1, 2 * high - 1, generator=generator)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.0))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
        return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with the value ``val``."""
    _check(tensor, "constant_")
    with _autograd.no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    _check(tensor, "zeros_")
    with _autograd.no_grad():
        return tensor.zero_()


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-d tensor with the identity (ones on the diagonal, zeros elsewhere).

    Raises:
        ValueError: a tensor that is not 2-d.
    """
    _check(tensor, "eye_")
    if tensor.ndim != 2:
        raise ValueError(f"Only tensors with 2 dimensions are supported (got shape "
                         f"{tuple(tensor.shape)})")
    with _autograd.no_grad():
        return tensor.copy_(_eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype,
                                device=tensor.device))


def _empty_noop(tensor: Tensor) -> bool:
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    _check(tensor, "xavier_uniform_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot normal: ``N(0, std**2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    _check(tensor, "xavier_normal_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He uniform: ``U(-bound, bound)`` with ``bound = gain * sqrt(3 / fan)``, ``gain =
    calculate_gain(nonlinearity, a)`` and ``fan`` by ``mode`` (``fan_in`` or ``fan_out``).
    ``nn.Linear`` uses ``a=sqrt(5)``, which makes the bound ``1 / sqrt(fan_in)``."""
    _check(tensor, "kaiming_uniform_")
    if _empty_noop(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He normal: ``N(0, std**2)`` with ``std = gain / sqrt(fan)``, arguments as
    :func:`kaiming_uniform_`."""
    _check(tensor, "kaiming_normal_")
    if _empty_noop(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)
