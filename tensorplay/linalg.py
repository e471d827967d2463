"""``tensorplay.linalg``: PyTorch's ``torch.linalg`` names (being written)."""

from __future__ import annotations

__all__: list[str] = []
