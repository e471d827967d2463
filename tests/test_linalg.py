"""``tp.linalg`` (norms, solves, inverses, determinants, decompositions) on every device: values
against NumPy references, dtypes, shapes, named tuples, batching, round trips (``Q @ R == A``,
``U diag(S) Vh == A`` ...), every error, and captures (norms captured and replayed; the
decompositions refused with a clear RuntimeError).
"""

import math

import numpy as np
import pytest

import tensorplay as tp
from support import requires_accelerator, to_numpy

RNG = np.random.default_rng(1515)
DTYPES = ["float32", "float64", "complex64", "complex128"]
TOL = {"float32": 2e-4, "complex64": 2e-4, "float64": 1e-10, "complex128": 1e-10}


def rand(*shape, dtype="float64"):
    values = RNG.standard_normal(shape)
    if dtype.startswith("complex"):
        values = values + 1j * RNG.standard_normal(shape)
    return values.astype(dtype)


def spd(*shape, dtype="float64"):
    """Hermitian positive-definite matrices of ``shape`` (``*, n, n``)."""
    a = rand(*shape, dtype=dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def T(values, device):  # noqa: N802
    return tp.tensor(values, dtype=getattr(tp, np.asarray(values).dtype.name), device=device)


def close(got, want, dtype, scale=1.0):
    got = to_numpy(got) if isinstance(got, tp.Tensor) else got
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def ct(a):
    return np.conj(np.swapaxes(a, -1, -2))


# -- determinants, inverse, solve -------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_det_slogdet_inv_batched(device, dtype):
    a = rand(2, 3, 4, 4, dtype=dtype)
    x = T(a, device)
    det = tp.linalg.det(x)
    assert det.dtype == getattr(tp, dtype) and det.shape == (2, 3)
    close(det, np.linalg.det(a), dtype, 10)
    sign, logabs = tp.linalg.slogdet(x)
    assert type(tp.linalg.slogdet(x)).__name__ == "linalg_slogdet"
    want_sign, want_log = np.linalg.slogdet(a)
    assert sign.dtype == getattr(tp, dtype)
    assert logabs.dtype == (tp.float32 if dtype in ("float32", "complex64") else tp.float64)
    close(sign, want_sign, dtype, 10)
    close(logabs, want_log, dtype, 10)
    inverse = tp.linalg.inv(x)
    assert inverse.dtype == getattr(tp, dtype) and inverse.shape == a.shape
    close(to_numpy(inverse) @ a, np.broadcast_to(np.eye(4), a.shape), dtype, 50)
    close(x.inverse(), to_numpy(inverse), dtype)
    close(x.det(), np.linalg.det(a), dtype, 10)
    assert type(x.slogdet()).__name__ == "slogdet"


def test_det_of_singular_and_empty_matrices(device):
    ones = np.ones((3, 3))
    assert to_numpy(tp.linalg.det(T(ones, device))) == 0
    sign, logabs = tp.linalg.slogdet(T(ones, device))
    assert to_numpy(sign) == 0 and to_numpy(logabs) == -np.inf
    assert to_numpy(tp.linalg.det(T(np.zeros((2, 0, 0)), device))).tolist() == [1.0, 1.0]
    assert tp.linalg.inv(T(np.zeros((0, 0)), device)).shape == (0, 0)
    logdet = T(np.diag([-1.0, 2.0]), device).logdet()
    assert math.isnan(to_numpy(logdet))
    close(T(np.diag([3.0, 2.0]), device).logdet(), np.log(6.0), "float64")


def test_inv_singular_raises_linalg_error(device):
    assert issubclass(tp.linalg.LinAlgError, RuntimeError)
    with pytest.raises(tp.linalg.LinAlgError, match=r"linalg.inv: The diagonal element 2 is "
                                                    r"zero.*singular"):
        tp.linalg.inv(T(np.ones((3, 3)), device))
    batch = np.stack([np.eye(3), np.eye(3), np.diag([1.0, 2.0, 0.0])])
    with pytest.raises(tp.linalg.LinAlgError, match=r"\(Batch element 2\): The diagonal "
                                                    r"element 3 is zero"):
        tp.linalg.inv(T(batch, device))
    # NaN is not singularity: its results are not finite (NaN from LAPACK; cuSOLVER's LU
    # may leave an inf among them)
    assert not np.isfinite(to_numpy(tp.linalg.inv(T(np.full((2, 2), np.nan), device)))).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_matrix_vector_broadcast_and_left(device, dtype):
    a = rand(2, 1, 3, 3, dtype=dtype) + 3 * np.eye(3).astype(dtype)
    b = rand(4, 3, 2, dtype=dtype)
    x = tp.linalg.solve(T(a, device), T(b, device))
    assert x.shape == (2, 4, 3, 2) and x.dtype == getattr(tp, dtype)
    close(a @ to_numpy(x), np.broadcast_to(b, (2, 4, 3, 2)), dtype, 50)
    vec = rand(3, dtype=dtype)
    xv = tp.linalg.solve(T(a, device), T(vec, device))
    assert xv.shape == (2, 1, 3)
    close((a @ to_numpy(xv)[..., None])[..., 0], np.broadcast_to(vec, (2, 1, 3)), dtype, 50)
    batched_vec = rand(2, 1, 3, dtype=dtype)   # the shape A.shape[:-1]: a batch of vectors
    assert tp.linalg.solve(T(a, device), T(batched_vec, device)).shape == (2, 1, 3)
    right = rand(5, 3, dtype=dtype)
    xr = tp.linalg.solve(T(a[0, 0], device), T(right, device), left=False)
    assert xr.shape == (5, 3)
    close(to_numpy(xr) @ a[0, 0], right, dtype, 50)


def test_solve_errors(device):
    a = T(np.eye(3), device)
    with pytest.raises(tp.linalg.LinAlgError, match="linalg.solve: The solver failed because "
                                                    "the input matrix is singular"):
        tp.linalg.solve(T(np.ones((3, 3)), device), T(np.ones(3), device))
    with pytest.raises(tp.linalg.LinAlgError, match=r"\(Batch element 1\)"):
        tp.linalg.solve(T(np.stack([np.eye(2), np.zeros((2, 2))]), device),
                        T(np.ones((2, 2, 1)), device))
    with pytest.raises(RuntimeError, match=r"Incompatible shapes of A and B for the equation "
                                           r"AX = B \(3x3 and 4x2\)"):
        tp.linalg.solve(a, T(np.ones((4, 2)), device))
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.linalg.solve(a, T(np.ones((3, 2), np.float32), device))
    with pytest.raises(RuntimeError, match="left=False"):
        tp.linalg.solve(a, T(np.ones(3), device), left=False)
    with pytest.raises(RuntimeError, match="not broadcastable"):
        tp.linalg.solve(T(np.ones((2, 3, 3)), device), T(np.ones((4, 3, 1)), device))


# -- dtypes and shapes refused ----------------------------------------------------------------
FUNCTIONS = {
    "inv": lambda x: tp.linalg.inv(x), "det": lambda x: tp.linalg.det(x),
    "slogdet": lambda x: tp.linalg.slogdet(x), "cholesky": lambda x: tp.linalg.cholesky(x),
    "qr": lambda x: tp.linalg.qr(x), "eigh": lambda x: tp.linalg.eigh(x),
    "svd": lambda x: tp.linalg.svd(x), "pinv": lambda x: tp.linalg.pinv(x),
    "solve": lambda x: tp.linalg.solve(x, x), "lstsq": lambda x: tp.linalg.lstsq(x, x),
    "svdvals": lambda x: tp.linalg.svdvals(x),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_low_precision_integer_and_vector_inputs_raise(device, name):
    fn = FUNCTIONS[name]
    for dtype, message in [(tp.float16, "Low precision dtypes not supported. Got Half"),
                           (tp.bfloat16, "Got BFloat16"),
                           (tp.int64, "Expected a floating point or complex tensor as input. "
                                      "Got Long")]:
        with pytest.raises(RuntimeError, match=message):
            fn(tp.ones(3, 3, dtype=dtype, device=device))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        fn(tp.ones(3, device=device))
    with pytest.raises(TypeError, match="must be Tensor"):
        fn(np.eye(3))
    if name in ("inv", "det", "slogdet", "cholesky", "eigh"):
        with pytest.raises(RuntimeError, match="must be batches of square matrices, but they "
                                               "are 2 by 3 matrices"):
            fn(tp.ones(2, 3, device=device))


# -- cholesky, qr, eigh, svd ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_lower_upper_and_triangle_read(device, dtype):
    a = spd(2, 4, 4, dtype=dtype)
    low = tp.linalg.cholesky(T(a, device))
    assert low.dtype == getattr(tp, dtype) and low.shape == a.shape
    close(low, np.linalg.cholesky(a), dtype, 10)
    up = tp.linalg.cholesky(T(a, device), upper=True)
    close(ct(to_numpy(up)) @ to_numpy(up), a, dtype, 50)
    assert np.allclose(np.tril(to_numpy(up), -1), 0)
    # only the lower triangle is read (the upper one with upper=True)
    lower_only = np.tril(a) + np.triu(np.full_like(a, 99.0), 1)
    close(tp.linalg.cholesky(T(lower_only, device)), np.linalg.cholesky(a), dtype, 10)
    upper_only = np.triu(a) + np.tril(np.full_like(a, 99.0), -1)
    close(tp.linalg.cholesky(T(upper_only, device), upper=True), to_numpy(up), dtype, 10)
    close(T(a, device).cholesky(), np.linalg.cholesky(a), dtype, 10)
    close(T(a, device).cholesky(upper=True), to_numpy(up), dtype, 10)


def test_cholesky_not_positive_definite(device):
    with pytest.raises(tp.linalg.LinAlgError, match=r"linalg.cholesky: The factorization could "
                                                    r"not be completed because the input is not "
                                                    r"positive-definite \(the leading minor of "
                                                    r"order 2 is not positive-definite\)"):
        tp.linalg.cholesky(T(np.array([[1.0, 2.0], [2.0, 1.0]]), device))
    batch = np.stack([np.eye(3), np.diag([1.0, 1.0, -1.0])])
    with pytest.raises(tp.linalg.LinAlgError, match=r"\(Batch element 1\).*order 3"):
        tp.linalg.cholesky(T(batch, device))
    with pytest.raises(RuntimeError, match=r"^cholesky: .*order 1"):
        T(-np.eye(2), device).cholesky()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_qr_modes_round_trip(device, dtype, shape):
    a = rand(*shape, dtype=dtype)
    m, n = shape[-2:]
    k = min(m, n)
    q, r = tp.linalg.qr(T(a, device))
    assert q.shape == shape[:-2] + (m, k) and r.shape == shape[:-2] + (k, n)
    assert q.dtype == r.dtype == getattr(tp, dtype)
    close(to_numpy(q) @ to_numpy(r), a, dtype, 20)
    close(ct(to_numpy(q)) @ to_numpy(q), np.broadcast_to(np.eye(k), shape[:-2] + (k, k)),
          dtype, 20)
    assert np.allclose(np.tril(to_numpy(r), -1), 0)
    want_q, want_r = np.linalg.qr(a)   # LAPACK's Householder signs on every device
    close(r, want_r, dtype, 20)
    qc, rc = tp.linalg.qr(T(a, device), mode="complete")
    assert qc.shape == shape[:-2] + (m, m) and rc.shape == shape[:-2] + (m, n)
    close(to_numpy(qc) @ to_numpy(rc), a, dtype, 20)
    q0, r0 = tp.linalg.qr(T(a, device), mode="r")
    assert q0.shape == (0,) and r0.shape == shape[:-2] + (k, n)
    close(r0, want_r, dtype, 20)
    named = T(a, device).qr(some=False)
    assert type(named).__name__ == "qr" and named.Q.shape == shape[:-2] + (m, m)


def test_qr_bad_mode_and_empty(device):
    with pytest.raises(RuntimeError, match="qr received unrecognized mode 'full'"):
        tp.linalg.qr(tp.ones(2, 2, device=device), mode="full")
    q, r = tp.linalg.qr(tp.ones(0, 3, device=device))
    assert q.shape == (0, 0) and r.shape == (0, 3)
    q, r = tp.linalg.qr(tp.ones(3, 0, device=device), mode="complete")
    np.testing.assert_array_equal(to_numpy(q), np.eye(3))
    assert r.shape == (3, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_values_vectors_and_triangle(device, dtype, uplo):
    a = spd(3, 4, 4, dtype=dtype) - 4 * np.eye(4).astype(dtype)
    garbage = np.triu(np.full_like(a, 7.0), 1) if uplo == "L" else \
        np.tril(np.full_like(a, 7.0), -1)
    only = (np.tril(a) if uplo == "L" else np.triu(a)) + garbage
    w, v = tp.linalg.eigh(T(only, device), UPLO=uplo)
    assert type(tp.linalg.eigh(T(a, device))).__name__ == "linalg_eigh"
    assert w.dtype == (tp.float32 if dtype in ("float32", "complex64") else tp.float64)
    assert v.dtype == getattr(tp, dtype) and w.shape == (3, 4) and v.shape == a.shape
    close(w, np.linalg.eigvalsh(a), dtype, 20)
    vv = to_numpy(v)
    close(a @ vv, vv * to_numpy(w)[..., None, :], dtype, 50)
    with pytest.raises(RuntimeError, match="Expected UPLO argument to be 'L' or 'U'"):
        tp.linalg.eigh(T(a, device), UPLO="X")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4)])
