"""The model-sized benchmark cases: the compiled MLP and the conjugate-gradient Poisson solve."""

from __future__ import annotations

import time

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
    """Rows (impl, us/call): tensorplay eager and compiled, torch eager and captured + copy."""
    forward = _tp_mlp(device)
    compiled = tp.compile(forward)
    inputs = [tp.randn(BATCH, WIDTH, device=device) for _ in range(4)]
    counter = iter(range(1 << 62))
    sync = tp.accelerator.synchronize
    yield "tensorplay eager", time_per_call(lambda: forward(inputs[next(counter) % 4]), sync,
                                            calls)
    yield "tensorplay compile (cudagraphs)", time_per_call(
        lambda: compiled(inputs[next(counter) % 4]), sync, calls)
    torch = peers._torch_cuda()
    if torch is None:
        return
    ws = [torch.randn(WIDTH, WIDTH, device="cuda") * WIDTH ** -0.5 for _ in range(LAYERS)]
    bs = [torch.zeros(WIDTH, device="cuda") for _ in range(LAYERS)]
    gelu = torch.nn.functional.gelu

    def torch_forward(x):
        for w, b in zip(ws, bs):
            x = gelu(x @ w + b)
        return x
    xs = [torch.randn(BATCH, WIDTH, device="cuda") for _ in range(4)]
    yield "torch eager", time_per_call(lambda: torch_forward(xs[next(counter) % 4]),
                                       torch.cuda.synchronize, calls)
    static_x = xs[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch_forward(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch_forward(static_x)

    def replay():
        static_x.copy_(xs[next(counter) % 4])
        graph.replay()
    yield "torch CUDAGraph + input copy_", time_per_call(replay, torch.cuda.synchronize, calls)


def _timed(fn, sync, repeats: int = 3) -> float:
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
    """Rows for the Poisson CG solve: tensorplay (one graph, while node), torch eager (residual
    checked on the host each iteration), JAX jit with lax.while_loop."""
    max_iterations = 10 * n
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device), tol, max_iterations)
    graph = _solvers.cg_graph(solver)

    def solve():
        solver.restart()
        graph.replay()
    us = _timed(solve, tp.accelerator.synchronize)
    iterations = int(solver.iterations.item())
    yield {"impl": "tensorplay graph + while node", "us": us, "iterations": iterations,
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
    state = {}

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
    us = _timed(solve, torch.cuda.synchronize)
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
    us = _timed(run, sync)
    x, _, _, _, k = result["out"]
    residual = float(jnp.linalg.norm(b - apply(x)) / jnp.linalg.norm(b))
    return {"impl": "JAX jit + lax.while_loop", "us": us, "iterations": int(k),
            "residual": residual}
