"""The caching allocator on its own, over a fake backend: no device needed.

The fake hands out fresh fake addresses (never reused) under a byte limit and refuses a double
or unknown free, so a test can check that no byte is handed out twice and that everything goes
back to the "device" in the end.
"""

from __future__ import annotations

import bisect
import gc
import re
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition, rule)

from tensorplay._runtime import allocator as _allocator
from tensorplay._runtime.allocator import Allocation, CachingAllocator
from tensorplay._errors import OutOfMemoryError

KiB, MiB = 1 << 10, 1 << 20


class FakeBackend:
    """Exactly the four raw-memory methods the allocator uses, with bookkeeping for tests."""

    def __init__(self, limit: int = 64 * MiB, device_type: str | None = "fake"):
        if device_type is not None:
            self.device_type = device_type
        self.limit = limit
        self.live: dict[int, int] = {}      # address -> nbytes
        self.next_address = 0x1000_0000
        self.syncs = 0
        self.on_malloc = None               # hook run inside malloc (reentrancy tests)
        self.lock = threading.Lock()

    @property
    def used(self) -> int:
        return sum(self.live.values())

    def malloc(self, index: int, nbytes: int) -> int:
        assert nbytes > 0
        if self.on_malloc is not None:
            self.on_malloc()
        with self.lock:
            if self.used + nbytes > self.limit:
                raise MemoryError(f"fake:0 has {self.limit - self.used} bytes free")
            ptr = self.next_address
            self.next_address += nbytes + 4 * KiB   # a gap: neighbours never touch
            self.live[ptr] = nbytes
            return ptr

    def free(self, index: int, ptr: int) -> None:
        with self.lock:
            if ptr not in self.live:
                raise AssertionError(f"free of 0x{ptr:x}: not live (double or unknown free)")
            del self.live[ptr]

    def mem_get_info(self, index: int) -> tuple[int, int]:
        return self.limit - self.used, self.limit

    def synchronize_device(self, index: int) -> None:
        self.syncs += 1


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def allocator(backend):
    return CachingAllocator(backend, 0)


def pool_of(allocation: Allocation):
    """The id of the pool owning an allocation's block (None: the default pool)."""
    return allocation._cell[0].segment.pool.pool_id


def stat(allocator, key: str) -> int:
    return allocator.memory_stats()[key]


def walk_inactive_split(allocator) -> tuple[int, int]:
    """(count, bytes) of inactive split blocks in the merged layout (Note [parked blocks]), by
    walking every segment: each run of adjacent free blocks counts once, unless it is the whole
    segment."""
    count = total = 0
    for pool in [allocator._default, *allocator._pools.values()]:
        for segment in pool.segments.values():
            runs, block = [], segment.head
            while block is not None:
                if not block.allocated:
                    if block.prev is not None and not block.prev.allocated:
                        runs[-1] += block.size
                    else:
                        runs.append(block.size)
                block = block.next
            if runs != [segment.size]:
                count, total = count + len(runs), total + sum(runs)
    return count, total


def check_invariants(allocator, backend, live) -> None:
    """No overlap, every block inside device memory, and stats that add up."""
    spans = sorted((a.ptr, a.size) for a in live)
    for (ptr, size), (next_ptr, _) in zip(spans, spans[1:]):
        assert ptr + size <= next_ptr, "two live allocations overlap"
    bases = sorted(backend.live)
    for ptr, size in spans:
        position = bisect.bisect_right(bases, ptr) - 1
        assert position >= 0, "allocation outside device memory"
        base = bases[position]
        assert ptr + size <= base + backend.live[base], "allocation runs past its segment"
    stats = allocator.memory_stats()
    assert stats["allocated_bytes.all.current"] == sum(a.size for a in live)
    assert stats["active_bytes.all.current"] == sum(a.size for a in live)
    assert stats["requested_bytes.all.current"] == sum(a.nbytes for a in live)
    assert stats["allocation.all.current"] == stats["active.all.current"] == len(live)
    assert stats["reserved_bytes.all.current"] == backend.used == allocator.memory_reserved()
    assert stats["segment.all.current"] == len(backend.live)
    count, total = walk_inactive_split(allocator)
    assert stats["inactive_split.all.current"] == count
    assert stats["inactive_split_bytes.all.current"] == total
    for name in _allocator._STAT_NAMES:
        for part in ("current", "allocated", "freed"):   # peaks need not add up
            assert stats[f"{name}.all.{part}"] == (stats[f"{name}.small_pool.{part}"] +
                                                   stats[f"{name}.large_pool.{part}"])
        assert stats[f"{name}.all.peak"] >= stats[f"{name}.all.current"]
    pools = [None, *allocator._pools]
    assert sum(allocator.pool_memory_reserved(p) for p in pools) == backend.used
    check_parked(allocator)


def settle(allocator) -> None:
    """Apply the frees the allocator deferred (Note [deferred frees]): any call into it does
    that first; tests looking at its insides call this."""
    with allocator._held:
        pass


def parked(allocator) -> dict:
    """The parked blocks, after the deferred frees (what the next malloc would see)."""
    settle(allocator)
    return allocator._parked


def check_parked(allocator) -> None:
    """Every free block is listed or parked (default pool only), never both; ``used`` adds up."""
    parked = {id(b): key for key, stack in allocator._parked.items() for b in stack}
    assert all(allocator._parked.values()), "an empty parked list keeps its stream alive"
    for pool in [allocator._default, *allocator._pools.values()]:
        for segment in pool.segments.values():
            used, block = 0, segment.head
            while block is not None:
                if block.allocated:
                    used += block.size
                    assert id(block) not in parked
                elif id(block) in parked:
                    assert pool is allocator._default and block.ptr not in pool.free_blocks
                    # parked under the size its last request rounded to: the whole block,
                    # or a large one's part that was not worth splitting off
                    stream_key, size = parked[id(block)]
                    assert stream_key == segment.stream_key and size % 512 == 0
                    assert size == block.size or (
                        not segment.is_small and block.size - MiB <= size < block.size)
                else:
                    assert pool.free_blocks[block.ptr] is block
                block = block.next
            assert segment.used == used


