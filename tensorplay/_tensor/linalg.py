"""Matrix products: ``matmul`` (``@``), ``mm``, ``bmm``, ``dot``, ``addmm``, ``outer``, ``linear``,
and the float32 precision setting.

Shapes follow PyTorch's rules and are checked from metadata alone; the product is ONE call of
the backend's ``matmul`` (``_dispatch.matmul_of``: cuda's is cuBLASLt, eager and captured),
float16/bfloat16 accumulating in float32 and rounding once.

:func:`fused_matmul` computes ``activation(a @ b + bias)``: where the backend fuses the bias and
activation into the product (``matmul_epilogue``; cuda: cuBLASLt's BIAS, RELU_BIAS and GELU_BIAS
epilogues) it is one call, otherwise the product, then the bias add and the activation as ops of
their own. ``linear`` and ``tp.compile``'s fusion pass use it.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any, Callable, Literal

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import activations as _activations, elementwise as _ops, rewrite as _rewrite
from .join import _tensor_arg
from .tensor import Tensor, layout_of

if TYPE_CHECKING:
    from .._runtime.device import device as Device

__all__ = ["matmul", "mm", "bmm", "dot", "addmm", "outer"]

_PRECISIONS = ("highest", "high", "medium")
_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """How float32 matrix products compute, with PyTorch's meaning: "highest" (full float32,
    the default), "high" (TF32 tensor cores, about 10 mantissa bits per input) or "medium"
    (bfloat16 tensor cores). Products of other dtypes are unaffected. Backends without such
    units (host, sim, and cuda without nvmath-python) always compute in full float32.

    As PyTorch: another string only warns (UserWarning) and changes nothing.

    Raises:
        RuntimeError: ``precision`` is not a str (PyTorch's type for this error).
    """
    global _precision
    if not isinstance(precision, str):
        raise RuntimeError(f"set_float32_matmul_precision expects a str, but got "
                           f"{type(precision).__name__}")
    if precision not in _PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"set_float32_matmul_precision call has no effect.", UserWarning,
                      stacklevel=2)
        return
    if precision != _precision:
        _precision = precision
        _plans.clear()


def get_float32_matmul_precision() -> str:
    """The current float32 matrix-product precision ("highest", "high" or "medium")."""
    return _precision

TENSOR_METHODS = ("matmul", "mm", "bmm", "dot", "addmm", "outer")


def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: expected mat1 and mat2 to have the same dtype, but got: "
                           f"{a.dtype.name} != {b.dtype.name}")
    if a.dtype is _dtype.bool:
        raise RuntimeError(f"{op}: bool tensors are not supported; convert them first")


def _matmul_shape(a_shape, b_shape) -> tuple[int, ...]:
    if not a_shape or not b_shape:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{len(a_shape)}D and {len(b_shape)}D")
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    if a2[-1] != b2[-2]:
        raise RuntimeError(f"matmul: shapes {a_shape} and {b_shape} cannot be multiplied "
                           f"({a2[-1]} != {b2[-2]}: the first's last dim must equal the "
                           f"second's {'only' if len(b_shape) == 1 else 'second-to-last'} dim)")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise RuntimeError(f"matmul: the batch dimensions of shapes {a_shape} and {b_shape} "
                           f"do not broadcast ({a2[:-2]} vs {b2[:-2]})") from None
    return batch + a2[-2:-1] * (len(a_shape) > 1) + b2[-1:] * (len(b_shape) > 1)


class _ProductPlan:
    """What a product over one pair of operand signatures decides before it launches (as Note
    [elementwise plans] in ``elementwise.py``)."""

    __slots__ = ("op", "device", "shape", "dtype", "precision", "matmul", "attrs", "launch",
                 "launcher", "by_call", "nbytes")
    # the slots' types (declarations only: no class attribute is made)
    op: str
    device: Device
    shape: tuple[int, ...]
    dtype: _dtype.dtype
    precision: str
    matmul: Callable[..., Any]
    attrs: dict[str, Any]
    launch: Callable[..., Any]
    # the backend's launcher for a kept plan's layouts (``matmul_launcher``): None until the
    # first launch asks for it, False when the backend has none
    launcher: Callable[..., Any] | Literal[False] | None
    by_call: bool   # the backend runs a launcher by call (_dispatch.call_into_new)
    nbytes: int     # _dispatch.result_nbytes of the result


_plans: dict = {}


def _ask_launcher(device: Device, a, b, out, bias, activation,
                  precision: str) -> Callable[..., Any] | Literal[False]:
    """The backend's launcher (``matmul_launcher``) of the product just run on these arrays,
    or False (the caller asks once per plan)."""
    hook = _dispatch.accelerator_hook("matmul_launcher") if device.type != "cpu" else None
    return (hook is not None and hook(a, b, out, bias, activation, precision)) or False


def _plan_product(op: str, a: Tensor, b: Tensor, shape) -> _ProductPlan:
    plan = _ProductPlan()
    plan.op, plan.shape, plan.dtype = op, tuple(shape), a.dtype
    plan.device = _ops._operand_device([a, b], op)
    _dispatch.check_dtype_supported(plan.device, a.dtype)
    if plan.device.type != "cpu" and not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise NotImplementedError(
            f"{op}: products of {a.dtype.name} tensors are not implemented on "
            f"{plan.device.type} (as in PyTorch, whose CUDA matmul is \"addmm_cuda\" not "
            f"implemented for integer types); multiply floating tensors, or on cpu")
    plan.precision = _precision if a.dtype is _dtype.float32 else "highest"
    plan.matmul = _dispatch.matmul_of(plan.device)
    plan.attrs = {"shape": plan.shape}
    # an accelerator's product (its own, or its array library's) touches no NumPy at launch
    plan.launch = _dispatch.launch if plan.device.type == "cpu" else _dispatch.launch_native
    plan.launcher = None
    plan.by_call = _dispatch.launches_by_call(plan.device)
    plan.nbytes = _dispatch.result_nbytes(plan.shape, plan.dtype)
    return plan


def _launch_matmul(op: str, a: Tensor, b: Tensor, shape, plan=None) -> Tensor:
    if plan is None:
        plan = _plan_product(op, a, b, shape)
    device = plan.device
    out = _dispatch.empty(device, plan.shape, plan.dtype)
    kernel = functools.partial(plan.matmul, a._data, b._data, out, plan.precision)
    # _dispatch.named, inlined
    kernel.__name__, kernel.tp_attrs = op, plan.attrs   # type: ignore[attr-defined]
    plan.launch(device, kernel)
    return Tensor._make(out, device, plan.dtype)


def matmul(input, other) -> Tensor:
    """Matrix product with PyTorch's rules: 1-D @ 1-D is a dot product, a 1-D operand gets a
    dimension added (and removed from the result), batch dimensions broadcast.

    Raises:
        RuntimeError: for 0-d operands, mismatched inner sizes or batch shapes (naming both
            shapes), or operands of different dtypes.
    """
    if _rewrite.active is not None:   # Note [fusion rewrite]
        return _rewrite.active.run("matmul", (input, other), lambda: matmul(input, other))
    if type(input) is Tensor and type(other) is Tensor and input._guard is None and \
            other._guard is None:
        key = (input._layout or layout_of(input), other._layout or layout_of(other))
        plan = _plans.get(key)
        if plan is None:
            _same_dtype("matmul", input, other)
            plan = _plan_product("matmul", input, other, _matmul_shape(input.shape, other.shape))
            _dispatch.remember(_plans, key, plan, 1024)
        device = plan.device   # (_launch_matmul, inlined: every eager product passes here)
        launcher = plan.launcher
        if launcher and plan.by_call and not _dispatch.launch_watchers:
            return Tensor._make(_dispatch.call_into_new(
                device, plan.shape, plan.nbytes, plan.dtype.numpy, launcher, input._data,
                other._data, None), device, plan.dtype)
        out = _dispatch.empty(device, plan.shape, plan.dtype)
        kernel = functools.partial(launcher, input._data, other._data, None, out) if launcher \
            else functools.partial(plan.matmul, input._data, other._data, out, plan.precision)
        kernel.__name__, kernel.tp_attrs = "matmul", plan.attrs   # type: ignore[attr-defined]
        plan.launch(device, kernel)
        if launcher is None:
            plan.launcher = _ask_launcher(device, input._data, other._data, out, None, None,
                                          plan.precision)
        return Tensor._make(out, device, plan.dtype)
    a, b = _tensor_arg(input, "matmul", "input"), _tensor_arg(other, "matmul", "other")
    _same_dtype("matmul", a, b)
    return _launch_matmul("matmul", a, b, _matmul_shape(a.shape, b.shape))


def mm(input, mat2) -> Tensor:
    """The product of two 2-D tensors (no broadcasting)."""
    a, b = _tensor_arg(input, "mm", "input"), _tensor_arg(mat2, "mm", "mat2")
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected two 2-D tensors, got shapes {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x"
                           f"{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    _same_dtype("mm", a, b)
    return _launch_matmul("mm", a, b, (a.shape[0], b.shape[1]))


def bmm(input, mat2) -> Tensor:
    """Batched product of two 3-D tensors with the same batch size (no broadcasting)."""
    a, b = _tensor_arg(input, "bmm", "input"), _tensor_arg(mat2, "bmm", "mat2")
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected two 3-D tensors, got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"bmm: shapes {a.shape} and {b.shape} cannot be multiplied: expected "
                           f"mat2 of shape ({a.shape[0]}, {a.shape[2]}, *)")
    _same_dtype("bmm", a, b)
    return _launch_matmul("bmm", a, b, (a.shape[0], a.shape[1], b.shape[2]))


def dot(input, other) -> Tensor:
    """The dot product of two 1-D tensors of the same size (a 0-d tensor)."""
    a, b = _tensor_arg(input, "dot", "input"), _tensor_arg(other, "dot", "other")
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(f"inconsistent tensor size, expected tensor {a.shape} and src "
                           f"{b.shape} to have the same number of elements, but got "
                           f"{a.shape[0]} and {b.shape[0]} elements respectively")
    _same_dtype("dot", a, b)
    return _launch_matmul("dot", a, b, ())


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)``; ``input`` broadcasts; ``beta=0`` ignores it
    (NaN in it does not propagate). With ``beta = alpha = 1`` and a 1-D ``input`` of the
    product's width and dtype (a bias), one product with the bias added inside it where the
    backend fuses it (cuda: cuBLASLt's BIAS epilogue), as
    :func:`tensorplay.nn.functional.linear`."""
    # (the arrays' own shapes: no property frames on the eager hot path; fused_matmul checks
    # the guards)
    if beta == 1 and alpha == 1 and type(input) is Tensor and type(mat1) is Tensor and \
            type(mat2) is Tensor and input._data.ndim == 1 and mat1._data.ndim == 2 and \
            mat2._data.ndim == 2 and input._data.shape[0] == mat2._data.shape[1] and \
            mat1._data.shape[1] == mat2._data.shape[0] and input._dtype is mat1._dtype:
        if _rewrite.active is not None:   # Note [fusion rewrite]: a product with its bias
            return _rewrite.active.run("addmm", (input, mat1, mat2),
                                       lambda: fused_matmul(mat1, mat2, input, None, "addmm"))
        return fused_matmul(mat1, mat2, input, None, "addmm")
    product = mm(mat1, mat2)
    if alpha != 1:
        product = _ops.binary("mul", product, alpha)
    if beta == 0:
        return product
    bias = _tensor_arg(input, "addmm", "input")
    if beta != 1:
        bias = _ops.binary("mul", bias, beta)
    return _ops.binary("add", product, bias)


def outer(input, vec2) -> Tensor:
    """The outer product of two 1-D tensors."""
    a, b = _tensor_arg(input, "outer", "input"), _tensor_arg(vec2, "outer", "vec2")
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected two 1-D tensors, got shapes {a.shape} and "
                           f"{b.shape}")
    return _ops.binary("mul", a.unsqueeze(1), b.unsqueeze(0))


