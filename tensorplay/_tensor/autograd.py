"""The tape: reverse-mode automatic differentiation, define-by-run, with PyTorch's semantics.

A tensor takes part in autograd through one slot, ``Tensor._ag``: None for every tensor that
nothing has asked about (the eager hot path reads that one slot and goes on), else an
:class:`AutogradMeta` holding ``requires_grad``, ``.grad``, the node that made it
(``grad_fn``), its version counter (shared with its views) and, for a view, its base and how
to take the view again from that base.

Every public op reaches :func:`dispatch` when an operand has a meta and grad mode is on. It runs
the op's forward with grad mode off, then records one :class:`Node` whose rule (the
derivative table in ``derivatives.py``: one entry per op, formulas by argument name, as in
PyTorch's ``derivatives.yaml``) maps the output's gradient to the inputs' gradients. Backward
runs the same public ops forward does, so it is captured into graphs like any other work and
needs no host synchronization.

Pitfalls, as in PyTorch:
- an in-place op on a leaf that requires grad raises; an in-place change to a tensor a node
  saved raises at ``backward`` (version counters);
- a second ``backward`` through a node whose saved tensors were freed raises unless the first
  passed ``retain_graph=True``;
- ``out=`` refuses operands that require grad.
Unlike PyTorch, a view taken from a tensor *before* it took part in autograd does not know its
base: an in-place op through such a view is not seen by gradients of the base.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from typing import Any, Callable

from .._runtime import dispatch as _dispatch
from .tensor import Tensor


# -- grad mode --------------------------------------------------------------------------------
class _GradMode(threading.local):
    enabled = True
    inference = False
    #: set by the engine while a backward accumulates into ``.grad``: formulas may then write
    #: a leaf's gradient in place (``Rule.accumulate``)
    accumulating = False


grad_mode = _GradMode()


def is_grad_enabled() -> bool:
    """Whether ops record gradients on this thread (True unless inside ``no_grad``)."""
    return grad_mode.enabled


class _ModeContext:
    """A context manager and a decorator that sets grad mode for its block (or each call)."""

    _enabled = True
    _inference = False

    def __enter__(self):
        self._saved = (grad_mode.enabled, grad_mode.inference)
        grad_mode.enabled = self._enabled
        grad_mode.inference = self._inference
        return self

    def __exit__(self, *exc) -> None:
        grad_mode.enabled, grad_mode.inference = self._saved

    def __call__(self, fn: Callable) -> Callable:
        enabled, inference = self._enabled, self._inference

        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            saved = (grad_mode.enabled, grad_mode.inference)
            grad_mode.enabled, grad_mode.inference = enabled, inference
            try:
                return fn(*args, **kwargs)
            finally:
                grad_mode.enabled, grad_mode.inference = saved
        return decorated


class no_grad(_ModeContext):
    """Ops inside record no gradients (their results do not require grad), as
    ``torch.no_grad``: ``with tp.no_grad():``, ``@tp.no_grad()`` or ``@tp.no_grad``."""

    _enabled = False

    def __new__(cls, fn: Callable | None = None):
        self = super().__new__(cls)
        return self(fn) if fn is not None else self


class enable_grad(_ModeContext):
    """Ops inside record gradients again (inside ``no_grad``), as ``torch.enable_grad``."""

    _enabled = True

    def __new__(cls, fn: Callable | None = None):
        self = super().__new__(cls)
        return self(fn) if fn is not None else self


class inference_mode(_ModeContext):
    """``inference_mode(mode=True)``: like :class:`no_grad` (tensorplay keeps no extra
    bookkeeping that inference mode could skip, so the two behave alike; tensors made inside
    may later take part in autograd, which PyTorch refuses)."""

    def __init__(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode(mode): mode must be a bool, got "
                            f"{type(mode).__name__}")
        self._enabled = not mode
        self._inference = mode


class set_grad_enabled(_ModeContext):
    """``set_grad_enabled(mode)``: sets grad mode at once (as a plain call) and restores the
    earlier mode at the end of a ``with`` block; as a decorator, sets it for each call."""

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled(mode): mode must be a bool, got "
                            f"{type(mode).__name__}")
        self._enabled = mode
        self._prior = (grad_mode.enabled, grad_mode.inference)
        grad_mode.enabled = mode

    def __enter__(self):
        self._saved = self._prior
        return self

    def __call__(self, fn: Callable) -> Callable:
        grad_mode.enabled, grad_mode.inference = self._prior   # a decorator changes nothing now
        return super().__call__(fn)


# -- per-tensor state ---------------------------------------------------------------------------
class _Version:
    """A version counter, shared by a tensor and its views: in-place ops bump it, and a node
    checks at backward that the tensors it saved still have the version they had."""

    #: the count: 0 as a class attribute until the first bump writes the instance's own (no
    #: ``__init__`` frame for every recorded result)
    value = 0


class AutogradMeta:
    __slots__ = ("requires_grad", "grad", "grad_fn", "output_nr", "version", "base", "view_fn",
                 "view_version", "hooks", "retains_grad", "accumulator", "is_param", "grad_home",
                 "__weakref__")

    def __init__(self, requires_grad: bool = False):
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self.grad_fn: Node | None = None
        self.output_nr = 0
        self.version = _Version()
        self.base: Tensor | None = None          # a view's base (the root: never a view)
        self.view_fn: Callable | None = None     # base -> this view, again
        self.view_version = 0
        self.hooks: list | None = None           # leaf tensors' hooks (non-leaf: on the node)
        self.retains_grad = False
        self.accumulator: weakref.ref[AccumulateGrad] | None = None   # this leaf's, weakly
        self.is_param = False
        # where a new ``.grad`` is written (an optimizer's flat gradient buffer), else None
        self.grad_home: Tensor | None = None

    def __reduce__(self):
        """A pickled or copied tensor keeps whether it is a leaf that requires grad (and a
        Parameter), never its graph: a computed tensor's copy is a leaf, as in PyTorch."""
        leaf = self.grad_fn is None and self.base is None
        return (_restored_meta, (self.requires_grad and leaf, self.is_param))