# -- sizes, splitting, merging ------------------------------------------------------------

def test_small_requests_round_to_512_and_split_one_segment(allocator, backend):
    a = allocator.malloc(1, "s")
    b = allocator.malloc(513, "s")
    assert (a.nbytes, a.size, b.size) == (1, 512, 1024)
    assert b.ptr == a.ptr + 512
    assert list(backend.live.values()) == [2 * MiB]
    check_invariants(allocator, backend, [a, b])


@pytest.mark.parametrize("nbytes, segment_size, block_size", [
    (1 * MiB, 2 * MiB, 1 * MiB),                 # largest small request
    (1 * MiB + 1, 20 * MiB, 1 * MiB + 512),      # 1-10 MiB share 20 MiB segments
    (10 * MiB - 512, 20 * MiB, 10 * MiB - 512),
    (10 * MiB, 10 * MiB, 10 * MiB),              # from 10 MiB: rounded to 2 MiB
    (11 * MiB, 12 * MiB, 12 * MiB),              # rest 1 MiB is not > 1 MiB: no split
    (13 * MiB + 1, 14 * MiB, 14 * MiB),
])
def test_segment_sizes(allocator, backend, nbytes, segment_size, block_size):
    a = allocator.malloc(nbytes, "s")
    assert list(backend.live.values()) == [segment_size]
    assert a.size == block_size
    check_invariants(allocator, backend, [a])


def test_large_split_only_when_the_rest_is_over_1_mib(allocator, backend):
    a = allocator.malloc(9 * MiB, "s")            # a 20 MiB segment, rest 11 MiB: split
    assert a.size == 9 * MiB
    b = allocator.malloc(11 * MiB - 512, "s")     # takes the rest: 512 left, not worth a block
    assert b.ptr == a.ptr + 9 * MiB and b.size == 11 * MiB
    a.release()
    c = allocator.malloc(8 * MiB, "s")            # rest exactly 1 MiB: not split
    assert c.ptr == a.ptr and c.size == 9 * MiB
    c.release()
    d = allocator.malloc(8 * MiB - 512, "s")      # rest 1 MiB + 512 > 1 MiB: split
    assert d.ptr == a.ptr and d.size == 8 * MiB - 512
    assert list(backend.live.values()) == [20 * MiB]
    check_invariants(allocator, backend, [b, d])


def test_best_fit_and_merge_with_both_neighbours(allocator, backend):
    a, b, c, d, e = (allocator.malloc(n, "s") for n in (1024, 2048, 512, 1024, 512))
    b.release()
    d.release()
    d = allocator.malloc(1024, "s")
    assert d.ptr == b.ptr + 2048 + 512                       # best fit, not the first fit
    assert stat(allocator, "inactive_split.all.current") == 2  # b's hole and the tail
    c.release()   # parked beside b's parked block; d's block is allocated again after it
    assert allocator.malloc(2560, "s").ptr == e.ptr + 512    # the listed tail serves first
    settle(allocator)
    allocator._flush_parked()   # what a malloc that no listed block fits does first
    bc = allocator.malloc(2560, "s")                         # b and c merged: an exact hole
    assert bc.ptr == b.ptr
    check_invariants(allocator, backend, [a, bc, d, e])
    for allocation in (a, bc, d, e):
        allocation.release()
    assert stat(allocator, "inactive_split.all.current") == 0   # one free block again
    assert len(allocator._default.free_blocks) == 1
    allocator.empty_cache()
    assert backend.live == {}


def test_merging_restores_the_whole_segment(allocator, backend):
    blocks = [allocator.malloc(4096, "s") for _ in range(8)]
    order = [3, 1, 7, 0, 2, 6, 4, 5]
    for position, index in enumerate(order):
        blocks[index].release()
        check_invariants(allocator, backend,
                         [b for i, b in enumerate(blocks) if i not in order[:position + 1]])
    allocator.empty_cache()   # merges the parked blocks: the segment is whole, so released
    assert backend.live == {}


def test_zero_bytes_and_bad_sizes(allocator, backend):
    empty = allocator.malloc(0, "s")
    assert (empty.ptr, empty.nbytes, empty.size, empty.is_live) == (0, 0, 0, False)
    empty.release()
    assert backend.live == {} and allocator.memory_allocated() == 0
    with pytest.raises(ValueError, match="-1"):
        allocator.malloc(-1, "s")
    with pytest.raises(TypeError, match="1.5"):
        allocator.malloc(1.5, "s")
    with pytest.raises(TypeError, match="bool"):
        allocator.malloc(True, "s")
    with pytest.raises(TypeError, match="hashable"):
        allocator.malloc(16, ["not", "hashable"])
    assert allocator.malloc(np.int64(16), "s").size == 512   # integer-like is fine


def test_release_is_idempotent_and_gc_releases(allocator):
    a = allocator.malloc(100, "s")
    assert a.is_live
    a.release()
    a.release()
    assert not a.is_live and allocator.memory_allocated() == 0
    b = allocator.malloc(100, "s")
    assert allocator.memory_allocated() == 512
    del b
    gc.collect()
    assert allocator.memory_allocated() == 0
    assert "released" in repr(a)


# -- the fast path: parked blocks ---------------------------------------------------------

def test_a_freed_block_is_parked_and_reused_on_its_stream(allocator, backend):
    keep = allocator.malloc(4096, "s")
    a = allocator.malloc(1000, "s")
    b = allocator.malloc(1024, "s")
    a_ptr, b_ptr = a.ptr, b.ptr
    a.release()
    b.release()
    assert {key: [block.ptr for block in stack] for key, stack in parked(allocator).items()} == {
        ("s", 1024): [a_ptr, b_ptr]}
    check_invariants(allocator, backend, [keep])
    again = allocator.malloc(1024, "s")                # the last freed comes back first
    assert again.ptr == b_ptr and again.nbytes == 1024 and again.size == 1024
    other = allocator.malloc(513, "s")                 # 513 rounds to the same 1024
    assert other.ptr == a_ptr
    assert parked(allocator) == {} and allocator.memory_stats()["num_device_alloc"] == 1
    check_invariants(allocator, backend, [keep, again, other])


