"""Products and shape functions with PyTorch's names and semantics: ``einsum``, ``tensordot``,
``kron``, ``cross``, ``diag``, ``diagonal``, ``trace``, ``tril``/``triu`` (and ``tril_``/
``triu_``), ``repeat`` (a method only, as in PyTorch), ``tile``, ``roll``, ``flip``,
``meshgrid`` and ``as_strided``.

What each returns follows PyTorch: ``diagonal``, ``meshgrid``, ``as_strided`` and one-operand
``einsum`` without a summation are views (writing through them changes the base); ``diag``,
``repeat``, ``tile``, ``roll``, ``flip``, ``tril``, ``triu``, ``kron``, ``cross`` and products
are new tensors. Everything is worked out from metadata and runs as kernels on the tensor's
device, so every function here is safe inside a captured graph (none reads data on the host).

Products (``einsum`` contractions, ``tensordot``) are permutes and reshapes around ONE call of
``linalg.matmul`` (cuBLASLt on cuda), as PyTorch routes them through ``bmm``: so, as there,
contracting integer tensors on an accelerator raises NotImplementedError and operands must share
one dtype.
"""

from __future__ import annotations

import builtins
import functools
import math
import warnings
from typing import Any

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import elementwise as _ops, linalg as _linalg, reductions as _reductions
from . import transfer as _transfer, views as _views
from .join import _tensor_arg
from .tensor import Tensor, _normalize_dim

__all__ = ["einsum", "tensordot", "kron", "cross", "diag", "diagonal", "trace", "tril",
           "triu", "tile", "roll", "flip", "meshgrid", "as_strided"]

TENSOR_METHODS = ("kron", "cross", "diag", "diagonal", "trace", "tril", "triu", "tril_",
                  "triu_", "repeat", "tile", "roll", "as_strided")


# -- helpers ----------------------------------------------------------------------------------
def _int_list(value, op: str, name: str) -> tuple[int, ...]:
    """An int or a sequence of ints (one-element integer tensors allowed) as a tuple."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    result = []
    for item in items:
        if isinstance(item, Tensor):
            item = item.__index__()
        if isinstance(item, builtins.bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"{op}(): argument '{name}' must be an int or a sequence of ints, "
                            f"got {type(item).__name__} {item!r}")
        result.append(int(item))
    return tuple(result)


def _varargs(args, op: str, name: str) -> tuple[int, ...]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return _int_list(tuple(args), op, name)


def _launch_new(op: str, tensor: Tensor, shape, body, dtype: _dtype.dtype | None = None):
    """A new contiguous tensor of ``shape`` on ``tensor``'s device, written by ONE kernel
    ``body(xp, out_array, in_array)`` (which must close over no host values read from data)."""
    device = tensor.device
    dtype = tensor.dtype if dtype is None else dtype
    shape = tuple(shape)
    out = _dispatch.empty(device, shape, dtype)
    src = tensor._data
    xp = _dispatch.xp_of(device)

    def kernel():
        body(xp, out, src)
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=shape))
    return Tensor._make(out, device, dtype)


def _same_device(tensors, op: str):
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        names = " and ".join(sorted(str(d) for d in devices))
        raise RuntimeError(f"{op}(): expected all tensors to be on the same device, but found "
                           f"at least two devices, {names}")


def _same_dtype(tensors, op: str):
    dtypes = [t.dtype for t in tensors]
    if any(d is not dtypes[0] for d in dtypes):
        raise RuntimeError(f"{op}(): expected all operands to have the same dtype, got "
                           f"{', '.join(d.name for d in dtypes)}; convert them with .to() first")


# -- einsum -----------------------------------------------------------------------------------
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_LABEL = {c: i for i, c in enumerate(_LETTERS)}   # PyTorch's order: upper case first
_ELLIPSIS_LABEL = len(_LETTERS)                    # ellipsis dim j is label 52 + j


def _label_name(label: int) -> str:
    return _LETTERS[label] if label < _ELLIPSIS_LABEL else f"...[{label - _ELLIPSIS_LABEL}]"


def _parse_term(term: str, start: int, what: str):
    """A term's labels (ints) with None where its ellipsis is."""
    labels: list[int | None]
    labels, i = [], 0
    while i < len(term):
        char = term[i]
        if char == " ":
            i += 1
            continue
        if char == ".":
            if term[i:i + 3] != "...":
                raise RuntimeError(f"einsum(): found '.' for {what} that is not part of any "
                                   f"ellipsis")
            if None in labels:
                raise RuntimeError(f"einsum(): found '.' for {what} for which an ellipsis was "
                                   f"already found")
            labels.append(None)
            i += 3
            continue
        if char not in _LABEL:
            raise RuntimeError(f"einsum(): invalid subscript given at index {start + i} in the "
                               f"equation string, subscripts must be in [a-zA-Z]")
        labels.append(_LABEL[char])
        i += 1
    return labels


