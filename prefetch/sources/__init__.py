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

**Where sources come from.** A loader passes what the user gave through :func:`adapt`: each entry
of :data:`ADAPTERS` recognises a kind of source and wraps it (a Ray Data ``Dataset`` becomes a
:class:`RaySource`); anything else is its own source. The worker ring (:mod:`.worker_ring`,
DataLoader workers writing into shared pinned slots) is the Prefetcher's source for a DataLoader
whose ``collate_fn`` is :func:`prefetch.collate.samples`. A new source lives in this package:
a module that yields batches or PreparedBatches, and an entry in ADAPTERS if users pass it in
another form.
"""
from .._engine.tree import Leaf, Packed, PreparedBatch
from .._engine.tree import flatten as _flatten
from .ray import RaySource, is_ray_dataset

__all__ = ["PreparedBatch", "Packed", "Leaf", "prepare", "adapt", "ADAPTERS", "RaySource",
           "underlying_loader"]


def prepare(batch, name="batch"):
    """``batch`` as a :class:`PreparedBatch` (no Packed buffer): what the engine would make of it,
    made by the source instead (in a worker, say)."""
    return PreparedBatch(*_flatten(batch, name))


#: (recognise, wrap) pairs :func:`adapt` tries in order.
ADAPTERS = [(is_ray_dataset, RaySource)]


def adapt(source):
    """The source the engine runs for what a user passed: the first adapter that recognises it
    wraps it; anything else is returned as it is."""
    for recognises, wrap in ADAPTERS:
        if recognises(source):
            return wrap(source)
    return source


def underlying_loader(source):
    """The DataLoader a source wraps (its ``dataloader`` attribute), or the source itself."""
    return getattr(source, "dataloader", source)
