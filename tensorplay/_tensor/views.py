"""Views: new Tensors over the same memory as their base (metadata only, no kernel).

Every function here builds a new ``xp`` array that aliases ``tensor._data`` (basic slicing,
``transpose``, ``broadcast_to`` or ``as_strided`` with strides worked out here), so writing
through a view changes its base on every device. None of them reads data: on an accelerator
they are safe while capturing and cost no device work.

The one exception is :func:`reshape`, which clones (a copy kernel) when the requested shape
cannot be expressed with strides over the original memory, exactly like PyTorch.

A view repeated with the same arguments on a tensor of the same layout (a model's reshapes,
every layer and every step) costs a few frames: its first call works the view out, checks it,
and keeps the one C-level array method that makes it (``_kept_views``); arguments other than
plain ints always take the full path, so their errors stay what they are.

.. note:: ``expand``/``broadcast_to`` views have zero strides: writing one element through them
   is allowed (it shows in every element sharing it), but in-place ops and ``__setitem__`` over
   several elements that share one memory location are refused, as in PyTorch.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import elementwise as _ops
from .tensor import Tensor, _normalize_dim, layout_of

__all__ = ["view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute",
           "transpose", "swapaxes", "swapdims", "t", "adjoint", "unsqueeze", "squeeze", "expand",
           "expand_as", "broadcast_to", "narrow", "select", "chunk", "split", "tensor_split",
           "movedim", "moveaxis", "unbind", "view_as_real"]

TENSOR_METHODS = ("view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute",
                  "transpose", "swapaxes", "swapdims", "t", "adjoint", "unsqueeze", "squeeze",
                  "expand", "expand_as", "broadcast_to", "narrow", "select", "chunk", "split",
                  "tensor_split", "movedim", "moveaxis", "unbind")
#: installed as read-only properties by ``_methods.install``
TENSOR_PROPERTIES = ("T", "mT", "H", "mH", "real", "imag")


# -- helpers ----------------------------------------------------------------------------------
def _make_view(base: Tensor, data, dtype: _dtype.dtype | None = None) -> Tensor:
    """A Tensor over ``data`` (an xp view of ``base._data``); it inherits ``base``'s guard, so a
    view of an overwritten compiled output is refused like the output itself."""
    out = Tensor._make(data, base._device, base._dtype if dtype is None else dtype)
    out._guard = base._guard
    return out


def _strided(base: Tensor, shape, strides_elems, data=None) -> Tensor:
    """A view of ``data`` (default ``base._data``) with the given shape and element strides."""
    data = base._data if data is None else data
    xp = _dispatch.xp_of(base.device)
    itemsize = base.dtype.itemsize
    array = xp.lib.stride_tricks.as_strided(
        data, shape=tuple(shape), strides=tuple(s * itemsize for s in strides_elems))
    return _make_view(base, array)


def _sizes(args, what: str) -> tuple[int, ...]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for size in args:
        if type(size) is not int:
            break
    else:
        return tuple(args)   # plain ints: the common case
    sizes = []
    for size in args:
        if isinstance(size, Tensor):
            size = size.__index__()
        if isinstance(size, builtins.bool) or not isinstance(size, (int, np.integer)):
            raise TypeError(f"{what}: sizes must be ints, got {type(size).__name__} {size!r}")
        sizes.append(int(size))
    return tuple(sizes)


def _dims(args, ndim: int, what: str) -> tuple[int, ...]:
    dims = tuple(_normalize_dim(d, ndim) for d in _sizes(args, what))
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"{what}: repeated dim in {tuple(_sizes(args, what))}")
    return dims


def infer_shape(shape: tuple[int, ...], numel: int, what: str = "view") -> tuple[int, ...]:
    """Replace one ``-1`` in ``shape`` so that it holds ``numel`` elements.

    Raises:
        RuntimeError: more than one -1, a negative size, or a shape of the wrong size.
    """
    if -1 not in shape and (not shape or min(shape) >= 0):   # nothing to infer
        if math.prod(shape) != numel:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        return tuple(shape)
    if builtins.sum(1 for s in shape if s == -1) > 1:
        raise RuntimeError(f"{what}: only one dimension can be inferred (-1), got "
                           f"{list(shape)}")
    for size in shape:
        if size < -1:
            raise RuntimeError(f"{what}: invalid shape dimension {size} in {list(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        return tuple(numel // known if s == -1 else s for s in shape)
    if known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def view_strides(old_shape, old_strides, new_shape):
    """Element strides that view ``old_shape``/``old_strides`` memory as ``new_shape``, or
    None when no strides can (PyTorch's ``computeStride``): a view may merge or split only
    dimensions that are contiguous with each other."""
    if math.prod(old_shape) == 0 or len(old_shape) == 0:
        return _dispatch.c_strides(tuple(new_shape), 1)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        boundary = tensor_d == 0 or (old_shape[tensor_d - 1] != 1 and
                                     old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
        if not boundary:
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base_stride
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if tensor_d > 0:
            chunk_base_stride = old_strides[tensor_d - 1]
            tensor_numel = 1
            view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


# -- repeated views -----------------------------------------------------------------------------
#: (op, the tensor's Layout, the op's arguments) -> (array method, its argument, the view's
#: Layout): how a repeated view (the same op and arguments on a tensor of the same layout, as a
#: model's reshapes are, every layer and every step) makes its array. The first call works the
#: view out and checks that one C-level array method gives exactly it; repeats call that method
#: and skip the argument checks and the stride arithmetic. The method None: a reshape that
#: copies (the copy's array reshaped).
_kept_views: dict = {}


def _repeat(op: str, tensor, args: tuple):
    """The view ``op(tensor, *args)`` when a call like it was kept (a Tensor); else the key to
    keep this call under (or None when its arguments are not plain ints, which are all that is
    kept: ``True`` and ``1.0`` hash like ``1`` but are errors)."""
    if type(tensor) is not Tensor:
        return None
    for arg in args:
        if type(arg) is not int:
            if type(arg) is not tuple:
                return None
            for size in arg:
                if type(size) is not int:
                    return None
    key = (op, tensor._layout or layout_of(tensor), args)
    kept = _kept_views.get(key)
    if kept is None:
        return key
    method, argument, layout = kept
    guard = tensor._guard
    if guard is not None:
        guard(tensor)
    if method is None:   # a reshape that copies: the copy's array reshaped
        tensor, method, guard = tensor.clone(), "reshape", None
    out = Tensor._make(getattr(tensor._data, method)(argument), tensor._device, tensor._dtype)
    out._guard = guard
    out._layout = layout
    return out


def _keep(key, base: Tensor, view: Tensor, method: str, argument) -> Tensor:
    """Keep ``base._data.method(argument)`` for the repeats of ``key`` when it makes exactly
    ``view``'s array (shape, strides and first element: a reshape that would copy is not kept);
    return ``view``."""
    if key is not None:
        try:
            candidate = getattr(base._data, method)(argument)
        except (ValueError, TypeError, IndexError, AttributeError):
            return view
        array = view._data
        if candidate.shape == array.shape and candidate.strides == array.strides and \
                Tensor._make(candidate, base._device, view._dtype).data_ptr() == view.data_ptr():
            _dispatch.remember(_kept_views, key, (method, argument, layout_of(view)))
    return view


# -- reshaping --------------------------------------------------------------------------------
def view(tensor: Tensor, *shape) -> Tensor:
    """The same memory with a new shape (one size may be -1), or ``view(dtype)``.

    Raises:
        RuntimeError: when the shape does not hold ``numel()`` elements, or when the tensor's
            strides cannot express it (use :func:`reshape`, which copies then).
    """
    found = _repeat("view", tensor, shape)
    if found.__class__ is Tensor:
        return found
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int, np.integer, Tensor)):
        return _view_dtype(tensor, _dtype.to_dtype(shape[0]))
    new_shape = infer_shape(_sizes(shape, "view"), tensor.numel())
    data = tensor._data
    if data.flags.c_contiguous:   # any shape views C-contiguous memory: the array's reshape
        return _keep(found, tensor, _make_view(tensor, data.reshape(new_shape)), "reshape",
                     new_shape)
    strides = view_strides(tensor.shape, tensor.stride(), new_shape)
    if strides is None:
        raise RuntimeError(f"view size is not compatible with input tensor's size and stride "
                           f"(at least one dimension spans across two contiguous subspaces): "
                           f"shape {tensor.shape} with strides {tensor.stride()} cannot be "
                           f"viewed as {new_shape}. Use .reshape(...) instead.")
    return _keep(found, tensor, _strided(tensor, new_shape, strides), "reshape", new_shape)


def _view_dtype(tensor: Tensor, dtype: _dtype.dtype) -> Tensor:
    """Reinterpret the bytes as another dtype (the last dimension scales with the itemsize)."""
    _dispatch.check_dtype_supported(tensor.device, dtype)
    if dtype.itemsize != tensor.dtype.itemsize:
        if tensor.ndim == 0 or tensor.stride(-1) != 1:
            raise RuntimeError(f"view({dtype}): viewing a {tensor.dtype} tensor as a dtype of a "
                               f"different size needs a last dimension of stride 1")
        if (tensor.shape[-1] * tensor.dtype.itemsize) % dtype.itemsize:
            raise RuntimeError(f"view({dtype}): the last dimension's {tensor.shape[-1]} x "
                               f"{tensor.dtype.itemsize} bytes are not a multiple of "
                               f"{dtype.itemsize}")
    return _make_view(tensor, tensor._data.view(dtype.numpy), dtype)


def view_as(tensor: Tensor, other: Tensor) -> Tensor:
    """A view of ``tensor`` with ``other``'s shape (:meth:`Tensor.view`)."""
    return view(tensor, other.shape)


def reshape(tensor: Tensor, *shape) -> Tensor:
    """A view with the new shape when the strides allow it, else a contiguous copy reshaped.

    Never reads data on the host: the copy (if any) is a kernel on the tensor's device.
    """
    found = _repeat("reshape", tensor, shape)
    if found.__class__ is Tensor:
        return found
    new_shape = infer_shape(_sizes(shape, "reshape"), tensor.numel(), "reshape")
    strides = view_strides(tensor.shape, tensor.stride(), new_shape)
    if strides is not None:
        return _keep(found, tensor, _strided(tensor, new_shape, strides), "reshape", new_shape)
    copy = tensor.clone()
    out = _strided(copy, new_shape, _dispatch.c_strides(new_shape, 1))
    if found is not None:   # the copy is C-contiguous: its array's reshape is the view
        _dispatch.remember(_kept_views, found, (None, new_shape, layout_of(out)))
    return out


def reshape_as(tensor: Tensor, other: Tensor) -> Tensor:
    """``tensor`` reshaped to ``other``'s shape (:func:`reshape`: a view when possible)."""
    return reshape(tensor, other.shape)


def flatten(tensor: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim`` into one (a 0-d tensor becomes shape ``(1,)``)."""
    if tensor.ndim == 0:
        return reshape(tensor, 1)
    start = _normalize_dim(start_dim, tensor.ndim)
    end = _normalize_dim(end_dim, tensor.ndim)
    if start > end:
        raise RuntimeError(f"flatten() has invalid args: start_dim {start_dim} cannot come "
                           f"after end_dim {end_dim}")
    shape = tensor.shape
    return reshape(tensor, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


def unflatten(tensor: Tensor, dim: int, sizes) -> Tensor:
    """Split dimension ``dim`` into ``sizes`` (one may be -1)."""
    dim = _normalize_dim(dim, tensor.ndim)
    sizes = _sizes((sizes,), "unflatten")
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    inner = infer_shape(sizes, tensor.shape[dim], "unflatten")
    shape = tensor.shape
    return view(tensor, shape[:dim] + inner + shape[dim + 1:])


# -- reordering dimensions --------------------------------------------------------------------
def permute(tensor: Tensor, *dims) -> Tensor:
    """The dimensions in the order ``dims`` (a permutation of ``range(ndim)``)."""
    found = _repeat("permute", tensor, dims)
    if found.__class__ is Tensor:
        return found
    given = _sizes(dims, "permute")
    if len(given) != tensor.ndim:
        raise RuntimeError(f"permute: the number of dims ({len(given)}, {given}) must equal "
                           f"the tensor's number of dimensions ({tensor.ndim})")
    order = _dims(given, tensor.ndim, "permute")
    xp = _dispatch.xp_of(tensor.device)
    return _keep(found, tensor, _make_view(tensor, xp.transpose(tensor._data, order)),
                 "transpose", order)


def transpose(tensor: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions."""
    found = _repeat("transpose", tensor, (dim0, dim1))
    if found.__class__ is Tensor:
        return found
    ndim = tensor.ndim
    if ndim == 0:
        _normalize_dim(dim0, 0)
        _normalize_dim(dim1, 0)
        return _make_view(tensor, tensor._data)
    order = list(range(ndim))
    a, b = _normalize_dim(dim0, ndim), _normalize_dim(dim1, ndim)
    order[a], order[b] = order[b], order[a]
    xp = _dispatch.xp_of(tensor.device)
    return _keep(found, tensor, _make_view(tensor, xp.transpose(tensor._data, order)),
                 "transpose", tuple(order))


swapaxes = transpose
swapdims = transpose


def t(tensor: Tensor) -> Tensor:
    """Transpose a tensor of at most 2 dimensions (0-d and 1-d come back unchanged)."""
    if tensor.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{tensor.ndim}D")
    return transpose(tensor, 0, -1) if tensor.ndim == 2 else _make_view(tensor, tensor._data)


def T(tensor: Tensor) -> Tensor:
    """All dimensions reversed."""
    return permute(tensor, tuple(range(tensor.ndim - 1, -1, -1)))


def mT(tensor: Tensor) -> Tensor:
    """The last two dimensions swapped (batched matrix transpose)."""
    if tensor.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. "
                           f"Got {tensor.ndim}-D tensor.")
    return transpose(tensor, -2, -1)


def H(tensor: Tensor) -> Tensor:
    """Conjugate transpose of a matrix (a copy for complex tensors)."""
    if tensor.ndim not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{tensor.ndim}-D tensor.")
    return _conj(T(tensor))


def mH(tensor: Tensor) -> Tensor:
    """Conjugate transpose of the last two dimensions (a copy for complex tensors)."""
    return _conj(mT(tensor))


def adjoint(tensor: Tensor) -> Tensor:
    """``tensor.mH``: the conjugate transpose of the last two dimensions (a copy for complex
    tensors, a view otherwise)."""
    return mH(tensor)


def _conj(tensor: Tensor) -> Tensor:
    if not tensor.dtype.is_complex:
        return tensor
    return _ops.elementwise("conj", "conjugate", [tensor])


def real(tensor: Tensor) -> Tensor:
    """The real part (a view) of a complex tensor; any other tensor itself."""
    if not tensor.dtype.is_complex:
        return tensor
    return _make_view(tensor, tensor._data.real, _dtype.from_numpy_dtype(tensor._data.real.dtype))


def imag(tensor: Tensor) -> Tensor:
    """The imaginary part (a view); only complex tensors have one."""
    if not tensor.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return _make_view(tensor, tensor._data.imag, _dtype.from_numpy_dtype(tensor._data.imag.dtype))


def view_as_real(tensor: Tensor) -> Tensor:
    """A complex tensor's memory as float pairs: shape ``(*shape, 2)``."""
    if not tensor.dtype.is_complex:
        raise RuntimeError(f"view_as_real is only supported for complex tensors, got "
                           f"{tensor.dtype}")
    real_dtype = _dtype.from_numpy_dtype(tensor._data.real.dtype)
    strides = tuple(s * 2 for s in tensor.stride()) + (1,)
    half = _make_view(tensor, tensor._data.real, real_dtype)
    return _strided(half, tensor.shape + (2,), strides)


def movedim(tensor: Tensor, source, destination) -> Tensor:
    """Move dims ``source`` to positions ``destination`` (ints or equal-length sequences)."""
    ndim = tensor.ndim
    src = (source,) if not isinstance(source, Sequence) else tuple(source)
    dst = (destination,) if not isinstance(destination, Sequence) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    src = _dims(src, ndim, "movedim")
    dst = _dims(dst, ndim, "movedim")
    order: list[int | None] = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return permute(tensor, order)


moveaxis = movedim


# -- adding and removing size-1 dimensions ------------------------------------------------------
def unsqueeze_stride(shape, strides, dim: int) -> int:
    """The stride PyTorch gives a size-1 dimension inserted at ``dim``: the extent of the
    dimension it goes in front of (1 at the end), so the view stays as contiguous as its base
    (NumPy would give 0)."""
    return shape[dim] * strides[dim] if dim < len(shape) else 1


def unsqueeze(tensor: Tensor, dim: int) -> Tensor:
    """A size-1 dimension inserted at ``dim`` (``-ndim-1 <= dim <= ndim``)."""
    found = _repeat("unsqueeze", tensor, (dim,))
    if found.__class__ is Tensor:
        return found
    dim = _normalize_dim(dim, tensor.ndim + 1)
    shape, strides = tensor.shape, tensor.stride()
    new_shape = shape[:dim] + (1,) + shape[dim:]
    return _keep(found, tensor, _strided(
        tensor, new_shape,
        strides[:dim] + (unsqueeze_stride(shape, strides, dim),) + strides[dim:]),
        "reshape", tuple(new_shape))


def squeeze(tensor: Tensor, dim=None) -> Tensor:
    """Remove size-1 dimensions: all of them, or those among ``dim`` (an int or a tuple);
    a named dim of another size is left alone, as in PyTorch."""
    found = _repeat("squeeze", tensor, () if dim is None else (dim,))
    if found.__class__ is Tensor:
        return found
    ndim = tensor.ndim
    if dim is None:
        dims = set(range(ndim))
    elif isinstance(dim, (tuple, list)):
        dims = set(_dims(dim, ndim, "squeeze"))
    else:
        dims = {_normalize_dim(dim, ndim)} if ndim else set()
    shape = tensor.shape
    key = tuple([0 if d in dims and shape[d] == 1 else slice(None) for d in range(ndim)] +
                [Ellipsis])
    return _keep(found, tensor, _make_view(tensor, tensor._data[key]), "__getitem__", key)


# -- broadcasting ---------------------------------------------------------------------------
def expand(tensor: Tensor, *sizes) -> Tensor:
    """A broadcast view: size-1 dims repeat to ``sizes`` (-1 keeps a size); new dims may be
    added in front. Nothing is copied; the view's repeated elements share memory.

    Strides follow PyTorch: 0 for every repeated dim, the base's for the others; a new leading
    dim of size 1 gets the extent of the dim after it.
    """
    sizes = _sizes(sizes, "expand")
    shape, base_strides = tensor.shape, tensor.stride()
    if len(sizes) < len(shape):
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be "
                           f"greater or equal to the number of dimensions in the tensor "
                           f"({len(shape)})")
    lead = len(sizes) - len(shape)
    target = [0] * len(sizes)
    strides = [0] * len(sizes)
    for i in range(len(sizes) - 1, -1, -1):
        size = sizes[i]
        if i < lead:
            if size < 0:
                raise RuntimeError(f"expand: the expanded size of the tensor ({size}) isn't "
                                   f"allowed in a leading, non-existing dimension {i}")
            have = 1
            stride = target[i + 1] * strides[i + 1] if i + 1 < len(sizes) else 0
        else:
            have, stride = shape[i - lead], base_strides[i - lead]
            if size == -1:
                size = have
            elif size < 0:
                raise RuntimeError(f"expand: the expanded size of the tensor ({size}) at "
                                   f"dimension {i} is invalid: a size must be non-negative, or "
                                   f"-1 to keep the existing size ({have}).  Target sizes: "
                                   f"{list(sizes)}.  Tensor sizes: {list(shape)}")
            elif have != 1 and size != have:
                raise RuntimeError(f"The expanded size of the tensor ({size}) must match the "
                                   f"existing size ({have}) at non-singleton dimension {i}.  "
                                   f"Target sizes: {list(sizes)}.  Tensor sizes: "
                                   f"{list(shape)}")
        target[i] = size
        strides[i] = 0 if size != have or not shape else stride
    # as_strided rather than xp.broadcast_to: NumPy's broadcast views are read-only, and
    # PyTorch lets one write a single element of an expanded view (e[0, 0] = 1).
    return _strided(tensor, target, strides)


