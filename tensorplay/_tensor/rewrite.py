"""Op recording and the fusion rewrite of ``tp.compile`` (Note [fusion rewrite]).

Note [fusion rewrite]
---------------------
``tp.compile`` runs a function eagerly once (the warm-up) and then captures it. Two rewrites make
the captured graph launch fewer kernels, without tracing the function into an IR:

- *fused products*: ``matmul`` then an ``add`` of its result and a bias, optionally then
  ``relu``/``gelu``/``silu`` of that sum, and ``linear`` or ``addmm`` (whose bias is inside)
  then such an activation, become one ``linalg.fused_matmul`` (cuda: one kernel for a float32
  product of at most 8 rows, else one cuBLASLt call with a BIAS / RELU_BIAS / GELU_BIAS
  epilogue, exact GELU and SiLU one kernel after it; elsewhere the same ops); a product (with
  its bias, no activation) then an ``add`` of a tensor of the result's shape and dtype (a
  residual) becomes one ``linalg.fused_matmul_residual`` (cuda: the residual is cuBLASLt's C
  input with beta = 1);
- *fused chains*: two or more elementwise ops in a row, each taking the previous one's result,
  over contiguous operands of one shape and dtype (and plain numbers), become ONE kernel (cuda:
  the backend's ``elementwise_program``, the ops' expressions in registers; elsewhere one kernel
  closure running their ``xp`` forms one after the other).

How:

1. *Recording.* During the warm-up :data:`active` is a :class:`Recorder`. ``matmul``/``@``,
   ``linear`` and every elementwise op without ``out=`` (``elementwise._execute``) hand it their
   operands and run as usual; it notes each op, which earlier recorded op produced each operand,
   the result's shape and dtype, and how many kernels the stream launched before and after it
   (through ``dispatch.launch_watchers``). Ops called inside these ops are not seen.
2. *Planning.* :meth:`Recorder.groups` finds the groups above among ops with no other kernel
   launched between them, whose intermediate tensors were dead once the warm-up returned
   (nothing else kept them).
3. *Rewriting.* During the capture :data:`active` is a :class:`Rewriter`. It follows the recorded
   sequence op by op: the ops of a group before its last return *placeholders* (the right shape
   and dtype, no kernel) and the last launches the fused work. A
   placeholder carries a guard, so any other use of it (reading it, a view of it, its ``shape``)
   raises :class:`FusionMismatch`, as does an op sequence that differs from the warm-up's (control
   flow that depends on data). ``tp.compile`` then ends that capture and captures again as
   written, so a rewrite can make a graph faster but never wrong.

Only the thread that opened a recording or rewrite is affected; other threads' ops run as usual.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import _dtype
from .._runtime import dispatch as _dispatch
from .tensor import Tensor

__all__ = ["active", "FusionMismatch", "Recorder", "Rewriter", "ACTIVATION_KINDS"]

#: The Recorder or Rewriter of the warm-up or capture in progress; None otherwise. Ops test it
#: with one global lookup.
active: "Recorder | Rewriter | None" = None

#: Elementwise ops that can end a fused product, as ``linalg.fused_matmul`` names them.
ACTIVATION_KINDS = frozenset({"relu", "gelu", "gelu_tanh", "silu"})
_CHAIN_DTYPES = frozenset({_dtype.float16, _dtype.bfloat16, _dtype.float32, _dtype.float64})


class FusionMismatch(RuntimeError):
    """The capture did not follow the warm-up's op sequence, or used a fused-away intermediate:
    ``tp.compile`` captures again without rewriting."""


def _unobserved(observer, compute: Callable[[], Tensor]) -> Tensor:
    """Run ``compute`` with no observer, so the ops it calls inside are not seen: only the
    outermost fusable ops are recorded and rewritten."""
    global active
    active = None
    try:
        return compute()
    finally:
        active = observer


def _name(kind) -> str:
    """An op's name: ``kind`` itself for products, the elementwise plan's op otherwise."""
    return kind if type(kind) is str else kind.op


def _signature(kind) -> tuple:
    """What must match between the warm-up and the capture for one op."""
    return (kind,) if type(kind) is str else (kind.op, kind.shape, kind.result)


class _Op:
    __slots__ = ("kind", "sources", "operands", "start", "end", "result", "shape", "dtype")
    # the slots' types (declarations only: no class attribute is made)
    kind: Any                           # "matmul", "linear", or the elementwise plan
    sources: tuple[int | None, ...]     # per operand: the index of the op that made it
    operands: tuple                     # tensors as weak references, numbers as they are
    start: int                          # the launch count before and after the op
    end: int
    result: weakref.ref[Tensor]
    shape: tuple[int, ...]
    dtype: _dtype.dtype


class _Group:
    """A fusable run of recorded ops: ``count`` ops from its first; ``product`` groups know the
    bias's side in the add and the activation; ``chain`` groups their program."""

    __slots__ = ("count", "product", "side", "activation", "residual", "steps", "launcher",
                 "plans", "native")
    # the slots' types (declarations only: no class attribute is made)
    count: int
    product: bool
    side: Any                           # the bias's operand in the add (0 or 1); None: none
    activation: str | None
    residual: Any                       # the residual's operand in the last add; None: none
    steps: tuple[tuple[str, tuple[int, ...]], ...]
    launcher: Callable[..., Any]
    plans: tuple
    native: bool


