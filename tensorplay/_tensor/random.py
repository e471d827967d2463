"""Random number generators: one counter-based Philox4x32-10 generator per device.

Each generator keeps its state — ``[seed, offset]`` as two uint64 — in the memory of its own
device, and every random op is a kernel that reads the state when it runs and advances the
offset (``tensorplay._philox`` defines the counter layout). That is where the Philox offset lives
during replay: a graph holding a random op draws fresh numbers on every replay and on every
iteration of a while body, and after ``manual_seed(s)``, k replays give what k eager runs give.
The same seed, shape and dtype give the same integers and uniforms on every backend.

.. warning:: Random ops issued on two streams at once share the device's generator without
   ordering between them; order the streams (events) when reproducibility matters.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from .._runtime import device as _device, dispatch as _dispatch
from .. import _dtype, _philox
from .._runtime import writes as _writes
from .._runtime.select import accelerator_backend
from . import creation as _creation, elementwise as _ops, reductions as _reductions
from .creation import _leaf
from .pointwise import lgamma_lanczos
from .tensor import Tensor

__all__ = ["manual_seed", "initial_seed", "seed", "rand", "randn", "randint", "normal"]

DEFAULT_SEED = 67280421310721
_STATE_BYTES = 16
_lock = threading.Lock()


def normalize_seed(value) -> int:
    """A seed as an unsigned 64-bit int (negative seeds wrap, as in PyTorch).

    Takes an int or an integral float (``2.0``, as PyTorch does).

    Raises:
        TypeError: any other type, or a float with a fractional part (``2.5``: PyTorch would
            silently seed with 2).
        RuntimeError: a seed outside ``[-2**63, 2**64)``, as in PyTorch.
    """
    if isinstance(value, (float, np.floating)) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"seed must be an int or an integral float, got "
                        f"{type(value).__name__} {value!r}")
    value = int(value)
    if not -(1 << 63) <= value < (1 << 64):
        raise RuntimeError(f"seed must be in [-2**63, 2**64), got {value}")
    return value % (1 << 64)


class Generator:
    """A Philox generator of one device (PyTorch's ``torch.Generator(device="cpu")``): its state
    lives on that device, so draws from it are graph-safe like the default generators'. Pass it
    as ``generator=`` to the random functions; ``manual_seed`` returns the generator itself.

    Each device also has a default generator (``tp.manual_seed`` seeds them all); a Generator
    made here is independent of it.

    ``device`` takes every device spelling, as the tensor factories do: a type without an index
    (``"cuda"``, ``current_accelerator()``) or an int index is the current device of the
    accelerator at construction, so ``Generator(device="cuda")`` draws for
    ``randn(..., device="cuda")``; ``None`` is ``cpu``, the factories' default.

    Raises:
        ValueError: a bad spelling, a device index out of range or a device this build lacks.
        RuntimeError: (from the random functions) a generator of another device than the
            tensor being filled.
    """

    def __init__(self, device="cpu"):
        # the concrete device (type and index): it is compared with the device of every
        # tensor the generator fills, which is always concrete
        self.device = _device.resolve(device, default_cpu=True)
        self._initial_seed = DEFAULT_SEED
        # made now (a host-to-device copy), not at a first draw that may be inside a capture
        self._state: Tensor | None = _creation.tensor([self._initial_seed, 0],
                                                      dtype=_dtype.uint64, device=self.device)

    def __repr__(self) -> str:
        return f"<tensorplay.Generator on {self.device}, initial seed {self._initial_seed}>"

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with."""
        return self._initial_seed

    def seed(self) -> int:
        """Seed from the operating system's randomness; return the seed."""
        value = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(value)
        return value

    def state(self) -> Tensor:
        """The ``[seed, offset]`` uint64 tensor on the device, created on first use.

        Creating it copies from the host, so the first use must not be inside a capture that
        forbids that; ``Graph.capture_begin`` creates it beforehand.
        """
        if self._state is None:
            with _lock:
                if self._state is None:
                    self._state = _creation.tensor([self._initial_seed, 0], dtype=_dtype.uint64,
                                         device=self.device)
        return self._state

    def manual_seed(self, value) -> "Generator":
        """Seed it (an int, or an integral float); returns the generator, as PyTorch's."""
        seed_value = normalize_seed(value)
        self._initial_seed = seed_value
        self.state().copy_(Tensor._make(np.array([seed_value, 0], dtype=np.uint64),
                                        _device.CPU, _dtype.uint64))
        return self

    def get_state(self) -> Tensor:
        """A cpu uint8 tensor of 16 bytes: seed then offset, little-endian (waits for the
        device)."""
        data = np.ascontiguousarray(self.state()._host_copy("get_rng_state()")).astype("<u8")
        return Tensor._make(data.view(np.uint8).copy(), _device.CPU, _dtype.uint8)

    def set_state(self, new_state, call: str = "set_rng_state()") -> None:
        """Restore a state that :meth:`get_state` returned (``call`` names the public call in
        errors)."""
        self.load_words(state_words(new_state, call))

    def load_words(self, words: np.ndarray) -> None:
        """Restore the ``[seed, offset]`` uint64 words of a checked state."""
        self._initial_seed = int(words[0])
        self.state().copy_(Tensor._make(words, _device.CPU, _dtype.uint64))


def state_words(new_state, call: str) -> np.ndarray:
    """The ``[seed, offset]`` uint64 words of a state tensor that ``get_rng_state()`` returned.

    Raises:
        TypeError: ``new_state`` is not a Tensor. ValueError: not 16 uint8 bytes.
    """
    if not isinstance(new_state, Tensor):
        raise TypeError(f"{call} expects a state: the uint8 Tensor (ByteTensor) that "
                        f"get_rng_state() returns, got {type(new_state).__name__} {new_state!r}")
    if new_state.dtype is not _dtype.uint8 or new_state.numel() != _STATE_BYTES:
        raise ValueError(f"{call} expects the uint8 tensor of {_STATE_BYTES} bytes that "
                         f"get_rng_state() returns, got {new_state.dtype.name} of shape "
                         f"{new_state.shape}")
    raw = np.ascontiguousarray(new_state.cpu().numpy()).reshape(-1).view("<u8")
    return raw.astype(np.uint64)


_generators: dict[_device.device, Generator] = {}


def generator_for(device: _device.device) -> Generator:
    generator = _generators.get(device)
    if generator is None:
        with _lock:
            generator = _generators.setdefault(device, Generator(device))
    return generator


def _generator(generator, device: _device.device, name: str) -> Generator:
    """``generator`` (checked to be a Generator of ``device``), or the device's default."""
    if generator is None:
        return generator_for(device)
    if not isinstance(generator, Generator):
        raise TypeError(f"{name}: generator must be a tensorplay.Generator, got "
                        f"{type(generator).__name__}")
    if generator.device != device:
        raise RuntimeError(f"{name}: expected a generator of {device}, got one of "
                           f"{generator.device}")
    return generator


def _fill(out: Tensor, name: str, fill, *args, generator=None) -> Tensor:
    out._check_guard()
    if not out.is_contiguous():
        raise ValueError(f"{name}: the output must be contiguous, got strides {out.stride()}")
    state = _generator(generator, out.device, name).state()._data
    if _writes.active:   # Note [write records]
        _writes.note(out)
    data = out._data

    def kernel():
        fill(state, data, *args)
    _dispatch.launch(out.device, _dispatch.named(name, kernel, shape=out.shape,
                                                 dtype=out.dtype.name))
    return out


def _float_dtype(dtype, name: str) -> _dtype.dtype:
    dtype = _dtype.get_default_dtype() if dtype is None else _dtype.to_dtype(dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"{name}: dtype must be a floating dtype, got {dtype.name}")
    return dtype


def uniform_(tensor: Tensor, low: float = 0.0, high: float = 1.0, *, generator=None) -> Tensor:
    """Fill with uniform numbers in ``[low, high)``."""
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"uniform_: needs a floating tensor, got {tensor.dtype.name}")
    if not low <= high:
        raise ValueError(f"uniform_: expects low <= high, got low={low}, high={high}")
    return _fill(tensor, "uniform", _philox.fill_uniform, low, high, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill with normal numbers of mean ``mean`` and standard deviation ``std``."""
    if not tensor.dtype.is_floating_point:
        raise TypeError(f"normal_: needs a floating tensor, got {tensor.dtype.name}")
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    return _fill(tensor, "normal", _philox.fill_normal, mean, std, generator=generator)


def _check_randint(name: str, dtype: _dtype.dtype, low: int, high: int) -> None:
    """PyTorch's checks of ``random_``/``randint`` bounds, made at the call: the kernel's own
    check would surface at a later, unrelated call on an accelerator (and on every replay)."""
    if dtype.is_complex:
        raise RuntimeError(f"{name}: random integers are not implemented for {dtype.name}; "
                           f"draw the real and imaginary parts as a real dtype")
    if high <= low:
        raise RuntimeError(f"{name} expects 'from' to be less than 'to', but got from={low} >= "
                           f"to={high}")
    smallest, largest = _philox._randint_bounds(dtype.numpy)
    for label, value in (("from", low), ("to - 1", high - 1)):
        if not smallest <= value <= largest:
            raise RuntimeError(f"{name}: {label} = {value} is out of bounds for {dtype.name}, "
                               f"whose values lie in [{smallest}, {largest}]")
    if low < -(1 << 63) or high > (1 << 64) or (low < 0 and high > (1 << 63)):
        raise RuntimeError(f"{name}: [from, to) = [{low}, {high}) must lie within int64 "
                           f"[-2**63, 2**63) or uint64 [0, 2**64)")


def random_(tensor: Tensor, low: int, high: int, *, generator=None) -> Tensor:
    """Fill with integers uniform in ``[low, high)``.

    Raises:
        RuntimeError: ``low >= high``, a bound the tensor's dtype cannot hold, or a complex
            tensor (checked at the call, on every device).
    """
    _check_randint("random_", tensor.dtype, low, high)
    return _fill(tensor, "randint", _philox.fill_randint, low, high, generator=generator)


def rand(*size, dtype=None, device=None, generator=None, requires_grad: bool = False) -> Tensor:
    """Uniform numbers in ``[0, 1)``."""
    return _leaf(uniform_(_creation.empty(*size, dtype=_float_dtype(dtype, "rand"), device=device),
                    generator=generator), requires_grad)


def randn(*size, dtype=None, device=None, generator=None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers."""
    return _leaf(normal_(_creation.empty(*size, dtype=_float_dtype(dtype, "randn"), device=device),
                   generator=generator), requires_grad)


def randint(low, high=None, size=None, dtype=None, device=None, generator=None) -> Tensor:
    """Integers uniform in ``[low, high)`` (``randint(high, size)`` starts at 0)."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() needs a size, e.g. randint(0, 10, (3,))")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    dtype = _dtype.int64 if dtype is None else _dtype.to_dtype(dtype)
    low, high = int(low), int(high)
    _check_randint("randint", dtype, low, high)
    return _fill(_creation.empty(*tuple(size), dtype=dtype, device=device), "randint",
                 _philox.fill_randint, low, high, generator=generator)


def normal(mean, std=1.0, size=None, dtype=None, device=None, generator=None) -> Tensor:
    """Normal numbers, in PyTorch's three forms: ``normal(mean, std, size)`` with numbers (a
    new tensor of ``size``, ``dtype``, ``device``); ``normal(mean_tensor, std=1.0)``,
    ``normal(mean, std_tensor)`` or ``normal(mean_tensor, std_tensor)``: one draw per element of
    the tensors' broadcast shape, on their device, in their (promoted) floating dtype.

    Raises:
        TypeError: ``size`` missing with numbers for both, or given with a tensor mean or std.
        RuntimeError: a tensor mean or std that is not floating, or a negative std (a std
            tensor is checked on cpu only: elsewhere that would wait for the device).
    """
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError("normal(): with a number mean and std, size is required (or pass a "
                            "tensor mean or std to draw one number per element)")
        return normal_(_creation.empty(*tuple(size), dtype=_float_dtype(dtype, "normal"),
                                       device=device), mean, std, generator=generator)
    if size is not None:
        raise TypeError("normal(): size is taken only with a number mean and std; with a tensor "
                        "mean or std the result has their broadcast shape")
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    for name, value in (("mean", mean), ("std", std)):
        if isinstance(value, Tensor) and not value.dtype.is_floating_point:
            raise RuntimeError(f"normal(): expected a floating point {name} tensor, got "
                               f"{value.dtype.name}")
    if not isinstance(std, Tensor) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if isinstance(std, Tensor) and std.device.type == "cpu" and std.numel() and \
            bool((std < 0).any()):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    result = _dtype.result_type(*tensors)
    shape = tuple(np.broadcast_shapes(*(tuple(t.shape) for t in tensors)))
    draws = normal_(_creation.empty(*shape, dtype=result, device=tensors[0].device),
                    generator=generator)
    return draws * std + mean


def manual_seed(value) -> None:
    """Seed the cpu generator and every accelerator device's generator (as torch.manual_seed)
    with an int or an integral float (``2.0``); negative seeds wrap to uint64.

    Raises:
        TypeError: another type, or a float with a fractional part.
        RuntimeError: a seed outside ``[-2**63, 2**64)``.
    """
    generator_for(_device.CPU).manual_seed(value)
    backend = accelerator_backend()
    if backend is not None:
        for index in range(backend.device_count()):
            generator_for(_device.device(backend.device_type, index)).manual_seed(value)


def seed() -> int:
    """Seed every generator with a fresh random seed; return it."""
    value = int.from_bytes(os.urandom(8), "little")
    manual_seed(value)
    return value


def initial_seed() -> int:
    """The seed the cpu generator was last seeded with."""
    return generator_for(_device.CPU).initial_seed()


# -- more of PyTorch's random API, built on the philox fills above ---------------------------
def rand_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform numbers in ``[0, 1)`` with ``input``'s shape (and dtype and device, unless
    given)."""
    return _leaf(rand(tuple(input.shape), dtype=input.dtype if dtype is None else dtype,
                device=input.device if device is None else device), requires_grad)


