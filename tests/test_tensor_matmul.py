"""Matrix products on every device: operand layouts (transposed, strided, offset, broadcast
views), dtypes, ``linear``, the float32 precision setting, and products inside captured graphs
(public API; ``_tensor.linalg.fused_matmul`` is reached through ``nn.functional.linear``)."""

import functools

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._tensor.linalg import fused_matmul, linear
from support import (products_capture, requires_accelerator,
                     requires_captured_products, supports, to_numpy)


def data(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(result, expected, dtype=np.float32):
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10,
           np.complex64: 1e-4, np.complex128: 1e-10}.get(dtype, 2e-2)
    np.testing.assert_allclose(to_numpy(result).astype(np.result_type(dtype, np.float32)),
                               expected, rtol=tol, atol=tol * 4)


# (a shape, b shape, transpose a, transpose b): a transposed operand is a non-contiguous view
LAYOUTS = [
    ((5,), (5,), False, False),
    ((5,), (5, 7), False, False),
    ((6, 5), (5,), False, False),
    ((3, 6, 5), (5,), False, False),
    ((5,), (2, 5, 7), False, False),
    ((2, 1, 6, 5), (3, 5, 7), False, False),          # batch broadcast both ways
    ((4, 33, 65), (65, 17), True, True),              # both transposed, batch folds into rows
    ((31, 64), (64, 33), True, False),
    ((31, 64), (64, 33), False, True),
    ((8, 512), (512, 512), False, False),
    ((2, 3, 4, 5, 6, 7), (1, 3, 1, 5, 7, 2), False, False),
    ((0, 3), (3, 4), False, False),
    ((3, 0), (0, 4), False, False),                   # empty inner dimension: zeros
    ((1, 1), (1, 1), False, False),
]


def _operand(host, transpose, device):
    if not transpose or host.ndim < 2:
        return tp.tensor(host, device=device)
    flipped = tp.tensor(np.ascontiguousarray(np.swapaxes(host, -1, -2)), device=device)
    return flipped.transpose(-1, -2)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{a}@{b}{'T' * ta}{'T' * tb}"
                                                 for a, b, ta, tb in LAYOUTS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_layouts_and_dtypes(device, layout, dtype):
    a_shape, b_shape, ta, tb = layout
    a, b = data(*a_shape, dtype=dtype), data(*b_shape, seed=1, dtype=dtype)
    result = _operand(a, ta, device) @ _operand(b, tb, device)
    assert result.dtype == tp.tensor(a).dtype and result.shape == np.matmul(a, b).shape
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    close(result, expected, dtype)


def test_bfloat16_and_complex(device):
    a, b = data(6, 8), data(8, 3, seed=1)
    if supports(device, tp.bfloat16):
        result = tp.tensor(a, dtype=tp.bfloat16, device=device) @ \
            tp.tensor(b, dtype=tp.bfloat16, device=device)
        assert result.dtype == tp.bfloat16
        np.testing.assert_allclose(to_numpy(result.float()), a @ b, rtol=5e-2, atol=1e-1)
    for dtype in (np.complex64, np.complex128):
        if not supports(device, tp.tensor(np.zeros(1, dtype)).dtype):
            continue
        ca = (a + 1j * data(6, 8, seed=2)).astype(dtype)
        cb = (b - 2j * data(8, 3, seed=3)).astype(dtype)
        close(tp.tensor(ca, device=device) @ tp.tensor(cb, device=device), ca @ cb, dtype)


