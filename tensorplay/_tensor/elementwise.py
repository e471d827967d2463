"""The one elementwise engine: every elementwise op, written once against the array namespace
of the operands' device.

Each op resolves its operands (Tensors and Python numbers) to one device, computes the result
dtype by PyTorch's promotion (``_dtype.result_type``) and the broadcast shape, takes the result's
memory from ``_dispatch.empty`` (or writes into ``self`` for ``op_`` forms), and launches ONE
kernel: the backend's own raw kernel where it has one (cuda, ``elementwise_kernel`` hook), else
the ``xp`` ufunc with ``out=``, or for the formula form (:func:`formula`: ``where``, ``clamp``,
the activations) the whole formula inside one launch. All of that is decided once per operand
signature and kept (Note [elementwise plans]), so a repeated op only looks its plan up and
launches. Reductions, matmul and shape-combining ops live in ``reductions.py``, ``linalg.py``
and ``join.py``.

Before anything is allocated or launched, the op is checked against ``_dtype.OP_RULES`` (Note
[op dtype rules]): what PyTorch refuses for a dtype (``float & float``, ``bool - 1``,
``complex < complex``, ``int ** -1`` ...) raises RuntimeError at the call on every backend. On
cpu an integer division by zero raises too (:func:`check_host_divisor`); accelerators do not
check data.
"""

from __future__ import annotations

import functools
import numbers
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.device import CPU
from .. import _dtype
from .._errors import BroadcastError
from .._runtime import writes as _writes
from . import rewrite as _rewrite
from .tensor import Tensor, layout_of
from .transfer import check_no_overlap

_new_object = object.__new__

if TYPE_CHECKING:
    from .._runtime.device import device as Device
    from .tensor import Layout

_Number = (bool, int, float, complex, np.number, np.bool_)


def _operand_device(operands, op: str):
    """The one device of the tensor operands; 0-d cpu tensors may join an accelerator op."""
    devices = {o.device for o in operands if isinstance(o, Tensor)}
    if len(devices) == 1:
        return devices.pop()
    if not devices:
        return CPU
    main = {o.device for o in operands
            if isinstance(o, Tensor) and not (o.device.type == "cpu" and o.ndim == 0)}
    if len(main) == 1:
        return main.pop()
    names = " and ".join(sorted(str(d) for d in devices))
    raise RuntimeError(f"{op}: expected all tensors on one device, but found {names}; move "
                       f"them with .to() first")


class UnsupportedOperand(TypeError):
    """An operand that is neither a Tensor nor a number (None, a string, any other object).
    The comparison operators turn it into ``NotImplemented`` (so ``t == None`` is False and
    ``t in [None, t]`` works, as in PyTorch); the functions raise it."""


def _check_operand(value, op: str):
    if isinstance(value, (Tensor,) + _Number):
        return value
    if isinstance(value, numbers.Number):
        return value
    raise UnsupportedOperand(f"{op}: unsupported operand type {type(value).__name__}; expected "
                             f"a Tensor or a Python number")


#: the Python ints an op takes as a number operand: torch 2.11 takes -2**63 .. 2**64 - 1 (an
#: int64 tensor wraps 2**63, a float tensor gets its value) and raises OverflowError beyond
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2 ** 63), 2 ** 63 - 1, 2 ** 64 - 1


def _check_python_int(op: str, value) -> None:
    """Refuse a Python int operand PyTorch cannot convert (Note [elementwise plans]): only
    called for ints outside the plan's weak-scalar limits, so in-range ints cost nothing
    here."""
    if isinstance(value, int) and not isinstance(value, bool) and \
            not _INT64_MIN <= value <= _UINT64_MAX:
        raise OverflowError(f"{op}: int too big to convert: the Python int {value} is outside "
                            f"-2**63 .. 2**64 - 1, the range a number operand may take; pass "
                            f"a float or a tensor instead")


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
        raise BroadcastError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not "
                         f"broadcast (sizes must match or be 1, aligned from the right)") from None


def _shape_of(value):
    return value.shape if isinstance(value, Tensor) else ()