def _restored_meta(requires_grad: bool, is_param: bool) -> AutogradMeta | None:
    if not (requires_grad or is_param):
        return None
    restored = AutogradMeta(requires_grad)
    restored.is_param = is_param
    return restored


def meta(tensor: Tensor) -> AutogradMeta:
    """``tensor``'s autograd state, made at first need."""
    found = tensor._ag
    if found is None:
        found = tensor._ag = AutogradMeta()
    return found


def requires_grad(tensor) -> bool:
    m = tensor._ag if type(tensor) is Tensor else None
    return m is not None and m.requires_grad


def _differentiable_dtype(dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def set_requires_grad(tensor: Tensor, flag: bool) -> None:
    if not isinstance(flag, bool):
        raise TypeError(f"requires_grad must be a bool, got {type(flag).__name__}")
    m = tensor._ag
    if m is not None and m.grad_fn is not None:
        if not flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If "
                               "you want to use a computed variable in a subgraph that doesn't "
                               "require differentiation use var_no_grad = var.detach().")
        return
    if flag:
        if tensor._dtype.is_complex:
            raise RuntimeError(f"requires_grad=True: complex tensors ({tensor._dtype.name}) are "
                               f"not supported by tensorplay's autograd yet")
        if not tensor._dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients "
                               f"(got {tensor._dtype.name})")
    if m is None and not flag:
        return
    meta(tensor).requires_grad = flag


def detached(tensor: Tensor) -> Tensor:
    """A new tensor sharing ``tensor``'s memory, outside autograd (``detach()``); it shares the
    version counter, so in-place changes through it are still seen by nodes that saved it."""
    out = tensor._alias()
    m = tensor._ag
    if m is not None:
        meta(out).version = m.version
    return out


# -- nodes --------------------------------------------------------------------------------------
class SavedTensor:
    """A tensor a node keeps for backward: a detached alias (so the node never keeps its own
    output's graph alive) and the version it had."""

    __slots__ = ("tensor", "version", "expected")

    def __init__(self, tensor: Tensor):
        m = tensor._ag   # meta(tensor) and tensor._alias(), inlined: the recording hot path
        if m is None:
            m = tensor._ag = AutogradMeta()
        self.tensor = Tensor._make(tensor._data, tensor._device, tensor._dtype)
        self.version = m.version
        self.expected = m.version.value

    def unpack(self, op: str) -> Tensor:
        if self.version.value != self.expected:
            t = self.tensor
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t._dtype.name} {list(t.shape)}] is at version "
                f"{self.version.value}; expected version {self.expected} instead (saved by "
                f"{op}). Hint: clone the tensor before changing it in place, or change it "
                f"after backward()")
        return self.tensor


