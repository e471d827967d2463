"""Products and shape functions (einsum, tensordot, kron, cross, diag, diagonal, trace, tril,
triu, repeat, tile, roll, flip, meshgrid, as_strided) on every device: values against NumPy,
dtypes, views against copies (writes through a view show in its base), PyTorch's strides and
errors, and use inside a captured graph on accelerators.

Oracle: NumPy's functions of the same name (``np.einsum``, ``np.tensordot``, ``np.kron`` ...).
"""

import warnings

import numpy as np
import pytest

import tensorplay as tp
from support import (accelerator_device, requires_accelerator,
                     requires_captured_products, to_numpy)


def make(device, *shape, dtype=np.float32, seed=0):
    """(tensor, array) with the same random values."""
    rng = np.random.default_rng(seed)
    array = (rng.standard_normal(shape) * 4).astype(dtype) if np.dtype(dtype).kind == "f" \
        else rng.integers(-5, 6, shape).astype(dtype)
    return tp.tensor(array, device=device), array


def close(tensor, expected, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(to_numpy(tensor), expected, rtol=rtol, atol=atol)


# -- einsum ---------------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->kj", [(2, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("ij,kl->ijkl", [(2, 3), (4, 5)]),
    ("Ab,bC->AC", [(3, 4), (4, 2)]),
    (" i j , j k -> i k ", [(3, 4), (4, 5)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij,kj->ik", [(0, 4), (3, 4)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
def test_einsum_matches_numpy(device, equation, shapes):
    pairs = [make(device, *s, seed=i) for i, s in enumerate(shapes)]
    result = tp.einsum(equation, *[t for t, _ in pairs])
    expected = np.einsum(equation.replace(" ", ""), *[a.astype(np.float64) for _, a in pairs])
    assert result.dtype == tp.float32
    assert result.shape == expected.shape
    close(result, expected, rtol=1e-4, atol=1e-4)


def test_einsum_list_and_sublist_forms(device):
    (a, na), (b, nb) = make(device, 3, 4), make(device, 4, 5, seed=1)
    close(tp.einsum("ij,jk", [a, b]), na @ nb, rtol=1e-4, atol=1e-4)
    close(tp.einsum(a, [0, 1], b, [1, 2], [0, 2]), na @ nb, rtol=1e-4, atol=1e-4)
    close(tp.einsum(a, [0, 1], b, [1, 2]), na @ nb, rtol=1e-4, atol=1e-4)
    close(tp.einsum(a, [Ellipsis, 0], [Ellipsis]), na.sum(-1), rtol=1e-4, atol=1e-4)


def test_einsum_broadcasts_size_one_labels(device):
    (a, na), (b, nb) = make(device, 1, 4), make(device, 3, 4, seed=1)
    close(tp.einsum("ij,ij->i", a, b), (na * nb).sum(1), rtol=1e-4, atol=1e-4)
    close(tp.einsum("ij,ij->ij", a, b), na * nb)
    (c, nc) = make(device, 3, 1, seed=2)
    close(tp.einsum("ij,jk->ik", b, tp.ones(1, 2, device=device)),
          nb.sum(1, keepdims=True) * np.ones((1, 2)), rtol=1e-4, atol=1e-4)
    close(tp.einsum("ij,ik->jk", c, b), nc.T @ nb, rtol=1e-4, atol=1e-4)


def test_einsum_ellipsis_left_out_of_the_output_is_summed(device):
    a, na = make(device, 2, 3, 4)
    close(tp.einsum("...ij->ij", a), na.sum(0), rtol=1e-4, atol=1e-4)


def test_einsum_one_operand_views_alias_like_torch(device):
    a, na = make(device, 3, 3)
    transposed = tp.einsum("ij->ji", a)
    assert transposed.stride() == (1, 3)
    diagonal = tp.einsum("ii->i", a)
    assert diagonal.stride() == (4,)
    diagonal.fill_(0)
    assert (np.diagonal(to_numpy(a)) == 0).all()


@pytest.mark.parametrize("dtype", [tp.float64, tp.float16, tp.int32])
def test_einsum_keeps_the_dtype(device, dtype):
    a = tp.ones(3, 4, dtype=dtype, device=device)
    b = tp.ones(4, 2, dtype=dtype, device=device)
    if device != "cpu" and dtype is tp.int32:
        with pytest.raises(NotImplementedError):
            tp.einsum("ij,jk->ik", a, b)
        assert tp.einsum("ij->j", a).dtype == tp.int32   # a sum is no product
        return
    result = tp.einsum("ij,jk->ik", a, b)
    assert result.dtype == dtype
    close(result.float(), np.full((3, 2), 4.0))
    assert tp.einsum("ij->", a).dtype == dtype


@pytest.mark.parametrize("args,match", [
    (("ij,jk->ik", (2, 3)), "fewer operands"),
    (("ij->ij", (2, 3), (3, 4)), "more operands"),
    (("ij->ij", (2, 3, 4)), "does not match the number of dimensions"),
    (("ijkl...->", (2, 3)), "more than the number of dimensions"),
    (("i1->i", (2, 3)), "invalid subscript given at index 1"),
    (("i.j->i", (2, 3)), "not part of any ellipsis"),
    (("......->", (2, 3)), "ellipsis was already found"),
    (("ij->ii", (2, 3)), "appears more than once in the output"),
    (("ij->k", (2, 3)), "does not appear in the equation"),
    (("ii->i", (2, 3)), "repeated for operand 0 but the sizes don't match"),
    (("ij,ij->ij", (2, 3), (2, 4)), "do not broadcast"),
])
def test_einsum_errors(device, args, match):
    equation, *shapes = args
    with pytest.raises(RuntimeError, match=match):
        tp.einsum(equation, *[tp.ones(*s, device=device) for s in shapes])


def test_einsum_without_operands_is_a_value_error(device):
    with pytest.raises(ValueError, match="at least one operand"):   # as torch's Python check
        tp.einsum("->")


def test_einsum_mixed_dtypes_and_types(device):
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.einsum("i,i->", tp.ones(3, device=device),
                  tp.ones(3, dtype=tp.float64, device=device))
    with pytest.raises(TypeError, match="must be str"):
        tp.einsum(3, tp.ones(3, device=device))
    with pytest.raises(TypeError, match="must be a Tensor"):
        tp.einsum("i->i", [1, 2])


# -- tensordot, kron, cross ----------------------------------------------------------------------
@pytest.mark.parametrize("shapes,dims", [
    (((3, 4, 5), (4, 5, 6)), 2), (((3, 4), (4, 5)), 1), (((3, 4), (5, 6)), 0),
    (((3, 4, 5), (5, 3, 2)), ([0, 2], [1, 0])), (((2, 3), (3, 2)), ((1,), (0,))),
    (((2, 3), (2, 3)), ([0, 1], [0, 1])), (((4,), (4,)), 1), (((3, 0), (0, 2)), 1),
])
def test_tensordot_matches_numpy(device, shapes, dims):
    (a, na), (b, nb) = make(device, *shapes[0]), make(device, *shapes[1], seed=1)
    result = tp.tensordot(a, b, dims=dims)
    expected = np.tensordot(na.astype(np.float64), nb.astype(np.float64), axes=dims)
    assert result.shape == expected.shape and result.dtype == tp.float32
    close(result, expected, rtol=1e-4, atol=1e-4)


def test_tensordot_errors(device):
    a, b = tp.ones(2, 3, device=device), tp.ones(3, 4, device=device)
    with pytest.raises(RuntimeError, match="dims >= 0"):
        tp.tensordot(a, b, -1)
    with pytest.raises(RuntimeError, match="tensordot expects dims < ndim_a or ndim_b"):
        tp.tensordot(a, b, 3)
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        tp.tensordot(a, b, ([0], [0]))
    with pytest.raises(RuntimeError, match="same length"):
        tp.tensordot(a, b, ([0, 1], [0]))
    with pytest.raises(IndexError):
        tp.tensordot(a, b, ([5], [0]))
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.tensordot(a, b.double(), 1)


@pytest.mark.parametrize("sa,sb", [((2, 3), (4, 5)), ((3,), (2, 2)), ((2, 1, 3), (2, 2)),
                                   ((), (3,)), ((0, 2), (3, 1))])
def test_kron_matches_numpy(device, sa, sb):
    (a, na), (b, nb) = make(device, *sa), make(device, *sb, seed=1)
    result = tp.kron(a, b)
    expected = np.kron(na, nb)
    assert result.shape == expected.shape
    close(result, expected)
    close(a.kron(b), expected)


def test_kron_promotes(device):
    result = tp.kron(tp.ones(2, dtype=tp.int32, device=device),
                     tp.ones(2, dtype=tp.float64, device=device))
    assert result.dtype == tp.float64


@pytest.mark.parametrize("shape,dim", [((3,), 0), ((4, 3), -1), ((3, 5), 0), ((2, 3, 4), 1)])
def test_cross_matches_numpy(device, shape, dim):
    (a, na), (b, nb) = make(device, *shape), make(device, *shape, seed=1)
    close(tp.cross(a, b, dim=dim), np.cross(na, nb, axis=dim), rtol=1e-4, atol=1e-4)
    close(a.cross(b, dim), np.cross(na, nb, axis=dim), rtol=1e-4, atol=1e-4)


def test_cross_default_dim_is_torch_crosss_first_size_three(device):
    (a, na), (b, nb) = make(device, 3, 3), make(device, 3, 3, seed=1)
    with pytest.warns(UserWarning, match="without specifying the dim"):
        result = tp.cross(a, b)
    close(result, np.cross(na, nb, axis=0), rtol=1e-4, atol=1e-4)   # dim 0, not -1


def test_cross_broadcasts_and_keeps_integers(device):
    a = tp.tensor([[1, 0, 0]], dtype=tp.int64, device=device)
    b = tp.tensor([[0, 1, 0], [0, 0, 1]], dtype=tp.int64, device=device)
    result = tp.cross(a, b, dim=1)
    assert result.dtype == tp.int64 and result.tolist() == [[0, 0, 1], [0, -1, 0]]


def test_cross_errors(device):
    a = tp.ones(4, 3, device=device)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        tp.cross(a, tp.ones(3, device=device), dim=-1)
    with pytest.raises(RuntimeError, match="must have length 3"):
        tp.cross(a, a, dim=0)
    with pytest.raises(RuntimeError, match="no dimension of size 3"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tp.cross(tp.ones(2, 4, device=device), tp.ones(2, 4, device=device))
    with pytest.raises(IndexError):
        tp.cross(a, a, dim=2)
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.cross(a, a.double(), dim=1)


# -- diagonals and triangles ---------------------------------------------------------------------
@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2),
                                              (0, -1, 0), (5, 0, 1), (-7, 1, 2)])
def test_diagonal_is_a_view_with_torch_strides(device, offset, dim1, dim2):
    t, a = make(device, 3, 4, 5)
    view = tp.diagonal(t, offset, dim1, dim2)
    expected = np.diagonal(a, offset, dim1, dim2)
    assert view.shape == expected.shape
    close(view, expected)
    strides = t.stride()
    rest = [s for d, s in enumerate(strides) if d not in (dim1 % 3, dim2 % 3)]
    assert view.stride() == tuple(rest) + (strides[dim1] + strides[dim2],)
    if view.numel():
        view.fill_(100.0)
        assert (to_numpy(t) == 100).sum() == view.numel()


def test_diagonal_errors(device):
    with pytest.raises(IndexError):
        tp.diagonal(tp.ones(3, device=device))
    with pytest.raises(IndexError):
        tp.ones((), device=device).diagonal()
    with pytest.raises(RuntimeError, match="cannot be identical"):
        tp.ones(3, 3, device=device).diagonal(0, 1, -1)


@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag_builds_and_extracts(device, k):
    t, a = make(device, 4)
    built = tp.diag(t, k)
    close(built, np.diag(a, k))
    m, am = make(device, 3, 5)
    extracted = m.diag(k)
    close(extracted, np.diag(am, k))
    assert extracted.is_contiguous()
    extracted.fill_(99.0)       # a copy: the matrix is untouched
    close(m, am)


def test_diag_of_an_empty_vector_and_errors(device):
    assert tp.diag(tp.ones(0, device=device), 2).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert tp.diag(tp.tensor([True, True], device=device)).tolist() == [[True, False],
                                                                       [False, True]]
    for shape in [(), (2, 2, 2)]:
        with pytest.raises(RuntimeError, match="Supports 1D or 2D"):
            tp.diag(tp.ones(*shape, device=device))


@pytest.mark.parametrize("dtype,result", [(np.float32, tp.float32), (np.int32, tp.int64),
                                          (np.bool_, tp.int64)])
def test_trace(device, dtype, result):
    t, a = make(device, 3, 4, dtype=dtype)
    value = t.trace()
    assert value.shape == () and value.dtype == result
    np.testing.assert_allclose(value.item(), np.trace(a), rtol=1e-5)
    with pytest.raises(RuntimeError, match="expected a matrix"):
        tp.trace(tp.ones(3, device=device))


@pytest.mark.parametrize("k", [0, 1, -1, 5])
def test_tril_triu(device, k):
    t, a = make(device, 2, 3, 4)
    close(tp.tril(t, k), np.tril(a, k))
    close(t.triu(k), np.triu(a, k))
    b = tp.tensor(a > 0, device=device)
    assert tp.triu(b, k).dtype == tp.bool
    np.testing.assert_array_equal(to_numpy(tp.triu(b, k)), np.triu(a > 0, k))


def test_tril_triu_in_place(device):
    t, a = make(device, 4, 4)
    assert t.tril_(-1) is t
    close(t, np.tril(a, -1))
    u, b = make(device, 5, 5)
    view = u[1:, 1:]
    view.triu_()
    expected = b.copy()
    expected[1:, 1:] = np.triu(b[1:, 1:])
    close(u, expected)
    with pytest.raises(RuntimeError, match="single memory location"):
        tp.ones(1, 3, device=device).expand(3, 3).tril_()
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tp.ones(3, device=device).triu()


# -- repeat, tile, roll, flip --------------------------------------------------------------------
@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 2)), ((2, 3), (3, 1, 2)), ((3,), (2,)),
                                        ((), (2, 3)), ((2, 3), (0, 2)), ((2, 1), (1, 1))])
