"""Philox4x32-10, written once against an array namespace: the host generator, the sim generator
and the bitwise oracle that the CUDA kernels must match.

Everything here is elementwise array code (ufuncs, shifts, bitwise ops, uint64 multiplication,
``astype``, ``arange``, ``stack``/``reshape``), so the same functions run on NumPy arrays today
and on CuPy arrays later. The fill functions take the namespace ``xp`` implicitly, from their
arrays (``array_namespace``); ``philox4x32_10`` and ``new_state`` take it explicitly.

Note [philox state and offset]
------------------------------
A generator's state is a 2-element uint64 array ``state = [seed, offset]`` that lives on the
generator's device. Every fill reads ``seed`` and ``offset`` *from the array, with array ops*
(never ``int()``/``.item()``), writes ``out``, then advances ``state[1]`` in place by the number
of 128-bit counters it consumed. Inside a CUDA graph the state is therefore read when the node
runs, not when it was captured: each replay draws fresh numbers, k replays equal k eager calls,
and a while body draws fresh numbers on each iteration. Only the element count (hence the
number of counters) is fixed at capture. The offset wraps modulo 2**64.

The mapping (the CUDA kernels are written against this text)
-------------------------------------------------------------
Block function: standard Philox4x32-10 (Salmon et al., SC'11; Random123). Multipliers
``M0 = 0xD2511F53``, ``M1 = 0xCD9E8D57``; Weyl key increments ``W0 = 0x9E3779B9``,
``W1 = 0xBB67AE85``. One round on words ``(x0, x1, x2, x3)`` with key ``(k0, k1)``::

    p0 = M0 * x0 ; p1 = M1 * x2                      (32x32 -> 64-bit products)
    (x0, x1, x2, x3) = (hi(p1) ^ x1 ^ k0, lo(p1), hi(p0) ^ x3 ^ k1, lo(p0))

Ten rounds; the key is bumped (``k0 += W0, k1 += W1`` mod 2**32) between rounds, i.e. before
rounds 2..10. Here mulhi is the 64-bit product in uint64, split by ``>> 32`` and ``& 0xffffffff``.

Key and counters: ``key = (seed & 0xffffffff, seed >> 32)``. Counter number ``c`` (a 64-bit
integer) is the block input ``(c & 0xffffffff, c >> 32, 0, 0)``; its output words are
``w0..w3``. A fill starting at offset ``o`` uses counters ``o, o + 1, ...`` (mod 2**64).

- 32-bit draws (``fill_bits32``, uniform float32/float16/bfloat16, randint with range
  ``<= 2**32``): element ``i`` (flat C-order index) is word ``i % 4`` of counter ``o + i // 4``.
  Consumes ``ceil(n / 4)`` counters.
- 64-bit draws (uniform float64, randint with range ``> 2**32``): element ``i`` uses words
  ``(w[2*(i%2)], w[2*(i%2)+1])`` of counter ``o + i // 2`` as ``(lo, hi)``,
  ``u64 = lo | hi << 32``. Consumes ``ceil(n / 2)`` counters.
- uniform float32/float16/bfloat16 (d = 24, 11, 8: the significand bits of the out dtype)::

      u = (w >> (32 - d)) * 2**-d                       exact in float32, in [0, 1)
      r = low32 + span32 * u                            float32, two roundings (NO fused FMA)
      t = T(r)                                          round-to-nearest-even to the out dtype T
      if t >= T(high32): t = T(low32)                   keeps the interval half-open

  where ``low32 = float32(low)``, ``high32 = float32(high)``, ``span32 = float32(high - low)``
  (the difference taken in float64 on the host, rounded once). For ``[0, 1)`` the last line
  never fires: with d = the out dtype's significand bits, every ``u`` is exact in T and < 1.
- uniform float64: ``u = (u64 >> 11) * 2**-53``; ``r = low + span * u`` in float64 (no FMA,
  ``span = high - low``); ``if r >= high: r = low``.
- normal float32/float16/bfloat16 (Box-Muller, computed in float32, then ``T(...)``): element
  ``i`` uses the word pair ``(a, b) = (w[2*(i%2)], w[2*(i%2)+1])`` of counter ``o + i // 2``::

      u1 = ((a >> 8) + 1) * 2**-24                      in (0, 1], so log(u1) is finite
      u2 = (b >> 8) * 2**-24                            in [0, 1)
      z  = sqrt(-2 * log(u1)) * cos(float32(2*pi) * u2)
      out = T(float32(mean) + float32(std) * z)

  Consumes ``ceil(n / 2)`` counters.
- normal float64: element ``i`` uses all four words of counter ``o + i``:
  ``u1 = (((w0 | w1 << 32) >> 11) + 1) * 2**-53`` in (0, 1],
  ``u2 = ((w2 | w3 << 32) >> 11) * 2**-53`` in [0, 1), the same formula in float64.
  Consumes ``n`` counters.
- randint(low, high), ``r = high - low >= 1``: if ``r <= 2**32``, a 32-bit draw ``w`` and
  ``v = low + ((w * r) >> 32)`` (``w * r`` in uint64 cannot overflow); otherwise a 64-bit draw
  and ``v = low + (u64 % r)`` (``u64`` itself when ``r == 2**64``). The sum is taken modulo
  2**64 and read as int64 when ``low < 0``, as uint64 otherwise, then cast to the out dtype.
  Both reductions are slightly biased for ranges that are not powers of two (at most
  ``r / 2**32`` resp. ``r / 2**64`` relative); there is no rejection loop, so the number of
  counters never depends on the values drawn.

What is bitwise across backends: the raw words, randint, and uniform (IEEE add/mul with
round-to-nearest and RNE conversions; a CUDA kernel must use ``__fmul_rn``/``__fadd_rn`` or
``-fmad=false``). Normals go through ``log``/``cos``/``sqrt``, whose last bits differ between
math libraries: they agree to float rounding (a few ulps), not bitwise.

.. warning:: The fills need contiguous outputs and write them in C order; a CuPy port must
   also keep ``state`` and ``out`` on the same device (nothing here can check that cheaply).
"""

