"""Conjugate gradients for the 2-D Poisson equation, as the demo and the benchmark run it.

The operator is the 5-point stencil on an ``n x n`` grid with zero Dirichlet boundary,
``(A x)[i, j] = 4 x[i, j] - x[i-1, j] - x[i+1, j] - x[i, j-1] - x[i, j+1]``, applied with views
(no matrix is formed). :func:`cg_graph` captures the whole solve into one graph whose while node
stops on the relative residual, so the host launches once per solve.

One CG iteration is five fused kernels and two sums (``_tensor.fusion``: one CuPy kernel each
on cuda, NumPy op by op elsewhere): the search direction lives in a zero-padded ``(n+2, n+2)``
buffer so that the stencil reads five shifted views of it in one elementwise kernel.
"""

from __future__ import annotations

import math

import ml_dtypes

import tensorplay as tp

from .._runtime import dispatch as _dispatch
from .._tensor.fusion import fused


def poisson_apply(x, out):
    """``out = A x`` for the 5-point stencil (``x`` and ``out`` of shape ``(n, n)``), in tensor
    ops (the reference the fused kernels are checked against)."""
    out.copy_(x).mul_(4)
    out[1:, :].sub_(x[:-1, :])
    out[:-1, :].sub_(x[1:, :])
    out[:, 1:].sub_(x[:, :-1])
    out[:, :-1].sub_(x[:, 1:])
    return out


@fused("tp_cg_apply")
def _apply(xp):
    def apply(centre, up, down, left, right, ap, product):
        """``ap = A p`` and ``product = p * ap`` (summed next into ``p . A p``)."""
        xp.subtract(4 * centre, up + down + left + right, out=ap)
        xp.multiply(centre, ap, out=product)
    return apply


@fused("tp_cg_update")
def _update(xp):
    def update(x, r, p, ap, rs, pap, product):
        """``alpha = rs / pap``; ``x += alpha p``; ``r -= alpha A p``; ``product = r * r``."""
        alpha = rs / pap
        x += alpha * p
        r -= alpha * ap
        xp.multiply(r, r, out=product)
    return update


@fused("tp_cg_direction")
def _direction(xp):
    def direction(p, r, rs_new, rs):
        """``p = r + (rs_new / rs) p``."""
        xp.add(r, (rs_new / rs) * p, out=p)
    return direction


@fused("tp_cg_scalars")
def _scalars(xp):
    def scalars(rs, rs_new, iterations, running, threshold2, max_iterations):
        """``rs = rs_new``; count the iteration; keep running while above tolerance."""
        xp.positive(rs_new, out=rs)
        iterations += 1
        xp.logical_and(rs_new > threshold2, iterations < max_iterations, out=running)
    return scalars


class PoissonCG:
    """State of one CG solve on ``b``'s device: the iterate ``x``, residual ``r``, direction
    ``p`` (a view into a zero-padded buffer), ``rs = r . r`` and the loop predicate ``running``.

    :meth:`step` is one iteration (capturable: it reads every value on the device);
    ``running`` stays true while ``||r|| > tol ||b||`` and fewer than ``max_iterations`` ran.
    """

    def __init__(self, b, tol: float, max_iterations: int):
        if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] < 2:
            raise ValueError(f"PoissonCG: b must be a square n x n grid with n >= 2, got shape "
                             f"{b.shape}")
        if not 0 < tol < 1:
            raise ValueError(f"PoissonCG: tol must be in (0, 1), got {tol}")
        n = b.shape[0]
        self.b = b
        self.x = tp.zeros_like(b)
        self.r = b.clone()
        self.padded = tp.zeros((n + 2, n + 2), dtype=b.dtype, device=b.device)
        self.p = self.padded[1:-1, 1:-1]
        self.ap = tp.zeros_like(b)
        self.product = tp.zeros_like(b)
        self.rs = (b * b).sum()
        self.threshold2 = self.rs * (tol * tol)
        self.iterations = tp.zeros((), dtype=tp.int32, device=b.device)
        self.max_iterations = int(max_iterations)
        self.running = tp.ones((1,), dtype=tp.bool, device=b.device)
        self._kernel = self._step_kernel()
        self.restart()

    def restart(self) -> None:
        """Reset the iterate to zero and the residual to ``b`` (eager kernels, in stream order)."""
        self.x.zero_()
        self.r.copy_(self.b)
        self.p.copy_(self.b)
        self.rs.copy_((self.b * self.b).sum())
        self.iterations.zero_()
        self.running.copy_((self.rs > self.threshold2).reshape((1,)))

    def step(self) -> None:
        """One CG iteration, as one launch of fused kernels on the current stream."""
        _dispatch.launch(self.b.device, self._kernel)

    def _step_kernel(self):
        """The kernel closure of :meth:`step`, over this solve's arrays (made once)."""
        xp = _dispatch.xp_of(self.b.device)
        apply, update = _apply.for_xp(xp), _update.for_xp(xp)
        direction, scalars = _direction.for_xp(xp), _scalars.for_xp(xp)
        padded = self.padded._data
        p, up, down = padded[1:-1, 1:-1], padded[:-2, 1:-1], padded[2:, 1:-1]
        left, right = padded[1:-1, :-2], padded[1:-1, 2:]
        x, r, ap, product = self.x._data, self.r._data, self.ap._data, self.product._data
        rs, iterations = self.rs._data, self.iterations._data
        running, threshold2 = self.running._data.reshape(()), self.threshold2._data
        max_iterations = self.max_iterations

        def cg_step():
            apply(p, up, down, left, right, ap, product)
            pap = xp.sum(product)
            update(x, r, p, ap, rs, pap, product)
            rs_new = xp.sum(product)
            direction(p, r, rs_new, rs)
            scalars(rs, rs_new, iterations, running, threshold2, max_iterations)
        return _dispatch.named("cg_step", cg_step)


