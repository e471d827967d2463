"""Every public function that takes a device takes every spelling of it, and they all agree.

API.md, "Devices": every function that takes a device also takes a spelling (``"sim:1"``), an
int (an accelerator index) or None (the current device); a bad spelling, an index out of range
or a device of the wrong type raises ValueError naming what was given and what is valid. A type
without an index (``"cuda"``, ``current_accelerator()``) is the current device of that type, as
for tensors: ``Generator(device="cuda")`` draws for ``randn(..., device="cuda")``, as in PyTorch.

``CALLS`` says how to call each public function with a ``device`` parameter; the functions are
found with ``inspect.signature`` over the public namespaces, so a new one that is missing from
the table fails :func:`test_every_public_device_function_is_in_the_table`.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, requires_devices

accelerator = tp.accelerator
ACCELERATOR = accelerator.current_accelerator()
COUNT = accelerator.device_count()
TYPE = ACCELERATOR.type if ACCELERATOR is not None else None

NAMESPACES = ("tensorplay", "tensorplay.accelerator", "tensorplay.accelerator.memory",
              "tensorplay.accelerator.random", "tensorplay.nn.functional", "tensorplay.linalg")
SHORT = {"tensorplay": "tp", "tensorplay.accelerator": "accelerator",
         "tensorplay.accelerator.memory": "memory", "tensorplay.accelerator.random": "random",
         "tensorplay.nn.functional": "F", "tensorplay.linalg": "linalg"}


def _takes_device(obj) -> bool:
    try:
        return "device" in inspect.signature(obj).parameters
    except (TypeError, ValueError):   # builtins without a signature
        return False


def _ours(obj) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("tensorplay")


def public_device_functions() -> dict[str, Any]:
    """Every public callable of ``NAMESPACES`` (and method of a public class) with a ``device``
    parameter, by the first public name it is found under (one entry per object)."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    for module_name in NAMESPACES:
        module = importlib.import_module(module_name)
        names = set(getattr(module, "__all__", ())) | {n for n in dir(module)
                                                      if not n.startswith("_")}
        for name in sorted(names):
            obj = getattr(module, name, None)
            if obj is None or not callable(obj) or not _ours(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if _takes_device(obj):
                found[f"{SHORT[module_name]}.{name}"] = obj
            if inspect.isclass(obj):
                for attribute, member in sorted(vars(obj).items()):
                    if attribute.startswith("_") or not callable(member):
                        continue
                    if id(member) not in seen and _takes_device(member):
                        seen.add(id(member))
                        found[f"{SHORT[module_name]}.{name}.{attribute}"] = member
    return found


# -- how to call each one --------------------------------------------------------------------

def _host():
    return tp.zeros(2)


def _set_device_index(d):
    accelerator.set_device_index(d)
    return accelerator.current_device_index()


def _device_index(d):
    with accelerator.device_index(d):
        return accelerator.current_device_index()


def _seed_each_device() -> list[int]:
    """Give device i the seed 1000 + i, so that a seed tells which device a call reached."""
    seeds = []
    for i in range(COUNT):
        with accelerator.device_index(i):
            accelerator.random.manual_seed(1000 + i)
        seeds.append(1000 + i)
    return seeds


def _get_rng_state(d):
    _seed_each_device()
    words = accelerator.random.get_rng_state(d).numpy().view("<u8")
    return int(words[0])


def _initial_seed(d):
    _seed_each_device()
    return accelerator.random.initial_seed(d)


def _set_rng_state(d):
    """Which devices hold the marker state after ``set_rng_state(marker, d)``."""
    _seed_each_device()
    marker = tp.tensor(np.array([77, 5], dtype="<u8").view(np.uint8))
    accelerator.random.set_rng_state(marker, d)
    return [accelerator.random.initial_seed(i) == 77 for i in range(COUNT)]


@dataclass(frozen=True)
class Call:
    """How to call one function with a device ``d``: ``run(d)`` returns what is compared.

    ``gives_device``: ``run`` returns the device the call used, which must be the concrete
    device the spelling names. Otherwise what it returns must equal what the explicit spelling
    ``"<type>:<index>"`` gives. ``takes_cpu``: cpu is a valid device here (else the call needs
    an accelerator device, and cpu is a device of the wrong type). ``none_is_current``: None
    is the current accelerator device (for those that need one; for the others it is cpu).
    """
    run: Callable[[Any], Any]
    gives_device: bool = True
    takes_cpu: bool = True
    none_is_current: bool = True

    def current_spellings(self) -> list:
        """Spellings of the current device beyond the type-only ones."""
        return [None] if not self.takes_cpu and self.none_is_current else []


CALLS: dict[str, Call] = {
    # tensor factories (None is cpu for them, as in PyTorch)
    "tp.arange": Call(lambda d: tp.arange(3, device=d).device),
    "tp.as_tensor": Call(lambda d: tp.as_tensor([1.0, 2.0], device=d).device),
    "tp.empty": Call(lambda d: tp.empty(2, 3, device=d).device),
    "tp.empty_like": Call(lambda d: tp.empty_like(_host(), device=d).device),
    "tp.eye": Call(lambda d: tp.eye(2, device=d).device),
    "tp.full": Call(lambda d: tp.full((2,), 7.0, device=d).device),
    "tp.full_like": Call(lambda d: tp.full_like(_host(), 7.0, device=d).device),
    "tp.linspace": Call(lambda d: tp.linspace(0.0, 1.0, 5, device=d).device),
    "tp.normal": Call(lambda d: tp.normal(0.0, 1.0, (3,), device=d).device),
    "tp.ones": Call(lambda d: tp.ones(2, device=d).device),
    "tp.ones_like": Call(lambda d: tp.ones_like(_host(), device=d).device),
    "tp.rand": Call(lambda d: tp.rand(3, device=d).device),
    "tp.rand_like": Call(lambda d: tp.rand_like(_host(), device=d).device),
    "tp.randint": Call(lambda d: tp.randint(0, 5, (3,), device=d).device),
    "tp.randint_like": Call(lambda d: tp.randint_like(_host(), 0, 5, device=d).device),
    "tp.randn": Call(lambda d: tp.randn(3, device=d).device),
    "tp.randn_like": Call(lambda d: tp.randn_like(_host(), device=d).device),
    "tp.randperm": Call(lambda d: tp.randperm(4, device=d).device),
    "tp.tensor": Call(lambda d: tp.tensor([1.0, 2.0], device=d).device),
    "tp.zeros": Call(lambda d: tp.zeros(2, device=d).device),
    "tp.zeros_like": Call(lambda d: tp.zeros_like(_host(), device=d).device),
    # Tensor methods
    "tp.Tensor.new_empty": Call(lambda d: _host().new_empty(2, device=d).device),
    "tp.Tensor.new_full": Call(lambda d: _host().new_full((2,), 3.0, device=d).device),
    "tp.Tensor.new_ones": Call(lambda d: _host().new_ones(2, device=d).device),
    "tp.Tensor.new_tensor": Call(lambda d: _host().new_tensor([1.0], device=d).device),
    "tp.Tensor.new_zeros": Call(lambda d: _host().new_zeros(2, device=d).device),
    "tp.Tensor.to": Call(lambda d: _host().to(d).device),   # to(*args, **kwargs): listed below
    # cuda() with no device is the current *cuda* device, so only on a cuda build
    "tp.Tensor.cuda": Call(lambda d: _host().cuda(d).device, takes_cpu=False,
                           none_is_current=TYPE == "cuda"),
    # objects bound to a device
    "tp.device": Call(lambda d: tp.empty(0, device=tp.device(d)).device),   # listed below
    "tp.Generator": Call(lambda d: tp.Generator(device=d).device),
    "tp.Stream": Call(lambda d: tp.Stream(device=d).device, takes_cpu=False),
    "accelerator.current_stream": Call(lambda d: accelerator.current_stream(d).device,
                                       takes_cpu=False),
    # the accelerator's device functions
    "accelerator.set_device_index": Call(_set_device_index, gives_device=False,
                                         takes_cpu=False),
    "accelerator.device_index": Call(_device_index, gives_device=False, takes_cpu=False),
    "accelerator.synchronize": Call(accelerator.synchronize, gives_device=False,
                                    takes_cpu=False),
    "accelerator.get_device_capability": Call(accelerator.get_device_capability,
                                              gives_device=False, takes_cpu=False),
    # memory: free memory moves with other processes on a GPU; the total does not
    "accelerator.get_memory_info": Call(lambda d: accelerator.get_memory_info(d)[1],
                                        gives_device=False, takes_cpu=False),
    **{f"accelerator.{name}": Call(getattr(accelerator, name), gives_device=False,
                                   takes_cpu=False)
       for name in ("memory_stats", "memory_allocated", "max_memory_allocated",
                    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
                    "reset_accumulated_memory_stats")},
    # random
    "random.get_rng_state": Call(_get_rng_state, gives_device=False, takes_cpu=False),
    "random.set_rng_state": Call(_set_rng_state, gives_device=False, takes_cpu=False),
    "random.initial_seed": Call(_initial_seed, gives_device=False, takes_cpu=False),
}

#: in the table though their signatures name no ``device`` parameter: ``device(spelling)``
#: itself and ``Tensor.to(*args, **kwargs)``
NOT_BY_SIGNATURE = {"tp.device", "tp.Tensor.to"}

HOST_CALLS = {name: call for name, call in CALLS.items() if call.takes_cpu}


def accelerator_spellings(index: int = 0) -> list:
    """Every spelling of accelerator device ``index`` (0 is the current device in these
    tests): the device object, type-only spellings, the explicit ones and the int."""
    spellings = [f"{TYPE}:{index}", index, tp.device(TYPE, index), tp.device(f"{TYPE}:{index}"),
                 tp.device(index)]
    if index == accelerator.current_device_index():
        spellings += [ACCELERATOR, TYPE, tp.device(TYPE)]
    return spellings


CPU_SPELLINGS = ["cpu", "cpu:0", tp.device("cpu")]


def _label(spelling) -> str:
    return f"{type(spelling).__name__} {spelling!r}"


@pytest.fixture(autouse=True)
def _restore_rng_states():
    """The rng entries reseed the devices: put their states back afterwards."""
    if not accelerator.is_available():
        yield
        return
    states = accelerator.random.get_rng_state_all()
    yield
    accelerator.random.set_rng_state_all(states)


def test_every_public_device_function_is_in_the_table():
    found = public_device_functions()
    missing = sorted(set(found) - set(CALLS))
    assert not missing, (f"public functions with a device parameter that CALLS does not cover "
                         f"(add how to call them): {missing}")
    stale = sorted(set(CALLS) - set(found) - NOT_BY_SIGNATURE)
    assert not stale, f"CALLS names functions that are not public or take no device: {stale}"
    assert {"tp.zeros", "tp.Generator", "tp.Stream", "accelerator.memory_allocated",
            "random.get_rng_state", "tp.Tensor.new_zeros"} <= set(found)


@requires_accelerator
@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_spelling_names_the_same_device(name):
    call = CALLS[name]
    expected = tp.device(TYPE, 0) if call.gives_device else call.run(f"{TYPE}:0")
    spellings = accelerator_spellings(0) + call.current_spellings()
    for spelling in spellings:
        got = call.run(spelling)
        assert got == expected, f"{name} with {_label(spelling)}: got {got!r}, want {expected!r}"
        if call.gives_device:
            assert str(got) == f"{TYPE}:0" and got.index == 0


@requires_devices(2)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_type_without_index_is_the_current_device(name):
    """``"sim"`` and ``current_accelerator()`` follow the current device, as for tensors; the
    explicit spellings of device 0 do not."""
    call = CALLS[name]
    with accelerator.device_index(1):
        expected = tp.device(TYPE, 1) if call.gives_device else call.run(f"{TYPE}:1")
        for spelling in [ACCELERATOR, TYPE, tp.device(TYPE)] + call.current_spellings():
            with accelerator.device_index(1):   # set_device_index may move it
                got = call.run(spelling)
            assert got == expected, f"{name} with {_label(spelling)} on device 1: got {got!r}"
    if call.gives_device:
        with accelerator.device_index(1):
            assert call.run(f"{TYPE}:0") == tp.device(TYPE, 0)
            assert call.run(0) == tp.device(TYPE, 0)


@pytest.mark.parametrize("name", sorted(HOST_CALLS))
def test_cpu_spellings(name):
    """cpu spellings work on every build, host-only included."""
    for spelling in CPU_SPELLINGS:
        got = HOST_CALLS[name].run(spelling)
        assert got == tp.device("cpu") and str(got) == "cpu", f"{name} with {_label(spelling)}"


@requires_accelerator
@pytest.mark.parametrize("name", sorted(set(CALLS) - set(HOST_CALLS)))
def test_cpu_is_the_wrong_type_where_an_accelerator_device_is_needed(name):
    for spelling in CPU_SPELLINGS:
        with pytest.raises(ValueError) as info:
            CALLS[name].run(spelling)
        message = str(info.value)
        assert "cpu" in message and f"{TYPE}:0" in message, message


def _bad_spellings() -> list[tuple[Any, list[str]]]:
    """(spelling, what its ValueError must name): what was given and what is valid."""
    bad: list[tuple[Any, list[str]]] = [("bogus", ["'bogus'", "'cpu'"]),
                                        ("cpu:1", ["cpu:1", "'cpu'"])]
    if ACCELERATOR is None:
        return bad + [(0, ["0", "'cpu'"]), (1, ["1", "'cpu'"])]
    valid = f"{TYPE}:{COUNT - 1}"
    # the device types tensorplay knows, less this build's: a type this build lacks
    other = next(t for t in ("sim", "cuda") if t != TYPE)
    return bad + [(f"{TYPE}:{COUNT}", [f"{TYPE}:{COUNT}", valid]),
                  (COUNT, [f"{TYPE}:{COUNT}", valid]),
                  (tp.device(TYPE, COUNT), [f"{TYPE}:{COUNT}", valid]),
                  (other, [f"'{other}'", valid]),
                  (f"{other}:0", [f"'{other}:0'", valid]),
                  (f"{TYPE}:-1", ["-1"])]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_bad_spellings_raise_value_error_naming_given_and_valid(name):
    if ACCELERATOR is None and name not in HOST_CALLS:
        pytest.skip("needs an accelerator: on a host-only build it raises RuntimeError "
                    "(test_host_only.py)")
    for spelling, named in _bad_spellings():
        with pytest.raises(ValueError) as info:
            CALLS[name].run(spelling)
        message = str(info.value)
        for text in named:
            assert text in message, f"{name} with {_label(spelling)}: {message!r} lacks {text!r}"


@requires_accelerator
def test_set_device_index_of_a_negative_int_is_a_no_op():
    with accelerator.device_index(0):
        accelerator.set_device_index(-1)
        assert accelerator.current_device_index() == 0


# -- the Generator with every pair of spellings ------------------------------------------------

def _generator_spellings() -> list:
    if ACCELERATOR is None:
        return CPU_SPELLINGS
    return accelerator_spellings(0)


def test_generator_works_with_every_pair_of_spellings():
    """``Generator(device=a)`` fills ``randn(..., device=b)`` whenever a and b name one device,
    with the same numbers for the same seed."""
    spellings = _generator_spellings()
    reference = None
    for made_on in spellings:
        for drawn_on in spellings:
            g = tp.Generator(device=made_on).manual_seed(5)
            values = tp.randn(5, generator=g, device=drawn_on)
            ints = tp.randint(0, 100, (4,), generator=g, device=drawn_on)
            got = (values.cpu().tolist(), ints.cpu().tolist())
            reference = got if reference is None else reference
            assert got == reference, f"Generator({_label(made_on)}), drawn on {drawn_on!r}"


def test_generator_of_the_user_report():
    """The report: a Generator of ``current_accelerator()`` with ``randn`` on it."""
    target = ACCELERATOR if ACCELERATOR is not None else "cpu"
    g = tp.Generator(device=target)
    assert tp.randn(5, generator=g, device=target).device == g.device
    assert tp.rand(2, generator=g, device=target).shape == (2,)


def test_generator_without_device_is_cpu():
    assert tp.Generator().device == tp.device("cpu")
    assert tp.Generator(device=None).device == tp.device("cpu")
    assert tp.randn(2, generator=tp.Generator(None)).device == tp.device("cpu")


@requires_devices(2)
def test_generator_of_another_device_is_refused():
    g = tp.Generator(device=1)
    assert g.device == tp.device(TYPE, 1)
    with pytest.raises(RuntimeError, match=f"{TYPE}:0.*{TYPE}:1"):
        tp.randn(2, generator=g, device=0)
    with accelerator.device_index(1):   # the current device at construction counts
        assert tp.Generator(device=TYPE).device == tp.device(TYPE, 1)


# -- device() itself keeps PyTorch's meaning of a type without index ---------------------------

@requires_accelerator
def test_device_of_an_int_is_an_accelerator_index():
    assert tp.device(0) == tp.device(f"{TYPE}:0")
    assert tp.device(TYPE).index is None    # as torch.device("cuda"): resolved where it is used
    with pytest.raises(ValueError, match="non-negative"):
        tp.device(-1)
    with pytest.raises(ValueError, match="index"):
        tp.device(0, 1)


def test_device_of_an_int_without_accelerator():
    if ACCELERATOR is not None:
        pytest.skip("checks the host-only build")
    with pytest.raises(ValueError, match="no accelerator"):
        tp.device(0)