def expand_as(tensor: Tensor, other: Tensor) -> Tensor:
    """``tensor`` broadcast to ``other``'s shape, as a view (:meth:`Tensor.expand`)."""
    return expand(tensor, other.shape)


def broadcast_to(tensor: Tensor, shape) -> Tensor:
    """Same as :meth:`Tensor.expand` (``shape`` as one sequence)."""
    return expand(tensor, _sizes((shape,), "broadcast_to"))


# -- slicing ----------------------------------------------------------------------------------
def narrow(tensor: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``length`` elements of ``dim`` from ``start`` (which may be negative)."""
    found = _repeat("narrow", tensor, (dim, start, length))
    if found.__class__ is Tensor:
        return found
    if tensor.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    dim = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[dim]
    start = int(start)
    if not -size <= start <= size:
        raise IndexError(f"narrow: start {start} is out of range for dimension {dim} of size "
                         f"{size} (valid: {-size} to {size})")
    if start < 0:
        start += size
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    key = (slice(None),) * dim + (slice(start, start + length),)
    return _keep(found, tensor, _make_view(tensor, tensor._data[key]), "__getitem__", key)


def select(tensor: Tensor, dim: int, index: int) -> Tensor:
    """The slice at ``index`` along ``dim``, with that dimension removed."""
    found = _repeat("select", tensor, (dim, index))
    if found.__class__ is Tensor:
        return found
    if tensor.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[dim]
    index = int(index)
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(tensor.shape)} at dimension {dim}")
    key = (slice(None),) * dim + (index % size, Ellipsis)  # `...`: a 0-d view, not a scalar
    return _keep(found, tensor, _make_view(tensor, tensor._data[key]), "__getitem__", key)


def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Views of pieces along ``dim``: of ``split_size`` each (the last may be smaller), or of
    the sizes in a list (which must add up to the dimension's size)."""
    if tensor.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    dim = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[dim]
    sections: Sequence[int]
    if isinstance(split_size_or_sections, (list, tuple)):
        sections = _sizes((split_size_or_sections,), "split")
        if builtins.sum(sections) != size or builtins.any(s < 0 for s in sections):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                               f"(input tensor's size at dimension {dim}), but got "
                               f"split_sizes={list(sections)}")
    else:
        step = int(split_size_or_sections)
        if step < 0 or (step == 0 and size != 0):
            raise RuntimeError(f"split expects split_size be non-negative (and positive for a "
                               f"non-empty dimension), but got split_size={step}")
        count = builtins.max(1, -(-size // step)) if step else 1
        sections = [builtins.min(step, size - i * step) for i in range(count)]
    pieces = []
    start = 0
    for length in sections:
        pieces.append(narrow(tensor, dim, start, length))
        start += length
    return tuple(pieces)


def chunk(tensor: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """At most ``chunks`` views of equal size (``ceil(size / chunks)``) along ``dim``."""
    if isinstance(chunks, builtins.bool) or not isinstance(chunks, (int, np.integer)) or \
            chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if tensor.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    size = tensor.shape[_normalize_dim(dim, tensor.ndim)]
    return split(tensor, builtins.max(1, -(-size // int(chunks))), dim)


def tensor_split(tensor: Tensor, indices_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """``n`` views as equal as possible (the first ``size % n`` one longer), or views split
    at the given indices."""
    if tensor.ndim == 0:
        raise RuntimeError("tensor_split expects at least a 1-dimensional tensor")
    dim = _normalize_dim(dim, tensor.ndim)
    size = tensor.shape[dim]
    if isinstance(indices_or_sections, (list, tuple)):
        bounds = [0] + [builtins.min(builtins.max(int(i) if i >= 0 else int(i) + size, 0), size)
                        for i in indices_or_sections] + [size]
        return tuple(narrow(tensor, dim, a, builtins.max(b - a, 0))
                     for a, b in zip(bounds, bounds[1:]))
    count = int(indices_or_sections)
    if count <= 0:
        raise RuntimeError(f"tensor_split: number of sections must be greater than 0, got "
                           f"{count}")
    lengths = [size // count + (1 if i < size % count else 0) for i in range(count)]
    return split(tensor, lengths, dim)


def unbind(tensor: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """Every slice along ``dim`` (views), that dimension removed."""
    if tensor.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    dim = _normalize_dim(dim, tensor.ndim)
    return tuple(select(tensor, dim, i) for i in range(tensor.shape[dim]))


def diagonal(tensor: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the ``(dim1, dim2)`` matrices as the last dimension (a writable view);
    ``offset > 0`` is above the main diagonal, ``< 0`` below. The view primitive behind
    ``shapes.diagonal`` (``tp.diagonal``), which checks the arguments as PyTorch does."""
    ndim = tensor.ndim
    if ndim < 2:
        raise RuntimeError(f"diagonal: expected a tensor of at least 2 dimensions, got {ndim}")
    d1, d2 = _normalize_dim(dim1, ndim), _normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    shape, strides = tensor.shape, tensor.stride()
    offset = int(offset)
    if offset >= 0:
        length = builtins.max(builtins.min(shape[d1], shape[d2] - offset), 0)
        start = [0, offset]
    else:
        length = builtins.max(builtins.min(shape[d1] + offset, shape[d2]), 0)
        start = [-offset, 0]
    data = tensor._data
    if length:
        key = [slice(None)] * ndim
        key[d1], key[d2] = slice(start[0], None), slice(start[1], None)
        data = data[tuple(key)]
    rest = [d for d in range(ndim) if d not in (d1, d2)]
    new_shape = [shape[d] for d in rest] + [length]
    new_strides = [strides[d] for d in rest] + [strides[d1] + strides[d2]]
    return _strided(tensor, new_shape, new_strides, data)
