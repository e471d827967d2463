"""Graph footguns: each test shows a surprise and asserts what tensorplay does about it.

In the spirit of tinygrad's JIT footguns: a graph records device work once and replays exactly
that work, which is not always what the Python code seems to say.
"""

import gc

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, requires_devices, to_numpy

pytestmark = requires_accelerator
Graph = tp.accelerator.Graph





def test_the_next_replay_overwrites_every_output(dev):
    """Surprise: an output kept from replay 1 changes at replay 2. Keep a ``clone()``."""
    x = tp.zeros(3, device=dev)
    g = Graph()
    with g:
        y = x + 1
    x.fill_(1.0)
    g.replay()
    kept, cloned = y, y.clone()
    x.fill_(10.0)
    g.replay()
    assert to_numpy(kept).tolist() == [11.0] * 3
    assert to_numpy(cloned).tolist() == [2.0] * 3


def test_capture_records_work_without_running_it(dev):
    """Surprise: after ``with g:`` the in-place op inside has not happened yet."""
    x = tp.ones(2, device=dev)
    g = Graph()
    with g:
        x.mul_(5)
    assert to_numpy(x).tolist() == [1.0, 1.0]
    g.replay()
    assert to_numpy(x).tolist() == [5.0, 5.0]


def test_python_values_are_frozen_at_capture(dev):
    """Surprise: changing a Python number used in the capture changes nothing; put values that
    change into a device tensor."""
    scale = 2.0
    factor = tp.full((1,), 2.0, device=dev)
    x = tp.ones(2, device=dev)
    g = Graph()
    with g:
        frozen = x * scale
        live = x * factor
    scale = 100.0
    factor.fill_(100.0)
    g.replay()
    assert to_numpy(frozen).tolist() == [2.0, 2.0]
    assert to_numpy(live).tolist() == [100.0, 100.0]
    assert scale == 100.0


def test_rebinding_the_input_name_does_not_feed_the_graph(dev):
    """Surprise: ``x = new_tensor`` leaves the graph reading the old buffer; copy into it (or use
    ``stage_and_launch``)."""
    x = tp.zeros(2, device=dev)
    static = x
    g = Graph()
    with g:
        y = x + 1
    x = tp.full((2,), 50.0, device=dev)
    g.replay()
    assert to_numpy(y).tolist() == [1.0, 1.0]
    static.copy_(x)
    g.replay()
    assert to_numpy(y).tolist() == [51.0, 51.0]
    g.stage_and_launch([static], [tp.full((2,), 7.0, device=dev)])
    assert to_numpy(y).tolist() == [8.0, 8.0]


def test_host_work_inside_the_capture_runs_once(dev):
    """Surprise: cpu tensors and Python code in the block run at capture time only."""
    calls = []
    host = tp.zeros(2)
    x = tp.ones(2, device=dev)
    g = Graph()
    with g:
        calls.append("ran")
        host.add_(1)
        y = x * 3
    assert calls == ["ran"] and to_numpy(host).tolist() == [1.0, 1.0]
    for _ in range(3):
        g.replay()
    assert calls == ["ran"] and to_numpy(host).tolist() == [1.0, 1.0]
    assert to_numpy(y).tolist() == [3.0, 3.0]


def test_reading_a_value_inside_the_capture_raises(dev):
    """Surprise: ``item()`` (or ``if tensor:``) cannot work while capturing: the value does not
    exist yet. tensorplay raises, invalidates the capture, and keeps working."""
    x = tp.ones(2, device=dev)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph()
    g.capture_begin(stream=s)
    y = x.sum()
    with pytest.raises(RuntimeError, match="item"):
        y.item()
    with pytest.raises(RuntimeError):
        g.capture_end()
    assert not tp.accelerator.is_current_stream_capturing()
    assert x.sum().item() == 2.0
    with g:
        z = x.sum()
    g.replay()
    assert z.item() == 2.0


def test_data_dependent_python_branches_need_an_if_node(dev):
    """Surprise: ``if tensor:`` inside a capture would need the value; use an if node."""
    x = tp.ones(1, device=dev)
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    with pytest.raises(RuntimeError):
        with Graph():
            if x.sum() > 0:
                x.add_(1)
    assert not tp.accelerator.is_current_stream_capturing()
    g = Graph()
    with g:
        flag.copy_(x.sum() > 0)
        g.begin_capture_to_if_node(flag)
        x.add_(1)
        g.end_capture_to_conditional_node()
    g.replay()
    assert to_numpy(x).tolist() == [2.0]


def test_relaxed_mode_does_not_make_item_legal_in_the_capture(dev):
    """Surprise: "relaxed" only skips the guards; waiting on the capturing stream itself can
    never work, so it still raises."""
    x = tp.ones(2, device=dev)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph(capture_error_mode="relaxed")
    g.capture_begin(stream=s)
    y = x * 2
    with pytest.raises(RuntimeError):
        y.sum().item()
    with pytest.raises(RuntimeError):
        g.capture_end()
    assert not tp.accelerator.is_current_stream_capturing()
    assert (x * 2).sum().item() == 4.0


