"""``tensorplay.nn``: Parameter, Module (registration and order, state dicts, modes, devices and
dtypes, gradients, hooks, PyTorch's repr), the layers and containers, ``nn.init`` and
``nn.utils.clip_grad_norm_``, on every device.

Oracles: PyTorch's documented behaviour and exact strings (repr, error messages) written out
here; NumPy in float64 for layer outputs, gradients and a tiny MLP trained by hand with SGD
(the same steps computed with NumPy's closed-form gradients); distribution statistics with
fixed seeds for the initializations; for a captured training step, the eager run of the same
step.
"""

import copy
import math
from collections import OrderedDict

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F
from tensorplay._tensor.autograd import meta
from support import count_device_waits, requires_accelerator, to_numpy

RNG = np.random.default_rng(11)


def on(device, array, dtype=tp.float64, requires_grad=False):
    return tp.tensor(np.asarray(array), dtype=dtype, device=device, requires_grad=requires_grad)


def as64(tensor) -> np.ndarray:
    return to_numpy(tensor).astype(np.float64)


class Block(nn.Module):
    """A module with every kind of member, in a known order."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.scale = nn.Parameter(tp.ones(2))
        self.register_buffer("steps", tp.zeros((), dtype=tp.int64))
        self.register_buffer("scratch", tp.zeros(2), persistent=False)
        self.norm = nn.LayerNorm(2)

    def forward(self, x):
        return self.norm(self.fc(x) * self.scale)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(2, 4, bias=False)
        self.register_buffer("mean", tp.zeros(4))

    def forward(self, x):
        return self.head(self.block(x)) - self.mean


# -- Parameter --------------------------------------------------------------------------------
def test_parameter_is_a_marked_leaf_sharing_memory(device):
    data = tp.zeros(3, device=device)
    p = nn.Parameter(data)
    assert type(p) is tp.Tensor and isinstance(p, nn.Parameter) and isinstance(p, tp.Tensor)
    assert p.requires_grad and p.is_leaf and p.grad is None and p.grad_fn is None
    assert not isinstance(data, nn.Parameter) and not data.requires_grad
    with tp.no_grad():
        p.add_(1)
    np.testing.assert_array_equal(as64(data), [1.0, 1.0, 1.0])   # one memory
    assert not nn.Parameter(data, requires_grad=False).requires_grad
    assert isinstance(nn.Parameter(data, requires_grad=False), nn.Parameter)
    for derived in (p * 2, p.detach(), p[0:2], p.to(tp.float64)):
        assert not isinstance(derived, nn.Parameter)
    empty = nn.Parameter()
    assert tuple(empty.shape) == (0,) and empty.dtype == tp.float32
    assert not isinstance(3, nn.Parameter) and not isinstance(None, nn.Parameter)


def test_parameter_errors_and_copies():
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(tp.tensor([1, 2]))
    assert not nn.Parameter(tp.tensor([1, 2]), requires_grad=False).requires_grad
    with pytest.raises(TypeError, match="must be a tensorplay.Tensor"):
        nn.Parameter([1.0, 2.0])
    p = nn.Parameter(tp.ones(2))
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and q is not p


# -- registration -----------------------------------------------------------------------------
def test_registration_and_order():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "block.scale", "block.fc.weight", "block.fc.bias", "block.norm.weight",
        "block.norm.bias", "head.weight"]
    assert [n for n, _ in net.named_buffers()] == ["mean", "block.steps", "block.scratch"]
    assert [n for n, _ in net.named_children()] == ["block", "head"]
    assert [n for n, _ in net.named_modules()] == ["", "block", "block.fc", "block.norm",
                                                    "head"]
    assert [type(m).__name__ for m in net.modules()] == ["Net", "Block", "Linear", "LayerNorm",
                                                        "Linear"]
    assert [n for n, _ in net.named_parameters(recurse=False)] == []
    assert [n for n, _ in net.named_parameters(prefix="model")][0] == "model.block.scale"
    assert len(list(net.parameters())) == 6 and len(list(net.buffers())) == 3
    assert net.block.fc is net._modules["block"]._modules["fc"]
    assert net.head.bias is None and "bias" in net.head._parameters


def test_shared_members_are_yielded_once():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net[1].weight = net[0].weight
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert [n for n, _ in net.named_parameters(remove_duplicate=False)] == [
        "0.weight", "0.bias", "1.weight", "1.bias"]
    twice = nn.Sequential()
    shared = nn.Linear(1, 1)
    twice.add_module("a", shared)
    twice.add_module("b", shared)
    assert [n for n, _ in twice.named_modules()] == ["", "a"]
    assert len(list(twice.children())) == 1


def test_setattr_rules():
    m = nn.Module()
    m.p = nn.Parameter(tp.ones(1))
    assert "p" in m._parameters and "p" not in m.__dict__
    with pytest.raises(TypeError, match=r"cannot assign 'tensorplay.Tensor' as parameter 'p' "
                                        r"\(tensorplay.nn.Parameter or None expected\)"):
        m.p = tp.ones(1)
    m.p = None
    assert m.p is None and "p" in m._parameters
    m.sub = nn.ReLU()
    with pytest.raises(TypeError, match="cannot assign 'int' as child module 'sub'"):
        m.sub = 3
    m.register_buffer("b", tp.ones(1))
    m.b = tp.zeros(2)
    assert tuple(m.b.shape) == (2,)
    with pytest.raises(TypeError, match="cannot assign 'str' as buffer 'b'"):
        m.b = "x"
    m.plain = tp.ones(1)            # a plain tensor attribute: not registered
    assert "plain" in m.__dict__
    assert [n for n, _ in m.named_buffers()] == ["b"]
    m.sub = nn.Parameter(tp.ones(1))   # a parameter replaces the module of that name
    assert "sub" in m._parameters and "sub" not in m._modules
    del m.sub, m.b
    assert not hasattr(m, "sub") and not hasattr(m, "b")
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'missing'"):
        m.missing


def test_registration_errors():
    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tp.ones(1))

    with pytest.raises(AttributeError, match="cannot assign parameters before "
                                             "Module.__init__\\(\\) call"):
        Early()
    m = nn.Module()
    with pytest.raises(KeyError, match='contain ".", got: a.b'):
        m.register_buffer("a.b", None)
    with pytest.raises(KeyError, match='be empty string'):
        m.register_parameter("", None)
    m.x = 1
    with pytest.raises(KeyError, match="attribute 'x' already exists"):
        m.register_buffer("x", tp.ones(1))
    with pytest.raises(TypeError, match="buffer name should be a string"):
        m.register_buffer(1, None)
    with pytest.raises(TypeError, match="cannot assign 'list' object to buffer 'y'"):
        m.register_buffer("y", [1])
    with pytest.raises(TypeError, match="cannot assign 'tensorplay.Tensor' object to parameter"):
        m.register_parameter("w", tp.ones(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("c", tp.ones(1))
    w = nn.Parameter(tp.ones(2))
    with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'v'"):
        m.register_parameter("v", _non_leaf_param(w))
    with pytest.raises(TypeError, match="unexpected keyword argument 'bias'"):
        nn.Module(bias=True)


def _non_leaf_param(w):
    """A tensor with the parameter mark that is not a leaf (what PyTorch refuses to register)."""
    out = w * 2
    meta(out).is_param = True
    return out


def test_forward_missing_and_call():
    with pytest.raises(NotImplementedError,
                       match='Module \\[Module\\] is missing the required "forward" function'):
        nn.Module()(1)
    with pytest.raises(NotImplementedError, match=r"Module \[ModuleList\]"):
        nn.ModuleList()(1)


def test_get_submodule_parameter_buffer_and_dir():
    net = Net()
    assert net.get_submodule("block.fc") is net.block.fc
    assert net.get_submodule("") is net
    assert net.get_parameter("block.fc.weight") is net.block.fc.weight
    assert net.get_buffer("block.steps") is net.block.steps
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net.get_submodule("block.nope")
    names = dir(net)
    assert {"block", "head", "mean", "forward", "training"} <= set(names)
    assert "0" not in dir(nn.Sequential(nn.ReLU()))


def test_forward_hooks():
    lin = nn.Linear(2, 2)
    seen = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    post = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape) or out + 1)
    out = lin(tp.ones(1, 2))
    np.testing.assert_allclose(as64(out), as64(lin.bias.detach().reshape(1, 2) + 1), rtol=1e-6)
    assert seen == [tp.Size([1, 2])]
    pre.remove()
    post.remove()
    x = tp.ones(1, 2)
    np.testing.assert_allclose(as64(lin(x)), as64(F.linear(x, lin.weight, lin.bias)))
    calls = []
    with lin.register_forward_hook(lambda m, a, k, o: calls.append(k), with_kwargs=True):
        lin(input=x)
    assert calls == [{"input": x}] and not lin._forward_hooks


# -- modes, gradients -------------------------------------------------------------------------
def test_train_eval_recursive():
    net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), nn.ReLU()))
    assert all(m.training for m in net.modules())
    assert net.eval() is net and not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train(1)


def test_zero_grad_both_modes(device):
    lin = nn.Linear(3, 2).to(device)
    lin(tp.ones(4, 3, device=device)).sum().backward()
    grad = lin.weight.grad
    assert grad is not None and as64(grad).any()
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is grad and not as64(grad).any()
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


def test_requires_grad_and_apply():
    net = Net()
    assert net.requires_grad_(False) is net
    assert not any(p.requires_grad for p in net.parameters())
    net.requires_grad_()
    assert all(p.requires_grad for p in net.parameters())
    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited == ["Linear", "LayerNorm", "Block", "Linear", "Net"]


# -- devices and dtypes -----------------------------------------------------------------------
def test_to_dtype_makes_new_parameters_keeping_flags_grads_and_ties(device):
    net = Net()
    net.head.weight.requires_grad_(False)
    net(tp.ones(2, 3)).sum().backward()
    old = net.block.fc.weight
    old_values = as64(old)
    net.extra = nn.Linear(3, 2)
    net.extra.weight = net.block.fc.weight        # tied
    assert net.to(device, tp.float64) is net
    new = net.block.fc.weight
    assert new is not old and isinstance(new, nn.Parameter) and new.dtype == tp.float64
    assert new.device == tp.device(device) and new.is_leaf and new.requires_grad
    np.testing.assert_allclose(as64(new), old_values, rtol=1e-7)
    assert new.grad is not None and new.grad.dtype == tp.float64
    assert new.grad.device == tp.device(device)
    assert net.extra.weight is new                # still tied
    assert not net.head.weight.requires_grad
    assert net.block.steps.dtype == tp.int64      # integer buffers keep their dtype
    assert net.mean.dtype == tp.float64 and net.mean.device == tp.device(device)
    assert len(list(net.parameters())) == 7


def test_to_forms_and_casts(device):
    lin = nn.Linear(2, 2)
    same = lin.weight
    assert lin.to("cpu") is lin and lin.weight is same   # nothing changes: same objects
    lin.to(tp.ones(1, dtype=tp.float64, device=device))
    assert lin.weight.dtype == tp.float64 and lin.weight.device == tp.device(device)
    lin.float()
    assert lin.weight.dtype == tp.float32
    lin.to(dtype=tp.float16)
    assert lin.bias.dtype == tp.float16
    lin.double().cpu()
    assert lin.weight.dtype == tp.float64 and lin.weight.device == tp.device("cpu")
    lin.half()
    assert lin.weight.dtype == tp.float16
    lin.bfloat16()
    assert lin.weight.dtype == tp.bfloat16
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point or complex "
                                        "dtypes, but got desired dtype=tensorplay.int64"):
        lin.to(tp.int64)
    with pytest.raises(TypeError, match="to\\(\\) takes a device, a dtype or a tensor"):
        lin.to([1])
    with pytest.raises(ValueError):
        lin.to("nodevice:0")


def test_deepcopy_of_a_module(device):
    net = Net().to(device)
    twin = copy.deepcopy(net)
    assert twin.block.fc.weight is not net.block.fc.weight
    assert isinstance(twin.block.fc.weight, nn.Parameter)
    np.testing.assert_array_equal(as64(twin.block.fc.weight), as64(net.block.fc.weight))
    x = tp.ones(2, 3, device=device)
    np.testing.assert_array_equal(as64(twin(x)), as64(net(x)))
    with tp.no_grad():
        twin.block.fc.weight.fill_(0)   # its own memory
    assert as64(net.block.fc.weight).any()
    tied = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)).to(device)
    tied[1].weight = tied[0].weight
    copied = copy.deepcopy({"model": tied})["model"]
    assert copied[1].weight is copied[0].weight is not tied[0].weight
    assert copied[0].weight.requires_grad and copied[0].weight.device == tp.device(device)


# -- state dicts ------------------------------------------------------------------------------
def test_state_dict_keys_values_and_sharing(device):
    net = Net().to(device)
    sd = net.state_dict()
    assert isinstance(sd, OrderedDict)
    # PyTorch's order: a module's own parameters, its own buffers, then each child's
    assert list(sd) == ["mean", "block.scale", "block.steps", "block.fc.weight",
                        "block.fc.bias", "block.norm.weight", "block.norm.bias", "head.weight"]
    assert "block.scratch" not in sd                 # non-persistent
    value = sd["block.fc.weight"]
    assert not value.requires_grad and not isinstance(value, nn.Parameter)
    with tp.no_grad():
        net.block.fc.weight.fill_(3.0)
    assert (as64(value) == 3.0).all()                # detached, same memory
    kept = net.state_dict(keep_vars=True)
    assert kept["block.fc.weight"] is net.block.fc.weight
    assert list(net.block.state_dict(prefix="x."))[0] == "x.scale"


def test_load_state_dict_roundtrip_in_place(device):
    source, target = Net(), Net().to(device)
    weight = target.block.fc.weight
    with tp.no_grad():
        source.block.steps.fill_(7)
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert target.block.fc.weight is weight and weight.requires_grad and weight.is_leaf
    for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
        np.testing.assert_array_equal(as64(a), as64(b), err_msg=name)
        assert b.device == tp.device(device)
    assert int(target.block.steps.item()) == 7


def test_load_state_dict_strict_and_non_strict_messages():
    net = Net()
    sd = net.state_dict()
    del sd["block.fc.bias"], sd["mean"]
    sd["block.extra"] = tp.ones(1)
    sd["other.weight"] = tp.ones(1)
    with pytest.raises(RuntimeError) as error:
        Net().load_state_dict(sd)
    assert str(error.value) == (
        'Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "mean", '
        '"block.fc.bias". \n\tUnexpected key(s) in state_dict: "other.weight", "block.extra". ')
    fresh = Net()
    result = fresh.load_state_dict(sd, strict=False)
    assert result == (["mean", "block.fc.bias"], ["other.weight", "block.extra"])
    assert result.missing_keys == ["mean", "block.fc.bias"]
    np.testing.assert_array_equal(as64(fresh.head.weight), as64(net.head.weight))
    assert "missing_keys=['mean', 'block.fc.bias']" in repr(result)


def test_load_state_dict_shape_mismatch_raises_in_both_modes():
    sd = nn.Linear(4, 3).state_dict()
    for strict in (True, False):
        with pytest.raises(RuntimeError) as error:
            nn.Linear(4, 2).load_state_dict(sd, strict=strict)
        assert str(error.value) == (
            "Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying a "
            "param with shape tensorplay.Size([3, 4]) from checkpoint, the shape in current "
            "model is tensorplay.Size([2, 4]).\n\tsize mismatch for bias: copying a param with "
            "shape tensorplay.Size([3]) from checkpoint, the shape in current model is "
            "tensorplay.Size([2]).")
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        nn.Linear(1, 1).load_state_dict([("weight", tp.ones(1, 1))])
    with pytest.raises(RuntimeError, match='While copying the parameter named "bias", expected '
                                           'tensorplay.Tensor'):
        nn.Linear(1, 1).load_state_dict({"weight": tp.ones(1, 1), "bias": [1.0]})


def test_state_dict_survives_save_and_load(device, tmp_path):
    source = Net().to(device)
    path = tmp_path / "net.safetensors"
    tp.save(source.state_dict(), path)
    target = Net()
    assert target.load_state_dict(tp.load(path)) == ([], [])
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        np.testing.assert_array_equal(as64(a), as64(b), err_msg=name)


def test_load_state_dict_converts_dtype():
    lin = nn.Linear(2, 2).double()
    lin.load_state_dict({"weight": tp.ones(2, 2), "bias": tp.zeros(2)})
    assert lin.weight.dtype == tp.float64 and (as64(lin.weight) == 1).all()


# -- repr ---------------------------------------------------------------------------------------
def test_repr_matches_pytorch():
    assert repr(nn.Linear(4, 2)) == "Linear(in_features=4, out_features=2, bias=True)"
    assert repr(nn.Linear(4, 2, bias=False)) == \
        "Linear(in_features=4, out_features=2, bias=False)"
    assert repr(nn.Embedding(10, 3)) == "Embedding(10, 3)"
    assert repr(nn.Embedding(10, 3, padding_idx=-1, max_norm=1.0)) == \
        "Embedding(10, 3, padding_idx=9, max_norm=1.0)"
    assert repr(nn.LayerNorm(5)) == "LayerNorm((5,), eps=1e-05, elementwise_affine=True)"
    assert repr(nn.LayerNorm([2, 3], eps=1e-6, elementwise_affine=False)) == \
        "LayerNorm((2, 3), eps=1e-06, elementwise_affine=False)"
    assert repr(nn.Dropout()) == "Dropout(p=0.5, inplace=False)"
    assert repr(nn.GELU()) == "GELU(approximate='none')"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.ReLU()) == "ReLU()" and repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"
    assert repr(nn.SiLU()) == "SiLU()" and repr(nn.Tanh()) == "Tanh()"
    assert repr(nn.Sigmoid()) == "Sigmoid()" and repr(nn.Identity()) == "Identity()"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"
    assert repr(nn.Sequential()) == "Sequential()" and repr(nn.ModuleList()) == "ModuleList()"
    model = nn.Sequential(OrderedDict([
        ("embed", nn.Embedding(5, 4)),
        ("body", nn.Sequential(nn.Linear(4, 4), nn.GELU())),
        ("drop", nn.Dropout(0.1)),
    ]))
    assert repr(model) == (
        "Sequential(\n"
        "  (embed): Embedding(5, 4)\n"
        "  (body): Sequential(\n"
        "    (0): Linear(in_features=4, out_features=4, bias=True)\n"
        "    (1): GELU(approximate='none')\n"
        "  )\n"
        "  (drop): Dropout(p=0.1, inplace=False)\n"
        ")")
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU(), nn.ReLU()])
    assert repr(layers) == (
        "ModuleList(\n"
        "  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
        "  (3-4): 2 x ReLU()\n"
        ")")
    assert repr(nn.ModuleDict({"a": nn.Tanh()})) == "ModuleDict(\n  (a): Tanh()\n)"


def test_repr_with_extra_repr_and_children():
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(1, 1)

        def extra_repr(self):
            return "alpha=1,\nbeta=2"

    assert repr(Custom()) == ("Custom(\n  alpha=1,\n  beta=2\n  (fc): Linear(in_features=1, "
                              "out_features=1, bias=True)\n)")
    assert repr(Net()).startswith("Net(\n  (block): Block(\n    (fc): Linear(")


# -- containers -------------------------------------------------------------------------------
def test_sequential():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c]
    assert seq[0] is a and seq[-1] is c
    head = seq[:2]
    assert type(head) is nn.Sequential and list(head) == [a, b]
    assert list(head._modules) == ["0", "1"] and head[0] is a
    x = tp.randn(4, 2)
    np.testing.assert_allclose(as64(seq(x)), as64(c(b(a(x)))))
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]
    seq.append(nn.Tanh())
    assert list(seq._modules) == ["0", "1", "2", "3"]
    seq.insert(1, nn.Identity())
    assert [type(m).__name__ for m in seq] == ["Linear", "Identity", "ReLU", "Linear", "Tanh"]
    del seq[1]
    assert list(seq._modules) == ["0", "1", "2", "3"] and seq[1] is b
    seq[1] = nn.GELU()
    assert isinstance(seq[1], nn.GELU)
    popped = seq.pop(-1)
    assert isinstance(popped, nn.Tanh) and len(seq) == 3
    seq.extend([nn.Sigmoid()])
    assert len(seq) == 4
    joined = nn.Sequential(a) + nn.Sequential(c)
    assert list(joined) == [a, c]
    named = nn.Sequential(OrderedDict(first=a, second=c))
    assert named.first is a and list(named.state_dict())[0] == "first.weight"
    del seq[1:3]
    assert len(seq) == 2 and list(seq._modules) == ["0", "1"]


def test_module_list():
    layers = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 1)])
    assert len(layers) == 2 and len(list(layers.parameters())) == 4
    extra = nn.Linear(1, 1)
    assert layers.append(extra) is layers and layers[-1] is extra and layers[2] is extra
    layers.extend([nn.ReLU(), nn.Tanh()])
    layers.insert(0, nn.Identity())
    assert [type(m).__name__ for m in layers] == ["Identity", "Linear", "Linear", "Linear",
                                                   "ReLU", "Tanh"]
    sliced = layers[1:3]
    assert type(sliced) is nn.ModuleList and sliced[0] is layers[1]
    del layers[0]
    assert list(layers._modules) == [str(i) for i in range(5)]
    layers[0] = nn.GELU()
    assert isinstance(layers[0], nn.GELU)
    assert isinstance(layers.pop(0), nn.GELU) and len(layers) == 4
    both = nn.ModuleList([nn.ReLU()]) + nn.ModuleList([nn.Tanh()])
    assert [type(m).__name__ for m in both] == ["ReLU", "Tanh"]
    with pytest.raises(IndexError, match="index 7 is out of range"):
        layers[7]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        layers.extend(5)


def test_module_dict():
    md = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(1, 1)})
    assert list(md) == ["a", "b"] and "a" in md and len(md) == 2
    md["c"] = nn.Tanh()
    md.update([("d", nn.Identity())])
    assert list(md.keys()) == ["a", "b", "c", "d"]
    assert isinstance(md.pop("a"), nn.ReLU) and "a" not in md
    assert [k for k, _ in md.items()] == ["b", "c", "d"] and len(list(md.values())) == 3
    assert list(md.state_dict()) == ["b.weight", "b.bias"]
    del md["b"]
    md.clear()
    assert len(md) == 0
    with pytest.raises(ValueError, match="has length 1; 2 is required"):
        md.update([("x",)])
    with pytest.raises(TypeError, match="should be called with an iterable"):
        md.update(3)


# -- layers -----------------------------------------------------------------------------------
def test_linear_forward_and_gradients(device):
    lin = nn.Linear(3, 2, device=device, dtype=tp.float64)
    assert lin.weight.device == tp.device(device) and lin.weight.dtype == tp.float64
    x = RNG.normal(size=(4, 3))
    w, b = as64(lin.weight), as64(lin.bias)
    out = lin(on(device, x))
    np.testing.assert_allclose(as64(out), x @ w.T + b, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(as64(lin.weight.grad), np.ones((4, 2)).T @ x, rtol=1e-12)
    np.testing.assert_allclose(as64(lin.bias.grad), [4.0, 4.0])
    no_bias = nn.Linear(3, 2, bias=False)
    assert no_bias.bias is None and [n for n, _ in no_bias.named_parameters()] == ["weight"]
    batched = nn.Linear(3, 5)(tp.ones(2, 7, 3))
    assert tuple(batched.shape) == (2, 7, 5)


def test_layer_norm_forward_and_gradients(device):
    ln = nn.LayerNorm(4, device=device, dtype=tp.float64)
    with tp.no_grad():
        ln.weight.copy_(on(device, [1.0, 2.0, 0.5, -1.0]))
        ln.bias.copy_(on(device, [0.0, 1.0, 0.0, 2.0]))
    x = RNG.normal(size=(3, 4))

    def reference(a):
        mean = a.mean(-1, keepdims=True)
        var = ((a - mean) ** 2).mean(-1, keepdims=True)
        return (a - mean) / np.sqrt(var + 1e-5) * as64(ln.weight) + as64(ln.bias)

    inp = on(device, x, requires_grad=True)
    out = ln(inp)
    np.testing.assert_allclose(as64(out), reference(x), rtol=1e-10)
    cotangent = RNG.normal(size=(3, 4))
    out.backward(on(device, cotangent))
    np.testing.assert_allclose(as64(inp.grad), _numeric_grad(reference, x, cotangent),
                               rtol=1e-6, atol=1e-8)
    no_affine = nn.LayerNorm((4,), elementwise_affine=False)
    assert no_affine.weight is None and list(no_affine.parameters()) == []
    assert nn.LayerNorm(3, bias=False).bias is None
    fresh = nn.LayerNorm(3)
    assert (as64(fresh.weight) == 1).all() and (as64(fresh.bias) == 0).all()


def _numeric_grad(fn, x, cotangent, step=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + step
        up = np.sum(cotangent * fn(x))
        x[i] = saved - step
        down = np.sum(cotangent * fn(x))
        x[i] = saved
        grad[i] = (up - down) / (2 * step)
    return grad


def test_embedding_lookup_duplicates_and_padding(device):
    emb = nn.Embedding(6, 3, padding_idx=2, device=device, dtype=tp.float64)
    assert (as64(emb.weight)[2] == 0).all() and as64(emb.weight)[[0, 1, 3]].any()
    table = as64(emb.weight)
    indices = np.array([[0, 2, 5], [5, 2, 1]])
    out = emb(tp.tensor(indices, device=device))
    assert tuple(out.shape) == (2, 3, 3)
    np.testing.assert_array_equal(as64(out), table[indices])
    cotangent = RNG.normal(size=(2, 3, 3))
    out.backward(on(device, cotangent))
    expected = np.zeros((6, 3))
    np.add.at(expected, indices.reshape(-1), cotangent.reshape(-1, 3))
    expected[2] = 0.0                                 # the padding row gets no gradient
    np.testing.assert_allclose(as64(emb.weight.grad), expected, rtol=1e-12)
    int32 = emb(tp.tensor([1, 5], dtype=tp.int32, device=device))
    np.testing.assert_array_equal(as64(int32), table[[1, 5]])
    scalar = emb(tp.tensor(3, device=device))
    assert tuple(scalar.shape) == (3,)


def test_embedding_padding_keeps_a_nonzero_row_value_and_negative_index(device):
    weight = on(device, np.arange(12.0).reshape(4, 3))
    emb = nn.Embedding.from_pretrained(weight, freeze=False, padding_idx=-1)
    assert emb.padding_idx == 3 and emb.weight.requires_grad
    out = emb(tp.tensor([3, 0], device=device))
    np.testing.assert_array_equal(as64(out), [[9.0, 10.0, 11.0], [0.0, 1.0, 2.0]])
    out.sum().backward()
    np.testing.assert_array_equal(as64(emb.weight.grad)[3], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(as64(emb.weight.grad)[0], [1.0, 1.0, 1.0])
    frozen = nn.Embedding.from_pretrained(weight)
    assert not frozen.weight.requires_grad


def test_embedding_max_norm(device):
    weight = on(device, [[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    emb = nn.Embedding.from_pretrained(weight, max_norm=1.0)
    out = emb(tp.tensor([0, 1, 0], device=device))
    np.testing.assert_allclose(as64(out), [[0.6, 0.8], [0.3, 0.4], [0.6, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(as64(emb.weight)[2], [6.0, 8.0])   # not looked up: unchanged


def test_embedding_errors():
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=-4)
    emb = nn.Embedding(3, 2)
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar "
                                           "types: Long, Int; but got float32"):
        emb(tp.tensor([0.0]))
    with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
        F.embedding(tp.tensor([0]), tp.ones(3))
    with pytest.raises(NotImplementedError, match="sparse"):
        nn.Embedding(3, 2, sparse=True)


def test_dropout_module_follows_training(device):
    drop = nn.Dropout(0.5)
    x = tp.ones(1000, device=device, requires_grad=True)
    out = drop(x)
    values = as64(out)
    assert set(np.unique(values)) <= {0.0, 2.0} and 300 < (values == 0).sum() < 700
    out.sum().backward()
    np.testing.assert_array_equal(as64(x.grad), values)   # gradient: the mask times 1/(1-p)
    drop.eval()
    assert drop(x) is x
    tp.manual_seed(3)
    a = as64(nn.Dropout(0.3)(tp.ones(64, device=device)))
    tp.manual_seed(3)
    b = as64(nn.Dropout(0.3)(tp.ones(64, device=device, requires_grad=True)))
    np.testing.assert_array_equal(a, b)   # recorded or fused: the same mask
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but "
                                         "got 1.5"):
        nn.Dropout(1.5)


def test_activation_modules(device):
    x = RNG.normal(size=(2, 5))
    t = on(device, x)
    np.testing.assert_allclose(as64(nn.ReLU()(t)), np.maximum(x, 0))
    np.testing.assert_allclose(as64(nn.Tanh()(t)), np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(as64(nn.Sigmoid()(t)), 1 / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(as64(nn.SiLU()(t)), x / (1 + np.exp(-x)), rtol=1e-12)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(as64(nn.GELU()(t)), 0.5 * x * (1 + erf(x / math.sqrt(2))),
                               rtol=1e-12)
    np.testing.assert_allclose(as64(nn.Softmax(dim=1)(t)).sum(1), [1.0, 1.0])
    assert nn.Identity(3, key=4)(t) is t
    inp = on(device, x, requires_grad=True)
    nn.GELU("tanh")(nn.SiLU()(nn.Tanh()(inp))).sum().backward()
    assert inp.grad is not None
    y = on(device, x.copy())
    assert nn.ReLU(inplace=True)(y) is y and (as64(y) >= 0).all()


# -- nn.init ----------------------------------------------------------------------------------
def test_calculate_gain():
    assert nn.init.calculate_gain("linear") == 1 and nn.init.calculate_gain("sigmoid") == 1
    assert nn.init.calculate_gain("tanh") == 5.0 / 3
    assert nn.init.calculate_gain("relu") == math.sqrt(2.0)
    assert nn.init.calculate_gain("leaky_relu") == math.sqrt(2.0 / (1 + 0.01 ** 2))
    assert nn.init.calculate_gain("leaky_relu", math.sqrt(5)) == math.sqrt(1 / 3)
    assert nn.init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        nn.init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="negative_slope x not a valid number"):
        nn.init.calculate_gain("leaky_relu", "x")


def test_uniform_normal_constant(device):
    tp.manual_seed(0)
    t = tp.empty(200, 100, device=device, requires_grad=True)
    assert nn.init.uniform_(t, -2.0, 3.0) is t
    values = as64(t)
    assert values.min() >= -2.0 and values.max() < 3.0
    assert abs(values.mean() - 0.5) < 0.05 and abs(values.std() - 5 / math.sqrt(12)) < 0.03
    assert t.is_leaf and t.requires_grad and t.grad_fn is None
    nn.init.normal_(t, 1.0, 0.5)
    values = as64(t)
    assert abs(values.mean() - 1.0) < 0.01 and abs(values.std() - 0.5) < 0.01
    assert (as64(nn.init.constant_(t, 0.25)) == 0.25).all()
    assert (as64(nn.init.ones_(t)) == 1).all() and (as64(nn.init.zeros_(t)) == 0).all()
    eye = nn.init.eye_(tp.empty(3, 4, device=device))
    np.testing.assert_array_equal(as64(eye), np.eye(3, 4))


def test_fan_based_inits(device):
    tp.manual_seed(1)
    fan_out, fan_in = 300, 200
    w = tp.empty(fan_out, fan_in, device=device)
    bound = 1 / math.sqrt(fan_in)            # kaiming_uniform_(a=sqrt(5)): nn.Linear's default
    values = as64(nn.init.kaiming_uniform_(w, a=math.sqrt(5)))
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.99 * bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.01 * bound
    values = as64(nn.init.kaiming_uniform_(w, nonlinearity="relu"))
    assert np.abs(values).max() <= math.sqrt(6 / fan_in)
    values = as64(nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"))
    assert abs(values.std() / math.sqrt(2 / fan_out) - 1) < 0.02 and abs(values.mean()) < 0.003
    a = math.sqrt(6 / (fan_in + fan_out))
    values = as64(nn.init.xavier_uniform_(w, gain=2.0))
    assert np.abs(values).max() <= 2 * a and np.abs(values).max() > 0.99 * 2 * a
    values = as64(nn.init.xavier_normal_(w))
    assert abs(values.std() / math.sqrt(2 / (fan_in + fan_out)) - 1) < 0.02
    conv = tp.empty(8, 4, 3, 3, device=device)   # fan_in = 4 * 9
    assert np.abs(as64(nn.init.kaiming_uniform_(conv))).max() <= math.sqrt(
        3) * nn.init.calculate_gain("leaky_relu", 0) / 6
    values = as64(nn.init.trunc_normal_(w, mean=0.5, std=1.0, a=-1.0, b=1.5))
    assert values.min() >= -1.0 and values.max() <= 1.5
    # the mean of N(0.5, 1) truncated to [-1, 1.5]: mu + (phi(alpha) - phi(beta)) / Z * sigma
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)   # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2             # noqa: E731
    expected = 0.5 + (phi(-1.5) - phi(1.0)) / (cdf(1.0) - cdf(-1.5))
    assert abs(values.mean() - expected) < 0.01


def test_init_errors_and_generator():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(tp.empty(5))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        nn.init.kaiming_normal_(tp.empty(2, 2), mode="fan_avg")
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        nn.init.kaiming_uniform_(tp.empty(0, 3))
    g1, g2 = tp.Generator().manual_seed(5), tp.Generator().manual_seed(5)
    a = as64(nn.init.kaiming_normal_(tp.empty(4, 4), generator=g1))
    b = as64(nn.init.kaiming_normal_(tp.empty(4, 4), generator=g2))
    np.testing.assert_array_equal(a, b)


def test_default_layer_initialization(device):
    tp.manual_seed(2)
    lin = nn.Linear(400, 300, device=device)
    bound = 1 / math.sqrt(400)
    for tensor in (lin.weight, lin.bias):
        values = as64(tensor)
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.95 * bound
    assert abs(as64(lin.weight).std() - bound / math.sqrt(3)) < 0.01 * bound
    emb = nn.Embedding(300, 200, device=device)
    values = as64(emb.weight)
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1) < 0.01
    tp.manual_seed(2)
    again = nn.Linear(400, 300)
    np.testing.assert_array_equal(as64(again.weight), as64(lin.weight))  # same on every device


# -- clip_grad_norm_ --------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, "inf"])
def test_clip_grad_norm(device, norm_type):
    grads = [RNG.normal(size=(3, 4)), RNG.normal(size=5)]
    params = []
    for g in grads:
        p = nn.Parameter(tp.zeros(g.shape, device=device, dtype=tp.float64))
        p.grad = on(device, g)
        params.append(p)
    flat = np.concatenate([g.reshape(-1) for g in grads])
    order = math.inf if norm_type == "inf" else norm_type
    total = np.linalg.norm(flat, ord=order)
    max_norm = total / 3
    got = nn.utils.clip_grad_norm_(iter(params), max_norm, norm_type=norm_type)
    assert got.device == tp.device(device) and got.ndim == 0
    np.testing.assert_allclose(as64(got), total, rtol=1e-12)
    scale = max_norm / (total + 1e-6)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(as64(p.grad), g * scale, rtol=1e-12)
    # below the limit: the factor is exactly 1
    before = [as64(p.grad) for p in params]
    nn.utils.clip_grad_norm_(params, 1e6, norm_type=norm_type)
    for p, b in zip(params, before):
        np.testing.assert_array_equal(as64(p.grad), b)


def test_clip_grad_norm_edges(device):
    p = nn.Parameter(tp.zeros(2, device=device))
    assert float(nn.utils.clip_grad_norm_([p], 1.0)) == 0.0       # no grads: norm 0
    with pytest.warns(UserWarning, match="empty generator"):
        nn.utils.clip_grad_norm_((q for q in []), 1.0)
    p.grad = tp.tensor([3.0, 4.0], device=device)
    assert float(nn.utils.clip_grad_norm_(p, 10.0)) == 5.0          # one tensor
    p.grad = tp.tensor([float("nan"), 1.0], device=device)
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert np.isnan(as64(nn.utils.clip_grad_norm_([p], 1.0)))
    p.grad = tp.tensor([3.0, -4.0], device=device)
    nn.utils.clip_grad_value_([p], 3.5)
    np.testing.assert_array_equal(as64(p.grad), [3.0, -3.5])


@requires_accelerator
def test_clip_grad_norm_makes_no_host_synchronization(dev, monkeypatch):
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).to(dev)
    x = tp.randn(5, 4, device=dev)
    target = tp.tensor([0, 1, 2, 1, 0], device=dev)
    calls = count_device_waits(monkeypatch)
    calls.clear()
    F.cross_entropy(model(x), target).backward()
    total = nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert calls == [], f"host synchronizations: {calls}"
    assert float(total) > 0


@requires_accelerator
def test_clip_grad_norm_error_if_nonfinite_refused_in_capture(dev):
    p = nn.Parameter(tp.zeros(2, device=dev))
    p.grad = tp.ones(2, device=dev)
    graph = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="graph capture cannot do"):
        with graph:
            nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert not tp.accelerator.is_current_stream_capturing()


# -- training --------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.fc1 = nn.Linear(3, 5, dtype=dtype)
        self.fc2 = nn.Linear(5, 4, dtype=dtype)

    def forward(self, x):
        return self.fc2(F.tanh(self.fc1(x)))


def numpy_sgd(params, x, y, lr, steps):
    """The same MLP, cross entropy and SGD with hand-derived gradients, in float64."""
    w1, b1, w2, b2 = (p.copy() for p in params)
    history = []
    for _ in range(steps):
        h = np.tanh(x @ w1.T + b1)
        logits = h @ w2.T + b2
        logp = logits - logits.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        n = x.shape[0]
        history.append(-logp[np.arange(n), y].mean())
        d_logits = (np.exp(logp) - np.eye(4)[y]) / n
        d_w2, d_b2 = d_logits.T @ h, d_logits.sum(0)
        d_pre = (d_logits @ w2) * (1 - h * h)
        d_w1, d_b1 = d_pre.T @ x, d_pre.sum(0)
        w1, b1 = w1 - lr * d_w1, b1 - lr * d_b1
        w2, b2 = w2 - lr * d_w2, b2 - lr * d_b2
        history.append((w1, b1, w2, b2))
    return history


def test_tiny_mlp_trains_like_numpy(device):
    tp.manual_seed(4)
    model = MLP(tp.float64).to(device)
    x = RNG.normal(size=(8, 3))
    y = RNG.integers(0, 4, size=8)
    xs, ys = on(device, x), tp.tensor(y, device=device)
    params = [model.fc1.weight, model.fc1.bias, model.fc2.weight, model.fc2.bias]
    reference = numpy_sgd([as64(p) for p in params], x, y, lr=0.5, steps=6)
    losses = []
    for step in range(6):
        model.zero_grad()
        loss = F.cross_entropy(model(xs), ys)
        loss.backward()
        with tp.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        losses.append(float(loss))
        np.testing.assert_allclose(losses[-1], reference[2 * step], rtol=1e-6, atol=1e-6)
        for p, want in zip(params, reference[2 * step + 1]):
            np.testing.assert_allclose(as64(p), want, rtol=1e-6, atol=1e-6)
    assert losses[-1] < losses[0]
    assert all(p.is_leaf and isinstance(p, nn.Parameter) for p in model.parameters())


@requires_accelerator
def test_captured_training_step_replays_like_eager(dev):
    """Forward, loss, backward, clipping and an SGD update captured into one graph; each replay
    is one training step, equal to the same step run eagerly."""
    tp.manual_seed(5)
    x = tp.randn(16, 3, device=dev)
    y = tp.randint(0, 4, (16,), device=dev)
    captured = MLP(tp.float32).to(dev)
    eager = MLP(tp.float32).to(dev)
    eager.load_state_dict(captured.state_dict())

    def step(model):
        model.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with tp.no_grad():
            for p in model.parameters():
                p.sub_(0.2 * p.grad)
        return loss

    step(captured)                    # warm-up: the .grad tensors exist before the capture
    step(eager)
    graph = tp.accelerator.Graph()
    with graph:
        static_loss = step(captured)
    for _ in range(3):
        graph.replay()
        want = step(eager)
        np.testing.assert_allclose(as64(static_loss), as64(want), rtol=1e-5)
        for (name, a), b in zip(captured.named_parameters(), eager.parameters()):
            np.testing.assert_allclose(as64(a), as64(b), rtol=1e-5, atol=1e-6, err_msg=name)
