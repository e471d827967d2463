"""PNG plot of a benchmark run (needs the ``bench`` extra: matplotlib)."""

from __future__ import annotations

import textwrap

from .eager import plot_rows

# Heights in inches: each bar, and each panel's title and x axis. The figure grows with the
# number of cases and implementations instead of squeezing panels into a fixed height.
_BAR_IN = 0.27
_PANEL_IN = 0.7
_HEADER_IN = 0.8
_LINE_IN = 0.17
# Longer implementation names wrap onto more lines; case titles wrap to what is left of the
# 10 in width right of the widest name (a 9 pt bold character is about 1.35 x an 8 pt one).
_LABEL_CHARS = 45
_FIGURE_TITLE_CHARS = 120


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise RuntimeError("--plot needs matplotlib: pip install 'tensorplay[bench]'") from error
    return plt


def _time_text(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.2f} us"


def _wrap(text: str, width: int) -> str:
    return textwrap.fill(text, width, break_long_words=True, break_on_hyphens=False)


def _title_chars(rows: list[dict]) -> int:
    widest = max(len(line) for row in rows for line in _wrap(row["impl"], _LABEL_CHARS).split("\n"))
    return max(30, _FIGURE_TITLE_CHARS - int(widest / 1.35))


def _panel_height(case: str, group: list[dict], title_chars: int) -> float:
    title_lines = _wrap(case, title_chars).count("\n")
    label_lines = sum(max(1, _wrap(row["impl"], _LABEL_CHARS).count("\n") + 1) for row in group)
    return _BAR_IN * label_lines + _PANEL_IN + _LINE_IN * title_lines


def _title(run: dict) -> str:
    """Two lines: the machine, then what was compared and when. The device name is said once
    (the simulated accelerator's name already contains "tensorplay")."""
    machine = ("simulated accelerator (host times, not GPU times)" if run.get("simulated")
               else run["device_name"])
    version = f" {run['tensorplay']}" if run.get("tensorplay") else ""
    peers = ", ".join(f"{name} {v}" for name, v in run.get("peers", {}).items())
    compared = f"tensorplay{version}" + (f" vs {peers}" if peers else "")
    return f"{machine}: time per call, lower is better\n{compared}, {run['date']}"


def plot(run: dict, path: str) -> None:
    """Write :func:`figure` of ``run`` to ``path`` as a PNG.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    plt = _pyplot()
    fig = figure(run)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(run: dict):
    """The matplotlib figure of ``run`` (the dict ``bench --json`` saves: ``rows`` of
    ``{case, impl, us}`` plus ``device_name``, ``peers``, ``date``, ``simulated``, and the eager
    table under ``eager`` where the run has one).

    One panel per case (each op of the eager table is a case) with one bar per implementation,
    labelled with its time and its ratio to the case's first tensorplay row; each panel has its
    own scale. Rows that did not run (``us`` None: a peer skipped with a note) have no bar; their
    notes are in the text table. The large-products cases are panels like any other (time per
    product; their TFLOP/s are in the text table and the JSON). The figure's height follows
    the number of cases and rows, so no title, label or bar overlaps another.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    plt = _pyplot()
    rows = [row for row in run["rows"] if row["us"] is not None]
    rows += plot_rows(run["eager"]) if run.get("eager") else []
    cases = list(dict.fromkeys(row["case"] for row in rows))
    groups = [[row for row in rows if row["case"] == case] for case in cases]
    title_chars = _title_chars(rows)
    heights = [_panel_height(case, group, title_chars) for case, group in zip(cases, groups)]
    fig = plt.figure(figsize=(10, sum(heights) + _HEADER_IN), layout="constrained")
    axes = fig.subplots(len(cases), 1, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    for axis, case, group in zip(axes, cases, groups):
        _panel(axis, _wrap(case, title_chars), group)
    fig.suptitle(_title(run), fontsize=10)
    fig.supxlabel("(ratio): time relative to the panel's first tensorplay bar", fontsize=8)
    return fig


def _panel(axis, title: str, group: list[dict]) -> None:
    names = [_wrap(row["impl"], _LABEL_CHARS) for row in group]
    values = [row["us"] for row in group]
    reference = next((row["us"] for row in group if row["impl"].startswith("tensorplay")), None)
    if len(group) == 1:
        reference = None                          # a ratio to itself says nothing
    in_ms = max(values) >= 1000                   # as _time_text writes the values
    positions = list(range(len(group)))
    colors = ["tab:orange" if row["impl"].startswith("tensorplay") else "tab:gray"
              for row in group]
    axis.barh(positions, values, color=colors, height=0.7)
    axis.set_yticks(positions, names)
    axis.invert_yaxis()
    axis.set_xlim(0, max(values) * 1.35)          # room for the value text right of each bar
    for position, value in zip(positions, values):
        text = _time_text(value) + (f"  ({value / reference:.2f}x)" if reference else "")
        axis.text(value, position, f" {text}", va="center", fontsize=7.5)
    axis.xaxis.set_major_formatter(
        (lambda v, _: f"{v / 1000:g} ms") if in_ms else (lambda v, _: f"{v:g} us"))
    axis.set_title(title, fontsize=9, loc="left", fontweight="bold")
    axis.tick_params(labelsize=8)
    axis.spines[["top", "right"]].set_visible(False)
