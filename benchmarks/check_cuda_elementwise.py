"""Check and time the cuda backend's cached elementwise and small-sum kernels, on one GPU.

Answers: does every (op, compute dtype, operand kinds, out dtype) launcher of
``tensorplay/backends/cuda/_elementwise.py`` compute PyTorch's result (NaN, inf, -0.0, integer
wrap included), and what does one launch cost from Python next to CuPy's ufunc with ``out=``?

References are NumPy on the host (float16/bfloat16 computed in float32 and rounded once, as the
kernels and PyTorch do). Exact ops (arithmetic, comparisons, max/min, where, logical) must match
bit for bit (NaN payloads aside; -0.0 vs 0.0 aside for maximum/minimum/relu); transcendental ops
within a few ulps. bfloat16 arrays are uint16 CuPy arrays holding the bits (the kernels take raw
pointers), so they are checked even where CuPy has no bfloat16.

Usage: ``python benchmarks/check_cuda_elementwise.py [--quick]``; exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from tensorplay.backends.cuda import _elementwise as ew  # noqa: E402
from tensorplay.backends.cuda import _elementwise_source as src  # noqa: E402

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, I64, BOOL = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)
DTYPES = (F16, BF16, F32, F64, I32, I64, BOOL)
FLOATS = (F16, BF16, F32, F64)
EXACT = {"add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
         "logical_and", "logical_or", "neg", "abs", "relu", "where"}
SIGNED_ZERO_LOOSE = {"maximum", "minimum", "relu"}
SHAPE = (64, 64)

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    return _erf(x.astype(np.float64)).astype(np.float64)


def sample(dtype: np.dtype, rng: np.random.Generator, shape=SHAPE) -> np.ndarray:
    """Random values with the edge cases planted at the front."""
    n = int(np.prod(shape))
    if dtype == BOOL:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype in (I32, I64):
        info = np.iinfo(dtype)
        x = rng.integers(-1000, 1000, n).astype(dtype)
        edges = [info.max, info.min, -1, 0, 1, info.max - 1, info.min + 1]
        x[:len(edges)] = edges[:n]
        big = rng.integers(info.min, info.max, n // 8, dtype=dtype, endpoint=True)
        x[len(edges):len(edges) + big.size] = big
        return x.reshape(shape)
    x = rng.standard_normal(n) * 3
    x[n // 2:n // 2 + n // 16] *= 100   # exp/tanh overflow and saturation
    edges = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 1e-30, -1e-30, 65504.0, 70000.0]
    x[:len(edges)] = edges[:n]
    with np.errstate(over="ignore"):   # 70000 is inf in float16, on purpose
        return x.astype(dtype).reshape(shape)


def to_device(x: np.ndarray):
    """A CuPy array holding ``x``'s bits (bfloat16 as uint16)."""
    if x.dtype == BF16:
        return cupy.asarray(x.view(np.uint16))
    return cupy.asarray(x)


def empty_device(dtype: np.dtype, shape):
    return cupy.empty(shape, dtype=np.uint16 if dtype == BF16 else dtype)


def from_device(y, dtype: np.dtype) -> np.ndarray:
    host = cupy.asnumpy(y)
    return host.view(BF16) if dtype == BF16 else host


def reference(op: str, compute: np.dtype, operands: list, out: np.dtype) -> np.ndarray:
    """PyTorch's result, computed with NumPy: in the compute type (float32 for 16-bit floats,
    float64 for transcendental ops, which are then compared with a tolerance)."""
    work = F32 if compute in (F16, BF16) else compute
    if op not in EXACT and compute in FLOATS:
        work = F64
    args = [np.asarray(a) if op == "where" and k == 0 else np.asarray(a).astype(work)
            for k, a in enumerate(operands)]
    with np.errstate(all="ignore"):
        a = args[0]
        b = args[1] if len(args) > 1 else None
        if op in ("add", "sub", "mul", "div"):
            r = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "div": np.true_divide}[op](a, b).astype(work)
        elif op in ("maximum", "minimum"):
            r = (np.maximum if op == "maximum" else np.minimum)(a, b)
        elif op in ("eq", "ne", "lt", "le", "gt", "ge"):
            r = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                 "gt": np.greater, "ge": np.greater_equal}[op](a, b)
        elif op in ("logical_and", "logical_or"):
            r = (np.logical_and if op == "logical_and" else np.logical_or)(a != 0, b != 0)
        elif op == "neg":
            r = np.negative(a)
        elif op == "abs":
            r = np.abs(a)
        elif op == "relu":
            r = np.where(np.isnan(a), a, np.maximum(a, a.dtype.type(0))) if work in FLOATS \
                else np.maximum(a, a.dtype.type(0))
        elif op in ("exp", "log", "sqrt", "sin", "cos", "tanh"):
            r = getattr(np, op)(a)
        elif op == "sigmoid":
            r = 1 / (1 + np.exp(-a))
        elif op == "silu":
            r = a / (1 + np.exp(-a))
        elif op == "erf":
            r = erf(a)
        elif op == "gelu":
            r = 0.5 * a * (1 + erf(a * math.sqrt(0.5)))
        elif op == "gelu_tanh":
            r = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a * a * a)))
        elif op == "gelu_backward":
            r = b * (0.5 * (1 + erf(a * math.sqrt(0.5))) + a * np.exp(-0.5 * a * a)
                     / math.sqrt(2 * math.pi))
        elif op == "gelu_tanh_backward":
            k = math.sqrt(2 / math.pi)
            t = np.tanh(k * (a + 0.044715 * a ** 3))
            r = b * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * k * (1 + 3 * 0.044715 * a * a))
        elif op == "silu_backward":
            s = 1 / (1 + np.exp(-a))
            r = b * s * (1 + a * (1 - s))
        elif op == "sigmoid_backward":
            r = b * a * (1 - a)
        elif op == "tanh_backward":
            r = b * (1 - a * a)
        elif op == "relu_backward":
            r = np.where(a > 0, b, 0).astype(work)
        elif op == "where":
            r = np.where(args[0], args[1], args[2])
        else:
            raise ValueError(op)
        r = np.asarray(r)
        if compute in (F16, BF16, F32) and r.dtype == F64:
            r = r.astype(F32)   # the kernel computes in float32 (and overflows there)
        return r.astype(out)


