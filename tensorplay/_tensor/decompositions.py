"""``tp.linalg``'s computations: norms, solves, inverses, determinants and decompositions
(being written; see ``tensorplay/linalg.py`` for the public namespace)."""

from __future__ import annotations

__all__: list[str] = []
TENSOR_METHODS: tuple[str, ...] = ()
