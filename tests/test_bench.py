"""The benchmark suite's cases as functions: large products, the MLP's rows, the text table.

Peers (torch, JAX) run on a GPU only, so their code paths are driven here through small stand-in
modules that follow torch's documented behaviour; on this machine the suite itself runs
tensorplay's rows on ``cpu`` and the accelerator's device 0.
"""

import types

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.bench import models, peers, products
from tensorplay.bench.suite import format_table
from support import accelerator_device, requires_accelerator


@pytest.fixture
def no_tp_precision(monkeypatch):
    """A tensorplay without the float32 matmul precision pair (as before issue 13)."""
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
