"""Autograd's semantics, as PyTorch's: leaves and ``.grad``, grad modes, ``autograd.grad``,
hooks, views and in-place ops, and the errors, each raised at the call that was wrong."""

import copy
import pickle

import numpy as np
import pytest

import tensorplay as tp
from support import count_device_waits, requires_accelerator, to_numpy


def leaf(values, device, dtype=tp.float64):
    return tp.tensor(values, dtype=dtype, device=device, requires_grad=True)


# -- leaves, .grad, factories -----------------------------------------------------------------
def test_factories_take_requires_grad(device):
    for t in (tp.zeros(2, 3, device=device, requires_grad=True),
              tp.ones(2, device=device, requires_grad=True),
              tp.randn(3, device=device, requires_grad=True),
              tp.full((2,), 1.5, device=device, requires_grad=True),
              tp.tensor([1.0, 2.0], device=device, requires_grad=True),
              tp.arange(3.0, device=device, requires_grad=True),
              tp.linspace(0, 1, 4, device=device, requires_grad=True),
              tp.eye(2, device=device, requires_grad=True),
              tp.zeros_like(tp.ones(2, device=device), requires_grad=True)):
        assert t.requires_grad and t.is_leaf and t.grad is None and t.grad_fn is None
    assert not tp.zeros(2, device=device).requires_grad


@pytest.mark.parametrize("dtype", [tp.int64, tp.int32, tp.bool, tp.uint8])
def test_integer_and_bool_tensors_refuse_requires_grad(device, dtype):
    t = tp.zeros(2, dtype=dtype, device=device)
    with pytest.raises(RuntimeError, match=f"only Tensors of floating point dtype can require "
                                           f"gradients \\(got {dtype.name}\\)"):
        t.requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        tp.zeros(2, dtype=dtype, device=device, requires_grad=True)
    assert not t.requires_grad and (t + 1).sum().item() == 2


def test_complex_tensors_refuse_requires_grad_clearly():
    with pytest.raises(RuntimeError, match="complex tensors \\(complex64\\) are not supported by "
                                           "tensorplay's autograd yet"):
        tp.zeros(2, dtype=tp.complex64).requires_grad_()


def test_gradients_accumulate_into_the_same_grad_tensor(device):
    x = leaf([1.0, 2.0, 3.0], device)
    (x * x).sum().backward()
    first = x.grad
    np.testing.assert_allclose(to_numpy(first), [2, 4, 6])
    (x * 3).sum().backward()
    assert x.grad is first   # in place: a captured step keeps writing the same tensor
    np.testing.assert_allclose(to_numpy(x.grad), [5, 7, 9])


def test_grad_can_be_set_and_checked(device):
    x = leaf([1.0, 2.0], device)
    x.grad = tp.ones(2, dtype=tp.float64, device=device)
    (x * 2).sum().backward()
    np.testing.assert_allclose(to_numpy(x.grad), [3, 3])
    with pytest.raises(RuntimeError, match="assigned grad has data of a different size"):
        x.grad = tp.ones(3, dtype=tp.float64, device=device)
    with pytest.raises(RuntimeError, match="assigned grad has data of a different type"):
        x.grad = tp.ones(2, dtype=tp.float32, device=device)
    with pytest.raises(TypeError, match="expected to be a Tensor or None"):
        x.grad = [1.0, 2.0]
    x.grad = None
    assert x.grad is None


def test_a_grad_fn_names_its_op_and_points_at_its_inputs(device):
    x = leaf([1.0, 2.0], device)
    y = x.exp() * 2
    assert y.grad_fn.name() == "MulBackward0" and not y.is_leaf
    (exp_node, _), = [edge for edge in y.grad_fn.next_functions if edge[0] is not None]
    assert exp_node.name() == "ExpBackward0"
    assert exp_node.next_functions[0][0].name() == "AccumulateGrad"
    assert exp_node.next_functions[0][0].variable is x


def test_outputs_that_cannot_carry_gradients_do_not_require_them(device):
    x = leaf([1.0, -2.0, 3.0], device)
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    assert not tp.zeros_like(x).requires_grad
    values, indices = x.sort()
    assert values.requires_grad and not indices.requires_grad


