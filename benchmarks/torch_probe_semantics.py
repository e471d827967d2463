"""Ask torch (cpu and cuda) what it does in the cases where tensorplay's differential checks
found torch's behaviour unclear, and print each answer: ``device | call | result or error``.
Run on the H200 machine (torch 2.11); the answers decide tensorplay's behaviour."""

from __future__ import annotations

import torch

CASES = {
    "searchsorted f32 seq, f64 values": lambda d: torch.searchsorted(
        torch.tensor([1.0, 2.0, 3.0], device=d), torch.tensor([1.5, 2.0], dtype=torch.float64,
                                                              device=d)),
    "searchsorted i64 seq, f32 values": lambda d: torch.searchsorted(
        torch.tensor([1, 2, 3], device=d), torch.tensor([1.5, 2.0], device=d)),
    "searchsorted nan": lambda d: torch.searchsorted(
        torch.tensor([1.0, 2.0, float("nan")], device=d),
        torch.tensor([float("nan"), 1.5, 3.0], device=d)),
    "searchsorted nan right": lambda d: torch.searchsorted(
        torch.tensor([1.0, 2.0, float("nan")], device=d),
        torch.tensor([float("nan"), 1.5, 3.0], device=d), right=True),
    "index_add int alpha=0.5": lambda d: torch.index_add(
        torch.ones(3, 2, dtype=torch.int64, device=d), 0, torch.tensor([0, 2], device=d),
        torch.full((2, 2), 4, dtype=torch.int64, device=d), alpha=0.5),
    "index_add int alpha=1.7": lambda d: torch.index_add(
        torch.ones(3, 2, dtype=torch.int64, device=d), 0, torch.tensor([0, 2], device=d),
        torch.full((2, 2), 4, dtype=torch.int64, device=d), alpha=1.7),
    "histc int64": lambda d: torch.histc(torch.tensor([0, 1, 1, 5], device=d), 4),
    "histc int64 bounds": lambda d: torch.histc(torch.tensor([0, 1, 1, 5], device=d), 5, 0, 5),
    "histc uint8": lambda d: torch.histc(torch.tensor([0, 1, 1, 5], dtype=torch.uint8,
                                                      device=d), 3),
    "histc float16": lambda d: torch.histc(torch.tensor([0, 1, 1, 5], dtype=torch.float16,
                                                        device=d), 3),
    "equal f32 f64": lambda d: torch.equal(torch.ones(2, device=d),
                                           torch.ones(2, dtype=torch.float64, device=d)),
    "equal i64 i32": lambda d: torch.equal(torch.ones(2, dtype=torch.int64, device=d),
                                           torch.ones(2, dtype=torch.int32, device=d)),
    "equal f32 f64 differ": lambda d: torch.equal(
        torch.tensor([0.1], device=d), torch.tensor([0.1], dtype=torch.float64, device=d)),
    "scatter int32 index": lambda d: torch.scatter(
        torch.zeros(3, 2, device=d), 0, torch.tensor([[2, 0]], dtype=torch.int32, device=d),
        torch.ones(1, 2, device=d)),
    "gather int32 index": lambda d: torch.gather(
        torch.arange(6.0, device=d).reshape(3, 2), 0,
        torch.tensor([[2, 0]], dtype=torch.int32, device=d)),
    "scatter_add int32 index": lambda d: torch.scatter_add(
        torch.zeros(3, 2, device=d), 0, torch.tensor([[2, 0]], dtype=torch.int32, device=d),
        torch.ones(1, 2, device=d)),
    "scatter_reduce int32 index": lambda d: torch.scatter_reduce(
        torch.zeros(3, 2, device=d), 0, torch.tensor([[2, 0]], dtype=torch.int32, device=d),
        torch.ones(1, 2, device=d), "amax"),
    "take_along_dim int32": lambda d: torch.take_along_dim(
        torch.arange(6.0, device=d).reshape(3, 2), torch.tensor([[2, 0]], dtype=torch.int32,
                                                                device=d), 0),
    "index_copy int32": lambda d: torch.index_copy(
        torch.zeros(3, 2, device=d), 0, torch.tensor([1], dtype=torch.int32, device=d),
        torch.ones(1, 2, device=d)),
    "index_fill int32": lambda d: torch.index_fill(
        torch.zeros(3, 2, device=d), 0, torch.tensor([1], dtype=torch.int32, device=d), 1.0),
    "scatter_reduce max": lambda d: torch.scatter_reduce(
        torch.zeros(3, 2, device=d), 0, torch.tensor([[2, 0]], device=d),
        torch.ones(1, 2, device=d), "max"),
    "scatter_reduce min": lambda d: torch.scatter_reduce(
        torch.zeros(3, 2, device=d), 0, torch.tensor([[2, 0]], device=d),
        torch.ones(1, 2, device=d), "min"),
    "einsum ij->ji strides": lambda d: torch.einsum(
        "ij->ji", torch.ones(2, 3, device=d)).stride(),
    "einsum ijk->kj strides": lambda d: torch.einsum(
        "ijk->kj", torch.ones(2, 3, 4, device=d)).stride(),
    "einsum ijk->kij strides": lambda d: torch.einsum(
        "ijk->kij", torch.ones(2, 3, 4, device=d)).stride(),
    "einsum ii->i strides": lambda d: torch.einsum("ii->i", torch.ones(3, 3, device=d)).stride(),
    "einsum ij,jk->ki strides": lambda d: torch.einsum(
        "ij,jk->ki", torch.ones(2, 3, device=d), torch.ones(3, 4, device=d)).stride(),
    "einsum ijk,k->ji strides": lambda d: torch.einsum(
        "ijk,k->ji", torch.ones(2, 3, 4, device=d), torch.ones(4, device=d)).stride(),
    "tril_ expanded": lambda d: torch.ones(1, 3, device=d).expand(3, 3).tril_(),
    "silu complex": lambda d: torch.nn.functional.silu(torch.tensor([1 + 1j, -2j], device=d)),
    "logaddexp complex": lambda d: torch.logaddexp(torch.tensor([1 + 1j, -2j], device=d),
                                                   torch.tensor([0.5 - 1j, 3 + 0j], device=d)),
    "logaddexp complex inf": lambda d: torch.logaddexp(
        torch.tensor([complex("inf"), complex("-inf")], device=d),
        torch.tensor([complex("inf"), 1 + 0j], device=d)),
    "copysign bf16 nan sign": lambda d: torch.copysign(
        torch.ones(2, dtype=torch.bfloat16, device=d),
        torch.tensor([float("nan"), -float("nan")], dtype=torch.bfloat16, device=d)),
    "bf16 nan from float64 bits": lambda d: torch.tensor(
        [float("nan")], dtype=torch.bfloat16, device=d).view(torch.int16),
    "linear 1-D weight 0-d bias": lambda d: torch.nn.functional.linear(
        torch.ones(2, 4, 5, device=d), torch.ones(5, device=d), torch.tensor(1.0, device=d)),
    "multinomial": lambda d: torch.multinomial(torch.tensor([0.2, 0.8], device=d), 3, True).dtype,
    "multinomial no replacement too many": lambda d: torch.multinomial(
        torch.tensor([0.2, 0.8], device=d), 3),
    "multinomial negative": lambda d: torch.multinomial(torch.tensor([-0.2, 0.8], device=d), 1),
    "multinomial zero sum": lambda d: torch.multinomial(torch.tensor([0.0, 0.0], device=d), 1),
    "multinomial int": lambda d: torch.multinomial(torch.tensor([1, 2], device=d), 1),
    "multinomial 3-d": lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
    "poisson dtype": lambda d: torch.poisson(torch.tensor([1.0, 5.0], device=d)).dtype,
    "poisson negative": lambda d: torch.poisson(torch.tensor([-1.0], device=d)),
    "poisson int": lambda d: torch.poisson(torch.tensor([1, 2], device=d)),
    "linalg.norm int": lambda d: torch.linalg.norm(torch.tensor([3, 4], device=d)),
    "linalg.inv singular": lambda d: torch.linalg.inv(torch.zeros(2, 2, device=d)),
    "linalg.cholesky not pd": lambda d: torch.linalg.cholesky(-torch.eye(2, device=d)),
    "linalg.solve shapes": lambda d: torch.linalg.solve(torch.eye(2, device=d),
                                                        torch.ones(3, device=d)),
    "linalg.det int": lambda d: torch.linalg.det(torch.eye(2, dtype=torch.int64, device=d)),
    "linalg.eigh nonsquare": lambda d: torch.linalg.eigh(torch.ones(2, 3, device=d)),
    "linalg.svd f16": lambda d: torch.linalg.svd(torch.ones(2, 2, dtype=torch.float16,
                                                            device=d)),
}


