"""Feature probe for design decisions on a real GPU (not a test, not a benchmark of record).

Checks, on the current GPU, with tensorplay out of the way:
1. cupy.fuse: in-place ``+=`` / ``-=`` on several arguments, ``out=`` on ufuncs, a fused
   ``sum(a * b)`` reduction, 0-d arrays broadcast against 2-D strided views, and how many
   kernel nodes each records inside a stream capture.
2. Staging through kernel-node parameters: a by-value struct kernel launched with cuLaunchKernel
   into a capture, found again from the capture's dependencies, then per launch
   cuGraphExecKernelNodeSetParams (+ cuGraphNodeSetEnabled) and cudaGraphLaunch: host cost and
   steady-state time per call, and whether in-flight launches keep their parameters.
Prints plain lines; run: python3 benchmarks/probe_cuda.py
"""

from __future__ import annotations

import ctypes
import time

import cupy
import numpy as np
from cuda.bindings import driver, runtime


def check(result, what):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what}: {err}")
    return result[1] if len(result) == 2 else result[1:]


def capture(fn, stream):
    check(runtime.cudaStreamBeginCapture(stream.ptr,
          runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed), "begin")
    try:
        with stream:
            out = fn()
    finally:
        graph = check(runtime.cudaStreamEndCapture(stream.ptr), "end")
    nodes = check(runtime.cudaGraphGetNodes(graph, 0), "nodes")
    count = nodes[1] if isinstance(nodes, tuple) else nodes
    return graph, int(count), out


def probe_fuse():
    stream = cupy.cuda.Stream(non_blocking=True)
    n = 256
    p = cupy.zeros((n + 2, n + 2), cupy.float32)
    p[1:-1, 1:-1] = cupy.random.rand(n, n, dtype=cupy.float32)
    x = cupy.zeros((n, n), cupy.float32)
    r = cupy.ones((n, n), cupy.float32)
    rs = cupy.full((), 3.0, cupy.float32)
    it = cupy.zeros((), cupy.int32)
    running = cupy.ones((1,), cupy.bool_)

    def stencil(c, up, down, left, right):
        return 4 * c - up - down - left - right

    @cupy.fuse(kernel_name="tp_probe_pap")
    def pap_of(c, up, down, left, right):
        return cupy.sum(c * stencil(c, up, down, left, right))

    @cupy.fuse(kernel_name="tp_probe_update")
    def update(x, r, c, up, down, left, right, rs, pap):
        alpha = rs / pap
        x += alpha * c
        r -= alpha * stencil(c, up, down, left, right)

    @cupy.fuse(kernel_name="tp_probe_scalars")
    def scalars(rs, rs_new, it, running, thr2, max_it):
        cupy.positive(rs_new, out=rs)
        it += 1
        cupy.logical_and(rs_new > thr2, it < max_it, out=running)

    views = (p[1:-1, 1:-1], p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:])
    pc = views[0]
    ref_pap = float(cupy.sum(pc * (4 * pc - views[1] - views[2] - views[3] - views[4])))
    for name, fn in [
        ("fused pap (reduction of elementwise)", lambda: pap_of(*views)),
        ("fused x,r in-place update", lambda: update(x, r, *views, rs, pap_of(*views))),
        ("fused scalars out=/+=", lambda: scalars(rs, cupy.full((), 2.0, cupy.float32), it,
                                                  running.reshape(()), np.float32(1.0), 10)),
    ]:
        try:
            fn()   # eager first: compiles
            cupy.cuda.Device().synchronize()
            graph, count, _ = capture(fn, stream)
            print(f"fuse: {name}: ok, {count} node(s) in capture")
            runtime.cudaGraphDestroy(graph)
        except Exception as exc:  # noqa: BLE001
            print(f"fuse: {name}: FAILED {type(exc).__name__}: {exc}")
    got = float(pap_of(*views))
    print(f"fuse: pap {got:.6g} vs composed {ref_pap:.6g}")
    x[...] = 0
    r[...] = 1
    rs[...] = 3
    pap = pap_of(*views)
    update(x, r, *views, rs, pap)
    alpha = 3.0 / float(pap)
    ok_x = bool(cupy.allclose(x, alpha * pc, rtol=1e-5))
    print(f"fuse: in-place x update correct: {ok_x}")
    rs[...] = 3
    it[...] = 0
    running[...] = True
    scalars(rs, cupy.full((), 2.0, cupy.float32), it, running.reshape(()), np.float32(1.0), 10)
    print(f"fuse: scalars -> rs={float(rs)} it={int(it)} running={bool(running[0])}")
    prod = cupy.empty((n, n), cupy.float32)
    ap = cupy.empty((n, n), cupy.float32)

    @cupy.fuse(kernel_name="tp_probe_apply")
    def apply(c, up, down, left, right, ap, prod):
        cupy.subtract(4 * c, up + down + left + right, out=ap)
        cupy.multiply(c, ap, out=prod)

    timed = [("fused pap reduction", lambda: pap_of(*views)),
             ("fused update (x, r in place)", lambda: update(x, r, *views, rs, rs)),
             ("cupy.sum of contiguous 65536", lambda: cupy.sum(prod)),
             ("fused stencil+product, 2 outputs", lambda: apply(*views, ap, prod)),
             ("cupy add 65536 (reference)", lambda: cupy.add(prod, 1, out=prod))]
    for name, fn in timed:
        fn()
        graph, count, _ = capture(lambda: [fn() for _ in range(50)], stream)
        exe = check(runtime.cudaGraphInstantiateWithFlags(graph, 0), "inst")
        for _ in range(3):
            runtime.cudaGraphLaunch(exe, stream.ptr)
        stream.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            runtime.cudaGraphLaunch(exe, stream.ptr)
        stream.synchronize()
        per = (time.perf_counter() - t) / 10 / 50 * 1e6
        print(f"fuse: {name}: {count / 50:.0f} node(s) per call, {per:.2f} us device per call")


