"""CUDA source for the cuda backend's cached elementwise and small-sum kernels (pure Python).

This module imports nothing from CuPy, so the generated text can be checked on any machine;
``_elementwise.py`` compiles it (``cupy.RawKernel``) and launches it.

What a kernel computes (PyTorch's semantics):

- Every operand is loaded into the *compute* C type (``float`` for float16, bfloat16 and
  float32, ``double`` for float64, ``int``/``long long`` for int32/int64, ``bool``), the op runs
  there, and the result is converted once into the output's storage type.
- float16 and bfloat16 go through ``unsigned short`` storage with explicit conversions (PTX
  ``cvt`` for float16, round-to-nearest-even bit arithmetic for bfloat16), so the source needs
  no ``cuda_fp16.h``/``cuda_bf16.h``: those headers need the CUDA toolkit's include path at
  NVRTC time (and, since CUDA 12.2, the runtime headers too), which a pip-only install lacks.
- Integer ``add sub mul neg abs`` wrap (computed in the unsigned type: signed overflow is
  undefined behaviour in C++); integer division is not generated.
- ``maximum``/``minimum`` (and ``relu``, which is ``maximum(x, 0)``) propagate NaN, as
  ``torch.maximum`` does.
- Each kernel is a grid-stride loop over a 64-bit index. A thread takes ``V`` consecutive
  elements per iteration (:func:`program_width`): one aligned 16-byte (or narrower) load per
  array operand and one store, as a 2-byte-per-thread loop leaves most of the memory bandwidth
  unused. When some array is not on its vector width (a view may start at any element) the
  whole kernel runs the one-element loop instead; the last ``n % V`` elements always do.
  Either way every element is computed by the same expressions and conversions.
"""

from __future__ import annotations

import functools
import hashlib

import ml_dtypes
import numpy as np

__all__ = ["OPS", "SUM_SMALL_LIMIT", "SUM_NAME", "HALF_DTYPES", "kernel_source", "kernel_name",
           "unary_expression", "program_source", "program_name", "program_width", "sum_source",
           "sum_accumulator", "result_dtype", "arity", "softmax_source", "softmax_name",
           "HELPERS", "storage_type", "compute_type", "load_expr", "store_expr", "VECTOR_BYTES",
           "ROW_WARP_LIMIT", "ROW_BLOCK_LIMIT", "ROW_REGISTER_VALUES", "vector_width", "row_plan",
           "row_grid", "ROW_GRID_CAP", "row_helpers", "row_loop", "row_registers", "row_stores",
           "softmax_rows_source", "softmax_rows_name"]

SUM_SMALL_LIMIT = 1 << 16   #: the most elements one single-block sum kernel is given

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_HALVES = frozenset((_F16, _BF16))
HALF_DTYPES = _HALVES   #: float16 and bfloat16 (stored as 16 bits, computed in float)
_FLOATS = _HALVES | {_F32, _F64}
_INTS = frozenset((_I32, _I64))
_NUMERIC = _FLOATS | _INTS
_ALL = _NUMERIC | {_BOOL}

# dtype -> (storage C type, compute C type, unsigned C type for wrapping integer arithmetic)
_CTYPES = {_F32: ("float", "float", None), _F64: ("double", "double", None),
           _I32: ("int", "int", "unsigned int"),
           _I64: ("long long", "long long", "unsigned long long"),
           _BOOL: ("bool", "bool", None)}
for _half in _HALVES:
    _CTYPES[_half] = ("unsigned short", "float", None)

_HELPERS = r"""
typedef long long tp_i64;
__device__ __forceinline__ float tp_ld_f16(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short tp_st_f16(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float tp_ld_bf16(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ unsigned short tp_st_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);   // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}
"""

