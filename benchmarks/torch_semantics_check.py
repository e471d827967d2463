import torch
def t(label, f):
    try:
        r = f(); print(f"{label}: OK {r!r}")
    except Exception as e:
        print(f"{label}: {type(e).__name__}: {str(e)[:150]}")
t("manual_seed(2.0)", lambda: torch.manual_seed(2.0).initial_seed())
t("manual_seed(2.5)", lambda: torch.manual_seed(2.5).initial_seed())
b = torch.tensor([True, False])
t("bool-1", lambda: b - 1); t("bool//bool", lambda: b // b); t("bool%bool", lambda: b % b); t("bool**bool", lambda: b ** b)
t("int**-1", lambda: torch.tensor([2]) ** -1)
t("int8 300", lambda: torch.tensor([300], dtype=torch.int8)); t("2**63", lambda: torch.tensor([2**63]))
t("unsqueeze", lambda: torch.zeros(3, 4).unsqueeze(1).stride())
t("int//0 cpu", lambda: torch.tensor([1]) // 0)
t("arange inf", lambda: torch.arange(0, float("inf")))
t("ragged", lambda: torch.tensor([[1, 2], [3]]))
t("a[1.5]", lambda: torch.zeros(3)[1.5])
t("randint int8", lambda: torch.randint(0, 300, (4,), dtype=torch.int8))
t("complex <", lambda: torch.tensor([1j]) < torch.tensor([2j]))
t("float &", lambda: torch.tensor([1.0]) & torch.tensor([1.0]))
t("empty(3,0).stride", lambda: torch.empty(3, 0).stride())
t("uint8 -1", lambda: torch.tensor([-1], dtype=torch.uint8))
