"""The large-products case: ``C = A @ B`` on square matrices, tensorplay beside torch.

Three settings, each its own case of the table: float32 with ``"highest"`` float32 matmul
precision (full float32 products), float32 with ``"high"`` (TF32 tensor cores allowed) and
bfloat16. Each row gives microseconds per product, its throughput ``2 n^3 / time`` in TFLOP/s and
its error against a float64 product of the same (rounded) inputs, so a throughput that comes from
a lower precision than the one asked for shows as a larger error. The tensorplay row also gives
``tp/torch``, tensorplay's throughput over torch's (the issue's target: at least 0.95).

Precision is set for each float32 case and restored afterwards, in both libraries:
``tp.set_float32_matmul_precision`` where this tensorplay has it (a build without it runs at its
own default, and the row says so) and ``torch.set_float32_matmul_precision`` (which also sets
``torch.backends.cuda.matmul.allow_tf32``). torch runs on a GPU only (:func:`.peers._torch_cuda`).

.. warning:: The float32 error check compares the first :data:`CHECK_ROWS` rows of ``C`` with
   NumPy's float64 product on the host; for 4096 x 4096 this is a few hundred milliseconds of host
   work per row of the table, outside the timed loops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np

import tensorplay as tp

from . import peers
from .timing import time_per_call

SIZE = 4096
SMALL_SIZE = 128
CHECK_ROWS = 64
CALLS = 20
# (case label, dtype name, float32 matmul precision or None where it does not apply)
SETTINGS = (("float32, precision 'highest'", "float32", "highest"),
            ("float32, precision 'high' (TF32)", "float32", "high"),
            ("bfloat16", "bfloat16", None))


def case_name(n: int, label: str) -> str:
    """The table's case for an ``n x n`` product in the setting ``label``."""
    return f"C = A @ B, {n}x{n}, {label}"


def _tflops(n: int, us: float | None) -> float | None:
    return 2.0 * n ** 3 / (us * 1e-6) / 1e12 if us else None


def _relative_error(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """max |c - a @ b| / max |a @ b| over ``c``'s rows, the product taken in float64."""
    reference = a[:c.shape[0]].astype(np.float64) @ b.astype(np.float64)
    scale = float(np.abs(reference).max()) or 1.0
    return float(np.abs(c.astype(np.float64) - reference).max()) / scale


@contextlib.contextmanager
def tp_matmul_precision(precision: str | None) -> Iterator[str | None]:
    """Set tensorplay's float32 matmul precision for the ``with`` block and restore it after.

    Yields None when the precision is in force (or ``precision`` is None: nothing to set), else
    a note saying why not: a tensorplay without ``tp.set_float32_matmul_precision`` runs at its
    own default. Without ``tp.get_float32_matmul_precision`` the setting is restored to
    ``"highest"``, PyTorch's default."""
    setter = getattr(tp, "set_float32_matmul_precision", None)
    if precision is None:
        yield None
        return
    if setter is None:
        yield (f"tp.set_float32_matmul_precision absent: '{precision}' not set, ran at "
               f"tensorplay's default")
        return
    getter = getattr(tp, "get_float32_matmul_precision", None)
    saved = getter() if getter is not None else "highest"
    setter(precision)
    try:
        yield None
    finally:
        setter(saved)


@contextlib.contextmanager
def torch_matmul_precision(torch, precision: str | None) -> Iterator[None]:
    """Set torch's float32 matmul precision for the ``with`` block and restore both
    ``torch.get_float32_matmul_precision()`` and ``torch.backends.cuda.matmul.allow_tf32`` after
    (nothing is touched when ``precision`` is None).

    Only torch's legacy pair of settings is used, reading and writing: torch refuses to read
    them after its newer ``fp32_precision`` attributes were written, so mixing would raise."""
    if precision is None:
        yield
        return
    matmul = torch.backends.cuda.matmul
    saved, saved_tf32 = torch.get_float32_matmul_precision(), matmul.allow_tf32
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)
        if matmul.allow_tf32 != saved_tf32:
            matmul.allow_tf32 = saved_tf32


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, n), dtype=np.float32),
            rng.standard_normal((n, n), dtype=np.float32))


