"""Print what torch does for the edge cases of issue 11, so tensorplay can be checked against it.

Run where torch is installed (the H200 machine): ``python3 benchmarks/torch_semantics_check.py``.
Each line gives the case and torch's result or exception type and message.
"""

import torch

BOOLS = torch.tensor([True, False])
CASES = {
    "manual_seed(2.0)": lambda: torch.manual_seed(2.0).initial_seed(),
    "manual_seed(2.5)": lambda: torch.manual_seed(2.5).initial_seed(),
    "bool-1": lambda: BOOLS - 1,
    "bool//bool": lambda: BOOLS // BOOLS,
    "bool%bool": lambda: BOOLS % BOOLS,
    "bool**bool": lambda: BOOLS ** BOOLS,
    "int**-1": lambda: torch.tensor([2]) ** -1,
    "int8 300": lambda: torch.tensor([300], dtype=torch.int8),
    "2**63": lambda: torch.tensor([2 ** 63]),
    "unsqueeze": lambda: torch.zeros(3, 4).unsqueeze(1).stride(),
    "int//0 cpu": lambda: torch.tensor([1]) // 0,
    "arange inf": lambda: torch.arange(0, float("inf")),
    "ragged": lambda: torch.tensor([[1, 2], [3]]),
    "a[1.5]": lambda: torch.zeros(3)[1.5],
    "randint int8": lambda: torch.randint(0, 300, (4,), dtype=torch.int8),
    "complex <": lambda: torch.tensor([1j]) < torch.tensor([2j]),
    "float &": lambda: torch.tensor([1.0]) & torch.tensor([1.0]),
    "empty(3,0).stride": lambda: torch.empty(3, 0).stride(),
    "uint8 -1": lambda: torch.tensor([-1], dtype=torch.uint8),
}

for label, case in CASES.items():
    try:
        print(f"{label}: OK {case()!r}")
    except Exception as error:  # noqa: BLE001 - the exception is the answer
        print(f"{label}: {type(error).__name__}: {str(error)[:150]}")
