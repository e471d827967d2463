"""Validation and planning for ``Graph.stage_and_launch``: which pairs take the raw fast path.

A pair ``(static, fresh)`` takes the fast path when both are on the graph's device, contiguous,
and of the same dtype and shape: it becomes one ``(dst_ptr, src_ptr, nbytes)`` triplet that the
backend fuses with the launch. Any other copyable pair is copied now with ``copy_`` semantics
(broadcasting, casting, other devices), in stream order before the launch.

The fast-path metadata of the static buffers is cached per list of static tensors, so a steady
loop (as ``tensorplay.compile`` runs) checks only the fresh inputs.
"""

from __future__ import annotations

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


def plan_staging(static_inputs, inputs, device_index: int, backend) -> list:
    """Copy the slow pairs now and return the fast pairs as raw triplets.

    Raises:
        ValueError: the sequences differ in length, or a pair is not copyable (naming it).
        TypeError: an element is not a Tensor.
    """
    if len(static_inputs) != len(inputs):
        raise ValueError(f"stage_and_launch: {len(inputs)} inputs given for "
                         f"{len(static_inputs)} static_inputs; they must match one to one")
    copies = []
    device_type = backend.device_type
    for index, (static, fresh) in enumerate(zip(static_inputs, inputs)):
        if (type(fresh) is Tensor and type(static) is Tensor and fresh._dtype is static._dtype
                and fresh._device == static._device and static._device.type == device_type
                and static._device.index == device_index
                and fresh._data.shape == static._data.shape
                and fresh._data.flags.c_contiguous and static._data.flags.c_contiguous):
            fresh._check_guard()
            nbytes = fresh.nbytes
            if nbytes:
                copies.append((backend.array_ptr(static._data), backend.array_ptr(fresh._data),
                               nbytes))
            continue
        _check_copyable(index, static, fresh)
        if static.device.type == "cpu" or static.device.index != device_index:
            raise ValueError(f"stage_and_launch: static_inputs[{index}] ({_describe(static)}) is "
                             f"not on the graph's device {device_type}:{device_index}")
        static.copy_(fresh)
    return copies
