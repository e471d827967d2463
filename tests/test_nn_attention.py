"""``F.scaled_dot_product_attention`` against a NumPy reference of PyTorch's documented math:
masks, causality, scale, grouped heads, errors, gradients and capture."""

import math

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, to_numpy

F = tp.nn.functional
RNG = np.random.default_rng(3)


def reference(q, k, v, mask=None, causal=False, scale=None):
    length, source = q.shape[-2], k.shape[-2]
    factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * factor
    if causal:
        scores = np.where(np.tril(np.ones((length, source), bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    scores = scores - scores.max(-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v


def arrays(*shapes):
    return [RNG.standard_normal(shape) for shape in shapes]


def on(device, *values, dtype=tp.float64):
    return [tp.tensor(v, dtype=dtype, device=device) for v in values]


@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_reference(device, causal):
    q, k, v = arrays((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 4))
    out = F.scaled_dot_product_attention(*on(device, q, k, v), is_causal=causal)
    np.testing.assert_allclose(to_numpy(out), reference(q, k, v, causal=causal), rtol=1e-10)
    assert out.shape == (2, 3, 5, 4)


def test_masks_and_scale(device):
    q, k, v = arrays((2, 4, 6), (2, 7, 6), (2, 7, 3))
    keep = RNG.random((4, 7)) > 0.3
    keep[:, 0] = True
    bias = RNG.standard_normal((2, 4, 7))
    tq, tk, tv = on(device, q, k, v)
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tp.tensor(keep, device=device))
    np.testing.assert_allclose(to_numpy(got), reference(q, k, v, mask=keep), rtol=1e-10)
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=on(device, bias)[0], scale=0.5)
    np.testing.assert_allclose(to_numpy(got), reference(q, k, v, mask=bias, scale=0.5),
                               rtol=1e-10)


def test_causal_with_one_query_keeps_key_zero_only(device):
    """Top-left alignment, as PyTorch's: decoding with a cache needs an explicit mask."""
    q, k, v = arrays((1, 1, 4), (1, 5, 4), (1, 5, 2))
    got = F.scaled_dot_product_attention(*on(device, q, k, v), is_causal=True)
    np.testing.assert_allclose(to_numpy(got), v[:, :1], rtol=1e-12)


def test_grouped_query_heads(device):
    q, k, v = arrays((1, 4, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8))
    got = F.scaled_dot_product_attention(*on(device, q, k, v), enable_gqa=True)
    expected = reference(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1))
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-10)


def test_errors_say_what_was_given(device):
    q, k, v = on(device, *arrays((2, 3, 4), (2, 3, 4), (2, 3, 4)))
    with pytest.raises(RuntimeError, match="same dtype.*query.dtype: float32"):
        F.scaled_dot_product_attention(q.float(), k, v)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=tp.ones(3, 3, dtype=tp.bool,
                                                                  device=device), is_causal=True)
    with pytest.raises(RuntimeError, match="same embedding size, got 4 and 2"):
        F.scaled_dot_product_attention(q, k[..., :2], v)
    g4, g3 = on(device, *arrays((1, 4, 3, 4), (1, 3, 3, 4)))
    with pytest.raises(RuntimeError, match="multiple of key's and value's"):
        F.scaled_dot_product_attention(g4, g3, g3, enable_gqa=True)
    with pytest.raises(TypeError, match="argument 'key'"):
        F.scaled_dot_product_attention(q, 1.0, v)
    assert F.scaled_dot_product_attention(q, k, v).shape == (2, 3, 4)


def test_gradients_flow_to_query_key_and_value(device):
    q, k, v = [t.requires_grad_() for t in on(device, *arrays((2, 3, 4), (2, 5, 4), (2, 5, 2)))]
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in (q, k, v))


@requires_accelerator
def test_captured_attention_replays_with_new_inputs(dev):
    q, k, v = on(dev, *arrays((2, 3, 4), (2, 3, 4), (2, 3, 4)), dtype=tp.float32)
    graph = tp.accelerator.Graph()
    with graph:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    fresh = arrays((2, 3, 4), (2, 3, 4), (2, 3, 4))
    graph.stage_and_launch([q, k, v], on(dev, *fresh, dtype=tp.float32))
    np.testing.assert_allclose(to_numpy(out), reference(*fresh, causal=True), rtol=1e-5,
                               atol=1e-6)


