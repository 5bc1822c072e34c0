"""The worker ring as a source: :class:`RingLoader`, what :func:`prefetch.sources.adapt` makes of
a DataLoader the ring can serve (:func:`serves`) for a reader that wants the ring. The ring itself,
its protocol and the workers' side are :mod:`prefetch.sources.worker_ring`.
"""
import os
import threading
import typing
import weakref

import torch

from ..collate import samples as samples_collate
from . import worker_ring as ring_module  # (the module: its LEASE_ON_CPU is read when a ring is made)
from .worker_ring import WorkerRing

if typing.TYPE_CHECKING:  # for the annotation only: the package imports this module
    from . import Reader

__all__ = ["RingLoader", "usable", "serves"]


class RingLoader:
    """A DataLoader whose workers write into a :class:`WorkerRing`: the source
    :func:`prefetch.sources.adapt` makes of a DataLoader the ring can serve (:func:`serves`) for
    a reader that wants the ring (a Prefetcher with ``worker_ring=True``).

    Each ``iter()`` is one epoch through this process's ring (made at the first epoch, and again
    in a forked child, which cannot use its parent's). Everything else is the DataLoader's:
    ``len()``, ``dataset``, ``sampler``, ``batch_size``..., and ``state_dict()`` /
    ``load_state_dict()`` exactly when the DataLoader has them (those of the ring's copy of it,
    which owns the iterator the epochs run). The reader closes it (:meth:`close`: the ring's
    persistent workers are shut down) and adds its :meth:`stats` to its own.

    Args:
        loader: a ``torch.utils.data.DataLoader`` with workers and
            ``collate_fn=prefetch.collate.samples``.
        reader: a :class:`prefetch.sources.Reader`: the device (CPU: the batch handed out is
            the slot itself, see ``LEASE_ON_CPU``), ``depth`` and ``max_batch_bytes`` (the
            ring's size) and ``register_host`` (page-locks a block for the copy stream).
    """

    def __init__(self, loader: torch.utils.data.DataLoader, reader: "Reader") -> None:
        self.__dict__.update(_loader=loader, _reader=reader, _ring=None, _lock=threading.Lock(),
                             _lock_pid=os.getpid())

    def __getattr__(self, name):
        # Only for names not found here: the DataLoader's, so that a loader over this source
        # forwards them as it would the DataLoader's.
        loader = self.__dict__.get("_loader")
        if loader is None:
            raise AttributeError(name)
        if name in ("state_dict", "load_state_dict"):
            getattr(loader, name)  # AttributeError where the DataLoader has none

            def on_the_rings_copy(*args, **kwargs):  # (asking for it makes no ring yet)
                return getattr(self.worker_ring().loader, name)(*args, **kwargs)

            return on_the_rings_copy
        return getattr(loader, name)

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        return self.worker_ring().epoch()

    @property
    def dataloader(self):
        """The DataLoader the epochs iterate (the ring's copy of the user's): errors name its
        dataset indices, and its workers are released with an abandoned epoch."""
        return self.worker_ring().loader

    @property
    def ring(self):
        """The latest :class:`WorkerRing` (in a forked child, until its first epoch, the
        parent's: ``ring.pid`` says whose), or None before the first epoch."""
        return self._ring

    def worker_ring(self) -> WorkerRing:
        """This process's :class:`WorkerRing`, made on first use.

        Returns:
            WorkerRing: the ring this process's epochs run through.
        """
        if self._lock_pid != os.getpid():  # a forked child: the parent's lock may be held
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._lock:
            ring = self._ring
            if ring is None or ring.pid != os.getpid():
                reader = self._reader
                lease = reader.device.type == "cpu" and ring_module.LEASE_ON_CPU
                register = reader.register_host

                def pin(block):
                    return None if lease else register(block)

                ring = self._ring = WorkerRing(self._loader, reader.depth, reader.max_batch_bytes,
                                               lease=lease, pin=pin)
                # Dropped without close(): the ring's persistent workers are shut down too (they
                # would hold its block while the ring's copy of the DataLoader waits for the GC).
                weakref.finalize(self, ring.close).atexit = False
            return ring

    def stats(self) -> typing.Dict[str, int]:
        """The ring's counters (``worker_ring_*``, see ``Prefetcher.stats``); {} before its first
        epoch.

        Returns:
            dict[str, int]: the counters by name (bytes in bytes).
        """
        return {} if self._ring is None else self._ring.stats()

    def close(self) -> None:
        """Closes the ring: pauses it and shuts down persistent workers holding it (nothing in a
        forked child, whose ring is the parent's)."""
        if self._ring is not None:
            self._ring.close()  # (WorkerRing.close does nothing in another process)

    def __repr__(self):
        return "RingLoader(%r)" % (self._loader,)


def usable(loader):
    """True for a torch DataLoader with workers whose collate_fn is collate.samples.

    Args:
        loader: any source.

    Returns:
        bool: whether a :class:`WorkerRing` can serve ``loader``.
    """
    from torch.utils.data import DataLoader

    return (isinstance(loader, DataLoader) and loader.num_workers > 0
            and loader.collate_fn is samples_collate)


def serves(source, reader):
    """The worker ring's entry in :data:`prefetch.sources.ADAPTERS`: whether ``reader`` (a
    :class:`prefetch.sources.Reader`, or None) wants the ring and it can serve ``source``."""
    return reader is not None and reader.worker_ring and usable(source)