# Note [elementwise plans]
# ------------------------
# Everything an elementwise op decides before it launches (device, promoted and result dtype,
# broadcast shape, the dtype rule, castability into ``out=``, which operands need a cast, the
# kernel) depends only on the operands' signatures: for a tensor its dtype, device, shape and
# strides; for a Python number its type. So the first call with a signature builds a plan
# (:func:`_plan`, which raises every error the op can raise from metadata) and later calls with
# the same signature look it up in one dict and only launch (:func:`_execute`). What depends on
# values is checked per call: guards on tensors, an integer scalar outside the compute dtype
# (wrapped as PyTorch casts do; outside -2**63 .. 2**64 - 1 refused with OverflowError, as
# PyTorch refuses to convert it), the host's integer division by zero, and ``pow``'s negative
# integer exponent (``pow`` with a number operand is never cached). Devices enter keys by id:
# they are canonical objects (``_runtime.device.resolve``) whose Python ``__hash__`` would cost
# a call per lookup.

#: a plan per signature; cleared when it grows past _PLAN_LIMIT (shapes that never repeat)
_plans: dict = {}
_PLAN_LIMIT = 4096
_CACHEABLE_SCALARS = frozenset((int, float, bool))

# how _execute obtains the value a kernel reads for each operand
_ARRAY, _ITEM, _RAW, _CAST = 0, 1, 2, 3


class _Plan:
    __slots__ = ("op", "device", "result", "shape", "compute", "compute_np", "kinds", "limits",
                 "mixed", "ufunc", "kwargs", "fast", "check_divisor", "xp",
                 "formula", "attrs", "scalar_type", "arrays_only", "native", "plain_operands",
                 "round_to", "out_layout", "launch", "direct", "by_call", "nbytes")
    # the slots' types (declarations only: no class attribute is made)
    op: str
    device: Device
    result: _dtype.dtype
    shape: tuple[int, ...]
    compute: _dtype.dtype
    compute_np: np.dtype
    kinds: tuple[int, ...]                  # _ARRAY, _ITEM, _RAW or _CAST per operand
    limits: tuple[tuple[Any, Any] | None, ...]
    mixed: bool
    ufunc: Any                              # the xp ufunc (None with a formula)
    kwargs: dict[str, Any]
    fast: Any                               # a one-kernel launcher, or None
    check_divisor: bool
    xp: Any
    formula: Callable[..., Any] | None
    attrs: dict[str, Any] | None
    scalar_type: type
    arrays_only: bool
    native: str | None
    plain_operands: bool
    round_to: np.dtype | None
    out_layout: Layout | None
    launch: Callable[..., Any]
    # a backend launcher over arrays only, its results' layout known: what _execute_one and
    # _execute_two take without _execute's general cases
    direct: bool
    by_call: bool   # a direct plan whose backend launches by call (_dispatch.call_into_new)
    nbytes: int     # _dispatch.result_nbytes of a result, once out_layout is known
    #: a plan holds no device memory: its kernels touch only their arguments (Note [write
    #: records] in ``_runtime/writes.py``)
    tp_arguments_only = True

    def _run_kernel(self, arrays, out_array) -> None:
        compute_np = self.compute_np
        if self.formula is not None:
            xp = self.xp
            value = self.formula(xp, *[_cast(a, compute_np, xp) for a in arrays])
            if self.round_to is not None:
                value = value.astype(self.round_to)
            out_array[...] = value
            return
        self.ufunc(*[a.astype(compute_np) if getattr(a, "dtype", compute_np) != compute_np
                     else a for a in arrays], out=out_array, **self.kwargs)


def _signature(value):
    """The part of a plan key one operand contributes: a Tensor's interned :class:`.Layout`, a
    cacheable scalar's type; None when the operand is not cacheable."""
    kind = type(value)
    if kind is Tensor:
        return value._layout or layout_of(value)
    return kind if kind in _CACHEABLE_SCALARS else None


