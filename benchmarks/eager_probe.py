"""Host cost per call of small eager ops in CuPy, torch and raw launch paths, on one GPU.

Answers: what does each way of launching one small elementwise kernel cost from Python on this
machine? (CuPy ufunc with and without ``out=``, ElementwiseKernel, RawKernel, cuda-bindings
``cuLaunchKernel`` with prepacked parameters), next to torch's same calls. Prints one line per
case: ``<name> <us per call>``.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

from tensorplay.bench.timing import timed_loops

N = 3000


def per_call(fn, sync, n=N, repeats=5):
    for _ in range(200):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def host_per_call(fn, sync, calls=200, repeats=25):
    """Best host cost per call of ``fn`` over ``repeats`` loops of ``calls`` issued after a
    sync (the clock stops before the loop's own sync: ``bench.timing.timed_loops``)."""
    return min(timed_loops(fn, sync, calls, repeats, 1)[0])


def report(name, us):
    print(f"{name:44s} {us:8.2f} us per call", flush=True)


def cupy_cases():
    import cupy as cp
    sync = cp.cuda.get_current_stream().synchronize
    a = cp.ones((64, 64), cp.float32)
    b = cp.ones((64, 64), cp.float32)
    c = cp.empty_like(a)
    w = cp.ones((64, 64), cp.float32)
    m = a > 0
    s = cp.empty((), cp.float32)
    cases = {
        "cupy a + b": lambda: a + b,
        "cupy add(a, b, out=c)": lambda: cp.add(a, b, out=c),
        "cupy exp(a)": lambda: cp.exp(a),
        "cupy exp(a, out=c)": lambda: cp.exp(a, out=c),
        "cupy a += 1 (add(a, 1, out=a))": lambda: cp.add(a, 1, out=a),
        "cupy a.sum()": lambda: a.sum(),
        "cupy sum(a, out=s)": lambda: cp.sum(a, out=s),
        "cupy where(m, a, b)": lambda: cp.where(m, a, b),
        "cupy a @ w": lambda: a @ w,
        "cupy matmul(a, w, out=c)": lambda: cp.matmul(a, w, out=c),
        "cupy empty((64,64))": lambda: cp.empty((64, 64), cp.float32),
    }
    ek = cp.ElementwiseKernel("T x, T y", "T z", "z = x + y", "tp_probe_add")
    cases["cupy ElementwiseKernel(a, b, c)"] = lambda: ek(a, b, c)
    rk = cp.RawKernel(r'''extern "C" __global__ void tp_add(const float* x, const float* y,
        float* z, long long n) { long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) z[i] = x[i] + y[i]; }''', "tp_add")
    n = a.size
    grid = (n + 255) // 256
    cases["cupy RawKernel((g,), (b,), args)"] = lambda: rk((grid,), (256,), (a, b, c, np.int64(n)))
    rk.compile() if hasattr(rk, "compile") else None
    try:
        from cuda.bindings import driver
        fptr = rk.kernel.ptr
        stream = cp.cuda.get_current_stream().ptr
        vals = np.array([a.data.ptr, b.data.ptr, c.data.ptr, n], dtype=np.uint64)
        slots = np.array([vals.ctypes.data + 8 * i for i in range(4)], dtype=np.uint64)
        params = slots.ctypes.data
        launch = driver.cuLaunchKernel
        func = driver.CUfunction(fptr)
        grid = (n + 255) // 256
        cases["cuLaunchKernel prepacked params"] = lambda: launch(
            func, grid, 1, 1, 256, 1, 1, 0, stream, params, 0)
        def repack():
            vals[0] = a.data.ptr
            vals[1] = b.data.ptr
            vals[2] = c.data.ptr
            launch(func, grid, 1, 1, 256, 1, 1, 0, stream, params, 0)
        cases["cuLaunchKernel + 3 pointer writes"] = repack
        ptr_t = ctypes.c_void_p
        cases["cuLaunchKernel (values, types) tuple"] = lambda: launch(
            func, grid, 1, 1, 256, 1, 1, 0, stream,
            ((a.data.ptr, b.data.ptr, c.data.ptr, n), (None, None, None, ctypes.c_longlong)), 0)
        del ptr_t
        cases.update(_ctypes_launch_cases(fptr, grid, stream, vals, params, a, b, c, driver))
    except Exception as exc:  # noqa: BLE001
        print("cuLaunchKernel cases skipped:", type(exc).__name__, exc)
    cases.update(_as_array_cases(cp))
    try:
        from cuda.bindings import runtime
        cases["cudaStreamQuery (one binding call)"] = lambda: runtime.cudaStreamQuery(stream)
    except Exception as exc:  # noqa: BLE001
        print("runtime cases skipped:", exc)
    cases["cupy get_current_stream()"] = cp.cuda.get_current_stream
    for name, fn in cases.items():
        try:
            report(name, per_call(fn, sync))
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: failed {type(exc).__name__}: {exc}")


def _ctypes_launch_cases(fptr, grid, stream, vals, params, a, b, c, driver):
    """The same prepacked launch through ctypes straight into libcuda (GIL released: CDLL; held:
    PyDLL), and through cuda-bindings with the stream given as a ``CUstream`` object."""
    cases = {}
    cu_stream = driver.CUstream(stream)
    cupy_launch = getattr(__import__("cupy").cuda.driver, "launchKernel", None)
    if cupy_launch is not None:
        cases["cupy.cuda.driver.launchKernel prepacked"] = lambda: cupy_launch(
            fptr, grid, 1, 1, 256, 1, 1, 0, stream, params, 0)
    else:
        print("cupy.cuda.driver.launchKernel: absent")
    func = driver.CUfunction(fptr)
    cases["cuLaunchKernel, CUstream object"] = lambda: driver.cuLaunchKernel(
        func, grid, 1, 1, 256, 1, 1, 0, cu_stream, params, 0)
    for label, loader in (("CDLL", ctypes.CDLL), ("PyDLL", ctypes.PyDLL)):
        lib = loader("libcuda.so.1")
        fn = lib.cuLaunchKernel
        fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        fn.restype = ctypes.c_int

        def prepacked(fn=fn):
            return fn(fptr, grid, 1, 1, 256, 1, 1, 0, stream, params, None)

        def writes(fn=fn):
            vals[0] = a.data.ptr
            vals[1] = b.data.ptr
            vals[2] = c.data.ptr
            return fn(fptr, grid, 1, 1, 256, 1, 1, 0, stream, params, None)
        assert prepacked() == 0
        cases[f"ctypes {label} cuLaunchKernel prepacked"] = prepacked
        cases[f"ctypes {label} cuLaunchKernel + 3 writes"] = writes
    return cases


def _as_array_cases(cp):
    """What a CuPy view of raw memory costs, spelled three ways."""
    from cupy.cuda.memory import MemoryPointer, UnownedMemory
    base = cp.empty((64, 64), cp.float32)
    ptr = base.data.ptr
    f32 = np.dtype(np.float32)
    return {
        "as_array: ndarray(shape, np.dtype(t), mp, strides)": lambda: cp.ndarray(
            (64, 64), np.dtype(f32), MemoryPointer(UnownedMemory(ptr, 16384, base, 0), 0),
            strides=(256, 4)),
        "as_array: ndarray(shape, t, mp, strides)": lambda: cp.ndarray(
            (64, 64), f32, MemoryPointer(UnownedMemory(ptr, 16384, base, 0), 0),
            strides=(256, 4)),
        "as_array: ndarray(shape, t, mp)": lambda: cp.ndarray(
            (64, 64), f32, MemoryPointer(UnownedMemory(ptr, 16384, base, 0), 0)),
        "UnownedMemory + MemoryPointer": lambda: MemoryPointer(
            UnownedMemory(ptr, 16384, base, 0), 0),
    }


def torch_cases():
    import torch
    sync = torch.cuda.synchronize
    a = torch.ones(64, 64, device="cuda")
    b = torch.ones(64, 64, device="cuda")
    c = torch.empty_like(a)
    w = torch.ones(64, 64, device="cuda")
    m = a > 0
    cases = {
        "torch a + b": lambda: a + b,
        "torch add(a, b, out=c)": lambda: torch.add(a, b, out=c),
        "torch a.exp()": lambda: a.exp(),
        "torch a.add_(1)": lambda: a.add_(1),
        "torch a.sum()": lambda: a.sum(),
        "torch where(m, a, b)": lambda: torch.where(m, a, b),
        "torch gelu(a)": lambda: torch.nn.functional.gelu(a),
        "torch a @ w": lambda: a @ w,
    }
    for name, fn in cases.items():
        report(name, per_call(fn, sync))


def tensorplay_cases():
    import tensorplay as tp
    sync = tp.accelerator.synchronize
    a = tp.ones(64, 64, device="cuda")
    b = tp.ones(64, 64, device="cuda")
    w = tp.ones(64, 64, device="cuda")
    m = a > 0
    cases = {
        "tp a + b": lambda: a + b, "tp a.exp()": lambda: a.exp(), "tp a.add_(1)": lambda: a.add_(1),
        "tp a.sum()": lambda: a.sum(), "tp where(m, a, b)": lambda: tp.where(m, a, b),
        "tp a @ w": lambda: a @ w, "tp gelu(a)": lambda: tp.gelu(a),
    }
    for name, fn in cases.items():
        report(name, per_call(fn, sync))


if __name__ == "__main__":
    for part in (cupy_cases, torch_cases, tensorplay_cases):
        try:
            part()
        except Exception as exc:  # noqa: BLE001
            print(f"{part.__name__} failed: {type(exc).__name__}: {exc}")


def tensorplay_parts():
    """Where a tensorplay eager op's host time goes: its pieces timed alone, then cProfile."""
    import cProfile
    import pstats

    import tensorplay as tp
    from tensorplay._runtime import dispatch, state
    from tensorplay._runtime.allocator import device_allocator
    from tensorplay._tensor.tensor import Tensor

    sync = tp.accelerator.synchronize
    dev = tp.device("cuda:0")
    a = tp.ones(64, 64, device=dev)
    b = tp.ones(64, 64, device=dev)
    stream = state.current_native_stream(0)
    allocator = device_allocator(0)
    backend = dispatch.backend_of(dev)
    block = allocator.malloc(16384, stream)
    arr = dispatch.empty(dev, (64, 64), tp.float32)
    fast = backend.elementwise_kernel("add", np.dtype(np.float32), "aa", np.dtype(np.float32))

    def noop():
        pass
    cases = {
        "part: allocator malloc+release": lambda: allocator.malloc(16384, stream).release(),
        "part: backend.as_array": lambda: backend.as_array(
            0, block.ptr, 16384, np.float32, (64, 64), (256, 4), block),
        "part: dispatch.empty (+ free)": lambda: dispatch.empty(dev, (64, 64), tp.float32),
        "part: Tensor._make": lambda: Tensor._make(arr, dev, tp.float32),
        "part: dispatch.launch(noop)": lambda: dispatch.launch(dev, noop),
        "part: raw add launcher": lambda: fast(a._data, b._data, arr),
        "full: tp a + b": lambda: a + b,
    }
    cases.update(_product_and_replay_parts(tp, dev, backend, a, b))
    for name, fn in cases.items():
        timer = host_per_call if name.startswith("replay (host)") else per_call
        report(name, timer(fn, sync))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20000):
        a + b
    profile.disable()
    sync()
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)


