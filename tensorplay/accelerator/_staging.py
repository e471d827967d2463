"""Validation and planning for ``Graph.stage_and_launch``: which pairs take the raw fast path.

A pair ``(static, fresh)`` takes the fast path when both are on the graph's device, contiguous,
and of the same dtype and shape: it becomes one ``(dst_ptr, src_ptr, nbytes)`` triplet that the
backend fuses with the launch. Any other copyable pair is copied now with ``copy_`` semantics
(broadcasting, casting, other devices), in stream order before the launch.

Write-back, for the pairs named by index (``tensorplay.compile`` names the inputs its function
writes): after the graph ran, the static buffer is copied back into the fresh tensor. A fast pair
gives the reversed triplet, which the backend fuses with the end of the same launch (Note [fused
staging] in ``backends/cuda/_stage_node.py``); any other pair is copied with ``copy_`` right
after the launch, in stream order.

The fast-path metadata of the static buffers is cached per list of static tensors and
write-back indices, so a steady loop (as ``tensorplay.compile`` runs) checks only the fresh
inputs.
"""

from __future__ import annotations

from operator import is_ as _is

import numpy as np

from .._tensor.tensor import Layout, Tensor, layout_of


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


_SEQUENCES = (list, tuple)


def _check_sequence(name: str, value) -> None:
    if isinstance(value, (list, tuple)):
        return
    hint = "; pass lists of tensors ([t], not t)" if isinstance(value, Tensor) else ""
    raise TypeError(f"stage_and_launch(static_inputs, inputs): {name} must be a list or tuple "
                    f"of Tensors, got {type(value).__name__}{hint}")


def _write_back_flags(write_back, count: int) -> list[bool]:
    flags = [False] * count
    for index in write_back:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(f"stage_and_launch: write-back index {index!r} is not an index of "
                             f"the {count} static_inputs")
        flags[index] = True
    return flags


class StaticPlan:
    """What the fast path needs to know of one list of static buffers, computed once."""

    __slots__ = ("statics", "write_back", "fast", "back")

    def __init__(self, static_inputs, device_index: int, backend, write_back=()):
        self.statics = tuple(static_inputs)
        self.write_back = write_back
        self.back = _write_back_flags(write_back, len(self.statics))
        self.fast: list[tuple[Layout, int, int] | None] = []
        device_type = backend.device_type
        for static in self.statics:
            if (type(static) is Tensor and static._device.type == device_type
                    and static._device.index == device_index and static._guard is None
                    and static.is_contiguous() and static.numel()):
                self.fast.append((layout_of(static), backend.array_ptr(static._data),
                                  static.nbytes))
            else:
                self.fast.append(None)

    def matches(self, static_inputs, write_back) -> bool:
        statics = self.statics
        return ((write_back is self.write_back or write_back == self.write_back)
                and len(static_inputs) == len(statics) and all(map(_is, static_inputs, statics)))


def plan_staging(static_inputs, inputs, device_index: int, backend, plan=None, write_back=()):
    """Copy the slow pairs now and return ``(copies, copies_out, slow_out, plan)``.

    ``copies``: the fast pairs as raw triplets (static <- fresh) for before the graph;
    ``copies_out``: the fast write-back pairs as raw triplets (fresh <- static) for after it;
    ``slow_out``: the indices of the other write-back pairs, for the caller to copy with
    ``copy_`` after the launch; ``plan``: the static plan to pass back next time (reused while
    the same static tensors and write-back indices come).

    Raises:
        TypeError: a sequence is not a list or tuple, or an element is not a Tensor.
        ValueError: the sequences differ in length, or a pair is not copyable (naming it).
    """
    if type(static_inputs) not in _SEQUENCES or type(inputs) not in _SEQUENCES:
        _check_sequence("static_inputs", static_inputs)
        _check_sequence("inputs", inputs)
    if len(static_inputs) != len(inputs):
        raise ValueError(f"stage_and_launch: {len(inputs)} inputs given for "
                         f"{len(static_inputs)} static_inputs; they must match one to one")
    if plan is None or not plan.matches(static_inputs, write_back):
        plan = StaticPlan(static_inputs, device_index, backend, write_back)
    copies: list = []
    copies_out: list = []
    slow_out: list = []
    append = copies.append
    array_ptr = backend.array_ptr
    for index, (fresh, fast, back) in enumerate(zip(inputs, plan.fast, plan.back)):
        if fast is not None and type(fresh) is Tensor and fresh._guard is None:
            layout, dst, nbytes = fast
            found = fresh._layout or layout_of(fresh)   # same dtype, device, shape and strides
            if found is layout or found.key == layout.key:
                src = array_ptr(fresh._data)
                append((dst, src, nbytes))
                if back:
                    copies_out.append((src, dst, nbytes))
                continue
        static = plan.statics[index]
        _copy_slow_pair(index, static, fresh, device_index, backend)
        if back:
            if fresh.shape != static.shape:
                raise ValueError(f"stage_and_launch: static_inputs[{index}] of shape "
                                 f"{static.shape} cannot be written back into inputs[{index}] "
                                 f"of shape {fresh.shape}")
            slow_out.append(index)
    return copies, copies_out, slow_out, plan


def _copy_slow_pair(index: int, static, fresh, device_index: int, backend) -> None:
    _check_copyable(index, static, fresh)
    if static.device.type == "cpu" or static.device.index != device_index:
        raise ValueError(f"stage_and_launch: static_inputs[{index}] ({_describe(static)}) is "
                         f"not on the graph's device {backend.device_type}:{device_index}")
    static.copy_(fresh)
