"""The worker ring: DataLoader workers collate each batch straight into a slot of one block of
shared memory that lives as long as the Prefetcher, and send only a small descriptor.

Why: with ``num_workers > 0`` a batch otherwise reaches the main process through shared memory
made fresh for it (``default_collate``: a new block per batch; ``collate.samples``: one per
sample), and the page faults of that fresh memory, not the copy, are what cost. Here the memory
is made once, so a worker's write and the main process's read run at memory speed.

The protocol — the slot table's states, who moves a slot from which state to which, the
generations that fence off slots of an interrupted epoch, the bound on the number of slots — lives
in C++ next to the class that implements it (csrc/core/slot_table.h, bound as ``_C.SlotTable``),
and docs/engine.md ("Workers write into a shared ring") proves the bound. Each side crosses into
C++ once per transition of a slot:

- main process (:class:`WorkerRing`): owns the block and the control words; it iterates a
  shallow copy of the DataLoader whose collate_fn is :class:`RingCollate` (the user's DataLoader
  is never modified, so iterating it at any moment, from any thread, stays plain); each
  :class:`SlotBatch` that arrives becomes a ``PreparedBatch`` whose layout (offsets, dtypes,
  shapes, as the worker wrote them) goes to the engine as it is. CUDA: the engine leases the slot,
  copies it to the device in one copy from the page-locked block (``engine.stage_packed``) and
  frees it when that copy has run. CPU: ``_C.packed_views`` leases the slot and hands out views of
  it as the batch; the last view's death frees it, so the main process copies nothing.
- worker (:class:`RingCollate`): ``collate.samples`` as always, then, while a Prefetcher reads the
  ring, one ``SlotTable.place``: lay the batch out, claim a free slot, write every tensor leaf into
  it, commit it; it returns a SlotBatch. Anything it cannot place (no block yet, a batch larger
  than a slot, ragged or mixed samples, no free slot while the ring is paused) goes back exactly as
  ``collate.samples`` made it: the main process then collates it as it always did, and raises the
  same errors.
"""
import copy
import os
import queue
import threading
import typing
import warnings
import weakref

import torch

from .._core.extension import C as _C
from .._core.errors import CollateError
from .._core.tree import (DATACLASS_NODE, LEAF_NODE, LIST_NODE, MAP_NODE, MOVE_NODE,
                          NAMEDTUPLE_NODE, RAGGED_NODE, TUPLE_NODE, Packed, PreparedBatch, flatten)
from ..collate import samples as samples_collate
from .shared_block import SharedBlock

if typing.TYPE_CHECKING:  # for the annotation only: the package imports this module
    from . import Reader

__all__ = ["RingCollate", "RingLoader", "SlotBatch", "WorkerRing", "serves", "usable"]

# The CPU device hands the slot itself out as the batch (a lease) instead of copying it. Tests
# turn it off to run the CUDA path's single copy from the slot (Engine.stage_packed) on the host.
LEASE_ON_CPU = True
# A worker that finds every slot taken gives the batch back as collate.samples made it after
# _GIVE_UP_S (SlotTable.place, sleeping between claims): by the bound in docs/engine.md a slot is
# then held by a consumer keeping more batches than a training loop does (list(prefetcher)), which
# must not stall the workers.
_GIVE_UP_S = 0.02
# What SlotTable.place returns instead of (generation, slot, layout).
_PAUSED, _FELL_BACK, _STARVED = 0, 1, 2


class SlotBatch:
    """What a worker sends instead of a batch: the slot, and how to rebuild the batch from it
    (``layout``: [(offset, dtype, shape)] of each leaf within the slot, as the engine takes it).
    A plain object, not a tuple, so that the DataLoader's ``pin_memory`` leaves it alone."""

    __slots__ = ("generation", "version", "slot", "spec", "layout")

    def __init__(self, generation, version, slot, spec, layout):
        self.generation, self.version, self.slot = generation, version, slot
        self.spec, self.layout = spec, layout

    def __getstate__(self):
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state):
        for k, v in zip(self.__slots__, state):
            setattr(self, k, v)


