"""GPT-2 written with tensorplay: a decode step over a static KV cache, and three ways to run
the token loop.

- eager: one Python iteration per token;
- per-token graph: one captured step (with the choice of the next token) replayed per token;
- compiled per token: the same step through ``tp.compile``, whose fusion folds each product's
  bias, GELU and residual add into the product;
- whole generation: the prompt and every generated token in ONE replay: the prompt in one
  pass (``GPT2.prefill``), then the token loop as a ``tp.while_loop`` captured into a while
  node: no host round trip per token.

Every mode chooses tokens on the device (argmax, or temperature / top-k sampling from the
device's generator, which draws fresh numbers on every replay), stops at a length limit or at an
end-of-text token, and gives the same tokens for the same seed as the eager loop that feeds the
prompt the same way (``generate_eager(..., prefill=True)`` for the whole generation: each way
draws its random numbers at different steps).

Weights: a Hugging Face GPT-2 ``model.safetensors`` by its tensor names (``wte.weight``,
``h.0.attn.c_attn.weight`` ... with their Conv1D ``(in, out)`` layout; a ``transformer.``
prefix is accepted), or random ones. Run it with::

    python3 examples/gpt2.py [--weights model.safetensors] [--tiny] [--tokens 128]

(``TENSORPLAY_ACCELERATOR=sim`` and ``--tiny`` anywhere; the full size on a GPU).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

import tensorplay as tp

F = tp.nn.functional


@dataclass(frozen=True)
class Config:
    n_layer: int = 12
    n_embd: int = 768
    n_head: int = 12
    vocab_size: int = 50257
    n_positions: int = 1024


SMALL = Config()
TINY = Config(n_layer=2, n_embd=32, n_head=4, vocab_size=97, n_positions=48)


def random_weights(config: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights under Hugging Face GPT-2's tensor names and layouts."""
    rng = np.random.default_rng(seed)
    d = config.n_embd

    def normal(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    weights = {"wte.weight": normal(config.vocab_size, d),
               "wpe.weight": normal(config.n_positions, d, scale=0.01),
               "ln_f.weight": np.ones(d, np.float32), "ln_f.bias": np.zeros(d, np.float32)}
    for i in range(config.n_layer):
        prefix = f"h.{i}."
        weights.update({
            prefix + "ln_1.weight": np.ones(d, np.float32),
            prefix + "ln_1.bias": np.zeros(d, np.float32),
            prefix + "attn.c_attn.weight": normal(d, 3 * d),
            prefix + "attn.c_attn.bias": normal(3 * d),
            prefix + "attn.c_proj.weight": normal(d, d),
            prefix + "attn.c_proj.bias": normal(d),
            prefix + "ln_2.weight": np.ones(d, np.float32),
            prefix + "ln_2.bias": np.zeros(d, np.float32),
            prefix + "mlp.c_fc.weight": normal(d, 4 * d),
            prefix + "mlp.c_fc.bias": normal(4 * d),
            prefix + "mlp.c_proj.weight": normal(4 * d, d),
            prefix + "mlp.c_proj.bias": normal(d)})
    return weights


def load_weights(path: str) -> tuple[dict[str, tp.Tensor], Config]:
    """A Hugging Face GPT-2 ``model.safetensors`` (names with or without ``transformer.``) and
    the config its shapes imply.

    Raises:
        KeyError: a tensor GPT-2 needs is missing, naming it.
    """
    loaded = tp.load(path)
    weights = {name.removeprefix("transformer."): tensor for name, tensor in loaded.items()}
    for name in ("wte.weight", "wpe.weight", "ln_f.weight", "h.0.attn.c_attn.weight"):
        if name not in weights:
            raise KeyError(f"{path}: no tensor {name!r} (or transformer.{name}): not a GPT-2 "
                           f"checkpoint")
    vocab, d = weights["wte.weight"].shape
    layers = 1 + max(int(name.split(".")[1]) for name in weights if name.startswith("h."))
    heads = d // 64 if d % 64 == 0 else 1
    config = Config(n_layer=layers, n_embd=d, n_head=heads, vocab_size=vocab,
                    n_positions=weights["wpe.weight"].shape[0])
    return weights, config


class GPT2:
    """The model: weights on ``device`` in ``dtype``, a static KV cache of the context length,
    and :meth:`step`, one token through every layer."""

    def __init__(self, weights: dict, config: Config, device=None, dtype=tp.float32):
        self.config = config
        self.device = device
        self.dtype = dtype

        def put(name):
            value = weights[name]
            tensor = value if isinstance(value, tp.Tensor) else tp.tensor(value)
            return tensor.to(device=device, dtype=dtype)
        self.wte, self.wpe = put("wte.weight"), put("wpe.weight")
        self.wte_t = self.wte.T   # the output projection shares the embedding (a view)
        self.ln_f = (put("ln_f.weight"), put("ln_f.bias"))
        # The products' weights (Conv1D's (in, out) in the file) are stored as (out, in) rows,
        # as nn.Linear keeps them, and used through an (in, out) view: a one-token product then
        # reads each output's weights as one contiguous row, which streams faster on the GPU
        # (benchmarks/skinny_sweep.py: 3.3 against 4.4 us for the 768 x 2304 product on an H100)
        products = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                    "mlp.c_proj.weight"}
        self.layers = [{key: put(f"h.{i}.{key}").T.contiguous().T if key in products
                        else put(f"h.{i}.{key}") for key in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")}
            for i in range(config.n_layer)]
        heads, head_dim = config.n_head, config.n_embd // config.n_head
        # one static cache of keys and values side by side, so that a step writes a layer's
        # new key and value with ONE index_copy_ (they lie side by side in the qkv product)
        self.cache = tp.zeros((config.n_layer, 2, 1, heads, config.n_positions, head_dim),
                              dtype=dtype, device=device)
        self.layer_cache = [self.cache[i] for i in range(config.n_layer)]
        self.keys = [self.cache[i, 0] for i in range(config.n_layer)]
        self.values = [self.cache[i, 1] for i in range(config.n_layer)]
        self.positions = tp.arange(config.n_positions, device=device)

    def reset(self) -> None:
        """Forget the cached keys and values (a new sequence)."""
        self.cache.zero_()

    def step(self, token: tp.Tensor, pos: tp.Tensor) -> tp.Tensor:
        """The float32 logits ``(1, vocab)`` after ``token`` (an int64 tensor of one element) at
        position ``pos`` (likewise), whose key and value go into the cache at ``pos``."""
        config = self.config
        d, heads = config.n_embd, config.n_head
        head_dim = d // heads
        x = self.wte.index_select(0, token) + self.wpe.index_select(0, pos)
        visible = (self.positions <= pos).view(1, 1, 1, config.n_positions)
        for i, layer in enumerate(self.layers):
            h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
            qkv = tp.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
            parts = qkv.view(3, 1, heads, 1, head_dim)   # query, key, value
            self.layer_cache[i].index_copy_(3, pos, parts[1:])
            attended = F.scaled_dot_product_attention(parts[0], self.keys[i], self.values[i],
                                                      attn_mask=visible)
            x = x + tp.addmm(layer["attn.c_proj.bias"], attended.view(1, d),
                             layer["attn.c_proj.weight"])
            h = F.layer_norm(x, (d,), layer["ln_2.weight"], layer["ln_2.bias"])
            hidden = F.gelu(tp.addmm(layer["mlp.c_fc.bias"], h, layer["mlp.c_fc.weight"]),
                            approximate="tanh")
            x = x + tp.addmm(layer["mlp.c_proj.bias"], hidden, layer["mlp.c_proj.weight"])
        x = F.layer_norm(x, (d,), *self.ln_f)
        return (x @ self.wte_t).float()

    def prefill(self, tokens: tp.Tensor) -> tp.Tensor:
        """The float32 logits ``(1, vocab)`` after the prompt ``tokens`` (int64, ``(T,)``, ``T``
        at most the context) fed in ONE pass: every position attends causally to those before
        it, and the keys and values of positions ``0 .. T-1`` go into the cache."""
        config = self.config
        d, heads = config.n_embd, config.n_head
        head_dim = d // heads
        length = tokens.shape[0]
        x = self.wte.index_select(0, tokens) + self.wpe[:length]
        for i, layer in enumerate(self.layers):
            h = F.layer_norm(x, (d,), layer["ln_1.weight"], layer["ln_1.bias"])
            qkv = tp.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
            parts = qkv.view(length, 3, heads, head_dim).permute(1, 2, 0, 3)
            self.layer_cache[i][:, 0, :, :length] = parts[1:]   # keys and values: one copy
            q, k, v = parts.unbind(0)
            attended = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0),
                                                      v.unsqueeze(0), is_causal=True)
            x = x + tp.addmm(layer["attn.c_proj.bias"],
                             attended[0].transpose(0, 1).reshape(length, d),
                             layer["attn.c_proj.weight"])
            h = F.layer_norm(x, (d,), layer["ln_2.weight"], layer["ln_2.bias"])
            hidden = F.gelu(tp.addmm(layer["mlp.c_fc.bias"], h, layer["mlp.c_fc.weight"]),
                            approximate="tanh")
            x = x + tp.addmm(layer["mlp.c_proj.bias"], hidden, layer["mlp.c_proj.weight"])
        x = F.layer_norm(x[length - 1:], (d,), *self.ln_f)
        return (x @ self.wte_t).float()


