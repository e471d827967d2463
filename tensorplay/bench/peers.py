"""Peer implementations for the benchmark suite: torch, CuPy, JAX and raw cuda-bindings.

Each ``*_peers`` function yields ``(name, fn, sync)`` for the peers installed, on a GPU only:
on the simulated accelerator peers would time a different machine, so none are offered.
:func:`eager_op_peers` also offers NumPy, everywhere, as the host floor of a Python array call.
"""

from __future__ import annotations

import importlib

import numpy as np

import tensorplay as tp
from tensorplay._runtime.select import accelerator_backend
from tensorplay.backends import hook


def _gpu() -> bool:
    accelerator = tp.accelerator.current_accelerator(check_available=True)
    return accelerator is not None and accelerator.type == "cuda"


def _module(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a peer that does not import is absent
        return None


def available() -> list[str]:
    if not _gpu():
        return []
    return [name for name in ("torch", "cupy", "jax") if _module(name) is not None]


def versions() -> dict:
    return {name: getattr(_module(name), "__version__", "?") for name in available()}


def error_text(error: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters of it), for a row's note."""
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {first}"


def _torch_cuda():
    torch = _module("torch")
    if torch is None or not _gpu() or not torch.cuda.is_available():
        return None
    return torch


def torch_graph(torch, fn, warmups: int = 3):
    """``(graph, result)``: ``fn()`` captured in one torch CUDA graph, after ``warmups`` calls
    on a side stream, which torch's capture needs (its recipe, as gpt-fast's)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result


def replay_peers(graph, stream):
    """Raw cudaGraphLaunch of tensorplay's own executable, torch and CuPy graphs of one kernel."""
    if not _gpu():
        return
    for binding, launch in raw_graph_launchers(graph, stream).items():
        yield (f"{binding} cudaGraphLaunch (same graph)", launch, tp.accelerator.synchronize)
    torch = _torch_cuda()
    if torch is not None:
        yield ("torch CUDAGraph.replay()", *_torch_add_graph(torch, 1, 16))
    cupy = _module("cupy")
    if cupy is not None:
        yield ("CuPy Graph.launch()", *_cupy_add_graph(cupy, 1, 16))


def raw_graph_launchers(graph, stream) -> dict:
    """``{binding: launch}``: zero-argument callables doing only the native launch of
    ``graph``'s executable on ``stream`` (on cuda a bare ``cudaGraphLaunch`` through each binding,
    the one ``Graph.replay`` uses first), the floor ``Graph.replay`` is measured against; empty
    when the backend offers no such launcher.

    The one place the bench reaches native handles: the backend's declared optional hook
    ``raw_graph_launchers(executable, stream)``, given the native executable and stream behind
    the public ``Graph`` and ``Stream`` (its documented fallback: no raw peer to measure)."""
    launchers = hook(accelerator_backend(), "raw_graph_launchers")
    return {} if launchers is None else launchers(graph._exec, stream._native)


def _torch_add_graph(torch, count: int, size: int):
    """(replay, sync) of a torch CUDA graph of ``count`` in-place adds on ``size`` floats."""
    x = torch.zeros(size, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            x.add_(1)
    return graph.replay, torch.cuda.synchronize


def _cupy_add_graph(cupy, count: int, size: int):
    """(launch, sync) of a CuPy graph of ``count`` in-place adds on ``size`` floats."""
    y = cupy.zeros(size, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y += 1
        stream.begin_capture()
        for _ in range(count):
            y += 1
        graph = stream.end_capture()
    graph.upload()
    return (lambda: graph.launch(stream)), stream.synchronize


def staging_peers(count: int):
    torch = _torch_cuda()
    if torch is None:
        return
    statics = [torch.zeros(256, device="cuda") for _ in range(count)]
    fresh = [torch.rand(256, device="cuda") for _ in range(count)]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _warm = statics[0] * 1
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _total = statics[0] + statics[-1]

    def step():
        for s, f in zip(statics, fresh):
            s.copy_(f)
        g.replay()
    yield (f"torch {count} x copy_ + replay()", step, torch.cuda.synchronize)


def eager_peers():
    cupy = _module("cupy") if _gpu() else None
    if cupy is not None:
        x = cupy.zeros(16, dtype=cupy.float32)

        def add():
            nonlocal x
            x += 1
        yield ("CuPy x += 1", add, cupy.cuda.Device().synchronize)
    torch = _torch_cuda()
    if torch is not None:
        t = torch.zeros(16, device="cuda")
        yield ("torch x.add_(1)", lambda: t.add_(1), torch.cuda.synchronize)


def chain_peers(count: int, size: int):
    """Graphs of ``count`` dependent in-place adds on ``size`` floats in CuPy and torch: the
    device's own floor for a chain of small kernel nodes."""
    cupy = _module("cupy") if _gpu() else None
    if cupy is not None:
        yield (f"CuPy graph of the same {count} adds", *_cupy_add_graph(cupy, count, size))
    torch = _torch_cuda()
    if torch is not None:
        yield (f"torch CUDAGraph of the same {count} adds", *_torch_add_graph(torch, count, size))


def _numpy_gelu():
    """NumPy's exact (erf) GELU through SciPy's ``erf``, or None without SciPy (NumPy has no
    erf)."""
    special = _module("scipy.special")
    if special is None:
        return None
    erf = special.erf
    return lambda a: 0.5 * a * (1.0 + erf(a * 0.7071067811865476))


def _cupy_gelu(cupy):
    """The exact (erf) GELU as one ``cupy.ElementwiseKernel`` (float32), as a CuPy user would
    write it to get a single kernel."""
    kernel = cupy.ElementwiseKernel(
        "float32 x", "float32 y", "y = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f))",
        "tp_bench_gelu")
    return lambda a: kernel(a)


def _array_ops(xp, gelu, a, b, m, w, acc) -> dict:
    """The eager table's ops over arrays of the NumPy-like namespace ``xp``; ``acc`` is the
    array the in-place add writes (``acc += 1``), ``gelu`` None where the peer has none."""
    def add_one():   # the statement a user writes, not a call of the dunder
        nonlocal acc
        acc += 1

    return {"a + b": lambda: a + b, "a.exp()": lambda: xp.exp(a),
            "a.add_(1)": add_one, "a.sum()": a.sum,
            "tp.where(m, a, b)": lambda: xp.where(m, a, b),
            "gelu(a)": (lambda: gelu(a)) if gelu is not None else None, "a @ w": lambda: a @ w}


def decode_ops(module, functional, tensor, arrays: dict) -> dict:
    """The eager table's decode-step ops (``eager.DECODE_OPS``) in tensorplay or torch (the same
    code: PyTorch's names), over operands ``tensor(array)`` makes from the table's ``arrays``."""
    a, m, w, v, i, s, q, k, mask = (tensor(arrays[key]) for key in
                                    ("a", "m", "w", "v", "i", "s", "q", "k", "mask"))
    c = tensor(arrays["a"].copy())
    size = arrays["a"].shape[1]
    ones, zeros = tensor(np.ones(size, np.float32)), tensor(np.zeros(size, np.float32))
    return {"layer_norm(a)": lambda: functional.layer_norm(a, (size,), ones, zeros),
            "a.softmax(-1)": lambda: a.softmax(-1),
            "a.masked_fill(m, 0)": lambda: a.masked_fill(m, 0.0),
            "addmm(v, a, w)": lambda: module.addmm(v, a, w),
            "c.index_copy_(0, i, s)": lambda: c.index_copy_(0, i, s),
            "a.index_select(0, i)": lambda: a.index_select(0, i),
            "a.argmax(-1)": lambda: a.argmax(-1),
            "sdpa(q, k, k, mask)": lambda: functional.scaled_dot_product_attention(
                q, k, k, attn_mask=mask)}


def eager_op_peers(arrays: dict):
    """``(name, ops, sync, notes)`` per peer for the eager table, built from the NumPy
    ``arrays`` (``a b m w``): ``ops`` maps each op of the table to a zero-argument call (None
    where the peer lacks the op); ``notes`` says how a peer spells an op where that is not
    obvious. CuPy and torch on a GPU only; NumPy (host arrays) everywhere."""
    names = ("a", "b", "m", "w", "a")
    cupy = _module("cupy") if _gpu() else None
    if cupy is not None:
        ops = _array_ops(cupy, _cupy_gelu(cupy), *(cupy.asarray(arrays[k]) for k in names))
        # of the decode step's ops CuPy has these (layer_norm, softmax, masked_fill, addmm,
        # index_copy_ and attention it has not: those compare with torch)
        a2, i2 = cupy.asarray(arrays["a"]), cupy.asarray(arrays["i"])
        ops["a.index_select(0, i)"] = lambda: cupy.take(a2, i2, axis=0)
        ops["a.argmax(-1)"] = lambda: a2.argmax(-1)
        yield ("cupy", ops, cupy.cuda.Device().synchronize,
               {"gelu(a)": "cupy.ElementwiseKernel: 0.5 x (1 + erff(x / sqrt 2))",
                "a.add_(1)": "a += 1", "a.index_select(0, i)": "cupy.take(a, i, axis=0)"})
    torch = _torch_cuda()
    if torch is not None:
        a, b, m, w, acc = (torch.from_numpy(arrays[k].copy()).to("cuda") for k in names)
        ops = _array_ops(torch, torch.nn.functional.gelu, a, b, m, w, acc)
        ops["a.exp()"] = a.exp
        ops["a.add_(1)"] = lambda: acc.add_(1)
        # the decode step's ops: torch spells them as tensorplay does
        ops.update(decode_ops(torch, torch.nn.functional,
                              lambda x: torch.from_numpy(x.copy()).to("cuda"), arrays))
        yield ("torch", ops, torch.cuda.synchronize, {"gelu(a)": "torch.nn.functional.gelu"})
    ops = _array_ops(np, _numpy_gelu(), *(arrays[k].copy() for k in names))
    yield ("numpy", ops, lambda: None,
           {"gelu(a)": "0.5 a (1 + scipy.special.erf(a / sqrt 2))", "a.add_(1)": "a += 1"})