# The expression of each op over the compute-typed locals a, b (c for where's condition).
# {T}: compute C type, {U}: its unsigned type, {f}: "f" for float math functions, "" for double.
_FLOAT_EXPR = {
    "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b",
    "maximum": "(a != a) ? a : ((b != b) ? b : fmax{f}(a, b))",
    "minimum": "(a != a) ? a : ((b != b) ? b : fmin{f}(a, b))",
    "neg": "-a", "abs": "fabs{f}(a)",
    "exp": "exp{f}(a)", "log": "log{f}(a)", "sqrt": "sqrt{f}(a)", "sin": "sin{f}(a)",
    "cos": "cos{f}(a)", "tanh": "tanh{f}(a)", "erf": "erf{f}(a)",
    "sigmoid": "({T})1 / (({T})1 + exp{f}(-a))",
    "relu": "(a != a) ? a : fmax{f}(a, ({T})0)",
    "gelu": "({T})0.5 * a * (({T})1 + erf{f}(a * ({T})0.70710678118654752440))",
    "gelu_tanh": "({T})0.5 * a * (({T})1 + tanh{f}(({T})0.79788456080286535588"
                 " * (a + ({T})0.044715 * a * a * a)))",
    "silu": "a / (({T})1 + exp{f}(-a))",
    # derivatives (a: the op's input, or its result where noted; b: the output's gradient),
    # one kernel each where the composed formula would launch a dozen
    "gelu_backward": "b * (({T})0.5 * (({T})1 + erf{f}(a * ({T})0.70710678118654752440))"
                     " + a * ({T})0.39894228040143267794 * exp{f}(({T})-0.5 * a * a))",
    "gelu_tanh_backward": "b * (({T})0.5 * (({T})1 + tanh{f}(({T})0.79788456080286535588 * (a"
                          " + ({T})0.044715 * a * a * a))) + ({T})0.5 * a * (({T})1 - tanh{f}("
                          "({T})0.79788456080286535588 * (a + ({T})0.044715 * a * a * a)) * "
                          "tanh{f}(({T})0.79788456080286535588 * (a + ({T})0.044715 * a * a * "
                          "a))) * ({T})0.79788456080286535588 * (({T})1 + ({T})0.134145 * a * "
                          "a))",
    "silu_backward": "b / (({T})1 + exp{f}(-a)) * (({T})1 + a * (({T})1 - ({T})1 / (({T})1 + "
                     "exp{f}(-a))))",
    "sigmoid_backward": "b * a * (({T})1 - a)",     # a: the result
    "tanh_backward": "b * (({T})1 - a * a)",        # a: the result
    "relu_backward": "(a > ({T})0) ? b : ({T})0",   # a: the result
}
_INT_EXPR = {
    "add": "({T})(({U})a + ({U})b)", "sub": "({T})(({U})a - ({U})b)",
    "mul": "({T})(({U})a * ({U})b)",
    "maximum": "(a > b) ? a : b", "minimum": "(a < b) ? a : b",
    "neg": "({T})(({U})0 - ({U})a)", "abs": "(a < 0) ? ({T})(({U})0 - ({U})a) : a",
    "relu": "(a > 0) ? a : ({T})0",
}
_ANY_EXPR = {   # every compute dtype, bool included; comparisons and logical ops give bool
    "eq": "a == b", "ne": "a != b", "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b",
    "logical_and": "(a != ({T})0) && (b != ({T})0)",
    "logical_or": "(a != ({T})0) || (b != ({T})0)",
    "where": "c ? a : b",
}
_BOOL_RESULT = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"))
_ARITY = {op: 2 for op in ("add", "sub", "mul", "div", "maximum", "minimum", *_BOOL_RESULT)}
_ARITY.update({op: 1 for op in ("neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh",
                                 "erf", "sigmoid", "relu", "gelu", "gelu_tanh", "silu")})
_ARITY.update({op: 2 for op in ("gelu_backward", "gelu_tanh_backward", "silu_backward",
                                 "sigmoid_backward", "tanh_backward", "relu_backward")})
_ARITY["where"] = 3

OPS = tuple(sorted(_ARITY))   #: every op name :func:`kernel_source` knows


def arity(op: str) -> int | None:
    """The operand count of ``op`` (3 for ``where``), or None for an unknown op."""
    return _ARITY.get(op)


def _expression(op: str, compute: np.dtype) -> str | None:
    template: str | None
    if op in _ANY_EXPR:
        template = _ANY_EXPR[op]
    elif compute in _FLOATS:
        template = _FLOAT_EXPR.get(op)
    elif compute in _INTS:
        template = _INT_EXPR.get(op)
    else:
        template = None
    if template is None:
        return None
    _, ctype, utype = _CTYPES[compute]
    return template.format(T=ctype, U=utype, f="f" if ctype == "float" else "")


def unary_expression(op: str, compute: np.dtype) -> str:
    """The C expression of unary ``op`` over a local ``a`` of ``compute``'s C type (the form
    the fused product kernels of ``_skinny.py`` apply after their bias)."""
    expression = _expression(op, np.dtype(compute))
    if expression is None or _ARITY.get(op) != 1:
        raise ValueError(f"no unary {op!r} expression for {np.dtype(compute)}")
    return expression


def result_dtype(op: str, compute: np.dtype) -> np.dtype:
    """The dtype ``op`` computes before the store: bool for comparisons and logical ops, else
    ``compute``."""
    return _BOOL if op in _BOOL_RESULT else np.dtype(compute)


def _storable(result: np.dtype, out: np.dtype) -> bool:
    """Whether the one store conversion ``result -> out`` is exact-or-rounded-once and defined:
    float to any float (float64 only to float32/float64: no double rounding into 16 bits), int to
    itself, int64 or float32/float64, bool to anything."""
    if result == _BOOL:
        return out in _ALL
    if result in _INTS:
        return out == result or out in (_I64, _F32, _F64)
    if result == _F64:
        return out in (_F32, _F64)
    return out in _FLOATS


def _load(dtype: np.dtype, expr: str) -> str:
    if dtype == _F16:
        return f"tp_ld_f16({expr})"
    if dtype == _BF16:
        return f"tp_ld_bf16({expr})"
    return expr


def _store(result: np.dtype, out: np.dtype, expr: str) -> str:
    if out == _F16:
        return f"tp_st_f16((float)({expr}))"
    if out == _BF16:
        return f"tp_st_bf16((float)({expr}))"
    return f"({_CTYPES[out][0]})({expr})"


HELPERS = _HELPERS   #: the typedefs and half-precision conversions every kernel source starts with


def storage_type(dtype: np.dtype) -> str:
    """The C type an array of ``dtype`` (float or int32/int64/bool) is stored as."""
    return _CTYPES[np.dtype(dtype)][0]


def compute_type(dtype: np.dtype) -> str:
    """The C type ``dtype`` computes in (float for float16 and bfloat16)."""
    return _CTYPES[np.dtype(dtype)][1]


def load_expr(dtype: np.dtype, expr: str) -> str:
    """``expr`` (an element of a ``dtype`` array) read as its compute type."""
    return _load(np.dtype(dtype), expr)


