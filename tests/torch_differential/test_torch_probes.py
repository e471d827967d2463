"""Edge cases where torch's behaviour was unclear until asked, checked against tensorplay: complex
values written into real tensors, Python ints beyond int64, bool arithmetic, negative and int32
indices, searchsorted/histc/equal across dtypes, einsum's strides, complex activations, the
random samplers' refusals, linalg's errors, matrix products and ``F.linear``'s shapes, and (on
cuda) which linalg functions a graph captures.

Each case is written once as a function of the library (``L.mod`` is ``tensorplay`` or ``torch``,
``L.dev`` its device) and both outcomes must agree: exceptions of one category, or equal results
(tensors by dtype, shape and values; dtypes by name; other values by equality).
"""

import gc

import pytest

torch = pytest.importorskip("torch")

import tensorplay as tp  # noqa: E402
from support import requires_accelerator  # noqa: E402

from ._compare import (FnCase, Lib, category, check_fn, is_host, params,  # noqa: E402
                       torch_device)

#: torch's deprecation and copy-construction notes
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CASES: list[FnCase] = []
NAN_SIGN = ("copysign(x, NaN) in bfloat16: torch's bfloat16 kernels (cpu and CUDA) ignore the "
            "NaN's sign; tensorplay takes the NaN's sign bit in every dtype (IEEE 754), as torch's "
            "float16/float32/float64 kernels do")
TRIL_EXPANDED = ("tensorplay refuses in-place writes into an expanded view, whose elements share "
                 "memory (torch's own overlap check for most in-place ops); torch's tril_/triu_ "
                 "skip that check and write racing values")

EINSUM_STRIDES = ("tensorplay returns an einsum contraction as a permute of its one matmul's "
                  "result (that permute's strides); torch returns it contiguous. Values, dtypes "
                  "and shapes agree; strides are held to torch's only for views")


def case(name: str, fn, *, host_only: bool = False, **options) -> None:
    """A case: ``fn(L)`` on both sides. ``host_only``: torch's CUDA answers with a device-side
    assert (which ends every later CUDA call of the process) and tensorplay leaves the outcome
    unspecified on accelerators, so it runs on the host only."""
    made = FnCase(name, fn, **options)
    made.host_only = host_only
    CASES.append(made)


def tensor(L, values, dtype=None):  # noqa: N803
    return L.mod.tensor(values, dtype=None if dtype is None else L.dtype(dtype), device=L.dev)


def assigned(t, index, value):
    t[index] = value
    return t


# -- what a new user tried --------------------------------------------------------------------
case("fill_ 1+2j on float", lambda L: L.mod.zeros(2, device=L.dev).fill_(1 + 2j))
case("fill_ 2+0j on float", lambda L: L.mod.zeros(2, device=L.dev).fill_(2 + 0j))
case("fill_ 1j on bool", lambda L: L.mod.zeros(2, dtype=L.dtype("bool"), device=L.dev).fill_(1j))
case("full 1j float32", lambda L: L.mod.full((2,), 1j, dtype=L.dtype("float32"), device=L.dev))
case("masked_fill 1j on float", lambda L: L.mod.zeros(2, device=L.dev).masked_fill(
    tensor(L, [True, False]), 1j))
case("setitem 2j on float", lambda L: assigned(L.mod.zeros(2, device=L.dev), 0, 2j))
case("abs complex64", lambda L: L.mod.abs(tensor(L, [3 + 4j])).dtype)
case("abs_ complex64", lambda L: tensor(L, [3 + 4j]).abs_())
case("sign bool", lambda L: L.mod.sign(tensor(L, [True, False])))
case("square bool", lambda L: L.mod.square(tensor(L, [True])).dtype)
case("int64 + 2**63", lambda L: tensor(L, [1]) + 2 ** 63)
case("float32 + 2**63", lambda L: tensor(L, [1.0]) + 2 ** 63)
case("uint64 + 2**63", lambda L: tensor(L, [1], "uint64") + 2 ** 63,
     known="torch implements few kernels for uint64 (add: NotImplementedError); tensorplay's "
           "elementwise kernels take every integer dtype")
