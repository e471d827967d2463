"""``tp.cond`` where the backend records no two-body if node (a CUDA driver older than 12.8):
the else branch is a second if node on the negated predicate. Forced here by hiding "if_else"
from the backend's ``conditional_kinds`` capability."""

import pytest

import tensorplay as tp
from tensorplay._runtime.select import require_accelerator
from support import accelerator_device, requires_accelerator, to_numpy

pytestmark = requires_accelerator


@pytest.fixture
def without_if_else(monkeypatch):
    backend = require_accelerator()
    monkeypatch.setattr(backend, "conditional_kinds", frozenset({"if", "while"}),
                        raising=False)
    assert not tp.accelerator.Graph.supports_if_else_nodes()
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
