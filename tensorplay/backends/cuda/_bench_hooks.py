"""Benchmark access to native handles: a bare cudaGraphLaunch of a tensorplay graph's own
executable, the peer that ``Graph.replay`` is measured against."""

from __future__ import annotations

from cuda.bindings import runtime


def raw_launcher(graph, stream):
    """A zero-argument callable doing only ``cudaGraphLaunch(exec, stream)`` through
    cuda-bindings, for the executable of ``graph`` (a captured tensorplay Graph)."""
    executable = graph._exec.handle
    stream_handle = stream._native.handle
    launch = runtime.cudaGraphLaunch

    def run():
        launch(executable, stream_handle)
    return run
