"""The caching allocator: every byte of accelerator memory tensorplay uses goes through here.

One implementation serves every accelerator backend (sim and cuda). It sits on the backend's raw
memory calls (``malloc``, ``free``, ``mem_get_info``, ``synchronize_device``), which never cache,
and mirrors PyTorch's CUDACachingAllocator where that is sensible.

Contract
--------
- ``CachingAllocator(backend, index).malloc(nbytes, stream)`` returns an :class:`Allocation`; its
  block comes back to the cache when the Allocation is garbage-collected or ``release()``\\ d.
- Sizes round up to 512 bytes. Requests up to 1 MiB come from 2 MiB "small" segments; larger
  ones from "large" segments: 20 MiB for requests under 10 MiB, else the request rounded up to
  2 MiB. The best-fitting free block is taken and split when the rest is worth keeping
  (>= 512 bytes small, > 1 MiB large); a freed block merges with its free neighbours.
- The default pool reuses a block only on the stream it was allocated on, where stream order
  makes reuse safe without events. Private (graph) pools do not segregate by stream.
- Exact-size reuse (the eager fast path): a block of the default pool freed by its Allocation
  is *parked* whole in a free list keyed by (its segment's stream, the rounded size of the
  request it served), not merged at once. The next malloc of that rounded size on that stream
  pops it (after applying the frees handed over to it), as long as there is no dead pool to
  release, no stream routed to a graph pool and no nesting. Any other malloc best-fits the
  listed free blocks first; only when none fits does it merge parked blocks back into the free
  lists and look again: first those parked on
  its stream for requests at least as large (in its pool class), then, if still none fits,
  every one, before it asks the device for a new segment (so a segment is never added while
  free memory could serve). Merging only what could serve alone keeps the blocks that a
  repeating loop's other requests hit where they are, so such a loop settles into fast mallocs.
  ``empty_cache()`` and the OOM retry merge them too. See Note [parked blocks].
- A block is free again the moment its Allocation dies, even while queued work still uses it
  (as on CUDA, where a kernel holds raw pointers; sim's queues hold no Allocation either, see
  Note [sim queue ownership] in ``backends/sim/memory.py``), so a long eager loop runs in
  bounded memory.
- A default-pool block's free is applied by the allocator's next call (any malloc, statistic,
  snapshot or ``empty_cache()``), before that call does anything else, so no caller can tell it
  from an immediate free; the next malloc of the size it served on its stream takes it back
  first. See Note [deferred frees].
- ``memory_stats()`` uses PyTorch's key names; graph-pool memory counts like any other.
- When the device is full, cached free segments are released and the malloc retried once; then
  :class:`tensorplay.OutOfMemoryError`. Nothing already allocated is harmed.

Pitfalls
--------
- Memory used on a second stream must be kept alive by the caller until that stream is done:
  there is no ``record_stream``; a freed block may be handed out at once on its own stream.
- A finalizer may run anywhere. A free arriving while this thread is already inside the
  allocator, or while another thread holds it, is handed over and applied before the holder
  leaves; finalizers never wait for the allocator's lock (a thread holding it may be waiting for
  a backend lock the finalizing thread holds).
- Releasing memory to the device first waits for it (``synchronize_device``), once per pass and
  only when something is released. The OOM release is skipped, and dead-pool releases are
  postponed, while a stream of the device is routed to a pool: a capture is under way and a
  device sync would invalidate it. ``empty_cache()`` during a capture is the caller's unsafe call.
- The release of a dead pool's last segment may run inside ``Allocation.__del__``, so backends
  must accept ``synchronize_device`` and ``free`` from a finalizer.

Note [parked blocks]
--------------------
One allocator, two ways into the same blocks. A parked block is free (``allocated`` False,
counted free) but neither merged with its free neighbours nor in its pool's ``bins``; it sits in
``CachingAllocator._parked[(stream, size)]``, ``size`` the rounded size of the request it last
served (its own, or up to 1 MiB less for a large block whose rest was not split off). Parking
is for the default pool only: graph pools
do not segregate by stream, and their frees merge at once, as before.

- Statistics describe the *merged* layout, whichever path ran: a run of adjacent free blocks
  (parked or listed) is one inactive split block, and a segment that is wholly free is not
  split. Taking or freeing a block changes them by what its two neighbours and the segment's
  ``used`` bytes say (``_mark_taken`` and ``_free_block``), so a sequence gives the same
  ``memory_stats()`` whether its mallocs popped parked blocks or best-fitted merged ones.
- ``_flush_parked`` (a default-pool malloc that no listed block fits, ``empty_cache()``, the
  OOM retry) merges parked blocks
  into the free lists; statistics do not change, since they already describe that layout.
- The stream rule is the default pool's: a parked block is keyed by its segment's stream, so it
  is only handed out on that stream; during a capture (any route) no malloc pops one.

Note [deferred frees]
---------------------
A dying Allocation of the default pool only appends its block to ``_handoffs``, the list that
contended frees already used; applying it waits for the allocator's next call. Every entry
applies the whole list first (``_enter``, and the malloc fast path), in the order the frees
came, so statistics, the parked lists and the free lists are what immediate frees would have
made by the time anything looks at them: a peak is never raised by a free that is still
pending, since each malloc applies all of them before it counts itself.

The gain is the eager loop ``y = f(x)``: the result freed last is usually the one the next
result of the same size takes. The malloc fast path pops it and logs its free and its malloc
together (``_retake``): no parking, unlisting or ``used`` change, and the finalizer costs one
frame instead of three. Graph-pool blocks are freed at once as before, since a dead pool's
segments are released when its last block is free (Note [graph pool lifetime]).

Note [graph pool lifetime]
--------------------------
Cited by ``accelerator/graphs.py`` and the backends.

- Allocations during capture come from the graph's pool: ``Graph.capture_begin`` routes its
  capture stream (and each conditional body stream) to the pool with
  ``begin_allocate_to_pool``; a malloc on a routed stream takes only that pool's blocks and
  segments. A pool's freed blocks go back to that pool only, and a segment belongs to one pool
  for life, so eager code is never handed memory a replay writes into.
- A pool lives while any graph references it: ``create_pool`` counts the creating graph,
  ``retain_pool`` each graph sharing it (``Graph(pool=...)``), ``release_pool`` (``reset()`` or
  destruction) drops one. A live pool's memory is never released, not even a fully free segment
  on ``empty_cache()``: blocks that look free between replays are the graph's temporaries, which
  every replay writes again.
- After that (use_count 0) the pool is dead: its free segments are released at once, and the
  rest only when no tensor uses them, as their last Allocation dies. So ``reset()`` of a graph
  never frees memory a live tensor (a graph output) still uses.
- Graphs sharing a pool may reuse each other's freed blocks (a later capture may place its
  tensors in an earlier graph's temporaries), so they must replay in capture order.

Note [statistics log]
---------------------
The statistics are PyTorch's: per pool class and in all, current, peak, and the sums of
increases and decreases of each. Updating them in Python on every malloc and free costs more than
the rest of the fast path, so the fast paths (``_mark_taken``, ``_free_block``) only extend a flat
log with their deltas, and :meth:`_fold_stats` applies a batch at once with NumPy (a peak is the
running maximum of the prefix sums, exactly what updating after each change gives). Every reader
of the statistics, and the slow path's ``_count`` before it changes them, folds first, under
the allocator lock; the log is also folded when it grows past ``_LOG_FOLD`` ints.

A change is four ints, as few as say it (converting the log's Python ints to NumPy is most of a
fold's cost): ``split + 2`` plus 8 for the large pool class (``split``, the change of inactive
split blocks, is -2 to 2), the block's size (negative for a free: the sign is also the change of
the allocation count), the requested bytes (negative for a free), and the change of inactive
split bytes.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import operator
import sys
import threading
from typing import Any

import numpy as np

from .._errors import OutOfMemoryError
from .device import check_index
from .select import require_accelerator

__all__ = ["Allocation", "CachingAllocator", "device_allocator"]

# Note [no release inside a collection]
# -------------------------------------
# The last Allocation of a dead graph pool may die inside a garbage collection (a graph and
# the tensors it kept form cycles), and releasing the pool's segments waits for the device
# first. On sim that wait runs the queued kernels, NumPy code that sets context variables,
# right inside the collection, which may itself have started inside a context variable's
# update (an allocation there): the interpreter crashed so, now and then, under load. So
# while the collector runs, dead pools' segments wait; the next allocator call that may
# release (a malloc that misses the exact-size cache, release_pool, the end of a capture's
# routing, a free outside a collection) releases them.
_collecting = False


def _note_collection(phase: str, info: dict) -> None:
    global _collecting
    _collecting = phase == "start"


gc.callbacks.append(_note_collection)

_MIN_BLOCK = 512                 # every size is a multiple of this
_SMALL_REQUEST = 1 << 20         # requests up to this come from small segments
_SMALL_SEGMENT = 2 << 20
_MIN_LARGE_ALLOC = 10 << 20      # large requests under this share 20 MiB segments
_LARGE_SEGMENT = 20 << 20
_ROUND_LARGE = 2 << 20

_STAT_NAMES = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
               "requested_bytes", "allocation", "segment", "active", "inactive_split")
# Statistics are plain ints in lists indexed by these (small pool, then large pool at +_NSTATS).
# No block is ever freed-but-pending here, so "active" is "allocation" (PyTorch's active counts
# blocks whose frees wait on events, which this allocator does not have).
_ALLOCATION, _ALLOCATED, _REQUESTED, _SPLIT, _SPLIT_BYTES, _SEGMENT, _RESERVED = range(7)
_NSTATS = 7
_LOGGED = 5            # allocation, allocated, requested, split, split bytes: the hot paths'
_LOG_FOLD = 4 * 2048   # fold the statistics log when it holds this many ints (2048 changes)
_STAT_INDEX = {"allocation": _ALLOCATION, "active": _ALLOCATION, "allocated_bytes": _ALLOCATED,
               "active_bytes": _ALLOCATED, "requested_bytes": _REQUESTED,
               "inactive_split": _SPLIT, "inactive_split_bytes": _SPLIT_BYTES,
               "segment": _SEGMENT, "reserved_bytes": _RESERVED}
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
             "num_device_free")

_pool_numbers = itertools.count(1)
_is_finalizing = sys.is_finalizing


def _running_extremes(deltas: np.ndarray) -> tuple[list[int], ...]:
    """Per row of ``deltas`` (statistics by changes in order): the highest prefix sum, the
    total, the sum of increases and the sum of decreases (as Python ints)."""
    running = np.cumsum(deltas, axis=1)
    return (running.max(axis=1).tolist(), running[:, -1].tolist(),
            np.maximum(deltas, 0).sum(axis=1).tolist(),
            np.minimum(deltas, 0).sum(axis=1).tolist())


def _round_size(nbytes: int) -> int:
    return max(_MIN_BLOCK, -(-nbytes // _MIN_BLOCK) * _MIN_BLOCK)


def _segment_size(size: int) -> int:
    if size <= _SMALL_REQUEST:
        return _SMALL_SEGMENT
    if size < _MIN_LARGE_ALLOC:
        return _LARGE_SEGMENT
    return -(-size // _ROUND_LARGE) * _ROUND_LARGE


def _should_split(small: bool, rest_size: int) -> bool:
    """Whether the rest of a block is worth a free block of its own (PyTorch's rule)."""
    return rest_size >= _MIN_BLOCK if small else rest_size > _SMALL_REQUEST


def _check_nbytes(nbytes: Any) -> int:
    if isinstance(nbytes, bool):
        raise TypeError(f"malloc: nbytes must be an int, got bool {nbytes!r}")
    try:
        value = operator.index(nbytes)
    except TypeError:
        raise TypeError(f"malloc: nbytes must be an int, got {type(nbytes).__name__} "
                        f"{nbytes!r}") from None
    if value < 0:
        raise ValueError(f"malloc: nbytes must be >= 0, got {value}")
    return value


def _check_hashable(value: Any, what: str, call: str) -> None:
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{call}: {what} must be hashable, got {type(value).__name__} "
                        f"{value!r}") from None


