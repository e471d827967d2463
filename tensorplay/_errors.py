"""Exceptions tensorplay defines (the rest are built-in types, as API.md names them)."""

__all__ = ["BroadcastError", "OutOfMemoryError"]


class OutOfMemoryError(RuntimeError):
    """Device memory ran out even after the allocator emptied its cache and retried.

    The message gives the requested, allocated, reserved and free bytes. Nothing already allocated
    is harmed; free tensors (or call ``empty_cache()``) and try again.
    """


class BroadcastError(RuntimeError, ValueError):
    """Operand shapes that do not broadcast together. A RuntimeError, as PyTorch raises for
    them, and a ValueError, as NumPy raises and as tensorplay raised before it matched PyTorch
    here, so handlers of either keep working."""