def test_tensor_from_host_data_inside_a_capture_raises(dev):
    """Surprise: ``tp.tensor([1.0], device=...)`` is a copy from the host, which a capture cannot
    record safely; ``tp.full`` (a kernel) works."""
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph()
    g.capture_begin(stream=s)
    with pytest.raises(RuntimeError, match="host|tensor"):
        tp.tensor([1.0], device=dev)
    with pytest.raises(RuntimeError):
        g.capture_end()
    g2 = Graph()
    with g2:
        y = tp.full((1,), 1.0, device=dev) + 1
    g2.replay()
    assert to_numpy(y).tolist() == [2.0]


def test_capture_needs_a_side_stream(dev):
    """Surprise: ``capture_begin()`` on the default stream fails; ``with g:`` moves to a side
    stream for you."""
    g = Graph()
    with pytest.raises(RuntimeError, match="default stream"):
        g.capture_begin()
    with g:
        y = tp.ones(1, device=dev) + 1
    g.replay()
    assert to_numpy(y).tolist() == [2.0]


def test_a_failed_with_block_is_as_if_never_captured(dev):
    """Surprise (versus PyTorch): the graph is reusable at once, and the caller's stream is
    back."""
    caller = tp.accelerator.current_stream()
    x = tp.ones(2, device=dev)
    g = Graph()
    with pytest.raises(ValueError, match="mine"):
        with g:
            x.add_(1)
            raise ValueError("mine")
    assert tp.accelerator.current_stream() == caller
    with pytest.raises(RuntimeError):
        g.replay()
    with g:
        x.add_(1)
    g.replay()
    assert to_numpy(x).tolist() == [2.0, 2.0]


def test_dropping_an_output_does_not_hand_its_memory_to_eager_code(dev):
    """Surprise: ``del y`` while the graph lives frees nothing a replay writes; eager tensors
    never share memory with the graph."""
    x = tp.zeros(1024, device=dev)
    g = Graph()
    with g:
        y = x + 9
    del y
    gc.collect()
    others = [tp.full((1024,), -3.0, device=dev) for _ in range(16)]
    g.replay()
    g.replay()
    assert all(np.all(to_numpy(o) == -3.0) for o in others)


def test_an_input_made_before_the_capture_stays_allocated_while_the_graph_lives(dev):
    """Surprise (on a GPU a captured kernel holds raw addresses): ``del x`` after capturing
    ``x * 2`` must not hand ``x``'s bytes to eager code, which would then feed every replay.
    The graph keeps the inputs it reads until ``reset()``."""
    x = tp.full((1024,), 3.0, device=dev)
    g = Graph()
    with g:
        y = x * 2
    del x
    gc.collect()
    others = [tp.full((1024,), -5.0, device=dev) for _ in range(16)]
    g.replay()
    assert np.all(to_numpy(y) == 6.0)
    assert all(np.all(to_numpy(o) == -5.0) for o in others)


def test_a_while_loop_started_from_tensors_made_before_the_capture(dev):
    """Surprise: the initial values of a captured ``tp.while_loop`` are read again at every
    replay; made before ``with g:`` and dropped, they must stay the graph's."""
    def build():
        start = tp.zeros(1, dtype=tp.int64, device=dev)
        limit = tp.full((1,), 5, dtype=tp.int64, device=dev)
        g = Graph()
        with g:
            final = tp.while_loop(lambda i: (i < limit).view(()), lambda i: (i + 1,),
                                  (start,))[0]
        return g, final
    g, final = build()
    gc.collect()
    others = [tp.full((1,), 1000, dtype=tp.int64, device=dev) for _ in range(16)]
    g.replay()
    assert to_numpy(final).tolist() == [5]
    assert all(to_numpy(o).tolist() == [1000] for o in others)


def test_reset_lets_go_of_the_inputs_the_graph_kept(dev):
    x = tp.full((1 << 16,), 1.0, device=dev)
    g = Graph()
    with g:
        y = x + 1
    gc.collect()
    held = tp.accelerator.memory_allocated(dev)
    del x
    gc.collect()
    assert tp.accelerator.memory_allocated(dev) == held   # the graph keeps x
    g.reset()
    gc.collect()
    assert tp.accelerator.memory_allocated(dev) <= held - (1 << 18)
    assert y.shape == (1 << 16,)


def test_reset_keeps_the_outputs_you_still_hold(dev):
    """Surprise: ``reset()`` does not invalidate tensors from the capture; their memory lives as
    long as they do."""
    x = tp.full((256,), 4.0, device=dev)
    g = Graph()
    with g:
        y = x.sqrt()
    g.replay()
    g.reset()
    gc.collect()
    for _ in range(8):
        tp.full((256,), 0.0, device=dev)
    assert to_numpy(y).tolist() == [2.0] * 256
    with pytest.raises(RuntimeError):
        g.replay()