class _Pool:
    """The default pool (``pool_id`` None) or a private graph pool."""

    __slots__ = ("pool_id", "use_count", "segments", "bins", "free_blocks")

    def __init__(self, pool_id: Any):
        self.pool_id = pool_id
        self.use_count = 1
        self.segments: dict[int, _Segment] = {}            # base address -> segment
        self.bins: dict[tuple, list[tuple[int, int]]] = {}  # (stream key, small) -> [(size, ptr)]
        self.free_blocks: dict[int, _Block] = {}           # ptr -> free block

    @property
    def is_live(self) -> bool:
        return self.pool_id is None or self.use_count > 0


class _Segment:
    """One backend allocation; ``head`` starts its address-ordered list of blocks."""

    __slots__ = ("ptr", "size", "pool", "is_small", "stream_key", "head", "used", "log_code")

    def __init__(self, ptr: int, size: int, pool: _Pool, is_small: bool, stream_key: Any):
        self.ptr, self.size, self.pool = ptr, size, pool
        self.is_small, self.stream_key = is_small, stream_key
        # a logged change's first int is this plus its split change (Note [statistics log])
        self.log_code = 2 if is_small else 10
        self.head: _Block | None = None
        self.used = 0   # bytes of allocated blocks: 0 means wholly free, merged or not

    def is_free(self) -> bool:
        assert self.head is not None   # set by _new_segment right after construction
        return self.head.next is None and not self.head.allocated


