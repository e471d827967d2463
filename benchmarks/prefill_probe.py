"""Where the eager GPT-2 prefill's host time goes, statement by statement (``examples/gpt2.py``,
GPT-2-small shape, bf16 on cuda, float32 elsewhere, random weights, a 512-token prompt): each
statement of the prefill's layer loop timed on the host (no synchronization between them),
the one-token decode step's statements beside it, and the whole prefill with the garbage
collector as the process has it, disabled, and after ``gc.freeze()`` (the bench runs torch and
JAX in the same process, whose objects a full collection walks). Usage:
``python3 benchmarks/prefill_probe.py [--tiny]`` on the selected accelerator."""

import argparse
import cProfile
import gc
import pstats
import time
from collections import defaultdict

import tensorplay as tp
from gpt2_probe import probe_model
from tensorplay.bench.timing import timed_loops

F = tp.nn.functional


class Marks:
    """Host time between consecutive ``mark(label)`` calls, summed per label."""

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)
        self.last = time.perf_counter()

    def start(self):
        self.last = time.perf_counter()

    def __call__(self, label: str) -> None:
        now = time.perf_counter()
        self.totals[label] += now - self.last
        self.last = now


def prefill_marked(model, tokens, mark):
    """``GPT2.prefill``'s statements, with a mark after each."""
    config = model.config
    d, heads = config.n_embd, config.n_head
    head_dim = d // heads
    length = tokens.shape[0]
    mark.start()
    x = model.wte.index_select(0, tokens) + model.wpe[:length]
    mark("embed")
    for i, layer in enumerate(model.layers):
        h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
        mark("ln_1")
        qkv = tp.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
        mark("addmm qkv")
        parts = qkv.view(length, 3, heads, head_dim).permute(1, 2, 0, 3)
        mark("view+permute")
        model.layer_cache[i][:, 0, :, :length] = parts[1:]
        mark("cache write")
        q, k, v = parts.unbind(0)
        mark("unbind")
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        mark("unsqueeze x3")
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mark("sdpa causal")
        merged = attended[0].transpose(0, 1).reshape(length, d)
        mark("[0].transpose.reshape")
        projected = tp.addmm(layer["attn.c_proj.bias"], merged, layer["attn.c_proj.weight"])
        mark("addmm proj")
        x = x + projected
        mark("residual add")
        h = F.layer_norm(x, (d,), layer["ln_2.weight"], layer["ln_2.bias"])
        mark("ln_2")
        up = tp.addmm(layer["mlp.c_fc.bias"], h, layer["mlp.c_fc.weight"])
        mark("addmm fc")
        hidden = F.gelu(up, approximate="tanh")
        mark("gelu")
        down = tp.addmm(layer["mlp.c_proj.bias"], hidden, layer["mlp.c_proj.weight"])
        mark("addmm mlp proj")
        x = x + down
        mark("residual add")
    x = F.layer_norm(x[length - 1:], (d,), *model.ln_f)
    mark("ln_f")
    logits = (x @ model.wte_t).float()
    mark("logits")
    return logits


def step_marked(model, token, pos, mark):
    """``GPT2.step``'s statements, with a mark after each."""
    config = model.config
    d, heads = config.n_embd, config.n_head
    head_dim = d // heads
    mark.start()
    x = model.wte.index_select(0, token) + model.wpe.index_select(0, pos)
    mark("embed")
    visible = (model.positions <= pos).view(1, 1, 1, config.n_positions)
    mark("mask")
    for i, layer in enumerate(model.layers):
        h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
        mark("ln_1")
        qkv = tp.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
        mark("addmm qkv")
        parts = qkv.view(3, 1, heads, 1, head_dim)
        mark("view")
        model.layer_cache[i].index_copy_(3, pos, parts[1:])
        mark("cache index_copy_")
        attended = F.scaled_dot_product_attention(parts[0], model.keys[i], model.values[i],
                                                  attn_mask=visible)
        mark("sdpa")
        x = x + tp.addmm(layer["attn.c_proj.bias"], attended.view(1, d),
                         layer["attn.c_proj.weight"])
        mark("addmm proj + add")
        h = F.layer_norm(x, (d,), layer["ln_2.weight"], layer["ln_2.bias"])
        mark("ln_2")
        hidden = F.gelu(tp.addmm(layer["mlp.c_fc.bias"], h, layer["mlp.c_fc.weight"]),
                        approximate="tanh")
        mark("addmm fc + gelu")
        x = x + tp.addmm(layer["mlp.c_proj.bias"], hidden, layer["mlp.c_proj.weight"])
        mark("addmm mlp proj + add")
    x = F.layer_norm(x, (d,), *model.ln_f)
    mark("ln_f")
    logits = (x @ model.wte_t).float()
    mark("logits")
    return logits


