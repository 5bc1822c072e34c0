"""Stores: a dataset of encoded images (JPEGs) packed once into one directory that is opened by
mapping it, not by reading it — the reader of the format :func:`prefetch.pack` writes.

A folder of a million JPEGs costs a ``stat``, an ``open`` and a ``read`` per image per epoch, and
a Python ``__getitem__`` to do them; a store is the same bytes, back to back in one file
(``values.bin``), with a table of where each lies (``offsets.npy``), each image's size read from
its header (``sizes.npy``) and the labels and other fixed-size fields as ``.npy`` tables. Opening
one reads the small tables and maps ``values.bin``; the images are then a
:class:`prefetch.Ragged` of 1-D uint8 samples over that mapping, which
``prefetch.ArrayLoader(store.as_arrays(), ...)`` gathers and :func:`prefetch.ops.decode_jpeg`
decodes. A store packed with ``encoding="raw"`` holds decoded pixels instead: its images are
then HWC uint8 samples (``[H, W, 3]``), which need no decode. The format is plain enough to read
with numpy alone: docs/arrays.md, "Stores".

Opening checks what is cheap to check every time (the header's checksum, every file's size, the
small tables' checksums, the offsets' order and extent), so that a truncated or corrupt copy is
refused naming the file instead of yielding wrong images; ``verify=True`` also checks
``values.bin``'s checksum, which reads all of it.
"""
import errno
import fcntl
import json
import os
import stat
import sys
import threading
import warnings
import weakref
import zlib

import numpy as np
import torch

from ._core.extension import C as _C
from ._core.tree import ndarray_to_tensor
from .errors import CollateError
from .ragged import Ragged

__all__ = ["Store", "StoreError", "open_store", "FORMAT", "VERSION", "ENCODINGS"]

FORMAT = "prefetch-store"
VERSION = 1  # the newest format version this prefetch reads and the one it writes
HEADER = "header.json"
# The tables every store has (labels and the other fields are optional), and their files.
REQUIRED = ("values", "offsets", "sizes")
VALUES_FILE = "values.bin"
# What values.bin holds: "jpeg", each sample's file as it is; "raw", each image's pixels, HWC uint8.
ENCODINGS = ("jpeg", "raw")
# With "raw", H and W are below this (so that H * W * 3 cannot overflow int64 when checked).
MAX_SIDE = 1 << 30
CRC_CHUNK = 1 << 20  # checksums are computed over 1 MiB reads: flat memory for any file size


# A class of the extension's (a ValueError): the engine's threads raise it too, for a mapped
# values.bin that changed size under them (csrc/core/collate.h, check_mapped).
StoreError = _C.StoreError
StoreError.__doc__ = ("A store that cannot be opened or read (a ValueError): what is wrong, naming "
                      "the store and its file.")


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


def open_regular(path):
    """``path`` opened for reading (an unbuffered binary file object) if it is a regular file,
    symlinks followed. Anything else raises :class:`NotARegularFile` (an OSError) without being
    read; a path that cannot be opened raises the open's OSError. The file is opened with
    ``O_NONBLOCK`` (a FIFO that appeared after the ``stat`` would otherwise block the open until a
    writer comes) and checked again with ``fstat`` on the descriptor: what is read is what was
    checked. A device is never even opened (opening some has side effects)."""
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


def crc32_of_file(path_or_file):
    """zlib.crc32 of the file's bytes (a path, or a file object read from its start), read 1 MiB
    at a time."""
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


def header_crc32(header):
    """The checksum ``header["header_crc32"]`` holds: zlib.crc32 of the header without that key,
    as canonical JSON (sorted keys, no spaces), so that the file's own layout does not matter."""
    rest = {k: v for k, v in header.items() if k != "header_crc32"}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