def choose(logits: tp.Tensor, temperature: float = 0.0, top_k: int | None = None) -> tp.Tensor:
    """The next token (int64, one element) from ``logits (1, vocab)``, on the device: the
    argmax for ``temperature == 0``, else a draw from ``softmax(logits / temperature)`` over
    the ``top_k`` largest (all without ``top_k``)."""
    if temperature == 0.0:
        return logits.argmax(-1)
    scaled = logits / temperature
    if top_k is not None:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return tp.multinomial(scaled.softmax(dim=-1), 1).view(1)


class Generation:
    """The state of one generation on the device: ``tokens`` holds the prompt and then each
    chosen token (length: the context), ``pos`` the position of the current token."""

    def __init__(self, model: GPT2, prompt, max_new: int, temperature: float = 0.0,
                 top_k: int | None = None, eos: int | None = None):
        config = model.config
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("generate: the prompt must have at least one token")
        if max_new < 1:
            raise ValueError(f"generate: max_new must be at least 1, got {max_new}")
        if len(prompt) + max_new > config.n_positions:
            raise ValueError(f"generate: a prompt of {len(prompt)} tokens and {max_new} new "
                             f"ones need {len(prompt) + max_new} positions; the cache holds "
                             f"{config.n_positions}")
        self.model, self.temperature, self.top_k, self.eos = model, temperature, top_k, eos
        self.prompt_length = len(prompt)
        self.limit = len(prompt) + max_new - 2   # the last position a token is fed at
        device = model.device
        buffer = np.zeros(config.n_positions, np.int64)
        buffer[:len(prompt)] = prompt
        self.tokens = tp.tensor(buffer, device=device)
        self.pos = tp.zeros(1, dtype=tp.int64, device=device)
        self.prompt_end = tp.tensor([len(prompt)], device=device)
        self.last = tp.tensor([self.limit], device=device)
        self.eos_token = tp.tensor([-1 if eos is None else eos], device=device)

    def prefill(self) -> tp.Tensor:
        """Feed the whole prompt in one pass and write the chosen token after it (at
        ``prompt_length``); return that token. The loop then goes on from ``prompt_length``
        with ``advance(pos, prompt=False)``."""
        logits = self.model.prefill(self.tokens[:self.prompt_length])
        token = choose(logits, self.temperature, self.top_k)
        self.tokens.index_copy_(0, self.prompt_end, token)
        return token

    def advance(self, pos: tp.Tensor, prompt: bool = True) -> tp.Tensor:
        """Feed the token at ``pos``, write the next one at ``pos + 1`` (the prompt's while it
        lasts, else the chosen one); return the token written. ``prompt=False`` (the prompt
        was fed by :meth:`prefill`) writes the chosen one without looking: three kernels
        fewer in a captured step."""
        logits = self.model.step(self.tokens.index_select(0, pos), pos)
        token = choose(logits, self.temperature, self.top_k)
        following = pos + 1
        if prompt:
            token = tp.where(following < self.prompt_end, self.tokens.index_select(0, following),
                             token)
        self.tokens.index_copy_(0, following, token)
        return token

    def finished(self, pos: tp.Tensor, token: tp.Tensor) -> tp.Tensor:
        """Whether the loop stops after writing ``token`` at ``pos + 1``: the length limit, or
        the end-of-text token among the generated ones (without ``eos``, the limit alone: four
        kernels fewer in each step of a captured loop)."""
        if self.eos is None:
            return pos >= self.last
        generated = (pos + 1) >= self.prompt_end
        return (pos >= self.last) | ((token == self.eos_token) & generated)

    def running(self, pos: tp.Tensor, token: tp.Tensor) -> tp.Tensor:
        """``not finished(pos, token)``, computed as such (a while loop's flag: one kernel
        fewer than negating :meth:`finished`)."""
        if self.eos is None:
            return pos < self.last
        generated = (pos + 1) >= self.prompt_end
        return (pos < self.last) & ((token != self.eos_token) | generated.logical_not())

    def result(self, pos: int) -> list[int]:
        """The generated tokens, read once on the host."""
        return self.tokens[self.prompt_length:pos + 2].tolist()


