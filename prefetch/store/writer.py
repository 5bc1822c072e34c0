"""The store's writer: :func:`pack` writes a folder (or list, or stream) of JPEGs once into a
store that :func:`prefetch.open_store` maps.

``prefetch.pack("train/", "train.store")`` reads every file once, checks that it is a JPEG (its
header is parsed, which also gives each image's size), and writes the bytes as they are, back to
back, with the tables of offsets, sizes, labels and other fields. Nothing is re-encoded: a
sample of the store is its file, byte for byte. ``encoding="raw"`` instead decodes every image
once, with Pillow (any format it opens, converted to RGB as torchvision's ImageFolder loader
does), and writes its pixels: HWC uint8, no decode per epoch, several times the disk space.

Files are read (and with ``encoding="raw"`` decoded: Pillow's decoders release the GIL) by a
thread pool one chunk ahead of the chunk being checked and written, so memory holds two chunks of
files (or of decoded pixels) and the growing int64 tables, whatever the dataset's size. The store
is written into a temporary directory beside ``dest`` and renamed onto it only once complete and
synced, so ``dest`` is either absent, the old store, or the whole new one.
``python -m prefetch.store SRC DEST`` is the command-line form.

What is packed and how each sample is loaded: :mod:`prefetch.store.inputs`; how a chunk is
checked and the files written: :mod:`prefetch.store.builder`.
"""
import itertools
import json
import logging
import os
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, Optional, Sequence, Union

from ..ops.decode import max_image_pixels
from .builder import StoreBuilder
from .files import fsync_directory, open_regular
from .format import ENCODINGS, FORMAT, HEADER, check_little_endian
from .inputs import (JPEG_EXTENSIONS, RAW_EXTENSIONS, RawDecoder, chunks, collect_samples,
                     extensions, load_items, pillow)
from .reader import Store, open_store

__all__ = ["pack", "extensions", "JPEG_EXTENSIONS", "RAW_EXTENSIONS"]

logger = logging.getLogger("prefetch")


