"""Where the compiled MLP's DEVICE time goes on the GPU machine (the compiled MLP's target is
at most 0.75x torch's hand-captured graph).

Each piece is captured 20 times into one CuPy graph and timed with events over replays, so the
numbers are device time per piece with no host launch cost in them:
- the bench layer's product (8x512 @ 512x512, float32) with every algorithm cuBLASLt's
  heuristic offers (no workspace, and up to 32 MiB of workspace), plain and with the BIAS epilogue;
- the exact-GELU raw kernel and a device-to-device copy of the 8x512 activations;
- the compiled MLP and torch's captured graph of the same model, per call.
"""

import numpy as np
import cupy
import torch

import tensorplay as tp
from tensorplay.backends.cuda import _elementwise, _skinny, _matmul as M
from tensorplay.bench import models as _models

lt = M._lt
B, W = 8, 512
DEV = 0


def device_us(fn, reps=20, replays=30):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(reps):
            fn()
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(3):
        start.record(stream)
        for _ in range(replays):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end) * 1e3 / (reps * replays))
    return best


x = cupy.random.standard_normal((B, W), dtype=np.float32)
w = cupy.random.standard_normal((W, W), dtype=np.float32) * W ** -0.5
bias = cupy.random.standard_normal((W,), dtype=np.float32)
out = cupy.empty((B, W), np.float32)
workspace = cupy.empty(32 << 20, np.uint8)
ref = x @ w
handle = M._handle(DEV)
dtype = np.dtype(np.float32)


def algorithms(with_bias, ws_limit):
    b_op = M._as_op(W, W, W, 1) + (0,)
    a_op = M._as_op(B, W, W, 1) + (0,)
    plan = M._Plan(DEV, dtype, "highest", b_op, a_op, (W, B, W, B * W), 1, with_bias, None,
                   (256, 256, 256, 256), ws_limit)
    if with_bias:
        plan.bias_buffer[0] = bias.data.ptr
        lt.matmul_desc_set_attribute(plan.desc, M._BIAS_POINTER, plan.bias_buffer.ctypes.data,
                                     plan.bias_buffer.itemsize)
    pref = lt.matmul_preference_create()
    buf = np.asarray([ws_limit], dtype=lt.get_matmul_preference_attribute_dtype(
        lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES))
    lt.matmul_preference_set_attribute(pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
                                       buf.ctypes.data, buf.itemsize)
    results = lt.MatmulHeuristicResult(16)
    count = np.zeros(1, np.int32)
    a_l, b_l, d_l = plan.layouts
    lt.matmul_algo_get_heuristic(handle, plan.desc, a_l, b_l, d_l, d_l, pref, 16, results.ptr,
                                 count.ctypes.data)
    lt.matmul_preference_destroy(pref)
    size = lt.matmul_heuristic_result_dtype.itemsize
    rows = []
    for i in range(int(count[0])):
        algo = results.ptr + i * size
        ws = int(results[i].workspace_size) if hasattr(results[i], "workspace_size") else -1

        def call(algo=algo, ws=ws):
            lt.matmul(handle, plan.desc, plan.alpha, w.data.ptr, a_l, x.data.ptr, b_l,
                      plan.beta, out.data.ptr, d_l, out.data.ptr, d_l, algo,
                      workspace.data.ptr, max(ws, 0) if ws >= 0 else 32 << 20,
                      cupy.cuda.get_current_stream().ptr)
        try:
            us = device_us(call)
            expect = ref + bias if with_bias else ref
            err = float(cupy.abs(out - expect).max())
            rows.append((i, ws, us, err))
        except Exception as exc:  # noqa: BLE001
            rows.append((i, ws, float("nan"), repr(exc)[:80]))
    return rows


for with_bias in (False, True):
    for limit in (0,) if with_bias else (0, 32 << 20):
        print(f"product 8x512x512 f32 bias={with_bias} workspace<= {limit}:")
        for i, ws, us, err in algorithms(with_bias, limit):
            print(f"  algo {i:2d} ws={ws:>9} {us:7.2f} us  err={err}")

