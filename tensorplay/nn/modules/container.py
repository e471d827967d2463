"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, with PyTorch's behaviour (indices
as names "0", "1", ...; renumbering after a deletion; slicing returns a container of the same
class holding the same modules)."""

from __future__ import annotations

import operator
from collections import OrderedDict, abc
from itertools import chain, islice
from typing import Any, Iterable, Iterator, Mapping, overload

from .module import Module, _addindent

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


class _Positional(Module):
    """What :class:`Sequential` and :class:`ModuleList` share: modules in order, iterated and
    counted as a sequence, numbered 0..len-1 again after a deletion (as PyTorch's)."""

    def _key_at(self, idx) -> str:
        raise NotImplementedError

    def __delitem__(self, idx) -> None:
        if isinstance(idx, slice):
            for key in list(self._modules.keys())[idx]:
                delattr(self, key)
        else:
            delattr(self, self._key_at(idx))
        numbered = [str(i) for i in range(len(self._modules))]
        self._modules = OrderedDict(zip(numbered, self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class Sequential(_Positional):
    """Modules called in order, each on the previous one's output:
    ``Sequential(Linear(4, 8), ReLU(), Linear(8, 2))`` or ``Sequential(OrderedDict(name=module,
    ...))`` (the names become the attribute and state-dict names).

    Indexing (``seq[0]``, ``seq[-1]``), ``len``, iteration, ``append``, ``insert``, ``extend``,
    ``pop``, ``del seq[i]`` and ``seq[i] = module``; ``seq[1:]`` is a Sequential of the same
    modules (shared, not copied).
    """

    @overload
    def __init__(self, *args: Module) -> None: ...

    @overload
    def __init__(self, arg: OrderedDict[str, Module], /) -> None: ...

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)

    def _get_item_by_idx(self, iterator: Iterable, idx) -> Any:
        size = len(self)
        idx = operator.index(idx)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range for a {type(self).__name__} of "
                             f"length {size}")
        idx %= size
        return next(islice(iterator, idx, None))

    def __getitem__(self, idx) -> Any:
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[idx]))
        return self._get_item_by_idx(self._modules.values(), idx)

    def __setitem__(self, idx: int, module: Module) -> None:
        key = self._get_item_by_idx(self._modules.keys(), idx)
        setattr(self, key, module)

    def _key_at(self, idx) -> str:
        return self._get_item_by_idx(self._modules.keys(), idx)

    def __add__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        combined = Sequential()
        for index, module in enumerate(chain(self, other)):
            combined.add_module(str(index), module)
        return combined

    def __iadd__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        offset = len(self)
        for index, module in enumerate(other):
            self.add_module(str(index + offset), module)
        return self

    def __dir__(self) -> list[str]:
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, module: Module) -> "Sequential":
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        """Insert ``module`` before position ``index``; returns self.

        Raises:
            AssertionError: ``module`` is not a Module (PyTorch's type). IndexError:
                ``index`` out of range.
        """
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}, got {type(module)}")
        size = len(self._modules)
        if not -size <= index <= size:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += size
        for i in range(size, index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module
        return self

    def extend(self, sequential: Iterable[Module]) -> "Sequential":
        """Append every module of ``sequential``; returns self."""
        for layer in sequential:
            self.append(layer)
        return self

    def pop(self, key) -> Module:
        """Remove the module at index ``key`` and return it."""
        value = self[key]
        del self[key]
        return value

    def forward(self, input: Any) -> Any:
        for module in self:
            input = module(input)
        return input


class ModuleList(_Positional):
    """A list of modules, registered (their parameters are the list's): indexing, ``len``,
    iteration, ``append``, ``extend``, ``insert``, ``pop``, ``del``, ``+``, ``+=``; a slice is
    a ModuleList of the same modules. It has no ``forward``: iterate over it in yours.
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self += modules

    def _get_abs_string_index(self, idx) -> str:
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range for a ModuleList of length "
                             f"{len(self)}")
        if idx < 0:
            idx += len(self)
        return str(idx)

    def __getitem__(self, idx) -> Any:
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[self._get_abs_string_index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._get_abs_string_index(idx), module)

    def _key_at(self, idx) -> str:
        return self._get_abs_string_index(idx)

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        combined = ModuleList()
        for index, module in enumerate(chain(self, other)):
            combined.add_module(str(index), module)
        return combined

    def __dir__(self) -> list[str]:
        return [key for key in super().__dir__() if not key.isdigit()]

    def __repr__(self) -> str:
        """PyTorch's: runs of equal modules are shown once, as ``(0-2): 3 x Linear(...)``."""
        reprs = [repr(module) for module in self]
        if not reprs:
            return self._get_name() + "()"
        spans = [[0, 0]]
        blocks = [reprs[0]]
        for index, text in enumerate(reprs[1:], 1):
            if text == blocks[-1]:
                spans[-1][1] += 1
                continue
            spans.append([index, index])
            blocks.append(text)
        lines = []
        for (start, end), text in zip(spans, blocks):
            line = f"({start}): {text}"
            if start != end:
                line = f"({start}-{end}): {end - start + 1} x {text}"
            lines.append(_addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``."""
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def append(self, module: Module) -> "ModuleList":
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key) -> Module:
        """Remove the module at index ``key`` and return it."""
        value = self[key]
        del self[key]
        return value

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Append every module of the iterable ``modules``; returns self.

        Raises:
            TypeError: ``modules`` is not iterable.
        """
        if not isinstance(modules, abc.Iterable):
            raise TypeError(f"ModuleList.extend should be called with an iterable, but got "
                            f"{type(modules).__name__}")
        offset = len(self)
        for index, module in enumerate(modules):
            self.add_module(str(offset + index), module)
        return self


class ModuleDict(Module):
    """A dict of modules, registered, in insertion order: ``md[key]``, ``md[key] = module``,
    ``del``, ``in``, ``len``, iteration over keys, ``keys items values update pop clear``.
    Built from a mapping or an iterable of ``(key, module)`` pairs.
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove the module ``key`` and return it."""
        value = self[key]
        del self[key]
        return value

    def keys(self) -> Iterable[str]:
        """The names, in insertion order."""
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(name, module)`` pairs, in insertion order."""
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules: Mapping[str, Module] | Iterable) -> None:
        """Add (or replace) the modules of a mapping, or of an iterable of ``(key, module)``
        pairs.

        Raises:
            TypeError: ``modules`` not iterable, or an element that is not a pair.
            ValueError: an element of another length than 2.
        """
        if not isinstance(modules, abc.Iterable):
            raise TypeError(f"ModuleDict.update should be called with an iterable of "
                            f"key/value pairs, but got {type(modules).__name__}")
        if isinstance(modules, (OrderedDict, ModuleDict, abc.Mapping)):
            for key, module in modules.items():
                self[key] = module
            return
        for index, pair in enumerate(modules):
            if not isinstance(pair, abc.Iterable):
                raise TypeError(f"ModuleDict update sequence element #{index} should be "
                                f"Iterable; is {type(pair).__name__}")
            # as PyTorch: a pair is measured and indexed (TypeError if it can't be)
            if len(pair) != 2:  # type: ignore[arg-type]
                raise ValueError(f"ModuleDict update sequence element #{index} has length "
                                 f"{len(pair)}; 2 is required")  # type: ignore[arg-type]
            self[pair[0]] = pair[1]  # type: ignore[index]