def pack(source: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], Iterable[Any]],
         dest: Union[str, os.PathLike], *, labels: Optional[Sequence[int]] = None,
         fields: Optional[Dict[str, Sequence[Any]]] = None, workers: Optional[int] = None,
         progress: Optional[bool] = None, on_error: str = "raise", overwrite: bool = False,
         chunk: int = 256, encoding: str = "jpeg") -> Store:
    """Packs JPEGs (or, with ``encoding="raw"``, any image Pillow opens, decoded) into a store at
    ``dest`` (a directory) and returns it opened (:class:`prefetch.Store`).

    Args:
        source: one of
            - a directory (str or path), laid out as torchvision's ImageFolder: each subfolder
              is a class, labels ``0..K-1`` in the sorted order of their names (the store's
              ``classes``), files taken in sorted order, subfolders of a class included. Only
              files named ``*.jpg``, ``*.jpeg``, ``*.jpe`` or ``*.jfif`` (any case) are taken;
              other files are ignored (listed in the returned store's ``ignored``). A directory
              holding JPEGs and no subfolder gives a store without labels (``classes`` None); one
              holding both JPEGs and subfolders is refused (ImageFolder would drop the JPEGs), as
              is a class folder without a JPEG (ImageFolder refuses it too). With
              ``encoding="raw"`` the files taken are those named as an image Pillow opens
              (:data:`RAW_EXTENSIONS`: ``*.jpg``..., ``*.png``, ``*.bmp``, ``*.gif``, ``*.webp``,
              ``*.tif``, ``*.ppm``..., any case), and "JPEG" above reads "image".
            - a list or tuple of file paths, taken whatever their names, with ``labels`` (ints,
              one per path) if given.
            - any other iterable, yielding per sample the encoded bytes (bytes, bytearray,
              memoryview, or a 1-D uint8 array or tensor), or a tuple ``(bytes, label)``,
              ``(bytes, fields)`` or ``(bytes, label, fields)`` where ``fields`` is a dict name ->
              value. It is consumed once, ``chunk`` samples at a time.
        labels: for a list of paths: their labels (a sequence of ints of the same length).
        fields: for a directory or a list of paths: a dict name -> sequence of per-sample values
            (in the order files are taken). Each field is a number or a numpy array of one
            shape per sample, stored as ``<name>.npy`` ``[N, *shape]`` in the dtype of the first
            sample's ``np.asarray``; a later sample of another shape or dtype is refused.
        workers: threads reading the files (default ``os.cpu_count()``).
        progress: a progress line on stderr (tqdm's when it is installed); None shows it only
            when stderr is a terminal.
        on_error: ``"raise"``: a file that cannot be read or is not a JPEG raises a ValueError
            naming it (its path, or ``sample i`` of an iterable) and what is wrong. ``"skip"``:
            it is left out, listed as ``(name, reason)`` in the returned store's ``skipped``
            and counted in its header's ``"skipped"``. Only the header of each JPEG is parsed:
            a file cut after its header is packed as it is, and fails when decoded.
        overwrite: replace an existing store at ``dest`` (only once the new one is complete);
            otherwise an existing ``dest`` raises FileExistsError. A ``dest`` that is neither a
            store nor an empty directory is never replaced.
        chunk: samples read, checked and written together (memory holds two chunks of files).
        encoding: ``"jpeg"``: the files' bytes are stored as they are (checked to be JPEGs).
            ``"raw"``: every image (file, or encoded bytes from an iterable) is decoded here by
            Pillow — ``Image.open(f).convert("RGB")``, as torchvision's ImageFolder loader — and
            its pixels stored, HWC uint8: the store's ``images`` are then ``[H, W, 3]`` samples
            that need no decode (FFCV's RAW mode), at ~5-10x the disk space of JPEGs. A file
            Pillow cannot open or decode is refused (or skipped) as a non-JPEG is with
            ``"jpeg"``, and so is one of more than :func:`prefetch.ops.max_image_pixels` pixels
            (a possible decompression bomb; Pillow's own ``PIL.Image.MAX_IMAGE_PIXELS`` applies
            too). Needs Pillow (``pip install pillow``), imported only then.

    Returns:
        The new store, opened (:func:`prefetch.open_store`), with ``skipped`` (the ``(name,
        reason)`` of each sample left out) and ``ignored`` (a directory's files not taken for
        their names) set.

    Raises:
        ValueError: a bad argument, a source ImageFolder would refuse, a sample that cannot be
            packed (with ``on_error="raise"``), labels or fields unlike the first sample's, no
            sample left to pack.
        TypeError: a source, sample, label or field of the wrong type.
        FileNotFoundError: a source directory that does not exist.
        FileExistsError: ``dest`` exists and ``overwrite`` is False, or it is neither a store
            nor an empty directory.
        ImportError: ``encoding="raw"`` without Pillow.
        StoreError: a big-endian host.
        OSError: writing failed (a full disk: the message names the file).

    An exception or a KeyboardInterrupt while packing removes what was written; ``dest`` is then
    as it was. A process killed outright leaves a ``<dest>.partial-<pid>-<random>`` directory,
    which can be deleted.
    """
    started = time.perf_counter()
    if on_error not in ("raise", "skip"):
        raise ValueError("prefetch: pack's on_error must be 'raise' or 'skip', got %r" % (on_error,))
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError("prefetch: pack's chunk must be an int >= 1, got %r" % (chunk,))
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ValueError("prefetch: pack's workers must be an int >= 1 or None, got %r" % (workers,))
    if not isinstance(encoding, str) or encoding not in ENCODINGS:
        raise ValueError("prefetch: pack's encoding must be %s, got %r"
                         % (" or ".join(map(repr, ENCODINGS)), encoding))
    decoder = RawDecoder(pillow(), max_image_pixels()) if encoding == "raw" else None
    dest = os.path.abspath(os.fspath(dest))
    check_little_endian("cannot pack %s" % dest)
    _refuse_existing(dest, overwrite)
    samples, total, classes, ignored = collect_samples(source, labels, fields, dest, encoding)
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    partial = "%s.partial-%d-%s" % (dest, os.getpid(), secrets.token_hex(4))
    os.mkdir(partial)
    writer = None
    try:
        writer = StoreBuilder(partial, on_error, encoding)
        with _Progress(total, bool(progress)) as bar:
            if samples.reads or decoder is not None:
                _pack_pooled(samples, writer, bar, workers or os.cpu_count() or 1, chunk, decoder)
            else:
                for items in chunks(samples.items, chunk):
                    writer.add(items, [item.data for item in items])
                    bar.update(len(items), writer.last_bytes)
        writer.finish(classes)
        _move_into_place(partial, dest, overwrite)
    except BaseException:
        if writer is not None:
            writer.close()
        shutil.rmtree(partial, ignore_errors=True)
        raise
    store = open_store(dest)
    store.skipped, store.ignored = writer.skipped, ignored
    logger.info("prefetch.pack: %d samples into %s in %.2f s (%d skipped, %d files ignored)",
                store.count, dest, time.perf_counter() - started, len(writer.skipped), len(ignored))
    return store


