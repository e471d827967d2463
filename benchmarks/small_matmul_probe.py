"""Small products on cuda: the tiled kernel of ``_small.py`` against cuBLASLt, per size and
dtype (cuda only). For each: the host us per call of the backend hook on its kept path (best of
five loops of 300 calls, clock stopped before the sync), and the device us per product (50
products captured into one graph, the replay timed with events, best of five). The limits of
``_small`` (``MAX_MULTIPLY_ADDS``, ``MAX_K``) are lifted for the "small" column and the kernel
switched off (``MAX_K`` 0) for the "cuBLASLt" one, so both engines run every size.
Usage: ``python3 benchmarks/small_matmul_probe.py``."""

import cupy
import ml_dtypes
import numpy as np

import tensorplay  # noqa: F401  (registers the cuda backend and bfloat16)
from tensorplay.backends.cuda import _matmul, _small
from tensorplay.bench.timing import timed_loops

SIZES = [(16, 16, 16), (32, 32, 32), (64, 64, 64), (64, 64, 128), (64, 64, 256),
         (96, 96, 96), (128, 128, 64), (128, 128, 128), (256, 256, 64), (256, 256, 256)]
DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.float64]
GRAPH_CALLS = 50


def engine(small: bool) -> None:
    _small.MAX_K = 1 << 20 if small else 0
    _matmul._direct.clear()


def host_us(a, b, out) -> float:
    fn = lambda: _matmul.matmul(a, b, out)  # noqa: E731
    fn()
    host, _ = timed_loops(fn, cupy.cuda.Device().synchronize, 300, 5, 20)
    return min(host)


def device_us(a, b, out) -> float:
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        _matmul.matmul(a, b, out)   # planned (and compiled) outside the capture
        stream.begin_capture()
        for _ in range(GRAPH_CALLS):
            _matmul.matmul(a, b, out)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        best = float("inf")
        for _ in range(5):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(start, stop) * 1000 / GRAPH_CALLS)
    return best


def main() -> None:
    limits = dict(_small.MAX_MULTIPLY_ADDS), _small.MAX_K
    print(f"_small limits: MAX_MULTIPLY_ADDS {limits[0]}, MAX_K {limits[1]}")
    for dtype in limits[0]:
        _small.MAX_MULTIPLY_ADDS[dtype] = 1 << 40   # the kernel for every size (MAX_K says)
    print(f"{'m x k x n':>16} {'dtype':>9} {'host small':>11} {'host Lt':>9} "
          f"{'dev small':>10} {'dev Lt':>8}")
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        for m, k, n in SIZES:
            a = cupy.asarray((rng.standard_normal((m, k)) / k ** 0.5).astype(dtype))
            b = cupy.asarray(rng.standard_normal((k, n)).astype(dtype))
            out = cupy.empty((m, n), dtype)
            row = []
            results = {}
            for small in (True, False):
                engine(small)
                row.append(host_us(a, b, out))
                results[small] = out.get().astype(np.float64)
            for small in (True, False):
                engine(small)
                row.append(device_us(a, b, out))
            gap = np.abs(results[True] - results[False]).max()
            print(f"{f'{m}x{k}x{n}':>16} {np.dtype(dtype).name:>9} {row[0]:11.2f} {row[1]:9.2f} "
                  f"{row[2]:10.2f} {row[3]:8.2f}   max |small - Lt| {gap:.2e}", flush=True)
    _small.MAX_MULTIPLY_ADDS.update(limits[0])
    _small.MAX_K = limits[1]
    _matmul._direct.clear()


if __name__ == "__main__":
    main()