def generate_eager(model: GPT2, prompt, max_new: int, prefill: bool = False,
                   **options) -> list[int]:
    """One Python iteration per token; the token stays on the device, but the end-of-text
    check (with ``eos``) reads each chosen token on the host. The prompt is fed one token at a
    time, or in one pass with ``prefill=True`` (as :class:`WholeGeneration` feeds it)."""
    model.reset()
    state = Generation(model, prompt, max_new, **options)
    eos = options.get("eos")
    start = 0
    if prefill:
        start = state.prompt_length
        first = state.prefill()
        if eos is not None and first.item() == eos:
            return state.result(start - 1)
    for position in range(start, state.limit + 1):
        pos = tp.tensor([position], device=model.device)
        token = state.advance(pos, prompt=not prefill)
        if eos is not None and position + 1 >= state.prompt_length and token.item() == eos:
            return state.result(position)
    return state.result(state.limit)


class PerTokenGraph:
    """One captured step (the choice of the next token and the position's advance included),
    replayed once per token; ``generate`` reads nothing until the end (with ``eos``, each
    replay's stop flag)."""

    def __init__(self, model: GPT2, prompt, max_new: int, **options):
        self.model, self.options = model, options
        self.state = state = Generation(model, prompt, max_new, **options)
        state.advance(state.pos)   # warm-up: plans, kernels and the allocator, outside capture
        self.graph = tp.accelerator.Graph()
        with self.graph:
            token = state.advance(state.pos)
            # the stop flag only where something reads it (an end-of-text token was given)
            self.stop = None if state.eos is None else state.finished(state.pos, token)
            state.pos.add_(1)

    def generate(self) -> list[int]:
        state = self.state
        self.model.reset()
        state.pos.zero_()
        for position in range(state.limit + 1):
            self.graph.replay()
            if self.stop is not None and self.stop.item():
                return state.result(position)
        return state.result(state.limit)


