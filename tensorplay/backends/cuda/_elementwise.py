"""The fast launch path for small elementwise ops and small sums on the cuda backend.

Why: a ``cupy.add(a, b, out=c)`` costs about 9 us of host time per call on the H200 and a
``cupy.RawKernel`` call about 6 us (64x64 float32), so tensorplay's eager op launches its own
cached kernels for the common case (C-contiguous operands of the output's shape, rows repeated
along the leading dimensions, or scalars) through ``cuLaunchKernel`` with packed parameters
(:class:`._launch.PackedLaunch`, about 4 us), and leaves everything else to CuPy's ufuncs.

- :func:`elementwise_kernel` gives a launcher per ``(op, compute, kinds, out)``: one kernel
  (source from ``_elementwise_source.py``, where the semantics are written down) over a
  grid-stride loop of ``V`` elements a thread (``program_width``); the launcher does one dict
  lookup for the launch geometry of the size (blocks for ``ceil(n / V)`` threads, one dict per
  ``V``), writes its operands' pointers (and scalars) into its parameter slots and launches.
- :func:`sum_kernel` gives a single-block sum for ``n <= SUM_SMALL_LIMIT``.

Both live in ``_kernels``'s one kernel cache. Each kernel is compiled and loaded on the current
device when its launcher is made (under relaxed capture mode, so making one during a capture
works); on another device the first launch loads it, which a global-mode capture refuses, so
call :func:`ensure` for that device before capturing there. Launches go to CuPy's current stream
of the current device, which tensorplay binds to its own.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels
from ._launch import PackedLaunch, thread_ident

__all__ = ["elementwise_kernel", "elementwise_program", "sum_kernel", "ensure", "SUM_SMALL_LIMIT",
           "BLOCK", "GRID_CAP"]

SUM_SMALL_LIMIT = _source.SUM_SMALL_LIMIT   #: the most elements a :func:`sum_kernel` launcher takes
BLOCK = 256      #: threads per block of the elementwise kernels
GRID_CAP = 4096  #: most blocks per launch; the grid-stride loop covers the rest
_SIZES_CAP = 4096   # launch geometries kept; the cache is cleared past this (sizes are few)

_UNSUPPORTED = "unsupported"   # cached for combinations with no kernel (None means "not made")
# V (elements a thread takes per vector access) -> element count -> blocks of a launch
_grids: dict[int, dict[int, int]] = {}
_sum_threads: dict[int, int] = {}   # element count -> threads of the single-block sum
_made: dict[Callable, tuple[tuple, Any]] = {}   # launcher -> (warm key, RawKernel), for ensure
# compute dtype -> the struct letter its scalar parameters are packed with (PackedLaunch);
# float16/bfloat16 scalars are passed as their bits
_SCALAR_FORMATS = {np.dtype(np.float32): "f", np.dtype(np.float64): "d",
                   np.dtype(np.int32): "i", np.dtype(np.int64): "q", np.dtype(np.bool_): "?",
                   np.dtype(np.float16): "H", np.dtype("bfloat16"): "H"}


def _grid(grids: dict[int, int], width: int, n: int) -> int:
    """Blocks of a launch over ``n`` elements of a kernel taking ``width`` of them a thread per
    vector access (enough threads for ``ceil(n / width)`` vectors, at most :data:`GRID_CAP`
    blocks), cached in ``grids``; 0 for none."""
    if n <= 0:
        return 0
    if len(grids) >= _SIZES_CAP:
        grids.clear()
    vectors = -(-n // width)
    grid = grids[n] = min(-(-vectors // BLOCK), GRID_CAP)
    return grid


def _grid_functions(width: int) -> tuple[Callable[[int], int | None], Callable[[int], int]]:
    """``(get, fill)`` for the launchers of kernels of ``width`` elements a thread (see
    ``_elementwise_source.program_width``): ``get(n)`` the cached blocks of a launch over ``n``
    elements or None, ``fill(n)`` computes and caches them. Every such launcher shares the one
    dict of its width, and the hot path stays one ``dict.get`` (``fill`` is a
    ``functools.partial`` of :func:`_grid`: no extra Python frame)."""
    grids = _grids.get(width)
    if grids is None:
        grids = _grids[width] = {}
    return grids.get, functools.partial(_grid, grids, width)


def _sum_block(n: int) -> int:
    """Threads of the single-block sum over ``n`` elements (cached): more for more elements."""
    if len(_sum_threads) >= _SIZES_CAP:
        _sum_threads.clear()
    threads = _sum_threads[n] = 256 if n <= 8192 else 512 if n <= 32768 else 1024
    return threads


def _current_device() -> int:
    return cupy.cuda.runtime.getDevice()


def _make(key: tuple, source: str | None, name: str, halves: bool):
    """The compiled RawKernel for ``key`` (loaded on the current device), or _UNSUPPORTED."""
    if source is None:
        return _UNSUPPORTED
    kernel = cupy.RawKernel(source, name)
    try:
        # the property compiles and loads the module for the current device
        _kernels.warm(key, _current_device(), lambda: kernel.kernel)
    except cupy.cuda.compiler.CompileException:
        if not halves:   # a 32/64-bit kernel that does not compile is a bug: say so
            raise
        return _UNSUPPORTED   # float16/bfloat16 conversions this NVRTC refuses: CuPy's ufuncs
    return kernel


def _packed_mixed_launcher(kernel, kinds: str, compute: np.dtype, width: int) -> Callable:
    """The launcher of a kernel over operands of any kinds through one
    :class:`._launch.PackedLaunch`: an ``"a"`` array's pointer, an ``"r"`` row's pointer and
    element count, an ``"s"`` scalar (a NumPy scalar of ``compute``) in its slot's low bytes,
    float16/bfloat16 ones as their 16 bits; then the output's pointer and the element count.
    ``width``: the kernel's elements a thread per vector access (its grid's size)."""
    scalar_format = _SCALAR_FORMATS[compute]
    itemsize = struct.calcsize(scalar_format)
    halves = compute in _source.HALF_DTYPES
    layout = []
    slot = 0
    for kind in kinds:
        if kind == "s":
            layout.append(("h" if halves else "s", slot * 8 // itemsize))
        else:
            layout.append((kind, slot))
        slot += 2 if kind == "r" else 1
    operands, out_slot = tuple(layout), slot
    packed = PackedLaunch(kernel, slot + 2, scalar_format=scalar_format)
    buffers, buffer, ident = packed.buffers, packed.buffer, thread_ident
    get, fill = _grid_functions(width)
    block = BLOCK
    if kinds == "ar":   # ``h + bias``, the common case, without the loop over kinds
        def launch_row(x, row, out):
            n = out.size
            grid = get(n) or fill(n)
            if grid:
                found = buffers.get(ident()) or buffer()
                values = found[0]
                values[0] = x.data.ptr
                values[1] = row.data.ptr
                values[2] = row.size
                values[3] = out.data.ptr
                values[4] = n
                packed(grid, block, found[1])
        return launch_row

    def launch(*args):
        out = args[-1]
        n = out.size
        grid = get(n) or fill(n)
        if grid:
            found = buffers.get(ident()) or buffer()
            values, scalars = found[0], found[3]
            for arg, (kind, position) in zip(args, operands):
                if kind == "a":
                    values[position] = arg.data.ptr
                elif kind == "s":
                    scalars[position] = arg
                elif kind == "h":   # the kernel takes a 16-bit float's bits
                    scalars[position] = np.asarray(arg, compute).view(np.uint16)[()]
                else:
                    values[position] = arg.data.ptr
                    values[position + 1] = arg.size
            values[out_slot] = out.data.ptr
            values[out_slot + 1] = n
            packed(grid, block, found[1])
    return launch


def _packed_launcher(kernel, count: int, width: int) -> Callable:
    """The per-arity launcher of an arrays-only kernel (``count`` operands, the output not
    counted) through one :class:`._launch.PackedLaunch`: the operands' pointers, the output's,
    then the element count. ``width``: the kernel's elements a thread per vector access."""
    packed = PackedLaunch(kernel, count + 2)
    buffers, buffer, ident = packed.buffers, packed.buffer, thread_ident
    get, fill = _grid_functions(width)
    block = BLOCK
    launch: Callable[..., None]
    if count == 1:
        def launch(x, out):
            n = out.size
            grid = get(n) or fill(n)
            if grid:
                found = buffers.get(ident()) or buffer()
                values = found[0]
                values[0] = x.data.ptr
                values[1] = out.data.ptr
                values[2] = n
                packed(grid, block, found[1])
    elif count == 2:
        def launch(x, y, out):
            n = out.size
            grid = get(n) or fill(n)
            if grid:
                found = buffers.get(ident()) or buffer()
                values = found[0]
                values[0] = x.data.ptr
                values[1] = y.data.ptr
                values[2] = out.data.ptr
                values[3] = n
                packed(grid, block, found[1])
    elif count == 3:
        def launch(c, x, y, out):
            n = out.size
            grid = get(n) or fill(n)
            if grid:
                found = buffers.get(ident()) or buffer()
                values = found[0]
                values[0] = c.data.ptr
                values[1] = x.data.ptr
                values[2] = y.data.ptr
                values[3] = out.data.ptr
                values[4] = n
                packed(grid, block, found[1])
    else:   # fused chains: any number of operands
        def launch(*args):
            out = args[-1]
            n = out.size
            grid = get(n) or fill(n)
            if grid:
                found = buffers.get(ident()) or buffer()
                values = found[0]
                for i, array in enumerate(args):
                    values[i] = array.data.ptr
                values[count + 1] = n
                packed(grid, block, found[1])
    return launch


