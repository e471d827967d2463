"""Random numbers: per-device generator state and seeds, the same numbers on every device, and
random ops inside graphs (fresh numbers on every replay and every while-body iteration).

Oracles: the cpu generator (same seed, shape and dtype give the same integers and uniforms, and
normals equal to float rounding) and the eager run of the captured code after ``manual_seed``.
"""

import numpy as np
import pytest

import tensorplay as tp
from support import DEVICE_COUNT, DEVICES, accelerator_device, requires_accelerator, \
    requires_devices, supports, to_numpy

random = tp.accelerator.random
Graph = tp.accelerator.Graph


@pytest.fixture(autouse=True)
def _device_zero_current():
    if tp.accelerator.is_available():
        tp.accelerator.set_device_index(0)
    yield
    if tp.accelerator.is_available():
        assert not tp.accelerator.is_current_stream_capturing()
        tp.accelerator.set_device_index(0)


def draws(device, seed):
    """A fixed sequence of draws after ``tp.manual_seed(seed)``, as NumPy arrays."""
    tp.manual_seed(seed)
    return {
        "rand": to_numpy(tp.rand(1000, device=device)),
        "rand_odd": to_numpy(tp.rand(3, 7, device=device)),
        "randint": to_numpy(tp.randint(0, 100, (1001,), device=device)),
        "randint_wide": to_numpy(tp.randint(-(1 << 40), 1 << 40, (5,), device=device)),
        "randint_high": to_numpy(tp.randint(17, (9,), device=device)),
        "rand64": to_numpy(tp.rand(33, dtype=tp.float64, device=device)),
        "uniform_": to_numpy(tp.empty(10, device=device).uniform_(-2.0, 3.0)),
        "randn": to_numpy(tp.randn(999, device=device)),
        "normal": to_numpy(tp.normal(5.0, 2.0, (4, 5), device=device)),
        "normal_": to_numpy(tp.empty(6, dtype=tp.float64, device=device).normal_(1.0, 0.5)),
        "rand_last": to_numpy(tp.rand(1, device=device)),
    }


# -- the same numbers everywhere ------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1234, 2 ** 63 + 5])
def test_same_seed_same_numbers_on_every_device(seed):
    reference = draws("cpu", seed)
    assert ((reference["rand"] >= 0) & (reference["rand"] < 1)).all()
    assert ((reference["randint"] >= 0) & (reference["randint"] < 100)).all()
    for device in DEVICES[1:]:
        got = draws(device, seed)
        for name, want in reference.items():
            assert got[name].dtype == want.dtype, name
            if name.startswith("rand") and not name.startswith("randn"):
                assert np.array_equal(got[name], want), name
            elif name == "uniform_":
                assert np.array_equal(got[name], want), name
            else:
                np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_uniforms_of_every_float_dtype_match_cpu(name):
    dtype = getattr(tp, name)
    tp.manual_seed(99)
    want = to_numpy(tp.rand(257, dtype=dtype))
    assert ((want >= 0) & (want < 1)).all()
    for device in DEVICES[1:]:
        if not supports(device, dtype):
            continue
        tp.manual_seed(99)
        assert np.array_equal(to_numpy(tp.rand(257, dtype=dtype, device=device)), want)


@pytest.mark.parametrize("name", ["int8", "int32", "int64", "uint8"])
def test_integers_of_every_int_dtype_match_cpu(name):
    dtype = getattr(tp, name)
    tp.manual_seed(5)
    want = to_numpy(tp.randint(0, 100, (300,), dtype=dtype))
    for device in DEVICES[1:]:
        if not supports(device, dtype):
            continue
        tp.manual_seed(5)
        assert np.array_equal(to_numpy(tp.randint(0, 100, (300,), dtype=dtype, device=device)),
                              want)


def test_different_seeds_give_different_numbers(device):
    tp.manual_seed(1)
    a = to_numpy(tp.rand(100, device=device))
    tp.manual_seed(2)
    b = to_numpy(tp.rand(100, device=device))
    c = to_numpy(tp.rand(100, device=device))
    assert not np.array_equal(a, b)
    assert not np.array_equal(b, c)


def test_top_level_seed_and_initial_seed(device):
    value = tp.seed()
    assert isinstance(value, int) and tp.initial_seed() == value
    tp.manual_seed(31)
    assert tp.initial_seed() == 31


# -- per-device state ---------------------------------------------------------------------------