def store_expr(dtype: np.dtype, expr: str) -> str:
    """``expr`` (a compute-typed value) rounded once to ``dtype``'s storage."""
    return _store(np.dtype(dtype), np.dtype(dtype), expr)


def _normalize(*dtypes) -> tuple[np.dtype, ...] | None:
    try:
        return tuple(np.dtype(d) for d in dtypes)
    except TypeError:
        return None


def kernel_name(op: str, compute, kinds: str, out) -> str:
    """The ``extern "C"`` name of the kernel for this signature (readable in profiler traces)."""
    return f"tp_ew_{op}_{np.dtype(compute).name}_{kinds}_{np.dtype(out).name}"


def kernel_source(op: str, compute, kinds: str, out) -> str | None:
    """The CUDA source of one elementwise kernel, or None when the combination is not supported.

    Args:
        op: one of :data:`OPS`.
        compute: the dtype every operand has (``where``'s condition excepted, which is bool) and
            the op computes in (float16/bfloat16 compute in float).
        kinds: one letter per operand, ``"a"`` for a C-contiguous array of the output's shape,
            ``"r"`` for a C-contiguous array of ``m`` elements repeated along the output's
            leading dimensions (its shape a suffix of the output's: a bias row), read at
            ``i % m``, ``"s"`` for a scalar passed by value (float16/bfloat16 scalars as their
            16 bits). ``where``'s condition must be ``"a"``.
        out: the output array's dtype.

    Returns:
        Source defining ``extern "C" __global__ void NAME(operands..., OUT* out, long long n)``
        with ``NAME = kernel_name(...)``: array operands are ``const STORAGE*`` (an ``"r"``
        operand followed by its element count ``long long m``), scalars are ``STORAGE`` by
        value. None for an unknown op, an unsupported compute or out dtype, a
        kinds string of the wrong length or letters, or a store that is not one defined
        conversion (see :func:`result_dtype`).
    """
    count = _ARITY.get(op)
    if count is None:
        return None
    return program_source(((op, tuple(range(count))),), compute, kinds, out,
                          kernel_name(op, compute, kinds, out) if _normalize(compute, out)
                          else "")


def program_name(steps, compute, kinds: str, out) -> str:
    """The ``extern "C"`` name of :func:`program_source`'s kernel for these arguments."""
    text = repr((tuple(steps), np.dtype(compute).name, kinds, np.dtype(out).name))
    return "tp_chain_" + hashlib.sha1(text.encode()).hexdigest()[:16]


def program_source(steps, compute, kinds: str, out, name: str | None = None) -> str | None:
    """The CUDA source of ONE kernel running a chain of elementwise ops, or None when some step
    or the combination is not supported (then nothing is generated).

    Args:
        steps: ``((op, refs), ...)`` in order; ``op`` one of :data:`OPS`, ``refs`` one per
            operand: ``-1`` for the previous step's result, ``k >= 0`` for external operand
            ``k``. Every step but the last must give ``compute`` (no comparison).
        compute: the dtype of every external operand (``where``'s condition excepted: bool) and
            of every step's arithmetic, as :func:`kernel_source` takes it.
        kinds: one letter per external operand, ``"a"``, ``"r"`` or ``"s"``, as
            :func:`kernel_source` takes them.
        out: the output array's dtype (the last step's result is stored into it once).
        name: the kernel's name (default :func:`program_name`).

    Returns:
        Source defining ``extern "C" __global__ void NAME(externals..., OUT* out, long long
        n)``: every step computes in registers, only the last result is stored. A thread takes
        :func:`program_width` elements per iteration, one vector load per ``"a"`` operand and
        one vector store, when every ``"a"`` pointer and ``out`` sit on their vector width in
        bytes (one test of the kernel's arguments, the same for every thread); rows and
        scalars are read element by element. The last ``n % V`` elements, and all of them when
        some array is misaligned, go through the one-element loop.
    """
    dtypes = _normalize(compute, out)
    if dtypes is None or not isinstance(kinds, str) or set(kinds) - {"a", "r", "s"} or not steps:
        return None
    compute, out = dtypes
    if compute not in _ALL or out not in _ALL:
        return None
    external_dtypes: list = [None] * len(kinds)
    body = []
    result = compute
    for j, (op, refs) in enumerate(steps):
        count = _ARITY.get(op)
        expression = _expression(op, compute) if count is not None else None
        if expression is None or len(refs) != count or (j and result != compute):
            return None
        names = ["c", "a", "b"] if op == "where" else ["a", "b"][:count]
        operand_dtypes = [_BOOL, compute, compute] if op == "where" else [compute] * count
        locals_ = []
        for position, (ref, name_, dtype) in enumerate(zip(refs, names, operand_dtypes)):
            condition = op == "where" and position == 0
            if ref == -1:
                if not j or dtype != result:
                    return None
                source = f"r{j - 1}"
            elif 0 <= ref < len(kinds):
                known = external_dtypes[ref]   # (never compare a dtype with None: it is float64)
                if (known is not None and known != dtype) or (condition and kinds[ref] != "a"):
                    return None
                external_dtypes[ref] = dtype
                source = f"e{ref}"
            else:
                return None
            locals_.append(f"const {_CTYPES[dtype][1]} {name_} = {source};")
        result = result_dtype(op, compute)
        body.append(f"        {_CTYPES[result][1]} r{j}; {{ {' '.join(locals_)} "
                    f"r{j} = {expression}; }}")
    if any(dtype is None for dtype in external_dtypes) or not _storable(result, out):
        return None
    local_names = [f"e{k}" for k in range(len(kinds))]
    final = f"r{len(steps) - 1}"
    op, refs = steps[0]
    if len(steps) == 1 and tuple(refs) == tuple(range(len(kinds))):
        # one op over its operands in order: they load straight into the expression's names
        local_names = ["c", "a", "b"] if op == "where" else ["a", "b"][:len(kinds)]
        body, final = [f"        const {_CTYPES[result][1]} r = {_expression(op, compute)};"], "r"
    params, hoisted, loaded = [], [], []
    for k, (kind, dtype, local) in enumerate(zip(kinds, external_dtypes, local_names)):
        store_type, local_type, _ = _CTYPES[dtype]
        if kind == "a":
            params.append(f"const {store_type}* __restrict__ p{k}")
            loaded.append(f"        const {local_type} {local} = {_load(dtype, f'p{k}[i]')};")
        elif kind == "r":   # repeats along the leading dimensions: element i % m
            params.append(f"const {store_type}* __restrict__ p{k}, const tp_i64 m{k}")
            loaded.append(f"        const {local_type} {local} = "
                          f"{_load(dtype, f'p{k}[i % m{k}]')};")
        else:   # a scalar: converted once, before the loop
            params.append(f"const {store_type} v{k}")
            hoisted.append(f"    const {local_type} {local} = {_load(dtype, f'v{k}')};")
    name = name or program_name(steps, compute, kinds, out)
    store = _store(result, out, final)
    width = program_width(steps, compute, kinds, out)
    return "\n".join([
        _HELPERS,
        *_vector_types(kinds, external_dtypes, out, width),
        f'extern "C" __global__ void {name}(',
        f"        {', '.join(params)}, {_CTYPES[out][0]}* __restrict__ out, const tp_i64 n) {{",
        *hoisted,
        "    const tp_i64 stride = (tp_i64)gridDim.x * blockDim.x;",
        "    const tp_i64 first = (tp_i64)blockIdx.x * blockDim.x + threadIdx.x;",
        *_vector_loop(kinds, external_dtypes, local_names, body, out, store, width),
        "    for (tp_i64 i = tail + first; i < n; i += stride) {",
        *loaded,
        *body,
        f"        out[i] = {store};",
        "    }",
        "}",
        "",
    ])


