"""Differential check of tensorplay's products and shape functions against PyTorch.

Builds the same inputs in both libraries and compares, case by case: the exception type (or
that neither raises), the dtype, the shape, the values, and for results that are views in
torch (diagonal, meshgrid, as_strided, one-operand einsum permutes) the strides. Runs on cuda
when both libraries see a GPU (tensorplay's selected accelerator otherwise, and cpu for torch);
without torch it says so and exits 0. Prints every mismatch, then "N cases, M mismatches".

    python3 benchmarks/torch_check_shapes.py [--cpu]
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

import tensorplay as tp

try:
    import torch
except ImportError:   # the check needs torch; the conformance suite covers NumPy references
    print("torch is not importable: nothing to compare (0 cases, 0 mismatches)")
    sys.exit(0)

warnings.simplefilter("ignore")   # both libraries warn for cross/meshgrid defaults

USE_CPU = "--cpu" in sys.argv
TP_DEV = "cpu" if USE_CPU or tp.accelerator.current_accelerator() is None else \
    f"{tp.accelerator.current_accelerator().type}:0"
TORCH_DEV = "cuda" if not USE_CPU and torch.cuda.is_available() else "cpu"

DTYPES = {"float32": (tp.float32, torch.float32), "float64": (tp.float64, torch.float64),
          "float16": (tp.float16, torch.float16), "int64": (tp.int64, torch.int64),
          "int32": (tp.int32, torch.int32), "bool": (tp.bool, torch.bool)}


class Lib:
    """What a case needs from one library: its module, how to make a tensor, and which."""

    def __init__(self, name: str):
        self.name = name
        self.mod = tp if name == "tp" else torch
        self.dev = TP_DEV if name == "tp" else TORCH_DEV

    def t(self, shape, dtype="float32", seed=0):
        rng = np.random.default_rng(seed)
        if dtype == "bool":
            array = rng.integers(0, 2, shape).astype(bool)
        elif dtype.startswith("int"):
            array = rng.integers(-5, 6, shape).astype(dtype)
        else:
            array = (rng.standard_normal(shape) * 3).astype(dtype)
        spec = DTYPES[dtype][0 if self.name == "tp" else 1]
        if self.name == "tp":
            return tp.tensor(array, dtype=spec, device=self.dev)
        return torch.tensor(array, dtype=spec, device=self.dev)

    def arange(self, n, dtype="float32"):
        spec = DTYPES[dtype][0 if self.name == "tp" else 1]
        return self.mod.arange(n, dtype=spec, device=self.dev)


def to_host(value):
    if isinstance(value, tp.Tensor):
        return value.cpu().numpy(), value.dtype.name, tuple(value.shape), value.stride()
    if isinstance(value, torch.Tensor):
        name = str(value.dtype).replace("torch.", "")
        return value.detach().cpu().numpy(), name, tuple(value.shape), value.stride()
    raise TypeError(type(value))


CASES: list[tuple[str, object, bool]] = []   # (name, fn(lib), compare strides)


#: cases where tensorplay differs from torch on purpose: name -> why (printed as KNOWN, not
#: counted as mismatches)
KNOWN: dict[str, str] = {}


def case(name: str, fn, strides: bool = False, known: str | None = None) -> None:
    CASES.append((name, fn, strides))
    if known:
        KNOWN[name] = known


# -- einsum ---------------------------------------------------------------------------------------
EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,i->", [(6,), (6,)]), ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]), ("ijk->kj", [(2, 3, 4)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]), ("ij,kl->ijkl", [(2, 3), (4, 5)]),
    ("Ab,bC->AC", [(3, 4), (4, 2)]), (" i j , j k -> i k ", [(3, 4), (4, 5)]),
    ("ij,j->i", [(3, 4), (4,)]), ("ij,kj->ik", [(0, 4), (3, 4)]), ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("ij,ij->i", [(1, 4), (3, 4)]), ("...ij->ij", [(2, 3, 4)]), ("iji->j", [(3, 2, 3)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]), ("ij->ij", [(3, 4)]), ("i->", [(5,)]),
    ("bij->bji", [(2, 3, 4)]), ("ij,jk->ki", [(3, 4), (4, 5)]), ("i,i->i", [(4,), (1,)]),
]
for eq, shapes in EINSUM:
    for dtype in ("float32", "float64"):
        case(f"einsum {eq!r} {shapes} {dtype}",
             lambda L, eq=eq, shapes=shapes, dtype=dtype: L.mod.einsum(
                 eq, *[L.t(s, dtype, i) for i, s in enumerate(shapes)]),
             strides=len(shapes) == 1 and "->" in eq and eq.split("->")[1] != "")
case("einsum float16 matmul", lambda L: L.mod.einsum("ij,jk->ik", L.t((4, 8), "float16"),
                                                    L.t((8, 3), "float16", 1)))
case("einsum int64 sum", lambda L: L.mod.einsum("ij->j", L.t((3, 4), "int64")))
case("einsum int64 contraction", lambda L: L.mod.einsum("ij,jk->ik", L.t((3, 4), "int64"),
                                                        L.t((4, 2), "int64", 1)))
case("einsum int64 outer", lambda L: L.mod.einsum("i,j->ij", L.t((3,), "int64"),
                                                  L.t((4,), "int64", 1)))
case("einsum list form", lambda L: L.mod.einsum("ij,jk", [L.t((3, 4)), L.t((4, 5), seed=1)]))
case("einsum sublist", lambda L: L.mod.einsum(L.t((3, 4)), [0, 1], L.t((4, 5), seed=1), [1, 2],
                                              [0, 2]))
case("einsum sublist implicit", lambda L: L.mod.einsum(L.t((3, 4)), [0, 1], L.t((4, 5), seed=1),
                                                       [1, 2]))
for eq, shapes in [("ij,jk->ik", [(2, 3)]), ("ij->ij", [(2, 3), (3, 4)]),
                   ("ij->ij", [(2, 3, 4)]), ("ijkl...->", [(2, 3)]), ("i1->i", [(2, 3)]),
                   ("i.j->i", [(2, 3)]), ("......->", [(2, 3)]), ("ij->ii", [(2, 3)]),
                   ("ij->k", [(2, 3)]), ("ii->i", [(2, 3)]), ("ij,ij->ij", [(2, 3), (2, 4)]),
                   ("->", [])]:
    case(f"einsum error {eq!r} {shapes}",
         lambda L, eq=eq, shapes=shapes: L.mod.einsum(eq, *[L.t(s) for s in shapes]))
case("einsum mixed dtypes", lambda L: L.mod.einsum("i,i->", L.t((3,)), L.t((3,), "float64")))

# -- tensordot, kron, cross ----------------------------------------------------------------------
for shapes, dims in [(((3, 4, 5), (4, 5, 6)), 2), (((3, 4), (4, 5)), 1), (((3, 4), (5, 6)), 0),
                     (((3, 4, 5), (5, 3, 2)), ([0, 2], [1, 0])), (((2, 3), (3, 2)), ([1], [0])),
                     (((2, 3), (2, 3)), ([0, 1], [0, 1])), (((4,), (4,)), 1),
                     (((3, 0), (0, 2)), 1), (((2, 3), (3, 4)), -1), (((2, 3), (3, 4)), 3),
                     (((2, 3), (3, 4)), ([0], [0])), (((2, 3), (3, 4)), ([0, 1], [0])),
                     (((2, 3), (3, 4)), ([5], [0]))]:
    for dtype in ("float32", "float64"):
        case(f"tensordot {shapes} dims={dims} {dtype}",
             lambda L, shapes=shapes, dims=dims, dtype=dtype: L.mod.tensordot(
                 L.t(shapes[0], dtype), L.t(shapes[1], dtype, 1), dims=dims))
case("tensordot mixed dtypes", lambda L: L.mod.tensordot(L.t((2, 3)), L.t((3, 4), "float64"), 1))
case("tensordot int64", lambda L: L.mod.tensordot(L.t((2, 3), "int64"), L.t((3, 4), "int64"), 1))

for sa, sb in [((2, 3), (4, 5)), ((3,), (2, 2)), ((2, 1, 3), (2, 2)), ((), (3,)),
               ((0, 2), (3, 1)), ((2, 2), (2, 2))]:
    for dtype in ("float32", "int64", "bool"):
        case(f"kron {sa} {sb} {dtype}", lambda L, sa=sa, sb=sb, dtype=dtype: L.mod.kron(
            L.t(sa, dtype), L.t(sb, dtype, 1)))
case("kron promotes", lambda L: L.mod.kron(L.t((2,), "int32"), L.t((2,), "float64")))
case("kron method", lambda L: L.t((2, 2)).kron(L.t((3,), seed=1)))

for shape, dim in [((3,), 0), ((4, 3), -1), ((3, 5), 0), ((2, 3, 4), 1), ((3, 3), None),
                   ((2, 3), None), ((4, 3), 0), ((2, 4), None), ((3, 3), 2)]:
    for dtype in ("float32", "int64"):
        case(f"cross {shape} dim={dim} {dtype}", lambda L, shape=shape, dim=dim, dtype=dtype:
             L.mod.cross(L.t(shape, dtype), L.t(shape, dtype, 1), dim=dim))
case("cross broadcast", lambda L: L.mod.cross(L.t((1, 3)), L.t((4, 3), seed=1), dim=1))
case("cross ranks differ", lambda L: L.mod.cross(L.t((4, 3)), L.t((3,), seed=1), dim=-1))
case("cross mixed dtypes", lambda L: L.mod.cross(L.t((3,)), L.t((3,), "float64"), dim=0))
case("cross method", lambda L: L.t((2, 3)).cross(L.t((2, 3), seed=1), 1))

# -- diagonals and triangles ---------------------------------------------------------------------
for offset, d1, d2 in [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (0, -1, 0), (5, 0, 1),
                       (-7, 1, 2), (0, 2, 0), (1, 1, 1)]:
    case(f"diagonal offset={offset} dims=({d1},{d2})",
         lambda L, o=offset, a=d1, b=d2: L.mod.diagonal(L.t((3, 4, 5)), o, a, b), strides=True)
    case(f"diagonal of a transposed view offset={offset} dims=({d1},{d2})",
         lambda L, o=offset, a=d1, b=d2: L.t((5, 4, 3)).permute(2, 1, 0).diagonal(o, a, b),
         strides=True)
case("diagonal 1-D", lambda L: L.mod.diagonal(L.t((3,))))
case("diagonal 0-D", lambda L: L.t(()).diagonal())
for k in (0, 1, -2, 4):
    for shape in ((4,), (3, 5), (5, 3), (0,), (2, 2, 2), ()):
        case(f"diag {shape} {k}", lambda L, s=shape, k=k: L.mod.diag(L.t(s), k))
case("diag bool", lambda L: L.mod.diag(L.t((3,), "bool")))
case("diag int64 matrix", lambda L: L.t((3, 3), "int64").diag(1))
for dtype in ("float32", "int32", "bool", "float64"):
    case(f"trace {dtype}", lambda L, d=dtype: L.mod.trace(L.t((3, 4), d)))
case("trace 1-D", lambda L: L.mod.trace(L.t((3,))))
case("trace 3-D", lambda L: L.t((2, 2, 2)).trace())
for op in ("tril", "triu"):
    for k in (0, 1, -1, 5, -5):
        for dtype in ("float32", "bool", "int64"):
            case(f"{op} k={k} {dtype}", lambda L, op=op, k=k, d=dtype: getattr(L.mod, op)(
                L.t((2, 3, 4), d), k))
    case(f"{op}_ in place", lambda L, op=op: getattr(L.t((4, 4)), f"{op}_")(-1))
    case(f"{op}_ on a view", lambda L, op=op: (lambda t: (getattr(t[1:, 1:], f"{op}_")(), t)[1])(
        L.t((5, 5))))
    case(f"{op} 1-D", lambda L, op=op: getattr(L.mod, op)(L.t((3,))))
    case(f"{op}_ expanded", lambda L, op=op: getattr(L.t((1, 3)).expand(3, 3), f"{op}_")(),
         known="tensorplay refuses in-place writes into an expanded view, whose elements share "
               "memory (torch's own overlap check for most in-place ops); torch's tril_/triu_ "
               "skip that check and write racing values")

# -- repeat, tile, roll, flip --------------------------------------------------------------------
for shape, reps in [((2, 3), (2, 2)), ((2, 3), (3, 1, 2)), ((3,), (2,)), ((), (2, 3)),
                    ((2, 3), (0, 2)), ((2, 1), (1, 1)), ((2, 3), (2,)), ((2, 3), (-1, 2))]:
    case(f"repeat {shape} {reps}", lambda L, s=shape, r=reps: L.t(s).repeat(*r))
    case(f"tile {shape} {reps}", lambda L, s=shape, r=reps: L.mod.tile(L.t(s), r))
    case(f"tile method {shape} {reps}", lambda L, s=shape, r=reps: L.t(s).tile(*r))
case("repeat tuple", lambda L: L.t((2, 3)).repeat((2, 1)))
for shifts, dims in [(1, None), (-2, None), (1, 0), ((1, -1), (0, 1)), (7, 1), ((2, 1), (1, 1)),
                     ((1,), None), ((1, 2), 0), ((1, 2), None), (1, 2)]:
    for dtype in ("float32", "int64"):
        case(f"roll {shifts} {dims} {dtype}", lambda L, s=shifts, d=dims, t=dtype: L.mod.roll(
            L.t((3, 4), t), s, d))
case("roll empty", lambda L: L.mod.roll(L.t((0, 2)), 1, 0))
case("roll 0-d", lambda L: L.mod.roll(L.t(()), 1))
for dims in (0, (1,), (0, 2), [-1, 0], (), (0, -3), 3):
    case(f"flip {dims}", lambda L, d=dims: L.mod.flip(L.t((2, 3, 4)), d))
case("flip method varargs", lambda L: L.t((2, 3)).flip(0, 1))
case("flip bool", lambda L: L.t((2, 3), "bool").flip(1))

# -- meshgrid ------------------------------------------------------------------------------------
for indexing in ("ij", "xy", None):
    for shapes in (((3,), (4,)), ((3,), (4,), (2,)), ((), (3,)), ((2,),), ((1,), (3,))):
        def grids(L, shapes=shapes, indexing=indexing):
            tensors = [L.t(s, seed=i) for i, s in enumerate(shapes)]
            if indexing is None:
                return L.mod.meshgrid(*tensors)
            return L.mod.meshgrid(*tensors, indexing=indexing)
        case(f"meshgrid {shapes} {indexing}", grids, strides=True)
case("meshgrid list", lambda L: L.mod.meshgrid([L.t((2,)), L.t((3,))], indexing="xy"),
     strides=True)
case("meshgrid bad indexing", lambda L: L.mod.meshgrid(L.t((2,)), L.t((3,)), indexing="ji"))
case("meshgrid 2-D", lambda L: L.mod.meshgrid(L.t((2,)), L.t((3, 2)), indexing="ij"))
case("meshgrid dtypes", lambda L: L.mod.meshgrid(L.t((2,)), L.t((3,), "float64"),
                                                 indexing="ij"))

# -- as_strided ----------------------------------------------------------------------------------
for size, stride, offset in [((3, 3), (3, 1), None), ((4, 3), (2, 1), 1), ((2, 2), (1, 4), 0),
                             ((0, 5), (100, 100), 11), ((4, 4), (4, 1), None),
                             ((2,), (1,), 11), ((2, 2), (1,), 0), ((2,), (-1,), 0),
                             ((-2,), (1,), 0), ((2,), (1,), -1), ((3,), (0,), 2),
                             ((12,), (1,), 0), ((1,), (1,), 11)]:
    case(f"as_strided {size} {stride} {offset}", lambda L, s=size, st=stride, o=offset:
         L.mod.as_strided(L.arange(12), s, st) if o is None else
         L.mod.as_strided(L.arange(12), s, st, o), strides=True)
for size, stride, offset in [((2,), (1,), None), ((2,), (1,), 10), ((3,), (1,), 0),
                             ((7,), (1,), None), ((2, 2), (4, 1), None)]:
    case(f"as_strided of a slice {size} {stride} {offset}",
         lambda L, s=size, st=stride, o=offset:
         L.arange(12)[4:].as_strided(s, st) if o is None else
         L.arange(12)[4:].as_strided(s, st, o), strides=True)
case("as_strided of a transpose", lambda L: L.arange(12).view(3, 4).t().as_strided((2, 2),
                                                                                   (1, 4)),
     strides=True)


# -- the comparison ------------------------------------------------------------------------------
def run(fn, lib):
    try:
        return fn(lib), None
    except Exception as exc:  # noqa: BLE001 - the exception type is what is compared
        return None, exc


def compare(name, fn, strides) -> list[str]:
    ours, our_exc = run(fn, Lib("tp"))
    theirs, their_exc = run(fn, Lib("torch"))
    if our_exc is not None or their_exc is not None:
        if our_exc is None or their_exc is None:
            return [f"{name}: tensorplay {type(our_exc).__name__ if our_exc else 'ok'} "
                    f"({our_exc}), torch {type(their_exc).__name__ if their_exc else 'ok'} "
                    f"({their_exc})"]
        # torch's "not implemented for" errors are NotImplementedError, others RuntimeError
        if type(our_exc).__name__ != type(their_exc).__name__:
            return [f"{name}: tensorplay raised {type(our_exc).__name__} ({our_exc}), torch "
                    f"{type(their_exc).__name__} ({their_exc})"]
        return []
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    theirs = list(theirs) if isinstance(theirs, tuple) else [theirs]
    if len(ours) != len(theirs):
        return [f"{name}: {len(ours)} results, torch {len(theirs)}"]
    problems = []
    for i, (a, b) in enumerate(zip(ours, theirs)):
        va, da, sa, st_a = to_host(a)
        vb, db, sb, st_b = to_host(b)
        if da != db:
            problems.append(f"{name}[{i}]: dtype {da}, torch {db}")
        if sa != sb:
            problems.append(f"{name}[{i}]: shape {sa}, torch {sb}")
            continue
        tol = 2e-2 if da == "float16" else 1e-4
        if not np.allclose(va.astype(np.float64), vb.astype(np.float64), rtol=tol, atol=tol,
                           equal_nan=True):
            problems.append(f"{name}[{i}]: values differ (max abs diff "
                            f"{np.max(np.abs(va.astype(np.float64) - vb)):.3g})")
        if strides and st_a != st_b and np.prod(sa) > 1:
            problems.append(f"{name}[{i}]: strides {st_a}, torch {st_b}")
    return problems


def main() -> int:
    print(f"tensorplay {tp.__version__} on {TP_DEV}, torch {torch.__version__} on {TORCH_DEV}")
    mismatches = 0
    for name, fn, strides in CASES:
        problems = compare(name, fn, strides)
        label = "KNOWN" if name in KNOWN else "MISMATCH"
        for problem in problems:
            print(label, problem + (f" ({KNOWN[name]})" if name in KNOWN else ""))
        mismatches += bool(problems) and name not in KNOWN
    print(f"{len(CASES)} cases, {mismatches} mismatches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
