"""Every user error: its type and message, then one more op to show the process still works."""

import math
import warnings

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
    with pytest.raises(RuntimeError, match="expected mat1 and mat2 to have the same dtype, but "
                                           "got: float32 != float64"):
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
    with pytest.raises(RuntimeError, match="with two bool tensors is not supported. Use the `\\^` "
                                           "or `logical_xor\\(\\)`"):
        bools - bools
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not "
                                           "supported.*`~` or `logical_not\\(\\)`"):
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


MASK_ADVICE = "use the `~` or `logical_not\\(\\)` operator instead"
NO_ORDER = "is not implemented for complex64.*complex numbers have no ordering"


def _floats(device):
    return tp.tensor([1.0, 2.0], device=device)


def _ints(device):
    return tp.tensor([3, 4], device=device)


def _bools(device):
    return tp.tensor([True, False], device=device)


def _complexes(device):
    return tp.tensor([1 + 1j, 2 - 1j], device=device)


# (operation on a device, the message it must raise at the call)
REFUSED = [
    (lambda d: _bools(d) - 1, "Subtraction, the `-` operator, with a bool tensor is not supported "
                              "\\(got bool tensor, Python int\\). If you are trying to invert a "
                              "mask, " + MASK_ADVICE),
    (lambda d: 1 - _bools(d), "with a bool tensor is not supported.*" + MASK_ADVICE),
    (lambda d: _floats(d) - _bools(d), "with a bool tensor is not supported.*" + MASK_ADVICE),
    (lambda d: _floats(d) - True, "with a bool tensor is not supported.*" + MASK_ADVICE),
    (lambda d: tp.sub(_bools(d), _bools(d), alpha=2),
     "with two bool tensors is not supported.*logical_xor"),
    (lambda d: _bools(d) // _bools(d),
     '"floor_divide" is not implemented for bool \\(got bool tensor, bool tensor\\)'),
    (lambda d: _bools(d) % _bools(d), '"remainder" is not implemented for bool'),
    (lambda d: tp.fmod(_bools(d), _bools(d)), '"fmod" is not implemented for bool'),
    (lambda d: tp.div(_bools(d), _bools(d), rounding_mode="trunc"),
     '"div_trunc" is not implemented for bool'),
    (lambda d: _bools(d) ** _bools(d), '"pow" is not implemented for bool'),
    (lambda d: True ** _bools(d), '"pow" is not implemented for bool'),
    (lambda d: _floats(d) & _floats(d), ('"bitwise_and" is not implemented for float32 \\(got '
                                         'float32 tensor, float32 tensor\\); bitwise ops take '
                                         'bool and integer tensors')),
    (lambda d: _floats(d) | 1, '"bitwise_or" is not implemented for float32'),
    (lambda d: _ints(d) ^ 1.5,
     '"bitwise_xor" is not implemented for float32 \\(got int64 tensor, Python float\\)'),
    (lambda d: ~_floats(d), '"bitwise_not" is not implemented for float32 \\(got float32 tensor'),
    (lambda d: _floats(d) << 1, '"bitwise_left_shift" is not implemented for float32'),
    (lambda d: _bools(d) >> _bools(d),
     '"bitwise_right_shift" is not implemented for bool.*shifts take integer tensors'),
    (lambda d: _ints(d) ** -1,
     "Integers to negative integer powers are not allowed \\(pow: int64 tensor \\*\\* -1\\)"),
    (lambda d: _bools(d) ** -2, "Integers to negative integer powers are not allowed"),
    (lambda d: -_bools(d), "Negation, the `-` operator, on a bool tensor.*" + MASK_ADVICE),
    (lambda d: tp.round(_ints(d), decimals=1), '"round.decimals" is not implemented for int64'),
    (lambda d: _bools(d).floor(), '"floor" is not implemented for bool'),
    (lambda d: tp.relu(_bools(d)), '"relu" is not implemented for bool'),
]
REFUSED_COMPLEX = [
    (lambda d: _complexes(d) // _complexes(d), '"floor_divide" is not implemented for complex64'),
    (lambda d: _complexes(d) % 2, '"remainder" is not implemented for complex64'),
    (lambda d: _complexes(d).fmod(2), '"fmod" is not implemented for complex64'),
    (lambda d: _complexes(d) < _complexes(d), '"lt" ' + NO_ORDER),
    (lambda d: _complexes(d) <= 1, '"le" ' + NO_ORDER),
    (lambda d: _complexes(d) > 1, '"gt" ' + NO_ORDER),
    (lambda d: 1 >= _complexes(d), '"le" ' + NO_ORDER),
    (lambda d: _floats(d) >= 1j, '"ge" ' + NO_ORDER),
    (lambda d: _complexes(d).max(), '"max" ' + NO_ORDER),
    (lambda d: _complexes(d).min(dim=0), '"min" ' + NO_ORDER),
    (lambda d: _complexes(d).amax(), '"amax" ' + NO_ORDER),
    (lambda d: tp.amin(_complexes(d)), '"amin" ' + NO_ORDER),
    (lambda d: _complexes(d).argmax(), '"argmax" ' + NO_ORDER),
    (lambda d: tp.argmin(_complexes(d), dim=0), '"argmin" ' + NO_ORDER),
    (lambda d: _complexes(d).sort(), '"sort" ' + NO_ORDER),
    (lambda d: _complexes(d).argsort(), '"sort" ' + NO_ORDER),
    (lambda d: _complexes(d).topk(1), '"topk" ' + NO_ORDER),
    (lambda d: tp.maximum(_complexes(d), _complexes(d)), '"maximum" ' + NO_ORDER),
    (lambda d: tp.max(_complexes(d), _complexes(d)), '"maximum" ' + NO_ORDER),
    (lambda d: tp.minimum(_floats(d), _complexes(d)), '"minimum" ' + NO_ORDER),
    (lambda d: _complexes(d).clamp(min=0), '"clamp" ' + NO_ORDER),
    (lambda d: _complexes(d).clamp_(max=1), '"clamp_" ' + NO_ORDER),
    (lambda d: tp.floor(_complexes(d)), '"floor" is not implemented for complex64'),
    (lambda d: _complexes(d).round(), '"round" is not implemented for complex64'),
    (lambda d: tp.sign(_complexes(d)), '"sign" is not implemented for complex64'),
    (lambda d: tp.atan2(_complexes(d), _complexes(d)), '"atan2" is not implemented for complex64'),
]


def _case_ids(cases, dtype: str) -> list[str]:
    """``op-dtype-N``: the op the message names (else its first word) and the case's index."""
    names = [match.split('"')[1] if match.startswith('"') else match.split()[0]
             for _, match in cases]
    return [f"{name}-{dtype}-{i}" for i, name in enumerate(names)]


@pytest.mark.parametrize("operation,match,dtype",
                         [(*case, tp.bool) for case in REFUSED] +
                         [(*case, tp.complex64) for case in REFUSED_COMPLEX],
                         ids=_case_ids(REFUSED, "bool") + _case_ids(REFUSED_COMPLEX, "complex"))
def test_ops_pytorch_refuses_are_refused_at_the_call(device, operation, match, dtype):
    if not supports(device, dtype):
        pytest.skip(f"{device} cannot hold {dtype}")
    with pytest.raises(RuntimeError, match=match):
        operation(device)
    still_works(device)   # waits for the device: nothing was queued that fails later


def test_refused_in_place_op_leaves_the_tensor_untouched(device):
    t = tp.tensor([1.5, 2.5], device=device)
    # PyTorch raises NotImplementedError (a RuntimeError) for a dtype an op lacks
    with pytest.raises(NotImplementedError, match='"bitwise_and" is not implemented for float32'):
        t.bitwise_and_(t)
    with pytest.raises(NotImplementedError, match='is not implemented for bool'):
        tp.tensor([True], device=device) // tp.tensor([True], device=device)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        tp.tensor([2], device=device).pow_(-1)
    assert t.tolist() == [1.5, 2.5]
    still_works(device)


@pytest.mark.parametrize("operation,name", [
    (lambda a, b: a // b, "floor_divide"), (lambda a, b: a % b, "remainder"),
    (lambda a, b: tp.fmod(a, b), "fmod"),
    (lambda a, b: tp.div(a, b, rounding_mode="trunc"), "div_trunc"),
    (lambda a, b: tp.div(a, b, rounding_mode="floor"), "floor_divide"),
])
def test_integer_division_by_zero(device, operation, name):
    a = tp.tensor([7, -8, 9], dtype=tp.int32, device=device)
    divisors = tp.tensor([2, 0, 3], dtype=tp.int32, device=device)
    if device == "cpu":
        for divisor in (divisors, 0):
            with pytest.raises(RuntimeError, match=f"ZeroDivisionError: integer {name} by zero "
                                                   f"\\(int32\\)"):
                operation(a, divisor)
    else:   # accelerators do not check, as PyTorch's CUDA does not: no error, no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = operation(a, divisors).cpu()
            operation(a, 0).cpu()
        expected = operation(a.cpu(), tp.tensor([2, 1, 3], dtype=tp.int32))
        assert result.shape == (3,) and result.dtype == tp.int32
        assert result[0].item() == expected[0].item() and result[2].item() == expected[2].item()
    floats = operation(a.float(), divisors.float()).tolist()   # IEEE: inf/nan, no error
    assert math.isinf(floats[1]) or math.isnan(floats[1])
    still_works(device)


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