# -- products with a bias and an activation ------------------------------------------------------
#: The activations :func:`fused_matmul` takes, as the tensor-level ops that apply them unfused.
ACTIVATIONS: dict[str | None, Callable[[Tensor], Tensor] | None] = {
    None: None,
    "relu": _activations.relu,
    "gelu": _activations.gelu,
    "gelu_tanh": lambda x: _activations.gelu(x, approximate="tanh"),
    "silu": _activations.silu,
}


class _FusedPlan:
    """What ``activation(a @ b + bias)`` decides once per operand signature: the product's plan,
    the backend's epilogue (None: product then ops) and what it fuses, the activation left to
    apply as an op of its own, and the kernel's name."""

    __slots__ = ("product", "epilogue", "fused", "apply", "name", "launcher")
    # the slots' types (declarations only: no class attribute is made)
    product: _ProductPlan
    epilogue: Callable[..., Any] | None
    fused: str | None
    apply: Callable[[Tensor], Tensor] | None
    name: str
    launcher: Callable[..., Any] | Literal[False] | None   # the epilogue's, as _ProductPlan's


_fused_plans: dict = {}


def fused_matmul(a: Tensor, b: Tensor, bias: Tensor | None, activation: str | None,
                 op: str = "matmul") -> Tensor:
    """``activation(a @ b + bias)`` (``bias`` None: no add), ``a @ b`` with matmul's rules and
    the bias broadcasting against the product. One backend call where the backend fuses that
    bias and activation (``matmul_epilogue``), else two or three ops. Planned once per operand
    signature.

    Raises:
        RuntimeError: as :func:`matmul`, or a bias of another dtype or a shape that does not
            broadcast to the product's.
        ValueError: an activation that is not one of :data:`ACTIVATIONS`.
    """
    for value in (a, b, bias):
        if value is not None and value._guard is not None:
            value._check_guard()
    key = (a._layout or layout_of(a), b._layout or layout_of(b),
           None if bias is None else bias._layout or layout_of(bias), activation, op,
           _precision)
    plan = _fused_plans.get(key)
    if plan is None:
        plan = _plan_fused(op, a, b, bias, activation)
        _dispatch.remember(_fused_plans, key, plan, 1024)
    product = plan.product
    if plan.epilogue is not None:
        # (a plan has an epilogue only with a bias)
        bias_data = bias._data  # type: ignore[union-attr]
        launcher = plan.launcher
        if launcher and product.by_call and not _dispatch.launch_watchers:
            result = Tensor._make(_dispatch.call_into_new(
                product.device, product.shape, product.nbytes, product.dtype.numpy, launcher,
                a._data, b._data, bias_data), product.device, product.dtype)
            return result if plan.apply is None else plan.apply(result)
        out = _dispatch.empty(product.device, product.shape, product.dtype)
        kernel = functools.partial(launcher, a._data, b._data, bias_data, out) if launcher \
            else functools.partial(plan.epilogue, a._data, b._data, out, bias_data, plan.fused,
                                   product.precision)
        # _dispatch.named, inlined; the product's launch (an accelerator's touches no NumPy)
        kernel.__name__, kernel.tp_attrs = plan.name, product.attrs  # type: ignore[attr-defined]
        product.launch(product.device, kernel)
        if launcher is None:
            plan.launcher = _ask_launcher(product.device, a._data, b._data, out, bias_data,
                                          plan.fused, product.precision)
        result = Tensor._make(out, product.device, product.dtype)
    else:
        result = _launch_matmul(op, a, b, None, product)
        if bias is not None:
            result = _ops.binary("add", result, bias)
    return result if plan.apply is None else plan.apply(result)


