"""Device time of the half skinny kernels (one bf16 row through a GPT-2-small layer's weights)
for every grid shape the planner could choose, beside the planner's own choice and cuBLAS's
(CuPy's matmul, launched eagerly): which shape streams each weight fastest.

Each measurement replays a CUDA graph of 16 launches over 16 different weights (together more
than the L2 cache holds, as the 12 layers of a decode step are), timed with events.

Usage: ``python3 benchmarks/skinny_sweep.py`` on cuda."""

import itertools

import cupy
import ml_dtypes
import numpy as np

from tensorplay.backends.cuda import _skinny

SHAPES = ((768, 2304), (768, 3072), (3072, 768), (768, 768))
COPIES = 16
REPLAYS = 20


def device_us(calls) -> float:
    """Microseconds per launch of ``calls`` (a list of launch thunks), replayed in a graph."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for call in calls:   # compile and load outside the capture
            call()
        stream.synchronize()
        stream.begin_capture()
        for call in calls:
            call()
        graph = stream.end_capture()
        graph.launch(stream)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(REPLAYS):
            graph.launch(stream)
        end.record(stream)
        end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / REPLAYS / len(calls)


def eager_us(calls) -> float:
    """Microseconds per launch of ``calls`` launched back to back (CuPy's cuBLAS calls cannot
    be captured), timed with events."""
    for call in calls:
        call()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(REPLAYS):
        for call in calls:
            call()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / REPLAYS / len(calls)


def main() -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(0)
    original_nn, original_nt = _skinny._nn_shape, _skinny._nt_split
    for k, n in SHAPES:
        x = cupy.asarray(rng.standard_normal((1, k)).astype(bf16))
        y = cupy.empty((1, n), dtype=bf16)
        bias = cupy.asarray(rng.standard_normal(n).astype(bf16))
        weights = [cupy.asarray(rng.standard_normal((k, n)).astype(bf16)) for _ in range(COPIES)]
        transposed = [cupy.ascontiguousarray(w.T) for w in weights]   # (n, k): "nt"
        reference = (x.astype(np.float32) @ weights[0].astype(np.float32)
                     + bias.astype(np.float32))
        moved = k * n * 2
        results = []

        def measure(label, ws, shape_override):
            _skinny._nn_shape = (lambda r, kk, nn: shape_override) if shape_override and \
                label.startswith("nn") else original_nn
            _skinny._nt_split = (lambda kk, nn: shape_override) if shape_override and \
                label.startswith("nt") else original_nt
            try:
                launcher = _skinny.plan(x, ws[0], y, True, None)
                if launcher is None:
                    return
                launcher(x, ws[0], bias, y)
                error = float(cupy.abs(y.astype(np.float32) - reference).max())
                us = device_us([lambda w=w: launcher(x, w, bias, y) for w in ws])
                results.append((us, label, error))
            except Exception as failure:  # noqa: BLE001 - a shape that does not build is shown
                results.append((float("inf"), f"{label} failed: {failure!r}"[:120], 0.0))
            finally:
                _skinny._nn_shape, _skinny._nt_split = original_nn, original_nt

        measure(f"nn default {original_nn(1, k, n)}", weights, None)
        measure(f"nt default {original_nt(k, n)}", [w.T for w in transposed], None)
        for groups, threads in itertools.product((1, 2, 4, 8), (128, 256, 512, 1024)):
            if threads // groups <= k:
                measure(f"nn groups={groups} threads={threads}", weights, (groups, threads))
        for split in (1, 2, 4, 8):
            measure(f"nt split={split}", [w.T for w in transposed], split)
        results.append((eager_us([lambda w=w: cupy.matmul(x, w, out=y) for w in weights]),
                        "cuBLAS (CuPy matmul, no bias, eager launches)", 0.0))
        print(f"\n=== (1, {k}) @ ({k}, {n}) bf16 + bias, {moved / 1e6:.1f} MB of weight")
        for us, label, error in sorted(results):
            print(f"  {us:7.2f} us  {moved / us / 1e3:6.0f} GB/s  max err {error:.3g}  {label}")


if __name__ == "__main__":
    main()
