"""tensorplay._philox: known answers, the documented counter mapping, state advance, statistics
and argument errors. Every expected value is recomputed from the raw block function, so these
tests pin the mapping the CUDA kernels must reproduce."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tensorplay import _philox

BF16 = np.dtype(ml_dtypes.bfloat16)
MASK32 = 0xFFFFFFFF

# Random123 known-answer vectors, the three "philox4x32 10" lines of tests/kat_vectors in
# https://github.com/DEShawResearch/random123 (columns: name, rounds, CTR[4], KEY[2],
# EXPECTED[4]); the same lines are quoted by TensorFlow's XLA stateful-random test
# (tensorflow/compiler/tests/stateful_random_ops_test.py, testPhilox4x32, citing
# Random123-Boost libs/random/test/test_philox.cpp). The third is the digits of pi.
KAT_VECTORS = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def make_state(seed, offset=0):
    state = _philox.new_state(np, seed)
    state[1] = offset
    return state


def counter_words(seed, offset, n_counters):
    """Words (n_counters, 4) as Python ints of counters offset.. under key from seed."""
    counters = [(offset + j) % (1 << 64) for j in range(n_counters)]
    lo = np.array([c & MASK32 for c in counters], dtype=np.uint64)
    hi = np.array([c >> 32 for c in counters], dtype=np.uint64)
    words = _philox.philox4x32_10(lo, hi, seed & MASK32, seed >> 32, np)
    return [[int(word[j]) for word in words] for j in range(n_counters)]


def words32(seed, offset, n):
    """Element i = word i % 4 of counter offset + i // 4."""
    blocks = counter_words(seed, offset, -(-n // 4))
    return [blocks[i // 4][i % 4] for i in range(n)]


def words64(seed, offset, n):
    """Element i = words 2*(i%2), 2*(i%2)+1 of counter offset + i // 2, as lo | hi << 32."""
    blocks = counter_words(seed, offset, -(-n // 2))
    pairs = [(blocks[i // 2][2 * (i % 2)], blocks[i // 2][2 * (i % 2) + 1]) for i in range(n)]
    return [lo | hi << 32 for lo, hi in pairs], pairs


# --- the block function ----------------------------------------------------------------------

@pytest.mark.parametrize("counter, key, expected", KAT_VECTORS)
def test_known_answer_vectors(counter, key, expected):
    words = _philox.philox4x32_10(counter[0], counter[1], key[0], key[1], np,
                                  counter[2], counter[3])
    assert all(word.dtype == np.uint32 for word in words)
    assert tuple(int(word) for word in words) == expected


def test_known_answers_vectorised_over_counters():
    columns = list(zip(*(counter for counter, _, _ in KAT_VECTORS)))
    keys = list(zip(*(key for _, key, _ in KAT_VECTORS)))
    counters = [np.array(column, dtype=np.uint32) for column in columns]
    key_lo, key_hi = (np.array(column, dtype=np.uint32) for column in keys)
    words = _philox.philox4x32_10(counters[0], counters[1], key_lo, key_hi, np,
                                  counters[2], counters[3])
    got = [tuple(int(word[j]) for word in words) for j in range(len(KAT_VECTORS))]
    assert got == [expected for _, _, expected in KAT_VECTORS]


def test_block_rejects_words_wider_than_32_bits():
    with pytest.raises(ValueError, match="must be < 2\\*\\*32"):
        _philox.philox4x32_10(1 << 32, 0, 0, 0, np)
    with pytest.raises(ValueError, match="\\[0, 2\\*\\*32\\)"):
        _philox.philox4x32_10(-1, 0, 0, 0, np)
    assert len(_philox.philox4x32_10(0, 0, 0, 0, np)) == 4


# --- state ------------------------------------------------------------------------------------

def test_new_state_is_seed_then_zero_offset():
    state = _philox.new_state(np, (1 << 64) - 1)
    assert state.dtype == np.uint64 and state.shape == (2,)
    assert [int(v) for v in state] == [(1 << 64) - 1, 0]


@pytest.mark.parametrize("seed, error, message", [
    (1.5, TypeError, "seed must be an int, got float"),
    (True, TypeError, "seed must be an int, got bool"),
    (-1, ValueError, "seed must be in \\[0, 2\\*\\*64\\), got -1"),
    (1 << 64, ValueError, "seed must be in"),
])
def test_new_state_rejects_bad_seeds(seed, error, message):
    with pytest.raises(error, match=message):
        _philox.new_state(np, seed)
    assert int(_philox.new_state(np, 7)[0]) == 7


def test_fill_reads_the_state_array_when_it_runs():
    # What a graph replay relies on: a fill uses whatever the state array holds at that moment.
    state = make_state(3)
    state[:] = np.array([0x1234_5678_9ABC_DEF0, 40], dtype=np.uint64)
    out = np.empty(8, dtype=np.uint32)
    _philox.fill_bits32(state, out)
    assert out.tolist() == words32(0x1234_5678_9ABC_DEF0, 40, 8)
    assert [int(v) for v in state] == [0x1234_5678_9ABC_DEF0, 42]


# --- the counter mapping ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 4, 5, 11, 16])
def test_bits32_mapping_and_advance(n):
    # Offset just below 2**32: the counters carry into their high word inside this fill.
    seed, offset = 0xDEAD_BEEF_0BAD_F00D, (1 << 32) - 2
    state = make_state(seed, offset)
    out = np.empty(n, dtype=np.uint32)
    _philox.fill_bits32(state, out)
    assert out.tolist() == words32(seed, offset, n)
    assert int(state[1]) == offset + -(-n // 4)
    assert int(state[0]) == seed


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, (1 << 64) - 1), offset=st.integers(0, (1 << 64) - 1),
       n=st.integers(1, 13))
def test_bits32_mapping_any_seed_offset(seed, offset, n):
    state = make_state(seed, offset)
    out = np.empty(n, dtype=np.uint32)
    _philox.fill_bits32(state, out)
    assert out.tolist() == words32(seed, offset, n)
    assert int(state[1]) == (offset + -(-n // 4)) % (1 << 64)


def test_offset_wraps_modulo_2_64():
    state = make_state(5, (1 << 64) - 1)
    out = np.empty(8, dtype=np.uint32)
    _philox.fill_bits32(state, out)
    assert out.tolist() == words32(5, (1 << 64) - 1, 8)
    assert int(state[1]) == 1


def test_two_fills_equal_one_only_when_counters_are_not_split():
    one = np.empty(16, dtype=np.uint32)
    _philox.fill_bits32(make_state(9), one)
    state = make_state(9)
    halves = [np.empty(8, dtype=np.uint32), np.empty(8, dtype=np.uint32)]
    for half in halves:
        _philox.fill_bits32(state, half)
    assert np.concatenate(halves).tolist() == one.tolist()
    # n = 5 is not a multiple of 4: the first fill uses 2 whole counters, so the second fill
    # starts at counter 2, not at word 1 of counter 1.
    state = make_state(9)
    first, second = np.empty(5, dtype=np.uint32), np.empty(5, dtype=np.uint32)
    _philox.fill_bits32(state, first)
    _philox.fill_bits32(state, second)
    assert first.tolist() == one[:5].tolist()
    assert second.tolist() == one[8:13].tolist()
    assert second.tolist() != one[5:10].tolist()


def test_out_is_written_in_c_order():
    flat = np.empty(24, dtype=np.uint32)
    _philox.fill_bits32(make_state(11), flat)
    shaped = np.empty((2, 3, 4), dtype=np.uint32)
    _philox.fill_bits32(make_state(11), shaped)
    assert shaped.reshape(-1).tolist() == flat.tolist()
    scalar = np.empty((), dtype=np.uint32)
    _philox.fill_bits32(make_state(11), scalar)
    assert int(scalar) == int(flat[0])


def test_empty_out_consumes_nothing():
    state = make_state(1, 17)
    for fill, dtype in [(_philox.fill_bits32, np.uint32), (_philox.fill_uniform, np.float32),
                        (_philox.fill_normal, np.float64)]:
        fill(state, np.empty((0, 3), dtype=dtype))
    _philox.fill_randint(state, np.empty(0, dtype=np.int64), 0, 10)
    assert int(state[1]) == 17


# --- uniform ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, digits", [(np.float32, 24), (np.float16, 11), (BF16, 8)])
def test_uniform_float32_family_mapping(dtype, digits):
    seed, offset, n, low, high = 77, 5, 13, -2.5, 7.25
    state = make_state(seed, offset)
    out = np.empty(n, dtype=dtype)
    _philox.fill_uniform(state, out, low, high)
    span32, low32 = np.float32(high - low), np.float32(low)
    high_t = np.float32(np.float32(high).astype(dtype))
    expected = []
    for word in words32(seed, offset, n):
        u = np.float32(word >> (32 - digits)) * np.float32(2.0 ** -digits)
        value = np.float32(np.float32(low32 + span32 * u).astype(dtype))
        expected.append(np.float32(low32.astype(dtype)) if value >= high_t else value)
    assert out.astype(np.float32).tolist() == [float(v) for v in expected]
    assert int(state[1]) == offset + -(-n // 4)


def test_uniform_float64_mapping():
    seed, offset, n, low, high = 78, 3, 7, -1.0, 3.0
    state = make_state(seed, offset)
    out = np.empty(n, dtype=np.float64)
    _philox.fill_uniform(state, out, low, high)
    bits, _ = words64(seed, offset, n)
    expected = [low + (high - low) * ((b >> 11) * 2.0 ** -53) for b in bits]
    assert out.tolist() == expected
    assert int(state[1]) == offset + -(-n // 2)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_uniform_statistics_and_range(dtype):
    out = np.empty(100_000, dtype=dtype)
    _philox.fill_uniform(make_state(2024), out)
    values = out.astype(np.float64)
    assert values.min() >= 0.0 and values.max() < 1.0
    assert abs(values.mean() - 0.5) < 0.01
    assert abs(values.var() - 1 / 12) < 0.005
    scaled = np.empty(10_000, dtype=dtype)
    _philox.fill_uniform(make_state(2025), scaled, -3.0, 5.0)
    values = scaled.astype(np.float64)
    assert values.min() >= -3.0 and values.max() < 5.0


def test_uniform_low_equal_high_fills_low():
    out = np.empty(9, dtype=np.float32)
    state = make_state(4)
    _philox.fill_uniform(state, out, 2.0, 2.0)
    assert out.tolist() == [2.0] * 9
    assert int(state[1]) == 3


# --- normal -----------------------------------------------------------------------------------

def _box_muller(u1, u2):
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_normal_float32_family_mapping(dtype):
    seed, offset, n, mean, std = 91, 6, 9, 1.5, 2.0
    state = make_state(seed, offset)
    out = np.empty(n, dtype=dtype)
    _philox.fill_normal(state, out, mean, std)
    _, pairs = words64(seed, offset, n)
    expected = [mean + std * _box_muller(((a >> 8) + 1) * 2.0 ** -24, (b >> 8) * 2.0 ** -24)
                for a, b in pairs]
    # Computed in float32, then rounded to the out dtype: equal to float rounding.
    tolerance = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3, BF16: 1e-2}
    np.testing.assert_allclose(out.astype(np.float64), expected,
                               rtol=tolerance[np.dtype(dtype)], atol=1e-5)
    assert int(state[1]) == offset + -(-n // 2)


def test_normal_float64_mapping():
    seed, offset, n = 92, 2, 5
    state = make_state(seed, offset)
    out = np.empty(n, dtype=np.float64)
    _philox.fill_normal(state, out)
    expected = []
    for w0, w1, w2, w3 in counter_words(seed, offset, n):
        u1 = (((w0 | w1 << 32) >> 11) + 1) * 2.0 ** -53
        u2 = ((w2 | w3 << 32) >> 11) * 2.0 ** -53
        expected.append(_box_muller(u1, u2))
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-13)
    assert int(state[1]) == offset + n


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_normal_statistics(dtype):
    out = np.empty(100_000, dtype=dtype)
    _philox.fill_normal(make_state(31337), out)
    values = out.astype(np.float64)
    assert np.isfinite(values).all()
    assert abs(values.mean()) < 0.02
    assert abs(values.std() - 1.0) < 0.02
    shifted = np.empty(20_000, dtype=np.float32)
    _philox.fill_normal(make_state(31338), shifted, mean=10.0, std=0.5)
    assert abs(shifted.mean() - 10.0) < 0.02 and abs(shifted.std() - 0.5) < 0.02


def test_normal_std_zero_is_the_mean():
    out = np.empty(6, dtype=np.float64)
    _philox.fill_normal(make_state(1), out, mean=-4.0, std=0.0)
    assert out.tolist() == [-4.0] * 6


# --- randint ----------------------------------------------------------------------------------

def test_randint_small_range_mapping():
    seed, offset, n, low, high = 55, 9, 10, -7, 100
    state = make_state(seed, offset)
    out = np.empty(n, dtype=np.int64)
    _philox.fill_randint(state, out, low, high)
    assert out.tolist() == [low + ((w * (high - low)) >> 32) for w in words32(seed, offset, n)]
    assert int(state[1]) == offset + -(-n // 4)


def test_randint_range_of_exactly_2_32_is_a_32_bit_draw():
    seed, n = 56, 7
    state = make_state(seed)
    out = np.empty(n, dtype=np.uint32)
    _philox.fill_randint(state, out, 0, 1 << 32)
    assert out.tolist() == words32(seed, 0, n)
    assert int(state[1]) == 2


@pytest.mark.parametrize("low, high, dtype", [
    (-(1 << 40), 1 << 40, np.int64),
    (3, (1 << 32) + 4, np.int64),
    (-(1 << 63), (1 << 63), np.int64),
    (0, 1 << 64, np.uint64),
    (1 << 63, (1 << 64) - 1, np.uint64),
])
def test_randint_large_range_mapping(low, high, dtype):
    seed, offset, n = 57, 4, 9
    state = make_state(seed, offset)
    out = np.empty(n, dtype=dtype)
    _philox.fill_randint(state, out, low, high)
    bits, _ = words64(seed, offset, n)
    assert [int(v) for v in out] == [low + (b % (high - low)) for b in bits]
    assert int(state[1]) == offset + -(-n // 2)


@pytest.mark.parametrize("low, high, dtype", [
    (0, 10, np.int64), (-3, 4, np.int8), (0, 256, np.uint8), (0, 2, np.bool_),
    (-50, 50, np.float32), (0, 100, BF16), (-(1 << 40), 1 << 40, np.int64),
    (0, 3 << 40, np.float64),
])
def test_randint_bounds_and_coverage(low, high, dtype):
    out = np.empty(20_000, dtype=dtype)
    _philox.fill_randint(make_state(8), out, low, high)
    values = out.astype(np.float64) if out.dtype != np.bool_ else out.astype(np.int64)
    assert values.min() >= low and values.max() < high
    if high - low <= 256:
        assert np.unique(values).size == high - low  # every value shows up
    else:
        assert abs(values.mean() - (low + high - 1) / 2) < 0.02 * (high - low)


# --- determinism ------------------------------------------------------------------------------

@pytest.mark.parametrize("fill, dtype, args", [
    (_philox.fill_uniform, np.float32, ()), (_philox.fill_uniform, np.float64, ()),
    (_philox.fill_normal, BF16, ()), (_philox.fill_randint, np.int32, (0, 1000)),
    (_philox.fill_bits32, np.uint32, ()),
])
def test_same_seed_same_numbers_different_seed_different(fill, dtype, args):
    def draw(seed, calls=1):
        state = make_state(seed)
        outs = [np.empty(64, dtype=dtype) for _ in range(calls)]
        for out in outs:
            fill(state, out, *args)
        return [out.astype(np.float64).tolist() for out in outs]

    assert draw(123) == draw(123)
    assert draw(123) != draw(124)
    first, second = draw(123, calls=2)
    assert first != second  # the state advanced between the calls


def test_k_calls_equal_one_call_of_k_times_n():
    # n = 64 is a multiple of 4, so each call consumes whole counters and nothing is skipped.
    state = make_state(99)
    calls = [np.empty(64, dtype=np.float32) for _ in range(3)]
    for out in calls:
        _philox.fill_uniform(state, out)
    once = np.empty(192, dtype=np.float32)
    _philox.fill_uniform(make_state(99), once)
    assert np.concatenate(calls).tolist() == once.tolist()


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda s: _philox.fill_randint(s, np.empty(4, np.int64), 5, 5), ValueError,
     "expects low < high, got low=5, high=5"),
    (lambda s: _philox.fill_randint(s, np.empty(4, np.int8), 0, 200), ValueError,
     "does not fit int8"),
    (lambda s: _philox.fill_randint(s, np.empty(4, np.int64), -1, (1 << 63) + 1), ValueError,
     "must lie within int64"),
    (lambda s: _philox.fill_randint(s, np.empty(4, np.int64), 0.5, 3), TypeError,
     "low must be an int, got float"),
    (lambda s: _philox.fill_randint(s, np.empty(4, np.complex64), 0, 3), TypeError,
     "out has dtype complex64; valid dtypes are bool, int8, .*bfloat16, float32, float64"),
    (lambda s: _philox.fill_normal(s, np.empty(4, np.float32), 0.0, -1.0), ValueError,
     "std must be >= 0, got -1.0"),
    (lambda s: _philox.fill_normal(s, np.empty(4, np.float32), float("nan")), ValueError,
     "mean must be finite"),
    (lambda s: _philox.fill_uniform(s, np.empty(4, np.float32), 1.0, 0.0), ValueError,
     "expects low <= high, got low=1.0, high=0.0"),
    (lambda s: _philox.fill_uniform(s, np.empty(4, np.int32)), TypeError,
     "out has dtype int32; valid dtypes are float16, bfloat16, float32, float64"),
    (lambda s: _philox.fill_uniform(s, np.empty((4, 4), np.float32)[:, ::2]), ValueError,
     "out must be C-contiguous, got shape \\(4, 2\\)"),
    (lambda s: _philox.fill_uniform(s, np.empty((4, 4), np.float32).T), ValueError,
     "out must be C-contiguous"),
    (lambda s: _philox.fill_bits32(s, np.empty(4, np.int32)), TypeError,
     "valid dtypes are uint32"),
    (lambda s: _philox.fill_bits32(s, [0, 0]), TypeError,
     "expected a numpy.ndarray or cupy.ndarray, got list"),
    (lambda s: _philox.fill_bits32(np.zeros(3, np.uint64), np.empty(4, np.uint32)), ValueError,
     "state must be the uint64 array \\[seed, offset\\] of shape \\(2,\\), got uint64 of shape "
     "\\(3,\\)"),
    (lambda s: _philox.fill_bits32(np.zeros(2, np.int64), np.empty(4, np.uint32)), ValueError,
     "got int64"),
    (lambda s: _philox.fill_bits32([0, 0], np.empty(4, np.uint32)), TypeError,
     "state must be a numpy array like out, got list"),
])
def test_errors_name_the_problem_and_leave_the_state_alone(call, error, message):
    state = make_state(21, 6)
    with pytest.raises(error, match=message):
        call(state)
    assert [int(v) for v in state] == [21, 6]
    # The generator keeps working after the error.
    out = np.empty(4, dtype=np.uint32)
    _philox.fill_bits32(state, out)
    assert out.tolist() == words32(21, 6, 4) and int(state[1]) == 7