@functools.lru_cache(maxsize=1024)
def _einsum_parse(equation: str, ndims: tuple[int, ...]):
    """(labels of each operand, output labels, ellipsis rank) for ``equation`` over operands of
    these ranks (cached: the parse depends on nothing else)."""
    lhs, arrow, rhs = equation.partition("->")
    terms, starts, position = [], [], 0
    for term in lhs.split(","):
        terms.append(term)
        starts.append(position)
        position += len(term) + 1
    if len(terms) > len(ndims):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    if len(terms) < len(ndims):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    operands, ell_rank = [], 0
    for index, (term, start, ndim) in enumerate(zip(terms, starts, ndims)):
        labels = _parse_term(term, start, f"operand {index}")
        explicit = len(labels) - (None in labels)
        if None in labels:
            if explicit > ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                                   f"({explicit}) is more than the number of dimensions "
                                   f"({ndim}) for operand {index}")
            ell_rank = builtins.max(ell_rank, ndim - explicit)
        elif explicit != ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({explicit})"
                               f" does not match the number of dimensions ({ndim}) for operand "
                               f"{index} and no ellipsis was given")
        operands.append((labels, ndim - explicit))
    resolved = []
    for labels, ell in operands:
        full: list[int] = []
        for label in labels:
            if label is None:   # aligned to the right of the broadcast ellipsis
                full.extend(range(_ELLIPSIS_LABEL + ell_rank - ell, _ELLIPSIS_LABEL + ell_rank))
            else:
                full.append(label)
        resolved.append(tuple(full))
    ell_labels = list(range(_ELLIPSIS_LABEL, _ELLIPSIS_LABEL + ell_rank))
    if arrow:
        out_terms = _parse_term(rhs, len(lhs) + 2, "the output")
        output, seen = [], set()
        for label in out_terms:
            if label is None:
                output.extend(ell_labels)
                continue
            if label in seen:
                raise RuntimeError(f"einsum(): output subscript {_label_name(label)} appears "
                                   f"more than once in the output")
            if not any(label in labels for labels in resolved):
                raise RuntimeError(f"einsum(): output subscript {_label_name(label)} does not "
                                   f"appear in the equation for any input operand")
            seen.add(label)
            output.append(label)
    else:   # implicit: the ellipsis, then every label seen once, in label order
        counts: dict[int, int] = {}
        for labels in resolved:
            for label in labels:
                if label < _ELLIPSIS_LABEL:
                    counts[label] = counts.get(label, 0) + 1
        output = ell_labels + sorted(label for label, n in counts.items() if n == 1)
    return tuple(resolved), tuple(output)


def _sublist_equation(args) -> tuple[str, list]:
    """``einsum(op1, [0, 1], op2, [1, 2], [0, 2])`` as an equation and its operands."""
    def term(sublist) -> str:
        chars = []
        for item in sublist:
            if item is Ellipsis:
                chars.append("...")
            elif isinstance(item, (int, np.integer)) and not isinstance(item, builtins.bool) \
                    and 0 <= item < len(_LETTERS):
                chars.append(_LETTERS[(int(item) + 26) % 52])   # 0 -> 'a', 26 -> 'A'
            else:
                raise RuntimeError(f"einsum(): expected subscript to be within the range "
                                   f"[0, 52), but got {item!r}")
        return "".join(chars)
    operands, terms = [], []
    items = list(args)
    while len(items) >= 2 and isinstance(items[0], Tensor):
        operands.append(items.pop(0))
        terms.append(term(items.pop(0)))
    equation = ",".join(terms)
    if items:
        if len(items) != 1 or isinstance(items[0], Tensor):
            raise TypeError("einsum(): sublist format takes operand, sublist pairs and at most "
                            "one output sublist")
        equation += "->" + term(items[0])
    return equation, operands


