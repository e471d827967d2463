"""The optional ``copy`` backend hook (cuda: one kept kernel per copy layout) and the copies the
tensor layer routes through it: ``clone`` of a strided view, a copying ``reshape``, a write
through a basic index (first and kept), ``copy_`` on one device. A same-dtype copy asks the
hook first; a cast, or a hook that declines (returns False), copies with ``xp`` as before.
Checked on sim with a NumPy stand-in for the hook, so the wiring is tested without a GPU
(``test_cuda_copy.py`` checks the kernel itself there)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._runtime import dispatch as _dispatch
from tensorplay._tensor import transfer as _transfer
from support import to_numpy

pytestmark = pytest.mark.skipif(tp.accelerator.current_accelerator() is None,
                                reason="hooks are looked up on the accelerator backend")


def _dev():
    return tp.device(tp.accelerator.current_accelerator().type, 0)


@pytest.fixture
def copies(monkeypatch):
    """The shapes the stand-in hook copied; it declines destinations of more than 3
    dimensions, so that the fallback is exercised as well."""
    backend = _dispatch.backend_of(_dev())
    seen = []

    def copy(dst, src):
        if dst.ndim > 3:
            return False
        seen.append(tuple(dst.shape))
        dst[...] = src
        return True

    monkeypatch.setattr(backend, "copy", copy, raising=False)
    _transfer._copy_hooks.clear()   # the per-device lookup keeps the hook it found
    yield seen
    _transfer._copy_hooks.clear()


def test_copies_go_through_the_hook(copies):
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)
    t = tp.tensor(x, device=_dev())
    np.testing.assert_array_equal(to_numpy(t.transpose(0, 1).clone()), x.transpose(1, 0, 2))
    np.testing.assert_array_equal(to_numpy(t.transpose(0, 1).reshape(6, 32)),
                                  x.transpose(1, 0, 2).reshape(6, 32))
    cache = tp.zeros(4, 10, 8, device=_dev())
    expected = np.zeros((4, 10, 8), np.float32)
    for start in (2, 2, 3):   # the second write of a signature takes the kept path
        cache[:, start:start + 6] = t[:, :6]
        expected[:, start:start + 6] = x[:, :6]
    np.testing.assert_array_equal(to_numpy(cache), expected)
    out = tp.empty(8, 6, device=_dev())
    out.copy_(t[1].T)
    np.testing.assert_array_equal(to_numpy(out), x[1].T)
    assert copies == [(6, 4, 8), (6, 4, 8), (4, 6, 8), (4, 6, 8), (4, 6, 8), (8, 6)]


def test_casts_and_declined_copies_use_the_array_library(copies):
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    t = tp.tensor(x, device=_dev())
    wide = tp.empty(3, 2, device=_dev(), dtype=tp.float64)
    wide.copy_(t[0, :2, 0, :3].T)                    # a cast: never offered to the hook
    np.testing.assert_array_equal(to_numpy(wide), x[0, :2, 0, :3].T.astype(np.float64))
    four = t.permute(3, 2, 1, 0).clone()             # four dimensions: the stand-in declines
    np.testing.assert_array_equal(to_numpy(four), x.transpose(3, 2, 1, 0))
    assert copies == []


def test_a_graph_replays_the_hooked_copy(copies):
    if _dev().type == "cpu":
        pytest.skip("graphs need an accelerator")
    x = tp.randn(3, 5, device=_dev())
    graph = tp.accelerator.Graph()
    with graph:
        y = x.T.contiguous()
    new = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    x.copy_(tp.tensor(new, device=_dev()))
    graph.replay()
    np.testing.assert_array_equal(to_numpy(y), new.T)
