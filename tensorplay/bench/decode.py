"""The GPT-2 cases (``../shared/workloads/gpt2_decode_peers.py`` defines the workload): a
GPT-2-small decode, bf16, batch 1, a KV cache of 1,024, a 32-token prompt and 128 greedy tokens,
random weights, in microseconds per token; and the forward of a 512-token prompt (prefill).

tensorplay runs ``examples/gpt2.py`` (the model a user reads; the bench loads it from the
checkout, and skips these rows where there is none): eager with the token read on the host
each step (as torch eager), one captured step replayed per token, and the whole generation in
one replay (the prompt in one prefill pass, then the token loop a captured ``while_loop``).
The peers: torch eager, torch's CUDA graph per token (static cache, gpt-fast style),
``torch.compile(mode="reduce-overhead")``, JAX ``jit`` per token and JAX's whole generation in
one ``lax.while_loop``. Each row's note gives the graph nodes per token of a captured step where
there is one."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import tensorplay as tp

from . import peers
from .timing import interleaved_loops, time_per_call

PROMPT, NEW = 32, 128
PREFILL = 512


def _example():
    """``examples/gpt2.py`` of this checkout, or None (an installed package has none)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "gpt2.py"
    if not path.is_file():
        return None
    name = "tensorplay_bench_gpt2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)   # type: ignore[arg-type]
    sys.modules[name] = module   # its dataclasses look their module up there
    spec.loader.exec_module(module)                  # type: ignore[union-attr]
    return module


_NODE = re.compile(r'^\s*"?(?!node\b|graph\b|edge\b)[A-Za-z_]\w*"?\s*\[', re.MULTILINE)