print("skinny kernel vs cuBLASLt (lean plan), device us per product, float32:")
print(f"  {'m x k x n':>18s} {'form':>4s} {'skinny':>8s} {'+bias+gelu':>10s} {'cuBLASLt':>9s}")
for m, k, n in [(1, 512, 512), (8, 512, 512), (16, 512, 512), (8, 1024, 1024),
                (8, 2048, 2048), (16, 1024, 4096), (16, 4096, 1024), (4, 256, 2048)]:
    for form in ("nn", "nt"):
        xa = cupy.random.standard_normal((m, k), dtype=np.float32)
        stored = cupy.random.standard_normal((k, n) if form == "nn" else (n, k), dtype=np.float32)
        wa = stored if form == "nn" else stored.T
        ya = cupy.empty((m, n), np.float32)
        ba = cupy.random.standard_normal((n,), dtype=np.float32)
        plain = _skinny.plan(xa, wa, ya, False, None)
        fused = _skinny.plan(xa, wa, ya, True, "gelu")
        if plain is None:
            print(f"  {m:4d} x {k:5d} x {n:5d} {form:>4s}  not taken")
            continue
        t_plain = device_us(lambda: plain(xa, wa, None, ya))
        err = float(cupy.abs(ya - xa @ wa).max())
        t_fused = device_us(lambda: fused(xa, wa, ba, ya))
        t_lt = device_us(lambda: M._gemm(xa, wa, ya, (), np.dtype(np.float32), "highest",
                                         None, False, None))
        print(f"  {m:4d} x {k:5d} x {n:5d} {form:>4s} {t_plain:8.2f} {t_fused:10.2f} "
              f"{t_lt:9.2f}  err={err:.1e}")

gelu = _elementwise.elementwise_kernel("gelu", dtype, "a", dtype)
print(f"exact gelu kernel 8x512: {device_us(lambda: gelu(ref, out)):.2f} us")
add_row = _elementwise.elementwise_kernel("add", dtype, "ar", dtype)
print(f"bias row add kernel 8x512: {device_us(lambda: add_row(ref, bias, out)):.2f} us")
print(f"copy 8x512 f32 d2d: {device_us(lambda: out.__setitem__(Ellipsis, ref)):.2f} us")

forward = _models._tp_mlp("cuda")
compiled = tp.compile(forward)
xs = [tp.randn(B, W, device="cuda") for _ in range(4)]
compiled(xs[0])
compiled(xs[1])
tp.accelerator.synchronize()
start = tp.accelerator.Event(enable_timing=True)
end = tp.accelerator.Event(enable_timing=True)
for label, fn in (("compiled", compiled), ("eager", forward)):
    best = float("inf")
    for _ in range(3):
        start.record()
        for i in range(200):
            fn(xs[i % 4])
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / 200)
    print(f"tensorplay {label} MLP, events around 200 calls: {best:.2f} us per call")

ws_t = [torch.randn(W, W, device="cuda") * W ** -0.5 for _ in range(4)]
bs_t = [torch.zeros(W, device="cuda") for _ in range(4)]
static = torch.randn(B, W, device="cuda")


def torch_forward(v):
    for wt, bt in zip(ws_t, bs_t):
        v = torch.nn.functional.gelu(v @ wt + bt)
    return v


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        torch_forward(static)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = torch_forward(static)
txs = [torch.randn(B, W, device="cuda") for _ in range(4)]
for label, fn in (("graph + copy_", lambda v: (static.copy_(v), graph.replay())),
                  ("eager", torch_forward)):
    best = float("inf")
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(200):
            fn(txs[i % 4])
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) * 1e3 / 200)
    print(f"torch {label} MLP, events around 200 calls: {best:.2f} us per call")
