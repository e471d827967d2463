"""The ``cudagraphs`` compile backend: capture once per input signature, then stage and replay.

For each new signature — the shapes, strides, dtypes and devices of the tensor arguments and the
values of the others — the first call runs the function eagerly (the warm-up, whose result it
returns), then captures it into a :class:`~tensorplay.accelerator.Graph` over static copies of
the inputs (with the inputs' strides where their elements are dense, so the function sees the
layout it sees eagerly).
Later calls with that signature copy the fresh inputs onto the static ones, replay, and copy the
static copies the function wrote back into the caller's tensors, all in one
``Graph.stage_and_launch``. Every graph of one compiled function shares one memory pool.

Inputs changed in place: the capture records which static copies the function writes, directly
or through a view (Note [write records] in ``_runtime/writes.py``); after every call those
inputs hold what an eager call would have left in them, as with PyTorch's compile. The warm-up
changes them once, eagerly; the capture runs on the copies only. An output that *is* an input
is returned as the caller's tensor. A call whose written input shares memory with another tensor
argument, or is an output of a compiled call, runs eagerly (the graph wrote a private copy of
each input), with the reason logged once.

What cannot be captured runs eagerly, with one line on the ``tensorplay.compiler`` logger giving
the reason: host tensors, tensors on more than one device, no accelerator, or a capture-unsafe
call during capture (such as ``.item()``).

.. warning:: Outputs are the graph's static buffers. The next call overwrites them, and using an
   output of an earlier call afterwards raises ``RuntimeError``: ``clone()`` what you keep.
   Views taken of an output are not guarded; neither is an output that is a view of an input
   (it views the static copy, holding this call's values). Writes made outside tensorplay's
   ops (through DLPack or CuPy) are not seen, so they are not copied back.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from ... import accelerator
from ..._runtime import dispatch as _dispatch, writes as _writes
from ..._runtime.device import device as _device
from ..._runtime.select import accelerator_backend
from ..._tensor import creation as _creation, linalg as _linalg, rewrite as _rewrite
from ..._tensor.tensor import Tensor

log = logging.getLogger("tensorplay.compiler")

_LEAF = object()


def _flatten(value, tensors: list, spec_out: list):
    """Flatten nested tuples/lists/dicts; tensors go to ``tensors``, the structure to a spec."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return ("T", value.shape, value.dtype, value.device, value.stride())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_flatten(v, tensors, spec_out) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _flatten(v, tensors, spec_out)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"compiled functions take tensors and hashable values; got an "
                        f"unhashable {type(value).__name__}") from None
    return ("V", type(value), value)


def _static_copy(tensor: Tensor) -> Tensor:
    """A graph-owned copy of an input with the input's strides (so the captured function sees
    the layout an eager call sees: ``is_contiguous()``, ``view`` ...) when its elements are
    dense in some order (a transpose or permutation of a contiguous tensor); else a contiguous
    copy (expanded or gapped inputs)."""
    shape, strides = tuple(tensor.shape), tensor.stride()
    if tensor.is_contiguous():
        return tensor.clone()
    order = sorted(range(len(shape)), key=lambda d: -strides[d])   # outermost first
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != expected:
            return tensor.clone()
        expected *= shape[d]
    base = _creation.empty(tuple(shape[d] for d in order), dtype=tensor.dtype,
                           device=tensor.device)
    static = base.permute(*sorted(range(len(shape)), key=order.__getitem__))
    static.copy_(tensor)
    return static


