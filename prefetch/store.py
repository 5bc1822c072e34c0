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
import json
import os
import sys
import zlib

import numpy as np
import torch

from ._engine.tree import ndarray_to_tensor
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


class StoreError(ValueError):
    """A store that cannot be opened: what is wrong, naming the store and its file."""


def crc32_of_file(path):
    """zlib.crc32 of the file's bytes, read 1 MiB at a time."""
    crc = 0
    with open(path, "rb", buffering=0) as f:
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
            until used; writing into it would fault: the mapping is read-only).
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

    def __init__(self, path, *, verify=False):
        self.path = os.fspath(path)
        check_little_endian("cannot open store %s" % self.path)
        self.header = _read_header(self.path)
        self.encoding = self.header["encoding"]
        self.count = self.header["count"]
        self.classes = self.header["classes"]
        self.skipped = self.ignored = None
        files = self.header["files"]
        for name, entry in files.items():
            self._check_file(name, entry, checksum=verify or name != "values")
        tables = {name: self._load_table(name, entry)
                  for name, entry in files.items() if name != "values"}
        values_path = os.path.join(self.path, files["values"]["file"])
        if files["values"]["bytes"]:
            # Mapped, never read here: the pages are read when a batch gathers its samples.
            self.values = ndarray_to_tensor(np.memmap(values_path, np.uint8, mode="r"), "values")
        else:  # numpy cannot map an empty file
            self.values = torch.empty(0, dtype=torch.uint8)
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

    def _check_file(self, name, entry, checksum):
        path = os.path.join(self.path, entry["file"])
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            self._fail("%s (the %s table) cannot be read: %s" % (entry["file"], name, exc.strerror or exc))
        if size != entry["bytes"]:
            self._fail("%s is %d bytes, header says %d (%s)" % (
                entry["file"], size, entry["bytes"],
                "truncated copy?" if size < entry["bytes"] else "written to after packing?"))
        if checksum:
            crc = crc32_of_file(path)
            if crc != entry["crc32"]:
                self._fail("%s has crc32 %d, header says %d (corrupt copy?)"
                           % (entry["file"], crc, entry["crc32"]))

    def _load_table(self, name, entry):
        path = os.path.join(self.path, entry["file"])
        try:
            # Loaded, not mapped: the tables are small (8 to 24 bytes a sample) and used whole.
            table = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
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
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        label = int(self.labels[i]) if self.labels is not None else None
        if self.encoding == "raw":
            return self.values[start:end].view(*self.image_sizes[i].tolist()), label
        return self.values[start:end], label

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


def open_store(path, *, verify=False):
    """Opens the store :func:`prefetch.pack` wrote at ``path`` (a directory).

    The header, its checksum, every file's size, the small tables' checksums and the offsets are
    checked always; ``verify=True`` also checks ``values.bin``'s checksum (reads it all: once
    after copying a store, say). Anything wrong raises :class:`StoreError` (a ValueError) naming
    the store, the file and what is wrong. ``values.bin`` is mapped read-only, not read.
    """
    return Store(path, verify=verify)


def _read_header(path):
    """header.json, parsed and checked: its format, version, checksum and the shape of its
    entries (so that the rest of the reader can index it without guarding every key)."""
    def fail(what):
        raise StoreError("prefetch: store %s: %s" % (path, what))

    if not os.path.isdir(path):
        fail("no such directory" if not os.path.exists(path) else "not a directory (a store is a "
             "directory holding %s, %s, ...)" % (HEADER, VALUES_FILE))
    try:
        with open(os.path.join(path, HEADER), "rb") as f:
            header = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        fail("%s cannot be read: %s" % (HEADER, exc.strerror or exc))
    except (UnicodeDecodeError, ValueError) as exc:
        fail("%s is not valid JSON (%s)" % (HEADER, exc))
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        fail("%s is not a %s header (format %r)" % (HEADER, FORMAT, found))
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
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
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
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
              and isinstance(entry.get("bytes"), int) and isinstance(entry.get("crc32"), int)
              and isinstance(entry.get("shape"), list) and isinstance(entry.get("dtype"), str))
        # A plain file name in the store's directory: a header must not point outside it.
        if not ok or os.path.basename(entry["file"]) != entry["file"] or entry["file"] in ("", ".", ".."):
            fail("%s: the entry of %r is %r, expected {file, dtype, shape, bytes, crc32} naming a "
                 "file in the store" % (HEADER, name, entry))
        try:
            np.dtype(entry["dtype"])
        except TypeError:
            fail("%s: the entry of %r has dtype %r, not a numpy dtype" % (HEADER, name, entry["dtype"]))
    values = files["values"]
    if values["dtype"] != "|u1" or values["shape"] != [values["bytes"]]:
        fail("%s: values must be |u1 [%d], the header says %s %s"
             % (HEADER, values["bytes"], values["dtype"], values["shape"]))
    return header
