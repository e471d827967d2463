"""Device time per kernel, side by side with torch, through torch's profiler (CUPTI records
every kernel of the process, CuPy's and tensorplay's raw ones among them, and the kernels of
graph replays): the GPT-2-small decode step as a per-token graph (tensorplay's ``Graph`` and
``tp.compile``, torch's CUDAGraph), its 512-token prefill (with the host time of
tensorplay's), and the MLP training step (tensorplay eager and in one graph, torch eager).
Then the row kernels at the issue's shapes: ``layer_norm``, ``softmax`` and row sums at
(8192, 768) and (8192, 1024), device time per call beside torch's.

Then causal prompt attention (12 heads of 64, bf16, 32 to 512 queries): tensorplay's SDPA, the
same composed of products + masked_fill + softmax, and torch's SDPA.

Usage: ``python3 benchmarks/profile_kernels.py [decode|prefill|training|rows|attention ...]`` on
cuda (all of them without arguments)."""

import os
import sys
from collections import defaultdict

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import tensorplay as tp
from tensorplay.bench import decode as bench_decode
from tensorplay.bench.training import training_step

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def kernels(run, calls: int):
    """``{kernel name: (count, device us)}`` per call of ``run`` (CUPTI's kernel records)."""
    torch.cuda.synchronize()
    tp.accelerator.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
        tp.accelerator.synchronize()
    table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if str(event.device_type).endswith("CUDA") and event.device_time > 0:
            entry = table[event.name[:90]]
            entry[0] += 1 / calls
            entry[1] += event.device_time / calls
    return table


def show(title: str, table, top: int = 25) -> None:
    total = sum(us for _, us in table.values())
    count = sum(n for n, _ in table.values())
    print(f"\n=== {title}: {count:.0f} kernels, {total:.1f} us device time per call")
    for name, (n, us) in sorted(table.items(), key=lambda item: -item[1][1])[:top]:
        print(f"  {us:9.1f} us {n:6.1f}x  {name}")


def decode() -> None:
    gpt2 = bench_decode._example()
    config = gpt2.SMALL
    weights = gpt2.random_weights(config)
    device = tp.accelerator.current_accelerator()
    model = gpt2.GPT2(weights, config, device, tp.bfloat16)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, 32)
    per_token = gpt2.PerTokenGraph(model, prompt, 128)
    per_token.generate()
    state = per_token.state
    state.pos.fill_(200)   # a cache 200 long, as the middle of a 160-token run is
    show("tensorplay Graph per token (position 200)", kernels(per_token.graph.replay, 20))
    compiled = gpt2.CompiledPerToken(model, prompt, 128)
    compiled.generate()
    compiled.state.pos.fill_(200)
    show("tensorplay tp.compile per token (position 200)", kernels(compiled.step, 20))

    step, _, reset = bench_decode._torch_model(torch, weights, config)
    token = torch.zeros(1, dtype=torch.long, device="cuda")
    pos = torch.full((1,), 200, dtype=torch.long, device="cuda")
    graph, _ = bench_decode.torch_step_graph(torch, step, token, pos)
    graph.replay()
    show("torch CUDAGraph per token (position 200)", kernels(graph.replay, 20))


def prefill() -> None:
    """The 512-token prefill: device time per kernel beside torch's, and the host time of one
    eager prefill (cProfile's top functions)."""
    import cProfile
    import pstats
    import time
    gpt2 = bench_decode._example()
    config = gpt2.SMALL
    weights = gpt2.random_weights(config)
    device = tp.accelerator.current_accelerator()
    model = gpt2.GPT2(weights, config, device, tp.bfloat16)
    tokens = tp.tensor(np.random.default_rng(0).integers(0, config.vocab_size, 512),
                       device=device)
    with tp.no_grad():
        model.prefill(tokens)
        show("tensorplay prefill of 512 tokens", kernels(lambda: model.prefill(tokens), 3), 30)
        tp.accelerator.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            model.prefill(tokens)
        issued = time.perf_counter()
        tp.accelerator.synchronize()
        done = time.perf_counter()
        print(f"tensorplay prefill: {(issued - start) / 5 * 1e3:.2f} ms host, "
              f"{(done - start) / 5 * 1e3:.2f} ms total")
        profile = cProfile.Profile()
        profile.enable()
        model.prefill(tokens)
        tp.accelerator.synchronize()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    _, torch_prefill, _ = bench_decode._torch_model(torch, weights, config)
    torch_tokens = torch.tensor(tokens.cpu().numpy(), device="cuda")
    with torch.no_grad():
        torch_prefill(torch_tokens)
        show("torch prefill of 512 tokens", kernels(lambda: torch_prefill(torch_tokens), 3), 30)


