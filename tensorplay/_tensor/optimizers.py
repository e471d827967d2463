"""Fused optimizer updates: one launch updates a whole buffer of parameters and their state.

``tensorplay.optim`` keeps the parameters of a group, their gradients and their state in flat
buffers where it can; :func:`adam_update_` then updates all of them at once: the backend's one
kernel where it has one (cuda), else the same arithmetic as ``xp`` calls inside one launch. The
step count and a tensor learning rate are read on the device, so a captured update reads what
they hold at each replay and nothing waits for the host.
"""

from __future__ import annotations

from .._runtime import dispatch as _dispatch
from .tensor import Tensor

__all__ = ["adam_update_"]


def _adam_xp(xp, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2,
             eps, weight_decay, decoupled, maximize) -> None:
    """The update as PyTorch's Adam computes it with a Python step count: elementwise in
    float32 (float64 for float64 parameters; float16 and bfloat16 state in float32 too), the
    bias corrections and step size in float64, stored once per array: the cuda kernel's
    arithmetic. The plain Python numbers take the arrays' dtype (NumPy's and CuPy's weak
    scalars), so nothing here copies from the host."""
    wide = "float64" if param.dtype == xp.float64 else "float32"
    t = step.astype("float64")
    rate = lr.astype("float64")
    g = grad.astype(wide)
    if maximize:
        g = -g
    p = param.astype(wide)
    if weight_decay != 0:
        if decoupled:
            p = p * (1 - rate * weight_decay).astype(wide)
        else:
            g = g + weight_decay * p
    m = exp_avg.astype(wide)
    m = m + (1 - beta1) * (g - m)
    v = exp_avg_sq.astype(wide) * beta2 + (1 - beta2) * g * g
    used = v
    if max_exp_avg_sq is not None:
        used = xp.maximum(max_exp_avg_sq.astype(wide), v)
        max_exp_avg_sq[...] = used
    correction1 = 1 - beta1 ** t
    correction2 = xp.sqrt(1 - beta2 ** t)
    denom = xp.sqrt(used) / correction2.astype(wide) + eps
    param[...] = p + (-rate / correction1).astype(wide) * (m / denom)
    exp_avg[...] = m
    exp_avg_sq[...] = v


def adam_update_(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor,
                 max_exp_avg_sq: Tensor | None, step: Tensor, lr: Tensor, *, beta1: float,
                 beta2: float, eps: float, weight_decay: float, decoupled: bool,
                 maximize: bool) -> None:
    """One Adam (``decoupled``: AdamW) update, as ``torch.optim`` computes it, of contiguous
    tensors of one shape, dtype and device, in place: ``param``, ``exp_avg``, ``exp_avg_sq``
    and, for AMSGrad, ``max_exp_avg_sq``. ``step`` (the count after this step) and ``lr`` are
    one-element tensors on that device, read when the update runs.

    Pitfall: no check is made here (the optimizer guarantees the layouts); nothing is recorded
    by autograd (the tensors are leaves updated outside it)."""
    device = param.device
    arrays = (param._data, grad._data, exp_avg._data, exp_avg_sq._data,
              None if max_exp_avg_sq is None else max_exp_avg_sq._data, step._data, lr._data)
    settings = (beta1, beta2, eps, weight_decay, decoupled, maximize)
    backend = _dispatch.backend_of(device)
    fused = _dispatch.hook(backend, "adam_update") if device.type != "cpu" else None
    xp = backend.xp

    def kernel():
        if fused is None or not fused(*arrays, *settings):
            _adam_xp(xp, *arrays, *settings)
    _dispatch.launch(device, _dispatch.named("adam_update", kernel))