def device_forms(index=0):
    name = accelerator_device(index)
    return [index, name, tp.device(name)] + ([None] if index == 0 else [])


@requires_accelerator
@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_get_and_set_rng_state_every_device_form(position):
    form = device_forms(0)[position]
    dev = accelerator_device(0)
    random.manual_seed(3)
    state = random.get_rng_state(form)
    assert isinstance(state, tp.Tensor)
    assert state.dtype == tp.uint8 and state.device == tp.device("cpu")
    first = to_numpy(tp.rand(50, device=dev))
    assert not np.array_equal(to_numpy(random.get_rng_state(form)), to_numpy(state))
    random.set_rng_state(state, form)
    assert np.array_equal(to_numpy(random.get_rng_state(form)), to_numpy(state))
    assert np.array_equal(to_numpy(tp.rand(50, device=dev)), first)


@requires_accelerator
def test_set_rng_state_validates_its_argument():
    state = random.get_rng_state()
    with pytest.raises(TypeError):
        random.set_rng_state([1, 2, 3])
    with pytest.raises(ValueError):
        random.set_rng_state(tp.zeros(3, dtype=tp.uint8))
    with pytest.raises((TypeError, ValueError)):
        random.set_rng_state(tp.zeros(state.numel(), dtype=tp.float32))
    with pytest.raises(ValueError):
        random.get_rng_state(DEVICE_COUNT)
    random.set_rng_state(state)


@requires_accelerator
def test_rng_state_all_round_trip():
    random.manual_seed_all(8)
    states = random.get_rng_state_all()
    assert isinstance(states, list) and len(states) == DEVICE_COUNT
    firsts = [to_numpy(tp.rand(20, device=accelerator_device(i))) for i in range(DEVICE_COUNT)]
    random.set_rng_state_all(states)
    for i in range(DEVICE_COUNT):
        assert np.array_equal(to_numpy(tp.rand(20, device=accelerator_device(i))), firsts[i])
    random.set_rng_state_all(tuple(states))
    with pytest.raises(ValueError):
        random.set_rng_state_all(states + states)
    with pytest.raises(ValueError):
        random.set_rng_state_all([])


@requires_accelerator
def test_accelerator_manual_seed_seeds_the_current_device():
    dev = accelerator_device(0)
    random.manual_seed(77)
    assert random.initial_seed() == 77 and random.initial_seed(0) == 77
    a = to_numpy(tp.rand(30, device=dev))
    random.manual_seed(77)
    assert np.array_equal(to_numpy(tp.rand(30, device=dev)), a)
    tp.manual_seed(77)
    assert np.array_equal(to_numpy(tp.rand(30)), a)


@requires_accelerator
def test_manual_seed_all_and_seed_all():
    random.manual_seed_all(12)
    assert [random.initial_seed(i) for i in range(DEVICE_COUNT)] == [12] * DEVICE_COUNT
    value = random.seed_all()
    assert isinstance(value, int)
    assert [random.initial_seed(i) for i in range(DEVICE_COUNT)] == [value] * DEVICE_COUNT
    value = random.seed()
    assert random.initial_seed() == value
    a = to_numpy(tp.rand(10, device=accelerator_device(0)))
    random.manual_seed(value)
    assert np.array_equal(to_numpy(tp.rand(10, device=accelerator_device(0))), a)


@requires_accelerator
def test_seeds_must_be_ints():
    with pytest.raises(TypeError):
        random.manual_seed(1.5)
    with pytest.raises(TypeError):
        tp.manual_seed("7")
    random.manual_seed(-1)
    tp.manual_seed(2 ** 64 - 1)


def test_integral_float_seeds_are_accepted_as_in_pytorch(device):
    tp.manual_seed(2)
    want = to_numpy(tp.rand(5, device=device))
    tp.manual_seed(2.0)
    assert tp.initial_seed() == 2
    assert np.array_equal(to_numpy(tp.rand(5, device=device)), want)
    with pytest.raises(TypeError, match="seed must be an int or an integral float, got float "
                                        "2.5"):
        tp.manual_seed(2.5)
    with pytest.raises(RuntimeError, match="seed must be in \\[-2\\*\\*63, 2\\*\\*64\\)"):
        tp.manual_seed(2.0 ** 64)
    assert tp.initial_seed() == 2
    tp.manual_seed(np.float64(2.0))
    assert np.array_equal(to_numpy(tp.rand(5, device=device)), want)