def elementwise_kernel(op: str, compute: np.dtype, kinds: str, out: np.dtype) -> Callable | None:
    """A launcher of one cached kernel computing ``out[i] = OP(operands...)``, or None.

    Args:
        op: an op of ``_elementwise_source.OPS`` (``add sub mul div maximum minimum eq ne lt le
            gt ge logical_and logical_or neg abs exp log sqrt sin cos tanh sigmoid relu gelu
            gelu_tanh silu erf where``), with PyTorch's semantics.
        compute: the dtype of every operand (``where``'s condition excepted: a bool array) and of
            the arithmetic (float16/bfloat16 compute in float32).
        kinds: one letter per operand: ``"a"``, a C-contiguous CuPy array of ``compute`` dtype
            and exactly the output's shape; ``"r"``, a non-empty C-contiguous CuPy array of
            ``compute`` dtype whose shape is a suffix of the output's after dropping its leading
            ones (a bias row: repeated along the output's leading dimensions); ``"s"``, a NumPy
            scalar of exactly ``compute`` dtype (another scalar type would be passed with the
            wrong width: not checked, for speed).
        out: the dtype of the output array.

    Returns:
        ``fn(*operands, out_array)``: launches ONE kernel on CuPy's current stream (nothing for a
        0-size ``out_array``, a C-contiguous CuPy array of dtype ``out``) and returns None. It
        checks nothing. None when the combination has no kernel (unknown op, integer ``div``,
        transcendental ops on integers, a store that is not one defined conversion, ...): the
        caller uses CuPy's ufuncs then.

    .. note:: The first call per signature compiles (NVRTC, cached on disk by CuPy) and loads the
       kernel on the current device; use :func:`ensure` before capturing on another device.
    """
    key = ("ew", op, compute, kinds, out)
    launch = _kernels._cache.get(key)
    if launch is None:
        launch = _kernels.cached(key, lambda: _build(op, compute, kinds, out))
    return None if launch is _UNSUPPORTED else launch


