"""The worker ring: DataLoader workers collate each batch straight into a slot of one block of
shared memory that lives as long as the Prefetcher, and send only a small descriptor.

Why: with ``num_workers > 0`` a batch otherwise reaches the main process through shared memory
made fresh for it (``default_collate``: a new block per batch; ``collate.samples``: one per
sample), and the page faults of that fresh memory, not the copy, are what cost. Here the memory
is made once, so a worker's write and the main process's read run at memory speed.

docs/engine.md ("Workers write into a shared ring") states the protocol: the slot table (one
atomic word per slot, csrc/core/slot_words.h), who moves a slot from state to state, the
generations that fence off slots of an interrupted epoch, and the bound on the number of slots.
In short:

- main process (:class:`WorkerRing`): owns the block and the control words; ``iter()`` of the
  DataLoader is made with :class:`RingCollate` as its collate_fn for that iterator only; each
  :class:`SlotBatch` that arrives becomes a ``PreparedBatch`` of views into the block, and its
  slot LEASED to a hold (``_C.SlotRelease``) that frees it once. CUDA: the engine copies the slot
  to the device in one copy from the page-locked block (``engine.stage_packed``) and calls the
  hold when that copy has run. CPU: the views *are* the batch handed out, and the hold is the
  deleter of their storage (``_C.slot_lease``), so the main process copies nothing.
- worker (:class:`RingCollate`): ``collate.samples`` as always, then, while a Prefetcher reads the
  ring, claims a free slot, writes every tensor leaf into it and returns a SlotBatch. Anything it
  cannot place (no block yet, a batch larger than a slot, ragged or mixed samples, no free slot
  while the ring is paused) goes back exactly as ``collate.samples`` made it: the main process
  then collates it as it always did, and raises the same errors.
"""
import copy
import math
import os
import queue
import threading
import time
import warnings
import weakref

import torch

from .._engine.extension import _C
from .._engine.tree import (_DATACLASS, _LEAF, _LIST, _MAP, _MOVE, _NAMEDTUPLE, _RAGGED, _TUPLE, Leaf,
                    Packed,
                    PreparedBatch, flatten)
from ..collate import samples as samples_collate
from ..errors import CollateError

__all__ = ["RingCollate", "SlotBatch", "WorkerRing", "ring_source"]

# The control words, in front of the slot words, in one shared int64 tensor.
_GENERATION = 0   # the generation a claim must match (main: bumped at every refill)
_ACCEPTING = 1    # 1 while a Prefetcher run reads the ring; workers fall back otherwise
_VERSION = 2      # the block workers must write into (main: bumped at every new block)
_SLOT_BYTES = 3   # bytes per slot of that block
_NEED_BYTES = 4   # the largest batch a worker could not place (workers raise it)
_WAIT_NS = 5      # summed over workers: time spent waiting for a free slot
_WRITE_NS = 6     # summed over workers: time spent writing batches into slots
_RING_BATCHES = 7
_FALLBACKS = 8    # batches returned as collate.samples made them
_SERIAL = 9       # the DataLoader iterator whose workers may claim (main: set at every epoch)
_WORDS = 16       # first slot word

_ALIGN = 64
# The CPU device hands the slot itself out as the batch (a lease) instead of copying it. Tests
# turn it off to run the CUDA path's single copy from the slot (Engine.stage_packed) on the host.
LEASE_ON_CPU = True
_FREE, _WRITING, _SENT, _LEASED = 0, 1, 2, 3
# A worker that finds every slot taken sleeps between claims (at most this long), and gives the
# batch back as collate.samples made it after _GIVE_UP_S: by the bound in docs/engine.md a slot
# is then held by a consumer keeping more batches than a training loop does (list(prefetcher)),
# which must not stall the workers.
_MAX_POLL_S = 0.002
_GIVE_UP_S = 0.02


