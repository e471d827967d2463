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
import re
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
        assert "w += stride" in source   # and its vector form


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


# -- the vector path -----------------------------------------------------------------------------
_TAGS = {F16: "u16", BF16: "u16", F32: "f32", F64: "f64", I32: "i32", I64: "i64", BOOL: "b8"}


@pytest.mark.parametrize("steps, compute, kinds, out, width", [
    ("add", BF16, "aa", BF16, 8), ("gelu", F16, "a", F16, 8), ("add", F32, "aa", F32, 4),
    ("add", F64, "aa", F64, 2), ("add", I32, "aa", I32, 4), ("add", I64, "as", I64, 2),
    ("logical_and", BOOL, "aa", BOOL, 16),
    ("lt", F32, "aa", BOOL, 4),          # a bool output: V bytes a store
    ("lt", BF16, "aa", BOOL, 8),
    ("add", F32, "aa", BF16, 4),         # the widest of the operands and the output
    ("add", I32, "aa", I64, 2),
    ("where", F32, "aaa", F32, 4),       # the bool condition counts with its one byte
    ("where", BF16, "aaa", BF16, 8), ("where", F64, "aaa", F64, 2),
    ("where", F64, "ass", F32, 4),       # ... and only arrays count: here the condition and out
    ("where", BOOL, "ass", BOOL, 16),
    ("add", F64, "rs", F32, 4), ("neg", F64, "s", F64, 2),   # rows and scalars do not count
    ("add", F64, "ar", F32, 2),
    ((("where", (1, 0, 2)),), F32, "aas", F32, 4),   # a chain's condition, by its place
    ((("sub", (0, 1)), ("where", (2, -1, 0))), F64, "aaa", F64, 2),
    ((("mul", (0, 1)), ("where", (2, -1, 3))), F64, "ssas", F32, 4),
])
def test_program_width_is_16_bytes_over_the_widest_array(steps, compute, kinds, out, width):
    assert src.program_width(steps, compute, kinds, out) == width
    if isinstance(steps, str):
        source = src.kernel_source(steps, compute, kinds, out)
    else:
        source = src.program_source(steps, compute, kinds, out)
    assert f"constexpr int V = {width};" in source
    assert f"tp_vec_{_TAGS[np.dtype(out)]} {{ {src.storage_type(out)} s[{width}]; }};" in source
    assert f"alignas({np.dtype(out).itemsize * width})" in source


def _guard_masks(guard: str) -> dict[str, int]:
    """Each pointer of the alignment guard -> the low bits it must have clear."""
    masks = {}
    pattern = r"\(\((\(unsigned long long\)\w+(?: \| \(unsigned long long\)\w+)*)\) & (\d+)ull\)"
    for pointers, mask in re.findall(pattern, guard):
        for pointer in pointers.split(" | "):
            masks[pointer.removeprefix("(unsigned long long)")] = int(mask)
    return masks


def _loops(source: str) -> tuple[str, str, str]:
    """The alignment guard's line, the vector loop and the one-element loop of a kernel."""
    rest = source.split("    tp_i64 tail = 0;", 1)[1]
    guard, rest = rest.split("\n    if (", 1)[1].split("\n", 1)
    vector, scalar = rest.split("    for (tp_i64 i = tail + first; i < n; i += stride) {")
    return guard, vector, scalar


def test_bfloat16_add_is_one_16_byte_access_per_operand():
    source = src.kernel_source("add", BF16, "aa", BF16)
    guard, vector, scalar = _loops(source)
    assert "struct alignas(16) tp_vec_u16 { unsigned short s[8]; };" in source
    assert guard == ("((((unsigned long long)p0 | (unsigned long long)p1 | "
                     "(unsigned long long)out) & 15ull)) == 0ull) {")
    assert "const tp_vec_u16 q0 = reinterpret_cast<const tp_vec_u16*>(p0)[w];" in vector
    assert "const tp_vec_u16 q1 = reinterpret_cast<const tp_vec_u16*>(p1)[w];" in vector
    assert "reinterpret_cast<tp_vec_u16*>(out)[w] = qo;" in vector
    assert "const tp_i64 vectors = n / V;" in vector and "tail = vectors * V;" in vector
    assert "for (tp_i64 w = first; w < vectors; w += stride) {" in vector
    assert "#pragma unroll" in vector and "for (int t = 0; t < V; ++t) {" in vector
    assert "const float a = tp_ld_bf16(q0.s[t]);" in vector
    assert "qo.s[t] = tp_st_bf16((float)(r));" in vector
    # the tail, and every element when some array is off its vector width: one at a time
    assert source.index("tp_i64 tail = 0;") < source.index("(unsigned long long)p0")
    assert "const float a = tp_ld_bf16(p0[i]);" in scalar and "out[i] = tp_st_bf16" in scalar
    assert "[w]" not in scalar