STAGE_SOURCE = r"""
typedef unsigned long long u64;
struct StageArgs { u64 count; u64 words[192]; };
extern "C" __global__ void tp_probe_stage(const StageArgs args) {
    const unsigned int k = blockIdx.y;
    if (k >= args.count) return;
    unsigned char* dst = (unsigned char*)args.words[3 * k];
    const unsigned char* src = (const unsigned char*)args.words[3 * k + 1];
    const u64 nbytes = args.words[3 * k + 2];
    const u64 start = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 vectors = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {
        vectors = nbytes >> 4;
        for (u64 i = start; i < vectors; i += stride) ((uint4*)dst)[i] = ((const uint4*)src)[i];
    }
    for (u64 i = (vectors << 4) + start; i < nbytes; i += stride) dst[i] = src[i];
}
"""


class StageArgs(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("words", ctypes.c_uint64 * 192)]


def probe_staging():
    kernel = cupy.RawKernel(STAGE_SOURCE, "tp_probe_stage")
    func = driver.CUfunction(kernel.kernel.ptr)
    stream = cupy.cuda.Stream(non_blocking=True)
    statics = [cupy.zeros(256, cupy.float32) for _ in range(8)]
    fresh = [cupy.random.rand(256, dtype=cupy.float32) for _ in range(8)]
    args = StageArgs()
    slot = (ctypes.c_void_p * 1)(ctypes.addressof(args))
    params_addr = ctypes.addressof(slot)
    out = cupy.zeros(256, cupy.float32)
    check(runtime.cudaStreamBeginCapture(stream.ptr,
          runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed), "begin")
    check(driver.cuLaunchKernel(func, 1, 1, 1, 256, 1, 1, 0, driver.CUstream(stream.ptr),
                                params_addr, 0), "cuLaunchKernel")
    info = check(runtime.cudaStreamGetCaptureInfo(stream.ptr), "info")
    deps = info[3]
    node = deps[0]
    with stream:
        cupy.add(statics[0], statics[-1], out=out)
    graph = check(runtime.cudaStreamEndCapture(stream.ptr), "end")
    exe = check(runtime.cudaGraphInstantiateWithFlags(graph, 0), "inst")
    dexe, dnode = driver.CUgraphExec(int(exe)), driver.CUgraphNode(int(node))
    kp = check(driver.cuGraphKernelNodeGetParams(dnode), "getparams")
    kp.kernelParams = params_addr
    print(f"staging: node params grid=({kp.gridDimX},{kp.gridDimY}) block={kp.blockDimX}")
    ptrs = [(s.data.ptr, f.data.ptr, 1024) for s, f in zip(statics, fresh)]
    flat = [w for t in ptrs for w in t]
    set_params = driver.cuGraphExecKernelNodeSetParams
    set_enabled = driver.cuGraphNodeSetEnabled
    launch = runtime.cudaGraphLaunch
    sh = stream.ptr

    def stage_and_launch():
        args.words[0:24] = flat
        args.count = 8
        kp.gridDimY = 8
        set_params(dexe, dnode, kp)
        launch(exe, sh)

    stage_and_launch()
    stream.synchronize()
    ok = all(bool(cupy.array_equal(s, f)) for s, f in zip(statics, fresh))
    print(f"staging: 8 copies correct: {ok}; out correct: "
          f"{bool(cupy.allclose(out, fresh[0] + fresh[-1]))}")
    # in-flight launches keep their parameters: alternate sources, record each result
    sources = cupy.arange(50 * 256, dtype=cupy.float32).reshape(50, 256)
    hist = cupy.zeros((50, 256), cupy.float32)
    for i in range(50):
        args.words[0:3] = [statics[0].data.ptr, sources[i].data.ptr, 1024]
        args.count = 1
        kp.gridDimY = 1
        set_params(dexe, dnode, kp)
        launch(exe, sh)
        with stream:
            cupy.copyto(hist[i], statics[0])
    stream.synchronize()
    print(f"staging: 50 back-to-back launches each saw its own params: "
          f"{bool(cupy.array_equal(hist, sources))}")
    for label, fn in [("set_params only", lambda: set_params(dexe, dnode, kp)),
                      ("set_enabled only", lambda: set_enabled(dexe, dnode, 1)),
                      ("launch only", lambda: launch(exe, sh)),
                      ("stage_and_launch (8)", stage_and_launch)]:
        for _ in range(50):
            fn()
        stream.synchronize()
        best_host, best_total = 1e9, 1e9
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(500):
                fn()
            t1 = time.perf_counter()
            stream.synchronize()
            t2 = time.perf_counter()
            best_host = min(best_host, (t1 - t0) / 500 * 1e6)
            best_total = min(best_total, (t2 - t0) / 500 * 1e6)
        print(f"staging: {label}: host {best_host:.2f} us, total {best_total:.2f} us per call")
    set_enabled(dexe, dnode, 0)
    for _ in range(50):
        launch(exe, sh)
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(500):
        launch(exe, sh)
    stream.synchronize()
    print(f"staging: launch with the stage node disabled: total "
          f"{(time.perf_counter() - t0) / 500 * 1e6:.2f} us per call")


def probe_chain():
    """Device time per node of a chain of 20 small dependent kernels (the 20-kernel case)."""
    stream = cupy.cuda.Stream(non_blocking=True)
    x = cupy.zeros(1024, cupy.float32)
    graph, count, _ = capture(lambda: [cupy.add(x, 1, out=x) for _ in range(20)], stream)
    exe = check(runtime.cudaGraphInstantiateWithFlags(graph, 0), "inst")
    for _ in range(20):
        runtime.cudaGraphLaunch(exe, stream.ptr)
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        runtime.cudaGraphLaunch(exe, stream.ptr)
    stream.synchronize()
    print(f"chain: 20 cupy add kernels: {(time.perf_counter() - t0) / 200 * 1e6:.2f} us per "
          f"replay ({count} nodes)")


if __name__ == "__main__":
    for probe in (probe_staging, probe_chain, probe_fuse):
        try:
            probe()
        except Exception as exc:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            print(f"{probe.__name__}: FAILED {exc}")
