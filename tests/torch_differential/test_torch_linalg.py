"""``tp.linalg`` (and the Tensor methods ``det logdet slogdet inverse cholesky qr svd pinverse``)
against ``torch.linalg``, case by case: determinants, inverses and solves, Cholesky, QR, eigh,
SVD, least squares, pseudo-inverses and norms over real and complex dtypes, batches, empty and
singular matrices, and refused inputs.

Factors unique only up to a phase per column are aligned before the comparison: eigenvectors,
singular vectors (only the first ``min(m, n)`` columns of U and rows of Vh: the rest span a null
space, any basis of which is right) and Q/R (one phase per column of Q and row of R). Driver
cases follow torch's device: lstsq's gelsy/gelsd/gelss and underdetermined systems only where
torch runs on cpu, svd's ``driver=`` everywhere (torch's cpu refuses it). Values are compared
with a tolerance per dtype scaled for factorizations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("torch")

from . import _compare as base  # noqa: E402
from ._compare import Arg, Case, Rng, check, params, torch_device  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # torch's deprecation notes

RNG = Rng(1517)
DTYPES = ("float32", "float64", "complex64", "complex128")
#: (rtol, atol) per dtype for factorizations (several rounding steps deep)
LSTSQ_RANK = ("not matched yet: where B's batch broadcasts A's, torch's cpu lstsq returns `rank` "
              "of A's batch shape; tensorplay returns it of the broadcast batch shape")
LINALG_TOL = {"float32": (2e-4, 2e-4), "complex64": (2e-4, 2e-4), "float64": (1e-9, 1e-9),
              "complex128": (1e-9, 1e-9)}


def L(fn: str, *args, dtype: str = "float32", **kwargs) -> Case:  # noqa: N802
    """A ``linalg.<fn>(*args, **kwargs)`` case."""
    return Case(fn, list(args), kwargs, kind="linalg", tol=LINALG_TOL.get(dtype))


def M(fn: str, *args, dtype: str = "float32", **kwargs) -> Case:  # noqa: N802
    """A Tensor method case: ``args[0].<fn>(*args[1:], **kwargs)``."""
    return Case(fn, list(args), kwargs, kind="method", tol=LINALG_TOL.get(dtype))


def rand(*shape, dtype: str = "float32") -> Arg:
    values = RNG.standard_normal(shape)
    if dtype.startswith("complex"):
        values = values + 1j * RNG.standard_normal(shape)
    return Arg(values, dtype)


def spd(*shape, dtype: str = "float32") -> Arg:
    a = rand(*shape, dtype=dtype).values
    n = shape[-1]
    return Arg(a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n), dtype)


def fixed(values, dtype: str = "float32") -> Arg:
    return Arg(np.asarray(values), dtype)


# -- comparison -------------------------------------------------------------------------------
def _host(value) -> np.ndarray:
    array = base.host(value)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


def _phases(got: np.ndarray, want: np.ndarray, axis: int) -> np.ndarray:
    """Unit numbers ``p`` (one per column, ``axis=-2`` sums rows; or per row, ``axis=-1``)
    with ``got * p`` closest to ``want``."""
    inner = np.sum(np.conj(got) * want, axis=axis, keepdims=True)
    size = np.abs(inner)
    return np.where(size > 0, inner / np.where(size > 0, size, 1), 1)


def _aligned(case: Case, got, want, fields: list[str]):
    """``got``'s and ``want``'s factors as host arrays, ``got``'s phases turned to ``want``'s."""
    g = {name: _host(getattr(got, name)) for name in fields}
    w = {name: _host(getattr(want, name)) for name in fields}
    if case.fn == "eigh":
        g["eigenvectors"] = g["eigenvectors"] * _phases(g["eigenvectors"], w["eigenvectors"], -2)
    elif case.fn == "svd" and "Vh" in fields:
        k = g["S"].shape[-1]
        g["U"], w["U"] = g["U"][..., :k], w["U"][..., :k]
        g["Vh"], w["Vh"] = g["Vh"][..., :k, :], w["Vh"][..., :k, :]
        g["U"] = g["U"] * _phases(g["U"], w["U"], -2)
        g["Vh"] = g["Vh"] * _phases(g["Vh"], w["Vh"], -1)
    elif case.fn == "svd":   # the Tensor method: U, S, V
        k = g["S"].shape[-1]
        for name in ("U", "V"):
            g[name], w[name] = g[name][..., :k], w[name][..., :k]
            g[name] = g[name] * _phases(g[name], w[name], -2)
    elif case.fn == "qr" and g["Q"].size and w["Q"].size:
        k = min(g["R"].shape[-2], g["Q"].shape[-1])
        phase = _phases(g["Q"][..., :k], w["Q"][..., :k], -2)
        g["Q"] = np.concatenate([g["Q"][..., :k] * phase, g["Q"][..., k:]], axis=-1)
        row = np.swapaxes(np.conj(phase), -1, -2)
        g["R"] = np.concatenate([g["R"][..., :k, :] * row, g["R"][..., k:, :]], axis=-2)
    return g, w


def compare(case: Case, got, want) -> str | None:
    """:func:`base.compare`, with named tuples compared field by field and factorizations
    after phase alignment."""
    problem = base.structure_problem(got, want)
    if problem is not None or not isinstance(got, tuple):
        return problem or base.compare(case, got, want)
    fields = list(getattr(got, "_fields", ()))
    for name in fields:
        g, w = getattr(got, name), getattr(want, name)
        if tuple(g.shape) != tuple(w.shape):
            return f"{name}: shape tp {tuple(g.shape)} vs torch {tuple(w.shape)}"
        if base.dtype_name(g) != base.dtype_name(w):
            return f"{name}: dtype tp {base.dtype_name(g)} vs torch {base.dtype_name(w)}"
    if case.fn in ("eigh", "svd", "qr"):
        g, w = _aligned(case, got, want, fields)
        rtol, atol = case.tol or (1e-5, 1e-5)
        for name in fields:
            if not np.allclose(g[name], w[name], rtol=rtol, atol=atol, equal_nan=True):
                bad = int((~np.isclose(g[name], w[name], rtol=rtol, atol=atol,
                                       equal_nan=True)).sum())
                return f"{name}: values differ at {bad} elements after phase alignment"
        return None
    for name in fields:
        problem = base.compare(case, getattr(got, name), getattr(want, name))
        if problem is not None:
            return f"{name}: {problem}"
    return None


# -- the cases --------------------------------------------------------------------------------
def determinant_cases():
    for dtype in DTYPES:
        for shape in ((3, 3), (2, 4, 4), (1, 1), (0, 0), (2, 0, 0)):
            yield L("det", rand(*shape, dtype=dtype), dtype=dtype)
            yield L("slogdet", rand(*shape, dtype=dtype), dtype=dtype)
        yield L("det", fixed(np.ones((3, 3)), dtype), dtype=dtype)
        yield L("slogdet", fixed(np.ones((2, 3, 3)), dtype), dtype=dtype)
        yield M("det", rand(2, 3, 3, dtype=dtype), dtype=dtype)
        yield M("slogdet", rand(3, 3, dtype=dtype), dtype=dtype)
        yield M("logdet", spd(2, 3, 3, dtype=dtype), dtype=dtype)
    yield M("logdet", fixed(np.diag([-1.0, 2.0]), "float64"), dtype="float64")
    yield M("logdet", fixed(np.zeros((2, 2)), "float64"), dtype="float64")


def inverse_solve_cases(cpu: bool):
    for dtype in DTYPES:
        yield L("inv", rand(4, 4, dtype=dtype), dtype=dtype)
        yield L("inv", rand(2, 3, 3, dtype=dtype), dtype=dtype)
        yield L("inv", fixed(np.ones((3, 3)), dtype), dtype=dtype)
        yield L("inv", fixed(np.stack([np.eye(2), np.zeros((2, 2))]), dtype), dtype=dtype)
        yield M("inverse", rand(3, 3, dtype=dtype), dtype=dtype)
        a = Arg(rand(2, 3, 3, dtype=dtype).values + 3 * np.eye(3), dtype)
        yield L("solve", a, rand(2, 3, 2, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(3, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(2, 3, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(4, 1, 3, 2, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(2, 5, 3, dtype=dtype), left=False, dtype=dtype)
        yield L("solve", fixed(np.ones((3, 3)), dtype), rand(3, 1, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(4, 2, dtype=dtype), dtype=dtype)
        yield L("solve", a, rand(3, dtype=dtype), left=False, dtype=dtype)
    yield L("solve", rand(3, 3), rand(3, 2, dtype="float64"))
    yield L("inv", rand(0, 0))


def cholesky_cases():
    for dtype in DTYPES:
        yield L("cholesky", spd(4, 4, dtype=dtype), dtype=dtype)
        yield L("cholesky", spd(2, 3, 3, dtype=dtype), upper=True, dtype=dtype)
        lower_only = spd(3, 3, dtype=dtype).values + np.triu(np.full((3, 3), 9.0), 1)
        yield L("cholesky", Arg(lower_only, dtype), dtype=dtype)
        yield L("cholesky", fixed([[1.0, 2.0], [2.0, 1.0]], dtype), dtype=dtype)
        yield L("cholesky", fixed(np.stack([np.eye(3), -np.eye(3)]), dtype), dtype=dtype)
        yield M("cholesky", spd(3, 3, dtype=dtype), dtype=dtype)
        yield M("cholesky", spd(3, 3, dtype=dtype), upper=True, dtype=dtype)


def qr_cases():
    for dtype in DTYPES:
        for shape in ((5, 3), (3, 5), (2, 4, 4)):
            for mode in ("reduced", "complete", "r"):
                yield L("qr", rand(*shape, dtype=dtype), mode=mode, dtype=dtype)
        yield M("qr", rand(4, 3, dtype=dtype), dtype=dtype)
        yield M("qr", rand(4, 3, dtype=dtype), some=False, dtype=dtype)
    yield L("qr", rand(3, 3), mode="full")
    yield L("qr", rand(0, 3))
    yield L("qr", rand(3, 0), mode="complete")


def eigh_svd_cases(cpu: bool):
    for dtype in DTYPES:
        for uplo in ("L", "U"):
            yield L("eigh", rand(4, 4, dtype=dtype), UPLO=uplo, dtype=dtype)
        yield L("eigh", spd(2, 3, 3, dtype=dtype), dtype=dtype)
        yield L("eigh", rand(1, 1, dtype=dtype), dtype=dtype)
        for shape in ((5, 3), (3, 5), (2, 4, 4)):
            yield L("svd", rand(*shape, dtype=dtype), dtype=dtype)
            yield L("svd", rand(*shape, dtype=dtype), full_matrices=False, dtype=dtype)
            yield L("svdvals", rand(*shape, dtype=dtype), dtype=dtype)
        yield M("svd", rand(4, 3, dtype=dtype), dtype=dtype)
        yield M("svd", rand(3, 4, dtype=dtype), some=False, dtype=dtype)
        yield M("svd", rand(3, 4, dtype=dtype), compute_uv=False, dtype=dtype)
    yield L("eigh", rand(3, 3), UPLO="X")
    yield L("svd", rand(3, 2), driver="gesvd")     # cpu: torch refuses the keyword
    yield L("svd", rand(0, 3))


def lstsq_pinv_cases(cpu: bool):
    drivers = (None, "gelsy", "gelsd", "gelss", "gels") if cpu else (None, "gels")
    for dtype in DTYPES:
        a, b = rand(2, 6, 3, dtype=dtype), rand(2, 6, 2, dtype=dtype)
        for driver in drivers:
            yield L("lstsq", a, b, driver=driver, dtype=dtype)
        yield L("lstsq", rand(6, 3, dtype=dtype), rand(6, dtype=dtype), dtype=dtype)
        yield L("lstsq", rand(5, 3, dtype=dtype), rand(2, 5, 1, dtype=dtype), dtype=dtype)
        broadcast = L("lstsq", rand(1, 5, 3, dtype=dtype), rand(2, 5, 1, dtype=dtype),
                      dtype=dtype)
        broadcast.known, broadcast.known_on = LSTSQ_RANK, ("cpu",)
        yield broadcast
        yield L("pinv", rand(2, 5, 3, dtype=dtype), dtype=dtype)
        yield L("pinv", rand(3, 5, dtype=dtype), dtype=dtype)
        yield L("pinv", spd(4, 4, dtype=dtype), hermitian=True, dtype=dtype)
        yield L("pinv", rand(4, 3, dtype=dtype), atol=1.5, dtype=dtype)
        yield L("pinv", rand(4, 3, dtype=dtype), rtol=0.5, dtype=dtype)
        yield M("pinverse", rand(4, 3, dtype=dtype), dtype=dtype)
    if cpu:
        yield L("lstsq", rand(3, 5), rand(3, 2))                  # underdetermined
        rank1 = fixed(np.outer([1.0, 2.0, 3.0, 4.0], [1.0, 1.0]), "float64")
        for driver in ("gelsy", "gelsd", "gelss"):
            yield L("lstsq", rank1, rand(4, 1, dtype="float64"), driver=driver,
                    dtype="float64")
    else:
        yield L("lstsq", rand(3, 5), rand(3, 2))                  # refused on cuda
        yield L("lstsq", rand(5, 3), rand(5, 2), driver="gelsd")
    yield L("lstsq", rand(4, 3), rand(3, 1))
    yield L("lstsq", rand(4, 3), rand(4, 1, dtype="float64"))
    yield L("lstsq", rand(4, 3), rand(4, 1), driver="magic")
    yield L("pinv", fixed(np.outer([1.0, 2.0, 3.0], [1.0, 1.0]), "float64"), dtype="float64")


def norm_cases():
    ords = (2, 1, 0, 3, 0.5, -1, -2, math.inf, -math.inf)
    for dtype in DTYPES + ("float16", "bfloat16"):
        x = rand(3, 4, 5, dtype=dtype)
        tol = LINALG_TOL.get(dtype, (2e-2, 2e-2))
        for ord in ords:
            yield Case("vector_norm", [x, ord], {"dim": -1}, kind="linalg", tol=tol)
        yield Case("vector_norm", [x], {}, kind="linalg", tol=tol)
        yield Case("vector_norm", [x], {"dim": (0, 2), "keepdim": True},
                   kind="linalg", tol=tol)
        for ord in ("fro", 1, -1, math.inf, -math.inf):
            yield Case("matrix_norm", [x, ord], {}, kind="linalg", tol=tol)
        for ord in ("nuc", 2, -2):
            yield Case("matrix_norm", [x, ord], {}, kind="linalg", tol=tol)
        yield Case("matrix_norm", [x, "fro"], {"dim": (0, 2), "keepdim": True},
                   kind="linalg", tol=tol)
        yield Case("norm", [x], {}, kind="linalg", tol=tol)
        yield Case("norm", [x, None, (0, 1)], {}, kind="linalg", tol=tol)
        yield Case("norm", [x, 3, 1], {}, kind="linalg", tol=tol)
    x = rand(3, 4, dtype="float64")
    for ord in (None, "fro", "nuc", 1, 2, math.inf, -2):
        yield L("norm", x, ord, dtype="float64")
    yield L("norm", rand(5, dtype="float64"), 3, dtype="float64")
    yield L("vector_norm", rand(3, 4), dtype="float64")
    yield L("vector_norm", rand(3, 4, dtype="complex64"), dtype="complex128")
    yield L("vector_norm", rand(0), math.inf)
    yield L("vector_norm", rand(0), -1)
    yield L("vector_norm", rand(0), 2)
    yield L("vector_norm", rand(3, 0), 1, dim=1)
    yield L("vector_norm", Arg(np.arange(6).reshape(2, 3), "int64"))
    yield L("vector_norm", rand(3), "fro")
    yield L("matrix_norm", rand(3, 4), 3)
    yield L("matrix_norm", rand(3, 4), "abc")
    yield L("matrix_norm", rand(3, 4), dim=(0,))
    yield L("matrix_norm", rand(3, 4), dim=(0, 0))
    yield L("matrix_norm", rand(3))
    yield L("matrix_norm", rand(0, 3), math.inf)
    yield L("matrix_norm", rand(0, 3), "nuc")
    yield L("norm", rand(2, 3, 4), 2)
    yield L("norm", rand(2, 3, 4), dim=(0, 1, 2))
    yield L("norm", rand(4), "fro")
    yield L("norm", rand(2, 3), "fro", dim=1)


def refused_input_cases():
    fns = {"inv": 1, "det": 1, "slogdet": 1, "cholesky": 1, "qr": 1, "eigh": 1, "svd": 1,
           "svdvals": 1, "pinv": 1, "solve": 2, "lstsq": 2}
    for fn, operands in fns.items():
        for dtype in ("float16", "bfloat16", "int64"):
            x = Arg(np.eye(3), dtype)
            yield L(fn, *([x] * operands))
        yield L(fn, *([rand(3)] * operands))
    for fn in ("inv", "det", "slogdet", "cholesky", "eigh"):
        yield L(fn, rand(2, 3))


def all_cases(cpu: bool):
    yield from determinant_cases()
    yield from inverse_solve_cases(cpu)
    yield from cholesky_cases()
    yield from qr_cases()
    yield from eigh_svd_cases(cpu)
    yield from lstsq_pinv_cases(cpu)
    yield from norm_cases()
    yield from refused_input_cases()


def driver_dependent(case: Case) -> bool:
    """lstsq (drivers, residuals, underdetermined systems) and svd's ``driver=`` follow torch's
    device: its cpu and cuda answer differently."""
    return case.fn == "lstsq" or (case.fn == "svd" and "driver" in case.kwargs)


def cases(device):
    """Every case, for tensorplay's ``device``: the driver cases as torch's device answers them
    (none on the simulated accelerator, which follows torch's cuda but is compared with its
    cpu)."""
    RNG.reseed()
    for case in all_cases(torch_device(device) == "cpu"):
        case.per_device = driver_dependent(case)
        yield case


@pytest.mark.parametrize("device,case", params(cases))
def test_linalg_agrees_with_torch(device, case):
    check(case, device, compare)
