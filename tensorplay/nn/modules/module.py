"""``tensorplay.nn.Module``: the base class of every layer and model, with PyTorch's semantics.

A module registers what is assigned to its attributes: a :class:`~tensorplay.nn.Parameter` into
``_parameters``, a :class:`Module` into ``_modules``, and keeps tensors registered with
:meth:`Module.register_buffer` in ``_buffers``; all three keep their order of registration,
which is the order of :meth:`parameters`, :meth:`state_dict` and the ``repr``.

Differences from PyTorch, each forced by tensorplay's data model (see ``parameter.py``):

- parameters are plain Tensors with a parameter mark, so ``type(p) is Parameter`` is False;
- :meth:`Module.to` (and ``cpu``/``cuda``/``float``/``double``/``half``/``bfloat16``) puts NEW
  parameter tensors in place of those whose device or dtype changes (PyTorch swaps the data
  inside the same object). Create optimizers after moving the model, or they hold the old
  tensors. Parameters shared between modules (tied weights) stay shared.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator, Mapping

from ... import _dtype
from ..._runtime import device as _device
from ..._tensor import autograd as _autograd
from ..._tensor.tensor import Tensor
from ..parameter import Parameter, is_parameter

__all__ = ["Module", "RemovableHandle"]


def _typename(value) -> str:
    """How error messages name the type of ``value`` (PyTorch's ``torch.typename``)."""
    if isinstance(value, Tensor):
        return "tensorplay.Tensor"
    cls = type(value)
    module = cls.__module__
    if module in ("", "builtins"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * spaces + line for line in lines)


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What :meth:`Module.load_state_dict` returns: the keys the module has that the state dict
    lacked, and the keys the state dict had that the module does not."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """What ``register_*_hook`` returns: ``remove()`` takes the hook away (also as a context
    manager: ``with m.register_forward_hook(h): ...``)."""

    _next_id = itertools.count()

    def __init__(self, *dicts: dict):
        self.id = next(RemovableHandle._next_id)
        self._dicts = dicts

    def remove(self) -> None:
        """Take the hook away (a second call does nothing)."""
        for table in self._dicts:
            table.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _cloned(tensor: Tensor) -> Tensor:
    """A copy of ``tensor`` in new memory on its device, outside autograd; a parameter's copy
    is a parameter with the same ``requires_grad``."""
    with _autograd.no_grad():
        copied = tensor.clone()
    if is_parameter(tensor):
        return Parameter(copied, tensor.requires_grad)
    if tensor.requires_grad and tensor.is_leaf:
        copied.requires_grad_(True)
    return copied


def _forward_unimplemented(self, *input: Any) -> None:
    """Define the computation of the module in ``forward`` (every subclass overrides it)."""
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                              f'"forward" function')


def _parse_to(args, kwargs):
    """``Module.to``'s arguments (device, dtype, tensor; positional or keyword) as
    ``(device or None, dtype or None)``."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword argument(s) {sorted(kwargs)}: it takes "
                        f"device, dtype and non_blocking")
    if len(args) > 3:
        raise TypeError(f"to() takes at most 3 positional arguments (device, dtype, "
                        f"non_blocking), got {len(args)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, _dtype.dtype) or (isinstance(arg, str) and
                                               arg in _dtype._BY_NAME):
            dtype = arg
        elif isinstance(arg, bool):
            continue   # non_blocking
        elif isinstance(arg, (str, int, _device.device)):
            device = arg
        else:
            raise TypeError(f"to() takes a device, a dtype or a tensor, got "
                            f"{_typename(arg)} {arg!r}")
    if device is not None:
        device = _device.resolve(device)
    if dtype is not None:
        dtype = _dtype.to_dtype(dtype)
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={dtype}")
    return device, dtype


