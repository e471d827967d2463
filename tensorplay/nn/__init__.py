"""``tensorplay.nn``: building blocks for neural networks, with PyTorch's names, signatures,
defaults, initializations and errors.

- :class:`Module` (the base class: parameters, buffers, submodules, ``state_dict``,
  ``load_state_dict``, ``train``/``eval``, ``to``, ``zero_grad``, hooks) and
  :class:`Parameter`;
- layers: ``Linear Embedding LayerNorm Dropout Identity``, activations ``ReLU GELU SiLU Tanh
  Sigmoid Softmax LogSoftmax``, containers ``Sequential ModuleList ModuleDict``;
- losses: ``MSELoss L1Loss NLLLoss CrossEntropyLoss BCEWithLogitsLoss``;
- :mod:`tensorplay.nn.functional` (``import tensorplay.nn.functional as F``), the functions the
  layers call; :mod:`tensorplay.nn.init`, PyTorch's initializations;
  :mod:`tensorplay.nn.utils` (``clip_grad_norm_``).

Everything runs on every device (cpu and the accelerator), is differentiable through
``tensorplay.autograd``, and reads no value on the host in a forward or backward pass, so a
whole training step can be captured into a graph.

Pitfalls (differences from PyTorch, forced by tensorplay's data model):

- ``Parameter(t)`` returns a plain ``Tensor`` with a parameter mark: ``isinstance(p,
  nn.Parameter)`` is True, ``type(p) is nn.Parameter`` is False.
- ``Module.to()`` (and ``cpu``/``cuda``/``float``/``half``/...) replaces a parameter whose
  device or dtype changes by a new tensor: create optimizers after moving the model.
"""

from . import functional, init, utils
from .modules import (
    BCEWithLogitsLoss, CrossEntropyLoss, Dropout, Embedding, GELU, Identity, L1Loss, LayerNorm,
    Linear, LogSoftmax, MSELoss, Module, ModuleDict, ModuleList, NLLLoss, ReLU, Sequential, SiLU,
    Sigmoid, Softmax, Tanh,
)
from .parameter import Parameter

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "Dropout", "Embedding", "GELU", "Identity",
           "L1Loss", "LayerNorm", "Linear", "LogSoftmax", "MSELoss", "Module", "ModuleDict",
           "ModuleList", "NLLLoss", "Parameter", "ReLU", "Sequential", "SiLU", "Sigmoid",
           "Softmax", "Tanh", "functional", "init", "utils"]
