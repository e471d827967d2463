"""Edge cases of the gather/scatter/index family and of list indices, on every device.

Negative indices (as torch 2.11 answers: ``tests/torch_differential/test_torch_probes.py``):
PyTorch's ``gather index_select index_add index_copy scatter scatter_add scatter_reduce`` refuse
them exactly as indices past the end; ``take``, ``take_along_dim``, ``index_fill``,
``index_put`` and ``x[idx]`` count them from the end. On cpu the op raises with
PyTorch's exception type; on an accelerator the next sync reports it with one message (sim: the
queued kernel fails; cuda: a check kernel records the index, and the device stays usable).

Empty Python lists as indices are empty int64 indices (PyTorch), not float32 tensors.
"""

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, to_numpy


def _ones(device, n=1):
    return tp.ones(n, device=device)


# (name, call(x, index) on x = arange(4.), exception type on cpu)
REFUSING = [
    ("gather", lambda x, i: tp.gather(x, 0, i), RuntimeError),
    ("index_select", lambda x, i: tp.index_select(x, 0, i), IndexError),
    ("index_add", lambda x, i: x.index_add(0, i, _ones(x.device)), IndexError),
    ("index_add_", lambda x, i: x.index_add_(0, i, _ones(x.device)), IndexError),
    ("index_copy", lambda x, i: x.index_copy(0, i, _ones(x.device)), IndexError),
    ("index_copy_", lambda x, i: x.index_copy_(0, i, _ones(x.device)), IndexError),
    ("scatter", lambda x, i: x.scatter(0, i, _ones(x.device)), RuntimeError),
    ("scatter_", lambda x, i: x.scatter_(0, i, _ones(x.device)), RuntimeError),
    ("scatter_", lambda x, i: x.scatter_(0, i, 5.0), RuntimeError),
    ("scatter_add", lambda x, i: x.scatter_add(0, i, _ones(x.device)), RuntimeError),
    ("scatter_add_", lambda x, i: x.scatter_add_(0, i, _ones(x.device)), RuntimeError),
    ("scatter_reduce", lambda x, i: x.scatter_reduce(0, i, _ones(x.device), "sum"),
     RuntimeError),
    ("scatter_reduce_", lambda x, i: x.scatter_reduce_(0, i, _ones(x.device), "amax"),
     RuntimeError),
]


def _expect_failure(device, exc, match, call):
    """``call()`` must fail as described in the module notes: at once on cpu, at the next
    synchronization on an accelerator (sim's queued kernel, cuda's check kernel), with one
    message; returns True."""
    if device == "cpu":
        with pytest.raises(exc, match=match):
            call()
        return True
    with pytest.raises(RuntimeError, match=rf"kernel launched earlier on {device} failed: "
                                           rf".*{exc.__name__}: .*{match}"):
        call()
        tp.accelerator.synchronize(device)
    return True


def _checks_before_writing(device) -> bool:
    """Whether an op refused for its indices leaves its target untouched: cpu and sim check
    before the op writes; cuda's check kernel reports, but the op runs (unspecified result)."""
    return not device.startswith("cuda")


@pytest.mark.parametrize("name,call,exc", REFUSING, ids=[r[0] for r in REFUSING])
@pytest.mark.parametrize("value", [-1, -4, -5, 4, 7])
def test_negative_indices_are_out_of_range_like_indices_past_the_end(device, name, call, exc,
                                                                     value):
    x = tp.arange(4.0, device=device)
    index = tp.tensor([value], device=device)
    match = rf"{name}\(\): index {value} is out of bounds for dimension 0 with size 4"
    assert _expect_failure(device, exc, match, lambda: call(x, index))
    # the check comes before any write: an in-place target keeps its values
    if _checks_before_writing(device):
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (tp.arange(3, device=device) + 1).tolist() == [1, 2, 3]   # the device still works


def test_index_select_says_pytorchs_words(device):
    x = tp.arange(4.0, device=device)
    assert _expect_failure(device, IndexError, "index out of range in self",
                           lambda: tp.index_select(x, 0, tp.tensor([-1], device=device)))


def test_out_of_range_in_a_later_dim_and_in_2d(device):
    x = tp.arange(6.0, device=device).reshape(2, 3)
    index = tp.tensor([[0, -1], [1, 2]], device=device)
    match = r"gather\(\): index -1 is out of bounds for dimension 1 with size 3"
    assert _expect_failure(device, RuntimeError, match, lambda: tp.gather(x, 1, index))
    match = r"index_select\(\): index -3 is out of bounds for dimension 1 with size 3"
    assert _expect_failure(device, IndexError, match,
                           lambda: x.index_select(1, tp.tensor([0, -3], device=device)))
    match = r"scatter_add_\(\): index -2 is out of bounds for dimension 1 with size 3"
    assert _expect_failure(device, RuntimeError, match, lambda: x.scatter_add_(
        1, tp.tensor([[0, -2]], device=device), tp.ones(1, 2, device=device)))
    if _checks_before_writing(device):
        assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_int32_indices_are_checked_too(device):
    x = tp.arange(4.0, device=device)
    index = tp.tensor([-1], dtype=tp.int32, device=device)
    match = r"index_add\(\): index -1 is out of bounds"
    assert _expect_failure(device, IndexError, match,
                           lambda: x.index_add(0, index, _ones(device)))