def test_where_loads_its_bool_condition_as_narrower_vectors():
    source = src.kernel_source("where", F32, "aaa", F32)
    guard, vector, _ = _loops(source)
    assert "struct alignas(4) tp_vec_b8 { bool s[4]; };" in source
    assert "struct alignas(16) tp_vec_f32 { float s[4]; };" in source
    assert guard == ("((((unsigned long long)p0) & 3ull) | (((unsigned long long)p1 | "
                     "(unsigned long long)p2 | (unsigned long long)out) & 15ull)) == 0ull) {")
    assert "const bool c = q0.s[t];" in vector and "const float b = q2.s[t];" in vector
    bf16 = src.kernel_source("where", BF16, "aas", BF16)
    assert "struct alignas(8) tp_vec_b8 { bool s[8]; };" in bf16
    assert "(unsigned long long)p0) & 7ull)" in bf16


def test_rows_and_scalars_keep_their_reads_in_the_vector_loop():
    source = src.kernel_source("add", BF16, "ar", BF16)
    guard, vector, scalar = _loops(source)
    assert "p1" not in guard   # a row is read element by element: no alignment asked of it
    assert "tp_i64 j1 = w * V % m1;" in vector   # one division a vector, then counted along
    assert "const float b = tp_ld_bf16(p1[j1]);" in vector and "if (++j1 == m1) j1 = 0;" in vector
    assert "p1[i % m1]" in scalar
    scalar_source = src.kernel_source("mul", F16, "sa", F16)
    guard, vector, _ = _loops(scalar_source)
    assert "v0" not in guard and "v0" not in vector   # converted once, before both loops
    assert "const float b = tp_ld_f16(q1.s[t]);" in vector


@pytest.mark.parametrize("compute", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", src.OPS)
def test_both_loops_compute_every_element_alike(op, compute):
    """Only the memory access differs between the vector loop and the one-element loop: the
    same expression lines and the same store conversion, every array in the guard at the
    width of its own dtype."""
    kinds = {1: "a", 2: "ar", 3: "aas"}[src.arity(op)]
    out = src.result_dtype(op, compute)
    source = src.kernel_source(op, compute, kinds, out)
    if source is None:
        return
    width = src.program_width(op, compute, kinds, out)
    guard, vector, scalar = _loops(source)
    vector_lines = [line.strip() for line in vector.splitlines()]
    scalar_lines = [line.strip() for line in scalar.splitlines()]
    expression = next(line for line in scalar_lines if line.startswith("const ") and " r = " in
                      line)
    assert expression in vector_lines
    store = next(line for line in scalar_lines if line.startswith("out[i] = "))
    assert "qo.s[t] = " + store.removeprefix("out[i] = ") in vector_lines
    masks = {"out": out.itemsize * width - 1}   # the "a" operands and out; no row, no scalar
    if op == "where":
        masks.update(p0=BOOL.itemsize * width - 1, p1=compute.itemsize * width - 1)
    else:
        masks["p0"] = compute.itemsize * width - 1
    assert _guard_masks(guard) == masks
    assert guard.endswith(") == 0ull) {")


def test_a_chain_takes_the_vector_path_too():
    steps = (("mul", (0, 1)), ("add", (-1, 2)), ("gelu", (-1,)))
    source = src.program_source(steps, BF16, "ars", BF16)
    guard, vector, scalar = _loops(source)
    assert "constexpr int V = 8;" in source and "(unsigned long long)p0" in guard
    for j in range(3):
        line = next(line.strip() for line in scalar.splitlines() if f"r{j}; {{" in line)
        assert line in [v.strip() for v in vector.splitlines()]
    assert "qo.s[t] = tp_st_bf16((float)(r2));" in vector


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


def _on_device(x: np.ndarray, offset: int = 0):
    """A CuPy copy of ``x`` starting ``offset`` elements into its own allocation (CuPy's
    allocations are 256-byte aligned: offset 1 is off every vector width); bfloat16 as its bits
    (CuPy has no bfloat16; the kernels take pointers)."""
    import cupy

    bits = x.view(np.uint16) if x.dtype == BF16 else x
    whole = cupy.empty(bits.size + offset, bits.dtype)
    placed = whole[offset:].reshape(bits.shape)
    placed[...] = cupy.asarray(bits)
    return placed


def _from_device(array, dtype: np.dtype) -> np.ndarray:
    import cupy

    host = cupy.asnumpy(array)
    return host.view(BF16) if dtype == BF16 else host


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit (16-bit floats compared as their bits: the kernels round once, as
    NumPy's float32 -> float16/bfloat16 conversion does)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype in (F16, BF16):
        got, want = got.view(np.uint16), want.view(np.uint16)
    np.testing.assert_array_equal(got, want)


def _wide(dtype: np.dtype) -> np.dtype:
    return F32 if dtype in (F16, BF16) else dtype


# each array of the launch in turn off its vector width, then all of them
_OFFSETS = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)]