class Module:
    """Base class of every neural network module: subclass it, create parameters and
    submodules in ``__init__`` (after ``super().__init__()``) and define ``forward``; call the
    module (``model(x)``), not ``forward``, so hooks run.

    Attributes:
        training: whether the module is in training mode (:meth:`train`, :meth:`eval`); layers
            such as Dropout read it.
    """

    training: bool
    # made by __init__ (declarations only: no class attribute is made)
    _parameters: dict[str, Tensor | None]
    _buffers: dict[str, Tensor | None]
    _non_persistent_buffers_set: set[str]
    _modules: dict[str, Module]     # (None for a name registered without a module)
    dump_patches = False
    call_super_init = False

    def __init__(self, *args, **kwargs) -> None:
        if kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                            f"argument '{next(iter(kwargs))}'")
        if args:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument "
                            f"but {len(args) + 1} were given")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_modules", {})

    forward: Callable[..., Any] = _forward_unimplemented

    # -- registration ------------------------------------------------------------------------
    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as the buffer ``name``: state that is not a parameter (running
        statistics, a mask). It moves with :meth:`to` and is in :meth:`state_dict` unless
        ``persistent=False``. ``None`` registers the name with no tensor.

        Raises:
            AttributeError: before ``Module.__init__()`` ran. TypeError: a non-str name, a value
                that is neither a Tensor nor None. KeyError: a name that is empty, contains
                ".", or is already an attribute other than a buffer.
        """
        self._check_new_name("buffer", "_buffers", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            f"(tensorplay.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def _check_new_name(self, kind: str, store: str, name) -> None:
        """PyTorch's checks of a name about to hold a ``kind`` kept in ``self.<store>``."""
        if store not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in self.__dict__[store]:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Register ``param`` (a :class:`~tensorplay.nn.Parameter`, or None) as the parameter
        ``name``; assigning ``self.name = Parameter(...)`` does the same.

        Raises:
            AttributeError: before ``Module.__init__()`` ran. TypeError: a non-str name; a
                value that is not a Parameter (wrap a tensor in ``nn.Parameter``). KeyError: a
                name that is empty, contains ".", or is already another attribute.
                ValueError: a parameter computed from others (not a leaf).
        """
        self._check_new_name("parameter", "_parameters", name)
        if param is None:
            self._parameters[name] = None
            return
        if not is_parameter(param):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            f"(tensorplay.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as "
                             f"a function of another Tensor, compute the value in the "
                             f"forward() method.")
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` (or None) as the submodule ``name``, reachable as
        ``self.name``.

        Raises:
            TypeError: a value that is not a Module; a non-str name. KeyError: a name that is
                empty, contains ".", or is already another attribute.
        """
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module  # type: ignore[assignment]   # None: a slot with no module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at the dotted path ``target`` (``""``: this module).

        Raises:
            AttributeError: a path that names no submodule.
        """
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at the dotted path ``target`` (``"layer.weight"``)."""
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        param = getattr(module, name)
        if not is_parameter(param):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at the dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return getattr(module, name)

    # -- attributes --------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup failed: parameters, buffers and submodules live in
        # their dicts, not in __dict__
        state = self.__dict__
        if "_parameters" in state:
            parameters = state["_parameters"]
            if name in parameters:
                return parameters[name]
        if "_buffers" in state:
            buffers = state["_buffers"]
            if name in buffers:
                return buffers[name]
        if "_modules" in state:
            modules = state["_modules"]
            if name in modules:
                return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        def remove_from(*tables):
            for table in tables:
                if name in table:
                    if isinstance(table, dict):
                        del table[name]
                    else:
                        table.discard(name)

        state = self.__dict__
        params = state.get("_parameters")
        if is_parameter(value):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(state, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                f"(tensorplay.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = state.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(state, self._parameters, self._buffers,
                        self._non_persistent_buffers_set)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                f"(tensorplay.nn.Module or None expected)")
            modules[name] = value
            return
        buffers = state.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                f"(tensorplay.Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        keys = (dir(self.__class__) + list(self.__dict__) + list(self._parameters)
                + list(self._modules) + list(self._buffers))
        # names that are not identifiers (a Sequential's "0", "1") cannot be attributes
        return sorted(key for key in keys if not key[0].isdigit())

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for name in ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_pre_hooks",
                     "_forward_pre_hooks_with_kwargs"):
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())
        if "_non_persistent_buffers_set" not in self.__dict__:
            object.__setattr__(self, "_non_persistent_buffers_set", set())

    def __deepcopy__(self, memo: dict) -> "Module":
        """``copy.deepcopy(model)``: every parameter and buffer is cloned on its device (a
        parameter stays a Parameter with its ``requires_grad``; gradients are not copied, as
        PyTorch's ``Parameter.__deepcopy__``); tied tensors stay tied in the copy.

        Cloning goes through the device because copying a Tensor's fields copies its array
        object, which for an accelerator tensor is not memory the device's allocator owns."""
        for module in self.modules():
            for table in (module._parameters, module._buffers):
                for tensor in table.values():
                    if tensor is not None and id(tensor) not in memo:
                        memo[id(tensor)] = _cloned(tensor)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            object.__setattr__(new, name, copy.deepcopy(value, memo))
        return new

    # -- iteration ---------------------------------------------------------------------------
    def _named_members(self, get_members: Callable, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()   # by identity: Tensor's == is elementwise
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for key, value in get_members(module):
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (module_prefix + ("." if module_prefix else "") + key), value

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """The parameters of this module and (``recurse``) of its submodules, in registration
        order, each once (a parameter shared by two modules is yielded once)."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, parameter)`` pairs, as :meth:`parameters`; ``prefix`` starts each
        name; ``remove_duplicate=False`` yields a shared parameter under each of its names."""
        yield from self._named_members(lambda module: module._parameters.items(), prefix,
                                       recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers of this module and (``recurse``) of its submodules."""
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, buffer)`` pairs, as :meth:`named_parameters`."""
        yield from self._named_members(lambda module: module._buffers.items(), prefix,
                                       recurse, remove_duplicate)

    def children(self) -> Iterator["Module"]:
        """The direct submodules, each once."""
        for _, module in self.named_children():
            yield module

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        """``(name, submodule)`` for the direct submodules, each once."""
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def modules(self) -> Iterator["Module"]:
        """This module and every submodule below it, depth first, each once."""
        for _, module in self.named_modules():
            yield module

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every submodule,
        depth first, each once unless ``remove_duplicate=False``."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                            remove_duplicate)

    # -- modes -------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``mode=True``) or evaluation mode on this module and every
        submodule; returns self.

        Raises:
            ValueError: a ``mode`` that is not a bool.
        """
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got "
                             f"{_typename(mode)}")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode (``train(False)``): Dropout passes its input through; returns
        self."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter (to freeze or unfreeze them); returns
        self."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter: to None (the default, as PyTorch 2: the
        next backward allocates them anew), or to zeros in place (``set_to_none=False``: keeps
        the same ``.grad`` tensors, which a captured training step needs, since it writes into
        the tensors it captured)."""
        for param in self.parameters():
            grad = param.grad
            if grad is None:
                continue
            if set_to_none:
                param.grad = None
                continue
            if grad.grad_fn is not None:
                grad.detach_()
            else:
                grad.requires_grad_(False)
            grad.zero_()

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every submodule (children first) and then on self; returns self
        (``model.apply(init_weights)``)."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # -- devices and dtypes ------------------------------------------------------------------
    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True,
               memo: dict | None = None) -> "Module":
        """Replace every parameter and buffer ``t`` by ``fn(t)``. A parameter that ``fn``
        changes becomes a new Parameter (same ``requires_grad``, its ``.grad`` converted too);
        ``memo`` maps old parameters to new ones so that a shared parameter stays shared."""
        if memo is None:
            memo = {}
        if recurse:
            for module in self.children():
                module._apply(fn, recurse, memo)
        for key, param in self._parameters.items():
            if param is None:
                continue
            found = memo.get(id(param))
            if found is None:
                with _autograd.no_grad():
                    applied = fn(param)
                if applied is param:
                    found = param
                else:
                    found = Parameter(applied, param.requires_grad)
                    grad = param.grad
                    if grad is not None:
                        with _autograd.no_grad():
                            found.grad = fn(grad)
                memo[id(param)] = found
                memo[id(found)] = found   # a module reached again after the swap
            self._parameters[key] = found
        for key, buffer in self._buffers.items():
            if buffer is not None:
                with _autograd.no_grad():
                    self._buffers[key] = fn(buffer)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move and/or cast the parameters and buffers: ``to(device)``, ``to(dtype)``,
        ``to(device, dtype)``, ``to(tensor)`` (its device and dtype), or keywords ``device=``,
        ``dtype=``, ``non_blocking=``. The dtype applies to floating point and complex tensors
        only (integer buffers keep theirs). Returns self.

        Pitfall: a parameter whose device or dtype changes is replaced by a new tensor (see the
        module docstring): build optimizers after ``to``.

        Raises:
            TypeError: a non-floating, non-complex dtype; an argument that is none of the
                above. ValueError: a device this build does not have.
        """
        device, dtype = _parse_to(args, kwargs)

        def convert(t: Tensor) -> Tensor:
            floating = t.dtype.is_floating_point or t.dtype.is_complex
            return t.to(device if device is not None else t.device,
                        dtype if dtype is not None and floating else t.dtype)
        return self._apply(convert)

    def cpu(self) -> "Module":
        """Every parameter and buffer to the host; returns self (see :meth:`to`)."""
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None) -> "Module":
        """Every parameter and buffer to the accelerator (``device``: an index or spelling,
        None for the current device); returns self (see :meth:`to`)."""
        return self._apply(lambda t: t.cuda(device))

    def type(self, dst_type) -> "Module":
        """Every parameter and buffer cast to ``dst_type`` (a dtype); returns self."""
        dst_type = _dtype.to_dtype(dst_type)
        return self._apply(lambda t: t.to(dst_type))

    def _cast_floating(self, dtype: _dtype.dtype) -> "Module":
        return self._apply(lambda t: t.to(dtype) if t.dtype.is_floating_point else t)

    def float(self) -> "Module":
        """Floating point parameters and buffers to float32; returns self."""
        return self._cast_floating(_dtype.float32)

    def double(self) -> "Module":
        """Floating point parameters and buffers to float64; returns self."""
        return self._cast_floating(_dtype.float64)

    def half(self) -> "Module":
        """Floating point parameters and buffers to float16; returns self."""
        return self._cast_floating(_dtype.float16)

    def bfloat16(self) -> "Module":
        """Floating point parameters and buffers to bfloat16; returns self."""
        return self._cast_floating(_dtype.bfloat16)

    # -- state dict --------------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buffer if keep_vars else buffer.detach()

    def state_dict(self, *args, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Tensor]:
        """An ``OrderedDict`` from dotted names to the parameters and persistent buffers of
        this module and its submodules, in registration order. The values are detached
        tensors that SHARE memory with the module's (``keep_vars=True``: the parameters
        themselves): copy them (``{k: v.clone() ...}``) to keep a snapshot while training
        goes on. ``destination``: a dict to fill (and return); ``prefix``: starts every key.
        """
        if args:
            warnings.warn("Positional args are being deprecated, use kwargs instead: "
                          "state_dict(destination=..., prefix=..., keep_vars=...)",
                          FutureWarning, stacklevel=2)
            names = ("destination", "prefix", "keep_vars")
            if len(args) > len(names):
                raise TypeError(f"state_dict() takes at most 3 positional arguments, got "
                                f"{len(args)}")
            given = dict(zip(names, args))
            destination = given.get("destination", destination)
            prefix = given.get("prefix", prefix)
            keep_vars = given.get("keep_vars", keep_vars)
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict: Mapping, prefix: str, local_metadata: dict,
                              strict: bool, missing_keys: list, unexpected_keys: list,
                              error_msgs: list) -> None:
        """Load this module's own parameters and persistent buffers (PyTorch's signature, so a
        subclass that overrides it to convert old checkpoints works the same)."""
        persistent = {name: buffer for name, buffer in self._buffers.items()
                      if name not in self._non_persistent_buffers_set}
        local_state = {name: value for name, value in
                       itertools.chain(self._parameters.items(), persistent.items())
                       if value is not None}
        for name, target in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected '
                                  f"tensorplay.Tensor from checkpoint but received "
                                  f"{_typename(value)}")
                continue
            if tuple(value.shape) != tuple(target.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{value.shape!s} from checkpoint, the shape in current model "
                                  f"is {target.shape!s}.")
                continue
            try:
                with _autograd.no_grad():
                    target.copy_(value)
            except Exception as error:   # reported with the others, as PyTorch does
                error_msgs.append(f'While copying the parameter named "{key}", whose '
                                  f"dimensions in the model are {target.shape!s} and whose "
                                  f"dimensions in the checkpoint are {value.shape!s}, an "
                                  f"exception occurred : {error.args}.")
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    first = key[len(prefix):].split(".", 1)[0]
                    if first not in self._modules and first not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy the tensors of ``state_dict`` into this module's parameters and persistent
        buffers, in place and under no_grad (so the parameter objects, and optimizers holding
        them, stay valid); values are converted to each target's dtype and device.

        Returns ``(missing_keys, unexpected_keys)``. ``strict=True`` (default): either list
        non-empty raises RuntimeError listing them; ``strict=False``: they are returned, and
        what matches is loaded. A shape mismatch raises in both modes (naming the key and both
        shapes), after everything else was tried.

        Raises:
            TypeError: a ``state_dict`` that is not a mapping.
            RuntimeError: "Error(s) in loading state_dict for <Class>:" followed by each
                problem: missing/unexpected keys (strict), size mismatches, values that are not
                tensors.
            NotImplementedError: ``assign=True`` (tensorplay copies into the parameters).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        if assign:
            raise NotImplementedError("load_state_dict(assign=True) is not supported: "
                                      "tensorplay copies values into the existing parameters "
                                      "(assign=False)")
        missing_keys: list[str] = []
        unexpected_keys: list[str] = []
        error_msgs: list[str] = []

        def load(module: Module, prefix: str = "") -> None:
            module._load_from_state_dict(state_dict, prefix, {}, True, missing_keys,
                                         unexpected_keys, error_msgs)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")

        load(self)
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{key}"' for key in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{key}"' for key in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # -- calling -----------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` runs before each ``forward``; a non-None return (a tuple, or
        one value) replaces ``args``. ``with_kwargs=True``: ``hook(module, args, kwargs)``
        returning None or ``(args, kwargs)``. ``prepend``: run before the hooks already
        registered. Returns a handle whose ``remove()`` unregisters it."""
        handle = RemovableHandle(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` runs after each ``forward``; a non-None return
        replaces the output. ``with_kwargs=True``: ``hook(module, args, kwargs, output)``.
        ``prepend``: run before the hooks already registered. Returns a handle whose
        ``remove()`` unregisters it."""
        handle = RemovableHandle(self._forward_hooks, self._forward_hooks_with_kwargs)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def _call_impl(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {result}.")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook_id, hook in list(self._forward_hooks.items()):
            if hook_id in self._forward_hooks_with_kwargs:
                result = hook(self, args, kwargs, output)
            else:
                result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    __call__: Callable[..., Any] = _call_impl

    # -- repr --------------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in its ``repr`` (layers override it:
        ``in_features=4, out_features=2, bias=True``); one line, or several."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2)
                       for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"
