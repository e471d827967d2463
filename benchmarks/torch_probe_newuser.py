"""Ask torch what it does in the cases a new-user pass over tensorplay raised (session 7): each
line is ``device | call | result or error``. Run on the H200 machine (torch 2.11)."""

from __future__ import annotations

import torch


def _cases(d: str) -> dict:
    z = torch.zeros(2, device=d)
    m = torch.tensor([True, False], device=d)
    idx = torch.tensor([-1], device=d)
    return {
        "fill_ 1+2j on float": lambda: torch.zeros(2, device=d).fill_(1 + 2j),
        "fill_ 2+0j on float": lambda: torch.zeros(2, device=d).fill_(2 + 0j),
        "fill_ 1j on bool": lambda: torch.zeros(2, dtype=torch.bool, device=d).fill_(1j),
        "full 1j float32": lambda: torch.full((2,), 1j, dtype=torch.float32, device=d),
        "masked_fill 1j on float": lambda: z.masked_fill(m, 1j),
        "setitem 2j on float": lambda: z.clone().__setitem__(0, 2j),
        "abs complex64": lambda: torch.abs(torch.tensor([3 + 4j], device=d)).dtype,
        "abs_ complex64": lambda: torch.tensor([3 + 4j], device=d).abs_(),
        "sign bool": lambda: torch.sign(torch.tensor([True, False], device=d)),
        "square bool": lambda: torch.square(torch.tensor([True], device=d)).dtype,
        "int64 + 2**63": lambda: torch.tensor([1], device=d) + 2 ** 63,
        "float32 + 2**63": lambda: torch.tensor([1.0], device=d) + 2 ** 63,
        "uint64 + 2**63": lambda: torch.tensor([1], dtype=torch.uint64, device=d) + 2 ** 63,
        "float32 + 2**64": lambda: torch.tensor([1.0], device=d) + 2 ** 64,
        "t == None": lambda: torch.ones(2, device=d) == None,  # noqa: E711
        "torch.eq(t, None)": lambda: torch.eq(torch.ones(2, device=d), None),
        "arange(t(1), t(3))": lambda: torch.arange(torch.tensor(1), torch.tensor(3), device=d),
        "arange(t(2.0 f64))": lambda: torch.arange(torch.tensor(2.0, dtype=torch.float64),
                                                   device=d).dtype,
        "arange(t([5]))": lambda: torch.arange(torch.tensor([5]), device=d),
        "linspace(0, 1j, 3)": lambda: torch.linspace(0, 1j, 3, device=d),
        "gather -1": lambda: torch.gather(torch.arange(4.0, device=d), 0, idx),
        "index_select -1": lambda: torch.index_select(torch.arange(4.0, device=d), 0, idx),
        "take_along_dim -1": lambda: torch.take_along_dim(torch.arange(4.0, device=d), idx, 0),
        "index_add -1": lambda: torch.zeros(4, device=d).index_add(0, idx,
                                                                 torch.ones(1, device=d)),
        "index_copy -1": lambda: torch.zeros(4, device=d).index_copy(0, idx,
                                                                   torch.ones(1, device=d)),
        "index_fill -1": lambda: torch.zeros(4, device=d).index_fill(0, idx, 1.0),
        "index_put acc -1": lambda: torch.zeros(4, device=d).index_put(
            (idx,), torch.ones(1, device=d), accumulate=True),
        "scatter -1": lambda: torch.zeros(4, device=d).scatter(0, idx, torch.ones(1, device=d)),
        "x[[]]": lambda: torch.arange(6.0, device=d)[[]],
        "tensor(t).device": lambda: torch.tensor(torch.ones(2, device=d)).device,
        "var(0) of rand+1000": lambda: (torch.rand(100_000, 2, device=d) + 1000).var(0),
    }


def main() -> None:
    for d in ("cpu", "cuda"):
        for name, fn in _cases(d).items():
            if d == "cuda" and "-1" in name:
                continue   # a device-side assert would end every later cuda case
            try:
                result = fn()
                if d == "cuda":
                    torch.cuda.synchronize()
                text = repr(result)
            except Exception as error:  # noqa: BLE001 - the answer is the error
                text = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            print(f"{d} | {name} | {text}", flush=True)


if __name__ == "__main__":
    main()
