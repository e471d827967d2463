"""tensorplay's comparison and elementwise functions against torch, case by case (``erfinv lgamma
digamma sinc logit hypot logaddexp copysign xlogy heaviside addcmul addcdiv lerp nan_to_num
isclose allclose equal``): each as a function, a method, in place and with ``out=``, over float,
integer, bool and complex dtypes, broadcasting, scalars, special values and refused arguments.
"""

import numpy as np
import pytest

pytest.importorskip("torch")

from ._compare import FLOATS, INTS, RNG, Arg, Case, T, V, check, params  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # torch's deprecation notes

NAN_SIGN = ("copysign(x, NaN) in bfloat16: torch's bfloat16 kernels (cpu and CUDA) give the "
            "opposite sign to tensorplay's for a positive NaN `other`; its float16/float32/float64 "
            "kernels agree with tensorplay, which takes the NaN's sign bit in every dtype "
            "(IEEE 754)")
RESIZE = ("tensorplay refuses an out= of the wrong shape (RuntimeError); torch resizes it, "
          "with a warning that this is deprecated")


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
            nan_sign = (fn, dtype) == ("copysign", "bfloat16")
            yield Case(fn, [T(3, 1, 6, dtype=dtype, special=True),
                            T(4, 6, dtype=dtype, special=True, low=0 if fn == "xlogy" else -3)],
                       known=NAN_SIGN if nan_sign else None)
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


def cases(device):
    RNG.reseed()
    for build in (unary_cases, binary_cases, heaviside_cases, ternary_cases, lerp_cases,
                  nan_to_num_cases, comparison_cases):
        yield from build()


@pytest.mark.parametrize("device,case", params(cases))
def test_pointwise_agrees_with_torch(device, case):
    check(case, device)