class Node:
    """One recorded op: ``next_functions`` are the edges to the nodes of its inputs,
    ``apply(grads)`` maps the gradients of its outputs to those of its inputs. What its
    formulas read (the op's arguments by name, the tensors it saved) stays on the node; the
    context the formulas see is made when the node is applied."""

    __slots__ = ("op", "rule", "ctx", "next", "input_names", "outputs", "input_meta", "freed",
                 "pre_hooks", "arguments", "first", "saved", "__weakref__")

    def __init__(self, op: str, rule, ctx, next_edges, input_names, outputs, input_meta=(),
                 arguments=None, first: str = "self", saved=None):
        self.op = op
        self.rule = rule
        self.ctx = ctx                    # a Function's context (op nodes: None)
        self.next = next_edges            # [(node, output_nr) or None] per differentiable input
        self.input_names = input_names    # [(name, index within a list or None)]
        self.outputs = outputs            # [(shape, dtype, device)] per output
        self.input_meta = input_meta      # [(shape, dtype)] per differentiable input
        self.freed = False
        self.pre_hooks: dict[int, list] | None = None
        self.arguments = arguments        # the op's arguments by name
        self.first = first                # the name of its first argument (``ctx.self``)
        self.saved = saved                # name -> SavedTensor (or a list of them), or None

    def name(self) -> str:
        """The node's class name in PyTorch's spelling (``MulBackward0``)."""
        return "".join(part.capitalize() for part in self.op.strip("_").split("_")) + \
            "Backward0"

    @property
    def next_functions(self) -> tuple:
        """``(node, output_nr)`` per differentiable input: the node that made it (an
        accumulator for a leaf), or ``(None, 0)`` where no gradient flows."""
        return tuple((None, 0) if edge is None else edge for edge in self.next)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    def apply(self, grads: list) -> list:
        """The gradients of the inputs from ``grads``, those of the outputs (one each).

        Raises:
            RuntimeError: the saved tensors were freed by an earlier backward (pass
                ``retain_graph=True`` to the first one).
        """
        if self.freed:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time or "
                "if you need to access saved tensors after calling backward.")
        return self.rule(self, grads)

    def release(self) -> None:
        """Free what backward needed (saved tensors), as PyTorch does without retain_graph."""
        if self.saved:
            self.freed = True
            self.saved = self.arguments = None


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` takes the hook away."""

    def __init__(self, hooks: list, hook):
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class AccumulateGrad(Node):
    """The sink of a leaf: adds the incoming gradient into ``leaf.grad`` (in place once a
    ``.grad`` exists, so graphs that replay a step keep writing the same tensor)."""

    __slots__ = ("leaf",)

    def __init__(self, leaf: Tensor):   # (Node.__init__ inlined: made for every leaf of a step)
        self.op, self.rule, self.ctx, self.next = "accumulate_grad", None, None, ()
        self.input_names, self.outputs, self.input_meta = (), (), ()
        self.freed, self.pre_hooks = False, None
        self.arguments, self.first, self.saved = None, "self", None
        self.leaf = leaf

    def name(self) -> str:
        return "AccumulateGrad"

    @property
    def variable(self) -> Tensor:
        return self.leaf

    def apply(self, grads: list) -> list:
        grad = grads[0]
        m = meta(self.leaf)
        for hook in list(m.hooks or ()):
            result = hook(grad)
            if result is not None:
                grad = result
        if grad is None:
            return []
        if m.grad is None:
            home = m.grad_home
            if home is not None:   # a view of an optimizer's flat buffer: same cost as a clone
                home.copy_(grad)
                m.grad = home
            else:
                m.grad = grad.clone()   # never an alias: another leaf may have the same one
        else:
            m.grad.add_(grad)
        return []


def grad_accumulator(tensor: Tensor) -> AccumulateGrad:
    """The node that writes ``tensor``'s (a leaf's) gradient into its ``.grad``. The leaf
    holds it weakly, as PyTorch's does: whoever keeps the leaf for many steps (an optimizer)
    may keep this too, so that each step's graph does not make it again."""
    meta(tensor)
    return _accumulator(tensor)


def _accumulator(tensor: Tensor) -> AccumulateGrad:
    m = tensor._ag   # (edge's caller: a tensor that requires grad has its meta)
    found = m.accumulator() if m.accumulator is not None else None
    if found is None:
        found = AccumulateGrad(tensor)
        m.accumulator = weakref.ref(found)
    return found


class ViewOf(Node):
    """The node of a view whose base was changed in place after the view was taken: the
    gradient of the view lands in the matching region of a zero gradient of the base."""

    __slots__ = ("view_fn", "base_shape", "base_dtype", "base_device")

    def __init__(self, base: Tensor, view_fn: Callable):
        super().__init__("as_strided", None, None, [edge(base)], [("self", None)],
                         [])
        self.view_fn = view_fn
        self.base_shape, self.base_dtype, self.base_device = \
            base.shape, base._dtype, base._device

    def apply(self, grads: list) -> list:
        full = _zeros(self.base_shape, self.base_dtype, self.base_device)
        self.view_fn(full).copy_(grads[0])
        return [full]


class CopySlices(Node):
    """The node of a base after an in-place op through one of its views: the base's gradient
    passes through except on the view's region, which goes to the in-place op's node."""

    __slots__ = ("view_fn",)

    def __init__(self, base_edge, op_node: Node, view_fn: Callable, base: Tensor):
        super().__init__("copy_slices", None, None, [base_edge, (op_node, 0)],
                         [("self", None), ("view", None)],
                         [(base.shape, base._dtype, base._device)])
        self.view_fn = view_fn

    def apply(self, grads: list) -> list:
        grad = grads[0].clone()
        region = self.view_fn(grad)
        through = region.clone()
        region.zero_()
        return [grad, through]


def edge(tensor: Tensor):
    """The (node, output_nr) that receives ``tensor``'s gradient, or None."""
    m = tensor._ag
    if m is None or not m.requires_grad:
        return None
    base = m.base
    if base is not None and m.view_version != m.version.value:
        # the base (or a sibling view) changed in place since this view's node was made:
        # route the view's gradient through the base's current node
        m.grad_fn = ViewOf(base, m.view_fn)
        m.output_nr = 0
        m.view_version = m.version.value
    if m.grad_fn is not None:
        return (m.grad_fn, m.output_nr)
    return (_accumulator(tensor), 0)


# -- recording ---------------------------------------------------------------------------------
class Rule:
    """One op's derivative: ``grads[name](ctx, grad)`` for each differentiable argument;
    ``saves``: the arguments (and ``"result"``) the formulas read, checked for in-place changes
    at backward; ``view``: the op returns a view of its first argument (or a predicate of the
    arguments saying when it does); ``multi``: the formulas take the list of the outputs'
    gradients; ``nondiff``: the results never carry a gradient."""

    __slots__ = ("grads", "saves", "view", "multi", "nondiff", "accumulate")

    def __init__(self, grads: dict, saves=(), view=False, multi: bool = False,
                 nondiff: bool = False, accumulate: dict | None = None):
        self.grads = grads
        self.saves = tuple(saves)
        self.view = view
        self.multi = multi
        self.nondiff = nondiff
        #: name -> ``fn(ctx, grad, target, overwrite) -> bool``: writes the gradient of that
        #: argument into a leaf's ``.grad`` buffer ``target`` in place (added, or written with
        #: ``overwrite``) in one kernel where it can, and says whether it did
        self.accumulate = accumulate or {}


#: op name -> Rule; filled by ``derivatives.py``
RULES: dict[str, Rule] = {}


class Context:
    """What a formula reads, for one application of a node: the op's arguments by name
    (``ctx.input``, ``ctx.dim`` ...), the first one also as ``ctx.self``, and ``ctx.result``
    where the rule saved it; tensors come back detached and version-checked. What a formula
    reads is kept on the context from the first read on (a saved tensor is version-checked
    once per application, when it is first read, not at every read)."""

    def __init__(self, op: str, arguments: dict, first: str, saved: dict):
        self._op = op
        self._arguments = arguments
        self._first = first
        self._saved = saved

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        key = self._first if name == "self" else name
        saved = self._saved.get(key)
        if saved is not None:
            value = [s.unpack(self._op) for s in saved] if isinstance(saved, list) else \
                saved.unpack(self._op)
        else:
            try:
                value = self._arguments[key]
            except KeyError:
                raise AttributeError(f"{self._op}: its derivative reads argument {name!r}, "
                                     f"which the op does not have") from None
            if type(value) is Tensor:   # an alias outside autograd: the formulas run plain
                value = value._alias()
        self.__dict__[name] = value   # the next read is a plain attribute (see ``reading``)
        return value

    def get(self, name: str, default=None):
        value = self.__dict__.get(name)
        if value is None:
            key = self._first if name == "self" else name
            if key not in self._saved and key not in self._arguments:
                return default   # an argument the call left out (no exception raised, caught)
            value = getattr(self, name)
        return default if value is None else value


class _Binder:
    """How to name one function's arguments: a plain positional call is bound by zipping its
    parameter names and adding the defaults of the rest, kept per count of positional
    arguments (``inspect``'s full binding costs several microseconds a call)."""

    __slots__ = ("signature", "names", "first", "tails")

    def __init__(self, fn):
        self.signature = inspect.signature(fn)
        parameters = list(self.signature.parameters.values())
        self.names = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        self.first = parameters[0].name
        # tails[n]: the defaults of every parameter after the first n positional ones, where
        # each has one (positional parameters, then keyword-only ones with defaults); else
        # None and such a call takes inspect's binding
        simple = all(p.kind is p.POSITIONAL_OR_KEYWORD or (
            p.kind is p.KEYWORD_ONLY and p.default is not p.empty) for p in parameters)
        self.tails: list[dict | None] = []
        for count in range(len(self.names) + 1):
            rest = parameters[count:]
            self.tails.append({p.name: p.default for p in rest}
                              if simple and all(p.default is not p.empty for p in rest)
                              else None)

    def bind(self, args: tuple, kwargs: dict) -> dict:
        if len(args) < len(self.tails):
            tail = self.tails[len(args)]
            if tail is not None and (not kwargs or kwargs.keys() <= tail.keys()):
                arguments = dict(zip(self.names, args))
                if tail:
                    arguments.update(tail)
                    if kwargs:
                        arguments.update(kwargs)
                return arguments
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments


_binders: dict[Any, _Binder] = {}


def _any_requires_grad(args, kwargs) -> bool:
    for value in args:
        if type(value) is Tensor:
            m = value._ag
            if m is not None and m.requires_grad:
                return True
        elif isinstance(value, (list, tuple)):
            for item in value:
                if type(item) is Tensor and item._ag is not None and item._ag.requires_grad:
                    return True
    for value in kwargs.values():
        if type(value) is Tensor and value._ag is not None and value._ag.requires_grad:
            return True
    return False


def _bump(tensor: Tensor) -> None:
    m = tensor._ag
    if m is not None:
        m.version.value += 1


def _check_inplace_target(op: str, tensor: Tensor) -> None:
    m = tensor._ag
    if m is None or not grad_mode.enabled:
        return
    if m.requires_grad and m.grad_fn is None and m.base is None:
        raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an "
                           f"in-place operation. Wrap the change in tensorplay.no_grad() if "
                           f"it is meant to skip autograd (an optimizer step), or clone first")
    base = m.base
    if base is not None and base._ag is not None and base._ag.requires_grad and \
            base._ag.grad_fn is None and m.requires_grad:
        raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is being used "
                           f"in an in-place operation")


def _run(fn: Callable, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)`` with grad mode off (an op's forward records nothing inside)."""
    if not grad_mode.enabled:
        return fn(*args, **kwargs)
    grad_mode.enabled = False
    try:
        return fn(*args, **kwargs)
    finally:
        grad_mode.enabled = True


def dispatch(op: str, fn: Callable, args: tuple, kwargs: dict, inplace: bool = False):
    """Run ``fn(*args, **kwargs)``, an op some operand of which has autograd state, and record
    it when an operand requires grad and grad mode is on. ``inplace``: the op changes its
    first argument (its version counter moves on)."""
    if inplace:
        _check_inplace_target(op, args[0])
    rule = RULES.get(op)
    if not (grad_mode.enabled and _any_requires_grad(args, kwargs)) or (
            rule is not None and rule.nondiff):
        # (inference under no_grad with a model's parameters: _run and _is_view's frames
        # only where they do something)
        result = _run(fn, args, kwargs) if grad_mode.enabled else fn(*args, **kwargs)
        if inplace:
            _bump(args[0])
        elif rule is not None and rule.view and _is_view(rule, args):
            _link_views(args[0], result, fn, args, kwargs)
        return result
    if kwargs and kwargs.get("out") is not None:
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic "
                           f"differentiation, but one of the arguments requires grad")
    binder = _binders.get(fn)
    if binder is None:
        binder = _binders[fn] = _Binder(fn)
    arguments, first = binder.bind(args, kwargs), binder.first
    # per argument that requires grad: its (name, index within a list or None), its edge
    # (taken before an in-place op moves it) and its (shape, dtype)
    names: list = []
    next_edges: list = []
    input_meta: list = []
    inputs: list[Tensor] = []
    for name, value in arguments.items():
        if type(value) is Tensor:
            m = value._ag
            if m is None or not m.requires_grad:
                continue
            items: Any = ((None, value),)
        elif isinstance(value, (list, tuple)):
            items = [(index, item) for index, item in enumerate(value) if type(item) is Tensor
                     and item._ag is not None and item._ag.requires_grad]
        elif name == "kwargs" and isinstance(value, dict):
            for key, item in value.items():
                if type(item) is Tensor and item._ag is not None and item._ag.requires_grad:
                    names.append((key, None))
                    next_edges.append(edge(item))
                    input_meta.append((item._data.shape, item._dtype))
                    inputs.append(item)
            continue
        else:
            continue
        for index, tensor in items:
            names.append(("self" if name == first else name, index))
            m = tensor._ag
            if m.base is None:   # (edge, inlined for tensors that are not views)
                node = m.grad_fn
                next_edges.append((node, m.output_nr) if node is not None else
                                  (_accumulator(tensor), 0))
            else:
                next_edges.append(edge(tensor))
            input_meta.append((tensor._data.shape, tensor._dtype))
            inputs.append(tensor)
    saved: dict | None = None
    if rule is not None and rule.saves:
        saved = {}
        for name in rule.saves:
            key = first if name == "self" else name
            value = arguments.get(key)
            if type(value) is Tensor:
                # an in-place op's formula reads its first argument as it was before the op
                saved[key] = SavedTensor(_run(value.clone, (), {}) if inplace and key == first
                                         else value)
            elif isinstance(value, (list, tuple)) and value and type(value[0]) is Tensor:
                saved[key] = [SavedTensor(item) for item in value]
    grad_mode.enabled = False   # the forward records nothing inside (_run, inlined)
    try:
        result = fn(*args, **kwargs)
    finally:
        grad_mode.enabled = True
    if inplace:
        _bump(args[0])   # before the result is saved: the saved version is the new one
    tensors = (result,) if type(result) is Tensor else [
        out for out in (result if isinstance(result, tuple) else (result,))
        if type(out) is Tensor]
    if saved is not None and "result" in rule.saves:   # type: ignore[union-attr]
        saved["result"] = SavedTensor(tensors[0]) if len(tensors) == 1 else \
            [SavedTensor(t) for t in tensors]
    # shapes as the arrays' plain tuples: the tensors were just used, their guards are passed
    node = Node(op, _apply_rule if rule is not None else _not_implemented, None, next_edges,
                names, [(t._data.shape, t._dtype, t._device) for t in tensors], input_meta,
                arguments, first, saved)
    if inplace:
        _rebase(args[0], node)
        return result
    for number, out in enumerate(tensors):
        # an op may hand back its input itself (``to`` its own dtype, ``contiguous``): that
        # tensor keeps its own history
        dtype = out._dtype
        if not (dtype.is_floating_point or dtype.is_complex):
            continue
        for tensor in inputs:
            if out is tensor:
                break
        else:
            m = out._ag
            if m is None:
                m = out._ag = AutogradMeta(True)
            else:
                m.requires_grad = True
            m.grad_fn, m.output_nr = node, number
    if rule is not None and rule.view and _is_view(rule, args):
        _link_views(args[0], result, fn, args, kwargs)
    return result


def _is_view(rule: Rule, args: tuple) -> bool:
    view = rule.view
    if not view or not args or type(args[0]) is not Tensor:
        return False
    return view(args) if callable(view) else True


def _rebase(target: Tensor, node: Node) -> None:
    """After an in-place op recorded as ``node``: ``target``'s gradient now flows through it;
    for a view, its base's gradient passes the view's region through it too."""
    m = meta(target)
    base = m.base
    m.requires_grad = True
    if base is None:
        m.grad_fn, m.output_nr = node, 0
        return
    bm = meta(base)
    base_edge = edge(base)
    bm.requires_grad = True
    # (a view's meta has its view_fn)
    bm.grad_fn, bm.output_nr = CopySlices(base_edge, node,
                                          m.view_fn, base), 0  # type: ignore[arg-type]
    m.grad_fn, m.output_nr = ViewOf(base, m.view_fn), 0  # type: ignore[arg-type]
    m.view_version = m.version.value


def _link_views(source: Tensor, result, fn: Callable, args: tuple, kwargs: dict) -> None:
    """Make each view in ``result`` share ``source``'s version counter and know its base and
    how to take it again from that base (``view_fn``), for in-place ops through views."""
    sm = meta(source)
    base = sm.base if sm.base is not None else source
    outer = sm.view_fn
    rest = args[1:]
    several = isinstance(result, tuple)
    for number, out in enumerate(result if several else (result,)):
        if type(out) is not Tensor or out is source:
            continue
        om = meta(out)
        om.version = sm.version

        def view_fn(b, fn=fn, rest=rest, kwargs=kwargs, outer=outer, number=number,
                    several=several):
            view = fn(outer(b) if outer is not None else b, *rest, **kwargs)
            return view[number] if several else view
        om.base = base
        om.view_fn = view_fn
        om.view_version = om.version.value


# -- applying rules -----------------------------------------------------------------------------
def _zeros(shape, dtype, device) -> Tensor:
    return ops.zeros(shape, dtype=dtype, device=device)


class _Ops:
    """The few ops the engine itself needs (zeros, sum to a shape), handed in by
    ``derivatives.py``: this module sits below every op module."""

    zeros: Callable
    sum_to: Callable


ops = _Ops()


_NOTHING_SAVED: dict = {}


def _apply_rule(node: Node, grads: list) -> list:
    rule = RULES[node.op]
    ctx = Context(node.op, node.arguments, node.first, node.saved or _NOTHING_SAVED)
    if rule.multi:
        grad_in = [g if g is not None else _zeros(*out) for g, out in zip(grads, node.outputs)]
    else:
        grad_in = grads[0]
        if grad_in is None:
            return [None] * len(node.next)
    results: list[Tensor | None] = []
    cache: dict = {}
    direct = rule.accumulate if grad_mode.accumulating else None
    for (name, index), next_edge, (shape, dtype) in zip(node.input_names, node.next,
                                                        node.input_meta):
        if next_edge is None:
            results.append(None)
            continue
        if direct and index is None and name in direct and \
                type(next_edge[0]) is AccumulateGrad and name not in cache and \
                _accumulate_directly(direct[name], ctx, grad_in, next_edge[0], shape, dtype):
            results.append(None)   # written into the leaf's .grad: nothing left to send
            continue
        if name not in cache:
            formula = rule.grads.get(name)
            if formula is None:
                raise RuntimeError(f"the derivative of {node.op} with respect to its argument "
                                   f"{name!r} is not implemented")
            cache[name] = formula(ctx, grad_in)
        value = cache[name]
        value = value[index] if index is not None else value
        if value is not None:
            if value._data.shape != shape:   # (the input's array shape, a plain tuple)
                value = ops.sum_to(value, shape)
            if value._dtype is not dtype:
                value = value.to(dtype)
        results.append(value)
    return results


def _accumulate_directly(write: Callable, ctx, grad, sink: AccumulateGrad, shape,
                         dtype) -> bool:
    """Let ``write`` put a gradient straight into its leaf's ``.grad`` (what ``sink`` would
    do after a separate kernel): only for a leaf without hooks whose ``.grad`` exists (added
    to) or whose optimizer gave it a buffer (written), of the argument's shape and dtype and
    contiguous; returns whether ``write`` did it."""
    m = sink.leaf._ag
    if m is None or m.hooks or sink.pre_hooks:
        return False
    target, overwrite = m.grad, False
    if target is None:
        target, overwrite = m.grad_home, True
    if target is None or target._dtype is not dtype or target._data.shape != shape or \
            not target._data.flags.c_contiguous:
        return False
    if not write(ctx, grad, target, overwrite):
        return False
    if overwrite:
        m.grad = target
    return True


def _not_implemented(node: Node, grads: list) -> list:
    raise NotImplementedError(f"the derivative for {node.op} is not implemented: "
                              f"tensorplay's autograd has no rule for it yet (compute it "
                              f"under tensorplay.no_grad(), or write it with differentiable ops)")


# -- the engine ---------------------------------------------------------------------------------
def _topological(roots) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(node, False) for node, _ in roots]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for next_edge in node.next:
            if next_edge is not None and id(next_edge[0]) not in seen:
                stack.append((next_edge[0], False))
    order.reverse()
    return order


def run_backward(tensors, grad_tensors, retain_graph: bool, inputs=None,
                 allow_unused: bool = False, accumulate: bool = True):
    """Backpropagate from ``tensors`` (seeded with ``grad_tensors``); accumulate into the
    leaves' ``.grad`` (``accumulate``), or return the gradients of ``inputs``."""
    roots = []
    for number, tensor in enumerate(tensors):
        e = edge(tensor)
        if e is None:
            raise RuntimeError(f"element {number} of tensors does not require grad and does "
                               f"not have a grad_fn")
        roots.append(e)
    captured: dict[tuple[int, int], Tensor] = {}
    wanted: dict[tuple[int, int], int] = {}
    if inputs is not None:
        for number, tensor in enumerate(inputs):
            e = edge(tensor)
            if e is None:
                raise RuntimeError(f"One of the differentiated Tensors (number {number}) does "
                                   f"not require grad")
            wanted[(id(e[0]), e[1])] = number
    buffers: dict[int, list] = {}
    for (node, nr), grad in zip(roots, grad_tensors):
        slot = buffers.setdefault(id(node), [None] * max(len(node.outputs), nr + 1))
        slot[nr] = grad if slot[nr] is None else slot[nr] + grad
    order = _topological(roots)
    previous = grad_mode.enabled
    grad_mode.enabled = False
    grad_mode.accumulating = accumulate and not wanted
    try:
        for node in order:
            grads = buffers.pop(id(node), None)
            if grads is None:
                continue
            if node.pre_hooks:
                for nr, hooks in node.pre_hooks.items():
                    if nr >= len(grads):
                        continue
                    for hook in list(hooks):
                        result = hook(grads[nr])
                        if result is not None:
                            grads[nr] = result
            if wanted:
                for nr, grad in enumerate(grads):
                    key = (id(node), nr)
                    if key in wanted:
                        captured[key] = grad
                if isinstance(node, AccumulateGrad):
                    continue
            elif isinstance(node, AccumulateGrad) and not accumulate:
                continue
            grad_inputs = node.apply(grads)
            if not retain_graph:
                node.release()
            for next_edge, grad in zip(node.next, grad_inputs):
                if next_edge is None or grad is None:
                    continue
                target, nr = next_edge
                pending = buffers.get(id(target))
                if pending is None:
                    pending = buffers[id(target)] = [None] * max(len(target.outputs), nr + 1, 1)
                pending[nr] = grad if pending[nr] is None else pending[nr] + grad
    finally:
        grad_mode.enabled = previous
        grad_mode.accumulating = False
    if inputs is None:
        return None
    results = []
    for number, tensor in enumerate(inputs):
        e = edge(tensor)
        grad = captured.get((id(e[0]), e[1]))
        if grad is None and not allow_unused:
            raise RuntimeError(f"One of the differentiated Tensors (number {number}) appears "
                               f"to not have been used in the graph. Set allow_unused=True if "
                               f"this is the desired behavior.")
        results.append(grad)
    return tuple(results)


def _ones(like: Tensor) -> Tensor:
    """Ones of ``like``'s shape, dtype and device: the implicit seed of every backward, in one
    fill launch (``ones``' checks are for user input)."""
    device, dtype = like._device, like._dtype
    array = _dispatch.empty(device, like._data.shape, dtype)
    _dispatch.launch(device, _dispatch.named("fill", functools.partial(array.fill, 1)))
    return Tensor._make(array, device, dtype)


def _seed(tensor: Tensor, gradient, op: str) -> Tensor:
    if gradient is None:
        if tensor.numel() != 1:
            raise RuntimeError(f"{op}: grad can be implicitly created only for scalar outputs "
                               f"(got shape {tuple(tensor.shape)}); pass gradient=")
        return _ones(tensor)
    if not isinstance(gradient, Tensor):
        raise TypeError(f"{op}: gradient must be a Tensor or None, got "
                        f"{type(gradient).__name__}")
    if tuple(gradient.shape) != tuple(tensor.shape):
        raise RuntimeError(f"{op}: Mismatch in shape: grad_output[0] has a shape of "
                           f"{tuple(gradient.shape)} and output[0] has a shape of "
                           f"{tuple(tensor.shape)}.")
    if gradient._device != tensor._device:
        raise RuntimeError(f"{op}: gradient is on {gradient._device}, the output on "
                           f"{tensor._device}")
    return gradient


def _no_create_graph(op: str, create_graph: bool, inputs=None) -> None:
    if create_graph:
        raise NotImplementedError(f"{op}(create_graph=True): higher-order gradients are not "
                                  f"supported by tensorplay's autograd yet")
    if inputs is not None:
        raise NotImplementedError(f"{op}(inputs=...) is not supported yet; use "
                                  f"tensorplay.autograd.grad(outputs, inputs)")


def _seeds(tensors: list, gradients, op: str) -> list:
    """The gradients backward starts from: ``gradients`` (None, a Tensor or a sequence, one per
    tensor) checked, ones for one-element tensors without one."""
    if gradients is None:
        gradients = [None] * len(tensors)
    elif isinstance(gradients, Tensor):
        gradients = [gradients]
    gradients = list(gradients)
    if len(gradients) != len(tensors):
        raise RuntimeError(f"{op}: got {len(gradients)} gradients for {len(tensors)} "
                           f"tensors")
    return [_seed(t, g, op) for t, g in zip(tensors, gradients)]


def backward(tensor: Tensor, gradient=None, retain_graph=None, create_graph: bool = False,
             inputs=None) -> None:
    _no_create_graph("backward", create_graph, inputs)
    run_backward([tensor], [_seed(tensor, gradient, "backward()")], bool(retain_graph))


def backward_many(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False,
                  inputs=None) -> None:
    """``tensors[i].backward(grad_tensors[i])`` for every ``i``, in one pass over the graph
    (``torch.autograd.backward``).

    Raises:
        RuntimeError: as :meth:`Tensor.backward`; ``grad_tensors`` of another length.
    """
    _no_create_graph("autograd.backward", create_graph, inputs)
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    run_backward(tensors, _seeds(tensors, grad_tensors, "autograd.backward()"),
                 bool(retain_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``),
    leaving every ``.grad`` alone.

    Raises:
        RuntimeError: an input that does not require grad, or (without ``allow_unused``) one
            the outputs do not depend on; as :meth:`Tensor.backward` otherwise.
        TypeError: an output or input that is not a Tensor.
    """
    _no_create_graph("autograd.grad", create_graph)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for value in outputs + inputs:
        if not isinstance(value, Tensor):
            raise TypeError(f"autograd.grad: outputs and inputs must be Tensors, got "
                            f"{type(value).__name__}")
    return run_backward(outputs, _seeds(outputs, grad_outputs, "autograd.grad()"),
                        bool(retain_graph), inputs=inputs, allow_unused=allow_unused)


def register_hook(tensor: Tensor, hook: Callable) -> RemovableHandle:
    m = tensor._ag
    if m is None or not m.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if m.grad_fn is None:
        if m.hooks is None:
            m.hooks = []
        m.hooks.append(hook)
        return RemovableHandle(m.hooks, hook)
    node = edge(tensor)[0]
    if node.pre_hooks is None:
        node.pre_hooks = {}
    hooks = node.pre_hooks.setdefault(m.output_nr, [])
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def retain_grad(tensor: Tensor) -> None:
    m = tensor._ag
    if m is None or not m.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if m.grad_fn is None or m.retains_grad:
        return
    m.retains_grad = True
    ref = weakref.ref(tensor)

    def keep(grad):
        owner = ref()
        if owner is not None:
            om = meta(owner)
            om.grad = grad.clone() if om.grad is None else om.grad + grad
    register_hook(tensor, keep)


__all__ = ["AutogradMeta", "Function", "FunctionCtx", "Node", "RULES", "Rule", "backward",
           "dispatch", "enable_grad", "grad", "grad_mode", "inference_mode", "is_grad_enabled",
           "no_grad", "register_hook", "set_grad_enabled"]


# -- user-defined ops ---------------------------------------------------------------------------
class FunctionCtx:
    """What ``Function.forward`` hands to ``backward``: ``save_for_backward(*tensors)`` keeps
    tensors (version-checked at backward, as PyTorch's), ``saved_tensors`` gives them back,
    ``needs_input_grad`` says which arguments want a gradient; any other attribute may be set
    freely."""

    # set by Function.apply (declarations only: no class attribute is made)
    _name: str
    needs_input_grad: tuple[bool, ...]

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (or None) for ``backward``; an in-place change to one before
        backward makes :attr:`saved_tensors` raise, as in PyTorch."""
        self._saved = [None if t is None else SavedTensor(t) for t in tensors]

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to :meth:`save_for_backward`, in order.

        Raises:
            RuntimeError: they were freed by an earlier backward, or one was changed in place
                since it was saved.
        """
        saved = self.__dict__.get("_saved")
        if saved is None:
            return ()
        if saved is _FREED:
            raise RuntimeError("Trying to backward through the graph a second time (or "
                               "directly access saved tensors after they have already been "
                               "freed); specify retain_graph=True on the first backward")
        return tuple(None if s is None else s.unpack(self._name) for s in saved)

    def saves_anything(self) -> bool:
        """Whether tensors are saved and not yet freed."""
        saved = self.__dict__.get("_saved")
        return bool(saved) and saved is not _FREED


_FREED: list = []


class _FunctionNode(Node):
    __slots__ = ("function", "positions")

    def __init__(self, function, ctx, next_edges, positions, outputs):
        super().__init__(function.__name__, None, ctx, next_edges,
                         [("self", None)] * len(next_edges), outputs)
        self.function = function
        self.positions = positions

    def name(self) -> str:
        return f"{self.function.__name__}Backward"

    def apply(self, grads: list) -> list:
        grads = [g if g is not None else _zeros(*out) for g, out in zip(grads, self.outputs)]
        results = self.function.backward(self.ctx, *grads)
        if not isinstance(results, tuple):
            results = (results,)
        return [results[position] if position < len(results) else None
                for position in self.positions]

    def release(self) -> None:
        if self.ctx.saves_anything():
            self.ctx._saved = _FREED


class Function:
    """A differentiable op written by hand, as ``torch.autograd.Function``: subclass it with
    static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` (one gradient or None
    per argument of ``forward``), and call ``MyOp.apply(*args)``. ``forward`` runs with grad mode
    off; its tensor outputs get this op as their ``grad_fn`` when an argument requires grad."""

    @staticmethod
    def forward(ctx, *args):
        """The op (override it): its result from ``args``, run with grad mode off; save what
        ``backward`` needs on ``ctx``."""
        raise NotImplementedError("subclasses of Function must implement forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The derivative (override it): one gradient (or None) per argument of
        :meth:`forward`, from one gradient per output."""
        raise NotImplementedError("subclasses of Function must implement backward(ctx, ...)")

    @classmethod
    def apply(cls, *args):
        """Run :meth:`forward` on ``args`` and record the op when an argument requires grad."""
        ctx = FunctionCtx()
        ctx._name = cls.__name__
        ctx.needs_input_grad = tuple(requires_grad(a) for a in args)
        result = _run(cls.forward, (ctx,) + args, {})
        if not (grad_mode.enabled and any(ctx.needs_input_grad)):
            return result
        outputs = result if isinstance(result, tuple) else (result,)
        tensors = [out for out in outputs if type(out) is Tensor]
        positions = [k for k, needed in enumerate(ctx.needs_input_grad) if needed]
        node = _FunctionNode(cls, ctx, [edge(args[k]) for k in positions], positions,
                             [(t.shape, t._dtype, t._device) for t in tensors])
        for number, out in enumerate(tensors):
            if _differentiable_dtype(out._dtype):
                m = meta(out)
                m.requires_grad = True
                m.grad_fn, m.output_nr = node, number
        return result