# -- the one-op path: few query rows (decode), no gradient, no dropout -------------------------
@pytest.mark.parametrize("dtype, rtol", [(tp.float32, 2e-5), (tp.bfloat16, 3e-2),
                                         (tp.float16, 4e-3), (tp.float64, 1e-10)])
@pytest.mark.parametrize("keys", [5, 300, 2500])   # one chunk of keys; split chunks on cuda
def test_few_query_rows_take_one_kernel_and_match(device, dtype, rtol, keys):
    """A decode-shaped call (a strided query, a cache-shaped key and value, a bool mask
    broadcast over batch and heads) against the reference and against the composed path."""
    qkv = RNG.standard_normal((2, 3, 4, 64))
    q = qkv[:, 0][:, :, None]                              # (2, 4, 1, 64), strided
    k, v = arrays((2, 4, keys, 64), (2, 4, keys, 64))
    keep = RNG.random(keys) > 0.2
    keep[0] = True
    tq = tp.tensor(qkv, dtype=dtype, device=device)[:, 0].unsqueeze(2)
    tk, tv = on(device, k, v, dtype=dtype)
    mask = tp.tensor(keep, device=device).view(1, 1, 1, keys)
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask)
    assert got.dtype is dtype and got.shape == (2, 4, 1, 64)
    as_stored = [to_numpy(t.double()) for t in (tq, tk, tv)]
    np.testing.assert_allclose(to_numpy(got.double()), reference(*as_stored, mask=keep),
                               rtol=rtol, atol=rtol)
    composed = F.scaled_dot_product_attention(tq.requires_grad_(), tk, tv, attn_mask=mask)
    np.testing.assert_allclose(to_numpy(got.double()), to_numpy(composed.detach().double()),
                               rtol=rtol, atol=rtol)
    assert q.shape == (2, 4, 1, 64)


def test_few_query_rows_causal_additive_grouped_and_all_masked(device):
    q, k, v = arrays((1, 4, 3, 16), (1, 2, 6, 16), (1, 2, 6, 16))
    tq, tk, tv = on(device, q, k, v, dtype=tp.float32)
    wide_k, wide_v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    got = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    np.testing.assert_allclose(to_numpy(got), reference(q, wide_k, wide_v, causal=True),
                               rtol=2e-5, atol=2e-6)
    bias = RNG.standard_normal((4, 3, 6))
    got = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=on(device, bias,
                                                                  dtype=tp.float32)[0],
                                         scale=0.3, enable_gqa=True)
    np.testing.assert_allclose(to_numpy(got), reference(q, wide_k, wide_v, mask=bias,
                                                        scale=0.3), rtol=2e-5, atol=2e-6)
    keep = np.ones((3, 6), bool)
    keep[1] = False                                        # query row 1 sees no key: NaN
    got = to_numpy(F.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=tp.tensor(keep, device=device), enable_gqa=True))
    assert np.isnan(got[:, :, 1]).all() and not np.isnan(got[:, :, [0, 2]]).any()
    with pytest.raises(RuntimeError):   # grouped heads need enable_gqa, as in PyTorch
        F.scaled_dot_product_attention(tq, tk, tv)


# -- many query rows (a prompt): one op too; on cuda the tiled kernel --------------------------
@pytest.mark.parametrize("dtype, rtol", [(tp.float32, 2e-5), (tp.bfloat16, 3e-2),
                                         (tp.float16, 4e-3), (tp.float64, 1e-10)])
@pytest.mark.parametrize("length, keys, dim", [(17, 17, 64), (70, 70, 100), (40, 300, 32),
                                               (33, 33, 160)])   # 160: wider than the tiles
