"""Building one store's files: each chunk of loaded samples checked (a JPEG's header parsed, a
label an int64, a field the shape and dtype of the first sample's), its bytes appended to
``values.bin`` and its rows to the tables, then the tables and the header written in the format
of :mod:`prefetch.store.format` and synced.

The directory written here is the writer's temporary one: :func:`prefetch.store.writer.pack`
renames it into place once :meth:`StoreBuilder.finish` returns.
"""
import errno
import io
import os
import zlib
from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from .._core.samples_to_tensors import INT64, show_int
from .._core.tree import ndarray_to_tensor
from .._core.errors import CollateError
from ..ops.decode import jpeg_sizes
from .._core.ragged import Ragged
from .files import fsync_directory
from .format import FORMAT, HEADER, RESERVED, VALUES_FILE, VERSION, header_crc32, header_text
from .inputs import Refused, a_type

__all__ = ["StoreBuilder"]

# Every JPEG starts with the SOI marker: a cheap first check, and the message can then show what
# the file starts with instead (b'\x89PNG', b'<html>').
JPEG_START = b"\xff\xd8"


class _Table:
    """A growing array of rows ``[n, *row_shape]`` (capacity doubled as needed): the per-sample
    tables stay in memory, 8 to 24 bytes a sample, while the bytes go to disk."""

    def __init__(self, dtype, row_shape):
        self.data = np.empty((1024,) + tuple(row_shape), dtype)
        self.n = 0

    def extend(self, rows):
        need = self.n + len(rows)
        if need > len(self.data):
            grown = np.empty((max(need, 2 * len(self.data)),) + self.data.shape[1:], self.data.dtype)
            grown[:self.n] = self.data[:self.n]
            self.data = grown
        self.data[self.n:need] = rows
        self.n = need

    def array(self):
        return self.data[:self.n]