def _plan(op: str, ufunc_name, operands, out, result, compute, extra_kwargs,
          formula=None, native=None, promote=None) -> _Plan:
    """Check the op for these operands and decide everything but the values (Note
    [elementwise plans]). ``ufunc_name``/``result``/``compute`` as :func:`elementwise` takes
    them; ``formula``/``native``/``promote`` as :func:`formula` takes them."""
    operands = [_check_operand(v, op) for v in operands]
    device = _operand_device(operands, op)
    promoted = _dtype.result_type(*operands) if promote is None else promote(operands)
    rule = _dtype.OP_RULES.get(op)
    if rule is not None:
        rule(op, promoted, operands)
    if formula is None:
        compute = promoted if compute is None else compute(promoted)
        result = compute if result is None else result
    else:
        result = promoted if result is None else result(promoted)
        compute = _dtype.accumulation_dtype(result if compute is None else compute(promoted))
    shape = _broadcast_shape(op, *(_shape_of(v) for v in operands))
    if out is None:
        _dispatch.check_dtype_supported(device, result)
    else:
        if shape != out.shape:
            raise RuntimeError(f"{op}: the result of shape {shape} cannot be written into the "
                               f"tensor of shape {out.shape} (in-place ops don't broadcast self)")
        if not _dtype.can_cast(result, out.dtype):
            raise RuntimeError(f"{op}: result type {result.name} can't be cast to the desired "
                               f"output type {out.dtype.name}")
        check_no_overlap(out, op)
    xp = _dispatch.xp_of(device)
    plan = _Plan()
    plan.op, plan.device, plan.result, plan.shape = op, device, result, shape
    plan.out_layout = None   # the results' Layout, learnt from the first
    plan.direct = False      # set once out_layout is learnt, for a launcher over arrays only
    plan.by_call = False
    plan.compute, plan.compute_np = compute, compute.numpy
    plan.xp, plan.formula = xp, formula
    plan.attrs = None if formula is None else {"shape": shape}   # for graph dumps; read-only
    # an ``out=`` of a wider dtype than the result gets the result's values (PyTorch computes
    # in the result dtype and casts to ``out``), not the formula's wider intermediates
    plan.round_to = result.numpy if formula is not None and out is not None and \
        out.dtype is not result and compute is not result else None
    if formula is not None:
        plan.ufunc = None
    else:
        plan.ufunc = getattr(xp, ufunc_name) if type(ufunc_name) is str else \
            functools.partial(ufunc_name, xp)
    plan.kwargs = {"casting": "unsafe", **(extra_kwargs or {})}
    plan.check_divisor = op in INTEGER_DIVISIONS and device.type == "cpu"
    limits: list[tuple[Any, Any] | None]
    kinds, limits, value_dtypes = [], [], []
    arrays_match = True
    for value in operands:
        if isinstance(value, Tensor):
            if value.device != device:   # a 0-d host tensor in an accelerator op
                kinds.append(_ITEM)
                value_dtypes.append(compute.numpy)
            else:
                kinds.append(_ARRAY)
                value_dtypes.append(value.dtype.numpy)
                arrays_match &= value.dtype is compute
            limits.append(None)
        elif hasattr(value, "dtype") or (isinstance(value, complex) and not compute.is_complex):
            kinds.append(_RAW)   # a NumPy scalar keeps its dtype; a complex one is cast in xp
            value_dtypes.append(getattr(value, "dtype", None))
            limits.append(None)
        else:
            kinds.append(_CAST)
            value_dtypes.append(compute.numpy)
            limits.append(_weak_scalar_limits(type(value), compute))
    plan.kinds, plan.limits = tuple(kinds), tuple(limits)
    plan.arrays_only = all(k == _ARRAY for k in kinds)
    # what a fused chain of elementwise ops needs (Note [fusion rewrite] in rewrite.py): the
    # op's name among the backend's kernels, and operands that are contiguous arrays of the
    # result's shape and dtype or plain numbers
    plan.native = native if isinstance(native, str) else \
        (op if formula is None and type(ufunc_name) is str and not extra_kwargs else None)
    plan.plain_operands = all(
        k == _CAST or (k == _ARRAY and v.dtype is result and v.shape == shape
                       and v.is_contiguous()) for k, v in zip(kinds, operands))
    plan.mixed = not all(d == compute.numpy for d in value_dtypes)
    plan.fast = None
    plan.scalar_type = compute.numpy.type
    if formula is not None:
        plan.mixed = True   # the formula kernel casts every operand to the compute dtype
        if callable(native):
            if all(k == _ARRAY and v.dtype is result for k, v in zip(kinds, operands)):
                plan.fast = native
        elif native is not None and all(
                k == _CAST or (k == _ARRAY and v.dtype is (
                    _dtype.bool if native == "where" and i == 0 else result))
                for i, (k, v) in enumerate(zip(kinds, operands))):
            plan.fast = _backend_kernel(device, native, result, kinds, operands, shape, out,
                                        result)
            plan.scalar_type = result.numpy.type
    elif not plan.mixed and arrays_match and not extra_kwargs and type(ufunc_name) is str:
        plan.fast = _backend_kernel(device, op, compute, kinds, operands, shape, out, result)
    # a backend's own launcher over arrays only (its elementwise kernel, or a callable
    # ``native``: its softmax or layer_norm hook) touches no NumPy: nothing to silence
    plan.launch = _dispatch.launch_native if plan.fast is not None and plan.arrays_only \
        else _dispatch.launch
    return plan


