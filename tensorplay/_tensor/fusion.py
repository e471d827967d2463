"""Fused elementwise kernels written once in Python, for every backend.

A fused kernel is a function of ``xp`` arrays (and scalars) that uses only arithmetic operators,
comparisons, ``xp`` ufuncs (with ``out=`` to write an argument) and in-place operators on its
arguments. :func:`fused` turns ``make(xp) -> function`` into a callable that, for the namespace
it is called with, runs

- on cuda: one CuPy kernel, compiled by ``cupy.fuse`` (the backend's ``fuse`` hook) on first call
  for each argument signature;
- on host and sim: the very same function over NumPy arrays, op by op.

So an algorithm that needs fewer kernels (a solver's inner loop) is still one implementation.

Pitfalls:
- Reductions inside a fused function compile to a single-block CuPy kernel, which is slow on
  large arrays; fuse the elementwise part, write it to a buffer with ``out=``, and reduce that
  with ``xp.sum`` (CUB on cuda).
- An argument written in place must not overlap another argument read at a *different* index
  (views of one buffer shifted against each other): every element is computed independently.
- Compile before a stream capture where possible (run the kernel once eagerly): compiling inside
  a capture works but is slow.
"""

from __future__ import annotations

import threading

from .._runtime import dispatch as _dispatch

__all__ = ["fused"]


class _Fused:
    __slots__ = ("name", "make", "_by_xp", "_lock")

    def __init__(self, name: str, make):
        self.name = name
        self.make = make
        self._by_xp: dict[int, object] = {}
        self._lock = threading.Lock()

    def for_xp(self, xp):
        """The compiled (cuda) or plain (NumPy) function for the namespace ``xp``."""
        function = self._by_xp.get(id(xp))
        if function is None:
            with self._lock:
                function = self._by_xp.get(id(xp))
                if function is None:
                    plain = self.make(xp)
                    fuse = _dispatch.fuse_hook(xp)
                    function = self._by_xp[id(xp)] = (fuse(self.name, plain) if fuse else plain)
        return function

    def __repr__(self) -> str:
        return f"<fused kernel {self.name}>"


def fused(name: str):
    """Decorator: ``@fused("tp_name")`` over ``make(xp)`` returning the kernel's function.

    The result has ``for_xp(xp)``, giving the function to call with arrays of ``xp`` (inside an
    op's kernel closure, so that it runs in stream order and is recorded by captures).
    """
    def wrap(make):
        return _Fused(name, make)
    return wrap
