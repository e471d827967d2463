"""Where the host time of the eager table's softmax, 64 x 64 products, layer_norm and
masked_fill goes, layer by layer
(cuda only): the bare launch, the backend hook on its kept path with a ready output, a
result's allocation and free, the tensor op, and CuPy's and torch's same calls beside them.
Each row: host us per call (clock stopped before the sync) and total us per call (after it:
above the host figure when the device is the bottleneck), best of five loops of 300 calls.
Usage: ``python3 benchmarks/eager_layers_probe.py``."""

import cupy
import numpy as np

import tensorplay as tp
from tensorplay._runtime import dispatch
from tensorplay._tensor.tensor import Tensor
from tensorplay.backends.cuda import _activations, _matmul, _rows
from tensorplay.bench.timing import timed_loops

CALLS = 300


def row(name: str, fn) -> None:
    fn()
    host, total = timed_loops(fn, cupy.cuda.Device().synchronize, CALLS, 5, 20)
    print(f"  {name:52s} {min(host):8.2f} {min(total):8.2f}", flush=True)


def main() -> None:
    try:
        import torch
    except ImportError:
        torch = None
    dev = tp.device("cuda:0")
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(s).astype(np.float32)
              for k, s in (("a", (64, 64)), ("w", (64, 64)), ("v", (64,)))}
    a, w, v = (tp.tensor(values[k], device=dev) for k in ("a", "w", "v"))
    ca, cw, cv = (cupy.asarray(values[k]) for k in ("a", "w", "v"))
    out = cupy.empty((64, 64), np.float32)
    print("name                                                  host us  total us")

    print("softmax (64, 64) float32 along -1")
    a.softmax(-1)
    _activations.softmax(a._data, out, -1, False)
    launches = list(_activations._row_launches.values())
    if launches:
        packed, blocks, threads, length, rows = launches[-1]
        found = packed.buffers.get(__import__("threading").get_ident()) or packed.buffer()
        found[0][0], found[0][1], found[0][2], found[0][3] = a._data.data.ptr, out.data.ptr, \
            length, rows
        row("prepacked launch of the kept row kernel", lambda: packed(blocks, threads, found[1]))
    row("hook _activations.softmax(x, out, -1, False)",
        lambda: _activations.softmax(a._data, out, -1, False))
    launcher = getattr(_activations, "softmax_launcher", None)
    launch = launcher(a._data, -1, False) if launcher is not None else None
    if launch is not None:
        row("softmax_launcher's launch(x, out)", lambda: launch(a._data, out))
    f32 = tp.float32
    row("dispatch.empty (64, 64) + its free", lambda: dispatch.empty(dev, (64, 64), f32))
    row("Tensor._make(dispatch.empty(...)) + free",
        lambda: Tensor._make(dispatch.empty(dev, (64, 64), f32), dev, f32))
    row("cupy.empty((64, 64)) + free", lambda: cupy.empty((64, 64), np.float32))
    row("tp a.softmax(-1)", lambda: a.softmax(-1))
    row("tp.nn.functional.softmax(a, -1)", lambda: tp.nn.functional.softmax(a, -1))
    if torch is not None:
        ta = torch.from_numpy(values["a"]).cuda()
        row("torch a.softmax(-1)", lambda: ta.softmax(-1))
        row("torch empty((64, 64))", lambda: torch.empty(64, 64, device="cuda"))

    print("a @ w (64 x 64 float32)")
    a @ w
    _matmul.matmul(a._data, w._data, out)
    plans = [p for p in _matmul._direct.values() if p.__class__ is _matmul._Plan]
    print(f"  kept products: {len(_matmul._direct)}; cuBLASLt plans among them: {len(plans)}; "
          f"their workspaces: {[p.workspace for p in plans]}")
    kept = _matmul._direct.get(next(iter(_matmul._direct))) if _matmul._direct else None
    print(f"  the first kept product: {type(kept).__name__}")
    if plans:
        plan = plans[0]
        handle = _matmul._handle(0)
        stream = cupy.cuda.get_current_stream().ptr
        a_layout, b_layout, d_layout = plan.layouts
        pa, pb, pc = a._data.data.ptr, w._data.data.ptr, out.data.ptr

        def raw():
            _matmul._lt.matmul(handle, plan.desc, plan.alpha, pb, a_layout, pa, b_layout,
                               plan.beta, pc, d_layout, pc, d_layout, plan.algo, 0, 0, stream)
        row("cublasLtMatmul through nvmath's binding, no workspace", raw)
        row("_matmul._run(plan, ...)", lambda: _matmul._run(plan, 0, pb, pa, pc, None))
    row("hook _matmul.matmul(a, w, out)", lambda: _matmul.matmul(a._data, w._data, out))
    launch = _matmul.launcher(a._data, w._data, out)
    if launch is not None:
        row("launcher's launch(a, w, None, out)", lambda: launch(a._data, w._data, None, out))
        row("dispatch.call_into_new(launch, a, w, None)",
            lambda: dispatch.call_into_new(dev, (64, 64), 64 * 64 * 4, np.float32, launch,
                                           a._data, w._data, None))
    row("tp a @ w", lambda: a @ w)
    row("cupy a @ w", lambda: ca @ cw)
    row("cupy.matmul(a, w, out=out)", lambda: cupy.matmul(ca, cw, out=out))
    if torch is not None:
        tw = torch.from_numpy(values["w"]).cuda()
        tv = torch.from_numpy(values["v"]).cuda()
        row("torch a @ w", lambda: ta @ tw)

    print("addmm(v, a, w) (64 x 64 float32, bias v)")
    row("hook _matmul.matmul_epilogue(a, w, out, v, None)",
        lambda: _matmul.matmul_epilogue(a._data, w._data, out, v._data, None))
    row("tp.addmm(v, a, w)", lambda: tp.addmm(v, a, w))
    row("tp.nn.functional.linear(a, w.T, v)", lambda: tp.nn.functional.linear(a, w.T, v))
    if torch is not None:
        row("torch.addmm(v, a, w)", lambda: torch.addmm(tv, ta, tw))
    print("layer_norm(a, (64,), ones, zeros) (64 x 64 float32)")
    ones, zeros = tp.ones(64, device=dev), tp.zeros(64, device=dev)
    row("hook _rows.layer_norm(x, w, b, out, 1e-5)",
        lambda: _rows.layer_norm(a._data, ones._data, zeros._data, out, 1e-5))
    row("tp.nn.functional.layer_norm(a, (64,), ones, zeros)",
        lambda: tp.nn.functional.layer_norm(a, (64,), ones, zeros))
    if torch is not None:
        tones, tzeros = torch.ones(64, device="cuda"), torch.zeros(64, device="cuda")
        row("torch layer_norm(a, (64,), ones, zeros)",
            lambda: torch.nn.functional.layer_norm(ta, (64,), tones, tzeros))
    print("a.masked_fill(m, 0) (64 x 64 float32)")
    m = a > 0
    row("tp a.masked_fill(m, 0)", lambda: a.masked_fill(m, 0))
    if torch is not None:
        tm = ta > 0
        row("torch a.masked_fill(m, 0)", lambda: ta.masked_fill(tm, 0))
    print(f"  kept products now: {len(_matmul._direct)}: "
          f"{[type(p).__name__ for p in _matmul._direct.values()]}; workspaces "
          f"{[p.workspace for p in _matmul._direct.values() if p.__class__ is _matmul._Plan]}")


if __name__ == "__main__":
    main()