def program_width(steps, compute, kinds: str, out) -> int:
    """``V``: the elements one thread of :func:`program_source`'s kernel loads and stores per
    vector access, :data:`VECTOR_BYTES` over the largest itemsize among the ``"a"`` operands and
    the output (float16/bfloat16: 8, float32/int32: 4, float64/int64: 2). A bool ``"a"`` operand
    (``where``'s condition) counts with its one byte: it is loaded ``V`` bytes at a time.

    ``steps``, ``compute``, ``kinds`` and ``out`` as :func:`program_source` takes them (for a
    supported program), or one op name for ``steps`` (its operands in order, as
    :func:`kernel_source` builds it). The host sizes each launch with it (``ceil(ceil(n / V) /
    threads)`` blocks), so this is the one place the rule is written.
    """
    if isinstance(steps, str):
        steps = ((steps, tuple(range(len(kinds)))),)
    compute, out = np.dtype(compute), np.dtype(out)
    conditions = {refs[0] for op, refs in steps if op == "where"}
    sizes = [_BOOL.itemsize if k in conditions else compute.itemsize
             for k, kind in enumerate(kinds) if kind == "a"]
    return VECTOR_BYTES // max([out.itemsize, *sizes])


# storage C type -> the suffix of its vector struct's name
_VECTOR_TAGS = {"float": "f32", "double": "f64", "int": "i32", "long long": "i64",
                "bool": "b8", "unsigned short": "u16"}


def _vector_types(kinds: str, dtypes, out: np.dtype, width: int) -> list[str]:
    """The ``tp_vec_TAG`` structs (``width`` stored elements ``s[]``, aligned to their size so
    that one is one load or store) of the ``"a"`` operands and the output."""
    stored = {_CTYPES[dtype][0]: dtype.itemsize
              for kind, dtype in zip(kinds, dtypes) if kind == "a"}
    stored[_CTYPES[out][0]] = out.itemsize
    return [f"struct alignas({size * width}) tp_vec_{_VECTOR_TAGS[ctype]} "
            f"{{ {ctype} s[{width}]; }};" for ctype, size in stored.items()]


