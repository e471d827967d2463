"""Copying between arrays of one dtype and any layout in one kernel of the cuda backend,
launched through :class:`._launch.PackedLaunch`.

Why: ``dst[...] = src`` with CuPy costs 20 to 40 us of host time for strided operands (its
elementwise machinery works out the layout on every call), and a transformer's forward makes
several such copies per layer (a copying ``reshape`` after attention, writes into a KV cache).
Here the layout is worked out once per call signature (shapes, strides, dtype) and kept; a
later call writes two addresses and launches.

How: dimensions of size 1 are dropped and neighbours that step uniformly in both arrays are
merged, so most copies have one to three dimensions left (at most ``MAX_DIMS``). The kernel
moves raw words: when the innermost dimension is contiguous in both arrays, every other stride
and both addresses are multiples of a wider word (up to 16 bytes), a thread moves that word, so
a bfloat16 head row of 64 elements is eight 16-byte moves. Each thread walks a grid-stride loop
over the words, splitting its index into coordinates with 32-bit arithmetic when the copy is
small enough for it.

What it does not take (it returns False and the caller copies with CuPy): different dtypes (a
cast), negative strides, more than ``MAX_DIMS`` dimensions after merging, a source that does
not broadcast to the destination, and arrays whose memory overlaps (the order of the moves
would show).
"""

from __future__ import annotations

from array import array
from typing import Any

import cupy

from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["copy", "MAX_DIMS"]

MAX_DIMS = 6          #: dimensions a copy may keep after merging
_THREADS = 256
_GRID_CAP = 4096      # blocks at most; the grid-stride loop covers the rest
_SLOTS = 3 + 3 * MAX_DIMS   # src, dst, count, then sizes, source and destination strides
_WORDS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int",
          8: "unsigned long long", 16: "uint4"}
_NARROW_LIMIT = 1 << 31   # words (and word offsets) that 32-bit index arithmetic covers


def _source(word: int, narrow: bool, name: str) -> str:
    """The kernel moving ``word``-byte words from ``src`` to ``dst`` over ``MAX_DIMS``
    dimensions (leading ones of size 1 and strides 0 pad a shorter copy)."""
    index = "unsigned int" if narrow else "unsigned long long"
    t = _WORDS[word]
    dims = range(MAX_DIMS)
    sizes = ", ".join(f"const long long n{d}" for d in dims)
    src_strides = ", ".join(f"const long long s{d}" for d in dims)
    dst_strides = ", ".join(f"const long long t{d}" for d in dims)
    walk = []
    for d in reversed(dims):
        walk += [f"        const {index} c{d} = r % ({index})n{d}; r /= ({index})n{d};",
                 f"        so += (long long)c{d} * s{d}; doff += (long long)c{d} * t{d};"]
    return "\n".join([
        f'extern "C" __global__ void __launch_bounds__({_THREADS}) {name}(',
        f"        const {t}* src, {t}* dst, const long long count,",
        f"        {sizes},",
        f"        {src_strides},",
        f"        {dst_strides}) {{",
        f"    const {index} step = ({index})gridDim.x * blockDim.x;",
        f"    for ({index} i = ({index})blockIdx.x * blockDim.x + threadIdx.x;",
        f"         i < ({index})count; i += step) {{",
        f"        {index} r = i;",
        "        long long so = 0, doff = 0;",
        *walk,
        "        dst[doff] = src[so];",
        "    }",
        "}",
    ])


def _kernel(word: int, narrow: bool, device: int) -> PackedLaunch:
    name = f"tp_copy_{word}{'_narrow' if narrow else ''}"
    key = ("copy", word, narrow)
    packed = _kernel_cache.cached(key, lambda: PackedLaunch(
        cupy.RawKernel(_source(word, narrow, name), name), _SLOTS))
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    return packed


