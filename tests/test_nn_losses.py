"""The losses of ``tensorplay.nn.functional`` and their modules against NumPy references in
float64, on every device: values for every reduction, ``weight``, ``ignore_index``,
``label_smoothing``, probability targets, ``pos_weight``; gradients through ``backward()``
against central finite differences of the same NumPy reference (and, for cross entropy, the
closed form ``softmax - onehot``); PyTorch's exception types; and, on an accelerator, that a
loss's forward and backward make no host synchronization.

Oracles: NumPy in float64, written from PyTorch's documented formulas (not from tensorplay's
code): cross entropy as ``-sum_c w_c q_c log_softmax(x)_c`` per position with ``q`` the
(smoothed) target distribution, ``'mean'`` dividing by the summed weights of the kept class
targets (or by the number of positions for probability targets).
"""

import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F
from support import count_device_waits, requires_accelerator, to_numpy

RNG = np.random.default_rng(7)
REDUCTIONS = ["none", "mean", "sum"]


def on(device, array, dtype=tp.float64, requires_grad=False):
    return tp.tensor(np.asarray(array), dtype=dtype, device=device, requires_grad=requires_grad)


def idx(device, array):
    return tp.tensor(np.asarray(array, np.int64), device=device)


def as64(tensor) -> np.ndarray:
    return to_numpy(tensor).astype(np.float64)


# -- NumPy references -------------------------------------------------------------------------
def np_log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def reduce(loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.size if denominator is None else denominator)


def np_nll(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """PyTorch's nll_loss: -w[t] * logp[n, t, ...], 0 where ignored; mean over kept weights."""
    class_axis = 0 if logp.ndim == 1 else 1
    classes = logp.shape[class_axis]
    w = np.ones(classes) if weight is None else np.asarray(weight, np.float64)
    moved = np.moveaxis(logp, class_axis, -1)           # (..., C), target-shaped leading dims
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(moved, safe[..., None], -1)[..., 0]
    wt = np.where(valid, w[safe], 0.0)
    loss = -wt * np.where(valid, picked, 0.0)
    return reduce(loss, reduction, wt.sum())


def np_cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean",
                     label_smoothing=0.0):
    class_axis = 0 if x.ndim == 1 else 1
    classes = x.shape[class_axis]
    logp = np.moveaxis(np_log_softmax(x, class_axis), class_axis, -1)   # (..., C)
    w = np.ones(classes) if weight is None else np.asarray(weight, np.float64)
    if target.shape == x.shape:                                         # probabilities
        q = np.moveaxis(target, class_axis, -1)
        q = q * (1 - label_smoothing) + label_smoothing / classes
        loss = -(w * q * logp).sum(-1)
        return reduce(loss, reduction, loss.size)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    q = np.eye(classes)[safe] * (1 - label_smoothing) + label_smoothing / classes
    loss = np.where(valid, -(w * q * logp).sum(-1), 0.0)
    return reduce(loss, reduction, np.where(valid, w[safe], 0.0).sum())


def np_bce_logits(x, t, weight=None, reduction="mean", pos_weight=None):
    log_sig = -np.logaddexp(0, -x)            # log(sigmoid(x))
    log_one_minus = -np.logaddexp(0, x)       # log(1 - sigmoid(x))
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * t * log_sig + (1 - t) * log_one_minus)
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction)


def numeric_grad(fn, x, cotangent, step=1e-6):
    """Central differences of ``sum(cotangent * fn(x))`` with respect to ``x`` (float64)."""
    grad = np.zeros_like(x)
    flat = x.reshape(-1)
    out = grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + step
        up = np.sum(cotangent * fn(x))
        flat[i] = saved - step
        down = np.sum(cotangent * fn(x))
        flat[i] = saved
        out[i] = (up - down) / (2 * step)
    return grad


