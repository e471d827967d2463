"""The random functions built on the philox fills: rand_like/randn_like/randint_like, bernoulli
(function and method), exponential_, geometric_, randperm. On every device, identical for the same
seed on cpu and the accelerator (the draws are the same philox numbers), and inside a captured
graph fresh on every replay."""

import math

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, to_numpy


def test_like_forms_take_shape_dtype_and_device(device):
    x = tp.ones(4, 3, dtype=tp.float64, device=device)
    for fn in (tp.rand_like, tp.randn_like):
        y = fn(x)
        assert y.shape == (4, 3) and y.dtype == tp.float64 and str(y.device) == str(x.device)
        assert fn(x, dtype=tp.float32).dtype == tp.float32
    r = tp.randint_like(x, 5)
    assert r.dtype == tp.float64 and set(np.unique(to_numpy(r))) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    r = tp.randint_like(tp.zeros(1000, dtype=tp.int32, device=device), 3, 6)
    values = to_numpy(r)
    assert r.dtype == tp.int32 and values.min() >= 3 and values.max() <= 5
    with pytest.raises(TypeError, match="floating dtype"):
        tp.rand_like(tp.zeros(2, dtype=tp.int64, device=device))


def test_bernoulli_draws_zero_or_one_with_the_probability(device):
    tp.manual_seed(0)
    p = tp.full((20000,), 0.3, device=device)
    draws = tp.bernoulli(p)
    values = to_numpy(draws)
    assert draws.dtype == tp.float32 and set(np.unique(values)) <= {0.0, 1.0}
    assert abs(values.mean() - 0.3) < 0.02
    assert to_numpy(tp.bernoulli(tp.zeros(100, device=device))).sum() == 0
    assert to_numpy(tp.bernoulli(tp.ones(100, device=device))).sum() == 100
    x = tp.empty(20000, device=device)
    assert x.bernoulli_(0.75) is x and abs(to_numpy(x).mean() - 0.75) < 0.02
    assert abs(to_numpy(p.bernoulli()).mean() - 0.3) < 0.02
    with pytest.raises(RuntimeError, match=r"expected 0 <= p <= 1, but got p=1.5"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="floating point"):
        tp.bernoulli(tp.ones(3, dtype=tp.int64, device=device))


def test_exponential_and_geometric(device):
    tp.manual_seed(1)
    e = tp.empty(40000, dtype=tp.float64, device=device).exponential_(2.0)
    values = to_numpy(e)
    assert values.min() >= 0 and abs(values.mean() - 0.5) < 0.02
    g = tp.empty(40000, device=device).geometric_(0.25)
    values = to_numpy(g)
    assert values.min() >= 1 and np.all(values == np.floor(values))
    assert abs(values.mean() - 4.0) < 0.15
    with pytest.raises(RuntimeError, match="lambda > 0.0, but found lambda=0"):
        e.exponential_(0)
    with pytest.raises(RuntimeError, match=r"p to be in \(0, 1\), got p=1"):
        g.geometric_(1)
    with pytest.raises(RuntimeError, match="floating point"):
        tp.zeros(2, dtype=tp.int64, device=device).exponential_()


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_randperm_is_a_permutation(device, n):
    perm = tp.randperm(n, device=device)
    assert perm.dtype == tp.int64 and perm.shape == (n,)
    assert sorted(to_numpy(perm).tolist()) == list(range(n))
    assert tp.randperm(n, dtype=tp.int32, device=device).dtype == tp.int32
    with pytest.raises(RuntimeError, match="non-negative int, got -1"):
        tp.randperm(-1, device=device)


@requires_accelerator
def test_same_seed_same_draws_on_cpu_and_the_accelerator():
    dev = accelerator_device()
    results = []
    for where in ("cpu", dev):
        tp.manual_seed(7)
        results.append([to_numpy(tp.randperm(50, device=where)),
                        to_numpy(tp.bernoulli(tp.full((64,), 0.5, device=where))),
                        to_numpy(tp.empty(64, dtype=tp.float64, device=where).exponential_())])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@requires_accelerator
def test_fresh_draws_on_every_replay():
    dev = accelerator_device()
    out = tp.zeros(256, device=dev)
    g = tp.accelerator.Graph()
    with g:
        out.copy_(tp.bernoulli(tp.full((256,), 0.5, device=dev))
                  + tp.randperm(256, device=dev).float() * 0)
    seen = []
    for _ in range(3):
        g.replay()
        seen.append(to_numpy(out).copy())
    assert not np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[1], seen[2])
    assert all(math.isclose(s.mean(), 0.5, abs_tol=0.15) for s in seen)


# -- tp.Generator -------------------------------------------------------------------------------
def test_generator_objects_draw_like_the_default_generator_seeded_alike(device):
    tp.manual_seed(5)
    expected = to_numpy(tp.rand(16, device=device))
    g = tp.Generator(device)
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    np.testing.assert_array_equal(to_numpy(tp.rand(16, device=device, generator=g)), expected)
    state = g.get_state()
    first = to_numpy(tp.randn(8, device=device, generator=g))
    g.set_state(state)
    np.testing.assert_array_equal(to_numpy(tp.randn(8, device=device, generator=g)), first)
    # independent of the default generator
    tp.manual_seed(5)
    tp.rand(16, device=device, generator=tp.Generator(device).manual_seed(9))
    np.testing.assert_array_equal(to_numpy(tp.rand(16, device=device)), expected)
    for draw in (lambda: tp.randint(0, 5, (4,), device=device, generator=g),
                 lambda: tp.normal(0.0, 1.0, (4,), device=device, generator=g),
                 lambda: tp.empty(4, device=device).uniform_(generator=g),
                 lambda: tp.empty(4, device=device).normal_(generator=g),
                 lambda: tp.empty(4, dtype=tp.int64, device=device).random_(0, 9, generator=g),
                 lambda: tp.bernoulli(tp.full((4,), 0.5, device=device), generator=g),
                 lambda: tp.empty(4, device=device).exponential_(generator=g),
                 lambda: tp.empty(4, device=device).geometric_(0.5, generator=g),
                 lambda: tp.randperm(4, device=device, generator=g)):
        assert draw().shape == (4,)
    seed = g.seed()
    assert isinstance(seed, int) and g.initial_seed() == seed
    assert "Generator on" in repr(g)


def test_generator_errors(device):
    with pytest.raises(TypeError, match="generator must be a tensorplay.Generator, got int"):
        tp.rand(2, device=device, generator=3)
    if device != "cpu":
        with pytest.raises(RuntimeError, match="expected a generator of"):
            tp.rand(2, device=device, generator=tp.Generator("cpu"))


@requires_accelerator
def test_a_generator_inside_a_capture_draws_fresh_numbers_per_replay():
    dev = accelerator_device()
    g = tp.Generator(dev).manual_seed(3)
    out = tp.zeros(64, device=dev)
    graph = tp.accelerator.Graph()
    with graph:
        out.copy_(tp.rand(64, device=dev, generator=g))
    graph.replay()
    first = to_numpy(out).copy()
    graph.replay()
    assert not np.array_equal(first, to_numpy(out))
