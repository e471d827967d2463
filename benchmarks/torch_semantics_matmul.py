"""Print PyTorch's behaviour for the matrix-product surface tensorplay mirrors (run on the GPU
machine; the answers decide tensorplay's error types and messages)."""

import torch
import torch.nn.functional as F


def show(label, fn):
    try:
        result = fn()
        text = f"{tuple(result.shape)} {result.dtype}" if torch.is_tensor(result) else repr(result)
        print(f"{label}: ok {text}")
    except Exception as exc:  # noqa: BLE001 - the point is to print it
        print(f"{label}: {type(exc).__name__}: {exc}")


cuda = torch.device("cuda")
show("set_float32_matmul_precision('fast')", lambda: torch.set_float32_matmul_precision("fast"))
show("set_float32_matmul_precision(3)", lambda: torch.set_float32_matmul_precision(3))
show("get_float32_matmul_precision()", torch.get_float32_matmul_precision)
ints = torch.arange(12, device=cuda).reshape(3, 4)
show("int64 cuda matmul", lambda: ints @ ints.T)
show("int32 cuda matmul", lambda: ints.int() @ ints.int().T)
show("bool cuda matmul", lambda: ints.bool() @ ints.bool().T)
show("int64 cpu matmul", lambda: ints.cpu() @ ints.cpu().T)
x = torch.ones(8, 3, device=cuda)
show("linear 8x3 @ (5,4)", lambda: F.linear(x, torch.ones(5, 4, device=cuda)))
show("linear 3-D weight", lambda: F.linear(x, torch.ones(2, 5, 3, device=cuda)))
show("linear f64 bias", lambda: F.linear(x, torch.ones(5, 3, device=cuda),
                                         torch.ones(5, dtype=torch.float64, device=cuda)))
show("linear f64 weight", lambda: F.linear(x, torch.ones(5, 3, dtype=torch.float64,
                                                          device=cuda)))
show("linear 0-d input", lambda: F.linear(torch.tensor(1.0, device=cuda),
                                          torch.ones(5, 3, device=cuda)))
show("linear 1-D weight", lambda: F.linear(x, torch.ones(3, device=cuda)))
show("linear 1-D weight + bias", lambda: F.linear(x, torch.ones(3, device=cuda),
                                                  torch.ones((), device=cuda)))
show("linear 1-D input", lambda: F.linear(torch.ones(3, device=cuda),
                                          torch.ones(5, 3, device=cuda)))
show("linear 1-D input mismatch", lambda: F.linear(torch.ones(4, device=cuda),
                                                   torch.ones(5, 3, device=cuda)))
show("linear 3-D input mismatch", lambda: F.linear(torch.ones(2, 4, 4, device=cuda),
                                                   torch.ones(5, 3, device=cuda)))
show("linear bias (4,5)", lambda: F.linear(x, torch.ones(5, 3, device=cuda),
                                           torch.ones(8, 5, device=cuda)))
show("linear bias (7,)", lambda: F.linear(x, torch.ones(5, 3, device=cuda),
                                          torch.ones(7, device=cuda)))
show("matmul f32 @ f64", lambda: x @ torch.ones(3, 2, dtype=torch.float64, device=cuda))
show("matmul 0-d", lambda: torch.matmul(torch.tensor(1.0, device=cuda), x))
show("matmul mismatch", lambda: torch.ones(2, 3, device=cuda) @ torch.ones(4, 5, device=cuda))
show("matmul k=0", lambda: (torch.ones(3, 0, device=cuda) @ torch.ones(0, 4, device=cuda)).sum())