def randn_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers with ``input``'s shape (and dtype and device, unless given)."""
    return _leaf(randn(tuple(input.shape), dtype=input.dtype if dtype is None else dtype,
                 device=input.device if device is None else device), requires_grad)


def randint_like(input: Tensor, low: int = 0, high: int | None = None, *, dtype=None,
                 device=None) -> Tensor:
    """Integers uniform in ``[low, high)`` with ``input``'s shape (``randint_like(input,
    high)`` starts at 0), in ``input``'s dtype and device unless given."""
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape),
                   dtype=input.dtype if dtype is None else dtype,
                   device=input.device if device is None else device)


def _uniform_like(tensor: Tensor, generator=None) -> Tensor:
    """Fresh uniform numbers in ``[0, 1)`` of ``tensor``'s shape, in float64 where the device
    holds it (so thresholds such as a probability are compared at full precision)."""
    dtype = _dtype.float64 if _dispatch_supports(tensor.device, _dtype.float64) else \
        _dtype.float32
    return rand(tuple(tensor.shape), dtype=dtype, device=tensor.device, generator=generator)


def _dispatch_supports(device, dtype) -> bool:
    try:
        _dispatch.check_dtype_supported(device, dtype)
    except TypeError:
        return False
    return True


def _check_probability(name: str, p) -> None:
    if isinstance(p, Tensor):
        return   # values are not read on the host (capture-safe); out-of-range gives 0 or 1
    if not 0 <= p <= 1:
        raise RuntimeError(f"{name}: expected 0 <= p <= 1, but got p={p}")