@requires_accelerator
def test_accelerator_seeds_take_integral_floats():
    random.manual_seed(5.0)
    assert random.initial_seed() == 5
    random.manual_seed_all(np.float32(6.0))
    assert [random.initial_seed(i) for i in range(DEVICE_COUNT)] == [6] * DEVICE_COUNT
    with pytest.raises(TypeError, match="got float 2.5"):
        random.manual_seed_all(2.5)
    assert random.initial_seed() == 6


@pytest.mark.parametrize("make,message", [
    (lambda d: tp.randint(0, 300, (4,), dtype=tp.int8, device=d),
     "randint: to - 1 = 299 is out of bounds for int8, whose values lie in \\[-128, 127\\]"),
    (lambda d: tp.randint(-1, 5, (4,), dtype=tp.uint8, device=d),
     "randint: from = -1 is out of bounds for uint8"),
    (lambda d: tp.randint(0, 3, (2,), dtype=tp.bool, device=d),
     "randint: to - 1 = 2 is out of bounds for bool"),
    (lambda d: tp.randint(5, 5, (2,), device=d),
     "randint expects 'from' to be less than 'to', but got from=5 >= to=5"),
    (lambda d: tp.zeros(3, dtype=tp.int16, device=d).random_(0, 2 ** 15 + 1),
     "random_: to - 1 = 32768 is out of bounds for int16"),
    (lambda d: tp.zeros(3, device=d).random_(-1, 2 ** 63 + 1),
     "random_: \\[from, to\\) = \\[-1, 9223372036854775809\\) must lie within int64"),
])
def test_randint_bounds_are_checked_at_the_call(device, make, message):
    with pytest.raises(RuntimeError, match=message):
        make(device)
    if device != "cpu":
        tp.accelerator.synchronize()  # nothing was queued that fails later
    values = to_numpy(tp.randint(-128, 128, (64,), dtype=tp.int8, device=device))
    assert values.min() >= -128 and values.max() <= 127


@requires_accelerator
def test_set_rng_state_all_names_the_call_and_what_it_expects():
    states = random.get_rng_state_all()
    for bad, shown in ((3, "got int 3"), (None, "got NoneType None"),
                       (states[0], "got a single Tensor of shape \\(16,\\)")):
        with pytest.raises(TypeError, match="set_rng_state_all\\(\\) expects a sequence of uint8 "
                                            f"state tensors .*one per device.*{shown}"):
            random.set_rng_state_all(bad)
    with pytest.raises(TypeError, match="set_rng_state\\(\\) expects a state: the uint8 Tensor "
                                        ".* got int 3"):
        random.set_rng_state(3)
    # a bad state anywhere in the sequence leaves every device's state as it was
    random.manual_seed_all(9)
    bad = [tp.zeros(16, dtype=tp.uint8)] * (DEVICE_COUNT - 1) + [3]
    with pytest.raises(TypeError, match=f"set_rng_state_all\\(\\) \\(state {DEVICE_COUNT - 1}\\) "
                                        f"expects a state"):
        random.set_rng_state_all(bad)
    assert [random.initial_seed(i) for i in range(DEVICE_COUNT)] == [9] * DEVICE_COUNT
    random.set_rng_state_all(states)
    assert [to_numpy(s).tolist() for s in random.get_rng_state_all()] == \
        [to_numpy(s).tolist() for s in states]


@requires_devices(2)
def test_each_device_has_its_own_generator():
    dev0, dev1 = accelerator_device(0), accelerator_device(1)
    random.manual_seed_all(4)
    state0 = to_numpy(random.get_rng_state(0))
    tp.rand(100, device=dev1)
    assert np.array_equal(to_numpy(random.get_rng_state(0)), state0)
    assert not np.array_equal(to_numpy(random.get_rng_state(1)), state0)
    with tp.accelerator.device_index(1):
        random.manual_seed(55)
        assert random.initial_seed() == 55
    assert random.initial_seed(1) == 55 and random.initial_seed(0) == 4
    tp.manual_seed(21)
    want = to_numpy(tp.rand(64))
    assert np.array_equal(to_numpy(tp.rand(64, device=dev1)), want)
    assert np.array_equal(to_numpy(tp.rand(64, device=dev0)), want)
    random.set_rng_state(random.get_rng_state(0), dev1)
    assert np.array_equal(to_numpy(tp.rand(8, device=dev1)), to_numpy(tp.rand(8, device=dev0)))


