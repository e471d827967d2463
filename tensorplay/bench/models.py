"""The model-sized benchmark cases: the MLP (eager and compiled) and the conjugate-gradient
Poisson solve."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

import tensorplay as tp

from . import peers
from . import solvers as _solvers
from .timing import time_per_call

WIDTH, BATCH, LAYERS = 512, 8, 4


def _tp_mlp(device):
    tp.manual_seed(0)
    weights = [tp.randn(WIDTH, WIDTH, device=device) * (WIDTH ** -0.5) for _ in range(LAYERS)]
    biases = [tp.zeros(WIDTH, device=device) for _ in range(LAYERS)]

    def forward(x):
        for w, b in zip(weights, biases):
            x = tp.gelu(x @ w + b)
        return x
    return forward


def mlp_case(device: str, calls: int):
    """Rows ``{impl, us[, note]}`` (``us``: microseconds per call) for the MLP: tensorplay eager
    and compiled; on a GPU, where installed, torch eager, torch hand-captured CUDAGraph + input
    ``copy_``, ``torch.compile(mode="reduce-overhead")`` and JAX ``jit`` (at JAX's default
    matmul precision and at ``Precision.HIGHEST``).

    Every implementation takes its input from the same rotation of four batches, so none replays
    on one unchanged input. A peer that cannot run here (torch.compile without a working
    compiler, JAX without a GPU backend) gives a row with ``us`` None and the reason in
    ``note`` instead of ending the run."""
    forward = _tp_mlp(device)
    compiled = tp.compile(forward)
    inputs = [tp.randn(BATCH, WIDTH, device=device) for _ in range(4)]
    counter = iter(range(1 << 62))
    sync = tp.accelerator.synchronize
    yield {"impl": "tensorplay eager",
           "us": time_per_call(lambda: forward(inputs[next(counter) % 4]), sync, calls)}
    yield {"impl": "tensorplay compile (cudagraphs)",
           "us": time_per_call(lambda: compiled(inputs[next(counter) % 4]), sync, calls)}
    torch = peers._torch_cuda()
    if torch is not None:
        yield from _torch_mlp_rows(torch, calls)
    if peers._gpu() and peers._module("jax") is not None:
        yield from _jax_mlp_rows(calls)


def _torch_mlp_rows(torch, calls: int):
    ws = [torch.randn(WIDTH, WIDTH, device="cuda") * WIDTH ** -0.5 for _ in range(LAYERS)]
    bs = [torch.zeros(WIDTH, device="cuda") for _ in range(LAYERS)]
    gelu = torch.nn.functional.gelu
    counter = iter(range(1 << 62))

    def torch_forward(x):
        for w, b in zip(ws, bs):
            x = gelu(x @ w + b)
        return x
    xs = [torch.randn(BATCH, WIDTH, device="cuda") for _ in range(4)]
    yield {"impl": "torch eager", "us": time_per_call(
        lambda: torch_forward(xs[next(counter) % 4]), torch.cuda.synchronize, calls)}
    static_x = xs[0].clone()
    graph, _ = peers.torch_graph(torch, lambda: torch_forward(static_x))

    def replay():
        static_x.copy_(xs[next(counter) % 4])
        graph.replay()
    yield {"impl": "torch CUDAGraph + input copy_",
           "us": time_per_call(replay, torch.cuda.synchronize, calls)}
    yield _torch_compile_row(torch, torch_forward, [*ws, *bs], xs, calls)


TORCH_COMPILE_WARMUP = 10


def _torch_compile_row(torch, torch_forward, weights, xs, calls: int) -> dict:
    """``torch.compile(mode="reduce-overhead")`` of ``torch_forward``: inductor's kernels
    replayed as a CUDA graph (cudagraph trees), which copies each call's input into the graph's
    static input as the hand-captured row does. The weights are marked static addresses
    (``torch._dynamo.mark_static_address``), as parameters are, so that they are not copied on
    every call too. :data:`TORCH_COMPILE_WARMUP` calls run first: the first compiles, the next
    ones warm up and record the graph (the timed loop's own warm-up comes on top).

    Compilation needs triton and a C compiler; when it fails the row has ``us`` None and the
    error in ``note``, and dynamo's caches are reset so later cases run unaffected."""
    impl = 'torch.compile(mode="reduce-overhead")'
    counter = iter(range(1 << 62))
    try:
        mark_static = getattr(torch._dynamo, "mark_static_address", None)
        if mark_static is not None:
            for weight in weights:
                mark_static(weight)
        compiled = torch.compile(torch_forward, mode="reduce-overhead")
        for _ in range(TORCH_COMPILE_WARMUP):
            compiled(xs[next(counter) % 4])
        torch.cuda.synchronize()
        us = time_per_call(lambda: compiled(xs[next(counter) % 4]), torch.cuda.synchronize,
                           calls)
    except Exception as error:  # noqa: BLE001 - no compiler here is a note, not a crash
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
        return {"impl": impl, "us": None,
                "note": f"skipped: torch.compile failed: {peers.error_text(error)}"}
    return {"impl": impl, "us": us}


# (precision given to jnp.matmul, row name, note): JAX's default, what a JAX user gets (on a GPU
# it may use TF32 for float32 products), and full float32, the numerics of torch's and
# tensorplay's defaults
JAX_PRECISIONS = ((None, "JAX jit", "float32 products at JAX's default matmul precision"),
                  ("highest", "JAX jit, Precision.HIGHEST",
                   "float32 products in full float32, as torch's and tensorplay's default"))


def _jax_mlp_rows(calls: int):
    """Rows for JAX ``jit`` of the same forward (``jax.nn.gelu(approximate=False)``), once per
    matmul precision of :data:`JAX_PRECISIONS`: the weights passed as arguments (constants
    closed over would be folded into the program), inputs as device arrays on JAX's default
    device, ``block_until_ready`` on the last result as the sync. A JAX whose default backend
    is not the GPU gives one row with ``us`` None and a note; a jit that fails, a row so."""
    jax = peers._module("jax")
    backend = jax.default_backend()
    if backend not in ("gpu", "cuda"):
        yield {"impl": JAX_PRECISIONS[0][1], "us": None,
               "note": f"skipped: JAX's default backend is {backend!r}, not the GPU"}
        return
    for precision, impl, note in JAX_PRECISIONS:
        try:
            call, sync, _ = _jax_mlp(jax, precision)
            call()
            sync()
            us = time_per_call(call, sync, calls)
        except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
            yield {"impl": impl, "us": None,
                   "note": f"skipped: JAX jit failed: {peers.error_text(error)}"}
            continue
        yield {"impl": impl, "us": us, "note": note}


def _jax_mlp(jax, precision: str | None = None):
    """``(call, sync, state)`` of the jitted MLP over a rotation of four input batches, its
    products at ``precision`` (None: JAX's default; ``"highest"``: ``Precision.HIGHEST``):
    ``call()`` runs it on the next batch, ``sync()`` waits for the last result; ``state`` holds
    ``params`` (``[(w, b), ...]``), the batches ``xs`` and the last result, ``out``."""
    import jax.numpy as jnp

    if precision not in (None, "highest"):
        raise ValueError(f"_jax_mlp: precision must be None or 'highest', got {precision!r}")
    rng = np.random.default_rng(0)
    params = [(jax.device_put(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32)
                              * np.float32(WIDTH ** -0.5)),
               jax.device_put(np.zeros(WIDTH, dtype=np.float32))) for _ in range(LAYERS)]
    xs = [jax.device_put(rng.standard_normal((BATCH, WIDTH), dtype=np.float32))
          for _ in range(4)]
    matmul_precision = jax.lax.Precision.HIGHEST if precision == "highest" else None

    @jax.jit
    def jax_forward(params, x):
        for w, b in params:
            x = jax.nn.gelu(jnp.matmul(x, w, precision=matmul_precision) + b,
                            approximate=False)
        return x
    counter = iter(range(1 << 62))
    state = {"params": params, "xs": xs}

    def call():
        state["out"] = jax_forward(params, xs[next(counter) % 4])

    def sync():
        jax.block_until_ready(state["out"])
    return call, sync, state