def training() -> None:
    device = tp.device("cuda", 0)
    for batch in (8, 256):
        step, _, _ = training_step(tp, device, batch)
        for _ in range(5):
            step()
        show(f"tensorplay eager training step, batch {batch}", kernels(step, 20))
        graph = tp.accelerator.Graph()   # the bench's one-graph row: the step captured
        with graph:
            step()
        graph.replay()
        show(f"tensorplay training step in one Graph, batch {batch}", kernels(graph.replay, 20))
        torch_step, _, _ = training_step(torch, "cuda", batch)
        for _ in range(5):
            torch_step()
        show(f"torch eager training step, batch {batch}", kernels(torch_step, 20))


def attention() -> None:
    """Causal prompt attention at GPT-2-small's shape (12 heads of 64, bf16): tensorplay's SDPA
    (the tiled kernel), the same attention composed of products + masked_fill + softmax, and
    torch's SDPA, device time per call."""
    F = tp.nn.functional
    for length in (32, 128, 512):
        q, k, v = (tp.randn(1, 12, length, 64, device="cuda", dtype=tp.bfloat16)
                   for _ in range(3))
        tq, tk, tv = (torch.randn(1, 12, length, 64, device="cuda", dtype=torch.bfloat16)
                      for _ in range(3))
        keep = tp.ones(length, length, dtype=tp.bool, device="cuda").tril()

        def composed():
            scores = (q @ k.transpose(-1, -2)) * 0.125
            return scores.masked_fill(keep.logical_not(), float("-inf")).softmax(-1) @ v
        impls = {"tensorplay SDPA": lambda: F.scaled_dot_product_attention(q, k, v,
                                                                          is_causal=True),
                 "tensorplay composed": composed,
                 "torch SDPA": lambda: torch.nn.functional.scaled_dot_product_attention(
                     tq, tk, tv, is_causal=True)}
        for name, fn in impls.items():
            fn()
            table = kernels(fn, 20)
            total = sum(us for _, us in table.values())
            print(f"causal attention L={length:4d}: {name:20s} {total:8.1f} us  "
                  + ", ".join(f"{key[:40]} {us:.1f}" for key, (_, us) in table.items()))


def rows() -> None:
    F = tp.nn.functional
    for shape in ((8192, 768), (8192, 1024)):
        for dtype_name in ("float32", "bfloat16"):
            x = tp.randn(*shape, device="cuda", dtype=getattr(tp, dtype_name))
            w = tp.randn(shape[1], device="cuda", dtype=getattr(tp, dtype_name))
            b = tp.randn(shape[1], device="cuda", dtype=getattr(tp, dtype_name))
            tx = torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype_name))
            tw = torch.randn(shape[1], device="cuda", dtype=getattr(torch, dtype_name))
            tb = torch.randn(shape[1], device="cuda", dtype=getattr(torch, dtype_name))
            ops = {
                "layer_norm": (lambda: F.layer_norm(x, (shape[1],), w, b),
                               lambda: torch.nn.functional.layer_norm(tx, (shape[1],), tw, tb)),
                "softmax": (lambda: x.softmax(-1), lambda: tx.softmax(-1)),
                "sum(-1)": (lambda: x.sum(-1), lambda: tx.sum(-1)),
                "amax(-1)": (lambda: x.amax(-1), lambda: tx.amax(-1)),
                "mean(0)": (lambda: x.mean(0), lambda: tx.mean(0)),
            }
            for name, (ours, theirs) in ops.items():
                ours()
                theirs()
                mine = sum(us for _, us in kernels(ours, 20).values())
                peer = sum(us for _, us in kernels(theirs, 20).values())
                moved = x.numel() * x.element_size() * (2 if name in ("layer_norm", "softmax")
                                                        else 1)
                print(f"{name:10s} {shape} {dtype_name:8s}: tensorplay {mine:8.1f} us "
                      f"({moved / mine / 1e3:6.0f} GB/s), torch {peer:8.1f} us "
                      f"({moved / peer / 1e3:6.0f} GB/s): {peer / mine:5.2f} of torch's "
                      f"throughput")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["decode", "prefill", "training", "rows", "attention"]
    for part in parts:
        try:
            {"decode": decode, "prefill": prefill, "training": training, "rows": rows,
             "attention": attention}[part]()
        except Exception as error:  # noqa: BLE001 - one part failing still shows the others
            import traceback
            traceback.print_exc()
            print(f"{part} failed: {error!r}")
