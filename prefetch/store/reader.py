"""The store's reader: :func:`open_store` opens a store directory by mapping it, not by reading
it, and :class:`Store` hands its images, labels and fields to a loader.

A folder of a million JPEGs costs a ``stat``, an ``open`` and a ``read`` per image per epoch, and
a Python ``__getitem__`` to do them; a store is the same bytes, back to back in one file
(``values.bin``), with a table of where each lies (``offsets.npy``), each image's size read from
its header (``sizes.npy``) and the labels and other fixed-size fields as ``.npy`` tables
(:mod:`prefetch.store.format`). Opening one reads the small tables and maps ``values.bin``; the
images are then a :class:`prefetch.Ragged` of 1-D uint8 samples over that mapping, which
``prefetch.ArrayLoader(store.as_arrays(), ...)`` gathers and :func:`prefetch.ops.decode_jpeg`
decodes. A store packed with ``encoding="raw"`` holds decoded pixels instead: its images are
then HWC uint8 samples (``[H, W, 3]``), which need no decode. The format is plain enough to read
with numpy alone: docs/arrays.md, "Stores".

Opening checks what is cheap to check every time (the header's checksum, every file's size, the
small tables' checksums, the offsets' order and extent), so that a truncated or corrupt copy is
refused naming the file instead of yielding wrong images; ``verify=True`` also checks
``values.bin``'s checksum, which reads all of it.
"""
import json
import os
import sys
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch

from .._core.tree import ndarray_to_tensor
from .._core.errors import CollateError
from .._core.ragged import Ragged
from .files import crc32_of_file, open_regular
from .format import (CRC_CHUNK, FORMAT, HEADER, MAX_SIDE, VALUES_FILE, StoreError,
                     check_header, check_little_endian)
from .mapped import register_mapping

__all__ = ["Store", "open_store"]


class Store:
    """A packed store of images, opened: :func:`open_store` is the usual way to make one.

    Args:
        path: the store's directory.
        verify: also check ``values.bin``'s checksum (reads all of it).
        in_memory: read ``values.bin`` into memory instead of mapping it.

    Raises:
        StoreError: (a ValueError) anything wrong with the store, naming it, the file and what is
            wrong; also a big-endian host.

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

    def __init__(self, path: Union[str, os.PathLike], *, verify: bool = False,
                 in_memory: bool = False):
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
                self._mapped = register_mapping(self.values, array, values_file,
                                                os.path.join(self.path, files["values"]["file"]),
                                                size)
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

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, Optional[int]]:
        """Sample ``i`` and its label.

        Args:
            i: an index in ``[-len(store), len(store))`` (anything with ``__index__``).

        Returns:
            ``(sample, label or None)``: the sample is a view of ``values``, its bytes as a 1-D
            uint8 tensor ``[nbytes]`` ("jpeg") or its pixels as a uint8 tensor ``[H, W, 3]``
            ("raw").

        Raises:
            TypeError: ``i`` is not an int.
            IndexError: ``i`` is out of range.
            StoreError: ``values.bin`` changed size since it was opened.
        """
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

    def check_values_file(self) -> None:
        """Checks that ``values.bin`` has the size it was opened with. The ArrayLoader calls it
        before each batch, ``store[i]`` before each sample; a reader of ``values`` through another
        path may call it before its reads. Nothing to check for a store read ``in_memory``.

        Raises:
            StoreError: ``values.bin`` was truncated or rewritten in place since the store was
                opened (reading it could kill the process with SIGBUS).
        """
        if self._mapped is not None:
            self._mapped.check()

    def as_arrays(self) -> Tuple[Any, ...]:
        """What ``prefetch.ArrayLoader(store.as_arrays(), ...)`` takes.

        Returns:
            ``(images, labels, *fields)``: ``images`` a :class:`prefetch.Ragged` of ``N`` samples,
            ``labels`` int64 ``[N]`` (left out when the store has none), each field a tensor
            ``[N, ...]``, in the header's order.
        """
        out = [self.images]
        if self.labels is not None:
            out.append(self.labels)
        return tuple(out + list(self.fields.values()))

    def __repr__(self) -> str:
        what = "%d JPEGs" % self.count if self.encoding == "jpeg" else "%d raw images" % self.count
        parts = [what, "%.1f MB" % (self.values.numel() / 1e6)]
        if self.classes is not None:
            parts.append("%d classes" % len(self.classes))
        elif self.labels is not None:
            parts.append("labels")
        if self.fields:
            parts.append("fields: %s" % ", ".join(self.fields))
        return "Store(%r, %s)" % (self.path, ", ".join(parts))


def open_store(path: Union[str, os.PathLike], *, verify: bool = False,
               in_memory: bool = False) -> Store:
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

    Args:
        path: the store's directory.
        verify: also check ``values.bin``'s checksum (reads all of it).
        in_memory: read ``values.bin`` into memory rather than mapping it.

    Returns:
        The :class:`Store`: ``images`` (a :class:`prefetch.Ragged` of ``N`` samples: 1-D uint8
        encoded bytes, or ``[H, W, 3]`` uint8 pixels for a raw store), ``labels`` (int64 ``[N]``
        or None), ``fields`` and the rest.

    Raises:
        StoreError: (a ValueError) the store cannot be opened: the message names the store, the
            file and what is wrong (a missing or non-regular file, a wrong size or checksum, a
            table of the wrong dtype or shape, offsets out of order, a newer format version).
    """
    return Store(path, verify=verify, in_memory=in_memory)


def _read_header(path: str) -> Dict[str, Any]:
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
        return check_header(header, fail)
    except RecursionError:  # a header_crc32 over values nested just below the parser's limit
        fail("%s nests its values deeper than Python's recursion limit (%d): not a %s header"
             % (HEADER, sys.getrecursionlimit(), FORMAT))
