"""The Tensor: a typed, strided view of memory on one device.

A Tensor wraps one ``xp`` array (NumPy on ``cpu`` and ``sim``, CuPy on ``cuda``) and the device it
lives on. Views (``view``, slicing, ``transpose`` ...) are new Tensors over the same memory, so
writing through a view changes its base.

This module is the data model only: it imports no op module. Every op method (``to``, ``clone``,
``copy_``, ``fill_``, ``__repr__``, the operators ...) is installed by ``methods.py``, the one
method table; ``tensor.pyi`` (generated from it by ``tools/gen_tensor_stub.py``) shows them to
IDEs and type checkers. Ops never import a backend: they ask ``_runtime.dispatch`` for memory and
hand it kernels.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any, Callable

import numpy as np

from .._runtime import capture as _capture, dispatch as _dispatch, state as _state
from .. import _dtype
from .._dtype import dtype as _dtype_cls   # Tensor's ``_dtype`` slot hides the module there
from .._runtime.device import device as _device_cls

__all__ = ["Layout", "Size", "Tensor", "layout_of"]


class Size(tuple):
    """The shape of a tensor: a tuple of ints, as ``torch.Size``.

    ``x.shape`` and ``x.size()`` return one; it compares, hashes and unpacks as the plain tuple
    (``x.shape == (2, 3)`` is True). ``size + tuple`` gives a ``Size``; ``numel()`` is the
    product of its sizes (1 for ``Size([])``).

    Pitfall: indexing and slicing are tuple's own, kept free of Python frames because shapes
    are read on every op; so ``x.shape[1:]`` is a plain tuple here (a ``Size`` in PyTorch).

    Raises:
        TypeError: ``Size(...)`` of something that is not an iterable of ints (one-element
            integer tensors are accepted, as in PyTorch).
    """

    __slots__ = ()

    def __new__(cls, sizes=()) -> "Size":
        try:
            items = tuple(sizes)
        except TypeError:
            raise TypeError(f"Size() takes an iterable of ints, got "
                            f"{type(sizes).__name__}") from None
        for position, item in enumerate(items):
            if isinstance(item, builtins.bool) or not isinstance(item, (int, np.integer)):
                if isinstance(item, Tensor) and item.numel() == 1 and not (
                        item.dtype.is_floating_point or item.dtype.is_complex
                        or item.dtype.name == "bool"):
                    continue
                raise TypeError(f"Size() takes an iterable of ints, but element {position} "
                                f"is {type(item).__name__} {item!r}")
        return tuple.__new__(cls, (int(item) for item in items))

    def __repr__(self) -> str:
        return f"tensorplay.Size({list(self)})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        """In an f-string (``f"{x.shape}"``, as tensorplay's error messages write shapes) a Size
        reads as its tuple, ``(2, 3)``; ``repr``/``str``/``print`` give ``tensorplay.Size([2,
        3])``."""
        return format(tuple.__repr__(self), spec)

    def __add__(self, other: tuple) -> "Size":
        if not isinstance(other, tuple):
            return NotImplemented
        return _new_size(Size, tuple.__add__(self, other))

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds (the product of the sizes)."""
        count = 1
        for size in self:
            count *= size
        return count

    def __reduce__(self) -> tuple:
        return (Size, (tuple(self),))


#: builds a Size from a tuple of ints with no Python frame (the hot path of ``Tensor.shape``)
_new_size = tuple.__new__


class Layout:
    """A tensor's dtype, device, shape and strides, interned (:func:`layout_of`): tensors of one
    layout share one object, so the op layer's plan caches key on it by identity, which hashes
    at C speed where the tuple it stands for would be rebuilt and rehashed on every call.

    A tensor's layout never changes (no op alters a tensor's metadata in place), so a tensor
    keeps its Layout from the first time one is asked. Pickled, a Layout re-interns itself.
    """

    __slots__ = ("key",)
    key: tuple

    def __init__(self, key: tuple) -> None:
        self.key = key

    def __reduce__(self) -> tuple:
        return (_intern_layout, (self.key,))

    def __repr__(self) -> str:
        return f"Layout{self.key!r}"


_layouts: dict[tuple, Layout] = {}
_LAYOUT_LIMIT = 1 << 14   # interned layouts kept; past this the table starts over
#: the tuple a Layout stands for, read without a Python frame (dtypes hash by identity)
_layout_key = operator.attrgetter("_dtype", "_device.type", "_device.index", "_data.shape",
                                  "_data.strides")


def _intern_layout(key: tuple) -> Layout:
    """The one Layout of ``key``. Starting the table over only costs repeats: a Layout already
    held by a tensor or a cache stays the same object, and a new one is merely another name."""
    found = _layouts.get(key)
    if found is None:
        if len(_layouts) >= _LAYOUT_LIMIT:
            _layouts.clear()
        found = _layouts.setdefault(key, Layout(key))
    return found


def layout_of(tensor: "Tensor") -> Layout:
    """``tensor``'s :class:`Layout`, interned at its first use and kept on the tensor."""
    layout = tensor._layout
    if layout is None:
        layout = tensor._layout = _intern_layout(_layout_key(tensor))
    return layout


class Tensor:
    """A multi-dimensional array on a device (``cpu`` or an accelerator).

    Create tensors with ``tensorplay.tensor``, ``zeros``, ``arange`` ... rather than this class.
    Semantics follow PyTorch: broadcasting, type promotion, in-place ``op_`` forms, views that
    alias their base.

    .. warning:: On an accelerator, ops run asynchronously in stream order. Reading a value on
       the host (``item``, ``tolist``, ``cpu``) waits for this thread's current stream only.
    """

    __slots__ = ("_data", "_device", "_dtype", "_guard", "_layout", "_ag", "__weakref__")
    # the slots' types, for ``tensor.pyi`` (declarations only: no class attribute is made)
    _data: Any                  # the xp array: NumPy or CuPy
    _device: _device_cls
    _dtype: _dtype_cls
    _guard: Callable[["Tensor"], None] | None   # compiled outputs' use check (compiler)
    _layout: Layout | None      # interned at first use: layout_of
    _ag: Any                    # autograd.AutogradMeta or None (this module imports no op)
    __array_priority__ = 1000

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with tensorplay.tensor(), zeros(), empty(), arange(), "
                        "..., not Tensor()")

    @classmethod
    def _make(cls, data, device: _device_cls, dtype: _dtype_cls | None = None) -> "Tensor":
        tensor = object.__new__(cls)
        tensor._data = data
        tensor._device = device
        tensor._dtype = dtype if dtype is not None else _dtype.from_numpy_dtype(data.dtype)
        tensor._guard = None
        tensor._layout = None   # interned at its first use as an operand: layout_of
        tensor._ag = None       # autograd state (autograd.AutogradMeta), made at first need
        return tensor

    def _alias(self) -> "Tensor":
        """A new Tensor over the same memory with no autograd state and no guard (the plain
        view autograd's saved tensors, ``detach()`` and compiled outputs are made from)."""
        return Tensor._make(self._data, self._device, self._dtype)

    def __setstate__(self, state) -> None:
        """Unpickling (and ``copy``): the slots as pickled; a tensor pickled by an older version
        has no ``_layout`` and gets one at its first use."""
        self._layout = None
        self._ag = None   # a copy keeps only a leaf's requires_grad (AutogradMeta.__reduce__)
        for name, value in state[1].items():
            setattr(self, name, value)

    # -- attributes -------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes of the dimensions as a :class:`Size` (a tuple subclass, typed as its tuple)."""
        guard = self._guard   # _check_guard, inlined: ops read shapes many times a call
        if guard is not None:
            guard(self)
        return _new_size(Size, self._data.shape)

    def size(self, dim: int | None = None):
        """The shape as a :class:`Size`, or the size of dimension ``dim`` as an int.

        Raises:
            IndexError: ``dim`` out of range; TypeError: ``dim`` not an int.
        """
        shape = self.shape
        if dim is None:
            return shape
        return shape[_normalize_dim(dim, len(shape))]

    @property
    def dtype(self) -> _dtype_cls:
        """The element type (a :class:`tensorplay.dtype`)."""
        return self._dtype

    @property
    def device(self) -> _device_cls:
        """The :class:`tensorplay.device` holding the data (``cpu``, ``sim:i``, ``cuda:i``)."""
        return self._device

    @property
    def ndim(self) -> int:
        """The number of dimensions (0 for a scalar tensor)."""
        return self._data.ndim

    def dim(self) -> int:
        """The number of dimensions, as :attr:`Tensor.ndim`."""
        return self._data.ndim

    def numel(self) -> int:
        """The number of elements (1 for a 0-d tensor, 0 for an empty one)."""
        return int(self._data.size)

    def nelement(self) -> int:
        """Alias of :meth:`numel`."""
        return int(self._data.size)

    def element_size(self) -> int:
        """Bytes per element (a method, as in PyTorch; :attr:`Tensor.itemsize` is the property)."""
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element (a property, as in PyTorch)."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """``numel() * itemsize``: the bytes of the elements this view shows (not the size of
        the memory it aliases, which may be larger for a view)."""
        return int(self._data.size) * self._dtype.itemsize

    def stride(self, dim: int | None = None):
        """Strides in elements, as PyTorch reports them."""
        itemsize = self._dtype.itemsize
        strides = tuple(s // itemsize for s in self._data.strides)
        if dim is None:
            return strides
        return strides[_normalize_dim(dim, len(strides))]

    def is_contiguous(self) -> bool:
        """Whether the elements lie in C order without gaps (PyTorch's default layout; empty
        tensors are contiguous)."""
        if self._data.size == 0:  # NumPy gives empty arrays zero strides; PyTorch says True
            return True
        expected = _dispatch.c_strides(self._data.shape, self._dtype.itemsize)
        return all(size <= 1 or stride == want for size, stride, want in
                   zip(self._data.shape, self._data.strides, expected))

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor lives on a ``cuda`` device."""
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor lives on the host (``cpu``)."""
        return self._device.type == "cpu"

    def get_device(self) -> int:
        """The device index: ``-1`` for a cpu tensor, as in PyTorch, else the index."""
        return -1 if self._device.type == "cpu" else self._device.index

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating point type (a method, as in PyTorch)."""
        return self._dtype.is_floating_point

    def is_complex(self) -> bool:
        """Whether the dtype is complex (:func:`tensorplay.is_complex`)."""
        return self._dtype.is_complex

    def data_ptr(self) -> int:
        """Address of the first element in the device's address space."""
        if self._device.type == "cpu":
            return int(self._data.ctypes.data)
        return _dispatch.backend_of(self._device).array_ptr(self._data)

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        """Views of the slices along the first dimension (TypeError for a 0-d tensor)."""
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))  # type: ignore[index]   # methods.py

    # -- guard for graph outputs (see compiler) -----------------------------------------------
    def _check_guard(self) -> None:
        guard = self._guard
        if guard is not None:
            guard(self)

    # -- host access ------------------------------------------------------------------------
    def _host_copy(self, call: str) -> np.ndarray:
        """A NumPy copy of the data, waiting for the current stream (capture-checked)."""
        self._check_guard()
        if self._device.type == "cpu":
            return self._data
        native = _state.current_native_stream(self._device.index)
        _capture.check_capture_safe(call, native)
        return _dispatch.backend_of(self._device).to_host(native, self._data)

    def item(self):
        """The value of a one-element tensor as a Python number (waits for the device)."""
        if self.numel() != 1:
            raise RuntimeError(f"item() needs a tensor with one element, got shape "
                               f"{self.shape} ({self.numel()} elements)")
        return self._host_copy("Tensor.item()").reshape(-1)[0].item()

    def tolist(self):
        """The data as (nested) Python lists (waits for the device)."""
        return self._host_copy("Tensor.tolist()").tolist()

    def numpy(self) -> np.ndarray:
        """The NumPy array sharing this cpu tensor's memory.

        Raises:
            TypeError: for a tensor on an accelerator; copy it first with ``.cpu()``.
        """
        if self._device.type != "cpu":
            raise TypeError(f"can't convert a {self._device} tensor to numpy: numpy() needs "
                            f"host memory; use tensor.cpu().numpy() to copy it to the host first")
        self._check_guard()
        return self._data

    def __array__(self, dtype=None, copy=None):
        array = self._host_copy("Tensor.__array__()")
        return array if dtype is None else array.astype(dtype)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is "
                               f"ambiguous; use .any() or .all()")
        return builtins.bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if self._dtype.is_floating_point or self._dtype.is_complex or self.numel() != 1:
            raise TypeError("only one-element integer tensors can be used as an index")
        return int(self.item())

    def __hash__(self) -> int:
        return id(self)

    def __format__(self, format_spec: str) -> str:
        """``format(t, spec)`` / ``f"{t:.3f}"``, as PyTorch: a 0-d tensor formats its value
        (``f"{tp.tensor(1.5)}"`` is ``'1.5'``, not the repr); any other tensor formats as
        ``str(t)`` with an empty spec.

        Pitfall: a one-element tensor that is not 0-d (``tensor([1.5])``) is not a scalar to
        PyTorch either; index it (``t[0]``) or call ``t.item()`` first.

        Raises:
            TypeError: a non-empty spec for a tensor that is not 0-d (as ``object.__format__``).
        """
        if self._data.ndim == 0:
            return format(self.item(), format_spec)
        if format_spec:
            raise TypeError(f"unsupported format string {format_spec!r} passed to "
                            f"Tensor.__format__: only a 0-d tensor formats its value, this one "
                            f"has shape {tuple(self._data.shape)}; use t.item() or index it to "
                            f"one element first")
        return str(self)

    # -- DLPack ---------------------------------------------------------------------------------
    def __dlpack__(self, *args, **kwargs):
        self._check_guard()
        self._check_dlpack()
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        self._check_dlpack()
        return self._data.__dlpack_device__()

    def _check_dlpack(self) -> None:
        if not _dispatch.dlpack_device_types(self._device):
            raise TypeError(f"DLPack export of {self._device.type} tensors is not supported: "
                            f"this device's memory is not visible to other libraries; use "
                            f"tensor.cpu() first")


def _normalize_dim(dim: int, ndim: int) -> int:
    if isinstance(dim, builtins.bool) or not isinstance(dim, (int, np.integer)):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    limit = max(ndim, 1)
    if not -limit <= dim < limit:
        raise IndexError(f"dimension {dim} is out of range for a tensor with {ndim} "
                         f"dimension(s) (valid: {-limit} to {limit - 1})")
    return dim % limit
