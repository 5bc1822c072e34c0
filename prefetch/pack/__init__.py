"""An alias of the store's writer, kept so that scripts written against it keep working: the
writer is :func:`prefetch.store.pack` (:mod:`prefetch.store.writer`), its command line
``python -m prefetch.store`` (``python -m prefetch.pack`` runs the same, under this name).

``prefetch.pack`` itself is the function (``prefetch.pack("train/", "train.store")``); this
module is what ``from prefetch.pack import pack, RAW_EXTENSIONS`` and ``python -m
prefetch.pack SRC DEST`` find. Nothing is defined here: every name is the new module's own object.
"""
from ..store.writer import JPEG_EXTENSIONS, RAW_EXTENSIONS, extensions, pack

__all__ = ["pack", "JPEG_EXTENSIONS", "RAW_EXTENSIONS", "extensions"]
