"""The capture rules of ``tensorplay/_runtime/capture.py``, each called the way ``Graph`` calls it,
on the selected backend. The rules live there once; backends do not re-check them, so these tests
are where each rule and its message are pinned (the conformance tests in ``tests/accelerator``
check what users see through ``Graph``).
"""

from __future__ import annotations

import ast
import re
import pathlib
import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._runtime import capture as _capture, state as _state, writes as _writes
from tensorplay._runtime.select import accelerator_backend
from support import requires_accelerator

BACKEND = accelerator_backend()
KIND = BACKEND.device_type if BACKEND is not None else None


def on_thread(fn):
    """Run ``fn`` on another thread; return what it returned or raised."""
    outcome = []

    def run():
        try:
            outcome.append(fn())
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return outcome[0]


@pytest.fixture
def side():
    """A fresh side stream of device 0 (its native handle is what Graph hands the rules)."""
    tp.accelerator.set_device_index(0)
    return tp.Stream(0)


@pytest.fixture
def record(side):
    """A registered "global" capture record on ``side``, as ``Graph.capture_begin`` makes one
    (without the native capture: the rules read only the record)."""
    made = _capture.CaptureRecord(side._native, 0, "global")
    _capture.register_capture(made)
    yield made
    _capture.unregister_capture(made)


# -- modes ------------------------------------------------------------------------------------

def test_modes_are_the_three_of_pytorch():
    assert _capture.MODES == ("global", "thread_local", "relaxed")
    for mode in _capture.MODES:
        assert _capture.check_mode(mode) == mode
    with pytest.raises(ValueError, match=r"capture_error_mode must be one of 'global', "
                                         r"'thread_local', 'relaxed', got 'strict'"):
        _capture.check_mode("strict")
    assert _capture.check_mode("relaxed") == "relaxed"


# -- streams ----------------------------------------------------------------------------------

@requires_accelerator
def test_no_capture_on_a_default_stream(side):
    default = _state.default_native_stream(0)
    with pytest.raises(RuntimeError, match=rf"^cannot capture on the default stream of {KIND}:0; "
                                           rf"capture needs a side stream"):
        _capture.check_capture_stream("capture_begin", default, 0)
    assert not BACKEND.is_capturing(default)
    _capture.check_capture_stream("capture_begin", side._native, 0)   # a side stream may


@requires_accelerator
def test_captures_do_not_nest_on_one_stream(side):
    graph = tp.accelerator.Graph()
    graph.capture_begin(stream=side)
    try:
        with pytest.raises(RuntimeError, match="with Graph\\(\\): nested capture on one stream "
                                               "is not supported"):
            _capture.check_not_capturing("with Graph()", side._native, 0)
        with pytest.raises(RuntimeError, match="nested capture"):
            _capture.check_capture_stream("capture_begin", side._native, 0)
    finally:
        graph.capture_end()
    _capture.check_capture_stream("capture_begin", side._native, 0)   # ended: free again


# -- the thread that ends a capture -----------------------------------------------------------

@pytest.mark.parametrize("mode, elsewhere", [("global", True), ("thread_local", True),
                                             ("relaxed", False)])
def test_only_the_capturing_thread_ends_a_non_relaxed_capture(mode, elsewhere):
    made = _capture.CaptureRecord(object(), 0, mode)
    made.check_owner_thread("capture_end")                  # its own thread always may
    outcome = on_thread(lambda: made.check_owner_thread("capture_end"))
    if elsewhere:
        assert isinstance(outcome, RuntimeError)
        assert re.search(rf"capture_end: this graph's capture was begun on thread "
                         rf"'{threading.current_thread().name}' with capture_error_mode="
                         rf"'{mode}', and only that thread may end it", str(outcome))
    else:
        assert outcome is None
    assert on_thread(made.owned_elsewhere) is elsewhere


# -- conditional bodies -----------------------------------------------------------------------

def test_bodies_open_and_close_in_balance():
    made = _capture.CaptureRecord(object(), 0, "global")
    _capture.check_bodies_closed(made, "capture_end")
    with pytest.raises(RuntimeError, match=r"end_capture_to_conditional_node: no conditional node "
                                           r"is open \(unbalanced"):
        _capture.check_body_open(made, "end_capture_to_conditional_node")
    made.body_streams.append(object())
    _capture.check_body_open(made, "set_conditional_handle_for_current_node")
    with pytest.raises(RuntimeError, match=r"capture_end: 1 conditional body\(ies\) still open; "
                                           r"call end_capture_to_conditional_node\(\) first"):
        _capture.check_bodies_closed(made, "capture_end")
    made.body_streams.pop()
    _capture.check_bodies_closed(made, "capture_end")


# -- predicates -------------------------------------------------------------------------------

def test_a_predicate_needs_an_open_capture():
    with pytest.raises(RuntimeError, match="begin_capture_to_if_node: only inside an open "
                                           "capture"):
        _capture.check_predicate("begin_capture_to_if_node", None, tp.tensor([True]))
    assert tp.tensor([True]).item() is True


