"""Index bounds on cuda without waiting for the device: a check kernel sets an error record
that the next synchronization reads.

The op layer's one bounds check (``_tensor/scatter.py``'s ``check_range``) runs inside each
gather/scatter/index kernel. On the host it reads the indices at once; on cuda reading them
would wait for the device (and break captures), so :func:`check` launches, before the op's own
kernel and on the same stream, ONE small kernel that finds the first out-of-range index and
writes ``(op, value, dim, size, wrap)`` into a record of this device in pinned host memory,
which the device writes directly (unified addressing; no copy back). The op itself still runs:
CuPy wraps out-of-range indices, so the result is unspecified but no memory outside the arrays
is touched and the context stays usable (no device-side assert, which would poison it).

Every synchronization of the backend (stream, device and event synchronize, the copies to the
host, a query that finds the work done) then calls :func:`raise_pending`: a plain read of the
record's first word. A set record is cleared and raised as sim raises a kernel's failure at
the sync that ran it: ``RuntimeError("a kernel launched earlier on cuda:0 failed: IndexError:
index_select(): index 7 is out of bounds ...")``. Captured checks write the record at each
replay, so an out-of-range index in a replay is reported at the next sync too.

Pitfall: the first failure wins until it is reported; later ones before that sync are not
reported (sim counts them, "and N more failures").

:func:`index_copy` lives here too: its kernel skips an out-of-range index (writing nothing) and
relies on :func:`check`, queued before it, to report it.
"""

from __future__ import annotations

import ctypes
from array import array
from typing import Any

import cupy
import numpy as np

from . import _elementwise_source as _source
from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident
from ._runtime import relaxed_capture_mode

__all__ = ["check", "raise_pending", "index_copy"]

_WORDS = 5   # op code (0: no failure), value, dim, size, wrap
_THREADS = 256

#: device index -> (the record's address, a NumPy view of its words)
_records: dict[int, tuple[int, np.ndarray]] = {}
#: op code - 1 -> (op, exception name, note); codes are assigned as ops first check
_reasons: list[tuple[str, str, str]] = []
_codes: dict[tuple[str, str, str], int] = {}


def _source_for(index_type: str, name: str) -> str:
    return "\n".join([
        _source.HELPERS,
        f'extern "C" __global__ void {name}(const {index_type}* __restrict__ idx,',
        "        const tp_i64 n, const tp_i64 size, const tp_i64 wrap, const tp_i64 code,",
        "        const tp_i64 dim, volatile tp_i64* record) {",
        "    __shared__ unsigned long long first;",
        "    if (threadIdx.x == 0) first = (unsigned long long)n;",
        "    __syncthreads();",
        "    const tp_i64 low = wrap ? -size : 0;",
        "    for (tp_i64 i = threadIdx.x; i < n; i += blockDim.x) {",
        "        const tp_i64 v = (tp_i64)idx[i];",
        "        if (v >= size || v < low) {",
        "            atomicMin(&first, (unsigned long long)i);",
        "            break;",
        "        }",
        "    }",
        "    __syncthreads();",
        "    if (threadIdx.x == 0 && first < (unsigned long long)n && record[0] == 0) {",
        "        record[1] = (tp_i64)idx[first];",
        "        record[2] = dim;",
        "        record[3] = size;",
        "        record[4] = wrap;",
        "        __threadfence_system();",
        "        record[0] = code;",
        "        __threadfence_system();",
        "    }",
        "}",
        "",
    ])


_TYPES = {np.dtype(np.int64): "long long", np.dtype(np.int32): "int",
          np.dtype(np.int16): "short", np.dtype(np.int8): "signed char",
          np.dtype(np.uint8): "unsigned char"}


def _kernel(dtype: np.dtype) -> PackedLaunch:
    name = f"tp_check_index_{dtype.name}"

    def make() -> PackedLaunch:
        return PackedLaunch(cupy.RawKernel(_source_for(_TYPES[dtype], name), name), 7)
    return _kernel_cache.cached(("check_index", dtype), make)


def _record(device: int) -> tuple[int, np.ndarray]:
    found = _records.get(device)
    if found is None:
        with relaxed_capture_mode():   # a first check inside a capture: not a stream op
            address = cupy.cuda.runtime.hostAlloc(8 * _WORDS, 0)
        words = np.ctypeslib.as_array((ctypes.c_longlong * _WORDS).from_address(address))
        words[:] = 0
        found = _records[device] = (address, words)
    return found


def _code(op: str, exception: str, note: str) -> int:
    key = (op, exception, note)
    code = _codes.get(key)
    if code is None:
        _reasons.append(key)
        code = _codes[key] = len(_reasons)
    return code