def test_a_parked_block_is_not_handed_out_on_another_stream(allocator, backend):
    a = allocator.malloc(4096, "A")
    ptr = a.ptr
    a.release()
    assert ("A", 4096) in parked(allocator)
    b = allocator.malloc(4096, "B")                    # same size, other stream: slow path
    assert b.ptr != ptr and len(backend.live) == 2
    assert not parked(allocator)                        # ... which merged the parked block
    check_invariants(allocator, backend, [b])
    b_ptr = b.ptr
    b.release()
    assert allocator.malloc(4096, "A").ptr == ptr      # each stream gets its own block back
    assert allocator.malloc(4096, "B").ptr == b_ptr


def test_no_parked_block_is_handed_out_while_a_capture_routes(allocator, backend):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    eager = allocator.malloc(4096, "S")
    eager_ptr = eager.ptr
    eager.release()
    allocator.begin_allocate_to_pool(pool, "S")
    captured = allocator.malloc(4096, "S")
    assert pool_of(captured) == pool and captured.ptr != eager_ptr
    captured_ptr = captured.ptr
    captured.release()                                  # a graph pool's block: never parked
    assert list(parked(allocator)) == [("S", 4096)]     # the eager block stays parked
    assert captured_ptr in allocator._pools[pool].free_blocks
    allocator.end_allocate_to_pool(pool, "S")
    allocator.begin_allocate_to_pool(pool, "other")     # a capture elsewhere: slow path here
    eager = allocator.malloc(4096, "S")
    assert pool_of(eager) is None and eager.ptr == eager_ptr
    eager.release()
    assert ("S", 4096) in parked(allocator)
    allocator.end_allocate_to_pool(pool, "other")
    allocator.release_pool(pool)
    assert allocator.malloc(4096, "S").ptr == eager_ptr and not parked(allocator)


def test_empty_cache_releases_parked_blocks(allocator, backend):
    small = allocator.malloc(4096, "s")
    large = allocator.malloc(12 * MiB, "s")
    small.release()
    large.release()
    assert len(parked(allocator)) == 2 and allocator.memory_reserved() == 14 * MiB
    allocator.empty_cache()
    assert backend.live == {} and allocator.memory_reserved() == 0 and not parked(allocator)
    assert allocator.memory_stats()["num_device_free"] == 2


def test_oom_retry_merges_parked_blocks_first():
    backend = FakeBackend(limit=22 * MiB)
    allocator = CachingAllocator(backend, 0)
    blocks = [allocator.malloc(5 * MiB, "s") for _ in range(4)]   # one 20 MiB segment
    for block in blocks:
        block.release()                                   # four parked 5 MiB blocks
    whole = allocator.malloc(20 * MiB, "s")               # fits only in the merged segment
    assert whole.ptr == blocks[0].ptr and len(backend.live) == 1
    check_invariants(allocator, backend, [whole])


def _fast_and_slow_sequence(allocator) -> list:
    """Mallocs and frees whose addresses are the same whether a malloc pops a parked block or
    best-fits a merged one; returns memory_stats() after every step."""
    snapshots = []
    live = {}

    def step(name, nbytes=None, stream="s"):
        if nbytes is None:
            live.pop(name).release()
        else:
            live[name] = allocator.malloc(nbytes, stream)
        snapshots.append(allocator.memory_stats())

    for name, nbytes in (("a", 4096), ("b", 1000), ("c", 4096), ("L1", 3 * MiB),
                         ("L2", 3 * MiB), ("L3", 12 * MiB), ("L4", 16 * MiB)):
        step(name, nbytes)               # L3 fits after L2, L4 needs a segment of its own
    for name in ("c", "b", "L3", "L4"):
        step(name)
    step("b", 1000)                      # each at the start of its merged free run
    step("L3", 12 * MiB)
    step("c", 4096)
    step("L4", 16 * MiB)                 # a whole segment, reused whole
    step("L2")
    step("L2", 3 * MiB)                  # an exact hole
    step("a")
    step("a", 4096)
    allocator.reset_peak_memory_stats()
    step("b")
    step("b", 1000)
    for name in ("L1", "L2", "L4", "L3", "b", "c", "a"):
        step(name)
    return snapshots


class CountingAllocator(CachingAllocator):
    """Counts best-fit searches: every malloc that does not pop a parked block makes one."""

    best_fits = 0

    def _best_fit(self, *args):
        self.best_fits += 1
        return super()._best_fit(*args)


class MergingAllocator(CountingAllocator):
    """Merges every parked block before each malloc, so every malloc best-fits the merged
    layout."""

    def malloc(self, nbytes, stream):
        with self._held:
            self._flush_parked()
        return super().malloc(nbytes, stream)


def test_statistics_are_the_same_on_the_fast_and_the_slow_path():
    fast = CountingAllocator(FakeBackend(), 0)
    slow = MergingAllocator(FakeBackend(), 0)
    fast_stats = _fast_and_slow_sequence(fast)
    slow_stats = _fast_and_slow_sequence(slow)
    assert (fast.best_fits, slow.best_fits) == (7, 14)   # 7 of 14 mallocs popped parked blocks
    assert fast_stats == slow_stats
    last = fast_stats[-1]
    assert last["inactive_split.all.peak"] >= 1 and last["allocated_bytes.all.current"] == 0
    assert last["allocated_bytes.all.peak"] == 9 * KiB + 34 * MiB


class RetakeCountingAllocator(CountingAllocator):
    """Counts the mallocs that took back the block freed last (Note [deferred frees])."""

    retakes = 0

    def _retake(self, block, nbytes):
        self.retakes += 1
        return super()._retake(block, nbytes)


