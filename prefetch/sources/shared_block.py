"""Shared memory for the worker ring that does not come from ``/dev/shm``.

torch's shared tensors are files in ``/dev/shm``, a tmpfs whose size Docker sets to 64 MB unless
told otherwise: a ring of a few large batches does not fit there. A :class:`SharedBlock` is an
anonymous file from ``memfd_create`` (Linux ≥ 3.17), bounded only by memory (and the cgroup's
limit, as any memory is): mapped shared, it is inherited by forked workers as it is, and reaches
spawned or forkserver workers as a file descriptor passed by ``multiprocessing``, which they map
again. Where ``memfd_create`` is missing, the block is torch's shared memory, as before.

A block's ``tensor`` must never be pickled itself (torch would copy it into ``/dev/shm``): pickle
the block, whose reduction passes the descriptor.
"""
import mmap
import os
import weakref

import torch

__all__ = ["SharedBlock"]


def _map(fd, nbytes):
    """A uint8 tensor over the first ``nbytes`` of ``fd``, mapped shared (the mapping holds the
    file; the descriptor may be closed)."""
    view = mmap.mmap(fd, max(nbytes, 1), flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return torch.frombuffer(view, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8)


class SharedBlock:
    """``nbytes`` of zeroed memory shared with DataLoader workers, as the uint8 tensor ``tensor``.

    ``memfd`` says where it came from: True for ``memfd_create`` (not bounded by ``/dev/shm``),
    False for torch's shared memory (raises :class:`prefetch.SharedMemoryError` when ``/dev/shm``
    cannot hold it)."""

    def __init__(self, nbytes, name="prefetch-ring"):
        self.nbytes = int(nbytes)
        self._fd = None
        if hasattr(os, "memfd_create"):
            try:
                fd = os.memfd_create(name, os.MFD_CLOEXEC)
            except OSError:
                fd = None
            if fd is not None:
                try:
                    os.ftruncate(fd, max(self.nbytes, 1))
                    self.tensor = _map(fd, self.nbytes)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
                weakref.finalize(self, os.close, fd)
        if self._fd is None:
            self.tensor = _torch_shared(self.nbytes)
        self.memfd = self._fd is not None

    def __reduce__(self):
        if self._fd is None:
            return _from_tensor, (self.tensor,)
        from multiprocessing.reduction import DupFd

        return _from_fd, (DupFd(self._fd), self.nbytes)


def _torch_shared(nbytes):
    try:
        return torch.zeros(nbytes, dtype=torch.uint8).share_memory_()
    except RuntimeError as e:
        if "shared memory" not in str(e) and "No space left" not in str(e):
            raise
        from .._core.errors import SharedMemoryError, shared_memory_advice

        raise SharedMemoryError("prefetch: the worker ring's shared block could not be made (%s): %s"
                                % (e, shared_memory_advice(nbytes))) from None


def _from_tensor(tensor):
    block = SharedBlock.__new__(SharedBlock)
    block.nbytes, block._fd, block.tensor, block.memfd = tensor.numel(), None, tensor, False
    return block


def _from_fd(dup, nbytes):
    """In a spawned worker: map the descriptor the parent passed, then close it."""
    fd = dup.detach()
    block = SharedBlock.__new__(SharedBlock)
    try:
        block.tensor = _map(fd, nbytes)
    finally:
        os.close(fd)
    block.nbytes, block._fd, block.memfd = nbytes, None, True
    return block
