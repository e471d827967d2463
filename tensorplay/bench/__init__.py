"""The benchmark suite behind ``python -m tensorplay bench`` (the top floor of the package).

It uses tensorplay's public API, plus two things below it, each in one place: the backend's
declared benchmark hook ``raw_graph_launchers`` (:func:`.peers.raw_graph_launchers`) and, in
:mod:`.solvers` and :mod:`.controlflow`, the fused-kernel machinery their loop bodies are built
from.

- :mod:`.suite`: the cases, the text table, the JSON and ``main``;
- :mod:`.eager`: the eager table (host cost per call of small ops, beside CuPy, torch, NumPy);
- :mod:`.models`: the MLP and the CG Poisson solve; :mod:`.solvers`: the CG solver itself;
- :mod:`.controlflow`: the control-flow table (a heat loop with snapshots, Newton's method),
  tensorplay's loops captured as one graph beside JAX's and torch's;
- :mod:`.products`: large matrix products (float32, TF32, bfloat16) beside torch;
- :mod:`.peers`: the same work in torch, CuPy, JAX and raw cuda-bindings;
- :mod:`.timing`: the timing loops; :mod:`.plot`: the PNG plot.
"""