def _deferred_free_sequence(allocator) -> tuple[list, dict]:
    """Frees and mallocs with no statistic read in between (so frees stay deferred until the
    next malloc): the addresses handed out and memory_stats() at the end."""
    live, addresses = {}, []

    def malloc(name, nbytes, stream="s"):
        live[name] = allocator.malloc(nbytes, stream)
        addresses.append(live[name].ptr)

    for name, nbytes in (("a", 4096), ("b", 1000), ("c", 4096), ("L", 3 * MiB)):
        malloc(name, nbytes)
    for _ in range(3):          # the eager loop: each result freed, the next takes it back
        del live["c"]
        malloc("c", 4000)      # same rounded size, another request: requested bytes change
    del live["b"]               # pending ...
    del live["a"]               # ... and the one freed last: taken back by this size
    malloc("a2", 4096)
    malloc("b2", 1024)          # the pending free of b was applied first: b's block
    del live["L"]
    malloc("x", 18 * MiB)       # L was pending: applied first, so L's segment serves
    del live["x"]
    malloc("y", 4096, "t")      # another stream: x's free applied, nothing taken back
    del live["c"]
    del live["y"]
    malloc("c2", 4096)          # the last free was on "t": c's parked block serves
    live.clear()
    return addresses, allocator.memory_stats()


def test_deferred_frees_give_the_slow_paths_addresses_and_statistics():
    """A free waits for the allocator's next call, and a malloc takes back the block freed
    last when it served this size on this stream: the same addresses and statistics as
    applying every free at once and best-fitting each malloc, peaks included."""
    fast = RetakeCountingAllocator(FakeBackend(), 0)
    slow = MergingAllocator(FakeBackend(), 0)
    fast_addresses, fast_stats = _deferred_free_sequence(fast)
    slow_addresses, slow_stats = _deferred_free_sequence(slow)
    assert fast.retakes == 4      # the three loop steps and a2
    assert fast_addresses == slow_addresses
    assert fast_stats == slow_stats
    assert fast_stats["allocated_bytes.all.current"] == 0
    assert fast_stats["allocated_bytes.all.peak"] == 18 * MiB + 4096 + 1024 + 4096
    assert fast_stats["requested_bytes.all.peak"] == 18 * MiB + 4096 + 1024 + 4000
    assert fast_stats["segment.all.current"] == fast_stats["num_device_alloc"] == 3  # s, L, t
    assert fast_stats["allocation.all.allocated"] == 12


def test_a_deferred_free_is_applied_before_anything_reads_or_allocates(allocator, backend):
    first = allocator.malloc(MiB, "s")
    del first
    assert allocator._handoffs      # deferred ...
    assert allocator.memory_allocated() == 0 and not allocator._handoffs   # ... until read
    big = allocator.malloc(MiB, "s")
    del big
    other = allocator.malloc(2 * MiB, "s")   # the pending free counts before this malloc
    assert allocator.max_memory_allocated() == 2 * MiB
    del other
    allocator.empty_cache()
    assert backend.live == {} and allocator.memory_reserved() == 0


def test_statistics_stay_exact_across_folds_of_the_log(allocator):
    """Note [statistics log]: thousands of fast mallocs and frees fold in batches; the peak in
    the middle of a batch and the running sums come out as if counted one by one."""
    held = []
    for step in range(5000):
        block = allocator.malloc(1024, "s")
        if step == 2345:   # a peak inside a batch, then back down
            held = [allocator.malloc(1024, "s") for _ in range(7)]
        if step == 2346:
            held.clear()
        del block
    stats = allocator.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["allocated_bytes.all.peak"] == 8 * 1024
    assert stats["allocated_bytes.small_pool.peak"] == 8 * 1024
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 5007
    assert stats["requested_bytes.all.allocated"] == 5007 * 1024
    assert allocator.max_memory_allocated() == 8 * 1024
    allocator.reset_peak_memory_stats()
    assert allocator.max_memory_allocated() == 0


def test_statistics_of_both_pool_classes_stay_exact_across_folds(allocator):
    """Changes of the small and the large pool class interleaved in one log: each class's peak
    and sums, and the total's, come out as if counted one by one, inside a batch too."""
    held = []
    for step in range(3000):
        small, large = allocator.malloc(1024, "s"), allocator.malloc(3 * MiB, "s")
        if step == 1234:   # a large-pool peak inside a batch
            held = [allocator.malloc(3 * MiB, "s") for _ in range(2)]
        if step == 1235:
            held.clear()
        if step == 2500:   # a small-pool peak later, in another batch
            held = [allocator.malloc(1024, "s") for _ in range(5)]
        if step == 2501:
            held.clear()
        del small, large
    stats = allocator.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["allocated_bytes.large_pool.peak"] == 9 * MiB
    assert stats["allocated_bytes.small_pool.peak"] == 6 * 1024
    assert stats["allocated_bytes.all.peak"] == 9 * MiB + 1024
    assert stats["allocation.large_pool.allocated"] == stats["allocation.large_pool.freed"] == 3002
    assert stats["allocation.small_pool.allocated"] == 3005
    assert stats["requested_bytes.all.allocated"] == 3002 * 3 * MiB + 3005 * 1024
    assert stats["allocation.all.peak"] == 7


def test_two_threads_on_the_fast_path():
    backend = FakeBackend(limit=1 << 40)
    allocator = CachingAllocator(backend, 0)
    errors = []

    def work(stream: str):
        try:
            for _ in range(3000):
                first = allocator.malloc(512, stream)
                second = allocator.malloc(3 * MiB, stream)
                del first
                second.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"s{i}",)) for i in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    settle(allocator)
    assert not allocator._handoffs
    check_invariants(allocator, backend, [])
    stats = allocator.memory_stats()
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 12000
    assert stats["num_device_alloc"] == 4                 # a small and a large segment each
    allocator.empty_cache()
    assert backend.live == {}


# -- streams and pools --------------------------------------------------------------------

def test_default_pool_reuses_a_block_only_on_its_stream(allocator, backend):
    a = allocator.malloc(4096, "A")
    ptr = a.ptr
    a.release()
    b = allocator.malloc(4096, "B")
    assert b.ptr != ptr and len(backend.live) == 2     # B got a segment of its own
    assert allocator.malloc(4096, "A").ptr == ptr       # A reuses its block