def _strip(spec):
    """The spec without the tensors its dataclass and mapping originals still hold (they would
    travel through shared memory one by one, which the ring exists to avoid). ``unflatten``
    only copies those originals and sets the fields it rebuilds."""
    kind = spec[0]
    if kind == DATACLASS_NODE:
        _, original, names, children = spec
        clone = copy.copy(original)
        for n in names:
            object.__setattr__(clone, n, None)
        return (kind, clone, names, [_strip(c) for c in children])
    if kind == MAP_NODE:
        _, original, keys, children = spec
        if original is not None:
            try:
                clone = copy.copy(original)
                for k in keys:
                    clone[k] = None
                original = clone
            except (TypeError, AttributeError):
                pass  # an immutable mapping: unflatten rebuilds it from its type, keep it
        return (kind, original, keys, [_strip(c) for c in children])
    if kind in (NAMEDTUPLE_NODE, TUPLE_NODE, LIST_NODE):
        return (kind, spec[1], [_strip(c) for c in spec[2]])
    return spec  # a leaf index, or a constant


def _leaves_as_moves(spec):
    """The spec with every engine leaf turned into a tensor already where it belongs: the CPU
    device's batch is the slot itself, which the engine must not copy."""
    kind = spec[0]
    if kind == LEAF_NODE:
        return (MOVE_NODE, spec[1])
    if kind in (DATACLASS_NODE, MAP_NODE):
        return spec[:3] + ([_leaves_as_moves(c) for c in spec[3]],)
    if kind == RAGGED_NODE:
        return (kind, [_leaves_as_moves(c) for c in spec[1]]) + tuple(spec[2:])
    if kind in (NAMEDTUPLE_NODE, TUPLE_NODE, LIST_NODE):
        return (kind, spec[1], [_leaves_as_moves(c) for c in spec[2]])
    return spec


def _words(control_block):
    """The slot table's int64 control words over a SharedBlock."""
    return control_block.tensor.view(torch.int64)