def best_time(fn, sync, repeats: int = 3) -> float:
    """Microseconds of the fastest of ``repeats`` calls of ``fn``, each timed from a
    synchronized device to ``sync()`` after it; one untimed call (and ``sync``) first. For
    calls that each run a whole workload (a solve, a loop of steps)."""
    fn()
    sync()
    best = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best.append(time.perf_counter() - start)
    return min(best) * 1e6


def cg_case(device: str, n: int, tol: float = 1e-6):
    """Rows for the Poisson CG solve: tensorplay (one graph: ``tp.while_loop``, one launch per
    solve, the device deciding when to stop), torch eager (residual checked on the host each
    iteration), JAX jit with lax.while_loop."""
    max_iterations = 10 * n
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device), tol, max_iterations)
    graph = _solvers.cg_graph(solver)
    us = best_time(graph.replay, tp.accelerator.synchronize)
    iterations = int(solver.iterations.item())
    yield {"impl": "tensorplay graph (while_loop)", "us": us, "iterations": iterations,
           "residual": _solvers.relative_residual(solver, tol)}
    torch = peers._torch_cuda()
    if torch is not None:
        yield _torch_cg(torch, n, tol, max_iterations)
    jax_row = _jax_cg(n, tol, max_iterations) if peers._gpu() else None
    if jax_row is not None:
        yield jax_row