def test_repeat_matches_numpy_tile(device, shape, reps):
    t, a = make(device, *shape)
    result = t.repeat(*reps)
    close(result, np.tile(a, reps))
    close(t.repeat(reps), np.tile(a, reps))
    assert result.is_contiguous()


def test_repeat_copies_and_errors(device):
    t = tp.ones(2, 3, device=device)
    r = t.repeat(1, 1)
    r.fill_(5.0)
    assert to_numpy(t).max() == 1
    with pytest.raises(RuntimeError, match="can not be smaller"):
        t.repeat(2)
    with pytest.raises(RuntimeError, match="negative"):
        t.repeat(-1, 2)
    assert not hasattr(tp, "repeat")


@pytest.mark.parametrize("shape,reps", [((2, 3), (2,)), ((2, 3), (2, 2, 2)), ((3,), ()),
                                        ((2, 3), (1, 3))])
def test_tile(device, shape, reps):
    t, a = make(device, *shape)
    close(tp.tile(t, reps), np.tile(a, reps))
    close(t.tile(reps), np.tile(a, reps))
    if reps:
        close(t.tile(*reps), np.tile(a, reps))


@pytest.mark.parametrize("shifts,dims", [(1, None), (-2, None), (1, 0), ((1, -1), (0, 1)),
                                         (7, 1), ((2, 1), (1, 1)), ((1,), None)])