def einsum(*args) -> Tensor:
    """Einstein summation, as ``torch.einsum``: ``einsum("ij,jk->ik", a, b)``, the operands as
    one list (``einsum("ij,jk", [a, b])``) or the sublist format (``einsum(a, [0, 1], b, [1,
    2])``). Labels are ``[a-zA-Z]``; ``...`` broadcasts; without ``->`` the output is the
    ellipsis dims then every label used once, in alphabetical order (upper case first). Spaces
    are ignored. Dimensions of size 1 broadcast against the same label's size elsewhere.

    One operand: diagonals, permutes (views, as in PyTorch) and sums. Several: contracted left to
    right in pairs; a pair sharing labels that are summed is ONE ``linalg.matmul`` (cuBLASLt on
    cuda) between permuted, reshaped operands, a pair sharing none is an elementwise product.
    Ellipsis dims left out of an explicit output are summed.

    Raises:
        RuntimeError: PyTorch's einsum errors (bad subscripts, operand count or rank, sizes
            that differ for one label, a repeated or unknown output label, no operand), and
            operands of different dtypes or devices.
        NotImplementedError: a contraction of integer tensors on an accelerator (as matmul).
    """
    if not args:
        raise TypeError("einsum(): missing the equation")
    if isinstance(args[0], Tensor):
        equation, operands = _sublist_equation(args)
    else:
        equation = args[0]
        if not isinstance(equation, str):
            raise TypeError(f"einsum(): argument 'equation' must be str, not "
                            f"{type(equation).__name__}")
        operands = list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])
    if not operands:
        raise ValueError("einsum(): must specify the equation string and at least one operand, "
                         "or at least one operand and its subscripts list")
    for i, operand in enumerate(operands):
        _tensor_arg(operand, "einsum", f"operands[{i}]")
    _same_device(operands, "einsum")
    _same_dtype(operands, "einsum")
    labels, output = _einsum_parse(equation, tuple(t.ndim for t in operands))
    terms = [_einsum_diagonals(t, list(lab), i) for i, (t, lab) in
             enumerate(zip(operands, labels))]
    sizes = _einsum_sizes(terms, operands)
    if len(terms) == 1:
        return _einsum_single(*terms[0], output)
    # keep[j]: the labels still needed once operands 0..j are contracted together
    keep = [set(output)]
    for _, lab in reversed(terms[1:]):
        keep.insert(0, keep[0] | set(lab))
    tensor, lab = _einsum_sum_private(*terms[0], keep[0])
    for j in range(1, len(terms)):
        other, other_lab = _einsum_sum_private(*terms[j], keep[j] | set(lab))
        tensor, lab = _einsum_pair(tensor, lab, other, other_lab, keep[j], sizes)
        tensor, lab = _einsum_sum_private(tensor, lab, keep[j])
    shape = tuple(sizes[label] for label in lab)
    if shape != tensor.shape:   # a size-1 dim broadcast against a larger one elsewhere
        tensor = _views.expand(tensor, shape)
    return _views.permute(tensor, [lab.index(label) for label in output])


def _einsum_single(tensor: Tensor, labels: list, output) -> Tensor:
    """One operand, as PyTorch: permuted to the output's labels followed by the summed ones,
    then summed over those, so a sum gives a fresh contiguous result in the output's order and
    no sum gives a view."""
    summed = [label for label in labels if label not in output]
    tensor = _views.permute(tensor, [labels.index(label) for label in list(output) + summed])
    if not summed:
        return tensor
    dims = tuple(range(len(output), len(output) + len(summed)))
    return _reductions.sum(tensor, dims, dtype=tensor.dtype)


def _einsum_diagonals(tensor: Tensor, labels: list, index: int) -> tuple[Tensor, list]:
    """Take the diagonal of every label repeated within one operand (views)."""
    while len(set(labels)) != len(labels):
        for label in labels:
            dims = [d for d, other in enumerate(labels) if other == label]
            if len(dims) > 1:
                break
        d1, d2 = dims[0], dims[1]
        if tensor.shape[d1] != tensor.shape[d2]:
            raise RuntimeError(f"einsum(): subscript {_label_name(label)} is repeated for "
                               f"operand {index} but the sizes don't match, "
                               f"{tensor.shape[d1]} != {tensor.shape[d2]}")
        tensor = diagonal(tensor, 0, d1, d2)
        labels = [lab for d, lab in enumerate(labels) if d not in (d1, d2)] + [label]
    return tensor, labels


def _einsum_sizes(terms, operands) -> dict:
    """Each label's size: equal across operands, or 1 (which broadcasts)."""
    sizes: dict[int, int] = {}
    for tensor, labels in terms:
        for label, size in zip(labels, tensor.shape):
            have = sizes.get(label, 1)
            if have != size and have != 1 and size != 1:
                shapes = " ".join(f"{list(t.shape)}" for t in operands)
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes: "
                                   f"subscript {_label_name(label)} has sizes {have} and {size} "
                                   f"(operand shapes {shapes})")
            sizes[label] = size if have == 1 else have
    return sizes


