"""``python -m tensorplay bench``: the benchmark suite, side by side with torch, CuPy and JAX.

Each case times tensorplay and whichever peers are installed in the same run, on the current
accelerator. A figure is the median over repeats of (wall time of a loop of calls, ending in a
device synchronize) / calls, so each is a steady-state time per call including its share of
device work. The cases that run a whole workload per call (the CG solve, the control-flow
table of :mod:`.controlflow`) report the fastest of three runs instead. The large-products
cases (:mod:`.products`) add TFLOP/s, an error check and tensorplay's throughput over torch's.
A peer that cannot run here (``torch.compile`` without a compiler, say) is a row with no time
and a note saying why. On the simulated accelerator sizes are small and times are host times,
not GPU times. The eager table (:mod:`.eager`, JSON key ``eager``) follows the cases, with its
own rule: host cost per call, the fastest of several loops.
"""

from __future__ import annotations

import functools
import itertools
import json
import platform
import statistics
import sys
import time

import numpy as np

import tensorplay as tp

from . import eager, peers
from .controlflow import control_flow_case
from .models import cg_case, mlp_case
from .products import SIZE as PRODUCT_SIZE
from .products import SMALL_SIZE as SMALL_PRODUCT_SIZE
from .products import products_case
from .plot import plot
from .timing import interleaved_loops, time_per_call
from .decode import decode_case
from .training import BATCHES as TRAINING_BATCHES
from .training import training_step_case
from .timing import sync as _sync


def _progress(done: int, total: int, label: str, seconds: float | None = None) -> None:
    """Report progress on stderr: on a terminal, one bar redrawn in place (``label`` is the case
    starting); piped into a log, one line per finished case (``seconds`` given), since carriage
    returns would turn the log into one long line."""
    if not sys.stderr.isatty():
        if seconds is not None:
            sys.stderr.write(f"bench: {done}/{total} {label} finished in {seconds:.1f} s\n")
            sys.stderr.flush()
        return
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