def test_many_query_rows_match_the_reference_and_the_composed_path(device, dtype, rtol, length,
                                                                    keys, dim):
    """Prefill-shaped calls: causal (the keys as long as the queries, or more, top-left
    aligned), a bool mask with an all-masked row (NaN), an additive mask and grouped heads,
    against the reference and the composed path (taken when a gradient is recorded)."""
    q, k, v = arrays((1, 4, length, dim), (1, 2, keys, dim), (1, 2, keys, dim))
    tq, tk, tv = on(device, q, k, v, dtype=dtype)
    stored = [to_numpy(t.double()) for t in (tq, tk, tv)]
    wide_k, wide_v = np.repeat(stored[1], 2, axis=1), np.repeat(stored[2], 2, axis=1)
    keep = RNG.random((length, keys)) > 0.3
    keep[:, 0] = True
    keep[length // 2] = False
    bias = RNG.standard_normal((4, length, keys))
    for options, expected_options in (
            (dict(is_causal=True), dict(causal=True)),
            (dict(attn_mask=tp.tensor(keep, device=device)), dict(mask=keep)),
            (dict(attn_mask=on(device, bias, dtype=dtype)[0], scale=0.2),
             dict(mask=to_numpy(on(device, bias, dtype=dtype)[0].double()), scale=0.2))):
        got = F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True, **options)
        assert got.dtype is dtype and got.shape == (1, 4, length, dim)
        with np.errstate(invalid="ignore"):
            expected = reference(stored[0], wide_k, wide_v, **expected_options)
        np.testing.assert_allclose(to_numpy(got.double()), expected, rtol=rtol, atol=rtol)
        composed = F.scaled_dot_product_attention(tq.detach().requires_grad_(), tk, tv,
                                                  enable_gqa=True, **options)
        # the composed path rounds the scores and weights to the dtype: looser for halves
        np.testing.assert_allclose(to_numpy(got.double()), to_numpy(composed.detach().double()),
                                   rtol=4 * rtol, atol=4 * rtol)


def _prompt_views(device, dtype, batch, length, keys, heads, dim):
    """q, k, v as a model has them: strided head views of packed projections (q of
    ``(batch, length, heads, dim)``, k and v of one ``(batch, keys, 2, heads, dim)`` tensor)."""
    q_rows, kv_rows = arrays((batch, length, heads, dim), (batch, keys, 2, heads, dim))
    q = tp.tensor(q_rows, dtype=dtype, device=device).permute(0, 2, 1, 3)
    k, v = tp.tensor(kv_rows, dtype=dtype, device=device).permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v


@pytest.mark.parametrize("dtype, rtol", [(tp.float32, 2e-5), (tp.bfloat16, 3e-2),
                                         (tp.float16, 4e-3)])
@pytest.mark.parametrize("batch, length, keys, dim", [(1, 64, 64, 64), (2, 130, 200, 48),
                                                      (1, 96, 1100, 32)])
