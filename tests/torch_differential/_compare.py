"""What the differential tests against PyTorch share: how a case is written once and made on both
sides, how the two outcomes are compared, and how cases become parametrized tests.

A case calls the same function in tensorplay and in torch on the same inputs. Both outcomes must
agree: both raise (exceptions of one category: IndexError, TypeError, ValueError, RuntimeError;
tensorplay's BroadcastError, a RuntimeError and a ValueError, agrees with either), or both return
the same Python value, or tensors (also tuples and named tuples of them) of the same shape, dtype
and values (a tolerance per dtype; NaN equals NaN).

Each tensorplay device under test (``support.DEVICES``) is compared with the torch device of its
kind: ``cuda`` with torch's ``cuda``, the host and the simulated accelerator with torch's ``cpu``.
A case where tensorplay differs from torch carries the reason (``known``), and, when the
difference shows on some devices only, tensorplay's device types where it does (``known_on``, of
``cpu``, ``sim``, ``cuda``; the host and the simulated accelerator are compared with torch's cpu):
it is then a strict xfail there, so the test fails once the difference is gone.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorplay as tp  # noqa: E402
from support import DEVICES  # noqa: E402

#: (rtol, atol) per result dtype
TOLERANCE = {"float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2), "float32": (1e-5, 1e-5),
             "float64": (1e-10, 1e-12), "complex64": (1e-5, 1e-5),
             "complex128": (1e-10, 1e-12)}
CATEGORIES = (IndexError, TypeError, ValueError, RuntimeError)
FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int64", "int32", "uint8", "bool")


# -- devices --------------------------------------------------------------------------------------
def torch_device(device: str) -> str:
    """The torch device a tensorplay device is compared with."""
    return "cuda" if tp.device(device).type == "cuda" else "cpu"


def is_host(device: str) -> bool:
    return tp.device(device).type == "cpu"


def torch_matches_device_kind(device: str) -> bool:
    """Whether torch runs on the same kind of device as tensorplay's ``device``: the host as
    torch's cpu, cuda as torch's cuda. Not so for the simulated accelerator, which follows
    torch's CUDA rules where torch's cpu and cuda differ, but is compared with torch's cpu:
    cases of such rules are left out there."""
    return is_host(device) or tp.device(device).type == "cuda"


def params(build, devices=DEVICES) -> list:
    """``pytest.param(device, case)`` for every device and each case ``build(device)`` yields
    (built again for each device, so random inputs do not depend on the devices before it), with
    a strict xfail where the case's known difference shows; ``per_device`` cases only where torch
    runs on tensorplay's kind of device."""
    out = []
    for device in devices:
        for case in build(device):
            if getattr(case, "per_device", False) and not torch_matches_device_kind(device):
                continue
            marks = ()
            if case.known and (case.known_on is None
                               or tp.device(device).type in case.known_on):
                marks = (pytest.mark.xfail(reason=case.known, strict=True),)
            out.append(pytest.param(device, case, id=f"{device}-{case.describe()}", marks=marks))
    return out


# -- arguments ------------------------------------------------------------------------------------
class Rng:
    """A random generator that each module's case builder reseeds, so a case's inputs do not
    depend on which other cases were built before it in the same process."""

    def __init__(self, seed: int):
        self.seed = seed
        self.generator = np.random.default_rng(seed)

    def reseed(self) -> None:
        self.generator = np.random.default_rng(self.seed)

    def __getattr__(self, name):
        return getattr(self.generator, name)


#: the inputs of :func:`T`
RNG = Rng(15)


class Arg:
    """A tensor argument: the same values on both sides (rounded to ``dtype``), on the case's
    device unless ``device`` names another."""

    def __init__(self, values, dtype: str = "float32", device: str | None = None):
        self.values, self.dtype, self.device = np.asarray(values), dtype, device

    def make(self, side: str, device: str):
        if side == "tp":
            return tp.tensor(self.values, dtype=getattr(tp, self.dtype),
                             device=self.device or device)
        return torch.tensor(self.values, dtype=getattr(torch, self.dtype),
                            device=self.device or torch_device(device))

    def describe(self) -> str:
        return f"T{tuple(self.values.shape)}:{self.dtype}" + (f"@{self.device}" if self.device
                                                               else "")


class Dtype:
    """A dtype argument: ``tp.<name>`` / ``torch.<name>``."""

    def __init__(self, name: str):
        self.name = name

    def make(self, side: str, device: str):
        return getattr(tp if side == "tp" else torch, self.name)

    def describe(self) -> str:
        return self.name