# -- the Tensor surface (installed by methods.py) -------------------------------------------------
def _get_requires_grad(self: Tensor) -> bool:
    m = self._ag
    return m is not None and m.requires_grad


def _set_requires_grad(self: Tensor, flag: bool) -> None:
    set_requires_grad(self, flag)


def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
    """Set whether autograd records ops on this (leaf) tensor; returns the tensor.

    Raises:
        RuntimeError: for an integer, bool or complex tensor, or for turning it off on a
            tensor computed from others (use ``detach()``).
    """
    set_requires_grad(self, requires_grad)
    return self


def _get_grad(self: Tensor) -> Tensor | None:
    m = self._ag
    return None if m is None else m.grad


def _set_grad(self: Tensor, value) -> None:
    if value is not None:
        if not isinstance(value, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of "
                            f"type {type(value).__name__}")
        if value._dtype is not self._dtype:
            raise RuntimeError(f"assigned grad has data of a different type: "
                               f"{value._dtype.name}, the tensor is {self._dtype.name}")
        if value._device != self._device:
            raise RuntimeError(f"assigned grad has data located on a different device: "
                               f"{value._device}, the tensor is on {self._device}")
        if tuple(value.shape) != tuple(self.shape):
            raise RuntimeError(f"assigned grad has data of a different size: "
                               f"{tuple(value.shape)}, the tensor is {tuple(self.shape)}")
    if value is None and self._ag is None:
        return
    meta(self).grad = value


