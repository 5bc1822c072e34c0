"""The guard of a mapped ``values.bin``: a mapped file cut shorter while it is read (``cp`` or
``rsync --inplace`` over a store in use) makes every read past its new end fault with SIGBUS and
the process dies, so each reader checks the file's size before its reads.

The reader registers each mapping here by its address; a loader given only the tensors
(``store.as_arrays()``) finds the file to check with :func:`mapped_file`, and the engine checks
the ``(fd, size, path)`` a :class:`MappedGuard` carries (csrc/core/collate.cpp, check_mapped).
"""
import io
import os
import threading
import weakref
from typing import Iterable, List, Optional

import numpy as np
import torch

from .format import StoreError

__all__ = ["MappedFile", "MappedGuard", "check_file_size", "mapped_file", "mapped_files",
           "register_mapping"]


class MappedFile:
    """A store's ``values.bin`` while it is mapped: the open file (the very inode mapped) and its
    size when it was mapped. :meth:`check` is what readers call before each batch's reads.

    Args:
        file: the open file the mapping was made from; it stays open while mapped.
        path: its path, for the messages.
        size: its size in bytes when it was mapped.
    """

    __slots__ = ("file", "path", "size", "__weakref__")

    def __init__(self, file: io.RawIOBase, path: str, size: int):
        self.file, self.path, self.size = file, path, size

    def leaf_guard(self) -> "MappedGuard":
        """The guard a :class:`prefetch._core.tree.Leaf` carries as its ``mapped``, which the
        engine checks as :meth:`check` does, once it has room for the batch and right before its
        threads read the mapping.

        Returns:
            ``MappedGuard((fd, size, path))``.
        """
        return MappedGuard((self.file.fileno(), self.size, self.path))

    def check(self) -> None:
        """Checks that the file still has the size it was mapped with: one ``fstat`` (a
        microsecond or two). A truncation after this check and before the read still faults:
        docs/reliability.md, "Stores".

        Raises:
            StoreError: the file is closed, cannot be stat'ed, or has another size now (the
                message names it, the size it was mapped with and its size now).
        """
        try:
            fd = self.file.fileno()
        except ValueError as exc:  # closed: the mapping is gone too
            raise StoreError("prefetch: store file %s cannot be checked: %s" % (self.path, exc)) from None
        check_file_size(fd, self.size, self.path)


class MappedGuard(tuple):
    """``(fd, size, path)`` of a mapped values.bin, as a Leaf carries it to the engine (which reads
    it as a tuple); :meth:`check` is the same check for Python readers of the leaf."""

    __slots__ = ()

    def check(self) -> None:
        """The check :meth:`MappedFile.check` makes, on the tuple's ``(fd, size, path)``.

        Raises:
            StoreError: as :func:`check_file_size`.
        """
        check_file_size(*self)


def check_file_size(fd: int, size: int, path: str) -> None:
    """Checks that an open, mapped file still has the size it was mapped with. The engine's check
    (csrc/core/collate.cpp, check_mapped) says the same.

    Args:
        fd: the file's descriptor.
        size: its size in bytes when it was mapped.
        path: its path, for the message.

    Raises:
        StoreError: ``fstat`` fails, or the file is now truncated or grown (reading it could kill
            the process with SIGBUS, so nothing more is read from it).
    """
    try:
        now = os.fstat(fd).st_size
    except OSError as exc:
        raise StoreError("prefetch: store file %s cannot be checked before reading it: %s"
                         % (path, exc.strerror or exc)) from None
    if now != size:
        raise StoreError(
            "prefetch: store file %s is %d bytes now, %d when it was opened: it was %s while "
            "mapped (a cp or rsync --inplace over a store in use?); reading it could kill the "
            "process (SIGBUS), so nothing more is read from it. Open the store again once it is "
            "whole; to replace a store in use, write the new one beside it and rename it into "
            "place (prefetch.pack does)" % (path, now, size, "truncated" if now < size else "rewritten"))


# The mapped values files by the address of their mapping (a tensor's storage data_ptr), so that
# a loader given only the tensors (store.as_arrays()) finds the file to check. An entry lives as
# long as the mapping: it is removed, and the file closed, when the mapped ndarray is freed.
_MAPPED = {}
_MAPPED_LOCK = threading.Lock()


def register_mapping(tensor: torch.Tensor, array: np.memmap, file: io.RawIOBase, path: str,
                     size: int) -> MappedFile:
    """Registers a new mapping, so that :func:`mapped_file` finds it from ``tensor`` or any view.

    Args:
        tensor: the 1-D uint8 tensor over the mapping (``[size]``).
        array: the mapping itself; when it is freed the entry is removed and ``file`` closed.
        file: the open file mapped.
        path: its path, for the messages.
        size: its size in bytes when mapped.

    Returns:
        The :class:`MappedFile` registered.
    """
    mapped = MappedFile(file, path, size)
    key = tensor.untyped_storage().data_ptr()
    with _MAPPED_LOCK:
        _MAPPED[key] = mapped
    weakref.finalize(array, _unmap, key, mapped)
    return mapped


def _unmap(key, mapped):
    with _MAPPED_LOCK:
        if _MAPPED.get(key) is mapped:
            del _MAPPED[key]
    mapped.file.close()


def mapped_files(tensors: Iterable[torch.Tensor]) -> List[MappedFile]:
    """The distinct mapped files that ``tensors`` read.

    Args:
        tensors: any objects; those that are CPU tensors over a store's mapping count.

    Returns:
        Each :class:`MappedFile` once, in the order first met (their ``check()`` is what a reader
        calls before each batch's reads).
    """
    out = []
    for t in tensors:
        m = mapped_file(t)
        if m is not None and all(m is not o for o in out):
            out.append(m)
    return out


def mapped_file(tensor: object) -> Optional[MappedFile]:
    """The mapped file whose mapping ``tensor`` (or any view of it) reads: a store's ``values``.

    Args:
        tensor: anything; only a CPU tensor can be over a mapping.

    Returns:
        Its :class:`MappedFile`, or None.
    """
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or not _MAPPED:
        return None
    try:
        key = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no ordinary storage: nothing mapped
        return None
    return _MAPPED.get(key)
