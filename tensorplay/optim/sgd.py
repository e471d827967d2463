"""Stochastic gradient descent (optionally with momentum), as ``torch.optim.SGD``."""

from __future__ import annotations

from typing import Any, Callable

from .._tensor.autograd import no_grad
from .._tensor.pointwise import addcmul
from .._tensor.tensor import Tensor
from .optimizer import Optimizer, ParamsT, refuse_state_in_capture
from ._scalars import check_lr, device_lr

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum, as
    ``torch.optim.SGD``. For each parameter with a gradient, at each step::

        g = -grad if maximize else grad
        if weight_decay != 0:  g = g + weight_decay * param
        if momentum != 0:
            buf = g (a copy)                          at the parameter's first step
            buf = momentum * buf + (1 - dampening) * g    at later steps
            g = g + momentum * buf if nesterov else buf
        param = param - lr * g

    Args:
        params: tensors or parameter groups (dicts), see :class:`Optimizer`.
        lr: learning rate (default 1e-3): a float, or a one-element tensor on the parameters'
            device whose value a captured step reads at every replay.
        momentum: momentum factor (default 0).
        dampening: dampening of momentum (default 0).
        weight_decay: L2 penalty (default 0).
        nesterov: Nesterov momentum (default False; needs momentum > 0 and dampening 0).
        maximize: maximize the objective instead of minimizing (default False).
        foreach, differentiable, fused: accepted for compatibility with PyTorch and kept in
            the groups; the update is always the one described in the package docstring
            (``differentiable=True`` is refused: steps are not recorded by autograd).

    State: ``state[p]["momentum_buffer"]`` when momentum is used, made by the parameter's first
    step; that step must therefore run eagerly, not inside a capture (without momentum, SGD
    has no state and even its first step may be captured).

    Kernels per parameter and step: 1 (the update), +1 with momentum (+1 more with a nonzero
    dampening), +1 for Nesterov, +1 for weight decay, +1 for ``maximize``.

    Raises:
        ValueError: a negative lr, momentum or weight_decay; nesterov without momentum or with
            dampening; a tensor lr of more than one element.
    """

    def __init__(self, params: ParamsT, lr: float | Tensor = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        check_lr(lr)
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if differentiable:
            raise ValueError("differentiable=True is not supported: tensorplay optimizers "
                             "update parameters in place, outside autograd")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD step over every parameter whose ``.grad`` is not None (see the class
        docstring for the update). Reads nothing on the host: capturable once momentum
        buffers exist."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = group["lr"]
        momentum, dampening = group["momentum"], group["dampening"]
        weight_decay, nesterov = group["weight_decay"], group["nesterov"]
        maximize = group["maximize"]
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            one = self._one(p)
            g = -grad if maximize else grad
            if weight_decay != 0:
                g = addcmul(g, p, one, value=weight_decay)
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    refuse_state_in_capture(self, p.device, "the momentum buffer")
                    buf = state["momentum_buffer"] = g.clone() if g is grad else g
                elif dampening == 0:
                    addcmul(g, buf, one, value=momentum, out=buf)   # buf = g + momentum * buf
                else:
                    buf.mul_(momentum).addcmul_(g, one, value=1 - dampening)
                g = addcmul(g, buf, one, value=momentum) if nesterov else buf
            if isinstance(lr, Tensor):
                p.addcmul_(g, device_lr(lr, p.device), value=-1)
            else:
                p.addcmul_(g, one, value=-lr)