_GRAPH_OUTPUTS = []   # what the probes' graphs write, alive while they replay


def one_kernel_graph(tp, device):
    """A graph of one in-place add on 16 floats of ``device``, and the current stream."""
    x = tp.zeros(16, device=device)
    graph = tp.accelerator.Graph()
    with graph:
        x.add_(1)
    _GRAPH_OUTPUTS.append(x)
    return graph, tp.accelerator.current_stream()


def _product_and_replay_parts(tp, dev, backend, a, w):
    """A cached 64x64 product through the backend hook and its one cublasLtMatmul; a one-kernel
    graph's replay beside cuda-bindings' and CuPy's bare cudaGraphLaunch."""

    from tensorplay._runtime import dispatch
    from tensorplay.backends.cuda import _matmul
    cases = {}
    product = dispatch.empty(dev, (64, 64), tp.float32)
    backend.matmul(a._data, w._data, product)
    plans = [p for p in _matmul._direct.values() if p.__class__ is _matmul._Plan]
    cases["part: backend.matmul 64x64 (cached plan)"] = lambda: backend.matmul(
        a._data, w._data, product)
    if plans:
        plan = plans[-1]
        pa, pw, pc = a._data.data.ptr, w._data.data.ptr, product.data.ptr
        cases["part: _matmul._run (one cublasLtMatmul)"] = lambda: _matmul._run(
            plan, 0, pw, pa, pc, None)
    graph, stream = one_kernel_graph(tp, dev)
    # A replay's per-call total is the device's rate (about 2.7 us a graph on the H200), so the
    # replay rows time the host alone: the clock stops before the loop's sync.
    cases["replay (host): tp graph.replay(stream=s)"] = lambda: graph.replay(stream=stream)
    cases["replay (host): tp graph.replay()"] = graph.replay
    for binding, launch in backend.raw_graph_launchers(graph._exec, stream._native).items():
        cases[f"replay (host): {binding} cudaGraphLaunch"] = launch
    return cases


if __name__ == "__main__":
    try:
        tensorplay_parts()
    except Exception as exc:  # noqa: BLE001
        print(f"tensorplay_parts failed: {type(exc).__name__}: {exc}")