class SlotBatch:
    """What a worker sends instead of a batch: the slot, and how to rebuild the batch from it.
    A plain object, not a tuple, so that the DataLoader's ``pin_memory`` leaves it alone."""

    __slots__ = ("generation", "version", "slot", "spec", "layout", "moves")

    def __init__(self, generation, version, slot, spec, layout, moves):
        self.generation, self.version, self.slot = generation, version, slot
        self.spec, self.layout, self.moves = spec, layout, moves

    def __getstate__(self):
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state):
        for k, v in zip(self.__slots__, state):
            setattr(self, k, v)


def _layout(leaves):
    """[(name, offset, dtype, shape)] of every leaf packed into one slot, and the bytes; None
    when a leaf is not one the slot can take as is (mixed samples: the main process collates
    those, and names the problem as it always does). A Ragged's values (a tuple) are laid out as
    one flat run of elements."""
    layout, offset = [], 0
    for leaf in leaves:
        value = leaf.value
        if isinstance(value, list):
            first = value[0]
            shape, dtype = first.shape, first.dtype
            for t in value:
                if t.shape != shape or t.dtype != dtype or t.device.type != "cpu":
                    return None
            shape = (len(value),) + tuple(shape)
        elif isinstance(value, tuple):  # a Ragged's values: flattened samples, one after another
            dtype = value[0].dtype
            for t in value:
                if t.dtype != dtype or t.device.type != "cpu":
                    return None
            shape = (sum(t.numel() for t in value),)
        else:
            if value.device.type != "cpu" or value.is_sparse:
                return None
            shape, dtype = tuple(value.shape), value.dtype
        nbytes = math.prod(shape) * dtype.itemsize
        layout.append((leaf.name, offset, dtype, shape))
        offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    return layout, offset


def _view(block, base, offset, dtype, shape):
    nbytes = math.prod(shape) * dtype.itemsize
    return block.narrow(0, base + offset, nbytes).view(dtype).view(shape)


def _strip(spec):
    """The spec without the tensors its dataclass and mapping originals still hold (they would
    travel through shared memory one by one, which the ring exists to avoid). ``unflatten``
    only copies those originals and sets the fields it rebuilds."""
    kind = spec[0]
    if kind == _DATACLASS:
        _, original, names, children = spec
        clone = copy.copy(original)
        for n in names:
            object.__setattr__(clone, n, None)
        return (kind, clone, names, [_strip(c) for c in children])
    if kind == _MAP:
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
    if kind in (_NAMEDTUPLE, _TUPLE, _LIST):
        return (kind, spec[1], [_strip(c) for c in spec[2]])
    return spec  # a leaf index, or a constant


def _leaves_as_moves(spec):
    """The spec with every engine leaf turned into a tensor already where it belongs: the CPU
    device's batch is the slot itself, which the engine must not copy."""
    kind = spec[0]
    if kind == _LEAF:
        return (_MOVE, spec[1])
    if kind in (_DATACLASS, _MAP):
        return spec[:3] + ([_leaves_as_moves(c) for c in spec[3]],)
    if kind == _RAGGED:
        return (kind, [_leaves_as_moves(c) for c in spec[1]]) + tuple(spec[2:])
    if kind in (_NAMEDTUPLE, _TUPLE, _LIST):
        return (kind, spec[1], [_leaves_as_moves(c) for c in spec[2]])
    return spec