def check_loss_and_grad(device, tp_fn, np_fn, x, reduction, rtol=1e-9):
    """``tp_fn(input)`` equals ``np_fn(x)`` and its backward equals central differences."""
    expected = np.asarray(np_fn(x))
    inp = on(device, x, requires_grad=True)
    got = tp_fn(inp)
    assert got.dtype == tp.float64 and tuple(got.shape) == expected.shape
    np.testing.assert_allclose(as64(got), expected, rtol=rtol, atol=1e-12)
    cotangent = RNG.uniform(0.5, 1.5, size=expected.shape) if reduction == "none" else \
        np.ones(())
    got.backward(on(device, cotangent))
    want = numeric_grad(np_fn, x.copy(), cotangent)
    np.testing.assert_allclose(as64(inp.grad), want, rtol=1e-6, atol=1e-8)


# -- mse / l1 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_and_l1_values_and_gradients(device, reduction):
    x = RNG.normal(size=(3, 4))
    t = RNG.normal(size=(3, 4))
    target = on(device, t)
    check_loss_and_grad(device, lambda i: F.mse_loss(i, target, reduction=reduction),
                        lambda a: reduce((a - t) ** 2, reduction), x, reduction)
    check_loss_and_grad(device, lambda i: F.l1_loss(i, target, reduction=reduction),
                        lambda a: reduce(np.abs(a - t), reduction), x, reduction)


def test_mse_float32_and_modules(device):
    x = RNG.normal(size=(5, 2)).astype(np.float32)
    t = RNG.normal(size=(5, 2)).astype(np.float32)
    xi, ti = on(device, x, tp.float32), on(device, t, tp.float32)
    got = nn.MSELoss()(xi, ti)
    assert got.dtype == tp.float32
    np.testing.assert_allclose(as64(got), ((x.astype(np.float64) - t) ** 2).mean(), rtol=1e-6)
    np.testing.assert_allclose(as64(nn.L1Loss(reduction="sum")(xi, ti)),
                               np.abs(x.astype(np.float64) - t).sum(), rtol=1e-6)
    assert repr(nn.MSELoss()) == "MSELoss()" and repr(nn.L1Loss()) == "L1Loss()"


def test_l1_gradient_at_zero_is_zero(device):
    x = on(device, [1.0, 2.0], requires_grad=True)
    F.l1_loss(x, on(device, [1.0, 0.0]), reduction="sum").backward()
    np.testing.assert_array_equal(as64(x.grad), [0.0, 1.0])


def test_mse_size_mismatch_warns_and_broadcasts(device):
    x = on(device, np.ones((3, 1)))
    with pytest.warns(UserWarning, match="different to the input size"):
        out = F.mse_loss(x, on(device, np.zeros(3)), reduction="none")
    assert tuple(out.shape) == (3, 3)


def test_mean_of_empty_is_nan(device):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(as64(F.mse_loss(on(device, np.zeros(0)), on(device, np.zeros(0)))))


def test_pointwise_loss_errors(device):
    x = on(device, np.ones(3))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        nn.L1Loss(reduction="bad")(x, x)
    ints = idx(device, [1, 2, 3])
    with pytest.raises(RuntimeError, match="int64"):
        F.mse_loss(ints, ints)
    with pytest.raises(TypeError, match="must be Tensor"):
        F.mse_loss(x, [1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError), pytest.warns(UserWarning, match="target size"):
        F.mse_loss(x, on(device, np.ones(4)))


def test_legacy_size_average_and_reduce(device):
    x, t = on(device, [1.0, 3.0]), on(device, [0.0, 0.0])
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert as64(F.mse_loss(x, t, size_average=False)) == 10.0
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert nn.MSELoss(reduce=False).reduction == "none"


# -- nll / cross entropy with class indices ---------------------------------------------------
SHAPES = [((5,), ()), ((4, 5), (4,)), ((2, 3, 4), (2, 4)), ((2, 3, 2, 2), (2, 2, 2)),
          ((2, 3, 1, 2, 2), (2, 1, 2, 2))]


def class_targets(input_shape, target_shape, ignore=None):
    classes = input_shape[0 if len(input_shape) == 1 else 1]
    t = RNG.integers(0, classes, size=target_shape)
    if ignore is not None and t.size > 1:
        t.reshape(-1)[::3] = ignore
    return np.asarray(t, np.int64)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}")