@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 1003, 4099])
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64, I32, I64], ids=lambda d: d.name)
def test_gpu_vector_path_any_length_and_alignment(ew, dtype, n):
    """``V`` elements a thread (8 for 16-bit floats, 4 for 32-bit, 2 for 64-bit) when every
    array is on its vector width, one element a thread otherwise and for the last ``n % V``:
    the same results for every length and every misaligned view."""
    x, y = _random((n,), dtype), _random((n,), dtype, 1)
    wide = _wide(dtype)
    launch = ew.elementwise_kernel("add", dtype, "aa", dtype)
    for offsets in _OFFSETS:
        out = _on_device(np.zeros(n, dtype), offsets[2])
        launch(_on_device(x, offsets[0]), _on_device(y, offsets[1]), out)
        _same(_from_device(out, dtype), (x.astype(wide) + y.astype(wide)).astype(dtype))
    neg = ew.elementwise_kernel("neg", dtype, "a", dtype)
    for offset in (0, 1):
        out = _on_device(np.zeros(n, dtype), offset)
        neg(_on_device(x, offset), out)
        _same(_from_device(out, dtype), (-x.astype(wide)).astype(dtype))


@pytest.mark.parametrize("shape", [(5, 3), (7, 8), (3, 768), (2, 1001), (4, 1)])
@pytest.mark.parametrize("dtype", [BF16, F32, F64, I64], ids=lambda d: d.name)
def test_gpu_vector_path_with_a_row_and_a_scalar(ew, dtype, shape):
    """A row (read at ``i % m``, counted along within a vector) and a scalar beside vector
    loads, rows shorter than, equal to and longer than a vector, aligned and not."""
    x, row = _random(shape, dtype), _random(shape[-1:], dtype, 1)
    s = np.asarray(2.5 if dtype in (F16, BF16, F32, F64) else 3, dtype)[()]
    wide = _wide(dtype)
    xw, rw, sw = x.astype(wide), row.astype(wide), np.asarray(s).astype(wide)
    cases = [("add", "ar", (x, row), xw + rw), ("sub", "ra", (row, x), rw - xw),
             ("mul", "as", (x, s), xw * sw), ("sub", "sa", (s, x), sw - xw)]
    for op, kinds, operands, want in cases:
        launch = ew.elementwise_kernel(op, dtype, kinds, dtype)
        for offset in (0, 1):
            out = _on_device(np.zeros(shape, dtype), offset)
            args = [_on_device(v, offset) if k != "s" else v for k, v in zip(kinds, operands)]
            launch(*args, out)
            _same(_from_device(out, dtype), want.astype(dtype))


@pytest.mark.parametrize("n", [3, 8, 13, 1003])
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64, I32], ids=lambda d: d.name)
def test_gpu_where_loads_its_bool_condition_narrower(ew, dtype, n):
    """``where``'s bool condition is loaded ``V`` bytes at a time beside the values' ``V``
    elements; a condition one byte off its width (or a value off its own) takes the
    one-element loop. Also the bool output of a comparison, stored ``V`` bytes at a time."""
    x, y = _random((n,), dtype), _random((n,), dtype, 1)
    cond = _random((n,), F32, 2) > 0
    launch = ew.elementwise_kernel("where", dtype, "aaa", dtype)
    for offsets in [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                    (1, 1, 1, 1)]:
        out = _on_device(np.zeros(n, dtype), offsets[3])
        launch(_on_device(cond, offsets[0]), _on_device(x, offsets[1]),
               _on_device(y, offsets[2]), out)
        _same(_from_device(out, dtype), np.where(cond, x, y))
    scalar = ew.elementwise_kernel("where", dtype, "ass", dtype)
    s, t = np.asarray(1, dtype)[()], np.asarray(-2, dtype)[()]
    for offset in (0, 1):
        out = _on_device(np.zeros(n, dtype), offset)
        scalar(_on_device(cond, offset), s, t, out)
        _same(_from_device(out, dtype), np.where(cond, s, t).astype(dtype))
    less = ew.elementwise_kernel("lt", dtype, "aa", BOOL)
    wide = _wide(dtype)
    for offset in (0, 1):
        flags = _on_device(np.zeros(n, BOOL), offset)
        less(_on_device(x), _on_device(y, offset), flags)
        _same(_from_device(flags, BOOL), x.astype(wide) < y.astype(wide))


