"""Profile tensorplay's eager host path on the current accelerator: the MLP forward and x.add_(1).
Prints the top entries by own time (run on the GPU machine to see where eager time goes)."""

import cProfile
import pstats
import time

import tensorplay as tp

dev = f"{tp.accelerator.current_accelerator().type}:0"
w = tp.randn(512, 512, device=dev)
b = tp.zeros(512, device=dev)
x = tp.randn(8, 512, device=dev)


def forward(x):
    for _ in range(4):
        x = tp.gelu(x @ w + b)
    return x


for label, fn in (("mlp", lambda: forward(x)), ("add_", lambda: x.add_(1))):
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
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