def bernoulli(input: Tensor, p: float | None = None, *, generator=None) -> Tensor:
    """0/1 draws with probabilities ``input`` (or the number ``p``), in ``input``'s (floating)
    dtype: ``uniform < p``. Capture-safe: a probability tensor is not checked on the host."""
    probability = input if p is None else p
    _check_probability("bernoulli", probability)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"bernoulli: expected a floating point tensor, got {input.dtype.name}")
    draws = _ops.binary("lt", _uniform_like(input, generator), probability)
    return draws.to(input.dtype)


def bernoulli_(tensor: Tensor, p=0.5, *, generator=None) -> Tensor:
    """Fill ``tensor`` with 0/1 draws of probability ``p`` (a number or a tensor that
    broadcasts)."""
    _check_probability("bernoulli_", p)
    return tensor.copy_(bernoulli(_creation.empty(tuple(tensor.shape), dtype=tensor.dtype
                                                  if tensor.dtype.is_floating_point else
                                                  _dtype.float32, device=tensor.device), p,
                                       generator=generator))


def exponential_(tensor: Tensor, lambd: float = 1.0, *, generator=None) -> Tensor:
    """Fill with exponential numbers of rate ``lambd``: ``-log(1 - u) / lambd``."""
    if not tensor.dtype.is_floating_point:
        raise RuntimeError(f"exponential_: expected a floating point tensor, got "
                           f"{tensor.dtype.name}")
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    u = _uniform_like(tensor, generator)
    return tensor.copy_(-(-u).log1p() / lambd)


