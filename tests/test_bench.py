"""The benchmark suite's cases as functions: large products, the MLP's rows, the text table.

Peers (torch, JAX) run on a GPU only, so their code paths are driven here through small stand-in
modules that follow torch's documented behaviour; on this machine the suite itself runs
tensorplay's rows on ``cpu`` and the accelerator's device 0.
"""

import io
import re
import sys
import types

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.bench import controlflow, models, peers, products, suite
from tensorplay.bench.suite import format_table
from support import (accelerator_device, count_device_waits, once_per_suite, requires_accelerator,
                     to_numpy)


@pytest.fixture
def no_tp_precision(monkeypatch):
    """A tensorplay without the float32 matmul precision pair, as older releases were: the bench
    must still run against them."""
    monkeypatch.delattr(tp, "set_float32_matmul_precision", raising=False)
    monkeypatch.delattr(tp, "get_float32_matmul_precision", raising=False)


@pytest.fixture
def fake_tp_precision(monkeypatch):
    """tensorplay's precision pair replaced by a recorder (whether or not the real one exists);
    returns the list of values set, starting from ``"highest"``."""
    state = {"precision": "highest", "set": []}

    def setter(precision):
        if precision not in ("highest", "high", "medium"):
            raise ValueError(f"unknown precision {precision!r}")
        state["precision"] = precision
        state["set"].append(precision)
    monkeypatch.setattr(tp, "set_float32_matmul_precision", setter, raising=False)
    monkeypatch.setattr(tp, "get_float32_matmul_precision", lambda: state["precision"],
                        raising=False)
    return state


def _rows_by_case(rows):
    found = {}
    for row in rows:
        found.setdefault(row["case"], []).append(row)
    return found


def test_products_time_each_setting_and_check_the_result(device, no_tp_precision):
    n = 48
    rows = list(products.products_case(device, n, calls=2))
    by_case = _rows_by_case(rows)
    assert list(by_case) == [products.case_name(n, label) for label, _, _ in products.SETTINGS]
    with_torch = peers._torch_cuda() is not None    # torch: on a GPU only
    for (label, dtype, precision), case_rows in zip(products.SETTINGS, by_case.values()):
        assert [row["impl"] for row in case_rows] == ["tensorplay", "torch"][:1 + with_torch]
        for row in case_rows:
            assert row["dtype"] == dtype and row["n"] == n
            assert row["us"] > 0
            assert row["tflops"] == pytest.approx(2 * n ** 3 / (row["us"] * 1e-6) / 1e12)
            # TF32 keeps 10 bits of mantissa, bfloat16 8 (and rounds the result)
            assert row["rel_err"] < (1e-5 if precision == "highest" else 2e-2), row
        row = case_rows[0]
        if with_torch:
            assert row["tp/torch"] == pytest.approx(row["tflops"] / case_rows[1]["tflops"])
            assert case_rows[1].get("allow_tf32") == {"highest": False, "high": True}.get(
                precision)
        else:
            assert "tp/torch" not in row
        if precision is None:
            assert "note" not in row
        else:   # this tensorplay cannot set the precision: the row says it ran at the default
            assert "tp.set_float32_matmul_precision absent" in row["note"]
            assert f"'{precision}'" in row["note"]


def test_products_set_tensorplay_precision_per_case_and_restore_it(device, fake_tp_precision):
    fake_tp_precision["precision"] = "medium"
    rows = [row for row in products.products_case(device, 16, calls=1)
            if row["impl"] == "tensorplay"]
    assert [row.get("precision") for row in rows] == ["highest", "high", None]
    assert all("note" not in row for row in rows), rows
    assert fake_tp_precision["set"] == ["highest", "medium", "high", "medium"]
    assert tp.get_float32_matmul_precision() == "medium"


def test_tp_matmul_precision_restores_after_an_error(fake_tp_precision):
    with pytest.raises(ZeroDivisionError):
        with products.tp_matmul_precision("high") as note:
            assert note is None and tp.get_float32_matmul_precision() == "high"
            1 / 0
    assert tp.get_float32_matmul_precision() == "highest"


def test_a_product_that_raises_is_a_row_with_a_note_not_a_crash():
    def product():
        raise TypeError("matmul: bfloat16 is not supported here")
    row = products._measure(product, lambda: None, None, None, None, 1)
    assert row == {"us": None,
                   "note": "failed: TypeError: matmul: bfloat16 is not supported here"}
    assert products._tflops(128, row["us"]) is None


