"""The optimizers' fused update for the cuda backend: one elementwise kernel updates a whole
flat buffer of parameters, their moments and (AMSGrad) the running maximum.

Every element computes in the parameter's dtype and the bias corrections and step size in
double, in PyTorch's order of operations (its Adam with a Python step count; all-double
arithmetic made the update compute-bound: 27 us for the 4 x 512 MLP's 1M float32 parameters on
an H100, where their 29 MB of traffic take about 9 us); the step count and a tensor
learning rate are read from device memory in the kernel, so a captured step reads what those
tensors hold at each replay. float16 and bfloat16 parameters are not taken here (the op
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
const double t = (double)step[0];
const double lr = (double)lr_t[0];
T grad = maximize ? -g : g;
T param = p;
if (wd != 0.0) {
    if (decoupled) { param *= (T)(1.0 - lr * wd); } else { grad += (T)wd * param; }
}
const T mm = m + (T)(1.0 - beta1) * (grad - m);
const T vv = v * (T)beta2 + (T)(1.0 - beta2) * grad * grad;
T vuse = vv;
AMSGRAD
const double bc1 = 1.0 - pow(beta1, t);
const double bc2 = sqrt(1.0 - pow(beta2, t));
const T denom = sqrt(vuse) / (T)bc2 + (T)eps;
p = param + (T)(-lr / bc1) * (mm / denom);
m = mm;
v = vv;
"""
_AMSGRAD = "const T top = fmax(vmax, vv); vmax = top; vuse = top;"
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