class _Plan:
    """One call signature's copy: the merged layout in bytes, the widest word it allows, the
    byte spans of both arrays (to refuse overlapping memory) and the launch per word width."""

    __slots__ = ("sizes", "src_strides", "dst_strides", "item", "widest", "src_span",
                 "dst_span", "launches", "device")

    def __init__(self, sizes, src_strides, dst_strides, item: int, device: int):
        self.sizes, self.src_strides, self.dst_strides = sizes, src_strides, dst_strides
        self.item, self.device = item, device
        self.launches: dict[int, tuple[PackedLaunch, int, array]] = {}
        widest = item
        if sizes is None:   # an empty copy
            self.widest, self.src_span, self.dst_span = item, 0, 0
            return
        if src_strides[-1] == dst_strides[-1] == item:
            run = sizes[-1] * item
            others = [s for s in src_strides[:-1] + dst_strides[:-1] if s]
            while widest < 16 and run % (2 * widest) == 0 and \
                    all(s % (2 * widest) == 0 for s in others):
                widest *= 2
        self.widest = widest
        self.src_span = sum((n - 1) * s for n, s in zip(sizes, src_strides)) + item
        self.dst_span = sum((n - 1) * s for n, s in zip(sizes, dst_strides)) + item

    def launch_for(self, word: int) -> tuple[PackedLaunch, int, array]:
        """The kernel, grid and static parameters moving ``word``-byte words."""
        found = self.launches.get(word)
        if found is None:
            sizes = list(self.sizes)
            src_words = [s // word for s in self.src_strides]
            dst_words = [s // word for s in self.dst_strides]
            if word > self.item:   # the innermost dimension, contiguous in both, in words
                sizes[-1] = sizes[-1] * self.item // word
                src_words[-1] = dst_words[-1] = 1
            count = 1
            for n in sizes:
                count *= n
            pad = MAX_DIMS - len(sizes)
            narrow = count < _NARROW_LIMIT and max(self.src_span, self.dst_span) // word \
                < _NARROW_LIMIT
            static = array("Q", [count] + [1] * pad + sizes
                           + [0] * pad + src_words + [0] * pad + dst_words)
            found = self.launches[word] = (_kernel(word, narrow, self.device),
                                           min(-(-count // _THREADS), _GRID_CAP), static)
        return found


_plans: dict[tuple, _Plan | None] = {}


def copy(dst: Any, src: Any) -> bool:
    """``dst[...] = src`` in one kernel on CuPy's current stream, for arrays of one dtype
    (``src`` broadcast to ``dst``'s shape); False, touching nothing, for what it does not take
    (module docstring). Nothing here synchronizes."""
    key = (dst.shape, dst.strides, src.shape, src.strides, dst.dtype, src.dtype,
           dst.data.device_id)
    try:
        plan = _plans[key]
    except KeyError:
        plan = _plan(dst, src)
        _kernel_cache.remember(_plans, key, plan)
    if plan is None:
        return False
    if plan.sizes is None:   # nothing to copy
        return True
    to, start = dst.data.ptr, src.data.ptr
    if to < start + plan.src_span and start < to + plan.dst_span:
        return False
    word = plan.widest
    misaligned = (to | start) & (word - 1)
    if misaligned:
        word = misaligned & -misaligned
        if word < plan.item:   # an element that straddles its own size: CuPy copies it
            return False
    packed, grid, static = plan.launches.get(word) or plan.launch_for(word)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    values[0], values[1] = start, to
    values[2:] = static
    packed(grid, _THREADS, found[1])
    return True


def _plan(dst: Any, src: Any) -> _Plan | None:
    """The plan of a signature, or None for what the kernel does not take."""
    if dst.dtype != src.dtype or src.ndim > dst.ndim and any(
            n != 1 for n in src.shape[:src.ndim - dst.ndim]):
        return None
    shape = dst.shape
    lead = dst.ndim - src.ndim
    src_strides = [0] * lead + list(src.strides[max(0, -lead):])
    src_shape = [1] * lead + list(src.shape[max(0, -lead):])
    merged: list[list[int]] = []   # [size, source stride, destination stride], outer first
    for size, own, d_stride, s_size in zip(shape, src_strides, dst.strides, src_shape):
        if s_size != size and s_size != 1:
            return None
        if size == 0:
            return _Plan(None, (), (), dst.itemsize, dst.data.device_id)
        if size == 1:
            continue
        s_stride = own if s_size == size else 0
        if s_stride < 0 or d_stride < 0 or s_stride % dst.itemsize or d_stride % dst.itemsize:
            return None
        if merged and merged[-1][1] == s_stride * size and merged[-1][2] == d_stride * size:
            merged[-1] = [merged[-1][0] * size, s_stride, d_stride]
        else:
            merged.append([size, s_stride, d_stride])
    if len(merged) > MAX_DIMS:
        return None
    if not merged:   # one element
        merged = [[1, dst.itemsize, dst.itemsize]]
    return _Plan(tuple(m[0] for m in merged), tuple(m[1] for m in merged),
                 tuple(m[2] for m in merged), dst.itemsize, dst.data.device_id)
