"""Packing: a folder (or list, or stream) of JPEGs written once into a store that
:func:`prefetch.open_store` maps — the writer of the format :mod:`prefetch.store` reads.

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
``python -m prefetch.pack SRC DEST`` is the command-line form.
"""
import errno
import io
import itertools
import json
import logging
import os
import secrets
import shutil
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .._core.samples_to_tensors import INT64, show_int
from .._core.tree import ndarray_to_tensor
from ..ops.decode import jpeg_sizes, max_image_pixels
from ..ragged import Ragged
from ..errors import CollateError
from ..store import (ENCODINGS, FORMAT, HEADER, VALUES_FILE, VERSION, check_little_endian,
                     header_crc32, open_regular, open_store)

__all__ = ["pack", "JPEG_EXTENSIONS", "RAW_EXTENSIONS"]

logger = logging.getLogger("prefetch")

# The names a folder's files are taken by (compared in lower case); other files are ignored.
JPEG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")
# With encoding="raw": the formats Pillow opens without extra plugins (a fixed list, as
# torchvision's IMG_EXTENSIONS, so that what a folder packs into does not depend on the plugins
# installed).
RAW_EXTENSIONS = JPEG_EXTENSIONS + (".png", ".apng", ".bmp", ".dib", ".gif", ".webp", ".tif",
                                    ".tiff", ".ppm", ".pgm", ".pbm", ".pnm", ".tga")
# Every JPEG starts with the SOI marker: a cheap first check, and the message can then show what
# the file starts with instead (b'\x89PNG', b'<html>').
JPEG_START = b"\xff\xd8"
# Field names become file names; these are the store's own tables.
RESERVED = {"values", "offsets", "sizes", "labels", "header"}


def pack(source, dest, *, labels=None, fields=None, workers=None, progress=None, on_error="raise",
         overwrite=False, chunk=256, encoding="jpeg"):
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
    decoder = _RawDecoder(_pillow(), max_image_pixels()) if encoding == "raw" else None
    dest = os.path.abspath(os.fspath(dest))
    check_little_endian("cannot pack %s" % dest)
    _refuse_existing(dest, overwrite)
    samples, total, classes, ignored = _samples(source, labels, fields, dest, encoding)
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    partial = "%s.partial-%d-%s" % (dest, os.getpid(), secrets.token_hex(4))
    os.mkdir(partial)
    writer = None
    try:
        writer = _Writer(partial, on_error, encoding)
        with _Progress(total, bool(progress)) as bar:
            if samples.reads or decoder is not None:
                _pack_pooled(samples, writer, bar, workers or os.cpu_count() or 1, chunk, decoder)
            else:
                for items in _chunks(samples.items, chunk):
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


# -- what to pack ----------------------------------------------------------------------------------

class _Item:
    """One sample to pack: its name for messages, and where its bytes come from."""

    __slots__ = ("name", "path", "data", "label", "fields")

    def __init__(self, name, path=None, data=None, label=None, fields=None):
        self.name, self.path, self.data, self.label, self.fields = name, path, data, label, fields


class _Samples:
    def __init__(self, items, reads):
        self.items = items  # an iterator of _Item
        self.reads = reads  # the items are paths, read by the pool


def _samples(source, labels, fields, dest, encoding):
    """``(samples, total or None, classes or None, ignored paths)`` for any kind of source."""
    if isinstance(source, (str, os.PathLike)):
        if labels is not None:
            raise ValueError("prefetch: pack takes a directory's labels from its class folders; "
                             "labels= is for a list of paths")
        paths, labels, classes, ignored = _walk_folder(os.fspath(source), dest, encoding)
        return _path_samples(paths, labels, fields, "the files found"), len(paths), classes, ignored
    if isinstance(source, (bytes, bytearray, memoryview)):
        raise TypeError("prefetch: pack's source is one bytes object; pass a list or an iterable "
                        "of samples (e.g. [jpeg_bytes])")
    if isinstance(source, (list, tuple)) and source and isinstance(source[0], (str, os.PathLike)):
        bad = next((k for k, p in enumerate(source) if not isinstance(p, (str, os.PathLike))), None)
        if bad is not None:
            raise TypeError("prefetch: pack's source is a list of paths, but item %d is %s"
                            % (bad, type(source[bad]).__name__))
        if labels is not None:
            labels = list(labels)
            if len(labels) != len(source):
                raise ValueError("prefetch: pack got %d paths and %d labels; pass one label per path"
                                 % (len(source), len(labels)))
        return (_path_samples([os.fspath(p) for p in source], labels, fields, "the paths"),
                len(source), None, [])
    if labels is not None or fields is not None:
        raise ValueError("prefetch: labels= and fields= go with a directory or a list of paths; an "
                         "iterable yields them with each sample: (bytes, label, {name: value})")
    try:
        iterator = iter(source)
    except TypeError:
        raise TypeError("prefetch: pack's source must be a directory, a list of paths or an "
                        "iterable of samples, got %s" % type(source).__name__) from None
    total = len(source) if hasattr(source, "__len__") else None
    return _Samples((_iterable_item(x, k) for k, x in enumerate(iterator)), reads=False), total, None, []


