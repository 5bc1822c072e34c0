"""Stores: a dataset of images packed once into one directory (:func:`pack`) and opened by mapping
it, not by reading it (:func:`open_store`); ``prefetch.ArrayLoader(store.as_arrays(), ...)``
reads it. docs/arrays.md, "Stores", is the guide.

One job per module:

- :mod:`~prefetch.store.format`: the format on disk (names, constants, the header's checksum,
  layout and validation), shared by the reader and the writer; :class:`StoreError`.
- :mod:`~prefetch.store.files`: reading only regular files, checksums, syncing a directory.
- :mod:`~prefetch.store.reader`: :func:`open_store` and :class:`Store`.
- :mod:`~prefetch.store.mapped`: the size check of a mapped ``values.bin`` before each read
  (a file cut while mapped would kill its reader with SIGBUS).
- :mod:`~prefetch.store.writer`: :func:`pack`, writing a store and moving it into place whole.
- :mod:`~prefetch.store.inputs`: what :func:`pack` takes (a folder, paths, an iterable) and how
  each sample is read or decoded.
- :mod:`~prefetch.store.builder`: checking each chunk of samples and writing the store's files.
- ``python -m prefetch.store SRC DEST``: the command line (:mod:`prefetch.store.__main__`).

``prefetch.pack`` and ``python -m prefetch.pack`` are aliases of :func:`pack` and of this
command line, kept for the scripts written before the store was one package.
"""
# The public API (__all__), and every other name prefetch.store had when it was one module, so
# that code importing them from here keeps working; each module above is their home.
from .files import NotARegularFile, crc32_of_file, open_regular  # noqa: F401
from .format import (CRC_CHUNK, ENCODINGS, FORMAT, HEADER, MAX_SIDE, REQUIRED,  # noqa: F401
                     VALUES_FILE, VERSION, StoreError, check_little_endian, header_crc32)
from .mapped import (MappedFile, MappedGuard, check_file_size, mapped_file,  # noqa: F401
                     mapped_files)
from .reader import Store, open_store
from .writer import JPEG_EXTENSIONS, RAW_EXTENSIONS, extensions, pack  # noqa: F401

__all__ = ["Store", "StoreError", "open_store", "pack", "FORMAT", "VERSION", "ENCODINGS",
           "JPEG_EXTENSIONS", "RAW_EXTENSIONS"]