def fused_matmul_residual(a: Tensor, b: Tensor, bias: Tensor | None, residual: Tensor,
                          op: str = "matmul") -> Tensor:
    """``a @ b + bias + residual`` (``bias`` None: none): ONE backend call where the backend
    adds a residual inside the product (``matmul_residual``; cuda: cuBLASLt's C input with
    beta = 1, the bias its epilogue), for a 2-D ``b``, a residual of the product's shape, dtype
    and device, C-contiguous; else :func:`fused_matmul`, then an add. ``tp.compile`` folds a
    residual add after a product into this."""
    for value in (a, b, bias, residual):
        if value is not None and value._guard is not None:
            value._check_guard()
    key = (_ops._signature(a), _ops._signature(b),
           None if bias is None else _ops._signature(bias), _ops._signature(residual), op,
           _precision, "residual")
    plan = _fused_plans.get(key)
    if plan is None:
        plan = _plan_fused(op, a, b, bias, None)
        hook = _dispatch.accelerator_hook("matmul_residual")
        product = plan.product
        plan.epilogue = hook if (
            hook is not None and b.ndim == 2 and a.shape[-1] > 0
            and product.device.type != "cpu" and a.dtype in _EPILOGUE_DTYPES
            and (bias is None or (bias.shape == product.shape[-1:] and bias.stride() == (1,)))
            and residual.shape == product.shape and residual.dtype is product.dtype
            and residual.device == product.device and residual.is_contiguous()) else None
        plan.name = f"{op}+residual" if bias is None else f"{op}+bias+residual"
        _dispatch.remember(_fused_plans, key, plan, 1024)
    if plan.epilogue is None:
        return _ops.binary("add", fused_matmul(a, b, bias, None, op), residual)
    product = plan.product
    out = _dispatch.empty(product.device, product.shape, product.dtype)
    kernel = functools.partial(plan.epilogue, a._data, b._data, out,
                               None if bias is None else bias._data, residual._data,
                               product.precision)
    kernel.__name__, kernel.tp_attrs = plan.name, product.attrs   # type: ignore[attr-defined]
    product.launch(product.device, kernel)
    return Tensor._make(out, product.device, product.dtype)


