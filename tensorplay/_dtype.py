"""Dtypes and PyTorch-style type promotion.

Every tensorplay dtype wraps one NumPy dtype (``bfloat16`` comes from ml_dtypes). Which dtypes a
device can hold is a property of its backend: ``get_device_capability()["supported_dtypes"]``.

Promotion follows PyTorch, not NumPy:

- categories rank ``bool < integer < floating < complex``; when two operands differ in category
  the higher category's dtype wins as it is (``int64 + float16 -> float16``), widening only for
  complex with a wider float (``float64 + complex64 -> complex128``);
- inside a category the wider dtype wins (``int8 + uint8 -> int16``,
  ``float16 + bfloat16 -> float32``);
- a Python scalar (and a 0-d tensor) takes part only when it is of a higher category than the
  dimensioned tensors: ``float32_tensor + 2.5`` stays float32, ``int_tensor + 2.5`` is float32 (the
  default dtype), ``int_tensor + 1j`` is complex64;
- ``uint16``, ``uint32`` and ``uint64`` promote only with themselves and bool, as in PyTorch.
"""

from __future__ import annotations

import builtins
import functools
import math

import ml_dtypes
import numpy as np

__all__ = [
    "dtype", "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "all_dtypes",
    "promote_types", "result_type", "to_dtype", "get_default_dtype",
]

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3


class dtype:
    """A tensor element type. Compare with ``==``; ``str(tp.float32) == 'tensorplay.float32'``.

    ``is_floating_point``, ``is_complex`` and ``is_signed`` are plain attributes (read on every
    op's checks); like every attribute of a dtype they cannot be set.
    """

    __slots__ = ("name", "numpy", "itemsize", "is_floating_point", "is_complex", "is_signed",
                 "_category", "_rank")

    #: The name without the module (``"float32"``).
    name: str
    #: The NumPy dtype of the same layout (``ml_dtypes``' for bfloat16).
    numpy: np.dtype
    #: Bytes per element.
    itemsize: int
    #: Whether it is float16, bfloat16, float32 or float64.
    is_floating_point: builtins.bool
    #: Whether it is complex64 or complex128.
    is_complex: builtins.bool
    #: Whether it holds negative values (False for bool and the unsigned integers).
    is_signed: builtins.bool
    _category: int
    _rank: int

    def __init__(self, name: str, numpy_dtype, category: int, rank: int):
        numpy = np.dtype(numpy_dtype)
        for attribute, value in (
                ("name", name), ("numpy", numpy), ("itemsize", numpy.itemsize),
                ("is_floating_point", category == _FLOAT), ("is_complex", category == _COMPLEX),
                ("is_signed", name not in ("bool", "uint8", "uint16", "uint32", "uint64")),
                ("_category", category), ("_rank", rank)):
            object.__setattr__(self, attribute, value)

    def __setattr__(self, attribute: str, value) -> None:
        raise AttributeError(f"tensorplay dtypes are immutable: cannot set {attribute!r} of "
                             f"{self!r}")

    def __repr__(self) -> str:
        return f"tensorplay.{self.name}"

    def __reduce__(self):
        return (to_dtype, (self.name,))


bool = dtype("bool", np.bool_, _BOOL, 0)
uint8 = dtype("uint8", np.uint8, _INT, 1)
int8 = dtype("int8", np.int8, _INT, 1)
int16 = dtype("int16", np.int16, _INT, 2)
int32 = dtype("int32", np.int32, _INT, 3)
int64 = dtype("int64", np.int64, _INT, 4)
uint16 = dtype("uint16", np.uint16, _INT, 2)
uint32 = dtype("uint32", np.uint32, _INT, 3)
uint64 = dtype("uint64", np.uint64, _INT, 4)
float16 = dtype("float16", np.float16, _FLOAT, 1)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, _FLOAT, 1)
float32 = dtype("float32", np.float32, _FLOAT, 2)
float64 = dtype("float64", np.float64, _FLOAT, 3)
complex64 = dtype("complex64", np.complex64, _COMPLEX, 2)
complex128 = dtype("complex128", np.complex128, _COMPLEX, 3)

