"""The optimizers' fused update for the cuda backend: one elementwise kernel updates a whole
flat buffer of parameters, their moments and (AMSGrad) the running maximum.

Every element computes in double and stores once in the parameter's dtype; the step count and a
tensor learning rate are read from device memory in the kernel, so a captured step reads what
those tensors hold at each replay. float16 and bfloat16 parameters are not taken here (the op
falls back to its composed form). Nothing here synchronizes the host.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from . import _kernels as _kernel_cache

__all__ = ["adam_update"]

_DTYPES = frozenset((np.dtype(np.float32), np.dtype(np.float64)))

_BODY = r"""
double t = (double)step[0];
double lr = (double)lr_t[0];
double grad = maximize ? -(double)g : (double)g;
double param = (double)p;
if (wd != 0.0) {
    if (decoupled) { param *= 1.0 - lr * wd; } else { grad += wd * param; }
}
double mm = (double)m + (1.0 - beta1) * (grad - (double)m);
double vv = beta2 * (double)v + (1.0 - beta2) * grad * grad;
double vuse = vv;
AMSGRAD
double bc1 = 1.0 - pow(beta1, t);
double bc2 = sqrt(1.0 - pow(beta2, t));
p = (T)(param - lr / bc1 * mm / (sqrt(vuse) / bc2 + eps));
m = (T)mm;
v = (T)vv;
"""
_AMSGRAD = "double top = fmax((double)vmax, vv); vmax = (T)top; vuse = top;"
_IN = ("T g, raw S step, raw L lr_t, float64 beta1, float64 beta2, float64 eps, float64 wd, "
       "bool decoupled, bool maximize")


def _make(amsgrad: bool) -> Any:
    outputs = "T p, T m, T v, T vmax" if amsgrad else "T p, T m, T v"
    body = _BODY.replace("AMSGRAD", _AMSGRAD if amsgrad else "")
    return cupy.ElementwiseKernel(_IN, outputs, body,
                                  "tp_adam_amsgrad" if amsgrad else "tp_adam")


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1: float,
                beta2: float, eps: float, weight_decay: float, decoupled: bool,
                maximize: bool) -> bool:
    """One Adam/AdamW update of contiguous CuPy arrays of one shape, in place, in one kernel;
    ``step`` and ``lr`` are one-element device arrays (the count after this step, the learning
    rate). Returns False, doing nothing, for dtypes it has no kernel for (float16, bfloat16).

    The first call per dtype and device compiles and loads the kernel, under relaxed capture
    mode when a capture is open."""
    if param.dtype not in _DTYPES:
        return False
    amsgrad = max_exp_avg_sq is not None
    name = "tp_adam_amsgrad" if amsgrad else "tp_adam"
    kernel = _kernel_cache.cached(name, lambda: _make(amsgrad))
    outputs = (param, exp_avg, exp_avg_sq) + ((max_exp_avg_sq,) if amsgrad else ())

    def run():
        kernel(grad, step, lr, beta1, beta2, eps, weight_decay, decoupled, maximize, *outputs)
        return True
    key = (name, param.dtype.char, step.dtype.char, lr.dtype.char)
    if _kernel_cache.is_warm(key, param.device.id):
        run()
    elif _kernel_cache.warm(key, param.device.id, run) is None:
        run()   # another thread compiled it meanwhile
    return True
