"""Where a GPT-2 decode step's time goes (``examples/gpt2.py``, GPT-2-small shape, bf16 on cuda,
float32 elsewhere, random weights): the eager step's host and total time per token, the
per-token graph and whole-generation modes, the captured step's kernel count, then the eager
step under cProfile (the functions with the most time of their own, and the public ops by
cumulative time).

Usage: ``python3 benchmarks/profile_gpt2_decode.py [--tiny] [--tokens N]`` on the selected
accelerator."""

import argparse
import cProfile
import pstats
import time

import numpy as np

import tensorplay as tp
from gpt2_probe import gpt2, probe_model
from tensorplay.bench.decode import graph_nodes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    model, sync = probe_model(args.tiny)
    config, device, dtype = model.config, model.device, model.dtype
    token = tp.tensor([1], device=device)
    positions = [tp.tensor([p], device=device) for p in range(args.tokens)]

    def eager_tokens():
        for pos in positions:
            model.step(token, pos).argmax(-1)

    eager_tokens()
    sync()
    start = time.perf_counter()
    eager_tokens()
    issued = time.perf_counter()
    sync()
    done = time.perf_counter()
    n = len(positions)
    print(f"{config} {dtype} on {device}")
    print(f"eager step: {(issued - start) / n * 1e3:.3f} ms host, "
          f"{(done - start) / n * 1e3:.3f} ms total per token")

    prompt = np.random.default_rng(1).integers(0, config.vocab_size, 8 if args.tiny else 32)
    if device is not None:
        for name, mode in (("per-token graph", gpt2.PerTokenGraph),
                           ("whole generation", gpt2.WholeGeneration)):
            runner = mode(model, prompt, args.tokens)
            runner.generate()
            sync()
            start = time.perf_counter()
            tokens = runner.generate()
            sync()
            elapsed = time.perf_counter() - start
            total = len(tokens) + len(prompt) - 1
            print(f"{name}: {elapsed / total * 1e3:.3f} ms per fed token ({total} fed)")
            print(f"  graph nodes: {graph_nodes(runner.graph)}")

    profile = cProfile.Profile()
    profile.enable()
    eager_tokens()
    sync()
    profile.disable()
    stats = pstats.Stats(profile)
    print(f"\n=== eager, {n} tokens: functions by own time")
    stats.sort_stats("tottime").print_stats(40)
    print(f"\n=== eager, {n} tokens: by cumulative time")
    stats.sort_stats("cumulative").print_stats(60)


if __name__ == "__main__":
    main()