all_dtypes: tuple[dtype, ...] = (
    bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, complex64, complex128,
)
_BY_NAME = {d.name: d for d in all_dtypes}
_BY_NUMPY = {d.numpy: d for d in all_dtypes}
_NEW_UNSIGNED = (uint16, uint32, uint64)
_INT_BY_RANK_SIGNED = {1: int8, 2: int16, 3: int32, 4: int64}
_FLOAT_BY_RANK = {2: float32, 3: float64}
_COMPLEX_BY_RANK = {2: complex64, 3: complex128}


def get_default_dtype() -> dtype:
    """The dtype of floating tensors made from Python floats: always ``float32``."""
    return float32


def to_dtype(value) -> dtype:
    """Turn a tensorplay dtype, a NumPy dtype (or type), or a name like ``"float32"`` into a dtype.

    Raises:
        TypeError: for anything else, naming the valid spellings.
    """
    if isinstance(value, dtype):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if value is builtins.bool:
        return bool
    if value is builtins.int:
        return int64
    if value is builtins.float:
        return float32
    if value is builtins.complex:
        return complex64
    try:
        found = _BY_NUMPY.get(np.dtype(value))
    except TypeError:
        found = None
    if found is None:
        valid = ", ".join(d.name for d in all_dtypes)
        raise TypeError(f"{value!r} is not a tensorplay dtype; valid dtypes are: {valid}")
    return found


def from_numpy_dtype(numpy_dtype) -> dtype:
    """The tensorplay dtype of a NumPy dtype; TypeError for one tensorplay has no equivalent of."""
    found = _BY_NUMPY.get(np.dtype(numpy_dtype))
    if found is None:
        valid = ", ".join(d.name for d in all_dtypes)
        raise TypeError(f"NumPy dtype {np.dtype(numpy_dtype)} has no tensorplay equivalent; "
                        f"valid dtypes are: {valid}")
    return found


