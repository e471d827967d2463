"""The eager table: host cost per call of small-tensor ops in tensorplay and its peers.

Each op runs on ``(64, 64)`` operands, small enough that the host's cost of issuing the call
(argument checks, dispatch, allocation, the launch) dominates. A figure is the fastest of
``repeats`` loops of ``calls`` calls back to back, with the device synchronized before the clock
starts and the wait for it left outside the clock; the implementations of one op take turns loop
by loop, so a drift in the host's speed does not fall on one of them. Peers run the same op on
the same values in the same run: CuPy and torch on a GPU, NumPy (host arrays) everywhere. On
the simulated accelerator and the host, tensorplay's figures are host times of its own eager
path, so a regression in it shows without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import tensorplay as tp

from . import peers
from .timing import interleaved_loops, sync

SIZE = 64
CALLS = 2000
REPEATS = 5
WARMUP = 20
SHAPES = (f"a, b, w: ({SIZE}, {SIZE}) float32; m: ({SIZE}, {SIZE}) bool; the decode step's "
          f"ops: v ({SIZE},) float32, i ([3]) int64, s (1, {SIZE}) float32, q (1, 4, 1, 16) "
          f"and k (1, 4, {SIZE}, 16) float32, mask (1, 1, 1, {SIZE}) bool")
PEERS = ("cupy", "torch", "numpy")
LABELS = {"tensorplay": "tensorplay", "cupy": "CuPy", "torch": "torch", "numpy": "NumPy"}


def _arrays() -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    return {"a": a, "b": rng.standard_normal((SIZE, SIZE), dtype=np.float32), "m": a > 0,
            "w": rng.standard_normal((SIZE, SIZE), dtype=np.float32) * np.float32(SIZE ** -0.5),
            "v": rng.standard_normal(SIZE, dtype=np.float32),
            "i": np.array([3], dtype=np.int64),
            "s": rng.standard_normal((1, SIZE), dtype=np.float32),
            "q": rng.standard_normal((1, 4, 1, 16), dtype=np.float32),
            "k": rng.standard_normal((1, 4, SIZE, 16), dtype=np.float32),
            "mask": (np.arange(SIZE) < SIZE // 2).reshape(1, 1, 1, SIZE)}


#: the ops of a transformer decode step (``examples/gpt2.py``), on the table's small operands
DECODE_OPS = ("layer_norm(a)", "a.softmax(-1)", "a.masked_fill(m, 0)", "addmm(v, a, w)",
              "c.index_copy_(0, i, s)", "a.index_select(0, i)", "a.argmax(-1)",
              "sdpa(q, k, k, mask)")


def _tp_gelu():
    """``tp.nn.functional.gelu`` where the package has it, else ``tp.gelu``."""
    functional = getattr(getattr(tp, "nn", None), "functional", None)
    return getattr(functional, "gelu", None) or tp.gelu


def _tensorplay_ops(device: str, arrays: dict) -> dict:
    a, b, m, w, acc = (tp.tensor(arrays[k], device=device) for k in ("a", "b", "m", "w", "a"))
    gelu = _tp_gelu()
    ops = {"a + b": lambda: a + b, "a.exp()": a.exp, "a.add_(1)": lambda: acc.add_(1),
           "a.sum()": a.sum, "tp.where(m, a, b)": lambda: tp.where(m, a, b),
           "gelu(a)": lambda: gelu(a), "a @ w": lambda: a @ w}
    functional = getattr(getattr(tp, "nn", None), "functional", None)
    if functional is not None and hasattr(functional, "scaled_dot_product_attention"):
        ops.update(peers.decode_ops(tp, functional, lambda x: tp.tensor(x, device=device),
                                    arrays))
    return ops


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours and theirs else None


def eager_table(device: str, calls: int = CALLS, repeats: int = REPEATS) -> dict:
    """Run the table on ``device`` (``"cuda:0"``, ``"sim:0"``, ``"cpu"``) and return it as the
    JSON ``bench`` writes under ``"eager"``: ``{"device", "calls", "repeats", "unit": "us",
    "shapes", "notes", "ops": [{"op", "tensorplay", "cupy", "torch", "numpy", "tp/cupy",
    "tp/torch", "tp/numpy"}, ...]}``; a peer's time (and its ratio) is None where that peer is
    absent or lacks the op. Ratios are tensorplay's time over the peer's (below 1: faster)."""
    arrays = _arrays()
    impls = [("tensorplay", _tensorplay_ops(device, arrays), sync,
              {"gelu(a)": f"tp.{'nn.functional.' if _tp_gelu() is not tp.gelu else ''}gelu"})]
    impls += list(peers.eager_op_peers(arrays))
    times: dict[str, dict[str, float | None]] = {name: {} for name, _, _, _ in impls}
    for op in impls[0][1]:
        present = {name: (ops[op], peer_sync) for name, ops, peer_sync, _ in impls
                   if ops.get(op) is not None}
        loops = interleaved_loops(present, calls, repeats, WARMUP)
        for name, _, _, _ in impls:
            times[name][op] = min(loops[name][0]) if name in loops else None
    rows = []
    for op, ours in times["tensorplay"].items():
        row: dict[str, Any] = {"op": op, "tensorplay": ours}
        row.update({peer: times.get(peer, {}).get(op) for peer in PEERS})
        row.update({f"tp/{peer}": _ratio(ours, row[peer]) for peer in PEERS})
        rows.append(row)
    return {"device": device, "calls": calls, "repeats": repeats, "unit": "us", "shapes": SHAPES,
            "notes": {name: notes for name, _, _, notes in impls}, "ops": rows}


def _cell(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.2f}{unit}"


def format_eager(table: dict) -> str:
    """The eager table as text: one line per op, times in microseconds, then ratios."""
    columns = ["tensorplay", *PEERS, *(f"tp/{peer}" for peer in PEERS)]
    titles = [LABELS.get(c) or "tp/" + LABELS[c[3:]] for c in columns]
    width = max(len("op"), *(len(op["op"]) for op in table["ops"])) + 2
    lines = [f"eager ops on {table['device']}, host cost per call in us ({table['calls']} calls "
             f"back to back, best of {table['repeats']}; {table['shapes']})",
             f"{'op':<{width}}" + "".join(f"{title:>12}" for title in titles)]
    lines.append("-" * len(lines[-1]))
    for op in table["ops"]:
        cells = [_cell(op.get(c), "x" if c.startswith("tp/") else "") for c in columns]
        lines.append(f"{op['op']:<{width}}" + "".join(f"{cell:>12}" for cell in cells))
    spelled = [f"{LABELS.get(name, name)} {op}: {how}" for name, notes in table["notes"].items()
               for op, how in notes.items()]
    if spelled:
        lines.append("as called: " + "; ".join(spelled))
    return "\n".join(lines)


def plot_rows(table: dict) -> list[dict]:
    """The table as benchmark rows ``{case, impl, us}`` (one case per op), for the plot."""
    rows = []
    for op in table["ops"]:
        case = f"eager {op['op']}, host cost per call"
        rows += [{"case": case, "impl": LABELS[name], "us": op[name]}
                 for name in ("tensorplay", *PEERS) if op.get(name)]
    return rows
