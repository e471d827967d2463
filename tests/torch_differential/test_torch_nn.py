"""``tensorplay.nn.functional`` against ``torch.nn.functional``, case by case: ``linear relu gelu
silu softmax log_softmax layer_norm dropout one_hot`` over float dtypes, shapes, broadcasting,
mixed dtypes, non-finite values and refused arguments; the warnings of an implicit softmax
dimension must match too.

Cases whose torch CUDA behaviour is a device-side assert (``one_hot`` values out of range with
``num_classes`` given: torch checks them only on cpu) run on the host on both sides. Dropout
results are random: they are compared by property (shape, dtype, every element 0 or
``x / (1 - p)``, the fraction kept within 6 standard deviations of ``1 - p``, identity where torch
returns its input), and on an accelerator each side also captures dropout in a graph and must
draw a fresh mask per replay.
"""

from __future__ import annotations

import gc
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = pytest.importorskip("torch.nn.functional")

import tensorplay as tp  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402
from support import requires_accelerator  # noqa: E402

from . import _compare as base  # noqa: E402
from ._compare import Arg, Dtype, Rng, host, is_host, make, params, torch_device  # noqa: E402

RNG = Rng(13)
FLOATS = base.FLOATS
#: (rtol, atol) per result dtype
TOLERANCE = {"float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2), "float32": (2e-5, 2e-5),
             "float64": (1e-12, 1e-12)}
GELU_INF = "torch 2.11's cpu gelu(inf) is nan; its CUDA gives inf, as tensorplay does"
SOFTMAX_LIST = ("torch's F.softmax calls input.softmax: AttributeError for a list; tensorplay "
                "raises TypeError naming the argument")


def data(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, size=shape)


def T(*shape, dtype="float32", low=-3.0, high=3.0, device=None) -> Arg:  # noqa: N802
    return Arg(data(*shape, low=low, high=high), dtype, device)


class Case(base.Case):
    """One call of ``F.<fn>`` on both sides. ``mode``: ``values`` (results compared),
    ``identity`` (also whether each side returns its input) or ``dropout`` (compared by
    property); ``device``: where the case runs whatever the device under test (the host only);
    ``label``: what the case is about."""

    def __init__(self, fn: str, args, kwargs=None, *, mode: str = "values", device=None,
                 label: str = "", tol=None, known: str | None = None, known_on=None,
                 per_device: bool = False):
        super().__init__(fn, args, kwargs, kind="nn", tol=tol, known=known, known_on=known_on,
                         per_device=per_device)
        self.mode, self.device, self.label = mode, device, label

    def describe(self) -> str:
        parts = [base.show(a) for a in self.args] + [f"{k}={base.show(v)}"
                                                     for k, v in self.kwargs.items()]
        return f"{self.fn}({', '.join(parts)})" + (f" [{self.label}]" if self.label else "")


def run_side(case: Case, side: str, device: str):
    """(outcome, inputs, warned): outcome is ("ok", result) or ("raise", exception)."""
    args = [make(a, side, device) for a in case.args]
    kwargs = {k: make(v, side, device) for k, v in case.kwargs.items()}
    module = F if side == "tp" else TF
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome = ("ok", getattr(module, case.fn)(*args, **kwargs))
        except Exception as error:  # noqa: BLE001 - the exception is the answer
            outcome = ("raise", error)
    # only the warnings this API defines (torch may add unrelated ones, e.g. about storage)
    warned = sorted({w.category.__name__ for w in caught
                     if str(w.message).startswith("Implicit dimension choice")})
    return outcome, args, warned


def as_float(value) -> np.ndarray:
    array = host(value)
    return array if array.dtype.kind in "biuc" else array.astype(np.float64)