def test_svd_full_and_reduced_round_trip(device, dtype, shape):
    a = rand(*shape, dtype=dtype)
    m, n = shape[-2:]
    k = min(m, n)
    real = tp.float32 if dtype in ("float32", "complex64") else tp.float64
    u, s, vh = tp.linalg.svd(T(a, device))
    assert (u.shape, s.shape, vh.shape) == (shape[:-2] + (m, m), shape[:-2] + (k,),
                                            shape[:-2] + (n, n))
    assert s.dtype == real and u.dtype == vh.dtype == getattr(tp, dtype)
    close(s, np.linalg.svd(a, compute_uv=False), dtype, 20)
    ur, sr, vhr = tp.linalg.svd(T(a, device), full_matrices=False)
    assert ur.shape == shape[:-2] + (m, k) and vhr.shape == shape[:-2] + (k, n)
    close((to_numpy(ur) * to_numpy(sr)[..., None, :]) @ to_numpy(vhr), a, dtype, 50)
    close(tp.linalg.svdvals(T(a, device)), to_numpy(s), dtype, 20)
    old = T(a, device).svd()
    assert type(old).__name__ == "svd" and old.V.shape == shape[:-2] + (n, k)
    close((to_numpy(old.U) * to_numpy(old.S)[..., None, :]) @ ct(to_numpy(old.V)), a, dtype,
          50)
    no_uv = T(a, device).svd(compute_uv=False)
    assert no_uv.U.shape == shape[:-2] + (m, m) and not to_numpy(no_uv.V).any()


