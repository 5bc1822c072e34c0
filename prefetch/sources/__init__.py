"""Sources: what a loader iterates, and the forms in which a source may hand batches to the engine.

**The protocol.** A source is any iterable. Each item it yields is either

- a **batch**: a tensor, ndarray, number, or a nested tuple/list/dict/namedtuple/dataclass of
  them, with :class:`prefetch.Samples` for per-sample tensors and :class:`prefetch.Ragged` for
  samples of different sizes (what a DataLoader yields): the engine flattens it, collates its
  leaves into its pinned ring and copies them; or
- a :class:`PreparedBatch`: the batch already split for the engine (:func:`prepare` makes one, or
  a source builds its leaves itself: gather leaves that name rows of an array, as the ArrayLoader's
  host path does), optionally with a :class:`Packed` buffer its leaves already lie in (a worker
  ring slot), which the engine copies in one piece and releases once the copy has read it.

A source that wraps a DataLoader names it in a ``dataloader`` attribute (errors then name the
dataset index of a bad sample); one with ``state_dict()`` / ``load_state_dict()`` is resumed
mid-epoch.

**Where sources come from.** A loader passes what the user gave through :func:`adapt`, with a
:class:`Reader` saying who reads it: each entry of :data:`ADAPTERS` recognises a kind of source
and wraps it (a Ray Data ``Dataset`` becomes a :class:`RaySource`; a DataLoader with workers and
``collate_fn=prefetch.collate.samples`` becomes a :class:`~.ring_loader.RingLoader`, whose
workers write into shared pinned slots, when the reader wants the worker ring); anything else is
its own source. A source adapt() made for a reader belongs to that reader, which calls its
``close()`` and adds its ``stats()`` to its own where it has them. A new source lives in this
package: a module that yields batches or PreparedBatches, and an entry in ADAPTERS if users pass
it in another form.
"""
import typing

import torch

from .._core.tree import Leaf, Packed, PreparedBatch
from .._core.tree import flatten as _flatten
from .abandoned import release_workers
from .ray import RaySource, is_ray_dataset
from .sampling import finish_sampling
from .ring_loader import RingLoader
from .ring_loader import serves as _ring_serves

__all__ = ["PreparedBatch", "Packed", "Leaf", "prepare", "adapt", "ADAPTERS", "RaySource",
           "RingLoader", "Reader", "underlying_loader", "abandon"]


class Reader(typing.NamedTuple):
    """Who reads a source, for the sources that write into the reader's memory (the worker ring).

    Attributes:
        device (torch.device): where the batches go (a CPU device: a worker ring hands out its
            slots themselves instead of copies).
        depth (int): batches the reader prepares ahead (ring slots it may hold).
        max_batch_bytes (int or None): the largest batch the reader accepts, in bytes.
        register_host (Callable[[SharedBlock], object]): page-locks a block of host memory for
            the reader's copy stream; returns the registration (None: not registered).
        worker_ring (bool): whether the reader wants a DataLoader's workers to write into its
            ring (the Prefetcher's ``worker_ring``).
    """

    device: torch.device
    depth: int
    max_batch_bytes: typing.Optional[int]
    register_host: typing.Callable[[object], object]
    worker_ring: bool = True


def prepare(batch: typing.Any, name: str = "batch") -> PreparedBatch:
    """``batch`` as a :class:`PreparedBatch` (no Packed buffer): what the engine would make of it,
    made by the source instead (in a worker, say).

    Args:
        batch: a batch as a source yields it (tensors, ndarrays, numbers, Samples, Ragged, in
            nested tuples/lists/dicts/namedtuples/dataclasses).
        name (str): what error messages call the batch.

    Returns:
        PreparedBatch: the batch's spec, leaves and moves.

    Raises:
        prefetch.CollateError: a leaf that cannot be collated (mixed dtypes or shapes).
    """
    return PreparedBatch(*_flatten(batch, name))


def _ray_dataset(source, reader):
    return is_ray_dataset(source)


def _ray_source(source, reader):
    return RaySource(source)


#: (recognise, wrap) pairs :func:`adapt` tries in order, each called as ``f(source, reader)``.
ADAPTERS = [(_ray_dataset, _ray_source), (_ring_serves, RingLoader)]


def adapt(source: typing.Any, reader: typing.Optional[Reader] = None) -> typing.Any:
    """The source the engine runs for what a user passed: the first adapter that recognises it
    wraps it; anything else is returned as it is.

    Args:
        source: what the user passed (any iterable of batches, a Ray Data ``Dataset``, a
            DataLoader).
        reader (Reader or None): who reads it; None (only asking what the source is, say
            whether it is stateful): no adapter that needs a reader applies.

    Returns:
        The source to iterate: ``source`` itself or its wrapper.
    """
    for recognises, wrap in ADAPTERS:
        if recognises(source, reader):
            return wrap(source, reader)
    return source


def underlying_loader(source: typing.Any) -> typing.Any:
    """The DataLoader a source wraps (its ``dataloader`` attribute), or the source itself.

    Args:
        source: a source as :func:`adapt` returns it (a :class:`RingLoader`, a DataLoader, any
            iterable).

    Returns:
        ``source.dataloader`` where the source names one, else ``source``.
    """
    return getattr(source, "dataloader", source)


def abandon(iterator: typing.Iterator, source: typing.Any) -> None:
    """The clean-up of an epoch's ``iterator`` over ``source`` that ended before the source did (a
    ``break``, an error, a newer epoch): what a loader passes its Pipeline as ``abandon``.

    The sampler is read to the end of its epoch (:func:`.sampling.finish_sampling`: the next
    epochs' order does not depend on how far the producer had read ahead), and DataLoader
    workers are shut down now (:func:`.abandoned.release_workers`: not whenever a kept
    traceback lets go of the iterator). Either failing is swallowed: what is at stake is the
    order of later epochs, or when the workers go.

    Args:
        iterator: what ``iter(source)`` returned.
        source: the source the epoch ran (its DataLoader, if it names one in ``dataloader``).
    """
    try:
        finish_sampling(iterator)
    except Exception:  # noqa: BLE001 - the order of later epochs is all that is at stake
        pass
    try:
        release_workers(iterator, underlying_loader(source))
    except Exception:  # noqa: BLE001 - the workers then go when the iterator does
        pass