def _rebuild(spec, tensors):
    kind = spec[0]
    if kind == "T":
        return next(tensors)
    if kind in ("tuple", "list"):
        items = [_rebuild(s, tensors) for s in spec[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: _rebuild(s, tensors) for k, s in spec[1]}
    return spec[2]


class _Entry:
    """One captured signature: its graph, static inputs and outputs, the output structure, the
    inputs the function writes (copied back after every replay) and the outputs that are
    inputs (``returned_inputs[k]``: the index of the input output ``k`` is, or None)."""

    __slots__ = ("graph", "static_inputs", "static_outputs", "output_spec", "write_back",
                 "returned_inputs", "output_spans", "generation", "hazard_logged", "fused")

    def __init__(self, graph, static_inputs, static_outputs, output_spec, writes,
                 fused: tuple[int, int]):
        self.fused = fused   # (products, chains)
        self.graph = graph
        self.static_inputs = static_inputs
        self.static_outputs = static_outputs
        self.output_spec = output_spec
        spans = [_writes.extent(static) for static in static_inputs]
        self.write_back = tuple(index for index, span in enumerate(spans)
                                if any(_writes.overlaps(span, write) for write in writes))
        graph._copy_back_after_launch(self.write_back)
        self.returned_inputs = tuple(
            next((k for k, static in enumerate(static_inputs) if static is out), None)
            for out in static_outputs)
        self.output_spans = [_writes.extent(out) for out in static_outputs]
        self.generation = 0
        self.hazard_logged = False

    def write_back_hazard(self, tensors) -> str | None:
        """Why this call cannot replay: an input the function writes shares memory with another
        tensor argument (the graph wrote a private copy of each, so eager and the graph would
        disagree), or with an output of a compiled call (the launch rewrites that memory)."""
        spans = [_writes.extent(tensor) for tensor in tensors]
        for index in self.write_back:
            span = spans[index]
            if tensors[index]._guard is not None or any(
                    _writes.overlaps(span, out) for out in self.output_spans):
                return (f"tensor argument #{index}, which the function writes, is an output "
                        f"of a compiled call (clone() it to keep it)")
            for other, other_span in enumerate(spans):
                if other != index and _writes.overlaps(span, other_span):
                    return (f"tensor arguments #{index} and #{other} share memory, and the "
                            f"function writes #{index}")
        return None


def _output_guard(entry: _Entry, generation: int, call_number: int):
    def guard(tensor):
        if entry.generation != generation:
            raise RuntimeError(
                f"this output of compiled call #{call_number} was overwritten by a later call "
                f"of the same compiled function (its graph reuses the output memory); "
                f"clone() outputs you want to keep across calls")
    return guard


def _capture_device(tensors):
    """The device a call is captured on: its tensor arguments' one device, or, for a function
    of no tensor argument (a training step over the tensors it closes over), the current
    accelerator device."""
    if tensors:
        return tensors[0].device
    # (a call is captured only where an accelerator was built: _uncapturable_reason)
    return _device(accelerator_backend().device_type,  # type: ignore[union-attr]
                   accelerator.current_device_index())


class CudaGraphsFunction:
    """A function compiled with the cudagraphs backend (see the module docstring)."""

    def __init__(self, fn, cache_size: int, fuse: bool = True):
        self._fn = fn
        self._fuse = fuse
        self._cache_size = cache_size
        self._entries: OrderedDict = OrderedDict()
        self._eager: dict = {}
        self._pool: tuple[int, int] | None = None
        self._calls = 0

    # -- introspection for tests and users --------------------------------------------------
    @property
    def cache_info(self) -> dict:
        """``{"graphs": n, "eager": m, "calls": k}``: captured and eager signatures."""
        return {"graphs": len(self._entries), "eager": len(self._eager), "calls": self._calls}

    @property
    def fused_products(self) -> int:
        """How many fused products (matmul + bias [+ activation], see ``tp.compile``) the cached
        graphs hold."""
        return sum(entry.fused[0] for entry in self._entries.values())

    @property
    def fused_chains(self) -> int:
        """How many fused chains of elementwise ops (see ``tp.compile``) the cached graphs
        hold."""
        return sum(entry.fused[1] for entry in self._entries.values())

    def __call__(self, *args, **kwargs):
        self._calls += 1
        tensors: list = []
        signature = (_flatten(args, tensors, []), _flatten(kwargs, tensors, []))
        entry = self._entries.get(signature)
        if entry is not None:
            self._entries.move_to_end(signature)
            if entry.write_back:
                hazard = entry.write_back_hazard(tensors)
                if hazard is not None:
                    self._log_hazard(entry, hazard)
                    return self._fn(*args, **kwargs)
            return self._replay(entry, tensors)
        if signature in self._eager:
            return self._fn(*args, **kwargs)
        reason = self._uncapturable_reason(tensors)
        if reason is not None:
            return self._run_eagerly(signature, reason, args, kwargs)
        device = _capture_device(tensors)
        recorder = _rewrite.Recorder(_dispatch.current_native_stream(device))
        with recorder:
            result = self._fn(*args, **kwargs)  # warm-up: also this call's result
        if not tensors:   # a function of no tensor argument: its results say where it works
            produced: list = []
            _flatten(result, produced, [])
            places = {t.device for t in produced}
            if any(place.type == "cpu" for place in places) or len(places) > 1:
                self._eager[signature] = "its results are on the host or on several devices"
                log.warning("tensorplay.compile(%s): running eagerly for this signature: it "
                            "takes no tensor argument and returns tensors on %s", self._name,
                            ", ".join(sorted(str(p) for p in places)))
                return result
            if places and places != {device}:
                device = places.pop()
                recorder = _rewrite.Recorder(_dispatch.current_native_stream(device))
        try:
            entry = self._capture(signature, tensors, recorder, device)
        except RuntimeError as error:
            self._eager[signature] = str(error)
            log.warning("tensorplay.compile(%s): running eagerly for this signature: the "
                        "capture failed: %s", self._name, error)
            return result
        self._entries[signature] = entry
        if len(self._entries) > self._cache_size:
            _, evicted = self._entries.popitem(last=False)
            evicted.graph.reset()
        return result

    @property
    def _name(self) -> str:
        return getattr(self._fn, "__qualname__", repr(self._fn))

    def _log_hazard(self, entry: _Entry, hazard: str) -> None:
        if not entry.hazard_logged:
            entry.hazard_logged = True
            log.warning("tensorplay.compile(%s): running eagerly the calls where %s", self._name,
                        hazard)

    def _run_eagerly(self, signature, reason: str, args, kwargs):
        self._eager[signature] = reason
        log.warning("tensorplay.compile(%s): running eagerly for this signature: %s",
                    self._name, reason)
        return self._fn(*args, **kwargs)

    @staticmethod
    def _uncapturable_reason(tensors) -> str | None:
        if accelerator_backend() is None:
            return "no accelerator was built (host-only), so there is nothing to capture on"
        devices = {t.device for t in tensors}
        if any(d.type == "cpu" for d in devices):
            return "it takes host (cpu) tensors, and graphs run on an accelerator"
        if len(devices) > 1:
            names = ", ".join(sorted(str(d) for d in devices))
            return f"its tensors are on more than one device ({names})"
        return None

    def _capture(self, signature, tensors, recorder: _rewrite.Recorder, device) -> _Entry:
        """Capture with the warm-up's fusable groups rewritten (Note [fusion rewrite] in
        ``_tensor/rewrite.py``); should the capture stray from the warm-up, capture again as
        written."""
        groups = recorder.groups() if self._fuse else {}
        if groups:
            rewriter = _rewrite.Rewriter(recorder, groups, _fuse, device)
            try:
                return self._capture_once(signature, tensors, rewriter, device)
            except _rewrite.FusionMismatch as why:
                log.info("tensorplay.compile(%s): capturing without fusion: %s", self._name,
                         why)
        return self._capture_once(signature, tensors, None, device)

    def _capture_once(self, signature, tensors, rewriter: _rewrite.Rewriter | None,
                      device) -> _Entry:
        if self._pool is None:
            self._pool = accelerator.graph_pool_handle()
        with accelerator.device_index(device.index):
            static_inputs = [_static_copy(t) for t in tensors]
            static_iter = iter(static_inputs)
            static_args = _rebuild(signature[0], static_iter)
            static_kwargs = _rebuild(signature[1], static_iter)
            graph = accelerator.Graph(pool=self._pool)
            with _writes.recording() as writes, graph:
                if rewriter is None:
                    outputs = self._fn(*static_args, **static_kwargs)
                else:
                    with rewriter:
                        outputs = self._fn(*static_args, **static_kwargs)
                    rewriter.check_complete()
            out_tensors: list = []
            output_spec = _flatten(outputs, out_tensors, [])
        return _Entry(graph, static_inputs, out_tensors, output_spec, writes,
                      (rewriter.products, rewriter.chains) if rewriter is not None else (0, 0))

    def _replay(self, entry: _Entry, tensors):
        entry.graph.stage_and_launch(entry.static_inputs, tensors)
        entry.generation += 1
        guard = _output_guard(entry, entry.generation, self._calls)
        fresh = []
        for static, source in zip(entry.static_outputs, entry.returned_inputs):
            if source is not None:   # ``return x`` / ``x.add_(y)``: eager returns the caller's x
                fresh.append(tensors[source])
                continue
            view = static._alias()
            view._guard = guard
            fresh.append(view)
        return _rebuild(entry.output_spec, iter(fresh))


def _fuse(a, b, bias, activation, residual=None):
    """The Rewriter's fused product: ``linalg.fused_matmul``, or with a residual
    ``linalg.fused_matmul_residual``."""
    if residual is None:
        return _linalg.fused_matmul(a, b, bias, activation)
    return _linalg.fused_matmul_residual(a, b, bias, residual)
