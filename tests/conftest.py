import pytest

from support import DEVICES


@pytest.fixture(params=DEVICES)
def device(request):
    """Each device under test: ``cpu`` and the built accelerator's device 0."""
    return request.param
