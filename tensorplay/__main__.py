"""``python -m tensorplay info | demo | bench``."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import time


def _version(module: str) -> str:
    try:
        return getattr(importlib.import_module(module), "__version__", "installed")
    except Exception:  # noqa: BLE001 - absent or broken: say so
        return "not installed"


def info() -> int:
    import numpy as np

    import tensorplay as tp
    from tensorplay.backends import selection_report

    print(f"tensorplay     {tp.__version__}")
    print(f"Python         {platform.python_version()}")
    print(f"NumPy          {np.__version__}")
    print(f"ml_dtypes      {_version('ml_dtypes')}")
    print(f"CuPy           {_version('cupy')}")
    print(f"cuda-bindings  {_version('cuda.bindings')}")
    print(f"accelerator    {selection_report()}")
    print("devices:")
    print("  cpu: host (NumPy), all dtypes")
    for index in range(tp.accelerator.device_count()):
        capability = tp.accelerator.get_device_capability(index)
        dtypes = ", ".join(d.name for d in tp._dtype.all_dtypes
                           if d in capability["supported_dtypes"])
        facts = ", ".join(f"{k}={v}" for k, v in capability.items()
                          if k not in ("supported_dtypes", "name"))
        print(f"  {tp.accelerator.current_accelerator().type}:{index}: {capability['name']}"
              f" ({facts})")
        print(f"      dtypes: {dtypes}")
    return 0


def _host_tour() -> None:
    import tensorplay as tp

    print("== host tensors ==")
    x = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    print("x =", x)
    print("x.T @ x =", x.T @ x)
    print("softmax over rows:", tp.softmax(x, dim=1))
    view = x[:, 1]
    view.fill_(-1)
    print("after writing through the view x[:, 1]:", x)
    print("int64 tensor + 2.5 ->", (tp.arange(3) + 2.5).dtype, "| float16 tensor + 2.5 ->",
          (tp.ones(2, dtype=tp.float16) + 2.5).dtype)


def _graph_tour(device: str) -> None:
    import tensorplay as tp

    print(f"\n== capture and replay on {device} ==")
    static_x = tp.zeros(4, device=device)
    graph = tp.accelerator.Graph()
    with graph:
        static_y = tp.tanh(static_x * 2) + 1
    for value in (0.0, 0.5, 1.0):
        graph.stage_and_launch([static_x], [tp.full((4,), value, device=device)])
        print(f"x = {value}: y = {static_y.cpu().tolist()}")


def _cg_tour(device: str) -> None:
    import tensorplay as tp
    from tensorplay import _solvers

    n, tol = 64, 1e-6
    print(f"\n== conjugate gradients, 2-D Poisson {n}x{n}, one graph, while node on {device} ==")
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device), tol, max_iterations=10 * n)
    graph = _solvers.cg_graph(solver)
    solver.restart()
    start = time.perf_counter()
    graph.replay()
    tp.accelerator.synchronize()
    elapsed = time.perf_counter() - start
    iterations = int(solver.iterations.item())
    residual = _solvers.relative_residual(solver, tol)
    print(f"converged in {iterations} iterations (one replay, no host round trip per "
          f"iteration), relative residual {residual:.2e}, {elapsed * 1e3:.1f} ms")
    stats = tp.accelerator.memory_stats(device)
    print("memory: allocated {:,} B (peak {:,} B), reserved {:,} B, {} allocations".format(
        stats["allocated_bytes.all.current"], stats["allocated_bytes.all.peak"],
        stats["reserved_bytes.all.current"], stats["allocation.all.allocated"]))


def demo() -> int:
    import tensorplay as tp

    accelerator = tp.accelerator.current_accelerator(check_available=True)
    if accelerator is None and not os.environ.get("TENSORPLAY_ACCELERATOR"):
        print("no GPU found: running the demo on the simulated accelerator "
              "(TENSORPLAY_ACCELERATOR=sim)\n", flush=True)
        env = dict(os.environ, TENSORPLAY_ACCELERATOR="sim")
        return subprocess.call([sys.executable, "-m", "tensorplay", "demo"], env=env)
    _host_tour()
    if accelerator is None:
        print("\nTENSORPLAY_ACCELERATOR=none: host tensors only")
        return 0
    device = f"{accelerator.type}:0"
    if accelerator.type == "sim":
        print(f"\n(running on the simulated accelerator 'sim': timings are host times, not GPU "
              f"times)")
    _graph_tour(device)
    _cg_tour(device)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensorplay")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, the selected accelerator and its devices")
    commands.add_parser("demo", help="a tour: host tensors, graphs, a CG solve in one graph")
    bench = commands.add_parser("bench", help="benchmarks against torch, CuPy and JAX")
    bench.add_argument("--json", metavar="PATH", help="write results as JSON")
    bench.add_argument("--plot", metavar="PATH", help="write a PNG plot (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo()
    from tensorplay import _bench

    return _bench.main(json_path=args.json, plot_path=args.plot)


if __name__ == "__main__":
    sys.exit(main())
