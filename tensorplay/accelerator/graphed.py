"""``make_graphed_callables``: a callable's forward and backward each captured into a graph, as
``torch.cuda.make_graphed_callables``."""

from __future__ import annotations

import functools
from typing import Any, Callable

from .._tensor.autograd import Function, grad as _grad
from .._tensor.tensor import Tensor
from .._tensor import creation as _creation
from .graphs import Graph, graph_pool_handle

__all__ = ["make_graphed_callables"]


def _flatten(outputs) -> tuple[tuple[Tensor, ...], bool]:
    if isinstance(outputs, Tensor):
        return (outputs,), True
    if isinstance(outputs, (tuple, list)) and all(isinstance(o, Tensor) for o in outputs):
        return tuple(outputs), False
    raise TypeError(f"make_graphed_callables: a callable must return a Tensor or a tuple of "
                    f"Tensors, got {type(outputs).__name__}")


def _check_args(number: int, args) -> tuple[Tensor, ...]:
    if not isinstance(args, tuple):
        raise TypeError(f"make_graphed_callables: sample_args[{number}] must be a tuple of "
                        f"Tensors, got {type(args).__name__}")
    for position, arg in enumerate(args):
        if not isinstance(arg, Tensor):
            raise TypeError(f"make_graphed_callables: sample_args[{number}][{position}] must be "
                            f"a Tensor, got {type(arg).__name__}")
    return args


def _graph(fn: Callable, args: tuple[Tensor, ...], params: tuple[Tensor, ...],
           warmup: int, allow_unused: bool, pool) -> Callable:
    """Capture ``fn``'s forward and backward; return the graphed function of ``args``."""
    wanted = [a for a in args if a.requires_grad] + [p for p in params if p.requires_grad]
    for _ in range(warmup):   # plan caches and the allocator warm, outside the capture
        outputs, _ = _flatten(fn(*args))
        live = [o for o in outputs if o.requires_grad]
        if live and wanted:
            _grad(live, wanted, grad_outputs=[_creation.ones_like(o) for o in live],
                  allow_unused=allow_unused)
    forward_graph = Graph(pool=pool)
    with forward_graph:
        static_outputs, single = _flatten(fn(*args))
    differentiable = [o for o in static_outputs if o.requires_grad]
    static_grad_outputs = [_creation.empty_like(o) for o in differentiable]
    backward_graph = Graph(pool=pool)
    static_grads: tuple = ()
    if differentiable and wanted:
        with backward_graph:
            static_grads = _grad(differentiable, wanted, grad_outputs=static_grad_outputs,
                                 allow_unused=allow_unused)
    needs = [a.requires_grad for a in args] + [p.requires_grad for p in params]
    count = len(args)

    class Graphed(Function):
        @staticmethod
        def forward(ctx, *inputs):
            forward_graph.stage_and_launch(list(args), list(inputs[:count]))
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        def backward(ctx, *grads):
            given = [g for g, o in zip(grads, static_outputs) if o.requires_grad]
            backward_graph.stage_and_launch(static_grad_outputs, given)
            found = iter(static_grads)
            return tuple(next(found) if need else None for need in needs)

    Graphed.__name__ = f"Graphed{getattr(fn, '__name__', type(fn).__name__)}"

    def graphed(*inputs):
        if len(inputs) != count:
            raise TypeError(f"{Graphed.__name__}: expected {count} tensor arguments (as in "
                            f"sample_args), got {len(inputs)}")
        outputs = Graphed.apply(*inputs, *params)
        return outputs[0] if single else outputs
    return graphed


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None) -> Any:
    """Graphed versions of ``callables`` (a function or module, or a tuple of them): each call
    replays one captured forward graph, and ``backward`` replays one captured backward graph.

    As PyTorch's: ``sample_args`` gives each callable's tensor arguments (a tuple, or a tuple of
    tuples for several callables), whose shapes, dtypes, devices and ``requires_grad`` every
    later call must keep; a module's parameters are differentiated too and its ``forward`` is
    replaced by the graphed one (the module is returned); a plain function is differentiated
    only with respect to its arguments. Each callable runs ``num_warmup_iters`` times
    (forward and backward, leaving ``.grad`` alone) before its capture. All graphs share one
    memory pool (``pool``, else a new one), so call the graphed callables in the order their
    forwards and backwards were captured.

    Pitfalls: the outputs are the graph's static tensors, overwritten by the next call: clone
    what must outlive it. Work that is not captured (host reads, Python branches on values)
    runs only once, at capture.

    Raises:
        TypeError: ``sample_args`` is not a tuple of Tensors per callable, or a callable
            returns something other than a Tensor or a tuple of Tensors.
        ValueError: ``callables`` and ``sample_args`` differ in length.
    """
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if not isinstance(sample_args, tuple) or len(sample_args) != len(callables):
        raise ValueError(f"make_graphed_callables: got {len(callables)} callables and "
                         f"{len(sample_args) if isinstance(sample_args, tuple) else 'no tuple of'}"
                         f" sample_args; pass one tuple of Tensors per callable")
    if pool is None:
        pool = graph_pool_handle()
    results = []
    for number, (fn, args) in enumerate(zip(callables, sample_args)):
        args = _check_args(number, args)
        params = tuple(fn.parameters()) if hasattr(fn, "parameters") else ()
        forward = getattr(fn, "forward", fn) if params or hasattr(fn, "parameters") else fn
        graphed = _graph(forward, args, params, num_warmup_iters, allow_unused_input, pool)
        if hasattr(fn, "parameters"):
            original = fn.forward

            @functools.wraps(original)
            def module_forward(*inputs, _graphed=graphed, _original=original, _module=fn):
                return _graphed(*inputs) if _module.training else _original(*inputs)
            fn.forward = module_forward
            results.append(fn)
        else:
            results.append(graphed)
    return results[0] if just_one else tuple(results)
