"""Run the whole test suite under every accelerator configuration CI checks.

The accelerator is chosen once per process at import, so each configuration is its own pytest
process: host-only (``TENSORPLAY_ACCELERATOR=none``), the simulated accelerator with one and with
two devices, and, when a GPU is visible, ``cuda``. Exits non-zero if any run fails or runs no
test. Extra arguments are passed to pytest (e.g. ``-x`` or ``-k graph``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [
    ("host-only", {"TENSORPLAY_ACCELERATOR": "none"}),
    ("sim, 2 devices", {"TENSORPLAY_ACCELERATOR": "sim", "TENSORPLAY_SIM_DEVICES": "2"}),
    ("sim, 1 device", {"TENSORPLAY_ACCELERATOR": "sim", "TENSORPLAY_SIM_DEVICES": "1"}),
]


def _gpu_visible() -> bool:
    probe = "import tensorplay as tp; print(tp.accelerator.device_count())"
    env = dict(os.environ, TENSORPLAY_ACCELERATOR="cuda")
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            text=True, cwd=ROOT)
    return result.returncode == 0 and result.stdout.strip() not in ("", "0")


def main(argv: list[str]) -> int:
    configs = list(CONFIGS)
    if os.environ.get("TENSORPLAY_TEST_CUDA") == "1" or _gpu_visible():
        configs.append(("cuda", {"TENSORPLAY_ACCELERATOR": "cuda"}))
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    for name, env in configs:
        print(f"\n===== {name}: {' '.join(f'{k}={v}' for k, v in env.items())} =====",
              flush=True)
        start = time.time()
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 *argv], env=dict(os.environ, **env), cwd=ROOT,
                                capture_output=True, text=True)
        sys.stdout.write(result.stdout[-6000:])
        sys.stderr.write(result.stderr[-3000:])
        counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)",
                                                   result.stdout.splitlines()[-1]
                                                   if result.stdout else "")}
        for key in totals:
            totals[key] += counts.get(key, 0)
        totals["failed"] += counts.get("error", 0)
        if result.returncode != 0 or not counts.get("passed"):
            failures.append(name)
        print(f"----- {name}: exit {result.returncode} in {time.time() - start:.0f} s", flush=True)
    print(f"\nconfigurations failing: {', '.join(failures) if failures else 'none'}")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
