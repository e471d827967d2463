"""``Graph.stage_and_launch``: stage every input onto its static buffer and replay, in one call.

Fast-path pairs (contiguous, same dtype, shape and device) and slow-path pairs (broadcasting,
casting, non-contiguous, from the host or another device) must give what the eager code gives.
"""

import inspect

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, requires_devices, to_numpy

pytestmark = requires_accelerator
Graph = tp.accelerator.Graph





def program(a, b, c):
    return a * b + c.sum(), (a - c).relu()


def captured(dev, shape=(3, 4)):
    statics = [tp.zeros(*shape, device=dev) for _ in range(3)]
    g = Graph()
    with g:
        outputs = program(*statics)
    return g, statics, outputs


def eager(inputs):
    return [to_numpy(t) for t in program(*inputs)]


def check(outputs, inputs):
    for got, want in zip(outputs, eager(inputs)):
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-6, atol=1e-6)


def fresh(dev, seed, shape=(3, 4), dtype=np.float32):
    rng = np.random.default_rng(seed)
    return tp.tensor(rng.standard_normal(shape).astype(dtype), device=dev)


def test_public_signature_is_the_seeds():
    """``help(Graph.stage_and_launch)`` shows the seed's two arguments and nothing private."""
    params = list(inspect.signature(Graph.stage_and_launch).parameters)
    assert params == ["self", "static_inputs", "inputs"]


def test_fast_path_pairs_equal_eager(dev):
    g, statics, outputs = captured(dev)
    for seed in range(4):
        inputs = [fresh(dev, 10 * seed + k) for k in range(3)]
        g.stage_and_launch(statics, inputs)
        check(outputs, inputs)
        for static, given in zip(statics, inputs):
            assert np.array_equal(to_numpy(static), to_numpy(given))


def test_inputs_may_be_reused_right_after_the_call(dev):
    g, statics, outputs = captured(dev)
    inputs = [tp.zeros(3, 4, device=dev) for _ in range(3)]
    kept = []
    for value in (1.0, 2.0, 3.0):
        for k, tensor in enumerate(inputs):
            tensor.fill_(value + k)
        g.stage_and_launch(statics, inputs)
        kept.append([o.clone() for o in outputs])
    for value, outs in zip((1.0, 2.0, 3.0), kept):
        check(outs, [tp.full((3, 4), value + k, device=dev) for k in range(3)])


def test_replay_after_stage_and_launch_does_not_stage_again(dev):
    g, statics, outputs = captured(dev)
    inputs = [fresh(dev, k) for k in range(3)]
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)
    for static in statics:
        static.fill_(2.0)
    g.replay()                                    # runs on what the statics hold now
    check(outputs, statics)
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


def test_tuples_and_empty_sequences(dev):
    x = tp.zeros(2, device=dev)
    counter = tp.zeros(1, device=dev)
    g = Graph()
    with g:
        counter.add_(1)
        y = x + counter
    g.stage_and_launch((), ())
    g.stage_and_launch([], [])
    assert to_numpy(counter).tolist() == [2.0]
    g.stage_and_launch((x,), (tp.full((2,), 5.0, device=dev),))
    assert to_numpy(y).tolist() == [8.0, 8.0]


@pytest.mark.parametrize("kind", ["broadcast", "cast", "non-contiguous", "from-cpu", "cpu-cast",
                                  "scalar-shape"])
def test_slow_path_pairs_equal_eager(dev, kind):
    g, statics, outputs = captured(dev)
    host = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    special = {
        "broadcast": tp.tensor(host[0], device=dev),                       # (4,) -> (3, 4)
        "cast": tp.tensor((host * 10).astype(np.int64), device=dev),        # int64 -> float32
        "non-contiguous": tp.tensor(np.ascontiguousarray(host.T), device=dev).transpose(0, 1),
        "from-cpu": tp.tensor(host),
        "cpu-cast": tp.tensor(host.astype(np.float64)),
        "scalar-shape": tp.full((1, 1), 2.5, device=dev),
    }[kind]
    assert kind != "non-contiguous" or not special.is_contiguous()
    inputs = [fresh(dev, 1), special, fresh(dev, 2)]
    g.stage_and_launch(statics, inputs)
    expected_middle = tp.zeros(3, 4, device=dev)
    expected_middle.copy_(special)
    check(outputs, [inputs[0], expected_middle, inputs[2]])
    assert np.array_equal(to_numpy(statics[1]), to_numpy(expected_middle))