def _path_samples(paths, labels, fields, what):
    fields = dict(fields or {})
    for name, values in fields.items():
        fields[name] = values = list(values)
        if len(values) != len(paths):
            raise ValueError("prefetch: pack's field %r has %d values for %d files (%s)"
                             % (name, len(values), len(paths), what))
    items = (_Item(p, path=p, label=None if labels is None else labels[k],
                   fields={name: v[k] for name, v in fields.items()} if fields else None)
             for k, p in enumerate(paths))
    return _Samples(items, reads=True)


def extensions(encoding):
    """The file names a directory's files are taken by, for ``encoding``."""
    return RAW_EXTENSIONS if encoding == "raw" else JPEG_EXTENSIONS


def _walk_folder(root, dest, encoding):
    """ImageFolder's walk: ``(paths, labels or None, classes or None, ignored paths)``. A store
    written inside the folder (``dest``, and its temporary siblings) is not taken for a class.
    Files are taken by the names of ``encoding``'s formats."""
    suffixes = extensions(encoding)
    noun = "image" if encoding == "raw" else "JPEG"

    def taken(name):
        return name.lower().endswith(suffixes)

    if not os.path.isdir(root):
        if os.path.exists(root):
            raise ValueError("prefetch: pack's source %s is a file, not a directory; pass a "
                             "directory, or a list of paths" % root)
        raise FileNotFoundError("prefetch: pack's source %s does not exist" % root)
    with os.scandir(root) as it:
        entries = sorted((e for e in it if not _is_dest(e.path, dest)), key=lambda e: e.name)
    folders = {e.name for e in entries if _is_dir(e)}
    classes = [e.name for e in entries if e.name in folders]
    direct = [e.path for e in entries if e.name not in folders]
    loose = [p for p in direct if taken(p)]
    if not classes:
        if not loose:
            raise ValueError("prefetch: %s holds no %s (no file named %s, and no class subfolder)"
                             % (root, noun, "/".join("*" + e for e in suffixes)))
        return loose, None, None, [p for p in direct if not taken(p)]
    if loose:
        raise ValueError(
            "prefetch: %s holds both %ss (%d, e.g. %s) and subfolders (%s): the subfolders would "
            "be the classes and these files left out (as ImageFolder does); move them into a class "
            "folder, or pass a list of paths" % (root, noun, len(loose), os.path.basename(loose[0]),
                                                 _some(classes)))
    paths, labels, ignored, empty = [], [], list(direct), []
    for label, name in enumerate(classes):
        found = 0
        for folder, names in sorted(_walk_class(root, name)):
            for file in sorted(names):
                path = os.path.join(folder, file)
                if taken(file):
                    paths.append(path)
                    labels.append(label)
                    found += 1
                else:
                    ignored.append(path)
        if not found:
            empty.append(name)
    if empty:
        raise ValueError("prefetch: class folders of %s hold no %s: %s (ImageFolder refuses "
                         "them too): remove them, or add their images" % (root, noun, _some(empty)))
    return paths, labels, classes, ignored


def _is_dir(entry):
    """``entry.is_dir()`` (symlinks followed), or a ValueError naming a symlink that cannot be
    followed (a loop: ``c -> c``), where is_dir() raised a bare OSError."""
    try:
        return entry.is_dir()
    except OSError as exc:
        raise ValueError("prefetch: %s cannot be followed (%s): a symlink loop? Remove it, or pass "
                         "a list of paths" % (entry.path, exc.strerror or exc)) from None