def compare_values(case: Case, got, want) -> str | None:
    if tuple(got.shape) != tuple(want.shape):
        return f"shape tp {tuple(got.shape)} vs torch {tuple(want.shape)}"
    if base.dtype_name(got) != base.dtype_name(want):
        return f"dtype tp {base.dtype_name(got)} vs torch {base.dtype_name(want)}"
    a, b = as_float(got), as_float(want)
    if a.dtype.kind in "biu":
        if not np.array_equal(a, b):
            return f"values differ at {int((a != b).sum())} of {a.size} elements"
        return None
    rtol, atol = case.tol or TOLERANCE.get(base.dtype_name(got), (1e-6, 1e-6))
    if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        diff = np.abs(a - b)[bad]
        first = case.args[0]
        examples = []
        for index in list(zip(*np.nonzero(bad)))[:3]:
            x = (f"input {first.values[index]!r}, " if isinstance(first, Arg)
                 and first.values.shape == a.shape else "")
            examples.append(f"[{', '.join(map(str, index))}] {x}tp {a[index]!r} torch "
                            f"{b[index]!r}")
        return (f"values differ at {int(bad.sum())} of {a.size} elements (max |diff| "
                f"{np.nanmax(diff) if diff.size and not np.isnan(diff).all() else 'nan'}, "
                f"rtol {rtol}, atol {atol}; e.g. {'; '.join(examples)})")
    return None


def check_dropout(case: Case, side: str, result, args) -> str | None:
    """Dropout by property (results are random)."""
    x = args[0]
    p = case.kwargs.get("p", case.args[1] if len(case.args) > 1 else 0.5)
    inplace = case.kwargs.get("inplace", False)
    if inplace and result is not x:
        return f"{side}: inplace=True did not return its input"
    a, r = as_float(case.args[0].make("tp", "cpu")), as_float(result)
    if tuple(r.shape) != a.shape:
        return f"{side}: shape {tuple(r.shape)}"
    kept = r != 0
    scaled = a / (1 - p)
    rtol, atol = TOLERANCE.get(base.dtype_name(result), (1e-6, 1e-6))
    if not np.allclose(r[kept], scaled[kept], rtol=rtol, atol=atol, equal_nan=True):
        return f"{side}: a kept element is not x / (1 - p)"
    n = a.size
    if n >= 1000:
        sigma = math.sqrt(n * p * (1 - p))
        if abs(kept.sum() - n * (1 - p)) > 6 * sigma + 1:
            return f"{side}: kept {int(kept.sum())} of {n} for p={p}"
    return None


def problem_of(case: Case, device: str) -> str | None:
    """Why the two sides differ on ``case`` (tensorplay on ``device``), or None."""
    where = case.device or device
    tp_out, tp_args, tp_warned = run_side(case, "tp", where)
    th_out, th_args, th_warned = run_side(case, "torch", where)

    def compare_results(got, want):
        if case.mode == "identity":
            same_tp, same_th = got is tp_args[0], want is th_args[0]
            if same_tp != same_th:
                return f"returns its input: tp {same_tp}, torch {same_th}"
            return compare_values(case, got, want)
        if case.mode == "dropout":
            problem = check_dropout(case, "tp", got, tp_args) or check_dropout(case, "torch",
                                                                               want, th_args)
            if problem is None and (base.dtype_name(got) != base.dtype_name(want)
                                    or tuple(got.shape) != tuple(want.shape)):
                problem = (f"tp {base.dtype_name(got)} {tuple(got.shape)} vs torch "
                           f"{base.dtype_name(want)} {tuple(want.shape)}")
            return problem
        problem = compare_values(case, got, want)
        if problem is None and case.kwargs.get("inplace"):
            if (got is tp_args[0]) != (want is th_args[0]):
                problem = "inplace: returning the input differs"
        return problem

    problem = base.outcome_problem(tp_out, th_out, compare_results)
    if problem is None and tp_warned != th_warned:
        problem = f"warnings tp {tp_warned} vs torch {th_warned}"
    return problem


# -- the cases ------------------------------------------------------------------------------------