class Suite:
    """Runs the cases and collects rows ``{case, impl, us[, note], ...}``.

    ``us`` is microseconds per call, or None for a peer that could not run here (``note`` then
    says why, e.g. ``torch.compile`` without a compiler); ``note`` may also qualify a row that
    did run. Cases add their own keys: ``total_us`` (host-cost cases), ``iterations`` and
    ``residual`` (CG, Newton), ``n``, ``dtype``, ``tflops``, ``rel_err``, ``tp/torch``
    (products), ``steps``, ``per_step_us`` and ``overhead_us`` (the heat loop; ``rel_err`` too,
    and on Newton's rows: the difference from a NumPy reference)."""

    def __init__(self, device: str, small: bool):
        self.device = device
        self.small = small
        self.rows: list[dict] = []
        self.calls = 200 if small else 2000

    def add(self, case: str, impl: str, us: float | None, **extra) -> None:
        self.rows.append({"case": case, "impl": impl, "us": us, **extra})

    # -- cases ------------------------------------------------------------------------------
    def replay_overhead(self) -> None:
        x = tp.zeros(16, device=self.device)
        graph = tp.accelerator.Graph()
        with graph:
            x.add_(1)
        stream = tp.accelerator.current_stream()
        case = "graph replay, host cost (1 kernel)"
        impls = [("tensorplay replay(stream=s)", lambda: graph.replay(stream=stream), _sync),
                 ("tensorplay replay()", graph.replay, _sync), *peers.replay_peers(graph, stream)]
        self._host_rows(case, impls)

    def _host_rows(self, case: str, impls) -> None:
        """Rows of host cost per call (median of 9 loops of 200 calls, the implementations taking
        turns loop by loop: :func:`.timing.interleaved_loops`) with the synchronized total."""
        loops = interleaved_loops({impl: (fn, sync) for impl, fn, sync in impls}, 200, 9, 3)
        for impl, _, _ in impls:
            host, total = loops[impl]
            self.add(case, impl, statistics.median(host), total_us=statistics.median(total))

    def stage_and_launch(self, counts=(1, 2, 4, 8, 16, 32)) -> None:
        for count in counts:
            case = f"stage_and_launch ({count} x 1 KiB inputs)"
            statics = [tp.zeros(256, device=self.device) for _ in range(count)]
            fresh = [tp.rand(256, device=self.device) for _ in range(count)]
            graph = tp.accelerator.Graph()
            with graph:
                _total = statics[0] + statics[-1]
            self.add(case, "tensorplay stage_and_launch",
                     time_per_call(functools.partial(graph.stage_and_launch, statics, fresh),
                                   _sync, self.calls), inputs=count)
            if count == 8:   # new addresses every call: the staging node is rewritten each time
                sets = itertools.cycle([fresh, [tp.rand(256, device=self.device)
                                                for _ in range(count)]])
                self.add(case, "tensorplay stage_and_launch, 2 input sets in turn",
                         time_per_call(lambda: graph.stage_and_launch(statics, next(sets)),
                                       _sync, self.calls), inputs=count)
            for impl, fn, sync in peers.staging_peers(count):
                self.add(case, impl, time_per_call(fn, sync, self.calls), inputs=count)

    def eager_op(self) -> None:
        x = tp.zeros(16, device=self.device)
        case = "eager x.add_(1), 16 floats, host cost"
        self._host_rows(case, [("tensorplay", lambda: x.add_(1), _sync), *peers.eager_peers()])

    def twenty_kernels(self) -> None:
        x = tp.zeros(1024, device=self.device)

        def work():
            for _ in range(20):
                x.add_(1)
        graph = tp.accelerator.Graph()
        with graph:
            work()
        case = "20 small kernels"
        self.add(case, "tensorplay eager", time_per_call(work, _sync, self.calls // 10))
        self.add(case, "tensorplay graph replay",
                 time_per_call(graph.replay, _sync, self.calls // 10))
        for impl, fn, sync in peers.chain_peers(20, 1024):
            self.add(case, impl, time_per_call(fn, sync, self.calls // 10))

    def products(self) -> None:
        n = SMALL_PRODUCT_SIZE if self.small else PRODUCT_SIZE
        for row in products_case(self.device, n):
            self.add(**row)

    def mlp(self) -> None:
        for row in mlp_case(self.device, self.calls // 10):
            self.add("MLP 4x512, batch 8, GELU", **row)

    def cg(self) -> None:
        n = 32 if self.small else 256
        for row in cg_case(self.device, n):
            self.add(f"CG Poisson {n}x{n}", **row)

    def control_flow(self) -> None:
        for row in control_flow_case(self.device, self.small):
            self.add(**row)

    def training(self) -> None:
        for batch in TRAINING_BATCHES:
            for row in training_step_case(self.device, batch, max(self.calls // 20, 10)):
                self.add(f"MLP 4x512 training step (AdamW, MSE), batch {batch}", **row)

    def decode(self) -> None:
        for row in decode_case(self.device, self.small):
            self.add(**row)

    CASES = ("replay_overhead", "stage_and_launch", "eager_op", "twenty_kernels", "products",
             "mlp", "training", "decode", "cg", "control_flow")

    def run(self, only: list[str] | None = None) -> list[dict]:
        """Run every case in :attr:`CASES` order (or those named in ``only``)."""
        cases = [getattr(self, name) for name in self.CASES if only is None or name in only]
        for done, case in enumerate(cases):
            _progress(done, len(cases), case.__name__)
            start = time.perf_counter()
            case()
            _progress(done + 1, len(cases), case.__name__, time.perf_counter() - start)
        return self.rows


def _extras(row: dict) -> str:
    """What a row says beyond its time: the iterations and residual of CG and Newton, the time
    per step of the heat loop and its control-flow overhead per step, a product's throughput,
    error and throughput ratio to torch, and the row's note."""
    parts = []
    if "iterations" in row:
        per_iteration = (f" per-iter={row['us'] / row['iterations']:.1f} us"
                         if row["us"] is not None and row["iterations"] else "")
        parts.append(f"iters={row['iterations']}{per_iteration} residual={row['residual']:.1e}")
    if row.get("per_step_us") is not None:
        parts.append(f"per-step={row['per_step_us']:.2f} us")
    if row.get("overhead_us") is not None:
        parts.append(f"overhead/step={row['overhead_us']:.2f} us")
    if row.get("tflops") is not None:
        parts.append(f"TFLOP/s={row['tflops']:.4g}")
    if row.get("rel_err") is not None:
        parts.append(f"err={row['rel_err']:.1e}")
    if row.get("tp/torch") is not None:
        parts.append(f"tp/torch throughput={row['tp/torch']:.2f}x")
    if row.get("note"):
        parts.append(f"[{row['note']}]")
    return "".join(f"  {part}" for part in parts)


def format_table(rows: list[dict]) -> str:
    """The rows as a text table; each case's first tensorplay row that ran is its ``1.00x``.

    A row that did not run (``us`` None) shows ``n/a`` for its time and ratio and its note."""
    case_width = max([len("case"), *(len(row["case"]) for row in rows)])
    impl_width = max([len("implementation"), *(len(row["impl"]) for row in rows)])
    header = (f"{'case':<{case_width}}  {'implementation':<{impl_width}}  {'time/call':>12} "
              f"{'vs tensorplay':>14}")
    lines = [header, "-" * len(header)]
    reference = {}
    for row in rows:
        if (row["impl"].startswith("tensorplay") and row["us"]
                and row["case"] not in reference):
            reference[row["case"]] = row["us"]
    for row in rows:
        us = row["us"]
        if us is None:
            unit, ratio = f"{'n/a':>12}", f"{'n/a':>14}"
        else:
            unit = f"{us / 1000:9.2f} ms" if us >= 10000 else f"{us:9.2f} us"
            base = reference.get(row["case"])
            ratio = f"{us / base if base else float('nan'):13.2f}x"
        lines.append(f"{row['case']:<{case_width}}  {row['impl']:<{impl_width}}  {unit:>12} "
                     f"{ratio}{_extras(row)}")
    return "\n".join(lines)


def _header(run: dict) -> str:
    peers_text = ", ".join(f"{name} {version}" for name, version in run["peers"].items())
    version = f" {run['tensorplay']}" if run.get("tensorplay") else ""
    return (f"tensorplay{version} on {run['device']} ({run['device_name']}), "
            f"{run['date']}, peers: {peers_text or 'none installed'}")


def _write_plot(run: dict, plot_path: str | None) -> None:
    if plot_path:
        plot(run, plot_path)
        print(f"wrote {plot_path}")


def _machine(eager_only: bool) -> tuple[str, str]:
    """(device, device name) the run measures: device 0 of the current accelerator, which the
    full suite needs (on a host-only build ``get_device_capability`` says how to get one); the
    eager table alone also runs on the host."""
    accelerator = tp.accelerator.current_accelerator(check_available=True)
    if accelerator is None and eager_only:
        return "cpu", f"host, NumPy {np.__version__}"
    capability = tp.accelerator.get_device_capability(0)   # (raises on a host-only build)
    kind = tp.accelerator.current_accelerator().type  # type: ignore[union-attr]
    return f"{kind}:0", capability["name"]


def _print_run(run: dict) -> None:
    print(_header(run))
    if run["rows"]:
        print(format_table(run["rows"]))
    if run.get("eager"):
        print(f"\n{eager.format_eager(run['eager'])}")


def main(json_path: str | None = None, plot_path: str | None = None, *,
         eager_only: bool = False, eager_calls: int | None = None,
         cases: list[str] | None = None) -> int:
    """Run the suite on device 0 of the current accelerator (which must have one), then the
    eager table; print both, and write the run as JSON and a PNG plot when paths are given.

    ``eager_only`` runs the eager table alone (also on a host-only build, on the host);
    ``eager_calls`` sets its calls per timed loop (default :data:`.eager.CALLS`); ``cases``
    runs only the named cases of :attr:`Suite.CASES` (and the eager table only if it names
    ``eager``)."""
    device, device_name = _machine(eager_only)
    small = device.startswith("sim")
    if small:
        print("simulated accelerator: small sizes; these are host times, not GPU times")
    rows = [] if eager_only else Suite(device, small).run(cases)
    table = None
    if cases is None or "eager" in cases or eager_only:
        sys.stderr.write("eager table ...\n")
        table = eager.eager_table(device, eager_calls or eager.CALLS)
    run = {"date": time.strftime("%Y-%m-%d"), "tensorplay": tp.__version__, "device": device,
           "device_name": device_name, "python": platform.python_version(),
           "numpy": np.__version__, "peers": peers.versions(), "simulated": small, "rows": rows,
           "eager": table}
    print()
    _print_run(run)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(run, handle, indent=1)
        print(f"wrote {json_path}")
    _write_plot(run, plot_path)
    return 0


def replay_saved(json_path: str, plot_path: str | None = None) -> int:
    """Print the tables of a run saved by ``--json`` (and plot it); runs no benchmark."""
    with open(json_path) as handle:
        run = json.load(handle)
    _print_run(run)
    _write_plot(run, plot_path)
    return 0
