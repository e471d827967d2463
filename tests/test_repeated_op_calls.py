"""The ops a decode step repeats (softmax, layer_norm, masked_fill, index_select, index_copy_,
argmax, addmm, the views, writes through a basic index) keep what they decided at the first
call of a signature and go straight to the launch afterwards: a repeated call must still give
the right values for new data, tell apart what the signature does not show (the fill value, a
source overlapping the written tensor), refuse bad arguments of another signature, and still
check a compiled output's guard."""

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, requires_accelerator, to_numpy

F = tp.nn.functional


def repeated(fn, *makers):
    """``fn`` over fresh operands from ``makers`` three times (the first call plans, the others
    take the kept plan); the NumPy operands and results of each call."""
    results = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        arrays = [make(rng) for make in makers]
        results.append((arrays, fn(*arrays)))
    return results


def test_softmax_and_layer_norm_follow_new_data(device):
    def normal(rng):
        return rng.standard_normal((3, 8)).astype(np.float32)
    weight, bias = tp.ones(8, device=device) * 2, tp.full((8,), 0.5, device=device)
    for arrays, out in repeated(lambda a: tp.tensor(a, device=device).softmax(-1), normal):
        e = np.exp(arrays[0] - arrays[0].max(-1, keepdims=True))
        np.testing.assert_allclose(to_numpy(out), e / e.sum(-1, keepdims=True), rtol=1e-5)
    for arrays, out in repeated(
            lambda a: F.layer_norm(tp.tensor(a, device=device), (8,), weight, bias), normal):
        a = arrays[0]
        expected = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(to_numpy(out), expected * 2 + 0.5, rtol=1e-4, atol=1e-5)


def test_layer_norm_checks_what_its_quick_path_does_not_take(device):
    x = tp.ones(2, 4, device=device)
    weight, bias = tp.ones(4, device=device), tp.zeros(4, device=device)
    F.layer_norm(x, (4,), weight, bias)
    with pytest.raises(TypeError, match="eps"):
        F.layer_norm(x, (4,), weight, bias, eps="0.1")
    with pytest.raises(TypeError, match="tuple of ints"):
        F.layer_norm(x, (True,), weight, bias)
    with pytest.raises(RuntimeError):
        F.layer_norm(x, (3,), tp.ones(3, device=device), tp.zeros(3, device=device))
    assert to_numpy(F.layer_norm(x, [4], weight, bias, eps=1)).tolist() == [[0.0] * 4] * 2


def test_masked_fill_tells_apart_fill_values_a_signature_does_not_show(device):
    x = tp.ones(2, 3, device=device)
    mask = tp.tensor([[True, False, True], [False, False, True]], device=device)
    for value in (0.0, -0.0, 0.0, float("-inf"), 2, 2.5, float("nan")):
        out = to_numpy(x.masked_fill(mask, value))
        expected = np.where(to_numpy(mask), np.float32(value), np.float32(1))
        np.testing.assert_array_equal(out, expected)
        assert (np.signbit(out) == np.signbit(expected)).all()   # -0.0 is not 0.0
    ints = tp.ones(3, dtype=tp.int32, device=device)
    flags = tp.tensor([True, False, True], device=device)
    assert to_numpy(ints.masked_fill(flags, 7)).tolist() == [7, 1, 7]
    with pytest.raises(RuntimeError):
        ints.masked_fill(flags, 2 ** 40)   # does not fit int32: refused on every call
    with pytest.raises(RuntimeError):
        ints.masked_fill(flags, 2 ** 40)


def test_index_select_and_argmax_follow_new_data(device):
    table = tp.arange(20, dtype=tp.float32, device=device).view(5, 4)
    for position in (3, 0, 4):
        index = tp.tensor([position], device=device)
        assert to_numpy(table.index_select(0, index)).tolist() == \
            [[4.0 * position + k for k in range(4)]]
    for arrays, out in repeated(lambda a: tp.tensor(a, device=device).argmax(-1),
                                lambda rng: rng.standard_normal((4, 9)).astype(np.float32)):
        assert to_numpy(out).tolist() == arrays[0].argmax(-1).tolist()
    with pytest.raises(TypeError, match="integer index"):
        table.index_select(0, tp.tensor([1.0], device=device))


