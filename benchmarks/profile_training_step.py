"""Where an eager training step's host time goes: the bench's MLP step (4 x 512, GELU, MSE,
AdamW) timed, then profiled with cProfile (the functions with the most time of their own).
Usage: ``python3 benchmarks/profile_training_step.py [batch]`` on the selected accelerator."""

import cProfile
import pstats
import sys
import time

import tensorplay as tp
from tensorplay.bench.training import LAYERS, WIDTH, training_step


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
    phases = dict.fromkeys(("zero_grad", "forward", "backward", "optimizer step"), 0.0)
    _, params, optimizer = training_step(tp, device, batch)
    data = tp.randn(batch, WIDTH, device=device)
    target = tp.randn(batch, WIDTH, device=device)
    F = tp.nn.functional
    for round in range(55):
        marks = [time.perf_counter()]
        optimizer.zero_grad(set_to_none=False)
        marks.append(time.perf_counter())
        h = data
        for i in range(LAYERS):
            h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
        loss = F.mse_loss(h, target)
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        if round >= 5:
            for name, begin, end in zip(phases, marks, marks[1:]):
                phases[name] += (end - begin) / 50
    tp.accelerator.synchronize()
    print("host time per phase: " + ", ".join(f"{name} {seconds * 1e6:.1f} us"
                                                for name, seconds in phases.items()))
    with tp.no_grad():
        start = time.perf_counter()
        for _ in range(50):
            h = data
            for i in range(LAYERS):
                h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
            F.mse_loss(h, target)
        print(f"the forward without autograd: {(time.perf_counter() - start) / 50 * 1e6:.1f} "
              f"us host")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        step()
    profile.disable()
    tp.accelerator.synchronize()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(35)
    # the forward (recorded) and the backward alone: calls per step by function
    for phase in ("forward", "backward"):
        profile = cProfile.Profile()
        for _ in range(20):
            optimizer.zero_grad(set_to_none=False)
            if phase == "forward":
                profile.enable()
            h = data
            for i in range(LAYERS):
                h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
            loss = F.mse_loss(h, target)
            if phase == "backward":
                profile.enable()
            else:
                profile.disable()
            loss.backward()
            profile.disable()
            optimizer.step()
        tp.accelerator.synchronize()
        stats = pstats.Stats(profile)
        print(f"--- the {phase} alone, 20 steps: {stats.total_calls / 20:.0f} calls per step")
        stats.sort_stats("ncalls").print_stats(40)


if __name__ == "__main__":
    main()