def _backend_kernel(device, name, compute: _dtype.dtype, kinds, operands, shape, out,
                    result: _dtype.dtype):
    """The backend's own one-kernel launcher for elementwise ``name`` over these operands
    (``elementwise_kernel`` hook: cuda's raw kernels launch cheaper than CuPy's ufuncs; ``name``
    a program's steps, ``((op, refs), ...)``: its ``elementwise_program`` hook), or None: no
    hook, a layout it does not take (strided operands, or a broadcast other than a contiguous
    row repeated along the leading dimensions), or no kernel for the dtypes. Then the ``xp``
    ufunc or formula runs."""
    hook = _dispatch.elementwise_hook(device) if type(name) is str else \
        _dispatch.elementwise_program_hook(device)
    if hook is None or (out is not None and not out.is_contiguous()):
        return None
    letters = []
    for kind, value in zip(kinds, operands):
        if kind == _ARRAY and value.is_contiguous() and value.shape == shape:
            letters.append("a")
        elif kind == _ARRAY and _repeats_along_leading(value.shape, shape) and \
                value.is_contiguous():
            letters.append("r")
        elif kind == _CAST:
            letters.append("s")
        else:
            return None
    return hook(name, compute.numpy, "".join(letters), result.numpy)


def _repeats_along_leading(operand_shape: tuple, shape: tuple) -> bool:
    """Whether an operand of ``operand_shape`` broadcast to ``shape`` is its elements repeated
    along ``shape``'s leading dimensions (a bias row: its shape, leading ones dropped, is a
    suffix of ``shape``), with at least one element."""
    start = 0
    while start < len(operand_shape) and operand_shape[start] == 1:
        start += 1
    core = operand_shape[start:]
    return len(core) <= len(shape) and tuple(shape[len(shape) - len(core):]) == tuple(core) \
        and 0 not in shape


def _weak_scalar_limits(kind, compute: _dtype.dtype):
    """For a Python number of type ``kind`` in an op computing in ``compute``: the closed range
    of values the array library may take as they are (NumPy's weak scalars keep the array's
    dtype for them), or None when every value must be cast first."""
    if kind is bool:
        return (0, 1)
    if compute.is_floating_point or compute.is_complex:
        if kind is float:
            return (float("-inf"), float("inf"))
        # an int beyond int64 takes the checked path (_check_python_int), as PyTorch refuses it
        return (_INT64_MIN, _INT64_MAX) if kind is int else None
    if kind is int and compute is not _dtype.bool:
        info = np.iinfo(compute.numpy)
        return (int(info.min), int(info.max))
    return None


def adopt_launcher(plan: _Plan, native, hook_name: str, *args) -> None:
    """Give a plan whose kernel is the backend's ``native`` the backend's launcher for its
    layout, where it has one: the optional hook ``hook_name(*args)`` (``softmax_launcher``,
    ``layer_norm_launcher``) returns a launcher taking the same arrays as ``native`` or None.
    A plan is kept per layout, so its launch need not look at the signature again."""
    if native is None or plan.fast is not native:
        return
    prepared = _dispatch._hook_for(_dispatch.xp_of(plan.device), hook_name)
    launcher = None if prepared is None else prepared(*args)
    if launcher is not None:
        plan.fast = launcher