def _einsum_sum_private(tensor: Tensor, labels, keep: set):
    """Sum the dims whose labels are not in ``keep`` (the dtype stays, as in PyTorch)."""
    labels = list(labels)
    dims = [d for d, label in enumerate(labels) if label not in keep]
    if not dims:
        return tensor, labels
    summed = _reductions.sum(tensor, tuple(dims), dtype=tensor.dtype)
    return summed, [label for d, label in enumerate(labels) if d not in dims]


def _einsum_pair(a: Tensor, la: list, b: Tensor, lb: list, keep: set, sizes: dict):
    """Contract two operands: labels in both and not kept are summed by one matmul; with none
    such, an elementwise (broadcast) product."""
    contracted = [label for label in la if label in lb and label not in keep]
    batch = [label for label in la if label in lb and label in keep]
    left = [label for label in la if label not in lb]
    right = [label for label in lb if label not in la]
    if not contracted:
        order = la + right
        a_view = _views.reshape(a, a.shape + (1,) * len(right))
        b_view = _views.permute(b, [lb.index(x) for x in order if x in lb])
        b_view = _views.reshape(b_view, tuple(b.shape[lb.index(x)] if x in lb else 1
                                              for x in order))
        return _ops.binary("mul", a_view, b_view), order
    shared = set(batch) | set(contracted)

    def arrange(tensor: Tensor, labels: list, groups: list) -> Tensor:
        """Permuted to ``groups``; shared labels of size 1 broadcast (stride 0)."""
        flat = [x for group in groups for x in group]
        tensor = _views.permute(tensor, [labels.index(x) for x in flat])
        shape = tuple(sizes[x] if x in shared else n for x, n in zip(flat, tensor.shape))
        return tensor if shape == tensor.shape else _views.expand(tensor, shape)
    a_full = arrange(a, la, [batch, left, contracted])
    b_full = arrange(b, lb, [batch, contracted, right])
    nb, nl, nc = len(batch), len(left), len(contracted)
    batch_shape = a_full.shape[:nb]
    left_shape = a_full.shape[nb:nb + nl]
    right_shape = b_full.shape[nb + nc:]
    k = math.prod(a_full.shape[nb + nl:])
    a_mat = _views.reshape(a_full, (math.prod(batch_shape), math.prod(left_shape), k))
    b_mat = _views.reshape(b_full, (math.prod(batch_shape), k, math.prod(right_shape)))
    product = _linalg.matmul(a_mat, b_mat)
    return _views.reshape(product, batch_shape + left_shape + right_shape), batch + left + right


# -- tensordot, kron, cross -----------------------------------------------------------------
def tensordot(a, b, dims=2) -> Tensor:
    """Sum the products of ``a``'s and ``b``'s elements over the given dims: ``dims`` an int
    ``n`` (``a``'s last ``n`` with ``b``'s first ``n``), or two sequences (``([1, 0], [0,
    1])``) pairing ``a``'s dims with ``b``'s. The result's dims are ``a``'s free dims then
    ``b``'s. One ``linalg.matmul`` between permuted, reshaped operands (cuBLASLt on cuda).

    Raises:
        RuntimeError: a negative ``dims``, more dims than an operand has, lists of different
            lengths, contracted sizes that differ, or operands of different dtypes (as torch).
        NotImplementedError: integer tensors on an accelerator (as matmul).
    """
    a = _tensor_arg(a, "tensordot", "a")
    b = _tensor_arg(b, "tensordot", "b")
    if isinstance(dims, Tensor):
        dims = dims.tolist() if dims.ndim else dims.__index__()
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, builtins.bool):
        n = int(dims)
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={n}")
        if n > a.ndim or n > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={n}")
        dims_a, dims_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    elif isinstance(dims, (tuple, list)) and len(dims) == 2:
        dims_a = [_normalize_dim(d, a.ndim) for d in _int_list(dims[0], "tensordot", "dims")]
        dims_b = [_normalize_dim(d, b.ndim) for d in _int_list(dims[1], "tensordot", "dims")]
        if len(dims_a) != len(dims_b):
            raise RuntimeError(f"both dimension lists should have same length, got "
                               f"{len(dims_a)} and {len(dims_b)}")
    else:
        raise TypeError(f"tensordot(): argument 'dims' must be an int or a pair of sequences of "
                        f"ints, got {dims!r}")
    for da, db in zip(dims_a, dims_b):
        if a.shape[da] != b.shape[db]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[da]} in dim {da} and second has size {b.shape[db]} "
                               f"in dim {db}")
    _same_device((a, b), "tensordot")
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = math.prod(a.shape[d] for d in dims_a)
    shape_a = tuple(a.shape[d] for d in free_a)
    shape_b = tuple(b.shape[d] for d in free_b)
    a_mat = _views.reshape(_views.permute(a, free_a + dims_a), (math.prod(shape_a), k))
    b_mat = _views.reshape(_views.permute(b, dims_b + free_b), (k, math.prod(shape_b)))
    return _views.reshape(_linalg.matmul(a_mat, b_mat), shape_a + shape_b)