def _torch_cg(torch, n, tol, max_iterations):
    line = torch.linspace(0.0, 1.0, n, device="cuda")
    b = (line[:, None] * (1 - line[:, None])) * (line[None, :] * (1 - line[None, :])) * 64 + 1

    def apply(x):
        out = 4 * x
        out[1:, :] -= x[:-1, :]
        out[:-1, :] -= x[1:, :]
        out[:, 1:] -= x[:, :-1]
        out[:, :-1] -= x[:, 1:]
        return out
    state: dict[str, Any] = {}

    def solve():
        x = torch.zeros_like(b)
        r = b.clone()
        p = r.clone()
        rs = (r * r).sum()
        threshold = rs.sqrt().item() * tol
        iterations = 0
        while iterations < max_iterations:
            ap = apply(p)
            alpha = rs / (p * ap).sum()
            x += alpha * p
            r -= alpha * ap
            rs_new = (r * r).sum()
            p = r + (rs_new / rs) * p
            rs = rs_new
            iterations += 1
            if rs_new.sqrt().item() <= threshold:
                break
        state.update(x=x, iterations=iterations)
    us = best_time(solve, torch.cuda.synchronize)
    residual = float(((b - apply(state["x"])).norm() / b.norm()).item())
    return {"impl": "torch eager (host residual check)", "us": us,
            "iterations": state["iterations"], "residual": residual}


def _jax_cg(n, tol, max_iterations):
    jax = peers._module("jax")
    if jax is None:
        return None
    import jax.numpy as jnp

    line = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
    b = (line[:, None] * (1 - line[:, None])) * (line[None, :] * (1 - line[None, :])) * 64 + 1

    def apply(x):
        out = 4 * x
        out = out.at[1:, :].add(-x[:-1, :])
        out = out.at[:-1, :].add(-x[1:, :])
        out = out.at[:, 1:].add(-x[:, :-1])
        out = out.at[:, :-1].add(-x[:, 1:])
        return out

    @jax.jit
    def solve(b):
        rs0 = jnp.sum(b * b)
        threshold = jnp.sqrt(rs0) * tol

        def cond(state):
            _, _, _, rs, k = state
            return (jnp.sqrt(rs) > threshold) & (k < max_iterations)

        def body(state):
            x, r, p, rs, k = state
            ap = apply(p)
            alpha = rs / jnp.sum(p * ap)
            x = x + alpha * p
            r = r - alpha * ap
            rs_new = jnp.sum(r * r)
            p = r + (rs_new / rs) * p
            return x, r, p, rs_new, k + 1
        return jax.lax.while_loop(cond, body, (jnp.zeros_like(b), b, b, rs0, 0))

    result = {}

    def run():
        result["out"] = solve(b)

    def sync():
        jax.block_until_ready(result["out"])
    us = best_time(run, sync)
    x, _, _, _, k = result["out"]
    residual = float(jnp.linalg.norm(b - apply(x)) / jnp.linalg.norm(b))
    return {"impl": "JAX jit + lax.while_loop", "us": us, "iterations": int(k),
            "residual": residual}
