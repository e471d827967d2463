"""Conjugate gradients for the 2-D Poisson equation, as the demo and the benchmark run it.

The operator is the 5-point stencil on an ``n x n`` grid with zero Dirichlet boundary,
``(A x)[i, j] = 4 x[i, j] - x[i-1, j] - x[i+1, j] - x[i, j-1] - x[i, j+1]``, applied with views
(no matrix is formed). :func:`cg_graph` captures the whole solve into one graph whose while node
stops on the relative residual, so the host launches once per solve.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorplay as tp


def poisson_apply(x, out):
    """``out = A x`` for the 5-point stencil (``x`` and ``out`` of shape ``(n, n)``)."""
    out.copy_(x).mul_(4)
    out[1:, :].sub_(x[:-1, :])
    out[:-1, :].sub_(x[1:, :])
    out[:, 1:].sub_(x[:, :-1])
    out[:, :-1].sub_(x[:, 1:])
    return out


@dataclass
class CGResult:
    x: object
    iterations: int
    relative_residual: float


class PoissonCG:
    """State of one CG solve: the iterate, residual, direction and scalars, all on ``device``."""

    def __init__(self, b, tol: float, max_iterations: int):
        self.b = b
        self.x = tp.zeros_like(b)
        self.r = b.clone()
        self.p = b.clone()
        self.ap = tp.zeros_like(b)
        self.rs = (b * b).sum()
        self.threshold = (self.rs.sqrt() * tol).reshape(())
        self.iterations = tp.zeros((), dtype=tp.int32, device=b.device)
        self.max_iterations = max_iterations
        self.running = tp.ones((1,), dtype=tp.bool, device=b.device)

    def restart(self) -> None:
        """Reset the iterate to zero and the residual to ``b`` (eager kernels, in stream order)."""
        self.x.zero_()
        self.r.copy_(self.b)
        self.p.copy_(self.b)
        self.rs.copy_((self.b * self.b).sum())
        self.iterations.zero_()
        self.running.fill_(True)

    def step(self) -> None:
        """One CG iteration; leaves ``running`` true while the residual is above tolerance."""
        poisson_apply(self.p, self.ap)
        alpha = self.rs / (self.p * self.ap).sum()
        self.x.add_(self.p * alpha)
        self.r.sub_(self.ap * alpha)
        rs_new = (self.r * self.r).sum()
        self.p.mul_(rs_new / self.rs).add_(self.r)
        self.rs.copy_(rs_new)
        self.iterations.add_(1)
        keep_going = (rs_new.sqrt() > self.threshold) & (self.iterations < self.max_iterations)
        self.running.copy_(keep_going.reshape((1,)))

    def result(self) -> CGResult:
        relative = float((self.rs.sqrt() / (self.threshold.item() or 1.0)).item())
        return CGResult(self.x, int(self.iterations.item()), relative)


def poisson_rhs(n: int, device, dtype=None):
    """A smooth right-hand side on the ``n x n`` grid."""
    dtype = tp.float32 if dtype is None else dtype
    line = tp.linspace(0.0, 1.0, n, dtype=dtype, device=device)
    return (line.reshape((n, 1)) * (1 - line).reshape((n, 1))) * \
        (line.reshape((1, n)) * (1 - line).reshape((1, n))) * 64 + 1


def cg_graph(solver: PoissonCG) -> "tp.accelerator.Graph":
    """Capture the full solve: one while node whose body is one CG step."""
    graph = tp.accelerator.Graph()
    with graph:
        graph.begin_capture_to_while_node(solver.running)
        solver.step()
        graph.end_capture_to_conditional_node()
    return graph


def relative_residual(solver: PoissonCG, tol: float) -> float:
    """||b - A x|| / ||b||, recomputed from scratch (waits for the device)."""
    check = poisson_apply(solver.x, tp.zeros_like(solver.b))
    return float(((solver.b - check) ** 2).sum().sqrt().item()
                 / (solver.b * solver.b).sum().sqrt().item())
