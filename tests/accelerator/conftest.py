import pytest

import tensorplay as tp


@pytest.fixture(autouse=True)
def _no_capture_left_open(request):
    """Accelerator tests start on device 0 and must leave no capture open behind them."""
    if not tp.accelerator.is_available() or request.node.get_closest_marker("skip"):
        yield
        return
    tp.accelerator.set_device_index(0)
    yield
    assert not tp.accelerator.is_current_stream_capturing()
    tp.accelerator.synchronize()
    tp.accelerator.set_device_index(0)
