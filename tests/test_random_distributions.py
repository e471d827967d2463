"""The random functions built on the philox fills: rand_like/randn_like/randint_like, bernoulli
(function and method), exponential_, geometric_, randperm. On every device, identical for the same
seed on cpu and the accelerator (the draws are the same philox numbers), and inside a captured
graph fresh on every replay."""

import math
import re

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


# -- multinomial and poisson ---------------------------------------------------------------------
def _chi_square(counts, expected) -> float:
    counts, expected = np.asarray(counts, dtype=float), np.asarray(expected, dtype=float)
    return float(((counts - expected) ** 2 / expected).sum())


def _chi_square_bound(df: int) -> float:
    """Far in the upper tail (about 6 standard deviations): with fixed seeds the tests are
    deterministic, and a biased sampler over this many draws lands well beyond it."""
    return df + 6 * math.sqrt(2 * df)


def test_multinomial_shapes_dtypes_and_the_method(device):
    tp.manual_seed(0)
    w = tp.tensor([1.0, 2.0, 3.0], device=device)
    for replacement in (False, True):
        s = tp.multinomial(w, 2, replacement)
        assert s.dtype == tp.int64 and s.shape == (2,) and str(s.device) == str(w.device)
    rows = tp.ones(4, 5, dtype=tp.float64, device=device)
    assert rows.multinomial(3).shape == (4, 3)
    assert rows.multinomial(7, replacement=True).shape == (4, 7)
    assert tp.multinomial(tp.ones(0, 5, device=device), 2).shape == (0, 2)
    for dtype in (tp.float16, tp.float32):
        values = to_numpy(tp.multinomial(tp.tensor([0.0, 1.0, 0.0], dtype=dtype, device=device),
                                         5, replacement=True))
        assert values.tolist() == [1] * 5
    g = tp.Generator(device).manual_seed(4)
    first = to_numpy(tp.multinomial(rows, 5, generator=g))
    g.manual_seed(4)
    np.testing.assert_array_equal(to_numpy(rows.multinomial(5, generator=g)), first)


def test_multinomial_without_replacement_draws_distinct_positive_categories_first(device):
    tp.manual_seed(1)
    w = tp.tensor([[0.0, 10.0, 3.0, 0.0, 1e-30], [5.0, 0.0, 0.0, 1.0, 2.0]], device=device)
    for _ in range(20):
        s = to_numpy(tp.multinomial(w, 5))
        for row, weights in zip(s, to_numpy(w)):
            assert sorted(row.tolist()) == [0, 1, 2, 3, 4]
            positives = int((weights > 0).sum())
            assert np.all(weights[row[:positives]] > 0) and np.all(weights[row[positives:]] == 0)
    # zero-weight categories follow in uniformly random order (not by index)
    tails = {tuple(to_numpy(tp.multinomial(tp.tensor([0.0, 1.0, 0.0, 0.0], device=device),
                                           4))[1:]) for _ in range(60)}
    assert len(tails) == 6


def test_multinomial_with_replacement_matches_the_weights(device):
    tp.manual_seed(2)
    weights = np.array([1.0, 0.0, 2.0, 3.0, 4.0, 0.0])
    n = 60000
    s = to_numpy(tp.multinomial(tp.tensor(weights, device=device), n, replacement=True))
    counts = np.bincount(s, minlength=6)
    assert counts[1] == 0 and counts[5] == 0
    p = weights / weights.sum()
    assert _chi_square(counts[p > 0], n * p[p > 0]) < _chi_square_bound(3)
    # one sample per row with replacement (the race) and many rows at once
    rows = tp.tensor(np.tile(weights, (n, 1)), dtype=tp.float32, device=device)
    counts = np.bincount(to_numpy(tp.multinomial(rows, 1, True))[:, 0], minlength=6)
    assert counts[1] == 0 and counts[5] == 0
    assert _chi_square(counts[p > 0], n * p[p > 0]) < _chi_square_bound(3)


