"""Where the eager training step's host time goes, beside torch's: the bench's MLP step (4 x
512, GELU, MSE, AdamW, float32) split into its phases (zero_grad, each forward op, backward,
optimizer step) for tensorplay and torch, the two taking turns step by step, then tensorplay's
backward node by node. Host microseconds (the clock stops before any synchronization), the
median over the timed steps. Usage: ``python3 benchmarks/training_step_breakdown.py [batch ...]``
on cuda (torch's columns where torch is importable)."""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import tensorplay as tp
from tensorplay._tensor import autograd as _autograd
from tensorplay.bench.training import LAYERS, _initial, training_step


def _phased(lib, device, batch: int):
    """A step of ``lib`` that notes the host time of each phase into the dict it is given."""
    _, params, optimizer = training_step(lib, device, batch)
    _, _, x, y = _initial(batch)
    data, target = lib.tensor(x, device=device), lib.tensor(y, device=device)
    F = lib.nn.functional
    clock = time.perf_counter

    def phased(times: dict) -> None:
        t0 = clock()
        optimizer.zero_grad(set_to_none=False)
        t1 = clock()
        times["zero_grad"].append(t1 - t0)
        h = data
        for i in range(LAYERS):
            a = clock()
            p = h @ params[2 * i]
            b = clock()
            q = p + params[2 * i + 1]
            c = clock()
            h = F.gelu(q)
            d = clock()
            times["forward: x @ w"].append(b - a)
            times["forward: + b"].append(c - b)
            times["forward: gelu"].append(d - c)
        a = clock()
        loss = F.mse_loss(h, target)
        b = clock()
        loss.backward()
        c = clock()
        optimizer.step()
        d = clock()
        times["forward: mse_loss"].append(b - a)
        times["backward"].append(c - b)
        times["optimizer step"].append(d - c)
        times["whole step"].append(d - t0)
    return phased


def _node_times(device, batch: int, steps: int) -> dict:
    """Host time of each backward node's ``apply`` (by op), over ``steps`` tensorplay steps."""
    times: dict = defaultdict(list)
    # the apply of op nodes, and of the leaves' sinks (a class of its own), each timed
    originals = {_autograd.Node: _autograd.Node.apply,
                 _autograd.AccumulateGrad: _autograd.AccumulateGrad.apply}

    def timed(apply):
        def timed_apply(node, grads):
            start = time.perf_counter()
            out = apply(node, grads)
            times[node.op].append(time.perf_counter() - start)
            return out
        return timed_apply

    phased = _phased(tp, device, batch)
    scratch: dict = defaultdict(list)
    for _ in range(5):
        phased(scratch)
    for cls, apply in originals.items():
        cls.apply = timed(apply)   # type: ignore[method-assign]
    try:
        for _ in range(steps):
            phased(scratch)
    finally:
        for cls, apply in originals.items():
            cls.apply = apply   # type: ignore[method-assign]
    tp.accelerator.synchronize()
    return times


def main() -> None:
    batches = [int(arg) for arg in sys.argv[1:]] or [8, 256]
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    accelerator = tp.accelerator.current_accelerator()
    device = tp.device(accelerator.type, 0) if accelerator is not None else tp.device("cpu")
    for batch in batches:
        libs = {"tensorplay": (tp, device, tp.accelerator.synchronize)}
        if torch is not None:
            libs["torch"] = (torch, "cuda", torch.cuda.synchronize)
        steps = {name: _phased(lib, dev, batch) for name, (lib, dev, _) in libs.items()}
        times = {name: defaultdict(list) for name in libs}
        for _ in range(10):
            for name, fn in steps.items():
                fn(defaultdict(list))
        for _ in range(300):   # in turns, step by step (the host's speed drifts)
            for name, fn in steps.items():
                fn(times[name])
        for _, _, sync in libs.values():
            sync()
        print(f"\neager MLP training step on {device}, batch {batch}: host us per phase "
              f"(median of 300 steps; per-op rows per call)")
        print(f"{'phase':24s}" + "".join(f"{name:>12s}" for name in libs) +
              ("       ratio" if torch is not None else ""))
        for phase in times["tensorplay"]:
            cells = [statistics.median(times[name][phase]) * 1e6 for name in libs]
            ratio = f"{cells[0] / cells[1]:>11.2f}x" if len(cells) == 2 else ""
            print(f"{phase:24s}" + "".join(f"{c:12.1f}" for c in cells) + ratio)
        nodes = _node_times(device, batch, 100)
        print(f"tensorplay backward by node, batch {batch}: host us per call (median), calls "
              f"per step")
        for op, values in sorted(nodes.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {op:22s}{statistics.median(values) * 1e6:10.1f}{len(values) / 100:8.1f}")


if __name__ == "__main__":
    main()