def test_svd_driver_and_empty(device):
    x = tp.ones(3, 2, device=device)
    if device == "cpu":
        with pytest.raises(RuntimeError, match="only supported on CUDA"):
            tp.linalg.svd(x, driver="gesvd")
    else:
        assert tp.linalg.svd(x, driver="gesvdj").S.shape == (2,)
        with pytest.raises(RuntimeError, match="driver must be one of"):
            tp.linalg.svd(x, driver="nope")
    u, s, vh = tp.linalg.svd(tp.ones(0, 3, device=device))
    assert u.shape == (0, 0) and s.shape == (0,) and vh.shape == (3, 3)


# -- lstsq, pinv ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_lstsq_matches_numpy(device, dtype):
    a = rand(2, 6, 3, dtype=dtype)
    b = rand(2, 6, 2, dtype=dtype)
    result = tp.linalg.lstsq(T(a, device), T(b, device))
    assert type(result).__name__ == "linalg_lstsq"
    assert result.solution.shape == (2, 3, 2) and result.solution.dtype == getattr(tp, dtype)
    want = np.stack([np.linalg.lstsq(a[i], b[i], rcond=None)[0] for i in range(2)])
    close(result.solution, want, dtype, 50)
    real = tp.float32 if dtype in ("float32", "complex64") else tp.float64
    assert result.residuals.dtype == result.singular_values.dtype == real
    if device == "cpu":   # default driver gelsy: rank, no residuals, no singular values
        assert to_numpy(result.rank).tolist() == [3, 3] and result.rank.dtype == tp.int64
        assert result.residuals.shape == (0,) and result.singular_values.shape == (0,)
        full = tp.linalg.lstsq(T(a, device), T(b, device), driver="gelsd")
        close(full.singular_values, np.linalg.svd(a, compute_uv=False), dtype, 20)
        residual = np.sum(np.abs(a @ want - b) ** 2, axis=-2)
        close(full.residuals, residual, dtype, 50)
    else:                 # gels only: no rank, residuals since m > n
        assert result.rank.shape == (0,) and result.residuals.shape == (2, 2)
    vector = tp.linalg.lstsq(T(a[0], device), T(b[0, :, 0], device)).solution
    close(vector, want[0, :, 0], dtype, 50)