def compare(op: str, compute: np.dtype, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when ``got`` matches ``want`` (see the module docstring), else what differs."""
    out = want.dtype
    if out in (F16, BF16, F32, F64):
        g, w = got.astype(F64), want.astype(F64)
        nan_ok = np.isnan(g) == np.isnan(w)
        if op in EXACT:
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            if op not in SIGNED_ZERO_LOOSE:
                same &= (np.signbit(g) == np.signbit(w)) | np.isnan(g)
        else:
            tol = {F16: 2e-3, BF16: 1.6e-2, F32: 4e-6, F64: 1e-13}[out]
            src_tol = {F16: 2e-3, BF16: 1.6e-2, F32: 4e-6, F64: 1e-13}.get(compute, tol)
            tol = max(tol, src_tol)
            with np.errstate(all="ignore"):
                close = np.isclose(g, w, rtol=tol, atol=tol) | (g == w)
            same = nan_ok & (close | (np.isnan(g) & np.isnan(w)))
    else:
        same = got == want
    if np.all(same):
        return None
    k = int(np.flatnonzero(~np.asarray(same).ravel())[0])
    return (f"{np.count_nonzero(~same)} mismatches, first at flat {k}: got "
            f"{got.ravel()[k]!r} want {want.ravel()[k]!r}")


def outs_for(op: str, compute: np.dtype) -> list[np.dtype]:
    result = src.result_dtype(op, compute)
    extra = {F32: [F16, BF16, F64], I32: [I64, F32], BOOL: [F32, I64]}.get(result, [])
    return [result] + [d for d in extra if d != result]


def check_all(quick: bool, rng: np.random.Generator) -> int:
    failures = checked = unsupported = 0
    t0 = time.perf_counter()
    for op in src.OPS:
        count = src.arity(op)
        for compute in DTYPES:
            all_kinds = ["".join(k) for k in itertools.product("as", repeat=count)]
            if quick:
                all_kinds = all_kinds[:2]
            for kinds, out in itertools.product(all_kinds, outs_for(op, compute)):
                fn = ew.elementwise_kernel(op, compute, kinds, out)
                if fn is None:
                    unsupported += 1
                    continue
                host, device = [], []
                for k, kind in enumerate(kinds):
                    dtype = BOOL if op == "where" and k == 0 else compute
                    x = sample(dtype, rng)
                    if kind == "s":
                        x = x.ravel()[rng.integers(0, 12)]   # an edge value as often as not
                        host.append(np.full(SHAPE, x, dtype=dtype))
                        device.append(x)   # the launcher passes bfloat16's bits itself
                    else:
                        host.append(x)
                        device.append(to_device(x))
                y = empty_device(out, SHAPE)
                fn(*device, y)
                got = from_device(y, out)
                want = reference(op, compute, host, out)
                problem = compare(op, compute, got, want)
                checked += 1
                if problem:
                    failures += 1
                    print(f"FAIL {op:12s} {compute.name:9s} {kinds:4s} -> {out.name:9s} {problem}")
    print(f"elementwise: {checked} launchers checked, {failures} failed, {unsupported} "
          f"unsupported combinations returned None ({time.perf_counter() - t0:.1f} s with "
          f"compiles)")
    return failures


def check_sums(rng: np.random.Generator) -> int:
    failures = 0
    cases = [(F32, F32), (F16, F16), (BF16, BF16), (F64, F64), (I32, I64), (I64, I64),
             (BOOL, I64), (F16, F32)]
    for (compute, out), n in itertools.product(cases, (0, 1, 7, 256, 1000, 4097, 40000,
                                                       ew.SUM_SMALL_LIMIT)):
        fn = ew.sum_kernel(compute, out)
        if fn is None:
            failures += 1
            print(f"FAIL sum {compute.name} -> {out.name}: no kernel")
            continue
        x = sample(compute, rng, (n,)) if n else np.zeros(0, compute)
        if compute in FLOATS:   # finite data, so the sum is comparable
            x = np.where(np.isfinite(x.astype(F64)), x, 1).astype(compute)
            x = (x.astype(F64) % 7 / 64).astype(compute)   # float16 sums stay finite
        y = empty_device(out, ())
        fn(to_device(x), y)
        got = from_device(y, out)
        if compute in (I32, I64, BOOL):
            want = np.asarray(x.astype(I64).sum(dtype=np.int64))   # wraps like the kernel
            ok = got == want.astype(out)
        else:
            exact = x.astype(F64).sum()
            tol = {F16: 1e-3, BF16: 8e-3, F32: 1e-6, F64: 1e-13}[compute]
            tol = max(tol, {F16: 1e-3, BF16: 8e-3}.get(out, 0))
            ok = abs(float(got) - exact) <= tol * max(1.0, float(np.abs(x.astype(F64)).sum()))
        if not ok:
            failures += 1
            print(f"FAIL sum {compute.name} -> {out.name} n={n}: got {got!r}")
    print(f"sum: {len(cases)} signatures x 8 sizes checked, {failures} failed")
    return failures


def per_call(fn, repeats=5, n=3000) -> float:
    for _ in range(200):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        cupy.cuda.get_current_stream().synchronize()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def timings() -> None:
    a = cupy.random.standard_normal(SHAPE, dtype=np.float32)
    b = cupy.random.standard_normal(SHAPE, dtype=np.float32)
    m = a > 0
    c = cupy.empty_like(a)
    s = np.float32(2.5)
    total = cupy.empty((), np.float32)
    gelu = cupy.ElementwiseKernel("float32 x", "float32 y",
                                  "y = 0.5f * x * (1.0f + erff(x * 0.70710678f))", "cp_gelu")
    launchers = {
        "a + b": (ew.elementwise_kernel("add", F32, "aa", F32), (a, b, c),
                  lambda: ew.elementwise_kernel("add", F32, "aa", F32)(a, b, c),
                  lambda: cupy.add(a, b, out=c)),
        "a * 2.5": (ew.elementwise_kernel("mul", F32, "as", F32), (a, s, c),
                    lambda: ew.elementwise_kernel("mul", F32, "as", F32)(a, s, c),
                    lambda: cupy.multiply(a, s, out=c)),
        "exp(a)": (ew.elementwise_kernel("exp", F32, "a", F32), (a, c),
                   lambda: ew.elementwise_kernel("exp", F32, "a", F32)(a, c),
                   lambda: cupy.exp(a, out=c)),
        "where(m, a, b)": (ew.elementwise_kernel("where", F32, "aaa", F32), (m, a, b, c),
                           lambda: ew.elementwise_kernel("where", F32, "aaa", F32)(m, a, b, c),
                           lambda: cupy.where(m, a, b)),
        "gelu(a)": (ew.elementwise_kernel("gelu", F32, "a", F32), (a, c),
                    lambda: ew.elementwise_kernel("gelu", F32, "a", F32)(a, c),
                    lambda: gelu(a, c)),
        "a.sum()": (ew.sum_kernel(F32, F32), (a, total),
                    lambda: ew.sum_kernel(F32, F32)(a, total),
                    lambda: cupy.sum(a, out=total)),
    }
    print(f"\nhost us per call, {SHAPE[0]}x{SHAPE[1]} float32 (best of 5 x 3000); 'lookup' adds "
          f"the elementwise_kernel() cache lookup")
    print(f"{'op':16s} {'launcher':>9s} {'lookup':>8s} {'cupy':>8s} {'ratio':>6s}")
    for name, (fn, operands, looked_up, theirs) in launchers.items():
        t_bare = per_call(lambda fn=fn, operands=operands: fn(*operands))
        t_lookup, t_cupy = per_call(looked_up), per_call(theirs)
        print(f"{name:16s} {t_bare:9.2f} {t_lookup:8.2f} {t_cupy:8.2f} {t_bare / t_cupy:6.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two kinds per op instead of all")
    args = parser.parse_args()
    print(f"cupy {cupy.__version__}, device {cupy.cuda.runtime.getDeviceProperties(0)['name']}")
    rng = np.random.default_rng(0)
    failures = check_all(args.quick, rng) + check_sums(rng)
    timings()
    print("\nOK" if not failures else f"\n{failures} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