def linear_cases():
    shapes = [((5,), (3, 5), (3,)), ((4, 5), (3, 5), (3,)), ((2, 4, 5), (3, 5), (3,)),
              ((4, 5), (3, 5), None), ((4, 5), (5,), None), ((5,), (5,), None),
              ((4, 5), (3, 5), ()), ((4, 5), (3, 5), (1,)), ((2, 4, 5), (5,), ()),
              ((0, 5), (3, 5), (3,)), ((4, 5), (0, 5), (0,)), ((8, 64), (32, 64), (32,)),
              ((2, 3, 4, 16), (8, 16), (8,))]
    for dtype in FLOATS:
        for x, w, b in shapes:
            k = x[-1]
            tol = TOLERANCE[dtype]
            tol = (tol[0] * 4, tol[1] * math.sqrt(k) * 4) if dtype != "float64" else None
            args = [T(*x, dtype=dtype), T(*w, dtype=dtype)] + ([] if b is None else
                                                                [T(*b, dtype=dtype)])
            yield Case("linear", args, tol=tol)
    yield Case("linear", [T(4, 5), T(3, 6)], label="inner sizes differ")
    yield Case("linear", [T(4, 5), T(3, 5, dtype="float64")], label="dtypes differ")
    yield Case("linear", [T(4, 5), T(3, 5), T(3, dtype="float64")], label="bias dtype")
    yield Case("linear", [T(4, 5), T(3, 5), T(4)], label="bias does not broadcast")
    yield Case("linear", [T(4, 5), T(3, 5), T(4, 3)], label="bias of the result's shape")
    yield Case("linear", [T(4, 5), T(3, 5), T(2, 4, 3)], label="bias adds a batch dim")
    yield Case("linear", [T(4, 5), T(2, 3, 5)], label="3-d weight")
    yield Case("linear", [Arg(1.0), T(3, 1)], label="0-d input")
    yield Case("linear", [T(4, 5), Arg(1.0)], label="0-d weight")
    yield Case("linear", [T(4, 5), T(3, 5), [1.0, 2.0, 3.0]], label="list bias")
    # torch's cpu multiplies integers, its CUDA refuses them
    yield Case("linear", [Arg([[1, 2]], "int64"), Arg([[1, 2]], "int64")], label="int64",
               per_device=True)


