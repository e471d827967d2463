"""Every user error: its type and message, then one more op to show the process still works."""

import pytest

import tensorplay as tp
from support import (ACCELERATOR, DEVICE_COUNT, accelerator_device, requires_accelerator,
                     requires_devices, supports)


def still_works(device="cpu"):
    result = tp.arange(4, device=device).float().sum()
    assert result.item() == 6.0


@requires_accelerator
@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: tp.mul(b, a), lambda a, b: a @ b.reshape(3, 1),
    lambda a, b: tp.cat([a, b]), lambda a, b: tp.stack([a, b]),
    lambda a, b: tp.where(a > 0, a, b), lambda a, b: a.clamp(min=b),
    lambda a, b: tp.maximum(a, b), lambda a, b: a.lerp(b, 0.5),
])
def test_mixing_devices_is_refused(op):
    host = tp.ones(3)
    device = tp.ones(3, device=accelerator_device())
    with pytest.raises(RuntimeError, match="on one device, but found cpu and "
                                           f"{accelerator_device()}"):
        op(host, device)
    still_works(accelerator_device())


@requires_devices(2)
def test_mixing_two_accelerator_devices_is_refused():
    a = tp.ones(2, device=accelerator_device(0))
    b = tp.ones(2, device=accelerator_device(1))
    with pytest.raises(RuntimeError, match=f"{accelerator_device(0)} and "
                                           f"{accelerator_device(1)}"):
        a * b
    assert (a * b.to(a.device)).sum().item() == 2.0


def test_shapes_that_do_not_broadcast(device):
    a, b = tp.ones(2, 3, device=device), tp.ones(4, device=device)
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4,\) do not broadcast"):
        a + b
    with pytest.raises(ValueError, match="do not broadcast"):
        tp.where(a > 0, a, b)
    with pytest.raises(RuntimeError, match="in-place ops don't broadcast self"):
        tp.ones(3, device=device).add_(tp.ones(2, 3, device=device))
    still_works(device)


@pytest.mark.parametrize("spelling,match", [
    ("gpu:0", "invalid device spelling 'gpu:0'"), ("cpu:1", "the host has one device"),
    ("cuda:x", "invalid device spelling"),
])
def test_bad_device_spelling(spelling, match):
    with pytest.raises(ValueError, match=match):
        tp.zeros(2, device=spelling)
    still_works()


def test_device_that_is_not_built():
    if ACCELERATOR is None:
        with pytest.raises(ValueError, match="not available.*only device is 'cpu'"):
            tp.zeros(2, device="sim:0")
    else:
        with pytest.raises(ValueError, match="out of range"):
            tp.zeros(2, device=accelerator_device(DEVICE_COUNT))
    still_works()


@requires_accelerator
def test_numpy_of_an_accelerator_tensor():
    t = tp.ones(2, device=accelerator_device())
    with pytest.raises(TypeError, match=f"can't convert a {accelerator_device()} tensor to "
                                        f"numpy.*cpu\\(\\).numpy\\(\\)"):
        t.numpy()
    assert t.cpu().numpy().tolist() == [1.0, 1.0]


def test_dtype_the_device_cannot_hold(device):
    missing = [d for d in (tp.float64, tp.complex128, tp.bfloat16, tp.uint64, tp.float16)
               if not supports(device, d)]
    if not missing:
        pytest.skip(f"{device} supports every dtype, so none can be refused")
    with pytest.raises(TypeError, match=f"cannot hold {missing[0]}"):
        tp.zeros(2, dtype=missing[0], device=device)
    still_works(device)


def test_matmul_errors(device):
    a = tp.ones(2, 3, device=device)
    with pytest.raises(RuntimeError, match="expected both operands to have the same dtype, got "
                                           "float32 and float64"):
        a @ tp.ones(3, 2, dtype=tp.float64, device=device)
    with pytest.raises(RuntimeError, match=r"shapes \(2, 3\) and \(4, 5\) cannot be multiplied"):
        a @ tp.ones(4, 5, device=device)
    with pytest.raises(RuntimeError, match=r"\(2, 3\) and \(2,\)"):
        tp.matmul(a, tp.ones(2, device=device))
    with pytest.raises(RuntimeError, match="batch dimensions"):
        tp.ones(2, 2, 3, device=device) @ tp.ones(3, 3, 4, device=device)
    with pytest.raises(RuntimeError, match="at least 1D"):
        tp.matmul(tp.tensor(1.0, device=device), a)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 "
                                           r"and 2x3\)"):
        tp.mm(a, a)
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        tp.dot(a, a)
    with pytest.raises(TypeError, match="must be a Tensor"):
        tp.matmul(a, 2)
    assert (a @ a.T).sum().item() == 12.0


