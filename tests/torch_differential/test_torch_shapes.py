"""tensorplay's products and shape functions against torch, case by case: ``einsum tensordot
kron cross diagonal diag trace tril triu repeat tile roll flip meshgrid as_strided``: exception
types (or that neither raises), dtypes, shapes, values, and for results that are views in torch
(diagonal, meshgrid, as_strided, one-operand einsum permutes) the strides.
"""

import pytest

pytest.importorskip("torch")

from ._compare import FnCase, check_fn, params  # noqa: E402

#: both libraries warn for cross/meshgrid defaults
pytestmark = pytest.mark.filterwarnings("ignore")

CASES: list[FnCase] = []


def case(name: str, fn, strides: bool = False, known: str | None = None,
         per_device: bool = False, known_on: tuple[str, ...] | None = None) -> None:
    """A case: ``fn(L)`` on both sides; exceptions must be of one type (torch's "not implemented
    for" errors are NotImplementedError, others RuntimeError)."""
    CASES.append(FnCase(name, fn, strides=strides, exact_exceptions=True, known=known,
                        known_on=known_on, per_device=per_device))


TRACE_BOOL = ("torch's cpu has no bool trace (NotImplementedError); its CUDA one sums the bools "
              "as int64, as tensorplay's trace does on every device")

#: integer matrix products: torch's cpu computes them, its CUDA refuses them
INT_PRODUCT = {"per_device": True}


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
                                                        L.t((4, 2), "int64", 1)), **INT_PRODUCT)
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
case("tensordot int64", lambda L: L.mod.tensordot(L.t((2, 3), "int64"), L.t((3, 4), "int64"), 1),
     **INT_PRODUCT)

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
    case(f"trace {dtype}", lambda L, d=dtype: L.mod.trace(L.t((3, 4), d)),
         known=TRACE_BOOL if dtype == "bool" else None, known_on=("cpu", "sim"))
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


@pytest.mark.parametrize("device,case", params(lambda device: CASES))
def test_shapes_agree_with_torch(device, case):
    check_fn(case, device)