def _fake_torch(precision="highest"):
    """torch's legacy pair: ``allow_tf32`` reads and writes ``float32_matmul_precision``
    (True is "high", False "highest"), as torch documents."""
    state = {"precision": precision}

    class Matmul:
        @property
        def allow_tf32(self):
            return state["precision"] != "highest"

        @allow_tf32.setter
        def allow_tf32(self, value):
            state["precision"] = "high" if value else "highest"

    def set_precision(value):
        if value not in ("highest", "high", "medium"):
            raise RuntimeError(f"Invalid precision {value}")
        state["precision"] = value
    return types.SimpleNamespace(
        backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=Matmul())),
        set_float32_matmul_precision=set_precision,
        get_float32_matmul_precision=lambda: state["precision"])


@pytest.mark.parametrize("before", ["highest", "high", "medium"])
def test_torch_matmul_precision_sets_and_restores_both_settings(before):
    torch = _fake_torch(before)
    matmul = torch.backends.cuda.matmul
    tf32_before = matmul.allow_tf32
    with pytest.raises(KeyError):
        with products.torch_matmul_precision(torch, "highest"):
            assert torch.get_float32_matmul_precision() == "highest"
            assert matmul.allow_tf32 is False
            raise KeyError("inside")
    assert torch.get_float32_matmul_precision() == before
    assert matmul.allow_tf32 == tf32_before
    with products.torch_matmul_precision(torch, "high"):
        assert matmul.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == before


@requires_accelerator
def test_mlp_rows_tensorplay_first_then_the_peers_installed():
    rows = list(models.mlp_case(accelerator_device(), calls=2))
    impls = [row["impl"] for row in rows]
    peer_rows = (["torch eager", "torch CUDAGraph + input copy_",
                  'torch.compile(mode="reduce-overhead")'] * (peers._torch_cuda() is not None)
                 + ["JAX jit", "JAX jit, Precision.HIGHEST"]
                 * (peers._gpu() and peers._module("jax") is not None))
    assert impls == ["tensorplay eager", "tensorplay compile (cudagraphs)", *peer_rows]
    assert all(row["us"] > 0 and "note" not in row for row in rows[:2])
    for row in rows[2:]:   # a peer ran, or says why it did not
        assert (row["us"] or 0) > 0 or row["note"].startswith("skipped: "), row


def test_torch_compile_failure_is_a_skipped_row_with_the_reason():
    reset = []

    def compile_(fn, mode):
        assert mode == "reduce-overhead"

        def compiled(x):
            raise RuntimeError("Cannot find a working triton installation.\nmore detail")
        return compiled
    torch = types.SimpleNamespace(
        compile=compile_, cuda=types.SimpleNamespace(synchronize=lambda: None),
        _dynamo=types.SimpleNamespace(reset=lambda: reset.append(True),
                                      mark_static_address=lambda t: None))
    row = models._torch_compile_row(torch, lambda x: x, [], [0, 1, 2, 3], calls=2)
    assert row == {"impl": 'torch.compile(mode="reduce-overhead")', "us": None,
                   "note": "skipped: torch.compile failed: RuntimeError: Cannot find a working "
                           "triton installation."}
    assert reset == [True]


def test_torch_compile_row_marks_weights_static_and_warms_up_before_timing():
    calls, marked = [], []

    def compile_(fn, mode):
        return lambda x: calls.append(x)
    torch = types.SimpleNamespace(
        compile=compile_, cuda=types.SimpleNamespace(synchronize=lambda: None),
        _dynamo=types.SimpleNamespace(reset=lambda: None, mark_static_address=marked.append))
    row = models._torch_compile_row(torch, lambda x: x, ["w0", "b0"], ["x0", "x1", "x2", "x3"],
                                    calls=3)
    assert marked == ["w0", "b0"]
    assert row["us"] > 0 and "note" not in row
    # the warm-up, then time_per_call's own warm-up and its loops, all over the four inputs
    assert len(calls) >= models.TORCH_COMPILE_WARMUP + 3 * 5
    assert calls[:8] == ["x0", "x1", "x2", "x3"] * 2