# -- inside graphs ----------------------------------------------------------------------------

@requires_accelerator
def test_k_replays_equal_k_eager_runs():
    dev = accelerator_device(0)
    g = Graph()
    with g:
        u = tp.rand(1000, device=dev)
        n = tp.randn(16, device=dev)
        k = tp.randint(0, 1000, (33,), device=dev)
    tp.manual_seed(2024)
    replayed = []
    for _ in range(4):
        g.replay()
        replayed.append((to_numpy(u), to_numpy(n), to_numpy(k)))
    tp.manual_seed(2024)
    for got in replayed:
        want = (to_numpy(tp.rand(1000, device=dev)), to_numpy(tp.randn(16, device=dev)),
                to_numpy(tp.randint(0, 1000, (33,), device=dev)))
        assert np.array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
        assert np.array_equal(got[2], want[2])
    assert not np.array_equal(replayed[0][0], replayed[1][0])
    assert not np.array_equal(replayed[1][0], replayed[2][0])


@requires_accelerator
def test_replays_and_eager_draws_share_one_sequence():
    dev = accelerator_device(0)
    g = Graph()
    with g:
        u = tp.rand(100, device=dev)
    tp.manual_seed(6)
    sequence = []
    g.replay()
    sequence.append(to_numpy(u))
    sequence.append(to_numpy(tp.rand(100, device=dev)))
    g.replay()
    sequence.append(to_numpy(u))
    tp.manual_seed(6)
    for got in sequence:
        assert np.array_equal(got, to_numpy(tp.rand(100, device=dev)))
    tp.manual_seed(6)
    assert np.array_equal(to_numpy(tp.rand(100)), sequence[0])


@requires_accelerator
def test_fresh_numbers_on_every_while_iteration():
    dev = accelerator_device(0)
    acc = tp.zeros(8, device=dev)
    counter = tp.zeros(1, dtype=tp.int64, device=dev)
    running = tp.zeros(1, dtype=tp.bool, device=dev)
    g = Graph()
    with g:
        running.copy_(counter > 0)
        g.begin_capture_to_while_node(running)
        acc.mul_(2).add_(tp.rand(8, device=dev))
        counter.sub_(1)
        running.copy_(counter > 0)
        g.end_capture_to_conditional_node()
    tp.manual_seed(11)
    counter.fill_(5)
    acc.zero_()
    g.replay()
    got = to_numpy(acc)
    tp.manual_seed(11)
    want = tp.zeros(8, device=dev)
    draws_ = []
    for _ in range(5):
        draw = tp.rand(8, device=dev)
        draws_.append(to_numpy(draw))
        want.mul_(2).add_(draw)
    assert np.array_equal(got, to_numpy(want))
    assert len({d.tobytes() for d in draws_}) == 5
    state = random.get_rng_state()
    counter.fill_(3)
    acc.zero_()
    g.replay()
    random.set_rng_state(state)
    want.zero_()
    for _ in range(3):
        want.mul_(2).add_(tp.rand(8, device=dev))
    assert np.array_equal(to_numpy(acc), to_numpy(want))


@requires_accelerator
def test_rng_state_calls_are_capture_unsafe():
    dev = accelerator_device(0)
    s = tp.Stream()
    s.wait_stream(tp.accelerator.current_stream())
    g = Graph()
    g.capture_begin(stream=s)
    with pytest.raises(RuntimeError):
        random.get_rng_state()
    with pytest.raises(RuntimeError):
        g.capture_end()
    assert not tp.accelerator.is_current_stream_capturing()
    assert to_numpy(random.get_rng_state()).dtype == np.uint8
    tp.rand(3, device=dev)


@requires_devices(2)
def test_graph_rng_on_device_one():
    dev1 = accelerator_device(1)
    with tp.accelerator.device_index(1):
        g = Graph()
        with g:
            u = tp.rand(50, device=dev1)
    tp.manual_seed(3)
    got = []
    for _ in range(2):
        g.replay()
        got.append(to_numpy(u))
    tp.manual_seed(3)
    for value in got:
        assert np.array_equal(value, to_numpy(tp.rand(50, device=dev1)))
    tp.manual_seed(3)
    assert np.array_equal(to_numpy(tp.rand(50)), got[0])
