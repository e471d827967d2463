"""Memory queries, PyTorch-named statistics, the cache, out-of-memory, graph pools.

Figures are compared with a baseline taken inside each test (after ``gc.collect()``), so tensors
kept alive elsewhere do not matter; the allocator may round sizes up, so growth is checked as
"at least the bytes asked for".
"""

import gc
import re

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICE_COUNT, accelerator_device, requires_accelerator, requires_devices, \
    to_numpy

pytestmark = requires_accelerator
memory = tp.accelerator.memory
Graph = tp.accelerator.Graph
MIB = 1 << 20

FIGURES = ["memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"]
STAT_KEYS = [
    f"{kind}.all.{field}"
    for kind in ("allocated_bytes", "reserved_bytes", "allocation", "segment")
    for field in ("current", "peak", "allocated", "freed")
] + ["num_alloc_retries", "num_ooms"]


@pytest.fixture(autouse=True)
def _device_zero_current():
    tp.accelerator.set_device_index(0)
    yield
    tp.accelerator.set_device_index(0)



def settle():
    """Drop unreachable tensors and let pending device work finish."""
    gc.collect()
    tp.accelerator.synchronize()
    gc.collect()


def device_forms(index=0):
    name = accelerator_device(index)
    return [index, name, tp.device(name)] + ([None] if index == 0 else [])


# -- the queries ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIGURES)
def test_figures_take_every_device_form(name):
    fn = getattr(tp.accelerator, name)
    assert fn is getattr(memory, name)
    settle()
    values = [fn(form) for form in device_forms(0)]
    assert all(isinstance(v, int) and v >= 0 for v in values)
    assert len(set(values)) == 1
    with pytest.raises(ValueError):
        fn(DEVICE_COUNT)
    with pytest.raises(ValueError):
        fn("cpu")


@pytest.mark.parametrize("name", ["memory_stats", "get_memory_info", "reset_peak_memory_stats",
                                  "reset_accumulated_memory_stats"])
def test_other_functions_take_every_device_form(name):
    fn = getattr(tp.accelerator, name)
    assert fn is getattr(memory, name)
    for form in device_forms(0):
        fn(form)
    with pytest.raises(ValueError):
        fn(DEVICE_COUNT)


def test_memory_stats_use_pytorch_key_names(dev):
    settle()
    stats = tp.accelerator.memory_stats(dev)
    missing = [key for key in STAT_KEYS if key not in stats]
    assert not missing, f"memory_stats lacks {missing}"
    assert all(isinstance(stats[key], int) for key in STAT_KEYS)
    assert stats["allocated_bytes.all.current"] == tp.accelerator.memory_allocated(dev)
    assert stats["reserved_bytes.all.current"] == tp.accelerator.memory_reserved(dev)
    assert stats["allocated_bytes.all.peak"] == tp.accelerator.max_memory_allocated(dev)
    assert stats["reserved_bytes.all.peak"] == tp.accelerator.max_memory_reserved(dev)


