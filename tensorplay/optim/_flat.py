"""One contiguous buffer per group of parameters: the parameters, their gradients and their
state as views of a few flat tensors, so an update is one launch over all of them.

Moving parameters into a flat buffer keeps each parameter's tensor object (its ``_data`` is
rebound to a view of the buffer, with the same shape, strides, dtype and device), so modules
and user code holding them see no change but ``data_ptr()``. Gradients get a *home*: the
autograd engine writes a new ``.grad`` into the parameter's view of the flat gradient buffer
(``AutogradMeta.grad_home``) instead of a fresh tensor, so ``zero_grad(set_to_none=True)`` still
gives ``None`` and the next backward still makes the gradient, in the same place.

Pitfall: a graph captured before the optimizer was made reads the parameters' old memory:
make optimizers before capturing.
"""

from __future__ import annotations

from .._tensor.autograd import grad_accumulator, meta, no_grad
from .._tensor.creation import empty, zeros
from .._tensor.tensor import Tensor

__all__ = ["FlatBuffers", "flattenable"]


def flattenable(params: list[Tensor]) -> bool:
    """Whether these parameters can share flat buffers: one floating dtype (not complex), one
    device, each contiguous, non-empty, no view of another tensor, none repeated."""
    if not params:
        return False
    first = params[0]
    seen: set[int] = set()
    for p in params:
        if (p.dtype is not first.dtype or p.device != first.device or p.dtype.is_complex
                or not p.dtype.is_floating_point or not p.is_contiguous() or p.numel() == 0
                or id(p) in seen or (p._ag is not None and p._ag.base is not None)):
            return False
        seen.add(id(p))
    return True


class FlatBuffers:
    """The flat parameter and gradient buffers of ``params`` (see the module docstring) and
    named state buffers made on demand."""

    __slots__ = ("params", "spans", "param", "grad", "grad_views", "state", "accumulators")

    def __init__(self, params: list[Tensor]):
        self.params = params
        self.spans: list[tuple[int, int]] = []
        total = 0
        for p in params:
            self.spans.append((total, p.numel()))
            total += p.numel()
        first = params[0]
        with no_grad():
            self.param = empty(total, dtype=first.dtype, device=first.device)
            for p, view in zip(params, self._views(self.param)):
                view.copy_(p)
                p._data = view._data   # the same tensor object, now in the flat buffer
            self.grad = zeros(total, dtype=first.dtype, device=first.device)
            self.grad_views = self._views(self.grad)
            for p, home in zip(params, self.grad_views):
                meta(p).grad_home = home
                if p.grad is not None:
                    home.copy_(p.grad)
                    p.grad = home
        # a leaf holds its gradient's sink weakly (the sink holds the leaf), so each step's
        # graph would make it again; the optimizer keeps its parameters' sinks alive instead
        self.accumulators = [grad_accumulator(p) for p in params]
        self.state: dict[str, tuple[Tensor, list[Tensor]]] = {}

    def _views(self, flat: Tensor) -> list[Tensor]:
        return [flat[start:start + count].view(p.shape)
                for p, (start, count) in zip(self.params, self.spans)]

    def state_views(self, name: str) -> list[Tensor]:
        """The per-parameter views of the state buffer ``name`` (zeros when first made)."""
        found = self.state.get(name)
        if found is None:
            flat = zeros(self.param.numel(), dtype=self.param.dtype, device=self.param.device)
            found = self.state[name] = (flat, self._views(flat))
        return found[1]

    def state_buffer(self, name: str) -> Tensor:
        return self.state[name][0]

    def grads_at_home(self) -> bool:
        """Whether every parameter's ``.grad`` is its view of the flat gradient buffer."""
        return all(p.grad is home for p, home in zip(self.params, self.grad_views))
