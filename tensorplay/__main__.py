"""``python -m tensorplay info | demo | bench``."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import time

import tensorplay as tp
from tensorplay.backends import capability as _capability
from tensorplay._runtime.select import (
    accelerator_backend, host_only_reason, requested_accelerator, selection_report,
)
from tensorplay.bench import plot as _bench_plot
from tensorplay.bench import solvers as _solvers
from tensorplay.bench import suite as _bench


def _version(module: str) -> str:
    try:
        return getattr(importlib.import_module(module), "__version__", "installed")
    except Exception:  # noqa: BLE001 - absent or broken: say so
        return "not installed"


def _unavailable() -> str | None:
    """None when an accelerator device can be used; else why not, in words."""
    if tp.accelerator.is_available():
        return None
    backend = accelerator_backend()
    if backend is not None:
        return f"the {backend.name} backend was built but sees no device"
    return host_only_reason()


def _asked_for_missing_accelerator() -> bool:
    """Whether TENSORPLAY_ACCELERATOR named an accelerator that cannot be used."""
    return requested_accelerator() not in ("auto", "none") and _unavailable() is not None


def _rerun_on_sim(argv: list[str], what: str) -> int | None:
    """With no usable accelerator and TENSORPLAY_ACCELERATOR unset, rerun this command on the
    simulated accelerator (saying so) and return its exit status; None to carry on here."""
    if _unavailable() is None or requested_accelerator() != "auto":
        return None
    print(f"no GPU found: running {what} on the simulated accelerator "
          f"(TENSORPLAY_ACCELERATOR=sim; `python -m tensorplay info` says why)\n", flush=True)
    env = dict(os.environ, TENSORPLAY_ACCELERATOR="sim")
    return subprocess.call([sys.executable, "-m", "tensorplay", *argv], env=env)


def info() -> int:
    """Print versions, the selected accelerator (or why none) and its devices. Exits 1 when
    TENSORPLAY_ACCELERATOR named an accelerator that cannot be used."""
    import numpy as np


    print(f"tensorplay     {tp.__version__}")
    print(f"Python         {platform.python_version()}")
    print(f"NumPy          {np.__version__}")
    print(f"ml_dtypes      {_version('ml_dtypes')}")
    print(f"CuPy           {_version('cupy')}")
    print(f"cuda-bindings  {_version('cuda.bindings')}")
    print(f"nvmath-python  {_version('nvmath')}")
    print(f"accelerator    {selection_report()}")
    backend = accelerator_backend()
    if backend is not None:
        print(f"matmul         {_capability(backend, 'matrix_engine')}")
    print("devices:")
    print("  cpu: host (NumPy), all dtypes")
    for index in range(tp.accelerator.device_count()):
        capability = tp.accelerator.get_device_capability(index)
        dtypes = ", ".join(d.name for d in tp._dtype.all_dtypes
                           if d in capability["supported_dtypes"])
        facts = ", ".join(f"{k}={v}" for k, v in capability.items()
                          if k not in ("supported_dtypes", "name"))
        print(f"  {tp.accelerator.current_accelerator().type}:{index}: "  # type: ignore[union-attr]
              f"{capability['name']} ({facts})")
        print(f"      dtypes: {dtypes}")
    if _asked_for_missing_accelerator():
        print(f"\nthe accelerator asked for cannot be used: {_unavailable()}", file=sys.stderr)
        return 1
    return 0


def _host_tour() -> None:
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
    print(f"\n== capture and replay on {device} ==")
    static_x = tp.zeros(4, device=device)
    graph = tp.accelerator.Graph()
    with graph:
        static_y = tp.tanh(static_x * 2) + 1
    for value in (0.0, 0.5, 1.0):
        graph.stage_and_launch([static_x], [tp.full((4,), value, device=device)])
        print(f"x = {value}: y = {static_y.cpu().tolist()}")


def _cg_tour(device: str) -> None:
    # float64 where the device computes it: in float32 CG stalls near eps * cond(A), 2e-4 here
    supported = tp.accelerator.get_device_capability(device)["supported_dtypes"]
    dtype = tp.float64 if tp.float64 in supported else tp.float32
    n, tol = 64, 1e-6
    print(f"\n== conjugate gradients, 2-D Poisson {n}x{n} in {dtype.name}, one graph "
          f"(tp.while_loop: a device-side while node) on {device} ==")
    solver = _solvers.PoissonCG(_solvers.poisson_rhs(n, device, dtype), tol,
                                max_iterations=10 * n)
    graph = _solvers.cg_graph(solver)   # the replay starts from b: no restart needed
    start = time.perf_counter()
    graph.replay()
    tp.accelerator.synchronize()
    elapsed = time.perf_counter() - start
    print(f"one replay, no host round trip per iteration: {elapsed * 1e3:.1f} ms")
    print(_solvers.describe_outcome(solver, tol)[1])
    stats = tp.accelerator.memory_stats(device)
    print("memory: allocated {:,} B (peak {:,} B), reserved {:,} B, {} allocations".format(
        stats["allocated_bytes.all.current"], stats["allocated_bytes.all.peak"],
        stats["reserved_bytes.all.current"], stats["allocation.all.allocated"]))


def demo(argv: list[str]) -> int:
    """The tour: host tensors, then capture/replay and a one-graph CG solve on the accelerator
    (rerun on the simulated one when no GPU is found and TENSORPLAY_ACCELERATOR is unset)."""
    rerun = _rerun_on_sim(argv, "the demo")
    if rerun is not None:
        return rerun
    _host_tour()
    accelerator = tp.accelerator.current_accelerator(check_available=True)
    if accelerator is None:
        print(f"\nhost tensors only: {_unavailable()}")
        return 1 if _asked_for_missing_accelerator() else 0
    device = f"{accelerator.type}:0"
    if accelerator.type == "sim":
        print("\n(running on the simulated accelerator 'sim': timings are host times, not GPU "
              "times)")
    _graph_tour(device)
    _cg_tour(device)
    return 0


def _check_output_path(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        parser.error(f"{option} {path}: the folder {os.path.dirname(path)!r} does not exist")


def bench(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> int:
    """Run the benchmarks (or reload a saved run with --from-json); options are checked first."""
    if args.plot:
        try:
            _bench_plot._pyplot()
        except RuntimeError as error:
            parser.error(str(error))
    _check_output_path(parser, "--json", args.json)
    _check_output_path(parser, "--plot", args.plot)
    if args.eager_calls is not None and args.eager_calls < 1:
        parser.error(f"--eager-calls must be at least 1, got {args.eager_calls}")
    if args.from_json:
        if args.json or args.eager_only or args.eager_calls is not None:
            parser.error("--from-json reads a saved run; --json, --eager-only and "
                         "--eager-calls apply to a new run")
        return _bench.replay_saved(args.from_json, plot_path=args.plot)
    rerun = _rerun_on_sim(argv, "the benchmarks")
    if rerun is not None:
        return rerun
    if _unavailable() is not None and not args.eager_only:
        print(f"bench needs an accelerator: {_unavailable()}. Run on a GPU with "
              f"tensorplay[cuda], or set TENSORPLAY_ACCELERATOR=sim for the simulated one "
              f"(host times); --eager-only runs the eager table on the host", file=sys.stderr)
        return 2
    cases = None
    if args.cases:
        cases = [name.strip() for name in args.cases.split(",") if name.strip()]
        known = (*_bench.Suite.CASES, "eager")
        unknown = [name for name in cases if name not in known]
        if unknown:
            parser.error(f"--cases: unknown case(s) {', '.join(unknown)}; the cases are "
                         f"{', '.join(known)}")
    return _bench.main(json_path=args.json, plot_path=args.plot, eager_only=args.eager_only,
                       eager_calls=args.eager_calls, cases=cases)


def main(argv: list[str] | None = None) -> int:
    """``python -m tensorplay {info,demo,bench}``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m tensorplay")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, the selected accelerator and its devices")
    commands.add_parser("demo", help="a tour: host tensors, graphs, a CG solve in one graph")
    bench_parser = commands.add_parser("bench", help="benchmarks against torch, CuPy and JAX")
    bench_parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    bench_parser.add_argument("--plot", metavar="PATH",
                              help="write a PNG plot (needs matplotlib: tensorplay[bench])")
    bench_parser.add_argument("--from-json", metavar="PATH",
                              help="run nothing: print the table (and --plot) of a saved --json")
    bench_parser.add_argument("--eager-only", action="store_true",
                              help="run only the eager table (host cost per call of small ops); "
                              "also on a host-only build")
    bench_parser.add_argument("--cases", metavar="A,B",
                              help="run only these cases (names as in Suite.CASES, and "
                              "'eager' for the eager table)")
    bench_parser.add_argument("--eager-calls", metavar="N", type=int,
                              help="calls per timed loop of the eager table (default 2000)")
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    if args.command == "demo":
        return demo(argv)
    return bench(bench_parser, args, argv)


if __name__ == "__main__":
    sys.exit(main())