def test_multinomial_without_replacement_is_sequential_sampling(device):
    tp.manual_seed(3)
    p = np.array([0.1, 0.2, 0.3, 0.4])
    n = 40000
    pairs = to_numpy(tp.multinomial(tp.tensor(np.tile(p * 7, (n, 1)), device=device), 2))
    assert np.all(pairs[:, 0] != pairs[:, 1])
    counts = np.zeros((4, 4))
    np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
    expected = np.array([[p[i] * p[j] / (1 - p[i]) if i != j else 0 for j in range(4)]
                         for i in range(4)]) * n
    off = ~np.eye(4, dtype=bool)
    assert _chi_square(counts[off], expected[off]) < _chi_square_bound(11)
    # the whole order of a 3-category row: P(i, j, k) = p_i p_j / (1 - p_i)
    q = np.array([0.5, 0.3, 0.2])
    orders = to_numpy(tp.multinomial(tp.tensor(np.tile(q, (n, 1)), device=device), 3))
    keys = orders[:, 0] * 9 + orders[:, 1] * 3 + orders[:, 2]
    import itertools
    perms = list(itertools.permutations(range(3)))
    counts = [int((keys == a * 9 + b * 3 + c).sum()) for a, b, c in perms]
    expected = [n * q[a] * q[b] / (1 - q[a]) for a, b, _ in perms]
    assert sum(counts) == n and _chi_square(counts, expected) < _chi_square_bound(5)


def test_multinomial_errors(device):
    w = tp.tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        tp.multinomial([1.0, 2.0], 1)
    with pytest.raises(TypeError, match="'num_samples' must be int, not float"):
        tp.multinomial(w, 1.0)
    with pytest.raises(RuntimeError, match="prob_dist must be 1 or 2 dim, got 3"):
        tp.multinomial(tp.ones(2, 2, 2, device=device), 1)
    with pytest.raises(RuntimeError, match="prob_dist must be 1 or 2 dim, got 0"):
        tp.multinomial(tp.tensor(1.0, device=device), 1)
    with pytest.raises(RuntimeError, match="only supports floating-point dtypes for input, got: "
                                           "int64"):
        tp.multinomial(tp.tensor([1, 2], device=device), 1)
    with pytest.raises(RuntimeError, match="cannot sample n_sample <= 0 samples, got "
                                           "num_samples=0"):
        tp.multinomial(w, 0)
    with pytest.raises(RuntimeError, match=r"n_sample > prob_dist.size\(-1\) samples without "
                                           r"replacement: num_samples=3 > 2"):
        tp.multinomial(w, 3)
    with pytest.raises(RuntimeError, match="no categories"):
        tp.multinomial(tp.ones(2, 0, device=device), 1, True)
    with pytest.raises(TypeError, match="generator must be a tensorplay.Generator"):
        tp.multinomial(w, 1, generator=0)
    assert tp.multinomial(w, 3, replacement=True).shape == (3,)


def test_multinomial_checks_the_weights_on_cpu():
    fast = "probability tensor contains either `inf`, `nan` or element < 0"
    for bad in ([1.0, -1.0], [1.0, math.inf], [math.nan, 1.0]):
        with pytest.raises(RuntimeError, match=f"{re.escape(fast)} \\(entry [01] is"):
            tp.multinomial(tp.tensor(bad), 1)
    with pytest.raises(RuntimeError, match=r"encountering probability entry < 0: entry 1 of "
                                           r"row 0 is -1.0"):
        tp.multinomial(tp.tensor([[1.0, -1.0]]), 2, True)
    with pytest.raises(RuntimeError, match="encountering probability entry = infinity or NaN"):
        tp.multinomial(tp.tensor([1.0, math.nan]), 2, True)
    for replacement in (False, True):
        with pytest.raises(RuntimeError, match=r"sum of probabilities <= 0\): row 1 is all "
                                               r"zeros"):
            tp.multinomial(tp.tensor([[1.0, 0.0], [0.0, 0.0]]), 2, replacement)


@requires_accelerator
def test_multinomial_on_an_accelerator_samples_invalid_rows_without_reading_them():
    dev = accelerator_device()
    tp.manual_seed(4)
    w = tp.tensor([[math.nan, -1.0, 2.0, 0.0], [1.0, math.inf, 5.0, math.inf],
                   [0.0, 0.0, 0.0, 0.0]], device=dev)
    s = to_numpy(tp.multinomial(w, 400, replacement=True))
    assert set(s[0].tolist()) == {2} and set(s[1].tolist()) == {1, 3}
    assert set(s[2].tolist()) == {0, 1, 2, 3}
    s = to_numpy(tp.multinomial(w, 2))
    assert s[0, 0] == 2 and set(s[1].tolist()) == {1, 3}