class StoreBuilder:
    """Builds one store's files in a directory, a chunk of samples at a time: checks each sample,
    appends the kept ones' bytes to ``values.bin``, grows the tables in memory, and at
    :meth:`finish` writes the tables and the header and syncs them.

    Args:
        directory: an empty directory to write into (the writer's temporary one).
        on_error: ``"raise"`` or ``"skip"``: what a sample that cannot be packed does.
        encoding: ``"jpeg"`` (the bytes are JPEG files, checked) or ``"raw"`` (the samples are
            decoded pixels, HWC uint8).

    Raises:
        OSError: ``values.bin`` cannot be created.

    Attributes:
        count: the samples written so far.
        skipped: ``(name, reason)`` of each sample left out (``on_error="skip"``).
        last_bytes: the bytes the last :meth:`add` wrote (for the progress line).
    """

    def __init__(self, directory: str, on_error: str, encoding: str):
        self.directory, self.on_error, self.encoding = directory, on_error, encoding
        self.values = open(os.path.join(directory, VALUES_FILE), "wb", buffering=0)
        self.values_crc = 0
        self.offsets = _Table(np.int64, ())
        self.offsets.extend(np.zeros(1, np.int64))
        self.sizes = _Table(np.int64, (3,))
        self.labels = None
        self.has_labels = None  # decided by the first sample kept
        self.fields = None  # name -> (dtype, shape, _Table), decided by the first sample kept
        self.count = 0
        self.skipped = []
        self.last_bytes = 0

    def refuse(self, item: Any, reason: str) -> None:
        """Refuses a sample: raises, or with ``on_error="skip"`` lists it in :attr:`skipped`.

        Raises:
            ValueError: ``on_error="raise"``; the message names the sample and the reason.
        """
        if self.on_error == "raise":
            raise ValueError("prefetch: pack: %s: %s" % (item.name, reason))
        self.skipped.append((item.name, reason))

    def add(self, items: Sequence[Any], datas: Sequence[Any]) -> None:
        """Checks and writes one chunk.

        Args:
            items: the chunk's items (their name, label and fields).
            datas: ``datas[k]`` is item k's bytes (with encoding "raw": its pixels, uint8
                ``[H, W, 3]``, or a :class:`Refused` saying why they cannot be packed), or the
                OSError that reading it raised.

        Raises:
            ValueError: with ``on_error="raise"``, the first sample that cannot be packed (in the
                samples' order); whatever the mode, a label or field unlike the first sample's.
            TypeError: a label that is no int, a field that is no number.
            OSError: writing ``values.bin`` failed (its message names the file).
        """
        self.last_bytes = 0
        # What is wrong with which sample, refused in the samples' order once all are checked
        # (the first one raises with on_error="raise", whichever check found it).
        reasons = {}
        for k, data in enumerate(datas):
            if isinstance(data, OSError):
                reasons[k] = "cannot be read: %s" % (data.strerror or data)
            elif isinstance(data, Refused):
                reasons[k] = data.reason
            elif self.encoding == "jpeg" and (len(data) < 2 or bytes(data[:2]) != JPEG_START):
                reasons[k] = "not a JPEG (%s)" % ("empty: 0 bytes" if not len(data) else
                                                  "starts with %r" % bytes(data[:8]))
        kept = [k for k in range(len(items)) if k not in reasons]
        sizes = blob = None
        if kept and self.encoding == "raw":  # the pixels, HWC: their shapes are the sizes
            buffers = [datas[k] for k in kept]
            blob, lengths = _join(buffers)
            sizes = np.array([p.shape for p in buffers], np.int64).reshape(len(buffers), 3)
        elif kept:
            buffers = [datas[k] for k in kept]
            blob, lengths = _join(buffers)
            sizes = self._header_sizes(blob, lengths)
            if sizes is None:  # some header is broken: find which, one by one (the rare path)
                reasons.update((k, r) for k, r in ((k, _header_problem(datas[k])) for k in kept) if r)
                kept = [k for k in kept if k not in reasons]
                buffers = [datas[k] for k in kept]
                blob, lengths = _join(buffers) if kept else (None, None)
                sizes = self._header_sizes(blob, lengths) if kept else None
        for k in sorted(reasons):
            self.refuse(items[k], reasons[k])
        if not kept:
            return
        kept = [items[k] for k in kept]
        del buffers  # the chunk's files are in blob now
        labels = self._labels(kept)
        fields = self._fields(kept)
        with _writing(self.values.name, "the images' bytes"):
            _write_all(self.values, blob)  # a raw FileIO: one write of the whole chunk
        self.values_crc = zlib.crc32(blob, self.values_crc)
        self.offsets.extend(self.offsets.array()[-1] + np.cumsum(lengths))
        self.sizes.extend(sizes)
        if labels is not None:
            self.labels.extend(labels)
        for name, rows in fields.items():
            self.fields[name][2].extend(rows)
        self.count += len(kept)
        self.last_bytes = len(blob)

    @staticmethod
    def _header_sizes(blob, lengths):
        """sizes ``[n, 3]`` from the JPEG headers of the samples in ``blob``, or None when one
        is broken. One call for the chunk: the op parses the headers in C++."""
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        batch = Ragged(ndarray_to_tensor(np.frombuffer(blob, np.uint8), "values"),
                       torch.from_numpy(starts), torch.from_numpy(lengths).view(-1, 1), check=False)
        try:
            return jpeg_sizes(batch).numpy()
        except RuntimeError:
            return None

    def _labels(self, items):
        has = [item.label is not None for item in items]
        if self.has_labels is None:
            self.has_labels = has[0]
            if has[0]:
                self.labels = _Table(np.int64, ())
        if not all(h == self.has_labels for h in has):
            k = has.index(not self.has_labels)
            raise ValueError("prefetch: pack: %s has %s, and the samples before it %s"
                             % (items[k].name, "a label" if has[k] else "no label",
                                "have none" if has[k] else "have one"))
        if not self.has_labels:
            return None
        out = np.empty(len(items), np.int64)
        for k, item in enumerate(items):
            label = item.label
            if isinstance(label, (bool, np.bool_)) or not hasattr(label, "__index__"):
                raise TypeError("prefetch: pack: the label of %s is %r, expected an int"
                                % (item.name, label))
            value = label.__index__()
            if not INT64[0] <= value <= INT64[1]:
                raise ValueError("prefetch: pack: the label of %s is %s, beyond int64 [-2**63, "
                                 "2**63): labels are stored as int64" % (item.name, show_int(value)))
            out[k] = value
        return out

    def _fields(self, items):
        """name -> rows ``[n, *shape]`` of this chunk's fields, checked against the first
        sample's names, shapes and dtypes."""
        for item in items:
            names = list(item.fields or {})
            if self.fields is None:
                self.fields = {}
                for name in names:
                    value = _field_value(item.fields[name], name, item)
                    if not isinstance(name, str) or not name.isidentifier() or name in RESERVED:
                        raise ValueError("prefetch: pack: field name %r (of %s) must be an "
                                         "identifier other than %s (it names the field's file)"
                                         % (name, item.name, ", ".join(sorted(RESERVED))))
                    self.fields[name] = (value.dtype, value.shape, _Table(value.dtype, value.shape))
            if names != list(self.fields):
                raise ValueError("prefetch: pack: %s has the fields %s, and the samples before it %s"
                                 % (item.name, names, list(self.fields)))
        out = {}
        for name, (dtype, shape, _) in self.fields.items():
            rows = np.empty((len(items),) + shape, dtype)
            for k, item in enumerate(items):
                value = _field_value(item.fields[name], name, item)
                if value.dtype != dtype or value.shape != shape:
                    raise ValueError("prefetch: pack: field %r of %s is %s %s, expected %s %s (as "
                                     "the first sample's)" % (name, item.name, value.dtype,
                                                             list(value.shape), dtype, list(shape)))
                rows[k] = value
            out[name] = rows
        return out

    def finish(self, classes: Optional[List[str]]) -> None:
        """Writes the tables and the header, syncs everything: the store is then complete.

        Args:
            classes: the class names the labels index, or None.

        Raises:
            ValueError: no sample was kept (none given, or all skipped).
            OSError: a file cannot be written or synced (its message names it).
        """
        with _writing(self.values.name, "the images' bytes"):
            os.fsync(self.values.fileno())
            size = self.values.tell()
            self.values.close()
        if not self.count and not self.skipped:
            raise ValueError("prefetch: pack: the source yielded no sample")
        if not self.count:
            raise ValueError("prefetch: pack: no sample left to pack: all %d were skipped (%s)"
                             % (len(self.skipped), "; ".join("%s: %s" % s for s in self.skipped[:3])))
        files = {"values": {"file": VALUES_FILE, "dtype": "|u1", "shape": [size], "bytes": size,
                            "crc32": self.values_crc}}
        tables = [("offsets", self.offsets.array()), ("sizes", self.sizes.array())]
        if self.labels is not None:
            tables.append(("labels", self.labels.array()))
        tables += [(name, table.array()) for name, (_, _, table) in (self.fields or {}).items()]
        for name, array in tables:
            files[name] = self._write_table(name, array)
        from .. import __version__

        header = {"format": FORMAT, "version": VERSION, "count": self.count, "byteorder": "little",
                  "encoding": self.encoding, "classes": classes, "files": files,
                  "skipped": len(self.skipped), "created_by": "prefetch %s" % __version__}
        header["header_crc32"] = header_crc32(header)
        # Written in this key order (not sorted): the fields' order in "files" is the order
        # Store.as_arrays() gives them in.
        self._write(HEADER, header_text(header).encode())
        fsync_directory(self.directory)

    def _write_table(self, name, array):
        # Little-endian whatever the host (pack refuses a big-endian host, but the file says
        # what it is either way).
        array = np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        data = buffer.getvalue()
        file = name + ".npy"
        self._write(file, data)
        return {"file": file, "dtype": array.dtype.str, "shape": list(array.shape),
                "bytes": len(data), "crc32": zlib.crc32(data)}

    def _write(self, file, data):
        path = os.path.join(self.directory, file)
        with _writing(path, file), open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        """Closes ``values.bin`` (after an error: the caller removes the directory)."""
        self.values.close()


