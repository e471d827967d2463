"""Where an eager training step's host time goes: the bench's MLP step (4 x 512, GELU, MSE,
AdamW) timed, then profiled with cProfile (the functions with the most time of their own).
Usage: ``python3 benchmarks/profile_training_step.py [batch]`` on the selected accelerator."""

import cProfile
import pstats
import sys
import time

import tensorplay as tp
from tensorplay.bench.training import training_step


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    accelerator = tp.accelerator.current_accelerator()
    device = tp.device(accelerator.type, 0) if accelerator is not None else tp.device("cpu")
    step, _, _ = training_step(tp, device, batch)
    for _ in range(5):
        step()
    tp.accelerator.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        step()
    issued = time.perf_counter()
    tp.accelerator.synchronize()
    done = time.perf_counter()
    print(f"eager step on {device}, batch {batch}: {(issued - start) / 50 * 1e6:.1f} us host, "
          f"{(done - start) / 50 * 1e6:.1f} us total per step")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        step()
    profile.disable()
    tp.accelerator.synchronize()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(35)


if __name__ == "__main__":
    main()