def test_index_copy_copies_an_overlapping_source_first(device):
    cache = tp.zeros(4, 3, device=device)
    index = tp.tensor([1], device=device)
    for value in (1.0, 2.0):
        cache.index_copy_(0, index, tp.full((1, 3), value, device=device))
        assert to_numpy(cache)[1].tolist() == [value] * 3
    # the same signature with the source a view of the rows written: read before written
    grid = tp.arange(12, dtype=tp.float32, device=device).view(4, 3)
    rows = tp.tensor([2, 3], device=device)
    grid.index_copy_(0, rows, tp.full((2, 3), -1.0, device=device))
    grid.index_copy_(0, rows, tp.arange(6, dtype=tp.float32, device=device).view(2, 3))
    grid.index_copy_(0, rows, grid[1:3])          # row 2 <- row 1, row 3 <- row 2 as it was
    assert to_numpy(grid).tolist() == [[0, 1, 2], [3, 4, 5], [3, 4, 5], [0, 1, 2]]
    with pytest.raises(RuntimeError, match="Expected dtype int64"):
        cache.index_copy_(0, tp.tensor([1], dtype=tp.int32, device=device),
                          tp.ones(1, 3, device=device))


def test_addmm_with_a_bias_follows_new_data(device):
    for arrays, out in repeated(
            lambda b, a, w: tp.addmm(*(tp.tensor(x, device=device) for x in (b, a, w))),
            lambda rng: rng.standard_normal(4).astype(np.float32),
            lambda rng: rng.standard_normal((2, 3)).astype(np.float32),
            lambda rng: rng.standard_normal((3, 4)).astype(np.float32)):
        b, a, w = arrays
        np.testing.assert_allclose(to_numpy(out), a @ w + b, rtol=1e-5, atol=1e-6)


def test_attention_records_a_gradient_after_calls_that_needed_none(device):
    rng = np.random.default_rng(0)
    q, k, v = (tp.tensor(rng.standard_normal((1, 2, 3, 8)).astype(np.float32), device=device)
               for _ in range(3))
    mask = tp.tensor([[True, True, False]], device=device)
    first = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    second = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    np.testing.assert_array_equal(to_numpy(first), to_numpy(second))
    q.requires_grad_()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.grad_fn is not None
    out.sum().backward()
    assert q.grad is not None and tuple(q.grad.shape) == (1, 2, 3, 8)
    with tp.no_grad():
        assert F.scaled_dot_product_attention(q, k, v, attn_mask=mask).grad_fn is None


@requires_accelerator
@pytest.mark.parametrize("call", ["softmax", "exp", "add", "layer_norm", "masked_fill",
                                  "index_select",
                                  "argmax", "index_copy_", "attention", "view", "unsqueeze",
                                  "permute", "setitem"])
def test_a_stale_compiled_output_is_refused_on_the_quick_path(call):
    dev = accelerator_device(0)
    shape = (1, 1, 2, 4) if call == "attention" else (2, 4)
    compiled = tp.compile(lambda x: x + 1)
    compiled(tp.zeros(*shape, device=dev))          # warm-up + capture
    weight, bias = tp.ones(4, device=dev), tp.zeros(4, device=dev)
    mask = tp.ones(2, 4, dtype=tp.bool, device=dev)
    index = tp.tensor([0], device=dev)
    other = tp.ones(*shape, device=dev)
    calls = {"softmax": lambda x: x.softmax(-1), "exp": lambda x: x.exp(),
             "add": lambda x: x + other,
             "layer_norm": lambda x: F.layer_norm(x, (4,), weight, bias),
             "masked_fill": lambda x: x.masked_fill(mask, 0.0),
             "index_select": lambda x: x.index_select(0, index),
             "argmax": lambda x: x.argmax(-1),
             "index_copy_": lambda x: x.index_copy_(0, index, tp.ones(1, 4, device=dev)),
             "attention": lambda x: F.scaled_dot_product_attention(x, other, other),
             "view": lambda x: x.view(-1),
             "unsqueeze": lambda x: x.unsqueeze(0),
             "permute": lambda x: x.permute(1, 0),
             "setitem": lambda x: x.__setitem__((slice(None), 0), tp.ones(2, device=dev))}
    first = compiled(tp.zeros(*shape, device=dev))
    calls[call](first)                             # plans the signature while still valid
    calls[call](first)
    compiled(tp.ones(*shape, device=dev))           # overwrites ``first``
    with pytest.raises(RuntimeError, match="overwritten by a later call"):
        calls[call](first)


