"""The GPT-2 model the probes time: ``examples/gpt2.py`` with random weights on the selected
accelerator (the host without one), bfloat16 on cuda and float32 elsewhere, as the bench's
decode case runs it. Imported by the probe scripts, which run from this folder."""

from __future__ import annotations

import os
import sys
from typing import Callable

import tensorplay as tp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import gpt2  # noqa: E402

__all__ = ["gpt2", "probe_model"]


def probe_model(tiny: bool = False) -> tuple["gpt2.GPT2", Callable[[], None]]:
    """``(model, sync)``: GPT-2-small (``tiny``: the tests' tiny config) and the call that waits
    for the device (nothing on the host)."""
    device = tp.accelerator.current_accelerator()
    config = gpt2.TINY if tiny else gpt2.SMALL
    dtype = tp.bfloat16 if device is not None and device.type == "cuda" else tp.float32
    model = gpt2.GPT2(gpt2.random_weights(config), config, device, dtype)
    sync = tp.accelerator.synchronize if device is not None else (lambda: None)
    return model, sync