def test_table_shows_skipped_rows_product_figures_and_aligned_ratios():
    rows = [
        {"case": "mlp", "impl": "tensorplay eager", "us": 200.0},
        {"case": "mlp", "impl": "torch eager", "us": 100.0},
        {"case": "mlp", "impl": 'torch.compile(mode="reduce-overhead")', "us": None,
         "note": "skipped: torch.compile failed: RuntimeError: no triton"},
        {"case": "mlp", "impl": "JAX jit", "us": 50.0, "note": "HIGHEST"},
        {"case": "products", "impl": "tensorplay", "us": None, "note": "failed: TypeError: x"},
        {"case": "products", "impl": "tensorplay again", "us": 400.0, "tflops": 343.6,
         "rel_err": 2.5e-4, "tp/torch": 0.8},
        {"case": "products", "impl": "torch", "us": 320.0, "tflops": 429.5, "rel_err": 2.4e-4},
    ]
    header, rule, *body = format_table(rows).splitlines()
    assert len(body) == len(rows)
    ratio_end = len(header)
    cells = [line[ratio_end - 14:ratio_end].strip() for line in body]
    assert cells == ["1.00x", "0.50x", "n/a", "0.25x", "n/a", "1.00x", "0.80x"]
    assert body[2][len(header) - 29:len(header) - 15].strip() == "n/a"
    assert body[2].endswith("[skipped: torch.compile failed: RuntimeError: no triton]")
    assert body[3].endswith("[HIGHEST]")
    assert "TFLOP/s=343.6  err=2.5e-04  tp/torch throughput=0.80x" in body[5]
    assert body[6].endswith("TFLOP/s=429.5  err=2.4e-04")


def test_jax_row_without_a_gpu_backend_is_skipped_with_a_note(monkeypatch):
    fake = types.SimpleNamespace(default_backend=lambda: "cpu")
    monkeypatch.setattr(peers, "_module", lambda name: fake if name == "jax" else None)
    assert list(models._jax_mlp_rows(calls=2)) == [{
        "impl": "JAX jit", "us": None, "note": "skipped: JAX's default backend is 'cpu', not "
                                               "the GPU"}]


@pytest.mark.parametrize("precision, tolerance", [("highest", 1e-4), (None, 1e-2)])
def test_jax_jit_forward_is_the_mlp_with_exact_gelu(precision, tolerance):
    """The jitted forward JAX is timed with (on JAX's default device) equals the MLP in float64
    NumPy with the erf GELU, on the batches it rotates through (at JAX's default precision a
    GPU may use TF32, hence the looser tolerance)."""
    jax = pytest.importorskip("jax")
    special = pytest.importorskip("scipy.special")
    call, sync, state = models._jax_mlp(jax, precision)
    for x in state["xs"]:
        call()
        sync()
        expected = np.asarray(x, dtype=np.float64)
        for w, b in state["params"]:
            h = expected @ np.asarray(w, dtype=np.float64) + np.asarray(b, dtype=np.float64)
            expected = 0.5 * h * (1 + special.erf(h / np.sqrt(2)))
        got = np.asarray(state["out"])
        assert got.shape == (models.BATCH, models.WIDTH) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance / 10)


# -- the control-flow table: the heat loop (fori_loop + cond) and Newton's method (while_loop) --

def _rows_of(rows, case):
    return [row for row in rows if row["case"] == case]


