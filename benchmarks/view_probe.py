"""What a view costs the host on cuda: tensorplay's views on their warm (kept) path beside the
CuPy array calls they make and torch's same views, on the prefill's shapes (a (512, 2304)
bfloat16 projection viewed as heads). Best of five loops of 2000 calls, host us per call.
Usage: ``python3 benchmarks/view_probe.py``."""

import time

import cupy
import numpy as np

import tensorplay as tp

CALLS = 2000


def us(fn) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        best = min(best, (time.perf_counter() - start) / CALLS * 1e6)
    return best


def main() -> None:
    try:
        import torch
    except ImportError:
        torch = None
    qkv = tp.zeros(512, 2304, dtype=tp.bfloat16, device="cuda")
    heads = qkv.view(512, 3, 12, 64)
    parts = heads.permute(1, 2, 0, 3)
    attended = tp.zeros(1, 512, 12, 64, dtype=tp.bfloat16, device="cuda").transpose(1, 2)
    rows = {
        "tp qkv.view(512, 3, 12, 64)": lambda: qkv.view(512, 3, 12, 64),
        "tp heads.permute(1, 2, 0, 3)": lambda: heads.permute(1, 2, 0, 3),
        "tp parts.unbind(0)": lambda: parts.unbind(0),
        "tp parts[1:]": lambda: parts[1:],
        "tp parts[0].unsqueeze(0)": lambda: parts[0].unsqueeze(0),
        "tp attended[0]": lambda: attended[0],
        "tp attended[0].transpose(0, 1)": lambda: attended[0].transpose(0, 1),
    }
    array = qkv._data
    heads_array, parts_array = heads._data, parts._data
    rows.update({
        "cupy qkv.reshape(512, 3, 12, 64)": lambda: array.reshape(512, 3, 12, 64),
        "cupy heads.transpose(1, 2, 0, 3)": lambda: heads_array.transpose(1, 2, 0, 3),
        "cupy parts[0]": lambda: parts_array[0],
        "cupy parts[(0, Ellipsis)]": lambda: parts_array[(0, Ellipsis)],
        "cupy parts[1:]": lambda: parts_array[1:],
        "cupy parts.view()": lambda: parts_array.view(),
        "cupy.ndarray(shape, dtype, memptr + offset, strides)":
            lambda: cupy.ndarray((12, 512, 64), parts_array.dtype, parts_array.data + 128,
                                 (128, 4608, 2)),
    })
    if torch is not None:
        t_qkv = torch.zeros(512, 2304, dtype=torch.bfloat16, device="cuda")
        t_heads = t_qkv.view(512, 3, 12, 64)
        t_parts = t_heads.permute(1, 2, 0, 3)
        rows.update({
            "torch qkv.view(512, 3, 12, 64)": lambda: t_qkv.view(512, 3, 12, 64),
            "torch heads.permute(1, 2, 0, 3)": lambda: t_heads.permute(1, 2, 0, 3),
            "torch parts.unbind(0)": lambda: t_parts.unbind(0),
            "torch parts[1:]": lambda: t_parts[1:],
            "torch parts[0]": lambda: t_parts[0],
        })
    for name, fn in rows.items():
        print(f"  {name:56s} {us(fn):7.2f}", flush=True)
    print(f"(NumPy a + b at (64, 64) float32: "
          f"{us(lambda a=np.ones((64, 64), np.float32): a + a):.2f} us, for the host's speed)")


if __name__ == "__main__":
    main()
