"""Count the Python frames a warm eager op and a graph replay pass through, on the selected
accelerator (``TENSORPLAY_ACCELERATOR``; cuda on a GPU, sim elsewhere) and on the host.

A frame is one Python function entered (``sys.setprofile``'s ``call`` event); calls into C
(CuPy, NumPy, the driver binding) are not frames and are not counted. Each case runs a few
times first so that plan caches and the allocator's free lists are warm, as in a hot loop.
Usage: ``python3 benchmarks/count_frames.py``.
"""

import sys

import tensorplay as tp
from eager_probe import one_kernel_graph
from tensorplay.bench import eager, peers


def frames(fn) -> list[str]:
    """The Python functions one call of ``fn`` enters, in order (``fn`` itself left out)."""
    seen: list[str] = []

    def watch(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    for _ in range(5):
        fn()
    sys.setprofile(watch)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen[1:]   # the first is fn itself


def cases(device) -> dict:
    a = tp.ones(64, 64, device=device)
    b = tp.ones(64, 64, device=device)
    w = tp.ones(64, 64, device=device)
    m = a > 0
    data = [[1.0, 2.0], [3.0, 4.0]]
    found = {"a + b": lambda: a + b, "a.exp()": lambda: a.exp(),
             "a.add_(1)": lambda: a.add_(1), "a.sum()": lambda: a.sum(),
             "tp.where(m, a, b)": lambda: tp.where(m, a, b),
             "gelu(a)": lambda: tp.nn.functional.gelu(a), "a @ w": lambda: a @ w,
             "tp.tensor(data, device=)": lambda: tp.tensor(data, device=device)}
    # the decode step's ops, as the bench's eager table calls them
    found.update(peers.decode_ops(tp, tp.nn.functional, lambda x: tp.tensor(x, device=device),
                                  eager._arrays()))
    if device.type != "cpu":
        graph, stream = one_kernel_graph(tp, device)
        found["graph.replay(stream=s)"] = lambda: graph.replay(stream=stream)
        found["graph.replay()"] = lambda: graph.replay()
    return found


def main() -> None:
    accelerator = tp.accelerator.current_accelerator()
    devices = [tp.device("cpu")] + ([tp.device(accelerator.type, 0)] if accelerator else [])
    for device in devices:
        print(f"Python frames per call on {device}")
        for name, fn in cases(device).items():
            names = frames(fn)
            print(f"  {name:24s} {len(names):3d}  {' '.join(names)}")


if __name__ == "__main__":
    main()