@requires_accelerator
def test_control_flow_case_shows_both_workloads_with_their_figures():
    rows = list(controlflow.control_flow_case(accelerator_device(), small=True))
    n, steps, every = controlflow.SMALL_HEAT
    heat = _rows_of(rows, controlflow.heat_case_name(n, steps, every))
    newton = _rows_of(rows, controlflow.newton_case_name(controlflow.SMALL_NEWTON_SIZE))
    assert len(heat) + len(newton) == len(rows)
    on_gpu = peers._gpu()
    assert [row["impl"] for row in heat] == [
        "tensorplay graph (fori_loop + cond)", f"tensorplay graph, {steps} steps unrolled",
        "tensorplay eager (host read per decision)"] + on_gpu * [
        "torch eager", "torch CUDAGraph (unrolled steps)", "JAX jit (lax.fori_loop + lax.cond)"]
    assert [row["impl"] for row in newton] == [
        "tensorplay graph (while_loop)", "tensorplay eager (host read per iteration)"] + \
        on_gpu * ["torch eager (host check per iteration)", "JAX jit (lax.while_loop)"]
    _, _, want_iterations = controlflow.newton_reference(
        controlflow.newton_values(controlflow.SMALL_NEWTON_SIZE))
    for row in heat + newton:
        if row["us"] is None:             # a peer that could not run says why
            assert row["note"].startswith(("skipped: ", "failed: ")), row
            continue
        assert row["us"] > 0 and row["rel_err"] < 1e-5, row
        if row in heat:
            assert row["steps"] == steps
            assert row["per_step_us"] == pytest.approx(row["us"] / steps)
        else:
            assert row["iterations"] == want_iterations and "note" not in row, row
            assert row["residual"] <= controlflow.NEWTON_TOL
    loop, unrolled = heat[0], heat[1]
    assert loop["overhead_us"] == pytest.approx((loop["us"] - unrolled["us"]) / steps)
    assert "overhead_us" not in unrolled
    lines = format_table(rows).splitlines()[2:]
    assert f"overhead/step={loop['overhead_us']:.2f} us" in lines[0]
    assert f"per-step={loop['per_step_us']:.2f} us" in lines[0]
    assert f"iters={want_iterations} per-iter=" in lines[len(heat)]


