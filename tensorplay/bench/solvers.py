"""Conjugate gradients for the 2-D Poisson equation, as the demo and the benchmark run it.

The operator is the 5-point stencil on an ``n x n`` grid with zero Dirichlet boundary,
``(A x)[i, j] = 4 x[i, j] - x[i-1, j] - x[i+1, j] - x[i, j-1] - x[i, j+1]``, applied with views
(no matrix is formed). :meth:`PoissonCG.solve` is the whole solve as one ``tp.while_loop`` over
the carried :class:`CGState`; :func:`cg_graph` captures it, so the host launches once per solve
and the device decides when to stop.

One CG iteration is five fused kernels and two sums (``_tensor.fusion``: one CuPy kernel each
on cuda, NumPy op by op elsewhere): the search direction lives in a zero-padded ``(n+2, n+2)``
buffer so that the stencil reads five shifted views of it in one elementwise kernel. The loop's
predicate is computed inside the last of those kernels (``running``, a carried value), so
``cond_fn`` launches nothing: captured, the loop adds one predicate copy per iteration to the
step's own kernels (``tp.while_loop`` copies ``cond_fn``'s result into the while node's predicate)
and no copy of the carried values, which the body updates in place and returns.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple

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


class CGState(NamedTuple):
    """The values a CG solve carries from one iteration to the next (``tp.while_loop``'s
    ``carried_inputs``), all on ``b``'s device.

    ``padded`` is the search direction ``p`` inside a zero border, shape ``(n+2, n+2)`` (the
    stencil reads shifted views of it; :attr:`p` is its interior). ``rs`` is ``r . r`` (0-d),
    ``iterations`` the iterations run (0-d int32) and ``running`` the loop predicate (shape
    ``(1,)``, bool): true while ``r . r > tol^2 b . b`` and ``iterations < max_iterations``.
    """

    x: tp.Tensor
    r: tp.Tensor
    padded: tp.Tensor
    rs: tp.Tensor
    iterations: tp.Tensor
    running: tp.Tensor

    @property
    def p(self) -> tp.Tensor:
        """The search direction: the interior of ``padded`` (a view)."""
        return self.padded[1:-1, 1:-1]


class PoissonCG:
    """CG for ``A x = b`` on ``b``'s device (``b``: an ``n x n`` grid, ``n >= 2``), stopping when
    ``||r|| <= tol ||b||`` or after ``max_iterations`` iterations.

    The solver holds one :class:`CGState`, ``state`` (its fields are also attributes:
    ``solver.x``, ``solver.iterations``, ...), and scratch buffers its kernels write. Two ways
    to run it:

    - :meth:`step`: one iteration on ``state``, in place (one launch of fused kernels;
      capturable; it does not look at ``running``, so stepping past convergence keeps iterating);
    - :meth:`solve`: the whole solve as one ``tp.while_loop`` over a :class:`CGState`, eagerly
      (one host read of the predicate per iteration) or, inside a capture, as one while node
      (:func:`cg_graph`).

    Pitfall: the scratch buffers and the threshold are the solver's own, so two solves of one
    solver must not run at the same time (on two streams, or two replays in flight).
    """

    def __init__(self, b: tp.Tensor, tol: float, max_iterations: int):
        if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] < 2:
            raise ValueError(f"PoissonCG: b must be a square n x n grid with n >= 2, got shape "
                             f"{b.shape}")
        if not 0 < tol < 1:
            raise ValueError(f"PoissonCG: tol must be in (0, 1), got {tol}")
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, numbers.Integral) \
                or max_iterations < 0:
            raise ValueError(f"PoissonCG: max_iterations must be an int >= 0, got "
                             f"{max_iterations!r}")
        self.b: tp.Tensor = b
        self.tol: float = float(tol)
        self.max_iterations: int = int(max_iterations)
        self.ap: tp.Tensor = tp.zeros_like(b)
        self.product: tp.Tensor = tp.zeros_like(b)
        self.threshold2: tp.Tensor = tp.zeros((), dtype=b.dtype, device=b.device)
        # (the CGState the kernel closes over, the kernel)
        self._kernel: tuple[CGState, Callable[[], None]] | None = None
        self.state: CGState = self.initial_state()

    # the fields of ``state``, as attributes
    x = property(lambda self: self.state.x, doc="The iterate (of ``state``).")
    r = property(lambda self: self.state.r, doc="The residual ``b - A x`` as updated.")
    padded = property(lambda self: self.state.padded, doc="The zero-padded direction buffer.")
    p = property(lambda self: self.state.p, doc="The search direction (a view of ``padded``).")
    rs = property(lambda self: self.state.rs, doc="``r . r`` (0-d).")
    iterations = property(lambda self: self.state.iterations, doc="Iterations run (0-d int32).")
    running = property(lambda self: self.state.running, doc="The loop predicate, shape (1,).")

    def initial_state(self) -> CGState:
        """A new :class:`CGState` for the start of a solve from ``b`` (``x = 0``, ``r = p = b``),
        in tensor ops on the current stream (capturable: no host read); also sets the solver's
        threshold ``tol^2 b . b`` from ``b``'s current values."""
        b = self.b
        n = b.shape[0]
        padded = tp.zeros((n + 2, n + 2), dtype=b.dtype, device=b.device)
        padded[1:-1, 1:-1] = b
        rs = (b * b).sum()
        self.threshold2.copy_(rs * (self.tol * self.tol))
        running = (rs > self.threshold2).reshape((1,))
        if self.max_iterations == 0:
            running.fill_(False)
        return CGState(tp.zeros_like(b), b.clone(), padded, rs,
                       tp.zeros((), dtype=tp.int32, device=b.device), running)

    def restart(self) -> None:
        """Reset ``state`` in place to the start of a solve (eager kernels, in stream order)."""
        for current, initial in zip(self.state, self.initial_state()):
            current.copy_(initial)

    def step(self) -> None:
        """One CG iteration on ``state``, as one launch of fused kernels on the current
        stream (capturable: it reads every value on the device)."""
        _dispatch.launch(self.b.device, self._kernel_for(self.state))

    def solve(self, state: CGState | None = None) -> CGState:
        """The solve as ``tp.while_loop(cond_fn, body_fn, state)``: while ``running``, one
        :meth:`step`'s kernels on the carried values. ``state`` defaults to
        :meth:`initial_state`; it is not modified (``tp.while_loop`` works on copies).

        Eagerly the loop reads ``running`` on the host once per iteration. Inside a capture it
        is one while node and the result is graph-owned buffers that every replay overwrites.
        Returns the final :class:`CGState`.
        """
        state = self.initial_state() if state is None else state
        return tp.while_loop(_keep_running, self._body, state)

    def _body(self, *carried: tp.Tensor) -> CGState:
        """``body_fn``: one iteration on the carried buffers, in place; returns them (so the
        loop copies nothing back)."""
        state = CGState(*carried)
        _dispatch.launch(self.b.device, self._kernel_for(state))
        return state

    def _kernel_for(self, state: CGState):
        """The kernel closure of one iteration over ``state``'s arrays, made once per state
        (a loop's body is called with the same buffers every iteration)."""
        cached = self._kernel
        if cached is not None and all(a is b for a, b in zip(cached[0], state)):
            return cached[1]
        kernel = self._step_kernel(state)
        self._kernel = (state, kernel)
        return kernel

    def _step_kernel(self, state: CGState):
        xp = _dispatch.xp_of(self.b.device)
        apply, update = _apply.for_xp(xp), _update.for_xp(xp)
        direction, scalars = _direction.for_xp(xp), _scalars.for_xp(xp)
        padded = state.padded._data
        p, up, down = padded[1:-1, 1:-1], padded[:-2, 1:-1], padded[2:, 1:-1]
        left, right = padded[1:-1, :-2], padded[1:-1, 2:]
        x, r, ap, product = state.x._data, state.r._data, self.ap._data, self.product._data
        rs, iterations = state.rs._data, state.iterations._data
        running, threshold2 = state.running._data.reshape(()), self.threshold2._data
        max_iterations = self.max_iterations

        def cg_step():
            apply(p, up, down, left, right, ap, product)
            pap = xp.sum(product)
            update(x, r, p, ap, rs, pap, product)
            rs_new = xp.sum(product)
            direction(p, r, rs_new, rs)
            scalars(rs, rs_new, iterations, running, threshold2, max_iterations)
        return _dispatch.named("cg_step", cg_step)