def accumulate_product_(target: Tensor, a: Tensor, b: Tensor, overwrite: bool = False) -> bool:
    """``target += a @ b`` (``overwrite``: ``target[...] = a @ b``) in ONE product where the
    backend adds into its output (``matmul_residual``: cuBLASLt's C input, beta = 1), for 2-D
    operands of ``target``'s dtype and device and a C-contiguous ``target`` of the product's
    shape; returns False, touching nothing, otherwise (the caller then runs the ops). The
    autograd engine writes weight gradients into ``.grad`` with it. Records nothing."""
    hook = _dispatch.accelerator_hook("matmul_residual")
    device, dtype = target._device, target._dtype
    out = target._data
    # the arrays' own shapes (plain tuples): the engine's operands have passed their guards
    a_shape, b_shape = a._data.shape, b._data.shape
    if hook is None or device.type == "cpu" or len(a_shape) != 2 or len(b_shape) != 2 or \
            a._dtype is not dtype or b._dtype is not dtype or \
            dtype not in _EPILOGUE_DTYPES or a._device != device or \
            b._device != device or out.shape != (a_shape[0], b_shape[1]) or \
            a_shape[1] != b_shape[0] or a_shape[1] == 0:
        return False
    kernel = functools.partial(hook, a._data, b._data, out, None, None if overwrite else out,
                               _precision)
    _dispatch.launch(device, _dispatch.named("matmul+accumulate", kernel, shape=out.shape))
    return True