def _execute(plan: _Plan, operands, out):
    """Launch ``plan`` over these operand values (Note [elementwise plans])."""
    if out is None:
        if _rewrite.active is not None:   # Note [fusion rewrite]
            return _rewrite.active.run(plan, operands, lambda: _execute(plan, operands, None))
        if plan.by_call and not _dispatch.launch_watchers:
            # a direct plan of three or more operands (layer_norm, where): _execute_two's path
            arrays = []
            for value in operands:
                if value._guard is not None:
                    value._check_guard()
                arrays.append(value._data)
            out = Tensor._make(_dispatch.call_into_new(
                plan.device, plan.shape, plan.nbytes, plan.result.numpy, plan.fast, *arrays),
                plan.device, plan.result)
            out._layout = plan.out_layout
            return out
    device = plan.device
    values = []
    if plan.arrays_only:   # the common case: tensors on the op's device
        for value in operands:
            if value._guard is not None:
                value._check_guard()
            values.append(value._data)
    else:
        _operand_values(plan, operands, values)
    if plan.check_divisor:
        check_host_divisor(plan.op, plan.compute, values[1])
    if out is None:
        out_array = _dispatch.empty(device, plan.shape, plan.result)
        out = Tensor._make(out_array, device, plan.result)
        # every result of a plan is laid out alike (new C-ordered memory of one shape and dtype)
        if plan.out_layout is None:
            plan.out_layout = layout_of(out)
            plan.direct = plan.fast is not None and plan.arrays_only and not plan.check_divisor
            plan.by_call = plan.direct and _dispatch.launches_by_call(device)
            plan.nbytes = _dispatch.result_nbytes(plan.shape, plan.result)
        else:
            out._layout = plan.out_layout
    else:
        if out._guard is not None:
            out._check_guard()
        if _writes.active:   # every write into an existing tensor is noted: Note [write records]
            _writes.note(out)
        out_array = out._data
    fast = plan.fast
    if fast is not None:
        if plan.arrays_only:
            kernel = functools.partial(fast, *values, out_array)
        else:
            kernel = functools.partial(_fast_kernel, fast, plan.scalar_type, plan.kinds, values,
                                       out_array)
    elif plan.mixed:
        kernel = functools.partial(plan._run_kernel, values, out_array)
    else:
        kernel = functools.partial(plan.ufunc, *values, out=out_array, **plan.kwargs)
    # _dispatch.named, inlined: the eager hot path
    kernel.__name__ = plan.op   # type: ignore[attr-defined]
    if plan.attrs is not None:
        kernel.tp_attrs = plan.attrs   # type: ignore[attr-defined]
    plan.launch(device, kernel)
    return out


def _launch_named(plan: _Plan, *arrays) -> Any:
    """A direct plan's launch into a new result array as a named kernel object (what launch
    watchers are handed, and backends without ``launch_call`` run); returns the array. Off the
    eager hot path on cuda, which launches by call while nothing watches."""
    out_array = _dispatch.empty(plan.device, plan.shape, plan.result)
    kernel = functools.partial(plan.fast, *arrays, out_array)
    plan.launch(plan.device, _dispatch.named(plan.op, kernel, **(plan.attrs or {})))
    return out_array


def _execute_one(plan: _Plan, x) -> Tensor:
    """:func:`_execute` of a one-operand plan into a new result: the eager hot path of the
    one-input ops (softmax, gelu, exp ...). A direct plan (a backend launcher over the operand's
    array) launches with nothing else around it; any other takes :func:`_execute`."""
    if not plan.direct or _rewrite.active is not None:
        return _execute(plan, (x,), None)
    if x._guard is not None:
        x._check_guard()
    device, dtype = plan.device, plan.result
    if plan.by_call and not _dispatch.launch_watchers:   # no kernel object to make
        out_array = _dispatch.call_into_new(device, plan.shape, plan.nbytes, dtype.numpy,
                                            plan.fast, x._data)
    else:
        out_array = _launch_named(plan, x._data)
    # Tensor._make(out_array, device, dtype) without its frame (the eager hot path)
    out = _new_object(Tensor)
    out._data, out._device, out._dtype, out._layout = out_array, device, dtype, plan.out_layout
    out._guard = out._ag = None
    return out


def _execute_two(plan: _Plan, a, b) -> Tensor:
    """:func:`_execute_one` for two operands (``a + b`` and the other binary ops). Written out
    beside it: a shared tail taking ``*arrays`` cost 0.14 us an op, a sixth of what the direct
    path saves."""
    if not plan.direct or _rewrite.active is not None:
        return _execute(plan, (a, b), None)
    if a._guard is not None:
        a._check_guard()
    if b._guard is not None:
        b._check_guard()
    device, dtype = plan.device, plan.result
    if plan.by_call and not _dispatch.launch_watchers:
        out_array = _dispatch.call_into_new(device, plan.shape, plan.nbytes, dtype.numpy,
                                            plan.fast, a._data, b._data)
    else:
        out_array = _launch_named(plan, a._data, b._data)
    out = _new_object(Tensor)
    out._data, out._device, out._dtype, out._layout = out_array, device, dtype, plan.out_layout
    out._guard = out._ag = None
    return out


