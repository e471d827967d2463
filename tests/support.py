"""Helpers shared by the conformance suite: devices under test and capability-based skips.

Tests use only the public API. ``DEVICES`` is ``cpu`` plus device 0 of the accelerator this
process selected (``TENSORPLAY_ACCELERATOR``); skips are by capability, never by backend name.
"""

import os

import numpy as np
import pytest

import tensorplay as tp

ACCELERATOR = tp.accelerator.current_accelerator()
DEVICE_COUNT = tp.accelerator.device_count()
DEVICES = ["cpu"] + ([f"{ACCELERATOR.type}:0"] if ACCELERATOR is not None and DEVICE_COUNT else [])

#: For tests whose subject does not depend on the accelerator (plots of saved results, the suite
#: runner itself): ``tests/run_suite.py`` runs them once, in its host-only configuration, and a
#: plain ``pytest`` run without ``TENSORPLAY_ACCELERATOR`` runs them too.
once_per_suite = pytest.mark.skipif(
    os.environ.get("TENSORPLAY_ACCELERATOR", "none").lower() != "none",
    reason="independent of the accelerator: checked once, in the host-only configuration")

requires_accelerator = pytest.mark.skipif(
    not tp.accelerator.is_available(),
    reason="needs an accelerator (run with TENSORPLAY_ACCELERATOR=sim, or on a GPU)")


def requires_devices(count: int):
    return pytest.mark.skipif(DEVICE_COUNT < count,
                              reason=f"needs {count} accelerator devices, this build has "
                                     f"{DEVICE_COUNT}")


def accelerator_device(index: int = 0) -> str:
    return f"{ACCELERATOR.type}:{index}"


def supports(device: str, dtype) -> bool:
    if device == "cpu":
        return True
    return dtype in tp.accelerator.get_device_capability(device)["supported_dtypes"]


def products_capture(device: str) -> bool:
    """Whether matrix products on ``device`` can be captured into a graph (cuda: only with
    nvmath-python)."""
    if tp.device(device).type == "cpu":
        return True   # nothing is captured on the host: tensorplay.compile runs eagerly there
    return tp.accelerator.get_device_capability(device)["matmul_in_capture"]


def requires_captured_products(device: str) -> None:
    """Skip the calling test unless products on ``device`` can be captured."""
    if not products_capture(device):
        pytest.skip(f"matrix products on {device} cannot be captured here (cuda needs "
                    f"nvmath-python)")


def to_numpy(tensor) -> np.ndarray:
    return tensor.cpu().numpy()


def cuda_backend_or_skip(what: str):
    """For ``tests/internals/`` only: the selected cuda backend, or skip the whole module (call at
    module level). ``what`` says what the module drives, for the skip reason."""
    from tensorplay._runtime.select import accelerator_backend

    backend = accelerator_backend()
    if backend is None or getattr(backend, "name", None) != "cuda":
        pytest.skip(f"the selected accelerator is not cuda (these tests drive {what}; run them on "
                    f"a GPU machine with the cuda extra installed)", allow_module_level=True)
    if backend.device_count() == 0:
        pytest.skip("the cuda backend was selected but no GPU is visible", allow_module_level=True)
    return backend


#: the backend calls that wait for (or poll) the device
DEVICE_WAITS = ("stream_synchronize", "synchronize_device", "event_synchronize", "to_host",
                "stream_query", "event_query")


def count_device_waits(monkeypatch) -> list:
    """Spy on every backend call that waits for the device; returns the list of their names,
    appended as they are called (clear it before the part to count)."""
    from tensorplay._runtime.select import accelerator_backend

    backend = accelerator_backend()
    calls: list = []
    for name in DEVICE_WAITS:
        def spy(*args, _name=name, _original=getattr(backend, name), **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(backend, name, spy)
    return calls


def make_tensor(values, device, dtype=None):
    """A tensor from ``values`` on ``device``: NumPy data keeps its dtype, Python floats become
    float32 (as torch.tensor does)."""
    import tensorplay as tp

    keep = isinstance(values, (np.ndarray, np.generic))
    values = np.asarray(values)
    if dtype is None and values.dtype.kind == "f" and not keep:
        dtype = tp.float32
    return tp.tensor(values, dtype=dtype, device=device)


def check_result(result, expected, dtype, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    """``result`` has ``dtype`` and ``expected``'s shape and values (floats within tolerance,
    others exactly)."""
    assert result.dtype == dtype, (result.dtype, dtype)
    got = to_numpy(result)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype.is_floating_point:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, expected)