def check(idx: Any, size: int, dim: int, wrap: bool, op: str, exception: type,
          note: str) -> None:
    """Launch the check of index array ``idx`` against ``[0, size)`` (``[-size, size)`` with
    ``wrap``) on CuPy's current stream; a failure is raised by the next synchronization (module
    docstring) as ``exception`` of the op's message."""
    if idx.size == 0:
        return
    dtype = idx.dtype
    if dtype not in _TYPES:
        return   # bool masks (index_put) are not positions
    if not idx.flags.c_contiguous:
        idx = cupy.ascontiguousarray(idx)
    device = idx.data.device_id
    address = _record(device)[0]
    packed = _kernel(dtype)
    key = ("check_index", dtype)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    values[0], values[1], values[2], values[3] = idx.data.ptr, idx.size, size, int(wrap)
    values[4] = _code(op, exception.__name__, note)
    values[5], values[6] = dim, address
    packed(1, _THREADS, found[1])


def raise_pending(device: int) -> None:
    """Raise the failure a check kernel recorded on ``device`` since the last call, clearing
    it; nothing when none (one read of pinned host memory)."""
    found = _records.get(device)
    if found is None:
        return
    words = found[1]
    code = int(words[0])
    if code == 0:
        return
    value, dim, size, wrap = (int(w) for w in words[1:_WORDS])
    words[:] = 0
    op, exception, note = _reasons[code - 1]
    valid = f"[{-size}, {size})" if wrap else f"[0, {size})"
    raise RuntimeError(f"a kernel launched earlier on cuda:{device} failed: {exception}: "
                       f"{op}(): index {value} is out of bounds for dimension {dim} with size "
                       f"{size} (valid indices: {valid}){note}")


# -- index_copy_ ------------------------------------------------------------------------------
_MAX_DIMS = 6
_COPY_SLOTS = 9 + 3 * _MAX_DIMS
_WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int",
               8: "unsigned long long"}


def _copy_source(word: str, name: str, select: bool = False) -> str:
    """index_copy's kernel (``select``: index_select's, the index on the source side): one
    thread per element of the side without the index, the other side's offset through it."""
    dims = range(_MAX_DIMS)
    if select:
        step = ["            to += c * dstride[d];",
                "            if (d == axis) {",
                "                c = idx[c];",
                "                if (c < 0 || c >= size) { bad = c; inside = false; }",
                "            }",
                "            from += c * sstride[d];"]
    else:
        step = ["            from += c * sstride[d];",
                "            if (d == axis) {",
                "                c = idx[c];",
                "                if (c < 0 || c >= size) { bad = c; inside = false; }",
                "            }",
                "            to += c * dstride[d];"]
    return "\n".join([
        _source.HELPERS,
        f'extern "C" __global__ void {name}({word}* __restrict__ dst,',
        f"        const {word}* __restrict__ src, const long long* __restrict__ idx,",
        "        const tp_i64 total, const tp_i64 axis, const tp_i64 size, const tp_i64 axis_dim,",
        "        " + ", ".join(f"const tp_i64 n{d}" for d in dims) + ",",
        "        " + ", ".join(f"const tp_i64 d{d}" for d in dims) + ",",
        "        " + ", ".join(f"const tp_i64 s{d}" for d in dims) + ",",
        "        volatile tp_i64* record, const tp_i64 code) {",
        f"    const tp_i64 shape[{_MAX_DIMS}] = {{" + ", ".join(f"n{d}" for d in dims) + "};",
        f"    const tp_i64 dstride[{_MAX_DIMS}] = {{" + ", ".join(f"d{d}" for d in dims) + "};",
        f"    const tp_i64 sstride[{_MAX_DIMS}] = {{" + ", ".join(f"s{d}" for d in dims) + "};",
        "    for (tp_i64 e = (tp_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;",
        "         e += (tp_i64)gridDim.x * blockDim.x) {",
        "        tp_i64 rest = e, to = 0, from = 0;",
        "        bool inside = true;",
        "        tp_i64 bad = 0;",
        f"        for (int d = {_MAX_DIMS - 1}; d >= 0; --d) {{",
        "            tp_i64 c = rest % shape[d];",
        "            rest /= shape[d];",
        *step,
        "        }",
        "        if (inside) {",
        "            dst[to] = src[from];",
        # the check kernel's record, written here: every writer of one launch writes the same
        # op, dim and size (only the index may differ, and any is a true report); a record an
        # earlier launch set is complete before this one runs (stream order) and stays
        "        } else if (record[0] == 0) {",
        "            record[1] = bad;",
        "            record[2] = axis_dim;",
        "            record[3] = size;",
        "            record[4] = 0;",
        "            __threadfence_system();",
        "            record[0] = code;",
        "            __threadfence_system();",
        "        }",
        "    }",
        "}",
        "",
    ])


