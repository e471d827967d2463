"""``examples/gpt2.py`` with a tiny config: eager, per-token graph and whole generation give
the tokens of a NumPy reference; a file with Hugging Face's tensor names loads; sampling after
``manual_seed`` gives the same tokens in every mode; the stops and the errors."""

import importlib.util
import math
import os
import sys

import numpy as np
import pytest
import safetensors.numpy

import tensorplay as tp
from support import requires_accelerator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("gpt2_example",
                                               os.path.join(ROOT, "examples", "gpt2.py"))
gpt2 = importlib.util.module_from_spec(_spec)
sys.modules["gpt2_example"] = gpt2   # its dataclass looks its module up there
_spec.loader.exec_module(gpt2)

CONFIG = gpt2.TINY
PROMPT = [5, 17, 3, 42]


def reference_tokens(weights, prompt, count):
    """Greedy decoding in float64 NumPy, the whole prefix recomputed at every step."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    d, heads = CONFIG.n_embd, CONFIG.n_head
    head_dim = d // heads

    def norm(x, g, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    tokens = list(prompt)
    for _ in range(count):
        n = len(tokens)
        x = w["wte.weight"][tokens] + w["wpe.weight"][:n]
        for i in range(CONFIG.n_layer):
            p = f"h.{i}."
            h = norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
            q, k, v = np.split(h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"], 3, -1)
            q, k, v = (t.reshape(n, heads, head_dim).transpose(1, 0, 2) for t in (q, k, v))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
            scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attended = (scores / scores.sum(-1, keepdims=True)) @ v
            x = x + attended.transpose(1, 0, 2).reshape(n, d) @ w[p + "attn.c_proj.weight"] \
                + w[p + "attn.c_proj.bias"]
            h = norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
            x = x + gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) \
                @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = norm(x, w["ln_f.weight"], w["ln_f.bias"])
        tokens.append(int((x[-1] @ w["wte.weight"].T).argmax()))
    return tokens[len(prompt):]


@pytest.fixture(scope="module")
def weights():
    """GPT-2's initialization scaled up, so that greedy decoding of a tiny model wanders
    instead of repeating one token."""
    return {name: value * 25 if value.ndim == 2 else value
            for name, value in gpt2.random_weights(CONFIG, seed=0).items()}


def test_the_reference_tokens_vary(weights):
    assert len(set(reference_tokens(weights, PROMPT, 10))) > 3


def model_on(device, weights):
    return gpt2.GPT2(weights, CONFIG, device, tp.float64)


def test_eager_greedy_tokens_match_numpy(device, weights):
    expected = reference_tokens(weights, PROMPT, 10)
    assert gpt2.generate_eager(model_on(device, weights), PROMPT, 10) == expected
    assert gpt2.generate_eager(model_on(device, weights), PROMPT, 10, prefill=True) == expected


def test_one_new_token_after_a_prefilled_prompt(device, weights):
    expected = reference_tokens(weights, PROMPT, 1)
    model = model_on(device, weights)
    assert gpt2.generate_eager(model, PROMPT, 1, prefill=True) == expected
    assert gpt2.generate_eager(model, PROMPT[:1], 3, prefill=True) == \
        reference_tokens(weights, PROMPT[:1], 3)
    if tp.device(device).type != "cpu":
        assert gpt2.WholeGeneration(model, PROMPT, 1).generate() == expected


def test_prefill_then_decode_gives_the_reference_tokens(device, weights):
    """The prompt in one pass (causal attention over it), then token by token from the cache
    it filled."""
    expected = reference_tokens(weights, PROMPT, 6)
    model = model_on(device, weights)
    model.reset()
    logits = model.prefill(tp.tensor(PROMPT, device=device))
    tokens = [int(logits.argmax(-1).item())]
    for position in range(len(PROMPT), len(PROMPT) + 5):
        logits = model.step(tp.tensor([tokens[-1]], device=device),
                            tp.tensor([position], device=device))
        tokens.append(int(logits.argmax(-1).item()))
    assert tokens == expected


@requires_accelerator
def test_graph_modes_give_the_eager_tokens(dev, weights):
    expected = reference_tokens(weights, PROMPT, 10)
    model = model_on(dev, weights)
    assert gpt2.PerTokenGraph(model, PROMPT, 10).generate() == expected
    compiled = gpt2.CompiledPerToken(model, PROMPT, 10)
    assert compiled.generate() == expected
    assert compiled.generate() == expected   # now replaying the fused capture
    # per layer the attention output's and the MLP's products with their residual adds, and
    # the MLP's first product with its GELU
    assert compiled.step.fused_products == 3 * CONFIG.n_layer
    whole = gpt2.WholeGeneration(model, PROMPT, 10)
    assert whole.generate() == expected
    assert whole.generate() == expected   # a replay starts over


def test_hugging_face_names_load(device, weights, tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({f"transformer.{k}": v for k, v in weights.items()}, str(path))
    loaded, config = gpt2.load_weights(str(path))
    assert config.n_layer == CONFIG.n_layer and config.vocab_size == CONFIG.vocab_size
    config = gpt2.Config(config.n_layer, config.n_embd, CONFIG.n_head, config.vocab_size,
                         config.n_positions)
    model = gpt2.GPT2(loaded, config, device, tp.float64)
    assert gpt2.generate_eager(model, PROMPT, 5) == reference_tokens(weights, PROMPT, 5)
    (tmp_path / "bad.safetensors").write_bytes(b"")
    safetensors.numpy.save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(KeyError, match="no tensor 'wte.weight'"):
        gpt2.load_weights(str(tmp_path / "bad.safetensors"))


@requires_accelerator
def test_sampling_after_manual_seed_is_the_same_in_every_mode(dev, weights):
    model = model_on(dev, weights)
    options = dict(temperature=0.8, top_k=10)
    per_token = gpt2.PerTokenGraph(model, PROMPT, 12, **options)
    whole = gpt2.WholeGeneration(model, PROMPT, 12, **options)
    results = []
    # the whole generation feeds the prompt in one pass, as the eager loop with prefill=True:
    # one draw for the prompt instead of one per prompt token
    for run in (lambda: gpt2.generate_eager(model, PROMPT, 12, **options), per_token.generate,
                lambda: gpt2.generate_eager(model, PROMPT, 12, prefill=True, **options),
                whole.generate):
        tp.manual_seed(123)
        results.append(run())
    assert results[0] == results[1]
    assert results[2] == results[3]
    assert len(set(results[0])) > 1 and len(set(results[2])) > 1


def test_a_stop_token_ends_the_generation(device, weights):
    greedy = reference_tokens(weights, PROMPT, 10)
    eos = greedy[3]
    stop = greedy.index(eos) + 1
    model = model_on(device, weights)
    assert gpt2.generate_eager(model, PROMPT, 10, eos=eos) == greedy[:stop]
    assert gpt2.generate_eager(model, PROMPT, 10, eos=eos, prefill=True) == greedy[:stop]
    first = greedy[0]   # the token the prefill chooses stops at once
    assert gpt2.generate_eager(model, PROMPT, 10, eos=first, prefill=True) == [first]
    if tp.device(device).type != "cpu":
        assert gpt2.PerTokenGraph(model, PROMPT, 10, eos=eos).generate() == greedy[:stop]
        assert gpt2.WholeGeneration(model, PROMPT, 10, eos=eos).generate() == greedy[:stop]
        assert gpt2.WholeGeneration(model, PROMPT, 10, eos=first).generate() == [first]


def test_a_prompt_longer_than_the_cache_raises_before_any_capture(device, weights):
    model = model_on(device, weights)
    with pytest.raises(ValueError, match="need 49 positions; the cache holds 48"):
        gpt2.Generation(model, list(range(40)), 9)
    with pytest.raises(ValueError, match="at least one token"):
        gpt2.Generation(model, [], 3)


@requires_accelerator
def test_an_eager_decode_step_waits_for_the_device_only_at_item(dev, weights, monkeypatch):
    """Every op of the decode step is queued: the host waits for the device only when it reads
    the chosen token (on cuda the index bounds are checked on the device, read at that sync)."""
    from support import count_device_waits
    model = model_on(dev, weights)
    token, pos = tp.tensor([5], device=dev), tp.tensor([3], device=dev)
    model.step(token, pos).argmax(-1)   # warm: plans, kernels and the allocator
    calls = count_device_waits(monkeypatch)
    chosen = model.step(token, pos).argmax(-1)
    assert calls == []
    chosen.item()
    assert calls == ["to_host"]