VIEWS = {
    "view": lambda x: x.view(4, 6),
    "view -1": lambda x: x.view(-1, 3),
    "reshape": lambda x: x.reshape(6, 4),
    "reshape of a transpose (a copy)": lambda x: x.transpose(0, 1).reshape(24),
    "permute": lambda x: x.permute(1, 0),
    "transpose": lambda x: x.transpose(0, 1),
    "mT": lambda x: x.mT,
    "unsqueeze": lambda x: x.unsqueeze(1),
    "unsqueeze of a transpose": lambda x: x.t().unsqueeze(-1),
    "squeeze": lambda x: x.view(1, 2, 1, 12).squeeze(),
    "squeeze dims": lambda x: x.view(1, 2, 1, 12).squeeze((0, 2)),
    "select": lambda x: x.select(1, -1),
    "narrow": lambda x: x.narrow(1, 1, 3),
    "unbind": lambda x: x.unbind(1)[2],
    "flatten": lambda x: x.view(2, 2, 6).flatten(1),
}


@pytest.mark.parametrize("name", VIEWS)
def test_repeated_views_follow_their_base(device, name):
    """The second and third calls take the kept view: the same shape and strides as the first
    (PyTorch's), and a view of the new base's memory, not of the first one's."""
    view = VIEWS[name]
    results = [view(tp.tensor(np.arange(24.0, dtype=np.float32).reshape(4, 6) + i,
                              device=device)) for i in range(3)]
    for i, result in enumerate(results):
        assert result.shape == results[0].shape and result.stride() == results[0].stride()
        expected = to_numpy(view(tp.tensor(np.arange(24.0, dtype=np.float32).reshape(4, 6) + i)))
        np.testing.assert_array_equal(to_numpy(result), expected)
    base = tp.zeros(4, 6, device=device)
    result = view(base)
    if name != "reshape of a transpose (a copy)":
        result.fill_(7.0)   # writing through a kept view writes its base
        assert to_numpy(base).sum() == 7.0 * result.numel()


def test_a_kept_view_still_refuses_what_its_signature_hides(device):
    x = tp.ones(2, 3, device=device)
    x.unsqueeze(1), x.unsqueeze(1)
    with pytest.raises(TypeError, match="dim must be an int"):
        x.unsqueeze(True)          # hashes like 1
    with pytest.raises(TypeError, match="dim must be an int"):
        x.unsqueeze(1.0)
    x.view(3, 2), x.view(3, 2)
    with pytest.raises(TypeError):
        x.view(3.0, 2)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(6)              # another layout: never the contiguous tensor's kept view
    assert x.view(3, 2).shape == (3, 2)


def test_repeated_writes_through_a_basic_index(device):
    cache = tp.zeros(2, 3, 4, device=device)
    for i in range(3):
        value = tp.full((1, 3, 2), float(i + 1), device=device)   # a leading size-1 dim
        cache[1, :, 1:3] = value
        expected = np.zeros((2, 3, 4), np.float32)
        expected[1, :, 1:3] = i + 1
        np.testing.assert_array_equal(to_numpy(cache), expected)
    cache[0, :, 1:3] = tp.full((3, 2), 9.0, device=device)     # another key: another write
    assert to_numpy(cache)[0, :, 1:3].tolist() == [[9.0, 9.0]] * 3
    with pytest.raises(RuntimeError, match="shape mismatch"):
        cache[1, :, 1:3] = tp.ones(3, 3, device=device)           # another value layout
    wide = tp.zeros(1, 4, device=device).expand(3, 4)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="single memory location"):
            wide[:, 1:3] = tp.ones(3, 2, device=device)


@requires_accelerator
def test_a_repeated_write_is_kept_by_a_compiled_function():
    """tp.compile keeps a write into a tensor it did not make (a cache): the quick path of a
    repeated write still records it."""
    dev = accelerator_device(0)
    cache = tp.zeros(2, 4, device=dev)

    def fill(x):
        cache[0, 1:3] = x
        return x + 1
    fill(tp.ones(2, device=dev))
    fill(tp.ones(2, device=dev))
    compiled = tp.compile(fill)
    for value in (2.0, 3.0, 4.0):
        compiled(tp.full((2,), value, device=dev))
        assert to_numpy(cache)[0].tolist() == [0.0, value, value, 0.0]