def geometric_(tensor: Tensor, p: float, *, generator=None) -> Tensor:
    """Fill with the number of trials up to the first success, success probability ``p``:
    ``floor(log(1 - u) / log(1 - p)) + 1``, so at least 1."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), got p={p}")
    u = _uniform_like(tensor, generator)
    return tensor.copy_((-u).log1p().div(float(np.log1p(-p))).floor() + 1)


def randperm(n: int, *, generator=None, dtype=None, device=None) -> Tensor:
    """A random permutation of ``range(n)`` (int64 unless ``dtype``): the stable argsort of
    fresh uniform keys, so it runs on the device and inside a capture."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise RuntimeError(f"randperm: n must be a non-negative int, got {n!r}")
    dtype = _dtype.int64 if dtype is None else _dtype.to_dtype(dtype)
    keys = _uniform_like(_creation.empty(int(n), device=device), generator)
    order = _reductions.argsort(keys)
    return order if dtype is _dtype.int64 else order.to(dtype)


# -- multinomial and poisson: fixed work per element, no host reads on accelerators -----------
_MAX_CATEGORIES = 1 << 24   # PyTorch's limit (it indexes categories through float32)
_EXP_FLOOR = 2.0 ** -60     # below the smallest nonzero -log1p(-u) (2**-53), so order-preserving