def test_offset_strided_and_expanded_views(device):
    base = data(10, 40)
    t = tp.tensor(base, device=device)
    w = data(13, 7, seed=1)
    tw = tp.tensor(w, device=device)
    # views starting at odd element offsets (pointer alignments below 16 bytes) and with gaps
    for rows, cols in [(slice(1, 9), slice(3, 16)), (slice(0, 10, 2), slice(1, 27, 2)),
                       (slice(3, 4), slice(5, 18))]:
        view = t[rows, cols]
        close(view @ tw, base[rows, cols] @ w)
    row = tp.tensor(data(1, 13, seed=4), device=device).expand(6, 13)   # stride-0 rows
    close(row @ tw, np.broadcast_to(data(1, 13, seed=4), (6, 13)) @ w)
    batch = tp.tensor(data(13, 7, seed=5), device=device).expand(4, 13, 7)
    close(tp.tensor(data(4, 2, 13, seed=6), device=device) @ batch,
          data(4, 2, 13, seed=6) @ data(13, 7, seed=5))


@pytest.mark.parametrize("dtype", [tp.int64, tp.int32, tp.uint8])
def test_integer_products_as_pytorch(device, dtype):
    a = np.arange(12).reshape(3, 4)
    left = tp.tensor(a, dtype=dtype, device=device)
    right = tp.tensor(a.T.copy(), dtype=dtype, device=device)
    if device == "cpu":
        result = left @ right
        assert result.dtype == dtype
        np.testing.assert_array_equal(to_numpy(result), (a @ a.T).astype(dtype.numpy))
    else:
        with pytest.raises(NotImplementedError, match=f"products of {dtype.name} tensors are "
                                                      f"not implemented"):
            left @ right
        with pytest.raises(NotImplementedError):
            linear(left, left)


# -- linear -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((4, 6), (5, 6), (5,)), ((6,), (5, 6), (5,)),
                                    ((2, 3, 6), (5, 6), (5,)), ((4, 6), (5, 6), None),
                                    ((4, 6), (6,), None), ((4, 6), (5, 6), (4, 5)),
                                    ((4, 6), (5, 6), (1,))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_linear_matches_numpy(device, shapes, dtype):
    x_shape, w_shape, b_shape = shapes
    x, w = data(*x_shape, dtype=dtype), data(*w_shape, seed=1, dtype=dtype)
    bias = None if b_shape is None else data(*b_shape, seed=2, dtype=dtype)
    result = linear(tp.tensor(x, device=device), tp.tensor(w, device=device),
                    None if bias is None else tp.tensor(bias, device=device))
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    if bias is not None:
        expected = expected + bias
    assert result.shape == expected.shape
    close(result, expected, dtype)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_fused_matmul_equals_the_ops(device, activation):
    x, w, b = data(8, 32), data(32, 16, seed=1), data(16, seed=2)
    tx, tw, tb = (tp.tensor(v, device=device) for v in (x, w, b))
    unfused = tx @ tw + tb
    unfused = {None: lambda t: t, "relu": tp.relu, "gelu": tp.gelu, "silu": tp.silu,
               "gelu_tanh": lambda t: tp.gelu(t, approximate="tanh")}[activation](unfused)
    close(fused_matmul(tx, tw, tb, activation), to_numpy(unfused))
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        fused_matmul(tx, tw, tb, "tanh")


def test_linear_errors(device):
    x = tp.ones(8, 3, device=device)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(8x3 and "
                                           r"4x5\)"):
        linear(x, tp.ones(5, 4, device=device))
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        linear(x, tp.ones(2, 5, 3, device=device))
    with pytest.raises(RuntimeError, match="self and mat2 must have the same dtype, but got "
                                           "float64 and float32"):
        linear(x, tp.ones(5, 3, device=device), tp.ones(5, dtype=tp.float64, device=device))
    with pytest.raises(RuntimeError, match="expected mat1 and mat2 to have the same dtype, but "
                                           "got: float32 != float64"):
        linear(x, tp.ones(5, 3, dtype=tp.float64, device=device))
    with pytest.raises(RuntimeError, match="at least 1D, but they are 0D and 2D"):
        linear(tp.tensor(1.0, device=device), tp.ones(5, 3, device=device))
    with pytest.raises(RuntimeError, match="at least 1D, but they are 2D and 0D"):
        linear(x, tp.tensor(1.0, device=device))
    with pytest.raises(RuntimeError, match="mat2 must be a matrix, got 1-D tensor"):
        linear(x, tp.ones(3, device=device), tp.ones((), device=device))
    with pytest.raises(RuntimeError, match=r"expanded size of the tensor \(5\) must match the "
                                           r"existing size \(7\) at non-singleton dimension 1"):
        linear(x, tp.ones(5, 3, device=device), tp.ones(7, device=device))
    with pytest.raises(RuntimeError, match=r"number of sizes provided \(2\) must be greater"):
        linear(x, tp.ones(5, 3, device=device), tp.ones(2, 8, 5, device=device))
    assert linear(x, tp.ones(5, 3, device=device)).shape == (8, 5)   # still usable