def test_random_numbers_are_fresh_on_every_replay(dev):
    """Surprise (versus a frozen constant): a captured ``tp.rand`` draws new numbers each
    replay, and the same numbers as eager code after the same seed."""
    g = Graph()
    with g:
        r = tp.rand(64, device=dev)
    tp.manual_seed(5)
    g.replay()
    first = to_numpy(r)
    g.replay()
    second = to_numpy(r)
    assert not np.array_equal(first, second)
    tp.manual_seed(5)
    assert np.array_equal(to_numpy(tp.rand(64, device=dev)), first)
    assert np.array_equal(to_numpy(tp.rand(64, device=dev)), second)


def test_while_body_rng_differs_per_iteration(dev):
    """Surprise (versus PyTorch, whose offset is fixed per replay): each while iteration draws
    new numbers."""
    counter = tp.full((1,), 2, dtype=tp.int64, device=dev)
    running = tp.ones(1, dtype=tp.bool, device=dev)
    rows = tp.zeros(2, 4, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_while_node(running)
        rows[1].copy_(rows[0])
        rows[0].copy_(tp.rand(4, device=dev))
        counter.sub_(1)
        running.copy_(counter > 0)
        g.end_capture_to_conditional_node()
    g.replay()
    first, second = to_numpy(rows)
    assert not np.array_equal(first, second)


def test_graph_outputs_read_on_another_stream_need_ordering(dev):
    """Surprise: a replay runs on the current stream; another stream must wait for it."""
    caller = tp.accelerator.current_stream()
    x = tp.full((4,), 3.0, device=dev)
    g = Graph()
    with g:
        y = x * 2
    g.replay()
    reader = tp.Stream()
    reader.wait_stream(caller)
    with reader:
        copy = y.clone()
    caller.wait_stream(reader)
    assert to_numpy(copy).tolist() == [6.0] * 4


def test_predicates_must_be_bool(dev):
    """Surprise: an int counter is not a predicate; compare it (``counter > 0``) first."""
    counter = tp.ones(1, dtype=tp.int64, device=dev)
    g = Graph()
    with g:
        with pytest.raises(TypeError):
            g.begin_capture_to_while_node(counter)
        running = counter > 0
        g.begin_capture_to_while_node(running)
        counter.sub_(1)
        running.copy_(counter > 0)
        g.end_capture_to_conditional_node()
    counter.fill_(4)
    g.replay()
    assert to_numpy(counter).tolist() == [0]


def test_rebinding_the_while_predicate_is_refused_at_capture(dev):
    """Surprise: ``flag = counter < 5`` makes a new tensor; the while node keeps reading the old
    ``flag`` and would loop forever. The capture sees that no work of the body writes the
    predicate and refuses the body, saying to update it in place."""
    counter = tp.zeros(1, device=dev)
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    original = flag
    g = Graph()
    with pytest.raises(RuntimeError, match=r"never writes its predicate.*in place.*copy_"), g:
        g.begin_capture_to_while_node(flag)
        counter += 1
        flag = counter < 5
        g.end_capture_to_conditional_node()
    assert not tp.accelerator.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()
    flag = original
    with g:
        g.begin_capture_to_while_node(flag)
        counter += 1
        flag.copy_(counter < 5)
        g.end_capture_to_conditional_node()
    counter.zero_()
    flag.fill_(True)
    g.replay()
    assert to_numpy(counter).tolist() == [5.0]


def test_nested_with_graph_is_refused_and_the_outer_capture_goes_on(dev):
    """Surprise: captures do not nest on one stream. The inner ``with h:`` says so (not that
    some wait is forbidden), and the outer capture is untouched."""
    x = tp.ones(2, device=dev)
    g, h = Graph(), Graph()
    with g:
        y = x + 1
        with pytest.raises(RuntimeError, match="nested capture on one stream is not supported") \
                as caught, h:
            x * 100
        y = y * 3
    assert "synchronize" not in str(caught.value)
    g.replay()
    assert to_numpy(y).tolist() == [6.0, 6.0]
    with h:
        z = y - 1
    h.replay()
    assert to_numpy(z).tolist() == [5.0, 5.0]


def test_empty_cache_inside_a_capture_names_itself(dev):
    """Surprise: ``empty_cache()`` waits for the device, so it is a capture-unsafe call; the
    error names ``empty_cache()``, not a backend internal."""
    x = tp.ones(2, device=dev)
    g = Graph()
    with pytest.raises(RuntimeError, match=r"^empty_cache\(\) waits for the device") as caught, \
            g:
        x + 1
        tp.accelerator.empty_cache()
    assert "synchronize_device" not in str(caught.value)
    tp.accelerator.empty_cache()
    with g:
        y = x + 1
    g.replay()
    assert to_numpy(y).tolist() == [2.0, 2.0]


@requires_devices(2)
def test_a_graph_replays_on_its_own_device(dev):
    """Surprise: the current device does not move a graph; it replays where it was captured."""
    dev1 = accelerator_device(1)
    x = tp.ones(2, device=dev1)
    with tp.accelerator.device_index(1):
        g = Graph()
        with g:
            y = x + 1
    tp.accelerator.set_device_index(0)
    g.replay()
    assert y.device == tp.device(dev1)
    assert to_numpy(y).tolist() == [2.0, 2.0]
