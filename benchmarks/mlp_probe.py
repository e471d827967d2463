"""Quick H200 probe for issue 13: the bench's MLP (eager, compiled) and 4096^3 products,
tensorplay beside torch in one run (the full table is `python -m tensorplay bench`)."""

import time

import numpy as np
import torch

import tensorplay as tp


def per_call(fn, sync, calls=300, repeats=5):
    for _ in range(20):
        fn()
    sync()
    best = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(best))


W, B, L = 512, 8, 4
tp.manual_seed(0)
ws = [tp.randn(W, W, device="cuda") * W ** -0.5 for _ in range(L)]
bs = [tp.zeros(W, device="cuda") for _ in range(L)]


def forward(x):
    for w, b in zip(ws, bs):
        x = tp.gelu(x @ w + b)
    return x


x = tp.randn(B, W, device="cuda")
compiled = tp.compile(forward)
sync = tp.accelerator.synchronize
print(f"tensorplay eager MLP        {per_call(lambda: forward(x), sync):8.1f} us")
print(f"tensorplay compiled MLP     {per_call(lambda: compiled(x), sync):8.1f} us "
      f"(fused products {compiled.fused_products})")
print("max |compiled - eager|", float((compiled(x) - forward(x)).abs().max()))
from tensorplay.backends.cuda import _matmul  # noqa: E402

_matmul.LEAN_IN_CAPTURE = True   # captured GEMMs without workspace (no split-K)
lean = tp.compile(forward)
lean(x)
_matmul.LEAN_IN_CAPTURE = False
print(f"compiled, lean GEMMs        {per_call(lambda: lean(x), sync):8.1f} us")
print(f"compiled (again)            {per_call(lambda: compiled(x), sync):8.1f} us")
tws = [torch.as_tensor(w.cpu().numpy(), device="cuda") for w in ws]
tbs = [torch.zeros(W, device="cuda") for _ in range(L)]
gelu = torch.nn.functional.gelu


def tforward(x):
    for w, b in zip(tws, tbs):
        x = gelu(x @ w + b)
    return x


tx = torch.randn(B, W, device="cuda")
eager_us = per_call(lambda: tforward(tx), torch.cuda.synchronize)
print(f"torch eager MLP             {eager_us:8.1f} us")
static = tx.clone()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        tforward(static)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    tforward(static)


def replay():
    static.copy_(tx)
    g.replay()


print(f"torch CUDAGraph + copy      {per_call(replay, torch.cuda.synchronize):8.1f} us")

n = 4096
for label, dtype, precision in (("float32 highest", tp.float32, "highest"),
                                ("float32 high (TF32)", tp.float32, "high"),
                                ("bfloat16", tp.bfloat16, "highest")):
    tp.set_float32_matmul_precision(precision)
    torch.set_float32_matmul_precision(precision)
    a = tp.randn(n, n, device="cuda").to(dtype)
    b = tp.randn(n, n, device="cuda").to(dtype)
    tdtype = {tp.float32: torch.float32, tp.bfloat16: torch.bfloat16}[dtype]
    ta, tb = (torch.randn(n, n, device="cuda", dtype=tdtype) for _ in range(2))
    ours = per_call(lambda: a @ b, sync, calls=20, repeats=3)
    theirs = per_call(lambda: ta @ tb, torch.cuda.synchronize, calls=20, repeats=3)
    flops = 2 * n ** 3
    print(f"{label:20s} tensorplay {flops / ours / 1e6:7.1f} TFLOP/s  torch "
          f"{flops / theirs / 1e6:7.1f} TFLOP/s  ratio {theirs / ours:.3f}")
tp.set_float32_matmul_precision("highest")
torch.set_float32_matmul_precision("highest")
