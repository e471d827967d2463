"""``tp.cond`` and ``tp.switch`` where the backend records no two-body if node and no switch
node (a CUDA driver older than 12.8): the else branch is a second if node on the negated
predicate, the cases a chain of if nodes. Forced here by hiding "if_else" and "switch" from the
backend's ``conditional_kinds`` capability."""

import pytest

import tensorplay as tp
from tensorplay._runtime.select import require_accelerator
from support import accelerator_device, requires_accelerator, to_numpy

pytestmark = requires_accelerator


@pytest.fixture
def without_if_else(monkeypatch):
    backend = require_accelerator()
    monkeypatch.setattr(backend, "conditional_kinds", frozenset({"if", "while"}),
                        raising=False)   # a CUDA 12.7 driver's
    assert not tp.accelerator.Graph.supports_if_else_nodes()
    assert not tp.accelerator.Graph.supports_switch_nodes()
    return accelerator_device(0)


def test_cond_falls_back_to_two_if_nodes(without_if_else, tmp_path):
    dev = without_if_else
    pred = tp.ones(1, dtype=tp.bool, device=dev)
    x = tp.tensor([2.0, 4.0], device=dev)

    def true_fn(a):
        pred.fill_(False)   # the false branch must still see the predicate as it was
        return a * 3

    g = tp.accelerator.Graph()
    with g:
        out = tp.cond(pred.reshape(()), true_fn, lambda a: a - 1, (x,))
    g.replay()
    assert to_numpy(out).tolist() == [6.0, 12.0]
    g.replay()   # true_fn left pred False
    assert to_numpy(out).tolist() == [1.0, 3.0]
    if dev.startswith("sim"):
        path = tmp_path / "cond.dot"
        g.debug_dump(path)
        text = path.read_text()
        assert text.count("cluster_") == 2 and "if_else" not in text


def test_the_two_body_node_is_refused_plainly(without_if_else):
    g = tp.accelerator.Graph()
    with g:
        with pytest.raises(RuntimeError, match="records no two-body if node"):
            g.begin_capture_to_if_else_node(tp.ones(1, dtype=tp.bool, device=without_if_else))


def test_switch_falls_back_to_a_chain_of_if_nodes(without_if_else, tmp_path):
    dev = without_if_else
    index = tp.zeros((), dtype=tp.int64, device=dev)
    x = tp.tensor([2.0], device=dev)
    g = tp.accelerator.Graph()
    with g:
        out = tp.switch(index, [lambda a: a + 1, lambda a: a * 10, lambda a: a - 5], (x,))
    for value, want in [(0, 3.0), (1, 20.0), (2, -3.0), (9, -3.0), (-1, 3.0)]:
        index.fill_(value)
        g.replay()
        assert out.item() == want
    if dev.startswith("sim"):
        path = tmp_path / "switch.dot"
        g.debug_dump(path)
        assert path.read_text().count("cluster_") == 3
    with g.__class__() as g2:
        with pytest.raises(RuntimeError, match="records no switch node"):
            g2.begin_capture_to_switch_node(index, 2)
