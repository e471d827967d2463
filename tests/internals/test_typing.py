"""``mypy`` is clean on the native floor and the runtime (``tensorplay/backends``,
``tensorplay/_runtime``), under the ``[tool.mypy]`` configuration of ``pyproject.toml``
(``check_untyped_defs`` there; the floors above are read but not yet held to it).

Runs mypy in a subprocess without a cache (a cold run takes a few seconds), so it checks the
working tree as it is. Skipped where mypy is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("tensorplay/_runtime", "tensorplay/backends")


@pytest.mark.skipif(os.environ.get("TENSORPLAY_ACCELERATOR", "").lower() not in ("none",),
                    reason="reads source only: checked once, in the host-only configuration")
def test_mypy_clean_on_runtime_and_backends() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", "/dev/null", "--no-error-summary", "--hide-error-context", *CHECKED],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mypy found errors in {', '.join(CHECKED)}:\n{report}"
