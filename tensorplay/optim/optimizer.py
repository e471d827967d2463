"""The :class:`Optimizer` base class: parameter groups, per-parameter state, ``zero_grad`` and
``state_dict``/``load_state_dict``, with PyTorch's semantics, names, format and errors.

Every optimizer of this package steps with tensor ops only, never reading a value on the host,
so a whole ``step()`` can be captured into a graph (``capturable`` is always on); see the
package docstring for the rules of a captured step.
"""

from __future__ import annotations

import copy
import warnings
from collections import defaultdict
from itertools import chain
from typing import Any, Callable, Dict, Iterable, Union

from .._dtype import float32
from .._tensor.autograd import enable_grad
from .._tensor.creation import ones
from .._tensor.tensor import Tensor
from ..accelerator.graphs import current_capturing_graph

__all__ = ["Optimizer", "ParamsT", "required"]

#: what an optimizer takes: tensors, or dicts each holding ``"params"`` and group options
ParamsT = Union[Iterable[Tensor], Iterable[Dict[str, Any]]]


class _RequiredParameter:
    """Singleton marking a default that every parameter group must give itself."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _typename(value: Any) -> str:
    kind = type(value)
    if kind.__module__ in ("builtins", None):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def capturing(device) -> bool:
    """Whether work issued now for ``device`` is recorded into a graph instead of running."""
    return device.type != "cpu" and current_capturing_graph(device) is not None


def refuse_state_in_capture(optimizer: "Optimizer", device, what: str) -> None:
    """Raise if state must be created or relinked while ``device`` captures.

    State made inside a capture is made by recorded kernels, which run again on every replay:
    the state would be reset at every step (PyTorch resets it silently). One eager step first
    creates it, as PyTorch's warm-up before a capture does.
    """
    if capturing(device):
        raise RuntimeError(
            f"{type(optimizer).__name__}.step(): {what} would be created inside a graph capture "
            f"on {device}, and every replay would reset it; run one step eagerly before "
            f"capturing (a warm-up step creates the state), or load a state_dict first")


class Optimizer:
    """Base class of all optimizers, as ``torch.optim.Optimizer``.

    Args:
        params: an iterable of tensors to optimize (leaves), or of dicts each with a
            ``"params"`` entry and options overriding ``defaults`` for that group.
        defaults: the options of every group that does not set them itself.

    Attributes:
        param_groups: list of dicts, each with ``"params"`` (a list of tensors) and every option
            of ``defaults`` filled in. Change an option between steps by assigning into the
            group (``group["lr"] = 0.01``); for a captured step, make it a tensor and change it
            in place (see the package docstring).
        state: ``defaultdict(dict)`` keyed by parameter tensor; created by the first step that
            finds a gradient for the parameter.

    Subclasses implement :meth:`step`.
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        # 0-d ones per (device, dtype): a scaled add ``a + s * b`` is then one addcmul kernel,
        # where ``add(..., alpha=s)`` is two (a multiply, then the add)
        self._ones: dict[tuple, Tensor] = {}
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {_typename(params)}")
        param_groups: list[Any] = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    def __repr__(self) -> str:
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # -- groups ---------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (those it leaves out are taken from
        ``defaults``), e.g. to train layers unfrozen during training.

        Raises:
            TypeError: ``param_group`` is not a dict; its params are a set (unordered) or hold a
                non-tensor.
            ValueError: a non-leaf tensor; a parameter already in another group; a required
                option missing.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {_typename(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            param_group["params"] = list(params)
        for param in param_group["params"]:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(param))
            if not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        params = param_group["params"]
        if len(params) != len({id(p) for p in params}):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error", UserWarning, stacklevel=3)
        taken = {id(p) for group in self.param_groups for p in group["params"]}
        if any(id(p) in taken for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        for param in params:   # made now, eagerly: made inside a capture they'd be garbage
            self._one(param)   # until the graph's first replay
        self.param_groups.append(param_group)

    def _one(self, like: Tensor) -> Tensor:
        """A 0-d tensor holding 1, of ``like``'s device and dtype (shared, never written)."""
        key = (like.device, like.dtype)
        found = self._ones.get(key)
        if found is None:
            found = self._ones[key] = ones((), dtype=like.dtype, device=like.device)
        return found

    # -- gradients and steps --------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized tensors (gradients accumulate: ``backward()``
        adds into ``.grad``, so zero them before each backward).

        Args:
            set_to_none: True (the default): drop each ``.grad`` (set it to None): the next
                backward makes new gradient tensors, and a step skips parameters whose
                gradient is None. False: zero each ``.grad`` in place (``grad.zero_()``), keeping
                the same tensors. A captured training step needs False: the graph reads and
                writes the gradient tensors it saw at capture, so they must stay the same
                objects, and zeroing them must be part of the graph.
        """
        zeroed = set() if set_to_none else self._zero_flat_grads()
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None or id(p) in zeroed:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if grad.grad_fn is not None:
                        grad.detach_()
                    elif grad.requires_grad:
                        grad.requires_grad_(False)
                    grad.zero_()

    def _zero_flat_grads(self) -> set[int]:
        """Zero the gradients an optimizer keeps in flat buffers, one launch per buffer; return
        the ids of their parameters (the others are zeroed one by one)."""
        return set()

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Perform one optimization step (update every parameter with a gradient).

        Args:
            closure: optional; re-evaluates the model and returns the loss, called with grad
                enabled before the update. Its result is returned.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    @staticmethod
    def _closure_loss(closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, in PyTorch's format::

            {"state": {0: {"step": ..., "exp_avg": ...}, 1: {...}},
             "param_groups": [{"lr": ..., ..., "params": [0, 1]}, ...]}

        Parameters are numbered in group order, across groups; ``state`` holds an entry only for
        parameters that have state. The tensors are the optimizer's own (not copies): save them
        (``tensorplay.save``) or clone them before the next step if you need their values of
        now. ``tensorplay.save``/``tensorplay.load`` round-trip this dict exactly.
        """
        mapping: dict[int, int] = {}
        start = 0

        def pack(group: dict[str, Any]) -> dict[str, Any]:
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                mapping.setdefault(id(p), i)
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        param_groups = [pack(g) for g in self.param_groups]
        state = {(mapping[id(k)] if isinstance(k, Tensor) else k): dict(v)
                 for k, v in self.state.items()}
        return {"state": state, "param_groups": param_groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (of this optimizer class, for parameters in the same order
        and group sizes): group options and per-parameter state.

        Tensors of the state are copied to each parameter's device; floating ones take the
        parameter's dtype, except ``"step"``, which becomes float32 on the parameter's device
        (PyTorch's rule for capturable optimizers). Unlike PyTorch, the loaded state never
        shares memory with the tensors of ``state_dict``. A group option that is a tensor here
        (a tensor ``lr``) keeps its identity: the loaded value is copied into it, so graphs
        captured before loading read the loaded value.

        Load before capturing a step: loading changes the state tensors, which a graph captured
        earlier would no longer see.

        Raises:
            ValueError: a different number of groups, or a group of another size.
        """
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(chain.from_iterable(s["params"] for s in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = {k: _cast(param, v, k) for k, v in value.items()}
            else:
                state[key] = copy.deepcopy(value)
        self.param_groups = [_merge_group(g, s) for g, s in zip(groups, saved_groups)]
        self.state = state
        self._state_loaded()

    def _state_loaded(self) -> None:
        """Hook for subclasses that keep derived state (dropped after load_state_dict)."""


def _cast(param: Tensor, value: Any, key: Any) -> Any:
    """A loaded state value for ``param``: tensors moved and cast, never aliased."""
    if isinstance(value, Tensor):
        if key == "step":
            moved = value.to(device=param.device, dtype=float32)
        elif param.is_floating_point():
            moved = value.to(device=param.device, dtype=param.dtype)
        else:
            moved = value.to(device=param.device)
        return moved.clone() if moved is value else moved
    if isinstance(value, dict):
        return {k: _cast(param, v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(param, v, None) for v in value)
    return copy.deepcopy(value)


def _merge_group(group: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    """The saved group's options with this group's params; a tensor option of this group keeps
    its identity and receives the saved value."""
    merged: dict[str, Any] = {}
    for key, value in saved.items():
        if key == "params":
            continue
        current = group.get(key)
        if isinstance(current, Tensor):
            if isinstance(value, Tensor):
                current.copy_(value.reshape(current.shape))
            else:
                current.fill_(value)
            merged[key] = current
        elif isinstance(value, Tensor):
            merged[key] = value.clone()
        else:
            merged[key] = copy.deepcopy(value)
    merged["params"] = group["params"]
    return merged