def profile_statements(model, tokens, sync) -> None:
    """cProfile of the prefill and of single statements of it (200 times each): the functions
    with the most time of their own."""
    config = model.config
    d, heads = config.n_embd, config.n_head
    length = tokens.shape[0]
    layer = model.layers[0]
    x = model.wte.index_select(0, tokens) + model.wpe[:length]
    h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
    qkv = tp.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
    parts = qkv.view(length, 3, heads, d // heads).permute(1, 2, 0, 3)
    q, k, v = (t.unsqueeze(0) for t in parts.unbind(0))
    attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    token, pos = tp.tensor([1], device=tokens.device), tp.tensor([3], device=tokens.device)
    one = tp.addmm(layer["attn.c_attn.bias"], h[:1], layer["attn.c_attn.weight"])
    query = one.view(3, 1, heads, 1, d // heads)[0]
    visible = (model.positions <= pos).view(1, 1, 1, config.n_positions)
    statements = {
        "whole prefill": lambda: model.prefill(tokens),
        "whole decode step": lambda: model.step(token, pos),
        "decode sdpa": lambda: F.scaled_dot_product_attention(query, model.keys[0],
                                                              model.values[0],
                                                              attn_mask=visible),
        "sdpa causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "[0].transpose(0, 1).reshape": lambda: attended[0].transpose(0, 1).reshape(length, d),
        "unbind": lambda: parts.unbind(0),
        "x + h": lambda: x + h,
        "layer_norm": lambda: F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"]),
    }
    try:
        import cupy
        statements["cupy.empty of the attention's scores"] = \
            lambda: cupy.empty((1, heads, length, length), "float32")
    except ImportError:
        pass
    for label, fn in statements.items():
        calls = 10 if label.startswith("whole") else 200
        for _ in range(3):
            fn()
        sync()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            fn()
        profile.disable()
        sync()
        stats = pstats.Stats(profile)
        print(f"\n--- {label}: {stats.total_calls / calls:.0f} calls per statement, "
              f"{stats.total_tt / calls * 1e6:.1f} us per statement under cProfile")
        stats.sort_stats("tottime").print_stats(30 if label.startswith("whole") else 14)


def table(title: str, marks: Marks, calls: int) -> None:
    total = sum(marks.totals.values())
    print(f"\n{title}: {total / calls * 1e6:.1f} us host per call")
    for label, seconds in sorted(marks.totals.items(), key=lambda kv: -kv[1]):
        print(f"  {label:28s} {seconds / calls * 1e6:9.1f} us  {seconds / total:6.1%}")


def timed(fn, sync, calls: int) -> tuple[float, float]:
    """(host, total) microseconds per call, each the best of five loops."""
    host, total = timed_loops(fn, sync, calls, 5, 0)
    return min(host), min(total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    model, sync = probe_model(args.tiny)
    config, device, dtype = model.config, model.device, model.dtype
    length = min(512, config.n_positions)
    tokens = tp.tensor([i % config.vocab_size for i in range(length)], device=device)
    token, pos = tp.tensor([1], device=device), tp.tensor([3], device=device)
    print(f"{config} {dtype} on {device}, prefill of {length} tokens")
    try:
        from numpy._core._ufunc_config import _extobj_contextvar  # noqa: F401
        print("NumPy's error state: its context variable")
    except ImportError:
        print("NumPy's error state: np.seterr (no _extobj_contextvar)")
    with tp.no_grad():
        for _ in range(5):
            model.prefill(tokens)
            model.step(token, pos)
        sync()
        host, total = timed(lambda: model.prefill(tokens), sync, args.calls)
        print(f"prefill, gc as it is: {host:.1f} us host, {total:.1f} us total")
        host, total = timed(lambda: model.step(token, pos), sync, args.calls * 4)
        print(f"decode step, gc as it is: {host:.1f} us host, {total:.1f} us total")
        gc.disable()
        host, total = timed(lambda: model.prefill(tokens), sync, args.calls)
        print(f"prefill, gc disabled: {host:.1f} us host, {total:.1f} us total")
        gc.enable()
        print(f"gc counts {gc.get_count()}, thresholds {gc.get_threshold()}, "
              f"tracked objects {len(gc.get_objects())}")
        for label, fn in (("prefill", lambda: model.prefill(tokens)),
                          ("decode step", lambda: model.step(token, pos))):
            before = gc.get_stats()
            fn()
            after = gc.get_stats()
            print(f"{label}: collections per call by generation "
                  f"{[a['collections'] - b['collections'] for a, b in zip(after, before)]}")
        prefill_marks, step_marks = Marks(), Marks()
        for _ in range(2):
            prefill_marked(model, tokens, Marks())
        sync()
        for _ in range(args.calls):
            prefill_marked(model, tokens, prefill_marks)
            sync()
        for _ in range(args.calls * 4):
            step_marked(model, token, pos, step_marks)
            sync()
        table(f"prefill of {length} tokens, per statement (summed over the layers)",
              prefill_marks, args.calls)
        table("decode step, per statement (summed over the layers)", step_marks, args.calls * 4)
        profile_statements(model, tokens, sync)
        try:
            import jax  # noqa: F401
            import torch  # noqa: F401
        except ImportError:
            return
        gc.collect()
        print(f"\nafter importing torch and JAX: tracked objects {len(gc.get_objects())}")
        host, total = timed(lambda: model.prefill(tokens), sync, args.calls)
        print(f"prefill, gc as it is: {host:.1f} us host, {total:.1f} us total")
        gc.freeze()
        host, total = timed(lambda: model.prefill(tokens), sync, args.calls)
        print(f"prefill, after gc.freeze(): {host:.1f} us host, {total:.1f} us total")
        gc.unfreeze()


if __name__ == "__main__":
    main()
