"""The training-step case: a 4 x 512 GELU MLP trained with AdamW on an MSE loss, float32, at
batch 8 and 256 (``../shared/workloads/mlp_train_step_peers.py`` defines it): tensorplay eager,
the whole step (forward, backward, optimizer) captured in one ``Graph``, and ``tp.compile`` of
the step; against torch eager, torch's whole step in one CUDA graph (capturable AdamW),
``torch.compile(mode="reduce-overhead")``, and JAX ``jit`` of ``value_and_grad`` plus AdamW at
JAX's default precision and at ``Precision.HIGHEST``."""

from __future__ import annotations

import contextlib
import os
import statistics

import numpy as np

import tensorplay as tp

from . import peers
from .models import JAX_PRECISIONS
from .timing import interleaved_loops, time_per_call

LAYERS, WIDTH = 4, 512
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 1e-2
BATCHES = (8, 256)


def _initial(batch: int):
    """The same weights, data and targets for every implementation (NumPy, float32)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) / np.float32(WIDTH ** 0.5)
               for _ in range(LAYERS)]
    biases = [np.zeros(WIDTH, np.float32) for _ in range(LAYERS)]
    x = rng.standard_normal((batch, WIDTH), dtype=np.float32)
    y = rng.standard_normal((batch, WIDTH), dtype=np.float32)
    return weights, biases, x, y


def training_step(lib, device, batch: int, **adamw):
    """``(step, params, optimizer)`` of the MLP in ``lib`` (tensorplay or torch: the code is
    the same), written as a user would: each call zeroes the gradients in place, runs forward
    and backward, updates and returns the loss. ``adamw`` overrides AdamW's options."""
    weights, biases, x, y = _initial(batch)
    params = []
    for w, b in zip(weights, biases):
        params += [lib.tensor(w, device=device, requires_grad=True),
                   lib.tensor(b, device=device, requires_grad=True)]
    data, target = lib.tensor(x, device=device), lib.tensor(y, device=device)
    options = {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY, **adamw}
    optimizer = lib.optim.AdamW(params, **options)
    F = lib.nn.functional

    def step():
        optimizer.zero_grad(set_to_none=False)
        h = data
        for i in range(LAYERS):
            h = F.gelu(h @ params[2 * i] + params[2 * i + 1])
        loss = F.mse_loss(h, target)
        loss.backward()
        optimizer.step()
        return loss
    return step, params, optimizer


def training_step_case(device: str, batch: int, calls: int):
    """Rows ``{impl, us[, note]}``: microseconds per training step, every implementation
    starting from the same weights and data."""
    sync = tp.accelerator.synchronize
    step, _, _ = training_step(tp, device, batch)
    for _ in range(3):
        step()   # creates the .grad tensors and the optimizer state before any capture
    torch = peers._torch_cuda()
    torch_eager = None
    if torch is None:
        yield {"impl": "tensorplay eager", "us": time_per_call(step, sync, calls)}
    else:
        # the two eager steps take turns loop by loop: both are host-bound, and the shared
        # host's speed drifts during a run
        torch_step, _, _ = training_step(torch, "cuda", batch)
        loops = interleaved_loops({"tensorplay": (step, sync),
                                   "torch": (torch_step, torch.cuda.synchronize)}, calls, 7, 3)
        yield {"impl": "tensorplay eager", "us": statistics.median(loops["tensorplay"][1]),
               "note": "timed in turns with torch eager"}
        torch_eager = statistics.median(loops["torch"][1])
    if tp.accelerator.is_available():
        graph = tp.accelerator.Graph()
        with graph:
            step()
        yield {"impl": "tensorplay whole step in one Graph",
               "us": time_per_call(graph.replay, sync, calls)}
    compiled_step = tp.compile(training_step(tp, device, batch)[0])
    yield {"impl": "tensorplay compile (cudagraphs)", "us": time_per_call(compiled_step, sync,
                                                                          calls)}
    if torch is not None:
        yield from _torch_rows(torch, batch, calls, torch_eager)
    if peers._gpu() and peers._module("jax") is not None:
        yield from _jax_rows(batch, calls)