def graph_nodes(graph) -> int | None:
    """The nodes of a captured graph (its kernels, and any copy or event node), counted as the
    node definitions of its DOT dump (None without a dump)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "graph.dot")
        try:
            graph.debug_dump(path)
        except Exception:  # noqa: BLE001 - a backend without dumps: no count
            return None
        text = Path(path).read_text()
    return len(_NODE.findall(text)) or None


def decode_case(device: str, small: bool):
    """Rows ``{case, impl, us[, note]}`` of the decode case (microseconds per token) and the
    prefill case (microseconds per prefill)."""
    gpt2 = _example()
    on_gpu = peers._gpu()
    dtype = tp.bfloat16 if on_gpu else tp.float32
    size = "tiny" if small else "small"
    if gpt2 is None:
        yield {"case": f"GPT-2 {size} decode", "impl": "tensorplay", "us": None,
               "note": "skipped: examples/gpt2.py is not in this installation"}
        return
    config = gpt2.TINY if small else gpt2.SMALL
    new = 8 if small else NEW
    prompt_length = 4 if small else PROMPT
    case = f"GPT-2 {size} decode ({dtype.name}, cache {config.n_positions}), per token"
    prefill_case = (f"GPT-2 {size} prefill of {min(PREFILL, config.n_positions)} tokens "
                    f"({dtype.name})")
    weights = gpt2.random_weights(config)
    model = gpt2.GPT2(weights, config, device, dtype)
    prompt = np.random.default_rng(0).integers(0, config.vocab_size, prompt_length)
    sync = tp.accelerator.synchronize if tp.accelerator.is_available() else (lambda: None)

    def eager():
        model.reset()
        with tp.no_grad():
            for p in range(prompt_length - 1):
                model.step(tp.tensor([int(prompt[p])], device=device),
                           tp.tensor([p], device=device))
            token = int(prompt[-1])
            for p in range(prompt_length - 1, prompt_length - 1 + new):
                logits = model.step(tp.tensor([token], device=device),
                                    tp.tensor([p], device=device))
                token = int(logits.argmax(-1).item())
    torch = peers._torch_cuda() if not small else None
    torch_model = None
    if torch is not None:
        try:
            torch_model = _torch_model(torch, weights, config)
        except Exception:  # noqa: BLE001 - the torch rows then say why
            torch_model = None
    tokens = tp.tensor(np.resize(prompt, min(PREFILL, config.n_positions)), device=device)
    # the eager steps and prefills take turns with torch's, loop by loop (as the training
    # case's): all are host-bound, and the shared host's speed drifts during a run
    eager()
    eager_us = _in_turns(eager, sync, torch, torch_model and _torch_generate(
        torch, torch_model, prompt), 3, 1)
    turns = " (timed in turns with torch eager)" if torch_model is not None else ""
    yield {"case": case, "impl": "tensorplay eager (host argmax per token)",
           "us": eager_us["tensorplay"] / (new + prompt_length - 1),
           "note": f"prompt and generated tokens fed one by one; time per fed token{turns}"}
    if tp.accelerator.is_available():
        yield from _graph_rows(gpt2, model, prompt, prompt_length, new, case, sync)
    with tp.no_grad():
        model.prefill(tokens)
        prefill_us = _in_turns(lambda: model.prefill(tokens), sync, torch,
                               torch_model and _torch_prefill(torch, torch_model, prompt), 7, 10)
        yield {"case": prefill_case, "impl": "tensorplay eager", "us": prefill_us["tensorplay"],
               "note": f"after 10 warm-up calls (the allocator's cache settled){turns}"}
        if tp.accelerator.is_available():
            graph = tp.accelerator.Graph()
            with graph:
                model.prefill(tokens)
            graph.replay()
            yield {"case": prefill_case, "impl": "tensorplay prefill in one Graph",
                   "us": time_per_call(graph.replay, sync, 1, 5, 0),
                   "note": "the same 512 tokens: the whole forward replayed"}
            compiled: Any = tp.compile(model.prefill)   # a CompiledFunction
            compiled(tokens)
            compiled(tokens)
            yield {"case": prefill_case, "impl": "tensorplay tp.compile prefill",
                   "us": time_per_call(lambda: compiled(tokens), sync, 1, 5, 0),
                   "note": f"fused: {compiled.fused_products} products; "
                           f"{_compiled_nodes(compiled)} graph nodes"}
    if torch is not None:
        yield from _guarded(_torch_rows(torch, torch_model, prompt, case, prefill_case,
                                        eager_us.get("torch"), prefill_us.get("torch")),
                            case, "torch")
    if on_gpu and not small and peers._module("jax") is not None:
        yield from _guarded(_jax_rows(weights, config, prompt, case), case, "JAX")


def _graph_rows(gpt2, model, prompt, prompt_length: int, new: int, case: str, sync):
    """The captured modes' rows: each runs one generation to warm up (and capture), then is
    timed over whole generations."""
    fed = prompt_length - 1 + new
    per_token = gpt2.PerTokenGraph(model, prompt, new)
    compiled = gpt2.CompiledPerToken(model, prompt, new)
    whole = gpt2.WholeGeneration(model, prompt, new)
    for impl, runner, tokens, note in (
            ("tensorplay Graph per token", per_token, fed,
             lambda: f"one replay per fed token, the next token chosen inside; "
                     f"{graph_nodes(per_token.graph)} graph nodes per token"),
            ("tensorplay tp.compile per token", compiled, fed,
             lambda: f"fused: {compiled.step.fused_products} products; "
                     f"{_compiled_nodes(compiled.step)} graph nodes per token"),
            ("tensorplay whole generation in one replay", whole, new,
             lambda: "one replay: the prompt in one prefill pass, then the tokens in one "
                     "while node; time / generated tokens")):
        runner.generate()
        yield {"case": case, "impl": impl,
               "us": time_per_call(runner.generate, sync, 1, 3, 0) / tokens, "note": note()}


def _compiled_nodes(step) -> int | None:
    """The graph nodes of a compiled function's captured graph (None before a capture)."""
    entries = list(step._entries.values())
    return graph_nodes(entries[0].graph) if entries else None


def _guarded(rows, case: str, peer: str):
    """``rows`` until one fails; then a row saying why (a peer that fails is a note)."""
    try:
        yield from rows
    except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
        yield {"case": case, "impl": peer, "us": None,
               "note": f"skipped: {peer} failed: {peers.error_text(error)}"}


