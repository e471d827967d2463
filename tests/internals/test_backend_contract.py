"""The native contract of every backend present, from the protocols in ``tensorplay.backends``.

One suite, run over the host backend (always), and the selected accelerator (sim under
``TENSORPLAY_ACCELERATOR=sim``, cuda on a GPU machine): each protocol method's documented
behaviour at the native level, driven directly (no public API, no caching allocator), plus the
optional-hook lookup and the one-time selection over the one registry of device types.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import backends as _backends
from tensorplay._runtime import allocator as _allocator
from tensorplay._runtime import device as _device
from tensorplay._runtime import select as _select

HOST = _select.host_backend()
ACCELERATOR = _select.accelerator_backend()
_NO_ACCELERATOR = pytest.mark.skipif(
    ACCELERATOR is None or ACCELERATOR.device_count() == 0,
    reason="needs an accelerator backend with a device (TENSORPLAY_ACCELERATOR=sim, or a GPU)")

_PROTOCOL_METHODS = {
    proto: sorted(name for name, value in vars(proto).items()
                  if callable(value) and not name.startswith("_"))
    for proto in (_backends.Devices, _backends.Memory, _backends.Work, _backends.Streams,
                  _backends.Graphs)}


# -- the host: the array half ---------------------------------------------------------------------

def test_host_implements_the_array_half_and_nothing_more():
    for proto in (_backends.Devices, _backends.Work):
        assert all(hasattr(HOST, name) for name in _PROTOCOL_METHODS[proto]), proto
    assert (HOST.name, HOST.device_type, HOST.xp) == ("cpu", "cpu", np)
    assert HOST.device_count() == 1
    assert tp.float32 in HOST.device_capability(0)["supported_dtypes"]
    array = HOST.empty((2, 3), np.float32)
    assert array.shape == (2, 3) and array.dtype == np.float32
    ran = []
    HOST.launch(None, lambda: ran.append(1))
    assert ran == [1]                              # the host runs a kernel at launch
    HOST.from_host(None, array, np.arange(6, dtype=np.float32).reshape(2, 3))
    copy = HOST.to_host(None, array)
    array[...] = 0
    assert copy.tolist() == [[0, 1, 2], [3, 4, 5]]   # to_host copies
    with pytest.raises(RuntimeError, match="host backend.*create_stream"):
        HOST.create_stream(0, 0)
    assert HOST.device_count() == 1   # still usable


def test_host_offers_no_optional_hook():
    for name in _backends.OPTIONAL_HOOKS:
        assert _backends.hook(HOST, name) is None
    with pytest.raises(NotImplementedError, match=r"matmul\(\).*'cpu' backend"):
        _backends.require_hook(HOST, "matmul")
    assert _backends.capability(HOST, "dlpack_device_types") == frozenset({1})


# -- hook lookup ----------------------------------------------------------------------------------

class _Bare:
    """A backend that offers no optional hook and declares no capability."""

    name = "bare"


def test_declared_hooks_include_every_hook_the_layers_above_use():
    assert {"matmul", "erf", "fuse", "empty_host_cache", "softmax", "elementwise_kernel",
            "sum_kernel", "use_allocator", "raw_graph_launchers"} <= _backends.OPTIONAL_HOOKS
    for name in _backends.OPTIONAL_HOOKS:   # each states its fallback
        assert "Fallback" in getattr(_backends.OptionalHooks, name).__doc__, name


def test_a_missing_hook_is_none_and_require_hook_names_it():
    bare = _Bare()
    assert _backends.hook(bare, "softmax") is None
    assert _backends.hook(None, "fuse") is None            # a host-only build
    assert _backends.capability(bare, "dlpack_device_types") == frozenset()
    assert _backends.capability(None, "dlpack_device_types") == frozenset()
    with pytest.raises(NotImplementedError, match=r"softmax\(\).*'bare' backend"):
        _backends.require_hook(bare, "softmax")
    with pytest.raises(NotImplementedError, match=r"fuse\(\).*host-only"):
        _backends.require_hook(None, "fuse")
    with pytest.raises(KeyError, match="'matmull' is not a declared backend hook"):
        _backends.hook(bare, "matmull")
    with pytest.raises(KeyError):
        _backends.capability(bare, "supports_everything")
    assert _backends.hook(bare, "matmul") is None   # the lookup still works afterwards


def test_a_present_hook_is_bound_to_its_backend():
    class WithSoftmax(_Bare):
        def softmax(self, x, out, dim, log):
            out[...] = -1 if log else 1

    backend = WithSoftmax()
    found = _backends.require_hook(backend, "softmax")
    assert found == backend.softmax and _backends.hook(backend, "softmax") == backend.softmax
    out = np.zeros(2)
    found(np.zeros(2), out, 0, True)
    assert out.tolist() == [-1, -1]


# -- the selection and the one registry -----------------------------------------------------------

def test_the_registry_is_the_source_of_device_types():
    assert list(_select.DEVICE_TYPES)[0] == _select.HOST_TYPE == "cpu"
    assert set(_select.accelerator_types()) == set(_select.DEVICE_TYPES) - {"cpu"}
    for kind in _select.DEVICE_TYPES:
        assert tp.device(f"{kind}:0" if kind != "cpu" else kind).type == kind
    with pytest.raises(ValueError) as info:
        tp.device("tpu:0")
    for kind in _select.DEVICE_TYPES:
        assert repr(kind) in str(info.value)
    assert _select.backend_for("cpu") is HOST
    assert _select.backend_for("no-such-type") is None


@pytest.fixture
def fake_registry(monkeypatch):
    """A fresh selection over a registry with one more accelerator type, ``fake``."""
    made = []

    class FakeBackend:
        name = device_type = "fake"

        def __init__(self):
            self.allocator_of = None
            made.append(self)

        def use_allocator(self, allocator_of):
            self.allocator_of = allocator_of

    module = types.ModuleType("tensorplay_fake_backend")
    module.create_backend = FakeBackend
    broken = types.ModuleType("tensorplay_broken_backend")

    def refuse():
        raise ImportError("libfake.so is missing")
    broken.create_backend = refuse
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(sys.modules, broken.__name__, broken)
    monkeypatch.setattr(_select, "DEVICE_TYPES", {**_select.DEVICE_TYPES,
                                                  "fake": module.__name__,
                                                  "broken": broken.__name__})
    monkeypatch.setattr(_select, "_selection", _select._Selection())
    return made


def test_selection_reads_the_registry_and_hands_in_the_allocator(fake_registry, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_ACCELERATOR", "fake")
    _select._select(_allocator.device_allocator)
    (backend,) = fake_registry
    assert _select.accelerator_backend() is backend and _select.require_accelerator() is backend
    assert backend.allocator_of is _allocator.device_allocator   # handed in, never imported
    assert _select.selection_report() == "fake" and _select.host_only_reason() == ""
    assert _select.backend_for("fake") is backend


def test_a_backend_that_fails_to_load_leaves_a_host_only_build_that_says_why(fake_registry,
                                                                           monkeypatch):
    monkeypatch.setenv("TENSORPLAY_ACCELERATOR", "broken")
    _select._select(_allocator.device_allocator)
    assert _select.accelerator_backend() is None
    assert "libfake.so is missing" in _select.selection_report()
    with pytest.raises(RuntimeError, match="no accelerator was built.*libfake.so is missing"):
        _select.require_accelerator()
    monkeypatch.setenv("TENSORPLAY_ACCELERATOR", "tpu")
    with pytest.raises(ValueError, match="'tpu' is not a known accelerator.*'fake'"):
        _select._select()
    assert _select.host_backend() is not None


def test_one_device_index_check_words_every_index_error():
    class TwoDevices:
        device_type = "sim"

        def device_count(self):
            return 2

    with pytest.raises(ValueError, match=r"device index 2 is out of range \('sim:2' does not "
                                         r"exist\): this build has 2 sim device\(s\) "
                                         r"\(sim:0, sim:1\)"):
        _device.check_index(TwoDevices(), 2)
    with pytest.raises(TypeError, match="device index must be an int, got bool True"):
        _device.check_index(TwoDevices(), True)
    assert _device.check_index(TwoDevices(), 1) == 1


@_NO_ACCELERATOR
def test_device_spellings_and_the_allocator_give_the_same_index_error():
    count = ACCELERATOR.device_count()
    bad = f"{ACCELERATOR.device_type}:{count}"
    with pytest.raises(ValueError) as spelled:
        tp.zeros(1, device=bad)
    with pytest.raises(ValueError) as allocated:
        _allocator.device_allocator(count)
    assert str(spelled.value) == str(allocated.value)
    assert f"device index {count} is out of range ('{bad}' does not exist)" in str(spelled.value)
    assert tp.zeros(1, device=f"{ACCELERATOR.device_type}:0").tolist() == [0.0]


# -- an accelerator: the native contract ----------------------------------------------------------

@pytest.fixture
def accelerator():
    streams = []
    blocks = []

    class Session:
        backend = ACCELERATOR

        def stream(self):
            stream = ACCELERATOR.create_stream(0, 0)
            streams.append(stream)
            return stream

        def array(self, values):
            nbytes = 4 * len(values)
            ptr = ACCELERATOR.malloc(0, nbytes)
            blocks.append(ptr)
            array = ACCELERATOR.as_array(0, ptr, nbytes, np.float32, (len(values),), (4,), None)
            ACCELERATOR.from_host(ACCELERATOR.default_stream(0), array,
                                  np.asarray(values, np.float32))
            return ptr, array

    yield Session()
    ACCELERATOR.synchronize_device(0)
    for ptr in blocks:
        ACCELERATOR.free(0, ptr)


@_NO_ACCELERATOR
def test_accelerator_implements_every_protocol_method():
    for proto, names in _PROTOCOL_METHODS.items():
        missing = [name for name in names if not callable(getattr(ACCELERATOR, name, None))]
        assert not missing, f"{ACCELERATOR.name} lacks {proto.__name__}: {missing}"
    for name in _backends.OPTIONAL_HOOKS:   # present hooks are callables
        found = _backends.hook(ACCELERATOR, name)
        assert found is None or callable(found)


@_NO_ACCELERATOR
def test_devices_report_count_and_capability():
    assert ACCELERATOR.device_type in _select.DEVICE_TYPES
    capability = ACCELERATOR.device_capability(0)
    assert isinstance(capability["name"], str) and capability["total_memory"] > 0
    assert tp.float32 in capability["supported_dtypes"]
    free, total = ACCELERATOR.mem_get_info(0)
    assert 0 <= free <= total


@_NO_ACCELERATOR
def test_malloc_as_array_round_trip(accelerator):
    backend = accelerator.backend
    stream = accelerator.stream()
    ptr, array = accelerator.array([1.0, 2.0, 3.0, 4.0])
    assert backend.array_ptr(array) == ptr
    assert backend.array_ptr(array[2:]) == ptr + 8     # views included
    backend.stream_synchronize(backend.default_stream(0))
    assert backend.to_host(stream, array).tolist() == [1.0, 2.0, 3.0, 4.0]
    dst, copy = accelerator.array([0.0] * 4)
    backend.memcpy(stream, dst, ptr, 16)
    assert backend.to_host(stream, copy).tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="nbytes > 0"):
        backend.malloc(0, 0)
    assert backend.to_host(stream, array).tolist() == [1.0, 2.0, 3.0, 4.0]


@_NO_ACCELERATOR
def test_launch_and_to_host_keep_stream_order(accelerator):
    backend, xp = accelerator.backend, accelerator.backend.xp
    stream = accelerator.stream()
    _, array = accelerator.array([0.0] * 4)
    backend.stream_synchronize(backend.default_stream(0))
    for step in range(1, 4):
        backend.launch(stream, lambda step=step: xp.multiply(array, 0, out=array)
                       if step == 1 else xp.add(array, step, out=array))
    assert backend.to_host(stream, array).tolist() == [5.0] * 4   # 0, then +2, then +3
    assert backend.stream_query(stream) is True


@_NO_ACCELERATOR
def test_events_record_query_and_order_two_streams(accelerator):
    backend, xp = accelerator.backend, accelerator.backend.xp
    first, second = accelerator.stream(), accelerator.stream()
    assert not first.is_default and backend.default_stream(0).is_default
    assert isinstance(first, _backends.NativeStream) and first.device_index == 0
    _, array = accelerator.array([1.0, 1.0])
    backend.stream_synchronize(backend.default_stream(0))
    start, end = backend.create_event(0, True), backend.create_event(0, True)
    assert isinstance(start, _backends.NativeEvent) and start.device_index == 0
    backend.event_record(start, first)
    backend.launch(first, lambda: xp.add(array, 1, out=array))
    backend.event_record(end, first)
    backend.stream_wait_event(second, end)
    backend.launch(second, lambda: xp.multiply(array, 10, out=array))
    assert backend.to_host(second, array).tolist() == [20.0, 20.0]   # add ran first
    backend.event_synchronize(end)
    assert backend.event_query(start) is True and backend.event_query(end) is True
    assert backend.event_elapsed_ms(start, end) >= 0.0


@_NO_ACCELERATOR
def test_capture_gives_a_graph_that_replays(accelerator):
    backend, xp = accelerator.backend, accelerator.backend.xp
    stream = accelerator.stream()
    _, array = accelerator.array([1.0, 2.0])
    backend.stream_synchronize(backend.default_stream(0))

    def kernel():
        xp.add(array, 1, out=array)
    backend.launch(stream, kernel)   # eager once (cuda compiles before the capture)
    assert backend.to_host(stream, array).tolist() == [2.0, 3.0]
    backend.capture_begin(stream, "global")
    assert backend.is_capturing(stream)
    backend.launch(stream, kernel)
    graph = backend.capture_end(stream)
    assert not backend.is_capturing(stream)
    executable = backend.instantiate(graph)
    try:
        backend.graph_launch(executable, stream)
        backend.graph_launch(executable, stream)
        assert backend.to_host(stream, array).tolist() == [4.0, 5.0]   # replayed twice
        launch, _failed = backend.launcher(executable)
        launch(backend.stream_handle(stream))
        assert backend.to_host(stream, array).tolist() == [5.0, 6.0]
    finally:
        backend.synchronize_device(0)
        backend.graph_destroy(graph, executable)