def _get_grad_fn(self: Tensor):
    m = self._ag
    if m is None or not m.requires_grad:
        return None
    if m.base is not None and m.grad_fn is not None:
        return edge(self)[0]
    return m.grad_fn


def _is_leaf(self: Tensor) -> bool:
    m = self._ag
    return m is None or not m.requires_grad or (m.grad_fn is None)


def _version(self: Tensor) -> int:
    m = self._ag
    return 0 if m is None else m.version.value


def detach(self: Tensor) -> Tensor:
    """A new tensor sharing this one's memory, outside autograd (no grad_fn, does not require
    grad). In-place changes through it are seen by backward's version checks."""
    return detached(self)


def detach_(self: Tensor) -> Tensor:
    """Make this tensor a leaf that does not require grad (in place); returns it.

    Raises:
        RuntimeError: for a view (detach the base, or use ``detach()``).
    """
    m = self._ag
    if m is None:
        return self
    if m.base is not None and m.requires_grad:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    m.requires_grad = False
    m.grad_fn = None
    return self


def tensor_backward(self: Tensor, gradient=None, retain_graph=None, create_graph: bool = False,
                    inputs=None) -> None:
    """Accumulate the gradient of this tensor with respect to the leaves into their ``.grad``.

    ``gradient`` is required unless the tensor has one element. Gradients add into existing
    ``.grad`` tensors (in place, so a captured step keeps writing the same tensor); zero them
    between steps (``optimizer.zero_grad()``). Without ``retain_graph=True`` the saved tensors
    are freed and a second backward through the same nodes raises.

    Raises:
        RuntimeError: the tensor does not require grad; a non-scalar without ``gradient``; a
            tensor saved for backward was changed in place since; a second backward through
            freed buffers.
        NotImplementedError: ``create_graph=True`` (higher-order gradients), or an op without a
            derivative.
    """
    backward(self, gradient, retain_graph, create_graph, inputs)