def test_in_range_indices_still_work(device):
    x = tp.arange(4.0, device=device)
    i = tp.tensor([3, 0], device=device)
    assert tp.gather(x, 0, i).tolist() == [3.0, 0.0]
    assert tp.index_select(x, 0, i).tolist() == [3.0, 0.0]
    assert tp.take_along_dim(x, i).tolist() == [3.0, 0.0]
    assert x.index_add(0, i, tp.ones(2, device=device)).tolist() == [1.0, 1.0, 2.0, 4.0]
    assert x.scatter(0, i, tp.tensor([9.0, 8.0], device=device)).tolist() == \
        [8.0, 1.0, 2.0, 9.0]
    assert tp.index_select(x, 0, tp.tensor([], dtype=tp.int64, device=device)).shape == (0,)


# -- the ops that DO count negative indices from the end, as PyTorch's ---------------------
def test_take_index_fill_index_put_and_getitem_wrap_negative_indices(device):
    x = tp.arange(4.0, device=device)
    i = tp.tensor([-1], device=device)
    assert tp.take(x, i).tolist() == [3.0]
    assert tp.take_along_dim(x, i, 0).tolist() == [3.0] and tp.take_along_dim(x, i).tolist() \
        == [3.0]
    assert x[i].tolist() == [3.0]
    assert x.index_fill(0, i, 9.0).tolist() == [0.0, 1.0, 2.0, 9.0]
    assert x.index_put((i,), _ones(device), accumulate=True).tolist() == [0.0, 1.0, 2.0, 4.0]
    assert x.index_put((i,), _ones(device)).tolist() == [0.0, 1.0, 2.0, 1.0]
    match = r"index_fill\(\): index -5 is out of bounds for dimension 0 with size 4"
    assert _expect_failure(device, IndexError, match,
                           lambda: x.index_fill(0, tp.tensor([-5], device=device), 1.0))
    match = r"index_put\(\): index -5 is out of bounds for dimension 0 with size 4"
    assert _expect_failure(device, IndexError, match, lambda: x.index_put(
        (tp.tensor([-5], device=device),), _ones(device), accumulate=True))


# -- empty list indices -------------------------------------------------------------------------
def test_an_empty_list_is_an_empty_int64_index(device):
    x = tp.arange(6.0, device=device)
    picked = x[[]]
    assert picked.shape == (0,)
    assert picked.dtype is tp.float32
    assert picked.device == x.device
    m = tp.arange(6.0, device=device).reshape(2, 3)
    assert m[[]].shape == (0, 3)
    assert m[:, []].shape == (2, 0)
    np.testing.assert_array_equal(to_numpy(m[[], 1]), np.zeros(0, np.float32))
    assert tp.arange(6, device=device)[[]].dtype is tp.int64


def test_setitem_with_an_empty_list_writes_nothing(device):
    x = tp.arange(6.0, device=device)
    x[[]] = 1
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    x[[]] = tp.tensor([], device=device)   # an empty value fits an empty selection
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    m = tp.zeros(2, 3, device=device)
    m[:, []] = 7.0
    assert m.tolist() == [[0.0] * 3] * 2


def test_an_empty_value_through_an_empty_mask_writes_nothing(device):
    x = tp.arange(4.0, device=device)
    x[tp.zeros(4, dtype=tp.bool, device=device)] = tp.tensor([], device=device)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[0\] cannot be broadcast"):
        x[x > 1] = tp.tensor([], device=device)



@requires_accelerator
def test_an_out_of_range_index_in_a_replay_is_raised_at_the_next_sync(dev):
    """A captured index op checks the indices each replay holds; the device stays usable."""
    x = tp.arange(4.0, device=dev)
    index = tp.tensor([1], device=dev)
    graph = tp.accelerator.Graph()
    with graph:
        picked = tp.index_select(x, 0, index)
    graph.replay()
    assert picked.tolist() == [1.0]
    index.fill_(9)
    graph.replay()
    with pytest.raises(RuntimeError, match=rf"kernel launched earlier on {dev} failed: .*"
                                           r"index_select\(\): index 9 is out of bounds"):
        tp.accelerator.synchronize(dev)
    index.fill_(2)
    graph.replay()
    assert picked.tolist() == [2.0] and (x + 1).tolist() == [1.0, 2.0, 3.0, 4.0]
