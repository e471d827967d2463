"""Host cost of each op of the bench's MLP training step (4 x 512, float32, batch 8), alone:
on plain tensors, on the parameters (which require grad) under ``no_grad``, and recorded by
autograd; torch's beside each. Microseconds per call, 300 calls back to back then one
synchronization, best of 5, all in one process. Usage: ``python3 benchmarks/training_ops_probe.py
[batch]`` on cuda."""

import sys

import numpy as np

import tensorplay as tp
from tensorplay.bench.timing import timed_loops


def per_call(fn, sync, calls: int = 300, repeats: int = 5) -> float:
    """The best of ``repeats`` loops of ``calls`` calls, each loop ending in ``sync``."""
    return min(timed_loops(fn, sync, calls, repeats, 20)[1])


def ops(lib, device, batch: int, grad: bool):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((batch, 512), dtype=np.float32), device=device)
    t = lib.tensor(rng.standard_normal((batch, 512), dtype=np.float32), device=device)
    w = lib.tensor(rng.standard_normal((512, 512), dtype=np.float32), device=device,
                   requires_grad=grad)
    b = lib.tensor(np.zeros(512, np.float32), device=device, requires_grad=grad)
    y = (x @ w).detach()
    F = lib.nn.functional
    return {"x @ w": lambda: x @ w, "y + b": lambda: y + b, "gelu(y)": lambda: F.gelu(y),
            "mse_loss(y, t)": lambda: F.mse_loss(y, t),
            "gelu(x @ w + b)": lambda: F.gelu(x @ w + b)}


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rows = {}
    for label, grad, mode in (("plain", False, None), ("params, no_grad", True, "off"),
                              ("params, recorded", True, "on")):
        table = ops(tp, "cuda", batch, grad)
        for name, fn in table.items():
            if mode == "off":
                with tp.no_grad():
                    rows.setdefault(name, {})[label] = per_call(fn, tp.accelerator.synchronize)
            else:
                rows.setdefault(name, {})[label] = per_call(fn, tp.accelerator.synchronize)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        for label, grad, mode in (("torch plain", False, None),
                                  ("torch recorded", True, "on")):
            for name, fn in ops(torch, "cuda", batch, grad).items():
                rows[name][label] = per_call(fn, torch.cuda.synchronize)
    labels = list(next(iter(rows.values())))
    print(f"host us per call, batch {batch}: " + " | ".join(labels))
    for name, cells in rows.items():
        print(f"{name:18s}" + "".join(f"{cells.get(label, float('nan')):>18.2f}"
                                      for label in labels))


if __name__ == "__main__":
    main()