def _poisson_pmf(rate: float, k: np.ndarray) -> np.ndarray:
    return np.exp(-rate + k * math.log(rate) - np.array([math.lgamma(x + 1) for x in k]))


def test_poisson_mean_variance_and_dtype(device):
    tp.manual_seed(5)
    rates = np.array([0.0, 0.1, 1.0, 4.0, 9.99, 10.0, 25.0, 300.0, 1e5])
    n = 8000
    x = tp.poisson(tp.tensor(np.repeat(rates[:, None], n, axis=1), dtype=tp.float64,
                             device=device))
    assert x.dtype == tp.float64 and x.shape == (9, n)
    values = to_numpy(x)
    assert np.all(values == np.floor(values)) and values.min() >= 0
    assert np.all(values[0] == 0)
    for rate, row in zip(rates[1:], values[1:]):
        assert abs(row.mean() - rate) < 5 * math.sqrt(rate / n), rate
        # the variance of a sample variance is about (rate + 2 rate^2) / n
        assert abs(row.var() - rate) < 5 * math.sqrt((rate + 2 * rate * rate) / n), rate
    for dtype in (tp.float16, tp.float32):
        y = tp.poisson(tp.full((3, 4), 2.5, dtype=dtype, device=device))
        assert y.dtype == dtype and y.shape == (3, 4)
    assert tp.poisson(tp.tensor(3.0, device=device)).shape == ()
    assert tp.poisson(tp.zeros(0, device=device)).shape == (0,)


@pytest.mark.parametrize("rate", [0.7, 3.0, 9.5, 10.0, 15.0, 60.0])
def test_poisson_matches_the_pmf(rate):
    tp.manual_seed(int(rate * 10))
    n = 30000
    values = to_numpy(tp.poisson(tp.full((n,), rate, dtype=tp.float64))).astype(np.int64)
    low, high = max(0, int(rate - 4 * math.sqrt(rate))), int(rate + 4 * math.sqrt(rate)) + 2
    ks = np.arange(low, high)
    pmf = _poisson_pmf(rate, ks)
    counts = [int((values == k).sum()) for k in ks]
    below, above = int((values < low).sum()), int((values >= high).sum())
    cdf_low = _poisson_pmf(rate, np.arange(0, low)).sum() if low else 0.0
    counts += [below, above]
    expected = list(n * pmf) + [n * cdf_low, n * (1 - cdf_low - pmf.sum())]
    keep = [i for i, e in enumerate(expected) if e >= 5]
    merged = sum(c for i, c in enumerate(counts) if i not in keep)
    merged_expected = sum(e for i, e in enumerate(expected) if i not in keep)
    assert merged_expected > 0 or merged == 0
    counts = [counts[i] for i in keep] + ([merged] if merged_expected > 0 else [])
    expected = [expected[i] for i in keep] + ([merged_expected] if merged_expected > 0 else [])
    assert _chi_square(counts, expected) < _chi_square_bound(len(counts) - 1)


def test_poisson_errors(device):
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        tp.poisson(1.0)
    with pytest.raises(RuntimeError, match="floating point tensor of rates, got int64"):
        tp.poisson(tp.tensor([1, 2], device=device))
    with pytest.raises(TypeError, match="generator must be a tensorplay.Generator"):
        tp.poisson(tp.ones(2, device=device), generator=1)
    if device == "cpu":
        for bad in (-1.0, math.nan, math.inf):
            with pytest.raises(RuntimeError, match=f"invalid Poisson rate.*got {bad}"):
                tp.poisson(tp.tensor([1.0, bad]))
    else:
        values = to_numpy(tp.poisson(tp.tensor([-1.0, math.nan, math.inf, 0.0], device=device)))
        assert np.isnan(values[0]) and np.isnan(values[1]) and values[2] == math.inf
        assert values[3] == 0