@requires_accelerator
def test_a_predicate_is_a_one_element_bool_tensor_on_the_capturing_device():
    made = _capture.CaptureRecord(object(), 0, "global")
    call = "begin_capture_to_while_node"
    device = f"{KIND}:0"
    flag = tp.tensor([True], device=device)
    assert _capture.check_predicate(call, made, flag) is flag._data
    assert _capture.check_predicate(call, made, tp.tensor(True, device=device)) is not None
    cases = [
        (np.ones(1, bool), TypeError, r"must be a one-element bool Tensor, got ndarray"),
        (True, TypeError, r"must be a one-element bool Tensor, got bool"),
        (tp.tensor([1], device=device), TypeError, r"must be a bool tensor, got int64"),
        (tp.tensor([True, False], device=device), ValueError,
         r"must have exactly one element, got shape"),
        (tp.tensor([True]), ValueError,
         rf"must be on the capturing device {KIND}:0, got cpu"),
    ]
    for predicate, error, message in cases:
        with pytest.raises(error, match=f"{call}: the predicate {message}"):
            _capture.check_predicate(call, made, predicate)
    if tp.accelerator.device_count() > 1:
        with pytest.raises(ValueError, match=rf"capturing device {KIND}:0, got {KIND}:1"):
            _capture.check_predicate(call, made, tp.tensor([True], device=f"{KIND}:1"))
    assert (flag & True).item() is True


# -- capture-unsafe calls and the registry ----------------------------------------------------

@requires_accelerator
def test_the_registry_holds_the_captures_in_flight(side):
    before = _capture.active_captures()
    made = _capture.CaptureRecord(side._native, 0, "relaxed")
    _capture.register_capture(made)
    assert _capture.active_captures() == before + [made]
    _capture.unregister_capture(made)
    _capture.unregister_capture(made)      # idempotent
    assert _capture.active_captures() == before


@requires_accelerator
def test_an_unsafe_call_in_the_capturing_thread_invalidates_the_capture(record):
    with pytest.raises(RuntimeError, match=r"item\(\) waits for the device, which is not allowed "
                                           rf"during the graph capture on {KIND}:0: "
                                           r"capture_error_mode='global' forbids it in the "
                                           r"capturing thread"):
        _capture.check_capture_safe("item()")
    assert record.invalidated_by == "item()"
    _capture.check_capture_safe("item()")   # invalidated already: it prohibits nothing more


@requires_accelerator
def test_a_relaxed_capture_still_refuses_waits_on_its_own_stream_and_device(side):
    made = _capture.CaptureRecord(side._native, 0, "relaxed")
    _capture.register_capture(made)
    try:
        _capture.check_capture_safe("item()")               # relaxed: another stream may wait
        with pytest.raises(RuntimeError, match="wait on the capturing stream itself"):
            _capture.check_capture_safe("Stream.synchronize()", side._native)
        made.invalidated_by = None
        with pytest.raises(RuntimeError, match=r"synchronize\(\) waits for the device.*every "
                                               r"stream of the device"):
            _capture.wait_for_device(0)
    finally:
        _capture.unregister_capture(made)
    _capture.wait_for_device(0)                              # nothing captures: it waits


@requires_accelerator
def test_a_global_capture_forbids_waits_in_every_thread(record):
    outcome = on_thread(lambda: _capture.check_capture_safe("tolist()"))
    assert isinstance(outcome, RuntimeError)
    assert "forbids it in every thread while another thread captures" in str(outcome)
    assert record.invalidated_by == "tolist()"


# -- write tracking (one module, no Tensor import below the tensor layer) ----------------------

def test_tensors_are_recognised_by_their_layout():
    assert _writes.is_tensor(tp.ones(2)) and _writes.is_tensor(tp.ones(2)[1:])
    assert not any(_writes.is_tensor(x) for x in (np.ones(2), 1.0, None, object()))


@requires_accelerator
def test_a_kernel_closing_over_a_tensor_references_its_bytes():
    flag = tp.tensor([True], device=f"{KIND}:0")
    other = tp.zeros(4, device=f"{KIND}:0")

    def kernel():
        return flag, other
    ranges = _writes.referenced_ranges(kernel, BACKEND)
    assert _writes.array_range(flag._data, BACKEND) in ranges
    assert _writes.extent(other)[1:] in ranges
    watch = _writes.WhileBodyWatch(flag._data)
    assert not watch.may_write_predicate(BACKEND)
    watch.note(kernel, BACKEND)
    assert watch.may_write_predicate(BACKEND)


def test_graphs_does_not_import_its_package():
    """``accelerator`` imports ``accelerator.graphs``; the reverse would be a cycle."""
    path = pathlib.Path(tp.accelerator.graphs.__file__)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            for alias in node.names:   # only sibling modules, never the package's own names
                assert (path.parent / f"{alias.name}.py").exists(), alias.name