def test_pool_routing_and_isolation(allocator, backend):
    pool = allocator.new_pool_id()
    assert pool != allocator.new_pool_id() and hash(pool) is not None
    eager = allocator.malloc(4096, "S")
    eager_ptr = eager.ptr
    eager.release()                                   # a free default block on stream S
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    captured = allocator.malloc(4096, "S")
    assert pool_of(captured) == pool and captured.ptr != eager_ptr   # never the default's
    other = allocator.malloc(4096, "T")               # streams not routed: default pool
    assert pool_of(other) is None
    assert allocator.pool_memory_reserved(pool) == 2 * MiB
    allocator.end_allocate_to_pool(pool, "S")
    captured_ptr = captured.ptr
    captured.release()                                # back to the pool only
    again = allocator.malloc(4096, "S")
    assert pool_of(again) is None and again.ptr == eager_ptr
    allocator.begin_allocate_to_pool(pool, "S")
    assert allocator.malloc(4096, "S").ptr == captured_ptr
    allocator.end_allocate_to_pool(pool, "S")
    check_invariants(allocator, backend, [other, again])


def test_routes_stack_and_errors(allocator):
    outer, inner = allocator.new_pool_id(), allocator.new_pool_id()
    allocator.create_pool(outer)
    allocator.create_pool(inner)
    allocator.begin_allocate_to_pool(outer, "S")
    allocator.begin_allocate_to_pool(inner, "S")
    assert pool_of(allocator.malloc(64, "S")) == inner
    allocator.end_allocate_to_pool(inner, "S")
    assert pool_of(allocator.malloc(64, "S")) == outer
    with pytest.raises(RuntimeError, match="not routed"):
        allocator.end_allocate_to_pool(inner, "S")
    allocator.end_allocate_to_pool(outer, "S")
    with pytest.raises(RuntimeError, match=r"\('nope', 1\) is not a live pool"):
        allocator.begin_allocate_to_pool(("nope", 1), "S")
    with pytest.raises(RuntimeError, match="already exists"):
        allocator.create_pool(outer)
    with pytest.raises(ValueError, match="default pool"):
        allocator.create_pool(None)
    with pytest.raises(TypeError, match="hashable"):
        allocator.create_pool([1])
    allocator.create_or_retain_pool(outer)            # live: one more use
    allocator.release_pool(outer)
    allocator.release_pool(outer)
    with pytest.raises(RuntimeError, match="not a live pool"):
        allocator.release_pool(outer)
    assert pool_of(allocator.malloc(64, "S")) is None  # still works


def test_malloc_on_a_stream_routed_to_a_released_pool(allocator, backend):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    allocator.release_pool(pool)
    with pytest.raises(RuntimeError, match="end_allocate_to_pool"):
        allocator.malloc(64, "S")
    allocator.end_allocate_to_pool(pool, "S")
    assert pool_of(allocator.malloc(64, "S")) is None
    assert allocator.pool_memory_reserved(pool) == 0


def test_graphs_sharing_a_pool_reuse_each_others_freed_blocks(allocator, backend):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)                        # graph 1 captures on S1
    allocator.begin_allocate_to_pool(pool, "S1")
    output1 = allocator.malloc(4096, "S1")
    temporary = allocator.malloc(8192, "S1")
    temporary_ptr = temporary.ptr
    temporary.release()
    allocator.end_allocate_to_pool(pool, "S1")
    allocator.retain_pool(pool)                        # graph 2 shares it, on another stream
    allocator.begin_allocate_to_pool(pool, "S2")
    output2 = allocator.malloc(8192, "S2")
    allocator.end_allocate_to_pool(pool, "S2")
    assert output2.ptr == temporary_ptr                # no per-stream segregation in a pool
    assert len(backend.live) == 1
    allocator.release_pool(pool)
    allocator.release_pool(pool)
    assert allocator.pool_memory_reserved(pool) == 2 * MiB   # outputs still alive
    del output1, output2
    gc.collect()
    assert backend.live == {} and allocator.pool_memory_reserved(pool) == 0


def test_release_pool_keeps_memory_of_live_allocations(allocator, backend):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    output = allocator.malloc(4096, "S")
    temporary = allocator.malloc(12 * MiB, "S")
    allocator.end_allocate_to_pool(pool, "S")
    temporary.release()
    assert allocator.pool_memory_reserved(pool) == 14 * MiB   # live pool: kept, free or not
    syncs = backend.syncs
    allocator.release_pool(pool)
    assert backend.syncs == syncs + 1                          # one sync for the release pass
    assert allocator.pool_memory_reserved(pool) == 2 * MiB     # free segment went at once
    assert output.is_live and output.ptr in backend.live
    output_ptr = output.ptr
    del output
    gc.collect()
    assert output_ptr not in backend.live and backend.live == {}
    assert allocator.pool_memory_reserved(pool) == 0
    assert allocator.memory_reserved() == 0
    with pytest.raises(RuntimeError):
        allocator.retain_pool(pool)


def test_dead_pool_releases_wait_while_a_capture_routes(allocator, backend):
    dead, capturing = allocator.new_pool_id(), allocator.new_pool_id()
    allocator.create_pool(dead)
    allocator.begin_allocate_to_pool(dead, "S")
    output = allocator.malloc(4096, "S")
    allocator.end_allocate_to_pool(dead, "S")
    allocator.create_pool(capturing)
    allocator.begin_allocate_to_pool(capturing, "C")   # a capture is under way
    syncs = backend.syncs
    allocator.release_pool(dead)
    output.release()
    assert backend.syncs == syncs and allocator.pool_memory_reserved(dead) == 2 * MiB
    allocator.end_allocate_to_pool(capturing, "C")     # capture over: released now
    assert backend.syncs == syncs + 1 and allocator.pool_memory_reserved(dead) == 0


def test_dead_pool_releases_wait_while_the_garbage_collector_runs(allocator, backend,
                                                                  monkeypatch):
    """Note [no release inside a collection]: a dead pool's last Allocation dying inside a
    collection leaves the release (and its device sync) to the next allocator call."""
    from tensorplay._runtime import allocator as allocator_module
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    output = allocator.malloc(4096, "S")
    allocator.end_allocate_to_pool(pool, "S")
    allocator.release_pool(pool)
    syncs = backend.syncs
    monkeypatch.setattr(allocator_module, "_collecting", True)
    output.release()
    assert backend.syncs == syncs and allocator.pool_memory_reserved(pool) == 2 * MiB
    monkeypatch.setattr(allocator_module, "_collecting", False)
    allocator.malloc(4096, "S").release()               # the next call releases it
    assert backend.syncs == syncs + 1 and allocator.pool_memory_reserved(pool) == 0