def test_allocation_is_counted_and_returns_to_baseline(dev):
    settle()
    base = tp.accelerator.memory_allocated(dev)
    base_count = tp.accelerator.memory_stats(dev)["allocation.all.current"]
    x = tp.empty(MIB // 4, device=dev)            # 1 MiB of float32
    y = tp.zeros(1000, dtype=tp.float64, device=dev)
    assert tp.accelerator.memory_allocated(dev) >= base + MIB + 8000
    assert tp.accelerator.memory_stats(dev)["allocation.all.current"] >= base_count + 2
    assert tp.accelerator.memory_reserved(dev) >= tp.accelerator.memory_allocated(dev)
    assert tp.accelerator.max_memory_allocated(dev) >= tp.accelerator.memory_allocated(dev)
    del x, y
    settle()
    assert tp.accelerator.memory_allocated(dev) == base
    assert tp.accelerator.memory_stats(dev)["allocation.all.current"] == base_count


def test_cpu_tensors_are_not_counted(dev):
    settle()
    base = tp.accelerator.memory_allocated(dev)
    host = tp.ones(MIB)
    assert tp.accelerator.memory_allocated(dev) == base
    del host


def test_reset_peak_memory_stats(dev):
    settle()
    big = tp.empty(4 * MIB, dtype=tp.uint8, device=dev)
    del big
    settle()
    assert tp.accelerator.max_memory_allocated(dev) >= tp.accelerator.memory_allocated(dev) + \
        4 * MIB
    tp.accelerator.reset_peak_memory_stats(dev)
    assert tp.accelerator.max_memory_allocated(dev) == tp.accelerator.memory_allocated(dev)
    assert tp.accelerator.max_memory_reserved(dev) == tp.accelerator.memory_reserved(dev)
    stats = tp.accelerator.memory_stats(dev)
    assert stats["allocated_bytes.all.peak"] == stats["allocated_bytes.all.current"]
    assert stats["reserved_bytes.all.peak"] == stats["reserved_bytes.all.current"]


def test_reset_accumulated_memory_stats(dev):
    settle()
    tp.ones(1000, device=dev)
    settle()
    tp.accelerator.reset_accumulated_memory_stats(dev)
    stats = tp.accelerator.memory_stats(dev)
    for key in ("allocated_bytes.all.allocated", "allocated_bytes.all.freed",
                "allocation.all.allocated", "allocation.all.freed", "num_alloc_retries",
                "num_ooms"):
        assert stats[key] == 0, key
    x = tp.ones(1000, device=dev)
    stats = tp.accelerator.memory_stats(dev)
    assert stats["allocated_bytes.all.allocated"] >= 4000
    assert stats["allocation.all.allocated"] >= 1
    del x
    settle()
    stats = tp.accelerator.memory_stats(dev)
    assert stats["allocated_bytes.all.freed"] >= 4000
    assert stats["allocated_bytes.all.current"] == tp.accelerator.memory_allocated(dev)


def test_empty_cache_returns_unused_blocks_only(dev):
    settle()
    tp.accelerator.empty_cache()
    reserved0 = tp.accelerator.memory_reserved(dev)
    keep = tp.arange(1000, dtype=tp.float32, device=dev)
    big = tp.empty(64 * MIB, dtype=tp.uint8, device=dev)
    big.fill_(1)
    assert tp.accelerator.memory_reserved(dev) >= reserved0 + 64 * MIB
    del big
    settle()
    cached = tp.accelerator.memory_reserved(dev)
    allocated = tp.accelerator.memory_allocated(dev)
    free_before = tp.accelerator.get_memory_info(dev)[0]
    tp.accelerator.empty_cache()
    # the device's free memory is device-wide: other processes on a shared card move it too, so
    # only its change across the one call is read (the 64 MiB block went back to the device)
    assert tp.accelerator.get_memory_info(dev)[0] - free_before >= 48 * MIB
    assert tp.accelerator.memory_allocated(dev) == allocated
    assert tp.accelerator.memory_reserved(dev) <= cached
    assert tp.accelerator.memory_reserved(dev) < reserved0 + 64 * MIB
    assert tp.accelerator.memory_reserved(dev) >= tp.accelerator.memory_allocated(dev)
    assert to_numpy(keep).tolist() == list(range(1000))
    tp.accelerator.memory.empty_cache()
    tp.accelerator.empty_host_cache()


def test_get_memory_info(dev):
    settle()
    tp.accelerator.empty_cache()
    free, total = tp.accelerator.get_memory_info(dev)
    assert isinstance(free, int) and isinstance(total, int)
    assert 0 <= free <= total and total > 0
    big = tp.empty(64 * MIB, dtype=tp.uint8, device=dev)
    assert tp.accelerator.get_memory_info(dev)[0] < free
    del big
    settle()
    tp.accelerator.empty_cache()


# -- stream-ordered reuse -------------------------------------------------------------------------

def test_a_long_eager_loop_without_synchronize_runs_in_bounded_memory(dev):
    # A freed block is handed out again at once on its stream (stream order makes that safe),
    # whether or not work using it is still queued: two 1 MiB tensors are alive at a time.
    settle()
    tp.accelerator.empty_cache()
    allocated = tp.accelerator.memory_allocated(dev)
    reserved = tp.accelerator.memory_reserved(dev)
    tp.accelerator.reset_peak_memory_stats(dev)
    x = tp.zeros(MIB // 4, device=dev)            # 1 MiB of float32
    for _ in range(2000):
        x = x + 1
    assert tp.accelerator.max_memory_allocated(dev) - allocated <= 3 * MIB
    assert tp.accelerator.max_memory_reserved(dev) - reserved <= 4 * MIB
    y = x.clone()
    allocated = tp.accelerator.memory_allocated(dev)
    reserved = tp.accelerator.memory_reserved(dev)
    tp.accelerator.reset_peak_memory_stats(dev)
    for _ in range(500):                          # up to three 1 MiB temporaries at a time
        y = tp.where(y > -1, y, y) * 1
    assert tp.accelerator.max_memory_allocated(dev) - allocated <= 5 * MIB
    assert tp.accelerator.max_memory_reserved(dev) - reserved <= 8 * MIB
    values = to_numpy(x)
    assert values.min() == values.max() == 2000.0
    assert to_numpy(y).tolist() == values.tolist()


def test_a_tensor_freed_with_work_queued_is_reused_in_stream_order(dev):
    settle()
    base = tp.accelerator.memory_allocated(dev)
    x = tp.full((MIB // 4,), 2.0, device=dev)
    y = x * 3
    z = y + 1                                     # reads y, maybe still queued
    del y
    assert tp.accelerator.memory_allocated(dev) == base + 2 * MIB
    reserved = tp.accelerator.memory_reserved(dev)
    w = x * 5                                     # may take y's block
    assert tp.accelerator.memory_reserved(dev) == reserved
    assert set(to_numpy(z).tolist()) == {7.0}
    assert set(to_numpy(w).tolist()) == {10.0}


# -- out of memory --------------------------------------------------------------------------------

def test_out_of_memory(dev):
    settle()
    survivor = tp.arange(256, dtype=tp.int64, device=dev)
    tp.accelerator.synchronize()
    before = tp.accelerator.memory_stats(dev)
    allocated = tp.accelerator.memory_allocated(dev)
    total = tp.accelerator.get_memory_info(dev)[1]
    nbytes = (total // (2 * MIB) + 1) * 2 * MIB
    with pytest.raises(tp.OutOfMemoryError) as caught:
        tp.empty(nbytes, dtype=tp.uint8, device=dev)
    assert isinstance(caught.value, RuntimeError)
    message = str(caught.value)
    assert f"{nbytes:,}" in message, message
    for word in ("allocat", "reserved", "free"):
        assert re.search(word, message, re.IGNORECASE), (word, message)
    assert len(re.findall(r"\d{1,3}(?:,\d{3})+", message)) >= 2, message
    after = tp.accelerator.memory_stats(dev)
    assert after["num_ooms"] == before["num_ooms"] + 1
    assert after["num_alloc_retries"] >= before["num_alloc_retries"] + 1
    assert tp.accelerator.memory_allocated(dev) == allocated
    assert to_numpy(survivor).tolist() == list(range(256))
    fresh = tp.ones(1000, device=dev) * 3
    assert float(to_numpy(fresh.sum())) == 3000.0
    assert to_numpy(survivor * 2).tolist() == [2 * i for i in range(256)]


def test_out_of_memory_inside_a_capture_discards_it(dev):
    settle()
    x = tp.ones(16, device=dev)
    total = tp.accelerator.get_memory_info(dev)[1]
    caller = tp.accelerator.current_stream()
    g = Graph()
    with pytest.raises(tp.OutOfMemoryError):
        with g:
            y = x * 2
            tp.empty(total + 2 * MIB, dtype=tp.uint8, device=dev)
    assert tp.accelerator.current_stream() == caller
    assert not tp.accelerator.is_current_stream_capturing()
    with pytest.raises(RuntimeError):
        g.replay()
    with g:
        y = x * 2
    g.replay()
    assert to_numpy(y).tolist() == [2.0] * 16


def test_out_of_memory_is_exported():
    assert issubclass(tp.OutOfMemoryError, RuntimeError)


# -- graph pools ----------------------------------------------------------------------------------

def test_graph_memory_is_counted_and_released(dev):
    x = tp.zeros(MIB // 4, device=dev)
    settle()
    base = tp.accelerator.memory_allocated(dev)
    g = Graph()
    with g:
        y = x + 1
    assert tp.accelerator.memory_allocated(dev) >= base + MIB
    g.replay()
    assert float(to_numpy(y[:3].sum())) == 3.0
    del g, y
    settle()
    assert tp.accelerator.memory_allocated(dev) == base


def test_reset_with_a_live_output_keeps_its_data(dev):
    x = tp.full((4096,), 2.0, device=dev)
    settle()
    base = tp.accelerator.memory_allocated(dev)
    g = Graph()
    with g:
        y = x * 3
    g.replay()
    g.reset()
    settle()
    assert tp.accelerator.memory_allocated(dev) >= base + 4096 * 4
    others = [tp.full((4096,), -1.0, device=dev) for _ in range(8)]
    assert to_numpy(y).tolist() == [6.0] * 4096
    assert all(to_numpy(o)[0] == -1.0 for o in others)
    del others
    settle()
    assert to_numpy(y).tolist() == [6.0] * 4096
    del y
    settle()
    assert tp.accelerator.memory_allocated(dev) == base


def test_a_live_graph_keeps_its_memory_from_eager_code(dev):
    x = tp.zeros(4096, device=dev)
    g = Graph()
    with g:
        y = x + 5
    del y
    settle()
    others = [tp.full((4096,), 7.0, device=dev) for _ in range(8)]
    for _ in range(3):
        g.replay()
    assert all(np.all(to_numpy(o) == 7.0) for o in others)


def test_shared_pool_graphs_in_capture_order(dev):
    settle()
    base = tp.accelerator.memory_allocated(dev)
    handle = tp.accelerator.graph_pool_handle()
    x = tp.zeros(1024, device=dev)
    graphs, outputs = [], []
    source = x
    for step in range(4):
        g = Graph(pool=handle)
        with g:
            out = source * 2 + step
        graphs.append(g)
        outputs.append(out)
        source = out
    x.fill_(1.0)
    for g in graphs:
        g.replay()
    expected = 1.0
    for step, out in enumerate(outputs):
        expected = expected * 2 + step
        assert to_numpy(out)[0] == expected
    del graphs, outputs, g, out, source, x
    settle()
    assert tp.accelerator.memory_allocated(dev) == base


# -- several devices ------------------------------------------------------------------------------

@requires_devices(2)
def test_figures_are_per_device():
    dev1 = accelerator_device(1)
    settle()
    base0 = tp.accelerator.memory_allocated(0)
    base1 = tp.accelerator.memory_allocated(1)
    x = tp.empty(MIB, dtype=tp.uint8, device=dev1)
    assert tp.accelerator.memory_allocated(0) == base0
    for form in device_forms(1):
        assert tp.accelerator.memory_allocated(form) >= base1 + MIB
        assert tp.accelerator.memory_stats(form)["allocated_bytes.all.current"] >= base1 + MIB
    with tp.accelerator.device_index(1):
        assert tp.accelerator.memory_allocated() >= base1 + MIB
    del x
    settle()
    assert tp.accelerator.memory_allocated(1) == base1
    tp.accelerator.reset_peak_memory_stats(1)
    assert tp.accelerator.max_memory_allocated(1) == tp.accelerator.memory_allocated(1)
    free, total = tp.accelerator.get_memory_info(1)
    assert 0 <= free <= total


@requires_devices(2)
def test_out_of_memory_on_device_one_leaves_device_zero_alone():
    settle()
    keep0 = tp.arange(10, device=accelerator_device(0))
    total = tp.accelerator.get_memory_info(1)[1]
    with pytest.raises(tp.OutOfMemoryError):
        tp.empty(total + 2 * MIB, dtype=tp.uint8, device=accelerator_device(1))
    assert to_numpy(keep0).tolist() == list(range(10))
    assert to_numpy(tp.ones(3, device=accelerator_device(1))).tolist() == [1.0] * 3