def kron(input, other) -> Tensor:
    """The Kronecker product: the rank is the larger of the two (the smaller is padded with
    leading size-1 dims) and dim ``i`` has size ``input.shape[i] * other.shape[i]``. dtypes
    promote, as in PyTorch (it is an elementwise product of broadcast views, one kernel)."""
    a = _tensor_arg(input, "kron", "input")
    b = _tensor_arg(other, "kron", "other")
    nd = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    a_view = _views.reshape(a, tuple(x for s in sa for x in (s, 1)))
    b_view = _views.reshape(b, tuple(x for s in sb for x in (1, s)))
    product = _ops.binary("mul", a_view, b_view)
    return _views.reshape(product, tuple(x * y for x, y in zip(sa, sb)))


def cross(input, other, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim`` (shapes broadcast, ranks must match).

    ``dim=None`` is ``torch.cross``'s default: the FIRST dim of size 3 of the broadcast shape,
    with torch's deprecation UserWarning. ``torch.linalg.cross`` (and its future ``torch.cross``
    default) uses ``dim=-1`` instead: pass ``dim=-1`` to mean that; the two differ for shapes
    such as ``(3, 3)``.

    Raises:
        RuntimeError: different ranks, ``dim`` not of size 3 in both, no dim of size 3 (with
            ``dim=None``), operands of different dtypes, or bool operands.
        IndexError: ``dim`` out of range.
    """
    a = _tensor_arg(input, "cross", "input")
    b = _tensor_arg(other, "cross", "other")
    if a.ndim != b.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions, got "
                           f"{a.ndim} and {b.ndim}")
    _same_dtype((a, b), "cross")
    if a.dtype is _dtype.bool:
        raise RuntimeError("cross: not implemented for 'Bool'; convert the operands first")
    shape = _ops._broadcast_shape("cross", a.shape, b.shape)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. Please "
                      "either pass the dim explicitly or simply use torch.linalg.cross. The "
                      "default value of dim will change to agree with that of linalg.cross in "
                      "a future release.", UserWarning, stacklevel=2)
        found = [d for d, size in enumerate(shape) if size == 3]
        if not found:
            raise RuntimeError(f"no dimension of size 3 in input (shapes {a.shape} and "
                               f"{b.shape})")
        axis = found[0]
    else:
        axis = _normalize_dim(dim, a.ndim)
    if a.ndim == 0 or a.shape[axis] != 3 or b.shape[axis] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim if dim is not None else axis} "
                           f"must have length 3. Got {a.shape[axis] if a.ndim else 0} and "
                           f"{b.shape[axis] if b.ndim else 0}")
    return _ops.formula("cross", [a, b], _cross_formula(axis))


@functools.cache
def _cross_formula(axis: int):
    def formula(xp, x, y):
        def part(t, i):
            return t[(slice(None),) * axis + (i,)]
        x0, x1, x2 = part(x, 0), part(x, 1), part(x, 2)
        y0, y1, y2 = part(y, 0), part(y, 1), part(y, 2)
        return xp.stack([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], axis=axis)
    return formula


# -- diagonals and triangles -----------------------------------------------------------------
def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the ``(dim1, dim2)`` matrices as the last dim: a VIEW (writes show in
    ``input``), of stride ``stride(dim1) + stride(dim2)``. ``offset > 0`` is above the main
    diagonal, ``< 0`` below; an offset past the edge gives an empty view.

    Raises:
        IndexError: a dim out of range (so a 0-d or 1-D tensor with the default dims).
        RuntimeError: ``dim1`` and ``dim2`` name the same dim.
    """
    tensor = _tensor_arg(input, "diagonal", "input")
    ndim = tensor.ndim
    d1, d2 = _normalize_dim(dim1, ndim), _normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return _views.diagonal(tensor, offset, d1, d2)