@pytest.mark.parametrize("dtype", [BF16, F32, F64], ids=lambda d: d.name)
def test_gpu_mixed_store_and_chain_take_the_vector_path(ew, dtype):
    """A float32 compute stored into bfloat16 (V from the wider operands), and a fused chain
    (``elementwise_program``) with a row and a scalar, over lengths around a vector."""
    steps = (("add", (0, 1)), ("maximum", (-1, 2)), ("neg", (-1,)))
    chain = ew.elementwise_program(steps, dtype, "ars", dtype)
    wide = _wide(dtype)
    for rows, m in [(1, 5), (3, 8), (9, 17)]:
        x, row = _random((rows, m), dtype), _random((m,), dtype, 1)
        floor = np.asarray(-1, dtype)[()]
        lower = np.asarray(floor).astype(wide)
        want = (-np.maximum(x.astype(wide) + row.astype(wide), lower)).astype(dtype)
        for offset in (0, 1):
            out = _on_device(np.zeros((rows, m), dtype), offset)
            chain(_on_device(x, offset), _on_device(row), floor, out)
            _same(_from_device(out, dtype), want)
    if dtype == F32:
        into = ew.elementwise_kernel("add", F32, "aa", BF16)
        x, y = _random((1003,), F32), _random((1003,), F32, 1)
        for offset in (0, 1):
            out = _on_device(np.zeros(1003, BF16), offset)
            into(_on_device(x), _on_device(y, offset), out)
            _same(_from_device(out, BF16), (x + y).astype(BF16))


def test_gpu_launch_grid_follows_the_kernel_width(ew):
    """Blocks for ``ceil(n / V)`` threads (capped), one cached dict per width; a length past
    the cap strides over the rest."""
    import cupy

    block, cap = ew.BLOCK, ew.GRID_CAP
    for dtype, width in [(BF16, 8), (F32, 4), (F64, 2)]:
        assert src.program_width("add", dtype, "aa", dtype) == width
        n = 3 * block * width + 1
        x = _random((n,), dtype)
        ew.elementwise_kernel("add", dtype, "aa", dtype)(_on_device(x), _on_device(x),
                                                         _on_device(np.zeros(n, dtype)))
        assert ew._grids[width][n] == 4
    get, fill = ew._grid_functions(4)
    assert fill(0) == 0 and fill(1) == 1 and fill(4 * block) == 1 and fill(4 * block + 1) == 2
    assert fill(4 * block * cap * 3) == cap and get(4 * block + 1) == 2
    n = 4 * block * cap + 4 * 37 + 3   # past the cap: the grid-stride loop covers the rest
    x = cupy.arange(n, dtype=F32)
    out = cupy.empty(n, F32)
    ew.elementwise_kernel("add", F32, "aa", F32)(x, x, out)
    assert bool((out == 2 * x).all())


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
    _activations.softmax(cupy.asarray(x), out, dim, log)
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
        _activations.softmax(cupy.asarray(x), out, 1, log)
        tolerance = 1e-12 if dtype == F64 else (1e-2 if dtype == BF16 else 2e-3)
        np.testing.assert_allclose(cupy.asnumpy(out).astype(F64), want.astype(F64),
                                   rtol=tolerance, atol=tolerance)
        strided = cupy.empty((65, 33), dtype).T
        _activations.softmax(cupy.asarray(x.T.copy()).T, strided, 1, log)
        np.testing.assert_array_equal(cupy.asnumpy(strided), cupy.asnumpy(out))


def test_gpu_softmax_rows_with_nan_or_infinite_maximum_are_nan(ew):
    import cupy

    from tensorplay.backends.cuda import _activations

    x = np.array([[1.0, np.nan, 2.0], [-np.inf] * 3, [np.inf, 0.0, 1.0], [0.0, -np.inf, 0.0]],
                 dtype=F32)
    out = cupy.empty(x.shape, F32)
    _activations.softmax(cupy.asarray(x), out, 1, False)
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