def test_dead_pool_with_live_memory_can_be_created_again(allocator):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    output = allocator.malloc(4096, "S")
    free_ptr = allocator.malloc(4096, "S").ptr         # freed at once (no reference)
    allocator.end_allocate_to_pool(pool, "S")
    allocator.release_pool(pool)
    allocator.create_pool(pool)                        # revived: its free blocks serve again
    allocator.begin_allocate_to_pool(pool, "S")
    assert allocator.malloc(4096, "S").ptr == free_ptr
    allocator.end_allocate_to_pool(pool, "S")
    assert output.is_live


def test_empty_cache_never_releases_a_live_pool(allocator, backend):
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    allocator.malloc(4096, "S").release()
    allocator.end_allocate_to_pool(pool, "S")
    allocator.malloc(4096, "S").release()
    assert len(backend.live) == 2
    syncs = backend.syncs
    allocator.empty_cache()
    assert backend.syncs == syncs + 1
    assert allocator.pool_memory_reserved(pool) == 2 * MiB
    assert allocator.pool_memory_reserved(None) == 0
    allocator.empty_cache()                            # nothing to release: no sync
    assert backend.syncs == syncs + 1
    allocator.release_pool(pool)                       # dead now: its free segment goes
    assert backend.live == {}


# -- out of memory ------------------------------------------------------------------------

def test_oom_releases_the_cache_retries_then_raises():
    backend = FakeBackend(limit=16 * MiB)
    allocator = CachingAllocator(backend, 0)
    keep = allocator.malloc(1, "A")
    allocator.malloc(1, "B").release()                 # a cached free segment (stream B)
    big = allocator.malloc(13 * MiB, "A")              # needs the cached segment back
    stats = allocator.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"], backend.syncs) == (1, 0, 1)
    before = {(a.ptr, a.size) for a in (keep, big)}
    with pytest.raises(OutOfMemoryError) as info:
        allocator.malloc(2 * 1024**3, "A")
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value.__cause__, MemoryError)
    message = str(info.value)
    assert message.startswith("out of memory on fake:0: tried to allocate 2,147,483,648 bytes;")
    assert "14,680,576 bytes allocated" in message
    assert "16,777,216 bytes reserved by tensorplay" in message
    assert "0 bytes free on the device" in message
    # the cache was just emptied: advising empty_cache() again would not help
    assert "already released" in message and "empty_cache()" not in message
    assert message.endswith("Free tensors you no longer need, or reduce the batch.")
    assert "graphs" not in message                      # no graph pool holds memory
    stats = allocator.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"]) == (2, 1)
    assert backend.syncs == 1     # the second pass had nothing to release: no sync
    assert {(a.ptr, a.size) for a in (keep, big)} == before
    assert keep.ptr in backend.live and big.ptr in backend.live
    check_invariants(allocator, backend, [keep, big])
    big.release()                                       # and the allocator keeps working
    again = allocator.malloc(12 * MiB, "A")
    assert again.ptr == big.ptr
    check_invariants(allocator, backend, [keep, again])


def test_oom_message_names_the_segment_and_unknown_device_type():
    allocator = CachingAllocator(FakeBackend(limit=4 * MiB, device_type=None), 3)
    with pytest.raises(OutOfMemoryError, match=r"on device:3: tried to allocate 2,097,152 bytes"
                                               r" \(as a new 20,971,520-byte segment\)"):
        allocator.malloc(2 * MiB, "s")


def test_oom_during_capture_does_not_release_or_sync():
    backend = FakeBackend(limit=4 * MiB)
    allocator = CachingAllocator(backend, 0)
    allocator.malloc(1, "A").release()                 # cached
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    with pytest.raises(OutOfMemoryError, match="capture") as info:
        allocator.malloc(3 * MiB, "S")
    assert "call empty_cache() after the capture" in str(info.value)
    stats = allocator.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"], backend.syncs) == (0, 1, 0)
    assert allocator.pool_memory_reserved(None) == 2 * MiB
    assert pool_of(allocator.malloc(1, "S")) == pool   # the capture keeps allocating
    allocator.end_allocate_to_pool(pool, "S")


def test_oom_message_names_memory_held_by_live_graph_pools():
    backend = FakeBackend(limit=24 * MiB)
    allocator = CachingAllocator(backend, 0)
    pool = allocator.new_pool_id()
    allocator.create_pool(pool)
    allocator.begin_allocate_to_pool(pool, "S")
    allocator.malloc(2 * MiB, "S").release()            # a 20 MiB segment the graph keeps
    allocator.end_allocate_to_pool(pool, "S")
    with pytest.raises(OutOfMemoryError) as info:
        allocator.malloc(12 * MiB, "A")
    message = str(info.value)
    assert "Live graphs' pools hold 20,971,520 of the reserved bytes" in message
    assert "reset() the graphs you no longer need" in message
    allocator.release_pool(pool)                         # the graph is gone: its memory too
    assert allocator.malloc(12 * MiB, "A").size == 12 * MiB


# -- statistics ---------------------------------------------------------------------------