# -- float32 precision --------------------------------------------------------------------------
def test_float32_matmul_precision_setting(device):
    assert tp.get_float32_matmul_precision() == "highest"
    a, b = data(64, 256), data(256, 32, seed=1)
    ta, tb = tp.tensor(a, device=device), tp.tensor(b, device=device)
    exact = a.astype(np.float64) @ b
    try:
        for precision, tol in (("high", 2e-2), ("medium", 8e-2), ("highest", 1e-4)):
            tp.set_float32_matmul_precision(precision)
            assert tp.get_float32_matmul_precision() == precision
            np.testing.assert_allclose(to_numpy(ta @ tb), exact, rtol=tol, atol=tol * 16)
            # float64 is never reduced
            np.testing.assert_allclose(to_numpy(ta.double() @ tb.double()), exact, rtol=1e-12)
    finally:
        tp.set_float32_matmul_precision("highest")
    # as PyTorch: an unknown name warns and changes nothing; a non-str raises RuntimeError
    with pytest.warns(UserWarning, match="fast is not one of 'highest', 'high', or 'medium'"):
        tp.set_float32_matmul_precision("fast")
    with pytest.raises(RuntimeError, match="expects a str, but got int"):
        tp.set_float32_matmul_precision(3)
    assert tp.get_float32_matmul_precision() == "highest"


# -- inside captured graphs -------------------------------------------------------------------

@requires_accelerator
@pytest.mark.parametrize("dtype", [tp.float16, tp.float32, tp.float64])
@pytest.mark.parametrize("layout", [((8, 512), (512, 512), False, False),
                                    ((2, 1, 6, 5), (3, 5, 7), False, False),
                                    ((4, 33, 65), (65, 17), True, True), ((5,), (5, 7), False,
                                                                          False)])
def test_matmul_in_a_captured_graph(dev, layout, dtype):
    requires_captured_products(dev)
    a_shape, b_shape, ta, tb = layout
    ha, hb = data(*a_shape, dtype=dtype.numpy), data(*b_shape, seed=1, dtype=dtype.numpy)
    a, b = _operand(np.zeros_like(ha), ta, dev), _operand(hb, tb, dev)
    g = tp.accelerator.Graph()
    with g:
        y = a @ b
    a.copy_(_operand(ha, ta, dev))
    g.replay()
    expected = np.matmul(ha.astype(np.float64), hb.astype(np.float64))
    close(y, expected, dtype.numpy)
    a.copy_(_operand(2 * ha, ta, dev))
    g.replay()
    close(y, 2 * expected, dtype.numpy)


@requires_accelerator
def test_a_product_that_cannot_be_captured_says_why_and_leaves_the_device_usable(dev):
    if products_capture(dev):
        pytest.skip(f"matrix products on {dev} can be captured (the case of a cuda install "
                    f"without nvmath-python)")
    a = tp.tensor(data(16, 16, dtype=np.float64), device=dev)
    g = tp.accelerator.Graph()
    with pytest.raises(RuntimeError, match="cannot be captured.*nvmath-python"):
        with g:
            a @ a
    np.testing.assert_allclose(to_numpy(a @ a), to_numpy(a) @ to_numpy(a), rtol=1e-12)
    with g:   # the graph captures again, without the product
        b = a + 1
    g.replay()
    np.testing.assert_array_equal(to_numpy(b), to_numpy(a) + 1)