def T(*shape, dtype="float32", low=-3.0, high=3.0, special=False) -> Arg:  # noqa: N802
    """Random values in [low, high) (rounded for integer dtypes, non-negative for unsigned ones;
    ``special``: the first four are NaN, inf, -inf and 0)."""
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


def make(value, side: str, device: str):
    """``value`` on ``side``: Args and Dtypes made, tuples of them made item by item."""
    if isinstance(value, (Arg, Dtype)):
        return value.make(side, device)
    if isinstance(value, tuple):
        return tuple(make(item, side, device) for item in value)
    return value


def show(value) -> str:
    if isinstance(value, (Arg, Dtype)):
        return value.describe()
    if isinstance(value, tuple):
        return "(" + ", ".join(show(item) for item in value) + ("," if len(value) == 1 else "") \
            + ")"
    return repr(value)


# -- cases ----------------------------------------------------------------------------------------
class Case:
    """One call on both sides. ``kind``: ``function`` (``lib.fn``), ``linalg``
    (``lib.linalg.fn``), ``method`` (``args[0].fn``), ``inplace`` (``args[0].fn_``, which must
    return ``args[0]``) or ``out`` (``lib.fn(..., out=)`` into an empty tensor of the kwargs'
    ``out_dtype`` and ``out_shape``, which must be returned). ``known``: why tensorplay differs
    here; ``known_on``: tensorplay's device types where it shows (None: all).
    ``per_device``: torch's cpu and cuda answer differently (tensorplay answers as the one of its
    device's kind), so the case is left out where torch runs on another kind of device."""

    def __init__(self, fn: str, args, kwargs=None, *, kind: str = "function", tol=None,
                 known: str | None = None, known_on: tuple[str, ...] | None = None,
                 per_device: bool = False):
        self.fn, self.args, self.kwargs = fn, list(args), dict(kwargs or {})
        self.kind, self.tol = kind, tol
        self.known, self.known_on = known, known_on
        self.per_device = per_device

    def describe(self) -> str:
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        if self.kind == "linalg":
            return f"linalg.{self.fn}({', '.join(parts)})"
        return f"{self.kind} {self.fn}({', '.join(parts)})"


def run_side(case: Case, side: str, device: str):
    """``("ok", result)`` or ``("raise", exception)`` of ``case`` on ``side``."""
    lib = tp if side == "tp" else torch
    args = [make(a, side, device) for a in case.args]
    kwargs = {k: make(v, side, device) for k, v in case.kwargs.items()}
    try:
        if case.kind == "function":
            return "ok", getattr(lib, case.fn)(*args, **kwargs)
        if case.kind == "linalg":
            return "ok", getattr(lib.linalg, case.fn)(*args, **kwargs)
        if case.kind == "method":
            return "ok", getattr(args[0], case.fn)(*args[1:], **kwargs)
        if case.kind == "inplace":
            result = getattr(args[0], case.fn + "_")(*args[1:], **kwargs)
            if result is not args[0]:
                return "ok", "in-place form did not return self"
            return "ok", result
        out_dtype = kwargs.pop("out_dtype")
        out_shape = kwargs.pop("out_shape")
        out = lib.empty(out_shape, dtype=getattr(lib, out_dtype),
                        device=device if side == "tp" else torch_device(device))
        result = getattr(lib, case.fn)(*args, out=out, **kwargs)
        return "ok", result if result is out else "out= did not return out"
    except Exception as error:  # noqa: BLE001 - the exception is the answer
        return "raise", error


# -- comparison -----------------------------------------------------------------------------------
def host(value) -> np.ndarray:
    """A tensor of either library as a NumPy array (bfloat16 as float32)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().resolve_conj().resolve_neg()   # torch's lazy views
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()
    return value.cpu().numpy()


def widened(array: np.ndarray) -> np.ndarray:
    """Complex as complex128, integers and bools unchanged, the rest (floats; bfloat16 is a
    NumPy extension type) as float64."""
    if array.dtype.kind == "c":
        return array.astype(np.complex128)
    return array if array.dtype.kind in "biu" else array.astype(np.float64)


def dtype_name(value) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    return value.dtype.name


def category(error: BaseException) -> str:
    for kind in CATEGORIES:
        if isinstance(error, kind):
            return kind.__name__
    return type(error).__name__


def exceptions_agree(ours: BaseException, theirs: BaseException) -> bool:
    """Both of one category; an exception of several categories agrees when one is torch's."""
    return category(ours) == category(theirs) or any(
        isinstance(ours, kind) and isinstance(theirs, kind) for kind in CATEGORIES)


def describe_error(error: BaseException, limit: int = 200) -> str:
    return f"{type(error).__name__}: {str(error)[:limit]}"


