"""The one-time choice of the backends, and the ONE registry of device types.

:data:`DEVICE_TYPES` maps every device type a spelling may name (``"cpu"``, ``"sim"``,
``"cuda"``) to the module of the backend that owns it; ``_runtime.device`` reads its spellings
and its error messages from here, and ``TENSORPLAY_ACCELERATOR`` may name any accelerator type
in it. Adding a backend is one line here (and its module under ``backends/``).

:func:`_select` runs once, when ``tensorplay`` is imported; it is the only reader of
``TENSORPLAY_ACCELERATOR``. Everything else asks :func:`host_backend`,
:func:`accelerator_backend` or :func:`require_accelerator`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ..backends import Backend, HostArrays, hook

__all__ = ["DEVICE_TYPES", "HOST_TYPE", "accelerator_backend", "accelerator_types",
           "backend_for", "host_backend", "host_only_reason", "no_accelerator_advice",
           "requested_accelerator", "require_accelerator", "selection_report"]

#: The device type of the host (NumPy) backend.
HOST_TYPE = "cpu"

#: device type -> module of the backend owning it (the module has ``create_backend()``); the
#: host first. Device spellings, their errors and ``TENSORPLAY_ACCELERATOR`` read this.
DEVICE_TYPES: dict[str, str] = {
    HOST_TYPE: "tensorplay.backends.host",
    "sim": "tensorplay.backends.sim",
    "cuda": "tensorplay.backends.cuda",
}

#: What an unset (or ``auto``) ``TENSORPLAY_ACCELERATOR`` tries.
_AUTO = "cuda"
_ENV = "TENSORPLAY_ACCELERATOR"


def accelerator_types() -> tuple[str, ...]:
    """The accelerator device types of the registry (every type but the host's)."""
    return tuple(kind for kind in DEVICE_TYPES if kind != HOST_TYPE)


class _Selection:
    def __init__(self) -> None:
        self.host: HostArrays | None = None
        self.accelerator: Backend | None = None
        self.requested: str = ""
        self.failure: BaseException | None = None


_selection = _Selection()


def _load(device_type: str) -> Any:   # the host's HostArrays, or an accelerator's Backend
    return importlib.import_module(DEVICE_TYPES[device_type]).create_backend()


def _select(allocator_of: Callable[[int], Any] | None = None) -> None:
    """Choose the backends once, at import. The only reader of TENSORPLAY_ACCELERATOR.

    A typo in the variable raises here. An accelerator that was asked for (or, unset, ``cuda``)
    but whose ``create_backend`` fails (``ImportError`` when its runtime does not import) leaves a
    host-only build that keeps the reason: ``selection_report`` shows it and every accelerator
    call raises with it (``require_accelerator``), so ``python -m tensorplay info`` can say why.

    ``allocator_of(index)`` (the runtime's ``allocator.device_allocator``) is handed to the
    accelerator's ``use_allocator`` hook when it has one, so that allocations its array library
    makes on its own (CuPy's) come from the caching allocator; a backend never imports it.

    Raises:
        ValueError: ``TENSORPLAY_ACCELERATOR`` names no accelerator of :data:`DEVICE_TYPES`.
    """
    _selection.host = _load(HOST_TYPE)
    requested = os.environ.get(_ENV, "").strip().lower()
    _selection.requested = requested or "auto"
    if requested == "none":
        return
    accelerators = accelerator_types()
    if requested not in ("", "auto", *accelerators):
        valid = ", ".join(repr(n) for n in (*accelerators, "none"))
        raise ValueError(f"{_ENV}={requested!r} is not a known accelerator; valid values: {valid}")
    try:
        accelerator = _load(requested if requested in accelerators else _AUTO)
    except Exception as exc:  # noqa: BLE001 - kept and shown by selection_report / require_*
        _selection.failure = exc
        return
    use_allocator = hook(accelerator, "use_allocator")
    if use_allocator is not None and allocator_of is not None:
        use_allocator(allocator_of)
    _selection.accelerator = accelerator


def host_backend() -> HostArrays:
    """The host (NumPy) backend; always present once ``tensorplay`` is imported."""
    assert _selection.host is not None, "tensorplay._runtime.select._select() has not run"
    return _selection.host


def accelerator_backend() -> Backend | None:
    """The accelerator chosen at import, or None on a host-only build."""
    return _selection.accelerator


def backend_for(device_type: str) -> Backend | HostArrays | None:
    """The backend owning a device type (the host's, or the accelerator's; None for a type this
    build has no backend for)."""
    if device_type == HOST_TYPE:
        return host_backend()
    accelerator = _selection.accelerator
    return accelerator if accelerator is not None and accelerator.device_type == device_type \
        else None


def requested_accelerator() -> str:
    """What ``TENSORPLAY_ACCELERATOR`` asked for at import: ``"auto"`` (unset), ``"none"``, or an
    accelerator name (which may have failed to import: see :func:`selection_report`)."""
    return _selection.requested


def host_only_reason() -> str:
    """Why no accelerator was built, as a sentence without its final stop ("" when one was)."""
    if _selection.accelerator is not None:
        return ""
    if _selection.failure is not None:
        asked = ("" if _selection.requested == "auto"
                 else f"{_ENV}={_selection.requested} was set, but ")
        return (f"{asked}the {_selection.requested if asked else _AUTO} backend did not "
                f"import: {type(_selection.failure).__name__}: {_selection.failure}")
    if _selection.requested == "none":
        return f"{_ENV}=none was set"
    return ""


def selection_report() -> str:
    """One line: which accelerator was selected, or why none was."""
    if _selection.accelerator is not None:
        return _selection.accelerator.name
    why = host_only_reason()
    return f"none (host-only build: {why})" if why else "none (host-only build)"


def no_accelerator_advice() -> str:
    """Why this build is host-only and how to get an accelerator, for error messages: names
    ``TENSORPLAY_ACCELERATOR=sim`` (the simulated accelerator, no GPU needed)."""
    sim = f"set {_ENV}=sim before importing tensorplay for the simulated accelerator."
    why = host_only_reason()
    if _selection.failure is not None:   # its message says how to install what is missing
        return f"{why[0].upper()}{why[1:]}. Without a GPU, {sim}"
    return ((f"{why}. " if why else "") + "Install the CUDA extra (pip install "
            f"'tensorplay[cuda]') on a machine with an NVIDIA GPU, or {sim}")


def require_accelerator() -> Backend:
    """The accelerator backend, or RuntimeError saying that none was built, why, and how to get
    one (``TENSORPLAY_ACCELERATOR=sim`` for the simulated accelerator)."""
    if _selection.accelerator is not None:
        return _selection.accelerator
    raise RuntimeError("no accelerator was built: tensorplay is running host-only. "
                       + no_accelerator_advice())