def diag(input, diagonal: int = 0) -> Tensor:
    """A 1-D ``input`` as the ``diagonal``-th diagonal of a new square matrix of size ``n +
    |diagonal|`` (zeros elsewhere), or the ``diagonal``-th diagonal of a 2-D ``input`` as a new
    1-D tensor (a COPY, unlike :func:`diagonal`).

    Raises:
        RuntimeError: an input that is not 1-D or 2-D.
    """
    tensor = _tensor_arg(input, "diag", "input")
    k = _int_list(diagonal, "diag", "diagonal")[0]
    if tensor.ndim == 2:
        return _transfer.clone(_views.diagonal(tensor, k, 0, 1))
    if tensor.ndim != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {tensor.ndim}D")
    n = tensor.shape[0]
    m = n + abs(k)
    first = k if k >= 0 else -k * m
    end = first + (m + 1) * (n - 1) + 1 if n else first
    return _launch_new("diag", tensor, (m, m), functools.partial(_diag_body, first, end, m + 1))


def _diag_body(first: int, end: int, step: int, xp, out, src) -> None:
    out.fill(0)
    if end > first:
        out.reshape(-1)[first:end:step] = src


def trace(input) -> Tensor:
    """The sum of a matrix's main diagonal (0-d): int64 for bool and integer input, as
    ``sum``.

    Raises:
        RuntimeError: an input that is not 2-D.
    """
    tensor = _tensor_arg(input, "trace", "input")
    if tensor.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {tensor.ndim}")
    return _reductions.sum(_views.diagonal(tensor, 0, 0, 1))


def _triangle(op: str, input, diagonal, inplace: bool) -> Tensor:
    tensor = _tensor_arg(input, op, "input")
    if tensor.ndim < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions, got shape "
                           f"{tensor.shape}")
    k = _int_list(diagonal, op, "diagonal")
    if len(k) != 1:
        raise TypeError(f"{op}(): argument 'diagonal' must be an int, got {diagonal!r}")
    select = _TRIANGLES[op.rstrip("_")]
    if not inplace:
        return _launch_new(op, tensor, tensor.shape, functools.partial(select, k[0]))
    _transfer.check_no_overlap(tensor, op)
    data = tensor._data
    xp = _dispatch.xp_of(tensor.device)

    def kernel():
        select(k[0], xp, data, data)
    _dispatch.launch(tensor.device, _dispatch.named(op, kernel, shape=tensor.shape))
    return tensor


def _tril_body(k: int, xp, out, src) -> None:
    out[...] = xp.tril(src, k)


def _triu_body(k: int, xp, out, src) -> None:
    out[...] = xp.triu(src, k)


_TRIANGLES = {"tril": _tril_body, "triu": _triu_body}


def tril(input, diagonal: int = 0) -> Tensor:
    """A copy with the elements above the ``diagonal``-th diagonal of the last two dims set to
    0 (``diagonal > 0`` keeps more, ``< 0`` fewer). Every dtype, bool included."""
    return _triangle("tril", input, diagonal, False)


def triu(input, diagonal: int = 0) -> Tensor:
    """A copy with the elements below the ``diagonal``-th diagonal of the last two dims set to
    0."""
    return _triangle("triu", input, diagonal, False)


def tril_(input, diagonal: int = 0) -> Tensor:
    """In-place :func:`tril`; refused on a view made by ``expand()`` (RuntimeError)."""
    return _triangle("tril_", input, diagonal, True)


def triu_(input, diagonal: int = 0) -> Tensor:
    """In-place :func:`triu`; refused on a view made by ``expand()`` (RuntimeError)."""
    return _triangle("triu_", input, diagonal, True)


# -- repeating, rolling, flipping -----------------------------------------------------------
def repeat(input, *sizes) -> Tensor:
    """``Tensor.repeat(*sizes)``: a new tensor with the data repeated ``sizes[i]`` times along
    dim ``i``; extra leading sizes add dims (numpy's ``tile``; PyTorch has no ``torch.repeat``).

    Raises:
        RuntimeError: fewer sizes than dims, or a negative size.
    """
    tensor = _tensor_arg(input, "repeat", "self")
    reps = _varargs(sizes, "repeat", "repeats")
    if len(reps) < tensor.ndim:
        raise RuntimeError(f"Number of dimensions of repeat dims ({len(reps)}) can not be "
                           f"smaller than number of dimensions of tensor ({tensor.ndim})")
    if any(r < 0 for r in reps):
        raise RuntimeError(f"Trying to create tensor with negative dimension: repeats "
                           f"{list(reps)}")
    padded = (1,) * (len(reps) - tensor.ndim) + tensor.shape
    shape = tuple(r * s for r, s in zip(reps, padded))
    interleaved = tuple(x for r, s in zip(reps, padded) for x in (r, s))
    key = (None,) * (len(reps) - tensor.ndim) + (slice(None),) * tensor.ndim
    key = tuple(x for item in key for x in (None, item))
    return _launch_new("repeat", tensor, shape,
                       functools.partial(_repeat_body, interleaved, key))


