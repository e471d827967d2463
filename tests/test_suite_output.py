"""What a test run prints: skips grouped by reason and counted, so a failure stands out."""

import os
import subprocess
import sys

from support import once_per_suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@once_per_suite
def test_skips_are_summarized_by_reason_not_listed_one_by_one():
    env = dict(os.environ, TENSORPLAY_ACCELERATOR="none")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/accelerator/test_if_else_nodes.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-2000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("SKIPPED [")]
    header = next(i for i, line in enumerate(lines) if "skipped, by reason" in line)
    count, reason = lines[header + 1].split(None, 1)
    assert int(count) > 1 and reason.startswith("needs an accelerator")