def _walk_class(root, name):
    """``(folder, file names)`` of every folder under class folder ``root/name``, symlinks
    followed (as ImageFolder's os.walk(followlinks=True)), except that a symlink back to a folder
    it lies in (``root`` included) raises a ValueError naming it: os.walk would follow the loop
    until the path grew too long, packing the same files again at every turn."""
    def identity(path):
        st = os.stat(path)
        return st.st_dev, st.st_ino

    def loop(path, target):
        return ValueError("prefetch: pack: %s leads back to %s, a folder it lies in (a symlink "
                          "loop): its files would be packed again and again; remove the link or "
                          "pass a list of paths" % (path, target))

    top = os.path.join(root, name)
    inside = {identity(root): root}
    if identity(top) in inside:
        raise loop(top, root)
    inside[identity(top)] = top
    chains = {top: inside}  # each folder to walk: the folders it lies in, by identity
    for folder, dirs, names in os.walk(top, followlinks=True):
        chain = chains.pop(folder)
        kept = []
        for d in dirs:
            path = os.path.join(folder, d)
            try:
                key = identity(path)
            except OSError:  # vanished since it was listed: os.walk skips it too
                continue
            if key in chain:
                raise loop(path, chain[key])
            chains[path] = {**chain, key: path}
            kept.append(d)
        dirs[:] = kept
        yield folder, names


def _is_dest(path, dest):
    path = os.path.abspath(path)
    return path == dest or path.startswith((dest + ".partial-", dest + ".old-"))


def _some(names, n=5):
    return ", ".join(names[:n]) + (", ... (%d in all)" % len(names) if len(names) > n else "")


def _iterable_item(x, k):
    name = "sample %d" % k
    label = fields = None
    if isinstance(x, tuple):
        if len(x) == 2:
            data, extra = x
            if isinstance(extra, dict):
                fields = extra
            else:
                label = extra
        elif len(x) == 3:
            data, label, fields = x
            if not isinstance(fields, dict):
                raise TypeError("prefetch: pack: %s is a 3-tuple whose third item is %s, expected "
                                "a dict of fields: (bytes, label, {name: value})"
                                % (name, type(fields).__name__))
        else:
            raise TypeError("prefetch: pack: %s is a tuple of %d items, expected (bytes, label), "
                            "(bytes, fields) or (bytes, label, fields)" % (name, len(x)))
    else:
        data = x
    return _Item(name, data=_as_buffer(data, name), label=label, fields=fields)


def _as_buffer(data, name):
    """The sample's bytes as a bytes-like object of bytes, without copying where possible."""
    if isinstance(data, (bytes, bytearray)):
        return data
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError("prefetch: pack: %s is a %d-D %s tensor, expected the encoded bytes "
                            "(a 1-D uint8 tensor)" % (name, data.dim(), data.dtype))
        data = data.detach().cpu().contiguous().numpy()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise TypeError("prefetch: pack: %s is a %s array of shape %s, expected the encoded "
                            "bytes (a 1-D uint8 array)" % (name, data.dtype, list(data.shape)))
        return memoryview(np.ascontiguousarray(data))
    if isinstance(data, memoryview):
        return data.cast("B") if data.contiguous else memoryview(data.tobytes())
    raise TypeError("prefetch: pack: %s is %s, expected the encoded bytes (bytes, bytearray, "
                    "memoryview, 1-D uint8 array or tensor), or a tuple (bytes, label), "
                    "(bytes, fields) or (bytes, label, fields)" % (name, _a(data)))


def _a(x):
    name = type(x).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _chunks(iterator, size):
    while True:
        items = list(itertools.islice(iterator, size))
        if not items:
            return
        yield items


def _load(items, decoder):
    """Each item's bytes (its file's, read here, or its own), or the OSError reading it raised;
    with a ``decoder``, what it makes of them (pixels, or a :class:`_Refused`). Reported by name
    with its chunk, in the samples' order."""
    out = []
    for item in items:
        data = item.data
        if item.path is not None:
            try:
                # A regular file or nothing: a FIFO named x.jpg would block the read forever,
                # /dev/zero would never end (NotARegularFile, an OSError: refused or skipped).
                with open_regular(item.path) as f:
                    data = f.read()
            except OSError as exc:
                out.append(exc)
                continue
        out.append(data if decoder is None else decoder(data))
    return out


