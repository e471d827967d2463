"""Peer implementations for the benchmark suite: torch, CuPy, JAX and raw cuda-bindings.

Each ``*_peers`` function yields ``(name, fn, sync)`` for the peers installed, on a GPU only:
on the simulated accelerator peers would time a different machine, so none are offered.
"""

from __future__ import annotations

import importlib

import tensorplay as tp


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


def _torch_cuda():
    torch = _module("torch")
    if torch is None or not _gpu() or not torch.cuda.is_available():
        return None
    return torch


def replay_peers(graph, stream):
    """Raw cudaGraphLaunch of tensorplay's own executable, torch and CuPy graphs of one kernel."""
    if not _gpu():
        return
    from tensorplay.backends.cuda import _bench_hooks

    yield ("cuda-bindings cudaGraphLaunch (same graph)",
           _bench_hooks.raw_launcher(graph, stream), tp.accelerator.synchronize)
    torch = _torch_cuda()
    if torch is not None:
        yield ("torch CUDAGraph.replay()", *_torch_add_graph(torch, 1, 16))
    cupy = _module("cupy")
    if cupy is not None:
        yield ("CuPy Graph.launch()", *_cupy_add_graph(cupy, 1, 16))


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