def outcome_problem(ours, theirs, compare_results) -> str | None:
    """Why two ``run_side`` outcomes differ, or None; results that both sides returned go to
    ``compare_results(tp_value, torch_value)``."""
    (our_kind, our_value), (their_kind, their_value) = ours, theirs
    if our_kind == "raise" and their_kind == "raise":
        if exceptions_agree(our_value, their_value):
            return None
        return (f"exception tp {describe_error(our_value, 160)} | torch "
                f"{describe_error(their_value, 160)}")
    if our_kind == "raise":
        return f"only tp raises {describe_error(our_value)}"
    if their_kind == "raise":
        return f"only torch raises {describe_error(their_value)}"
    return compare_results(our_value, their_value)


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


def compare(case: Case, got, want, tolerance=TOLERANCE) -> str | None:
    """Why tensorplay's result ``got`` and torch's ``want`` differ, or None: strings and bools
    equal, tuples item by item, tensors of one shape and dtype with values within the case's
    tolerance (or the result dtype's)."""
    if isinstance(got, str) or isinstance(want, str):
        return None if got == want else f"tp {got!r} vs torch {want!r}"
    if isinstance(want, bool) or isinstance(got, bool):
        return None if got is want else f"tp {got!r} vs torch {want!r}"
    problem = structure_problem(got, want)
    if problem is not None:
        return problem
    if isinstance(got, tuple):
        for k, (g, w) in enumerate(zip(got, want)):
            problem = compare(case, g, w, tolerance)
            if problem is not None:
                return f"result {k}: {problem}"
        return None
    if tuple(got.shape) != tuple(want.shape):
        return f"shape tp {tuple(got.shape)} vs torch {tuple(want.shape)}"
    if dtype_name(got) != dtype_name(want):
        return f"dtype tp {dtype_name(got)} vs torch {dtype_name(want)}"
    a, b = widened(host(got)), widened(host(want))
    if a.dtype.kind in "biu":
        return None if np.array_equal(a, b) else \
            f"values differ at {int((a != b).sum())} of {a.size} elements"
    rtol, atol = case.tol or tolerance.get(dtype_name(got), (1e-6, 1e-6))
    if case.kind == "out":   # computed in the inputs' dtype, then cast to out's: theirs counts
        for arg in case.args:
            if isinstance(arg, Arg) and arg.dtype in tolerance:
                rtol = max(rtol, tolerance[arg.dtype][0])
                atol = max(atol, tolerance[arg.dtype][1])
    return values_problem(a, b, rtol, atol)


def values_problem(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> str | None:
    """Why float arrays ``a`` (tensorplay's) and ``b`` (torch's) are not close, or None."""
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"values differ at {int(bad.sum())} of {a.size} elements (e.g. {list(index)}: tp "
            f"{a[index]!r} torch {b[index]!r}; rtol {rtol}, atol {atol})")


def skip_if_removed_from_torch(outcome) -> None:
    """Skip when torch's outcome says this version removed the API (the Tensor methods
    ``cholesky qr svd`` were deprecated in torch 1.9 and later removed): nothing to compare."""
    kind, value = outcome
    if kind == "raise" and "is now removed" in str(value):
        pytest.skip(f"torch {torch.__version__} removed this API: {str(value)[:120]}")


def check(case: Case, device: str, compare_fn=compare) -> None:
    """Run ``case`` on both sides (tensorplay on ``device``) and fail with the difference."""
    theirs = run_side(case, "torch", device)
    skip_if_removed_from_torch(theirs)
    problem = outcome_problem(run_side(case, "tp", device), theirs,
                              lambda got, want: compare_fn(case, got, want))
    assert problem is None, f"{case.describe()} on {device}: {problem}"


# -- cases written as one function of the library ------------------------------------------------
class Lib:
    """What a case written as ``fn(L)`` needs from one library: its module (``L.mod``), its
    device (``L.dev``), and a seeded tensor (``L.t``)."""

    def __init__(self, side: str, device: str):
        self.side = side
        self.mod = tp if side == "tp" else torch
        self.dev = device if side == "tp" else torch_device(device)

    def dtype(self, name: str):
        return getattr(self.mod, name)

    def t(self, shape, dtype="float32", seed=0):
        rng = np.random.default_rng(seed)
        if dtype == "bool":
            array = rng.integers(0, 2, shape).astype(bool)
        elif dtype.startswith("int"):
            array = rng.integers(-5, 6, shape).astype(dtype)
        else:
            array = (rng.standard_normal(shape) * 3).astype(dtype)
        return self.mod.tensor(array, dtype=self.dtype(dtype), device=self.dev)

    def arange(self, n, dtype="float32"):
        return self.mod.arange(n, dtype=self.dtype(dtype), device=self.dev)


