"""The module classes of :mod:`tensorplay.nn`, one family a file, as PyTorch's
``torch.nn.modules``."""

from .activation import GELU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .container import ModuleDict, ModuleList, Sequential
from .dropout import Dropout
from .linear import Identity, Linear
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .module import Module
from .normalization import LayerNorm
from .sparse import Embedding

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "Dropout", "Embedding", "GELU", "Identity",
           "L1Loss", "LayerNorm", "Linear", "LogSoftmax", "MSELoss", "Module", "ModuleDict",
           "ModuleList", "NLLLoss", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh"]
