"""Exceptions tensorplay defines (the rest are built-in types, as API.md names them)."""

__all__ = ["OutOfMemoryError"]


class OutOfMemoryError(RuntimeError):
    """Device memory ran out even after the allocator emptied its cache and retried.

    The message gives the requested, allocated, reserved and free bytes. Nothing already allocated
    is harmed; free tensors (or call ``empty_cache()``) and try again.
    """
