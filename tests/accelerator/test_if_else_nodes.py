"""Two-body if nodes: ``Graph.begin_capture_to_if_else_node`` / ``begin_capture_to_else_body``
(CUDA 12.8's IF node of size 2), and ``tp.cond`` built on them.

Oracle: plain Python over the predicate's value at replay time.
"""

import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, to_numpy

Graph = tp.accelerator.Graph

pytestmark = requires_accelerator


@pytest.fixture(autouse=True)
def _needs_if_else_nodes():
    if tp.accelerator.is_available() and not Graph.supports_if_else_nodes():
        pytest.skip(f"{accelerator_device(0)}'s driver records no two-body if node")


def if_else_graph(dev):
    """A graph adding 1 to ``x`` when ``flag`` is true at replay time, else 10."""
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.zeros(2, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_if_else_node(flag)
        x.add_(1)
        g.begin_capture_to_else_body()
        x.add_(10)
        g.end_capture_to_conditional_node()
    return g, flag, x


def test_each_replay_runs_the_body_the_predicate_picks(dev):
    g, flag, x = if_else_graph(dev)
    g.replay()
    assert to_numpy(x).tolist() == [1.0, 1.0]
    flag.fill_(False)
    g.replay()
    g.replay()
    assert to_numpy(x).tolist() == [21.0, 21.0]
    flag.fill_(True)
    g.replay()
    assert to_numpy(x).tolist() == [22.0, 22.0]


def test_without_an_else_body_nothing_runs_when_false(dev):
    flag = tp.zeros(1, dtype=tp.bool, device=dev)
    x = tp.zeros(1, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_if_else_node(flag)
        x.add_(1)
        g.end_capture_to_conditional_node()
    g.replay()
    assert x.item() == 0.0
    flag.fill_(True)
    g.replay()
    assert x.item() == 1.0


def test_if_else_nodes_nest_in_both_bodies_and_in_while_bodies(dev):
    outer = tp.ones(1, dtype=tp.bool, device=dev)
    inner = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.zeros(1, device=dev)
    count = tp.zeros(1, dtype=tp.int64, device=dev)
    running = tp.ones(1, dtype=tp.bool, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_while_node(running)     # three iterations
        g.begin_capture_to_if_else_node(outer)
        g.begin_capture_to_if_else_node(inner)
        x.add_(1)
        g.begin_capture_to_else_body()
        x.add_(2)
        g.end_capture_to_conditional_node()
        g.begin_capture_to_else_body()
        g.begin_capture_to_if_else_node(inner)
        x.add_(100)
        g.begin_capture_to_else_body()
        x.add_(1000)
        g.end_capture_to_conditional_node()
        g.end_capture_to_conditional_node()
        count.add_(1)
        running.copy_(count < 3)
        g.end_capture_to_conditional_node()
    expected = 0.0
    for o, i in [(True, True), (True, False), (False, True), (False, False)]:
        outer.fill_(o)
        inner.fill_(i)
        count.zero_()
        running.fill_(True)
        g.replay()
        expected += 3 * ({(True, True): 1, (True, False): 2, (False, True): 100,
                          (False, False): 1000}[(o, i)])
        assert x.item() == expected


def test_random_numbers_in_either_body_are_fresh_every_replay(dev):
    flag = tp.zeros(1, dtype=tp.bool, device=dev)
    out = tp.zeros(4, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_if_else_node(flag)
        out.copy_(tp.zeros(4, device=dev))
        g.begin_capture_to_else_body()
        out.copy_(tp.rand(4, device=dev))
        g.end_capture_to_conditional_node()
    g.replay()
    first = to_numpy(out).tolist()
    g.replay()
    assert to_numpy(out).tolist() != first and all(0 <= v < 1 for v in first)


def test_misplaced_else_bodies_are_refused_and_leave_the_capture_usable(dev):
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.zeros(1, device=dev)
    g = Graph()
    with pytest.raises(RuntimeError, match="only inside an open capture"):
        g.begin_capture_to_else_body()
    with g:
        with pytest.raises(RuntimeError, match="no conditional node is open"):
            g.begin_capture_to_else_body()
        g.begin_capture_to_if_node(flag)
        with pytest.raises(RuntimeError, match="not the first body of an if/else node"):
            g.begin_capture_to_else_body()
        g.end_capture_to_conditional_node()
        g.begin_capture_to_while_node(flag)
        with pytest.raises(RuntimeError, match="not the first body of an if/else node"):
            g.begin_capture_to_else_body()
        flag.fill_(False)
        g.end_capture_to_conditional_node()
        g.begin_capture_to_if_else_node(flag)
        g.begin_capture_to_else_body()
        with pytest.raises(RuntimeError, match="not the first body of an if/else node"):
            g.begin_capture_to_else_body()   # one else body per node
        x.add_(5)
        g.end_capture_to_conditional_node()
    flag.fill_(False)
    g.replay()
    assert x.item() == 5.0


def test_the_predicate_is_checked_as_for_if_nodes(dev):
    g = Graph()
    with g:
        with pytest.raises(TypeError):
            g.begin_capture_to_if_else_node(tp.ones(1, device=dev))   # float, not bool
        with pytest.raises((TypeError, ValueError, RuntimeError)):
            g.begin_capture_to_if_else_node(tp.ones(2, dtype=tp.bool, device=dev))


def test_the_debug_dump_shows_one_node_with_an_else_body(dev, tmp_path):
    g, _, _ = if_else_graph(dev)
    path = tmp_path / "if_else.dot"
    g.debug_dump(path)
    text = path.read_text()
    assert "digraph" in text
    if dev.startswith("sim"):
        assert "if_else" in text and 'label="else"' in text


def test_cond_records_one_two_body_node(dev, tmp_path):
    pred = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.tensor([2.0], device=dev)
    g = Graph()
    with g:
        out = tp.cond(pred.reshape(()), lambda a: a * 3, lambda a: a - 1, (x,))
    g.replay()
    assert out.item() == 6.0
    pred.fill_(False)
    g.replay()
    assert out.item() == 1.0
    if dev.startswith("sim"):
        path = tmp_path / "cond.dot"
        g.debug_dump(path)
        text = path.read_text()
        assert text.count("cluster_") == 1 and "if_else" in text


# -- switch nodes ---------------------------------------------------------------------------------
@pytest.fixture
def switch_dev():
    device = accelerator_device(0)
    if not Graph.supports_switch_nodes():
        pytest.skip(f"{device}'s driver records no switch node")
    return device


def switch_graph(dev, cases: int = 3):
    """A graph adding 10**k to ``x`` for case k of ``index`` at replay time."""
    index = tp.zeros((), dtype=tp.int64, device=dev)
    x = tp.zeros(1, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_switch_node(index, cases)
        for k in range(cases):
            if k:
                g.begin_capture_to_next_case()
            x.add_(10.0 ** k)
        g.end_capture_to_conditional_node()
    return g, index, x


def test_a_switch_node_runs_the_case_its_index_picks_and_none_outside(switch_dev):
    g, index, x = switch_graph(switch_dev)
    expected = 0.0
    for value, added in [(0, 1.0), (2, 100.0), (1, 10.0), (3, 0.0), (-1, 0.0), (1 << 40, 0.0)]:
        index.fill_(value)
        g.replay()
        expected += added
        assert x.item() == expected, value


def test_cases_never_begun_are_empty_and_switches_nest(switch_dev):
    dev = switch_dev
    outer = tp.zeros((), dtype=tp.int64, device=dev)
    inner = tp.zeros((), dtype=tp.int64, device=dev)
    x = tp.zeros(1, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_switch_node(outer, 4)      # cases 2 and 3 stay empty
        g.begin_capture_to_switch_node(inner, 2)
        x.add_(1)
        g.begin_capture_to_next_case()
        x.add_(2)
        g.end_capture_to_conditional_node()
        g.begin_capture_to_next_case()
        x.add_(100)
        g.end_capture_to_conditional_node()
    total = 0.0
    for o, i, added in [(0, 0, 1), (0, 1, 2), (1, 0, 100), (2, 1, 0), (3, 0, 0)]:
        outer.fill_(o)
        inner.fill_(i)
        g.replay()
        total += added
        assert x.item() == total


def test_switch_node_errors(switch_dev):
    dev = switch_dev
    index = tp.zeros((), dtype=tp.int64, device=dev)
    g = Graph()
    with pytest.raises(RuntimeError, match="only inside an open capture"):
        g.begin_capture_to_switch_node(index, 2)
    with g:
        with pytest.raises(TypeError, match="int64"):
            g.begin_capture_to_switch_node(index.int(), 2)
        with pytest.raises(ValueError, match="num_cases must be >= 1"):
            g.begin_capture_to_switch_node(index, 0)
        with pytest.raises(TypeError, match="num_cases must be an int"):
            g.begin_capture_to_switch_node(index, 2.0)
        g.begin_capture_to_switch_node(index, 2)
        with pytest.raises(RuntimeError, match="not the first body of an if/else node"):
            g.begin_capture_to_else_body()
        g.begin_capture_to_next_case()
        with pytest.raises(RuntimeError, match="with a case after it"):
            g.begin_capture_to_next_case()
        g.end_capture_to_conditional_node()
        flag = tp.ones(1, dtype=tp.bool, device=dev)
        g.begin_capture_to_if_else_node(flag)
        with pytest.raises(RuntimeError, match="with a case after it"):
            g.begin_capture_to_next_case()
        g.end_capture_to_conditional_node()


def test_tp_switch_records_one_switch_node(switch_dev, tmp_path):
    dev = switch_dev
    index = tp.zeros((), dtype=tp.int64, device=dev)
    x = tp.tensor([2.0], device=dev)
    g = Graph()
    with g:
        out = tp.switch(index, [lambda a: a + 1, lambda a: a * 10, lambda a: a - 5], (x,))
    for value, want in [(0, 3.0), (1, 20.0), (2, -3.0), (7, -3.0), (-4, 3.0)]:  # JAX clamps
        index.fill_(value)
        g.replay()
        assert out.item() == want, value
    if dev.startswith("sim"):
        path = tmp_path / "switch.dot"
        g.debug_dump(path)
        text = path.read_text()
        assert text.count("cluster_") == 1 and "switch" in text and "case 2" in text
