"""``Embedding``: a lookup table of vectors."""

from __future__ import annotations

from ..._tensor import autograd as _autograd
from ..._tensor.creation import empty
from ..._tensor.tensor import Tensor
from .. import functional as F, init
from ..parameter import Parameter
from .module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``: ``forward(indices)``
    returns the rows of ``weight`` at the int64/int32 ``indices``, of shape
    ``indices.shape + (embedding_dim,)`` (see :func:`tensorplay.nn.functional.embedding`).

    ``weight`` starts ``N(0, 1)`` as PyTorch's. ``padding_idx`` (negative counts from the end):
    that row starts as zeros and receives no gradient, so training leaves it as it is.
    ``max_norm``/``norm_type``: rows looked up are renormalized in place to norm at most
    ``max_norm``. ``_weight``: a tensor to use as the weight (shape ``(num_embeddings,
    embedding_dim)``); ``_freeze``: the weight does not require grad.

    Raises:
        AssertionError: ``padding_idx`` out of range, a ``_weight`` of another shape (PyTorch's
            types). NotImplementedError: ``scale_grad_by_freq`` or ``sparse``.
    """

    num_embeddings: int
    embedding_dim: int
    weight: Tensor

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Tensor | None = None, _freeze: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if padding_idx > 0:
                if padding_idx >= num_embeddings:
                    raise AssertionError(f"Padding_idx must be within num_embeddings (got "
                                         f"padding_idx={padding_idx} for {num_embeddings})")
            elif padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError(f"Padding_idx must be within num_embeddings (got "
                                         f"padding_idx={padding_idx} for {num_embeddings})")
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        if scale_grad_by_freq:
            raise NotImplementedError("Embedding(scale_grad_by_freq=True) is not supported by "
                                      "tensorplay yet")
        if sparse:
            raise NotImplementedError("Embedding(sparse=True): tensorplay has no sparse "
                                      "gradients; use sparse=False")
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty((num_embeddings, embedding_dim), device=device,
                                          dtype=dtype), requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError(f"Shape of weight does not match num_embeddings and "
                                     f"embedding_dim: {tuple(_weight.shape)} vs "
                                     f"{(num_embeddings, embedding_dim)}")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        """Draw ``weight`` again from ``N(0, 1)`` and zero the padding row."""
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with _autograd.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            text += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            text += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse is not False:
            text += ", sparse=True"
        return text

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> "Embedding":
        """An Embedding whose weight is ``embeddings`` (2-d; shared, not copied), frozen
        (``requires_grad=False``) unless ``freeze=False``.

        Raises:
            AssertionError: ``embeddings`` that is not 2-d.
        """
        if embeddings.ndim != 2:
            raise AssertionError(f"Embeddings parameter is expected to be 2-dimensional, got "
                                 f"shape {tuple(embeddings.shape)}")
        rows, cols = embeddings.shape
        return cls(num_embeddings=rows, embedding_dim=cols, _weight=embeddings, _freeze=freeze,
                   padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
