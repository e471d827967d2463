"""The control-flow table: loops whose decisions the device makes, beside JAX and torch.

Two workloads, each run to the same answer by every implementation and checked against a NumPy
reference (``rel_err``: the largest absolute difference over the largest reference value):

- **Heat**: :data:`HEAT` = ``(n, steps, every)``: ``steps`` explicit steps of the heat equation
  on an ``n x n`` grid (5-point stencil, diffusion number :data:`ALPHA`, the boundary fixed at
  its initial values), copying the grid into slot ``k // every`` of a preallocated snapshot
  buffer before every step ``k`` with ``k % every == 0``. tensorplay writes it as
  ``tp.fori_loop`` over the steps with a ``tp.cond`` on ``i % every == 0`` and captures it as one
  graph (:class:`Heat`); JAX as ``jit`` of ``lax.fori_loop`` + ``lax.cond``; torch eagerly (the
  decision is a Python int's, so no host read) and as one CUDAGraph of the unrolled steps.
  Rows carry ``steps``, ``per_step_us`` and, for the captured loop, ``overhead_us``: its time
  per step beyond the same kernels captured unrolled, without control flow (the
  ``tensorplay graph, unrolled`` row), i.e. what the counter, the predicates and the if/while
  nodes cost per step.
- **Newton**: :data:`NEWTON_SIZE` values ``a`` in ``[1, 100)``; Newton's method for
  ``x^3 - a = 0`` elementwise from ``x = a`` while ``max |x^3 - a| >`` :data:`NEWTON_TOL` (at most
  :data:`NEWTON_CAP` iterations). tensorplay: ``tp.while_loop``, one graph (:class:`Newton`);
  JAX: ``jit`` of ``lax.while_loop``; torch eager, reading ``max |f|`` on the host every
  iteration. Rows carry ``iterations`` and ``residual`` (the final ``max |x^3 - a|``).

tensorplay also runs the same code eagerly (``tensorplay eager``: one host read per decision).
Its heavy work is one fused kernel per step (``_tensor.fusion``, as the CG solver's), the
counterpart of what XLA fuses for JAX; the decisions are plain tensor ops, as a user writes
them. Peers run on a GPU only (on the simulated accelerator they would time another machine);
there a peer that is not installed, or cannot run, is a row with no time and a note.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import tensorplay as tp

from .._runtime import dispatch as _dispatch
from .._tensor.fusion import fused
from . import peers
from .models import best_time

#: The diffusion number ``dt * kappa / h^2`` of the explicit step (stable up to 0.25).
ALPHA = 0.2
#: ``(n, steps, every)`` of the heat workload on a GPU, and on the simulated accelerator.
HEAT = (256, 1000, 100)
SMALL_HEAT = (32, 100, 10)
#: Values solved by Newton's method on a GPU, and on the simulated accelerator.
NEWTON_SIZE = 1 << 20
SMALL_NEWTON_SIZE = 1 << 12
#: Newton stops once ``max |x^3 - a|`` is at most this (float32 rounds ``x^3 - a`` to ~3e-5 for
#: ``a`` below 100, so it is reachable), or after :data:`NEWTON_CAP` iterations.
NEWTON_TOL = 1e-3
NEWTON_CAP = 100


# -- the workloads, in NumPy --------------------------------------------------------------------

def heat_initial(n: int) -> np.ndarray:
    """The initial ``n x n`` float32 grid: the top edge at 1 (it stays so: the boundary is
    fixed), a disc of radius ``n / 8`` at the centre at 1, zero elsewhere."""
    if n < 3:
        raise ValueError(f"heat: the grid needs n >= 3 (an interior), got n={n}")
    i, j = np.indices((n, n))
    centre = (n - 1) / 2
    grid = (((i - centre) ** 2 + (j - centre) ** 2) <= (n / 8) ** 2).astype(np.float32)
    grid[0, :] = 1
    return grid


def snapshot_count(steps: int, every: int) -> int:
    """How many steps ``k`` in ``range(steps)`` have ``k % every == 0``."""
    return 0 if steps <= 0 else (steps - 1) // every + 1


def heat_reference(u0: np.ndarray, steps: int, every: int) -> tuple[np.ndarray, np.ndarray]:
    """``(final grid, snapshots)`` of the heat workload from ``u0``, in float64 NumPy."""
    u = u0.astype(np.float64)
    snapshots = np.zeros((snapshot_count(steps, every),) + u.shape)
    for k in range(steps):
        if k % every == 0:
            snapshots[k // every] = u
        nxt = u.copy()
        nxt[1:-1, 1:-1] = u[1:-1, 1:-1] + ALPHA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                                   + u[1:-1, 2:] - 4 * u[1:-1, 1:-1])
        u = nxt
    return u, snapshots


def newton_values(size: int) -> np.ndarray:
    """``size`` float32 values ``a``, uniform in ``[1, 100)`` (seeded: every run solves the
    same values)."""
    return np.random.default_rng(0).uniform(1.0, 100.0, size).astype(np.float32)


def newton_reference(a: np.ndarray, tol: float = NEWTON_TOL,
                     cap: int = NEWTON_CAP) -> tuple[np.ndarray, float, int]:
    """``(x, max |x^3 - a|, iterations)`` of Newton's method for ``x^3 = a`` from ``x = a``, in
    ``a``'s dtype, with the same formula as the fused kernel."""
    x = a.copy()
    err = float(np.abs(x * x * x - a).max())
    iterations = 0
    while err > tol and iterations < cap:
        x2 = x * x
        x -= (x2 * x - a) / (3 * x2)
        err = float(np.abs(x * x * x - a).max())
        iterations += 1
    return x, err, iterations


