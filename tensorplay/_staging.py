"""Validation and planning for ``Graph.stage_and_launch``: which pairs take the raw fast path.

A pair ``(static, fresh)`` takes the fast path when both are on the graph's device, contiguous,
and of the same dtype and shape: it becomes one ``(dst_ptr, src_ptr, nbytes)`` triplet that the
backend fuses with the launch. Any other copyable pair is copied now with ``copy_`` semantics
(broadcasting, casting, other devices), in stream order before the launch.

The fast-path metadata of the static buffers is cached per list of static tensors, so a steady
loop (as ``tensorplay.compile`` runs) checks only the fresh inputs.
"""

from __future__ import annotations

from operator import is_ as _is

import numpy as np

from ._tensor import Tensor


def _describe(tensor: Tensor) -> str:
    return f"{tensor.dtype.name} of shape {tensor.shape} on {tensor.device}"


def _check_copyable(index: int, static: Tensor, fresh) -> None:
    if not isinstance(static, Tensor) or not isinstance(fresh, Tensor):
        bad = static if not isinstance(static, Tensor) else fresh
        side = "static_inputs" if not isinstance(static, Tensor) else "inputs"
        raise TypeError(f"stage_and_launch: {side}[{index}] must be a Tensor, got "
                        f"{type(bad).__name__}")
    try:
        shape = np.broadcast_shapes(fresh.shape, static.shape)
    except ValueError:
        shape = None
    if shape != static.shape:
        raise ValueError(f"stage_and_launch: inputs[{index}] of shape {fresh.shape} cannot be "
                         f"copied into static_inputs[{index}] of shape {static.shape}")


class StaticPlan:
    """What the fast path needs to know of one list of static buffers, computed once."""

    __slots__ = ("statics", "fast")

    def __init__(self, static_inputs, device_index: int, backend):
        self.statics = tuple(static_inputs)
        self.fast = []
        device_type = backend.device_type
        for static in self.statics:
            if (type(static) is Tensor and static._device.type == device_type
                    and static._device.index == device_index and static._guard is None
                    and static.is_contiguous() and static.numel()):
                self.fast.append((static._dtype, static._device, static._data.shape,
                                  static._data.strides, backend.array_ptr(static._data),
                                  static.nbytes))
            else:
                self.fast.append(None)

    def matches(self, static_inputs) -> bool:
        statics = self.statics
        return len(static_inputs) == len(statics) and all(map(_is, static_inputs, statics))


def plan_staging(static_inputs, inputs, device_index: int, backend, plan=None):
    """Copy the slow pairs now and return ``(copies, plan)``: the fast pairs as raw triplets,
    and the static plan to pass back next time (reused while the same static tensors come).

    Raises:
        ValueError: the sequences differ in length, or a pair is not copyable (naming it).
        TypeError: an element is not a Tensor.
    """
    if len(static_inputs) != len(inputs):
        raise ValueError(f"stage_and_launch: {len(inputs)} inputs given for "
                         f"{len(static_inputs)} static_inputs; they must match one to one")
    if plan is None or not plan.matches(static_inputs):
        plan = StaticPlan(static_inputs, device_index, backend)
    copies = []
    append = copies.append
    array_ptr = backend.array_ptr
    for index, (fresh, fast) in enumerate(zip(inputs, plan.fast)):
        if fast is not None and type(fresh) is Tensor and fresh._guard is None:
            dtype, device, shape, strides, dst, nbytes = fast
            data = fresh._data
            if (fresh._dtype is dtype and data.shape == shape and data.strides == strides
                    and (fresh._device is device or fresh._device == device)):
                append((dst, array_ptr(data), nbytes))
                continue
        _copy_slow_pair(index, plan.statics[index], fresh, device_index, backend)
    return copies, plan


def _copy_slow_pair(index: int, static, fresh, device_index: int, backend) -> None:
    _check_copyable(index, static, fresh)
    if static.device.type == "cpu" or static.device.index != device_index:
        raise ValueError(f"stage_and_launch: static_inputs[{index}] ({_describe(static)}) is "
                         f"not on the graph's device {backend.device_type}:{device_index}")
    static.copy_(fresh)
