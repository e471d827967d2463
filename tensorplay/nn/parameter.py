"""``tensorplay.nn.Parameter``: a tensor that a :class:`~tensorplay.nn.Module` registers as one of
its parameters.

PyTorch's ``Parameter`` is a subclass of ``Tensor``. tensorplay's hot paths test
``type(x) is Tensor`` (one pointer comparison per operand), which a subclass would fail, so here
``Parameter(data)`` returns a plain :class:`~tensorplay.Tensor`: a leaf that shares ``data``'s
memory, requires grad (unless ``requires_grad=False``) and carries a parameter mark in its
autograd state. ``isinstance(t, Parameter)`` reads that mark (through the metaclass), so code
written for PyTorch (``isinstance(value, nn.Parameter)``) works unchanged.

Pitfalls:
- ``type(p) is Parameter`` is False (``type(p)`` is ``Tensor``); test with ``isinstance``.
- Only the tensor ``Parameter()`` returned is a parameter: a result computed from it
  (``p * 2``, ``p.to(...)``, ``p.detach()``, a view) is not.
- ``repr(p)`` is the tensor's repr (PyTorch prints ``Parameter containing:`` first).
"""

from __future__ import annotations

from .._tensor import autograd as _autograd
from .._tensor.creation import empty
from .._tensor.tensor import Tensor

__all__ = ["Parameter", "is_parameter"]


def is_parameter(value) -> bool:
    """Whether ``value`` is a tensor made by :class:`Parameter` (what ``isinstance`` reads)."""
    if type(value) is not Tensor:
        return False
    state = value._ag
    return state is not None and state.is_param


class _ParameterMeta(type):
    def __instancecheck__(cls, instance) -> bool:
        return is_parameter(instance)

    def __subclasscheck__(cls, subclass) -> bool:
        # no class is a Parameter class: parameters are Tensors with a mark
        return type.__subclasscheck__(cls, subclass)


class Parameter(metaclass=_ParameterMeta):
    """``Parameter(data=None, requires_grad=True)``: ``data`` (default: an empty float32 tensor)
    as a module parameter; returns a plain ``Tensor``, see the module docstring.

    The result is a detached alias of ``data``: it shares its memory (an in-place change through
    either is seen by both) and its version counter, is a leaf (``grad_fn`` None, ``.grad``
    None), and requires grad unless ``requires_grad=False``.

    Raises:
        TypeError: ``data`` that is not a Tensor.
        RuntimeError: ``requires_grad=True`` for a tensor that is not floating point ("only
            Tensors of floating point dtype can require gradients").
    """

    def __new__(  # type: ignore[misc]   # a plain Tensor: see the module docstring
            cls, data: Tensor | None = None, requires_grad: bool = True) -> Tensor:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(data): data must be a tensorplay.Tensor, got "
                            f"{type(data).__name__}")
        if not isinstance(requires_grad, bool):
            raise TypeError(f"Parameter(requires_grad): must be a bool, got "
                            f"{type(requires_grad).__name__}")
        param = data.detach()
        _autograd.set_requires_grad(param, requires_grad)
        _autograd.meta(param).is_param = True
        return param
