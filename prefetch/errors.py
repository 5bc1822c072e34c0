"""Exceptions prefetch raises to users (defined in :mod:`prefetch._core.errors`, the bottom layer,
where every layer that raises them can reach them)."""
from ._core.errors import CollateError, PrefetchTimeout, SharedMemoryError, shared_memory_advice

__all__ = ["CollateError", "PrefetchTimeout", "SharedMemoryError", "shared_memory_advice"]
