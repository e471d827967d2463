"""Functional control flow: tp.cond, tp.while_loop, tp.fori_loop and tp.switch, eager on every
device and captured into graphs (``with g:``, ``stage_and_launch``, ``tp.compile``) on an
accelerator; nesting, random numbers, every error, and no host synchronization in a captured loop.

Oracles: plain Python for the eager results; for a captured call, the same function run eagerly
on the same inputs.
"""

import collections

import numpy as np
import pytest

import tensorplay as tp
from support import (
    accelerator_device, count_device_waits, requires_accelerator, requires_devices, to_numpy,
)

Graph = tp.accelerator.Graph
current_capturing_graph = tp.accelerator.graphs.current_capturing_graph
Point = collections.namedtuple("Point", "x y")



@pytest.fixture(autouse=True)
def _nothing_left_capturing():
    yield
    if tp.accelerator.is_available():
        assert not tp.accelerator.is_current_stream_capturing()
    assert current_capturing_graph() is None


def values(out):
    """A result structure as nested Python values, container types included."""
    if isinstance(out, tp.Tensor):
        return to_numpy(out).tolist()
    if isinstance(out, dict):
        return {key: values(item) for key, item in out.items()}
    return type(out).__name__, [values(item) for item in out]


def on(device, data, dtype=tp.float32):
    return tp.tensor(data, dtype=dtype, device=device)


def i64(value, device):
    return tp.tensor(value, dtype=tp.int64, device=device)


def capture(fn, *static):
    """Capture ``fn(*static)`` into a new graph: (graph, its outputs)."""
    g = Graph()
    with g:
        out = fn(*static)
    return g, out


def check_replays(fn, static, inputs_list):
    """Capture ``fn`` over ``static``; for each inputs, stage them, replay, and compare with the
    eager call on the same inputs."""
    g, out = capture(fn, *static)
    for inputs in inputs_list:
        g.stage_and_launch(list(static), list(inputs))
        got, want = values(out), values(fn(*inputs))
        assert got == want, (inputs, got, want)
    return g, out


# == eager, on every device ========================================================================

def test_cond_selects_the_branch_from_every_kind_of_predicate(device):
    x = on(device, [1.0, 2.0, 3.0])

    def run(pred):
        return tp.cond(pred, lambda a: (a * 2, a.sum()), lambda a: (a - 1, a.max()), (x,))

    true_preds = [True, tp.tensor(True, device=device), tp.ones(1, dtype=tp.bool, device=device),
                  tp.ones((1, 1), dtype=tp.bool, device=device)]
    for pred in true_preds:
        assert values(run(pred)) == ("tuple", [[2.0, 4.0, 6.0], 6.0])
    for pred in (False, tp.tensor([False], device=device)):
        assert values(run(pred)) == ("tuple", [[0.0, 1.0, 2.0], 3.0])


def test_cond_keeps_every_structure(device):
    x = on(device, [1.0, -1.0])
    structures = [
        (lambda a: a + 1, [2.0, 0.0]),
        (lambda a: [a + 1], ("list", [[2.0, 0.0]])),
        (lambda a: {"b": a * 0, "a": (a, a.sum())},
         {"a": ("tuple", [[1.0, -1.0], 0.0]), "b": [0.0, -0.0]}),
        (lambda a: Point(a, a.abs()), ("Point", [[1.0, -1.0], [1.0, 1.0]])),
        (lambda a: (), ("tuple", [])),
    ]
    for fn, want in structures:
        got = tp.cond(True, fn, fn, [x])
        assert values(got) == want
        if isinstance(want, dict):
            assert list(got) == ["a", "b"]   # keys come back sorted, as in JAX


def test_cond_takes_no_operands_by_default(device):
    x = on(device, [5.0])
    assert values(tp.cond(False, lambda: x + 1, lambda: x - 1)) == [4.0]


def test_results_are_new_tensors_never_the_inputs(device):
    x = on(device, [1.0, 2.0, 3.0])
    same = tp.cond(True, lambda a: a, lambda a: a, (x,))
    view = tp.cond(False, lambda a: a, lambda a: a[1:], (x,))
    chosen = tp.switch(0, [lambda a: a], (x,))
    unchanged = tp.while_loop(lambda a: a.sum() < 0, lambda a: (a + 1,), (x,))
    kept = tp.fori_loop(0, 3, lambda i, v: v, x)
    for out in (same, view, chosen, unchanged[0], kept):
        assert out is not x
        out.fill_(-7.0)
    assert to_numpy(x).tolist() == [1.0, 2.0, 3.0]


def test_loops_never_modify_the_callers_tensors(device):
    """A body that updates the carried values in place works on clones."""
    x = on(device, [0.0, 1.0])
    n = i64(0, device)
    out = tp.while_loop(lambda k, a: k < 3, lambda k, a: (k.add_(1), a.mul_(2).add_(1)), (n, x))
    assert values(out) == ("tuple", [3, [7.0, 15.0]])
    folded = tp.fori_loop(0, 2, lambda i, v: v.add_(10), x)
    assert values(folded) == [20.0, 21.0]
    assert to_numpy(x).tolist() == [0.0, 1.0] and n.item() == 0