def test_long_prompts_match_the_reference(device, dtype, rtol, batch, length, keys, dim):
    """Long causal and unmasked prompts with as many key heads as query heads, read through
    strided views of packed projections (on cuda the batched products and one softmax
    kernel; past 1024 keys the tiled kernel)."""
    q, k, v = _prompt_views(device, dtype, batch, length, keys, 3, dim)
    stored = [to_numpy(t.double()) for t in (q, k, v)]
    for causal in (True, False):
        got = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3)
        assert got.dtype is dtype and got.shape == (batch, 3, length, dim)
        expected = reference(*stored, causal=causal, scale=0.3)
        np.testing.assert_allclose(to_numpy(got.double()), expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype, rtol", [(tp.float32, 2e-5), (tp.bfloat16, 3e-2)])
def test_repeated_prompts_at_new_addresses_match_the_reference(device, dtype, rtol):
    """A prompt's attention called again and again with the same layout (a model's every
    layer): fresh operands each time, some 32 bytes off the first ones' alignment (on cuda the
    warm products launch from addresses alone, and such operands take the arrays' path), and a
    causal call between the unmasked ones."""
    batch, length, heads, dim = 1, 96, 3, 48
    item = 4 if dtype is tp.float32 else 2
    for call, offset in enumerate((0, 0, 32 // item, 0, 32 // item, 0)):
        q_rows, kv_rows = arrays((batch, length, heads, dim), (batch, length, 2, heads, dim))
        flat = np.concatenate([np.zeros(offset), kv_rows.ravel()])
        packed = tp.tensor(flat, dtype=dtype, device=device)[offset:].view(kv_rows.shape)
        k, v = packed.permute(2, 0, 3, 1, 4).unbind(0)
        q = tp.tensor(q_rows, dtype=dtype, device=device).permute(0, 2, 1, 3)
        stored = [to_numpy(t.double()) for t in (q, k, v)]
        causal = call % 3 == 2
        got = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        np.testing.assert_allclose(to_numpy(got.double()),
                                   reference(*stored, causal=causal), rtol=rtol, atol=rtol)


def _captured_causal_attention(dev, length: int, replays: int):
    """A causal attention over ``(1, 2, length, 16)`` operands captured once, then replayed
    ``replays`` times with fresh inputs, each result checked against the reference; the
    graph."""
    shape = (1, 2, length, 16)
    q, k, v = on(dev, *arrays(shape, shape, shape), dtype=tp.float32)
    graph = tp.accelerator.Graph()
    with graph:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for _ in range(replays):
        fresh = arrays(shape, shape, shape)
        graph.stage_and_launch([q, k, v], on(dev, *fresh, dtype=tp.float32))
        np.testing.assert_allclose(to_numpy(out), reference(*fresh, causal=True), rtol=2e-5,
                                   atol=2e-6)
    return graph


@requires_accelerator
def test_captured_long_prompt_attention_replays_with_new_inputs(dev):
    _captured_causal_attention(dev, 80, 2)


@requires_accelerator
def test_captured_prefill_attention_is_one_node(dev, tmp_path):
    graph = _captured_causal_attention(dev, 40, 1)
    path = tmp_path / "graph.dot"
    graph.debug_dump(str(path))
    assert path.read_text().count("->") < 3


@requires_accelerator
def test_captured_decode_attention_reads_the_cache_and_mask_at_each_replay(dev, tmp_path):
    keys = 40
    cache_k, cache_v = on(dev, *arrays((1, 2, keys, 8), (1, 2, keys, 8)), dtype=tp.float32)
    q = on(dev, *arrays((1, 2, 1, 8)), dtype=tp.float32)[0]
    positions = tp.arange(keys, device=dev)
    pos = tp.zeros(1, dtype=tp.int64, device=dev)
    graph = tp.accelerator.Graph()
    with graph:
        visible = (positions <= pos).view(1, 1, 1, keys)
        out = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=visible)
    path = tmp_path / "graph.dot"
    graph.debug_dump(str(path))
    dump = path.read_text()
    # the comparison, then the attention: the composed ops would chain at least seven nodes
    assert dump.count("->") < 5 and "softmax" not in dump
    for position in (0, 7, 39):
        pos.fill_(position)
        graph.replay()
        keep = np.arange(keys) <= position
        expected = reference(*(to_numpy(t) for t in (q, cache_k, cache_v)), mask=keep)
        np.testing.assert_allclose(to_numpy(out), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [tp.float32, tp.bfloat16])
def test_one_op_result_interleaves_the_heads_as_torchs_flash_kernels(device, dtype):
    """The one-op path lays its result out as (B, L, H, D), PyTorch's flash attention's layout:
    merging the heads back into rows is a view of the same memory (no copy), for the causal
    products path, a masked prompt (cuda's tiled kernel, through scratch) and few query rows;
    one query row is C-contiguous as well, so ``view(B, H * D)`` works on a decode step."""
    for length, mask in ((96, None), (40, True), (5, None), (1, None)):
        q, k, v = _prompt_views(device, dtype, 2, length, max(length, 8), 3, 32)
        keys = k.shape[2]
        keep = np.ones((length, keys), bool)
        keep[:, keys // 2:] = False
        options = dict(is_causal=True) if mask is None and length > 1 else \
            dict(attn_mask=tp.tensor(keep, device=device)) if mask else {}
        got = F.scaled_dot_product_attention(q, k, v, **options)
        merged = got.transpose(1, 2).reshape(2, length, 3 * 32)
        assert got.transpose(1, 2).is_contiguous()
        assert merged.data_ptr() == got.data_ptr()
        expected = reference(*[to_numpy(t.double()) for t in (q, k, v)],
                             causal=bool(options.get("is_causal")),
                             mask=keep if mask else None)
        np.testing.assert_allclose(to_numpy(merged.double()),
                                   expected.transpose(0, 2, 1, 3).reshape(2, length, 96),
                                   rtol=3e-2, atol=3e-2)
        if length == 1:
            assert got.is_contiguous() and got.view(2, 96).data_ptr() == got.data_ptr()
    composed = F.scaled_dot_product_attention(q.detach().requires_grad_(), k, v)
    assert composed.is_contiguous()   # the composed path (autograd) keeps C order
