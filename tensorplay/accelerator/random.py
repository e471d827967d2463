"""Device-agnostic random-number helpers for the current accelerator.

Seeds and generator states are read and written through the active accelerator backend.
``device`` accepts a device object, a spelling such as ``"cuda:1"``, an integer index, or None
for the current device.

Each device has one counter-based Philox4x32-10 generator whose state lives on the device (see
``_tensor/random.py``): random ops inside a graph draw fresh numbers on every replay and on
every iteration of a while body, and after ``manual_seed(s)`` k replays give exactly what k eager
runs of the captured code give. The same seed, shape and dtype give the same integers and
uniforms on cpu, sim and cuda.

.. warning:: ``get_rng_state`` and ``manual_seed`` copy between host and device, so they are
   capture-unsafe calls (see ``Graph``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .._runtime import device as _device
from .._tensor import random as _random
from .._tensor.tensor import Tensor
from .._runtime.select import require_accelerator

__all__ = ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
           "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"]


def _generator(device) -> "_random.Generator":
    index = _device.resolve_accelerator_index(device)
    return _random.generator_for(_device.device(require_accelerator().device_type, index))


def _all_generators():
    backend = require_accelerator()
    return [_random.generator_for(_device.device(backend.device_type, i))
            for i in range(backend.device_count())]


def get_rng_state(device=None):
    """The generator state of ``device`` as a cpu uint8 tensor (16 bytes: seed, offset)."""
    return _generator(device).get_state()


def get_rng_state_all() -> list:
    """The states of every device's generator, in device order."""
    return [g.get_state() for g in _all_generators()]


def set_rng_state(new_state, device=None) -> None:
    """Restore a state that :func:`get_rng_state` returned.

    Raises:
        TypeError: ``new_state`` is not a Tensor. ValueError: not the 16 uint8 bytes of a state.
    """
    _generator(device).set_state(new_state)


def set_rng_state_all(new_states) -> None:
    """Restore every device's state from a sequence of uint8 state tensors, one per device in
    device order (what :func:`get_rng_state_all` returns). Every state is checked before any
    is restored.

    Raises:
        TypeError: ``new_states`` is not a sequence of state tensors (a single Tensor included).
        ValueError: not one state per device, or a state of the wrong size.
    """
    generators = _all_generators()
    if isinstance(new_states, (Tensor, str, bytes)) or not isinstance(new_states, Iterable):
        what = (f"a single Tensor of shape {new_states.shape}; put one state per device in a "
                f"list" if isinstance(new_states, Tensor)
                else f"{type(new_states).__name__} {new_states!r}")
        raise TypeError(f"set_rng_state_all() expects a sequence of uint8 state tensors "
                        f"(ByteTensors), one per device, as get_rng_state_all() returns; got "
                        f"{what}")
    new_states = list(new_states)
    if len(new_states) != len(generators):
        raise ValueError(f"set_rng_state_all() needs {len(generators)} states (one per device), "
                         f"got {len(new_states)}")
    words = [_random.state_words(state, f"set_rng_state_all() (state {i})")
             for i, state in enumerate(new_states)]
    for generator, state_words in zip(generators, words):
        generator.load_words(state_words)


def manual_seed(seed) -> None:
    """Seed the generator of the current device with an int or an integral float (``2.0``).

    Raises:
        TypeError: another type, or a float with a fractional part. RuntimeError: a seed
            outside ``[-2**63, 2**64)``.
    """
    _generator(None).manual_seed(seed)


def manual_seed_all(seed) -> None:
    """Seed the generator of every device (``seed`` as in :func:`manual_seed`)."""
    for generator in _all_generators():
        generator.manual_seed(seed)


def seed() -> int:
    """Seed the current device's generator with a fresh random seed; return it."""
    value = int.from_bytes(os.urandom(8), "little")
    manual_seed(value)
    return value


def seed_all() -> int:
    """Seed every device's generator with one fresh random seed; return it."""
    value = int.from_bytes(os.urandom(8), "little")
    manual_seed_all(value)
    return value


def initial_seed(device=None) -> int:
    """The seed the current device's generator was last seeded with."""
    return _generator(device).initial_seed()