def test_stats_keys_and_order(allocator):
    stats = allocator.memory_stats()
    expected = {f"{name}.{pool}.{part}" for name in _allocator._STAT_NAMES
                for pool in ("all", "small_pool", "large_pool")
                for part in ("current", "peak", "allocated", "freed")}
    expected |= {"num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                 "num_device_free", "max_split_size"}
    assert set(stats) == expected and len(_allocator._STAT_NAMES) == 9
    assert list(stats) == sorted(stats)
    assert all(type(value) is int for value in stats.values())
    assert stats["max_split_size"] == -1


def test_stats_by_pool_class(allocator, backend):
    small = allocator.malloc(1000, "s")
    large = allocator.malloc(3 * MiB, "s")
    stats = allocator.memory_stats()
    assert stats["allocated_bytes.small_pool.current"] == 1024
    assert stats["allocated_bytes.large_pool.current"] == 3 * MiB
    assert stats["reserved_bytes.small_pool.current"] == 2 * MiB
    assert stats["reserved_bytes.large_pool.current"] == 20 * MiB
    assert stats["requested_bytes.all.current"] == 1000 + 3 * MiB
    assert stats["inactive_split_bytes.small_pool.current"] == 2 * MiB - 1024
    assert stats["num_device_alloc"] == 2 and stats["segment.all.current"] == 2
    check_invariants(allocator, backend, [small, large])
    del small, large
    gc.collect()
    allocator.empty_cache()
    stats = allocator.memory_stats()
    assert stats["num_device_free"] == 2 and stats["num_sync_all_streams"] == 1
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 2
    assert stats["reserved_bytes.all.freed"] == 22 * MiB


def test_reset_peak_and_accumulated(allocator, backend):
    keep = allocator.malloc(4096, "s")
    allocator.malloc(12 * MiB, "s").release()
    assert allocator.max_memory_allocated() == 4096 + 12 * MiB
    assert allocator.max_memory_reserved() == 14 * MiB
    allocator.empty_cache()
    allocator.reset_peak_memory_stats()
    assert allocator.max_memory_allocated() == allocator.memory_allocated() == 4096
    assert allocator.max_memory_reserved() == allocator.memory_reserved() == 2 * MiB
    allocator.reset_accumulated_memory_stats()
    stats = allocator.memory_stats()
    assert all(stats[k] == 0 for k in stats if k.endswith((".allocated", ".freed")))
    assert all(stats[k] == 0 for k in stats if k.startswith("num_"))
    assert stats["allocated_bytes.all.current"] == 4096 and keep.is_live


# -- finalizers and threads ---------------------------------------------------------------

def test_free_from_a_finalizer_inside_an_allocator_call(allocator, backend):
    victims = [allocator.malloc(4096, "s") for _ in range(3)]
    survivor = victims[1]

    def drop_references():   # as a GC pass would, in the middle of the allocator's malloc
        backend.on_malloc = None
        victims.clear()

    backend.on_malloc = drop_references
    fresh = allocator.malloc(1 * MiB, "other")          # needs a segment: runs the hook
    assert allocator.memory_allocated() == survivor.size + fresh.size
    check_invariants(allocator, backend, [survivor, fresh])


def test_finalizer_does_not_wait_for_a_thread_holding_the_allocator(allocator, backend):
    doomed = allocator.malloc(4096, "s")
    inside, go_on = threading.Event(), threading.Event()

    def slow_device():
        inside.set()
        go_on.wait(5)

    backend.on_malloc = slow_device
    holder = threading.Thread(target=lambda: allocator.malloc(2 * MiB, "t"))
    holder.start()
    assert inside.wait(5)
    releaser = threading.Thread(target=doomed.release)
    releaser.start()
    releaser.join(2)
    assert not releaser.is_alive(), "release() waited for the allocator's lock"
    backend.on_malloc = None
    go_on.set()
    holder.join(5)
    assert allocator.memory_allocated() == 0 and not allocator._handoffs


def test_two_threads_malloc_and_free():
    backend = FakeBackend(limit=1 << 40)
    allocator = CachingAllocator(backend, 0)
    kept: dict[str, list] = {}
    errors = []

    def work(stream: str, seed: int):
        try:
            rng = np.random.default_rng(seed)
            live = []
            for _ in range(1500):
                if live and rng.random() < 0.5:
                    live.pop(int(rng.integers(len(live)))).release()
                else:
                    live.append(allocator.malloc(int(rng.integers(1, 3 * MiB)), stream))
            kept[stream] = live
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"s{i}", i)) for i in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)   # switch threads often: inside the allocator too
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    live = [a for allocations in kept.values() for a in allocations]
    check_invariants(allocator, backend, live)
    for allocation in live:
        allocation.release()
    allocator.empty_cache()
    assert backend.live == {} and allocator.memory_allocated() == 0


# -- random sequences ---------------------------------------------------------------------

_SIZES = st.one_of(st.integers(1, 8 * KiB), st.integers(1, 1 * MiB),
                   st.integers(1 * MiB + 1, 12 * MiB),
                   st.sampled_from([512, 1 * MiB, 2 * MiB, 10 * MiB]))
_STREAMS = st.sampled_from(["s0", "s1", "s2"])


class AllocatorMachine(RuleBasedStateMachine):
    """Random malloc/free/pool/route/empty_cache sequences against a 48 MiB fake device."""

    def __init__(self):
        super().__init__()
        self.backend = FakeBackend(limit=48 * MiB)
        self.allocator = CachingAllocator(self.backend, 0)
        self.live: list[Allocation] = []
        self.pools: dict[tuple, int] = {}      # live pools -> use count
        self.routes: dict[str, list] = {}

    def _routed(self) -> set:
        return {pool for routes in self.routes.values() for pool in routes}

    @rule(nbytes=_SIZES, stream=_STREAMS)
    def malloc(self, nbytes, stream):
        routes = self.routes.get(stream)
        expected = routes[-1] if routes else None
        try:
            allocation = self.allocator.malloc(nbytes, stream)
        except OutOfMemoryError:
            return
        assert pool_of(allocation) == expected
        if expected is None:
            assert allocation._cell[0].segment.stream_key == stream
        assert allocation.nbytes == nbytes and allocation.size >= nbytes
        self.live.append(allocation)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), by_gc=st.booleans())
    def free(self, data, by_gc):
        allocation = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        if not by_gc:
            allocation.release()
        del allocation

    @rule()
    def create_pool(self):
        pool = self.allocator.new_pool_id()
        self.allocator.create_pool(pool)
        self.pools[pool] = 1

    @precondition(lambda self: self.pools)
    @rule(data=st.data())
    def retain_pool(self, data):
        pool = data.draw(st.sampled_from(sorted(self.pools)))
        self.allocator.retain_pool(pool)
        self.pools[pool] += 1

    @precondition(lambda self: set(self.pools) - self._routed())
    @rule(data=st.data())
    def release_pool(self, data):
        pool = data.draw(st.sampled_from(sorted(set(self.pools) - self._routed())))
        self.allocator.release_pool(pool)
        self.pools[pool] -= 1
        if not self.pools[pool]:
            del self.pools[pool]

    @precondition(lambda self: self.pools)
    @rule(data=st.data(), stream=_STREAMS)
    def begin_route(self, data, stream):
        pool = data.draw(st.sampled_from(sorted(self.pools)))
        self.allocator.begin_allocate_to_pool(pool, stream)
        self.routes.setdefault(stream, []).append(pool)

    @precondition(lambda self: self.routes)
    @rule(data=st.data())
    def end_route(self, data):
        stream = data.draw(st.sampled_from(sorted(self.routes)))
        pool = self.routes[stream].pop()
        if not self.routes[stream]:
            del self.routes[stream]
        self.allocator.end_allocate_to_pool(pool, stream)

    @rule()
    def empty_cache(self):
        self.allocator.empty_cache()
        for pool in [None, *self.allocator._pools]:
            if pool is None or pool not in self.pools:
                owner = self.allocator._default if pool is None else self.allocator._pools[pool]
                assert not [s for s in owner.segments.values() if s.is_free()]

    @invariant()
    def consistent(self):
        check_invariants(self.allocator, self.backend, self.live)
        if not self.allocator._routes:   # dead pools keep only memory that tensors use
            assert not self.allocator._dead_free_segments()

    def teardown(self):
        self.live.clear()
        gc.collect()
        for stream, routes in self.routes.items():
            for pool in reversed(routes):
                self.allocator.end_allocate_to_pool(pool, stream)
        for pool, uses in self.pools.items():
            for _ in range(uses):
                self.allocator.release_pool(pool)
        self.allocator.empty_cache()
        assert self.allocator.memory_reserved() == 0 and self.allocator.memory_allocated() == 0
        assert self.backend.live == {} and not self.allocator._pools


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=50, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])


