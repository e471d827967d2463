import os
from collections import Counter

import pytest

import tensorplay as tp
from tensorplay._runtime.select import selection_report
from support import DEVICES, accelerator_device


def pytest_sessionstart(session):
    """A run that asks for an accelerator must get it: a cuda build that failed to load would
    otherwise run the whole suite host-only and look green."""
    requested = os.environ.get("TENSORPLAY_ACCELERATOR", "").strip().lower()
    selected = tp.accelerator.current_accelerator()
    if requested not in ("", "auto", "none") and (selected is None or selected.type != requested):
        raise pytest.UsageError(
            f"TENSORPLAY_ACCELERATOR={requested} was asked for, but the build selected "
            f"{selected.type if selected is not None else 'no accelerator'}: "
            f"{selection_report()}")


@pytest.fixture(params=DEVICES)
def device(request):
    """Each device under test: ``cpu`` and the built accelerator's device 0."""
    return request.param


@pytest.fixture
def dev():
    """The built accelerator's device 0, spelled as a user would (``"sim:0"``, ``"cuda:0"``).
    Tests that take it are marked ``requires_accelerator``."""
    return accelerator_device(0)


def pytest_terminal_summary(terminalreporter):
    """Skips grouped by reason and counted, one line a reason, so that a failure stands out
    (``-ra`` printed one line per skipped test: hundreds on a host-only run)."""
    reasons = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section(f"{sum(reasons.values())} skipped, by reason", sep="-")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:6d}  {reason}")
