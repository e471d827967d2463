"""The cuda backend's cached elementwise and small-sum kernels.

Two parts: the CUDA source generator (``backends/cuda/_elementwise_source.py``, plain text, runs
everywhere: it is loaded by file path, since importing anything under ``backends.cuda`` imports
the package, which needs CuPy), and the launchers of ``_elementwise.py`` on a GPU (skipped
without CuPy and a visible GPU). ``benchmarks/check_cuda_elementwise.py`` checks every
combination on a GPU; the tests here are the small, always-run subset.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "tensorplay/backends/cuda/_elementwise_source.py"
_spec = importlib.util.spec_from_file_location("tp_elementwise_source_under_test", _PATH)
src = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(src)

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, I64, BOOL = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)
DTYPES = (F16, BF16, F32, F64, I32, I64, BOOL)

FLOAT_ONLY = ("div", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "gelu", "gelu_tanh",
              "silu", "erf", "gelu_backward", "gelu_tanh_backward", "silu_backward",
              "sigmoid_backward", "tanh_backward", "relu_backward")
ARITHMETIC = ("add", "sub", "mul", "maximum", "minimum", "neg", "abs", "relu")
ANY_DTYPE = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "where")


def _kinds(op: str) -> str:
    return "a" * src.arity(op)


def test_every_op_is_listed_once_with_its_arity():
    assert sorted(src.OPS) == sorted(FLOAT_ONLY + ARITHMETIC + ANY_DTYPE)
    assert {src.arity(op) for op in ("add", "eq", "logical_or")} == {2}
    assert {src.arity(op) for op in ("neg", "gelu", "erf")} == {1}
    assert src.arity("where") == 3
    assert src.arity("floor_divide") is None


@pytest.mark.parametrize("compute", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", src.OPS)
def test_supported_combinations(op, compute):
    source = src.kernel_source(op, compute, _kinds(op), src.result_dtype(op, compute))
    if op in ANY_DTYPE:
        supported = True
    elif op in FLOAT_ONLY:
        supported = compute in (F16, BF16, F32, F64)
    else:
        supported = compute != BOOL
    assert (source is not None) == supported
    if source is not None:
        name = src.kernel_name(op, compute, _kinds(op), src.result_dtype(op, compute))
        assert f'extern "C" __global__ void {name}(' in source
        assert "#include" not in source   # no toolkit headers: NVRTC needs none of them
        assert "i += stride" in source and "tp_i64 i =" in source   # 64-bit grid-stride loop


@pytest.mark.parametrize("op, expression", [
    ("add", "const float r = a + b;"), ("sub", "const float r = a - b;"),
    ("mul", "const float r = a * b;"), ("div", "const float r = a / b;"),
    ("maximum", "(a != a) ? a : ((b != b) ? b : fmaxf(a, b))"),
    ("minimum", "(a != a) ? a : ((b != b) ? b : fminf(a, b))"),
    ("eq", "const bool r = a == b;"), ("ge", "const bool r = a >= b;"),
    ("logical_and", "(a != (float)0) && (b != (float)0)"),
    ("neg", "const float r = -a;"), ("abs", "fabsf(a)"), ("exp", "expf(a)"),
    ("log", "logf(a)"), ("sqrt", "sqrtf(a)"), ("tanh", "tanhf(a)"), ("erf", "erff(a)"),
    ("sigmoid", "(float)1 / ((float)1 + expf(-a))"),
    ("relu", "(a != a) ? a : fmaxf(a, (float)0)"),
    ("gelu", "(float)0.5 * a * ((float)1 + erff(a * (float)0.7071067811865475"),
    ("gelu_tanh", "tanhf((float)0.7978845608028653"),
    ("silu", "a / ((float)1 + expf(-a))"),
    ("where", "const float r = c ? a : b;"),
])
def test_float32_expressions(op, expression):
    assert expression in src.kernel_source(op, F32, _kinds(op), src.result_dtype(op, F32))


def test_double_uses_double_math_and_halves_compute_in_float():
    source = src.kernel_source("gelu", F64, "a", F64)
    assert "erf(a * (double)0.7071" in source and "erff" not in source.split("extern")[1]
    half = src.kernel_source("exp", F16, "a", F16)
    assert "const float a = tp_ld_f16(p0[i]);" in half
    assert "out[i] = tp_st_f16((float)(r));" in half and "expf(a)" in half
    bf16 = src.kernel_source("add", BF16, "aa", BF16)
    assert "tp_ld_bf16(p1[i])" in bf16 and "tp_st_bf16" in bf16


def test_integer_arithmetic_wraps_through_unsigned():
    assert "(int)((unsigned int)a + (unsigned int)b)" in src.kernel_source("add", I32, "aa", I32)
    assert "(long long)((unsigned long long)a * (unsigned long long)b)" in \
        src.kernel_source("mul", I64, "aa", I64)
    assert "(int)((unsigned int)0 - (unsigned int)a)" in src.kernel_source("neg", I32, "a", I32)


def test_scalars_are_passed_by_value_and_converted_once():
    source = src.kernel_source("mul", F16, "sa", F16)
    assert "const unsigned short v0" in source and "const unsigned short* __restrict__ p1" in source
    head, loop = source.split("for (tp_i64 i")
    assert "const float a = tp_ld_f16(v0);" in head and "p1[i]" in loop
    where = src.kernel_source("where", I64, "aas", I64)
    assert "const bool* __restrict__ p0" in where and "const long long v2" in where


@pytest.mark.parametrize("op, compute, kinds, out", [
    ("div", I32, "aa", I32),            # no integer division
    ("exp", I64, "a", I64),             # transcendental ops are float-only
    ("sub", BOOL, "aa", BOOL),          # PyTorch rejects bool subtraction
    ("neg", BOOL, "a", BOOL),
    ("floor_divide", F32, "aa", F32),   # unknown op
    ("add", F32, "a", F32),             # kinds of the wrong length
    ("add", F32, "ax", F32),            # unknown kind letter
    ("where", F32, "saa", F32),         # where's condition must be an array
    ("add", F64, "aa", F16),            # double into 16 bits would round twice
    ("add", F32, "aa", I32),            # float into int is no defined conversion
    ("eq", F32, "aa", np.dtype(np.uint8)),
    ("add", np.dtype(np.complex64), "aa", np.dtype(np.complex64)),
    ("add", "not a dtype", "aa", F32),
])
def test_unsupported_combinations_give_none(op, compute, kinds, out):
    assert src.kernel_source(op, compute, kinds, out) is None


def test_stores_convert_once_into_the_output_dtype():
    assert "out[i] = tp_st_bf16((float)(r));" in src.kernel_source("add", F32, "aa", BF16)
    assert "out[i] = (long long)(r);" in src.kernel_source("add", I32, "aa", I64)
    assert "out[i] = (float)(r);" in src.kernel_source("lt", I32, "aa", F32)
    assert "bool* __restrict__ out" in src.kernel_source("ne", F64, "as", BOOL)


def test_every_kinds_string_of_a_supported_op_gives_source():
    for op in src.OPS:
        for kinds in map("".join, itertools.product("ars", repeat=src.arity(op))):
            source = src.kernel_source(op, F32, kinds, src.result_dtype(op, F32))
            assert (source is None) == (op == "where" and kinds[0] != "a"), (op, kinds)


def test_a_row_operand_is_read_modulo_its_size():
    source = src.kernel_source("add", F32, "ar", F32)
    assert "const float* __restrict__ p1, const tp_i64 m1" in source
    assert "p1[i % m1]" in source and "p0[i]" in source
    assert src.kernel_source("add", F32, "ax", F32) is None


@pytest.mark.parametrize("compute, out, accumulator", [
    (F16, F16, "float"), (BF16, F32, "float"), (F32, F32, "float"), (F64, F64, "double"),
    (I32, I64, "unsigned long long"), (I64, I64, "unsigned long long"),
    (BOOL, I64, "unsigned long long"),
])
def test_sum_source_accumulates_wide(compute, out, accumulator):
    source = src.sum_source(compute, out)
    assert f"__shared__ {accumulator} shared[1024];" in source
    assert f'extern "C" __global__ void {src.SUM_NAME}(' in source
    assert "half >>= 1" in source   # the shared-memory tree


@pytest.mark.parametrize("compute, out", [(F64, F16), (I32, I32), (F32, BOOL), (F32, I64),
                                          (np.dtype(np.complex64), np.dtype(np.complex64))])
def test_sum_source_unsupported(compute, out):
    assert src.sum_source(compute, out) is None


def test_sum_limit_is_one_block_worth():
    assert src.SUM_SMALL_LIMIT == 1 << 16


# -- on a GPU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=lambda d: d.name)
def test_softmax_source_is_one_kernel_per_dtype(dtype, log):
    source = src.softmax_source(dtype, log)
    name = src.softmax_name(dtype, log)
    assert source.count("__global__") == 1 and f"void {name}(" in source
    wide = "double" if dtype == F64 else "float"
    assert f"__shared__ {wide} shared[32];" in source
    assert ("logsum" in source) == log
    if dtype in (F16, BF16):
        assert "unsigned short* __restrict__ y" in source


@pytest.mark.parametrize("dtype", [I32, I64, BOOL], ids=lambda d: d.name)
def test_softmax_source_refuses_other_dtypes(dtype):
    assert src.softmax_source(dtype, False) is None


@pytest.fixture(scope="module")
def ew():
    from support import cuda_backend_or_skip

    cuda_backend_or_skip("the cuda backend's elementwise launchers")
    from tensorplay.backends.cuda import _elementwise

    return _elementwise


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def test_gpu_add_matches_and_is_cached(ew):
    import cupy

    x, y = _random((64, 64), F32), _random((64, 64), F32, 1)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    out = cupy.empty((64, 64), F32)
    launch = ew.elementwise_kernel("add", F32, "aa", F32)
    assert ew.elementwise_kernel("add", F32, "aa", F32) is launch
    launch(cupy.asarray(x), cupy.asarray(y), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), x + y)


def test_gpu_integer_add_wraps_and_scalar_operand(ew):
    import cupy

    x = np.array([2**31 - 1, -2**31, 5, -7], dtype=np.int32)
    out = cupy.empty(4, I32)
    ew.elementwise_kernel("add", I32, "as", I32)(cupy.asarray(x), np.int32(1), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), [-2**31, -2**31 + 1, 6, -6])


def test_gpu_float16_scalar_and_where(ew):
    import cupy

    x = _random((33,), F16)
    out = cupy.empty(33, F16)
    ew.elementwise_kernel("mul", F16, "as", F16)(cupy.asarray(x), np.float16(1.5), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), (x.astype(F32) * 1.5).astype(F16))
    cond = x > 0
    picked = cupy.empty(33, F16)
    ew.elementwise_kernel("where", F16, "aas", F16)(cupy.asarray(cond), cupy.asarray(x),
                                                    np.float16(-1), picked)
    np.testing.assert_array_equal(cupy.asnumpy(picked), np.where(cond, x, np.float16(-1)))


def test_gpu_maximum_propagates_nan_and_compare_gives_bool(ew):
    import cupy

    x = np.array([np.nan, 1.0, 2.0, -1.0], dtype=F32)
    y = np.array([0.0, np.nan, 1.0, 3.0], dtype=F32)
    out = cupy.empty(4, F32)
    ew.elementwise_kernel("maximum", F32, "aa", F32)(cupy.asarray(x), cupy.asarray(y), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), [np.nan, np.nan, 2.0, 3.0])
    flags = cupy.empty(4, BOOL)
    ew.elementwise_kernel("lt", F32, "aa", BOOL)(cupy.asarray(x), cupy.asarray(y), flags)
    np.testing.assert_array_equal(cupy.asnumpy(flags), [False, False, False, True])


def test_gpu_gelu_matches_the_erf_formula(ew):
    import math

    import cupy

    x = _random((1000,), F64)
    out = cupy.empty(1000, F64)
    ew.elementwise_kernel("gelu", F64, "a", F64)(cupy.asarray(x), out)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(cupy.asnumpy(out), want, rtol=1e-13, atol=1e-15)


def test_gpu_zero_size_launches_nothing_and_unsupported_is_none(ew):
    import cupy

    empty = cupy.empty((0, 3), F32)
    ew.elementwise_kernel("exp", F32, "a", F32)(empty, empty)   # no launch, no error
    assert ew.elementwise_kernel("div", I32, "aa", I32) is None
    assert ew.elementwise_kernel("exp", I32, "a", I32) is None


@pytest.mark.parametrize("n", [0, 1, 1000, 1 << 16])
def test_gpu_small_sum(ew, n):
    import cupy

    x = np.arange(n, dtype=np.int32) - n // 2
    total = cupy.empty((), I64)
    ew.sum_kernel(I32, I64)(cupy.asarray(x), total)
    assert int(total) == int(x.astype(np.int64).sum())
    values = (np.arange(n, dtype=F32) % 7) / 8
    ftotal = cupy.empty((), F32)
    ew.sum_kernel(F32, F32)(cupy.asarray(values), ftotal)
    assert float(ftotal) == pytest.approx(float(values.astype(F64).sum()), rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("a_shape, b_shape", [((8, 512), (512,)), ((2, 3, 4), (1, 4)),
                                              ((2, 3, 4), (3, 4)), ((5,), ()), ((3, 7), (1, 1))])
def test_tensor_ops_with_a_row_operand_take_the_row_kernel(ew, a_shape, b_shape):
    """``h + b`` with a bias row (and a 0-d or one-element operand) launches one raw kernel
    reading the row modulo its size, in either operand order, in place too."""
    import tensorplay as tp
    from tensorplay._tensor import elementwise as engine

    a, b = _random(a_shape, F32), _random(b_shape, F32, 1)
    ta, tb = tp.tensor(a, device="cuda"), tp.tensor(b, device="cuda")
    np.testing.assert_array_equal((ta + tb).cpu().numpy(), a + b)
    np.testing.assert_array_equal((tb * ta).cpu().numpy(), b * a)
    np.testing.assert_array_equal(tp.maximum(ta, tb).cpu().numpy(), np.maximum(a, b))
    plan = engine._plans[("add", engine._signature(ta), engine._signature(tb), ())]
    assert plan.fast is not None and "r" in ew._made[plan.fast][0][3]
    ta.sub_(tb)
    np.testing.assert_array_equal(ta.cpu().numpy(), a - b)


def test_gpu_packed_launches_from_many_threads_do_not_mix(ew):
    """Launchers write their parameters into one buffer per thread (``_launch.PackedLaunch``):
    eight threads launching one kernel on their own streams, each with its own operands and 40
    outputs, each find exactly their own sums (a shared buffer would cross the pointers)."""
    import threading

    import cupy

    launch = ew.elementwise_kernel("add", F32, "aa", F32)
    device = cupy.cuda.runtime.getDevice()
    failures: list = []

    def work(seed: int) -> None:
        try:
            with cupy.cuda.Device(device), cupy.cuda.Stream(non_blocking=True) as stream:
                x = cupy.full((4096,), seed, F32)
                y = cupy.full((4096,), 1000, F32)
                outs = [cupy.empty_like(x) for _ in range(40)]
                for out in outs:
                    launch(x, y, out)
                stream.synchronize()
                for out in outs:
                    if not bool((out == seed + 1000).all()):
                        failures.append((seed, float(out[0])))
                        return
        except Exception as error:  # noqa: BLE001 - reported below with its thread
            failures.append((seed, error))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("compute", [F32, F64, I32, I64], ids=lambda d: d.name)
def test_gpu_scalars_are_packed_into_their_parameter_slots(ew, compute):
    """Scalars of the compute dtype travel in the low bytes of 8-byte parameter slots
    (``_launch.PackedLaunch``): before, after and between arrays and rows, each lands in its own
    parameter."""
    import cupy

    x = (np.arange(24).reshape(4, 6) - 7).astype(compute)
    row = (np.arange(6) * 3 - 5).astype(compute)
    s, t = compute.type(3), compute.type(-2)
    out = cupy.empty((4, 6), compute)
    ew.elementwise_kernel("sub", compute, "sa", compute)(s, cupy.asarray(x), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), s - x)
    ew.elementwise_kernel("sub", compute, "as", compute)(cupy.asarray(x), t, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), x - t)
    ew.elementwise_kernel("sub", compute, "rs", compute)(cupy.asarray(row), s, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), np.broadcast_to(row - s, (4, 6)))
    flags = cupy.asarray(x > 0)
    ew.elementwise_kernel("where", compute, "ass", compute)(flags, s, t, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), np.where(x > 0, s, t))


def test_gpu_bool_scalar_is_packed(ew):
    import cupy

    x = np.array([True, False, True, False])
    out = cupy.empty(4, BOOL)
    ew.elementwise_kernel("logical_and", BOOL, "as", BOOL)(cupy.asarray(x), np.bool_(True), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), x)
    ew.elementwise_kernel("logical_or", BOOL, "sa", BOOL)(np.bool_(False), cupy.asarray(x), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), x)
    ew.elementwise_kernel("logical_and", BOOL, "sa", BOOL)(np.bool_(False), cupy.asarray(x), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), [False] * 4)


def _softmax_reference(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape, dim", [((4, 10), -1), ((3, 5, 7), 1), ((6, 4), 0),
                                        ((2, 3000), 1), ((1,), 0), ((5, 1, 3), 1)])
def test_gpu_softmax_is_one_kernel_along_any_dim(ew, shape, dim, log):
    """One block per row (``_activations.softmax``): rows along the last dim, a middle dim and
    the first (strided rows), rows longer than a block, and rows of one element."""
    import cupy

    from tensorplay.backends.cuda import _activations

    x = _random(shape, F32) * 4
    out = cupy.empty(shape, F32)
    _activations.softmax(cupy.asarray(x), dim, out, log)
    np.testing.assert_allclose(cupy.asnumpy(out), _softmax_reference(x, dim, log),
                               rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [F16, BF16, F64], ids=lambda d: d.name)
def test_gpu_softmax_dtypes_and_layouts(ew, dtype):
    """float16/bfloat16 compute in float and round once; float64 in double; a transposed input
    and a non-contiguous output go through contiguous copies."""
    import cupy

    from tensorplay.backends.cuda import _activations

    x = _random((33, 65), F64).astype(dtype)
    for log in (False, True):
        want = _softmax_reference(x.astype(F64), 1, log).astype(dtype)
        out = cupy.empty((33, 65), dtype)
        _activations.softmax(cupy.asarray(x), 1, out, log)
        tolerance = 1e-12 if dtype == F64 else (1e-2 if dtype == BF16 else 2e-3)
        np.testing.assert_allclose(cupy.asnumpy(out).astype(F64), want.astype(F64),
                                   rtol=tolerance, atol=tolerance)
        strided = cupy.empty((65, 33), dtype).T
        _activations.softmax(cupy.asarray(x.T.copy()).T, 1, strided, log)
        np.testing.assert_array_equal(cupy.asnumpy(strided), cupy.asnumpy(out))


def test_gpu_softmax_rows_with_nan_or_infinite_maximum_are_nan(ew):
    import cupy

    from tensorplay.backends.cuda import _activations

    x = np.array([[1.0, np.nan, 2.0], [-np.inf] * 3, [np.inf, 0.0, 1.0], [0.0, -np.inf, 0.0]],
                 dtype=F32)
    out = cupy.empty(x.shape, F32)
    _activations.softmax(cupy.asarray(x), 1, out, False)
    got = cupy.asnumpy(out)
    assert np.isnan(got[:3]).all()
    np.testing.assert_array_equal(got[3], [0.5, 0.0, 0.5])


def test_gpu_a_refused_launch_raises_our_error_and_the_next_one_runs(ew):
    """``cuLaunchKernel`` refusing a launch (2048 threads per block, above the device's 1024)
    raises tensorplay's ``CudaRuntimeError`` naming the call, translated from the error of
    CuPy's binding (``_launch.PackedLaunch``); the error is not sticky, so the next launch of
    the same kernel runs."""
    import cupy

    from tensorplay.backends.cuda._launch import PackedLaunch
    from tensorplay.backends.cuda._runtime import CudaRuntimeError

    launch = ew.elementwise_kernel("add", F32, "aa", F32)
    packed = PackedLaunch(ew._made[launch][1], 4)
    x, out = cupy.arange(64, dtype=F32), cupy.zeros(64, F32)
    values, params = packed.buffer()[:2]
    values[0], values[1], values[2], values[3] = x.data.ptr, x.data.ptr, out.data.ptr, 64
    with pytest.raises(CudaRuntimeError, match="cuLaunchKernel"):
        packed(1, 2048, params)
    packed(1, 64, params)
    np.testing.assert_array_equal(cupy.asnumpy(out), 2 * np.arange(64, dtype=F32))
