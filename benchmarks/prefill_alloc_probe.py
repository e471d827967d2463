"""Whether the eager GPT-2 prefill's host time depends on what ran before it in the process
(the bench runs the training case first): the prefill timed alone, then after the bench's
training-step case, with the allocator's device allocations and frees per call. Usage:
``python3 benchmarks/prefill_alloc_probe.py`` on cuda."""

import os
import sys
import time

import numpy as np

import tensorplay as tp
from tensorplay.bench.training import training_step_case

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import gpt2  # noqa: E402


def prefill_rows(label: str, model, tokens) -> None:
    with tp.no_grad():
        for _ in range(10):
            model.prefill(tokens)
        tp.accelerator.synchronize()
        before = tp.accelerator.memory_stats()
        start = time.perf_counter()
        for _ in range(20):
            model.prefill(tokens)
        tp.accelerator.synchronize()
        elapsed = (time.perf_counter() - start) / 20 * 1e3
        after = tp.accelerator.memory_stats()
    counts = {key: after.get(key, 0) - before.get(key, 0)
              for key in ("num_device_alloc", "num_device_free", "num_alloc_retries")}
    print(f"{label}: eager prefill {elapsed:.2f} ms per call; over 20 calls {counts}; "
          f"reserved {tp.accelerator.memory_reserved() / 2**20:.0f} MiB", flush=True)


def main() -> None:
    config = gpt2.SMALL
    device = tp.device("cuda", 0)
    model = gpt2.GPT2(gpt2.random_weights(config), config, device, tp.bfloat16)
    tokens = tp.tensor(np.arange(512) % 1000, device=device)
    prefill_rows("alone", model, tokens)
    for batch in (8, 256):
        for row in training_step_case("cuda:0", batch, 100):
            pass
    prefill_rows("after the training case", model, tokens)
    prefill_rows("again", model, tokens)


if __name__ == "__main__":
    main()