@requires_accelerator
@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "gelu", "silu"])
def test_linear_and_fused_matmul_in_a_captured_graph(dev, activation):
    x, w, b = data(8, 64), data(32, 64, seed=1), data(32, seed=2)
    tx = tp.zeros(8, 64, device=dev)
    tw, tb = tp.tensor(w, device=dev), tp.tensor(b, device=dev)
    g = tp.accelerator.Graph()
    with g:
        plain = linear(tx, tw, tb)
        fused = fused_matmul(tx, tw.T, tb, activation)
    tx.copy_(tp.tensor(x, device=dev))
    g.replay()
    close(plain, x @ w.T + b)
    expected = to_numpy(fused_matmul(tx, tw.T, tb, activation))   # eager
    close(fused, expected)


@requires_accelerator
@pytest.mark.parametrize("by_call", [False, True], ids=["launch", "launch_call"])
def test_kept_products_launch_through_the_backends_launcher(monkeypatch, by_call):
    """A kept product plan asks the backend's ``matmul_launcher`` once, after its first launch,
    and launches through what it gives (a plain product and a bias epilogue alike); where it
    gives None the plan keeps calling the product hooks. Where the backend offers
    ``launch_call`` (cuda), the launchers go through it, with no kernel object."""
    from tensorplay._runtime import dispatch
    from tensorplay._tensor import linalg

    dev = tp.accelerator.current_accelerator().type
    backend = dispatch.backend_of(tp.device(dev, 0))
    called = []
    if by_call:
        def launch_call(stream, fn, *args):
            called.append(len(args))
            backend.launch(stream, dispatch.named("by_call", functools.partial(fn, *args)))
        monkeypatch.setattr(backend, "launch_call", launch_call, raising=False)
    elif dispatch.hook(backend, "launch_call") is not None:   # cuda: the other way round
        monkeypatch.setattr(backend, "launch_call", None)
    if dispatch.hook(backend, "matmul_epilogue") is None:   # sim: an epilogue to launch
        def matmul_epilogue(a, b, out, bias, activation, precision="highest"):
            out[...] = a @ b + bias
        monkeypatch.setattr(backend, "matmul_epilogue", matmul_epilogue, raising=False)
        monkeypatch.setattr(backend, "matmul_epilogues", frozenset({None}), raising=False)
    asked, launched = [], []

    def matmul_launcher(a, b, out, bias, activation, precision="highest"):
        asked.append((tuple(a.shape), tuple(b.shape), bias is not None, activation))
        if a.shape[0] == 5:
            return None

        def launch(a, b, bias, out):
            launched.append(bias is not None)
            out[...] = 7
        return launch

    monkeypatch.setattr(backend, "matmul_launcher", matmul_launcher, raising=False)
    linalg._plans.clear()   # plans keep what the backend gave
    linalg._fused_plans.clear()
    try:
        x, w, v = tp.ones(2, 3, device=dev), tp.ones(3, 4, device=dev), tp.ones(4, device=dev)
        assert [(x @ w).tolist()[0][0] for _ in range(3)] == [3.0, 7.0, 7.0]
        assert [tp.addmm(v, x, w).tolist()[0][0] for _ in range(3)] == [4.0, 7.0, 7.0]
        five = tp.ones(5, 3, device=dev)
        assert [(five @ w).tolist()[0][0] for _ in range(3)] == [3.0] * 3
        assert asked == [((2, 3), (3, 4), False, None), ((2, 3), (3, 4), True, None),
                         ((5, 3), (3, 4), False, None)]
        assert launched == [False, False, True, True]
        assert called == ([4] * 4 if by_call else [])   # a, b, the bias (or None), the result
    finally:
        linalg._plans.clear()
        linalg._fused_plans.clear()