case("float32 + 2**64", lambda L: tensor(L, [1.0]) + 2 ** 64)
case("t == None", lambda L: L.mod.ones(2, device=L.dev) == None)  # noqa: E711
case("eq(t, None)", lambda L: L.mod.eq(L.mod.ones(2, device=L.dev), None))
case("arange(t(1), t(3))", lambda L: L.mod.arange(L.mod.tensor(1), L.mod.tensor(3),
                                                  device=L.dev))
case("arange(t(2.0 f64))", lambda L: L.mod.arange(L.mod.tensor(2.0, dtype=L.dtype("float64")),
                                                  device=L.dev).dtype)
case("arange(t([5]))", lambda L: L.mod.arange(L.mod.tensor([5]), device=L.dev))
case("linspace(0, 1j, 3)", lambda L: L.mod.linspace(0, 1j, 3, device=L.dev))


def _minus_one(L):  # noqa: N802
    return tensor(L, [-1])


case("gather -1", lambda L: L.mod.gather(L.arange(4), 0, _minus_one(L)), host_only=True)
case("index_select -1", lambda L: L.mod.index_select(L.arange(4), 0, _minus_one(L)),
     host_only=True)
case("take_along_dim -1", lambda L: L.mod.take_along_dim(L.arange(4), _minus_one(L), 0),
     host_only=True)
case("index_add -1", lambda L: L.mod.zeros(4, device=L.dev).index_add(
    0, _minus_one(L), L.mod.ones(1, device=L.dev)), host_only=True)
case("index_copy -1", lambda L: L.mod.zeros(4, device=L.dev).index_copy(
    0, _minus_one(L), L.mod.ones(1, device=L.dev)), host_only=True)
case("index_fill -1", lambda L: L.mod.zeros(4, device=L.dev).index_fill(0, _minus_one(L), 1.0),
     host_only=True)
case("index_put acc -1", lambda L: L.mod.zeros(4, device=L.dev).index_put(
    (_minus_one(L),), L.mod.ones(1, device=L.dev), accumulate=True), host_only=True)
case("scatter -1", lambda L: L.mod.zeros(4, device=L.dev).scatter(
    0, _minus_one(L), L.mod.ones(1, device=L.dev)), host_only=True)
case("x[[]]", lambda L: L.arange(6)[[]])
case("tensor(t) keeps t's device", lambda L: (lambda t: L.mod.tensor(t).device == t.device)(
    L.mod.ones(2, device=L.dev)))
# the mean of 1000 + U(0, 1) is far from 0: a one-pass float32 variance would lose every digit
case("var(0) of rand+1000", lambda L: (L.mod.rand(100_000, 2, device=L.dev) + 1000).var(0),
     tol=(3e-2, 0.0))


# -- torch's rules across dtypes and devices --------------------------------------------------
case("searchsorted f32 seq, f64 values", lambda L: L.mod.searchsorted(
    tensor(L, [1.0, 2.0, 3.0]), tensor(L, [1.5, 2.0], "float64")))
case("searchsorted i64 seq, f32 values", lambda L: L.mod.searchsorted(
    tensor(L, [1, 2, 3]), tensor(L, [1.5, 2.0])))
case("searchsorted nan", lambda L: L.mod.searchsorted(
    tensor(L, [1.0, 2.0, float("nan")]), tensor(L, [float("nan"), 1.5, 3.0])))
case("searchsorted nan right", lambda L: L.mod.searchsorted(
    tensor(L, [1.0, 2.0, float("nan")]), tensor(L, [float("nan"), 1.5, 3.0]), right=True))
case("index_add int alpha=0.5", lambda L: L.mod.index_add(
    L.mod.ones(3, 2, dtype=L.dtype("int64"), device=L.dev), 0, tensor(L, [0, 2]),
    L.mod.full((2, 2), 4, dtype=L.dtype("int64"), device=L.dev), alpha=0.5))
case("index_add int alpha=1.7", lambda L: L.mod.index_add(
    L.mod.ones(3, 2, dtype=L.dtype("int64"), device=L.dev), 0, tensor(L, [0, 2]),
    L.mod.full((2, 2), 4, dtype=L.dtype("int64"), device=L.dev), alpha=1.7))