def _pack_pooled(samples, writer, bar, workers, chunk, decoder):
    """Reads (and decodes, with a ``decoder``) chunk k+1 in the pool while chunk k is checked and
    written. A chunk is loaded as a few runs of samples per thread rather than a task per file: a
    future per file cost more than reading a cached 100 kB file."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="prefetch-pack")
    try:
        pending = None
        for items in itertools.chain(chunks(samples.items, chunk), [None]):
            reading = None
            if items is not None:
                step = -(-len(items) // (4 * workers))
                reading = items, [pool.submit(load_items, items[k:k + step], decoder)
                                  for k in range(0, len(items), step)]
            if pending is not None:
                done, futures = pending
                writer.add(done, [data for f in futures for data in f.result()])
                bar.update(len(done), writer.last_bytes)
            pending = reading
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _is_store_or_empty(path):
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    if not os.listdir(path):
        return True
    try:
        with open_regular(os.path.join(path, HEADER)) as f:
            return json.loads(f.read().decode("utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def _refuse_existing(dest, overwrite):
    if not os.path.lexists(dest):
        return
    if not overwrite:
        raise FileExistsError("prefetch: pack: %s exists; pass overwrite=True (--overwrite) to "
                              "replace it" % dest)
    if not _is_store_or_empty(dest):
        raise FileExistsError("prefetch: pack: %s exists and is not a prefetch store (no %s of "
                              "format %r) nor an empty directory: not replacing it, even with "
                              "overwrite=True" % (dest, HEADER, FORMAT))


def _move_into_place(partial, dest, overwrite):
    """Renames the complete store onto ``dest``; an old store there is moved aside first and
    deleted only once the new one is in place (put back if the rename fails)."""
    old = None
    if os.path.lexists(dest):
        _refuse_existing(dest, overwrite)  # again: it may have appeared while packing
        old = "%s.old-%d-%s" % (dest, os.getpid(), secrets.token_hex(4))
        os.rename(dest, old)
    try:
        os.rename(partial, dest)
    except BaseException:
        if old is not None:
            os.rename(old, dest)
        raise
    fsync_directory(os.path.dirname(dest))
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _Progress:
    """A progress line on stderr: tqdm's when it is installed, else a ``\\r`` counter redrawn at
    most ten times a second."""

    def __init__(self, total, enabled):
        self.total, self.enabled = total, enabled
        self.done = self.bytes = 0
        self.started = self.drawn = time.perf_counter()
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, unit="file", desc="prefetch.pack", file=sys.stderr)

    def __enter__(self):
        return self

    def update(self, files, nbytes):
        self.done += files
        self.bytes += nbytes
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(files)
            return
        now = time.perf_counter()
        if now - self.drawn >= 0.1 or self.done == self.total:
            self.drawn = now
            of = "/%d" % self.total if self.total is not None else ""
            sys.stderr.write("\rprefetch.pack: %d%s files, %.1f MB, %.0f files/s" % (
                self.done, of, self.bytes / 1e6, self.done / max(now - self.started, 1e-9)))
            sys.stderr.flush()

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.done:
            sys.stderr.write("\n")
            sys.stderr.flush()
        return False