def _vector_loop(kinds: str, dtypes, local_names: list[str], body: list[str], out: np.dtype,
                 store: str, width: int) -> list[str]:
    """The vector part of :func:`program_source`'s kernel: when every ``"a"`` operand and the
    output start on their vector width (one flag, the same for every thread), a grid-stride
    loop over the ``n / V`` whole vectors, each element computed by ``body`` as the scalar loop
    does; it sets ``tail``, where the one-element loop that follows starts (0 otherwise)."""
    pointers: dict[int, list[str]] = {}   # vector bytes -> the pointers needing that alignment
    loads, reads, advances = [], [], []
    for k, (kind, dtype, local) in enumerate(zip(kinds, dtypes, local_names)):
        local_type, tag = _CTYPES[dtype][1], _VECTOR_TAGS[_CTYPES[dtype][0]]
        if kind == "a":
            pointers.setdefault(dtype.itemsize * width, []).append(f"p{k}")
            loads.append(f"            const tp_vec_{tag} q{k} = "
                         f"reinterpret_cast<const tp_vec_{tag}*>(p{k})[w];")
            reads.append(f"                const {local_type} {local} = "
                         f"{_load(dtype, f'q{k}.s[t]')};")
        elif kind == "r":   # element i % m, counted along instead of divided per element
            loads.append(f"            tp_i64 j{k} = w * V % m{k};")
            reads.append(f"                const {local_type} {local} = "
                         f"{_load(dtype, f'p{k}[j{k}]')};")
            advances.append(f"                if (++j{k} == m{k}) j{k} = 0;")
    pointers.setdefault(out.itemsize * width, []).append("out")
    misaligned = " | ".join(
        f"(({' | '.join(f'(unsigned long long){p}' for p in names)}) & {size - 1}ull)"
        for size, names in sorted(pointers.items()))
    out_tag = _VECTOR_TAGS[_CTYPES[out][0]]
    return [
        f"    constexpr int V = {width};   // elements per vector access",
        "    tp_i64 tail = 0;   // the first element of the one-element loop",
        f"    if (({misaligned}) == 0ull) {{",
        "        const tp_i64 vectors = n / V;",
        "        for (tp_i64 w = first; w < vectors; w += stride) {",
        *loads,
        f"            tp_vec_{out_tag} qo;",
        "            #pragma unroll",
        "            for (int t = 0; t < V; ++t) {",
        *reads,
        *("        " + line for line in body),
        f"                qo.s[t] = {store};",
        *advances,
        "            }",
        f"            reinterpret_cast<tp_vec_{out_tag}*>(out)[w] = qo;",
        "        }",
        "        tail = vectors * V;",
        "    }",
    ]


def sum_accumulator(compute) -> np.dtype | None:
    """The dtype :func:`sum_source` accumulates ``compute`` in (float32 for float16, bfloat16 and
    float32; float64; int64 for int32, int64 and bool), or None when ``compute`` is not
    supported."""
    dtypes = _normalize(compute)
    if dtypes is None or dtypes[0] not in _ALL:
        return None
    compute = dtypes[0]
    if compute == _F64:
        return _F64
    return _F32 if compute in _FLOATS else _I64


SUM_NAME = "tp_sum_small"   #: the ``extern "C"`` name of :func:`sum_source`'s kernel


def sum_source(compute, out) -> str | None:
    """The CUDA source of the single-block sum of ``n <= SUM_SMALL_LIMIT`` elements, or None.

    The kernel ``tp_sum_small(const STORAGE* x, OUT* out, long long n)`` runs as ONE block of a
    power-of-two thread count (at most 1024): each thread sums a strided share, then a
    shared-memory tree reduces the block and thread 0 stores ``out[0]`` (0 when ``n == 0``).
    Integer sums wrap (accumulated as unsigned 64-bit). None when ``compute`` is unsupported or
    the accumulator cannot be stored into ``out`` by one defined conversion (float32 into any
    float, float64 into float32/float64, int64 into int64/float32/float64).
    """
    dtypes = _normalize(compute, out)
    if dtypes is None:
        return None
    compute, out = dtypes
    acc = sum_accumulator(compute)
    if acc is None or out not in _ALL or out == _BOOL or not _storable(acc, out):
        return None
    storage = _CTYPES[compute][0]
    if acc == _I64:
        acc_type, add = "unsigned long long", "s += (unsigned long long)v;"
        final = "(long long)shared[0]"
    else:
        acc_type, add, final = _CTYPES[acc][1], "s += v;", "shared[0]"
    load = _load(compute, "x[i]")
    value_type = "long long" if acc == _I64 else acc_type
    return "\n".join([
        _HELPERS,
        f'extern "C" __global__ void {SUM_NAME}(const {storage}* __restrict__ x, '
        f"{_CTYPES[out][0]}* __restrict__ out, const tp_i64 n) {{",
        f"    __shared__ {acc_type} shared[1024];",
        f"    {acc_type} s = 0;",
        "    for (tp_i64 i = threadIdx.x; i < n; i += blockDim.x) {",
        f"        const {value_type} v = ({value_type}){load};",
        f"        {add}",
        "    }",
        "    shared[threadIdx.x] = s;",
        "    __syncthreads();",
        "    for (unsigned int half = blockDim.x >> 1; half > 0; half >>= 1) {",
        "        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];",
        "        __syncthreads();",
        "    }",
        f"    if (threadIdx.x == 0) out[0] = {_store(acc, out, final)};",
        "}",
        "",
    ])


# compute C type -> (maximum, exp, log, -inf) of the softmax kernel
_SOFTMAX_MATH = {"float": ("fmaxf", "expf", "logf", "(-__int_as_float(0x7f800000))"),
                 "double": ("fmax", "exp", "log", "(-__longlong_as_double(0x7ff0000000000000LL))")}


def softmax_name(dtype, log: bool) -> str:
    """The ``extern "C"`` name of :func:`softmax_source`'s kernel."""
    return f"tp_{'log_softmax' if log else 'softmax'}_{np.dtype(dtype).name}"


