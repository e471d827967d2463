"""``tensorplay.nn``: building blocks for neural networks, with PyTorch's names.

So far the functional ops: :mod:`tensorplay.nn.functional` (``import tensorplay.nn.functional as
F``; also reachable as ``tp.nn.functional``).
"""

from . import functional

__all__ = ["functional"]