def _operand_values(plan: _Plan, operands, values: list) -> None:
    """Append the value a kernel reads for each operand (Note [elementwise plans])."""
    for kind, value, limits in zip(plan.kinds, operands, plan.limits):
        if kind is _ARRAY:
            if value._guard is not None:
                value._check_guard()
            values.append(value._data)
        elif kind is _CAST:
            if limits is not None and limits[0] <= value <= limits[1]:
                values.append(value)
            else:
                _check_python_int(plan.op, value)
                values.append(_cast(value, plan.compute_np, None))
        elif kind is _ITEM:
            value._check_guard()
            item = value._data.item()
            values.append(item if isinstance(item, complex) and not plan.compute.is_complex
                          else _cast(item, plan.compute_np, None))
        else:
            values.append(value)


def _fast_kernel(fast, scalar_type, kinds, values, out_array) -> None:
    """Run a backend's own elementwise kernel; numbers become scalars of the compute dtype
    here, inside the launch, where NumPy's overflow warnings are off."""
    fast(*[v if k is _ARRAY else scalar_type(v) for k, v in zip(kinds, values)], out_array)


def elementwise(op: str, ufunc_name, operands, *, out: Tensor | None = None,
                result=None, compute=None, extra_kwargs=None) -> Tensor:
    """Run the ``xp`` ufunc ``ufunc_name`` over operands.

    Args:
        ufunc_name: the name of an ``xp`` ufunc, or a function ``f(xp, *arrays, out, casting)``
            composed of them.
        result: fixes the result dtype (e.g. bool for comparisons); default: promotion.
        compute: a function of the promoted dtype giving the dtype the ufunc computes in;
            default: the promoted dtype.
        out: write into this tensor (in-place ops) after checking shape and castability.
    """
    return _execute(_plan(op, ufunc_name, operands, out, result, compute, extra_kwargs),
                    operands, out)


def formula(op: str, operands, fn, *, result=None, compute=None, out: Tensor | None = None,
            native=None, promote=None, cache: bool = False) -> Tensor:
    """``out[...] = fn(xp, *operands)`` for Tensors/numbers with broadcasting, in ONE kernel
    (temporaries live only inside it): the engine for ops that are formulas of ufuncs (where,
    clamp, the activations ...).

    Args:
        result: ``result(promoted) -> dtype``, the result dtype (default: the promoted dtype).
        compute: ``compute(promoted) -> dtype``; operands are cast in the kernel to it (default:
            the result dtype; float16/bfloat16 compute in float32 either way).
        native: the backend's own one-kernel form, used when every operand is an array of the
            result's dtype: a callable ``native(*arrays, out_array)``, or the op's name in the
            backend's ``elementwise_kernel`` hook (gelu, silu, where ...), or the steps of a
            chain of those ops for its ``elementwise_program`` hook (``((op, refs), ...)``,
            numbers among the operands too).
        promote: ``promote(operands) -> dtype`` instead of promoting all operands (``where``
            promotes its two values, not the condition).
        cache: keep the plan for this signature and ``fn`` (Note [elementwise plans]); only
            for ``result``, ``compute`` and ``native`` that are the same for every call of
            ``op`` with that ``fn``.
    """
    if cache:
        out_key = () if out is None else out._layout or layout_of(out)
        if len(operands) == 1 and type(operands[0]) is Tensor:   # the activations
            only = operands[0]
            key = (op, fn, only._layout or layout_of(only), out_key)
        else:
            key = (op, fn, *[_signature(v) for v in operands], out_key)
        plan = _plans.get(key)
        if plan is None:
            plan = _plan(op, None, operands, out, result, compute, None, fn, native, promote)
            if None not in key[1:]:
                _dispatch.remember(_plans, key, plan, _PLAN_LIMIT)
    else:
        plan = _plan(op, None, operands, out, result, compute, None, fn, native, promote)
    return _execute(plan, operands, out)


