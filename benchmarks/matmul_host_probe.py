"""What one cuBLASLt product costs the host, layer by layer (cuda only): the raw
``cublasLtMatmul`` call through nvmath-python's binding with a ready plan, ``_matmul._run``
(the plan's call), ``_matmul.matmul`` on its kept path, the tensor op (``x @ w``, ``addmm``)
and torch's and CuPy's products beside them; then the strided copies of a GPT-2 prefill layer
(tensorplay's copy kernel against CuPy's ``dst[...] = src`` and torch's ``copy_``). Shapes:
the training bench's batch-256 layer (256 x 512 @ 512 x 512, float32) and the prefill's
(512 x 768 @ 768 x 2304, bfloat16). Usage: ``python3 benchmarks/matmul_host_probe.py``."""

import cupy
import ml_dtypes
import numpy as np

import tensorplay as tp
from tensorplay.backends.cuda import _copy, _matmul
from tensorplay.bench.timing import timed_loops

CALLS = 400


def host_us(fn, calls: int = CALLS) -> float:
    """Best of five loops of host time per call (the device drains between loops)."""
    return min(timed_loops(fn, cupy.cuda.Device().synchronize, calls, 5, 0)[0])


def main() -> None:
    try:
        import torch
    except ImportError:
        torch = None
    tp.zeros(1, device="cuda")   # selects and binds the backend
    for label, m, k, n, dtype in (("training layer", 256, 512, 512, np.float32),
                                  ("prefill qkv", 512, 768, 2304, ml_dtypes.bfloat16)):
        rng = np.random.default_rng(0)
        a = cupy.asarray(rng.standard_normal((m, k)).astype(dtype))
        b = cupy.asarray(rng.standard_normal((k, n)).astype(dtype))
        out = cupy.empty((m, n), dtype)
        bias = cupy.asarray(rng.standard_normal(n).astype(dtype))
        _matmul.matmul(a, b, out)
        _matmul.matmul_epilogue(a, b, out, bias, None)
        plan = [p for key, p in _matmul._plans.items()
                if key[8:10] == (m, n) and not p.bias][-1]
        device = out.data.device_id
        handle = _matmul._handle(device)
        stream = cupy.cuda.get_current_stream().ptr
        a_layout, b_layout, d_layout = plan.layouts
        pa, pb, pc = a.data.ptr, b.data.ptr, out.data.ptr

        def raw():
            _matmul._lt.matmul(handle, plan.desc, plan.alpha, pb, a_layout, pa, b_layout,
                               plan.beta, pc, d_layout, pc, d_layout, plan.algo, 0, 0, stream)
        rows = [("cublasLtMatmul through nvmath's binding", raw),
                ("_matmul._run(plan, ...)", lambda: _matmul._run(plan, device, pb, pa, pc, None)),
                ("_matmul.matmul(a, b, out) (kept path)", lambda: _matmul.matmul(a, b, out)),
                ("_matmul.matmul_epilogue(a, b, out, bias)",
                 lambda: _matmul.matmul_epilogue(a, b, out, bias, None)),
                ("cupy.matmul(a, b, out=out)", lambda: cupy.matmul(a, b, out=out))]
        ta, tb = tp.tensor(cupy.asnumpy(a)).to("cuda"), tp.tensor(cupy.asnumpy(b)).to("cuda")
        tbias = tp.tensor(cupy.asnumpy(bias)).to("cuda")
        rows += [("tensorplay x @ w", lambda: ta @ tb),
                 ("tensorplay addmm(bias, x, w)", lambda: tp.addmm(tbias, ta, tb))]
        if torch is not None:
            tdtype = torch.float32 if dtype == np.float32 else torch.bfloat16
            xa = torch.randn(m, k, device="cuda", dtype=tdtype)
            xb = torch.randn(k, n, device="cuda", dtype=tdtype)
            xo = torch.empty(m, n, device="cuda", dtype=tdtype)
            xbias = torch.randn(n, device="cuda", dtype=tdtype)
            rows += [("torch.mm(a, b, out=out)", lambda: torch.mm(xa, xb, out=xo)),
                     ("torch a @ b", lambda: xa @ xb),
                     ("torch.addmm(bias, a, b)", lambda: torch.addmm(xbias, xa, xb))]
        print(f"\n{label}: ({m} x {k}) @ ({k} x {n}) {np.dtype(dtype).name}, host us per call")
        for name, fn in rows:
            fn()
            print(f"  {name:45s} {host_us(fn):8.2f}")

    bf16 = ml_dtypes.bfloat16
    qkv = cupy.zeros((512, 3, 12, 64), bf16)
    keys = qkv.transpose(1, 2, 0, 3)[1:]
    cache = cupy.zeros((2, 1, 12, 1024, 64), bf16)[:, 0, :, :512]
    attended = cupy.zeros((12, 512, 64), bf16)
    merged = cupy.empty((512, 12, 64), bf16)
    rows = [("cache write: tensorplay copy kernel", lambda: _copy.copy(cache, keys)),
            ("cache write: CuPy dst[...] = src", lambda: cache.__setitem__(Ellipsis, keys)),
            ("heads merge: tensorplay copy kernel",
             lambda: _copy.copy(merged, attended.transpose(1, 0, 2))),
            ("heads merge: CuPy dst[...] = src",
             lambda: merged.__setitem__(Ellipsis, attended.transpose(1, 0, 2)))]
    t_att = tp.zeros(1, 12, 512, 64, device="cuda", dtype=tp.bfloat16)
    rows.append(("heads merge: tensorplay [0].transpose(0, 1).reshape",
                 lambda: t_att[0].transpose(0, 1).reshape(512, 768)))
    if torch is not None:
        x_qkv = torch.zeros(512, 3, 12, 64, device="cuda", dtype=torch.bfloat16)
        x_cache = torch.zeros(2, 1, 12, 1024, 64, device="cuda", dtype=torch.bfloat16)
        x_att = torch.zeros(1, 12, 512, 64, device="cuda", dtype=torch.bfloat16)
        rows += [("cache write: torch slice assignment",
                  lambda: x_cache[:, 0, :, :512].copy_(x_qkv.permute(1, 2, 0, 3)[1:])),
                 ("heads merge: torch [0].transpose(0, 1).reshape",
                  lambda: x_att[0].transpose(0, 1).reshape(512, 768))]
    print("\nthe prefill's strided copies (bfloat16), host us per call")
    for name, fn in rows:
        fn()
        print(f"  {name:55s} {host_us(fn):8.2f}")


if __name__ == "__main__":
    main()