class _Block:
    __slots__ = ("ptr", "size", "segment", "prev", "next", "allocated", "requested")

    def __init__(self, ptr: int, size: int, segment: _Segment):
        self.ptr, self.size, self.segment = ptr, size, segment
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.allocated = False
        self.requested = 0


def _join(first: _Block, second: _Block) -> None:
    """Make ``first`` also cover ``second``, the block after it."""
    first.size += second.size
    first.next = second.next
    if second.next is not None:
        second.next.prev = first


class Allocation:
    """A live device allocation: ``ptr``, ``nbytes`` (requested), ``size``, ``device_index``.

    ``size`` is the block it occupies: ``nbytes`` rounded up to 512, or more when the rest of
    the free block it came from was too small to split off. The block returns to the allocator
    on :meth:`release` or when this object is garbage-collected. ``nbytes == 0`` gives ``ptr``
    0 and no block.
    """

    __slots__ = ("ptr", "nbytes", "size", "device_index", "_allocator", "_cell", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, size: int, device_index: int,
                 allocator: CachingAllocator | None, block: _Block | None):
        self.ptr, self.nbytes, self.size, self.device_index = ptr, nbytes, size, device_index
        self._allocator = allocator
        # A one-element list: list.pop() takes the block exactly once, whichever thread or
        # finalizer gets there first, without a lock.
        self._cell = [] if block is None else [block]

    @property
    def is_live(self) -> bool:
        """Whether the block is still held (False after release, and for nbytes == 0)."""
        return bool(self._cell)

    def release(self) -> None:
        """Return the block to the allocator. Idempotent; the address is invalid after.

        .. note:: A default-pool block, or any block while another thread is inside the
           allocator, is handed over: the allocator's next call (or the thread inside it,
           before it leaves) frees it before anything else (Note [deferred frees]).
        """
        try:
            block = self._cell.pop()
        except IndexError:
            return
        # a block is held only with its allocator (no assert: the free hot path)
        allocator: CachingAllocator = self._allocator  # type: ignore[assignment]
        if block.segment.pool is allocator._default:
            allocator._handoffs.append(block)   # Note [deferred frees]
            return
        try:
            allocator._release_block(block)
        except Exception:
            if _is_finalizing is None or _is_finalizing():
                return   # interpreter shutdown: the backend may already be gone
            raise        # from __del__: reported by sys.unraisablehook

    # The finalizer is release() itself: one frame less on every free of a temporary.
    __del__ = release

    def __repr__(self) -> str:
        state = "live" if self._cell else "released"
        return (f"Allocation(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, size={self.size}, "
                f"device_index={self.device_index}, {state})")


_new_allocation = object.__new__


class _Held:
    """``with allocator._held:`` holds the lock; leaving applies handed-over frees (and, for
    ``_held_releasing``, releases dead pools' free segments)."""

    __slots__ = ("allocator", "release_dead")

    def __init__(self, allocator: CachingAllocator, release_dead: bool):
        self.allocator, self.release_dead = allocator, release_dead

    def __enter__(self) -> None:
        self.allocator._enter()

    def __exit__(self, *exc_info) -> None:
        self.allocator._leave(self.release_dead)


