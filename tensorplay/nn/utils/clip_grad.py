"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_``, computed on the device.

Neither reads a value on the host (unless ``error_if_nonfinite=True``), so both can run inside a
captured training step: the clip factor is ``min(1, max_norm / (total_norm + 1e-6))`` as a
device tensor (a clamp, not a Python ``if``), and every gradient is multiplied by it, also when
no clipping is needed (the factor is then exactly 1).
"""

from __future__ import annotations

import math
import numbers
import types
import warnings
from typing import Iterable

from ... import accelerator as _accelerator
from ..._tensor import autograd as _autograd, functional as _functional
from ..._tensor.creation import tensor as _tensor
from ..._tensor.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


def _parameter_list(parameters, op: str) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        return [parameters]
    generator = isinstance(parameters, types.GeneratorType)
    parameters = list(parameters)
    if generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      stacklevel=3)
    for index, item in enumerate(parameters):
        if not isinstance(item, Tensor):
            raise TypeError(f"{op}: parameters must be Tensors, but element {index} is "
                            f"{type(item).__name__}")
    return parameters


def _norm_type(norm_type) -> float:
    if isinstance(norm_type, str):
        if norm_type.lower() != "inf":
            raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
        return math.inf
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real):
        raise TypeError(f"norm_type must be a number or 'inf', got {type(norm_type).__name__}")
    return float(norm_type)


def _capturing() -> bool:
    return _accelerator.is_available() and _accelerator.is_current_stream_capturing()


@_autograd.no_grad()
def get_total_norm(tensors: Tensor | Iterable[Tensor], norm_type: float | str = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """The ``norm_type``-norm of all of ``tensors`` together (as if concatenated into one
    vector), a 0-d tensor on the first tensor's device: the norm of the per-tensor norms.
    ``inf`` (or ``'inf'``): the largest absolute value. No tensors: ``tensor(0.)`` on cpu.

    ``error_if_nonfinite=True`` reads the norm on the host (a synchronization) and raises if it
    is NaN or infinite; inside a graph capture that read is impossible, so it raises at once.
    ``foreach`` is accepted for PyTorch's signature and ignored.

    Raises:
        RuntimeError: a non-finite norm with ``error_if_nonfinite=True``; that flag during a
            capture.
    """
    tensors = _parameter_list(tensors, "get_total_norm")
    norm_type = _norm_type(norm_type)
    if not tensors:
        return _tensor(0.0)
    first = tensors[0].device
    if norm_type == math.inf:
        norms = [t.abs().amax().to(first) for t in tensors]
        total = _functional.stack(norms).amax()
    else:
        norms = [t.norm(norm_type).to(first) for t in tensors]
        total = _functional.stack(norms).norm(norm_type)
    if error_if_nonfinite:
        if _capturing():
            raise RuntimeError("clip_grad_norm_/get_total_norm(error_if_nonfinite=True) reads "
                               "the total norm on the host, which a graph capture cannot do; "
                               "pass error_if_nonfinite=False inside a captured step (and "
                               "check the returned norm after the replay)")
        if not bool(total.isfinite().item()):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                               f"`parameters` is non-finite, so it cannot be clipped. To "
                               f"disable this error and scale the gradients by the non-finite "
                               f"norm anyway, set `error_if_nonfinite=False`")
    return total


@_autograd.no_grad()
def clip_grads_with_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                          total_norm: Tensor, foreach: bool | None = None) -> None:
    """Multiply every ``.grad`` of ``parameters`` by ``min(1, max_norm / (total_norm +
    1e-6))``, computed on the device (no host read)."""
    parameters = _parameter_list(parameters, "clip_grads_with_norm_")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    coefficient = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(coefficient.to(grad.device))


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float | str = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None) -> Tensor:
    """Scale the gradients of ``parameters`` (a tensor or an iterable; those without
    ``.grad`` are skipped) in place so that their total ``norm_type``-norm is at most
    ``max_norm``; returns the total norm BEFORE clipping, as a 0-d tensor on the device.

    The factor is ``min(1, max_norm / (total + 1e-6))``, computed on the device: nothing is
    read on the host, so the call is capturable in a graph and costs no synchronization. A
    NaN/inf total norm gives NaN gradients (``error_if_nonfinite=True`` raises instead, but
    needs a host read, so not inside a capture). ``foreach`` is accepted and ignored.

    Raises:
        RuntimeError: see ``error_if_nonfinite``. TypeError/ValueError: a bad ``norm_type``.
    """
    parameters = _parameter_list(parameters, "clip_grad_norm_")
    grads = [p.grad for p in parameters if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


@_autograd.no_grad()
def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every ``.grad`` of ``parameters`` into ``[-clip_value, clip_value]`` in place."""
    parameters = _parameter_list(parameters, "clip_grad_value_")
    clip_value = float(clip_value)
    for param in parameters:
        if param.grad is not None:
            param.grad.clamp_(min=-clip_value, max=clip_value)