def _measure(product: Callable[[], object], sync: Callable[[], object], to_host,
             a: np.ndarray, b: np.ndarray, calls: int) -> dict:
    """``{us, rel_err}`` of ``product`` (or ``{us: None, note}`` when it raises)."""
    try:
        us = time_per_call(product, sync, calls)
        rel_err = _relative_error(to_host(product()), a, b)
    except Exception as error:  # noqa: BLE001 - one failing row must not end the run
        return {"us": None, "note": f"failed: {peers.error_text(error)}"}
    return {"us": us, "rel_err": rel_err}


def _tensorplay_row(device: str, dtype: str, a: np.ndarray, b: np.ndarray, rows: int,
                    calls: int, precision: str | None) -> dict:
    ta = tp.tensor(a, device=device)
    tb = tp.tensor(b, device=device)
    with tp_matmul_precision(precision) as note:
        row = _measure(lambda: ta @ tb, tp.accelerator.synchronize,
                       lambda c: c[:rows].cpu().numpy(), a, b, calls)
        getter = getattr(tp, "get_float32_matmul_precision", None)
        if precision is not None and getter is not None:
            row["precision"] = getter()
    if note and "note" not in row:
        row["note"] = note
    return {"impl": "tensorplay", "dtype": dtype, **row}


def _torch_row(torch, dtype: str, a: np.ndarray, b: np.ndarray, rows: int, calls: int,
               precision: str | None) -> dict:
    torch_dtype = getattr(torch, dtype)
    ta = torch.from_numpy(a.astype(np.float32)).to("cuda").to(torch_dtype)
    tb = torch.from_numpy(b.astype(np.float32)).to("cuda").to(torch_dtype)
    with torch_matmul_precision(torch, precision):
        row = _measure(lambda: ta @ tb, torch.cuda.synchronize,
                       lambda c: c[:rows].float().cpu().numpy(), a, b, calls)
        if precision is not None:
            row["precision"] = torch.get_float32_matmul_precision()
            row["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return {"impl": "torch", "dtype": dtype, **row}


def products_case(device: str, n: int, calls: int = CALLS) -> Iterator[dict]:
    """Rows ``{case, impl, us, n, dtype, tflops, rel_err[, precision, allow_tf32, tp/torch,
    note]}`` for ``n x n`` products on ``device`` (``"cuda:0"``, ``"sim:0"`` or ``"cpu"``): per
    setting of :data:`SETTINGS`, tensorplay, then torch where it runs (a GPU with torch).

    ``us`` is the median time per product over loops of ``calls`` products (each loop ending in
    a device synchronize; :func:`.timing.time_per_call`); ``tflops`` is ``2 n^3 / us``;
    ``rel_err`` is ``max |C - A @ B| / max |A @ B|`` over the first :data:`CHECK_ROWS` rows, the
    reference in float64 from the same inputs (rounded to bfloat16 for that case);
    ``tp/torch`` (tensorplay's row) is tensorplay's throughput over torch's. A row whose
    product raised has ``us`` None and the error in ``note``."""
    a32, b32 = _inputs(n)
    rows = min(n, CHECK_ROWS)
    torch = peers._torch_cuda()
    for label, dtype, precision in SETTINGS:
        if dtype == "bfloat16":
            a = a32.astype(ml_dtypes.bfloat16)
            b = b32.astype(ml_dtypes.bfloat16)
        else:
            a, b = a32, b32
        case = case_name(n, label)
        found = [_tensorplay_row(device, dtype, a, b, rows, calls, precision)]
        if torch is not None:
            found.append(_torch_row(torch, dtype, a, b, rows, calls, precision))
        for row in found:
            row["tflops"] = _tflops(n, row["us"])
        if len(found) == 2 and found[0]["tflops"] and found[1]["tflops"]:
            found[0]["tp/torch"] = found[0]["tflops"] / found[1]["tflops"]
        for row in found:
            yield {"case": case, "n": n, **row}
