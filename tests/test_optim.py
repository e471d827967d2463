"""tensorplay.optim against NumPy float64 references of torch.optim's algorithms, written from
PyTorch's documented pseudo-code (and its code where the two differ), on cpu and the
accelerator; state_dict round trips through tensorplay.save/load; captured steps; kernel and
host-synchronization counts on the accelerator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import optim
from support import (
    accelerator_device, count_device_waits, requires_accelerator, requires_devices, to_numpy,
)

SHAPES = [(3, 4), (5,), ()]
STEPS = 20


# -- NumPy float64 references ---------------------------------------------------------------------
def reference_sgd(params, grad_fn, steps, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                  nesterov=False, maximize=False):
    """torch.optim.SGD. Its code negates the gradient for ``maximize`` before the weight decay
    (the documented pseudo-code flips the sign of the final update instead; the code is what
    runs)."""
    params = [np.array(p, dtype=np.float64) for p in params]
    bufs = [None] * len(params)
    for t in range(steps):
        grads = grad_fn(params, t)
        for i, (p, grad) in enumerate(zip(params, grads)):
            if grad is None:
                continue
            g = -grad if maximize else grad
            if weight_decay:
                g = g + weight_decay * p
            if momentum:
                bufs[i] = g.copy() if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * g
                g = g + momentum * bufs[i] if nesterov else bufs[i]
            params[i] = p - lr * g
    return params


def reference_adam(params, grad_fn, steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                   amsgrad=False, maximize=False, decoupled=False):
    """torch.optim.Adam (decoupled=True: AdamW). The AMSGrad maximum is over the raw second
    moments, bias-corrected afterwards, as PyTorch's code and current docs do."""
    beta1, beta2 = betas
    params = [np.array(p, dtype=np.float64) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    v_max = [np.zeros_like(p) for p in params]
    count = [0] * len(params)
    for t in range(steps):
        grads = grad_fn(params, t)
        for i, (p, grad) in enumerate(zip(params, grads)):
            if grad is None:
                continue
            count[i] += 1
            k = count[i]
            g = -grad if maximize else grad
            if weight_decay:
                if decoupled:
                    p = p * (1 - lr * weight_decay)
                else:
                    g = g + weight_decay * p
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            second = v[i]
            if amsgrad:
                v_max[i] = np.maximum(v_max[i], v[i])
                second = v_max[i]
            m_hat = m[i] / (1 - beta1 ** k)
            v_hat = second / (1 - beta2 ** k)
            params[i] = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return params


# -- the problem: a quadratic with noise; the last parameter gets a gradient every other step --
def initial(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in SHAPES]


def grad_fn_for(seed=1):
    rng = np.random.default_rng(seed)
    targets = [rng.standard_normal(shape) for shape in SHAPES]
    noise = [[rng.standard_normal(shape) * 0.1 for shape in SHAPES] for _ in range(STEPS)]
    scales = [1.0, 3.0, 0.5]

    def grad_fn(params, t):
        return [None if (i == len(params) - 1 and t % 2) else
                scales[i] * (p - targets[i]) + 0.3 * np.sin(2 * p) + noise[t][i]
                for i, p in enumerate(params)]
    return grad_fn


def run(device, dtype, make, steps=STEPS):
    """tensorplay's trajectory: gradients come from the same grad_fn, evaluated on tensorplay's
    own parameter values."""
    grad_fn = grad_fn_for()
    params = [tp.tensor(p, dtype=dtype, device=device, requires_grad=True) for p in initial()]
    opt = make(params)
    for t in range(steps):
        grads = grad_fn([to_numpy(p.detach()).astype(np.float64) for p in params], t)
        for p, g in zip(params, grads):
            p.grad = None if g is None else tp.tensor(g, dtype=dtype, device=device)
        opt.step()
    return [to_numpy(p.detach()).astype(np.float64) for p in params], opt


def check_close(got, expected, dtype):
    tol = 1e-10 if dtype is tp.float64 else 1e-5
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


DTYPES = [tp.float64, tp.float32]

SGD_OPTIONS = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "dampening": 0.3},
    {"momentum": 0.8, "nesterov": True},
    {"weight_decay": 0.1},
    {"maximize": True},
    {"momentum": 0.9, "weight_decay": 0.05, "maximize": True},
    {"momentum": 0.7, "nesterov": True, "weight_decay": 0.05, "maximize": True},
    {"momentum": 0.9, "dampening": 0.5, "weight_decay": 0.01},
]