def elementwise_program(steps, compute: np.dtype, kinds: str, out: np.dtype) -> Callable | None:
    """A launcher of ONE cached kernel running a chain of elementwise ops, or None.

    ``steps``, ``compute``, ``kinds`` and ``out`` as :func:`._elementwise_source.program_source`
    takes them (``tp.compile``'s fusion of elementwise chains builds them). The launcher is
    ``fn(*externals, out_array)`` and behaves as :func:`elementwise_kernel`'s.
    """
    steps = tuple((op, tuple(refs)) for op, refs in steps)
    key = ("chain", steps, compute, kinds, out)
    launch = _kernels._cache.get(key)
    if launch is None:
        launch = _kernels.cached(key, lambda: _build(steps, compute, kinds, out))
    return None if launch is _UNSUPPORTED else launch


def _build(op, compute, kinds: str, out):
    """The launcher for one op (``op`` a name) or a chain (``op`` the steps of a program)."""
    if isinstance(op, str):
        source = _source.kernel_source(op, compute, kinds, out)
        name = _source.kernel_name(op, compute, kinds, out) if source else ""
    else:
        source = _source.program_source(op, compute, kinds, out)
        name = _source.program_name(op, compute, kinds, out) if source else ""
    if source is None:
        return _UNSUPPORTED
    compute, out = np.dtype(compute), np.dtype(out)
    halves = bool({compute, out} & _source.HALF_DTYPES)
    key = ("ew-kernel", op, compute, kinds, out)
    kernel = _make(key, source, name, halves)
    if kernel is _UNSUPPORTED:
        return _UNSUPPORTED
    # the grid follows the kernel's elements a thread, by the rule its source was written with
    width = _source.program_width(op, compute, kinds, out)
    if set(kinds) == {"a"}:
        launch = _packed_launcher(kernel, len(kinds), width)
    else:
        launch = _packed_mixed_launcher(kernel, kinds, compute, width)
    # the while-body scan looks at its arguments only (a function attribute mypy cannot type)
    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    _made[launch] = (key, kernel)
    return launch