# torch's cpu refuses integer histograms and its CUDA float16 ones
case("histc int64", lambda L: L.mod.histc(tensor(L, [0, 1, 1, 5]), 4), per_device=True)
case("histc int64 bounds", lambda L: L.mod.histc(tensor(L, [0, 1, 1, 5]), 5, 0, 5),
     per_device=True)
case("histc uint8", lambda L: L.mod.histc(tensor(L, [0, 1, 1, 5], "uint8"), 3), per_device=True)
case("histc float16", lambda L: L.mod.histc(tensor(L, [0, 1, 1, 5], "float16"), 3),
     per_device=True, known_on=("cuda",),
     known="tensorplay's histc takes float16 on every device; torch's CUDA kernel refuses it "
           "('HalfTensor is not supported')")
case("equal f32 f64", lambda L: L.mod.equal(L.mod.ones(2, device=L.dev),
                                            L.mod.ones(2, dtype=L.dtype("float64"),
                                                       device=L.dev)))
case("equal i64 i32", lambda L: L.mod.equal(L.mod.ones(2, dtype=L.dtype("int64"), device=L.dev),
                                            L.mod.ones(2, dtype=L.dtype("int32"), device=L.dev)))
case("equal f32 f64 differ", lambda L: L.mod.equal(tensor(L, [0.1]),
                                                   tensor(L, [0.1], "float64")))


def _int32_index(L):  # noqa: N802
    return tensor(L, [[2, 0]], "int32")


case("scatter int32 index", lambda L: L.mod.scatter(
    L.mod.zeros(3, 2, device=L.dev), 0, _int32_index(L), L.mod.ones(1, 2, device=L.dev)))
case("gather int32 index", lambda L: L.mod.gather(L.arange(6).reshape(3, 2), 0, _int32_index(L)))
case("scatter_add int32 index", lambda L: L.mod.scatter_add(
    L.mod.zeros(3, 2, device=L.dev), 0, _int32_index(L), L.mod.ones(1, 2, device=L.dev)))
case("scatter_reduce int32 index", lambda L: L.mod.scatter_reduce(
    L.mod.zeros(3, 2, device=L.dev), 0, _int32_index(L), L.mod.ones(1, 2, device=L.dev), "amax"))
case("take_along_dim int32", lambda L: L.mod.take_along_dim(
    L.arange(6).reshape(3, 2), _int32_index(L), 0))
case("index_copy int32", lambda L: L.mod.index_copy(
    L.mod.zeros(3, 2, device=L.dev), 0, tensor(L, [1], "int32"), L.mod.ones(1, 2, device=L.dev)))
case("index_fill int32", lambda L: L.mod.index_fill(
    L.mod.zeros(3, 2, device=L.dev), 0, tensor(L, [1], "int32"), 1.0))
case("scatter_reduce max", lambda L: L.mod.scatter_reduce(
    L.mod.zeros(3, 2, device=L.dev), 0, tensor(L, [[2, 0]]), L.mod.ones(1, 2, device=L.dev),
    "max"))
case("scatter_reduce min", lambda L: L.mod.scatter_reduce(
    L.mod.zeros(3, 2, device=L.dev), 0, tensor(L, [[2, 0]]), L.mod.ones(1, 2, device=L.dev),
    "min"))
for equation, shapes in (("ij->ji", [(2, 3)]), ("ijk->kj", [(2, 3, 4)]),
                         ("ijk->kij", [(2, 3, 4)]), ("ii->i", [(3, 3)]),
                         ("ij,jk->ki", [(2, 3), (3, 4)]), ("ijk,k->ji", [(2, 3, 4), (4,)])):
    case(f"einsum {equation} strides",
         lambda L, equation=equation, shapes=shapes: L.mod.einsum(
             equation, *[L.mod.ones(*shape, device=L.dev) for shape in shapes]).stride(),
         known=EINSUM_STRIDES if len(shapes) > 1 else None)
case("tril_ expanded", lambda L: L.mod.ones(1, 3, device=L.dev).expand(3, 3).tril_(),
     known=TRIL_EXPANDED)
case("silu complex", lambda L: L.mod.nn.functional.silu(tensor(L, [1 + 1j, -2j])))
case("logaddexp complex", lambda L: L.mod.logaddexp(tensor(L, [1 + 1j, -2j]),
                                                    tensor(L, [0.5 - 1j, 3 + 0j])))
