"""Where the eager GPT-2 decode step's time goes between the model step alone and the bench's
loop (a token tensor made per token, the chosen token read back per token), on the selected
accelerator, GPT-2-small in bf16 (cuda) or float32: each variant's milliseconds per token.

Usage: ``python3 benchmarks/eager_decode_probe.py [tokens]``."""

import gc
import sys
import time

import tensorplay as tp
from gpt2_probe import probe_model


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    model, sync = probe_model()
    device = model.device
    token = tp.tensor([1], device=device)
    positions = [tp.tensor([p], device=device) for p in range(count)]

    def step_only():
        for pos in positions:
            model.step(token, pos)

    def with_argmax():
        for pos in positions:
            model.step(token, pos).argmax(-1)

    def with_new_tensors():
        for p in range(count):
            model.step(tp.tensor([1], device=device), tp.tensor([p], device=device)).argmax(-1)

    def with_item():
        chosen = 1
        for p in range(count):
            logits = model.step(tp.tensor([chosen % 50000], device=device),
                                tp.tensor([p], device=device))
            chosen = int(logits.argmax(-1).item())

    for name, fn in (("step only", step_only), ("step + argmax", with_argmax),
                     ("+ two tp.tensor per token", with_new_tensors),
                     ("+ .item() per token (the bench's loop)", with_item)):
        for grad in (True, False):
            with tp.set_grad_enabled(grad):
                fn()
                sync()
                best = float("inf")
                for _ in range(3):
                    start = time.perf_counter()
                    fn()
                    sync()
                    best = min(best, time.perf_counter() - start)
            print(f"{name:42s} grad {'on ' if grad else 'off'}: {best / count * 1e3:7.3f} ms "
                  f"per token", flush=True)
    gc.disable()
    with tp.no_grad():
        with_item()
        sync()
        start = time.perf_counter()
        with_item()
        sync()
    gc.enable()
    print(f"{'the bench loop, gc disabled':42s} grad off: "
          f"{(time.perf_counter() - start) / count * 1e3:7.3f} ms per token")


if __name__ == "__main__":
    main()