class MappedFile:
    """A store's ``values.bin`` while it is mapped: the open file (the very inode mapped) and its
    size when it was mapped. A mapped file cut shorter while it is read (``cp`` or ``rsync
    --inplace`` over a store in use) makes every read past its new end fault: SIGBUS, the process
    dies. :meth:`check` is what readers call before each batch's reads."""

    __slots__ = ("file", "path", "size", "__weakref__")

    def __init__(self, file, path, size):
        self.file, self.path, self.size = file, path, size

    def leaf_guard(self):
        """A :class:`MappedGuard` ``(fd, size, path)``: a :class:`prefetch._engine.tree.Leaf`'s
        ``mapped``, which the engine checks as :meth:`check` does, once it has room for the
        batch and right before its threads read the mapping."""
        return MappedGuard((self.file.fileno(), self.size, self.path))

    def check(self):
        """Raises :class:`StoreError` naming the file, the size it was mapped with and its size
        now, unless they are equal. One ``fstat`` (a microsecond or two). A truncation after this
        check and before the read still faults: docs/reliability.md, "Stores"."""
        try:
            fd = self.file.fileno()
        except ValueError as exc:  # closed: the mapping is gone too
            raise StoreError("prefetch: store file %s cannot be checked: %s" % (self.path, exc)) from None
        check_file_size(fd, self.size, self.path)


class MappedGuard(tuple):
    """``(fd, size, path)`` of a mapped values.bin, as a Leaf carries it to the engine (which reads
    it as a tuple); :meth:`check` is the same check for Python readers of the leaf."""

    __slots__ = ()

    def check(self):
        check_file_size(*self)


def check_file_size(fd, size, path):
    """Raises :class:`StoreError` unless the open file ``fd`` (mapped from ``path``) is still
    ``size`` bytes. The engine's check (csrc/core/collate.cpp, check_mapped) says the same."""
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


def _map(tensor, array, file, path, size):
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


def mapped_files(tensors):
    """The distinct :class:`MappedFile` that ``tensors`` read (their ``check()`` is what a
    reader calls before each batch's reads)."""
    out = []
    for t in tensors:
        m = mapped_file(t)
        if m is not None and all(m is not o for o in out):
            out.append(m)
    return out