def _cached(key, op: str, ufunc_name, operands, out, result, compute) -> _Plan:
    plan = _plan(op, ufunc_name, operands, out, result, compute, None)
    if None not in key[1:] and not (op == "pow" and any(
            not isinstance(v, Tensor) for v in operands)):
        _dispatch.remember(_plans, key, plan, _PLAN_LIMIT)
    return plan



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


def _binary_call(op: str, a, b):
    """(ufunc, result, compute) of a binary op for these operands (the plan's first step)."""
    if op in _COMPARE:
        return _COMPARE[op], _dtype.bool, None
    if op in ("div", "atan2"):
        return ("true_divide" if op == "div" else "arctan2"), None, _to_float
    if op == "pow" and isinstance(b, Tensor) and b.dtype.is_signed and \
            _dtype.result_type(a, b) in _INTEGERS:   # a signed integer exponent may be negative
        return _integer_power, None, None
    return _BINARY[op], None, None


def binary(op: str, a, b, out: Tensor | None = None) -> Tensor:
    """``a op b`` by PyTorch's promotion and broadcasting, into ``out`` when given."""
    key = (op, (a._layout or layout_of(a)) if type(a) is Tensor else _signature(a),
           (b._layout or layout_of(b)) if type(b) is Tensor else _signature(b),
           () if out is None else out._layout or layout_of(out))
    plan = _plans.get(key)
    if plan is None:
        ufunc, result, compute = _binary_call(op, a, b)
        plan = _cached(key, op, ufunc, (a, b), out, result, compute)
    return _execute(plan, (a, b), out) if out is not None else _execute_two(plan, a, b)


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
    """``op(a)`` (``_UNARY`` names), into ``out`` when given."""
    key = (op, (a._layout or layout_of(a)) if type(a) is Tensor else _signature(a),
           () if out is None else out._layout or layout_of(out))
    plan = _plans.get(key)
    if plan is None:
        if op in ("floor", "ceil", "round", "trunc") and isinstance(a, Tensor) and \
                a.dtype in _INTEGERS:
            return a.clone() if out is None else out.copy_(a)
        if op == "reciprocal":
            return binary("div", 1, a, out=out)
        ufunc_name, to_float = _UNARY[op]
        result: _dtype.dtype | None
        compute: Callable[[_dtype.dtype], _dtype.dtype] | None
        result, compute = None, _to_float if to_float else None
        dtype = a.dtype if isinstance(a, Tensor) else None
        if op == "logical_not":
            result = _dtype.bool
        elif op == "abs" and dtype in _REAL_PART:   # |z| is real, as PyTorch's abs
            result = _REAL_PART[dtype]
        elif op == "sign" and dtype is _dtype.bool:   # NumPy has no bool sign: x itself
            result, compute = _dtype.bool, _int8
        elif op == "square":
            compute = _square_compute
        plan = _cached(key, op, ufunc_name, (a,), out, result, compute)
    return _execute(plan, (a,), out) if out is not None else _execute_one(plan, a)


_REAL_PART = {_dtype.complex64: _dtype.float32, _dtype.complex128: _dtype.float64}


def _int8(_promoted: _dtype.dtype) -> _dtype.dtype:
    return _dtype.int8


def _square_compute(promoted: _dtype.dtype) -> _dtype.dtype:
    """PyTorch's ``square(x)`` is ``pow(x, 2)``: a bool tensor gives int64 (the int exponent
    promotes it), every other dtype stays."""
    return _dtype.int64 if promoted is _dtype.bool else promoted


def fill_(tensor: Tensor, value) -> Tensor:
    """Set every element (``value``: a Python number or a one-element tensor)."""
    tensor._check_guard()
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise RuntimeError(f"fill_ takes a one-element tensor, got shape {value.shape}")
        return tensor.copy_(value.reshape(()))
    _check_operand(value, "fill_")
    check_no_overlap(tensor, "fill_")
    data = tensor._data
    value = _dtype.storable_value(value, tensor.dtype, "fill_")  # 300 into int8 raises, as torch
    scalar = _cast(value, tensor.dtype.numpy, None)  # -1 into uint8 wraps, as in PyTorch

    def kernel():
        data.fill(scalar)
    kernel.__name__ = "fill"
    _dispatch.launch(tensor.device, kernel)
    return tensor


_INTEGERS = frozenset(d for d in _dtype.all_dtypes if d not in (_dtype.bool,) and
                      not (d.is_floating_point or d.is_complex))