# -- the process-wide allocators ----------------------------------------------------------

def test_device_allocator(monkeypatch):
    from tensorplay._runtime import select as backends

    monkeypatch.setattr(_allocator, "_allocators", {})
    monkeypatch.setattr(backends._selection, "accelerator", None)
    monkeypatch.setattr(backends._selection, "failure", None)
    with pytest.raises(RuntimeError, match="no accelerator was built"):
        _allocator.device_allocator(0)

    class Accelerator(FakeBackend):
        def device_count(self):
            return 2

    accelerator = Accelerator()
    monkeypatch.setattr(backends._selection, "accelerator", accelerator)
    first = _allocator.device_allocator(1)
    assert first is _allocator.device_allocator(1) and first is not _allocator.device_allocator(0)
    assert first._backend is accelerator and first._index == 1
    with pytest.raises(ValueError, match=re.escape("index 2 is out of range")):
        _allocator.device_allocator(2)
    with pytest.raises(TypeError, match="'0'"):
        _allocator.device_allocator("0")
    with pytest.raises(TypeError, match="bool"):
        _allocator.device_allocator(True)              # never allocator 1, though True == 1


def test_the_pool_lifetime_note_is_there():
    assert "Note [graph pool lifetime]" in _allocator.__doc__


def test_a_slow_malloc_keeps_the_parked_blocks_while_the_listed_ones_serve(allocator, backend):
    a = allocator.malloc(4096, "s")
    a_ptr = a.ptr
    a.release()
    other = allocator.malloc(1000, "s")          # no parked block of its size: the listed tail
    assert other.ptr == a_ptr + 4096
    assert ("s", 4096) in parked(allocator)      # ... and the exact-size cache is kept
    assert allocator.malloc(4096, "s").ptr == a_ptr
    check_invariants(allocator, backend, [other])


def test_a_large_block_is_parked_under_the_size_its_request_asks_for(allocator, backend,
                                                                     monkeypatch):
    """A large block keeps a rest of up to 1 MiB unsplit; parked under its own size, the same
    request would miss it every time (and merge every parked block)."""
    request = 19 * MiB + 512 * 1024                  # a 20 MiB segment; the rest stays on
    a = allocator.malloc(request, "s")
    ptr = a.ptr
    assert a.size == 20 * MiB
    a.release()
    assert ("s", request) in parked(allocator)
    check_invariants(allocator, backend, [])
    slow = []
    best_fit = allocator._best_fit
    monkeypatch.setattr(allocator, "_best_fit", lambda *args: slow.append(args) or
                        best_fit(*args))
    again = allocator.malloc(request, "s")
    assert again.ptr == ptr and again.size == 20 * MiB and not slow
    assert allocator.memory_stats()["num_device_alloc"] == 1
    check_invariants(allocator, backend, [again])


def test_a_parked_miss_merges_only_the_parked_blocks_that_could_serve(allocator, backend):
    """The blocks parked for smaller requests stay parked: merging them all would reshuffle
    the blocks a repeating loop's mallocs hit."""
    a = allocator.malloc(4 * MiB, "s")               # one 20 MiB segment: 4 + 6 + 10
    b = allocator.malloc(6 * MiB, "s")
    c = allocator.malloc(9 * MiB + 512 * 1024, "s")  # takes the 10 MiB tail whole
    a_ptr, b_ptr = a.ptr, b.ptr
    assert len(backend.live) == 1 and not allocator._default.free_blocks
    a.release()
    b.release()
    d = allocator.malloc(5 * MiB, "s")               # no block parked for 5 MiB, none listed
    assert d.ptr == b_ptr and len(backend.live) == 1
    assert [block.ptr for block in parked(allocator)[("s", 4 * MiB)]] == [a_ptr]
    check_invariants(allocator, backend, [c, d])
    d.release()
    e = allocator.malloc(9 * MiB, "s")    # none parked could serve alone: all merge, and do
    assert e.ptr == a_ptr and not parked(allocator) and len(backend.live) == 1
    check_invariants(allocator, backend, [c, e])


def test_parked_blocks_merge_before_a_new_segment_is_asked_for(allocator, backend):
    whole = allocator.malloc(12 * MiB, "s")      # a segment of its own, no tail
    ptr = whole.ptr
    whole.release()
    smaller = allocator.malloc(11 * MiB, "s")    # no listed block: the parked one is merged
    assert smaller.ptr == ptr and allocator.memory_stats()["num_device_alloc"] == 1
    assert not parked(allocator)
