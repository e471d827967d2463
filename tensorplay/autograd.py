"""``tensorplay.autograd``: reverse-mode automatic differentiation, as ``torch.autograd``.

Mark leaves with ``requires_grad=True`` (a factory keyword) or ``tensor.requires_grad_()``; ops
on them are recorded; ``loss.backward()`` adds each leaf's gradient into its ``.grad``, and
:func:`grad` returns gradients without touching ``.grad``. ``no_grad``, ``enable_grad``,
``inference_mode`` and ``set_grad_enabled`` (also at ``tensorplay.*``) switch recording off
and on, as context managers and as decorators.

Backward runs the same ops forward does, on the same device and stream, with no host
synchronization, so ``backward()`` and an optimizer's ``step()`` can be captured into one
graph. Pitfalls are PyTorch's: gradients accumulate (zero them between steps); an in-place
change to a tensor saved for backward raises at backward; a second backward needs
``retain_graph=True`` on the first; ``create_graph=True`` (higher-order gradients) is not
supported yet and says so.

Inside a captured graph: gradients accumulate into existing ``.grad`` tensors exactly as they do
eagerly, so the recipe of a captured training step zeroes them inside the step with
``optimizer.zero_grad(set_to_none=False)`` (in place, part of the graph) after one eager step has
made them. A ``.grad`` first created during the capture lives in the graph's memory pool and
holds the latest replay's value (as every tensor a graph makes does).
"""

from __future__ import annotations

from ._tensor.autograd import (
    Function, FunctionCtx, Node, backward_many as backward, enable_grad, grad, inference_mode,
    is_grad_enabled, no_grad, set_grad_enabled,
)

__all__ = ["Function", "FunctionCtx", "Node", "backward", "enable_grad", "grad",
           "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled"]
