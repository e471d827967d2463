"""Matrix products: ``matmul`` (``@``), ``mm``, ``bmm``, ``dot``, ``addmm``, ``outer``.

Shapes follow PyTorch's rules and are checked from metadata alone; the product is ONE kernel
through the backend's ``matmul`` (``_dispatch.matmul_of``: cuda's works during stream capture
too), computing float16/bfloat16 in float32 and rounding once.
"""

from __future__ import annotations

import functools

import numpy as np

from .._runtime import dispatch as _dispatch
from .. import _dtype
from . import elementwise as _ops
from .join import _tensor_arg
from .reductions import _accumulate
from .tensor import Tensor

__all__ = ["matmul", "mm", "bmm", "dot", "addmm", "outer"]

TENSOR_METHODS = ("matmul", "mm", "bmm", "dot", "addmm", "outer")


def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: expected both operands to have the same dtype, got "
                           f"{a.dtype.name} and {b.dtype.name}")
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

    __slots__ = ("op", "device", "shape", "dtype", "compute", "exact", "matmul")


_plans: dict = {}


def _plan_product(op: str, a: Tensor, b: Tensor, shape) -> _ProductPlan:
    plan = _ProductPlan()
    plan.op, plan.shape, plan.dtype = op, tuple(shape), a.dtype
    plan.device = _ops._operand_device([a, b], op)
    _dispatch.check_dtype_supported(plan.device, a.dtype)
    plan.compute = _accumulate(a.dtype).numpy
    plan.exact = plan.compute == a.dtype.numpy
    plan.matmul = _dispatch.matmul_of(plan.device)
    return plan


def _launch_matmul(op: str, a: Tensor, b: Tensor, shape, plan=None) -> Tensor:
    if plan is None:
        plan = _plan_product(op, a, b, shape)
    device = plan.device
    out = _dispatch.empty(device, plan.shape, plan.dtype)
    left, right = a._data, b._data
    if plan.exact:
        kernel = functools.partial(plan.matmul, left, right, out=out)
    else:
        kernel = functools.partial(_widened_product, plan.matmul, plan.compute, left, right, out)
    _dispatch.launch(device, _dispatch.named(op, kernel, shape=plan.shape))
    return Tensor._make(out, device, plan.dtype)


def _widened_product(matmul, compute, left, right, out) -> None:
    out[...] = matmul(left.astype(compute), right.astype(compute))


def matmul(input, other) -> Tensor:
    """Matrix product with PyTorch's rules: 1-D @ 1-D is a dot product, a 1-D operand gets a
    dimension added (and removed from the result), batch dimensions broadcast.

    Raises:
        RuntimeError: for 0-d operands, mismatched inner sizes or batch shapes (naming both
            shapes), or operands of different dtypes.
    """
    if type(input) is Tensor and type(other) is Tensor and input._guard is None and \
            other._guard is None:
        key = (_ops._signature(input), _ops._signature(other))
        plan = _plans.get(key)
        if plan is None:
            _same_dtype("matmul", input, other)
            plan = _plan_product("matmul", input, other, _matmul_shape(input.shape, other.shape))
            _dispatch.remember(_plans, key, plan, 1024)
        return _launch_matmul("matmul", input, other, None, plan)
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
    (NaN in it does not propagate)."""
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