def test_plain_tensors_carry_no_autograd_state(device):
    a = tp.ones(3, device=device)
    b = (a + 1).exp().sum()
    assert b._ag is None and not b.requires_grad and b.grad_fn is None and b.is_leaf


# -- backward's arguments and errors ------------------------------------------------------------
def test_backward_of_a_non_scalar_needs_a_gradient(device):
    x = leaf([1.0, 2.0], device)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar "
                                           "outputs \\(got shape \\(2,\\)\\)"):
        y.backward()
    y.backward(tp.tensor([1.0, 10.0], dtype=tp.float64, device=device))
    np.testing.assert_allclose(to_numpy(x.grad), [2, 20])
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(tp.ones(3, dtype=tp.float64, device=device))


def test_backward_of_a_tensor_that_does_not_require_grad(device):
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and "
                                           "does not have a grad_fn"):
        tp.ones(2, device=device).sum().backward()


def test_a_second_backward_through_freed_buffers_raises(device):
    x = leaf([1.0, 2.0], device)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()   # the buffers were kept by retain_graph
    np.testing.assert_allclose(to_numpy(x.grad), 2 * (np.exp([1, 2]) * np.array([2, 3])))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second "
                                           "time.*retain_graph=True"):
        y.backward()


def test_a_retained_graph_checks_its_saved_tensors_again_at_the_next_backward(device):
    """Each backward reads the saved tensors afresh: a change in place between two backwards
    of a retained graph is caught by the second."""
    x = leaf([1.0, 2.0], device)
    h = x * 1
    y = (h * h).sum()       # mul saves h, read twice by its formulas
    y.backward(retain_graph=True)
    np.testing.assert_allclose(to_numpy(x.grad), [2.0, 4.0])
    with tp.no_grad():
        h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_an_inplace_op_on_a_leaf_that_requires_grad_raises(device):
    x = leaf([1.0, 2.0], device)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                           "an in-place operation"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[0] = 5.0
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        x[:1].mul_(2)
    np.testing.assert_allclose(to_numpy(x), [1, 2])   # nothing was changed
    with tp.no_grad():
        x.add_(1)   # an optimizer's update
    np.testing.assert_allclose(to_numpy(x), [2, 3])
    assert x.is_leaf and x.requires_grad


def test_changing_a_saved_tensor_in_place_raises_at_backward(device):
    x = leaf([1.0, 2.0], device)
    h = x * 1
    y = (h.exp()).sum()     # exp saves its result
    z = (h * h).sum()       # mul saves h
    h.add_(1)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                                           "computation has been modified by an inplace "
                                           "operation: \\[float64 \\[2\\]\\] is at version 1; "
                                           "expected version 0"):
        z.backward()
    y.backward()   # exp saved its own result, which did not change
    np.testing.assert_allclose(to_numpy(x.grad), np.exp([1.0, 2.0]))


def test_a_plain_tensor_saved_for_backward_is_version_checked_too(device):
    w = leaf([1.0, 2.0], device)
    data = tp.tensor([3.0, 4.0], dtype=tp.float64, device=device)
    loss = (w * data).sum()
    data.mul_(10)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_out_refuses_operands_that_require_grad(device):
    x = leaf([1.0, 2.0], device)
    out = tp.empty(2, dtype=tp.float64, device=device)
    with pytest.raises(RuntimeError, match="functions with out=... arguments don't support "
                                           "automatic differentiation"):
        tp.add(x, 1, out=out)
    with tp.no_grad():
        tp.add(x, 1, out=out)
    np.testing.assert_allclose(to_numpy(out), [2, 3])


def test_an_op_without_a_derivative_raises_at_backward_naming_it(device):
    x = leaf([3.0, 1.0, 2.0], device)
    y = x.cummax(0).values.sum()   # recorded without complaint
    with pytest.raises(NotImplementedError, match="the derivative for cummax is not "
                                                  "implemented"):
        y.backward()


def test_create_graph_says_it_is_not_supported_yet(device):
    x = leaf([1.0], device)
    with pytest.raises(NotImplementedError, match="create_graph=True.*not supported"):
        (x * x).sum().backward(create_graph=True)
    with pytest.raises(NotImplementedError, match="create_graph=True.*not supported"):
        tp.autograd.grad((x * x).sum(), x, create_graph=True)


