"""The CPU output pool's controls (its C++ half: csrc/torch/ops/output_pool.cpp): CPU outputs of
1 MiB or more come from a small process-wide pool of pre-faulted buffers that an output returns
when it dies (torch's allocator would page-fault a fresh block on every call). docs/custom_ops.md,
"Where prefetch's CPU outputs come from"."""
import torch

from .._core.checks import whole
from .._core.extension import C as _C  # noqa: F401  (loading the extension registers the ops)

__all__ = ["output_pool_stats", "release_output_pool", "set_output_pool_limit"]

# The order in which output_pool.cpp's output_pool_stats() returns its values.
_POOL_STATS = ("idle_buffers", "idle_bytes", "max_idle_buffers", "max_idle_bytes",
               "in_use_buffers", "in_use_bytes", "allocations", "reuses")


def output_pool_stats() -> dict[str, int]:
    """A snapshot of the CPU output pool, as a dict of ints:

    - ``idle_buffers``, ``idle_bytes``: buffers the pool holds for the next outputs;
    - ``max_idle_buffers``, ``max_idle_bytes``: its bounds on them (a returned buffer that would
      break one is freed);
    - ``in_use_buffers``, ``in_use_bytes``: pooled outputs (or views of them) still alive;
    - ``allocations``, ``reuses``: outputs that needed a new buffer / found an idle one, since
      the process started.

    Only CPU outputs of at least 1 MiB and at most ``max_idle_bytes`` are pooled; the others,
    and every CUDA output, come from torch's allocators and are not counted here.

    Returns:
        dict[str, int]: the eight counts above, by name; bytes in bytes.
    """
    return dict(zip(_POOL_STATS, torch.ops.prefetch._output_pool_stats()))


def release_output_pool() -> int:
    """Frees the pool's idle buffers now and returns how many bytes that gave back. Outputs that
    are still alive are untouched; they return to the pool when they die, as before.

    Returns:
        int: the bytes freed.
    """
    return torch.ops.prefetch._release_output_pool()


def set_output_pool_limit(max_idle_bytes: int) -> int:
    """Bounds the bytes the CPU output pool keeps idle (default 512 MiB; idle buffers beyond the
    new bound are freed at once) and returns the previous bound. ``0`` turns the pool off:
    every output then comes from torch's allocator. An output larger than the bound is never
    pooled.

    Args:
        max_idle_bytes (int): the new bound in bytes, a whole number >= 0.

    Returns:
        int: the bound before this call, in bytes.

    Raises:
        TypeError: ``max_idle_bytes`` not a whole number (a bool, a fraction, a string).
        RuntimeError: ``max_idle_bytes`` < 0 (output_pool.cpp's check).
    """
    return torch.ops.prefetch._set_output_pool_limit(whole(max_idle_bytes, "max_idle_bytes"))
