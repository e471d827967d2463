"""``tensorplay.nn.utils``: gradient clipping (``clip_grad_norm_``, ``clip_grad_value_``,
``get_total_norm``, ``clip_grads_with_norm_``), device-side and capturable."""

from .clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]
