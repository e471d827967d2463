"""The op layer's plan caches key on interned tensor layouts (``_tensor/tensor.py``: ``Layout``,
``layout_of``): one object per (dtype, device, shape, strides), kept on each tensor."""

from __future__ import annotations

import pickle

import numpy as np

import tensorplay as tp
from tensorplay._tensor import elementwise as engine
from tensorplay._tensor import tensor as tensor_module
from tensorplay._tensor.tensor import layout_of


def test_equal_layouts_share_one_object_and_others_do_not(device):
    a, b = tp.ones(3, 4, device=device), tp.zeros(3, 4, device=device)
    assert layout_of(a) is layout_of(b)
    assert layout_of(a.T) is not layout_of(a)                  # other shape and strides
    assert layout_of(a[:, ::2]) is not layout_of(tp.ones(3, 2, device=device))   # strides
    assert layout_of(a.to(tp.float64)) is not layout_of(a)      # dtype
    if device != "cpu":
        assert layout_of(tp.ones(3, 4)) is not layout_of(a)     # device
    assert a._layout is layout_of(a)                             # kept on the tensor


def test_results_of_one_plan_take_its_layout_and_values_follow_each_layout(device):
    x = tp.arange(12, dtype=tp.float32, device=device).reshape(3, 4)
    y = tp.arange(12, dtype=tp.float32, device=device).reshape(4, 3)
    first, second = x + 1, x + 2
    assert first._layout is second._layout is layout_of(tp.ones(3, 4, device=device))
    np.testing.assert_array_equal((x + y.T).cpu().numpy(),
                                  np.arange(12.).reshape(3, 4) + np.arange(12.).reshape(4, 3).T)
    np.testing.assert_array_equal((x + x).cpu().numpy(), 2 * np.arange(12.).reshape(3, 4))
    np.testing.assert_array_equal((y.T + x).cpu().numpy(), (x + y.T).cpu().numpy())


def test_starting_the_table_over_keeps_answers_right(device, monkeypatch):
    x = tp.ones(2, 3, device=device)
    before = layout_of(x)
    monkeypatch.setattr(tensor_module, "_layouts", {})
    fresh = tp.ones(2, 3, device=device)
    assert layout_of(fresh) is not before          # merely another name for the same layout
    assert layout_of(x) is before                  # a tensor keeps its own
    np.testing.assert_array_equal((x + fresh).cpu().numpy(), np.full((2, 3), 2.0))
    engine._plans.clear()


def test_a_pickled_tensor_reinterns_its_layout():
    x = tp.ones(2, 3)
    layout_of(x)
    copy = pickle.loads(pickle.dumps(x))
    assert copy._layout is layout_of(x)
    np.testing.assert_array_equal((copy * 2).numpy(), np.full((2, 3), 2.0))


def test_a_tensor_pickled_without_a_layout_gets_one_at_its_first_use():
    # as a tensor pickled before tensors kept their Layout unpickles
    x = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    old = tp.Tensor.__new__(tp.Tensor)
    old.__setstate__((None, {"_data": x._data.copy(), "_device": x._device, "_dtype": x._dtype,
                             "_guard": None}))
    np.testing.assert_array_equal((old + 1).numpy(), np.arange(1.0, 7.0).reshape(2, 3))
    assert old._layout is layout_of(x)
