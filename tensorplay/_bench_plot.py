"""PNG plot of benchmark rows (needs the ``bench`` extra: matplotlib)."""

from __future__ import annotations


def plot(rows: list[dict], path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise RuntimeError("--plot needs matplotlib: pip install 'tensorplay[bench]'") from error
    cases = list(dict.fromkeys(row["case"] for row in rows))
    fig, axes = plt.subplots(len(cases), 1, figsize=(9, 1.2 + 0.9 * len(rows) / 2),
                             squeeze=False)
    for axis, case in zip(axes[:, 0], cases):
        case_rows = [r for r in rows if r["case"] == case]
        names = [r["impl"] for r in case_rows]
        values = [r["us"] for r in case_rows]
        colors = ["tab:orange" if n.startswith("tensorplay") else "tab:gray" for n in names]
        axis.barh(names, values, color=colors)
        axis.set_title(case, fontsize=9, loc="left")
        axis.set_xlabel("microseconds per call (lower is better)", fontsize=8)
        axis.tick_params(labelsize=8)
        axis.invert_yaxis()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