def _keep_running(*carried: tp.Tensor) -> tp.Tensor:
    """``cond_fn`` of :meth:`PoissonCG.solve`: the carried predicate, which the step's last
    kernel computes (``r . r > tol^2 b . b`` and ``iterations < max_iterations``) together with
    the scalars it updates; testing it here instead would cost kernels every iteration."""
    return CGState(*carried).running


def poisson_rhs(n: int, device, dtype=None):
    """A smooth right-hand side on the ``n x n`` grid."""
    dtype = tp.float32 if dtype is None else dtype
    line = tp.linspace(0.0, 1.0, n, dtype=dtype, device=device)
    return (line.reshape((n, 1)) * (1 - line).reshape((n, 1))) * \
        (line.reshape((1, n)) * (1 - line).reshape((1, n))) * 64 + 1


def cg_graph(solver: PoissonCG) -> tp.accelerator.Graph:
    """Capture the full solve, :meth:`PoissonCG.solve`, into one graph: the initial state from
    ``solver.b`` and one while node whose body is one CG step. Every replay solves from ``b``'s
    current values (no :meth:`~PoissonCG.restart` needed) and leaves the result in the solver:
    after the capture, ``solver.state`` is the graph's output buffers.

    One eager step runs first (then the solver restarts) so that the fused kernels are compiled
    before the capture."""
    solver.step()
    solver.restart()
    graph = tp.accelerator.Graph()
    with graph:
        state = solver.solve()
    solver.state = state
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
