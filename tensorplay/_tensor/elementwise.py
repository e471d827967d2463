"""Elementwise ops, written once against the array namespace of the operands' device.

Each op resolves its operands (Tensors and Python numbers) to one device, computes the result
dtype by PyTorch's promotion (``_dtype.result_type``) and the broadcast shape, takes the result's
memory from ``_dispatch.empty`` (or writes into ``self`` for ``op_`` forms), and launches a kernel
that calls the ``xp`` ufunc with ``out=``. Reductions, matmul and shape-combining ops live in
``_reductions.py`` and ``_combine.py``.

Before anything is allocated or launched, the op is checked against ``_dtype.OP_RULES`` (Note
[op dtype rules]): what PyTorch refuses for a dtype (``float & float``, ``bool - 1``,
``complex < complex``, ``int ** -1`` ...) raises RuntimeError at the call on every backend. On
cpu an integer division by zero raises too (:func:`check_host_divisor`); accelerators do not
check data.
"""

from __future__ import annotations

import functools
import numbers
import operator

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from .._runtime import writes as _writes
from .tensor import Tensor

_Number = (bool, int, float, complex, np.number, np.bool_)


def _operand_device(operands, op: str):
    """The one device of the tensor operands; 0-d cpu tensors may join an accelerator op."""
    devices = {o.device for o in operands if isinstance(o, Tensor)}
    if len(devices) == 1:
        return devices.pop()
    if not devices:
        from .._runtime.device import CPU

        return CPU
    main = {o.device for o in operands
            if isinstance(o, Tensor) and not (o.device.type == "cpu" and o.ndim == 0)}
    if len(main) == 1:
        return main.pop()
    names = " and ".join(sorted(str(d) for d in devices))
    raise RuntimeError(f"{op}: expected all tensors on one device, but found {names}; move "
                       f"them with .to() first")


def _check_operand(value, op: str):
    if isinstance(value, (Tensor,) + _Number):
        return value
    if isinstance(value, numbers.Number):
        return value
    raise TypeError(f"{op}: unsupported operand type {type(value).__name__}; expected a Tensor "
                    f"or a Python number")


def _array_of(operand, device):
    """The xp value a kernel reads for an operand: an array, or a scalar."""
    if isinstance(operand, Tensor):
        operand._check_guard()
        if operand.device != device:
            return operand._data.item()  # a 0-d host tensor in an accelerator op
        return operand._data
    return operand


def _cast(value, compute: np.dtype, xp):
    if hasattr(value, "dtype") and value.dtype != compute:
        return value.astype(compute)
    if isinstance(value, _Number) and not hasattr(value, "dtype"):
        # through a NumPy array so that an int the dtype cannot hold wraps, as PyTorch's casts
        # do (np.int8(1000) raises OverflowError under NumPy 2); a float beyond the dtype's
        # range becomes inf without NumPy's overflow warning, as in PyTorch
        with np.errstate(over="ignore"):
            return np.asarray(value).astype(compute)[()]
    return value


INTEGER_DIVISIONS = frozenset(("floor_divide", "remainder", "fmod", "div_trunc"))


def check_host_divisor(op: str, compute: _dtype.dtype, divisor) -> None:
    """On cpu, refuse an integer division by zero as PyTorch's CPU kernels do (RuntimeError
    "ZeroDivisionError"). Accelerators do not check (they could not without waiting for the
    device): there the quotient/remainder of an integer division by zero is unspecified, as in
    PyTorch on CUDA. ``divisor``: the cpu array (or scalar) divided by."""
    if compute.is_floating_point or compute.is_complex:
        return   # floats give inf/nan, as IEEE says
    if not np.all(divisor):
        raise RuntimeError(f"ZeroDivisionError: integer {op} by zero ({compute.name}); cpu "
                           f"checks for it, accelerators give an unspecified value instead")


def _broadcast_shape(op: str, *shapes) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not "
                         f"broadcast (sizes must match or be 1, aligned from the right)") from None


def check_no_overlap(tensor: Tensor, op: str) -> None:
    """Refuse to write into a tensor whose elements share memory (an ``expand()``ed view), as
    PyTorch does: the result would depend on the order the elements are written in."""
    shape = tensor._data.shape
    if 0 not in shape and any(stride == 0 and size > 1
                              for stride, size in zip(tensor._data.strides, shape)):
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the "
                           f"written-to tensor refers to a single memory location (an "
                           f"expand()ed view?). Please clone() the tensor before performing "
                           f"the operation.")
    if _writes.active:   # every write into an existing tensor passes here: Note [write records]
        _writes.note(tensor)


def _shape_of(value):
    return value.shape if isinstance(value, Tensor) else ()