def _repeat_body(interleaved, key, xp, out, src) -> None:
    # (r0, s0, r1, s1 ...) over the contiguous result, the source broadcast along each r_i
    out.reshape(interleaved)[...] = src[key]


def tile(input, dims, *more) -> Tensor:
    """``repeat`` with ``dims`` padded with leading 1s when shorter than the tensor's rank
    (``tile(t, (2, 2))``, and as a method ``t.tile(2, 2)`` or ``t.tile((2, 2))``).

    Raises:
        RuntimeError: a negative repeat.
    """
    tensor = _tensor_arg(input, "tile", "input")
    reps = _int_list((dims,) + more if more else dims, "tile", "dims")
    reps = (1,) * (tensor.ndim - len(reps)) + reps
    return repeat(tensor, reps)


def roll(input, shifts, dims=None) -> Tensor:
    """A copy with elements shifted by ``shifts`` along ``dims`` (ints or equal-length
    sequences), wrapping around; without ``dims`` the tensor is rolled flattened and the shape
    restored.

    Raises:
        RuntimeError: ``shifts`` and ``dims`` of different lengths (or several shifts without
            dims), or no shift.
        IndexError: a dim out of range.
    """
    tensor = _tensor_arg(input, "roll", "input")
    shift = _int_list(shifts, "roll", "shifts")
    axes = () if dims is None else _int_list(dims, "roll", "dims")
    if not shift:
        raise RuntimeError("`shifts` required")
    if dims is None and len(shift) == 1:
        return _launch_new("roll", tensor, tensor.shape,
                           functools.partial(_roll_flat_body, shift[0]))
    if len(shift) != len(axes):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shift)}, dims:"
                           f"{len(axes)}")
    axes = tuple(_normalize_dim(d, tensor.ndim) for d in axes)
    if tensor.ndim == 0:
        return _transfer.clone(tensor)
    return _launch_new("roll", tensor, tensor.shape,
                       functools.partial(_roll_body, shift, axes))


def _roll_flat_body(shift: int, xp, out, src) -> None:
    out[...] = xp.roll(src.reshape(-1), shift).reshape(src.shape)


def _roll_body(shift, axes, xp, out, src) -> None:
    out[...] = xp.roll(src, shift, axis=axes)


def flip(input, dims) -> Tensor:
    """A copy with the order of elements reversed along ``dims`` (a sequence of ints, as
    ``torch.flip`` takes; the method takes ints too: ``t.flip(0, 1)``). PyTorch's flip copies
    (NumPy's returns a view).

    Raises:
        TypeError: ``dims`` not a sequence of ints. RuntimeError: a dim named twice.
        IndexError: a dim out of range.
    """
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"flip(): argument 'dims' (position 2) must be tuple of ints, not "
                        f"{type(dims).__name__}")
    return _flip(input, dims)


def tensor_flip(self, *dims, **named) -> Tensor:
    """``Tensor.flip(*dims)``: :func:`flip`, also taking the dims as separate ints (or
    ``dims=``)."""
    if named:
        if dims or set(named) != {"dims"}:
            raise TypeError(f"flip(): takes the dims as ints, one sequence or dims=, got "
                            f"{len(dims)} positional and keywords {sorted(named)}")
        dims = (named["dims"],)
    return _flip(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list))
                 else dims)


def _flip(input, dims) -> Tensor:
    tensor = _tensor_arg(input, "flip", "input")
    given = _int_list(dims, "flip", "dims")
    axes = tuple(_normalize_dim(d, tensor.ndim) for d in given)
    for axis in axes:
        if axes.count(axis) > 1:
            raise RuntimeError(f"dim {axis} appears multiple times in the list of dims")
    if tensor.ndim == 0 or not axes:
        return _transfer.clone(tensor)
    return _launch_new("flip", tensor, tensor.shape, functools.partial(_flip_body, axes))


def _flip_body(axes, xp, out, src) -> None:
    out[...] = xp.flip(src, axis=axes)