#: (dst and src shapes and strides, axis, dtypes, index layout, device, which op) ->
#: (kernel, grid, the slots from 3 to 24) of an index_copy or index_select signature
_copy_plans: dict[tuple, tuple[PackedLaunch, int, array]] = {}


def index_copy(dst: Any, axis: int, idx: Any, src: Any, op: str = "index_copy_") -> bool:
    """``dst``'s slices ``idx`` (contiguous int64, 1-D) along ``axis`` replaced by ``src``'s
    in ONE kernel of any strides (up to six dimensions). An index out of range writes nothing
    and sets this device's record as :func:`check` does (``op``'s IndexError, raised by the
    next synchronization), so no check kernel is needed. False, touching nothing, for what it
    does not take (more dimensions, another index dtype or layout, a 0-d ``dst``, 16-byte
    elements, negative strides).

    Pitfall: with several indices out of range, which one the error names may differ from
    sim's (the first).
    """
    return _indexed_copy(dst, axis, idx, src, op, "", False)


def index_select(dst: Any, axis: int, idx: Any, src: Any, op: str, note: str) -> bool:
    """``dst[...] = src.take(idx, axis)`` (``idx`` contiguous int64, 1-D; ``dst`` of the
    result's shape) in ONE kernel that checks the indices as :func:`index_copy` does (an index
    out of range leaves its slice of ``dst`` unwritten and ``op``'s IndexError, with ``note``,
    for the next synchronization). False, touching nothing, for what it does not take (as
    :func:`index_copy`)."""
    return _indexed_copy(dst, axis, idx, src, op, note, True)


def _indexed_copy(dst: Any, axis: int, idx: Any, src: Any, op: str, note: str,
                  select: bool) -> bool:
    key = (dst.shape, dst.strides, src.shape, src.strides, axis, dst.dtype, src.dtype,
           idx.dtype, idx.ndim, idx.flags.c_contiguous, dst.data.device_id, select)
    plan = _copy_plans.get(key)
    if plan is None:
        plan = _copy_plan(dst, axis, idx, src, select)
        if plan is None:
            return False
        if len(_copy_plans) < 1024:
            _copy_plans[key] = plan
    packed, grid, static = plan
    if grid == 0:   # nothing to copy: the indices are still checked
        check(idx, (src if select else dst).shape[axis], axis, False, op, IndexError, note)
        return True
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values = found[0]
    values[0], values[1], values[2] = dst.data.ptr, src.data.ptr, idx.data.ptr
    values[3:25] = static
    values[25] = _record(dst.data.device_id)[0]
    values[26] = _code(op, "IndexError", note)
    packed(grid, _THREADS, found[1])
    return True


def _copy_plan(dst: Any, axis: int, idx: Any, src: Any, select: bool):
    ndim = dst.ndim
    if not 0 < ndim <= _MAX_DIMS or idx.dtype != np.int64 or idx.ndim != 1 or \
            not idx.flags.c_contiguous or src.ndim != ndim or src.dtype != dst.dtype or \
            dst.itemsize not in _WORD_TYPES or any(s < 0 for s in dst.strides + src.strides):
        return None   # (complex128 is 16 bytes: no word type; negative strides: numpy views)
    item = dst.itemsize
    name = f"tp_index_{'select' if select else 'copy'}_{item}"
    packed = _kernel_cache.cached(("index_copy", item, select), lambda: PackedLaunch(
        cupy.RawKernel(_copy_source(_WORD_TYPES[item], name, select), name), _COPY_SLOTS))
    device = dst.data.device_id
    if not _kernel_cache.is_warm(("index_copy", item, select), device):
        _kernel_cache.warm(("index_copy", item, select), device, lambda: packed.kernel.kernel)
    pad = _MAX_DIMS - ndim
    walked, indexed = (dst, src) if select else (src, dst)
    total = walked.size
    static = array("Q", [total, axis + pad, indexed.shape[axis], axis])
    static.extend(1 if d < pad else walked.shape[d - pad] for d in range(_MAX_DIMS))
    static.extend(0 if d < pad else dst.strides[d - pad] // item for d in range(_MAX_DIMS))
    static.extend(0 if d < pad else src.strides[d - pad] // item for d in range(_MAX_DIMS))
    return packed, min(-(-total // _THREADS), 4096), static