class Recorder:
    """Notes the fusable ops the warm-up runs (Note [fusion rewrite], step 1)."""

    def __init__(self, stream):
        self.ops: list[_Op] = []
        self.launches = 0
        self._stream = stream
        self._thread = threading.get_ident()
        self._index: dict[int, int] = {}   # id(live result tensor) -> its op's index
        self._outer: Callable | None = None

    def __enter__(self) -> "Recorder":
        global active
        self._outer = _dispatch.launch_watchers.get(self._stream)
        _dispatch.launch_watchers[self._stream] = self._watch
        active = self
        return self

    def __exit__(self, *exc_info) -> None:
        global active
        active = None
        if self._outer is None:
            _dispatch.launch_watchers.pop(self._stream, None)
        else:
            _dispatch.launch_watchers[self._stream] = self._outer

    def _watch(self, kernel) -> None:
        self.launches += 1
        if self._outer is not None:
            self._outer(kernel)

    def run(self, kind, operands: tuple, compute: Callable[[], Tensor]) -> Tensor:
        """Run one op (``compute``) and note it. ``kind``: "matmul", "linear", or the
        elementwise plan."""
        if threading.get_ident() != self._thread:
            return compute()
        start = self.launches
        result = _unobserved(self, compute)
        op = _Op()
        op.kind, op.start, op.end = kind, start, self.launches
        op.operands = tuple(weakref.ref(t) if type(t) is Tensor else t for t in operands)
        op.sources = tuple(self._source(t) for t in operands)
        op.shape, op.dtype = result._data.shape, result._dtype
        index = len(self.ops)
        op.result = weakref.ref(result, lambda _, key=id(result), i=index:  # type: ignore[misc]
                                self._forget(key, i))
        self._index[id(result)] = index
        self.ops.append(op)
        return result

    def _source(self, operand) -> int | None:
        index = self._index.get(id(operand)) if type(operand) is Tensor else None
        if index is not None and self.ops[index].result() is not operand:
            return None
        return index

    def _forget(self, key: int, index: int) -> None:
        if self._index.get(key) == index:
            del self._index[key]

    def _joins(self, first: int, second: int) -> bool:
        """Whether op ``second`` directly follows op ``first`` (no kernel between them), takes
        its result, and that result died with the warm-up."""
        a, b = self.ops[first], self.ops[second]
        return a.end == b.start and first in b.sources and a.result() is None

    def groups(self) -> dict[int, _Group]:
        """The fusable groups by their first op's index (Note [fusion rewrite], step 2). Call
        after the warm-up returned."""
        found: dict[int, _Group] = {}
        i = 0
        while i < len(self.ops):
            group = self._product_at(i) or self._chain_at(i)
            if group is None:
                i += 1
                continue
            found[i] = group
            i += group.count
        return found

    def _residual_at(self, j: int) -> Any:
        """The side (0 or 1) of the residual in op ``j`` when it adds a tensor of its own shape
        and dtype to op ``j - 1``'s result and follows it directly, else None."""
        ops = self.ops
        if j >= len(ops):
            return None
        add, previous = ops[j], ops[j - 1]
        if not (_name(add.kind) == "add" and self._joins(j - 1, j) and add.shape == previous.shape
                and add.dtype is previous.dtype and add.sources.count(j - 1) == 1
                and len(add.operands) == 2):
            return None
        side = 1 - add.sources.index(j - 1)
        other = add.operands[side]
        other = other() if type(other) is weakref.ref else other
        source = add.sources[side]
        if type(other) is Tensor:
            shape, dtype = tuple(other.shape), other._dtype
        elif source is not None:   # an earlier op's result, dead since: its record
            shape, dtype = tuple(ops[source].shape), ops[source].dtype
        else:
            return None
        return side if dtype is add.dtype and shape == tuple(add.shape) else None

    def _product_at(self, i: int) -> _Group | None:
        ops = self.ops
        if i + 1 >= len(ops) or _name(ops[i].kind) not in ("matmul", "linear", "addmm"):
            return None
        group = _Group()
        group.product, group.side, group.activation, group.residual = True, None, None, None
        nxt = ops[i + 1]
        if ops[i].kind in ("linear", "addmm"):   # the bias is already inside the product
            if _name(nxt.kind) in ACTIVATION_KINDS and nxt.sources == (i,) and \
                    self._joins(i, i + 1):
                group.count, group.activation = 2, _name(nxt.kind)
                return group
            group.residual = self._residual_at(i + 1)
            if group.residual is None:
                return None
            group.count = 2
            return group
        product = ops[i]
        if not (_name(nxt.kind) == "add" and self._joins(i, i + 1) and nxt.shape == product.shape
                and nxt.dtype is product.dtype and nxt.sources.count(i) == 1):
            return None
        side = 1 - nxt.sources.index(i)
        bias = nxt.operands[side]
        bias = bias() if type(bias) is weakref.ref else bias
        if type(bias) is not Tensor or bias._dtype is not product.dtype:
            return None
        group.count, group.side = 2, side
        if i + 2 < len(ops):
            act = ops[i + 2]
            if (_name(act.kind) in ACTIVATION_KINDS and act.sources == (i + 1,)
                    and self._joins(i + 1, i + 2)):
                group.count, group.activation = 3, _name(act.kind)
            else:
                group.residual = self._residual_at(i + 2)
                if group.residual is not None:
                    group.count = 3
        return group

    def _chain_at(self, i: int) -> _Group | None:
        ops = self.ops
        if not self._chainable(i):
            return None
        j = i
        while (j + 1 < len(ops) and self._chainable(j + 1) and ops[j + 1].sources.count(j) == 1
               and self._joins(j, j + 1) and ops[j + 1].shape == ops[i].shape
               and ops[j + 1].dtype is ops[i].dtype):
            j += 1
        if j == i:
            return None
        steps, kinds, externals = [], [], 0
        for k in range(i, j + 1):
            refs = []
            for source, operand in zip(ops[k].sources, ops[k].operands):
                if k > i and source == k - 1:
                    refs.append(-1)
                else:
                    refs.append(externals)
                    externals += 1
                    kinds.append("a" if type(operand) is weakref.ref else "s")
            steps.append((ops[k].kind.native, tuple(refs)))
        group = _Group()
        group.count, group.product = j - i + 1, False
        group.steps, group.plans = tuple(steps), tuple(op.kind for op in ops[i:j + 1])
        plan = ops[i].kind
        program = _dispatch.elementwise_program_hook(plan.device)
        group.native = program is not None
        if program is None:
            group.launcher = functools.partial(_run_chain, group.steps, group.plans)
        else:
            group.launcher = program(group.steps, plan.result.numpy, "".join(kinds),
                                     plan.result.numpy)
            if group.launcher is None:
                return None
        return group

    def _chainable(self, i: int) -> bool:
        kind = self.ops[i].kind
        return (type(kind) is not str and kind.native is not None and kind.plain_operands
                and kind.result in _CHAIN_DTYPES)