def test_mixed_fast_and_slow_pairs_in_one_call(dev):
    g, statics, outputs = captured(dev)
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    inputs = [tp.tensor(host, device=dev), tp.tensor(host[1]), tp.tensor(host.astype(np.int32),
                                                                        device=dev)]
    g.stage_and_launch(statics, inputs)
    as_static = [tp.zeros(3, 4, device=dev) for _ in range(3)]
    for static, given in zip(as_static, inputs):
        static.copy_(given)
    check(outputs, as_static)


def test_static_input_that_is_a_view(dev):
    base = tp.zeros(4, 4, device=dev)
    column = base[:, 1]
    g = Graph()
    with g:
        y = base.sum(dim=0)
    g.stage_and_launch([column], [tp.tensor([1.0, 2.0, 3.0, 4.0], device=dev)])
    assert to_numpy(y).tolist() == [0.0, 10.0, 0.0, 0.0]


def test_length_mismatch_is_a_value_error(dev):
    g, statics, outputs = captured(dev)
    with pytest.raises(ValueError, match="(?s)2.*3|3.*2"):
        g.stage_and_launch(statics, [fresh(dev, 0), fresh(dev, 1)])
    inputs = [fresh(dev, k) for k in range(3)]
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_uncopyable_pair_is_a_value_error_naming_its_index(dev, index):
    g, statics, outputs = captured(dev)
    inputs = [fresh(dev, k) for k in range(3)]
    bad = list(inputs)
    bad[index] = tp.ones(5, device=dev)
    with pytest.raises(ValueError, match=rf"\[{index}\]"):
        g.stage_and_launch(statics, bad)
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


def test_static_input_on_the_host_is_a_value_error(dev):
    g, statics, outputs = captured(dev)
    with pytest.raises(ValueError, match=r"\[0\]"):
        g.stage_and_launch([tp.zeros(3, 4)], [tp.ones(3, 4, device=dev)])
    inputs = [fresh(dev, k) for k in range(3)]
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


def test_non_tensor_inputs_are_a_type_error(dev):
    g, statics, outputs = captured(dev)
    with pytest.raises(TypeError):
        g.stage_and_launch(statics, [fresh(dev, 0), [1.0, 2.0], fresh(dev, 2)])
    inputs = [fresh(dev, k) for k in range(3)]
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


@pytest.mark.parametrize("which", ["static_inputs", "inputs"])
@pytest.mark.parametrize("given", [None, 3, "bare tensor"])
def test_arguments_must_be_lists_of_tensors(dev, which, given):
    g, statics, outputs = captured(dev)
    inputs = [fresh(dev, k) for k in range(3)]
    if given == "bare tensor":
        given = statics[0] if which == "static_inputs" else inputs[0]
    args = {"static_inputs": statics, "inputs": inputs, which: given}
    expected = type(given).__name__
    with pytest.raises(TypeError, match=rf"stage_and_launch\(static_inputs, inputs\): {which} "
                                        rf"must be a list or tuple of Tensors, got {expected}"):
        g.stage_and_launch(args["static_inputs"], args["inputs"])
    if isinstance(given, tp.Tensor):
        with pytest.raises(TypeError, match=r"pass lists of tensors \(\[t\], not t\)"):
            g.stage_and_launch(args["static_inputs"], args["inputs"])
    assert np.array_equal(to_numpy(statics[0]), np.zeros((3, 4), np.float32))
    g.stage_and_launch(statics, inputs)
    check(outputs, inputs)


def test_stage_and_launch_before_capture_is_refused(dev):
    with pytest.raises(RuntimeError):
        Graph().stage_and_launch([], [])


def test_stage_and_launch_on_a_side_stream(dev):
    caller = tp.accelerator.current_stream()
    g, statics, outputs = captured(dev)
    s = tp.Stream()
    s.wait_stream(caller)
    with s:
        inputs = [fresh(dev, k) for k in range(3)]
        g.stage_and_launch(statics, inputs)
        results = [o.clone() for o in outputs]
    caller.wait_stream(s)
    check(results, inputs)


@requires_devices(2)
def test_inputs_from_another_device(dev):
    g, statics, outputs = captured(dev)
    host = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)
    other = tp.tensor(host, device=accelerator_device(1))
    inputs = [fresh(dev, 0), other, fresh(dev, 2)]
    g.stage_and_launch(statics, inputs)
    check(outputs, [inputs[0], tp.tensor(host, device=dev), inputs[2]])
