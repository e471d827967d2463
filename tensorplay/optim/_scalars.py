"""Hyperparameters that may be tensors (the learning rate): checks and per-device views."""

from __future__ import annotations

from .._tensor.tensor import Tensor

__all__ = ["check_lr", "device_lr"]


def check_lr(lr) -> None:
    """PyTorch's checks of a learning rate: a tensor has one element; none is negative.

    A tensor's value is read on the host here (once, at construction), as PyTorch does.
    """
    if isinstance(lr, Tensor):
        if lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not lr.dtype.is_floating_point:
            raise TypeError(f"a tensor lr must have a floating dtype, got {lr.dtype}")
        value = lr.item()
    else:
        value = lr
    if not 0.0 <= value:  # type: ignore[operator]   # a floating tensor's item() is a float
        raise ValueError(f"Invalid learning rate: {lr}")


def device_lr(lr: Tensor, device) -> Tensor:
    """``lr`` as a 0-d tensor on ``device``: a view of it when it lives there (so an in-place
    change of ``lr`` is seen by captured steps), else a copy made now (eagerly only: a copy from
    the host cannot be captured, and the capture says so)."""
    if lr.ndim:
        lr = lr.reshape(())
    return lr if lr.device == device else lr.to(device)