class _writing:
    """Re-raises an OSError while writing a store's file (a full disk, a file size limit) as an
    OSError of the same errno and class that names the file and what it holds: write() and
    fsync() name nothing."""

    def __init__(self, path, what):
        self.path, self.what = path, what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or not isinstance(exc, OSError) or exc.filename is not None:
            return False
        raise type(exc)(exc.errno, "prefetch: pack: writing %s (%s) failed: %s"
                        % (self.path, self.what, exc.strerror or exc), self.path) from exc


def _write_all(f, data):
    """f.write(data) until all of it is written: a raw FileIO may write less than asked (a
    partial write before a full disk, a signal), and says so only by its return value."""
    view = memoryview(data).cast("B")
    while len(view):
        written = f.write(view)
        if written is None or written <= 0:  # None: nonblocking (never, here); 0: nothing moves
            raise OSError(errno.EIO, "write() wrote nothing (%s bytes left)" % len(view))
        view = view[written:]


def _join(buffers):
    """The chunk's samples (bytes, or raw pixel arrays) back to back, and their byte lengths."""
    return b"".join(buffers), np.fromiter((memoryview(b).nbytes for b in buffers), np.int64,
                                          len(buffers))


def _header_problem(data):
    """Why jpeg_sizes refuses this one sample, or None."""
    try:
        jpeg_sizes([data])
        return None
    except RuntimeError as exc:
        # "jpeg_sizes: sample 0 (N bytes at offset 0) cannot be decoded: <libjpeg's reason>"
        return "not a readable JPEG (%s)" % str(exc).split("cannot be decoded: ", 1)[-1]


def _field_value(value, name, item):
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.dtype.kind == "O":
        big = _int_beyond_64_bits(array)
        if big is not None:
            raise ValueError("prefetch: pack: field %r of %s holds the int %s, beyond both int64 "
                             "and uint64: no numpy or torch dtype holds it exactly; store it as a "
                             "float or a string elsewhere" % (name, item.name, show_int(big)))
    if array.dtype.kind not in "biufc":
        raise TypeError("prefetch: pack: field %r of %s is %s (dtype %s); fields are numbers or "
                        "numeric arrays" % (name, item.name, a_type(value), array.dtype))
    try:  # a dtype the reader can hand to torch (np.longdouble cannot be): refused here, not later
        ndarray_to_tensor(array.reshape(-1)[:0], name)
    except CollateError:
        raise TypeError("prefetch: pack: field %r of %s has dtype %s, which has no torch dtype; "
                        "convert it (e.g. to float64)" % (name, item.name, array.dtype)) from None
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array


def _int_beyond_64_bits(array):
    """The first Python int in an object array that no 64-bit integer dtype holds, or None."""
    for x in array.reshape(-1):
        if isinstance(x, int) and not isinstance(x, bool) and not -(1 << 63) <= x < (1 << 64):
            return x
    return None