def mapped_file(tensor):
    """The :class:`MappedFile` whose mapping ``tensor`` (or any view of it) reads — a store's
    ``values`` — or None."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or not _MAPPED:
        return None
    try:
        key = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no ordinary storage: nothing mapped
        return None
    return _MAPPED.get(key)


def check_little_endian(what):
    """Stores are little-endian; a big-endian host is refused in one line rather than having its
    tables byte-swapped silently (nothing tests that path)."""
    if sys.byteorder != "little":
        raise StoreError("prefetch: %s: stores are little-endian and this host is %s-endian"
                         % (what, sys.byteorder))


class Store:
    """A packed store of images, opened (see :func:`open_store`).

    Attributes:
        path: the store's directory.
        count: the number of samples (also ``len(store)``).
        classes: the class names (labels index them), or None.
        header: ``header.json`` as a dict.
        encoding: what the samples are: ``"jpeg"``, each image's file as it was; ``"raw"``, each
            image's pixels, HWC uint8 (``pack(..., encoding="raw")``).
        values: 1-D uint8 tensor over the read-only mapping of ``values.bin`` (nothing is read
            until used; writing into it would fault: the mapping is read-only), or with
            ``in_memory=True`` its bytes read into memory.
        offsets: int64 ``[N + 1]``: sample ``i`` is ``values[offsets[i]:offsets[i + 1]]``.
        image_sizes: int64 ``[N, 3]``: each image's (height, width, 3), from its JPEG header
            ("jpeg") or its decoded pixels ("raw").
        labels: int64 ``[N]``, or None when the store has no labels.
        fields: the other fixed-size fields, name -> tensor ``[N, ...]``, in the header's order.
        images: a :class:`prefetch.Ragged` of the ``N`` images sharing ``values``: 1-D uint8
            samples (the encoded bytes) for "jpeg", ``[H, W, 3]`` uint8 samples (the pixels)
            for "raw" — what :class:`prefetch.FusedAugment` takes without ``decode``.
        skipped: on the store :func:`prefetch.pack` returns, the ``(name, reason)`` of each
            sample it left out with ``on_error="skip"``; None on a store opened later (the
            header keeps the count: ``header["skipped"]``).
        ignored: on the store :func:`prefetch.pack` returns from a directory, the paths of the
            files it did not take for their names (not ``*.jpg``...); None on a store opened
            later.
    """

    def __init__(self, path, *, verify=False, in_memory=False):
        self.path = os.fspath(path)
        check_little_endian("cannot open store %s" % self.path)
        self.header = _read_header(self.path)
        self.encoding = self.header["encoding"]
        self.count = self.header["count"]
        self.classes = self.header["classes"]
        self.skipped = self.ignored = None
        self._mapped = None
        files = self.header["files"]
        tables, values_file = {}, None
        try:
            # Each file opened once (a regular file, or refused by name without being read): its
            # size, checksum and contents are all read from that one descriptor.
            for name, entry in files.items():
                f = self._open_checked(name, entry, checksum=verify or name != "values")
                if name == "values":
                    values_file = f
                    continue
                with f:
                    tables[name] = self._load_table(name, entry, f)
            size = files["values"]["bytes"]
            if size and in_memory:
                # Read, not mapped: what happens to the file afterwards cannot fault a reader.
                array = np.empty(size, np.uint8)
                self._read_values(values_file, array, files["values"]["file"])
                values_file.close()
                self.values = torch.from_numpy(array)
            elif size:
                # Mapped, never read here: the pages are read when a batch gathers its samples.
                # The file stays open while mapped: each batch's reads first check its size
                # (MappedFile.check), since pages past a truncated end fault with SIGBUS.
                array = np.memmap(values_file, np.uint8, mode="r", shape=(size,))
                self.values = ndarray_to_tensor(array, "values")
                self._mapped = _map(self.values, array, values_file,
                                    os.path.join(self.path, files["values"]["file"]), size)
            else:  # numpy cannot map an empty file
                values_file.close()
                self.values = torch.empty(0, dtype=torch.uint8)
        except BaseException:
            if values_file is not None and self._mapped is None:
                values_file.close()
            raise
        self._check_offsets(tables["offsets"])
        if self.encoding == "raw":
            self._check_raw_sizes(tables["offsets"], tables["sizes"])
        self._check_labels(tables.get("labels"))
        as_tensor = {name: ndarray_to_tensor(t, name) for name, t in tables.items()}
        self.offsets = as_tensor.pop("offsets")
        self.image_sizes = as_tensor.pop("sizes")
        self.labels = as_tensor.pop("labels", None)
        self.fields = as_tensor  # the rest, in the header's order
        if self.encoding == "raw":  # the pixels: each sample [H, W, 3], as sizes says
            self.images = Ragged(self.values, self.offsets[:-1], self.image_sizes)
        else:  # the files' bytes: each sample 1-D
            lengths = self.offsets[1:] - self.offsets[:-1]
            self.images = Ragged(self.values, self.offsets[:-1], lengths.view(-1, 1))

    # -- checks ----------------------------------------------------------------------------------

    def _fail(self, what):
        raise StoreError("prefetch: store %s: %s" % (self.path, what))

    def _read_values(self, f, array, file):
        view = memoryview(array)
        f.seek(0)
        done = 0
        try:
            while done < len(view):
                n = f.readinto(view[done:done + CRC_CHUNK * 64])
                if not n:
                    self._fail("%s ended after %d bytes of %d while it was read (truncated "
                               "meanwhile?)" % (file, done, len(view)))
                done += n
        except OSError as exc:
            self._fail("%s cannot be read: %s" % (file, exc.strerror or exc))

    def _open_checked(self, name, entry, checksum):
        """The entry's file, open, its size (and with ``checksum`` its crc32) checked against
        the header."""
        path = os.path.join(self.path, entry["file"])
        try:
            f = open_regular(path)
        except OSError as exc:
            self._fail("%s (the %s table) cannot be read: %s" % (entry["file"], name, exc.strerror or exc))
        try:
            size = os.fstat(f.fileno()).st_size
            if size != entry["bytes"]:
                self._fail("%s is %d bytes, header says %d (%s)" % (
                    entry["file"], size, entry["bytes"],
                    "truncated copy?" if size < entry["bytes"] else "written to after packing?"))
            if checksum:
                try:
                    crc = crc32_of_file(f)
                except OSError as exc:
                    self._fail("%s (the %s table) cannot be read: %s"
                               % (entry["file"], name, exc.strerror or exc))
                if crc != entry["crc32"]:
                    self._fail("%s has crc32 %d, header says %d (corrupt copy?)"
                               % (entry["file"], crc, entry["crc32"]))
        except BaseException:
            f.close()
            raise
        return f

    def _load_table(self, name, entry, f):
        try:
            # Loaded, not mapped: the tables are small (8 to 24 bytes a sample) and used whole.
            # read_array, not np.load: a .npy and nothing else (np.load would open a zip as an
            # NpzFile), from the descriptor that was checked.
            f.seek(0)
            table = np.lib.format.read_array(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            self._fail("%s (the %s table) is not a readable .npy file: %s" % (entry["file"], name, exc))
        dtype, shape = np.dtype(entry["dtype"]), list(entry["shape"])
        if table.dtype != dtype or list(table.shape) != shape:
            self._fail("%s holds %s %s, header says %s %s" % (
                entry["file"], table.dtype.str, list(table.shape), dtype.str, shape))
        expected = {"offsets": ("<i8", [self.count + 1]), "sizes": ("<i8", [self.count, 3]),
                    "labels": ("<i8", [self.count])}.get(name)
        if expected is not None and (dtype.str, shape) != expected:
            self._fail("%s must be %s %s for %d samples, it is %s %s"
                       % (entry["file"], expected[0], expected[1], self.count, dtype.str, shape))
        if expected is None and shape[:1] != [self.count]:
            self._fail("%s (field %r) has %s rows, expected one per sample: %d"
                       % (entry["file"], name, shape[:1] or "no", self.count))
        if expected is None:
            try:  # a dtype torch has (not datetime64, strings, structured...): as the loader needs
                ndarray_to_tensor(table[:0], name)
            except CollateError:
                self._fail("%s (field %r) holds %s, which has no torch dtype"
                           % (entry["file"], name, table.dtype.str))
        return table

    def _check_offsets(self, offsets):
        size = int(self.values.numel())
        if offsets[0] != 0:
            self._fail("offsets.npy starts at %d, expected 0" % offsets[0])
        steps = np.diff(offsets)
        if (steps < 0).any():
            i = int(np.flatnonzero(steps < 0)[0])
            self._fail("offsets.npy decreases at sample %d (offsets[%d] = %d > offsets[%d] = %d)"
                       % (i, i, offsets[i], i + 1, offsets[i + 1]))
        if offsets[-1] != size:
            self._fail("offsets.npy ends at %d but values.bin is %d bytes" % (offsets[-1], size))

    def _check_raw_sizes(self, offsets, sizes):
        """A raw store's sample ``i`` is its ``H * W * 3`` pixels: checked for every sample at
        once, so that a wrong table is refused rather than yielding shifted images."""
        bad = (sizes[:, 2] != 3) | (sizes[:, :2] < 0).any(axis=1) | (sizes[:, :2] >= MAX_SIDE).any(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._fail("sizes.npy: sample %d has size %s, expected (height, width, 3) of pixels"
                       % (i, sizes[i].tolist()))
        expected = sizes[:, 0] * sizes[:, 1] * 3
        bad = np.diff(offsets) != expected
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            h, w = sizes[i, :2].tolist()
            self._fail("offsets.npy gives sample %d %d bytes, but sizes.npy says it is %d x %d x 3 "
                       "= %d bytes of pixels" % (i, offsets[i + 1] - offsets[i], h, w, expected[i]))

    def _check_labels(self, labels):
        if labels is None or self.classes is None or not len(labels):
            return
        bad = (labels < 0) | (labels >= len(self.classes))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._fail("labels.npy: sample %d has label %d, outside the %d classes"
                       % (i, labels[i], len(self.classes)))

    # -- access ----------------------------------------------------------------------------------

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        """``(sample i, label or None)``: its bytes as a 1-D uint8 tensor view of values
        ("jpeg"), or its pixels as an ``[H, W, 3]`` uint8 view ("raw")."""
        try:
            i = int(i.__index__())
        except AttributeError:
            raise TypeError("prefetch: a Store is indexed by an int, got %s" % type(i).__name__) from None
        if not -self.count <= i < self.count:
            raise IndexError("prefetch: sample %d of a store of %d" % (i, self.count))
        i %= self.count
        self.check_values_file()
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        label = int(self.labels[i]) if self.labels is not None else None
        if self.encoding == "raw":
            return self.values[start:end].view(*self.image_sizes[i].tolist()), label
        return self.values[start:end], label

    def check_values_file(self):
        """Raises :class:`StoreError` if ``values.bin`` changed size since the store was opened
        (truncated or rewritten in place: reading it could kill the process with SIGBUS). The
        ArrayLoader calls it before each batch, ``store[i]`` before each sample; a reader of
        ``values`` through another path may call it before its reads."""
        if self._mapped is not None:
            self._mapped.check()

    def as_arrays(self):
        """``(images, labels, *fields)`` — labels left out when the store has none, fields in
        the header's order: what ``prefetch.ArrayLoader(store.as_arrays(), ...)`` takes."""
        out = [self.images]
        if self.labels is not None:
            out.append(self.labels)
        return tuple(out + list(self.fields.values()))

    def __repr__(self):
        what = "%d JPEGs" % self.count if self.encoding == "jpeg" else "%d raw images" % self.count
        parts = [what, "%.1f MB" % (self.values.numel() / 1e6)]
        if self.classes is not None:
            parts.append("%d classes" % len(self.classes))
        elif self.labels is not None:
            parts.append("labels")
        if self.fields:
            parts.append("fields: %s" % ", ".join(self.fields))
        return "Store(%r, %s)" % (self.path, ", ".join(parts))