# -- grad modes -----------------------------------------------------------------------------------
def test_no_grad_as_context_and_decorator(device):
    x = leaf([1.0], device)
    with tp.no_grad():
        assert not (x * 2).requires_grad and not tp.is_grad_enabled()
        with tp.enable_grad():
            assert (x * 2).requires_grad
    assert tp.is_grad_enabled()

    @tp.no_grad()
    def called(t):
        return t * 2

    @tp.no_grad
    def bare(t):
        return t * 2

    assert not called(x).requires_grad and not bare(x).requires_grad
    assert (x * 2).requires_grad


def test_set_grad_enabled_and_inference_mode(device):
    x = leaf([1.0], device)
    tp.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        tp.set_grad_enabled(True)
    with tp.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad
    with tp.inference_mode():
        assert not (x * 2).requires_grad
    with tp.inference_mode(False):
        assert (x * 2).requires_grad
    with pytest.raises(TypeError, match="mode must be a bool"):
        tp.set_grad_enabled("no")


def test_grad_mode_is_per_thread(device):
    import threading

    x = leaf([1.0], device)
    seen = []
    with tp.no_grad():
        thread = threading.Thread(target=lambda: seen.append((x * 2).requires_grad))
        thread.start()
        thread.join()
    assert seen == [True]


# -- autograd.grad, hooks, detach -----------------------------------------------------------------
def test_autograd_grad_leaves_grad_alone(device):
    x = leaf([1.0, 2.0], device)
    y = leaf([3.0], device)
    (gx,) = tp.autograd.grad((x * x).sum(), x)
    np.testing.assert_allclose(to_numpy(gx), [2, 4])
    assert x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        tp.autograd.grad((x * 2).sum(), [x, y])
    gx, gy = tp.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
    assert gy is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        tp.autograd.grad((x * 2).sum(), tp.ones(1, device=device))


def test_autograd_backward_of_several_outputs(device):
    x = leaf([1.0, 2.0], device)
    tp.autograd.backward([(x * 2).sum(), (x * x).sum()])
    np.testing.assert_allclose(to_numpy(x.grad), [4, 6])


def test_hooks_see_and_replace_gradients(device):
    x = leaf([1.0, 2.0], device)
    seen = []
    handle = x.register_hook(lambda g: seen.append(to_numpy(g)) or g * 10)
    h = x * 3
    h.register_hook(lambda g: g + 1)
    h.sum().backward()
    np.testing.assert_allclose(seen[0], [6, 6])       # (1 + 1) * 3
    np.testing.assert_allclose(to_numpy(x.grad), [60, 60])
    handle.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(to_numpy(x.grad), [3, 3])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        tp.ones(1, device=device).register_hook(lambda g: g)


def test_retain_grad_keeps_a_non_leaf_gradient(device):
    x = leaf([1.0, 2.0], device)
    h = x * 2
    h.retain_grad()
    (h * h).sum().backward()
    assert h.retains_grad
    np.testing.assert_allclose(to_numpy(h.grad), [4, 8])


def test_detach_shares_memory_outside_autograd(device):
    x = leaf([1.0, 2.0], device)
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    with tp.no_grad():
        x.mul_(2)
    np.testing.assert_allclose(to_numpy(d), [2, 4])
    y = x * 2
    y.detach_()
    assert not y.requires_grad and y.is_leaf


def test_copies_keep_a_leafs_requires_grad_only(device):
    x = leaf([1.0, 2.0], device)
    assert copy.deepcopy(x).requires_grad
    assert pickle.loads(pickle.dumps(x)).requires_grad
    y = copy.deepcopy(x * 2)
    assert not y.requires_grad and y.grad_fn is None


# -- views and in-place ops ---------------------------------------------------------------------
def test_an_inplace_op_through_a_view_reaches_the_base(device):
    x = leaf([[1.0, 2.0], [3.0, 4.0]], device)
    base = x * 1
    view = base[0]
    view.mul_(x[1])                      # base row 0 becomes x0 * x1
    base.sum().backward()
    np.testing.assert_allclose(to_numpy(x.grad), [[3, 4], [2, 3]])
    assert view.grad_fn is not None and base._version == view._version == 1