def test_poisson_with_a_generator(device):
    rates = tp.tensor([0.5, 5.0, 50.0, 500.0] * 4, device=device)
    g = tp.Generator(device).manual_seed(11)
    first = to_numpy(tp.poisson(rates, generator=g))
    second = to_numpy(tp.poisson(rates, g))
    g.manual_seed(11)
    np.testing.assert_array_equal(to_numpy(tp.poisson(rates, generator=g)), first)
    assert not np.array_equal(first, second)


@requires_accelerator
def test_multinomial_and_poisson_agree_on_cpu_and_the_accelerator():
    dev = accelerator_device()
    w = np.abs(np.random.default_rng(0).normal(size=(6, 50)))
    w[:, ::7] = 0
    rates = np.concatenate([np.linspace(0, 12, 40), [30.0, 1e3, 1e6]])
    results = []
    for where in ("cpu", dev):
        tp.manual_seed(9)
        weights = tp.tensor(w, dtype=tp.float32, device=where)
        results.append([to_numpy(tp.multinomial(weights, 20)),
                        to_numpy(tp.multinomial(weights, 100, replacement=True)),
                        to_numpy(weights.multinomial(1, True)),
                        to_numpy(tp.poisson(tp.tensor(rates, device=where)))])
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)


@requires_accelerator
def test_multinomial_and_poisson_replays_equal_eager_calls():
    dev = accelerator_device()
    g = tp.Generator(dev).manual_seed(0)
    weights = tp.tensor([[1.0, 0.0, 3.0, 2.0, 4.0], [0.5, 0.5, 0.0, 0.0, 1.0]], device=dev)
    rates = tp.tensor([0.0, 0.5, 4.0, 12.0, 80.0, 2e4], device=dev)
    out = [tp.zeros(2, 3, dtype=tp.int64, device=dev), tp.zeros(2, 8, dtype=tp.int64,
                                                                 device=dev),
           tp.zeros(6, device=dev)]

    def draw():
        return [tp.multinomial(weights, 3, generator=g),
                weights.multinomial(8, replacement=True, generator=g),
                tp.poisson(rates, generator=g)]
    graph = tp.accelerator.Graph()
    with graph:
        for target, value in zip(out, draw()):
            target.copy_(value)
    g.manual_seed(21)
    replayed = []
    for _ in range(4):
        graph.replay()
        replayed.append([to_numpy(t).copy() for t in out])
    g.manual_seed(21)
    eager = [[to_numpy(t) for t in draw()] for _ in range(4)]
    for ours, theirs in zip(replayed, eager):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(replayed[0][i], replayed[1][i]) for i in range(3))


def test_normal_with_tensor_mean_or_std_draws_per_element(device):
    """PyTorch's tensor forms: the broadcast shape of mean and std, their device and dtype, one
    standard draw per element scaled by std and shifted by mean (the same draws as randn)."""
    tp.manual_seed(3)
    got = tp.normal(tp.full((2, 3), 5.0, device=device), tp.full((3,), 2.0, device=device))
    tp.manual_seed(3)
    want = tp.randn(2, 3, device=device) * 2.0 + 5.0
    assert got.shape == (2, 3) and got.device == tp.device(device)
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=1e-6)
    wide = tp.normal(tp.zeros(4, dtype=tp.float64, device=device))
    assert wide.dtype == tp.float64 and wide.shape == (4,)
    big = tp.normal(3.0, tp.full((20_000,), 0.5, device=device))
    assert abs(float(big.mean()) - 3.0) < 0.02 and abs(float(big.std()) - 0.5) < 0.02


def test_normal_form_errors(device):
    with pytest.raises(TypeError, match="size is required"):
        tp.normal(0.0, 1.0)
    with pytest.raises(TypeError, match="size is taken only with a number mean and std"):
        tp.normal(tp.zeros(2, device=device), 1.0, (2,))
    with pytest.raises(RuntimeError, match="expected a floating point mean tensor, got int64"):
        tp.normal(tp.zeros(2, dtype=tp.int64, device=device), 1.0)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1.0"):
        tp.normal(tp.zeros(2, device=device), -1.0)
