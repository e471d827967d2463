"""The optimizers' fused update for the cuda backend: one kernel updates a whole flat buffer of
parameters, their moments and (AMSGrad) the running maximum, launched through
:class:`._launch.PackedLaunch`.

Every element computes in the parameter's dtype, and the bias corrections and step size in
double, in PyTorch's order of operations (its Adam with a Python step count). Those scalars are
the same for every element: the first thread of each block computes them once, from the step
count and a tensor learning rate read in device memory (so a captured step reads what those
tensors hold at each replay), and the block's threads then update four elements each. Computed
per element (the double ``pow`` of every element's bias corrections) the update was
compute-bound: 27 us for the 4 x 512 MLP's 1M float32 parameters on an H100, where their 29 MB
of traffic take about 9 us. float16 and bfloat16 parameters are not taken here (the op falls
back to its composed form). Nothing here synchronizes the host.
"""

from __future__ import annotations

import cupy
import numpy as np

from . import _kernels as _kernel_cache
from ._launch import PackedLaunch, thread_ident

__all__ = ["adam_update"]

_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_THREADS = 256
_PER_THREAD = 4   # elements per thread, a block's width apart (coalesced)
_SLOTS = 14       # p g m v vmax step lr n beta1 beta2 eps wd decoupled maximize

_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(THREADS) NAME(
        T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
        T* __restrict__ vmax, const S* __restrict__ step, const L* __restrict__ lr_t,
        const long long n, const double beta1, const double beta2, const double eps,
        const double wd, const long long decoupled, const long long maximize) {
    __shared__ T scalars[3];   // the step size (negated), sqrt of the second correction, decay
    if (threadIdx.x == 0) {
        const double t = (double)step[0];
        const double lr = (double)lr_t[0];
        scalars[0] = (T)(-lr / (1.0 - pow(beta1, t)));
        scalars[1] = (T)sqrt(1.0 - pow(beta2, t));
        scalars[2] = (T)(1.0 - lr * wd);
    }
    __syncthreads();
    const T step_size = scalars[0], bc2 = scalars[1], decay = scalars[2];
    const T b1 = (T)(1.0 - beta1), b2 = (T)beta2, b2c = (T)(1.0 - beta2), e = (T)eps;
    const T w = (T)wd;
    long long i = (long long)blockIdx.x * (THREADS * PER_THREAD) + threadIdx.x;
    #pragma unroll
    for (int j = 0; j < PER_THREAD; ++j, i += THREADS) {
        if (i >= n) { return; }
        T grad = maximize ? -g[i] : g[i];
        T param = p[i];
        if (wd != 0.0) {
            if (decoupled) { param *= decay; } else { grad += w * param; }
        }
        const T mi = m[i];
        const T mm = mi + b1 * (grad - mi);
        const T vv = v[i] * b2 + b2c * grad * grad;
        T vuse = vv;
        AMSGRAD
        const T denom = sqrt(vuse) / bc2 + e;
        p[i] = param + step_size * (mm / denom);
        m[i] = mm;
        v[i] = vv;
    }
}
"""
_AMSGRAD = "const T top = fmax(vmax[i], vv); vmax[i] = top; vuse = top;"


def _kernel(dtype: np.dtype, step: np.dtype, lr: np.dtype, amsgrad: bool,
            device: int) -> PackedLaunch:
    """The update's launcher for these dtypes, compiled once and loaded once per device."""
    key = ("adam", dtype.char, step.char, lr.char, amsgrad)
    name = f"tp_adam{'_amsgrad' if amsgrad else ''}_{dtype.char}{step.char}{lr.char}"

    def make() -> PackedLaunch:
        types = (f"typedef {_CTYPES[dtype]} T;\ntypedef {_CTYPES[step]} S;\n"
                 f"typedef {_CTYPES[lr]} L;\n")
        source = types + (_SOURCE.replace("NAME", name).replace("THREADS", str(_THREADS))
                          .replace("PER_THREAD", str(_PER_THREAD))
                          .replace("AMSGRAD", _AMSGRAD if amsgrad else ""))
        return PackedLaunch(cupy.RawKernel(source, name), _SLOTS, scalar_format="d")
    packed = _kernel_cache.cached(key, make)
    if not _kernel_cache.is_warm(key, device):
        _kernel_cache.warm(key, device, lambda: packed.kernel.kernel)
    return packed


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1: float,
                beta2: float, eps: float, weight_decay: float, decoupled: bool,
                maximize: bool) -> bool:
    """One Adam/AdamW update of contiguous CuPy arrays of one shape, in place, in one kernel;
    ``step`` and ``lr`` are one-element device arrays (the count after this step, the learning
    rate). Returns False, doing nothing, for dtypes it has no kernel for (float16, bfloat16).

    The first call per dtype and device compiles and loads the kernel, under relaxed capture
    mode when a capture is open."""
    dtype = param.dtype
    if dtype not in _CTYPES or step.dtype not in _CTYPES or lr.dtype not in _CTYPES:
        return False
    n = param.size
    if n == 0:
        return True
    packed = _kernel(dtype, step.dtype, lr.dtype, max_exp_avg_sq is not None,
                     param.data.device_id)
    found = packed.buffers.get(thread_ident()) or packed.buffer()
    values, scalars = found[0], found[3]
    values[0], values[1] = param.data.ptr, grad.data.ptr
    values[2], values[3] = exp_avg.data.ptr, exp_avg_sq.data.ptr
    values[4] = 0 if max_exp_avg_sq is None else max_exp_avg_sq.data.ptr
    values[5], values[6], values[7] = step.data.ptr, lr.data.ptr, n
    scalars[8], scalars[9], scalars[10], scalars[11] = beta1, beta2, eps, weight_decay
    values[12], values[13] = int(decoupled), int(maximize)
    packed(-(-n // (_THREADS * _PER_THREAD)), _THREADS, found[1])
    return True