ADAM_OPTIONS = [
    {},
    {"amsgrad": True},
    {"weight_decay": 0.1},
    {"maximize": True},
    {"betas": (0.8, 0.99), "eps": 1e-6},
    {"amsgrad": True, "weight_decay": 0.05, "maximize": True, "betas": (0.5, 0.9)},
]


def option_id(options):
    return ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
@pytest.mark.parametrize("options", SGD_OPTIONS, ids=option_id)
def test_sgd_matches_reference(device, dtype, tensor_lr, options):
    lr = 0.05
    expected = reference_sgd(initial(), grad_fn_for(), STEPS, lr, **options)
    got, opt = run(device, dtype, lambda ps: optim.SGD(
        ps, lr=tp.tensor(lr, dtype=dtype, device=device) if tensor_lr else lr, **options))
    check_close(got, expected, dtype)
    if options.get("momentum"):
        assert set(opt.state_dict()["state"][0]) == {"momentum_buffer"}
    else:
        assert opt.state_dict()["state"] == {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=option_id)
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW], ids=lambda c: c.__name__)
def test_adam_matches_reference(device, dtype, tensor_lr, options, cls):
    lr = 0.02
    options = dict(options)
    if cls is optim.AdamW:
        options.setdefault("weight_decay", 1e-2)   # AdamW's default
    expected = reference_adam(initial(), grad_fn_for(), STEPS, lr, decoupled=cls is optim.AdamW,
                              **options)
    got, opt = run(device, dtype, lambda ps: cls(
        ps, lr=tp.tensor(lr, dtype=dtype, device=device) if tensor_lr else lr, **options))
    check_close(got, expected, dtype)
    state = opt.state_dict()["state"]
    keys = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if options.get("amsgrad")
                                                 else set())
    assert all(set(s) == keys for s in state.values())
    for index, count in ((0, STEPS), (2, STEPS // 2)):   # the last parameter skips odd steps
        step = state[index]["step"]
        assert step.dtype is tp.float32 and step.shape == () and step.device == tp.device(device)
        assert step.item() == count


def test_adamw_default_weight_decay_and_order():
    """AdamW decays the parameter before the moments see the gradient, and not through it."""
    assert optim.AdamW([tp.zeros(1, requires_grad=True)]).defaults["weight_decay"] == 1e-2
    assert optim.Adam([tp.zeros(1, requires_grad=True)]).defaults["weight_decay"] == 0
    p = tp.tensor([2.0], dtype=tp.float64, requires_grad=True)
    opt = optim.AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = tp.tensor([0.0], dtype=tp.float64)
    opt.step()
    # zero gradient: the moments stay zero, the update is the decay alone
    assert to_numpy(p.detach()).tolist() == [2.0 * (1 - 0.1 * 0.5)]
    assert to_numpy(opt.state[p]["exp_avg"]).tolist() == [0.0]


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam])
def test_param_groups_with_their_own_options(device, cls):
    dtype = tp.float64
    kwargs = {"momentum": 0.5} if cls is optim.SGD else {}

    def make(params):
        return cls([{"params": params[:2]}, {"params": params[2], "lr": 0.3}], lr=0.01,
                   **kwargs)
    got, opt = run(device, dtype, make)
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[1]["lr"] == 0.3
    assert len(opt.param_groups[1]["params"]) == 1
    assert set(opt.param_groups[0]) == set(opt.param_groups[1]) == set(opt.defaults) | {"params"}
    # grad_fn is separable (a parameter's gradient depends on that parameter only), so each
    # group follows the reference run at its own lr
    reference = reference_sgd if cls is optim.SGD else reference_adam
    slow = reference(initial(), grad_fn_for(), STEPS, 0.01, **kwargs)
    fast = reference(initial(), grad_fn_for(), STEPS, 0.3, **kwargs)
    check_close(got, slow[:2] + fast[2:], dtype)