def open_store(path, *, verify=False, in_memory=False):
    """Opens the store :func:`prefetch.pack` wrote at ``path`` (a directory).

    The header, its checksum, every file's size, the small tables' checksums and the offsets are
    checked always; ``verify=True`` also checks ``values.bin``'s checksum (reads it all: once
    after copying a store, say). Anything wrong raises :class:`StoreError` (a ValueError) naming
    the store, the file and what is wrong. Only regular files are read (symlinks to them too): a
    FIFO, socket, device or directory in a file's place is refused by name, never read.

    ``values.bin`` is mapped read-only, not read. A mapped file cut shorter while it is read (a
    ``cp`` or ``rsync --inplace`` over a store in use) would fault its reader (SIGBUS): its size is
    checked before each batch's reads (and each ``store[i]``), raising :class:`StoreError` naming
    it; a cut during the reads themselves still faults (docs/reliability.md, "Stores").
    ``in_memory=True`` reads ``values.bin`` into memory instead (its size in RAM): nothing done
    to the file afterwards can then fault a reader.
    """
    return Store(path, verify=verify, in_memory=in_memory)


def _read_header(path):
    """header.json, parsed and checked: its format, version, checksum and the shape of its
    entries (so that the rest of the reader can index it without guarding every key)."""
    def fail(what):
        raise StoreError("prefetch: store %s: %s" % (path, what))

    if not os.path.isdir(path):
        fail("no such directory" if not os.path.exists(path) else "not a directory (a store is a "
             "directory holding %s, %s, ...)" % (HEADER, VALUES_FILE))
    try:
        with open_regular(os.path.join(path, HEADER)) as f:
            header = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        fail("%s cannot be read: %s" % (HEADER, exc.strerror or exc))
    except (UnicodeDecodeError, ValueError) as exc:
        fail("%s is not valid JSON (%s)" % (HEADER, exc))
    except RecursionError:
        fail("%s nests its values deeper than Python's recursion limit (%d): not a %s header"
             % (HEADER, sys.getrecursionlimit(), FORMAT))
    try:
        return _check_header(header, fail)
    except RecursionError:  # a header_crc32 over values nested just below the parser's limit
        fail("%s nests its values deeper than Python's recursion limit (%d): not a %s header"
             % (HEADER, sys.getrecursionlimit(), FORMAT))


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _plain_file_name(name):
    """A name of a file in the store's directory itself: not empty, no directory part, no NUL,
    encodable as a file name (json can hold lone surrogates that no file name can)."""
    if name in ("", ".", "..") or os.path.basename(name) != name or "\0" in name:
        return False
    try:
        os.fsencode(name)
    except UnicodeError:
        return False
    return True