def elementwise(op: str, ufunc_name, operands, *, out: Tensor | None = None,
                result=None, compute=None, extra_kwargs=None) -> Tensor:
    """Run the ``xp`` ufunc ``ufunc_name`` over operands.

    Args:
        ufunc_name: the name of an ``xp`` ufunc, or a function ``f(xp, *arrays, out, casting)``
            composed of them.
        result: fixes the result dtype (e.g. bool for comparisons); default: promotion.
        compute: the dtype the ufunc computes in; default: the result dtype.
        out: write into this tensor (in-place ops) after checking shape and castability.
    """
    operands = [_check_operand(v, op) for v in operands]
    device = _operand_device(operands, op)
    promoted = _dtype.result_type(*operands)
    rule = _dtype.OP_RULES.get(op)
    if rule is not None:
        rule(op, promoted, operands)
    compute = promoted if compute is None else compute(promoted)
    result = compute if result is None else result
    shape = _broadcast_shape(op, *(_shape_of(v) for v in operands))
    if out is None:
        _dispatch.check_dtype_supported(device, result)
        out_array = _dispatch.empty(device, shape, result)
        out_tensor = Tensor._make(out_array, device, result)
    else:
        if shape != out.shape:
            raise RuntimeError(f"{op}: the result of shape {shape} cannot be written into the "
                               f"tensor of shape {out.shape} (in-place ops don't broadcast self)")
        if not _dtype.can_cast(result, out.dtype):
            raise RuntimeError(f"{op}: result type {result.name} can't be cast to the desired "
                               f"output type {out.dtype.name}")
        check_no_overlap(out, op)
        out_tensor = out
        out_array = out._data
    xp = _dispatch.xp_of(device)
    ufunc = getattr(xp, ufunc_name) if type(ufunc_name) is str else \
        functools.partial(ufunc_name, xp)
    compute_np = compute.numpy
    arrays = [_array_of(v, device) for v in operands]
    arrays = [_cast(a, compute_np, xp) if isinstance(a, _Number) and not hasattr(a, "dtype")
              and not (isinstance(a, complex) and not compute.is_complex) else a
              for a in arrays]
    if op in INTEGER_DIVISIONS and device.type == "cpu":
        check_host_divisor(op, compute, arrays[1])
    kwargs = extra_kwargs or {}
    if all(getattr(a, "dtype", compute_np) == compute_np for a in arrays) and \
            not any(isinstance(a, _Number) and not hasattr(a, "dtype") and isinstance(a, complex)
                    and not compute.is_complex for a in arrays):
        def kernel():
            ufunc(*arrays, out=out_array, casting="unsafe", **kwargs)
    else:
        def kernel():
            ufunc(*[_cast(a, compute_np, xp) for a in arrays], out=out_array, casting="unsafe",
                  **kwargs)
    kernel.__name__ = op
    _dispatch.launch(device, kernel)
    return out_tensor


def _to_float(promoted: _dtype.dtype) -> _dtype.dtype:
    if promoted.is_floating_point or promoted.is_complex:
        return promoted
    return _dtype.get_default_dtype()


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "floor_divide": "floor_divide",
    "remainder": "remainder", "pow": "power", "maximum": "maximum", "minimum": "minimum",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
    "atan2": "arctan2", "fmod": "fmod",
}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal", "logical_and": "logical_and",
            "logical_or": "logical_or", "logical_xor": "logical_xor"}


_FAST_SCALARS = (int, float)


def _fast_binary(op: str, a: Tensor, b, out: Tensor | None):
    """The hot path of ``tensor op scalar`` and ``tensor op same-shaped tensor`` when promotion
    cannot change the dtype; None when the general path is needed. It skips
    ``_dtype.OP_RULES``: no rule refuses its ops for its dtypes (floating, int32, int64)."""
    dtype = a._dtype
    if a._guard is not None or not (dtype.is_floating_point or dtype in _FAST_INTS):
        return None
    data = a._data
    if type(b) is Tensor:
        if b._dtype is not dtype or (b._device is not a._device and b._device != a._device) \
                or b._data.shape != data.shape or b._guard is not None:
            return None
        other = b._data
    elif type(b) in _FAST_SCALARS:
        if type(b) is float and not dtype.is_floating_point:
            return None
        if type(b) is int and not -(1 << 31) < b < (1 << 31):
            return None
        other = b
    else:
        return None
    device = a._device
    if out is None:
        out = Tensor._make(_dispatch.empty(device, data.shape, dtype), device, dtype)
    elif out is not a or 0 in data.strides:
        return None
    else:
        if _writes.active:   # Note [write records]
            _writes.note(out)
        inplace = _INPLACE_OPERATORS.get(op)
        if inplace is not None:   # ``x += 1``: the array library's own cheapest path
            kernel = functools.partial(inplace, data, other)
            kernel.__name__ = op
            _dispatch.launch(device, kernel)
            return out
    kernel = functools.partial(_UFUNCS[device.type == "cpu"][op], data, other, out=out._data)
    kernel.__name__ = op
    _dispatch.launch(device, kernel)
    return out