def sum_kernel(compute: np.dtype, out: np.dtype) -> Callable | None:
    """A launcher of the single-block sum of a ``compute`` array into a 0-d ``out`` array, or None.

    Returns:
        ``fn(x, out_array)``: ONE launch (one block) summing the C-contiguous CuPy array ``x``
        into the 0-d CuPy array ``out_array`` of dtype ``out`` (0 for an empty ``x``), on CuPy's
        current stream. ``x.size`` must be at most :data:`SUM_SMALL_LIMIT` (not checked: larger
        sums are the caller's, through CuPy). Accumulates in float32 for float16, bfloat16 and
        float32, float64 for float64, int64 (wrapping) for int32, int64 and bool. None when the
        dtypes have no kernel (see ``_elementwise_source.sum_source``).

    .. note:: Compiles and loads on the current device at the first call per signature, as
       :func:`elementwise_kernel` does.
    """
    key = ("sum", compute, out)
    launch = _kernels._cache.get(key)
    if launch is None:
        launch = _kernels.cached(key, lambda: _build_sum(compute, out))
    return None if launch is _UNSUPPORTED else launch


def _build_sum(compute, out):
    source = _source.sum_source(compute, out)
    if source is None:
        return _UNSUPPORTED
    compute, out = np.dtype(compute), np.dtype(out)
    halves = bool({compute, out} & _source.HALF_DTYPES)
    key = ("sum-kernel", compute, out)
    kernel = _make(key, source, _source.SUM_NAME, halves)
    if kernel is _UNSUPPORTED:
        return _UNSUPPORTED
    get = _sum_threads.get
    packed = PackedLaunch(kernel, 3)   # x, the 0-d result, the element count
    buffers, buffer, ident = packed.buffers, packed.buffer, thread_ident

    def launch(x, out_array):
        n = x.size
        threads = get(n) or _sum_block(n)
        found = buffers.get(ident()) or buffer()
        values = found[0]
        values[0] = x.data.ptr
        values[1] = out_array.data.ptr
        values[2] = n
        packed(1, threads, found[1])

    # the while-body scan looks at its arguments only (a function attribute mypy cannot type)
    launch.tp_arguments_only = True  # type: ignore[attr-defined]
    _made[launch] = (key, kernel)
    return launch


def ensure(launch: Callable, device_index: int) -> None:
    """Compile and load ``launch``'s kernel (from :func:`elementwise_kernel` or
    :func:`sum_kernel`) on ``device_index`` now, if not done yet: do this before capturing on a
    device other than the one the launcher was made on."""
    key, kernel = _made[launch]
    _kernels.warm(key, device_index, lambda: kernel.kernel)