from __future__ import annotations

import math
import numbers
import operator

import ml_dtypes
import numpy as np

__all__ = [
    "array_namespace", "philox4x32_10", "new_state",
    "fill_uniform", "fill_normal", "fill_randint", "fill_bits32",
]

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10

_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_SHIFT32 = _U64(32)

_FLOAT16 = np.dtype(np.float16)
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)
# Significand bits (implicit bit included) of the float32-family dtypes: uniform draws use this
# many bits so that every u is exactly representable in the out dtype and stays below 1.
_FLOAT32_FAMILY_DIGITS = {_FLOAT32: 24, _FLOAT16: 11, _BFLOAT16: 8}
_FLOAT_DTYPES = (_FLOAT16, _BFLOAT16, _FLOAT32, _FLOAT64)
_INT_DTYPES = tuple(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
_RANDINT_DTYPES = _INT_DTYPES + _FLOAT_DTYPES


def array_namespace(array):
    """The array module (``numpy`` or ``cupy``) that ``array`` belongs to.

    Raises:
        TypeError: ``array`` is neither a NumPy nor a CuPy array.
    """
    if isinstance(array, np.ndarray):
        return np
    if type(array).__module__.partition(".")[0] == "cupy":
        import cupy

        return cupy
    raise TypeError(f"expected a numpy.ndarray or cupy.ndarray, got {type(array).__name__}")


def _as_u64(value, xp):
    if isinstance(value, xp.ndarray):
        return value.astype(xp.uint64, copy=False)
    # A host value: this copies to the device, so capture-safe callers pass device arrays.
    try:
        return xp.asarray(value, dtype=xp.uint64)
    except (OverflowError, ValueError, TypeError):
        raise ValueError(f"philox4x32_10: counter and key words must be ints in [0, 2**32), "
                         f"got {value!r}") from None


def _block_u64(x0, x1, x2, x3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit values; returns four such arrays."""
    m0, m1 = _U64(PHILOX_M0), _U64(PHILOX_M1)
    w0, w1 = _U64(PHILOX_W0), _U64(PHILOX_W1)
    for round_index in range(ROUNDS):
        if round_index:
            k0 = (k0 + w0) & _MASK32
            k1 = (k1 + w1) & _MASK32
        p0 = x0 * m0
        p1 = x2 * m1
        x0, x1, x2, x3 = ((p1 >> _SHIFT32) ^ x1 ^ k0, p1 & _MASK32,
                          (p0 >> _SHIFT32) ^ x3 ^ k1, p0 & _MASK32)
    return x0, x1, x2, x3


def philox4x32_10(counters_lo, counters_hi, key_lo, key_hi, xp, counters_2=0, counters_3=0):
    """The raw Philox4x32-10 block function, vectorised over counters.

    Args:
        counters_lo, counters_hi: words 0 and 1 of each 128-bit counter (arrays or ints < 2**32).
        key_lo, key_hi: the two key words (arrays broadcastable against the counters, or ints).
        xp: the array namespace (``numpy`` or ``cupy``).
        counters_2, counters_3: words 2 and 3 of the counters; the generator always uses 0, the
            known-answer tests set them.

    Returns:
        A tuple of four uint32 arrays ``(w0, w1, w2, w3)`` of the broadcast shape.

    Raises:
        ValueError: an input holds a value that does not fit in 32 bits.
    """
    words = [_as_u64(value, xp) for value in
             (counters_lo, counters_hi, counters_2, counters_3, key_lo, key_hi)]
    for value in words:
        # Only host inputs are checked: checking device arrays would read them back.
        if isinstance(value, np.ndarray) and value.size and value.max() > _MASK32:
            raise ValueError(f"philox4x32_10: counter and key words must be < 2**32, got "
                             f"{int(value.max()):#x}")
    x0, x1, x2, x3 = xp.broadcast_arrays(*words[:4])
    out = _block_u64(x0, x1, x2, x3, words[4], words[5])
    return tuple(word.astype(xp.uint32) for word in out)


def new_state(xp, seed: int):
    """A fresh generator state ``[seed, 0]`` (uint64) on ``xp``'s current device.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is outside ``[0, 2**64)``.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"new_state: seed must be an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"new_state: seed must be in [0, 2**64), got {int(seed)}")
    return xp.asarray([int(seed), 0], dtype=xp.uint64)


# --- counters and draws -----------------------------------------------------------------------

def _blocks(state, n_counters, xp):
    """Output words of counters ``offset .. offset + n_counters - 1``, read from ``state``."""
    seed = state[0:1]
    counters = state[1:2] + xp.arange(n_counters, dtype=xp.uint64)
    zeros = xp.zeros_like(counters)
    return _block_u64(counters & _MASK32, counters >> _SHIFT32, zeros, zeros,
                      seed & _MASK32, seed >> _SHIFT32)


def _advance(state, n_counters, xp):
    # In place, as an array op: a captured graph advances the live offset on every replay.
    xp.add(state[1:2], _U64(n_counters), out=state[1:2])


def _interleave(arrays, n, xp):
    """Element i = arrays[i % len(arrays)][i // len(arrays)], the first n of them."""
    return xp.stack(arrays, axis=1).reshape(-1)[:n]


def _words32(state, n, xp):
    """n 32-bit draws (uint64 arrays); returns (words, counters consumed)."""
    n_counters = -(-n // 4)
    return _interleave(_blocks(state, n_counters, xp), n, xp), n_counters


def _word_pairs(state, n, xp):
    """n (lo, hi) word pairs: element i takes words 2*(i%2), 2*(i%2)+1 of counter i // 2."""
    n_counters = -(-n // 2)
    w0, w1, w2, w3 = _blocks(state, n_counters, xp)
    return _interleave((w0, w2), n, xp), _interleave((w1, w3), n, xp), n_counters


def _words64(state, n, xp):
    lo, hi, n_counters = _word_pairs(state, n, xp)
    return lo | (hi << _SHIFT32), n_counters


# --- argument checks --------------------------------------------------------------------------

def _dtype_names(dtypes) -> str:
    return ", ".join(dtype.name for dtype in dtypes)


def _prepare(name, state, out, valid_dtypes):
    """Check ``state`` and ``out``; return the namespace."""
    xp = array_namespace(out)
    if not isinstance(state, xp.ndarray):
        raise TypeError(f"{name}: state must be a {xp.__name__} array like out, got "
                        f"{type(state).__name__}")
    if state.dtype != np.uint64 or state.shape != (2,):
        raise ValueError(f"{name}: state must be the uint64 array [seed, offset] of shape (2,), "
                         f"got {state.dtype} of shape {state.shape}")
    if out.dtype not in valid_dtypes:
        raise TypeError(f"{name}: out has dtype {out.dtype.name}; valid dtypes are "
                        f"{_dtype_names(valid_dtypes)}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{name}: out must be C-contiguous, got shape {out.shape} with strides "
                         f"{out.strides}")
    return xp


def _finite(name, label, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: {label} must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: {label} must be finite, got {value}")
    return value


def _integer(name, label, value) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name}: {label} must be an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {label} must be an int, got {type(value).__name__} "
                        f"{value!r}") from None


def _write(out, values):
    out[...] = values.reshape(out.shape)


def _rounded_to(value: float, dtype) -> np.float32:
    """``value`` rounded host float64 -> float32 -> ``dtype``, held as a float32 scalar."""
    return np.float32(np.asarray(np.float32(value)).astype(dtype).astype(np.float32))


# --- fills ------------------------------------------------------------------------------------

def fill_bits32(state, out_uint32):
    """Fill a uint32 array with raw Philox words and advance the state.

    Element i (C order) is word ``i % 4`` of counter ``offset + i // 4``; consumes
    ``ceil(n / 4)`` counters.

    Raises:
        TypeError: ``out_uint32`` is not uint32, or ``state`` is not an array of its kind.
        ValueError: ``out_uint32`` is not C-contiguous, or ``state`` is malformed.
    """
    xp = _prepare("fill_bits32", state, out_uint32, (np.dtype(np.uint32),))
    n = out_uint32.size
    if n == 0:
        return
    words, n_counters = _words32(state, n, xp)
    _write(out_uint32, words.astype(xp.uint32))
    _advance(state, n_counters, xp)


def fill_uniform(state, out, low=0.0, high=1.0):
    """Fill ``out`` with uniform numbers in ``[low, high)`` and advance the state.

    The exact bits are the module docstring's "uniform" mapping; float32/float16/bfloat16 are
    32-bit draws (``ceil(n / 4)`` counters), float64 64-bit draws (``ceil(n / 2)``).

    Args:
        state: the generator's ``[seed, offset]`` uint64 array (advanced in place).
        out: a C-contiguous float16, bfloat16, float32 or float64 array of any shape.
        low, high: finite bounds with ``low <= high`` (``low == high`` fills with ``low``).

    Raises:
        TypeError: ``out`` has another dtype, or a bound is not a real number.
        ValueError: ``out`` is not C-contiguous, a bound is not finite, or ``high < low``.
    """
    xp = _prepare("fill_uniform", state, out, _FLOAT_DTYPES)
    low = _finite("fill_uniform", "low", low)
    high = _finite("fill_uniform", "high", high)
    if high < low:
        raise ValueError(f"fill_uniform: expects low <= high, got low={low}, high={high}")
    n = out.size
    if n == 0:
        return
    if out.dtype == _FLOAT64:
        bits, n_counters = _words64(state, n, xp)
        u = (bits >> _U64(11)).astype(xp.float64) * np.float64(2.0 ** -53)
        values = np.float64(low) + np.float64(high - low) * u
        values = xp.where(values >= np.float64(high), np.float64(low), values)
    else:
        digits = _FLOAT32_FAMILY_DIGITS[out.dtype]
        words, n_counters = _words32(state, n, xp)
        u = (words >> _U64(32 - digits)).astype(xp.float32) * np.float32(2.0 ** -digits)
        result = (np.float32(low) + np.float32(high - low) * u).astype(out.dtype)
        # Compare in float32, which holds every value of T exactly; host scalars only, so the
        # fill stays capturable.
        result = result.astype(xp.float32)
        low_t, high_t = _rounded_to(low, out.dtype), _rounded_to(high, out.dtype)
        values = xp.where(result >= high_t, low_t, result).astype(out.dtype)
    _write(out, values)
    _advance(state, n_counters, xp)


def fill_normal(state, out, mean=0.0, std=1.0):
    """Fill ``out`` with normal numbers (Box-Muller) and advance the state.

    float32/float16/bfloat16 use one word pair per element (``ceil(n / 2)`` counters) and
    compute in float32; float64 uses a whole counter per element (``n`` counters).

    Args:
        state: the generator's ``[seed, offset]`` uint64 array (advanced in place).
        out: a C-contiguous float16, bfloat16, float32 or float64 array of any shape.
        mean, std: finite, ``std >= 0``.

    Raises:
        TypeError: ``out`` has another dtype, or ``mean``/``std`` is not a real number.
        ValueError: ``out`` is not C-contiguous, ``mean``/``std`` is not finite, or ``std < 0``.

    .. note:: Results agree across backends to float rounding, not bitwise (``log``/``cos``).
    """
    xp = _prepare("fill_normal", state, out, _FLOAT_DTYPES)
    mean = _finite("fill_normal", "mean", mean)
    std = _finite("fill_normal", "std", std)
    if std < 0:
        raise ValueError(f"fill_normal: std must be >= 0, got {std}")
    n = out.size
    if n == 0:
        return
    if out.dtype == _FLOAT64:
        w0, w1, w2, w3 = _blocks(state, n, xp)
        n_counters = n
        scale = np.float64(2.0 ** -53)
        u1 = (((w0 | (w1 << _SHIFT32)) >> _U64(11)) + _U64(1)).astype(xp.float64) * scale
        u2 = ((w2 | (w3 << _SHIFT32)) >> _U64(11)).astype(xp.float64) * scale
        ftype = np.float64
    else:
        a, b, n_counters = _word_pairs(state, n, xp)
        scale = np.float32(2.0 ** -24)
        u1 = ((a >> _U64(8)) + _U64(1)).astype(xp.float32) * scale
        u2 = (b >> _U64(8)).astype(xp.float32) * scale
        ftype = np.float32
    radius = xp.sqrt(ftype(-2.0) * xp.log(u1))
    z = radius * xp.cos(ftype(2.0 * math.pi) * u2)
    values = ftype(mean) + ftype(std) * z
    _write(out, values.astype(out.dtype))
    _advance(state, n_counters, xp)


def _randint_bounds(dtype) -> tuple[int | float, int | float]:
    if dtype == np.bool_:
        return 0, 1
    if dtype in _FLOAT_DTYPES:
        largest = float(ml_dtypes.finfo(dtype).max)
        return -largest, largest
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_randint_range(low: int, high: int, dtype) -> None:
    if high <= low:
        raise ValueError(f"fill_randint: expects low < high, got low={low}, high={high}")
    if low < -(1 << 63) or high > (1 << 64) or (low < 0 and high > (1 << 63)):
        raise ValueError(f"fill_randint: [low, high) = [{low}, {high}) must lie within int64 "
                         f"[-2**63, 2**63) or uint64 [0, 2**64)")
    smallest, largest = _randint_bounds(dtype)
    if low < smallest or high - 1 > largest:
        raise ValueError(f"fill_randint: [low, high) = [{low}, {high}) does not fit {dtype.name}, "
                         f"whose values lie in [{smallest}, {largest}]")


def fill_randint(state, out, low, high):
    """Fill ``out`` with integers uniform in ``[low, high)`` and advance the state.

    Ranges up to ``2**32`` are 32-bit draws (``ceil(n / 4)`` counters), larger ones 64-bit
    draws (``ceil(n / 2)``); see the module docstring for the exact reduction.

    Args:
        state: the generator's ``[seed, offset]`` uint64 array (advanced in place).
        out: a C-contiguous array of bool, an integer dtype, or a float dtype.
        low, high: ints with ``low < high``; every value of ``[low, high)`` must fit ``out``'s
            dtype and lie in int64 (when ``low < 0``) or uint64 (otherwise).

    Raises:
        TypeError: ``out`` has another dtype, or a bound is not an int.
        ValueError: ``out`` is not C-contiguous, ``high <= low``, or the range does not fit.
    """
    xp = _prepare("fill_randint", state, out, _RANDINT_DTYPES)
    low = _integer("fill_randint", "low", low)
    high = _integer("fill_randint", "high", high)
    _check_randint_range(low, high, out.dtype)
    n = out.size
    if n == 0:
        return
    span = high - low
    if span <= 1 << 32:
        words, n_counters = _words32(state, n, xp)
        offsets = (words * _U64(span)) >> _SHIFT32
    else:
        bits, n_counters = _words64(state, n, xp)
        offsets = bits if span == 1 << 64 else bits % _U64(span)
    # Two's complement: the uint64 sum wraps to the right bits for negative low as well.
    values = offsets + _U64(low % (1 << 64))
    if low < 0:
        values = values.astype(xp.int64)
    _write(out, values.astype(out.dtype))
    _advance(state, n_counters, xp)
