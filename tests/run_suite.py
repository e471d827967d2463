"""Run the whole test suite under every accelerator configuration CI checks, and build the
documentation once.

The accelerator is chosen once per process at import, so each configuration is its own pytest
process: host-only (``TENSORPLAY_ACCELERATOR=none``), the simulated accelerator with two devices
and with one, and, when a GPU is visible, ``cuda``. The steps run side by side, as many at a
time as the machine has cores (``TENSORPLAY_SUITE_JOBS`` sets it; 1 streams one step after the
other as pytest writes): each step's output is printed whole when it ends, in order. A
configuration fails when its pytest run fails, runs no test, or when the accelerator
it asks for was not the one selected (a ``cuda`` run whose backend did not import would
otherwise pass host-only); the summary names each failing configuration with its variables.

Before the configurations, the documentation site (``docs/``) is built once with
``sphinx-build -W --keep-going -n``: any warning fails it, a broken cross-reference or a public
object without a docstring among them (``docs/conf.py``). It does not depend on the accelerator,
so it is one step of the run, not one per configuration; it needs the ``docs`` extra.

Exits non-zero if any step failed. Extra arguments are passed to pytest (e.g. ``-x`` or ``-k
graph``); a run given any leaves the documentation build out, as it narrows the run to some tests.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [
    ("host-only", {"TENSORPLAY_ACCELERATOR": "none"}),
    ("sim-2-devices", {"TENSORPLAY_ACCELERATOR": "sim", "TENSORPLAY_SIM_DEVICES": "2"}),
    ("sim-1-device", {"TENSORPLAY_ACCELERATOR": "sim", "TENSORPLAY_SIM_DEVICES": "1"}),
]
_PROBE = ("import tensorplay as tp; from tensorplay._runtime.select import selection_report; "
          "print(tp.accelerator.device_count()); print(selection_report())")
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
#: a fresh build (-E: warnings of unchanged pages are reported again), warnings as errors,
#: every warning reported before failing (--keep-going), broken references included (-n)
DOCS_BUILD = ["-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html", "docs",
              os.path.join("docs", "_build", "html")]


def _probe(env: dict) -> tuple[int, str]:
    """(device count, selection report) of a fresh interpreter under ``env``."""
    result = subprocess.run([sys.executable, "-c", _PROBE], env=dict(os.environ, **env),
                            capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return 0, f"import failed: {last}"
    count, report = result.stdout.strip().split("\n", 1)
    return int(count), report


def _jobs() -> int:
    """How many steps run at once: ``TENSORPLAY_SUITE_JOBS``, else the cores (at least 1)."""
    given = os.environ.get("TENSORPLAY_SUITE_JOBS")
    if given:
        return max(1, int(given))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def _captured(command: list[str], env: dict) -> tuple[int, str, bytes]:
    """Run ``command`` with its output (stdout and stderr, interleaved) kept; returns its exit
    status, the last 4 KiB of output (for the summary line) and the whole output."""
    result = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, check=False)
    return result.returncode, result.stdout[-4096:].decode(errors="replace"), result.stdout


def _stream(command: list[str], env: dict) -> tuple[int, str]:
    """Run ``command``, copying its output (stdout and stderr, interleaved) to our stdout as it
    comes; returns its exit status and the last 4 KiB of output, for the summary line."""
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    tail = b""
    out = sys.stdout.buffer
    while True:
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        out.write(chunk)
        out.flush()
        tail = (tail + chunk)[-4096:]
    process.stdout.close()
    return process.wait(), tail.decode(errors="replace")


def _counts(output: str) -> dict[str, int]:
    """The counts of pytest's final summary line ("3 passed, 1 skipped in 2.0s")."""
    lines = [line for line in output.splitlines() if _COUNTS.search(line)]
    counts = {}
    for value, key in _COUNTS.findall(lines[-1] if lines else ""):
        counts["errors" if key.startswith("error") else key] = int(value)
    return counts


