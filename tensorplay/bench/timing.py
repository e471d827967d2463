"""Timing loops shared by every benchmark case: per-call times of a callable, with the device
synchronized around each timed loop."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import tensorplay as tp

Call = Callable[[], object]


def sync() -> None:
    """Wait for tensorplay's current device (nothing on a host-only build)."""
    tp.accelerator.synchronize()


def timed_loops(fn: Call, sync: Call, calls: int, repeats: int,
                warmup: int) -> tuple[list[float], list[float]]:
    """Microseconds per call of ``repeats`` loops of ``calls`` calls of ``fn``: the lists
    ``host`` (clock stopped after the last call is issued) and ``total`` (after ``sync``). The
    device is synchronized before each loop starts."""
    for _ in range(warmup):
        fn()
    sync()
    host, total = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter()
        sync()
        done = time.perf_counter()
        host.append((issued - start) / calls * 1e6)
        total.append((done - start) / calls * 1e6)
    return host, total


def host_and_total(fn: Call, sync: Call, calls: int, repeats: int = 5,
                   warmup: int = 3) -> tuple[float, float]:
    """Median (host, total) microseconds per call: ``host`` stops the clock before the final
    ``sync`` (the host cost of issuing a call, with ``calls`` small enough that the device's
    launch queue never fills), ``total`` after it."""
    host, total = timed_loops(fn, sync, calls, repeats, warmup)
    return statistics.median(host), statistics.median(total)


def time_per_call(fn: Call, sync: Call, calls: int, repeats: int = 5, warmup: int = 3) -> float:
    """Median microseconds per call of ``fn`` over ``repeats`` loops of ``calls`` calls, each
    loop ending in ``sync`` (steady-state throughput: host and device time together)."""
    return host_and_total(fn, sync, calls, repeats, warmup)[1]


def interleaved_loops(impls: Mapping[str, tuple[Call, Call]], calls: int, repeats: int,
                      warmup: int) -> dict[str, tuple[list[float], list[float]]]:
    """:func:`timed_loops` for several implementations of one case (``{name: (fn, sync)}``),
    taking turns loop by loop, so that a change in the shared host's speed during the case falls
    on all of them alike rather than on whichever ran then. Returns ``{name: (host, total)}``."""
    for fn, impl_sync in impls.values():
        timed_loops(fn, impl_sync, 1, 0, warmup)
    loops: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in impls}
    for _ in range(repeats):
        for name, (fn, impl_sync) in impls.items():
            host, total = timed_loops(fn, impl_sync, calls, 1, 0)
            loops[name][0].extend(host)
            loops[name][1].extend(total)
    return loops