def _plan_fused(op: str, a: Tensor, b: Tensor, bias: Tensor | None,
                activation: str | None) -> _FusedPlan:
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: unknown activation {activation!r}; valid: "
                         f"{', '.join(repr(k) for k in ACTIVATIONS)}")
    _same_dtype(op, a, b)
    shape = _matmul_shape(a.shape, b.shape)
    if bias is not None and bias.dtype is not a.dtype:
        raise RuntimeError(f"{op}: expected the bias to have the operands' dtype "
                           f"{a.dtype.name}, got {bias.dtype.name}")
    plan = _FusedPlan()
    plan.product = product = _plan_product(op, a, b, shape)
    epilogue, fusable = _dispatch.matmul_epilogue_of(product.device)
    if (bias is not None and epilogue is not None and None in fusable and b.ndim > 1
            and a.shape[-1] > 0 and a.dtype in _EPILOGUE_DTYPES and bias.shape == shape[-1:]
            and bias.stride() == (1,) and bias.device == product.device):
        plan.epilogue = epilogue
        plan.fused = activation if activation in fusable else None
        plan.name = f"{op}+bias" + (f"+{plan.fused}" if plan.fused else "")
    else:
        plan.epilogue = plan.fused = None
        plan.name = op
    plan.apply = None if activation == plan.fused else ACTIVATIONS[activation]
    plan.launcher = None
    return plan