def _run_config(name: str, env: dict, argv: list[str], stream: bool = True
                ) -> tuple[dict, str | None, str]:
    """Run one configuration; returns its counts, why it failed (None when it passed) and its
    output when it was not streamed (``stream=False``: printed by the caller, whole)."""
    variables = " ".join(f"{k}={v}" for k, v in env.items())
    count, report = _probe(env)
    header = f"\n===== {name}: {variables} (accelerator: {report}) ====="
    wanted = env["TENSORPLAY_ACCELERATOR"]
    if wanted != "none" and (not report.startswith(wanted) or count == 0):
        return {}, f"asked for {wanted} but got: {report}, {count} device(s); no test was " \
                   f"run", header
    start = time.time()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv]
    child_env = dict(os.environ, PYTHONUNBUFFERED="1", **env)
    if stream:
        print(header, flush=True)
        status, tail = _stream(command, child_env)
        output = ""
    else:
        status, tail, whole = _captured(command, child_env)
        output = header + "\n" + whole.decode(errors="replace")
    counts = _counts(tail)
    footer = f"----- {name}: exit {status} in {time.time() - start:.0f} s"
    if stream:
        print(footer, flush=True)
    else:
        output += footer
    if status != 0:
        found = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no summary line"
        return counts, f"pytest exited {status} ({found})", output
    if not counts.get("passed"):
        return counts, "no test passed", output
    return counts, None, output


def _build_docs() -> tuple[str | None, str]:
    """Build the documentation site; returns why it failed (None when it passed) and its
    output."""
    header = f"\n===== docs: python -m {' '.join(DOCS_BUILD[1:])} ====="
    if importlib.util.find_spec("sphinx") is None:
        return ('sphinx is not installed: python3 -m pip install -e ".[docs]" (the README\'s '
                'test command does)'), header
    start = time.time()
    status, _, whole = _captured([sys.executable, *DOCS_BUILD],
                                 dict(os.environ, PYTHONUNBUFFERED="1"))
    output = (header + "\n" + whole.decode(errors="replace")
              + f"----- docs: exit {status} in {time.time() - start:.0f} s")
    return (None if status == 0 else
            f"sphinx-build exited {status} (every warning is an error)"), output


def main(argv: list[str]) -> int:
    """Build the docs (unless pytest arguments narrow the run), then run every configuration
    (plus ``cuda`` when a GPU is visible or TENSORPLAY_TEST_CUDA=1); returns 1 if any failed."""
    configs = list(CONFIGS)
    if os.environ.get("TENSORPLAY_TEST_CUDA") == "1" or _probe(
            {"TENSORPLAY_ACCELERATOR": "cuda"})[0] > 0:
        configs.append(("cuda", {"TENSORPLAY_ACCELERATOR": "cuda"}))
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    jobs = _jobs()
    docs_failure = None
    if jobs == 1:
        if not argv:
            docs_failure, output = _build_docs()
            print(output, flush=True)
        results = [_run_config(name, env, argv) for name, env in configs]
    else:   # side by side: each step's output printed whole when it ends, in order
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            docs = None if argv else pool.submit(_build_docs)
            runs = [pool.submit(_run_config, name, env, argv, False) for name, env in configs]
            if docs is not None:
                docs_failure, output = docs.result()
                print(output, flush=True)
            results = []
            for run in runs:
                results.append(run.result())
                print(results[-1][2], flush=True)
    for (name, env), (counts, why, _) in zip(configs, results):
        for key in totals:
            totals[key] += counts.get(key, 0)
        totals["failed"] += counts.get("errors", 0)
        if why is not None:
            failures.append(f"  {name} ({' '.join(f'{k}={v}' for k, v in env.items())}): {why}")
    print(f"\n{len(configs) - len(failures)} of {len(configs)} configurations passed"
          + ("; failing:\n" + "\n".join(failures) if failures else ""))
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    if not argv:
        print("docs: " + ("built, no warning" if docs_failure is None else
                          f"FAILED: {docs_failure}"))
    return 1 if failures or docs_failure is not None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