def _torch_rows(torch, batch: int, calls: int, eager_us: float | None = None):
    """torch's rows; ``eager_us``: its eager step, already timed (in turns with tensorplay's)."""
    if eager_us is None:
        step, _, _ = training_step(torch, "cuda", batch)
        yield {"impl": "torch eager", "us": time_per_call(step, torch.cuda.synchronize, calls)}
    else:
        yield {"impl": "torch eager", "us": eager_us,
               "note": "timed in turns with tensorplay eager"}
    step, _, _ = training_step(torch, "cuda", batch, capturable=True)
    graph, _ = peers.torch_graph(torch, step)
    yield {"impl": "torch whole step in one CUDAGraph",
           "us": time_per_call(graph.replay, torch.cuda.synchronize, calls)}
    impl = 'torch.compile(mode="reduce-overhead")'
    if os.environ.get("TENSORPLAY_BENCH_SKIP_TORCH_COMPILE"):
        yield {"impl": impl, "us": None,
               "note": "skipped: TENSORPLAY_BENCH_SKIP_TORCH_COMPILE is set (its compile "
                       "takes minutes)"}
        return
    try:   # a tensor lr, as the workload's peer script: a float would be baked into the code
        step, _, _ = training_step(torch, "cuda", batch, capturable=True,
                                   lr=torch.tensor(LR, device="cuda"))
        compiled = torch.compile(step, mode="reduce-overhead")
        for _ in range(10):
            compiled()
        torch.cuda.synchronize()
        yield {"impl": impl, "us": time_per_call(compiled, torch.cuda.synchronize, calls)}
    except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
        yield {"impl": impl, "us": None,
               "note": f"skipped: torch.compile failed: {peers.error_text(error)}"}


def _jax_rows(batch: int, calls: int):
    jax = peers._module("jax")
    if jax.default_backend() not in ("gpu", "cuda"):
        yield {"impl": JAX_PRECISIONS[0][1], "us": None,
               "note": f"skipped: JAX's default backend is {jax.default_backend()!r}"}
        return
    for precision, impl, note in JAX_PRECISIONS:
        try:
            call, sync = _jax_step(jax, batch, precision)
            call()
            sync()
            yield {"impl": impl, "us": time_per_call(call, sync, calls), "note": note}
        except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
            yield {"impl": impl, "us": None,
                   "note": f"skipped: JAX jit failed: {peers.error_text(error)}"}


def _jax_step(jax, batch: int, precision):
    """``(call, sync)`` of a jitted step: ``value_and_grad`` of the MSE, then AdamW written
    out (decoupled weight decay, bias correction), the state threaded through."""
    import jax.numpy as jnp

    weights, biases, x, y = _initial(batch)
    params = [jax.device_put(a) for pair in zip(weights, biases) for a in pair]
    data, target = jax.device_put(x), jax.device_put(y)
    matmul_precision = jax.lax.Precision.HIGHEST if precision == "highest" else None

    def loss_fn(params):
        h = data
        for i in range(LAYERS):
            h = jax.nn.gelu(jnp.matmul(h, params[2 * i], precision=matmul_precision)
                            + params[2 * i + 1], approximate=False)
        return jnp.mean((h - target) ** 2)

    @jax.jit
    def jax_step(params, m, v, t):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        t = t + 1
        b1, b2 = BETAS
        new_params, new_m, new_v = [], [], []
        for p, g, mi, vi in zip(params, grads, m, v):
            p = p * (1 - LR * WEIGHT_DECAY)
            mi = b1 * mi + (1 - b1) * g
            vi = b2 * vi + (1 - b2) * g * g
            step_size = LR / (1 - b1 ** t)
            denom = jnp.sqrt(vi) / jnp.sqrt(1 - b2 ** t) + EPS
            new_params.append(p - step_size * mi / denom)
            new_m.append(mi)
            new_v.append(vi)
        return new_params, new_m, new_v, t, loss

    state = {"params": params, "m": [jnp.zeros_like(p) for p in params],
             "v": [jnp.zeros_like(p) for p in params], "t": jnp.zeros((), jnp.float32)}

    def call():
        (state["params"], state["m"], state["v"], state["t"],
         state["loss"]) = jax_step(state["params"], state["m"], state["v"], state["t"])

    def sync():
        jax.block_until_ready(state["loss"])
    return call, sync