def test_cross_entropy_class_indices(device, shapes, reduction):
    input_shape, target_shape = shapes
    x = RNG.normal(size=input_shape)
    t = class_targets(input_shape, target_shape)
    target = idx(device, t)
    check_loss_and_grad(device, lambda i: F.cross_entropy(i, target, reduction=reduction),
                        lambda a: np_cross_entropy(a, t, reduction=reduction), x, reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("shapes", SHAPES[1:4], ids=lambda s: f"{s[0]}")
def test_cross_entropy_weight_ignore_index_label_smoothing(device, shapes, smoothing,
                                                           reduction):
    input_shape, target_shape = shapes
    classes = input_shape[1]
    x = RNG.normal(size=input_shape)
    t = class_targets(input_shape, target_shape, ignore=2 if classes > 2 else 1)
    w = RNG.uniform(0.5, 2.0, size=classes)
    target, weight = idx(device, t), on(device, w)
    for ignore_index in (-100, int(t.reshape(-1)[0])):
        def ours(i):
            return F.cross_entropy(i, target, weight=weight, ignore_index=ignore_index,
                                   reduction=reduction, label_smoothing=smoothing)

        def reference(a):
            return np_cross_entropy(a, t, w, ignore_index, reduction, smoothing)
        check_loss_and_grad(device, ours, reference, x, reduction)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_ignore_index_without_weight(device, smoothing):
    x = RNG.normal(size=(6, 4))
    t = np.array([0, -100, 3, 1, -100, 2])
    target = idx(device, t)
    for reduction in REDUCTIONS:
        check_loss_and_grad(
            device, lambda i: F.cross_entropy(i, target, reduction=reduction,
                                              label_smoothing=smoothing),
            lambda a: np_cross_entropy(a, t, None, -100, reduction, smoothing), x, reduction)
    # the mean divides by the 4 targets kept, and ignored positions give 0 under 'none'
    none = as64(F.cross_entropy(on(device, x), target, reduction="none"))
    assert none[1] == 0.0 and none[4] == 0.0


def test_cross_entropy_gradient_is_softmax_minus_onehot(device):
    x = RNG.normal(size=(3, 5))
    t = np.array([4, 0, 2])
    inp = on(device, x, requires_grad=True)
    F.cross_entropy(inp, idx(device, t)).backward()
    p = np.exp(np_log_softmax(x, 1))
    np.testing.assert_allclose(as64(inp.grad), (p - np.eye(5)[t]) / 3, rtol=1e-12, atol=1e-15)


def test_every_target_ignored_gives_nan_mean_and_zero_gradient(device):
    inp = on(device, RNG.normal(size=(2, 3)), requires_grad=True)
    target = idx(device, [-100, -100])
    assert np.isnan(as64(F.cross_entropy(inp, target)))
    assert as64(F.cross_entropy(inp, target, reduction="sum")) == 0.0
    F.cross_entropy(inp, target, reduction="sum").backward()
    np.testing.assert_array_equal(as64(inp.grad), np.zeros((2, 3)))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(device, reduction):
    x = np_log_softmax(RNG.normal(size=(5, 4)), 1)
    t = np.array([1, 0, 3, -100, 2])
    w = RNG.uniform(0.5, 2.0, size=4)
    target, weight = idx(device, t), on(device, w)
    check_loss_and_grad(device, lambda i: F.nll_loss(i, target, reduction=reduction),
                        lambda a: np_nll(a, t, reduction=reduction), x, reduction)
    check_loss_and_grad(device, lambda i: F.nll_loss(i, target, weight, reduction=reduction),
                        lambda a: np_nll(a, t, w, reduction=reduction), x, reduction)
    module = nn.NLLLoss(weight=weight, reduction=reduction)
    np.testing.assert_allclose(as64(module(on(device, x), target)),
                               np_nll(x, t, w, reduction=reduction), rtol=1e-12)


def test_cross_entropy_float32(device):
    x = RNG.normal(size=(8, 10)).astype(np.float32)
    t = RNG.integers(0, 10, size=8)
    got = F.cross_entropy(on(device, x, tp.float32), idx(device, t), label_smoothing=0.1)
    assert got.dtype == tp.float32
    np.testing.assert_allclose(as64(got), np_cross_entropy(x.astype(np.float64), t,
                                                           label_smoothing=0.1), rtol=1e-5)


# -- cross entropy with probability targets ---------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5,), (4, 3), (2, 3, 4)])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probability_targets(device, shape, reduction, smoothing, weighted):
    class_axis = 0 if len(shape) == 1 else 1
    x = RNG.normal(size=shape)
    q = np.exp(np_log_softmax(RNG.normal(size=shape), class_axis))
    w = RNG.uniform(0.5, 2.0, size=shape[class_axis]) if weighted else None
    target = on(device, q)
    weight = None if w is None else on(device, w)
    check_loss_and_grad(
        device, lambda i: F.cross_entropy(i, target, weight, reduction=reduction,
                                          label_smoothing=smoothing),
        lambda a: np_cross_entropy(a, q, w, reduction=reduction, label_smoothing=smoothing),
        x, reduction)


def test_cross_entropy_module(device):
    x = RNG.normal(size=(4, 3))
    t = np.array([0, 2, -1, 1])
    w = np.array([1.0, 2.0, 0.5])
    module = nn.CrossEntropyLoss(weight=on(device, w), ignore_index=-1, label_smoothing=0.05)
    np.testing.assert_allclose(as64(module(on(device, x), idx(device, t))),
                               np_cross_entropy(x, t, w, -1, "mean", 0.05), rtol=1e-12)
    assert repr(module) == "CrossEntropyLoss()"
    assert list(module.state_dict()) == ["weight"]   # the class weights are a buffer
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    moved = nn.CrossEntropyLoss(weight=on("cpu", w)).to(device)
    assert moved.weight.device == tp.device(device)


# -- errors ------------------------------------------------------------------------------------
def test_class_target_errors(device):
    x = on(device, RNG.normal(size=(3, 4)))
    with pytest.raises(RuntimeError, match="Long"):
        F.cross_entropy(x, on(device, [0.0, 1.0, 2.0]))     # float class indices
    with pytest.raises(RuntimeError, match="int32"):
        F.nll_loss(x, tp.tensor([0, 1, 2], dtype=tp.int32, device=device))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target "
                                         r"batch_size \(2\)"):
        F.cross_entropy(x, idx(device, [0, 1]))
    with pytest.raises(RuntimeError, match="multi-target not supported"):
        F.cross_entropy(x, idx(device, [[0], [1], [2]]))
    with pytest.raises(RuntimeError, match=r"Expected target size \[2, 4\], got \[2, 3\]"):
        F.cross_entropy(on(device, np.zeros((2, 3, 4))), idx(device, np.zeros((2, 3))))
    with pytest.raises(RuntimeError, match="size mismatch"):
        F.nll_loss(on(device, np.zeros(4)), idx(device, [1]))
    with pytest.raises(ValueError, match="Expected 1 or more dimensions"):
        F.nll_loss(on(device, 1.0), idx(device, 0))
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 4 "
                                           "classes or no classes"):
        F.cross_entropy(x, idx(device, [0, 1, 2]), weight=on(device, np.ones(3)))
    with pytest.raises(RuntimeError, match="float32"):
        F.cross_entropy(x, idx(device, [0, 1, 2]), weight=on(device, np.ones(4), tp.float32))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, idx(device, [0, 1, 2]), reduction="max")
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(x, idx(device, [0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(TypeError, match="must be Tensor"):
        F.cross_entropy(x, [0, 1, 2])


def test_probability_target_errors(device):
    x = on(device, RNG.normal(size=(3, 4)))
    with pytest.raises(RuntimeError, match="Expected floating point type for target with class "
                                           "probabilities, got int64"):
        F.cross_entropy(x, idx(device, np.zeros((3, 4))))
    with pytest.raises(RuntimeError, match="ignore_index is not supported for floating point "
                                           "target"):
        F.cross_entropy(x, on(device, np.full((3, 4), 0.25)), ignore_index=1)


def test_cross_entropy_of_integer_logits_raises(device):
    with pytest.raises(RuntimeError, match="not implemented for int64"):
        F.cross_entropy(idx(device, [[1, 2]]), idx(device, [0]))


# -- binary cross entropy with logits ---------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits(device, reduction):
    x = RNG.normal(scale=3.0, size=(4, 3))
    t = RNG.uniform(size=(4, 3))
    w = RNG.uniform(0.5, 2.0, size=(4, 1))
    pw = RNG.uniform(0.5, 3.0, size=3)
    target = on(device, t)
    check_loss_and_grad(
        device, lambda i: F.binary_cross_entropy_with_logits(i, target, reduction=reduction),
        lambda a: np_bce_logits(a, t, reduction=reduction), x, reduction)
    check_loss_and_grad(
        device, lambda i: F.binary_cross_entropy_with_logits(
            i, target, on(device, w), reduction=reduction, pos_weight=on(device, pw)),
        lambda a: np_bce_logits(a, t, w, reduction, pw), x, reduction)
    module = nn.BCEWithLogitsLoss(weight=on(device, w), reduction=reduction,
                                  pos_weight=on(device, pw))
    np.testing.assert_allclose(as64(module(on(device, x), target)),
                               np_bce_logits(x, t, w, reduction, pw), rtol=1e-12)
    assert list(module.state_dict()) == ["weight", "pos_weight"]


def test_bce_with_logits_is_stable_for_large_logits(device):
    x = on(device, [-200.0, -30.0, 0.0, 30.0, 200.0], tp.float32, requires_grad=True)
    t = on(device, [0.0, 1.0, 0.5, 0.0, 1.0], tp.float32)
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    np.testing.assert_allclose(as64(loss), np_bce_logits(
        np.array([-200.0, -30.0, 0.0, 30.0, 200.0]), np.array([0.0, 1.0, 0.5, 0.0, 1.0]),
        reduction="none"), rtol=1e-6, atol=1e-30)
    loss.sum().backward()
    # d/dx = sigmoid(x) - t; 1/2 - 1/2 = 0 exactly at x = 0
    np.testing.assert_allclose(as64(x.grad), [0.0, -1.0, 0.0, 1.0, 0.0], atol=1e-6)


def test_bce_with_logits_errors(device):
    x = on(device, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"Target size .* must be the same as input size"):
        F.binary_cross_entropy_with_logits(x, on(device, np.zeros(3)))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.binary_cross_entropy_with_logits(x, x, reduction="")


def test_logsigmoid(device):
    x = np.array([-50.0, -1.0, 0.0, 2.0, 50.0])
    check_loss_and_grad(device, F.logsigmoid, lambda a: -np.logaddexp(0, -a), x, "none")


# -- no host synchronization --------------------------------------------------------------------
@requires_accelerator
def test_losses_forward_and_backward_make_no_host_synchronization(dev, monkeypatch):
    x = on(dev, RNG.normal(size=(6, 5)), tp.float32, requires_grad=True)
    t = idx(dev, [0, 4, -100, 2, 1, 3])
    q = on(dev, np.full((6, 5), 0.2), tp.float32)
    w = on(dev, np.linspace(0.5, 1.5, 5), tp.float32)
    calls = count_device_waits(monkeypatch)
    calls.clear()
    losses = [F.cross_entropy(x, t, weight=w, label_smoothing=0.1),
              F.cross_entropy(x, q),
              F.nll_loss(F.log_softmax(x, 1), t, reduction="sum"),
              F.mse_loss(x, q), F.l1_loss(x, q, reduction="sum"),
              F.binary_cross_entropy_with_logits(x, q, pos_weight=w)]
    total = losses[0]
    for loss in losses[1:]:
        total = total + loss
    total.backward()
    assert calls == [], f"host synchronizations during forward/backward: {calls}"
    assert x.grad is not None and tuple(x.grad.shape) == (6, 5)