@pytest.mark.parametrize("steps, every", [(23, 5), (10, 1), (4, 50)])
def test_heat_loop_matches_numpy_eagerly_and_captured(device, steps, every):
    """The same Heat.run() eagerly (cpu and the accelerator) and as one graph (the accelerator):
    the final grid and every snapshot against NumPy, over replays that start from scratch."""
    n = 12
    want_grid, want_snapshots = controlflow.heat_reference(controlflow.heat_initial(n), steps,
                                                           every)
    assert want_snapshots.shape == (controlflow.snapshot_count(steps, every), n, n)
    heat = controlflow.Heat(device, n, steps, every)
    grid = heat.run()
    np.testing.assert_allclose(to_numpy(grid), want_grid, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_numpy(heat.snapshots), want_snapshots, rtol=1e-5, atol=1e-6)
    if device == "cpu":
        return
    for unrolled in (False, True):
        graph, grid = heat.graph(unrolled=unrolled)
        for _ in range(2):
            heat.snapshots.zero_()
            graph.replay()
            np.testing.assert_allclose(to_numpy(grid), want_grid, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(to_numpy(heat.snapshots), want_snapshots, rtol=1e-5,
                                       atol=1e-6)


def test_newton_matches_numpy_eagerly_and_captured(device):
    newton = controlflow.Newton(device, 300)
    want_x, want_err, want_iterations = controlflow.newton_reference(
        controlflow.newton_values(300))
    assert 5 < want_iterations < controlflow.NEWTON_CAP and want_err <= controlflow.NEWTON_TOL
    x, err, k = newton.run()
    assert int(k.item()) == want_iterations and k.dtype == tp.int32
    np.testing.assert_allclose(to_numpy(x), want_x, rtol=1e-6)
    # the last step's size: tiny, so rounding (a GPU contracts to FMA) moves it by percents
    assert float(err.item()) <= controlflow.NEWTON_TOL
    assert float(err.item()) == pytest.approx(want_err, rel=0.1)
    np.testing.assert_allclose(to_numpy(x) ** 3, controlflow.newton_values(300), rtol=1e-5)
    if device == "cpu":
        return
    graph, (x, err, k) = newton.graph()
    graph.replay()
    assert int(k.item()) == want_iterations
    np.testing.assert_allclose(to_numpy(x), want_x, rtol=1e-6)
    newton.a.fill_(8.0)      # the graph reads a at every replay: cube roots of 8 now
    graph.replay()
    want_x, _, want_iterations = controlflow.newton_reference(np.full(300, 8.0, np.float32))
    assert int(k.item()) == want_iterations
    np.testing.assert_allclose(to_numpy(x), want_x, rtol=1e-6)
    assert to_numpy(x) == pytest.approx(2.0, rel=1e-4)


@requires_accelerator
def test_captured_control_flow_loops_make_no_host_synchronization(monkeypatch):
    calls = count_device_waits(monkeypatch)
    device = accelerator_device()
    heat_graph, _ = controlflow.Heat(device, 8, 12, 4).graph()
    newton_graph, (_, _, k) = controlflow.Newton(device, 64).graph()
    calls.clear()
    for _ in range(2):
        heat_graph.replay()
        newton_graph.replay()
    assert calls == []
    assert int(k.item()) > 1 and calls    # the spies see a read


def test_heat_arguments_are_checked():
    with pytest.raises(ValueError, match="n >= 3.*got n=2"):
        controlflow.Heat("cpu", 2, 10, 5)
    with pytest.raises(ValueError, match="steps=0, every=5"):
        controlflow.Heat("cpu", 8, 0, 5)
    with pytest.raises(ValueError, match="steps=3, every=0"):
        controlflow.Heat("cpu", 8, 3, 0)


class _TensorplayAsTorch:
    """torch's names that the control-flow peers use, served by tensorplay on ``device`` (which
    follows torch's semantics): eager ops, and ``torch.cuda``'s graph capture as a tensorplay
    Graph (a context manager like ``torch.cuda.graph(g)``)."""

    def __init__(self):
        self.tensor, self.zeros, self.add = tp.tensor, tp.zeros, tp.add
        self.cuda = types.SimpleNamespace(
            synchronize=tp.accelerator.synchronize, Stream=tp.Stream,
            current_stream=tp.accelerator.current_stream, stream=lambda stream: stream,
            CUDAGraph=tp.accelerator.Graph, graph=lambda graph: graph)


@requires_accelerator
def test_torch_heat_peers_compute_the_workload():
    """The torch code (eager, and captured unrolled) run through tensorplay's torch-named API:
    the same grid and snapshots as NumPy."""
    n, steps, every = 10, 14, 4
    want = controlflow.heat_reference(controlflow.heat_initial(n), steps, every)
    rows = list(controlflow._torch_heat_rows(_TensorplayAsTorch(), n, steps, every,
                                             device=accelerator_device()))
    assert [row["impl"] for row in rows] == ["torch eager", "torch CUDAGraph (unrolled steps)"]
    for row in rows:
        grid, snapshots = row["result"]
        assert row["us"] > 0
        np.testing.assert_allclose(grid, want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(snapshots, want[1], rtol=1e-5, atol=1e-6)


def test_torch_newton_peer_computes_the_workload(device):
    row = controlflow._torch_newton_row(_TensorplayAsTorch(), 200, device=device)
    want_x, want_err, want_iterations = controlflow.newton_reference(
        controlflow.newton_values(200))
    x, err, iterations = row["result"]
    assert row["impl"] == "torch eager (host check per iteration)" and row["us"] > 0
    assert iterations == want_iterations and err == pytest.approx(want_err, rel=1e-5)
    np.testing.assert_allclose(x, want_x, rtol=1e-6)


def test_jax_peers_compute_the_workloads():
    """The jitted heat loop (lax.fori_loop + lax.cond) and Newton (lax.while_loop) on JAX's
    default device equal the NumPy references."""
    jax = pytest.importorskip("jax")
    run, u0 = controlflow.jax_heat(jax, 12, 23, 5)
    grid, snapshots = run(u0)
    want_grid, want_snapshots = controlflow.heat_reference(controlflow.heat_initial(12), 23, 5)
    np.testing.assert_allclose(np.asarray(grid), want_grid, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(snapshots), want_snapshots, rtol=1e-5, atol=1e-6)
    run, a = controlflow.jax_newton(jax, 500)
    x, err, k = run(a)
    want_x, want_err, want_iterations = controlflow.newton_reference(
        controlflow.newton_values(500))
    assert int(k) == want_iterations and float(err) <= controlflow.NEWTON_TOL
    np.testing.assert_allclose(np.asarray(x), want_x, rtol=1e-5)


def test_absent_or_failing_peers_are_rows_with_a_note(monkeypatch):
    impls = (["torch a", "torch b"], ["JAX c"])
    monkeypatch.setattr(peers, "_torch_cuda", lambda: None)
    monkeypatch.setattr(peers, "_module", lambda name: None)
    rows = list(controlflow._peer_rows(*impls, None, None))
    assert rows == [{"impl": "torch a", "us": None, "note": "skipped: torch is not installed"},
                    {"impl": "torch b", "us": None, "note": "skipped: torch is not installed"},
                    {"impl": "JAX c", "us": None, "note": "skipped: JAX is not installed"}]
    fake_jax = types.SimpleNamespace(default_backend=lambda: "cpu")
    monkeypatch.setattr(peers, "_torch_cuda", lambda: "torch")
    monkeypatch.setattr(peers, "_module", lambda name: fake_jax if name == "jax" else None)

    def torch_rows(torch):
        assert torch == "torch"
        yield {"impl": "torch a", "us": 1.0}
        raise RuntimeError("CUDA error: out of memory\nmore")
    rows = list(controlflow._peer_rows(*impls, torch_rows, None))
    assert rows == [{"impl": "torch a", "us": 1.0},
                    {"impl": "torch b", "us": None,
                     "note": "failed: RuntimeError: CUDA error: out of memory"},
                    {"impl": "JAX c", "us": None,
                     "note": "skipped: JAX's default backend is 'cpu', not the GPU"}]
    fake_jax = types.SimpleNamespace(default_backend=lambda: "gpu")

    def jax_row(jax):
        raise TypeError("body_fun output and input must have identical types")
    rows = list(controlflow._peer_rows(["torch a"], ["JAX c"], lambda torch: iter(()), jax_row))
    assert rows == [{"impl": "JAX c", "us": None, "note": "failed: TypeError: body_fun output "
                                                           "and input must have identical types"}]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@once_per_suite
def test_progress_prints_one_line_per_finished_case_when_piped(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    suite._progress(0, 2, "replay_overhead")
    suite._progress(1, 2, "replay_overhead", 1.25)
    suite._progress(1, 2, "mlp")
    suite._progress(2, 2, "mlp", 3.0)
    assert piped.getvalue().splitlines() == ["bench: 1/2 replay_overhead finished in 1.2 s",
                                             "bench: 2/2 mlp finished in 3.0 s"]
    assert "\r" not in piped.getvalue()


@once_per_suite
def test_progress_redraws_in_place_on_a_terminal(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    suite._progress(0, 2, "replay_overhead")
    suite._progress(2, 2, "mlp", 3.0)
    text = terminal.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "2/2 mlp" in text


def test_decode_case_rows_on_the_accelerator_with_kernel_counts():
    from tensorplay.bench import decode
    device = accelerator_device() if tp.accelerator.is_available() else "cpu"
    rows = list(decode.decode_case(device, small=True))
    impls = [row["impl"] for row in rows]
    if tp.accelerator.is_available():
        assert impls == ["tensorplay eager (host argmax per token)", "tensorplay Graph per token",
                         "tensorplay tp.compile per token",
                         "tensorplay whole generation in one replay", "tensorplay eager",
                         "tensorplay prefill in one Graph", "tensorplay tp.compile prefill"]
        assert re.search(r"\d+ graph nodes per token", rows[1]["note"])
        assert re.search(r"fused: [1-9]\d* products; \d+ graph nodes", rows[-1]["note"])
    else:
        assert impls == ["tensorplay eager (host argmax per token)", "tensorplay eager"]
    assert all(row["us"] > 0 for row in rows if row["impl"].startswith("tensorplay"))


def test_the_torch_peer_of_the_decode_case_chooses_the_example_s_tokens():
    """The torch GPT-2 the bench times (on cpu in float32 here) and examples/gpt2.py, from the
    same weights, choose the same greedy tokens token by token and after a prefill."""
    torch = pytest.importorskip("torch")
    from tensorplay.bench import decode
    gpt2 = decode._example()
    config = gpt2.TINY
    weights = {name: value * 25 if value.ndim == 2 else value
               for name, value in gpt2.random_weights(config, seed=0).items()}
    step, prefill, reset = decode._torch_model(torch, weights, config, "cpu", torch.float64)
    prompt = [5, 17, 3, 42]
    expected = gpt2.generate_eager(gpt2.GPT2(weights, config, None, tp.float64), prompt, 6)
    reset()
    tokens = list(prompt)
    with torch.no_grad():
        for p in range(len(prompt) + 5):
            logits = step(torch.tensor([tokens[p]]), torch.tensor([p]))
            if p >= len(prompt) - 1:
                tokens.append(int(logits.argmax(-1)))
        assert tokens[len(prompt):] == expected
        reset()
        first = int(prefill(torch.tensor(prompt)).argmax(-1))
    assert first == expected[0]