class RingCollate:
    """The collate_fn the DataLoader's workers run while a Prefetcher wraps it (see the module
    docstring). Outside a worker, or while no Prefetcher reads the ring, it returns exactly what
    :func:`prefetch.collate.samples` returns, so persistent workers that keep it stay a plain
    DataLoader's workers."""

    def __init__(self, control, n_slots, mailboxes, block, version):
        self.control, self.n_slots, self.mailboxes = control, n_slots, mailboxes
        self.block, self.version = block, version
        # The DataLoader iterator these workers belong to (stamped before it is made): workers
        # of an older iterator that is still alive, e.g. held by a kept exception, must not
        # take the current iterator's slots.
        self.serial = 0
        self._starved = False
        self._parent = None

    def __getstate__(self):
        return {k: getattr(self, k) for k in ("control", "n_slots", "mailboxes", "block", "version",
                                         "serial")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._parent = None
        self._starved = False

    def __call__(self, batch):
        collated = samples_collate(batch)
        info = torch.utils.data.get_worker_info()
        c = self.control
        if (info is None or not _C.slot_load(c, _ACCEPTING)
                or _C.slot_load(c, _SERIAL) != self.serial):
            return collated
        if self._parent is None:
            self._parent = os.getppid()  # as torch's worker watchdog: a new parent = main gone
        try:
            spec, leaves, moves = flatten(collated)
            placed = _layout(leaves) if not moves else None
        except CollateError:
            placed = None  # the main process raises it, naming the sample, as without workers
        if placed is None:
            _C.slot_add(c, _FALLBACKS, 1)
            return collated
        layout, total = placed
        generation = _C.slot_load(c, _GENERATION)  # before the version: see WorkerRing._refill
        block = self._block(info.id)
        if block is None or total > _C.slot_load(c, _SLOT_BYTES) or total == 0:
            _C.slot_raise(c, _NEED_BYTES, total)
            _C.slot_add(c, _FALLBACKS, 1)
            return collated
        slot = self._claim(generation)
        if slot is None:
            _C.slot_add(c, _FALLBACKS, 1)
            return collated
        t0 = time.perf_counter_ns()
        base = slot * (block.numel() // self.n_slots)
        for leaf, (_, offset, dtype, shape) in zip(leaves, layout):
            out = _view(block, base, offset, dtype, shape)
            if isinstance(leaf.value, list):
                _C.slot_stack(out, leaf.value)
            elif isinstance(leaf.value, tuple):
                _C.slot_concat(out, leaf.value)
            else:
                out.copy_(leaf.value)
        pid = os.getpid()
        # WRITING -> SENT only if the word is still ours (one compare-and-set): a refill may have
        # quarantined it, and a plain store could overwrite another claim of a later generation.
        _C.slot_cas(c, _WORDS + slot, _C.slot_word(generation, pid, _WRITING),
                    _C.slot_word(generation, pid, _SENT))
        _C.slot_add(c, _WRITE_NS, time.perf_counter_ns() - t0)
        _C.slot_add(c, _RING_BATCHES, 1)
        return SlotBatch(generation, self.version, slot, _strip(spec), layout, moves)

    def _block(self, worker_id):
        """The block of the announced version: the one this worker holds, or a newer one from
        its mailbox (None until it has arrived: this batch then goes the usual way)."""
        wanted = _C.slot_load(self.control, _VERSION)
        if self.version == wanted:
            return self.block
        box = self.mailboxes[worker_id]
        while True:
            try:
                version, block = box.get_nowait()
            except queue.Empty:
                return None
            if version == wanted:
                self.block, self.version = block, version
                return block

    def _claim(self, generation):
        c, pid = self.control, os.getpid()
        t0 = time.perf_counter_ns()
        # After one give-up, only one try per batch until a claim succeeds again: a consumer that
        # keeps every batch must cost the workers nothing but the usual path.
        give_up = t0 + (0 if self._starved else int(_GIVE_UP_S * 1e9))
        pause = 50e-6
        try:
            while True:
                slot = _C.slot_claim(c, _WORDS, self.n_slots, generation, pid)
                if slot >= 0:
                    self._starved = False
                    return slot
                if (not _C.slot_load(c, _ACCEPTING) or _C.slot_load(c, _GENERATION) != generation
                        or _C.slot_load(c, _SERIAL) != self.serial
                        or os.getppid() != self._parent):
                    return None  # the ring paused or moved on: never wait for a dead epoch
                if time.perf_counter_ns() >= give_up:
                    self._starved = True  # the consumer holds the slots
                    return None
                time.sleep(pause)
                pause = min(2 * pause, _MAX_POLL_S)
        finally:
            _C.slot_add(c, _WAIT_NS, time.perf_counter_ns() - t0)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        self.loader, self.lease, self.pin = loader, lease, pin
        self.n_slots = (loader.num_workers * (loader.prefetch_factor or 2) + depth
                        + (3 if lease else 2))
        self.max_batch_bytes = max_batch_bytes
        self.pid = os.getpid()
        ctx = loader.multiprocessing_context or torch.multiprocessing
        self.control = torch.zeros(_WORDS + self.n_slots, dtype=torch.int64).share_memory_()
        self.mailboxes = [ctx.Queue() for _ in range(loader.num_workers)]
        self.blocks = {}  # version -> block, for SlotBatches still in flight
        self.pins = {}    # version -> the block's registration with the copy stream (pin(block))
        self.version = 0
        self.collate = RingCollate(self.control, self.n_slots, self.mailboxes, None, 0)
        # Weak: after its epoch a DataLoader iterator lives only as long as the DataLoader
        # (persistent workers) or the consumer (a kept exception) holds it, never for the ring.
        self._iterator = lambda: None  # the DataLoader iterator made with self.collate
        self._batches = lambda: None   # the live epoch's _RingEpoch
        self._serials = 0      # DataLoader iterators made so far
        self._epochs = 0       # epochs started; only the live one may pause the ring
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_queues, self.mailboxes)

    # --- epochs ---------------------------------------------------------------------------------

    def epoch(self):
        """Starts one epoch of the DataLoader now (not at the first ``next()``: a stateful
        DataLoader's ``state_dict()``, taken right after, would otherwise make its iterator
        without the ring) and returns its batches: PreparedBatches of slot views, freed once
        staged, or plain collated batches (everything the workers did not place)."""
        c = self.control
        _C.slot_store(c, _ACCEPTING, 0)
        previous = self._batches()
        if previous is not None:  # still referenced (a kept exception): end it and its workers
            previous.close()      # before new workers fork with a copy of it
        self._epochs += 1
        self._drop_dead_persistent_workers()
        it = self._iter_loader()
        self._iterator = weakref.ref(it)
        _C.slot_store(c, _SERIAL, it._prefetch_ring_serial)
        # Every task of an earlier epoch is finished now (persistent workers answer the
        # DataLoader's reset only after them; other workers were shut down): take back every
        # slot whose writer is done or gone, and the blocks no batch can come from any more.
        with self._lock:
            self.blocks = {v: b for v, b in self.blocks.items() if v == self.version}
            self.pins = {v: p for v, p in self.pins.items() if v == self.version}
            self._refill()
        _C.slot_store(c, _ACCEPTING, 1)
        batches = _RingEpoch(self, it, self._epochs)
        self._batches = weakref.ref(batches)
        return batches

    @property
    def iterator(self):
        """The last DataLoader iterator made with the ring's collate_fn, while it lives."""
        return self._iterator()

    def _drop_dead_persistent_workers(self):
        """Persistent workers of ours with one dead: torch's DataLoader would reuse them and
        fail every later epoch (its reset waits for the dead worker); fresh ones are made."""
        it = self.iterator
        if it is None or getattr(self.loader, "_iterator", None) is not it:
            return
        if all(w.is_alive() for w in getattr(it, "_workers", ())):
            return
        self.loader._iterator = None
        it._shutdown_workers()

    def _iter_loader(self):
        loader = self.loader
        original = loader.collate_fn
        self.collate.serial = self._serials + 1  # what a new iterator's workers will carry
        loader.collate_fn = self.collate  # for the iterator made now only
        try:
            it = iter(loader)
        finally:
            loader.collate_fn = original
        if getattr(it, "_prefetch_ring_serial", None) is None:  # new (not a persistent reset)
            self._serials += 1
            it._prefetch_ring_serial = self._serials
        return it

    def _refill(self):
        """A new generation: every slot FREE in it, except one a live process is still writing
        (quarantined until a later refill finds its writer gone)."""
        c = self.control
        generation = _C.slot_load(c, _GENERATION) + 1
        me = os.getpid()
        for i in range(self.n_slots):
            old_generation, pid, state = _C.slot_word_fields(_C.slot_load(c, _WORDS + i))
            if state == _WRITING and pid != me and _pid_alive(pid) and old_generation > 0:
                continue
            if state == _LEASED:
                continue  # the consumer holds it; its deleter frees it into a later generation
            _C.slot_store(c, _WORDS + i, _C.slot_word(generation, 0, _FREE))
        _C.slot_store(c, _GENERATION, generation)

    def _reclaim_stale(self):
        """SENT words of an older generation: their batch is never read (its iterator is gone,
        or was reset) or is read from an older block; either way the slot is free to write."""
        c = self.control
        generation = _C.slot_load(c, _GENERATION)
        free = _C.slot_word(generation, 0, _FREE)
        for i in range(self.n_slots):
            old_generation, _, state = _C.slot_word_fields(_C.slot_load(c, _WORDS + i))
            if state == _SENT and old_generation != generation:
                _C.slot_store(c, _WORDS + i, free)

    def _grow(self):
        c = self.control
        need = _C.slot_load(c, _NEED_BYTES)
        if self.max_batch_bytes is not None and need > self.max_batch_bytes:
            return  # the engine refuses such a batch: it goes the usual way and raises there
        old = _C.slot_load(c, _SLOT_BYTES)
        slot_bytes = max(need, old + old // 4)
        slot_bytes = (slot_bytes + 4095) // 4096 * 4096
        block = torch.empty(self.n_slots * slot_bytes, dtype=torch.uint8).share_memory_()
        pinned = self._pin(block)
        with self._lock:
            self.version += 1
            self.blocks[self.version] = block
            self.pins[self.version] = pinned
            self.collate.block, self.collate.version = block, self.version  # for new workers
            # Order matters to a worker, which reads the generation first, then the version:
            # it either claims in the old generation (and writes into the old block, which is
            # kept), or sees the new version and takes the new block from its mailbox first.
            _C.slot_store(c, _SLOT_BYTES, slot_bytes)
            _C.slot_store(c, _VERSION, self.version)
            self._refill()
        for box in self.mailboxes:
            box.put((self.version, block))

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
        block = self.blocks.get(item.version)
        if block is None:  # pragma: no cover - a protocol violation, never data to trust
            raise RuntimeError("prefetch: a worker sent a batch in block version %d, which the "
                               "ring no longer holds" % item.version)
        slot_bytes = block.numel() // self.n_slots
        base = item.slot * slot_bytes
        hold = self._hold(item)
        if self.lease:
            return self._lease(item, block, base, slot_bytes, hold)
        leaves = [Leaf(name, _view(block, base, offset, dtype, shape))
                  for name, offset, dtype, shape in item.layout]
        end = max((offset + math.prod(shape) * dtype.itemsize
                   for _, offset, dtype, shape in item.layout), default=0)
        packed = Packed(block.narrow(0, base, end), hold, self.pins.get(item.version))
        return PreparedBatch(item.spec, leaves, item.moves, packed)

    def _hold(self, item):
        """SENT -> LEASED, and the hold that frees the slot (``_C.SlotRelease``): called by the
        engine once its copy has read the slot, or by the deleter of the batch the slot is. None
        for a slot of an older generation, which no worker writes any more and a refill took
        back already."""
        c = self.control
        if _C.slot_load(c, _GENERATION) != item.generation:
            return None
        leased = _C.slot_word(item.generation, 0, _LEASED)
        _C.slot_store(c, _WORDS + item.slot, leased)  # SENT -> LEASED: the main process's
        return _C.slot_release(c, _WORDS + item.slot, _GENERATION, leased)

    def _lease(self, item, block, base, slot_bytes, hold):
        """The batch as views of the slot, which stays LEASED until the last of them dies."""
        if hold is not None:
            storage = _C.slot_lease(block, base, slot_bytes, hold)
        else:  # a slot of an older block, which no worker writes any more
            storage = block.narrow(0, base, slot_bytes)
        # (A worker places no batch with moves of its own: leaf k is move k.)
        views = [_view(storage, 0, offset, dtype, shape) for _, offset, dtype, shape in item.layout]
        return PreparedBatch(_leaves_as_moves(item.spec), [], views)

    # --- the rest -------------------------------------------------------------------------------

    def stats(self):
        c = self.control
        return {
            "worker_ring_batches": _C.slot_load(c, _RING_BATCHES),
            "worker_ring_fallbacks": _C.slot_load(c, _FALLBACKS),
            "worker_write_s": _C.slot_load(c, _WRITE_NS) / 1e9,
            "worker_slot_wait_s": _C.slot_load(c, _WAIT_NS) / 1e9,
            "worker_ring_slots": self.n_slots,
            "worker_ring_bytes": self.n_slots * _C.slot_load(c, _SLOT_BYTES),
        }

    def close(self):
        """Pauses the ring and, when persistent workers hold it, shuts them down (they would
        keep the block alive as long as the DataLoader lives)."""
        if self.pid != os.getpid():
            return  # a forked child's copy: the ring and its workers are the parent's
        _C.slot_store(self.control, _ACCEPTING, 0)
        it = self.iterator
        self._iterator = lambda: None
        if it is not None and getattr(self.loader, "_iterator", None) is it:
            self.loader._iterator = None
            it._shutdown_workers()
        self.blocks.clear()
        self.pins.clear()  # a copy still reading a block holds its pin until it is done
        self.collate.block = None
        self._finalizer()


class _RingEpoch:
    """One epoch's batches. Dropping or closing it pauses the ring before the DataLoader
    iterator goes, so no worker waits for a slot while its DataLoader shuts it down — unless a
    newer epoch is live (an old one may be collected late, from an exception's cycle)."""

    def __init__(self, ring, iterator, epoch):
        self._ring, self._it, self._epoch = ring, iterator, epoch
        self._count = 0

    def __iter__(self):
        return self

    @property
    def dataloader_iterator(self):
        """The DataLoader iterator this epoch reads (sources.sampling finishes its sampler)."""
        return self._it

    def __next__(self):
        if self._it is None:
            raise StopIteration
        ring, c = self._ring, self._ring.control
        item = next(self._it)
        if _C.slot_load(c, _NEED_BYTES) > _C.slot_load(c, _SLOT_BYTES):
            ring._grow()  # between two batches: the producer holds no slot now
        self._count += 1
        if self._count % 8 == 0:
            ring._reclaim_stale()
        if type(item) is SlotBatch:
            return ring._prepare(item)
        return item

    def close(self):
        it, self._it = self._it, None
        if it is None:
            return
        ring = self._ring
        if ring._epochs == self._epoch:
            _C.slot_store(ring.control, _ACCEPTING, 0)
        # Workers of a non-persistent iterator go now, not when the iterator is collected: a
        # kept exception's traceback may hold it for long, and its workers with it.
        if getattr(ring.loader, "_iterator", None) is not it and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def __del__(self):
        self.close()


class _RingSource:
    """What the Pipeline iterates in place of the DataLoader: its epochs through the ring."""

    def __init__(self, ring):
        self.ring = ring
        self.dataloader = ring.loader  # for the messages that name dataset indices

    def __iter__(self):
        return self.ring.epoch()

    def state_dict(self):
        return self.dataloader.state_dict()

    def load_state_dict(self, state):
        return self.dataloader.load_state_dict(state)


def loader_of(source):
    """The DataLoader behind a ring source; any other source as it is."""
    return source.dataloader if isinstance(source, _RingSource) else source


def usable(loader):
    """True for a torch DataLoader with workers whose collate_fn is collate.samples."""
    from torch.utils.data import DataLoader

    return (isinstance(loader, DataLoader) and loader.num_workers > 0
            and loader.collate_fn is samples_collate)


def ring_source(ring):
    """The source the Pipeline runs for one epoch over ``ring``'s DataLoader, or None when the
    ring cannot serve it (persistent workers another iterator started: warned once)."""
    persistent = getattr(ring.loader, "_iterator", None)
    if persistent is not None and persistent is not ring.iterator:
        if not getattr(ring, "_warned", False):
            ring._warned = True
            warnings.warn(
                "prefetch: the DataLoader's persistent workers were started before the "
                "Prefetcher first iterated it, so they cannot write into its shared ring; its "
                "batches take the slower per-sample path. Iterate the DataLoader only through "
                "the Prefetcher, or make it with persistent_workers=False.",
                RuntimeWarning, stacklevel=3)
        return None
    return _RingSource(ring)