# -- meshgrid, as_strided ---------------------------------------------------------------------
def meshgrid(*tensors, indexing: str | None = None) -> tuple[Tensor, ...]:
    """Coordinate grids of 0-d or 1-D tensors (or one list of them): VIEWS of the inputs
    expanded to the grid's shape (stride 0 along the other dims, so they share memory with the
    inputs; clone one before writing into it). ``indexing="ij"`` gives shape ``(len(t0),
    len(t1), ...)``, ``"xy"`` swaps the first two dims (NumPy's default).

    ``indexing=None`` behaves as ``"ij"`` and warns (UserWarning), exactly as torch does: pass
    it to say which one you mean.

    Raises:
        RuntimeError: no tensor, a tensor of 2 or more dims, different dtypes or devices, or an
            ``indexing`` other than "ij"/"xy".
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        _tensor_arg(t, "meshgrid", f"tensors[{i}]")
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f'received: {indexing}')
    for i, t in enumerate(tensors):
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got a {t.ndim}D tensor (shape {t.shape}) at position {i}")
    _same_dtype(tensors, "meshgrid")
    _same_device(tensors, "meshgrid")
    order = list(tensors)
    swap = indexing == "xy" and len(order) >= 2
    if swap:
        order[0], order[1] = order[1], order[0]
    shape = tuple(t.numel() for t in order)
    grids = []
    for i, t in enumerate(order):
        view_shape = [1] * len(order)
        view_shape[i] = -1
        grids.append(_views.expand(_views.view(t, view_shape), shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def _storage(tensor: Tensor) -> tuple[int, int, int]:
    """(first byte, size in bytes, address of the tensor's first element) of the memory the
    tensor views: its allocation as created (a fresh tensor's own bytes; a view's base's)."""
    data = tensor._data
    if not isinstance(data, np.ndarray):   # CuPy: every view shares one memory object
        memory = data.data.mem
        return int(memory.ptr), int(memory.size), int(data.data.ptr)
    root = data
    while True:
        base: Any = root.base
        if isinstance(base, np.ndarray):
            root = base
        elif type(base).__name__ == "DummyArray" and isinstance(getattr(base, "base", None),
                                                                 np.ndarray):
            root = base.base   # NumPy's as_strided wraps its source in a DummyArray
        else:
            break
    start = root.__array_interface__["data"][0]
    low = high = 0
    if root.size:
        for size, stride in zip(root.shape, root.strides):
            reach = (size - 1) * stride
            low, high = low + builtins.min(reach, 0), high + builtins.max(reach, 0)
        high += root.itemsize
    return start + low, high - low if root.size else 0, data.__array_interface__["data"][0]


def storage_offset(tensor: Tensor) -> int:
    """The offset of the tensor's first element in its memory, in elements (as PyTorch's
    ``Tensor.storage_offset()``)."""
    start, _, first = _storage(tensor)
    return (first - start) // tensor.dtype.itemsize


def as_strided(input, size, stride, storage_offset=None) -> Tensor:
    """A VIEW with the given sizes and element strides, starting ``storage_offset`` elements
    into the memory ``input`` views (default: where ``input`` starts), as PyTorch's
    ``as_strided``: offsets and strides are relative to that memory (a view's base), not to
    ``input``'s first element. Overlapping views (stride 0, or smaller than a row) are allowed
    for reading; in-place writes into them are refused, as with ``expand``.

    Raises:
        RuntimeError: ``size`` and ``stride`` of different lengths, a negative size, stride or
            offset, or a view reaching past the end of the memory (PyTorch's "out of bounds
            for storage" error).
    """
    tensor = _tensor_arg(input, "as_strided", "input")
    sizes = _int_list(size, "as_strided", "size")
    strides = _int_list(stride, "as_strided", "stride")
    if len(sizes) != len(strides):
        raise RuntimeError(f"mismatch in length of strides and shape: size {list(sizes)} and "
                           f"stride {list(strides)}")
    if any(s < 0 for s in strides):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(strides)}")
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(sizes)}")
    start, nbytes, first = _storage(tensor)
    itemsize = tensor.dtype.itemsize
    offset = (first - start) // itemsize if storage_offset is None else \
        _int_list(storage_offset, "as_strided", "storage_offset")[0]
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    if 0 not in sizes:
        need = itemsize * (offset + 1 + builtins.sum((n - 1) * s for n, s in zip(sizes,
                                                                               strides)))
        if need > nbytes:
            raise RuntimeError(f"setStorage: sizes {list(sizes)}, strides {list(strides)}, "
                               f"storage offset {offset}, and itemsize {itemsize} requiring a "
                               f"storage size of {need} are out of bounds for storage of size "
                               f"{nbytes}")
    xp = _dispatch.xp_of(tensor.device)
    delta = start + offset * itemsize - first   # bytes from input's first element
    # an array starting ``delta`` bytes from input's first element (as_strided reads only the
    # pointer of its source), from which the view is laid out
    anchor = xp.lib.stride_tricks.as_strided(tensor._data, shape=(2,), strides=(delta,))
    return _views._strided(tensor, sizes, strides, anchor[1:])

