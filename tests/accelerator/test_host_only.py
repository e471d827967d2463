"""A host-only build (``TENSORPLAY_ACCELERATOR=none``): what the accelerator API does without one.

API.md: ``current_accelerator()`` is None, ``is_available()`` False, ``device_count()`` 0,
``synchronize()`` and ``empty_cache()`` do nothing, and every call that needs a device raises
``RuntimeError`` saying that no accelerator was built and how to get one. The tests at the end run
on every build: host tensors and host RNG never need an accelerator.
"""

import numpy as np
import pytest

import tensorplay as tp
from support import to_numpy

requires_host_only = pytest.mark.skipif(
    tp.accelerator.current_accelerator() is not None,
    reason="checks the host-only build (run with TENSORPLAY_ACCELERATOR=none)")

NO_ACCELERATOR = r"(?s)no accelerator.*TENSORPLAY_ACCELERATOR"

accelerator = tp.accelerator
DEVICE_CALLS = {
    "current_device_index": lambda: accelerator.current_device_index(),
    "get_device_capability": lambda: accelerator.get_device_capability(),
    "set_device_index(0)": lambda: accelerator.set_device_index(0),
    "current_stream": lambda: accelerator.current_stream(),
    "Stream": lambda: tp.Stream(),
    "Graph": lambda: accelerator.Graph(),
    "Graph(keep_graph)": lambda: accelerator.Graph(keep_graph=True),
    "graph_pool_handle": lambda: accelerator.graph_pool_handle(),
    "is_current_stream_capturing": lambda: accelerator.is_current_stream_capturing(),
    "get_memory_info": lambda: accelerator.get_memory_info(),
    "memory_allocated": lambda: accelerator.memory_allocated(),
    "max_memory_allocated": lambda: accelerator.max_memory_allocated(),
    "memory_reserved": lambda: accelerator.memory_reserved(),
    "max_memory_reserved": lambda: accelerator.max_memory_reserved(),
    "memory_stats": lambda: accelerator.memory_stats(),
    "memory.memory_allocated": lambda: accelerator.memory.memory_allocated(),
    "reset_peak_memory_stats": lambda: accelerator.reset_peak_memory_stats(),
    "reset_accumulated_memory_stats": lambda: accelerator.reset_accumulated_memory_stats(),
    "random.get_rng_state": lambda: accelerator.random.get_rng_state(),
    "random.get_rng_state_all": lambda: accelerator.random.get_rng_state_all(),
    "random.set_rng_state": lambda: accelerator.random.set_rng_state(
        tp.zeros(16, dtype=tp.uint8)),
    "random.set_rng_state_all": lambda: accelerator.random.set_rng_state_all([]),
    "random.manual_seed": lambda: accelerator.random.manual_seed(1),
    "random.manual_seed_all": lambda: accelerator.random.manual_seed_all(1),
    "random.seed": lambda: accelerator.random.seed(),
    "random.seed_all": lambda: accelerator.random.seed_all(),
    "random.initial_seed": lambda: accelerator.random.initial_seed(),
    "Event().record()": lambda: tp.Event().record(),
    "Event().wait()": lambda: tp.Event().wait(),
}


@requires_host_only
def test_no_accelerator_is_reported():
    assert tp.accelerator.current_accelerator() is None
    assert tp.accelerator.current_accelerator(check_available=True) is None
    assert tp.accelerator.is_available() is False
    assert tp.accelerator.device_count() == 0


@requires_host_only
def test_synchronize_and_empty_cache_do_nothing():
    assert tp.accelerator.synchronize() is None
    assert tp.accelerator.synchronize(None) is None
    assert tp.accelerator.empty_cache() is None
    assert tp.accelerator.memory.empty_cache() is None
    assert tp.accelerator.empty_host_cache() is None


@requires_host_only
def test_negative_set_device_index_is_still_a_no_op():
    assert tp.accelerator.set_device_index(-1) is None
    with tp.accelerator.device_index(-1):
        pass
    with tp.accelerator.device_index(None):
        pass


@requires_host_only
@pytest.mark.parametrize("name", sorted(DEVICE_CALLS))
def test_calls_needing_a_device_say_how_to_get_one(name):
    with pytest.raises(RuntimeError, match=NO_ACCELERATOR):
        DEVICE_CALLS[name]()
    assert to_numpy(tp.ones(2) + 1).tolist() == [2.0, 2.0]


@requires_host_only
def test_an_accelerator_index_for_a_tensor_is_a_value_error_naming_cpu():
    with pytest.raises(ValueError, match="cpu"):
        tp.zeros(2, device=0)
    assert tp.zeros(2).device == tp.device("cpu")


@requires_host_only
def test_top_level_manual_seed_seeds_the_host():
    tp.manual_seed(1234)
    assert tp.initial_seed() == 1234
    first = to_numpy(tp.rand(50))
    tp.manual_seed(1234)
    assert np.array_equal(to_numpy(tp.rand(50)), first)


# -- every build --------------------------------------------------------------------------------

def test_host_tensors_never_need_an_accelerator():
    x = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    assert x.device == tp.device("cpu")
    assert to_numpy(x.transpose(0, 1) @ x).tolist() == [[9.0, 12.0, 15.0], [12.0, 17.0, 22.0],
                                          [15.0, 22.0, 29.0]]
    assert x.cpu() is x
    assert x.sum().item() == 15.0


def test_host_rng_is_reproducible():
    tp.manual_seed(7)
    a = to_numpy(tp.rand(100))
    b = to_numpy(tp.randint(0, 10, (100,)))
    tp.manual_seed(7)
    assert np.array_equal(to_numpy(tp.rand(100)), a)
    assert np.array_equal(to_numpy(tp.randint(0, 10, (100,))), b)
    assert ((a >= 0) & (a < 1)).all()
    assert ((b >= 0) & (b < 10)).all()