class CachingAllocator:
    """The caching allocator of one device of ``backend`` (see the module docstring).

    Args:
        backend: has ``malloc(index, nbytes)``, ``free(index, ptr)``, ``mem_get_info(index)``
            and ``synchronize_device(index)``; ``device_type`` names the device in errors.
        device_index: the device this allocator serves.
    """

    def __init__(self, backend: Any, device_index: int):
        if isinstance(device_index, bool) or not isinstance(device_index, int):
            raise TypeError(f"CachingAllocator: device_index must be an int, got "
                            f"{type(device_index).__name__} {device_index!r}")
        self._backend = backend
        self._index = device_index
        self._device_name = f"{getattr(backend, 'device_type', 'device')}:{device_index}"
        self._lock = threading.RLock()
        self._depth = 0            # nesting of allocator calls on the lock-holding thread
        self._handoffs: list[_Block] = []   # freed blocks waiting for the lock holder
        self._default = _Pool(None)
        self._pools: dict[Any, _Pool] = {}  # private pools, live or dead-with-memory
        self._routes: dict[Any, list] = {}  # stream -> pool ids (last wins)
        self._dead_dirty = False   # a dead pool may have a fully free segment to release
        # (stream, size) -> parked default-pool blocks, last freed last (Note [parked blocks])
        self._parked: dict[tuple, list[_Block]] = {}
        # Statistics (Note [parked blocks]): index i for the small pool, i + _NSTATS for the
        # large pool; "all" keeps its own current and peak (a peak of a sum is not a sum of
        # peaks) and sums the two pools' accumulators when asked.
        self._current = [0] * (2 * _NSTATS)
        self._peak = [0] * (2 * _NSTATS)
        self._up = [0] * (2 * _NSTATS)       # PyTorch's "allocated": the sum of increases
        self._down = [0] * (2 * _NSTATS)     # PyTorch's "freed": the sum of decreases
        self._total = [0] * _NSTATS
        self._total_peak = [0] * _NSTATS
        #: changes of the hot paths not yet applied, four ints each: the pool class and the
        #: deltas of the first _LOGGED statistics, packed (Note [statistics log])
        self._stat_log: list[int] = []
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._held = _Held(self, False)
        self._held_releasing = _Held(self, True)

    # -- entering and leaving -------------------------------------------------------------
    def _enter(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1 and self._handoffs:
            try:
                self._apply_handoffs()
            except BaseException:
                self._depth -= 1
                self._lock.release()
                raise

    def _leave(self, release_dead: bool = False) -> None:
        outermost = self._depth == 1
        try:
            if outermost:
                self._apply_handoffs()
                if release_dead:
                    self._release_dead()
        finally:
            self._depth -= 1
            self._lock.release()
        if outermost and self._handoffs:
            self._pick_up_handoffs()

    def _pick_up_handoffs(self) -> None:
        """Apply blocks handed over after the lock holder's last look (they would wait for the
        next call), unless another thread holds the lock (it applies them when it leaves)."""
        while self._handoffs and self._lock.acquire(blocking=False):
            self._depth += 1
            try:
                if self._depth != 1:
                    break   # cannot happen: at depth 0 this thread held no lock
                self._apply_handoffs()
            finally:
                self._depth -= 1
                self._lock.release()

    def _apply_handoffs(self) -> None:
        """Free the handed-over blocks in the order they came (the parked lists keep it).
        Other threads may append meanwhile, never take: this thread holds the lock."""
        handoffs = self._handoffs
        while handoffs:
            batch = handoffs[:]
            del handoffs[:len(batch)]
            for block in batch:
                self._free_block(block)

    def _release_block(self, block: _Block) -> None:
        """The free path of a graph pool's Allocation (finalizers included; a default-pool
        block is only handed over, Note [deferred frees]): never waits for the lock.

        Fast path: the lock is free and nothing is pending, so the block is freed right here
        (its dead pool released when that was its last block), with the lock held at depth 1
        so that a finalizer firing meanwhile hands its block over instead of interleaving."""
        lock = self._lock
        if lock.acquire(blocking=False):
            if not (self._depth or self._handoffs or self._dead_dirty):
                self._depth = 1
                try:
                    self._free_block(block)
                finally:
                    if self._handoffs or self._dead_dirty:
                        self._leave(release_dead=True)
                    else:
                        self._depth = 0
                        lock.release()
                        if self._handoffs:
                            self._pick_up_handoffs()
                return
            lock.release()
        self._handoffs.append(block)
        if not lock.acquire(blocking=False):
            return   # the holder applies it before it leaves
        self._depth += 1
        self._leave(release_dead=True)

    # -- malloc ---------------------------------------------------------------------------
    def malloc(self, nbytes: int, stream: Any) -> Allocation:
        """Allocate ``nbytes`` for work on ``stream`` (any hashable key: the native stream).

        Returns:
            An :class:`Allocation`; ``nbytes == 0`` gives one with ``ptr`` 0 and no block.

        Raises:
            TypeError: ``nbytes`` is not an int, or ``stream`` is not hashable.
            ValueError: ``nbytes`` is negative.
            RuntimeError: ``stream`` is routed to a pool that was released.
            OutOfMemoryError: the device is full even after releasing the cache.
        """
        block: _Block | None   # None only from _best_fit, below
        if type(nbytes) is int and nbytes > 0 and (self._parked or self._handoffs):
            # The fast path (Notes [parked blocks], [deferred frees]): the block freed last, if
            # it served a request of this rounded size on this stream, else a parked block of
            # that size. Every condition is read under the lock.
            lock = self._lock
            lock.acquire()
            if self._depth or self._routes or self._dead_dirty:
                lock.release()
            else:
                self._depth = 1
                block = None
                try:
                    size = -(-nbytes // _MIN_BLOCK) * _MIN_BLOCK
                    handoffs = self._handoffs
                    if handoffs:
                        last = handoffs.pop()
                        segment = last.segment
                        if segment.pool is self._default and \
                                -(-last.requested // _MIN_BLOCK) * _MIN_BLOCK == size and \
                                segment.stream_key is stream:
                            block = last
                        else:
                            handoffs.append(last)
                        self._apply_handoffs()   # the other frees came before this malloc
                        if block is not None:
                            self._retake(block, nbytes)
                    if block is None:
                        try:
                            stack = self._parked.get((stream, size))
                        except TypeError:
                            stack = None   # unhashable stream: the slow path says so
                        if stack:
                            block = stack.pop()
                            if not stack:   # drop the stream reference with the last block
                                del self._parked[(stream, size)]
                            self._mark_taken(block, nbytes)
                finally:
                    if self._handoffs or self._dead_dirty:
                        # a graph pool's block handed over by a contended free may have left
                        # its dead pool releasable
                        self._leave(release_dead=True)
                    else:
                        self._depth = 0
                        lock.release()
                        if self._handoffs:
                            self._pick_up_handoffs()
                if block is not None:
                    # Allocation(block.ptr, nbytes, block.size, self._index, self, block)
                    # without the __init__ frame (the eager hot path)
                    allocation = _new_allocation(Allocation)
                    allocation.ptr, allocation.nbytes = block.ptr, nbytes
                    allocation.size, allocation.device_index = block.size, self._index
                    allocation._allocator, allocation._cell = self, [block]
                    return allocation
        nbytes = _check_nbytes(nbytes)
        if nbytes == 0:
            return Allocation(0, 0, 0, self._index, None, None)
        _check_hashable(stream, "stream", "malloc")
        size = _round_size(nbytes)
        with self._held:
            if self._depth == 1:
                self._release_dead()
            pool = self._routed_pool(stream)
            stream_key = stream if pool is self._default else None
            if pool is self._default:
                # what the fast path pops, when only a condition it does not look past
                # (a capture routing another stream, nesting) sent this malloc here
                stack = self._parked.get((stream, size))
                if stack:
                    block = stack.pop()
                    if not stack:
                        del self._parked[(stream, size)]
                    self._mark_taken(block, nbytes)
                    return Allocation(block.ptr, nbytes, block.size, self._index, self, block)
            small = size <= _SMALL_REQUEST
            block = self._best_fit(pool, (stream_key, small), size)
            if block is None and self._parked and pool is self._default:
                # Only a miss of the listed blocks merges the parked ones: flushing on every
                # slow malloc would empty the exact-size cache that the next step's mallocs
                # hit, sending all of them down this path too. The parked blocks that could
                # serve alone go first; the rest stay parked for the sizes they serve (merging
                # them all reshuffles the blocks, so that the next step misses again).
                if self._flush_parked(stream, small, size):
                    block = self._best_fit(pool, (stream_key, small), size)
                if block is None:
                    self._flush_parked()
                    block = self._best_fit(pool, (stream_key, small), size)
            if block is None:
                block = self._new_segment(pool, stream_key, small, size, nbytes)
            self._take(block, size, nbytes)
            return Allocation(block.ptr, nbytes, block.size, self._index, self, block)

    def _routed_pool(self, stream: Any) -> _Pool:
        routes = self._routes.get(stream)
        if not routes:
            return self._default
        pool = self._pools.get(routes[-1])
        if pool is None or not pool.is_live:
            raise RuntimeError(f"malloc on {self._device_name}: the stream is routed to pool "
                               f"{routes[-1]!r}, which was released; call "
                               f"end_allocate_to_pool() before release_pool()")
        return pool

    def _best_fit(self, pool: _Pool, bin_key: tuple, size: int) -> _Block | None:
        entries = pool.bins.get(bin_key)
        if not entries:
            return None
        position = bisect.bisect_left(entries, (size, -1))
        if position == len(entries):
            return None
        return pool.free_blocks[entries[position][1]]

    def _new_segment(self, pool: _Pool, stream_key: Any, small: bool, size: int,
                     nbytes: int) -> _Block:
        segment_size = _segment_size(size)
        ptr = self._device_malloc(segment_size, nbytes)
        segment = _Segment(ptr, segment_size, pool, small, stream_key)
        block = _Block(ptr, segment_size, segment)
        segment.head = block
        pool.segments[ptr] = segment
        self._list(block)
        self._count(small, ((_SEGMENT, 1), (_RESERVED, segment_size)))
        return block

    def _device_malloc(self, segment_size: int, nbytes: int) -> int:
        """backend.malloc, with the release-and-retry-once policy on MemoryError."""
        try:
            ptr = self._backend.malloc(self._index, segment_size)
        except MemoryError as first:
            if self._routes or self._depth != 1:
                # A capture is under way (or we are nested in a finalizer): a device sync now
                # would invalidate the capture, so fail without releasing (PyTorch does too).
                self._counters["num_ooms"] += 1
                raise self._oom_error(nbytes, segment_size, released=False) from first
            self._apply_handoffs()
            self._release_cached()
            self._counters["num_alloc_retries"] += 1
            try:
                ptr = self._backend.malloc(self._index, segment_size)
            except MemoryError as second:
                self._counters["num_ooms"] += 1
                raise self._oom_error(nbytes, segment_size, released=True) from second
        self._counters["num_device_alloc"] += 1
        return ptr

    def _oom_error(self, nbytes: int, segment_size: int, released: bool) -> OutOfMemoryError:
        """The error of a failed malloc; its advice names only what can still help."""
        try:
            free_text = f"{self._backend.mem_get_info(self._index)[0]:,} bytes"
        except Exception:  # noqa: BLE001 - the message must still be made
            free_text = "an unknown number of bytes"
        segment_text = ""
        if segment_size != _round_size(nbytes):
            segment_text = f" (as a new {segment_size:,}-byte segment)"
        if released:
            cache_text = " Cached free segments were already released and the allocation retried."
            advice = "Free tensors you no longer need, or reduce the batch."
        elif self._routes:
            cache_text = (" Cached memory was not released: a graph capture routes allocations "
                          "on this device, and a device sync would invalidate it.")
            advice = "Free tensors, call empty_cache() after the capture, or reduce the batch."
        else:
            cache_text = (" Cached memory was not released: this malloc is nested inside another "
                          "allocator call on this thread.")
            advice = "Free tensors, call empty_cache(), or reduce the batch."
        self._fold_stats()
        pooled = sum(segment.size for pool in self._pools.values() if pool.is_live
                     for segment in pool.segments.values())
        pool_text = ""
        if pooled:
            pool_text = (f" Live graphs' pools hold {pooled:,} of the reserved bytes: reset() the "
                         f"graphs you no longer need.")
        return OutOfMemoryError(
            f"out of memory on {self._device_name}: tried to allocate {nbytes:,} bytes"
            f"{segment_text}; {self._total[_ALLOCATED]:,} bytes allocated, "
            f"{self._total[_RESERVED]:,} bytes reserved by tensorplay, "
            f"{free_text} free on the device.{cache_text}{pool_text} {advice}")

    # -- blocks ---------------------------------------------------------------------------
    def _list(self, block: _Block) -> None:
        segment = block.segment
        entries = segment.pool.bins.setdefault((segment.stream_key, segment.is_small), [])
        bisect.insort(entries, (block.size, block.ptr))
        segment.pool.free_blocks[block.ptr] = block

    def _unlist(self, block: _Block) -> None:
        segment = block.segment
        key = (segment.stream_key, segment.is_small)
        entries = segment.pool.bins[key]
        del entries[bisect.bisect_left(entries, (block.size, block.ptr))]
        if not entries:
            del segment.pool.bins[key]   # drops the stream reference with the last entry
        del segment.pool.free_blocks[block.ptr]

    def _take(self, block: _Block, size: int, nbytes: int) -> None:
        """Mark a listed free block allocated, splitting off the rest when it is worth keeping."""
        segment = block.segment
        self._unlist(block)
        rest_size = block.size - size
        if _should_split(segment.is_small, rest_size):
            rest = _Block(block.ptr + size, rest_size, segment)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._list(rest)
        self._mark_taken(block, nbytes)

    def _retake(self, block: _Block, nbytes: int) -> None:
        """Count the free of an allocated block whose free was deferred and its malloc for
        ``nbytes`` right after (Note [deferred frees]): what ``_free_block`` and then
        ``_mark_taken`` log, without unlisting, parking or touching ``used``."""
        segment = block.segment
        size = block.size
        prev, following = block.prev, block.next
        free_neighbours = ((prev is not None and not prev.allocated)
                           + (following is not None and not following.allocated))
        if segment.used != size:
            split, split_bytes = 1 - free_neighbours, size
        else:
            split, split_bytes = -free_neighbours, size - segment.size
        requested = block.requested
        block.requested = nbytes
        code = segment.log_code
        log = self._stat_log
        log.extend((code + split, -size, -requested, split_bytes,
                    code - split, size, nbytes, -split_bytes))
        if len(log) >= _LOG_FOLD:
            self._fold_stats()

    def _mark_taken(self, block: _Block, nbytes: int) -> None:
        """Mark an unlisted free block allocated and count it (Note [parked blocks]).

        In the merged layout the block leaves a run of free blocks; what is left of the run is
        a free neighbour on either side. Before, the run was one inactive split block, or none
        when the whole segment was free."""
        segment = block.segment
        size = block.size
        prev, following = block.prev, block.next
        free_neighbours = ((prev is not None and not prev.allocated)
                           + (following is not None and not following.allocated))
        if segment.used:
            split, split_bytes = free_neighbours - 1, -size
        else:
            split, split_bytes = free_neighbours, segment.size - size
        segment.used += size
        block.allocated = True
        block.requested = nbytes
        # the eager hot path: logged, folded later (Note [statistics log])
        log = self._stat_log
        log.extend((split + segment.log_code, size, nbytes, split_bytes))
        if len(log) >= _LOG_FOLD:
            self._fold_stats()

    def _free_block(self, block: _Block) -> None:
        """Free an allocated block and count it (Note [parked blocks]): a default-pool block is
        parked, a graph pool's is merged with its free neighbours into its pool's free list.

        In the merged layout the block joins its free neighbours' runs into one inactive split
        block, or into none when the whole segment is then free."""
        segment = block.segment
        size = block.size
        requested = block.requested
        prev, following = block.prev, block.next
        free_neighbours = ((prev is not None and not prev.allocated)
                           + (following is not None and not following.allocated))
        segment.used -= size
        if segment.used:
            split, split_bytes = 1 - free_neighbours, size
        else:
            split, split_bytes = -free_neighbours, size - segment.size
        block.allocated = False
        block.requested = 0
        pool = segment.pool
        if pool is self._default:
            # parked under the size its last request rounds to, which the same request asks
            # for next time: a large block keeps up to 1 MiB more than that (unsplit), and
            # keyed by its own size it would miss every time and flush the parked blocks
            key = (segment.stream_key, -(-requested // _MIN_BLOCK) * _MIN_BLOCK)
            stack = self._parked.get(key)
            if stack is None:
                self._parked[key] = [block]
            else:
                stack.append(block)
        else:
            self._coalesce(block)
            if not pool.is_live and not segment.used:
                self._dead_dirty = True
        # the eager hot path: logged, folded later (Note [statistics log])
        log = self._stat_log
        log.extend((split + segment.log_code, -size, -requested, split_bytes))
        if len(log) >= _LOG_FOLD:
            self._fold_stats()

    def _coalesce(self, block: _Block) -> None:
        """List an unlisted free block merged with every listed free neighbour (a parked one
        stays parked)."""
        free_blocks = block.segment.pool.free_blocks
        merged = block
        while merged.prev is not None and free_blocks.get(merged.prev.ptr) is merged.prev:
            merged = merged.prev
            self._unlist(merged)
            assert merged.next is not None   # the block merged a step before
            _join(merged, merged.next)
        following = merged.next
        while following is not None and free_blocks.get(following.ptr) is following:
            self._unlist(following)
            _join(merged, following)
            following = merged.next
        self._list(merged)

    def _flush_parked(self, stream: Any = None, small: bool = False,
                      at_least: int | None = None) -> bool:
        """Merge parked blocks into the free lists (Note [parked blocks]): every one, or with
        ``at_least``, those parked on ``stream`` for a request of at least that many bytes in
        the ``small`` (or large) pool class. Returns whether any was merged; the statistics
        already describe the merged layout, so they do not change."""
        if not self._parked:
            return False
        if at_least is None:
            stacks = list(self._parked.values())
            self._parked = {}
        else:
            keys = [key for key in self._parked if key[0] == stream and key[1] >= at_least
                    and (key[1] <= _SMALL_REQUEST) == small]
            stacks = [self._parked.pop(key) for key in keys]
        blocks = [block for stack in stacks for block in stack]
        for block in blocks:   # listed first: _coalesce unlists the neighbours it absorbs
            self._list(block)
        free_blocks = self._default.free_blocks
        for block in blocks:
            if free_blocks.get(block.ptr) is block:   # else a neighbour has absorbed it
                self._unlist(block)
                self._coalesce(block)
        return bool(blocks)

    def _count(self, small: bool, changes: tuple[tuple[int, int], ...]) -> None:
        """Apply ``(statistic index, delta)`` changes to one pool class's statistics."""
        if self._stat_log:
            self._fold_stats()   # the log's changes came first
        base = 0 if small else _NSTATS
        current, total = self._current, self._total
        for i, delta in changes:
            if delta:
                j = base + i
                current[j] += delta
                total[i] += delta
                if delta > 0:
                    self._up[j] += delta
                    if current[j] > self._peak[j]:
                        self._peak[j] = current[j]
                    if total[i] > self._total_peak[i]:
                        self._total_peak[i] = total[i]
                else:
                    self._down[j] -= delta

    def _fold_stats(self) -> None:
        """Apply the logged changes of the hot paths to the statistics (Note [statistics
        log]), with the allocator lock held or from a reader that takes it."""
        log = self._stat_log
        if not log:
            return
        entries = np.array(log, dtype=np.int64).reshape(-1, 4)
        log.clear()
        code, sizes = entries[:, 0], entries[:, 1]
        # one row per logged statistic, in _ALLOCATION.._SPLIT_BYTES order, a column a change
        deltas = np.stack((np.sign(sizes), sizes, entries[:, 2], (code & 7) - 2, entries[:, 3]))
        large = code >= 8
        in_large = int(large.sum())
        total_sums = _running_extremes(deltas)
        total, total_peak = self._total, self._total_peak
        for i, (top, end, _, _) in enumerate(zip(*total_sums)):
            total_peak[i] = max(total_peak[i], total[i] + top)
            total[i] += end
        current, peak, up, down = self._current, self._peak, self._up, self._down
        for base, mask, changes in ((0, ~large, len(large) - in_large),
                                    (_NSTATS, large, in_large)):
            if not changes:
                continue
            sums = total_sums if changes == len(large) else _running_extremes(deltas[:, mask])
            for i, (top, end, rise, fall) in enumerate(zip(*sums)):
                j = base + i
                peak[j] = max(peak[j], current[j] + top)
                current[j] += end
                up[j] += rise
                down[j] -= fall

    # -- releasing segments ---------------------------------------------------------------
    def _release_segments(self, segments: list[_Segment]) -> None:
        """Wait for the device once, then give each (fully free) segment back to it."""
        if not segments:
            return
        self._backend.synchronize_device(self._index)
        self._counters["num_sync_all_streams"] += 1
        for segment in segments:
            self._backend.free(self._index, segment.ptr)   # first: on failure nothing changed
            self._counters["num_device_free"] += 1
            assert segment.head is not None   # a segment has blocks from _new_segment on
            self._unlist(segment.head)
            del segment.pool.segments[segment.ptr]
            self._count(segment.is_small, ((_SEGMENT, -1), (_RESERVED, -segment.size)))
        self._forget_empty_dead_pools()

    def _forget_empty_dead_pools(self) -> None:
        for pool_id in [i for i, p in self._pools.items() if not p.is_live and not p.segments]:
            del self._pools[pool_id]

    def _dead_free_segments(self) -> list[_Segment]:
        return [segment for pool in self._pools.values() if not pool.is_live
                for segment in pool.segments.values() if segment.is_free()]

    def _release_dead(self) -> None:
        """Release dead pools' fully free segments, unless a capture is under way here (a
        device sync would invalidate it), this is a nested call, or the garbage collector is
        running (Note [no release inside a collection]); then they wait for the next call."""
        if not self._dead_dirty or self._routes or self._depth != 1 or _collecting:
            return
        self._release_segments(self._dead_free_segments())
        self._dead_dirty = False
        self._forget_empty_dead_pools()

    def _release_cached(self) -> None:
        """Release every fully free segment of the default pool and of dead pools."""
        self._flush_parked()
        segments = [s for s in self._default.segments.values() if s.is_free()]
        self._release_segments(segments + self._dead_free_segments())
        self._dead_dirty = False
        self._forget_empty_dead_pools()

    def empty_cache(self) -> None:
        """Release every fully free segment of the default pool and of dead pools.

        Waits for the device first (only when something is released). Never releases a
        segment of a live pool: a graph replays into it (Note [graph pool lifetime]).

        .. warning:: During a capture the device sync is an unsafe call: the backend raises
           ``RuntimeError`` (and invalidates the capture); nothing is released then.
        """
        with self._held:
            if self._depth == 1:
                self._release_cached()

    # -- pools ----------------------------------------------------------------------------
    def new_pool_id(self) -> tuple:
        """A fresh pool id, unique in the process: ``("pool", n)``."""
        return ("pool", next(_pool_numbers))

    def _live_pool(self, pool_id: Any, call: str) -> _Pool:
        pool = self._pools.get(pool_id)
        if pool is None or not pool.is_live:
            raise RuntimeError(f"{call}: {pool_id!r} is not a live pool on {self._device_name} "
                               f"(never created, or released by every graph that used it); "
                               f"create_pool() makes one")
        return pool

    def create_pool(self, pool_id: Any) -> None:
        """Create a private pool used by one graph (``use_count`` 1).

        A dead pool whose memory live tensors still use is revived: its free blocks serve the
        new graph, the tensors' blocks stay theirs.

        Raises:
            TypeError: ``pool_id`` is not hashable. ValueError: it is None.
            RuntimeError: the pool is live already (use :meth:`retain_pool` to share it).
        """
        _check_hashable(pool_id, "pool_id", "create_pool")
        if pool_id is None:
            raise ValueError("create_pool: pool_id None names the default pool; use "
                             "new_pool_id()")
        with self._held:
            pool = self._pools.get(pool_id)
            if pool is None:
                self._pools[pool_id] = _Pool(pool_id)
            elif pool.is_live:
                raise RuntimeError(f"create_pool: pool {pool_id!r} already exists on "
                                   f"{self._device_name} ({pool.use_count} users); "
                                   f"retain_pool() shares it")
            else:
                pool.use_count = 1

    def retain_pool(self, pool_id: Any) -> None:
        """Count one more graph sharing a live pool. RuntimeError if it is not live."""
        _check_hashable(pool_id, "pool_id", "retain_pool")
        with self._held:
            self._live_pool(pool_id, "retain_pool").use_count += 1

    def create_or_retain_pool(self, pool_id: Any) -> None:
        """``retain_pool`` if the pool is live, else ``create_pool`` (what a capture does)."""
        _check_hashable(pool_id, "pool_id", "create_or_retain_pool")
        with self._held:
            pool = self._pools.get(pool_id)
            if pool is not None and pool.is_live:
                pool.use_count += 1
            else:
                self.create_pool(pool_id)

    def release_pool(self, pool_id: Any) -> None:
        """Drop one use of a live pool. At 0 the pool is dead: its free segments are released
        now (after a device sync), the rest when their last Allocation dies (Note [graph pool
        lifetime]). Releases wait while a capture routes allocations on this device."""
        _check_hashable(pool_id, "pool_id", "release_pool")
        with self._held_releasing:
            pool = self._live_pool(pool_id, "release_pool")
            pool.use_count -= 1
            if pool.use_count == 0:
                self._dead_dirty = True
                if not pool.segments:
                    del self._pools[pool_id]

    def pool_contains(self, pool_id: Any, ptr: int) -> bool:
        """Whether device address ``ptr`` lies in a segment of the private pool ``pool_id``
        (False for an unknown pool)."""
        with self._held:
            pool = self._pools.get(pool_id)
            if pool is None:
                return False
            return any(base <= ptr < base + segment.size
                       for base, segment in pool.segments.items())

    def begin_allocate_to_pool(self, pool_id: Any, stream: Any) -> None:
        """Route mallocs on ``stream`` to the live pool ``pool_id`` until the matching
        :meth:`end_allocate_to_pool`; nested routes of one stream stack (last wins)."""
        _check_hashable(stream, "stream", "begin_allocate_to_pool")
        _check_hashable(pool_id, "pool_id", "begin_allocate_to_pool")
        with self._held:
            self._live_pool(pool_id, "begin_allocate_to_pool")
            self._routes.setdefault(stream, []).append(pool_id)

    def end_allocate_to_pool(self, pool_id: Any, stream: Any) -> None:
        """Undo the latest ``begin_allocate_to_pool(pool_id, stream)``. RuntimeError if the
        stream is not routed to that pool."""
        _check_hashable(stream, "stream", "end_allocate_to_pool")
        _check_hashable(pool_id, "pool_id", "end_allocate_to_pool")
        with self._held_releasing:
            routes = self._routes.get(stream)
            if not routes or pool_id not in routes:
                raise RuntimeError(f"end_allocate_to_pool: the stream is not routed to pool "
                                   f"{pool_id!r} on {self._device_name} (unbalanced with "
                                   f"begin_allocate_to_pool)")
            del routes[len(routes) - 1 - routes[::-1].index(pool_id)]
            if not routes:
                del self._routes[stream]

    def pool_memory_reserved(self, pool_id: Any) -> int:
        """Bytes of segments owned by ``pool_id`` (None: the default pool); 0 if unknown."""
        with self._held:
            pool = self._default if pool_id is None else self._pools.get(pool_id)
            return 0 if pool is None else sum(s.size for s in pool.segments.values())

    # -- statistics -----------------------------------------------------------------------
    def memory_stats(self) -> dict[str, int]:
        """PyTorch-named statistics, keys sorted: ``<stat>.<all|small_pool|large_pool>.
        <current|peak|allocated|freed>`` plus the ``num_*`` counters and ``max_split_size``."""
        with self._held:
            self._fold_stats()
            current, peak, up, down = self._current, self._peak, self._up, self._down
            result = {"max_split_size": -1, **self._counters}
            for name in _STAT_NAMES:
                i = _STAT_INDEX[name]
                small, large = i, i + _NSTATS
                for pool_class, values in (
                        ("all", (self._total[i], self._total_peak[i], up[small] + up[large],
                                 down[small] + down[large])),
                        ("small_pool", (current[small], peak[small], up[small], down[small])),
                        ("large_pool", (current[large], peak[large], up[large], down[large]))):
                    prefix = f"{name}.{pool_class}."
                    for part, value in zip(("current", "peak", "allocated", "freed"), values):
                        result[prefix + part] = value
            return dict(sorted(result.items()))

    def reset_peak_memory_stats(self) -> None:
        """Set every peak to its current value."""
        with self._held:
            self._fold_stats()
            self._peak[:] = self._current
            self._total_peak[:] = self._total

    def reset_accumulated_memory_stats(self) -> None:
        """Zero the ``allocated``/``freed`` accumulators and the ``num_*`` counters."""
        with self._held:
            self._fold_stats()
            self._up[:] = self._down[:] = [0] * (2 * _NSTATS)
            self._counters = dict.fromkeys(_COUNTERS, 0)

    def memory_allocated(self) -> int:
        """Bytes of live blocks (rounded sizes)."""
        with self._held:
            self._fold_stats()
            return self._total[_ALLOCATED]

    def memory_reserved(self) -> int:
        """Bytes of segments held from the device."""
        with self._held:
            self._fold_stats()
            return self._total[_RESERVED]

    def max_memory_allocated(self) -> int:
        """Peak of :meth:`memory_allocated` since creation or the last peak reset."""
        with self._held:
            self._fold_stats()
            return self._total_peak[_ALLOCATED]

    def max_memory_reserved(self) -> int:
        """Peak of :meth:`memory_reserved` since creation or the last peak reset."""
        with self._held:
            self._fold_stats()
            return self._total_peak[_RESERVED]

    def __repr__(self) -> str:
        return (f"CachingAllocator({self._device_name}, allocated={self.memory_allocated():,}, "
                f"reserved={self.memory_reserved():,})")


_allocators: dict[int, CachingAllocator] = {}
_allocators_lock = threading.Lock()


#: device index -> its allocator, once made (``dispatch.empty`` reads it first: the hot path)
allocators = _allocators


def device_allocator(index: int) -> CachingAllocator:
    """The process-wide allocator of accelerator device ``index``, made on first use.

    Raises:
        RuntimeError: on a host-only build (from ``select.require_accelerator()``).
        TypeError: ``index`` is not an int. ValueError: it is out of range.
    """
    if type(index) is int:
        allocator = _allocators.get(index)
        if allocator is not None:
            return allocator
    backend = require_accelerator()
    check_index(backend, index)
    with _allocators_lock:
        allocator = _allocators.get(index)
        if allocator is None or allocator._backend is not backend:
            allocator = CachingAllocator(backend, index)
            _allocators[index] = allocator
        return allocator
