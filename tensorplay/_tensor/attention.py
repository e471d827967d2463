"""Scaled dot-product attention as ONE op: the path ``nn.functional.scaled_dot_product_attention``
takes when no gradient is needed.

:func:`attention` is one launch: the backend's ``attention`` hook (cuda: for few query
rows a raw kernel with the softmax computed per chunk of keys, and a second small kernel
combining the chunks when the keys are split; for many a tiled kernel, or for long unmasked
prompts two batched products around one softmax kernel; see ``backends/cuda/_attention.py``),
or, where the backend has none or declines the case (float64 or wide heads on cuda), the same
formula from ``xp`` calls inside that one launch: scores in float32 (float64 for float64), the
mask, the softmax, the product with the values, rounded once to the query's dtype. Either way
the op is one call, captured as one node (three for the products path), and reads the mask and
the cache at every replay.

Semantics are PyTorch's: ``mask`` bool (True keeps a key) or additive, broadcast to
``(B, H, L, S)``; ``causal`` keeps key ``j`` for query row ``i`` when ``j <= i`` (top-left
aligned); a query row whose keys are all masked gives NaN; keys and values with fewer heads
than the query serve ``H // Hkv`` query heads each (grouped-query attention).

Pitfall: no derivative is recorded here; the functional takes the composed ops when autograd
needs one.
"""

from __future__ import annotations

import numpy as np

from .._runtime import dispatch as _dispatch
from .tensor import Tensor

__all__ = ["attention"]


def _attention_xp(xp, matmul, q, k, v, mask, out, scale: float, causal: bool) -> None:
    """The formula of :func:`attention` from ``xp`` calls (host, sim, and cuda's fallback);
    ``matmul`` is the backend's (cuda: cuBLASLt, which may be captured; CuPy's may not)."""
    wide = np.float64 if q.dtype == np.float64 else np.float32
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:
        k = xp.repeat(k, heads // kv_heads, axis=1)
        v = xp.repeat(v, heads // kv_heads, axis=1)
    scores = matmul(q.astype(wide), xp.swapaxes(k.astype(wide), -1, -2))
    scores *= wide(scale)
    length, keys = scores.shape[-2], scores.shape[-1]
    if causal:
        visible = xp.tril(xp.ones((length, keys), dtype=bool))
        scores = xp.where(visible, scores, wide(-np.inf))
    elif mask is not None:
        if mask.dtype == np.bool_:
            scores = xp.where(mask, scores, wide(-np.inf))
        else:
            scores = scores + mask.astype(wide)
    top = scores.max(axis=-1, keepdims=True)
    weights = xp.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    out[...] = (matmul(weights, v.astype(wide)) / total).astype(out.dtype)


def attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scale: float,
              causal: bool) -> Tensor:
    """``softmax(query @ key.mT * scale + mask) @ value`` in one launch (module docstring).

    ``query`` ``(B, H, L, D)``, ``key``/``value`` ``(B, Hkv, S, D)`` with ``H % Hkv == 0``, one
    float dtype, one device; ``mask`` None or broadcastable to ``(B, H, L, S)``. The caller
    (``nn.functional``) has checked all of this. The result is ``(B, H, L, D)`` laid out in
    memory as ``(B, L, H, D)`` (C order where ``L`` or ``H`` is 1)."""
    device = query.device
    dtype = query.dtype
    batch, heads, length, dim = shape = tuple(query.shape)
    if length > 1 and heads > 1:
        # (B, H, L, D) over (B, L, H, D) memory, as PyTorch's flash kernels lay out theirs:
        # merging the heads afterwards (``out.transpose(1, 2).reshape(B, L, H * D)``) is a view
        out_array = _dispatch.empty(device, (batch, length, heads, dim),
                                    dtype).transpose(0, 2, 1, 3)
    else:
        out_array = _dispatch.empty(device, shape, dtype)
    backend = _dispatch.backend_of(device)
    fused = _dispatch.hook(backend, "attention") if device.type != "cpu" else None
    xp = backend.xp
    matmul = _dispatch.matmul_of(device)
    arrays = (query._data, key._data, value._data, None if mask is None else mask._data)

    def kernel():
        if fused is None or not fused(*arrays, out_array, scale, causal):
            _attention_xp(xp, matmul, *arrays, out_array, scale, causal)
    _dispatch.launch(device, _dispatch.named("scaled_dot_product_attention", kernel))
    return Tensor._make(out_array, device, dtype)