def test_roll(device, shifts, dims):
    t, a = make(device, 3, 4)
    close(tp.roll(t, shifts, dims), np.roll(a, shifts, dims))
    close(t.roll(shifts, dims), np.roll(a, shifts, dims))


def test_roll_errors_and_edge_cases(device):
    t = tp.ones(3, 4, device=device)
    with pytest.raises(RuntimeError, match="must align"):
        tp.roll(t, (1, 2), 0)
    with pytest.raises(RuntimeError, match="must align"):
        tp.roll(t, (1, 2))
    with pytest.raises(IndexError):
        tp.roll(t, 1, 2)
    assert tp.roll(tp.ones(0, 2, device=device), 1, 0).shape == (0, 2)
    assert tp.roll(tp.tensor(3.0, device=device), 1).item() == 3.0


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), [-1, 0], ()])
def test_flip_copies(device, dims):
    t, a = make(device, 2, 3, 4)
    result = tp.flip(t, dims)
    axes = tuple(dims)
    close(result, np.flip(a, axes) if axes != () else a)
    result.fill_(7.0)
    close(t, a)


def test_flip_method_forms_and_errors(device):
    t, a = make(device, 2, 3)
    close(t.flip(0, 1), a[::-1, ::-1])
    close(t.flip([1]), a[:, ::-1])
    close(t.flip(dims=(0,)), a[::-1])
    with pytest.raises(RuntimeError, match="appears multiple times"):
        t.flip(0, -2)
    with pytest.raises(IndexError):
        t.flip(2)
    with pytest.raises(TypeError, match="must be tuple of ints, not int"):
        tp.flip(t, 0)   # the function takes a sequence, as torch.flip


