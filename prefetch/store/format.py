"""The store's format on disk: its names and constants, the header's checksum and JSON layout,
and the header's validation — what the reader (:mod:`prefetch.store.reader`) and the writer
(:mod:`prefetch.store.writer`) must agree on, in one place.

A store is a directory::

    header.json   {"format": "prefetch-store", "version": 1, "count": N, "byteorder": "little",
                   "encoding": "jpeg" | "raw", "classes": [...] | null,
                   "files": {name: {"file", "dtype", "shape", "bytes", "crc32"}, ...},
                   "skipped": int, "created_by": str, "header_crc32": int}
    values.bin    every sample's bytes back to back (uint8 [total bytes])
    offsets.npy   int64 [N + 1]: sample i is values[offsets[i]:offsets[i + 1]]
    sizes.npy     int64 [N, 3]: each image's (height, width, 3)
    labels.npy    int64 [N] (optional)
    <field>.npy   [N, *shape] of any numeric dtype torch has (optional, one per field)

docs/arrays.md, "Stores", shows a numpy-only reader of it; tests/data/store_v1 pins version 1.
"""
import json
import os
import sys
import warnings
import zlib
from typing import Any, Callable, Dict, NoReturn

import numpy as np

from .._core.extension import C as _C

__all__ = ["FORMAT", "VERSION", "HEADER", "REQUIRED", "VALUES_FILE", "ENCODINGS", "MAX_SIDE",
           "CRC_CHUNK", "RESERVED", "StoreError", "header_crc32", "header_text",
           "check_little_endian", "check_header"]

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
# Field names become file names (<name>.npy); these are the store's own tables.
RESERVED = frozenset({"values", "offsets", "sizes", "labels", "header"})


# A class of the extension's (a ValueError): the engine's threads raise it too, for a mapped
# values.bin that changed size under them (csrc/core/collate.h, check_mapped).
StoreError = _C.StoreError
StoreError.__doc__ = ("A store that cannot be opened or read (a ValueError): what is wrong, naming "
                      "the store and its file.")


def header_crc32(header: Dict[str, Any]) -> int:
    """The checksum ``header["header_crc32"]`` holds.

    It covers the canonical JSON of the header (sorted keys, no spaces) without that key, so that
    the file's own layout (indentation, key order) does not change it.

    Args:
        header: the header as a dict (with or without its ``"header_crc32"`` key).

    Returns:
        zlib.crc32 of the canonical JSON, an int in ``[0, 2**32)``.

    Raises:
        TypeError: a value JSON cannot encode.
        RecursionError: values nested deeper than Python's recursion limit.
    """
    rest = {k: v for k, v in header.items() if k != "header_crc32"}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def header_text(header: Dict[str, Any]) -> str:
    """The header as written to ``header.json``: JSON, one key a line and one line per file.

    ``json.dumps(indent=...)`` would put every number of every shape on its own line. Keys keep
    the dict's order (not sorted): the fields' order in ``"files"`` is the order
    :meth:`prefetch.Store.as_arrays` gives them in.

    Args:
        header: the complete header, ``"header_crc32"`` included.

    Returns:
        The text, ending with a newline; ``json.loads`` of it equals ``header``.
    """
    def line(key, value):
        return "%s: %s" % (json.dumps(key), json.dumps(value))

    lines = []
    for key, value in header.items():
        if key == "files":
            inner = ",\n".join("  " + line(name, entry) for name, entry in value.items())
            lines.append(' "files": {\n%s\n }' % inner)
        else:
            lines.append(" " + line(key, value))
    text = "{\n%s\n}\n" % ",\n".join(lines)
    assert json.loads(text) == header
    return text


def check_little_endian(what: str) -> None:
    """Refuses a big-endian host in one line rather than byte-swapping its tables silently
    (stores are little-endian, and nothing tests a swapped path).

    Args:
        what: the start of the message: what cannot be done (``"cannot open store s/"``).

    Raises:
        StoreError: the host is not little-endian.
    """
    if sys.byteorder != "little":
        raise StoreError("prefetch: %s: stores are little-endian and this host is %s-endian"
                         % (what, sys.byteorder))


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


def check_header(header: Any, fail: Callable[[str], NoReturn]) -> Dict[str, Any]:
    """Checks a parsed ``header.json``: its format, version, checksum and the shape of its entries,
    so that the reader can then index it without guarding every key.

    Args:
        header: what ``json.loads`` made of the file (anything: it is checked to be a dict).
        fail: called with what is wrong; it must raise (the reader's raises :class:`StoreError`
            naming the store).

    Returns:
        ``header``, unchanged, once every check passed.

    Raises:
        Whatever ``fail`` raises, for the first thing wrong.
        RecursionError: a ``header_crc32`` over values nested just below the parser's limit.
    """
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        fail("%s is not a %s header (format %r)" % (HEADER, FORMAT, found))
    version = header.get("version")
    if not _is_int(version) or version < 1:
        fail("%s has version %r, expected an int >= 1" % (HEADER, version))
    if version > VERSION:
        from .. import __version__

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