def softmax_source(dtype, log: bool) -> str | None:
    """The CUDA source of softmax (``log``: log-softmax) along one dimension of a C-contiguous
    float16, bfloat16, float32 or float64 array, or None for another dtype.

    The kernel ``NAME(const STORAGE* x, STORAGE* y, long long length, long long inner, long long
    rows)`` sees the array as ``(outer, length, inner)``: row ``r`` is ``(r / inner, r % inner)``
    and its ``length`` elements step by ``inner``. One block (a power of two of at least 32
    threads) per row, grid-striding over rows: it reduces the row's maximum, then the sum of
    ``exp(x - max)`` (warp shuffles, then one shared word per warp that every warp reduces
    again), then writes ``exp(x - max) / sum``, or ``x - max - log(sum)``. float16, bfloat16 and
    float32 compute in float, float64 in double. As PyTorch: a row holding NaN is NaN
    throughout, and so is a row whose maximum is infinite (``inf - inf``).
    """
    dtypes = _normalize(dtype)
    if dtypes is None or dtypes[0] not in _FLOATS:
        return None
    dtype = dtypes[0]
    storage, acc = _CTYPES[dtype][0], _CTYPES[dtype][1]
    fmax, exp, logf, minus_inf = _SOFTMAX_MATH[acc]
    load = _load(dtype, "x[start + j * inner]")
    if log:
        finish, result = [f"        const {acc} logsum = {logf}(s);"], "(v - m) - logsum"
    else:
        finish, result = [], f"{exp}(v - m) / s"
    return "\n".join([
        _HELPERS,
        *_warp_reducers(acc, fmax),
        f'extern "C" __global__ void {softmax_name(dtype, log)}(',
        f"        const {storage}* __restrict__ x, {storage}* __restrict__ y,",
        "        const tp_i64 length, const tp_i64 inner, const tp_i64 rows) {",
        f"    __shared__ {acc} shared[32];",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    const int warps = blockDim.x >> 5;",
        "    for (tp_i64 r = blockIdx.x; r < rows; r += gridDim.x) {",
        "        const tp_i64 outer = r / inner;",
        "        const tp_i64 start = outer * length * inner + (r - outer * inner);",
        f"        {acc} m = {minus_inf};",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x)",
        f"            m = {fmax}(m, ({acc}){load});",
        "        m = tp_warp_max(m);",
        "        if (lane == 0) shared[warp] = m;",
        "        __syncthreads();",
        f"        m = tp_warp_max(lane < warps ? shared[lane] : {minus_inf});",
        "        __syncthreads();",
        f"        {acc} s = 0;",
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x)",
        f"            s += {exp}(({acc}){load} - m);",
        "        s = tp_warp_sum(s);",
        "        if (lane == 0) shared[warp] = s;",
        "        __syncthreads();",
        f"        s = tp_warp_sum(lane < warps ? shared[lane] : ({acc})0);",
        "        __syncthreads();",
        *finish,
        "        for (tp_i64 j = threadIdx.x; j < length; j += blockDim.x) {",
        f"            const {acc} v = ({acc}){load};",
        f"            y[start + j * inner] = {_store(dtype, dtype, result)};",
        "        }",
        "    }",
        "}",
        "",
    ])


# -- row kernels that keep a row in registers ---------------------------------------------------
VECTOR_BYTES = 16   #: the widest load a thread issues (``tp_vec`` of :func:`row_helpers`)
ROW_WARP_LIMIT = 1024   #: the longest row the register row kernels give one warp; longer: a block
ROW_BLOCK_LIMIT = 1024   #: the most threads a block-per-row register kernel runs
#: the most compute-typed values a thread of a block-per-row register kernel keeps (see row_plan)
ROW_REGISTER_VALUES = 32


def vector_width(dtype) -> int:
    """The elements of ``dtype`` in one :data:`VECTOR_BYTES` load."""
    return VECTOR_BYTES // np.dtype(dtype).itemsize