def _check_header(header, fail):
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        fail("%s is not a %s header (format %r)" % (HEADER, FORMAT, found))
    version = header.get("version")
    if not _is_int(version) or version < 1:
        fail("%s has version %r, expected an int >= 1" % (HEADER, version))
    if version > VERSION:
        from . import __version__

        fail("written in store format version %d; this prefetch (%s) reads version %d: a newer "
             "prefetch reads it" % (version, __version__, VERSION))
    if header.get("header_crc32") != header_crc32(header):
        fail("%s has checksum %d, header_crc32 says %r (edited or corrupt?)"
             % (HEADER, header_crc32(header), header.get("header_crc32")))
    if header.get("byteorder") != "little":
        fail("%s says byteorder %r; this prefetch reads little-endian stores"
             % (HEADER, header.get("byteorder")))
    encoding = header.get("encoding")
    if not isinstance(encoding, str) or encoding not in ENCODINGS:
        fail("%s says encoding %r, which this prefetch does not know: it reads %s"
             % (HEADER, encoding, " and ".join(map(repr, ENCODINGS))))
    count = header.get("count")
    if not _is_int(count) or count < 0:
        fail("%s has count %r, expected an int >= 0" % (HEADER, count))
    classes = header.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        fail("%s has classes %r, expected a list of names or null" % (HEADER, classes))
    files = header.get("files")
    if not isinstance(files, dict) or any(name not in files for name in REQUIRED):
        fail("%s lists files %r, expected at least %s" % (
            HEADER, sorted(files) if isinstance(files, dict) else files, ", ".join(REQUIRED)))
    for name, entry in files.items():
        ok = (isinstance(entry, dict) and isinstance(entry.get("file"), str)
              and _is_int(entry.get("bytes")) and _is_int(entry.get("crc32"))
              and isinstance(entry.get("shape"), list) and isinstance(entry.get("dtype"), str))
        # A plain file name in the store's directory: a header must not point outside it.
        if not ok or not _plain_file_name(entry["file"]):
            fail("%s: the entry of %r is %r, expected {file, dtype, shape, bytes, crc32} naming a "
                 "file in the store" % (HEADER, name, entry))
        if not all(_is_int(d) and d >= 0 for d in entry["shape"]):
            fail("%s: the entry of %r has shape %r, expected a list of ints >= 0"
                 % (HEADER, name, entry["shape"]))
        try:
            with warnings.catch_warnings():  # a deprecated spelling is refused, not warned about
                warnings.simplefilter("error")
                np.dtype(entry["dtype"])
        except (TypeError, ValueError, SyntaxError, Warning) as exc:
            fail("%s: the entry of %r has dtype %r, not a numpy dtype (%s)"
                 % (HEADER, name, entry["dtype"], exc))
    values = files["values"]
    if values["dtype"] != "|u1" or values["shape"] != [values["bytes"]]:
        fail("%s: values must be |u1 [%d], the header says %s %s"
             % (HEADER, values["bytes"], values["dtype"], values["shape"]))
    return header