def poisson_rhs(n: int, device, dtype=None):
    """A smooth right-hand side on the ``n x n`` grid."""
    dtype = tp.float32 if dtype is None else dtype
    line = tp.linspace(0.0, 1.0, n, dtype=dtype, device=device)
    return (line.reshape((n, 1)) * (1 - line).reshape((n, 1))) * \
        (line.reshape((1, n)) * (1 - line).reshape((1, n))) * 64 + 1


def cg_graph(solver: PoissonCG) -> tp.accelerator.Graph:
    """Capture the full solve: one while node whose body is one CG step.

    One eager step runs first (then the solver restarts) so that the fused kernels are compiled
    before the capture."""
    solver.step()
    solver.restart()
    graph = tp.accelerator.Graph()
    with graph:
        graph.begin_capture_to_while_node(solver.running)
        solver.step()
        graph.end_capture_to_conditional_node()
    return graph


def poisson_condition_number(n: int) -> float:
    """``cond(A)`` of the 5-point operator on an ``n x n`` grid: its eigenvalues are
    ``4 sin^2(i h) + 4 sin^2(j h)`` with ``h = pi / (2 (n + 1))`` and ``1 <= i, j <= n``."""
    h = math.pi / (2 * (n + 1))
    return (math.sin(n * h) / math.sin(h)) ** 2


def describe_outcome(solver: PoissonCG, tol: float) -> tuple[bool, str]:
    """Whether a finished solve met ``tol`` and a sentence saying so: the tolerance asked for
    beside the relative residual ``||b - A x|| / ||b||`` reached (recomputed, waits for the
    device), the iterations, and why it stopped short when it did.

    "Converged" means the recomputed residual is within ``tol``. The loop itself tests the
    residual it updates (``r -= alpha A p``), which rounding makes drift from ``b - A x`` by about
    ``eps * cond(A)`` relative; in float32 that floor can sit far above ``tol``.
    """
    iterations = int(solver.iterations.item())
    residual = relative_residual(solver, tol)
    dtype = solver.b.dtype
    said = (f"asked for a relative residual of {tol:.1e} in {dtype.name}, reached {residual:.2e} "
            f"(||b - A x|| / ||b||, recomputed) in {iterations} iterations")
    if residual <= tol:
        return True, f"{said}: converged"
    if iterations >= solver.max_iterations:
        return False, f"{said}: not converged, stopped at the limit of {iterations} iterations"
    eps = float(ml_dtypes.finfo(dtype.numpy).eps)
    cond = poisson_condition_number(solver.b.shape[0])
    return False, (f"{said}: not converged, {residual / tol:.0f}x above the tolerance. The loop "
                   f"stops on the residual it updates, which rounding pulls away from b - A x "
                   f"to about eps * cond(A) = {eps:.1e} * {cond:.0f} = {eps * cond:.1e} in "
                   f"{dtype.name}")


def relative_residual(solver: PoissonCG, tol: float) -> float:
    """||b - A x|| / ||b||, recomputed from scratch (waits for the device)."""
    check = poisson_apply(solver.x, tp.zeros_like(solver.b))
    return float(((solver.b - check) ** 2).sum().sqrt().item()
                 / (solver.b * solver.b).sum().sqrt().item())