class RingCollate:
    """The collate_fn of the ring's copy of the DataLoader (see the module docstring). Outside a
    worker, or while the ring is paused, it returns exactly what :func:`prefetch.collate.samples`
    returns: the batch then takes the usual path."""

    def __init__(self, control, n_slots, mailboxes, block, version, table=None):
        # control and block are SharedBlocks (memfd: not bounded by /dev/shm); they pickle as
        # descriptors for spawned workers and are inherited as they are by forked ones.
        self.control_block, self.n_slots, self.mailboxes = control, n_slots, mailboxes
        self.block, self.version = block, version
        # The DataLoader iterator these workers belong to (stamped before it is made): workers
        # of an older iterator that is still alive, e.g. held by a kept exception, must not
        # take the current iterator's slots.
        self.serial = 0
        self._table = table  # this process's _C.SlotTable over `control` (made where it is used)
        self._starved = False
        self._parent = None

    def __getstate__(self):
        return {k: getattr(self, k) for k in ("control_block", "n_slots", "mailboxes", "block",
                                             "version", "serial")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._table = None
        self._parent = None
        self._starved = False

    def __call__(self, batch):
        collated = samples_collate(batch)
        info = torch.utils.data.get_worker_info()
        if info is None:
            return collated
        table = self._table
        if table is None:
            table = self._table = _C.SlotTable(_words(self.control_block), self.n_slots)
        version = table.accepting(self.serial)
        if version is None:
            return collated
        if self._parent is None:
            self._parent = os.getppid()  # as torch's worker watchdog: a new parent = main gone
        try:
            spec, leaves, moves = flatten(collated)
        except CollateError:
            moves = True  # the main process raises it, naming the sample, as without workers
        if moves:
            table.fall_back()
            return collated
        if version != self.version:
            self._take_block(info.id, version)
        # (After one give-up, one try per batch until a claim succeeds again: a consumer that
        # keeps every batch must cost the workers nothing but the usual path.)
        block = None if self.block is None else self.block.tensor
        placed = table.place(self.serial, self.version, block, [leaf.value for leaf in leaves],
                             0.0 if self._starved else _GIVE_UP_S, self._parent)
        if type(placed) is not tuple:
            if placed == _STARVED:
                self._starved = True
            return collated
        self._starved = False
        generation, slot, layout = placed
        return SlotBatch(generation, self.version, slot, _strip(spec), layout)

    def _take_block(self, worker_id, wanted):
        """The block of version ``wanted`` from this worker's mailbox, if it has arrived (until
        then place() sends batches the usual way)."""
        box = self.mailboxes[worker_id]
        while True:
            try:
                version, block = box.get_nowait()
            except queue.Empty:
                return
            if version == wanted:
                self.block, self.version = block, version
                return


def _close_queues(mailboxes):
    for box in mailboxes:
        while True:  # fetch what nobody read: each message holds a shared block's fd
            try:
                box.get_nowait()
            except (queue.Empty, OSError, ValueError, EOFError):
                break
        box.close()
        box.cancel_join_thread()  # never block at exit on a worker that is gone


class WorkerRing:
    """The main process's side of the ring of one Prefetcher over one DataLoader.

    ``n_slots = num_workers * prefetch_factor + depth + 2`` (``+ 3`` with ``lease``): every batch
    the DataLoader can have dispatched and not yielded, plus what the Prefetcher holds
    (docs/engine.md proves it enough). Blocks are made on demand: the first batches of the first
    epoch, and any batch larger than a slot, take the usual path and tell the main process the
    size they needed. ``lease`` (the CPU device): the batch handed out *is* the slot, freed when
    its last view dies, instead of a copy of it.
    """

    def __init__(self, loader, depth, max_batch_bytes, lease=False, pin=None):
        self.lease, self.pin = lease, pin
        self.n_slots = (loader.num_workers * (loader.prefetch_factor or 2) + depth
                        + (3 if lease else 2))
        self.max_batch_bytes = max_batch_bytes
        self.pid = os.getpid()
        ctx = loader.multiprocessing_context or torch.multiprocessing
        # memfd_create where Linux has it: a ring is not bounded by /dev/shm (Docker's 64 MB).
        self.control_block = SharedBlock(8 * _C.SlotTable.words_for(self.n_slots),
                                         name="prefetch-ring-control")
        self.control = _words(self.control_block)
        self.table = _C.SlotTable(self.control, self.n_slots)
        self.mailboxes = [ctx.Queue() for _ in range(loader.num_workers)]
        self.blocks = {}  # version -> block, for SlotBatches still in flight
        self.pins = {}    # version -> the block's registration with the copy stream (pin(block))
        self.version = 0
        self.collate = RingCollate(self.control_block, self.n_slots, self.mailboxes, None, 0,
                                   table=self.table)
        self.loader = _private_loader(loader, self.collate)
        # Weak: after its epoch a DataLoader iterator lives only as long as the DataLoader
        # (persistent workers) or the consumer (a kept exception) holds it, never for the ring.
        self._iterator = lambda: None  # the DataLoader iterator made with self.collate
        self._batches = lambda: None   # the live epoch's _RingEpoch
        self._serials = 0      # DataLoader iterators made so far
        self._epochs = 0       # epochs started; only the live one may pause the ring
        # Batches that reached this process the usual way (pickled per sample), whatever the
        # reason: the workers' fallbacks, and an epoch's first batches made while the ring was
        # still paused (iter() primes W x P tasks before open_epoch), which the table does not
        # count. Counted here, where every batch of the ring's epochs passes.
        self.usual_way = 0
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_queues, self.mailboxes)

    # --- epochs ---------------------------------------------------------------------------------

    def epoch(self):
        """Starts one epoch of the DataLoader now (not at the first ``next()``: a stateful
        DataLoader's ``state_dict()``, taken right after, would otherwise make its iterator
        without the ring) and returns its batches: PreparedBatches of slot views, freed once
        staged, or plain collated batches (everything the workers did not place)."""
        self.table.pause()
        previous = self._batches()
        if previous is not None:  # still referenced (a kept exception): end it and its workers
            previous.close()      # before new workers fork with a copy of it
        self._epochs += 1
        self._drop_dead_persistent_workers()
        try:
            it = self._iter_loader()
        except RuntimeError:
            # A persistent worker died after that check: torch's reset waited for its answer
            # and found it dead. Once more, with fresh workers.
            if not self._drop_dead_persistent_workers():
                raise
            it = self._iter_loader()
        self._iterator = weakref.ref(it)
        # Every task of an earlier epoch is finished now (persistent workers answer the
        # DataLoader's reset only after them; other workers were shut down): a new generation
        # takes back every slot whose writer is done or gone, then the new iterator's workers may
        # claim; the blocks no batch can come from any more go.
        with self._lock:
            self.blocks = {v: b for v, b in self.blocks.items() if v == self.version}
            self.pins = {v: p for v, p in self.pins.items() if v == self.version}
            self.table.open_epoch(it._prefetch_ring_serial)
        batches = _RingEpoch(self, it, self._epochs)
        self._batches = weakref.ref(batches)
        return batches

    @property
    def iterator(self):
        """The last DataLoader iterator made with the ring's collate_fn, while it lives."""
        return self._iterator()

    def _drop_dead_persistent_workers(self):
        """Persistent workers of ours with one dead: torch's DataLoader would reuse them and
        fail every later epoch (its reset waits for the dead worker); fresh ones are made.
        True when it dropped them."""
        it = self.iterator
        if it is None or getattr(self.loader, "_iterator", None) is not it:
            return False
        if all(w.is_alive() for w in getattr(it, "_workers", ())):
            return False
        self.loader._iterator = None
        it._shutdown_workers()
        return True

    def _iter_loader(self):
        self.collate.serial = self._serials + 1  # what a new iterator's workers will carry
        it = iter(self.loader)
        if getattr(it, "_prefetch_ring_serial", None) is None:  # new (not a persistent reset)
            self._serials += 1
            it._prefetch_ring_serial = self._serials
        return it

    def _grow(self):
        need = self.table.needed_bytes
        old = self.table.stats()["slot_bytes"]
        if self.max_batch_bytes is not None and need > self.max_batch_bytes:
            # The engine refuses such a batch (it goes the usual way and raises there), but it
            # must not keep the ring from being made or grown for the rest of the run: slots as
            # large as the limit hold every batch the engine accepts.
            if old >= self.max_batch_bytes:
                return
            need = self.max_batch_bytes
        slot_bytes = max(need, old + old // 4)
        if self.max_batch_bytes is not None:
            slot_bytes = min(slot_bytes, self.max_batch_bytes)
        slot_bytes = (slot_bytes + 4095) // 4096 * 4096
        shared = SharedBlock(self.n_slots * slot_bytes)
        block = shared.tensor
        pinned = self._pin(block)
        with self._lock:
            self.version += 1
            self.blocks[self.version] = block
            self.pins[self.version] = pinned
            self.collate.block, self.collate.version = shared, self.version  # for new workers
            # A worker claims in the old generation (and writes into the old block, which is
            # kept), or in the new one, and then only once it holds the new block
            # (csrc/core/slot_table.h: the order of the announcement).
            self.table.announce_block(self.version, slot_bytes)
        for box in self.mailboxes:
            box.put((self.version, shared))

    def _pin(self, block):
        """The block registered with the copy stream (CUDA: page-locked once, so each slot's
        copy to the device is one asynchronous DMA from it), or None. A block that cannot be
        locked still works: the driver then stages each copy, more slowly (warned once)."""
        if self.pin is None:
            return None
        try:
            return self.pin(block)
        except _C.BackendError as exc:
            if not getattr(self, "_pin_warned", False):
                self._pin_warned = True
                warnings.warn("prefetch: could not page-lock the worker ring's shared block "
                              "(%s); its copies to the device are staged by the CUDA driver "
                              "and slower. Raise `ulimit -l` to lift the limit." % exc,
                              RuntimeWarning, stacklevel=2)
            return None

    def _prepare(self, item):
        """The PreparedBatch of a SlotBatch: its layout as the worker sent it, and its slot, which
        the engine leases (CUDA: held until its copy from the slot has run) or (``lease``, the
        CPU device) which is leased here and handed out as the batch itself, freed when the last
        view of it dies."""
        block = self.blocks.get(item.version)
        if block is None:  # pragma: no cover - a protocol violation, never data to trust
            raise RuntimeError("prefetch: a worker sent a batch in block version %d, which the "
                               "ring no longer holds" % item.version)
        slot = (self.table, item.slot, item.generation)
        if self.lease:
            # (A worker places no batch with moves of its own: leaf k is move k.)
            return PreparedBatch(_leaves_as_moves(item.spec), [],
                                 _C.packed_views(block, item.layout, slot))
        return PreparedBatch(item.spec, [], [],
                             Packed(block, item.layout, self.pins.get(item.version), slot))

    # --- the rest -------------------------------------------------------------------------------

    def stats(self):
        out = self.table.stats()
        out["worker_ring_usual_way"] = self.usual_way
        out["worker_ring_slots"] = self.n_slots
        out["worker_ring_bytes"] = self.n_slots * out.pop("slot_bytes")
        return out

    def close(self):
        """Pauses the ring and, when persistent workers hold it, shuts them down (they would
        keep the block alive as long as the DataLoader lives)."""
        if self.pid != os.getpid():
            return  # a forked child's copy: the ring and its workers are the parent's
        self.table.pause()
        it = self.iterator
        self._iterator = lambda: None
        if it is not None and getattr(self.loader, "_iterator", None) is it:
            self.loader._iterator = None
            it._shutdown_workers()
        self.blocks.clear()
        self.pins.clear()  # a copy still reading a block holds its pin until it is done
        self.collate.block = None
        self._finalizer()


# DataLoader iterators a forked child's copy of an epoch let go of (see _RingEpoch.close): never
# collected in that child. Always empty in the process that made them.
_INHERITED_ITERATORS = []


class _RingEpoch:
    """One epoch's batches. Dropping or closing it pauses the ring before the DataLoader
    iterator goes, so no worker waits for a slot while its DataLoader shuts it down — unless a
    newer epoch is live (an old one may be collected late, from an exception's cycle)."""

    def __init__(self, ring, iterator, epoch):
        self._ring, self._it, self._epoch = ring, iterator, epoch

    def __iter__(self):
        return self

    @property
    def dataloader_iterator(self):
        """The DataLoader iterator this epoch reads (sources.sampling finishes its sampler)."""
        return self._it

    def __next__(self):
        if self._it is None:
            raise StopIteration
        ring = self._ring
        item = next(self._it)
        if type(item) is SlotBatch:
            return ring._prepare(item)
        # A worker that needed a larger slot sent its batch the usual way, as this one: grow now,
        # between two batches (the producer holds no slot).
        ring.usual_way += 1
        if ring.table.needs_growth():
            ring._grow()
        return item

    def close(self):
        ring = self._ring
        if ring.pid != os.getpid():
            # A forked child's copy (a kept exception's traceback inherited by the workers of
            # another DataLoader): the ring and its workers are the parent's; pausing would write
            # the parent's control words from the child. Nor may the child collect the iterator:
            # torch's __del__ would shut its workers down, and the done event it sets is shared
            # with the parent's workers, which would then drop every index while the parent's
            # epoch waits for them forever (2 runs in 15 here). Kept for the child's lifetime.
            if self._it is not None:
                _INHERITED_ITERATORS.append(self._it)
            self._it = None
            return
        it, self._it = self._it, None
        if it is None:
            return
        if ring._epochs == self._epoch:
            ring.table.pause()
        # Workers of a non-persistent iterator go now, not when the iterator is collected: a
        # kept exception's traceback may hold it for long, and its workers with it.
        if getattr(ring.loader, "_iterator", None) is not it and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def __del__(self):
        self.close()


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
                lease = reader.device.type == "cpu" and LEASE_ON_CPU
                register = reader.register_host

                def pin(block):
                    return None if lease else register(block)

                ring = self._ring = WorkerRing(self._loader, reader.depth, reader.max_batch_bytes,
                                               lease=lease, pin=pin)
                # Dropped without close(): the ring's persistent workers are shut down too (they
                # would hold its block while the ring's copy of the DataLoader waits for the GC).
                weakref.finalize(self, ring.close).atexit = False
            return ring

    def stats(self) -> dict[str, int]:
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


def _private_loader(loader, collate):
    """The shallow copy of the user's DataLoader that the ring iterates: the same dataset,
    sampler and settings, the ring's collate_fn, and an iterator of its own (persistent workers,
    a StatefulDataLoader's state). Iterating the user's DataLoader directly — at any moment, from
    any thread, under a second Prefetcher, with persistent workers of its own — therefore yields
    ``collate.samples``' output and never disturbs the ring's iterator (swapping the collate_fn
    of the shared object from the producer thread handed SlotBatches to a plain loop started in
    that window)."""
    own = copy.copy(loader)
    own.collate_fn = collate
    own._iterator = None  # persistent workers the user's DataLoader started stay its own
    if hasattr(own, "_initial_iter_for_state_dict"):  # StatefulDataLoader's: for that iterator
        own._initial_iter_for_state_dict = False
    return own
