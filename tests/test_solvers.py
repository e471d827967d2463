"""The conjugate-gradient Poisson solver (demo and benchmark): fused steps against a NumPy
reference, and the one-graph solve against stepping eagerly."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorplay as tp
from support import accelerator_device, count_device_waits, requires_accelerator, supports, to_numpy
from tensorplay.bench import solvers as _solvers


def _numpy_apply(x):
    out = 4 * x
    out[1:, :] -= x[:-1, :]
    out[:-1, :] -= x[1:, :]
    out[:, 1:] -= x[:, :-1]
    out[:, :-1] -= x[:, 1:]
    return out


def _numpy_cg(b, steps):
    b = b.astype(np.float64)
    x, r, p = np.zeros_like(b), b.copy(), b.copy()
    rs = (r * r).sum()
    for _ in range(steps):
        ap = _numpy_apply(p)
        alpha = rs / (p * ap).sum()
        x += alpha * p
        r -= alpha * ap
        rs_new = (r * r).sum()
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x, r, rs


def test_fused_steps_match_the_numpy_reference(device):
    n = 16
    b = _solvers.poisson_rhs(n, device)
    solver = _solvers.PoissonCG(b, 1e-6, 100)
    for _ in range(5):
        solver.step()
    x, r, rs = _numpy_cg(to_numpy(b), 5)
    np.testing.assert_allclose(to_numpy(solver.x), x, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(to_numpy(solver.r), r, rtol=1e-3, atol=1e-3)
    assert float(solver.rs.item()) == pytest.approx(rs, rel=1e-3)
    assert int(solver.iterations.item()) == 5
    assert bool(solver.running.item()) is True
    padded = to_numpy(solver.padded)     # the border of the direction buffer stays zero
    assert not padded[0].any() and not padded[-1].any()
    assert not padded[:, 0].any() and not padded[:, -1].any()


def test_step_stops_at_max_iterations(device):
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(8, device), 1e-6, 3)
    for _ in range(3):
        solver.step()
    assert int(solver.iterations.item()) == 3 and bool(solver.running.item()) is False


@requires_accelerator
def test_graph_solve_matches_eager_stepping_and_replays():
    device = accelerator_device()
    n, tol = 24, 1e-5
    eager = _solvers.PoissonCG(_solvers.poisson_rhs(n, device), tol, 10 * n)
    while bool(eager.running.item()):
        eager.step()
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device), tol, 10 * n)
    graph = _solvers.cg_graph(solver)
    for restart in (True, False):         # the graph starts from b itself: restart not needed
        if restart:
            solver.restart()
        else:
            solver.x.fill_(123.0)
        graph.replay()
        assert int(solver.iterations.item()) == int(eager.iterations.item())
        np.testing.assert_allclose(to_numpy(solver.x), to_numpy(eager.x), rtol=1e-5, atol=1e-6)
    assert int(solver.iterations.item()) < 10 * n
    assert float((solver.rs / (solver.b * solver.b).sum()).sqrt().item()) <= tol * 1.0001
    assert _solvers.relative_residual(solver, tol) < 1e-2


def _solve_by_stepping(b, tol, max_iterations):
    solver = _solvers.PoissonCG(b, tol, max_iterations)
    while bool(solver.running.item()):
        solver.step()
    return solver


def test_solve_is_a_while_loop_that_matches_stepping(device):
    """solve() eagerly: tp.while_loop reading the predicate once per iteration; the result is a
    new CGState and the state it started from is left as it was."""
    b = _solvers.poisson_rhs(12, device)
    stepped = _solve_by_stepping(b, 1e-5, 120)
    solver = _solvers.PoissonCG(b, 1e-5, 120)
    start = solver.initial_state()
    before = [to_numpy(t).copy() for t in start]
    result = solver.solve(start)
    assert isinstance(result, _solvers.CGState)
    assert all(got is not old for got, old in zip(result, start))
    for tensor, kept in zip(start, before):
        np.testing.assert_array_equal(to_numpy(tensor), kept)
    assert int(result.iterations.item()) == int(stepped.iterations.item()) > 0
    assert bool(result.running.item()) is False
    np.testing.assert_allclose(to_numpy(result.x), to_numpy(stepped.x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(to_numpy(result.p), to_numpy(stepped.p), rtol=1e-5, atol=1e-6)
    assert not int(solver.iterations.item())     # solve() leaves the solver's own state alone


def test_solve_stops_at_max_iterations_and_zero_runs_none(device):
    b = _solvers.poisson_rhs(8, device)
    assert int(_solvers.PoissonCG(b, 1e-6, 3).solve().iterations.item()) == 3
    none = _solvers.PoissonCG(b, 1e-6, 0)
    assert bool(none.running.item()) is False
    result = none.solve()
    assert int(result.iterations.item()) == 0 and not to_numpy(result.x).any()


@pytest.mark.parametrize("bad", [-1, 2.5, True, "10", None])
def test_max_iterations_must_be_a_non_negative_int(bad):
    with pytest.raises(ValueError, match=f"max_iterations must be an int >= 0, got {bad!r}"):
        _solvers.PoissonCG(tp.ones((4, 4)), 1e-6, bad)


@requires_accelerator
def test_graph_solves_for_the_current_values_of_b():
    """The initial state is computed inside the graph: a replay after b changes solves the new
    system (A is linear: 2 b gives 2 x in the same iterations)."""
    device = accelerator_device()
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(16, device, tp.float64), 1e-8, 160)
    graph = _solvers.cg_graph(solver)
    graph.replay()
    x, iterations = to_numpy(solver.x).copy(), int(solver.iterations.item())
    solver.b.mul_(2)
    graph.replay()
    assert int(solver.iterations.item()) == iterations
    np.testing.assert_allclose(to_numpy(solver.x), 2 * x, rtol=1e-9, atol=1e-12)


@requires_accelerator
def test_captured_solve_makes_no_host_synchronization(monkeypatch):
    calls = count_device_waits(monkeypatch)
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(16, accelerator_device()), 1e-5, 160)
    graph = _solvers.cg_graph(solver)
    calls.clear()
    for _ in range(3):
        graph.replay()
    assert calls == []
    assert int(solver.iterations.item()) > 1 and calls   # reading a result does wait


@pytest.mark.skipif(tp.accelerator.current_accelerator() is None
                    or tp.accelerator.current_accelerator().type != "sim",
                    reason="reads the simulated accelerator's graph dump")
def test_captured_loop_body_is_the_step_alone(tmp_path):
    """The body updates the carried buffers in place and returns them, and cond_fn returns the
    carried running flag, so tp.while_loop copies nothing: the while body is the fused step."""
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(8, accelerator_device()), 1e-6, 80)
    graph = _solvers.cg_graph(solver)
    graph.debug_dump(tmp_path / "cg.dot")
    dot = (tmp_path / "cg.dot").read_text()
    body = dot[dot.index('label="while"'):]
    assert re.findall(r'label="kernel\\n(\w+)"', body) == ["cg_step"]


def test_zero_right_hand_side_does_not_iterate(device):
    solver = _solvers.PoissonCG(tp.zeros((8, 8), device=device), 1e-6, 10)
    assert bool(solver.running.item()) is False
    assert not to_numpy(solver.x).any()


@pytest.mark.parametrize("shape,tol,message", [((4, 5), 1e-6, "square"), ((1, 1), 1e-6, "n >= 2"),
                                               ((4, 4), 0.0, "tol"), ((4, 4), 2.0, "tol")])
def test_bad_arguments_say_what_was_given(shape, tol, message):
    with pytest.raises(ValueError, match=message):
        _solvers.PoissonCG(tp.ones(shape), tol, 10)


def _solve_eagerly(device, dtype, max_iterations, n=64, tol=1e-6):
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device, dtype), tol, max_iterations)
    while bool(solver.running.item()):
        solver.step()
    return solver


def test_float32_solve_is_not_called_converged_and_says_why_it_stalls(device):
    solver = _solve_eagerly(device, tp.float32, 640)
    converged, text = _solvers.describe_outcome(solver, 1e-6)
    residual = _solvers.relative_residual(solver, 1e-6)
    assert residual > 1e-5                       # eps * cond(A) ~ 2e-4 for n = 64 in float32
    assert converged is False
    assert "converged" not in text.replace("not converged", "")
    assert "1.0e-06 in float32" in text and f"reached {residual:.2e}" in text
    assert "eps * cond(A)" in text


def test_float64_solve_reaches_the_tolerance_and_says_converged(device):
    if not supports(device, tp.float64):
        pytest.skip(f"{device} does not compute float64")
    solver = _solve_eagerly(device, tp.float64, 640)
    converged, text = _solvers.describe_outcome(solver, 1e-6)
    assert converged is True and text.endswith(": converged")
    assert _solvers.relative_residual(solver, 1e-6) <= 1e-6


def test_iteration_limit_is_named_as_the_reason(device):
    solver = _solve_eagerly(device, tp.float32, 5)
    converged, text = _solvers.describe_outcome(solver, 1e-6)
    assert converged is False and "stopped at the limit of 5 iterations" in text


def test_condition_number_matches_the_dense_operator():
    n = 6
    dense = np.stack([_numpy_apply(np.eye(n * n)[k].reshape(n, n)).ravel()
                      for k in range(n * n)])
    assert _solvers.poisson_condition_number(n) == pytest.approx(np.linalg.cond(dense), rel=1e-9)