def rel_err(got, want) -> float:
    """``max |got - want| / max |want|`` (NumPy arrays; 0 for an all-zero reference)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = float(np.abs(want).max()) if want.size else 0.0
    return float(np.abs(got - want).max()) / (scale or 1.0) if want.size else 0.0


# -- tensorplay ---------------------------------------------------------------------------------

@fused("tp_heat_step")
def _heat_step(xp):
    def step(centre, up, down, left, right, alpha, out):
        """``out = centre + alpha (up + down + left + right - 4 centre)`` (the interiors)."""
        xp.add(centre, alpha * (up + down + left + right - 4 * centre), out=out)
    return step


@fused("tp_newton_cube_root")
def _newton_step(xp):
    def newton(x, a, residual):
        """One Newton step for ``x^3 = a``, in place; ``residual = |x^3 - a|`` at the new x."""
        x2 = x * x
        x -= (x2 * x - a) / (3 * x2)
        xp.abs(x * x * x - a, out=residual)
    return newton


class Heat:
    """The heat workload in tensorplay on ``device`` (see the module docstring).

    :meth:`run` is the whole workload: ``tp.fori_loop(0, steps, body, u0)`` whose body snapshots
    the grid under ``tp.cond(i % every == 0, ...)`` and then takes one step. Eagerly it reads
    each decision on the host; inside a capture (:meth:`graph`) it is one while node whose
    every pass runs 8 steps (``fori_loop``'s default unrolling), each a ``tp.cond`` if/else node
    (the snapshot, and an empty else body for its ``false_fn``) and the step. The snapshots land
    in ``snapshots`` (``(count, n, n)``, this object's buffer, written in place by the branch);
    :meth:`run` returns the final grid.

    Each step is one fused kernel writing the next grid into one of two scratch grids (never the
    one it reads: the stencil reads neighbours), whose boundary holds ``u0``'s; the loop copies
    it into its carried grid (captured, only after a pass's last step). Pitfall: eagerly, the
    grid :meth:`run` returns is one of those scratch grids, overwritten by the next run.
    """

    def __init__(self, device, n: int, steps: int, every: int, dtype=None):
        if steps < 1 or every < 1:
            raise ValueError(f"Heat: steps and every must be >= 1, got steps={steps}, "
                             f"every={every}")
        dtype = tp.float32 if dtype is None else dtype
        self.n, self.steps, self.every = n, steps, every
        self.u0 = tp.tensor(heat_initial(n), dtype=dtype, device=device)
        self.device = self.u0.device   # with its index ("cuda" means the current device)
        self.snapshots = tp.zeros((snapshot_count(steps, every), n, n), dtype=dtype,
                                  device=self.device)
        self._scratch = (self.u0.clone(), self.u0.clone())
        self._alpha = tp.full((), ALPHA, dtype=dtype, device=self.device)
        self._kernels: list = []   # (grid read, grid written, kernel), the latest last

    def step(self, u: tp.Tensor) -> tp.Tensor:
        """One explicit step from the grid ``u``: one fused kernel on the current stream,
        writing the interior of a scratch grid other than ``u``, which it returns."""
        for source, target, kernel in self._kernels:
            if source is u:
                break
        else:
            target = self._scratch[1] if u is self._scratch[0] else self._scratch[0]
            kernel = self._step_kernel(u, target)
            self._kernels = [*self._kernels[-3:], (u, target, kernel)]
        _dispatch.launch(self.device, kernel)
        return target

    def _step_kernel(self, u: tp.Tensor, target: tp.Tensor):
        step = _heat_step.for_xp(_dispatch.xp_of(self.device))
        grid, out, alpha = u._data, target._data, self._alpha._data
        centre, up, down = grid[1:-1, 1:-1], grid[:-2, 1:-1], grid[2:, 1:-1]
        left, right, inner = grid[1:-1, :-2], grid[1:-1, 2:], out[1:-1, 1:-1]

        def heat_step():
            step(centre, up, down, left, right, alpha, inner)
        return _dispatch.named("heat_step", heat_step)

    def _snapshot(self, i: tp.Tensor, u: tp.Tensor) -> tuple:
        self.snapshots[i // self.every] = u
        return ()

    def run(self) -> tp.Tensor:
        """All the steps from ``u0``, as ``tp.fori_loop`` + ``tp.cond``; the final grid."""
        every = self.every

        def body(i, u):
            tp.cond(i % every == 0, self._snapshot, _no_snapshot, (i, u))
            return self.step(u)
        return tp.fori_loop(0, self.steps, body, self.u0)

    def run_unrolled(self) -> tp.Tensor:
        """The same kernels as :meth:`run` with the decisions taken in Python: each step's
        kernel and the copy into the carried grid, a snapshot copy where ``k % every == 0``;
        captured, the floor :meth:`run`'s control flow is measured against."""
        u = self.u0.clone()
        for k in range(self.steps):
            if k % self.every == 0:
                self.snapshots[k // self.every] = u
            u.copy_(self.step(u))
        return u

    def graph(self, unrolled: bool = False) -> tuple[tp.accelerator.Graph, tp.Tensor]:
        """``(graph, final grid)``: :meth:`run` (or :meth:`run_unrolled`) captured once, after
        one eager step has compiled the kernel; every replay runs the whole workload from
        ``u0``."""
        self.step(self.u0)
        graph = tp.accelerator.Graph()
        with graph:
            out = self.run_unrolled() if unrolled else self.run()
        return graph, out


def _no_snapshot(i: tp.Tensor, u: tp.Tensor) -> tuple:
    return ()


class Newton:
    """The Newton workload in tensorplay on ``device`` (see the module docstring).

    :meth:`run` is ``tp.while_loop`` over ``(x, err, k)`` (``err = max |x^3 - a|``, ``k`` the
    iterations, 0-d int32) from ``x = a``: ``cond_fn`` is ``(err > tol) & (k < cap)``, the body
    one fused kernel (the step and ``|x^3 - a|``), a max and the count, updating the carried
    buffers in place. Eagerly the predicate is read on the host every iteration; captured
    (:meth:`graph`) the loop is one while node. ``a`` is read when the loop starts, so a graph
    solves for ``a``'s current values at every replay.
    """

    def __init__(self, device, size: int, tol: float = NEWTON_TOL, cap: int = NEWTON_CAP,
                 dtype=None):
        dtype = tp.float32 if dtype is None else dtype
        self.tol, self.cap = float(tol), int(cap)
        self.a = tp.tensor(newton_values(size), dtype=dtype, device=device)
        self.device = self.a.device   # with its index ("cuda" means the current device)
        self.residual = tp.empty_like(self.a)
        self._kernel: tuple[tp.Tensor, Callable[[], None]] | None = None   # (x, the kernel)

    def _keep_going(self, x: tp.Tensor, err: tp.Tensor, k: tp.Tensor) -> tp.Tensor:
        return (err > self.tol) & (k < self.cap)

    def _body(self, x: tp.Tensor, err: tp.Tensor, k: tp.Tensor) -> tuple:
        if self._kernel is None or self._kernel[0] is not x:
            self._kernel = (x, self._step_kernel(x))
        _dispatch.launch(self.device, self._kernel[1])
        err.copy_(self.residual.amax())
        k.add_(1)
        return x, err, k

    def _step_kernel(self, x: tp.Tensor):
        newton = _newton_step.for_xp(_dispatch.xp_of(self.device))
        xs, a, residual = x._data, self.a._data, self.residual._data

        def newton_step():
            newton(xs, a, residual)
        return _dispatch.named("newton_step", newton_step)

    def run(self) -> tuple[tp.Tensor, tp.Tensor, tp.Tensor]:
        """``(x, max |x^3 - a|, iterations)`` after the loop, as ``tp.while_loop``."""
        a = self.a
        err = (a * a * a - a).abs().amax()
        k = tp.zeros((), dtype=tp.int32, device=self.device)
        return tp.while_loop(self._keep_going, self._body, (a, err, k))

    def graph(self) -> tuple[tp.accelerator.Graph, tuple[tp.Tensor, tp.Tensor, tp.Tensor]]:
        """``(graph, (x, err, iterations))``: :meth:`run` captured once, after one eager
        iteration on a copy of ``a`` has compiled the kernel."""
        self._body(self.a.clone(), tp.zeros((), dtype=self.a.dtype, device=self.device),
                   tp.zeros((), dtype=tp.int32, device=self.device))
        graph = tp.accelerator.Graph()
        with graph:
            out = self.run()
        return graph, out


# -- the rows -----------------------------------------------------------------------------------

def heat_case_name(n: int, steps: int, every: int) -> str:
    return f"heat {n}x{n}, {steps} steps, snapshot every {every}"


def newton_case_name(size: int) -> str:
    return f"Newton x^3 = a, {size:,} values"


def control_flow_case(device: str, small: bool) -> Iterator[dict]:
    """Rows ``{case, impl, us, ...}`` of both workloads (``us``: microseconds per full run;
    see the module docstring for the extra keys): :data:`HEAT` and :data:`NEWTON_SIZE`, or
    :data:`SMALL_HEAT` and :data:`SMALL_NEWTON_SIZE` when ``small``."""
    n, steps, every = SMALL_HEAT if small else HEAT
    yield from heat_rows(device, n, steps, every)
    yield from newton_rows(device, SMALL_NEWTON_SIZE if small else NEWTON_SIZE)


def _heat_extras(us: float | None, steps: int, got, reference) -> dict:
    """``steps``, ``per_step_us`` and ``rel_err`` (over the final grid and the snapshots) of a
    heat row; ``got`` is ``(final grid, snapshots)`` as NumPy arrays."""
    return {"steps": steps, "per_step_us": None if us is None else us / steps,
            "rel_err": max(rel_err(got[0], reference[0]), rel_err(got[1], reference[1]))}


def heat_rows(device: str, n: int, steps: int, every: int) -> Iterator[dict]:
    """The heat case's rows: tensorplay's captured loop (the reference row), the same kernels
    captured unrolled, tensorplay eager, then the peers (on a GPU)."""
    case = heat_case_name(n, steps, every)
    heat = Heat(device, n, steps, every)
    reference = heat_reference(heat_initial(n), steps, every)
    sync = tp.accelerator.synchronize

    def result(grid):
        return grid.cpu().numpy(), heat.snapshots.cpu().numpy()

    graph, out = heat.graph()
    loop_us = best_time(graph.replay, sync)
    loop_row = {"case": case, "impl": "tensorplay graph (fori_loop + cond)", "us": loop_us,
                **_heat_extras(loop_us, steps, result(out), reference)}
    unrolled, unrolled_out = heat.graph(unrolled=True)
    unrolled_us = best_time(unrolled.replay, sync)
    unrolled_row = {"case": case, "impl": f"tensorplay graph, {steps} steps unrolled",
                    "us": unrolled_us,
                    **_heat_extras(unrolled_us, steps, result(unrolled_out), reference),
                    "note": "the same kernels, no control flow"}
    loop_row["overhead_us"] = (loop_us - unrolled_us) / steps
    yield loop_row
    yield unrolled_row
    state = {}

    def eager():
        state["out"] = heat.run()
    us = best_time(eager, sync)
    yield {"case": case, "impl": "tensorplay eager (host read per decision)", "us": us,
           **_heat_extras(us, steps, result(state["out"]), reference)}
    if not peers._gpu():
        return
    for row in _peer_rows(["torch eager", "torch CUDAGraph (unrolled steps)"],
                          ["JAX jit (lax.fori_loop + lax.cond)"],
                          lambda torch: _torch_heat_rows(torch, n, steps, every),
                          lambda jax: _jax_heat_row(jax, n, steps, every)):
        result = row.pop("result", None)
        row.update({"steps": steps} if result is None else
                   _heat_extras(row["us"], steps, result, reference))
        yield {"case": case, **row}


def newton_rows(device: str, size: int) -> Iterator[dict]:
    """The Newton case's rows: tensorplay's captured loop (the reference row), tensorplay eager,
    then the peers (on a GPU)."""
    case = newton_case_name(size)
    newton = Newton(device, size)
    want_x, _, want_iterations = newton_reference(newton_values(size))
    sync = tp.accelerator.synchronize

    def extras(x, err, iterations) -> dict:
        return {"iterations": int(iterations), "residual": float(err),
                "rel_err": rel_err(x, want_x),
                **({} if int(iterations) == want_iterations else
                   {"note": f"the NumPy reference took {want_iterations} iterations"})}

    graph, (x, err, k) = newton.graph()
    us = best_time(graph.replay, sync)
    yield {"case": case, "impl": "tensorplay graph (while_loop)", "us": us,
           **extras(x.cpu().numpy(), err.item(), k.item())}
    state = {}

    def eager():
        state["out"] = newton.run()
    us = best_time(eager, sync)
    x, err, k = state["out"]
    yield {"case": case, "impl": "tensorplay eager (host read per iteration)", "us": us,
           **extras(x.cpu().numpy(), err.item(), k.item())}
    if not peers._gpu():
        return
    for row in _peer_rows(["torch eager (host check per iteration)"],
                          ["JAX jit (lax.while_loop)"],
                          lambda torch: [_torch_newton_row(torch, size)],
                          lambda jax: _jax_newton_row(jax, size)):
        result = row.pop("result", None)
        if result is not None:
            row.update(extras(*result))
        yield {"case": case, **row}


# -- peers (on a GPU) ---------------------------------------------------------------------------

def _peer_rows(torch_impls: list[str], jax_impls: list[str], torch_rows, jax_row) -> Iterator:
    """The peers' rows: ``torch_rows(torch)`` (an iterable of rows, ``torch_impls`` in order)
    and ``jax_row(jax)`` (one row); a peer that is absent, whose JAX default backend is not the
    GPU, or that raises is a row per impl with ``us`` None and a note saying why."""
    torch = peers._torch_cuda()
    if torch is None:
        why = ("skipped: torch is not installed" if peers._module("torch") is None
               else "skipped: torch sees no CUDA device")
        yield from ({"impl": impl, "us": None, "note": why} for impl in torch_impls)
    else:
        done = 0
        try:
            for row in torch_rows(torch):
                done += 1
                yield row
        except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
            note = f"failed: {peers.error_text(error)}"
            yield from ({"impl": impl, "us": None, "note": note} for impl in torch_impls[done:])
    jax = peers._module("jax")
    if jax is None:
        yield from ({"impl": impl, "us": None, "note": "skipped: JAX is not installed"}
                    for impl in jax_impls)
        return
    backend = jax.default_backend()
    if backend not in ("gpu", "cuda"):
        note = f"skipped: JAX's default backend is {backend!r}, not the GPU"
        yield from ({"impl": impl, "us": None, "note": note} for impl in jax_impls)
        return
    try:
        yield jax_row(jax)
    except Exception as error:  # noqa: BLE001 - a peer that fails is a note, not a crash
        yield from ({"impl": impl, "us": None, "note": f"failed: {peers.error_text(error)}"}
                    for impl in jax_impls)


def torch_heat(torch, n: int, steps: int, every: int, device: str = "cuda"):
    """``(run, state)``: the heat workload in torch on ``device``. ``run(u, v)`` takes every
    step from ``u0`` (copied into ``u``; ``v`` is a grid whose boundary holds ``u0``'s), each
    step writing the other grid and swapping the names (no copy), snapshotting into
    ``state["snapshots"]``, and returns the grid holding the last step. Torch ops only (five
    kernels a step), so it can be captured into a CUDAGraph, unrolled."""
    u0 = torch.tensor(heat_initial(n), device=device)
    state = {"u0": u0, "snapshots": torch.zeros((snapshot_count(steps, every), n, n),
                                                device=device)}
    snapshots = state["snapshots"]

    def step(u, out):
        lap = u[:-2, 1:-1] + u[2:, 1:-1]
        lap += u[1:-1, :-2]
        lap += u[1:-1, 2:]
        lap.sub_(u[1:-1, 1:-1], alpha=4)
        torch.add(u[1:-1, 1:-1], lap, alpha=ALPHA, out=out[1:-1, 1:-1])

    def run(u, v):
        u.copy_(u0)
        for k in range(steps):
            if k % every == 0:
                snapshots[k // every].copy_(u)
            step(u, v)
            u, v = v, u
        return u
    return run, state


def _torch_heat_rows(torch, n: int, steps: int, every: int,
                     device: str = "cuda") -> Iterator[dict]:
    """torch eager, then one CUDAGraph of the unrolled steps (warmed up on a side stream, as
    torch's documentation asks); each row's ``result`` is ``(final grid, snapshots)``."""
    run, state = torch_heat(torch, n, steps, every, device)
    sync = torch.cuda.synchronize
    grids = (state["u0"].clone(), state["u0"].clone())

    def eager():
        state["out"] = run(*grids)

    def result(grid):
        return grid.cpu().numpy(), state["snapshots"].cpu().numpy()
    us = best_time(eager, sync)
    yield {"impl": "torch eager", "us": us, "result": result(state["out"])}
    static = (state["u0"].clone(), state["u0"].clone())
    graph, out = peers.torch_graph(torch, lambda: run(*static), warmups=1)
    us = best_time(graph.replay, sync)
    yield {"impl": "torch CUDAGraph (unrolled steps)", "us": us, "result": result(out)}


def torch_newton(torch, size: int, device: str = "cuda"):
    """``run() -> (x, max |x^3 - a|, iterations)``: the Newton workload in torch eager on
    ``device``, reading ``max |x^3 - a|`` on the host (``.item()``) every iteration."""
    a = torch.tensor(newton_values(size), device=device)

    def run():
        x = a.clone()
        err = (x * x * x - a).abs().max().item()
        iterations = 0
        while err > NEWTON_TOL and iterations < NEWTON_CAP:
            x2 = x * x
            x -= (x2 * x - a) / (3 * x2)
            err = (x * x * x - a).abs().max().item()
            iterations += 1
        return x, err, iterations
    return run


def _torch_newton_row(torch, size: int, device: str = "cuda") -> dict:
    run = torch_newton(torch, size, device)
    state = {}

    def call():
        state["out"] = run()
    us = best_time(call, torch.cuda.synchronize)
    x, err, iterations = state["out"]
    return {"impl": "torch eager (host check per iteration)", "us": us,
            "result": (x.cpu().numpy(), err, iterations)}


def jax_heat(jax, n: int, steps: int, every: int):
    """``(run, u0)``: the heat workload as one ``jax.jit`` of ``lax.fori_loop`` with a
    ``lax.cond`` snapshot (``lax.dynamic_update_slice`` into the carried snapshot buffer);
    ``run(u0)`` returns ``(final grid, snapshots)``. ``u0`` is on JAX's default device."""
    import jax.numpy as jnp
    from jax import lax

    count = snapshot_count(steps, every)

    @jax.jit
    def run(u0):
        def body(k, carry):
            u, snapshots = carry
            snapshots = lax.cond(
                k % every == 0,
                lambda s: lax.dynamic_update_slice(s, u[None], (k // every, 0, 0)),
                lambda s: s, snapshots)
            inner = u[1:-1, 1:-1] + ALPHA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                             + u[1:-1, 2:] - 4 * u[1:-1, 1:-1])
            return u.at[1:-1, 1:-1].set(inner), snapshots
        return lax.fori_loop(0, steps, body, (u0, jnp.zeros((count, n, n), u0.dtype)))
    return run, jax.device_put(heat_initial(n))


def _jax_timed(jax, run, argument) -> tuple[float, Any]:
    """``(microseconds per call, the last result)`` of the jitted ``run(argument)``."""
    state = {}

    def call():
        state["out"] = run(argument)

    def sync():
        jax.block_until_ready(state["out"])
    return best_time(call, sync), state["out"]


def _jax_heat_row(jax, n: int, steps: int, every: int) -> dict:
    us, (grid, snapshots) = _jax_timed(jax, *jax_heat(jax, n, steps, every))
    return {"impl": "JAX jit (lax.fori_loop + lax.cond)", "us": us,
            "result": (np.asarray(grid), np.asarray(snapshots))}


def jax_newton(jax, size: int):
    """``(run, a)``: the Newton workload as one ``jax.jit`` of ``lax.while_loop``;
    ``run(a)`` returns ``(x, max |x^3 - a|, iterations)``."""
    import jax.numpy as jnp
    from jax import lax

    @jax.jit
    def run(a):
        def keep_going(state):
            _, err, k = state
            return (err > NEWTON_TOL) & (k < NEWTON_CAP)

        def body(state):
            x, _, k = state
            x2 = x * x
            x = x - (x2 * x - a) / (3 * x2)
            return x, jnp.max(jnp.abs(x * x * x - a)), k + 1
        return lax.while_loop(keep_going, body,
                              (a, jnp.max(jnp.abs(a * a * a - a)), jnp.int32(0)))
    return run, jax.device_put(newton_values(size))


def _jax_newton_row(jax, size: int) -> dict:
    us, (x, err, k) = _jax_timed(jax, *jax_newton(jax, size))
    return {"impl": "JAX jit (lax.while_loop)", "us": us,
            "result": (np.asarray(x), float(err), int(k))}