_compute_dtypes: dict = {}


def _compute_dtype(device) -> _dtype.dtype:
    """float64 where the device holds it (the uniforms and sums of these samplers), else
    float32; looked up once per device."""
    dtype = _compute_dtypes.get(device)
    if dtype is None:
        dtype = _dtype.float64 if _dispatch_supports(device, _dtype.float64) else _dtype.float32
        _compute_dtypes[device] = dtype
    return dtype


def _sanitized(xp, w):
    """Rows of weights as the accelerator samples them (no host read can check them there): NaN
    and negative weights count as 0; where a row holds +inf, its +inf entries share all the
    mass; a row with no positive weight is sampled uniformly. A no-op on a valid row, so cpu
    (which checks) and the accelerators give the same samples."""
    w = xp.where(w > 0, w, 0)                       # NaN and negatives -> 0
    infinite = w == xp.inf
    w = xp.where(xp.any(infinite, axis=-1, keepdims=True), infinite.astype(w.dtype), w)
    return xp.where(xp.any(w > 0, axis=-1, keepdims=True), w, 1)


def _check_weights(weights: Tensor, fast: bool) -> None:
    """PyTorch's cpu checks of the weights (a host read: only for cpu tensors)."""
    w = np.asarray(weights._data, dtype=np.float64).reshape(-1, weights.shape[-1])
    bad = ~(w >= 0) | (w == np.inf)
    if bad.any():
        row, column = (int(i[0]) for i in np.nonzero(bad))
        value = w[row, column]
        where = f"entry {column} of row {row} is {value}" if weights.ndim == 2 else \
            f"entry {column} is {value}"
        if fast:
            raise RuntimeError(f"multinomial: probability tensor contains either `inf`, `nan` or "
                               f"element < 0 ({where}); weights must be finite and >= 0")
        kind = "< 0" if value < 0 else "= infinity or NaN"
        raise RuntimeError(f"multinomial: invalid multinomial distribution (encountering "
                           f"probability entry {kind}: {where}); weights must be finite and >= 0")
    empty_rows = np.nonzero(~(w > 0).any(axis=-1))[0]
    if empty_rows.size:
        which = f"row {int(empty_rows[0])} is all zeros" if weights.ndim == 2 else \
            "every weight is 0"
        raise RuntimeError(f"multinomial: invalid multinomial distribution (sum of probabilities "
                           f"<= 0): {which}; each row needs a positive weight")


