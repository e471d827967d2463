"""Where the eager MLP's host time goes on the GPU machine: per-op host costs of one layer's ops
(tensorplay, CuPy, torch side by side), the bench's forward timed host-only, synchronized and on
the device, its compiled form with and without workspace for the captured GEMMs
(``_matmul.LEAN_IN_CAPTURE``), and a cProfile of the eager forward."""

import cProfile
import io
import pstats
import time

import cupy
import numpy as np
import torch

import tensorplay as tp
from tensorplay.backends.cuda import _matmul
from tensorplay.bench import models as _bench_models

W, B = 512, 8


def host_us(fn, calls=2000, repeats=5):
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
        tp.accelerator.synchronize()
        torch.cuda.synchronize()
    return best / calls * 1e6


x = tp.randn(B, W, device="cuda")
w = tp.randn(W, W, device="cuda")
b = tp.randn(W, device="cuda")
h = x @ w
cx, cw, cb, ch = (cupy.asarray(np.asarray(t.cpu().numpy())) for t in (x, w, b, h))
tx, tw, tb, th = (torch.as_tensor(t.cpu().numpy(), device="cuda") for t in (x, w, b, h))
from tensorplay._tensor.linalg import linear  # noqa: E402

cases = [
    ("x @ w", lambda: x @ w, lambda: cupy.matmul(cx, cw), lambda: tx @ tw),
    ("h + b (bias broadcast)", lambda: h + b, lambda: ch + cb, lambda: th + tb),
    ("h + h", lambda: h + h, lambda: ch + ch, lambda: th + th),
    ("gelu(h)", lambda: tp.gelu(h), None, lambda: torch.nn.functional.gelu(th)),
    ("linear(x, w, b)", lambda: linear(x, w, b), None,
     lambda: torch.nn.functional.linear(tx, tw, tb)),
    ("empty(8, 512)", lambda: tp.empty(B, W, device="cuda"), lambda: cupy.empty((B, W)),
     lambda: torch.empty(B, W, device="cuda")),
]
print(f"{'op':28s} {'tensorplay':>11s} {'cupy':>9s} {'torch':>9s}  (us host per call)")
for name, ours, cupys, torchs in cases:
    row = [host_us(ours), host_us(cupys) if cupys else float("nan"), host_us(torchs)]
    print(f"{name:28s} {row[0]:11.2f} {row[1]:9.2f} {row[2]:9.2f}")

forward = _bench_models._tp_mlp("cuda")   # the bench's MLP, as the bench builds it
print("matrix engine:", tp._runtime.dispatch.matrix_engine(x.device))
xs = [tp.randn(B, W, device="cuda") for _ in range(4)]
turn = iter(range(1 << 62))
print(f"forward, host only: {host_us(lambda: forward(xs[next(turn) % 4]), calls=300):.1f} us")


def synced():
    forward(xs[next(turn) % 4])
    tp.accelerator.synchronize()


print(f"forward + synchronize: {host_us(synced, calls=300):.1f} us")
compiled = tp.compile(forward)
compiled(xs[0])
_matmul.LEAN_IN_CAPTURE = True   # captured GEMMs without workspace (no split-K)
lean = tp.compile(_bench_models._tp_mlp("cuda"))
lean(xs[0])
_matmul.LEAN_IN_CAPTURE = False
for label, fn in (("compiled", compiled), ("compiled, lean GEMMs", lean)):
    def run_synced(fn=fn):
        fn(xs[next(turn) % 4])
        tp.accelerator.synchronize()
    print(f"{label}: {host_us(run_synced, calls=300):.1f} us (synchronized per call)")
start = tp.accelerator.Event(enable_timing=True)
end = tp.accelerator.Event(enable_timing=True)
start.record()
for _ in range(100):
    forward(xs[0])
end.record()
end.synchronize()
print(f"forward, device time (events over 100 calls): {start.elapsed_time(end) * 10:.1f} us")


for _ in range(50):
    forward(x)
tp.accelerator.synchronize()
profile = cProfile.Profile()
profile.enable()
for _ in range(300):
    forward(x)
tp.accelerator.synchronize()
profile.disable()
text = io.StringIO()
pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
print(text.getvalue()[:6000])