def activation_cases():
    for dtype in FLOATS:
        a = T(6, 7, dtype=dtype, low=-8, high=8)
        yield Case("relu", [a])
        yield Case("relu", [T(6, 7, dtype=dtype)], {"inplace": True})
        for approximate in ("none", "tanh"):
            yield Case("gelu", [a], {"approximate": approximate})
        yield Case("silu", [T(300, dtype=dtype, low=-40, high=40)])
        yield Case("silu", [T(5, dtype=dtype)], {"inplace": True})
    nan = Arg([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    yield Case("gelu", [nan], {"approximate": "tanh"}, label="non-finite")
    for fn in ("relu", "gelu", "silu"):
        yield Case(fn, [nan], label="non-finite", known=GELU_INF if fn == "gelu" else None,
                   known_on=("cpu", "sim"))
        yield Case(fn, [Arg(2.5)], label="0-d")
        yield Case(fn, [T(0, 3)], label="empty")
        for dtype in ("int64", "int32", "uint8", "bool", "complex64"):
            values = [[1, 0], [0, 1]] if dtype == "bool" else [[-2, 3], [4, 0]]
            yield Case(fn, [Arg(values, dtype)], label=dtype)
    yield Case("relu", [Arg([[-2, 3]], "int64")], {"inplace": True}, label="int64 inplace")
    yield Case("silu", [Arg([1, 2], "int64")], {"inplace": True}, label="int64 inplace")
    yield Case("gelu", [T(3)], {"approximate": "fast"})
    yield Case("gelu", [T(3)], {"approximate": None})
    yield Case("gelu", [T(3)], {"approximate": "Tanh"})
    for fn in ("relu", "gelu", "silu"):
        yield Case(fn, [[1.0, 2.0]], label="list input")


def softmax_cases():
    for fn in ("softmax", "log_softmax"):
        for dtype in FLOATS:
            for shape, dims in (((7,), (0, -1)), ((3, 9), (0, 1, -1)), ((2, 3, 5), (0, 1, 2)),
                                ((2, 3, 4, 5), (1, 3))):
                a = T(*shape, dtype=dtype, low=-30, high=30)
                for dim in dims:
                    yield Case(fn, [a], {"dim": dim})
        yield Case(fn, [Arg([[0.0, -float("inf")], [-float("inf"), -float("inf")]])],
                   {"dim": 1}, label="-inf rows")
        yield Case(fn, [Arg([1.0, float("nan"), 2.0])], {"dim": 0}, label="nan")
        yield Case(fn, [Arg(3.0)], {"dim": 0}, label="0-d")
        yield Case(fn, [Arg(3.0)], {"dim": -1}, label="0-d dim=-1")
        yield Case(fn, [T(0, 4)], {"dim": 1}, label="empty")
        yield Case(fn, [T(0, 4)], {"dim": 0}, label="empty along dim")
        for shape in ((), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 2)):
            yield Case(fn, [T(*shape)], label="dim=None")
        yield Case(fn, [T(3, 4)], {"dim": 2}, label="dim out of range")
        yield Case(fn, [T(3, 4)], {"dim": -3}, label="dim out of range")
        yield Case(fn, [T(3, 4)], {"dim": 1.0}, label="float dim")
        yield Case(fn, [Arg([[1, 2, 3]], "int64")], {"dim": 1}, label="int64 input")
        yield Case(fn, [Arg([[1, 0]], "bool")], {"dim": 1}, label="bool input")
        yield Case(fn, [Arg([[1, 2, 3]], "int64")], {"dim": 1, "dtype": Dtype("float64")})
        yield Case(fn, [Arg([[1, 2, 3]], "int64")], {"dim": 1, "dtype": Dtype("float32")})
        yield Case(fn, [T(3, 5, dtype="float16")], {"dim": 1, "dtype": Dtype("float32")})
        yield Case(fn, [T(3, 5, dtype="bfloat16")], {"dim": -1, "dtype": Dtype("float64")})
        yield Case(fn, [T(3, 5)], {"dim": 1, "dtype": Dtype("float16")})
        yield Case(fn, [T(3, 5)], {"dim": 1, "dtype": Dtype("int64")})
        yield Case(fn, [Arg([[1 + 1j, 2]], "complex64")], {"dim": 1}, label="complex")
        yield Case(fn, [T(2, 6)], {"dim": 1, "_stacklevel": 5})
        yield Case(fn, [[1.0, 2.0]], {"dim": 0}, label="list input", known=SOFTMAX_LIST)


def layer_norm_cases():
    shapes = [((6,), (6,)), ((4, 6), (6,)), ((2, 3, 6), (6,)), ((2, 3, 6), (3, 6)),
              ((2, 3, 6), (2, 3, 6)), ((5, 1), (1,)), ((3, 512), (512,)), ((0, 4), (4,))]
    for dtype in FLOATS:
        for x, n in shapes:
            for affine in ("none", "weight", "bias", "both"):
                w = T(*n, dtype=dtype, low=0.5, high=2) if affine in ("weight", "both") else None
                b = T(*n, dtype=dtype) if affine in ("bias", "both") else None
                yield Case("layer_norm", [T(*x, dtype=dtype, low=-4, high=9), n, w, b],
                           tol=None if dtype != "float32" else (1e-5, 1e-4))
        yield Case("layer_norm", [T(2, 8, dtype=dtype), (8,)], {"eps": 0.5})
        yield Case("layer_norm", [Arg([[1000.0 + i for i in range(8)]] * 2, dtype), (8,)],
                   label="large offset")
        yield Case("layer_norm", [Arg([[2.0, 2.0, 2.0]], dtype), (3,)], label="constant row")
        yield Case("layer_norm", [Arg([[2.0, 2.0, 2.0]], dtype), (3,)], {"eps": 0.0},
                   label="constant row, eps 0")
    for dtype in ("float16", "bfloat16"):   # float32 weight and bias: torch's cpu only
        yield Case("layer_norm", [T(3, 8, dtype=dtype), (8,), T(8, low=0.5, high=2), T(8)],
                   label="mixed: float32 weight and bias", per_device=True)
        yield Case("layer_norm", [T(3, 8, dtype=dtype), (8,), T(8)], label="mixed: weight only",
                   per_device=True)
        yield Case("layer_norm", [T(3, 8, dtype=dtype), (8,), None, T(8)],
                   label="mixed: bias only", per_device=True)
        yield Case("layer_norm", [T(3, 8, dtype=dtype), (8,), T(8), T(8, dtype=dtype)],
                   label="mixed: weight float32, bias half")
    yield Case("layer_norm", [T(3, 8), (8,), T(8, dtype="float64")], label="weight float64")
    yield Case("layer_norm", [T(3, 8, dtype="float64"), (8,), T(8)], label="weight float32")
    yield Case("layer_norm", [T(3, 8), (8,), T(8, dtype="float16")], label="weight float16")
    yield Case("layer_norm", [T(2, 3, 4), (3,)], label="trailing dims differ")
    yield Case("layer_norm", [T(2, 3, 4), (1, 2, 3, 4)], label="more dims than input")
    yield Case("layer_norm", [T(2, 3, 4), ()], label="empty normalized_shape")
    yield Case("layer_norm", [T(2, 3, 4), (4,), T(3)], label="weight shape")
    yield Case("layer_norm", [T(2, 3, 4), (3, 4), None, T(4)], label="bias shape")
    yield Case("layer_norm", [T(2, 3, 4), 4], label="int normalized_shape")
    yield Case("layer_norm", [T(2, 3, 4), [4]], label="list normalized_shape")
    yield Case("layer_norm", [T(2, 3, 4), (4.0,)], label="float in normalized_shape")
    yield Case("layer_norm", [T(2, 3, 4), (4,)], {"eps": "small"})
    yield Case("layer_norm", [T(2, 3, 4), (4,)], {"eps": 1})
    yield Case("layer_norm", [T(2, 3, 4), (4,), [1.0] * 4], label="list weight")
    for dtype in ("int64", "bool", "complex64"):
        yield Case("layer_norm", [Arg(np.ones((2, 4)), dtype), (4,)], label=dtype)
    yield Case("layer_norm", [T(3, 0), (0,)], label="zero-size normalized dim")


def dropout_cases():
    for dtype in FLOATS:
        for p in (0.1, 0.5, 0.9):
            yield Case("dropout", [T(64, 64, dtype=dtype), p], mode="dropout")
            yield Case("dropout", [T(64, 64, dtype=dtype)], {"p": p, "inplace": True},
                       mode="dropout")
        yield Case("dropout", [T(5, dtype=dtype), 0.5], {"training": False}, mode="identity")
        yield Case("dropout", [T(5, dtype=dtype), 0.0], mode="identity")
        yield Case("dropout", [T(5, dtype=dtype), 1.0], mode="identity")
        yield Case("dropout", [T(5, dtype=dtype), 1.0], {"inplace": True}, mode="identity")
    yield Case("dropout", [Arg([1.0, float("nan"), float("inf"), -2.0]), 1.0], mode="identity",
               label="p=1 with non-finite")
    yield Case("dropout", [T(0, 3), 0.5], mode="identity", label="empty")
    yield Case("dropout", [Arg(2.0), 0.5], mode="dropout", label="0-d")
    yield Case("dropout", [T(4), 0.5, False, True], mode="identity", label="positional")
    for p in (-0.1, 1.5, -1, 2, float("inf")):
        yield Case("dropout", [T(4), p])
        yield Case("dropout", [T(4), p], {"training": False})
    yield Case("dropout", [T(4), float("nan")], label="p nan")
    yield Case("dropout", [T(4), float("nan")], {"training": False}, label="p nan, eval")
    yield Case("dropout", [T(4), "0.5"], label="str p")
    for dtype in ("int64", "bool", "complex64"):
        values = [1, 0, 1, 1] if dtype == "bool" else [1, 2, 3, 4]
        yield Case("dropout", [Arg(values, dtype), 0.5], label=dtype)
        yield Case("dropout", [Arg(values, dtype), 1.0], mode="identity", label=f"{dtype} p=1")
        yield Case("dropout", [Arg(values, dtype), 0.5], {"training": False}, mode="identity",
                   label=f"{dtype} eval")
    yield Case("dropout", [[1.0, 2.0], 0.5], label="list input")


def one_hot_cases():
    for values, n in (([0, 2, 1, 2], -1), ([0, 2, 1, 2], 5), ([[3, 0], [1, 1]], -1),
                      ([[3, 0], [1, 1]], 4), (4, -1), (0, 3), ([7], -1), ([0, 0, 0], 1),
                      (list(range(100)), -1), (list(range(100)), 128)):
        yield Case("one_hot", [Arg(values, "int64"), n])
    yield Case("one_hot", [Arg([0, 2, 1], "int64")], label="default num_classes")
    yield Case("one_hot", [Arg(np.zeros((0, 2)), "int64"), 3], label="empty")
    yield Case("one_hot", [Arg(np.zeros((0, 2)), "int64"), -1], label="empty, infer")
    yield Case("one_hot", [Arg(np.zeros((0, 2)), "int64"), 0], label="empty, 0 classes")
    for dtype in ("int32", "uint8", "float32", "bool"):
        yield Case("one_hot", [Arg([0, 1], dtype), 3], label=dtype)
    yield Case("one_hot", [Arg([0, 1], "int64"), 3.0], label="float num_classes")
    yield Case("one_hot", [[0, 1], 3], label="list input")
    yield Case("one_hot", [Arg([0, -1], "int64")], device="cpu", label="negative, infer")
    yield Case("one_hot", [Arg([0, 1], "int64"), 0], label="0 classes")
    yield Case("one_hot", [Arg([0, 1], "int64"), -2], label="-2 classes")
    # torch CUDA checks these with a device-side assert (fatal): compare them on cpu (above too)
    for values, n in (([0, -1], 3), ([0, 3], 3), ([0, 2], 0), ([0, 2], -2), ([0, 1], 0)):
        yield Case("one_hot", [Arg(values, "int64"), n], device="cpu", label="cpu value check")


def cases(device):
    """Every case; those pinned to the host only when the device under test is the host (they
    would repeat it elsewhere)."""
    RNG.reseed()
    for build in (linear_cases, activation_cases, softmax_cases, layer_norm_cases,
                  dropout_cases, one_hot_cases):
        for case in build():
            if case.device is None or is_host(device):
                yield case


@pytest.mark.parametrize("device,case", params(cases))
def test_nn_functional_agrees_with_torch(device, case):
    problem = problem_of(case, device)
    assert problem is None, f"{case.describe()} on {case.device or device}: {problem}"


# -- captured graphs ------------------------------------------------------------------------------
def _replayed_masks(side: str, device: str) -> list[bytes]:
    """Capture ``dropout(ones, 0.5)`` in a graph on ``side``; the output after each of three
    replays."""
    masks = []
    if side == "tp":
        x = tp.ones(4, 256, device=device)
        g = tp.accelerator.Graph()
        with g:
            y = F.dropout(x, 0.5)
        for _ in range(3):
            g.replay()
            masks.append(host(y).tobytes())
        return masks
    x = torch.ones(4, 256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        TF.dropout(x, 0.5)   # warm up, as torch asks before a capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = TF.dropout(x, 0.5)
    for _ in range(3):
        g.replay()
        masks.append(host(y).tobytes())
    return masks


@requires_accelerator
@pytest.mark.parametrize("side", ["tp", "torch"])
def test_captured_dropout_draws_a_fresh_mask_per_replay(dev, side):
    """Each side captures dropout in a graph; three replays must give three different masks.
    Each capture runs with the garbage collector off and tensorplay idle: freeing tensorplay
    memory may synchronize the device, which a capture in progress forbids."""
    if side == "torch" and torch_device(dev) != "cuda":
        pytest.skip("torch captures graphs on cuda only")
    gc.collect()
    tp.accelerator.synchronize()
    gc.disable()
    try:
        masks = _replayed_masks(side, dev)
    finally:
        gc.enable()
    assert len(set(masks)) == 3, f"{side} repeats a mask across replays"
