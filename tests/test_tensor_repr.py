"""``repr(tensor)`` matches PyTorch's format (the expected strings are PyTorch's, with
``torch`` spelled ``tensorplay``)."""

import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator

NAN, INF = float("nan"), float("inf")

CASES = [
    (lambda: tp.tensor([1.0, 2.0, 3.0]), "tensor([1., 2., 3.])"),
    (lambda: tp.tensor([1.0, 2.5]), "tensor([1.0000, 2.5000])"),
    (lambda: tp.tensor([[1, 2], [3, 4]]), "tensor([[1, 2],\n        [3, 4]])"),
    (lambda: tp.tensor(3.5), "tensor(3.5000)"),
    (lambda: tp.tensor(2.0), "tensor(2.)"),
    (lambda: tp.tensor(3), "tensor(3)"),
    (lambda: tp.tensor(True), "tensor(True)"),
    (lambda: tp.tensor([1, 2], dtype=tp.int32), "tensor([1, 2], dtype=tensorplay.int32)"),
    (lambda: tp.tensor([1.5, 2.0], dtype=tp.float64),
     "tensor([1.5000, 2.0000], dtype=tensorplay.float64)"),
    (lambda: tp.tensor([1.5], dtype=tp.float16), "tensor([1.5000], dtype=tensorplay.float16)"),
    (lambda: tp.tensor([2.0], dtype=tp.bfloat16), "tensor([2.], dtype=tensorplay.bfloat16)"),
    (lambda: tp.tensor([True, False]), "tensor([ True, False])"),
    (lambda: tp.tensor([1, 100, -5]), "tensor([  1, 100,  -5])"),
    (lambda: tp.tensor([-1.5, 2.0]), "tensor([-1.5000,  2.0000])"),
    (lambda: tp.zeros(3), "tensor([0., 0., 0.])"),
    (lambda: tp.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda: tp.zeros(0), "tensor([])"),
    (lambda: tp.zeros(0, dtype=tp.int64), "tensor([], dtype=tensorplay.int64)"),
    (lambda: tp.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
    (lambda: tp.tensor([1e10, 1.0]), "tensor([1.0000e+10, 1.0000e+00])"),
    (lambda: tp.tensor([123456789.0, 1.0]), "tensor([1.2346e+08, 1.0000e+00])"),
    (lambda: tp.tensor([1.5, NAN, INF]), "tensor([1.5000,    nan,    inf])"),
    (lambda: tp.tensor([1.0, NAN]), "tensor([1., nan])"),
    (lambda: tp.tensor([NAN, -INF]), "tensor([nan, -inf])"),
    (lambda: tp.tensor([1 + 2j, -3.5 - 1j]), "tensor([ 1.0000+2.j, -3.5000-1.j])"),
    (lambda: tp.tensor([1 + 2j], dtype=tp.complex128),
     "tensor([1.+2.j], dtype=tensorplay.complex128)"),
    (lambda: tp.arange(8).reshape(2, 2, 2),
     "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])"),
    (lambda: tp.arange(30.0),
     "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
     "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
     "        28., 29.])"),
    (lambda: tp.arange(2000), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"),
    (lambda: tp.arange(3000).reshape(1000, 3),
     "tensor([[   0,    1,    2],\n        [   3,    4,    5],\n        [   6,    7,    8],\n"
     "        ...,\n        [2991, 2992, 2993],\n        [2994, 2995, 2996],\n"
     "        [2997, 2998, 2999]])"),
    (lambda: tp.arange(4, dtype=tp.float32).reshape(2, 2).T,
     "tensor([[0., 2.],\n        [1., 3.]])"),
]


@pytest.mark.parametrize("make,expected", CASES, ids=[c[1][:40] for c in CASES])
def test_repr_matches_pytorch(make, expected):
    assert repr(make()) == expected
    assert str(make()) == expected


def test_summarized_2d_rows_and_columns():
    text = repr(tp.arange(40000, dtype=tp.int32).reshape(200, 200))
    lines = text.split("\n")
    assert lines[0] == "tensor([[    0,     1,     2,  ...,   197,   198,   199],"
    assert lines[3] == "        ...,"
    assert lines[-2] == "        [39800, 39801, 39802,  ..., 39997, 39998, 39999]],"
    assert lines[-1] == "       dtype=tensorplay.int32)"  # past 80 columns: on its own line
    assert len(lines) == 8


@requires_accelerator
def test_repr_of_an_accelerator_tensor():
    device = accelerator_device()
    t = tp.tensor([1.0, 2.5], device=device)
    assert repr(t) == f"tensor([1.0000, 2.5000], device='{device}')"
    assert repr(tp.tensor([1, 2], dtype=tp.int32, device=device)) == \
        f"tensor([1, 2], device='{device}', dtype=tensorplay.int32)"
    assert repr(tp.zeros(0, 2, device=device)) == f"tensor([], device='{device}', size=(0, 2))"
    assert repr((t * 2).sum()) == f"tensor(7., device='{device}')"  # waits for the work


@requires_accelerator
def test_repr_is_refused_during_capture():
    t = tp.ones(2, device=accelerator_device())
    g = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="Tensor.__repr__"):
        with g:
            repr(t + 1)
    assert repr(t) == f"tensor([1., 1.], device='{accelerator_device()}')"