def test_add_param_group_and_its_errors():
    a, b = tp.zeros(2, requires_grad=True), tp.zeros(3, requires_grad=True)
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert opt.param_groups[1]["params"][0] is b
    assert opt.param_groups[1]["momentum"] == 0.9 and opt.param_groups[1]["lr"] == 0.5
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         "group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {tp.zeros(1, requires_grad=True)}})
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the "
                                        "params is int"):
        opt.add_param_group({"params": [1]})
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([tp.zeros(1, requires_grad=True)])
    with pytest.warns(UserWarning, match="duplicate parameters"):
        c = tp.zeros(1, requires_grad=True)
        optim.SGD([c, c])
    assert len(opt.param_groups) == 2


def test_constructor_errors():
    p = tp.zeros(2, requires_grad=True)
    cases = [
        (lambda: optim.SGD([p], lr=-1), "Invalid learning rate: -1"),
        (lambda: optim.Adam([p], lr=-0.5), "Invalid learning rate: -0.5"),
        (lambda: optim.SGD([p], momentum=-0.1), "Invalid momentum value: -0.1"),
        (lambda: optim.SGD([p], weight_decay=-1), "Invalid weight_decay value: -1"),
        (lambda: optim.SGD([p], nesterov=True), "Nesterov momentum requires a momentum and zero "
                                                "dampening"),
        (lambda: optim.SGD([p], momentum=0.9, dampening=0.1, nesterov=True),
         "Nesterov momentum requires"),
        (lambda: optim.Adam([p], eps=-1e-8), "Invalid epsilon value: -1e-08"),
        (lambda: optim.Adam([p], betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
        (lambda: optim.AdamW([p], betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
        (lambda: optim.AdamW([p], weight_decay=-0.01), "Invalid weight_decay value: -0.01"),
        (lambda: optim.Adam([p], lr=tp.tensor([0.1, 0.2])), "Tensor lr must be 1-element"),
        (lambda: optim.SGD([]), "optimizer got an empty parameter list"),
        (lambda: optim.Adam(iter([])), "optimizer got an empty parameter list"),
        (lambda: optim.SGD([p * 2]), "can't optimize a non-leaf Tensor"),
        (lambda: optim.SGD([{"params": [p]}, {"params": [p]}]),
         "some parameters appear in more than one parameter group"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            make()
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        optim.SGD(p)


def test_non_leaf_that_retains_grad_is_accepted():
    p = tp.zeros(2, requires_grad=True)
    q = p * 2
    q.retain_grad()
    optim.SGD([q])


def test_defaults_and_group_keys_are_torchs():
    p = tp.zeros(1, requires_grad=True)
    assert set(optim.SGD([p]).param_groups[0]) == {
        "params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize",
        "foreach", "differentiable", "fused"}
    assert set(optim.Adam([p]).param_groups[0]) == {
        "params", "lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
        "capturable", "differentiable", "fused"}
    assert optim.SGD([p]).defaults["lr"] == 1e-3 and optim.Adam([p]).defaults["lr"] == 1e-3
    assert optim.Adam([p]).defaults["betas"] == (0.9, 0.999)
    assert optim.Adam([p]).defaults["eps"] == 1e-8
    assert optim.Adam([p], capturable=True).defaults["capturable"] is True


def test_repr():
    p = tp.zeros(1, requires_grad=True)
    text = repr(optim.SGD([p], lr=0.5))
    assert text.startswith("SGD (\nParameter Group 0\n") and "    lr: 0.5\n" in text
    assert text.endswith(")") and "params" not in text


def test_step_returns_the_closures_loss_computed_with_grad():
    p = tp.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with tp.no_grad():   # the closure still records: step turns grad mode on for it
        loss = opt.step(closure)
    assert loss.item() == 5.0
    assert to_numpy(p.detach()).tolist() == pytest.approx([0.8, 1.6])
    assert optim.SGD([p]).step() is None


def test_parameters_without_gradient_are_skipped(device):
    a = tp.ones(2, device=device, requires_grad=True)
    b = tp.ones(2, device=device, requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = tp.ones(2, device=device)
    opt.step()
    assert to_numpy(b.detach()).tolist() == [1.0, 1.0]
    assert b not in opt.state and opt.state[a]["step"].item() == 1
    assert list(opt.state_dict()["state"]) == [0]


# -- zero_grad ----------------------------------------------------------------------------------
def test_zero_grad_modes(device):
    a = tp.ones(3, device=device, requires_grad=True)
    b = tp.ones(2, device=device, requires_grad=True)
    opt = optim.SGD([a, b], lr=0.1)
    (a.sum() * 2).backward()
    grad = a.grad
    opt.zero_grad(set_to_none=False)
    assert a.grad is grad and to_numpy(grad).tolist() == [0.0, 0.0, 0.0]
    assert b.grad is None
    (a.sum() * 3).backward()   # accumulates into the same tensor
    assert a.grad is grad and to_numpy(grad).tolist() == [3.0, 3.0, 3.0]
    opt.zero_grad()
    assert a.grad is None and b.grad is None


# -- state_dict ---------------------------------------------------------------------------------
def test_state_dict_format(device):
    a = tp.ones(3, device=device, requires_grad=True)
    b = tp.ones(2, device=device, requires_grad=True)
    c = tp.ones(4, device=device, requires_grad=True)
    opt = optim.Adam([{"params": [a, b]}, {"params": [c], "lr": 0.5}], amsgrad=True)
    assert opt.state_dict() == {"state": {}, "param_groups": [
        {**{k: v for k, v in opt.param_groups[0].items() if k != "params"}, "params": [0, 1]},
        {**{k: v for k, v in opt.param_groups[1].items() if k != "params"}, "params": [2]}]}
    a.grad, c.grad = tp.ones(3, device=device), tp.ones(4, device=device)
    opt.step()
    sd = opt.state_dict()
    assert list(sd["state"]) == [0, 2]
    assert set(sd["state"][2]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert sd["state"][0]["exp_avg"] is opt.state[a]["exp_avg"]   # references, as PyTorch
    assert sd["param_groups"][1]["lr"] == 0.5 and sd["param_groups"][1]["params"] == [2]


def model_problem(device, seed=0):
    """A linear least-squares model trained through autograd."""
    rng = np.random.default_rng(seed)
    x = tp.tensor(rng.standard_normal((8, 4)), dtype=tp.float32, device=device)
    y = tp.tensor(rng.standard_normal((8, 3)), dtype=tp.float32, device=device)
    weight = tp.tensor(rng.standard_normal((4, 3)), dtype=tp.float32, device=device,
                       requires_grad=True)
    bias = tp.zeros(3, device=device, requires_grad=True)

    def train_step(opt, params, set_to_none=True):
        opt.zero_grad(set_to_none=set_to_none)
        loss = ((x @ params[0] + params[1] - y) ** 2).mean()
        loss.backward()
        opt.step()
    return [weight, bias], train_step


OPTIMIZERS = [
    (optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (optim.Adam, {"lr": 0.05, "amsgrad": True, "weight_decay": 0.01}),
    (optim.AdamW, {"lr": "tensor", "betas": (0.8, 0.95)}),
]


def make_optimizer(cls, options, params, device):
    options = dict(options)
    if options.get("lr") == "tensor":
        options["lr"] = tp.tensor(0.05, device=device)
    return cls(params, **options)


@pytest.mark.parametrize("cls,options", OPTIMIZERS, ids=lambda x: getattr(x, "__name__", ""))
def test_checkpoint_continues_bit_for_bit(device, tmp_path, cls, options):
    """Train N steps, save model and optimizer, load both into fresh objects: the next steps
    give exactly what an uninterrupted run gives."""
    params, train_step = model_problem(device)
    opt = make_optimizer(cls, options, params, device)
    for _ in range(4):
        train_step(opt, params)
    path = tmp_path / "checkpoint.safetensors"
    tp.save({"model": {"weight": params[0], "bias": params[1]}, "optim": opt.state_dict(),
             "epoch": 4}, path)
    for _ in range(5):
        train_step(opt, params)
    uninterrupted = [to_numpy(p.detach()) for p in params]

    checkpoint = tp.load(path)
    assert checkpoint["epoch"] == 4
    fresh_params, fresh_step = model_problem(device)
    with tp.no_grad():
        fresh_params[0].copy_(checkpoint["model"]["weight"])
        fresh_params[1].copy_(checkpoint["model"]["bias"])
    fresh = make_optimizer(cls, options, fresh_params, device)
    fresh.load_state_dict(checkpoint["optim"])
    for _ in range(5):
        fresh_step(fresh, fresh_params)
    for a, b in zip(uninterrupted, (to_numpy(p.detach()) for p in fresh_params)):
        np.testing.assert_array_equal(a, b)
    assert fresh.param_groups[0]["betas" if cls is not optim.SGD else "momentum"] == \
        opt.param_groups[0]["betas" if cls is not optim.SGD else "momentum"]


def test_state_dict_survives_save_and_load_exactly(device, tmp_path):
    p = tp.ones(3, device=device, requires_grad=True)
    opt = optim.Adam([{"params": [p]}], lr=tp.tensor(0.1, device=device))
    p.grad = tp.ones(3, device=device)
    opt.step()
    tp.save(opt.state_dict(), tmp_path / "o.safetensors")
    loaded = tp.load(tmp_path / "o.safetensors")
    assert list(loaded["state"]) == [0] and loaded["param_groups"][0]["params"] == [0]
    assert loaded["param_groups"][0]["betas"] == (0.9, 0.999)
    assert loaded["param_groups"][0]["foreach"] is None
    assert loaded["state"][0]["step"].item() == 1.0
    assert loaded["state"][0]["step"].dtype is tp.float32
    np.testing.assert_array_equal(to_numpy(loaded["state"][0]["exp_avg"]),
                                  to_numpy(opt.state[p]["exp_avg"]))


def test_load_state_dict_casts_clones_and_keeps_tensor_options(device):
    a = tp.ones(2, device=device, requires_grad=True)
    lr = tp.tensor(0.1, device=device)
    opt = optim.Adam([a], lr=lr)
    a.grad = tp.ones(2, device=device)
    opt.step()
    sd = opt.state_dict()
    b = tp.ones(2, device=device, dtype=tp.float64, requires_grad=True)
    lr2 = tp.tensor(0.7, device=device)
    other = optim.Adam([b], lr=lr2)
    other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] is lr2 and lr2.item() == pytest.approx(0.1)
    assert other.param_groups[0]["params"][0] is b
    state = other.state[b]
    assert state["exp_avg"].dtype is tp.float64                 # the parameter's dtype
    assert state["step"].dtype is tp.float32                    # the step stays float32
    assert state["exp_avg"].data_ptr() != opt.state[a]["exp_avg"].data_ptr()   # not shared
    b.grad = tp.ones(2, device=device, dtype=tp.float64)
    other.step()
    assert other.state[b]["step"].item() == 2 and opt.state[a]["step"].item() == 1


def test_load_state_dict_errors():
    a, b = tp.zeros(2, requires_grad=True), tp.zeros(2, requires_grad=True)
    sd = optim.SGD([a, b]).state_dict()
    with pytest.raises(ValueError, match="loaded state dict contains a parameter group that "
                                         "doesn't match the size of optimizer's group"):
        optim.SGD([a]).load_state_dict(sd)
    with pytest.raises(ValueError, match="loaded state dict has a different number of parameter "
                                         "groups"):
        optim.SGD([{"params": [a]}, {"params": [b]}]).load_state_dict(sd)


# -- capture (the accelerator) ------------------------------------------------------------------
CAPTURED = [
    (optim.Adam, {"amsgrad": True, "weight_decay": 0.01}),
    (optim.AdamW, {"maximize": True}),
    (optim.SGD, {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    (optim.SGD, {"momentum": 0.9, "nesterov": True}),
]


def captured_setup(dev, cls, options, seed=3):
    rng = np.random.default_rng(seed)
    params = [tp.tensor(rng.standard_normal(s), dtype=tp.float32, device=dev, requires_grad=True)
              for s in SHAPES]
    targets = [tp.tensor(rng.standard_normal(s), dtype=tp.float32, device=dev) for s in SHAPES]
    for p in params:
        p.grad = tp.zeros_like(p)
    lr = tp.tensor(0.05, device=dev)
    opt = cls(params, lr=lr, **options)

    def train_step():
        """zero_grad in place, a hand-made gradient (p - target + p**3 / 10) added in place."""
        opt.zero_grad(set_to_none=False)
        with tp.no_grad():
            for p, target in zip(params, targets):
                p.grad.add_(p).sub_(target).addcmul_(p * p, p, value=0.1)
        opt.step()
    return params, opt, lr, train_step


@requires_accelerator
@pytest.mark.parametrize("cls,options", CAPTURED, ids=lambda x: getattr(x, "__name__", ""))
def test_captured_step_replays_like_eager_steps(dev, cls, options):
    eager_params, _, _, eager_step = captured_setup(dev, cls, options)
    params, opt, _, train_step = captured_setup(dev, cls, options)
    eager_step()
    train_step()                    # warm-up: creates the state, eagerly
    graph = tp.accelerator.Graph()
    with graph:
        train_step()
    for _ in range(6):
        eager_step()
        graph.replay()
    for a, b in zip(eager_params, params):
        np.testing.assert_array_equal(to_numpy(a.detach()), to_numpy(b.detach()))
    if cls is not optim.SGD:
        assert opt.state[params[0]]["step"].item() == 7


@requires_accelerator
def test_captured_training_step_with_backward(dev):
    """zero_grad(set_to_none=False), forward, backward and step in one graph."""
    results = []
    for captured in (False, True):
        params, train_step = model_problem(dev)
        opt = optim.Adam(params, lr=tp.tensor(0.05, device=dev))
        train_step(opt, params, set_to_none=False)
        if captured:
            graph = tp.accelerator.Graph()
            with graph:
                train_step(opt, params, set_to_none=False)
            for _ in range(5):
                graph.replay()
        else:
            for _ in range(5):
                train_step(opt, params, set_to_none=False)
        results.append([to_numpy(p.detach()) for p in params])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@requires_accelerator
@pytest.mark.parametrize("cls,options", CAPTURED[:1] + CAPTURED[2:3],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_tensor_lr_changed_between_replays(dev, cls, options):
    eager_params, _, eager_lr, eager_step = captured_setup(dev, cls, options)
    params, _, lr, train_step = captured_setup(dev, cls, options)
    eager_step()
    train_step()
    graph = tp.accelerator.Graph()
    with graph:
        train_step()
    for value in (0.05, 0.2, 0.0, 0.01):
        lr.fill_(value)
        eager_lr.copy_(tp.tensor(value, device=dev))
        for _ in range(2):
            graph.replay()
            eager_step()
    for a, b in zip(eager_params, params):
        np.testing.assert_array_equal(to_numpy(a.detach()), to_numpy(b.detach()))
    # the lr really changed the trajectory: a run at a constant lr ends elsewhere
    constant_params, _, _, constant_step = captured_setup(dev, cls, options)
    for _ in range(9):
        constant_step()
    assert not np.array_equal(to_numpy(constant_params[0].detach()),
                              to_numpy(params[0].detach()))


@requires_accelerator
def test_sgd_without_momentum_captures_its_first_step(dev):
    """No state: even the first step may be captured."""
    eager_params, _, _, eager_step = captured_setup(dev, optim.SGD, {})
    params, opt, _, train_step = captured_setup(dev, optim.SGD, {})
    graph = tp.accelerator.Graph()
    with graph:
        train_step()
    for _ in range(4):
        graph.replay()
        eager_step()
    for a, b in zip(eager_params, params):
        np.testing.assert_array_equal(to_numpy(a.detach()), to_numpy(b.detach()))


@requires_accelerator
@pytest.mark.parametrize("cls,options", [CAPTURED[0], CAPTURED[2]],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_state_made_inside_a_capture_is_refused(dev, cls, options):
    params, opt, _, train_step = captured_setup(dev, cls, options)
    graph = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="inside a graph capture.*run one step eagerly"):
        with graph:
            train_step()
    train_step()        # the optimizer and the device still work, and can now be captured
    with graph:
        train_step()
    graph.replay()


@requires_accelerator
@pytest.mark.parametrize("cls,options", CAPTURED[:3], ids=lambda x: getattr(x, "__name__", ""))
def test_first_step_after_load_state_dict_may_be_captured(dev, cls, options):
    eager_params, eager_opt, _, eager_step = captured_setup(dev, cls, options)
    eager_step()
    params, opt, _, train_step = captured_setup(dev, cls, options)
    with tp.no_grad():
        for p, q in zip(params, eager_params):
            p.copy_(q)
    opt.load_state_dict(eager_opt.state_dict())
    graph = tp.accelerator.Graph()
    with graph:
        train_step()
    for _ in range(3):
        graph.replay()
        eager_step()
    for a, b in zip(eager_params, params):
        np.testing.assert_array_equal(to_numpy(a.detach()), to_numpy(b.detach()))


@requires_accelerator
@pytest.mark.parametrize("cls,options", CAPTURED + [(optim.Adam, {})],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_step_never_waits_for_the_device(dev, monkeypatch, cls, options):
    params, opt, _, _ = captured_setup(dev, cls, options)
    for p in params:
        p.grad = tp.ones_like(p)
    waits = count_device_waits(monkeypatch)
    opt.step()          # the first step (creates the state)
    opt.step()
    params[-1].grad = None
    opt.step()          # only some parameters have gradients
    opt.zero_grad(set_to_none=False)
    assert waits == []


def count_launches(monkeypatch) -> list:
    """Spy on the accelerator's kernel launches (by kernel object, and by call where the
    backend offers ``launch_call``) and copies; returns the list they append to."""
    from tensorplay._runtime.select import accelerator_backend

    backend = accelerator_backend()
    calls: list = []
    for name in ("launch", "memcpy", "launch_call"):
        if getattr(backend, name, None) is None:
            continue

        def spy(*args, _name=name, _original=getattr(backend, name), **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(backend, name, spy)
    return calls


def launches_per_step(dev, monkeypatch, make, count, dtype=tp.float32, with_grad=None,
                      flat=True):
    if flat:
        params = [tp.ones(3, dtype=dtype, device=dev, requires_grad=True) for _ in range(count)]
    else:   # strided parameters cannot share a flat buffer: the per-parameter update runs
        params = [tp.ones(2, 3, dtype=dtype, device=dev).T.detach().requires_grad_()
                  for _ in range(count)]
    opt = make(params)
    for p in params:
        p.grad = tp.ones_like(p)
    opt.step()          # the first step makes the state
    if with_grad is not None:
        for p in params[with_grad:]:
            p.grad = None
    calls = count_launches(monkeypatch)
    opt.step()
    monkeypatch.undo()
    return len(calls)


# (optimizer, options) -> (kernels per parameter, kernels per group), all parameters with grads
KERNELS = [
    (optim.SGD, {}, 1, 0),
    (optim.SGD, {"maximize": True, "weight_decay": 0.1}, 3, 0),
    (optim.SGD, {"momentum": 0.9}, 2, 0),
    (optim.SGD, {"momentum": 0.9, "dampening": 0.5}, 3, 0),
    (optim.SGD, {"momentum": 0.9, "nesterov": True}, 3, 0),
    (optim.SGD, {"lr": "tensor", "momentum": 0.9}, 2, 0),
    (optim.Adam, {}, 6, 10),
    (optim.Adam, {"amsgrad": True, "weight_decay": 0.1, "maximize": True}, 9, 10),
    (optim.Adam, {"lr": "tensor"}, 6, 11),
    (optim.AdamW, {}, 7, 10),
    (optim.AdamW, {"lr": "tensor"}, 7, 13),
]


@requires_accelerator
@pytest.mark.parametrize("cls,options,per_param,per_group", KERNELS,
                         ids=[f"{c.__name__}-{option_id(o)}" for c, o, _, _ in KERNELS])
def test_kernels_per_step(dev, monkeypatch, cls, options, per_param, per_group):
    def make(params):
        return make_optimizer(cls, options, params, dev)
    for count in (1, 4):
        assert launches_per_step(dev, monkeypatch, make, count, flat=False) == \
            per_param * count + per_group
        if cls is not optim.SGD:   # Adam's parameters in flat buffers: the counts, one update
            assert launches_per_step(dev, monkeypatch, make, count) == 2


@requires_accelerator
def test_kernels_per_step_float64_and_partial_gradients(dev, monkeypatch):
    def make(params):
        return optim.Adam(params)
    assert launches_per_step(dev, monkeypatch, make, 4, dtype=tp.float64, flat=False) == \
        6 * 4 + 10
    # two of four parameters with gradients: their counts advance one by one
    assert launches_per_step(dev, monkeypatch, make, 4, with_grad=2) == 7 * 2 + 9


def test_a_group_of_mixed_dtypes(device):
    """One group over two dtypes: they share the group's step counts and scalars."""
    params = [tp.ones(2, dtype=dtype, device=device, requires_grad=True)
              for dtype in (tp.float32, tp.float64, tp.float32)]
    opt = optim.Adam(params, lr=0.1, weight_decay=0.1)
    for _ in range(3):
        for p in params:
            p.grad = tp.ones_like(p)
        opt.step()
    expected = reference_adam([np.ones(2)], lambda ps, t: [np.ones(2)], 3, 0.1,
                              weight_decay=0.1)[0]
    for p in params:
        check_close([to_numpy(p.detach()).astype(np.float64)], [expected], p.dtype)
    assert [opt.state[p]["step"].item() for p in params] == [3, 3, 3]


@requires_devices(2)
@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.AdamW])
def test_a_group_spanning_two_devices(cls):
    devices = [accelerator_device(0), accelerator_device(1), accelerator_device(0)]
    options = {"momentum": 0.9} if cls is optim.SGD else {}

    def make(params):
        return cls(params, lr=0.05, **options)
    grad_fn = grad_fn_for()
    params = [tp.tensor(p, dtype=tp.float64, device=d, requires_grad=True)
              for p, d in zip(initial(), devices)]
    opt = make(params)
    for t in range(STEPS):
        grads = grad_fn([to_numpy(p.detach()) for p in params], t)
        for p, g, d in zip(params, grads, devices):
            p.grad = None if g is None else tp.tensor(g, dtype=tp.float64, device=d)
        opt.step()
    got = [to_numpy(p.detach()) for p in params]
    expected, _ = run("cpu", tp.float64, make)
    check_close(got, expected, tp.float64)
    if cls is not optim.SGD:
        assert [opt.state[p]["step"].device for p in params] == [tp.device(d) for d in devices]


def test_amsgrad_switched_on_between_steps(device):
    p = tp.ones(2, device=device, requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    p.grad = tp.ones_like(p)
    opt.step()
    opt.param_groups[0]["amsgrad"] = True
    opt.step()
    assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert opt.state[p]["step"].item() == 2


def test_replacing_a_groups_params_or_a_step_tensor(device):
    """State set by hand (a step count replaced, params appended to a group) is taken in by
    the next eager step."""
    a = tp.ones(2, dtype=tp.float64, device=device, requires_grad=True)
    b = tp.ones(2, dtype=tp.float64, device=device, requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    a.grad = tp.ones_like(a)
    opt.step()
    opt.state[a]["step"] = tp.tensor(10.0, device=device)
    opt.param_groups[0]["params"].append(b)
    b.grad = tp.ones_like(b)
    opt.step()
    assert opt.state[a]["step"].item() == 11 and opt.state[b]["step"].item() == 1


@pytest.mark.parametrize("shape_steps", list(itertools.product([(), (1,)], [0, 3])))
def test_loading_torch_style_step_values(shape_steps):
    """A step saved as a float, or as a (1,)-shaped tensor (older PyTorch), loads."""
    shape, steps = shape_steps
    p = tp.ones(2, dtype=tp.float64, requires_grad=True)
    opt = optim.Adam([p])
    sd = {"state": {0: {"step": tp.full(shape, float(steps)) if shape else float(steps),
                        "exp_avg": tp.zeros(2, dtype=tp.float64),
                        "exp_avg_sq": tp.zeros(2, dtype=tp.float64)}},
          "param_groups": [{**{k: v for k, v in opt.param_groups[0].items() if k != "params"},
                            "params": [0]}]}
    opt.load_state_dict(sd)
    p.grad = tp.ones_like(p)
    opt.step()
    assert opt.state[p]["step"].item() == steps + 1
