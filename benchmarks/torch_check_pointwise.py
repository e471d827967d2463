"""Check tensorplay's comparison and elementwise functions against torch, case by case.

Run where torch is importable (the H200 machine)::

    TENSORPLAY_ACCELERATOR=cuda python3 benchmarks/torch_check_pointwise.py
    TENSORPLAY_ACCELERATOR=none python3 benchmarks/torch_check_pointwise.py --device cpu

Each case calls ``tp.<fn>`` (or the method / in-place form) and ``torch.<fn>`` on the same inputs
and compares the outcome: both raise (exception categories IndexError, TypeError, ValueError,
RuntimeError must match), or both return (same Python bool, or tensors of the same shape, dtype
and values within a per-dtype tolerance, NaN equal to NaN). ``--verbose`` prints agreeing cases
too; the last line is ``N cases, M mismatches``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("torch is not importable here: nothing to check (run this where torch is installed)")
    sys.exit(0)

import tensorplay as tp

RNG = np.random.default_rng(15)
FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int64", "int32", "uint8", "bool")
#: (rtol, atol) per result dtype
TOLERANCE = {"float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2), "float32": (1e-5, 1e-5),
             "float64": (1e-10, 1e-12), "complex64": (1e-5, 1e-5),
             "complex128": (1e-10, 1e-12)}
CATEGORIES = (IndexError, TypeError, ValueError, RuntimeError)


class Arg:
    """A tensor argument: the same values on both sides."""

    def __init__(self, values, dtype: str = "float32"):
        self.values, self.dtype = np.asarray(values), dtype

    def make(self, side: str, device: str):
        if side == "tp":
            return tp.tensor(self.values, dtype=getattr(tp, self.dtype), device=device)
        return torch.tensor(self.values, dtype=getattr(torch, self.dtype), device=device)


def T(*shape, dtype="float32", low=-3.0, high=3.0, special=False) -> Arg:  # noqa: N802
    values = RNG.uniform(low, high, size=shape)
    if dtype == "bool":
        values = values > (low + high) / 2
    elif dtype in INTS or dtype.startswith("int") or dtype.startswith("uint"):
        values = np.round(values).astype(np.int64)
        if dtype.startswith("uint"):
            values = np.abs(values)
    elif special and values.size >= 4:
        flat = values.reshape(-1)
        flat[:4] = [np.nan, np.inf, -np.inf, 0.0]
    return Arg(values, dtype)


def V(values, dtype="float32") -> Arg:  # noqa: N802
    return Arg(values, dtype)


class Case:
    def __init__(self, fn: str, args, kwargs=None, *, kind: str = "function", tol=None,
                 known: str | None = None):
        self.fn, self.args, self.kwargs = fn, list(args), dict(kwargs or {})
        self.kind, self.tol = kind, tol   # kind: function, method, inplace, out
        self.known = known   # why tensorplay differs here on purpose (printed as KNOWN)

    def describe(self) -> str:
        def show(a):
            return f"T{tuple(a.values.shape)}:{a.dtype}" if isinstance(a, Arg) else repr(a)
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return f"{self.kind} {self.fn}({', '.join(parts)})"


def run_side(case: Case, side: str, device: str):
    lib = tp if side == "tp" else torch
    args = [a.make(side, device) if isinstance(a, Arg) else a for a in case.args]
    kwargs = {k: (v.make(side, device) if isinstance(v, Arg) else v)
              for k, v in case.kwargs.items()}
    try:
        if case.kind == "function":
            return "ok", getattr(lib, case.fn)(*args, **kwargs)
        if case.kind == "method":
            return "ok", getattr(args[0], case.fn)(*args[1:], **kwargs)
        if case.kind == "inplace":
            result = getattr(args[0], case.fn + "_")(*args[1:], **kwargs)
            if result is not args[0]:
                return "ok", "in-place form did not return self"
            return "ok", result
        out_dtype = kwargs.pop("out_dtype")
        out_shape = kwargs.pop("out_shape")
        out = lib.empty(out_shape, dtype=getattr(lib, out_dtype), device=device)
        result = getattr(lib, case.fn)(*args, out=out, **kwargs)
        return "ok", result if result is out else "out= did not return out"
    except Exception as error:  # noqa: BLE001 - the exception is the answer
        return "raise", error


def host(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()
    return value.cpu().numpy()


def dtype_name(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    return value.dtype.name


def category(error: BaseException) -> str:
    for kind in CATEGORIES:
        if isinstance(error, kind):
            return kind.__name__
    return type(error).__name__


def compare(case: Case, got, want) -> str | None:
    if isinstance(got, str) or isinstance(want, str):
        return None if got == want else f"tp {got!r} vs torch {want!r}"
    if isinstance(want, bool) or isinstance(got, bool):
        return None if got is want else f"tp {got!r} vs torch {want!r}"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape tp {tuple(got.shape)} vs torch {tuple(want.shape)}"
    if dtype_name(got) != dtype_name(want):
        return f"dtype tp {dtype_name(got)} vs torch {dtype_name(want)}"
    a, b = host(got), host(want)
    if a.dtype.kind in "biu":
        return None if np.array_equal(a, b) else \
            f"values differ at {int((a != b).sum())} of {a.size} elements"
    a, b = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), \
        b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
    rtol, atol = case.tol or TOLERANCE.get(dtype_name(got), (1e-6, 1e-6))
    if case.kind == "out":   # computed in the inputs' dtype, then cast to out's: theirs counts
        for arg in case.args:
            if isinstance(arg, Arg) and arg.dtype in TOLERANCE:
                rtol, atol = max(rtol, TOLERANCE[arg.dtype][0]), max(atol, TOLERANCE[arg.dtype][1])
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    index = tuple(np.argwhere(bad)[0])
    return (f"values differ at {int(bad.sum())} of {a.size} elements (e.g. {list(index)}: tp "
            f"{a[index]!r} torch {b[index]!r}; rtol {rtol}, atol {atol})")


def structure_problem(got, want) -> str | None:
    """Why ``got`` (tensorplay's result) and ``want`` (torch's) differ in structure, or None:
    one a tuple and the other not, tuples of different lengths, or a field of tensorplay's
    named tuple that torch's result lacks (torch's return types are structseqs: fields by
    attribute, no ``_fields``)."""
    if isinstance(want, tuple) != isinstance(got, tuple):
        return f"tp returned {type(got).__name__}, torch {type(want).__name__}"
    if not isinstance(got, tuple):
        return None
    fields = tuple(getattr(got, "_fields", ()) or ())
    if len(got) != len(want) or not all(hasattr(want, name) for name in fields):
        return (f"fields tp {fields} ({len(got)} items) vs torch {type(want).__name__} of "
                f"{len(want)} items")
    return None


def run_case(case: Case, device: str, verbose: bool, *, convert=None, compare_fn=None) -> bool:
    """Run ``case`` on both sides and print a mismatch; ``convert(side)`` may give each side its
    own case, ``compare_fn`` replaces :func:`compare` (torch_check_scatter_search uses both)."""
    tp_kind, tp_value = run_side(convert("tp") if convert else case, "tp", device)
    th_kind, th_value = run_side(convert("torch") if convert else case, "torch", device)
    if tp_kind == "raise" and th_kind == "raise":
        # an exception of several categories (tensorplay's BroadcastError is a RuntimeError
        # and a ValueError) agrees when one of them is torch's
        agree = category(tp_value) == category(th_value) or any(
            isinstance(tp_value, kind) and isinstance(th_value, kind) for kind in CATEGORIES)
        problem = None if agree else (
            f"exception tp {type(tp_value).__name__}: {str(tp_value)[:160]} | torch "
            f"{type(th_value).__name__}: {str(th_value)[:160]}")
    elif tp_kind == "raise":
        problem = f"only tp raises {type(tp_value).__name__}: {str(tp_value)[:200]}"
    elif th_kind == "raise":
        problem = f"only torch raises {type(th_value).__name__}: {str(th_value)[:200]}"
    else:
        problem = (compare_fn or compare)(case, tp_value, th_value)
    if problem is not None and case.known:
        print(f"KNOWN {case.describe()}: {problem} ({case.known})")
        return False
    if problem is not None:
        print(f"MISMATCH {case.describe()}: {problem}")
        return True
    if verbose:
        print(f"ok {case.describe()}")
    return False


NAN_SIGN = ("copysign(x, NaN) in bfloat16: torch's CUDA kernel gives the opposite sign to "
            "tensorplay's for a positive NaN `other`; its float16/float32/float64 kernels agree "
            "with tensorplay, which takes the NaN's sign bit in every dtype (IEEE 754)")
RESIZE = ("tensorplay refuses an out= of the wrong shape (RuntimeError); torch resizes it, "
          "with a warning that this is deprecated")


# -- the cases ------------------------------------------------------------------------------------
UNARY = ("erfinv", "lgamma", "digamma", "sinc", "logit")


def unary_cases():
    ranges = {"erfinv": (-1.2, 1.2), "lgamma": (-6, 12), "digamma": (-6, 12), "sinc": (-5, 5),
              "logit": (-0.2, 1.2)}
    for fn in UNARY:
        low, high = ranges[fn]
        for dtype in FLOATS:
            yield Case(fn, [T(4, 33, dtype=dtype, low=low, high=high, special=True)])
            yield Case(fn, [T(7, dtype=dtype, low=low, high=high)], kind="method")
            yield Case(fn, [T(7, dtype=dtype, low=low, high=high)], kind="inplace")
        for dtype in INTS:
            yield Case(fn, [T(9, dtype=dtype, low=-3, high=3)])
        yield Case(fn, [T(9, dtype="int64")], kind="inplace")
        yield Case(fn, [T(2, 3, dtype="complex64")])
        yield Case(fn, [T(5)], {"out_dtype": "float64", "out_shape": (5,)}, kind="out")
        yield Case(fn, [T(5)], {"out_dtype": "float32", "out_shape": (4,)}, kind="out",
                   known=RESIZE)
        yield Case(fn, [T(5)], {"out_dtype": "int64", "out_shape": (5,)}, kind="out")
    yield Case("erfinv", [V([-1.0, 1.0, 0.0, -0.0, 0.999999, -0.9999999, 1e-30], "float64")])
    yield Case("lgamma", [V([0.0, -0.0, -1.0, -2.5, 1.0, 2.0, 1e-300, 1e300, 3e305], "float64")])
    yield Case("digamma", [V([0.0, -0.0, -1.0, -2.5, 1.0, 1e-300, 1e300, -1e-9], "float64")])
    yield Case("sinc", [V([0.0, 1.0, -2.0, 1e-20, 0.5], "float64")])
    for eps in (None, 0.0, 0.05, 0.5, -1.0, 1e-6):
        yield Case("logit", [V([-0.5, 0.0, 0.01, 0.5, 0.99, 1.0, 2.0, np.nan])], {"eps": eps})
    yield Case("logit", [T(4)], {"eps": 0.1}, kind="inplace")
    yield Case("logit", [T(4)], {"eps": "x"})


BINARY = ("hypot", "logaddexp", "copysign", "xlogy")


def binary_cases():
    for fn in BINARY:
        for dtype in FLOATS:
            yield Case(fn, [T(3, 1, 6, dtype=dtype, special=True),
                            T(4, 6, dtype=dtype, special=True, low=0 if fn == "xlogy" else -3)],
                       known=NAN_SIGN if (fn, dtype) == ("copysign", "bfloat16") else None)
            yield Case(fn, [T(6, dtype=dtype), T(6, dtype=dtype)], kind="method")
            if fn != "logaddexp":
                yield Case(fn, [T(6, dtype=dtype), T(6, dtype=dtype)], kind="inplace")
        for a, b in (("int64", "int64"), ("int32", "float32"), ("bool", "bool"),
                     ("float32", "float64"), ("float16", "bfloat16"), ("uint8", "int8"),
                     ("complex64", "complex64")):
            yield Case(fn, [T(5, dtype=a), T(5, dtype=b)])
        yield Case(fn, [T(5), 2.0])
        yield Case(fn, [T(5, dtype="int64"), 2])
        yield Case(fn, [T(2, 3), T(3, 2)])
        yield Case(fn, [T(1), T(4)], kind="inplace")
        yield Case(fn, [T(4, dtype="int64"), T(4)], kind="inplace")
        yield Case(fn, [T(4), T(4)], {"out_dtype": "float64", "out_shape": (4,)}, kind="out")
        yield Case(fn, [T(4), T(4)], {"out_dtype": "int32", "out_shape": (4,)}, kind="out")
    yield Case("xlogy", [2.0, T(5, low=0)])
    yield Case("xlogy", [V([0.0, 0.0, 0.0, 1.0, np.nan]), V([0.0, np.inf, np.nan, 0.0, 1.0])])
    yield Case("logaddexp", [V([np.inf, -np.inf, np.inf, -np.inf]),
                             V([np.inf, -np.inf, -np.inf, 1.0])])
    yield Case("copysign", [V([1.0, 2.0, 3.0]), V([-0.0, 0.0, np.nan])])


def heaviside_cases():
    for dtype in FLOATS + ("int64", "int32", "uint8", "bool"):
        yield Case("heaviside", [T(3, 5, dtype=dtype, special=True), T(5, dtype=dtype)])
        yield Case("heaviside", [T(5, dtype=dtype), T(1, dtype=dtype)], kind="method")
        yield Case("heaviside", [T(5, dtype=dtype), T(5, dtype=dtype)], kind="inplace")
    yield Case("heaviside", [V([-1.0, 0.0, -0.0, np.nan, 2.0]), V([0.5])])
    yield Case("heaviside", [T(5), T(5, dtype="float64")])
    yield Case("heaviside", [T(5, dtype="complex64"), T(5, dtype="complex64")])
    yield Case("heaviside", [T(5), 1.0])
    yield Case("heaviside", [T(4), T(4)], {"out_dtype": "float64", "out_shape": (4,)}, kind="out")


def ternary_cases():
    for fn in ("addcmul", "addcdiv"):
        for dtype in FLOATS:
            args = [T(2, 3, dtype=dtype), T(3, dtype=dtype), T(2, 1, dtype=dtype, low=0.5)]
            yield Case(fn, args)
            yield Case(fn, args, {"value": -0.5})
            yield Case(fn, args, {"value": 3}, kind="method")
            yield Case(fn, [T(2, 3, dtype=dtype), T(3, dtype=dtype), T(2, 3, dtype=dtype,
                                                                        low=0.5)],
                       {"value": 2.0}, kind="inplace")
        for dtypes in (("int64",) * 3, ("int32", "int64", "uint8"), ("int64", "float32", "int64"),
                       ("bool",) * 3, ("float16", "float32", "float64"), ("int64", "bool", "bool"),
                       ("complex64",) * 3):
            yield Case(fn, [T(4, dtype=d, low=1) for d in dtypes])
        yield Case(fn, [T(4, dtype="int64", low=1)] * 3, {"value": 2})
        yield Case(fn, [T(4), T(4), T(4, low=1)], {"value": "2"})
        yield Case(fn, [T(4), 2.0, T(4, low=1)])
        yield Case(fn, [T(1), T(4), T(4, low=1)], kind="inplace")
        yield Case(fn, [T(4), T(3), T(4, low=1)])
        yield Case(fn, [T(4), T(4), T(4, low=1)], {"out_dtype": "float64", "out_shape": (4,)},
                   kind="out")


def lerp_cases():
    for dtype in FLOATS + ("complex64",):
        yield Case("lerp", [T(3, 4, dtype=dtype), T(4, dtype=dtype), T(3, 1, dtype=dtype,
                                                                       low=-0.5, high=1.5)])
        for weight in (0.0, 0.25, 0.5, 1.0, 1.5, -2):
            yield Case("lerp", [T(5, dtype=dtype), T(5, dtype=dtype), weight])
        yield Case("lerp", [T(5, dtype=dtype), T(5, dtype=dtype), 0.3], kind="method")
        yield Case("lerp", [T(5, dtype=dtype), T(5, dtype=dtype), 0.7], kind="inplace")
    yield Case("lerp", [T(5, dtype="int64"), T(5, dtype="int64"), 0.5])
    yield Case("lerp", [T(5), T(5, dtype="float64"), 0.5])
    yield Case("lerp", [T(5), T(5), T(5, dtype="float64")])
    yield Case("lerp", [T(5), 1.0, 0.5])
    yield Case("lerp", [T(1), T(5), 0.5], kind="inplace")
    yield Case("lerp", [T(5), T(5), 0.5], {"out_dtype": "float64", "out_shape": (5,)},
               kind="out")


def nan_to_num_cases():
    for dtype in FLOATS + ("complex64", "complex128"):
        x = T(3, 8, dtype=dtype, special=True)
        yield Case("nan_to_num", [x])
        yield Case("nan_to_num", [x], {"nan": 1.5, "posinf": 9.0, "neginf": -9.0})
        yield Case("nan_to_num", [x], {"posinf": 1e300})
        yield Case("nan_to_num", [x], {"nan": 2.0}, kind="method")
        yield Case("nan_to_num", [x], {"neginf": 0.0}, kind="inplace")
    for dtype in INTS:
        yield Case("nan_to_num", [T(5, dtype=dtype)], {"nan": 3.0})
    yield Case("nan_to_num", [T(5)], {"posinf": "big"})
    yield Case("nan_to_num", [T(4, special=True)], {"out_dtype": "float64", "out_shape": (4,)},
               kind="out")


def comparison_cases():
    a = V([1.0, 1.0, np.inf, np.inf, np.nan, 0.0, 1e-9, 100.0])
    b = V([1.0 + 1e-6, 1.1, np.inf, -np.inf, np.nan, 1e-9, 0.0, 100.0011])
    for fn in ("isclose", "allclose"):
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            x, y = Arg(a.values, dtype), Arg(b.values, dtype)
            yield Case(fn, [x, y])
            yield Case(fn, [x, y], {"equal_nan": True})
            yield Case(fn, [x, y], {"rtol": 0.2, "atol": 0.0})
            yield Case(fn, [x, x], {"equal_nan": True}, kind="method")
            yield Case(fn, [x, x])
        for dtype in ("int64", "int32", "uint8", "bool", "complex64"):
            x = T(6, dtype=dtype, low=0)
            yield Case(fn, [x, x])
            yield Case(fn, [x, T(6, dtype=dtype, low=0)], {"rtol": 0.3})
        yield Case(fn, [T(2, 1), T(3)])
        yield Case(fn, [T(3), T(4)])
        yield Case(fn, [T(3), T(3, dtype="float64")])
        yield Case(fn, [T(3), 1.0])
        yield Case(fn, [T(3), T(3)], {"rtol": -1.0})
        yield Case(fn, [T(3), T(3)], {"atol": -1.0})
    x = T(2, 3)
    for dtype in ("float32", "int64", "bool", "float16"):
        y = T(4, dtype=dtype)
        yield Case("equal", [y, y])
        yield Case("equal", [y, T(4, dtype=dtype)], kind="method")
    yield Case("equal", [x, x])
    yield Case("equal", [x, T(3, 2)])
    yield Case("equal", [V([1.0, np.nan]), V([1.0, np.nan])])
    yield Case("equal", [V([]), V([])])
    yield Case("equal", [V([1.0, 2.0]), V([1.0, 2.0], "float64")])
    yield Case("equal", [V([1, 2], "int64"), V([1, 2], "int32")])
    yield Case("equal", [V([1.0]), V([1.0, 1.0])])


def all_cases():
    for make in (unary_cases, binary_cases, heaviside_cases, ternary_cases, lerp_cases,
                 nan_to_num_cases, comparison_cases):
        yield from make()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args()
    cases = list(all_cases())
    mismatches = sum(run_case(case, options.device, options.verbose) for case in cases)
    print(f"{len(cases)} cases, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