def test_while_loop_counts_down_like_python(device):
    for start in (0, 1, 6):
        n, total = tp.while_loop(lambda k, t: k > 0, lambda k, t: (k - 1, t + k),
                                 (i64(start, device), i64(0, device)))
        assert (n.item(), total.item()) == (0, start * (start + 1) // 2)


def test_while_loop_keeps_the_carried_structure(device):
    carried = [on(device, [1.0]), {"steps": i64(0, device)}]

    def body(a, extra):
        return [a * 3, {"steps": extra["steps"] + 1}]

    out = tp.while_loop(lambda a, extra: a.sum() < 100, body, carried)
    assert values(out) == ("list", [[243.0], {"steps": 5}])


def test_while_loop_accepts_a_python_bool_from_cond_fn(device):
    out = tp.while_loop(lambda a: False, lambda a: (a + 1,), (on(device, [2.0]),))
    assert values(out) == ("tuple", [[2.0]])


def test_fori_loop_passes_a_0d_int64_counter(device):
    seen = []

    def body(i, val):
        seen.append((tuple(i.shape), i.dtype, i.device, i.item()))
        return val + i.to(tp.float32)

    out = tp.fori_loop(2, 5, body, on(device, [0.0, 1.0]))
    assert values(out) == [9.0, 10.0]
    assert seen == [((), tp.int64, tp.device(device), k) for k in (2, 3, 4)]


@pytest.mark.parametrize("lower, upper, want", [(0, 4, 6), (3, 3, 0), (5, 1, 0), (-2, 2, -2)])
def test_fori_loop_bounds_as_ints_and_tensors(device, lower, upper, want):
    init = (i64(0, device), on(device, [1.0]))
    for lo, hi in ((lower, upper), (i64(lower, device), tp.tensor([upper], dtype=tp.int32,
                                                                     device=device))):
        total, ones = tp.fori_loop(lo, hi, lambda i, v: (v[0] + i, v[1]), init)
        assert total.item() == want and to_numpy(ones).tolist() == [1.0]


def test_switch_clamps_the_index(device):
    x = on(device, [1.0, 2.0])
    branches = [lambda a: a * 0, lambda a: a + 10, lambda a: -a]
    for index, want in ((-5, [0.0, 0.0]), (0, [0.0, 0.0]), (1, [11.0, 12.0]), (2, [-1.0, -2.0]),
                        (99, [-1.0, -2.0])):
        assert values(tp.switch(index, branches, (x,))) == want
        assert values(tp.switch(i64(index, device), branches, [x])) == want
        assert values(tp.switch(tp.tensor([index], dtype=tp.int32, device=device), branches,
                                (x,))) == want
    assert values(tp.switch(np.int64(1), tuple(branches), operands=(x,))) == [11.0, 12.0]


def test_switch_with_one_branch_and_several_operands(device):
    x, y = on(device, [1.0]), on(device, [2.0])
    assert values(tp.switch(5, [lambda a, b: a + b], (x, y))) == [3.0]
    assert values(tp.switch(1, [lambda a, b: a, lambda a, b: (a, b)], [x, y])) == \
        ("tuple", [[1.0], [2.0]])


# == argument errors (eager, every device) =========================================================

def predicate_cases(device):
    return [
        (TypeError, "bool tensor", tp.ones(1, dtype=tp.int32, device=device)),
        (TypeError, "bool tensor", tp.ones(1, device=device)),
        (TypeError, "Python bool", 1),
        (TypeError, "Python bool", None),
        (RuntimeError, "exactly one element", tp.ones(2, dtype=tp.bool, device=device)),
        (RuntimeError, "exactly one element", tp.ones(0, dtype=tp.bool, device=device)),
    ]


def test_cond_argument_errors(device):
    x = on(device, [1.0])
    ok = lambda a: a  # noqa: E731
    for error, match, pred in predicate_cases(device):
        with pytest.raises(error, match=f"cond: pred .*{match}"):
            tp.cond(pred, ok, ok, (x,))
    with pytest.raises(TypeError, match="true_fn must be callable"):
        tp.cond(True, "a", ok, (x,))
    with pytest.raises(TypeError, match="false_fn must be callable"):
        tp.cond(True, ok, None, (x,))
    with pytest.raises(TypeError, match="operands must be a tuple or list, got Tensor"):
        tp.cond(True, ok, ok, x)


@pytest.mark.parametrize("result, path, kind", [
    (lambda a: 3, "result", "int"),
    (lambda a: (a, None), r"result\[1\]", "NoneType"),
    (lambda a: {"k": [a, "s"]}, r"result\['k'\]\[1\]", "str"),
])
def test_a_branch_must_return_tensors(device, result, path, kind):
    x = on(device, [1.0])
    with pytest.raises(TypeError, match=f"cond: what true_fn returns must be tensors.*{path} "
                                        f"is a {kind}"):
        tp.cond(True, result, result, (x,))
    with pytest.raises(TypeError, match=f"switch: what branches\\[1\\] returns .*{kind}"):
        tp.switch(1, [lambda a: a, result], (x,))


def test_while_loop_argument_errors(device):
    x = on(device, [1.0])
    with pytest.raises(TypeError, match="cond_fn must be callable"):
        tp.while_loop(None, lambda a: (a,), (x,))
    with pytest.raises(TypeError, match="body_fn must be callable"):
        tp.while_loop(lambda a: False, 5, (x,))
    with pytest.raises(TypeError, match="carried_inputs must be a tuple or list, got Tensor"):
        tp.while_loop(lambda a: False, lambda a: (a,), x)
    with pytest.raises(TypeError, match=r"carried_inputs\[1\] is a int"):
        tp.while_loop(lambda a, n: False, lambda a, n: (a, n), (x, 3))
    for error, match, pred in predicate_cases(device):
        with pytest.raises(error, match=f"cond_fn's result at iteration 0 .*{match}"):
            tp.while_loop(lambda a, p=pred: p, lambda a: (a,), (x,))


@pytest.mark.parametrize("body, match", [
    (lambda k, a: k + 1, r"body_fn at iteration 0 returned Tensor, where carried_inputs is "
                         r"\(Tensor, Tensor\)"),
    (lambda k, a: [k + 1, a], r"returned \[Tensor, Tensor\], where carried_inputs is \("),
    (lambda k, a: (k + 1, a, a), r"returned \(Tensor, Tensor, Tensor\)"),
    (lambda k, a: (k + 1, tp.cat([a, a]) if k.item() == 2 else a),
     r"body_fn at iteration 2 returned result\[1\] with shape \(2,\), dtype float32.*where "
     r"carried_inputs\[1\] has shape \(1,\), dtype float32"),
    (lambda k, a: (k + 1, a.to(tp.float64)), r"result\[1\] with shape \(1,\), dtype float64"),
    (lambda k, a: (k + 1, (a,)), r"returned \(Tensor, \(Tensor,\)\)"),
])
def test_while_body_must_keep_the_carried_structure(device, body, match):
    carried = (i64(0, device), on(device, [1.0]))
    with pytest.raises(RuntimeError, match=match):
        tp.while_loop(lambda k, a: k < 5, body, carried)


def test_fori_loop_argument_errors(device):
    x = on(device, [1.0])
    ok = lambda i, v: v  # noqa: E731
    bad_bounds = [1.5, True, None, "3", tp.ones((), device=device),
                  tp.ones((), dtype=tp.bool, device=device), tp.ones(2, dtype=tp.int64,
                                                                    device=device)]
    for bad in bad_bounds:
        with pytest.raises(TypeError, match="fori_loop: lower must be an integer"):
            tp.fori_loop(bad, 3, ok, x)
        with pytest.raises(TypeError, match="fori_loop: upper must be an integer"):
            tp.fori_loop(0, bad, ok, x)
    with pytest.raises(TypeError, match="body_fn must be callable"):
        tp.fori_loop(0, 3, [], x)
    with pytest.raises(TypeError, match=r"init_val\[0\] is a float"):
        tp.fori_loop(0, 3, ok, (1.0, x))
    with pytest.raises(RuntimeError, match=r"body_fn at i=1 returned result with shape \(1,\), "
                                           r"dtype int64.*where init_val has shape \(1,\), "
                                           r"dtype float32"):
        tp.fori_loop(0, 3, lambda i, v: v if i.item() < 1 else v.to(tp.int64), x)
    with pytest.raises(RuntimeError, match=r"body_fn at i=0 returned \(Tensor,\), where init_val "
                                           r"is Tensor"):
        tp.fori_loop(0, 3, lambda i, v: (v,), x)


def test_switch_argument_errors(device):
    x = on(device, [1.0])
    ok = lambda a: a  # noqa: E731
    with pytest.raises(ValueError, match="branches is empty"):
        tp.switch(0, [], (x,))
    with pytest.raises(TypeError, match="branches must be a tuple or list of callables"):
        tp.switch(0, ok, (x,))
    with pytest.raises(TypeError, match=r"branches\[1\] must be callable"):
        tp.switch(0, [ok, 3], (x,))
    bad_indices = [1.0, True, None, tp.ones((), device=device),
                   tp.ones((), dtype=tp.bool, device=device), tp.zeros(2, dtype=tp.int64,
                                                                      device=device)]
    for bad in bad_indices:
        with pytest.raises(TypeError, match="switch: index must be an integer"):
            tp.switch(bad, [ok, ok], (x,))


SWITCH_FORM = r"call switch\(index, branches, operands\) with operands a tuple or list"


def test_switch_takes_its_operands_as_one_tuple_or_list(device):
    """As cond does: a bare tensor, or JAX's varargs spelling, raises TypeError at the call,
    naming the form expected, before any branch runs; the device stays usable."""
    x, y = on(device, [1.0]), on(device, [2.0])
    calls = []

    def branch(*args):
        calls.append(args)
        return args[0] + 1

    for index in (0, i64(0, device)):
        with pytest.raises(TypeError, match=rf"switch: operands must be a tuple or list, got "
                                            rf"Tensor; {SWITCH_FORM}: wrap a single tensor x as "
                                            rf"\(x,\)"):
            tp.switch(index, [branch], x)
        with pytest.raises(TypeError, match=rf"switch: operands must be one tuple or list, but "
                                            rf"1 more positional argument \(Tensor\) follows "
                                            rf"it; {SWITCH_FORM}: \(x, y\), not x, y"):
            tp.switch(index, [branch, branch], x, y)
        with pytest.raises(TypeError, match=rf"2 more positional arguments \(Tensor, int\) "
                                            rf"follow it; {SWITCH_FORM}"):
            tp.switch(index, [branch], (x,), y, 3)
        for bad in (1.5, {"a": x}, None):
            with pytest.raises(TypeError, match=rf"got {type(bad).__name__}; {SWITCH_FORM}"):
                tp.switch(index, [branch], operands=bad)
    assert calls == []
    for operands in ((x,), [x], (x, y)):
        assert values(tp.switch(i64(3, device), [branch], operands)) == [2.0]
    assert values(tp.switch(0, [lambda: x * 3])) == [3.0]   # no operands: () by default
    assert to_numpy(x + y).tolist() == [3.0]


def test_cond_and_while_loop_refuse_a_bare_operand_naming_their_form(device):
    """The one check switch's operands go through."""
    x = on(device, [1.0])
    with pytest.raises(TypeError, match=r"cond: operands must be a tuple or list, got Tensor; "
                                        r"call cond\(pred, true_fn, false_fn, operands\) with "
                                        r"operands a tuple or list: wrap a single tensor x as "
                                        r"\(x,\)"):
        tp.cond(x.sum() > 0, lambda a: a, lambda a: a, x)
    with pytest.raises(TypeError, match=r"while_loop: carried_inputs must be a tuple or list, "
                                        r"got Tensor; call while_loop\(cond_fn, body_fn, "
                                        r"carried_inputs\) with carried_inputs a tuple or list"):
        tp.while_loop(lambda a: False, lambda a: (a,), x)
    assert values(tp.cond(x.sum() > 0, lambda a: a + 1, lambda a: a, [x])) == [2.0]


def test_eager_calls_do_not_check_the_branches_not_taken(device):
    """Documented behaviour: eagerly only the branch taken runs, so branches that disagree in
    shape or dtype pass; a capture checks them (next test)."""
    x = on(device, [1.0, 2.0])
    ran = []

    def whole(a):
        ran.append("whole")
        return a

    def first(a):
        ran.append("first")
        return a[:1]

    def wide(a):
        ran.append("wide")
        return a.to(tp.float64)

    assert values(tp.cond(x.sum() > 0, whole, first, (x,))) == [1.0, 2.0]
    assert values(tp.cond(x.sum() < 0, whole, first, (x,))) == [1.0]
    for k in (0, 1, 2):
        out = tp.switch(i64(k, device), [whole, first, wide], (x,))
        assert (tuple(out.shape), out.dtype) == [((2,), tp.float32), ((1,), tp.float32),
                                                 ((2,), tp.float64)][k]
    assert ran == ["whole", "first", "whole", "first", "wide"]


@requires_accelerator
def test_a_capture_checks_the_branches_an_eager_call_does_not(dev):
    """The same calls that pass eagerly raise at the call once captured: RuntimeError naming
    the branch and the shape or dtype that differs."""
    x = on(dev, [1.0, 2.0])
    k = i64(0, dev)
    cases = [
        (lambda: tp.cond(x.sum() > 0, lambda a: a, lambda a: a[:1], (x,)),
         r"cond: false_fn returned result with shape \(1,\), dtype float32, on .*, where "
         r"true_fn's result has shape \(2,\), dtype float32"),
        (lambda: tp.switch(k, [lambda a: a, lambda a: a * 2, lambda a: a.to(tp.float64)], (x,)),
         r"switch: branches\[2\] returned result with shape \(2,\), dtype float64, on .*, "
         r"where branches\[0\]'s result has shape \(2,\), dtype float32"),
    ]
    for call, match in cases:
        call()   # eagerly: only the branch taken runs, nothing to compare
        with pytest.raises(RuntimeError, match=match):
            with Graph():
                call()
    g = Graph()
    with g:   # a Python-constant index records only its branch, as eagerly: nothing to check
        out = tp.switch(1, [lambda a: a, lambda a: a[:1]], (x,))
    g.replay()
    assert to_numpy(out).tolist() == [1.0]
    assert to_numpy(x + 1).tolist() == [2.0, 3.0]


@requires_accelerator
def test_the_wrong_switch_spelling_raises_at_the_call_inside_a_capture(dev):
    """Before any node opens: the capture goes on as it was, and records what follows."""
    x, y = on(dev, [1.0, 2.0]), on(dev, [3.0, 4.0])
    k = i64(1, dev)
    branches = [lambda a: a + 1, lambda a: a * 10]
    g = Graph()
    with g:
        for index in (1, k):
            with pytest.raises(TypeError, match=rf"switch: operands must be a tuple or list, "
                                                rf"got Tensor; {SWITCH_FORM}"):
                tp.switch(index, branches, x)
            with pytest.raises(TypeError, match=rf"1 more positional argument \(Tensor\) "
                                                rf"follows it; {SWITCH_FORM}"):
                tp.switch(index, branches, x, y)
        assert current_capturing_graph() is g
        out = tp.switch(k, branches, (x,))
    g.replay()
    assert to_numpy(out).tolist() == [10.0, 20.0]
    k.fill_(0)
    g.replay()
    assert to_numpy(out).tolist() == [2.0, 3.0]
    assert to_numpy(x + y).tolist() == [4.0, 6.0]


# == captured: eager and replayed results agree ====================================================

@requires_accelerator
def test_cond_captured_matches_eager(dev):
    def fn(x):
        return tp.cond(x.sum() > 0, lambda a: (a * 2, a.sum()), lambda a: (a - 1, a.max()), (x,))

    inputs = [[1.0, 2.0, 3.0], [-5.0, 1.0, 1.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]
    check_replays(fn, [on(dev, [0.0] * 3)], [[on(dev, v)] for v in inputs])


@requires_accelerator
def test_cond_on_a_predicate_the_caller_sets(dev):
    flag = tp.zeros(1, dtype=tp.bool, device=dev)
    x = on(dev, [1.0, 2.0])
    g, out = capture(lambda: tp.cond(flag, lambda a: {"v": a * 10}, lambda a: {"v": -a}, (x,)))
    for truth in (True, False, False, True):
        flag.fill_(truth)
        g.replay()
        assert values(out) == {"v": [10.0, 20.0] if truth else [-1.0, -2.0]}


@requires_accelerator
def test_cond_reads_pred_before_either_branch_runs(dev):
    """A branch that flips the predicate does not make the other branch run too."""
    flag = tp.ones((), dtype=tp.bool, device=dev)
    x = on(dev, [1.0])

    def flip_then(a):
        flag.fill_(False)
        return a + 1

    g, out = capture(lambda: tp.cond(flag, flip_then, lambda a: a + 100, (x,)))
    flag.fill_(True)
    g.replay()
    assert values(out) == [2.0] and flag.item() is False


@requires_accelerator
def test_captured_results_are_graph_owned_and_overwritten_by_replays(dev):
    x = on(dev, [1.0])
    g, out = capture(lambda a: tp.cond(True, lambda b: b, lambda b: b, (a,)), x)
    assert out is not x
    g.stage_and_launch([x], [on(dev, [4.0])])
    kept = out.clone()
    g.stage_and_launch([x], [on(dev, [9.0])])
    assert (kept.item(), out.item()) == (4.0, 9.0)


def newton_sqrt(a):
    """Newton's iteration for sqrt(a) until the update is tiny; counts its steps."""
    def body(guess, steps):
        return (guess + a / guess) * 0.5, steps + 1

    def keep_going(guess, steps):
        return ((guess * guess - a).abs() > 1e-9 * a).all() & (steps < 100)

    return tp.while_loop(keep_going, body, (tp.ones_like(a), tp.zeros((), dtype=tp.int32,
                                                                      device=a.device)))


@requires_accelerator
def test_while_loop_captured_matches_eager(dev):
    static = on(dev, [2.0, 3.0], dtype=tp.float64)
    inputs = [[2.0, 3.0], [1e6, 4.0], [0.25, 1.0], [1.0, 1.0]]
    g, out = check_replays(newton_sqrt, [static], [[on(dev, v, tp.float64)] for v in inputs])
    assert to_numpy(static).tolist() == [1.0, 1.0]   # the last staged input, not modified
    assert values(out)[1][1] == 0   # a == 1: the first guess is exact, no iteration


@requires_accelerator
def test_while_loop_swapping_carried_values(dev):
    """(a, b, c) -> (c, a, b + a): outputs read buffers that other outputs overwrite."""
    def rotate(n, a, b, c):
        return tp.while_loop(lambda k, x, y, z: k < n,
                             lambda k, x, y, z: (k + 1, z, x, y + x),
                             (tp.zeros((), dtype=tp.int64, device=n.device), a, b, c))

    static = [i64(0, dev), on(dev, [0.0]), on(dev, [0.0]), on(dev, [0.0])]
    check_replays(rotate, static, [[i64(n, dev), on(dev, [1.0]), on(dev, [2.0]),
                                    on(dev, [5.0])] for n in (0, 1, 2, 3, 7)])


@requires_accelerator
def test_while_body_returning_its_own_buffers_in_place(dev):
    def fn(x):
        return tp.while_loop(lambda k, a: k < 4, lambda k, a: (k.add_(1), a.mul_(3)),
                             (tp.zeros((), dtype=tp.int64, device=x.device), x))

    check_replays(fn, [on(dev, [1.0])], [[on(dev, [v])] for v in (1.0, -2.0, 0.5)])


@requires_accelerator
def test_fori_loop_captured_with_tensor_and_int_bounds(dev):
    def fn(lo, hi, x):
        def body(i, val):
            assert tuple(i.shape) == () and i.dtype == tp.int64
            total, poly = val
            return total + i, poly * x + i.to(tp.float32)

        return tp.fori_loop(lo, hi, body, (tp.zeros((), dtype=tp.int64, device=x.device),
                                           tp.zeros_like(x)))

    static = [i64(0, dev), tp.tensor([3], dtype=tp.int32, device=dev), on(dev, [1.0, 2.0])]
    cases = [(0, 3, [1.0, 2.0]), (2, 7, [0.5, -1.0]), (4, 4, [3.0, 3.0]), (5, 2, [1.0, 1.0]),
             (-3, 1, [2.0, 0.0])]
    check_replays(fn, static, [[i64(lo, dev), tp.tensor([hi], dtype=tp.int32, device=dev),
                                on(dev, x)] for lo, hi, x in cases])
    g, out = capture(lambda x: tp.fori_loop(1, 4, lambda i, v: v * i.to(tp.float32), x),
                     static[2])
    g.stage_and_launch([static[2]], [on(dev, [1.0, -1.0])])
    assert values(out) == [6.0, -6.0]


@requires_accelerator
def test_fori_loop_body_may_return_its_counter(dev):
    """The counter is copied out before it steps, so val holds the last i, as eagerly."""
    def fn(n, x):
        return tp.fori_loop(0, n, lambda i, v: (v[0] + x, i),
                            (tp.zeros_like(x), tp.full((), -1, dtype=tp.int64, device=x.device)))

    check_replays(fn, [i64(0, dev), on(dev, [1.0])],
                  [[i64(n, dev), on(dev, [2.0])] for n in (0, 1, 4)])


def counted(i, val):
    """A body whose result depends on every i in order (and carries the last i)."""
    total, poly, last = val
    return total + i, poly * 0.5 + i.to(tp.float32), i


@pytest.mark.parametrize("count", [0, 1, 7, 15, 16, 17, 23, 40])
@pytest.mark.parametrize("unroll", [None, 1, 3, 8, True, False])
@requires_accelerator
def test_unrolled_fori_loop_matches_eager(dev, count, unroll):
    """Every split of a static loop into passes of ``unroll`` iterations and the iterations left
    over (run after the node) gives the eager result."""
    def fn(total, x, last):
        return tp.fori_loop(3, 3 + count, counted, (total, x, last), unroll=unroll)

    def inputs():
        return i64(0, dev), on(dev, [1.0, -2.0]), i64(-1, dev)

    g, out = capture(fn, *inputs())
    g.replay()
    assert values(out) == values(fn(*inputs()))


@requires_accelerator
def test_unrolled_copies_run_the_body_once_each_at_capture(dev):
    calls = []

    def body(i, v):
        calls.append(1)
        return v + i.to(tp.float32)

    for unroll, count, runs in [(None, 40, 8), (None, 15, 1), (4, 10, 4 + 2), (True, 5, 5)]:
        calls.clear()
        g, out = capture(lambda x: tp.fori_loop(0, count, body, x, unroll=unroll),
                         on(dev, [0.0]))
        g.replay()
        assert len(calls) == runs and values(out) == [float(sum(range(count)))]


@requires_accelerator
def test_fresh_numbers_in_every_unrolled_copy(dev):
    tp.manual_seed(7)
    g, out = capture(lambda x: tp.fori_loop(0, 20, lambda i, v: v + tp.rand(1, device=dev) *
                                            (10.0 ** -i.to(tp.float32)), x, unroll=4),
                     tp.zeros(1, device=dev))
    tp.manual_seed(7)
    g.replay()
    tp.manual_seed(7)
    want = tp.fori_loop(0, 20, lambda i, v: v + tp.rand(1, device=dev) *
                        (10.0 ** -i.to(tp.float32)), tp.zeros(1, device=dev))
    np.testing.assert_allclose(to_numpy(out), to_numpy(want), rtol=1e-6)


@requires_accelerator
def test_unroll_errors(dev):
    x, twenty = on(dev, [1.0]), i64(20, dev)
    caller = tp.accelerator.current_stream()
    g = Graph()
    with g:
        with pytest.raises(TypeError, match="fori_loop: unroll must be None, a bool or a "
                                            "positive int, got str 'x'"):
            tp.fori_loop(0, 20, lambda i, v: v, x, unroll="x")
        with pytest.raises(ValueError, match="fori_loop: unroll must be a positive int, got 0"):
            tp.fori_loop(0, 20, lambda i, v: v, x, unroll=0)
        with pytest.raises(ValueError, match="unroll=4 needs loop bounds known at capture"):
            tp.fori_loop(0, twenty, lambda i, v: v, x, unroll=4)
        y = tp.fori_loop(0, twenty, lambda i, v: v + 1, x, unroll=1)
    assert tp.accelerator.current_stream() == caller
    g.replay()
    assert values(y) == [21.0]
    with pytest.raises(RuntimeError, match=r"fori_loop: body_fn \(captured 8 times, unrolled, "
                                           r"for every i\) returned result with shape \(\)"):
        with Graph():
            tp.fori_loop(0, 16, lambda i, v: v.sum() if i.dtype == tp.int64 else v, x)


@requires_accelerator
def test_switch_captured_clamps_on_the_device(dev):
    def fn(k, x):
        return tp.switch(k, [lambda a: (a * 0, a.sum()), lambda a: (a + 10, a.min()),
                             lambda a: (-a, a.max())], (x,))

    static = [tp.tensor([0], dtype=tp.int32, device=dev), on(dev, [1.0, 2.0])]
    check_replays(fn, static, [[tp.tensor([k], dtype=tp.int32, device=dev), on(dev, [1.0, 2.0])]
                               for k in (-4, 0, 1, 2, 3, 50, 1)])


@requires_accelerator
def test_python_constants_record_only_the_chosen_function(dev):
    def refuse(a):
        raise AssertionError("the branch a constant does not select must not run")

    x = on(dev, [1.0])
    g = Graph()
    with g:
        yes = tp.cond(True, lambda a: a + 1, refuse, (x,))
        no = tp.cond(False, refuse, lambda a: a - 1, (x,))
        third = tp.switch(7, [refuse, refuse, lambda a: a * 5], (x,))
        never = tp.while_loop(lambda a: False, lambda a: (a * 100,), (x,))
    g.stage_and_launch([x], [on(dev, [3.0])])
    assert [out.item() for out in (yes, no, third, never[0])] == [4.0, 2.0, 15.0, 3.0]


@requires_accelerator
def test_host_tensors_stay_eager_inside_a_capture(dev):
    host = tp.tensor([2.0])
    x = on(dev, [1.0])
    g = Graph()
    with g:
        out = tp.cond(tp.tensor(True), lambda a: a * 3, lambda a: a, (host,))
        y = x + 1
    assert out.device == tp.device("cpu") and out.item() == 6.0
    g.replay()
    assert y.item() == 2.0


@pytest.mark.parametrize("form", ["cond", "while_loop", "fori_loop", "switch", "nested"])
@requires_accelerator
def test_compile_captures_each_form(dev, form):
    def fn(x, k):
        if form == "cond":
            return tp.cond(k > 0, lambda a: a * k, lambda a: a.flip(0), (x,))
        if form == "while_loop":
            return tp.while_loop(lambda a, n: n > 0, lambda a, n: (a * 2 + 1, n - 1), (x, k))[0]
        if form == "fori_loop":
            return tp.fori_loop(0, k, lambda i, v: v + i * v.sum(), x)
        if form == "switch":
            return tp.switch(k, [lambda a: a, lambda a: a.exp(), lambda a: a.sin()], (x,))
        return tp.fori_loop(0, k, lambda i, v: tp.cond(i % 2 == 0, lambda a: a + 1,
                                                       lambda a: a * 2, (v,)), x)

    compiled = tp.compile(fn)
    for values_, k in (([1.0, 2.0], 2), ([0.5, -1.0], 0), ([3.0, 1.0], 1), ([-1.0, 1.0], 3)):
        x, n = on(dev, values_), i64(k, dev)
        np.testing.assert_allclose(to_numpy(compiled(x, n)), to_numpy(fn(x, n)), rtol=1e-6)
    assert compiled.cache_info["graphs"] == 1 and compiled.cache_info["eager"] == 0


# -- nesting ---------------------------------------------------------------------------------------

def three_deep(x, n):
    """while k < n: acc = (fori_loop over j < k if k is odd, else switch on k % 3) + x."""
    def body(k, acc):
        def odd(a):
            return tp.fori_loop(0, k, lambda j, v: v + a * j.to(a.dtype), tp.zeros_like(a))

        def even(a):
            return tp.switch(k % 3, [lambda b: b, lambda b: b * 2, lambda b: -b], (a,))

        return k + 1, tp.cond(k % 2 == 1, odd, even, (acc,)) + x

    start = tp.zeros((), dtype=tp.int64, device=x.device)
    return tp.while_loop(lambda k, acc: k < n, body, (start, x))[1]


def loop_in_a_branch(x, n):
    """if x.sum() > 0: while_loop(...) else cond(fori_loop(...))."""
    def grow(a):
        return tp.while_loop(lambda k, b: k < n, lambda k, b: (k + 1, b * 1.5),
                             (tp.zeros((), dtype=tp.int64, device=a.device), a))[1]

    def shrink(a):
        return tp.cond(n > 2, lambda b: tp.fori_loop(0, n, lambda i, v: v - 1, b),
                       lambda b: b * 0, (a,))

    return tp.cond(x.sum() > 0, grow, shrink, (x,))


@pytest.mark.parametrize("program", [three_deep, loop_in_a_branch])
@requires_accelerator
def test_nesting_three_deep_matches_eager(dev, program):
    static = [on(dev, [1.0, -2.0]), i64(0, dev)]
    cases = [([1.0, -2.0], 0), ([1.0, 2.0], 5), ([0.5, 0.25], 4), ([-1.0, 0.0], 3),
             ([-1.0, 0.0], 2), ([2.0, 1.0], 7)]
    g, out = capture(program, *static)
    for data, n in cases:
        inputs = [on(dev, data), i64(n, dev)]
        g.stage_and_launch(static, inputs)
        np.testing.assert_allclose(to_numpy(out), to_numpy(program(*inputs)), rtol=1e-6)


@requires_accelerator
def test_forms_nest_in_low_level_conditional_bodies(dev):
    """tp.cond inside a body opened with begin_capture_to_while_node records into that body."""
    counter = i64(0, dev)
    acc = on(dev, [0.0])
    running = tp.ones(1, dtype=tp.bool, device=dev)
    g = Graph()
    with g:
        g.begin_capture_to_while_node(running)
        assert current_capturing_graph() is g
        acc.copy_(tp.cond(counter % 2 == 0, lambda a: a + 1, lambda a: a * 10, (acc,)))
        counter.add_(1)
        running.copy_(counter < 5)
        g.end_capture_to_conditional_node()
    g.replay()
    assert acc.item() == ((0 + 1) * 10 + 1) * 10 + 1


@pytest.mark.parametrize("mode", ["global", "relaxed"])
@requires_devices(2)
def test_a_predicate_on_another_device_than_the_capture_is_refused(mode):
    """Not read once at capture (which would bake one branch into the graph): refused."""
    x = on(accelerator_device(0), [0.0, 0.0])
    pred = tp.tensor(True, device=accelerator_device(1))
    index = i64(1, accelerator_device(1))
    calls = [(lambda: tp.cond(pred, lambda a: a + 1, lambda a: a - 1, (x,)), "cond: pred"),
             (lambda: tp.switch(index, [lambda a: a, lambda a: a + 1], (x,)), "switch: index")]
    for call, what in calls:
        with pytest.raises(RuntimeError, match=f"{what} is on .*:1, but this call is captured "
                                               f"into a graph on .*:0"):
            with Graph(capture_error_mode=mode):
                call()


@requires_devices(2)
def test_captured_on_device_one():
    dev1 = accelerator_device(1)
    with tp.accelerator.device_index(1):
        x = on(dev1, [2.0])
        g, out = capture(lambda a: tp.fori_loop(0, 3, lambda i, v: v * 2, a), x)
        g.stage_and_launch([x], [on(dev1, [1.5])])
    assert out.device == tp.device(dev1) and out.item() == 12.0


# -- random numbers --------------------------------------------------------------------------------

def noisy(x, k):
    """Random draws in a while body, in one branch of a cond and in a fori body."""
    def body(n, acc):
        return n - 1, acc * 0.5 + tp.rand(4, device=acc.device)

    walked = tp.while_loop(lambda n, acc: n > 0, body, (k, x))[1]
    jitter = tp.cond(walked.sum() > 2.0, lambda a: a + tp.randn(4, device=a.device),
                     lambda a: a, (walked,))
    return tp.fori_loop(0, k, lambda i, v: v + tp.rand(4, device=v.device), jitter)


@requires_accelerator
def test_k_replays_equal_k_eager_runs_after_the_same_seed(dev):
    static = [tp.zeros(4, device=dev), i64(0, dev)]
    g, out = capture(noisy, *static)
    inputs = [(on(dev, [0.0] * 4), 3), (on(dev, [5.0] * 4), 1), (on(dev, [0.0] * 4), 0),
              (on(dev, [1.0] * 4), 4), (on(dev, [0.0] * 4), 3)]
    tp.manual_seed(1234)
    replayed = []
    for x, k in inputs:
        g.stage_and_launch(static, [x, i64(k, dev)])
        replayed.append(to_numpy(out).copy())
    tp.manual_seed(1234)
    for (x, k), got in zip(inputs, replayed):
        np.testing.assert_allclose(got, to_numpy(noisy(x, i64(k, dev))), rtol=1e-6, atol=1e-6)
    assert not np.array_equal(replayed[0], replayed[-1])   # same inputs, fresh numbers


@requires_accelerator
def test_fresh_numbers_on_every_captured_iteration(dev):
    x = tp.zeros((5, 3), device=dev)

    def body(i, v):
        row = (tp.arange(5, device=dev).reshape(5, 1) == i).to(tp.float32)
        return v + row * tp.rand(1, 3, device=dev)

    g, rows = capture(lambda a: tp.fori_loop(0, 5, body, a), x)
    g.replay()
    got = to_numpy(rows)
    assert len({row.tobytes() for row in got}) == 5


# == errors inside a capture =======================================================================

def mismatched(form, x):
    if form == "cond-shape":
        return tp.cond(x.sum() > 0, lambda a: a, lambda a: a[:1], (x,))
    if form == "cond-dtype":
        return tp.cond(x.sum() > 0, lambda a: a, lambda a: a.to(tp.float64), (x,))
    if form == "cond-structure":
        return tp.cond(x.sum() > 0, lambda a: (a, a), lambda a: [a, a], (x,))
    if form == "switch":
        return tp.switch(x.sum().to(tp.int64), [lambda a: a, lambda a: a, lambda a: a.sum()],
                         (x,))
    if form == "while":
        return tp.while_loop(lambda a: a.sum() < 9, lambda a: (a.reshape(1, 2),), (x,))
    if form == "fori-structure":
        return tp.fori_loop(0, 3, lambda i, v: {"v": v}, x)
    if form == "host-read":
        return tp.cond(x.sum() > 0, lambda a: a * a.sum().item(), lambda a: a, (x,))
    if form == "raises":
        return tp.cond(x.sum() > 0, lambda a: a, lambda a: a[10 ** 6], (x,))
    if form == "nested":
        return tp.while_loop(lambda a: a.sum() < 9, lambda a: (tp.cond(
            a.sum() > 0, lambda b: tp.fori_loop(0, 2, lambda i, v: v.sum(), b),
            lambda b: b, (a,)),), (x,))
    raise AssertionError(form)


ERRORS = {
    "cond-shape": (RuntimeError, r"cond: false_fn returned result with shape \(1,\), dtype "
                                 r"float32.*where true_fn's result has shape \(2,\)"),
    "cond-dtype": (RuntimeError, r"false_fn returned result with shape \(2,\), dtype float64"),
    "cond-structure": (RuntimeError, r"false_fn returned \[Tensor, Tensor\], where true_fn's "
                                     r"result is \(Tensor, Tensor\)"),
    "switch": (RuntimeError, r"switch: branches\[2\] returned result with shape \(\), .*where "
                             r"branches\[0\]'s result has shape \(2,\)"),
    "while": (RuntimeError, r"while_loop: body_fn \(captured once, for every iteration\) "
                            r"returned result\[0\] with shape \(1, 2\)"),
    "fori-structure": (RuntimeError, r"fori_loop: body_fn \(captured once, for every i\) "
                                     r"returned \{'v': Tensor\}, where init_val is Tensor"),
    "host-read": (RuntimeError, r"Tensor.item\(\) waits for the device"),
    "raises": (IndexError, "index 1000000 is out of bounds"),
    "nested": (RuntimeError, r"fori_loop: body_fn .*returned result with shape \(\)"),
}


@pytest.mark.parametrize("form", sorted(ERRORS))
@requires_accelerator
def test_a_failing_with_block_discards_the_capture(dev, form):
    error, match = ERRORS[form]
    caller = tp.accelerator.current_stream()
    x = on(dev, [1.0, 2.0])
    g = Graph()
    with pytest.raises(error, match=match):
        with g:
            mismatched(form, x)
    assert tp.accelerator.current_stream() == caller
    assert current_capturing_graph() is None
    tp.accelerator.synchronize()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()
    with g:   # the same graph captures again
        y = tp.cond(x.sum() > 0, lambda a: a + 1, lambda a: a, (x,))
    g.replay()
    assert to_numpy(y).tolist() == [2.0, 3.0]


@requires_accelerator
def test_an_error_caught_inside_the_capture_invalidates_it(dev):
    x = on(dev, [1.0, 2.0])
    caller = tp.accelerator.current_stream()
    side = tp.Stream()
    side.wait_stream(caller)
    g = Graph()
    g.capture_begin(stream=side)
    try:
        with pytest.raises(RuntimeError, match="fori_loop: body_fn"):
            mismatched("nested", x)
        # every body the failed call opened is closed: work records on the capture stream
        assert tp.accelerator.current_stream() == side
        assert current_capturing_graph() is g
        x.add_(1)
        with pytest.raises(RuntimeError, match="invalidated by tp.fori_loop's body_fn raising "
                                               "RuntimeError"):
            g.capture_end()
    finally:
        if tp.accelerator.is_current_stream_capturing():
            g.reset()
        tp.accelerator.set_stream(caller)
    assert current_capturing_graph() is None
    assert to_numpy(x).tolist() == [1.0, 2.0]
    g2, out = capture(lambda a: tp.switch(1, [lambda b: b, lambda b: b * 4], (a,)), x)
    g2.replay()
    assert to_numpy(out).tolist() == [4.0, 8.0]


@requires_accelerator
def test_argument_errors_leave_the_capture_as_it_was(dev):
    """Checks that fail before any node is opened raise without touching the capture."""
    x = on(dev, [1.0])
    host_pred = tp.tensor([True])
    ok = lambda a: a + 1  # noqa: E731
    g = Graph()
    with g:
        for error, match, pred in predicate_cases(dev):
            with pytest.raises(error, match=match):
                tp.cond(pred, ok, ok, (x,))
        with pytest.raises(RuntimeError, match=r"cond: pred is on cpu, but this call is "
                                               r"captured into a graph on"):
            tp.cond(host_pred, ok, ok, (x,))
        with pytest.raises(RuntimeError, match="switch: index is on cpu"):
            tp.switch(tp.tensor(1), [ok, ok], (x,))
        with pytest.raises(RuntimeError, match="fori_loop: upper is on cpu"):
            tp.fori_loop(0, tp.tensor(3), lambda i, v: v, x)
        with pytest.raises(RuntimeError, match=r"while_loop: carried_inputs\[1\] is on cpu"):
            tp.while_loop(lambda a, b: a.sum() < 3, lambda a, b: (a + 1, b), (x, tp.ones(1)))
        with pytest.raises(TypeError, match="cond_fn's result before the first iteration"):
            tp.while_loop(lambda a: a.sum(), lambda a: (a + 1,), (x,))
        with pytest.raises(ValueError, match="branches is empty"):
            tp.switch(tp.zeros((), dtype=tp.int64, device=dev), [], (x,))
        with pytest.raises(TypeError, match="body_fn must be callable"):
            tp.fori_loop(0, 2, None, x)
        out = tp.cond(x.sum() > 0, ok, lambda a: a, (x,))
    g.replay()
    assert out.item() == 2.0


@pytest.mark.parametrize("slip", ["left open", "closed"])
@requires_accelerator
def test_unbalanced_low_level_calls_inside_a_branch_are_refused(dev, slip):
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    x = on(dev, [1.0])
    g = Graph()

    def branch(a):
        if slip == "left open":
            g.begin_capture_to_if_node(flag)
        else:
            g.end_capture_to_conditional_node()
        return a + 1

    match = "left 1 conditional body" if slip == "left open" else "closed the conditional body"
    with pytest.raises(RuntimeError, match=f"tp.cond: true_fn {match}"):
        with g:
            tp.cond(x.sum() > 0, branch, lambda a: a, (x,))
    tp.accelerator.synchronize()


@requires_accelerator
def test_outputs_on_another_device_are_refused_in_the_body(dev):
    x = on(dev, [1.0])
    with pytest.raises(RuntimeError, match=r"cond: true_fn's result\[1\] is on cpu"):
        with Graph():
            tp.cond(x.sum() > 0, lambda a: (a, tp.ones(1)), lambda a: (a, tp.ones(1)), (x,))


@requires_accelerator
def test_a_constant_true_predicate_at_the_end_of_a_captured_body_is_refused(dev):
    x = on(dev, [1.0])
    with pytest.raises(RuntimeError, match="constant True at the end of the captured body"):
        with Graph():
            tp.while_loop(lambda a: True, lambda a: (a + 1,), (x,))


# == the graph registry and synchronizations =======================================================

@requires_accelerator
def test_current_capturing_graph_follows_the_capture_and_its_bodies(dev):
    flag = tp.ones(1, dtype=tp.bool, device=dev)
    assert current_capturing_graph() is None
    g = Graph()
    seen = []
    with g:
        seen.append(current_capturing_graph())
        g.begin_capture_to_if_node(flag)
        seen.append(current_capturing_graph(dev))
        g.end_capture_to_conditional_node()
        seen.append(current_capturing_graph(0))
        other = tp.Stream()
        with other:
            seen.append(current_capturing_graph())   # a stream outside the capture
    assert seen == [g, g, g, None]
    assert current_capturing_graph() is None


def test_current_capturing_graph_without_a_capture():
    assert current_capturing_graph() is None


@requires_accelerator
def test_no_host_synchronization_during_a_captured_loop(dev, monkeypatch):
    """Every backend call that waits for the device is counted: capturing and replaying the
    loops makes none; the eager run of the same code makes one per decision."""
    calls = count_device_waits(monkeypatch)

    def program(x, n):
        return three_deep(x, n), newton_sqrt(x.abs().to(tp.float64) + 1)[0]

    static = [on(dev, [1.0, 2.0]), i64(5, dev)]
    g = Graph()
    with g:
        calls.clear()
        outs = program(*static)
        during_capture = list(calls)
    calls.clear()
    for n in (5, 7, 3):
        g.stage_and_launch(static, [on(dev, [0.5, -1.0]), i64(n, dev)])
    during_replays = list(calls)
    assert during_capture == [] and during_replays == []
    want = program(on(dev, [0.5, -1.0]), i64(3, dev))
    eager_syncs = len(calls)
    for got, expected in zip(outs, want):
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-6)
    assert eager_syncs >= 3 + 1   # at least one host read per while decision