def _run_chain(steps, plans, *arrays) -> None:
    """A fused chain without the backend's program: each op's ``xp`` form in turn, inside ONE
    kernel closure (``arrays``: the external operands in order, then the output)."""
    externals, out = arrays[:-1], arrays[-1]
    previous = None
    last = len(plans) - 1
    for number, ((_, refs), plan) in enumerate(zip(steps, plans)):
        operands = [previous if ref == -1 else externals[ref] for ref in refs]
        result = out if number == last else plan.xp.empty(out.shape, out.dtype)
        plan._run_kernel(operands, result)
        previous = result


class Rewriter:
    """Replays the warm-up's op sequence with its groups fused (Note [fusion rewrite], step 3).

    ``fuse(a, b, bias, activation, residual=None)`` computes one fused product
    (``linalg.fused_matmul``, or ``linalg.fused_matmul_residual`` with a residual).
    """

    def __init__(self, recorder: Recorder, groups: dict[int, _Group], fuse: Callable, device):
        self._ops = [(_signature(op.kind), op.shape, op.dtype) for op in recorder.ops]
        self._device = device
        self._stream = None
        self._outer: Callable | None = None
        self._groups = groups
        self._fuse = fuse
        self._thread = threading.get_ident()
        self._position = 0
        self._group: _Group | None = None   # the group under way
        self._left = 0                      # its ops still to come
        self._placeholder: Tensor | None = None
        self._gathered: list = []           # product: [a, b, bias]; chain: external operands
        self._finished = False
        self.products = 0   #: fused products captured
        self.chains = 0     #: fused elementwise chains captured

    def __enter__(self) -> "Rewriter":
        """Start rewriting the ops this thread runs on the capture's (current) stream of
        ``device``."""
        global active
        self._stream = stream = _dispatch.current_native_stream(self._device)
        self._outer = _dispatch.launch_watchers.get(stream)
        _dispatch.launch_watchers[stream] = self._watch
        active = self
        return self

    def __exit__(self, *exc_info) -> None:
        global active
        active = None
        self._finished = True
        if self._outer is None:
            _dispatch.launch_watchers.pop(self._stream, None)
        else:
            _dispatch.launch_watchers[self._stream] = self._outer

    def _watch(self, kernel) -> None:
        if self._group is not None:   # the group's ops launch nothing until its last
            raise FusionMismatch("a kernel was launched between the ops of a fused group")
        if self._outer is not None:
            self._outer(kernel)

    def check_complete(self) -> None:
        """Raise FusionMismatch unless the capture ran exactly the warm-up's op sequence."""
        if self._position != len(self._ops) or self._group is not None:
            raise FusionMismatch(f"the capture ran {self._position} of the warm-up's "
                                 f"{len(self._ops)} recorded ops")

    def run(self, kind, operands: tuple, compute: Callable[[], Tensor]) -> Tensor:
        if threading.get_ident() != self._thread:
            return compute()
        position = self._position
        expected = self._ops[position][0] if position < len(self._ops) else ("nothing",)
        if _signature(kind) != expected:
            raise FusionMismatch(f"op #{position} of the capture is {_name(kind)}, the "
                                 f"warm-up's was {expected[0]}")
        self._position += 1
        group = self._group
        if group is None:
            group = self._groups.get(position)
            if group is None:
                return _unobserved(self, compute)
            self._group, self._left, self._gathered = group, group.count, []
        elif sum(value is self._placeholder for value in operands) != 1:
            raise FusionMismatch(f"op #{position} ({_name(kind)}) of a fused group does not "
                                 f"take the group's previous result")
        self._left -= 1
        self._gather(group, kind, operands, group.count - self._left - 1)
        if self._left:
            self._placeholder = self._make_placeholder(position, operands)
            return self._placeholder
        self._group = self._placeholder = None
        if group.product:
            self.products += 1
        else:
            self.chains += 1
        return _unobserved(self, lambda: self._launch(group, kind))

    def _gather(self, group: _Group, kind, operands: tuple, offset: int) -> None:
        gathered = self._gathered
        if not group.product:
            gathered.extend(v for v in operands if v is not self._placeholder)
        elif kind == "linear":   # (input, weight, bias): the product is input @ weight.T
            a, weight, bias = operands
            gathered.extend((a, weight.T if weight.ndim == 2 else weight, bias))
        elif kind == "addmm":    # (bias, mat1, mat2)
            bias, a, b = operands
            gathered.extend((a, b, bias))
        elif kind == "matmul":
            gathered.extend((*operands, None))
        elif group.residual is not None and offset == group.count - 1:   # the residual's add
            residual = operands[group.residual]
            if operands[1 - group.residual] is not self._placeholder or \
                    type(residual) is not Tensor:
                raise FusionMismatch("the fused product's residual add does not add a tensor "
                                     "to it")
            gathered.append(residual)
        else:   # the add of the bias (an activation gathers nothing)
            if _name(kind) == "add":
                gathered[2] = operands[group.side]
                if operands[1 - group.side] is not self._placeholder or \
                        type(gathered[2]) is not Tensor:
                    raise FusionMismatch("the fused product's add does not add a tensor to it")

    def _launch(self, group: _Group, kind) -> Tensor:
        gathered = self._gathered
        if group.product:
            if group.residual is not None:
                a, b, bias, residual = gathered
                return self._fuse(a, b, bias, None, residual)
            a, b, bias = gathered
            return self._fuse(a, b, bias, group.activation)
        plan = kind     # the chain's last op: its shape, dtype and device are the chain's
        device = plan.device
        out_array = _dispatch.empty(device, plan.shape, plan.result)
        # the backend's program takes numbers as scalars of the dtype; the xp forms take them
        # as they are, as the eager ops do
        cast = plan.result.numpy.type if group.native else (lambda value: value)
        values = [v._data if type(v) is Tensor else cast(v) for v in gathered]
        kernel = functools.partial(group.launcher, *values, out_array)
        _dispatch.launch(device, _dispatch.named(
            "fused_" + "_".join(step[0] for step in group.steps), kernel, shape=plan.shape))
        return Tensor._make(out_array, device, plan.result)

    def _make_placeholder(self, position: int, operands: tuple) -> Tensor:
        """A fresh tensor of op ``position``'s recorded shape and dtype that no kernel writes,
        guarded: the group's last op computes the real values fused. (Its layout is the real
        result's, so the ops taking it find their plans by the same signature.)"""
        _, shape, dtype = self._ops[position]
        device = next(v for v in operands if type(v) is Tensor)._device
        placeholder = Tensor._make(_dispatch.empty(device, shape, dtype), device, dtype)
        placeholder._guard = self._guard
        return placeholder

    def _guard(self, tensor: Tensor) -> None:
        if tensor is self._placeholder and self._group is not None:
            return   # the group's next op takes it (anything else would launch: _watch)
        if not self._finished:
            raise FusionMismatch("a fused-away intermediate (a result tp.compile folded into a "
                                 "fused product or chain) was used elsewhere")
        raise RuntimeError("this tensor is an intermediate that tp.compile fused away (inside a "
                           "fused matmul + bias + activation or a chain of elementwise ops); "
                           "it holds no values. Keep it alive in the function (e.g. return it) "
                           "and compile will not fuse it")