def test_a_view_taken_before_an_inplace_change_of_its_base_sees_it(device):
    x = leaf([1.0, 2.0, 3.0], device)
    base = x * 1
    first = base[:2]
    base.mul_(2)
    first.sum().backward()
    np.testing.assert_allclose(to_numpy(x.grad), [2, 2, 0])


@requires_accelerator
def test_backward_makes_no_host_synchronization(dev, monkeypatch):
    x = leaf(np.linspace(-1, 1, 12).reshape(3, 4), dev, tp.float32)
    w = leaf(np.linspace(0, 1, 8).reshape(4, 2), dev, tp.float32)
    target = tp.ones(3, 2, device=dev)
    waits = count_device_waits(monkeypatch)
    loss = ((tp.nn.functional.gelu(x @ w).softmax(dim=1) - target) ** 2).mean()
    loss.backward()
    assert waits == []
    assert x.grad.shape == (3, 4) and w.grad.shape == (4, 2)


@requires_accelerator
def test_backward_captured_accumulates_into_existing_grads(dev):
    """The recipe of a captured step: .grad tensors exist before capture, are zeroed in place
    inside it, and each replay leaves the step's gradient in them."""
    w = leaf([1.0, 2.0], dev)
    data = tp.tensor([3.0, 4.0], dtype=tp.float64, device=dev)
    (w * data).sum().backward()           # creates w.grad outside the capture
    grad = w.grad
    graph = tp.accelerator.Graph()
    with graph:
        w.grad.zero_()
        (w * w * data).sum().backward()
    for values in ([1.0, 1.0], [2.0, -1.0]):
        data.copy_(tp.tensor(values, dtype=tp.float64, device=dev))
        graph.replay()
        np.testing.assert_allclose(to_numpy(w.grad), 2 * np.array([1.0, 2.0]) * values)
    assert w.grad is grad


@pytest.fixture
def residual_products(monkeypatch):
    """The calls of the backend's ``matmul_residual`` hook (the product the engine writes
    gradients straight into ``.grad`` with), each ``(shape of a, whether it wrote rather than
    added)``: the hook is wrapped to count them, and where the backend has none (sim) a NumPy
    stand-in of it drives the engine's path."""
    from tensorplay._runtime import dispatch as _dispatch
    calls = []
    real = _dispatch.accelerator_hook
    backend_hook = real("matmul_residual")

    def matmul_residual(a, b, out, bias, residual, precision="highest"):
        calls.append((tuple(a.shape), residual is None))
        if backend_hook is not None:
            return backend_hook(a, b, out, bias, residual, precision)
        product = np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        out[...] = product + (0 if residual is None else residual)

    monkeypatch.setattr(_dispatch, "accelerator_hook",
                        lambda name: matmul_residual if name == "matmul_residual" else real(name))
    return calls


def test_weight_gradients_written_straight_into_grad_match(residual_products):
    """Where the backend adds into a product's output (cuda), a weight's gradient goes straight
    into ``.grad`` (added, or written into an optimizer's buffer) without a separate kernel:
    the gradients are the same as through AccumulateGrad."""
    device = tp.accelerator.current_accelerator() or tp.device("cpu")
    if device.type == "cpu":
        pytest.skip("the direct path is for accelerators")
    rng = np.random.default_rng(0)
    x = tp.tensor(rng.standard_normal((5, 4)), dtype=tp.float32, device=device)
    w = tp.tensor(rng.standard_normal((4, 3)), dtype=tp.float32, device=device,
                  requires_grad=True)
    b = tp.tensor(rng.standard_normal(3), dtype=tp.float32, device=device, requires_grad=True)
    reference = (x.cpu().numpy().T @ np.ones((5, 3))).astype(np.float32)

    def step():
        (tp.addmm(b, x, w).sum() + (x @ w).sum()).backward()
    step()                                   # .grad made: the path adds into it from now on
    assert w.grad is not None
    step()
    np.testing.assert_allclose(w.grad.cpu().numpy(), 4 * reference, rtol=1e-5)
    added = [call for call in residual_products if not call[1]]
    assert len(added) == 2                   # the second step: both products added in place
    w.grad.zero_()
    w.register_hook(lambda g: g * 2)         # a hook: the gradient goes through it as before
    step()
    np.testing.assert_allclose(w.grad.cpu().numpy(), 4 * reference, rtol=1e-5)
    assert [call for call in residual_products if not call[1]] == added


