"""Reading and syncing a store's files safely, for the reader and the writer alike: only regular
files are ever read (a FIFO blocks a read until a writer comes, /dev/zero never ends), checksums
are computed in bounded memory, and a directory's new entries are made durable."""
import errno
import fcntl
import os
import stat
import zlib
from typing import BinaryIO, Union

from .format import CRC_CHUNK

__all__ = ["NotARegularFile", "open_regular", "crc32_of_file", "fsync_directory"]


class NotARegularFile(OSError):
    """A path that names something other than a regular file (a FIFO, a socket, a device, a
    directory): never read, since reading a FIFO blocks until a writer comes and a device such as
    /dev/zero never ends. ``strerror`` says what it is."""


# What a path is, by its st_mode's file type, for the messages.
_FILE_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFDIR: "a directory"}


def _not_regular(path, mode):
    kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file (mode %o)" % mode)
    return NotARegularFile(errno.EINVAL, "%s, not a regular file: only regular files are read"
                           % kind, path)


def open_regular(path: Union[str, bytes, os.PathLike]) -> BinaryIO:
    """Opens ``path`` for reading if it is a regular file (symlinks followed), and nothing else.

    The file is opened with ``O_NONBLOCK`` (a FIFO that appeared after the ``stat`` would
    otherwise block the open until a writer comes) and checked again with ``fstat`` on the
    descriptor: what is read is what was checked. A device is never even opened (opening some
    has side effects).

    Args:
        path: the file's path.

    Returns:
        An unbuffered binary file object (``os.fdopen(fd, "rb", buffering=0)``), reading in
        ordinary blocking mode.

    Raises:
        NotARegularFile: (an OSError) ``path`` is a FIFO, socket, device or directory; it was not
            read.
        OSError: ``path`` cannot be stat'ed or opened (ENOENT, EACCES, ELOOP for a symlink loop).
    """
    mode = os.stat(path).st_mode  # ELOOP for a symlink loop, ENOENT for a dangling link
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        # Plain blocking reads from here on (O_NONBLOCK means nothing to a regular file on
        # Linux, but a file system may honour it).
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def crc32_of_file(path_or_file: Union[str, bytes, os.PathLike, BinaryIO]) -> int:
    """zlib.crc32 of a file's bytes, read :data:`CRC_CHUNK` (1 MiB) at a time.

    Args:
        path_or_file: a path (opened with :func:`open_regular`), or a binary file object, which
            is read from its start.

    Returns:
        The checksum, an int in ``[0, 2**32)``.

    Raises:
        NotARegularFile: a path that is not a regular file.
        OSError: the file cannot be opened or read.
    """
    if isinstance(path_or_file, (str, bytes, os.PathLike)):
        with open_regular(path_or_file) as f:
            return crc32_of_file(f)
    crc = 0
    f = path_or_file
    f.seek(0)
    while True:
        block = f.read(CRC_CHUNK)
        if not block:
            return crc
        crc = zlib.crc32(block, crc)


def fsync_directory(path: Union[str, os.PathLike]) -> None:
    """Makes a directory's entries (new files, a rename) durable.

    Args:
        path: the directory.

    Raises:
        OSError: it cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