# remembered per signature for the launchers' hot path; bounded, as row lengths may never repeat
@functools.lru_cache(maxsize=1024)
def row_plan(length: int, dtype, vectorized: bool) -> tuple[bool, int, int, int] | None:
    """How a register row kernel covers a row of ``length`` elements of ``dtype``:
    ``(warp, width, vectors, threads)``, or None when the row does not fit in registers.

    ``width`` is :func:`vector_width` when ``vectorized`` (the caller checked that every row
    starts on a :data:`VECTOR_BYTES` boundary, so ``length`` is a multiple of it) else 1;
    ``vectors`` is how many loads of ``width`` elements each thread holds (a power of two for a
    block, as few as cover the row for a warp: each count is a kernel of its own).
    ``warp``: one warp per row (rows of at most :data:`ROW_WARP_LIMIT`), ``threads`` then being
    32; else one block of ``threads`` (a power of two, 128 to :data:`ROW_BLOCK_LIMIT`) per row.
    A block's ``vectors * width`` is at most :data:`ROW_REGISTER_VALUES` for 16-byte loads of
    float32, half that for 16-byte loads of float16 and bfloat16, a quarter of it otherwise (a
    block kernel is bounded to 64 registers a thread); a warp's is at most 32.
    """
    dtype = np.dtype(dtype)
    width = vector_width(dtype) if vectorized else 1
    count = -(-length // width)   # loads per row
    if length <= ROW_WARP_LIMIT:   # no launch bound: registers enough for 32 doubles
        return True, width, -(-count // 32), 32
    # a block kernel is bounded to 64 registers a thread: conversions from 16 bits, scalar
    # loads and double values need more of them a value
    if width == 1 or dtype == _F64:
        cap = ROW_REGISTER_VALUES // 4
    else:
        cap = ROW_REGISTER_VALUES // (2 if dtype in _HALVES else 1)
    # up to 512 threads holding as few loads each as cover the row; past the cap, 1024 threads
    vectors = 1 << (-(-count // 512) - 1).bit_length()
    if vectors * width > cap:
        vectors = 1 << (-(-count // ROW_BLOCK_LIMIT) - 1).bit_length()
        if vectors * width > cap:
            return None
    threads = max(128, 1 << (-(-count // vectors) - 1).bit_length())
    return False, width, vectors, threads


def _warp_reducers(acc: str, fmax: str) -> list[str]:
    """``tp_warp_max`` (through ``fmax``) and ``tp_warp_sum`` over the C type ``acc``: every
    lane of the warp gets the result."""
    return [
        f"__device__ __forceinline__ {acc} tp_warp_max({acc} v) {{",
        "    for (int o = 16; o > 0; o >>= 1) "
        f"v = {fmax}(v, __shfl_xor_sync(0xffffffffu, v, o));",
        "    return v;",
        "}",
        f"__device__ __forceinline__ {acc} tp_warp_sum({acc} v) {{",
        "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
        "    return v;",
        "}",
    ]


def row_helpers(dtype, width: int) -> str:
    """The prelude of a register row kernel over ``dtype``: :data:`HELPERS`, ``tp_vec`` (``width``
    stored elements ``s[]`` loaded and stored as one aligned access), and ``tp_warp_max`` /
    ``tp_warp_sum`` / ``tp_block_max`` / ``tp_block_sum`` over the compute type (the block forms
    take 32 shared words; every thread gets the result; ``tp_*_max`` ignore NaN: ``fmax``)."""
    dtype = np.dtype(dtype)
    storage, acc = _CTYPES[dtype][0], _CTYPES[dtype][1]
    fmax, _, _, minus_inf = _SOFTMAX_MATH[acc]
    return "\n".join([
        _HELPERS,
        f"struct alignas({dtype.itemsize * width}) tp_vec {{ {storage} s[{width}]; }};",
        *_warp_reducers(acc, fmax),
        f"__device__ __forceinline__ {acc} tp_block_max({acc} v, {acc}* shared) {{",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    v = tp_warp_max(v);",
        "    if (lane == 0) shared[warp] = v;",
        "    __syncthreads();",
        f"    v = tp_warp_max(lane < (int)(blockDim.x >> 5) ? shared[lane] : {minus_inf});",
        "    __syncthreads();",
        "    return v;",
        "}",
        f"__device__ __forceinline__ {acc} tp_block_sum({acc} v, {acc}* shared) {{",
        "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        "    v = tp_warp_sum(v);",
        "    if (lane == 0) shared[warp] = v;",
        "    __syncthreads();",
        f"    v = tp_warp_sum(lane < (int)(blockDim.x >> 5) ? shared[lane] : ({acc})0);",
        "    __syncthreads();",
        "    return v;",
        "}",
    ])


def row_loop(warp: bool, vectors: int) -> list[str]:
    """The opening lines of a register row kernel's body (closed by one ``}``): a grid-stride
    loop giving ``r`` (the row), ``tid``/``nthreads`` (this thread's place among the row's
    threads) and ``n`` (the row's loads of ``width``); a thread's load ``k`` (``0 <= k <
    vectors``) is ``i = k * nthreads + tid``, present when ``i < n``. Expects the parameters
    ``length``, ``rows`` and a compile-time ``W`` (the width)."""
    if warp:
        lines = ["    const int tid = threadIdx.x & 31, nthreads = 32;",
                 "    const tp_i64 step = (tp_i64)gridDim.x * (blockDim.x >> 5);",
                 "    const tp_i64 first = (tp_i64)blockIdx.x * (blockDim.x >> 5) "
                 "+ (threadIdx.x >> 5);"]
    else:
        lines = ["    const int tid = threadIdx.x, nthreads = blockDim.x;",
                 "    const tp_i64 step = gridDim.x, first = blockIdx.x;"]
    return lines + [
        "    const int n = (int)(length / W);",
        f"    constexpr int K = {vectors};",
        "    for (tp_i64 r = first; r < rows; r += step) {",
    ]


def row_stores(loads: list[str], element: list[str]) -> list[str]:
    """The closing lines of a register row kernel (after :func:`row_loop` and
    :func:`row_registers`): row ``r`` of ``y`` written once, one aligned store of ``W``
    elements a load; ``loads`` are lines run before each store (with its load index ``i``),
    ``element`` the lines that set ``q.s[t]`` from element ``j = k * W + t``. Closes the row
    loop and the kernel."""
    return [
        "        tp_vec* dst = reinterpret_cast<tp_vec*>(y + r * length);",
        "        #pragma unroll",
        "        for (int k = 0; k < K; ++k) {",
        "            const int i = k * nthreads + tid;",
        "            if (i < n) {",
        "                tp_vec q;",
        *loads,
        "                #pragma unroll",
        "                for (int t = 0; t < W; ++t) {",
        "                    const int j = k * W + t;",
        *element,
        "                }",
        "                dst[i] = q;",
        "            }",
        "        }",
        "    }",
        "}",
        "",
    ]


#: blocks of a row kernel's launch at most; each strides over the rows past the grid
ROW_GRID_CAP = 1 << 20
_WARP_ROWS_PER_BLOCK = 4   # rows (warps) a block of a warp-per-row kernel runs


def row_grid(plan: tuple[bool, int, int, int], rows: int) -> tuple[int, int]:
    """``(blocks, threads)`` that launch :func:`row_plan`'s kernel ``plan`` over ``rows`` rows:
    a warp a row and four rows a block, or a block of the plan's threads a row."""
    if plan[0]:
        return min(-(-rows // _WARP_ROWS_PER_BLOCK), ROW_GRID_CAP), 32 * _WARP_ROWS_PER_BLOCK
    return min(rows, ROW_GRID_CAP), plan[3]


def softmax_rows_name(dtype, log: bool, warp: bool, width: int, vectors: int) -> str:
    """The ``extern "C"`` name of :func:`softmax_rows_source`'s kernel."""
    kind = "log_softmax" if log else "softmax"
    return f"tp_{kind}_rows_{np.dtype(dtype).name}_{'warp' if warp else 'block'}{width}x{vectors}"


def row_registers(dtype, acc: str, start: str, fold: str) -> list[str]:
    """The lines of a register row kernel (inside :func:`row_loop`) that load this thread's
    share of row ``r`` of ``x`` into ``v[K * W]`` (zeros past the row's end): ``start``
    declares an accumulator, ``fold`` updates it with each loaded ``v[k * W + t]``."""
    return [
        "        const tp_vec* src = reinterpret_cast<const tp_vec*>(x + r * length);",
        f"        {acc} v[K * W];",
        f"        {start}",
        "        #pragma unroll",
        "        for (int k = 0; k < K; ++k) {",
        "            const int i = k * nthreads + tid;",
        "            if (i < n) {",
        "                const tp_vec q = src[i];",
        "                #pragma unroll",
        "                for (int t = 0; t < W; ++t) {",
        f"                    v[k * W + t] = ({acc}){load_expr(dtype, 'q.s[t]')};",
        f"                    {fold}",
        "                }",
        "            } else {",
        "                #pragma unroll",
        f"                for (int t = 0; t < W; ++t) v[k * W + t] = ({acc})0;",
        "            }",
        "        }",
    ]


def softmax_rows_source(dtype, log: bool, warp: bool, width: int, vectors: int) -> str | None:
    """The CUDA source of softmax (``log``: log-softmax) over the last dimension of a
    C-contiguous float16, bfloat16, float32 or float64 array, reading each row once into
    registers and writing it once, or None for another dtype.

    The kernel ``NAME(const STORAGE* x, STORAGE* y, long long length, long long rows)`` takes a
    plan of :func:`row_plan`: ``warp`` (a warp per row; blocks of any multiple of 32 threads)
    or a block per row (``threads`` of the plan; at most :data:`ROW_BLOCK_LIMIT`), each thread
    holding ``vectors`` loads of ``width`` elements. Pitfall: ``width > 1`` needs ``x`` and
    ``y`` on :data:`VECTOR_BYTES` boundaries and ``length`` a multiple of ``width``; and the
    plan must cover the row (``vectors * width * threads >= length``): neither is checked.
    The maximum and the sum reduce by warp shuffles (and 32 shared words across a block's
    warps). Results as :func:`softmax_source`'s: a row holding NaN, or whose maximum is
    infinite, is NaN throughout; float64 computes in double, the others in float.
    """
    dtypes = _normalize(dtype)
    if dtypes is None or dtypes[0] not in _FLOATS:
        return None
    dtype = dtypes[0]
    storage, acc = _CTYPES[dtype][0], _CTYPES[dtype][1]
    fmax, exp, logf, minus_inf = _SOFTMAX_MATH[acc]
    reduce_max = "tp_warp_max(m)" if warp else "tp_block_max(m, shared)"
    reduce_sum = "tp_warp_sum(s)" if warp else "tp_block_sum(s, shared)"
    if log:
        keep, finish, result = "", f"        const {acc} logsum = {logf}(s);", "(v[j] - m) - logsum"
    else:
        keep, finish, result = " v[j] = e;", "", "v[j] / s"
    name = softmax_rows_name(dtype, log, warp, width, vectors)
    bounds = "" if warp else f"__launch_bounds__({ROW_BLOCK_LIMIT}) "
    return "\n".join([
        row_helpers(dtype, width),
        f"constexpr int W = {width};",
        f'extern "C" __global__ void {bounds}{name}(',
        f"        const {storage}* __restrict__ x, {storage}* __restrict__ y,",
        "        const tp_i64 length, const tp_i64 rows) {",
        "" if warp else f"    __shared__ {acc} shared[32];",
        *row_loop(warp, vectors),
        *row_registers(dtype, acc, f"{acc} m = {minus_inf};",
                       f"m = {fmax}(m, v[k * W + t]);"),
        f"        m = {reduce_max};",
        f"        {acc} s = 0;",
        "        #pragma unroll",
        "        for (int k = 0; k < K; ++k) {",
        "            if (k * nthreads + tid < n) {",
        "                #pragma unroll",
        "                for (int t = 0; t < W; ++t) {",
        "                    const int j = k * W + t;",
        f"                    const {acc} e = {exp}(v[j] - m);",
        f"                    s += e;{keep}",
        "                }",
        "            }",
        "        }",
        f"        s = {reduce_sum};",
        finish,
        *row_stores([], [f"                    q.s[t] = {_store(dtype, dtype, result)};"]),
    ])