case("logaddexp complex inf", lambda L: L.mod.logaddexp(
    tensor(L, [complex("inf"), complex("-inf")]), tensor(L, [complex("inf"), 1 + 0j])))
case("copysign bf16 nan sign", lambda L: L.mod.copysign(
    L.mod.ones(2, dtype=L.dtype("bfloat16"), device=L.dev),
    tensor(L, [float("nan"), -float("nan")], "bfloat16")), known=NAN_SIGN)
case("bf16 nan from float64 bits", lambda L: tensor(L, [float("nan")], "bfloat16").view(
    L.dtype("int16")))
case("linear 1-D weight 0-d bias", lambda L: L.mod.nn.functional.linear(
    L.mod.ones(2, 4, 5, device=L.dev), L.mod.ones(5, device=L.dev),
    L.mod.tensor(1.0, device=L.dev)))
case("multinomial", lambda L: L.mod.multinomial(tensor(L, [0.2, 0.8]), 3, True).dtype)
case("multinomial no replacement too many", lambda L: L.mod.multinomial(tensor(L, [0.2, 0.8]), 3))
case("multinomial negative", lambda L: L.mod.multinomial(tensor(L, [-0.2, 0.8]), 1),
     host_only=True)
case("multinomial zero sum", lambda L: L.mod.multinomial(tensor(L, [0.0, 0.0]), 1),
     host_only=True)
case("multinomial int", lambda L: L.mod.multinomial(tensor(L, [1, 2]), 1))
case("multinomial 3-d", lambda L: L.mod.multinomial(L.mod.ones(2, 2, 2, device=L.dev), 1))
case("poisson dtype", lambda L: L.mod.poisson(tensor(L, [1.0, 5.0])).dtype)
case("poisson negative", lambda L: L.mod.poisson(tensor(L, [-1.0])), host_only=True)
case("poisson int", lambda L: L.mod.poisson(tensor(L, [1, 2])))
case("linalg.norm int", lambda L: L.mod.linalg.norm(tensor(L, [3, 4])))
case("linalg.inv singular", lambda L: L.mod.linalg.inv(L.mod.zeros(2, 2, device=L.dev)))
case("linalg.cholesky not pd", lambda L: L.mod.linalg.cholesky(-L.mod.eye(2, device=L.dev)))
case("linalg.solve shapes", lambda L: L.mod.linalg.solve(L.mod.eye(2, device=L.dev),
                                                         L.mod.ones(3, device=L.dev)))
case("linalg.det int", lambda L: L.mod.linalg.det(L.mod.eye(2, dtype=L.dtype("int64"),
                                                            device=L.dev)))
case("linalg.eigh nonsquare", lambda L: L.mod.linalg.eigh(L.mod.ones(2, 3, device=L.dev)))
case("linalg.svd f16", lambda L: L.mod.linalg.svd(L.mod.ones(2, 2, dtype=L.dtype("float16"),
                                                             device=L.dev)))


# -- bad inputs and overflow ------------------------------------------------------------------
def _seeded(L, seed):  # noqa: N802
    L.mod.manual_seed(seed)
    return L.mod.initial_seed()


case("manual_seed(2.0)", lambda L: _seeded(L, 2.0))
case("manual_seed(2.5)", lambda L: _seeded(L, 2.5),
     known="tensorplay refuses a seed that is a float with a fraction (TypeError); torch "
           "truncates it")