class CompiledPerToken:
    """The per-token step through ``tp.compile``: captured like :class:`PerTokenGraph`, but
    with ``tp.compile``'s fusion (a product's bias, GELU and residual add inside the product),
    so each replay launches fewer kernels. Each call of the compiled step is one token."""

    def __init__(self, model: GPT2, prompt, max_new: int, **options):
        self.model, self.options = model, options
        self.state = state = Generation(model, prompt, max_new, **options)

        def step():
            token = state.advance(state.pos)
            stop = state.finished(state.pos, token)
            state.pos.add_(1)
            return stop
        self.step = tp.compile(step)

    def generate(self) -> list[int]:
        state = self.state
        self.model.reset()
        state.pos.zero_()
        for position in range(state.limit + 1):
            stop = self.step()
            if self.options.get("eos") is not None and stop.item():
                return state.result(position)
        return state.result(state.limit)


class WholeGeneration:
    """The prompt and every generated token in one replay: the prompt in one pass
    (:meth:`Generation.prefill`), then the token loop as a ``tp.while_loop`` captured into a
    while node, whose flag the loop's body computes (so the node reads it directly)."""

    def __init__(self, model: GPT2, prompt, max_new: int, **options):
        self.model = model
        self.state = state = Generation(model, prompt, max_new, **options)
        state.prefill()   # warm-up: plans, kernels and the allocator, outside the capture
        state.advance(state.prompt_end, prompt=False)

        def body(pos, running):
            token = state.advance(pos, prompt=False)
            return pos + 1, state.running(pos, token)
        self.graph = tp.accelerator.Graph()
        with self.graph:
            first = state.prefill()
            running = state.running(state.prompt_end - 1, first)
            self.final_pos, _ = tp.while_loop(lambda pos, running: running, body,
                                              (state.prompt_end, running))

    def generate(self) -> list[int]:
        self.model.reset()
        self.graph.replay()
        return self.state.result(int(self.final_pos.item()) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="a Hugging Face GPT-2 model.safetensors")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model")
    parser.add_argument("--tokens", type=int, default=None, help="tokens to generate")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=None)
    args = parser.parse_args()
    device = tp.accelerator.current_accelerator()
    if args.weights:
        weights, config = load_weights(args.weights)
    else:
        config = TINY if args.tiny else SMALL
        weights = random_weights(config)
    dtype = tp.bfloat16 if device is not None and device.type == "cuda" and not args.tiny \
        else tp.float32
    model = GPT2(weights, config, device, dtype)
    prompt = np.random.default_rng(1).integers(0, config.vocab_size, 8 if args.tiny else 32)
    count = args.tokens or (16 if args.tiny else 128)
    options = dict(temperature=args.temperature, top_k=args.top_k)
    runs = [("eager", lambda: generate_eager(model, prompt, count, **options))]
    if device is not None:
        per_token = PerTokenGraph(model, prompt, count, **options)
        compiled = CompiledPerToken(model, prompt, count, **options)
        whole = WholeGeneration(model, prompt, count, **options)
        runs += [("per-token graph", per_token.generate), ("compiled per token",
                                                           compiled.generate),
                 ("whole generation", whole.generate)]
    for name, run in runs:
        tp.manual_seed(0)
        run()
        tp.manual_seed(0)
        start = time.perf_counter()
        tokens = run()
        if device is not None:
            tp.accelerator.synchronize()
        elapsed = time.perf_counter() - start
        print(f"{name:17s} {len(tokens) / elapsed:9.1f} tokens/s  {tokens[:12]}")


if __name__ == "__main__":
    main()