def test_lstsq_errors(device):
    a = tp.ones(4, 3, device=device)
    with pytest.raises(RuntimeError, match=r"input.size\(-2\) should match other.size\(-2\)"):
        tp.linalg.lstsq(a, tp.ones(3, 1, device=device))
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.linalg.lstsq(a, tp.ones(4, 1, dtype=tp.float64, device=device))
    with pytest.raises(RuntimeError, match="driver"):
        tp.linalg.lstsq(a, tp.ones(4, 1, device=device), driver="magic")
    if device != "cpu":
        with pytest.raises(RuntimeError, match="other than `gels`"):
            tp.linalg.lstsq(a, tp.ones(4, 1, device=device), driver="gelsd")
    # underdetermined systems get the minimum-norm solution on every device (torch 2.11's cuda
    # takes them too)
    a = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    b = np.array([[1.0], [2.0]])
    got = tp.linalg.lstsq(T(a, device), T(b, device)).solution
    np.testing.assert_allclose(to_numpy(got), np.linalg.pinv(a) @ b, rtol=1e-10, atol=1e-12)


def test_matrix_norm_of_empty_matrices(device):
    empty = tp.zeros(0, 3, device=device)
    for ord in (1, float("inf")):   # a max over no sums: 0, as torch 2.11 gives for inf
        assert tp.linalg.matrix_norm(empty, ord).item() == 0.0
    with pytest.raises(RuntimeError, match="min over dimension"):
        tp.linalg.matrix_norm(empty, -float("inf"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pinv_matches_numpy_and_tolerances(device, dtype):
    a = rand(2, 5, 3, dtype=dtype)
    got = tp.linalg.pinv(T(a, device))
    assert got.shape == (2, 3, 5) and got.dtype == getattr(tp, dtype)
    close(got, np.linalg.pinv(a), dtype, 50)
    h = spd(4, 4, dtype=dtype)
    close(tp.linalg.pinv(T(h, device), hermitian=True), np.linalg.inv(h), dtype, 50)
    rank1 = np.outer([1.0, 2.0, 3.0], [1.0, 1.0]).astype(dtype)
    close(tp.linalg.pinv(T(rank1, device)), np.linalg.pinv(rank1), dtype, 50)
    # atol larger than every singular value: everything counts as zero
    assert not to_numpy(tp.linalg.pinv(T(a, device), atol=1e6)).any()
    close(T(a[0], device).pinverse(), np.linalg.pinv(a[0]), dtype, 50)


# -- norms ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_norm_orders_dims_and_dtype(device, dtype):
    a = rand(3, 4, 5, dtype=dtype)
    x = T(a, device)
    real = tp.float32 if dtype in ("float32", "complex64") else tp.float64
    for ord in (2, 1, 0, 3, 0.5, -1, math.inf, -math.inf):
        got = tp.linalg.vector_norm(x, ord, dim=-1)
        assert got.dtype == real and got.shape == (3, 4)
        close(got, np.linalg.norm(a, ord, axis=-1), dtype, 10)
    close(tp.linalg.vector_norm(x), np.linalg.norm(a.reshape(-1)), dtype, 10)
    kept = tp.linalg.vector_norm(x, 2, (0, 2), keepdim=True)
    assert kept.shape == (1, 4, 1)
    close(kept, np.sqrt(np.sum(np.abs(a) ** 2, axis=(0, 2), keepdims=True)), dtype, 10)
    wide = "complex128" if dtype.startswith("complex") else "float64"
    assert tp.linalg.vector_norm(x, dtype=getattr(tp, wide)).dtype == tp.float64


def test_vector_norm_half_and_errors(device):
    h = tp.tensor([3.0, 4.0], dtype=tp.float16, device=device)
    got = tp.linalg.vector_norm(h)
    assert got.dtype == tp.float16 and float(got.item()) == 5.0
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as "
                                           "input. Got Long"):
        tp.linalg.vector_norm(tp.ones(3, dtype=tp.int64, device=device))
    with pytest.raises(RuntimeError, match="does not have an identity"):
        tp.linalg.vector_norm(tp.ones(0, device=device), math.inf)
    assert to_numpy(tp.linalg.vector_norm(tp.ones(0, device=device))) == 0
    with pytest.raises(TypeError, match="ord"):
        tp.linalg.vector_norm(tp.ones(3, device=device), "fro")
    with pytest.raises(RuntimeError, match="dtype should be complex"):
        tp.linalg.vector_norm(tp.ones(3, dtype=tp.complex64, device=device), dtype=tp.float32)
    with pytest.raises(RuntimeError, match="more than once"):
        tp.linalg.vector_norm(tp.ones(2, 2, device=device), dim=(0, -2))
    with pytest.raises(IndexError):
        tp.linalg.vector_norm(tp.ones(2, 2, device=device), dim=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_norm_every_ord(device, dtype):
    a = rand(2, 3, 4, dtype=dtype)
    x = T(a, device)
    for ord in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        got = tp.linalg.matrix_norm(x, ord)
        assert got.shape == (2,)
        close(got, np.linalg.norm(a, ord, axis=(-2, -1)), dtype, 20)
        kept = tp.linalg.matrix_norm(x, ord, dim=(0, 2), keepdim=True)
        assert kept.shape == (1, 3, 1)
        close(kept, np.linalg.norm(a, ord, axis=(0, 2), keepdims=True), dtype, 20)


def test_matrix_norm_and_norm_errors_and_dispatch(device):
    a = rand(3, 4)
    x = T(a, device)
    with pytest.raises(RuntimeError, match="Order 3.0 not supported|Order 3 not supported"):
        tp.linalg.matrix_norm(x, 3)
    with pytest.raises(RuntimeError, match="Order abc not supported"):
        tp.linalg.matrix_norm(x, "abc")
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple"):
        tp.linalg.matrix_norm(x, dim=(0,))
    with pytest.raises(RuntimeError, match="dims must be different"):
        tp.linalg.matrix_norm(x, dim=(0, -2))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tp.linalg.matrix_norm(tp.ones(3, device=device))
    with pytest.raises(RuntimeError, match="Low precision"):
        tp.linalg.matrix_norm(tp.ones(2, 2, dtype=tp.float16, device=device), "nuc")
    half = tp.linalg.matrix_norm(tp.ones(2, 2, dtype=tp.float16, device=device), 1)
    assert half.dtype == tp.float16 and float(half.item()) == 2.0
    with pytest.raises(RuntimeError, match="size 0"):
        tp.linalg.matrix_norm(tp.ones(0, 3, device=device), -math.inf)
    close(tp.linalg.norm(x), np.linalg.norm(a), "float64")
    close(tp.linalg.norm(x, "nuc"), np.linalg.norm(a, "nuc"), "float64")
    close(tp.linalg.norm(x, 1), np.linalg.norm(a, 1), "float64")           # matrix 1-norm
    close(tp.linalg.norm(x, 1, dim=1), np.linalg.norm(a, 1, axis=1), "float64")
    close(tp.linalg.norm(T(a[0], device), 3), np.linalg.norm(a[0], 3), "float64")
    b = rand(2, 3, 4)
    close(tp.linalg.norm(T(b, device)), np.linalg.norm(b.reshape(-1)), "float64")
    with pytest.raises(RuntimeError, match="must be 1D or 2D. Got 3D"):
        tp.linalg.norm(T(b, device), 2)
    with pytest.raises(RuntimeError, match="length 1 or 2"):
        tp.linalg.norm(T(b, device), dim=(0, 1, 2))


# -- captures ---------------------------------------------------------------------------------
@requires_accelerator
def test_norms_are_captured_and_decompositions_refused():
    dev = tp.accelerator.current_accelerator().type + ":0"
    x = tp.zeros(3, 4, device=dev)
    g = tp.accelerator.Graph()
    with g:
        captured = {"vector": tp.linalg.vector_norm(x, 3, dim=1),
                    "fro": tp.linalg.matrix_norm(x), "inf": tp.linalg.matrix_norm(x, math.inf),
                    "norm": tp.linalg.norm(x), "norm1": tp.linalg.norm(x, -1)}
    for seed in (1, 2):
        a = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
        x.copy_(tp.tensor(a, device=dev))
        g.replay()
        want = {"vector": np.linalg.norm(a, 3, axis=1), "fro": np.linalg.norm(a),
                "inf": np.linalg.norm(a, np.inf), "norm": np.linalg.norm(a),
                "norm1": np.linalg.norm(a, -1)}
        for name, value in captured.items():
            np.testing.assert_allclose(to_numpy(value), want[name], rtol=1e-5)
    square = tp.tensor(np.eye(3, dtype=np.float32) * 2, device=dev)
    refused = {**FUNCTIONS, "nuc": lambda a: tp.linalg.matrix_norm(a, "nuc"),
               "norm2": lambda a: tp.linalg.norm(a, 2), "logdet": lambda a: a.logdet()}
    for name, fn in refused.items():
        with pytest.raises(RuntimeError, match="is not capture-safe"):
            with tp.accelerator.Graph():
                fn(square)
    # nothing was left broken: the same calls work eagerly after the refused captures
    np.testing.assert_allclose(to_numpy(tp.linalg.inv(square)), np.eye(3) / 2)
