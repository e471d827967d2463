"""``tensorplay.compile``: run a function through a compiler backend.

Backends:

- ``"cudagraphs"`` (default): :mod:`tensorplay.compiler.backends.cudagraphs` captures the function
  into a :class:`~tensorplay.accelerator.Graph` once per input signature and replays it through
  ``Graph.stage_and_launch``.
- ``"eager"``: the plain call, for comparison and debugging.

Usable as ``@tp.compile``, ``@tp.compile(backend="eager")`` or ``tp.compile(fn, backend=...)``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .backends.cudagraphs import CudaGraphsFunction

__all__ = ["compile", "BACKENDS"]

BACKENDS = ("cudagraphs", "eager")


def compile(fn: Callable[..., Any] | None = None, *, backend: str = "cudagraphs",
            cache_size: int = 8, fuse: bool = True) -> Callable[..., Any]:
    """Compile ``fn`` with ``backend``.

    What is fused ("cudagraphs", ``fuse=True``): the warm-up call records the ops it runs, and
    the capture rewrites every ``matmul`` (``@``) whose result only feeds an ``add`` of a
    same-dtype tensor (the bias), optionally followed by ``relu``, ``gelu`` (exact or tanh) or
    ``silu`` of that sum, into one fused product (``x @ w + b`` then ``gelu`` is the usual
    case; ``nn.functional.linear`` is fused the same way). On cuda a float32 product of at
    most 8 rows is ONE kernel with the bias and any of these activations (a small batch
    through a layer, where cuBLAS is latency); other products are one cuBLASLt call with a
    BIAS, RELU_BIAS or GELU_BIAS (tanh GELU) epilogue, and for exact GELU or SiLU the bias
    epilogue followed by one activation kernel; on sim it is the same ops computed by NumPy.
    Intermediates that the function keeps (returns, stores, or looks at again) are not
    fused away, and a capture that strays from the warm-up's sequence of ops is captured again
    as written. Results equal the unfused ops within float tolerance (fused epilogues round
    once instead of after each op). The compiled function's ``fused_products`` counts them.

    Args:
        fn: the function (tensors and plain values in, tensors or containers of them out).
        backend: "cudagraphs" or "eager".
        cache_size: for "cudagraphs", how many input signatures keep a captured graph; the
            least recently used is evicted (its graph reset) beyond that.
        fuse: for "cudagraphs", whether to rewrite fusable products (above); False captures
            the ops exactly as written.

    Returns:
        A callable with ``fn``'s signature (or a decorator when ``fn`` is omitted). Inputs that
        ``fn`` changes in place (directly or through a view) hold, after every call, what an
        eager call would have left in them: "cudagraphs" copies them back from the graph's
        static copies within the same launch. Outputs of "cudagraphs" are the graph's static
        buffers, overwritten by the next call (``clone()`` what you keep); see
        :mod:`tensorplay.compiler.backends.cudagraphs`.

    Raises:
        ValueError: an unknown backend or a cache_size below 1.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown compile backend {backend!r}; valid backends: "
                         f"{', '.join(map(repr, BACKENDS))}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        raise ValueError(f"cache_size must be an int >= 1, got {cache_size!r}")
    if fn is None:
        return functools.partial(compile, backend=backend, cache_size=cache_size, fuse=fuse)
    if not callable(fn):
        raise TypeError(f"compile() takes a callable, got {type(fn).__name__}")
    if backend == "eager":
        @functools.wraps(fn)
        def eager(*args, **kwargs):
            return fn(*args, **kwargs)
        return eager
    return functools.wraps(fn)(CudaGraphsFunction(fn, cache_size, bool(fuse)))