def _promote_same_category(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    if a._category == _INT:
        if a.is_signed == b.is_signed:
            return a if a._rank >= b._rank else b
        signed, unsigned = (a, b) if a.is_signed else (b, a)
        if signed._rank > unsigned._rank:
            return signed
        return _INT_BY_RANK_SIGNED[min(unsigned._rank + 1, 4)]
    if a._rank != b._rank:
        return a if a._rank > b._rank else b
    # float16 vs bfloat16: the only same-rank distinct pair.
    return float32


def promote_types(a, b) -> dtype:
    """The dtype PyTorch's ``torch.promote_types`` gives for two dtypes.

    Raises:
        TypeError: when one of them is uint16/uint32/uint64 and the other is neither bool nor the
            same dtype, which PyTorch does not promote either.
    """
    a, b = to_dtype(a), to_dtype(b)
    if a is b:
        return a
    if a is bool:
        return b
    if b is bool:
        return a
    if a in _NEW_UNSIGNED or b in _NEW_UNSIGNED:
        raise TypeError(f"promotion of {a.name} with {b.name} is not supported: uint16, uint32 "
                        f"and uint64 promote only with themselves and bool (as in PyTorch); "
                        f"cast one operand with .to() first")
    if a._category == b._category:
        return _promote_same_category(a, b)
    high, low = (a, b) if a._category > b._category else (b, a)
    if high._category == _COMPLEX and low._category == _FLOAT and low._rank > high._rank:
        return _COMPLEX_BY_RANK[low._rank]
    return high


def _scalar_category(value) -> int:
    if isinstance(value, (builtins.bool, np.bool_)):
        return _BOOL
    if isinstance(value, (builtins.int, np.integer)):
        return _INT
    if isinstance(value, (builtins.float, np.floating)):
        return _FLOAT
    if isinstance(value, (builtins.complex, np.complexfloating)):
        return _COMPLEX
    raise TypeError(f"expected a Tensor or a Python number, got {type(value).__name__}")


_SCALAR_DEFAULT = {_BOOL: bool, _INT: int64, _FLOAT: float32, _COMPLEX: complex64}


def result_type(*operands) -> dtype:
    """The dtype of an elementwise op over tensors and Python scalars, by PyTorch's rules.

    Each operand is a Tensor (anything with ``.dtype`` and ``.ndim``) or a Python number.
    """
    dims: dtype | None = None
    zero_dims: dtype | None = None
    scalar_category = -1
    for op in operands:
        if hasattr(op, "dtype") and hasattr(op, "ndim") and isinstance(op.dtype, dtype):
            if op.ndim > 0:
                dims = op.dtype if dims is None else promote_types(dims, op.dtype)
            else:
                zero_dims = op.dtype if zero_dims is None else promote_types(zero_dims, op.dtype)
        else:
            scalar_category = max(scalar_category, _scalar_category(op))
    result = dims
    if zero_dims is not None:
        if result is None:
            result = zero_dims
        elif zero_dims._category > result._category:
            result = promote_types(result, zero_dims)
    if scalar_category >= 0:
        if result is None:
            result = _SCALAR_DEFAULT[scalar_category]
        elif scalar_category > result._category:
            if scalar_category == _COMPLEX and result._category == _FLOAT:
                result = _COMPLEX_BY_RANK[max(result._rank, 2)]
            else:
                result = _SCALAR_DEFAULT[scalar_category]
    if result is None:
        raise TypeError("result_type needs at least one operand")
    return result


def can_cast(from_: dtype, to: dtype) -> builtins.bool:
    """Whether an in-place op may write a ``from_`` result into a ``to`` tensor (PyTorch's rule:
    never down a category, e.g. a float result into an integer tensor)."""
    return from_._category <= to._category


# -- which dtypes each op accepts ---------------------------------------------------------------
# Note [op dtype rules]: every op whose validity depends only on dtypes (never on data) is
# checked here, at the call, before any memory is taken or kernel launched: on sim a kernel that
# fails runs later and surfaces at an unrelated call (and again on every replay of a graph that
# captured it), on a GPU it may not fail at all. ``OP_RULES`` maps an op name to a rule
# ``rule(op, computed, operands)``; ``computed`` is the dtype the op dispatches on (PyTorch's
# common dtype), ``operands`` are the Tensors/numbers given. The elementwise engines
# (``_tensor.elementwise``'s plans) look the op up here; reductions and sorts call
# :func:`check_op`. An op absent from the table accepts every dtype.
_BOOLS = frozenset((bool,))
_FLOATS = frozenset((float16, bfloat16, float32, float64))
_COMPLEXES = frozenset((complex64, complex128))
_NO_ORDER = "complex numbers have no ordering; compare .abs() or .real instead"
_MASK_ADVICE = ("If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                "instead.")


def _describe(operands) -> str:
    names = []
    for operand in operands:
        kind = getattr(operand, "dtype", None)
        names.append(f"{kind.name} tensor" if isinstance(kind, dtype)
                     else f"Python {type(operand).__name__}")
    return ", ".join(names)


def _operand_dtype(operand) -> dtype | None:
    kind = getattr(operand, "dtype", None)
    if isinstance(kind, dtype):
        return kind
    return bool if isinstance(operand, (builtins.bool, np.bool_)) else None


class _Refuse:
    """A rule refusing the dtypes in ``advice`` (dtype -> what to do instead)."""

    __slots__ = ("advice",)

    def __init__(self, advice: dict):
        self.advice = advice

    def __call__(self, op: str, computed: dtype, operands) -> None:
        advice = self.advice.get(computed)
        if advice is not None:
            raise NotImplementedError(f'"{op}" is not implemented for {computed.name} (got '
                                      f'{_describe(operands)}); {advice}')


def _refusing(groups) -> _Refuse:
    """``_Refuse`` from ``[(dtypes, advice), ...]``."""
    return _Refuse({d: advice for dtypes, advice in groups for d in dtypes})


def _sub_rule(op: str, computed: dtype, operands) -> None:
    # PyTorch refuses a bool operand of any kind (a Python bool too), not only a bool result
    bools = sum(_operand_dtype(o) is bool for o in operands)
    if bools == len(operands):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if bools:
        raise RuntimeError(f"Subtraction, the `-` operator, with a bool tensor is not supported "
                           f"(got {_describe(operands)}). {_MASK_ADVICE}")


def _pow_rule(op: str, computed: dtype, operands) -> None:
    base, exponent = operands
    if computed is bool and isinstance(getattr(exponent, "dtype", None), dtype):
        raise NotImplementedError(f'"{op}" is not implemented for bool (got '
                                  f'{_describe(operands)}); convert the base with .int() or '
                                  f'.float() first')
    base_dtype = getattr(base, "dtype", None)
    if isinstance(base_dtype, dtype) and base_dtype._category <= _INT and \
            isinstance(exponent, (builtins.int, np.integer)) and \
            not isinstance(exponent, (builtins.bool, np.bool_)) and exponent < 0:
        raise RuntimeError(f"Integers to negative integer powers are not allowed ({op}: "
                           f"{base_dtype.name} tensor ** {exponent}); use a floating base "
                           f"(x.float() ** {exponent}) for fractional results")


def _neg_rule(op: str, computed: dtype, operands) -> None:
    if computed is bool:
        raise RuntimeError(f"Negation, the `-` operator, on a bool tensor is not supported. "
                           f"{_MASK_ADVICE}")


_BITWISE = _refusing([(_FLOATS | _COMPLEXES, "bitwise ops take bool and integer tensors")])
_SHIFT = _refusing([(_BOOLS | _FLOATS | _COMPLEXES, "shifts take integer tensors")])
_DIVISION = _refusing([(_BOOLS, "convert the bool tensors with .int() or .float() first"),
                       (_COMPLEXES, "complex numbers have no rounding or remainder")])
_ORDERED = _refusing([(_COMPLEXES, _NO_ORDER)])
_ROUNDING = _refusing([(_BOOLS, "convert the bool tensor with .int() first"),
                       (_COMPLEXES, "round .real and .imag separately")])

OP_RULES: dict = {
    "sub": _sub_rule, "pow": _pow_rule, "neg": _neg_rule,
    "bitwise_and": _BITWISE, "bitwise_or": _BITWISE, "bitwise_xor": _BITWISE,
    "bitwise_not": _BITWISE,
    "bitwise_left_shift": _SHIFT, "bitwise_right_shift": _SHIFT,
    "floor_divide": _DIVISION, "remainder": _DIVISION, "fmod": _DIVISION, "div_trunc": _DIVISION,
    "atan2": _refusing([(_COMPLEXES, "atan2 takes real tensors")]),
    "sign": _refusing([(_COMPLEXES, "x / x.abs() is PyTorch's sgn(x)")]),
    "floor": _ROUNDING, "ceil": _ROUNDING, "round": _ROUNDING, "trunc": _ROUNDING,
    "round.decimals": _refusing([
        (frozenset(d for d in all_dtypes if d._category <= _INT),
         "decimals= needs a floating tensor"),
        (_COMPLEXES, "round .real and .imag separately")]),
    **{op: _ORDERED for op in (
        "lt", "le", "gt", "ge", "maximum", "minimum", "max", "min", "amax", "amin", "argmax",
        "argmin", "sort", "topk", "clamp", "clamp_")},
    **{op: _refusing([(_BOOLS | _COMPLEXES, "relu needs an integer or floating tensor")])
       for op in ("relu", "relu_")},
}


def check_op(op: str, computed: dtype, operands=()) -> None:
    """Raise if ``op`` is not implemented for ``computed`` (Note [op dtype rules]): as PyTorch,
    NotImplementedError (a RuntimeError) for an unsupported dtype, RuntimeError otherwise."""
    rule = OP_RULES.get(op)
    if rule is not None:
        rule(op, computed, operands)


# -- checked conversion of Python numbers (PyTorch's c10 ``overflows``) --------------------

@functools.cache
def int_range(dtype: dtype, from_float: builtins.bool) -> tuple[int, int]:
    """The Python values that convert to the integer ``dtype`` without overflow, as PyTorch's
    checked scalar conversion (c10 ``overflows``) decides: ints down to ``-max`` may wrap into an
    unsigned dtype (``-1`` gives 255 in uint8), floats may not."""
    info = np.iinfo(dtype.numpy)
    low = -int(info.max) if info.min == 0 and not from_float else int(info.min)
    return low, int(info.max)


@functools.cache
def float_max(dtype: dtype) -> float:
    return float(ml_dtypes.finfo(dtype.numpy).max)


def overflow_error(call: str, value, dtype: dtype) -> RuntimeError:
    if dtype.is_floating_point:
        held = f"finite values of magnitude up to {float_max(dtype):g}"
    else:
        info = np.iinfo(dtype.numpy)
        held = f"{info.min} to {info.max}"
    return RuntimeError(f"{call}: value {value} cannot be converted to type {dtype.name} "
                        f"without overflow ({dtype.name} holds {held})")


def storable_value(value, dtype: dtype, call: str):
    """``value`` (a Python or NumPy number) checked by :func:`check_value_fits` and made what
    ``dtype`` stores, as PyTorch converts it: a complex number into a real dtype is its real
    part (its imaginary part being zero), into bool its truthiness."""
    check_value_fits(value, dtype, call)
    if isinstance(value, (complex, np.complexfloating)) and not dtype.is_complex:
        return builtins.bool(value) if dtype is bool else value.real
    return value


def check_value_fits(value, dtype: dtype, call: str) -> None:
    """Raise RuntimeError when the Python number ``value`` cannot be converted to ``dtype``
    without overflow, as PyTorch's ``fill_``/``full``/``__setitem__`` do (300 into int8, 1e39
    into float32, nan into an integer dtype, a complex number with an imaginary part into a real
    dtype); bool and complex dtypes take any number.

    Integral values fit an integer dtype from ``lowest`` to ``max``, and negative ints down to
    ``-max`` also fit an unsigned one (they wrap: -1 gives 255 in uint8, as in PyTorch); floats
    are truncated toward zero. Infinities and nan fit every floating dtype.
    """
    if dtype is bool or dtype.is_complex or isinstance(value, (builtins.bool, np.bool_)):
        return
    if isinstance(value, (complex, np.complexfloating)):
        if value.imag:
            raise RuntimeError(f"{call}: value {value} cannot be converted to type {dtype.name} "
                               f"without overflow: its imaginary part is not zero; give a "
                               f"complex dtype (complex64 or complex128) or a real value")
        value = value.real
    fits: builtins.bool | np.bool_
    if dtype.is_floating_point:
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            return
        try:
            fits = abs(float(value)) <= float_max(dtype)
        except OverflowError:  # an int too large for a Python float
            fits = False
    elif isinstance(value, (float, np.floating)):
        low, high = int_range(dtype, from_float=True)
        fits = low <= value <= high  # False for nan
    else:
        low, high = int_range(dtype, from_float=False)
        fits = low <= int(value) <= high
    if not fits:
        raise overflow_error(call, value, dtype)


def accumulation_dtype(dtype: dtype) -> dtype:
    """The dtype a formula or a reduction over ``dtype`` computes in: float16 and bfloat16 in
    float32 (rounded once when stored), every other dtype in itself."""
    return float32 if dtype is float16 or dtype is bfloat16 else dtype
