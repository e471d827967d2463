"""The two staging kernel nodes of every cuda capture (``Graph.stage_and_launch``).

Note [fused staging]
--------------------
``stage_and_launch`` must copy N small inputs onto the graph's static buffers, launch the graph
and, for ``tensorplay.compile``, copy the static buffers the graph wrote back into the caller's
tensors, in as few native calls as possible: eight ``cudaMemcpyAsync`` of 1 KiB cost ~5 us each
on the device and several us each on the host. So every capture records two kernel nodes
``tp_stage(args)`` (``_kernels.py``) whose only parameter is a struct passed BY VALUE: a count and
up to ``MAX_COPIES`` (64) triplets ``dst, src, nbytes``. Block ``(x, k)`` copies a share of
triplet ``k`` (16-byte vectors when dst and src are 16-aligned, bytes otherwise).

- The *head* node is the capture's FIRST work (``capture_begin``): inputs -> static buffers.
- The *tail* node is its LAST work, recorded on the origin stream right before
  ``cudaStreamEndCapture``. Every stream forked into the capture must be joined back by then,
  and a conditional node is a dependency of the work after it, so the tail runs after all the
  graph's work: static buffers -> the caller's tensors.

One class, :class:`StageNode`, serves both. A staged launch is, for each node that copies
something, up to two driver calls, then the launch:

1. ``cuGraphExecKernelNodeSetParams`` on the executable puts this call's triplets (and a grid of
   ``count`` rows, enough blocks per row for the largest copy) into the node. CUDA copies the
   parameters at the call and applies them to *future* launches only: launches already queued
   keep the triplets they were given, so nothing on the host has to wait for the device.
2. ``cuGraphNodeSetEnabled(1)``, only if the node was disabled.
3. ``cudaGraphLaunch``.

Both nodes start *disabled* after instantiation: a disabled kernel node runs as an empty node, so
a plain ``replay()`` pays no device time for staging. A staged launch disables a node it has
nothing for, and ``replay()`` disables both when the previous launch staged (one call each, only
when enabled), so alternating the two is correct and a steady loop of either makes no extra call.
Copies past the 64th of a node go out as ``cudaMemcpyAsync``: before the launch for the head,
after it for the tail. The sim models the same two nodes (``StageNode`` in
``backends/sim/graph.py``), new copies applying to later launches only.

Each node is found again as the capture's only dependency right after it is recorded. Its handle
belongs to the captured ``cudaGraph_t``, which must outlive the executable (CUDA identifies exec
nodes by the graph's nodes), so the backend destroys a graph only once its executable is gone.

Pitfall: the triplets of one node must not overlap each other (memcpy semantics, copied in
parallel); ``tensorplay.compile`` runs a call eagerly when inputs it writes back share memory.
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from typing import Any

from cuda.bindings import driver, runtime

from . import _kernels
from ._runtime import DRIVER_SUCCESS, check, raise_error

__all__ = ["MAX_COPIES", "StageNode"]

MAX_COPIES = _kernels.MAX_COPIES
BLOCK = 256                    # threads per block; 16 bytes each per pass
_BYTES_PER_PASS = 16 * BLOCK
_largest = operator.itemgetter(2)
_flatten = itertools.chain.from_iterable
_set_params = driver.cuGraphExecKernelNodeSetParams


class _StageArgs(ctypes.Structure):
    """Mirror of ``struct tp_stage_args`` in ``_kernels.py``."""

    _fields_ = [("count", ctypes.c_uint64), ("words", ctypes.c_uint64 * (3 * MAX_COPIES))]


class StageNode:
    """A ``tp_stage`` node (the head or the tail) of one capture, then of its executable.

    Lifecycle: :meth:`record` (first or last work of a capture), :meth:`bind` (after
    instantiation: reads the node's parameters back and disables it), then :meth:`stage` (or
    :meth:`load` / :meth:`disable`) around launches. ``enabled`` says whether the next launch
    copies through this node.
    """

    __slots__ = ("device_index", "max_blocks", "node", "exec", "params", "enabled", "args",
                 "_pointers", "_grid", "_loaded")
    node: Any     # cuda-bindings handles: None until record() and bind() set them
    exec: Any
    params: Any

    def __init__(self, device_index: int, max_blocks: int):
        self.device_index = device_index
        self.max_blocks = max(1, max_blocks)
        self.node = self.exec = self.params = None
        self.enabled = False
        self.args = _StageArgs()
        self._pointers = (ctypes.c_void_p * 1)(ctypes.addressof(self.args))
        self._grid = (1, 1)
        self._loaded: Any = None   # the triplets the executable's node holds now

    @property
    def _params_address(self) -> int:
        return ctypes.addressof(self._pointers)

    def record(self, stream, call: str) -> None:
        """Launch ``tp_stage`` (count 0) on the capturing ``stream`` and remember its node;
        ``call`` (capture_begin or capture_end) names the step in errors."""
        function = driver.CUfunction(_kernels.function_handle(_kernels.STAGE, self.device_index))
        check(driver.cuLaunchKernel(function, 1, 1, 1, BLOCK, 1, 1, 0,
                                    driver.CUstream(int(stream.handle)),
                                    self._params_address, 0), "cuLaunchKernel (tp_stage)")
        info = check(runtime.cudaStreamGetCaptureInfo(stream.handle), "cudaStreamGetCaptureInfo")
        dependencies = info[3]
        if not dependencies or len(dependencies) != 1:
            raise RuntimeError(f"{call}: expected the staging kernel to be the capture's only "
                               f"dependency, found {len(dependencies or ())}")
        self.node = driver.CUgraphNode(int(dependencies[0]))

    def bind(self, executable_handle) -> None:
        """Attach to the executable instantiated from the recorded graph; start disabled."""
        self.exec = driver.CUgraphExec(int(executable_handle))
        params = check(driver.cuGraphKernelNodeGetParams(self.node),
                       "cuGraphKernelNodeGetParams (tp_stage)")
        params.kernelParams = self._params_address
        self.params = params
        self._loaded = None
        self.enabled = True
        self.disable()

    def stage(self, copies) -> None:
        """Make the next launch copy ``copies`` (at most ``MAX_COPIES`` triplets), or nothing."""
        if copies:
            self.load(copies)
        elif self.enabled:
            self.disable()

    def load(self, copies) -> None:
        """Make the next launch copy ``copies`` (at most ``MAX_COPIES`` triplets, at least one).

        The executable keeps the parameters of the last load (cuGraphExecKernelNodeSetParams
        copies them in), so the same triplets as last time (a loop staging the same buffers, or
        fresh ones the caching allocator placed at the same addresses) skip the update and
        the cost it adds to the next launch."""
        if copies != self._loaded:
            count = len(copies)
            args = self.args
            args.words[0:3 * count] = [*_flatten(copies)]
            args.count = count
            per_copy = -(-max(map(_largest, copies)) // _BYTES_PER_PASS)
            grid = (max(1, min(per_copy, self.max_blocks // count)), count)
            params = self.params
            if grid != self._grid:
                params.gridDimX, params.gridDimY = grid
                self._grid = grid
            self._loaded = None
            err = _set_params(self.exec, self.node, params)[0]
            if err is not DRIVER_SUCCESS:
                raise_error(err, "cuGraphExecKernelNodeSetParams (tp_stage)")
            self._loaded = list(copies)
        if not self.enabled:
            check(driver.cuGraphNodeSetEnabled(self.exec, self.node, 1),
                  "cuGraphNodeSetEnabled (tp_stage)")
            self.enabled = True

    def disable(self) -> None:
        """Make the next launch skip staging."""
        if self.enabled:
            check(driver.cuGraphNodeSetEnabled(self.exec, self.node, 0),
                  "cuGraphNodeSetEnabled (tp_stage)")
            self.enabled = False