def test_bias_gradients_summed_straight_into_grad_match(monkeypatch, residual_products):
    """Where the backend adds into a product's output (cuda), a bias's gradient (the output's
    gradient summed over its rows) goes into ``.grad`` as one product with a row of ones that
    adds into it, instead of a sum and an add; through an optimizer's buffer it is written.
    The gradients are those of the plain path, hooks still see the gradient, and inside a
    capture that has no row of ones kept from before the plain path runs."""
    from tensorplay._tensor import derivatives
    device = tp.accelerator.current_accelerator()
    if device is None:
        pytest.skip("the direct path is for accelerators")
    calls = residual_products
    monkeypatch.setattr(derivatives, "_ONE_ROWS", {})
    rng = np.random.default_rng(0)
    h = tp.tensor(rng.standard_normal((6, 4)), dtype=tp.float32, device=device)
    up = tp.tensor(rng.standard_normal((6, 4)), dtype=tp.float32, device=device)
    b = tp.tensor(rng.standard_normal(4), dtype=tp.float32, device=device, requires_grad=True)
    reference = to_numpy(up).sum(0)

    def step(first=True):
        (((h + b) if first else (b + h)) * up).sum().backward()
    step()                                   # .grad made (no .grad to add into yet)
    assert not [c for c in calls if c[0] == (1, 6)]
    step(first=False)                        # the bias as the first operand
    np.testing.assert_allclose(to_numpy(b.grad), 2 * reference, rtol=1e-5)
    assert calls == [((1, 6), False)]        # one product that added into .grad
    calls.clear()
    b.register_hook(lambda g: g * 2)         # a hook: the gradient goes through it as before
    step()
    np.testing.assert_allclose(to_numpy(b.grad), 4 * reference, rtol=1e-5)
    assert calls == []
    # an optimizer's flat gradient buffer (made at its first step): the first gradient after
    # zero_grad(set_to_none=True) is written into it
    c = tp.tensor(rng.standard_normal(4), dtype=tp.float32, device=device, requires_grad=True)
    optimizer = tp.optim.AdamW([c], lr=0.1)
    ((h + c) * up).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    calls.clear()
    ((h + c) * up).sum().backward()
    np.testing.assert_allclose(to_numpy(c.grad), reference, rtol=1e-5)
    assert calls == [((1, 6), True)]
    # inside a capture with no row of ones kept for these rows: the sum and the add run
    calls.clear()
    h3 = tp.tensor(rng.standard_normal((3, 4)), dtype=tp.float32, device=device)
    up3 = tp.tensor(rng.standard_normal((3, 4)), dtype=tp.float32, device=device)
    optimizer.zero_grad(set_to_none=False)
    graph = tp.accelerator.Graph()
    with graph:
        ((h3 + c) * up3).sum().backward()
    graph.replay()
    np.testing.assert_allclose(to_numpy(c.grad), to_numpy(up3).sum(0), rtol=1e-5)
    assert not [call for call in calls if call[0] == (1, 3)]
    assert not [key for key in derivatives._ONE_ROWS if key[0] == 3]
    # another stream keeps a row of its own, filled in that stream's order
    d = tp.tensor(rng.standard_normal(4), dtype=tp.float32, device=device, requires_grad=True)
    ((h + d) * up).sum().backward()          # .grad made
    calls.clear()
    kept = len(derivatives._ONE_ROWS)
    side = tp.Stream()
    side.wait_stream(tp.accelerator.current_stream())
    with side:
        ((h + d) * up).sum().backward()
    tp.accelerator.current_stream().wait_stream(side)
    np.testing.assert_allclose(to_numpy(d.grad), 2 * reference, rtol=1e-5)
    assert calls == [((1, 6), False)] and len(derivatives._ONE_ROWS) == kept + 1
    # a capture reads a row made before it began (its stream has none of its own), so the
    # captured step computes what the eager step does: the same one product
    calls.clear()
    d.grad.zero_()
    graph = tp.accelerator.Graph()
    with graph:
        ((h + d) * up).sum().backward()
    graph.replay()
    np.testing.assert_allclose(to_numpy(d.grad), reference, rtol=1e-5)
    assert calls == [((1, 6), False)] and len(derivatives._ONE_ROWS) == kept + 1
