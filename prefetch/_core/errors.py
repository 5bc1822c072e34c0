"""Exceptions prefetch raises to users."""
from .extension import _C

#: A batch cannot be collated: ragged samples, mixed dtypes, unsupported leaves, a size cap.
#: A subclass of ValueError; the message names the leaf, the sample and both shapes/dtypes.
CollateError = _C.CollateError


class SharedMemoryError(RuntimeError):
    """A DataLoader worker could not put a batch into shared memory (``/dev/shm`` is full or too
    small, as in a Docker container's default 64 MB); the message says how large it is, what was
    asked for and what to do."""


def shared_memory_advice(asked, directory="/dev/shm"):
    """The sentence a SharedMemoryError gives: the size and free space of ``directory``, the bytes
    asked for, and the fixes."""
    import os

    try:
        st = os.statvfs(directory)
        where = "%s holds %s (%s free)" % (directory, _size(st.f_blocks * st.f_frsize),
                                           _size(st.f_bavail * st.f_frsize))
    except OSError:
        where = "%s cannot be read" % directory
    return ("%s, and this batch needs %s. Give the container a larger %s (docker run "
            "--shm-size=8g; Kubernetes: an emptyDir with medium: Memory mounted there), or use "
            "fewer workers, a smaller prefetch_factor or batch_size"
            % (where, _size(asked), directory))


def _size(n):
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024.0


class PrefetchTimeout(TimeoutError):
    """No batch arrived within the Prefetcher's ``timeout``; the source is stalled or too slow."""