# -- meshgrid ------------------------------------------------------------------------------------
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_views_with_torch_strides(device, indexing):
    x, ax = make(device, 3)
    y, ay = make(device, 4, seed=1)
    z, az = make(device, 2, seed=2)
    grids = tp.meshgrid(x, y, z, indexing=indexing)
    expected = np.meshgrid(ax, ay, az, indexing=indexing)
    assert isinstance(grids, tuple) and len(grids) == 3
    for grid, want in zip(grids, expected):
        assert grid.shape == want.shape
        close(grid, want)
    if indexing == "ij":
        assert [g.stride() for g in grids] == [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    else:
        assert [g.stride() for g in grids] == [(0, 1, 0), (1, 0, 0), (0, 0, 1)]
    x.fill_(5.0)   # the grids view their inputs
    assert (to_numpy(grids[0]) == 5).all()


def test_meshgrid_default_indexing_warns_and_is_ij(device):
    x, y = tp.ones(2, device=device), tp.ones(3, device=device)
    with pytest.warns(UserWarning, match="indexing argument"):
        grids = tp.meshgrid(x, y)
    assert grids[0].shape == (2, 3)
    assert tp.meshgrid([x, y], indexing="xy")[0].shape == (3, 2)
    assert tp.meshgrid(tp.tensor(1.0, device=device), y, indexing="ij")[0].shape == (1, 3)


def test_meshgrid_errors(device):
    x = tp.ones(2, device=device)
    with pytest.raises(RuntimeError, match="indexing must be one of"):
        tp.meshgrid(x, x, indexing="ji")
    with pytest.raises(RuntimeError, match="Expected 0D or 1D"):
        tp.meshgrid(x, tp.ones(2, 2, device=device), indexing="ij")
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.meshgrid(x, x.double(), indexing="ij")
    with pytest.raises(RuntimeError, match="non-empty"):
        tp.meshgrid(indexing="ij")


# -- as_strided ----------------------------------------------------------------------------------
def test_as_strided_views_and_offsets(device):
    t = tp.arange(12, dtype=tp.float32, device=device)
    a = np.arange(12, dtype=np.float32)
    view = tp.as_strided(t, (3, 3), (3, 1))
    close(view, np.lib.stride_tricks.as_strided(a, (3, 3), (12, 4)))
    assert view.stride() == (3, 1)
    sliding = t.as_strided((4, 3), (2, 1), 1)
    close(sliding, [[1, 2, 3], [3, 4, 5], [5, 6, 7], [7, 8, 9]])
    view.fill_(-1.0)
    assert (to_numpy(t)[:9] == -1).all() and to_numpy(t)[9] == 9
    # offsets and strides are relative to the memory, not the view's first element
    tail = t[4:]
    close(tail.as_strided((2,), (1,)), [-1, -1])          # default: the view's own offset
    close(tail.as_strided((2,), (1,), 10), [10, 11])
    close(tail.as_strided((3,), (1,), 0), [-1, -1, -1])
    close(t.view(3, 4).t().as_strided((2, 2), (1, 4)), [[-1, -1], [-1, -1]])
    assert tp.as_strided(t, (0, 5), (100, 100), 11).shape == (0, 5)


def test_as_strided_errors(device):
    t = tp.arange(12, dtype=tp.float32, device=device)
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 48"):
        t.as_strided((4, 4), (4, 1))
    with pytest.raises(RuntimeError, match="out of bounds"):
        t[6:].as_strided((7,), (1,))
    with pytest.raises(RuntimeError, match="out of bounds"):
        t.as_strided((2,), (1,), 11)
    with pytest.raises(RuntimeError, match="mismatch in length"):
        t.as_strided((2, 2), (1,))
    with pytest.raises(RuntimeError, match="Negative strides"):
        t.as_strided((2,), (-1,))
    with pytest.raises(RuntimeError, match="negative dimension"):
        t.as_strided((-2,), (1,))
    with pytest.raises(RuntimeError, match="invalid storage offset"):
        t.as_strided((2,), (1,), -1)
    with pytest.raises(TypeError):
        t.as_strided((2.5,), (1,))


# -- inside a captured graph ----------------------------------------------------------------------
@requires_accelerator
def test_every_function_replays_in_a_captured_graph():
    dev = accelerator_device(0)
    requires_captured_products(dev)
    rng = np.random.default_rng(3)
    host_a = rng.standard_normal((3, 3)).astype(np.float32)
    host_b = rng.standard_normal((3, 3)).astype(np.float32)
    a = tp.zeros(3, 3, device=dev)
    b = tp.zeros(3, 3, device=dev)

    def program(x, y):
        return [tp.einsum("ij,jk->ik", x, y), tp.einsum("ii->i", x), tp.einsum("ij->", x),
                tp.einsum("i,j->ij", x[0], y[1]), tp.tensordot(x, y, 1), tp.kron(x, y),
                tp.cross(x, y, dim=1), tp.diag(x, 1), tp.diag(x[0]), tp.diagonal(x, -1),
                tp.trace(x), tp.tril(x), tp.triu(y, 1), x.repeat(2, 1), tp.tile(x, (2,)),
                tp.roll(x, 1, 0), tp.flip(x, (0, 1)),
                tp.meshgrid(x[0], y[0], indexing="xy")[1] * 1,
                tp.as_strided(x, (2, 2), (1, 3), 1) * 1, x.clone().tril_(), y.clone().triu_()]

    expected = [to_numpy(r) for r in program(tp.tensor(host_a, device=dev),
                                             tp.tensor(host_b, device=dev))]
    g = tp.accelerator.Graph()
    with g:
        outputs = program(a, b)
    a.copy_(tp.tensor(host_a, device=dev))
    b.copy_(tp.tensor(host_b, device=dev))
    g.replay()
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(expected[0], host_a @ host_b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(expected[7], np.diag(host_a, 1), rtol=1e-6)