case("bool-1", lambda L: tensor(L, [True, False]) - 1)
case("bool//bool", lambda L: tensor(L, [True, False]) // tensor(L, [True, False]))
case("bool%bool", lambda L: tensor(L, [True, False]) % tensor(L, [True, False]))
case("bool**bool", lambda L: tensor(L, [True, False]) ** tensor(L, [True, False]))
case("int**-1", lambda L: tensor(L, [2]) ** -1)
case("int8 300", lambda L: tensor(L, [300], "int8"))
case("2**63", lambda L: tensor(L, [2 ** 63]))
case("unsqueeze stride", lambda L: L.mod.zeros(3, 4, device=L.dev).unsqueeze(1).stride())
case("int//0", lambda L: tensor(L, [1]) // 0, host_only=True)   # cuda: no check, any value
case("arange inf", lambda L: L.mod.arange(0, float("inf"), device=L.dev))
case("ragged", lambda L: tensor(L, [[1, 2], [3]]))
case("a[1.5]", lambda L: L.mod.zeros(3, device=L.dev)[1.5])
case("randint int8", lambda L: L.mod.randint(0, 300, (4,), dtype=L.dtype("int8"), device=L.dev))
case("complex <", lambda L: tensor(L, [1j]) < tensor(L, [2j]))
case("float &", lambda L: tensor(L, [1.0]) & tensor(L, [1.0]))
case("empty(3,0).stride", lambda L: L.mod.empty(3, 0, device=L.dev).stride(),
     known_on=("cpu", "cuda"),
     known="not matched yet: an empty tensor on the host and on cuda reports NumPy's and "
           "CuPy's zero strides; torch (and the simulated accelerator) report contiguous ones")
case("uint8 -1", lambda L: tensor(L, [-1], "uint8"))


# -- matrix products --------------------------------------------------------------------------
def _precision_after(L, value):  # noqa: N802
    """Set the float32 matmul precision to ``value``, read it back, and restore it."""
    before = L.mod.get_float32_matmul_precision()
    try:
        L.mod.set_float32_matmul_precision(value)
        return L.mod.get_float32_matmul_precision()
    finally:
        L.mod.set_float32_matmul_precision(before)


def _ints(L):  # noqa: N802
    return L.mod.arange(12, device=L.dev).reshape(3, 4)


def _x(L):  # noqa: N802
    return L.mod.ones(8, 3, device=L.dev)


def _linear(L, *args):  # noqa: N802
    return L.mod.nn.functional.linear(*args)


case("set_float32_matmul_precision('fast')", lambda L: _precision_after(L, "fast"))
case("set_float32_matmul_precision(3)", lambda L: _precision_after(L, 3))
case("get_float32_matmul_precision()", lambda L: L.mod.get_float32_matmul_precision())
# integer products: torch's cpu computes them, its CUDA refuses them
case("int64 matmul", lambda L: _ints(L) @ _ints(L).T, per_device=True)
case("int32 matmul", lambda L: _ints(L).int() @ _ints(L).int().T, per_device=True)
case("bool matmul", lambda L: _ints(L).bool() @ _ints(L).bool().T, per_device=True)
case("int64 cpu matmul", lambda L: _ints(L).cpu() @ _ints(L).cpu().T)
case("linear 8x3 @ (5,4)", lambda L: _linear(L, _x(L), L.mod.ones(5, 4, device=L.dev)))
case("linear 3-D weight", lambda L: _linear(L, _x(L), L.mod.ones(2, 5, 3, device=L.dev)))
case("linear f64 bias", lambda L: _linear(L, _x(L), L.mod.ones(5, 3, device=L.dev),
                                          L.mod.ones(5, dtype=L.dtype("float64"), device=L.dev)))
case("linear f64 weight", lambda L: _linear(L, _x(L), L.mod.ones(5, 3, dtype=L.dtype("float64"),
                                                                 device=L.dev)))
case("linear 0-d input", lambda L: _linear(L, L.mod.tensor(1.0, device=L.dev),
                                           L.mod.ones(5, 3, device=L.dev)))
case("linear 1-D weight", lambda L: _linear(L, _x(L), L.mod.ones(3, device=L.dev)))
case("linear 1-D weight + bias", lambda L: _linear(L, _x(L), L.mod.ones(3, device=L.dev),
                                                   L.mod.ones((), device=L.dev)))
case("linear 1-D input", lambda L: _linear(L, L.mod.ones(3, device=L.dev),
                                           L.mod.ones(5, 3, device=L.dev)))
case("linear 1-D input mismatch", lambda L: _linear(L, L.mod.ones(4, device=L.dev),
                                                    L.mod.ones(5, 3, device=L.dev)))
case("linear 3-D input mismatch", lambda L: _linear(L, L.mod.ones(2, 4, 4, device=L.dev),
                                                    L.mod.ones(5, 3, device=L.dev)))
case("linear bias (8,5)", lambda L: _linear(L, _x(L), L.mod.ones(5, 3, device=L.dev),
                                            L.mod.ones(8, 5, device=L.dev)))
case("linear bias (7,)", lambda L: _linear(L, _x(L), L.mod.ones(5, 3, device=L.dev),
                                           L.mod.ones(7, device=L.dev)))
case("matmul f32 @ f64", lambda L: _x(L) @ L.mod.ones(3, 2, dtype=L.dtype("float64"),
                                                      device=L.dev))
case("matmul 0-d", lambda L: L.mod.matmul(L.mod.tensor(1.0, device=L.dev), _x(L)))
case("matmul mismatch", lambda L: L.mod.ones(2, 3, device=L.dev) @ L.mod.ones(4, 5, device=L.dev))
case("matmul k=0", lambda L: (L.mod.ones(3, 0, device=L.dev) @ L.mod.ones(0, 4,
                                                                           device=L.dev)).sum())


def cases(device):
    return [c for c in CASES if is_host(device) or not c.host_only]


@pytest.mark.parametrize("device,case", params(cases))
def test_probe_agrees_with_torch(device, case):
    check_fn(case, device)


# -- which linalg functions a graph captures --------------------------------------------------
LINALG_IN_CAPTURE = {
    "inv": lambda L, a, b: L.mod.linalg.inv(a), "solve": lambda L, a, b: L.mod.linalg.solve(a, b),
    "det": lambda L, a, b: L.mod.linalg.det(a),
    "cholesky": lambda L, a, b: L.mod.linalg.cholesky(a),
    "qr": lambda L, a, b: L.mod.linalg.qr(a), "eigh": lambda L, a, b: L.mod.linalg.eigh(a),
    "svd": lambda L, a, b: L.mod.linalg.svd(a), "lstsq": lambda L, a, b: L.mod.linalg.lstsq(a, b),
    "pinv": lambda L, a, b: L.mod.linalg.pinv(a),
    "slogdet": lambda L, a, b: L.mod.linalg.slogdet(a),
    "norm": lambda L, a, b: L.mod.linalg.norm(a),
    "matrix_norm 2": lambda L, a, b: L.mod.linalg.matrix_norm(a, 2),
}


def _captures(side: str, name: str, device: str) -> str:
    """``"captured"`` when ``LINALG_IN_CAPTURE[name]`` runs inside a graph capture on ``side``
    and its replay runs, else the exception's category."""
    L = Lib(side, device)  # noqa: N806
    a = L.mod.eye(3, device=L.dev) * 2 + 0.1
    b = L.mod.ones(3, 2, device=L.dev)
    fn = LINALG_IN_CAPTURE[name]
    fn(L, a, b)   # warm up, as torch asks before a capture
    if side == "tp":
        tp.accelerator.synchronize()
        graph = tp.accelerator.Graph()
        try:
            with graph:
                fn(L, a, b)
            graph.replay()
            tp.accelerator.synchronize()
            return "captured"
        except Exception as error:  # noqa: BLE001 - the exception is the answer
            tp.accelerator.synchronize()
            return category(error)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn(L, a, b)
        graph.replay()
        torch.cuda.synchronize()
        return "captured"
    except Exception as error:  # noqa: BLE001 - the exception is the answer
        torch.cuda.synchronize()
        return category(error)


#: decompositions that torch captures and tensorplay refuses inside a capture (its cuSOLVER calls
#: through CuPy read results on the host; the README says they run eagerly only)
EAGER_ONLY = ("det", "qr", "svd", "slogdet")


@requires_accelerator
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(
        strict=True, reason="tensorplay runs this decomposition eagerly only; torch captures it"))
    if name in EAGER_ONLY else name for name in LINALG_IN_CAPTURE])
def test_linalg_captures_where_torch_does(dev, name):
    """A linalg function runs inside a captured graph where torch's does, and refuses where
    torch's does. Each capture runs with the garbage collector off and tensorplay idle: freeing
    tensorplay memory may synchronize the device, which a capture in progress forbids."""
    if torch_device(dev) != "cuda":
        pytest.skip("torch captures graphs on cuda only")
    gc.collect()
    tp.accelerator.synchronize()
    gc.disable()
    try:
        ours, theirs = _captures("tp", name, dev), _captures("torch", name, dev)
    finally:
        gc.enable()
    assert ours == theirs, f"linalg.{name} in a capture: tensorplay {ours}, torch {theirs}"