def _pack_pooled(samples, writer, bar, workers, chunk, decoder):
    """Reads (and decodes, with a ``decoder``) chunk k+1 in the pool while chunk k is checked and
    written. A chunk is loaded as a few runs of samples per thread rather than a task per file: a
    future per file cost more than reading a cached 100 kB file."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="prefetch-pack")
    try:
        pending = None
        for items in itertools.chain(_chunks(samples.items, chunk), [None]):
            reading = None
            if items is not None:
                step = -(-len(items) // (4 * workers))
                reading = items, [pool.submit(_load, items[k:k + step], decoder)
                                  for k in range(0, len(items), step)]
            if pending is not None:
                done, futures = pending
                writer.add(done, [data for f in futures for data in f.result()])
                bar.update(len(done), writer.last_bytes)
            pending = reading
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- writing -----------------------------------------------------------------------------------

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


class _Refused:
    """Why a sample cannot be packed, found where it was loaded (the pool's threads)."""

    __slots__ = ("reason",)

    def __init__(self, reason):
        self.reason = reason


def _pillow():
    """PIL.Image, its plugins registered (once, here, not by the pool's threads racing)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError("prefetch: pack(encoding='raw') decodes the images with Pillow, which "
                          "cannot be imported (%s): pip install pillow" % exc) from exc
    Image.init()
    return Image


class _RawDecoder:
    """An image's encoded bytes -> its pixels as Pillow decodes them for torchvision's
    ImageFolder (``Image.open(f).convert("RGB")``), HWC uint8, or a :class:`_Refused`. Runs in
    the pool's threads: Pillow's decoders release the GIL."""

    def __init__(self, image_module, limit):
        self.Image, self.limit = image_module, limit

    def __call__(self, data):
        Image = self.Image
        if not len(data):
            return _Refused("not an image (empty: 0 bytes)")
        try:
            with Image.open(io.BytesIO(data)) as image:
                height, width = image.height, image.width
                if self.limit is not None and height * width > self.limit:
                    return _Refused(
                        "%d x %d = %d pixels, more than the limit of %d (prefetch.ops."
                        "max_image_pixels()): refused as a possible decompression bomb; "
                        "prefetch.ops.set_max_image_pixels(n) sets the limit (None: no limit)"
                        % (height, width, height * width, self.limit))
                rgb = image.convert("RGB")
        except Image.UnidentifiedImageError:
            return _Refused("not an image Pillow opens (starts with %r)" % bytes(data[:8]))
        except Image.DecompressionBombError as exc:
            return _Refused("refused by Pillow as a possible decompression bomb (%s)" % exc)
        except Exception as exc:  # truncated or corrupt data: OSError, SyntaxError, ValueError...
            return _Refused("cannot be decoded by Pillow (%s: %s)" % (type(exc).__name__, exc))
        pixels = np.asarray(rgb)
        if pixels.dtype != np.uint8 or pixels.shape != (height, width, 3):  # never, for RGB
            return _Refused("Pillow decoded it to %s %s, expected uint8 [%d, %d, 3]"
                            % (pixels.dtype, list(pixels.shape), height, width))
        return np.ascontiguousarray(pixels)


class _Writer:
    def __init__(self, directory, on_error, encoding):
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

    def refuse(self, item, reason):
        if self.on_error == "raise":
            raise ValueError("prefetch: pack: %s: %s" % (item.name, reason))
        self.skipped.append((item.name, reason))

    def add(self, items, datas):
        """Checks and writes one chunk: ``datas[k]`` is item k's bytes (with encoding "raw": its
        pixels, or why they cannot be packed), or the OSError that reading it raised."""
        self.last_bytes = 0
        # What is wrong with which sample, refused in the samples' order once all are checked
        # (the first one raises with on_error="raise", whichever check found it).
        reasons = {}
        for k, data in enumerate(datas):
            if isinstance(data, OSError):
                reasons[k] = "cannot be read: %s" % (data.strerror or data)
            elif isinstance(data, _Refused):
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

    def finish(self, classes):
        """Writes the tables and the header, syncs everything: the store is then complete."""
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
        self._write(HEADER, _header_text(header).encode())
        _fsync_directory(self.directory)

    def _write_table(self, name, array):
        # Little-endian whatever the host (only little-endian hosts pack today, but the file
        # says what it is either way).
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

    def close(self):
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


def _header_text(header):
    """The header as JSON, one key a line and one line per file (json.dumps(indent=...) would
    put every number of every shape on its own line)."""
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
                        "numeric arrays" % (name, item.name, _a(value), array.dtype))
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


def _fsync_directory(path):
    """Makes the directory's entries (new files, a rename) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    _fsync_directory(os.path.dirname(dest))
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
