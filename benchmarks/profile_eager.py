"""Profile tensorplay's eager host path on the current accelerator: the MLP forward, x.add_(1)
and the bench's eager products (a @ w and addmm of 64 x 64 float32). Prints each one's time per
call and its top entries by own time (run on the GPU machine to see where eager time goes)."""

import cProfile
import pstats
import time

import tensorplay as tp

dev = f"{tp.accelerator.current_accelerator().type}:0"
w = tp.randn(512, 512, device=dev)
b = tp.zeros(512, device=dev)
x = tp.randn(8, 512, device=dev)
a64, w64, v64 = tp.randn(64, 64, device=dev), tp.randn(64, 64, device=dev), tp.randn(64, device=dev)


def forward(x):
    for _ in range(4):
        x = tp.gelu(x @ w + b)
    return x


for label, fn in (("mlp", lambda: forward(x)), ("add_", lambda: x.add_(1)),
                  ("a @ w (64)", lambda: a64 @ w64),
                  ("addmm (64)", lambda: tp.addmm(v64, a64, w64))):
    fn()
    tp.accelerator.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        fn()
    tp.accelerator.synchronize()
    print(f"{label}: {(time.perf_counter() - start) / 50 * 1e6:.1f} us per call")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        fn()
    tp.accelerator.synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)
