"""``tensorplay.linalg``: PyTorch's ``torch.linalg`` names, signatures, named tuples, dtypes and
errors: ``norm vector_norm matrix_norm solve inv det slogdet cholesky qr eigh svd svdvals lstsq
pinv`` and :class:`LinAlgError`.

Matrices carry any number of leading batch dims (``(*, m, n)``). Decompositions and solves take
float32/float64/complex64/complex128 (float16, bfloat16 and integers raise RuntimeError).
Capture-safe: ``vector_norm``, and ``matrix_norm``/``norm`` except ord ``'nuc'``, 2, -2; every
other function runs cuSOLVER (through CuPy) on cuda and raises RuntimeError while a graph
capture records on its device (on sim too). ``inv``, ``solve``, ``cholesky``, ``eigh`` and
``svd`` check their results eagerly (singular, not positive-definite, no convergence: raise
:class:`LinAlgError`), so on an accelerator they wait for the device, as torch's cuda does.
See ``tensorplay/_tensor/decompositions.py`` for the details.
"""

from __future__ import annotations

from ._tensor.decompositions import (
    LinAlgError,
    det,
    eigh,
    inv,
    linalg_cholesky as cholesky,
    linalg_qr as qr,
    linalg_slogdet as slogdet,
    linalg_svd as svd,
    lstsq,
    matrix_norm,
    norm,
    pinv,
    solve,
    svdvals,
    vector_norm,
)

__all__ = ["LinAlgError", "norm", "vector_norm", "matrix_norm", "solve", "inv", "det",
           "slogdet", "cholesky", "qr", "eigh", "svd", "svdvals", "lstsq", "pinv"]