def _torch_model(torch, weights, config, device: str = "cuda", dtype=None):
    """``(step, prefill, reset)`` of the same GPT-2 in torch (bf16 on cuda by default)."""
    F = torch.nn.functional
    d, heads = config.n_embd, config.n_head
    head_dim = d // heads
    dtype = torch.bfloat16 if dtype is None else dtype

    def put(name):
        return torch.tensor(weights[name], device=device, dtype=dtype)
    wte, wpe, lnf = put("wte.weight"), put("wpe.weight"), (put("ln_f.weight"),
                                                          put("ln_f.bias"))
    layers = [{key: put(f"h.{i}.{key}") for key in (
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")}
        for i in range(config.n_layer)]
    shape = (config.n_layer, 1, heads, config.n_positions, head_dim)
    keys = torch.zeros(shape, device=device, dtype=dtype)
    values = torch.zeros(shape, device=device, dtype=dtype)
    positions = torch.arange(config.n_positions, device=device)

    def block(x, layer, i, attend):
        h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
        x = x + attend(h @ layer["attn.c_attn.weight"] + layer["attn.c_attn.bias"], i) \
            @ layer["attn.c_proj.weight"] + layer["attn.c_proj.bias"]
        h = F.layer_norm(x, (d,), layer["ln_2.weight"], layer["ln_2.bias"])
        return x + F.gelu(h @ layer["mlp.c_fc.weight"] + layer["mlp.c_fc.bias"],
                          approximate="tanh") @ layer["mlp.c_proj.weight"] \
            + layer["mlp.c_proj.bias"]

    def step(token, pos):
        mask = (positions <= pos).view(1, 1, 1, -1)

        def attend(qkv, i):
            q, k, v = qkv.view(1, 3, heads, head_dim).unbind(1)
            keys[i].index_copy_(2, pos, k.view(1, heads, 1, head_dim))
            values[i].index_copy_(2, pos, v.view(1, heads, 1, head_dim))
            return F.scaled_dot_product_attention(q.view(1, heads, 1, head_dim), keys[i],
                                                  values[i], attn_mask=mask).reshape(1, d)
        x = wte[token] + wpe[pos]
        for i, layer in enumerate(layers):
            x = block(x, layer, i, attend)
        return F.layer_norm(x, (d,), *lnf) @ wte.T

    def prefill(tokens):
        length = tokens.shape[0]

        def attend(qkv, i):
            q, k, v = qkv.view(length, 3, heads, head_dim).permute(1, 2, 0, 3).unbind(0)
            keys[i, 0, :, :length] = k
            values[i, 0, :, :length] = v
            out = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)
            return out[0].transpose(0, 1).reshape(length, d)
        x = wte[tokens] + wpe[:length]
        for i, layer in enumerate(layers):
            x = block(x, layer, i, attend)
        return F.layer_norm(x[-1:], (d,), *lnf) @ wte.T

    def reset():
        keys.zero_()
        values.zero_()
    return step, prefill, reset


def torch_step_graph(torch, step, token, pos):
    """``(graph, chosen)``: torch's decode ``step`` (from :func:`_torch_model`) and the argmax
    of its logits captured in one CUDA graph over the buffers ``token`` and ``pos``."""
    with torch.no_grad():
        return peers.torch_graph(torch, lambda: step(token, pos).argmax(-1))


def _in_turns(fn, sync, torch, torch_fn, repeats: int, warmup: int) -> dict:
    """Median microseconds per call of ``fn`` and, where given, of torch's ``torch_fn``,
    timed loop by loop in turns (:func:`.timing.interleaved_loops`): ``{"tensorplay": us[,
    "torch": us]}``."""
    impls = {"tensorplay": (fn, sync)}
    if torch_fn is not None:
        impls["torch"] = (torch_fn, torch.cuda.synchronize)
    try:
        loops = interleaved_loops(impls, 1, repeats, warmup)
    except Exception:  # noqa: BLE001 - torch failed: its rows say so; ours are timed alone
        if torch_fn is None:
            raise
        loops = interleaved_loops({"tensorplay": (fn, sync)}, 1, repeats, warmup)
    return {name: statistics.median(total) for name, (_, total) in loops.items()}


def _torch_generate(torch, model, prompt, fn=None):
    """A call feeding the prompt and generating ``NEW`` tokens with torch's decode ``step``
    of ``model`` (:func:`_torch_model`), or ``fn`` in its place, reading each token on the
    host."""
    step, _, reset = model
    fn = step if fn is None else fn

    def generate():
        reset()
        with torch.no_grad():
            for p in range(PROMPT - 1):
                fn(torch.tensor([int(prompt[p])], device="cuda"), torch.tensor([p], device="cuda"))
            token = int(prompt[-1])
            for p in range(PROMPT - 1, PROMPT - 1 + NEW):
                logits = fn(torch.tensor([token], device="cuda"), torch.tensor([p], device="cuda"))
                token = int(logits.argmax(-1).item())
    return generate


def _torch_prefill(torch, model, prompt):
    """A call of torch's eager prefill of the bench's prompt with ``model``
    (:func:`_torch_model`)."""
    prefill = model[1]
    tokens = torch.tensor(np.resize(prompt, PREFILL), device="cuda")

    def call():
        with torch.no_grad():
            return prefill(tokens)
    return call


def _torch_rows(torch, model, prompt, case, prefill_case, eager_us=None, prefill_us=None):
    """torch's rows; ``eager_us``/``prefill_us``: its eager generation (per call) and prefill,
    already timed in turns with tensorplay's (None: the model failed to build there)."""
    if model is None or eager_us is None or prefill_us is None:
        raise RuntimeError("the torch model could not be built or run eagerly")
    step, prefill, reset = model
    sync = torch.cuda.synchronize
    fed = PROMPT - 1 + NEW
    yield {"case": case, "impl": "torch eager (host argmax per token)",
           "us": eager_us / fed, "note": "time per fed token (timed in turns with tensorplay "
                                        "eager)"}
    token_buffer = torch.zeros(1, dtype=torch.long, device="cuda")
    pos_buffer = torch.zeros(1, dtype=torch.long, device="cuda")
    graph, chosen = torch_step_graph(torch, step, token_buffer, pos_buffer)

    def replays():
        reset()
        token = int(prompt[0])
        for p in range(fed):
            token_buffer.fill_(int(prompt[p]) if p < PROMPT else token)
            pos_buffer.fill_(p)
            graph.replay()
            if p >= PROMPT - 1:
                token = int(chosen.item())
    replays()
    yield {"case": case, "impl": "torch CUDAGraph per token (gpt-fast style)",
           "us": time_per_call(replays, sync, 1, 2, 0) / fed,
           "note": "host reads each chosen token, as gpt-fast"}
    impl = 'torch.compile(mode="reduce-overhead")'
    if os.environ.get("TENSORPLAY_BENCH_SKIP_TORCH_COMPILE"):
        yield {"case": case, "impl": impl, "us": None,
               "note": "skipped: TENSORPLAY_BENCH_SKIP_TORCH_COMPILE is set"}
    else:
        try:
            compiled = _torch_generate(torch, model, prompt, torch.compile(
                step, mode="reduce-overhead", fullgraph=True))
            for _ in range(2):
                compiled()
            yield {"case": case, "impl": impl, "us": time_per_call(compiled, sync, 1, 2, 0) / fed}
        except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
            with contextlib.suppress(Exception):
                torch._dynamo.reset()
            yield {"case": case, "impl": impl, "us": None,
                   "note": f"skipped: torch.compile failed: {peers.error_text(error)}"}
    tokens = torch.tensor(np.resize(prompt, PREFILL), device="cuda")
    yield {"case": prefill_case, "impl": "torch eager (SDPA, flash attention)",
           "us": prefill_us, "note": "timed in turns with tensorplay eager"}
    with torch.no_grad():
        graph, _ = peers.torch_graph(torch, lambda: prefill(tokens))
    graph.replay()
    yield {"case": prefill_case, "impl": "torch prefill in one CUDAGraph",
           "us": time_per_call(graph.replay, sync, 1, 5, 0)}


def _jax_rows(weights, config, prompt, case):
    try:
        import jax
        import jax.numpy as jnp
    except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
        yield {"case": case, "impl": "JAX", "us": None,
               "note": f"skipped: {peers.error_text(error)}"}
        return
    if jax.default_backend() not in ("gpu", "cuda"):
        yield {"case": case, "impl": "JAX", "us": None,
               "note": f"skipped: JAX's default backend is {jax.default_backend()!r}"}
        return
    d, heads, layers = config.n_embd, config.n_head, config.n_layer
    head_dim, context = d // heads, config.n_positions
    dt = jnp.bfloat16
    params = {name: jnp.asarray(value, dtype=dt) for name, value in weights.items()}

    def norm(x, g, b):
        x32 = x.astype(jnp.float32)
        mean = x32.mean(-1, keepdims=True)
        var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
        return ((x32 - mean) / jnp.sqrt(var + 1e-5) * g + b).astype(dt)

    def step(params, keys, values, token, pos):
        x = params["wte.weight"][token] + params["wpe.weight"][pos]
        visible = jnp.arange(context) <= pos
        for i in range(layers):
            p = f"h.{i}."
            h = norm(x, params[p + "ln_1.weight"], params[p + "ln_1.bias"])
            q, k, v = (h @ params[p + "attn.c_attn.weight"]
                       + params[p + "attn.c_attn.bias"]).reshape(3, heads, head_dim)
            keys = keys.at[i, :, pos].set(k)
            values = values.at[i, :, pos].set(v)
            scores = jnp.einsum("hd,htd->ht", q, keys[i]).astype(jnp.float32) \
                / math.sqrt(head_dim)
            scores = jnp.where(visible, scores, -jnp.inf)
            attended = jnp.einsum("ht,htd->hd", jax.nn.softmax(scores, -1).astype(dt), values[i])
            x = x + attended.reshape(d) @ params[p + "attn.c_proj.weight"] \
                + params[p + "attn.c_proj.bias"]
            h = norm(x, params[p + "ln_2.weight"], params[p + "ln_2.bias"])
            x = x + jax.nn.gelu(h @ params[p + "mlp.c_fc.weight"] + params[p + "mlp.c_fc.bias"],
                                approximate=True) @ params[p + "mlp.c_proj.weight"] \
                + params[p + "mlp.c_proj.bias"]
        x = norm(x, params["ln_f.weight"], params["ln_f.bias"])
        return x @ params["wte.weight"].T, keys, values

    jitted = jax.jit(step, donate_argnums=(1, 2))
    fed = PROMPT - 1 + NEW

    def per_token():
        keys = jnp.zeros((layers, heads, context, head_dim), dt)
        values = jnp.zeros((layers, heads, context, head_dim), dt)
        token = int(prompt[0])
        for p in range(fed):
            logits, keys, values = jitted(params, keys, values,
                                          int(prompt[p]) if p < PROMPT else token, p)
            if p + 1 >= PROMPT:
                token = int(jnp.argmax(logits))
        keys.block_until_ready()
    try:
        per_token()
        yield {"case": case, "impl": "JAX jit per token (host argmax)",
               "us": time_per_call(per_token, lambda: None, 1, 2, 0) / fed}

        @jax.jit
        def whole(params, prompt_array):
            keys = jnp.zeros((layers, heads, context, head_dim), dt)
            values = jnp.zeros((layers, heads, context, head_dim), dt)
            out = jnp.zeros(PROMPT + NEW, jnp.int32).at[:PROMPT].set(prompt_array)

            def body(carry):
                p, keys, values, out = carry
                logits, keys, values = step(params, keys, values, out[p], p)
                following = jnp.where(p + 1 >= PROMPT, jnp.argmax(logits).astype(jnp.int32),
                                      out[p + 1])
                return p + 1, keys, values, out.at[p + 1].set(following)
            return jax.lax.while_loop(lambda c: c[0] < fed, body, (0, keys, values, out))[3]
        prompt_array = jnp.asarray(prompt, jnp.int32)
        whole(params, prompt_array).block_until_ready()
        yield {"case": case, "impl": "JAX whole generation in one lax.while_loop",
               "us": time_per_call(lambda: whole(params, prompt_array).block_until_ready(),
                                   lambda: None, 1, 3, 0) / NEW,
               "note": "prompt and generation; time / generated tokens"}
    except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
        yield {"case": case, "impl": "JAX", "us": None,
               "note": f"skipped: JAX failed: {peers.error_text(error)}"}