def main() -> None:
    for device in ("cpu", "cuda"):
        for name, fn in CASES.items():
            if fn is None:
                continue
            try:
                result = fn(device)
                if isinstance(result, torch.Tensor):
                    shown = f"{result.dtype} {tuple(result.shape)} {result.tolist()}"
                else:
                    shown = repr(result)
            except Exception as error:  # noqa: BLE001 - every outcome is the answer
                shown = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            print(f"{device} | {name} | {shown}")
    print(capture_answers())


def capture_answers() -> str:
    """Which torch.linalg functions run inside a CUDA graph capture."""
    lines = []
    a = torch.eye(3, device="cuda") * 2 + 0.1
    b = torch.ones(3, 2, device="cuda")
    fns = {"inv": lambda: torch.linalg.inv(a), "solve": lambda: torch.linalg.solve(a, b),
           "det": lambda: torch.linalg.det(a), "cholesky": lambda: torch.linalg.cholesky(a),
           "qr": lambda: torch.linalg.qr(a), "eigh": lambda: torch.linalg.eigh(a),
           "svd": lambda: torch.linalg.svd(a), "lstsq": lambda: torch.linalg.lstsq(a, b),
           "pinv": lambda: torch.linalg.pinv(a), "slogdet": lambda: torch.linalg.slogdet(a),
           "norm": lambda: torch.linalg.norm(a), "matrix_norm2": lambda: torch.linalg.matrix_norm(
               a, 2)}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                fn()
            g.replay()
            torch.cuda.synchronize()
            lines.append(f"capture | linalg.{name} | captured")
        except Exception as error:  # noqa: BLE001
            lines.append(f"capture | linalg.{name} | {type(error).__name__}: "
                         f"{str(error).splitlines()[0][:160]}")
            torch.cuda.synchronize()
    return "\n".join(lines)


if __name__ == "__main__":
    main()
