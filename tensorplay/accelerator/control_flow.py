"""Functional control flow: ``tp.cond``, ``tp.while_loop``, ``tp.fori_loop``, ``tp.switch``.

PyTorch's ``torch.cond(pred, true_fn, false_fn, operands)`` and ``torch.while_loop(cond_fn,
body_fn, carried_inputs)``; JAX's ``lax.fori_loop(lower, upper, body_fun, init_val)`` and
``lax.switch(index, branches, *operands)``, spelled ``switch(index, branches, operands)``: its
operands come as one tuple or list, as ``cond``'s do. Varargs cannot tell a tuple operand from
operands wrapped by mistake, which then failed inside a branch; one argument that must be a
tuple or list is checked at the call (``fori_loop`` keeps JAX's ``init_val``, one value of any
structure). Each call runs in one of two modes, chosen by whether
this thread's current stream, on the device of the call's tensors, records into a
:class:`~tensorplay.accelerator.Graph` (``graphs.current_capturing_graph``):

- **Eager** (nothing captures there, the call's tensors are all host tensors, or the build is
  host-only): plain Python. Each decision reads its predicate on the host once (``bool(pred)``,
  ``int(index)``: a device synchronization on an accelerator), so the functions can be stepped
  through in a debugger.
- **Captured** (inside ``with g:``, ``g.capture_begin()`` or ``tp.compile``'s capture): the call
  becomes conditional nodes of that graph, built from Graph's conditional API only. Every
  predicate is computed on the device; replaying never reads anything on the host, so a
  captured loop costs no host synchronization. The functions run at capture only (both branches
  of a ``cond`` and every branch of a ``switch`` once, a loop body once, ``cond_fn`` twice:
  before the loop and at the end of the body); the graph then runs what they recorded whenever
  the device decides to. The constructions:

  * ``cond``: where the driver has CUDA 12.8's two-body IF node (and on sim), ONE if/else node
    gated on ``pred``: its first body runs ``true_fn`` and copies its outputs into result
    buffers (allocated there, from ``true_fn``'s outputs, in the graph's pool), its second
    ``false_fn`` into the same buffers. Otherwise ``p`` (a copy of ``pred``) and ``not_p`` are
    computed before the nodes (one kernel writes both); an if node
    on ``p`` runs ``true_fn`` and copies its outputs into result buffers (allocated there, from
    ``true_fn``'s outputs, in the graph's pool); an if node on ``not_p`` runs ``false_fn`` and
    copies its outputs into the same buffers: the "two if nodes for else" construction, which
    the debug dump shows as two if nodes.
  * ``while_loop``: the carried values are cloned into graph-owned buffers; a predicate buffer
    is written from ``cond_fn`` before a while node and again, in place, at the end of its body;
    the body runs ``body_fn`` and copies its results back into the carried buffers (results
    that are the buffers themselves, updated in place, are not copied). A ``cond_fn`` that
    returns one of the carried values (a one-element bool flag the body keeps up to date) is
    the node's predicate itself: no copy per iteration.
  * ``fori_loop``: the same over a 0-d int64 counter on the device, from ``lower`` while it is
    below ``upper``; one kernel per pass advances the counter and writes the predicate. With
    Python-int bounds a pass runs ``unroll`` consecutive iterations (8 by default for loops of
    16 or more): one kernel writes the pass's counters, ``body_fn`` is recorded once per
    iteration, each copy taking the previous one's result, and the iterations left over are
    recorded after the node. Each pass of a while node costs about as much as four small
    kernels on an H200; unrolling spreads that cost over the pass.
  * ``switch``: the index is clamped on the device (one kernel); where the driver has CUDA
    12.8's SWITCH node (and on sim), one switch node with a body per branch follows, each
    copying its outputs into the result buffers; otherwise a chain of if nodes, one per branch,
    each gated on ``idx == k``.

The contract, in both modes:

- **Results are new tensors**, never the caller's inputs, in the structure the functions return
  (a tensor, or tuples, lists, named tuples and dicts of tensors; dicts come back with their keys
  sorted, as in JAX, and are compared by key, not order): eagerly, an output that aliases
  an input is cloned; captured, results are graph-owned buffers, overwritten by every replay
  (``clone()`` what you keep, as with any graph output). ``while_loop`` and ``fori_loop`` clone
  the carried values first, so a body may update them in place without touching the caller's
  tensors. Branches of ``cond``/``switch`` get the operands themselves: an in-place change to an
  operand happens exactly when the branch runs (PyTorch refuses such changes; do not rely on
  them).
- **Checks** as in PyTorch and JAX: a predicate is a one-element bool tensor or a Python bool;
  the functions are callable; the operands of ``cond`` and ``switch`` and the carried values of
  ``while_loop`` are one tuple or list (one shared check, naming the call's form); branches
  return the same structure, shapes, dtypes and devices (checked when captured: see the pitfall
  below); ``body_fn`` returns the carried structure with the carried shapes, dtypes and
  devices. Errors name the branch or the iteration and what differed. Wrong argument types
  raise ``TypeError``; mismatches raise ``RuntimeError`` (PyTorch raises ``RuntimeError`` or a
  ``torch._dynamo`` ``UserError`` there, JAX a ``TypeError``); ``switch`` with no branches
  raises ``ValueError`` (as JAX).
- **Pitfall: eagerly, nothing checks that the branches agree.** Eagerly, ``cond`` and ``switch``
  run only the selected branch and have nothing to compare its outputs to, so branches that
  return different structures, shapes or dtypes pass; only a capture checks them (every branch
  runs once there), raising ``RuntimeError`` at the call, naming the branch and what differed.
  ``torch.cond`` and ``jax.lax.switch`` trace every branch even eagerly, on shape-only stand-ins;
  tensorplay has no such tensors, and running an untaken branch to see its outputs would run
  its kernels and its Python (prints, counters, random draws, host reads, breakpoints) where
  eagerly only the taken branch may run. To check a call's branches, capture it once (``with
  tp.accelerator.Graph():``, or call it through ``tp.compile``).
- **Python constants.** A Python bool ``pred`` of ``cond`` (or a Python int ``index`` of
  ``switch``) is a constant: captured, only the selected function runs and is recorded, exactly
  as eagerly. A Python bool from ``cond_fn`` is written into the loop's predicate; captured, the
  constant True at the end of the body raises ``RuntimeError`` (the loop would never end).
- **Devices.** Captured, predicates, bounds, indices, carried values and outputs must be on the
  capturing device (a host tensor would be read once, at capture, and never again).
- **Errors inside a capture.** A check that fails before a node is opened leaves the capture as it
  was (work already recorded, such as the clones of the carried values, is harmless). An error
  raised inside a conditional body (by a function or by a check of its outputs) closes the bodies
  this call opened and invalidates the capture: a ``with g:`` block that raises discards it, and
  a later ``capture_end()`` raises saying why. Everything is usable afterwards.
- **Random numbers.** Random ops inside a body draw fresh numbers on every iteration, and only in
  the branch taken: after the same ``manual_seed``, k replays give what k eager calls give.
- **Nesting.** The forms nest to any depth, and nest in bodies opened with Graph's low-level
  ``begin_capture_to_if_node``/``begin_capture_to_while_node`` (they record into the innermost
  open body).
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .. import _dtype
from .._runtime import device as _device, dispatch as _dispatch, state as _state
from .._runtime import writes as _writes
from .._runtime.select import accelerator_backend
from .._tensor import creation as _creation
from .._tensor.fusion import fused
from .._tensor.tensor import Tensor
from .graphs import Graph, current_capturing_graph

__all__ = ["cond", "fori_loop", "switch", "while_loop"]

#: while_loop's carried values: its result has their structure (a tuple for a tuple ...)
_Carried = TypeVar("_Carried", bound=tuple | list)

_SAME_BRANCHES = ("every branch must return the same structure of tensors, with the same "
                  "shapes, dtypes and devices")
_SAME_CARRY = ("body_fn must return the carried values' structure, with their shapes, dtypes "
               "and devices (the carried values keep them across iterations)")


# -- structures -------------------------------------------------------------------------------
# A structure's definition ("treedef"): None for a tensor, (container type, dict keys or None,
# children's definitions) for a tuple, list, named tuple or dict. Dicts are flattened in sorted
# key order (as JAX does), so insertion order does not matter.

class _NotATensor(Exception):
    pass


def _dict_keys(value: dict) -> tuple:
    try:
        return tuple(sorted(value))
    except TypeError:   # keys of mixed types: their insertion order
        return tuple(value)


def _is_sequence(value) -> bool:
    """A tuple, list or named tuple (other tuple subclasses are leaves)."""
    kind = type(value)
    return kind is tuple or kind is list or (isinstance(value, tuple) and hasattr(kind, "_fields"))


def _flatten(value, leaves: list):
    if isinstance(value, Tensor):
        leaves.append(value)
        return None
    kind = type(value)
    if _is_sequence(value):
        return (kind, None, tuple([_flatten(item, leaves) for item in value]))
    if kind is dict:
        keys = _dict_keys(value)
        return (dict, keys, tuple([_flatten(value[key], leaves) for key in keys]))
    raise _NotATensor


def _unflatten(treedef, leaves):
    """Rebuild a structure from ``leaves``, an iterator of tensors."""
    if treedef is None:
        return next(leaves)
    kind, keys, children = treedef
    items = [_unflatten(child, leaves) for child in children]
    if kind is dict:
        return dict(zip(keys, items))
    if kind is list:
        return items
    if kind is tuple:
        return tuple(items)
    return kind(*items)   # a named tuple


def _labels(treedef) -> list[str]:
    """The index suffix of each leaf (``[1]['a']``), in leaf order."""
    if treedef is None:
        return [""]
    kind, keys, children = treedef
    out: list[str] = []
    for position, child in enumerate(children):
        label = f"[{keys[position]!r}]" if kind is dict else f"[{position}]"
        out.extend(label + rest for rest in _labels(child))
    return out


def _describe(treedef) -> str:
    """A structure as Python spells it: ``(Tensor, [Tensor])``, ``{'a': Tensor}``."""
    if treedef is None:
        return "Tensor"
    kind, keys, children = treedef
    parts = [_describe(child) for child in children]
    if kind is dict:
        return "{" + ", ".join(f"{key!r}: {part}" for key, part in zip(keys, parts)) + "}"
    if kind is list:
        return "[" + ", ".join(parts) + "]"
    inner = ", ".join(parts) + ("," if len(parts) == 1 else "")
    return ("" if kind is tuple else kind.__name__) + f"({inner})"


def _first_non_tensor(value, path: str):
    """``(path, object)`` of the first leaf that is not a tensor, or None."""
    if isinstance(value, Tensor):
        return None
    if _is_sequence(value):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    elif type(value) is dict:
        items = [(f"{path}[{key!r}]", value[key]) for key in _dict_keys(value)]
    else:
        return path, value
    for item_path, item in items:
        found = _first_non_tensor(item, item_path)
        if found is not None:
            return found
    return None


def _tensors(value, api: str, what: str, root: str) -> tuple[Any, list[Tensor]]:
    """``(treedef, leaves)`` of ``value``, whose leaves must all be tensors (TypeError)."""
    leaves: list[Tensor] = []
    try:
        treedef = _flatten(value, leaves)
    except _NotATensor:
        found = _first_non_tensor(value, root)
        assert found is not None   # _flatten stopped at it
        path, leaf = found
        raise TypeError(f"{api}: {what} must be tensors, or tuples, lists and dicts of tensors, "
                        f"but {path} is a {type(leaf).__name__} ({leaf!r:.60}); make it a "
                        f"tensor (tp.tensor(...))") from None
    return treedef, leaves


def _tensor_leaves(value, out: list) -> list:
    """The tensors anywhere in ``value`` (tuples, lists, dicts); other objects are skipped."""
    if isinstance(value, Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _tensor_leaves(item, out)
    elif type(value) is dict:
        for item in value.values():
            _tensor_leaves(item, out)
    return out


def _meta(tensor: Tensor) -> str:
    return f"shape {tuple(tensor.shape)}, dtype {tensor.dtype.name}, on {tensor.device}"


def _check_same(api: str, who: str, treedef, leaves: list[Tensor], ref_root: str, ref_treedef,
                ref_metas: list[tuple], rule: str) -> None:
    """RuntimeError unless ``leaves`` (structure ``treedef``, returned by ``who``) match the
    reference structure and the ``(shape, dtype, device)`` of each reference leaf; the
    reference is named ``ref_root`` (``true_fn's result``, ``carried_inputs``)."""
    if treedef != ref_treedef:
        raise RuntimeError(f"{api}: {who} returned {_describe(treedef)}, where {ref_root} is "
                           f"{_describe(ref_treedef)}; {rule}")
    for position, (leaf, meta) in enumerate(zip(leaves, ref_metas)):
        if (leaf.shape, leaf.dtype, leaf.device) != meta:
            label = _labels(treedef)[position]
            shape, dtype, device = meta
            raise RuntimeError(f"{api}: {who} returned result{label} with {_meta(leaf)}, where "
                               f"{ref_root}{label} has shape {tuple(shape)}, dtype "
                               f"{dtype.name}, on {device}; {rule}")


def _metas(leaves: list[Tensor]) -> list[tuple]:
    return [(leaf.shape, leaf.dtype, leaf.device) for leaf in leaves]


def _fresh(leaves: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """``leaves`` with every one that is or overlaps an input replaced by a clone."""
    if not inputs:
        return leaves
    spans = [_writes.extent(tensor) for tensor in inputs]
    out = []
    for leaf in leaves:
        span = _writes.extent(leaf)
        if any(leaf is tensor for tensor in inputs) or \
                any(_writes.overlaps(span, other) for other in spans):
            leaf = leaf.clone()
        out.append(leaf)
    return out


# -- argument checks --------------------------------------------------------------------------

def _check_callable(api: str, name: str, fn) -> None:
    if not callable(fn):
        raise TypeError(f"{api}: {name} must be callable, got {type(fn).__name__} {fn!r:.60}")


def _is_integer(dtype) -> bool:
    return not (dtype is _dtype.bool or dtype.is_floating_point or dtype.is_complex)


def _predicate(api: str, what: str, value):
    """``value`` if it is a predicate: a Python bool, or a one-element bool tensor."""
    if value is True or value is False:
        return value
    if not isinstance(value, Tensor):
        raise TypeError(f"{api}: {what} must be a one-element bool tensor or a Python bool, "
                        f"got {type(value).__name__} {value!r:.60}")
    if value.dtype is not _dtype.bool:
        raise TypeError(f"{api}: {what} must be a bool tensor, got dtype {value.dtype.name} "
                        f"(compare to get one, e.g. x > 0, or cast with .to(tp.bool))")
    if value.numel() != 1:
        raise RuntimeError(f"{api}: {what} must have exactly one element, got shape "
                           f"{tuple(value.shape)} ({value.numel()} elements); reduce it first, "
                           f"e.g. with .any() or .all()")
    return value


def _integer_scalar(api: str, name: str, value, must: str):
    """``value`` if it is a Python int (not a bool) or a one-element integer tensor."""
    if isinstance(value, Tensor):
        if _is_integer(value.dtype) and value.numel() == 1:
            return value
        raise TypeError(f"{api}: {name} must be {must}, got a tensor of dtype "
                        f"{value.dtype.name} and shape {tuple(value.shape)}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{api}: {name} must be {must}, got {type(value).__name__} "
                        f"{value!r:.60}")
    return value


def _check_operands(api: str, form: str, name: str, value, extra: tuple = ()) -> None:
    """TypeError unless ``value``, the argument ``name`` of the call ``form``, is one tuple or
    list and no positional argument follows it (``extra``). The one check of ``cond``'s and
    ``switch``'s operands and ``while_loop``'s carried values: a bare tensor, or operands
    spelled as varargs (``jax.lax.switch``'s form), is refused at the call, where it would
    otherwise fail inside a branch, far from the mistake."""
    if extra:
        count = len(extra)
        kinds = ", ".join(type(item).__name__ for item in extra)
        more = f"{count} more positional arguments ({kinds}) follow" if count > 1 else \
            f"1 more positional argument ({kinds}) follows"
        raise TypeError(f"{api}: {name} must be one tuple or list, but {more} it; call {form} "
                        f"with {name} a tuple or list: (x, y), not x, y")
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{api}: {name} must be a tuple or list, got {type(value).__name__}; "
                        f"call {form} with {name} a tuple or list: wrap a single tensor x as "
                        f"(x,)")


# -- capture plumbing -------------------------------------------------------------------------

def _graph_for(tensors: list[Tensor]) -> tuple[Graph | None, Any]:
    """The graph the call records into, and its device; ``(None, None)``: run eagerly. The
    first accelerator device among the tensors' whose current stream captures decides (so a
    predicate on another device than the capture's is refused by the device checks, not read
    once at capture); none capturing, or only host tensors, mean eager; no tensors at all, the
    current device."""
    first = None
    for tensor in tensors:
        device = tensor.device
        if device.type != "cpu" and device != first:
            graph = current_capturing_graph(device)
            if graph is not None:
                return graph, device
            first = first or device
    if tensors:
        return None, None
    graph = current_capturing_graph()
    if graph is None:
        return None, None
    backend = accelerator_backend()
    assert backend is not None   # a graph captures
    return graph, _device.device(backend.device_type, _state.current_device_index())


def _on_device(api: str, what: str, tensor: Tensor, device) -> None:
    if tensor.device == device:
        return
    if tensor.device.type == "cpu":
        raise RuntimeError(f"{api}: {what} is on cpu, but this call is captured into a graph on "
                           f"{device}: a host value would be read once, at capture, and never "
                           f"again. Put it on {device} (or pass a Python bool or int for a "
                           f"constant)")
    raise RuntimeError(f"{api}: {what} is on {tensor.device}, but this call is captured into a "
                       f"graph on {device}; put it on {device}")


def _outputs(api: str, who: str, value, device) -> tuple[Any, list[Tensor]]:
    treedef, leaves = _tensors(value, api, f"what {who} returns", "result")
    for position, leaf in enumerate(leaves):
        if leaf.device != device:
            path = "result" + _labels(treedef)[position]
            _on_device(api, f"{who}'s {path}", leaf, device)
    return treedef, leaves


class _Where:
    """The body ``_body`` opened: which user function it records (named in errors)."""

    __slots__ = ("graph", "depth", "api", "who")

    def __init__(self, graph: Graph, depth: int, api: str, who: str):
        self.graph, self.depth, self.api, self.who = graph, depth, api, who

    def check_balanced(self) -> None:
        """RuntimeError unless exactly the body ``_body`` opened is open (the function left
        none of its own open and closed none it did not open)."""
        opened = self.graph._body_depth() - self.depth
        if opened != 1:
            what = (f"left {opened - 1} conditional body(ies) open" if opened > 1 else
                    "closed the conditional body it runs in")
            raise RuntimeError(f"tp.{self.api}: {self.who} {what} (unbalanced begin_capture_to_"
                               f"if_node/while_node and end_capture_to_conditional_node calls)")

    def begin_else(self, who: str) -> None:
        """Close the if/else node's first body (checked balanced) and open its second."""
        self.check_balanced()
        self.graph.begin_capture_to_else_body()
        self.who = who

    def begin_next(self, who: str) -> None:
        """Close this case of the switch node (checked balanced) and open the next."""
        self.check_balanced()
        self.graph.begin_capture_to_next_case()
        self.who = who


@contextlib.contextmanager
def _body(graph: Graph, kind: str, predicate: Tensor, api: str, who: str, count: int = 1):
    """Record the block into an if, if_else or while body of ``graph`` gated by ``predicate``
    (an if_else block calls the yielded ``where.begin_else(who)`` halfway). On an error, close
    every body opened since (nested ones included) and invalidate the capture."""
    depth = graph._body_depth()
    where = _Where(graph, depth, api, who)
    if kind == "while":
        graph.begin_capture_to_while_node(predicate)
    elif kind == "if_else":
        graph.begin_capture_to_if_else_node(predicate)
    elif kind == "switch":
        graph.begin_capture_to_switch_node(predicate, count)
    else:
        graph.begin_capture_to_if_node(predicate)
    try:
        yield where
        where.check_balanced()
    except BaseException as error:
        graph._invalidate(f"tp.{api}'s {where.who} raising {type(error).__name__} inside its "
                          f"conditional body")
        while graph._body_depth() > depth:
            before = graph._body_depth()
            with contextlib.suppress(RuntimeError):
                graph.end_capture_to_conditional_node()
            if graph._body_depth() >= before:
                break
        raise
    graph.end_capture_to_conditional_node()


def _copy_back(buffers: list[Tensor], spans: list, outputs: list[Tensor]) -> None:
    """Copy each output into its carried buffer. An output that is a buffer's own tensor needs
    no copy; one that overlaps any buffer is staged through a clone first (``(b, a)`` from
    ``(a, b)`` must not read a buffer already overwritten)."""
    staged = []
    for buffer, output in zip(buffers, outputs):
        if output is not buffer:
            span = _writes.extent(output)
            if any(_writes.overlaps(span, other) for other in spans):
                output = output.clone()
        staged.append(output)
    for buffer, output in zip(buffers, staged):
        if output is not buffer:
            buffer.copy_(output)


def _write_predicate(buffer: Tensor, value, api: str, what: str, device, at_end: bool) -> None:
    value = _predicate(api, what, value)
    if isinstance(value, bool):
        if value and at_end:
            raise RuntimeError(f"{api}: {what} is the Python constant True at the end of the "
                               f"captured body, so the loop would never end; return a bool "
                               f"tensor computed from the carried values")
        buffer.fill_(value)
        return
    _on_device(api, what, value, device)
    buffer.copy_(value.reshape(1))


# -- the loop-control kernels: one launch where ops would take two or three ------------------

@fused("tp_branch_predicates")
def _branch_predicates(xp):
    def write(pred, p, not_p):
        """``p = pred`` and ``not_p = !pred`` (0-d bool views)."""
        xp.logical_not(pred, out=not_p)
        xp.logical_not(not_p, out=p)
    return write


@fused("tp_clamp_index")
def _clamp_index(xp):
    def clamp(index, last, selected):
        """``selected = clip(index, 0, last)`` (0-d views; ``last`` an int), as JAX's switch."""
        xp.minimum(xp.maximum(index, 0), last, out=selected)
    return clamp


@fused("tp_fori_advance")
def _fori_advance(xp):
    def advance(i, stop, running, step):
        """``i += step`` and ``running = i < stop`` (0-d views; ``stop`` a 0-d array or an
        int, ``step`` an int)."""
        i += step
        xp.less(i, stop, out=running)
    return advance


@fused("tp_fori_spread")
def _fori_spread(xp):
    def spread(i, offsets, counters):
        """``counters = i + offsets``: the counters of an unrolled pass (``i`` 0-d)."""
        xp.add(i, offsets, out=counters)
    return spread


def _launch_fused(kernel, device, name: str, *arguments) -> None:
    """Run a :func:`fused` kernel over these ``xp`` arrays (and numbers) in stream order."""
    function = kernel.for_xp(_dispatch.xp_of(device))

    def run():
        function(*arguments)
    _dispatch.launch(device, _dispatch.named(name, run))


# -- cond -------------------------------------------------------------------------------------

def cond(pred: Tensor | bool, true_fn: Callable[..., Any], false_fn: Callable[..., Any],
         operands: tuple | list = ()) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``torch.cond``.

    Eagerly, ``pred`` is read on the host once and only that branch runs. Inside a capture both
    branches run once, at capture, into the two bodies of one if/else node (two if nodes on
    drivers older than CUDA 12.8; see the module docstring); the device picks one at every
    replay.

    Only a capture checks that the branches agree. Eagerly the branch not taken never runs, so
    ``cond(x.sum() > 0, lambda a: a, lambda a: a[:1], (x,))`` returns whichever shape the
    branch taken gives, where ``torch.cond`` refuses it; the same call captured raises
    ``RuntimeError`` at the call, naming ``false_fn`` and both shapes. Capture a call once to
    check it (running the other branch eagerly would run its kernels and its Python side
    effects).

    Args:
        pred: a one-element bool tensor, or a Python bool (a constant: only its branch runs).
        true_fn, false_fn: callables taking ``*operands`` and returning a tensor or a tuple,
            list or dict of tensors; both the same structure, shapes, dtypes and devices.
        operands: a tuple or list whose items the branch is called with (not copied):
            ``(x,)`` for one tensor, ``()`` (the default) for none.

    Returns:
        The branch's outputs, as new tensors (an output that is or views an operand is cloned);
        captured, graph-owned buffers that each replay overwrites.

    Raises:
        TypeError: ``pred`` is not a bool tensor or Python bool, a branch is not callable,
            ``operands`` is not a tuple or list, or a branch returns something other than
            tensors.
        RuntimeError: ``pred`` has more than one element; captured, the branches' outputs
            differ in structure, shape, dtype or device (never checked eagerly, see above), or
            ``pred`` or an output is not on the capturing device.
    """
    pred = _predicate("cond", "pred", pred)
    _check_callable("cond", "true_fn", true_fn)
    _check_callable("cond", "false_fn", false_fn)
    _check_operands("cond", "cond(pred, true_fn, false_fn, operands)", "operands", operands)
    inputs = _tensor_leaves(operands, [])
    graph, device = _graph_for(([pred] if isinstance(pred, Tensor) else []) + inputs)
    if graph is None or isinstance(pred, bool):
        taken = pred if isinstance(pred, bool) else bool(pred)   # the one host read
        return _run_one("cond", "true_fn" if taken else "false_fn",
                        true_fn if taken else false_fn, operands, graph, device, inputs)
    _on_device("cond", "pred", pred, device)
    if graph.supports_if_else_nodes():   # one two-body if node, gated on pred itself
        with _body(graph, "if_else", pred, "cond", "true_fn") as where:
            treedef, metas, results = _true_branch(true_fn, operands, device)
            where.begin_else("false_fn")
            _false_branch(false_fn, operands, device, treedef, metas, results)
        return _unflatten(treedef, iter(results))
    # two if nodes: on a copy of pred (the true branch may change pred) and on its negation
    p = _creation.empty((1,), dtype=_dtype.bool, device=device)
    not_p = _creation.empty((1,), dtype=_dtype.bool, device=device)
    _launch_fused(_branch_predicates, device, "cond_predicates", pred._data.reshape(()),
                  p._data.reshape(()), not_p._data.reshape(()))
    with _body(graph, "if", p, "cond", "true_fn"):
        treedef, metas, results = _true_branch(true_fn, operands, device)
    with _body(graph, "if", not_p, "cond", "false_fn"):
        _false_branch(false_fn, operands, device, treedef, metas, results)
    return _unflatten(treedef, iter(results))


def _run_one(api: str, who: str, branch, operands, graph, device, inputs) -> Any:
    """Only the chosen branch, as called: eagerly (``graph`` None), or recorded into the open
    capture for a Python-constant choice; its outputs as new tensors (an output that is or
    views an operand cloned)."""
    value = branch(*operands)
    if graph is None:
        treedef, leaves = _tensors(value, api, f"what {who} returns", "result")
    else:
        treedef, leaves = _outputs(api, who, value, device)
    return _unflatten(treedef, iter(_fresh(leaves, inputs)))


def _true_branch(true_fn, operands, device) -> tuple:
    """Run ``true_fn`` into the open body and copy its outputs into new result buffers
    (allocated here, in the graph's pool): ``(treedef, metas, results)``."""
    treedef, leaves = _outputs("cond", "true_fn", true_fn(*operands), device)
    results = [_creation.empty_like(leaf) for leaf in leaves]
    for result, leaf in zip(results, leaves):
        result.copy_(leaf)
    return treedef, _metas(leaves), results


def _false_branch(false_fn, operands, device, treedef, metas, results) -> None:
    """Run ``false_fn`` into the open body, check its outputs against ``true_fn``'s and copy
    them into the result buffers."""
    other_def, other = _outputs("cond", "false_fn", false_fn(*operands), device)
    _check_same("cond", "false_fn", other_def, other, "true_fn's result", treedef, metas,
                _SAME_BRANCHES)
    for result, leaf in zip(results, other):
        result.copy_(leaf)


# -- switch -----------------------------------------------------------------------------------

def switch(index: Tensor | int, branches: Sequence[Callable[..., Any]],
           operands: tuple | list = (), *extra: Any) -> Any:
    """``branches[clamp(index, 0, len(branches) - 1)](*operands)``, as ``jax.lax.switch``,
    with the operands as one tuple or list, as :func:`cond` takes them.

    ``switch(i, branches, (x, y))``, where JAX writes ``lax.switch(i, branches, x, y)``: with
    varargs a tuple meant as one operand cannot be told from one passed by mistake, so the
    mistake would fail inside a branch; here ``switch(i, branches, x)`` and ``switch(i,
    branches, x, y)`` raise ``TypeError`` at the call, naming this form.

    An index below 0 selects the first branch, one past the end the last (JAX's clamping).
    Eagerly the index is read on the host once and only that branch runs. Inside a capture
    every branch runs once, at capture, into a case of one switch node (a chain of if nodes on
    drivers older than CUDA 12.8; see the module docstring).

    Only a capture checks that the branches agree. Eagerly the branches not taken never run,
    so branches returning different shapes or dtypes pass; the same call captured raises
    ``RuntimeError`` at the call, naming the first branch that differs from ``branches[0]``
    and how. Capture a call once to check it (running the other branches eagerly would run
    their kernels and their Python side effects).

    Args:
        index: a one-element integer tensor, or a Python int (a constant: only its branch
            runs).
        branches: a non-empty tuple or list of callables, each taking ``*operands`` and
            returning the same structure of tensors with the same shapes, dtypes and devices.
        operands: a tuple or list whose items the branch is called with (not copied):
            ``(x,)`` for one tensor, ``()`` (the default) for none.
        extra: nothing; positional arguments after ``operands`` (JAX's varargs spelling) are
            refused.

    Returns:
        The branch's outputs, as new tensors (see :func:`cond`).

    Raises:
        TypeError: ``index`` is not an integer (a bool, a float, a tensor of another dtype or
            of more than one element), ``branches`` is not a tuple or list of callables,
            ``operands`` is not a tuple or list or positional arguments follow it, or a branch
            returns something other than tensors.
        ValueError: ``branches`` is empty.
        RuntimeError: captured, the branches' outputs differ (never checked eagerly, see
            above), or the index or an output is not on the capturing device.
    """
    must = "an integer: a Python int or a one-element integer tensor"
    index = _integer_scalar("switch", "index", index, must)
    if not isinstance(branches, (tuple, list)):
        raise TypeError(f"switch: branches must be a tuple or list of callables, got "
                        f"{type(branches).__name__}")
    if not branches:
        raise ValueError("switch: branches is empty; give at least one callable")
    for position, branch in enumerate(branches):
        _check_callable("switch", f"branches[{position}]", branch)
    _check_operands("switch", "switch(index, branches, operands)", "operands", operands, extra)
    inputs = _tensor_leaves(operands, [])
    graph, device = _graph_for(([index] if isinstance(index, Tensor) else []) + inputs)
    last = len(branches) - 1
    if graph is None or not isinstance(index, Tensor) or last == 0:
        chosen = 0 if last == 0 else min(max(int(index), 0), last)   # the one host read
        return _run_one("switch", f"branches[{chosen}]", branches[chosen], operands, graph,
                        device, inputs)
    _on_device("switch", "index", index, device)
    selected = _creation.empty((), dtype=_dtype.int64, device=device)
    _launch_fused(_clamp_index, device, "switch_index", index._data.reshape(()), last,
                  selected._data)
    treedef: Any
    metas: Any
    results: Any
    treedef = metas = results = None
    if graph.supports_switch_nodes():   # one switch node, one body per branch
        with _body(graph, "switch", selected, "switch", "branches[0]",
                   count=last + 1) as where:
            for position, branch in enumerate(branches):
                if position:
                    where.begin_next(f"branches[{position}]")
                treedef, metas, results = _switch_branch(branch, operands, device, position,
                                                         treedef, metas, results)
        return _unflatten(treedef, iter(results))
    for position, branch in enumerate(branches):   # a chain of if nodes, on idx == k
        predicate = (selected == position).reshape(1)
        with _body(graph, "if", predicate, "switch", f"branches[{position}]"):
            treedef, metas, results = _switch_branch(branch, operands, device, position,
                                                     treedef, metas, results)
    return _unflatten(treedef, iter(results))


def _switch_branch(branch, operands, device, position: int, treedef, metas, results) -> tuple:
    """Run ``branches[position]`` into the open body; the first one's outputs make the result
    buffers, every later one's are checked against them; each is copied into them."""
    who = f"branches[{position}]"
    out_def, leaves = _outputs("switch", who, branch(*operands), device)
    if results is None:
        treedef, metas = out_def, _metas(leaves)
        results = [_creation.empty_like(leaf) for leaf in leaves]
    else:
        _check_same("switch", who, out_def, leaves, "branches[0]'s result", treedef, metas,
                    _SAME_BRANCHES)
    for result, leaf in zip(results, leaves):
        result.copy_(leaf)
    return treedef, metas, results


# -- while_loop -------------------------------------------------------------------------------

def while_loop(cond_fn: Callable[..., Any], body_fn: Callable[..., Any],
               carried_inputs: _Carried) -> _Carried:
    """``while cond_fn(*carried): carried = body_fn(*carried)``, as ``torch.while_loop``.

    Eagerly, each ``cond_fn`` result is read on the host once (one synchronization per
    iteration on an accelerator). Inside a capture ``cond_fn`` and ``body_fn`` run once each,
    at capture, into a while node whose predicate the device recomputes at the end of every
    iteration (see the module docstring): no host round trip per iteration.

    Args:
        cond_fn: takes ``*carried`` and returns a one-element bool tensor (or a Python bool).
        body_fn: takes ``*carried`` and returns the next carried values: the structure of
            ``carried_inputs`` (a tuple for a tuple), with the same shapes, dtypes and devices.
        carried_inputs: a tuple or list of tensors (nested tuples, lists and dicts allowed).

    Returns:
        The final carried values, in ``carried_inputs``' structure, as new tensors: the values
        are cloned before the first iteration, so the caller's tensors are never modified;
        captured, graph-owned buffers that each replay overwrites.

    Raises:
        TypeError: a function is not callable, ``carried_inputs`` is not a tuple or list of
            tensors, ``cond_fn`` returns something other than a bool tensor or Python bool, or
            ``body_fn`` returns something other than tensors.
        RuntimeError: ``cond_fn`` returns more than one element; ``body_fn``'s result differs
            from the carried values in structure, shape, dtype or device (naming the
            iteration); captured, a value is not on the capturing device, or ``cond_fn``
            returns the constant True at the end of the body.

    .. warning:: A loop whose predicate never becomes false never ends (eagerly, a hang; a
       replay on sim raises after a large iteration count).
    """
    _check_callable("while_loop", "cond_fn", cond_fn)
    _check_callable("while_loop", "body_fn", body_fn)
    _check_operands("while_loop", "while_loop(cond_fn, body_fn, carried_inputs)",
                    "carried_inputs", carried_inputs)
    treedef, leaves = _tensors(carried_inputs, "while_loop", "carried_inputs", "carried_inputs")
    graph, device = _graph_for(leaves)
    metas = _metas(leaves)
    if graph is None:
        current = [leaf.clone() for leaf in leaves]
        carried = _unflatten(treedef, iter(current))
        iteration = 0
        while True:
            what = f"cond_fn's result at iteration {iteration}"
            keep = _predicate("while_loop", what, cond_fn(*carried))
            if not (keep if isinstance(keep, bool) else bool(keep)):   # the one host read
                break
            carried = body_fn(*carried)
            who = f"body_fn at iteration {iteration}"
            out_def, current = _tensors(carried, "while_loop", f"what {who} returns", "result")
            _check_same("while_loop", who, out_def, current, "carried_inputs", treedef,
                        metas, _SAME_CARRY)
            iteration += 1
        return _unflatten(treedef, iter(_fresh(current, leaves)))
    for position, leaf in enumerate(leaves):
        _on_device("while_loop", "carried_inputs" + _labels(treedef)[position], leaf, device)
    buffers = [leaf.clone() for leaf in leaves]
    carried = _unflatten(treedef, iter(buffers))
    first = cond_fn(*carried)
    # A cond_fn that returns one of the carried buffers (a flag the body keeps up to date)
    # drives the node itself: no predicate buffer, and no copy into it per iteration.
    direct = (type(first) is Tensor and any(first is buffer for buffer in buffers)
              and first.dtype is _dtype.bool and first.numel() == 1)
    if direct:
        running = first
    else:
        running = _creation.empty((1,), dtype=_dtype.bool, device=device)
        _write_predicate(running, first, "while_loop",
                         "cond_fn's result before the first iteration", device, at_end=False)
    del first
    spans = [_writes.extent(buffer) for buffer in buffers]
    who = "body_fn (captured once, for every iteration)"
    with _body(graph, "while", running, "while_loop", "body_fn"):
        out_def, outputs = _tensors(body_fn(*carried), "while_loop", f"what {who} returns",
                                    "result")
        _check_same("while_loop", who, out_def, outputs, "carried_inputs", treedef, metas,
                    _SAME_CARRY)
        _copy_back(buffers, spans, outputs)
        del outputs
        end = cond_fn(*carried)
        if not (direct and end is running):
            _write_predicate(running, end, "while_loop",
                             "cond_fn's result at the end of the body", device, at_end=True)
    return _unflatten(treedef, iter(buffers))


# -- fori_loop --------------------------------------------------------------------------------

#: Iterations of a captured ``fori_loop`` with Python-int bounds that one pass of its while node
#: runs when ``unroll`` is left to tensorplay (loops of at least twice as many iterations).
AUTO_UNROLL = 8


def _unroll_count(unroll, count: int | None) -> int:
    """Copies of the body per while pass for ``unroll`` (checked) and ``count`` iterations
    (None: a bound is a tensor, so the count is known only on the device)."""
    if unroll is not None and not isinstance(unroll, (bool, numbers.Integral)):
        raise TypeError(f"fori_loop: unroll must be None, a bool or a positive int, got "
                        f"{type(unroll).__name__} {unroll!r:.60}")
    if unroll is not None and not isinstance(unroll, bool) and unroll < 1:
        raise ValueError(f"fori_loop: unroll must be a positive int, got {unroll}")
    if count is None:
        if unroll is True or unroll not in (None, False, 1):
            raise ValueError(f"fori_loop: unroll={unroll!r} needs loop bounds known at capture "
                             f"(Python ints); with a tensor bound leave it None, 1 or False")
        return 1
    if unroll is None:
        return AUTO_UNROLL if count >= 2 * AUTO_UNROLL else 1
    if unroll is True:
        return max(count, 1)
    return 1 if unroll is False else int(unroll)


def fori_loop(lower: Tensor | int, upper: Tensor | int, body_fn: Callable[[Tensor, Any], Any],
              init_val: Any, *, unroll: int | bool | None = None) -> Any:
    """``val = body_fn(i, val)`` for ``i`` from ``lower`` up to ``upper - 1``; the final
    ``val``, as ``jax.lax.fori_loop``.

    ``i`` is a 0-d int64 tensor in both modes (on the device of ``init_val``'s first tensor,
    eagerly), so a body behaves the same eagerly and captured; do not modify it in place.
    Eagerly the bounds are read on the host once and the loop is a Python loop (``unroll`` is
    checked as when captured, so a call valid eagerly is valid captured, but changes nothing).
    Inside a capture the loop is a while node over a counter on the device (see the module
    docstring) whose body holds ``unroll`` consecutive iterations: ``body_fn`` runs at capture
    once per copy, each copy taking the previous one's result, and the ``(upper - lower) %
    unroll`` iterations left over run after the node. ``lower >= upper`` runs no iteration.

    Unrolling is what makes a captured loop of short bodies fast: on an H200 each pass of a
    while node costs about 5 us beyond its kernels, about four kernel launches' worth, and
    unrolling 8 iterations spreads that over 8 steps.

    Args:
        lower, upper: Python ints or one-element integer tensors.
        body_fn: takes ``(i, val)`` and returns the next ``val``: ``init_val``'s structure,
            with the same shapes, dtypes and devices.
        init_val: a tensor, or a tuple, list or dict of tensors (nested).
        unroll: iterations per pass of the captured while node, as JAX's ``unroll``: a positive
            int, ``True`` (every iteration, no while node) or ``False`` (one). ``None`` (the
            default) lets tensorplay choose: 8 (``AUTO_UNROLL``) when both bounds are Python
            ints and the loop runs at least twice that many iterations, else one.

    Returns:
        The final ``val``, in ``init_val``'s structure, as new tensors (cloned before the first
        iteration; captured, graph-owned buffers that each replay overwrites).

    Raises:
        TypeError: a bound is not an integer, ``unroll`` is not None, a bool or an int,
            ``body_fn`` is not callable, or ``init_val`` or ``body_fn``'s result is not made of
            tensors.
        ValueError: ``unroll`` is below 1, or asks for unrolling with a tensor bound (as JAX).
        RuntimeError: ``body_fn``'s result differs from ``init_val`` in structure, shape, dtype
            or device (naming ``i``); captured, a bound or a value is not on the capturing
            device.

    .. warning:: Captured, ``body_fn`` runs several times at capture when the loop is unrolled
       (up to ``2 * unroll - 1`` times): Python side effects in it happen that often.
    """
    must = "an integer: a Python int or a one-element integer tensor"
    lower = _integer_scalar("fori_loop", "lower", lower, must)
    upper = _integer_scalar("fori_loop", "upper", upper, must)
    _check_callable("fori_loop", "body_fn", body_fn)
    static = not isinstance(lower, Tensor) and not isinstance(upper, Tensor)
    copies = _unroll_count(unroll, max(int(upper) - int(lower), 0) if static else None)
    treedef, leaves = _tensors(init_val, "fori_loop", "init_val", "init_val")
    bounds = [bound for bound in (lower, upper) if isinstance(bound, Tensor)]
    graph, device = _graph_for(leaves + bounds)
    metas = _metas(leaves)
    if graph is None:
        start, stop = int(lower), int(upper)   # the host reads
        where = (leaves or bounds)[0].device if leaves or bounds else _device.CPU
        current = [leaf.clone() for leaf in leaves]
        val = _unflatten(treedef, iter(current))
        for step in range(start, stop):
            i = _creation.full((), step, dtype=_dtype.int64, device=where)
            val = body_fn(i, val)
            who = f"body_fn at i={step}"
            out_def, current = _tensors(val, "fori_loop", f"what {who} returns", "result")
            _check_same("fori_loop", who, out_def, current, "init_val", treedef, metas,
                        _SAME_CARRY)
        return _unflatten(treedef, iter(_fresh(current, leaves)))
    for name, bound in (("lower", lower), ("upper", upper)):
        if isinstance(bound, Tensor):
            _on_device("fori_loop", name, bound, device)
    for position, leaf in enumerate(leaves):
        _on_device("fori_loop", "init_val" + _labels(treedef)[position], leaf, device)
    buffers = [leaf.clone() for leaf in leaves]
    spans = [_writes.extent(buffer) for buffer in buffers]
    loop = _CapturedFori(graph, device, treedef, metas, buffers, spans, body_fn, copies)
    if static:
        start, count = int(lower), max(int(upper) - int(lower), 0)
        passes, left = (0, count) if unroll is True else divmod(count, copies)
        if passes or not left:   # a loop of no iteration still captures (and checks) the body
            loop.run_node(start, start + passes * copies)
        if left:
            loop.run_straight(start + passes * copies, left)
    else:
        loop.run_node(lower, upper)
    return _unflatten(treedef, iter(buffers))


class _CapturedFori:
    """One captured ``fori_loop``: its carried buffers and the counters its copies read."""

    def __init__(self, graph: Graph, device, treedef, metas, buffers: list[Tensor], spans: list,
                 body_fn, copies: int):
        self.graph, self.device, self.treedef, self.metas = graph, device, treedef, metas
        self.buffers, self.spans, self.body_fn, self.copies = buffers, spans, body_fn, copies
        self.who = ("body_fn (captured once, for every i)" if copies == 1 else
                    f"body_fn (captured {copies} times, unrolled, for every i)")

    def _bodies(self, counters: list[Tensor]) -> None:
        """``body_fn`` once per counter, each on the previous one's result (as eagerly), then
        the last result copied into the carried buffers."""
        val = _unflatten(self.treedef, iter(self.buffers))
        outputs: list[Tensor] = []
        for i in counters:
            out_def, outputs = _tensors(self.body_fn(i, val), "fori_loop",
                                        f"what {self.who} returns", "result")
            _check_same("fori_loop", self.who, out_def, outputs, "init_val", self.treedef,
                        self.metas, _SAME_CARRY)
            val = _unflatten(self.treedef, iter(outputs))
        _copy_back(self.buffers, self.spans, outputs)

    def _counters(self, first: Tensor, count: int) -> tuple[Any, list[Tensor]]:
        """``(write, counters)``: ``count`` 0-d int64 views that ``write()`` (one kernel, in
        stream order) sets to ``first + k``; one counter is ``first`` itself (no kernel)."""
        if count == 1:
            return (lambda: None), [first]
        offsets = _creation.arange(count, dtype=_dtype.int64, device=self.device)
        counters = _creation.empty((count,), dtype=_dtype.int64, device=self.device)

        def write():
            _launch_fused(_fori_spread, self.device, "fori_spread", first._data,
                          offsets._data, counters._data)
        return write, [counters[k] for k in range(count)]

    def run_node(self, lower: Tensor | int, upper: Tensor | int) -> None:
        """A while node over ``[lower, upper)``, ``self.copies`` iterations a pass (for a
        tensor bound the count is one, and unknown until the device runs)."""
        device = self.device
        i = _creation.empty((), dtype=_dtype.int64, device=device)
        if isinstance(lower, Tensor):
            i.copy_(lower.reshape(()))
        else:
            i.fill_(int(lower))
        stop: Tensor | int
        if isinstance(upper, Tensor):
            stop = _creation.empty((), dtype=_dtype.int64, device=device)
            stop.copy_(upper.reshape(()))
        else:
            stop = int(upper)
        running = _creation.empty((1,), dtype=_dtype.bool, device=device)
        if isinstance(lower, Tensor) or isinstance(stop, Tensor):
            running.copy_((i < stop).reshape(1))
        else:
            running.fill_(int(lower) < stop)
        write, counters = self._counters(i, self.copies)
        with _body(self.graph, "while", running, "fori_loop", "body_fn"):
            write()
            self._bodies(counters)
            _launch_fused(_fori_advance, device, "fori_advance", i._data,
                          stop._data if isinstance(stop, Tensor) else stop,
                          running._data.reshape(()), self.copies)

    def run_straight(self, start: int, count: int) -> None:
        """``count`` iterations from ``start`` recorded in line, no node."""
        first = _creation.full((), start, dtype=_dtype.int64, device=self.device)
        write, counters = self._counters(first, count)
        write()
        self._bodies(counters)
