"""Where the heat loop's per-step overhead goes: variants of the captured loop, timed alike.

Run on a GPU (``TENSORPLAY_ACCELERATOR=cuda``); prints microseconds per step for each variant.
"""

import os

import tensorplay as tp
from tensorplay.bench.controlflow import Heat
from tensorplay.bench.models import best_time

dev = tp.accelerator.current_accelerator() if tp.accelerator.is_available() else "cpu"
GPU = os.environ.get("TENSORPLAY_ACCELERATOR") == "cuda"
N, STEPS, EVERY = (256, 1000, 100) if GPU else (16, 48, 10)
heat = Heat(dev, N, STEPS, EVERY)
sync = tp.accelerator.synchronize
false = tp.zeros((), dtype=tp.bool, device=dev)


def captured(fn):
    heat.step(heat.u0)
    g = tp.accelerator.Graph()
    with g:
        fn()
    return g


def report(name, g, steps=STEPS):
    us = best_time(g.replay, sync, repeats=5)
    print(f"{name:58s} {us / steps:7.2f} us/step  ({us:9.1f} us)", flush=True)


def nothing(*args):
    return ()


report("A unrolled step + copy", captured(heat.run_unrolled))
report("B fori_loop + cond(i % every == 0) (the bench)", captured(heat.run))
report("C fori_loop, step only", captured(lambda: tp.fori_loop(0, STEPS, lambda i, u: heat.step(u),
                                                               heat.u0)))


def body_d(i, u):
    tp.cond(false, nothing, nothing, ())
    return heat.step(u)


report("D fori_loop, cond(constant device False) + step", captured(
    lambda: tp.fori_loop(0, STEPS, body_d, heat.u0)))


def body_e(i, u):
    _ = i % EVERY == 0
    return heat.step(u)


report("E fori_loop, i % every == 0 unused + step", captured(
    lambda: tp.fori_loop(0, STEPS, body_e, heat.u0)))


def body_f(i, u):
    for _ in range(8):
        u = heat.step(u)
    return u


report("F fori_loop / 8, 8 steps per body (no copies between)", captured(
    lambda: tp.fori_loop(0, STEPS // 8, body_f, heat.u0)), STEPS // 8 * 8)


def body_h(i, u):
    for _ in range(8):
        tp.cond(false, nothing, nothing, ())
        u = heat.step(u)
    return u


report("H fori_loop / 8, 8 x (cond(device False) + step)", captured(
    lambda: tp.fori_loop(0, STEPS // 8, body_h, heat.u0)), STEPS // 8 * 8)

k = tp.zeros((), dtype=tp.int64, device=dev)


def tiny():
    for _ in range(STEPS):
        k.add_(1)


report("G 1000 unrolled 0-d add_ kernels (per kernel)", captured(tiny))


def ifs():
    for _ in range(STEPS):
        tp.cond(false, nothing, nothing, ())


report("I 1000 unrolled cond(device False), empty branches", captured(ifs))


def whiles():
    tp.fori_loop(0, STEPS, lambda i, u: u, (k,))


report("J fori_loop, empty body (advance only)", captured(whiles))


def plain_ifs():
    g = tp.accelerator.graphs.current_capturing_graph()
    for _ in range(STEPS):
        g.begin_capture_to_if_node(false)
        g.end_capture_to_conditional_node()


report("I2 1000 unrolled one-body if nodes (device False), empty", captured(plain_ifs))


def body_k(i, u):
    tp.cond(i % EVERY == 0, heat._snapshot, nothing, (i, u))
    return heat.step(u)


report("K fori_loop unroll=1 (the bench before unrolling)", captured(
    lambda: tp.fori_loop(0, STEPS, body_k, heat.u0, unroll=1)))
