"""Run the whole test suite under every accelerator configuration CI checks, and build the
documentation once.

The accelerator is chosen once per process at import, so each configuration is its own pytest
process: host-only (``TENSORPLAY_ACCELERATOR=none``), the simulated accelerator with two devices
and with one, and, when a GPU is visible, ``cuda``. Each run's output is streamed as pytest
writes it. A configuration fails when its pytest run fails, runs no test, or when the accelerator
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


def _run_config(name: str, env: dict, argv: list[str]) -> tuple[dict, str | None]:
    """Run one configuration; returns its counts and why it failed (None when it passed)."""
    variables = " ".join(f"{k}={v}" for k, v in env.items())
    count, report = _probe(env)
    print(f"\n===== {name}: {variables} (accelerator: {report}) =====", flush=True)
    wanted = env["TENSORPLAY_ACCELERATOR"]
    if wanted != "none" and (not report.startswith(wanted) or count == 0):
        return {}, f"asked for {wanted} but got: {report}, {count} device(s); no test was run"
    start = time.time()
    status, tail = _stream([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            *argv], dict(os.environ, PYTHONUNBUFFERED="1", **env))
    counts = _counts(tail)
    print(f"----- {name}: exit {status} in {time.time() - start:.0f} s", flush=True)
    if status != 0:
        found = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no summary line"
        return counts, f"pytest exited {status} ({found})"
    if not counts.get("passed"):
        return counts, "no test passed"
    return counts, None


def _build_docs() -> str | None:
    """Build the documentation site; returns why it failed (None when it passed)."""
    print(f"\n===== docs: python -m {' '.join(DOCS_BUILD[1:])} =====", flush=True)
    if importlib.util.find_spec("sphinx") is None:
        return ('sphinx is not installed: python3 -m pip install -e ".[docs]" (the README\'s '
                'test command does)')
    start = time.time()
    status, _ = _stream([sys.executable, *DOCS_BUILD], dict(os.environ, PYTHONUNBUFFERED="1"))
    print(f"----- docs: exit {status} in {time.time() - start:.0f} s", flush=True)
    return None if status == 0 else f"sphinx-build exited {status} (every warning is an error)"


def main(argv: list[str]) -> int:
    """Build the docs (unless pytest arguments narrow the run), then run every configuration
    (plus ``cuda`` when a GPU is visible or TENSORPLAY_TEST_CUDA=1); returns 1 if any failed."""
    configs = list(CONFIGS)
    if os.environ.get("TENSORPLAY_TEST_CUDA") == "1" or _probe(
            {"TENSORPLAY_ACCELERATOR": "cuda"})[0] > 0:
        configs.append(("cuda", {"TENSORPLAY_ACCELERATOR": "cuda"}))
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    docs_failure = None if argv else _build_docs()
    for name, env in configs:
        counts, why = _run_config(name, env, argv)
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