_EPILOGUE_DTYPES = frozenset({_dtype.float16, _dtype.bfloat16, _dtype.float32})


def linear(input, weight, bias=None) -> Tensor:
    """``input @ weight.T + bias`` (PyTorch's ``nn.functional.linear``): ``input`` (*, in),
    ``weight`` (out, in) or (in,), ``bias`` (out,) or broadcastable to the result. The transposed
    weight is a view (no copy); on cuda the bias add runs inside the product (cuBLASLt's BIAS
    epilogue).

    Raises:
        RuntimeError: as PyTorch's: the inner sizes differ ("mat1 and mat2 shapes cannot be
            multiplied"), operands or bias of different dtypes, a 0-d operand, a weight of
            more than 2 dimensions, a 1-D weight with a bias and a 2-D input (PyTorch's addmm
            path refuses it; other inputs take it), or a bias that does not expand
            to the result's shape.
        NotImplementedError: integer operands on an accelerator (as PyTorch on CUDA).
    """
    if _rewrite.active is not None:   # Note [fusion rewrite]
        return _rewrite.active.run("linear", (input, weight, bias),
                                   lambda: linear(input, weight, bias))
    if type(input) is Tensor and type(weight) is Tensor and weight._guard is None and \
            (bias is None or type(bias) is Tensor):
        layout = _checked_linear.get((input._layout or layout_of(input),
                                      weight._layout or layout_of(weight),
                                      None if bias is None else bias._layout or layout_of(bias)))
        if layout is not None:   # the checks below passed for this signature: the weight's
            data = weight._data  # view is all, and its layout is known
            transposed = Tensor._make(data.T if data.ndim == 2 else data, weight._device,
                                      weight._dtype)
            transposed._layout = layout
            return fused_matmul(input, transposed, bias, None, "linear")
    x = _tensor_arg(input, "linear", "input")
    w = _tensor_arg(weight, "linear", "weight")
    b = None if bias is None else _tensor_arg(bias, "linear", "bias")
    if w.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {w.ndim}D")
    if x.ndim == 0 or w.ndim == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are "
                           f"{x.ndim}D and {w.ndim}D")
    if b is not None and w.ndim == 1 and x.ndim == 2:   # torch's addmm path
        raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    if x.shape[-1] != w.shape[-1]:
        rows = 1
        for size in x.shape[:-1]:
            rows *= size
        w_shape = f"{w.shape[-1]}x{w.shape[0]}" if w.ndim == 2 else f"{w.shape[0]}x1"
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1]} "
                           f"and {w_shape})")
    if b is not None:
        if b.dtype is not x.dtype and x.dtype is w.dtype:
            raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                               f"{b.dtype.name} and {w.dtype.name}")
        _check_expands(b.shape, x.shape[:-1] + (w.shape[:1] if w.ndim == 2 else ()))
    transposed = w.T if w.ndim == 2 else w
    result = fused_matmul(x, transposed, b, None, "linear")
    if type(input) is Tensor and type(weight) is Tensor and \
            (bias is None or type(bias) is Tensor) and transposed._guard is None:
        key = (layout_of(x), layout_of(w), None if b is None else layout_of(b))
        _dispatch.remember(_checked_linear, key, layout_of(transposed), 1024)
    return result


#: the operand layouts linear() has checked once -> the layout of the weight's transposed view
_checked_linear: dict = {}


def _check_expands(shape: tuple, target: tuple) -> None:
    """PyTorch's rule for a bias added into a result: it expands to the result's shape (it does
    not broadcast the result up)."""
    if len(shape) > len(target):
        raise RuntimeError(f"expand: the number of sizes provided ({len(target)}) must be "
                           f"greater or equal to the number of dimensions in the tensor "
                           f"({len(shape)}) (bias of shape {shape}, result {target})")
    for position, (size, want) in enumerate(zip(reversed(shape), reversed(target))):
        if size != want and size != 1:
            dim = len(target) - 1 - position
            raise RuntimeError(f"The expanded size of the tensor ({want}) must match the "
                               f"existing size ({size}) at non-singleton dimension {dim}.  "
                               f"Target sizes: {list(target)}.  Tensor sizes: {list(shape)}")