def _gumbel_keys(xp, weights, uniforms, keys) -> None:
    """Exponential-race keys ``log(E) - log(w)``, ``E = -log1p(-u)`` ~ Exp(1): the k smallest
    are k draws without replacement (the category with the smallest ``E / w`` comes first).
    Zero weights get keys above every positive one, ordered by ``E`` (a uniform order)."""
    w = _sanitized(xp, weights.astype(keys.dtype))
    log_e = xp.log(xp.maximum(-xp.log1p(-uniforms), _EXP_FLOOR))
    # every positive weight's key is below -log(smallest subnormal) + log(max E) < offset - 42
    offset = float(-np.log(np.finfo(keys.dtype).smallest_subnormal)) + 50.0
    keys[...] = xp.where(w > 0, log_e - xp.log(w), offset + log_e)


def _inverse_cdf(xp, weights, uniforms, out, steps: int) -> None:
    """Draws with replacement: for each uniform ``u`` the first category whose cumulative
    weight reaches ``(1 - u) * total`` (in (0, total]), by ``steps`` halvings of a
    vectorized binary search. A zero-weight category never reaches a target its predecessor
    did not, so it is never drawn."""
    w = _sanitized(xp, weights.astype(uniforms.dtype))
    w = w / xp.max(w, axis=-1, keepdims=True)          # max 1: no overflow, total >= 1
    cdf = xp.cumsum(w, axis=-1)
    target = (1 - uniforms) * cdf[:, -1:]
    low = xp.zeros(uniforms.shape, dtype=np.int64)
    high = xp.full(uniforms.shape, w.shape[-1] - 1, dtype=np.int64)
    for _ in range(steps):
        middle = (low + high) >> 1
        reached = xp.take_along_axis(cdf, middle, axis=-1) >= target
        high = xp.where(reached, middle, high)
        low = xp.where(reached, low, middle + 1)
    out[...] = low


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    """Indices drawn from the categories of each row of ``input`` (non-negative weights, not
    necessarily normalized): int64 of shape ``(num_samples,)`` for a 1-D ``input``,
    ``(rows, num_samples)`` for a 2-D one, as ``torch.multinomial``.

    Without replacement (or for one sample) it is the exponential race (Gumbel-top-k): keys
    ``E / w`` with ``E`` ~ Exp(1), the ``num_samples`` smallest in order, which is exactly
    sequential sampling without replacement. Zero-weight categories come only after every
    positive one, in uniformly random order: as in PyTorch, asking for more samples than a row
    has positive weights returns zero-weight categories rather than raising. With replacement
    it is the inverse CDF (cumulative sums, a fixed number of binary-search halvings), and a
    zero-weight category is never drawn. Every call draws a fixed count of uniforms (``rows *
    categories`` resp. ``rows * num_samples``), so it is graph-safe: a captured graph draws
    fresh samples on each replay, k replays equal k eager calls, and cpu and sim agree exactly
    for the same seed; cuda agrees up to rare rounding ties (its cumsum and log round the last
    bit differently from NumPy's).

    .. warning:: The weights are checked only on cpu (as PyTorch's cpu kernel does). On an
       accelerator a check would read device memory (PyTorch's CUDA kernel asserts on the
       device), which a capture forbids, so there an invalid row is sampled as: NaN and
       negative weights count as 0, +inf weights share the whole mass, and a row with no
       positive weight is sampled uniformly.

    Raises:
        TypeError: ``input`` not a Tensor, ``num_samples`` not an int.
        RuntimeError: ``input`` not 1-D or 2-D, not floating point, without categories;
            ``num_samples <= 0``; ``num_samples`` above the number of categories without
            replacement; more than 2**24 categories; a generator of another device. On cpu
            also: a negative, infinite or NaN weight, a row without a positive weight.
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not "
                        f"{type(num_samples).__name__}")
    num_samples = int(num_samples)
    if input.ndim not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got {input.ndim} dims "
                           f"(shape {tuple(input.shape)})")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{input.dtype.name}")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample <= 0 samples, got "
                           f"num_samples={num_samples}")
    categories = input.shape[-1]
    replacement = bool(replacement)
    if not replacement and num_samples > categories:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples "
                           f"without replacement: num_samples={num_samples} > {categories} "
                           f"categories")
    if categories > _MAX_CATEGORIES:
        raise RuntimeError(f"multinomial: number of categories cannot exceed 2^24, got "
                           f"{categories}")
    rows = input.shape[0] if input.ndim == 2 else 1
    shape = (rows, num_samples) if input.ndim == 2 else (num_samples,)
    if rows == 0:
        return _creation.empty(*shape, dtype=_dtype.int64, device=input.device)
    if categories == 0:
        raise RuntimeError(f"multinomial: input of shape {tuple(input.shape)} has no categories "
                           f"to sample from")
    fast = not replacement or num_samples == 1
    if input.device.type == "cpu":
        _check_weights(input, fast)
    data = input._data
    device, compute = input.device, _compute_dtype(input.device)
    xp = _dispatch.xp_of(device)
    if fast:
        u = rand((rows, categories), dtype=compute, device=device, generator=generator)._data
        keys = _creation.empty(rows, categories, dtype=compute, device=device)
        keys_data = keys._data

        def kernel():
            _gumbel_keys(xp, data.reshape(rows, categories), u, keys_data)
        _dispatch.launch(device, _dispatch.named("multinomial_keys", kernel,
                                                 shape=(rows, categories)))
        indices = _reductions.topk(keys, num_samples, dim=-1, largest=False).indices
        return indices.reshape(shape)
    u = rand((rows, num_samples), dtype=compute, device=device, generator=generator)._data
    out = _creation.empty(rows, num_samples, dtype=_dtype.int64, device=device)
    out_data, steps = out._data, (categories - 1).bit_length()

    def search():
        _inverse_cdf(xp, data.reshape(rows, categories), u, out_data, steps)
    _dispatch.launch(device, _dispatch.named("multinomial", search, shape=(rows, num_samples)))
    return out.reshape(shape)


_POISSON_SMALL = 10.0    # inversion below this rate, PTRS at and above it (as PyTorch and NumPy)
_POISSON_INVERSION_CAP = 46   # P(X >= 46 | rate 10) ~ 1e-16: the truncated mass
_POISSON_CANDIDATES = 26  # PTRS acceptance >= 0.75 each: all 26 rejected with prob < 2e-16


def _poisson_sample(xp, rates, uniforms, out) -> None:
    """Poisson draws with a fixed amount of work per element; ``uniforms`` has
    ``2 * _POISSON_CANDIDATES`` planes of ``rates``'s shape (the compute dtype)."""
    compute = uniforms.dtype
    lam = rates.astype(compute)
    # rates below 10: inversion by sequential search of the CDF, capped
    small = xp.where(lam < _POISSON_SMALL, lam, 0)    # rate 0: F_0 = 1 > u, so 0
    u = uniforms[0]
    p = xp.exp(-small)
    cdf = p
    count = xp.zeros(lam.shape, dtype=compute)
    for k in range(1, _POISSON_INVERSION_CAP + 1):
        count = count + (u >= cdf)
        p = p * small / k
        cdf = cdf + p
    # rates of 10 and more: Hormann's PTRS, the first of a fixed number of candidates accepted
    big = xp.where(lam >= _POISSON_SMALL, lam, _POISSON_SMALL)
    big = xp.where(xp.isfinite(big), big, _POISSON_SMALL)
    sqrt_lam, log_lam = xp.sqrt(big), xp.log(big)
    b = 0.931 + 2.53 * sqrt_lam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = xp.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2)
    drawn = xp.floor(big)                 # the fallback, a mode (see poisson's docstring)
    done = xp.zeros(lam.shape, dtype=bool)
    for i in range(_POISSON_CANDIDATES):
        centered = uniforms[2 * i] - 0.5
        v = uniforms[2 * i + 1]
        us = 0.5 - xp.abs(centered)
        k = xp.floor((2 * a / us + b) * centered + big + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        refused = (k < 0) | ((us < 0.013) & (v > us))
        safe_k = xp.where(refused, 0, k)
        log_factorial = lgamma_lanczos(xp, safe_k + 1)
        slow = (xp.log(v) + log_inv_alpha - xp.log(a / (us * us) + b)
                <= -big + safe_k * log_lam - log_factorial)
        accepted = (quick | (~refused & slow)) & ~done
        drawn = xp.where(accepted, k, drawn)
        done = done | accepted
    result = xp.where(lam < _POISSON_SMALL, count, drawn)
    result = xp.where(lam == xp.inf, xp.inf, result)
    out[...] = xp.where(lam >= 0, result, xp.nan)   # NaN and negative rates (unchecked) -> NaN


def poisson(input: Tensor, generator: Generator | None = None) -> Tensor:
    """Poisson draws with the rates ``input``, in its (floating) dtype and shape, as
    ``torch.poisson``; rate 0 gives 0.

    Fixed work per element (graph-safe: no host read, no loop whose count depends on the
    values; a captured graph draws fresh samples on every replay, k replays equal k eager
    calls). Each element takes ``52`` uniforms of the compute dtype (float64 where the device
    has it): rates below 10 by inversion (sequential search of the CDF, capped at 46, which
    truncates a mass below 1e-16), rates from 10 by Hormann's PTRS transformed rejection (as
    PyTorch and NumPy), taking the first accepted of 26 candidates. Each candidate is accepted
    with probability at least 0.75 (at rate 10; 0.89 for large rates), so all 26 are rejected
    with probability below 2e-16; the draw is then ``floor(rate)``, a mode. Exact in
    distribution up to those truncations and float rounding; cpu and sim agree exactly for the
    same seed, cuda up to rare last-bit differences of log/exp deciding an acceptance.

    .. warning:: Rates are checked only on cpu. On an accelerator a check would read device
       memory, which a capture forbids; there a negative or NaN rate gives NaN and a +inf rate
       gives +inf.

    Raises:
        TypeError: ``input`` not a Tensor.
        RuntimeError: ``input`` not floating point; a generator of another device. On cpu also:
            a negative, NaN or infinite rate.
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"poisson(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"poisson: expected a floating point tensor of rates, got "
                           f"{input.dtype.name}")
    device, compute = input.device, _compute_dtype(input.device)
    if device.type == "cpu" and input.numel():
        rates = np.asarray(input._data, dtype=np.float64)
        bad = ~(rates >= 0) | (rates == np.inf)
        if bad.any():
            value = rates[tuple(i[0] for i in np.nonzero(bad))] if rates.ndim else rates
            raise RuntimeError(f"poisson: invalid Poisson rate, expected rate to be "
                               f"non-negative and finite, got {float(value)}")
    shape = tuple(input.shape)
    uniforms = rand((2 * _POISSON_CANDIDATES, *shape), dtype=compute, device=device,
                    generator=generator)._data
    out = _creation.empty(*shape, dtype=input.dtype, device=device)
    rates_data, out_data = input._data, out._data
    xp = _dispatch.xp_of(device)

    def kernel():
        _poisson_sample(xp, rates_data, uniforms, out_data)
    _dispatch.launch(device, _dispatch.named("poisson", kernel, shape=shape,
                                             dtype=input.dtype.name))
    return out