def tensor_register_hook(self: Tensor, hook: Callable) -> RemovableHandle:
    """``hook(grad)`` runs when this tensor's gradient is computed; a non-None return replaces
    the gradient. Returns a handle whose ``remove()`` takes the hook away."""
    return register_hook(self, hook)


def tensor_retain_grad(self: Tensor) -> None:
    """Keep this non-leaf tensor's gradient in ``.grad`` at the next backward."""
    retain_grad(self)


def _retains_grad(self: Tensor) -> bool:
    """Whether :meth:`Tensor.retain_grad` was called on this non-leaf tensor."""
    m = self._ag
    return m is not None and m.retains_grad


TENSOR_SURFACE = {
    "requires_grad": property(_get_requires_grad, _set_requires_grad,
                              doc="Whether autograd records ops on this tensor."),
    "grad": property(_get_grad, _set_grad,
                     doc="The gradient accumulated by backward (None until then)."),
    "grad_fn": property(_get_grad_fn, doc="The node that made this tensor (None for leaves)."),
    "is_leaf": property(_is_leaf, doc="True unless computed by a recorded op."),
    "retains_grad": property(_retains_grad),
    "_version": property(_version),
    "requires_grad_": requires_grad_,
    "detach": detach,
    "detach_": detach_,
    "backward": tensor_backward,
    "register_hook": tensor_register_hook,
    "retain_grad": tensor_retain_grad,
}