def binary(op: str, a, b, out: Tensor | None = None) -> Tensor:
    if op in _FAST_OPS and type(a) is Tensor:
        result = _fast_binary(op, a, b, out)
        if result is not None:
            return result
    if op in _COMPARE:
        return elementwise(op, _COMPARE[op], [a, b], out=out, result=_dtype.bool)
    if op == "div":
        return elementwise(op, "true_divide", [a, b], out=out, compute=_to_float)
    if op == "atan2":
        return elementwise(op, "arctan2", [a, b], out=out, compute=_to_float)
    if op == "pow" and isinstance(b, Tensor) and b.dtype.is_signed and \
            _dtype.result_type(a, b) in _INTEGERS:   # a signed integer exponent may be negative
        return elementwise(op, _integer_power, [a, b], out=out)
    return elementwise(op, _BINARY[op], [a, b], out=out)


def _integer_power(xp, base, exponent, *, out, casting):
    """PyTorch's integer ``pow``: a negative exponent gives the truncated result (0, or +-1 for
    a base of +-1) where NumPy raises and C on a GPU is undefined."""
    negative = exponent < 0
    power = xp.power(base, xp.maximum(exponent, 0))
    inverse = (base == 1) + (base == -1) * (1 - 2 * (exponent & 1))   # (+-1) ** exponent
    out[...] = power * ~negative + inverse * negative


# unary ops: name -> (ufunc, promotes integers to float)
_UNARY = {
    "neg": ("negative", False), "abs": ("absolute", False), "sign": ("sign", False),
    "square": ("square", False), "floor": ("floor", False), "ceil": ("ceil", False),
    "round": ("rint", False), "trunc": ("trunc", False), "logical_not": ("logical_not", False),
    "bitwise_not": ("invert", False),
    "exp": ("exp", True), "exp2": ("exp2", True), "expm1": ("expm1", True), "log": ("log", True),
    "log2": ("log2", True), "log10": ("log10", True), "log1p": ("log1p", True),
    "sqrt": ("sqrt", True), "sin": ("sin", True), "cos": ("cos", True), "tan": ("tan", True),
    "asin": ("arcsin", True), "acos": ("arccos", True), "atan": ("arctan", True),
    "sinh": ("sinh", True), "cosh": ("cosh", True), "tanh": ("tanh", True),
    "reciprocal": ("reciprocal", True),
}


def unary(op: str, a, out: Tensor | None = None) -> Tensor:
    ufunc_name, to_float = _UNARY[op]
    if op == "logical_not":
        return elementwise(op, ufunc_name, [a], out=out, result=_dtype.bool)
    if op in ("floor", "ceil", "round", "trunc") and isinstance(a, Tensor) and \
            a.dtype in _INTEGERS:
        return a.clone() if out is None else out.copy_(a)
    if op == "reciprocal":
        return binary("div", 1, a, out=out)
    return elementwise(op, ufunc_name, [a], out=out, compute=_to_float if to_float else None)


def fill_(tensor: Tensor, value) -> Tensor:
    """Set every element (``value``: a Python number or a one-element tensor)."""
    tensor._check_guard()
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise RuntimeError(f"fill_ takes a one-element tensor, got shape {value.shape}")
        from . import transfer as _transfer

        return _transfer.copy_(tensor, value.reshape(()))
    _check_operand(value, "fill_")
    check_no_overlap(tensor, "fill_")
    data = tensor._data
    if isinstance(value, complex) and not tensor.dtype.is_complex:
        value = value.real
    from .creation import check_value_fits

    check_value_fits(value, tensor.dtype, "fill_")  # 300 into int8 raises, as in PyTorch
    scalar = _cast(value, tensor.dtype.numpy, None)  # -1 into uint8 wraps, as in PyTorch

    def kernel():
        data.fill(scalar)
    kernel.__name__ = "fill"
    _dispatch.launch(tensor.device, kernel)
    return tensor


_FAST_OPS = frozenset(("add", "sub", "mul", "maximum", "minimum"))
_INPLACE_OPERATORS = {"add": operator.iadd, "sub": operator.isub, "mul": operator.imul}
_FAST_INTS = (_dtype.int32, _dtype.int64)
_INTEGERS = frozenset(d for d in _dtype.all_dtypes if d not in (_dtype.bool,) and
                      not (d.is_floating_point or d.is_complex))


class _UfuncTable(dict):
    """``{is_cpu: {op: ufunc}}`` filled on first use (the accelerator's xp imports lazily)."""

    def __missing__(self, is_cpu):
        from ..backends import accelerator_backend, host_backend

        xp = host_backend().xp if is_cpu else accelerator_backend().xp
        table = {op: getattr(xp, _BINARY[op]) for op in _FAST_OPS}
        self[is_cpu] = table
        return table


_UFUNCS = _UfuncTable()