def run_fn(fn, side: str, device: str):
    """``("ok", fn(Lib))`` or ``("raise", exception)``; a result on an accelerator is waited for,
    so that an error the device reports late belongs to this call."""
    lib = Lib(side, device)
    try:
        result = fn(lib)
        if side == "torch" and lib.dev == "cuda":
            torch.cuda.synchronize()
        return "ok", result
    except Exception as error:  # noqa: BLE001 - the exception is the answer
        return "raise", error


class FnCase:
    """A case written once as a function of the library, ``fn(L)`` (see :class:`Lib`), named by
    ``name``. ``strides``: the results' strides must match too (where torch's result is a view);
    ``exact_exceptions``: exceptions must be of the same type, not only of one category; ``tol``:
    (rtol, atol) for float results (default 1e-4, 2e-2 for float16). ``known``, ``known_on`` and
    ``per_device`` as for :class:`Case`."""

    def __init__(self, name: str, fn, *, strides: bool = False, exact_exceptions: bool = False,
                 tol=None, known: str | None = None, known_on: tuple[str, ...] | None = None,
                 per_device: bool = False):
        self.name, self.fn, self.strides = name, fn, strides
        self.exact_exceptions, self.tol = exact_exceptions, tol
        self.known, self.known_on, self.per_device = known, known_on, per_device

    def describe(self) -> str:
        return self.name


def is_tensor(value) -> bool:
    return isinstance(value, (tp.Tensor, torch.Tensor))


def plain(value):
    """A dtype of either library as its name; anything else unchanged."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, tp.dtype):
        return value.name
    return value


def results_problems(case: FnCase, got, want, where: str = "") -> list[str]:
    """Why tensorplay's result ``got`` and torch's ``want`` differ: tuples and lists item by
    item, tensors by dtype, shape, values (and strides where asked), dtypes by name, other
    values by equality."""
    if isinstance(got, (tuple, list)) and isinstance(want, (tuple, list)):
        if len(got) != len(want):
            return [f"{where}{len(got)} results, torch {len(want)}"]
        return [problem for i, (g, w) in enumerate(zip(got, want))
                for problem in results_problems(case, g, w, f"{where}[{i}]")]
    if not (is_tensor(got) and is_tensor(want)):
        got, want = plain(got), plain(want)
        return [] if type(got) is type(want) and got == want else \
            [f"{where}tp {got!r}, torch {want!r}"]
    problems = []
    if dtype_name(got) != dtype_name(want):
        problems.append(f"{where}: dtype {dtype_name(got)}, torch {dtype_name(want)}")
    if tuple(got.shape) != tuple(want.shape):
        return problems + [f"{where}: shape {tuple(got.shape)}, torch {tuple(want.shape)}"]
    a, b = (widened(host(value)) for value in (got, want))
    if a.dtype.kind == "b":   # bools subtract as integers (for the difference reported)
        a, b = a.astype(np.int64), b.astype(np.int64)
    rtol, atol = case.tol or ((2e-2, 2e-2) if dtype_name(got) == "float16" else (1e-4, 1e-4))
    if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        problems.append(f"{where}: values differ (max abs diff {np.max(np.abs(a - b)):.3g})")
    if case.strides and got.stride() != want.stride() and int(np.prod(got.shape)) > 1:
        problems.append(f"{where}: strides {got.stride()}, torch {want.stride()}")
    return problems


def check_fn(case: FnCase, device: str) -> None:
    """Run ``case.fn`` on both sides (tensorplay on ``device``) and fail with the differences."""
    (our_kind, ours), (their_kind, theirs) = run_fn(case.fn, "tp", device), \
        run_fn(case.fn, "torch", device)
    if our_kind == "raise" or their_kind == "raise":
        if our_kind != "raise" or their_kind != "raise":
            problems = [f"tensorplay {describe_error(ours) if our_kind == 'raise' else 'ok'}, "
                        f"torch {describe_error(theirs) if their_kind == 'raise' else 'ok'}"]
        elif case.exact_exceptions and type(ours).__name__ != type(theirs).__name__:
            problems = [f"tensorplay raised {describe_error(ours)}, torch "
                        f"{describe_error(theirs)}"]
        elif not case.exact_exceptions and not exceptions_agree(ours, theirs):
            problems = [f"tensorplay raised {describe_error(ours)}, torch "
                        f"{describe_error(theirs)}"]
        else:
            problems = []
    else:
        problems = results_problems(case, ours, theirs)
    assert not problems, f"{case.name} on {device}: " + "; ".join(problems)
