"""``Dropout``."""

from __future__ import annotations

import numbers

from ..._tensor.tensor import Tensor
from .. import functional as F
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """In training mode, zero each element with probability ``p`` and scale the others by
    ``1 / (1 - p)``; in evaluation mode (``model.eval()``) return the input itself. A fresh
    mask every call (and every replay of a captured graph). ``inplace``: write into the input.

    Raises:
        ValueError: ``p`` outside ``[0, 1]``. TypeError: ``p`` not a real number.
    """

    p: float
    inplace: bool

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not isinstance(p, numbers.Real):
            raise TypeError(f"dropout probability has to be a real number, but got "
                            f"{type(p).__name__}")
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