def test_dtype_errors(device):
    ints = tp.tensor([1, 2], device=device)
    bools = tp.tensor([True, False], device=device)
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype.*Got: "
                                           "int64"):
        ints.mean()
    with pytest.raises(TypeError, match="subtracting two bool tensors"):
        bools - bools
    with pytest.raises(TypeError, match="negation of a bool tensor"):
        -bools
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired "
                                           "output type int64"):
        ints.mul_(0.5)
    with pytest.raises(TypeError, match="where expected condition to be a boolean tensor"):
        tp.where(ints, ints, ints)
    with pytest.raises(TypeError, match="softmax\\(\\): expected a floating point tensor"):
        tp.softmax(ints, 0)
    with pytest.raises(TypeError, match="gelu\\(\\): expected a floating point tensor"):
        tp.gelu(ints)
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        ints.std()
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        ints.norm()
    with pytest.raises(TypeError, match="unsupported operand type str"):
        ints + "1"
    assert ints.float().mean().item() == 1.5


def test_join_errors(device):
    a = tp.ones(2, 3, device=device)
    with pytest.raises(RuntimeError, match="expected a non-empty list of Tensors"):
        tp.cat([])
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0. "
                                           "Expected size 3 but got size 4 for tensor number 1"):
        tp.cat([a, tp.ones(2, 4, device=device)])
    with pytest.raises(RuntimeError, match="same number of dimensions: got 2 and 1"):
        tp.cat([a, tp.ones(3, device=device)])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor \\(at position 0\\)"):
        tp.cat([tp.tensor(1.0, device=device)])
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got "
                                           r"\[2, 3\] at entry 0 and \[3, 2\] at entry 1"):
        tp.stack([a, a.T])
    with pytest.raises(TypeError, match="list or tuple of Tensors"):
        tp.cat(a)
    assert tp.cat([a, a], dim=1).shape == (2, 6)


def test_reduction_and_dim_errors(device):
    t = tp.ones(2, 3, device=device)
    with pytest.raises(IndexError, match="dimension 2 is out of range.*-2 to 1"):
        t.sum(dim=2)
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        t.sum(dim=(0, -2))
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        tp.ones(0, 3, device=device).amax(dim=0)
    with pytest.raises(TypeError, match="dim must be an int"):
        t.sum(dim=1.0)
    assert t.sum(dim=-1).tolist() == [3.0, 3.0]


def test_value_and_state_errors(device):
    t = tp.ones(2, device=device)
    with pytest.raises(RuntimeError, match="item\\(\\) needs a tensor with one element"):
        t.item()
    with pytest.raises(RuntimeError, match="truth value of a tensor with 2 elements is "
                                           "ambiguous"):
        bool(t)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(tp.tensor(1.0, device=device))
    with pytest.raises(TypeError, match="create tensors with tensorplay.tensor"):
        tp.Tensor([1, 2])
    with pytest.raises(TypeError, match="cannot make a tensor from"):
        tp.tensor(["a"])
    with pytest.raises(ValueError, match="sizes must be non-negative"):
        tp.zeros(-1, device=device)
    with pytest.raises(TypeError, match="not a tensorplay dtype"):
        tp.zeros(2, dtype="float8", device=device)
    with pytest.raises(TypeError, match="to\\(\\) takes a device, a dtype or a tensor"):
        t.to(3.5)
    with pytest.raises(ValueError, match="at least one of 'min' or 'max'"):
        t.clamp()
    assert bool(t.sum() == 2)
    still_works(device)


def test_view_errors(device):
    t = tp.ones(2, 3, device=device)
    with pytest.raises(RuntimeError, match=r"shape '\[5\]' is invalid for input of size 6"):
        t.reshape(5)
    with pytest.raises(RuntimeError, match="Use .reshape"):
        t.T.view(6)
    with pytest.raises(RuntimeError, match="must match the existing size"):
        t.expand(2, 4)
    with pytest.raises(RuntimeError, match="flatten\\(\\) has invalid args"):
        t.flatten(1, 0)
    with pytest.raises(IndexError, match="out of range"):
        t.transpose(0, 2)
    assert t.T.reshape(6).shape == (6,)


@requires_accelerator
def test_failed_kernel_surfaces_and_the_device_keeps_working():
    device = accelerator_device()
    t = tp.arange(3, device=device)
    index = tp.tensor([7], device=device)  # out of range, only known when the kernel runs
    try:
        t[index].tolist()
    except (IndexError, RuntimeError):
        pass  # sim reports it at the sync point; a GPU may not check at all
    still_works(device)
