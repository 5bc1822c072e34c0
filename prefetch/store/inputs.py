"""What :func:`prefetch.pack` packs: a directory walked as torchvision's ImageFolder walks it, a
list of paths, or an iterable of encoded samples, turned into items (a name for messages, a path
or the bytes, a label, fields); and each item's bytes loaded (a regular file read, or with
``encoding="raw"`` decoded by Pillow) in the writer's thread pool.

Nothing here writes: :mod:`prefetch.store.builder` checks and writes what is loaded.
"""
import io
import itertools
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .files import open_regular

__all__ = ["JPEG_EXTENSIONS", "RAW_EXTENSIONS", "extensions", "collect_samples", "chunks",
           "load_items", "Refused", "RawDecoder", "pillow", "a_type"]

# The names a folder's files are taken by (compared in lower case); other files are ignored.
JPEG_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif")
# With encoding="raw": the formats Pillow opens without extra plugins (a fixed list, as
# torchvision's IMG_EXTENSIONS, so that what a folder packs into does not depend on the plugins
# installed).
RAW_EXTENSIONS = JPEG_EXTENSIONS + (".png", ".apng", ".bmp", ".dib", ".gif", ".webp", ".tif",
                                    ".tiff", ".ppm", ".pgm", ".pbm", ".pnm", ".tga")


class _Item:
    """One sample to pack: its name for messages, and where its bytes come from."""

    __slots__ = ("name", "path", "data", "label", "fields")

    def __init__(self, name, path=None, data=None, label=None, fields=None):
        self.name, self.path, self.data, self.label, self.fields = name, path, data, label, fields


class _Samples:
    """What :func:`collect_samples` found: the items to pack, and who reads their bytes."""

    def __init__(self, items, reads):
        self.items = items  # an iterator of _Item
        self.reads = reads  # the items are paths, read by the pool


def collect_samples(source: Any, labels: Optional[Sequence[int]],
                    fields: Optional[Dict[str, Sequence]], dest: str, encoding: str
                    ) -> Tuple["_Samples", Optional[int], Optional[List[str]], List[str]]:
    """The samples of any kind of source :func:`prefetch.pack` takes (its docstring says which).

    Args:
        source: a directory, a list or tuple of paths, or an iterable of samples.
        labels: one int per path of a list of paths, or None.
        fields: name -> one value per file, for a directory or a list of paths, or None.
        dest: the store's absolute path (a store inside a source directory is not a class).
        encoding: ``"jpeg"`` or ``"raw"``: which file names a directory's files are taken by.

    Returns:
        ``(samples, total, classes, ignored)``: ``samples.items`` an iterator of items (consumed
        once), ``samples.reads`` whether they are paths to read; ``total`` the count or None for
        an iterable without ``len``; ``classes`` a directory's class names or None; ``ignored``
        the paths of a directory's files not taken for their names.

    Raises:
        ValueError: labels or fields that do not fit the source, a directory laid out as
            ImageFolder refuses, a symlink loop.
        TypeError: a source of none of these kinds, a list mixing paths and other things.
        FileNotFoundError: a directory that does not exist.
    """
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


def extensions(encoding: str) -> Tuple[str, ...]:
    """The file names a directory's files are taken by.

    Args:
        encoding: ``"jpeg"`` or ``"raw"``.

    Returns:
        The suffixes, lower case (:data:`RAW_EXTENSIONS` for "raw", else
        :data:`JPEG_EXTENSIONS`).
    """
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
                    "(bytes, fields) or (bytes, label, fields)" % (name, a_type(data)))


def a_type(x: object) -> str:
    """``x``'s type for a message, with its article: ``"a str"``, ``"an int"``."""
    name = type(x).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def chunks(iterator: Iterator, size: int) -> Iterator[list]:
    """Lists of ``size`` items of ``iterator`` (the last one shorter), read as they are needed."""
    while True:
        items = list(itertools.islice(iterator, size))
        if not items:
            return
        yield items


def load_items(items: Sequence["_Item"], decoder: Optional["RawDecoder"]) -> list:
    """Loads a run of items, in a thread of the writer's pool.

    Args:
        items: the items (from :func:`collect_samples`).
        decoder: a :class:`RawDecoder` with ``encoding="raw"``, else None.

    Returns:
        One entry per item, in order: its bytes (its file's, read here, or its own), or the
        OSError reading it raised; with a ``decoder``, what it makes of them (pixels, or a
        :class:`Refused`). The writer reports each by name with its chunk, in the samples' order.
    """
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


class Refused:
    """Why a sample cannot be packed, found where it was loaded (the pool's threads).

    Args:
        reason: the reason, as the refusal's message shows it.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def pillow() -> Any:
    """PIL.Image, its plugins registered (once, here, not by the pool's threads racing).

    Returns:
        The ``PIL.Image`` module.

    Raises:
        ImportError: Pillow cannot be imported (the message says ``pip install pillow``).
    """
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError("prefetch: pack(encoding='raw') decodes the images with Pillow, which "
                          "cannot be imported (%s): pip install pillow" % exc) from exc
    Image.init()
    return Image


class RawDecoder:
    """An image's encoded bytes -> its pixels as Pillow decodes them for torchvision's
    ImageFolder (``Image.open(f).convert("RGB")``), HWC uint8, or a :class:`Refused`. Runs in
    the pool's threads: Pillow's decoders release the GIL.

    Args:
        image_module: ``PIL.Image`` (from :func:`pillow`).
        limit: the most pixels (H * W) an image may have (:func:`prefetch.ops.max_image_pixels`),
            or None for no limit of prefetch's own.

    Calling it with the encoded bytes (any bytes-like object) returns a C-contiguous uint8
    ndarray ``[H, W, 3]``, or a :class:`Refused` saying why (empty, not an image Pillow opens,
    over the limit, corrupt): it never raises for the data's sake.
    """

    def __init__(self, image_module: Any, limit: Optional[int]):
        self.Image, self.limit = image_module, limit

    def __call__(self, data: Any) -> Union[np.ndarray, Refused]:
        Image = self.Image
        if not len(data):
            return Refused("not an image (empty: 0 bytes)")
        try:
            with Image.open(io.BytesIO(data)) as image:
                height, width = image.height, image.width
                if self.limit is not None and height * width > self.limit:
                    return Refused(
                        "%d x %d = %d pixels, more than the limit of %d (prefetch.ops."
                        "max_image_pixels()): refused as a possible decompression bomb; "
                        "prefetch.ops.set_max_image_pixels(n) sets the limit (None: no limit)"
                        % (height, width, height * width, self.limit))
                rgb = image.convert("RGB")
        except Image.UnidentifiedImageError:
            return Refused("not an image Pillow opens (starts with %r)" % bytes(data[:8]))
        except Image.DecompressionBombError as exc:
            return Refused("refused by Pillow as a possible decompression bomb (%s)" % exc)
        except Exception as exc:  # truncated or corrupt data: OSError, SyntaxError, ValueError...
            return Refused("cannot be decoded by Pillow (%s: %s)" % (type(exc).__name__, exc))
        pixels = np.asarray(rgb)
        if pixels.dtype != np.uint8 or pixels.shape != (height, width, 3):  # never, for RGB
            return Refused("Pillow decoded it to %s %s, expected uint8 [%d, %d, 3]"
                            % (pixels.dtype, list(pixels.shape), height, width))
        return np.ascontiguousarray(pixels)
