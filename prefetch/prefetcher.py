"""The Prefetcher: wraps any iterable of batches and yields them on the device, ahead of time.

Each ``iter()`` is one run of the source on the Prefetcher's :class:`prefetch._engine.pipeline.Pipeline`
(collation into the pinned ring and the copy in C++ threads with the GIL released, the
transform on the copy stream, delivery in order); the engine lives as long as the Prefetcher
and serves every epoch. Where the consumer stands, for ``state_dict()``, is kept by a
:class:`prefetch._engine.resume.ResumeCursor`.
"""
import typing
import weakref

import torch

from ._core.checks import is_stateful, resolve_device, whole
from ._engine.lazy_epoch import LatestEpoch, LazyEpoch
from ._engine.pipeline import ClosesOnExit, Pipeline
from ._engine.resume import FinishOpenEpoch, ResumeCursor
from .sources import Reader, abandon, adapt
from .transforms.contract import load_transform_state, save_transform_state

__all__ = ["Prefetcher"]

DeviceLike = typing.Union[torch.device, str, int, None]

# The source's attributes a Prefetcher forwards (properties below).
_SOURCE_ATTRIBUTES = ("dataset", "sampler", "batch_sampler", "batch_size")


class Prefetcher(ClosesOnExit):
    """Yields the batches of ``source`` on ``device``, collated into a pinned ring by C++ threads
    and copied on a side stream while the previous step runs.

    Args:
        source: any iterable of batches; a batch is a tensor, ndarray, number, or nested
            tuples/lists/dicts/namedtuples/dataclasses of them (``default_collate``'s output;
            other objects pass through with a one-time :class:`prefetch.PassThroughWarning`),
            optionally with :class:`prefetch.Samples` leaves (see
            :func:`prefetch.collate.samples`). A Ray Data ``Dataset`` is read through
            :class:`prefetch.ray.RaySource` (numpy batches).
        device: target device; ``None`` means the current CUDA device when CUDA is available,
            otherwise the CPU.
        depth: number of batches prepared ahead of the consumer (ring slots).
        num_threads: C++ threads that collate one batch (default: cores, at most 8).
        transform: applied to every batch once it is on the device, on the copy stream, ahead of
            the consumer — typically a :class:`prefetch.FusedAugment`, which also receives the
            epoch, the batch's index and the rank so its random draws are reproducible.
        device_transform: any ``fn(batch) -> batch``, run after ``transform`` on the device, on
            the copy stream.
        timeout: seconds ``next()`` waits for a batch before raising
            :class:`prefetch.PrefetchTimeout` (``None`` or ``float("inf")``: wait forever).
        max_batch_bytes: refuse (with :class:`prefetch.CollateError`) a batch larger than this.
        rank: this process's DDP rank, passed to the transform's draws so that ranks with the
            same seed draw differently; default torch.distributed's rank when it is initialised
            (read at every batch), else 0.
        worker_ring: when ``source`` is a DataLoader with workers and
            ``collate_fn=prefetch.collate.samples``, its workers write each batch straight into
            a block of shared memory the Prefetcher owns, and send only a descriptor (the fast
            path with workers; docs/engine.md). ``False`` keeps the per-sample hand-off.

    Raises:
        TypeError: ``transform`` or ``device_transform`` not callable, ``rank`` not an int.
        ValueError: ``rank`` < 0, ``depth``/``num_threads`` not an int >= 1, ``timeout`` not
            > 0 seconds, ``max_batch_bytes`` not an int >= 1.

    ``dataset``, ``sampler``, ``batch_sampler`` and ``batch_size`` are the source's (a
    DataLoader's), so ``loader.sampler.set_epoch(e)`` reaches its sampler. A forked child (CPU)
    iterates an inherited Prefetcher with an engine of its own.
    """

    def __new__(cls, source, *args, **kwargs):
        # Over a stateful source, the kind that saves and loads its position (see _Resumable:
        # the methods exist exactly when the source has them), for a subclass of ours too.
        if is_stateful(adapt(source)) and not issubclass(cls, _Resumable):
            cls = _resumable(cls)
        return super().__new__(cls)

    def __getattr__(self, name):
        # Only for names not found: say why a Prefetcher over this source has no position.
        if name in ("state_dict", "load_state_dict"):
            raise AttributeError(
                "prefetch: %s() needs a source with state_dict() and load_state_dict() (e.g. "
                "torchdata.stateful_dataloader.StatefulDataLoader, or use prefetch.ArrayLoader); "
                "this Prefetcher's source is a %s, so it has no %s()"
                % (name, self.__dict__.get("_source_name", "?"), name))
        if name in _SOURCE_ATTRIBUTES:  # a property that raised: Python asks here; say it again
            return self._source_attribute(name)
        raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))

    def __init__(self, source: typing.Iterable, *, device: DeviceLike = None, depth: int = 3,
                 num_threads: typing.Optional[int] = None,
                 transform: typing.Optional[typing.Callable] = None,
                 device_transform: typing.Optional[typing.Callable] = None,
                 timeout: typing.Optional[float] = None, max_batch_bytes: typing.Optional[int] = None,
                 rank: typing.Optional[int] = None, worker_ring: bool = True) -> None:
        for name, fn in (("transform", transform), ("device_transform", device_transform)):
            if fn is not None and not callable(fn):
                raise TypeError("prefetch: %s must be callable, got %r" % (name, fn))
        if rank is not None:
            rank = whole(rank, "rank")
            if rank < 0:
                raise ValueError("prefetch: rank must be an int >= 0, got %r" % (rank,))
        self.device = resolve_device(device)
        self.depth = depth
        self.transform, self.device_transform = transform, device_transform
        self.rank = rank
        self._pipeline = Pipeline(self.device, depth=depth, num_threads=num_threads,
                                  max_batch_bytes=max_batch_bytes, transform=transform,
                                  device_transform=device_transform, rank=rank, timeout=timeout,
                                  owner="Prefetcher", abandon=abandon)
        pipeline = weakref.ref(self._pipeline)  # a source must not keep the Prefetcher alive

        def register_host(block):
            p = pipeline()
            return None if p is None else p.engine.register_host(block)

        # A Ray dataset becomes a RaySource, a DataLoader the worker ring serves a RingLoader
        # (prefetch.sources.adapt); a source made here is the Prefetcher's to close.
        self.source = adapt(source, Reader(self.device, depth, max_batch_bytes, register_host,
                                           bool(worker_ring)))
        self._owned_source = self.source if self.source is not source else None
        self._source_name = type(source).__name__  # what the user passed, for the messages
        self._cursor = ResumeCursor()
        self._latest = LatestEpoch()  # the latest iter()'s epoch (prefetch._engine.lazy_epoch)

    def __iter__(self):
        """This epoch's batches. The epoch starts at the first ``next()`` (its number, its run,
        the source's ``iter()``), as a DataLoader's does: an iterator made and dropped unused
        (Lightning's check that a loader is iterable) is no epoch. A newer ``iter()`` ends the
        live epoch. Raises ``RuntimeError`` at once when the Prefetcher is closed."""
        self._pipeline.check_runnable()
        self._pipeline.stop()
        epoch = LazyEpoch(self._start_epoch, self.__len__, self._latest.superseded)
        self._latest.set(epoch)
        return epoch

    def _start_epoch(self):
        """Starts the next epoch on the Pipeline and returns its EpochRun."""
        stateful = is_stateful(self.source)
        epoch, first = self._cursor.next_epoch, self._cursor.resume_index
        source = self.source
        if stateful and self._cursor.source_epoch_open:
            # The loaded state ends the source's epoch without its StopIteration: finish it
            # first, or this epoch would be its empty remainder (prefetch._engine.resume).
            source = FinishOpenEpoch(source)
        run = self._pipeline.run(source, epoch=epoch, first_index=first,
                                 track_source_state=stateful, length=self.__len__,
                                 on_batch=self._cursor.consumed, on_end=self._cursor.ended)
        # Until its first batch: "at the start of this epoch", the source as the run found it.
        self._cursor.start(run.initial_source_state if stateful else None,
                           run.end_source_state if stateful else None)
        return run

    def __len__(self):
        try:
            return len(self.source)
        except TypeError:
            raise TypeError(
                "prefetch: the source (%s) has no len()" % self._source_name
            ) from None

    # The source's DataLoader attributes, for training scripts that read them off the loader
    # (``loader.sampler.set_epoch(epoch)`` reaches the DataLoader's own sampler).
    def _source_attribute(self, name):
        try:
            return getattr(self.source, name)
        except AttributeError:
            raise AttributeError("prefetch: the source (%s) has no %r"
                                 % (self._source_name, name)) from None

    dataset = property(lambda self: self._source_attribute("dataset"),
                       doc="The source's ``dataset`` (AttributeError if it has none).")
    sampler = property(lambda self: self._source_attribute("sampler"),
                       doc="The source's ``sampler`` (AttributeError if it has none).")
    batch_sampler = property(lambda self: self._source_attribute("batch_sampler"),
                             doc="The source's ``batch_sampler`` (AttributeError if it has none).")
    batch_size = property(lambda self: self._source_attribute("batch_size"),
                          doc="The source's ``batch_size`` (AttributeError if it has none).")

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch number the next ``iter()`` passes to the transform's draws (epochs
        otherwise count from 0, one per ``iter()``), as ``DistributedSampler.set_epoch``.
        Setting the epoch a loaded state stopped in keeps its resume position; any other epoch
        starts from its first batch.

        Args:
            epoch (int): the epoch the next ``iter()`` runs, ``>= 0``.

        Raises:
            TypeError: ``epoch`` is not a whole number.
            ValueError: ``epoch`` is negative.
        """
        self._cursor.set_epoch(epoch)

    def close(self) -> None:
        """Stops the current epoch and joins every thread the Prefetcher started (and shuts down
        persistent DataLoader workers that write into its shared ring)."""
        self._pipeline.close()
        close = getattr(self._owned_source, "close", None)
        if close is not None:
            close()

    @property
    def closed(self):
        return self._pipeline.closed

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "prefetch: a Prefetcher cannot be pickled or copied: it owns threads, a pinned ring "
            "and (CUDA) a stream of this process. Pickle its source instead and build the "
            "Prefetcher where it is iterated (e.g. not inside a Dataset that DataLoader workers "
            "receive).")

    def stats(self) -> typing.Dict[str, typing.Union[int, float]]:
        """Counters since construction, in seconds where named ``_s``. Where the time goes, stage
        by stage:

        - the source: ``source_s``, the producer's time in the source's ``next()`` (with
          DataLoader workers: waiting for and receiving their batches); with the worker ring,
          ``worker_write_s`` and ``worker_slot_wait_s``, summed over workers, the time they spent
          writing batches into slots and waiting for a free one;
        - collation and the copy: ``collate_s`` and ``bytes_collated`` (the C++ pool, and
          ``collate_gbps``; the collation alone), ``slot_wait_s`` (the producer waiting for a
          ring slot whose last copy to the device had not completed — on a worker ring batch,
          for the oldest held slot's copy: the copy engine is the slower side; 0 on the CPU
          device, which has no copy), ``allocate_s`` (allocating each batch's destination),
          ``packed_bytes`` (worker ring slots copied as they are, not collated),
          ``producer_blocked_s`` (the producer waiting because ``depth`` batches were ready and
          not taken: the consumer is the slower side);
        - the transform: ``transform_s``, the producer's time in ``transform`` and
          ``device_transform`` (on the CPU the work itself; on CUDA the time to enqueue it on the
          copy stream, which then runs on the device);
        - the consumer: ``wait_s``, the time ``next()`` waited for a batch, and ``consumer_s``,
          the consumer's wall time from each epoch's first ``next()`` call to its last return
          (its own work between batches plus those waits);

        derived from those (0.0 while the denominator is 0): ``wait_fraction`` = ``wait_s /
        consumer_s``, the part of the consumer's time spent waiting for data (near 0: the
        consumer, e.g. the training step, is the slower side; near 1: it is input bound);
        ``source_share``, ``collate_share``, ``slot_wait_share`` (``slot_wait_s``),
        ``blocked_share`` (``producer_blocked_s``), ``transform_share`` and ``handoff_share``
        (the rest: flattening, allocating, enqueuing the device copy, publishing), each stage's
        part of ``produce_s``, summing to 1;

        ``produce_s`` is the producer's whole time, summed over batches (divide by ``batches``
        for a batch's); ``batches`` and ``epochs`` the counts, ``submitted`` and ``delivered``
        the engine's (batches staged into the ring, batches handed to the consumer); the ring's ``ring_growths``, and with the worker ring
        ``worker_ring_batches`` (written into its slots), ``worker_ring_usual_way`` (every batch
        that came the usual, per-sample way: the workers' ``worker_ring_fallbacks`` — no block
        yet, too large, no free slot — and an epoch's first batches, at most workers ×
        ``prefetch_factor``, made before the ring opened), ``worker_ring_slots`` and
        ``worker_ring_bytes``.

        Returns:
            dict: counter name -> ``int`` (counts, bytes) or ``float`` (seconds, shares, GB/s).
        """
        out = self._pipeline.stats()
        stats = getattr(self._owned_source, "stats", None)
        if stats is not None:
            out.update(stats())
        return out

    def __repr__(self):
        return "Prefetcher(device=%s, depth=%d%s)" % (
            self.device, self.depth, ", closed" if self.closed else "")


_RESUMABLE = {}  # a Prefetcher class -> its resumable kind


def _resumable(cls):
    """The kind of ``cls`` (Prefetcher or a subclass) that has :class:`_Resumable`'s methods:
    ``cls`` first, so that a subclass's own ``state_dict()`` still wins."""
    kind = _RESUMABLE.get(cls)
    if kind is None:
        kind = _RESUMABLE.setdefault(cls, type(cls.__name__, (cls, _Resumable), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__}))
    return kind


class _Resumable:
    """What a :class:`Prefetcher` over a stateful source has and no other: ``state_dict()`` and
    ``load_state_dict()``. ``Prefetcher(source)`` is of a kind with these when ``source`` has
    both (e.g. torchdata's ``StatefulDataLoader``); over any other source the methods do not
    exist, so that whoever checks for them (Lightning saves the state of every loader that has
    them, by ``isinstance(loader, Stateful)``, which Python >= 3.12 answers from the class) finds
    none, as for a DataLoader. It is a Prefetcher in every other way."""

    def state_dict(self):
        """Where the consumer stands, for :meth:`load_state_dict`: the epoch, the batches of it
        the consumer has received, and the source's own ``state_dict()`` as it was right after
        yielding the last of those — batches prefetched but not consumed are not counted, so a
        resumed run yields exactly the batches this one had not delivered, with the same
        transform draws. A position saved at an epoch's end resumes with the next epoch: the
        source's state is the one it had after its ``StopIteration`` (``source_epoch_open`` is
        saved where the run stopped before that: the resumed run then first finishes the
        source's epoch, which yields nothing). Taken between ``iter()`` and the first ``next()``,
        it starts that epoch to read the source's state at its start.

        Raises RuntimeError (a source that yields more batches than its ``len()`` after the
        saved end of an epoch, when resumed)."""
        pending = self._latest.pending()
        if pending is not None:
            # iter() was called and no batch asked for yet: the epoch starts now, so that its
            # position carries the source's state at that epoch's start.
            pending.ensure_started()
        try:
            length = len(self.source)
        except TypeError:
            length = None  # no len(): the resumed epoch ends at once and the next one follows
        epoch, consumed, source_state, source_open = self._cursor.save_point(
            length, self.source.state_dict)
        state = {"epoch": epoch, "batches_consumed": consumed, "source": source_state}
        if source_open:
            state["source_epoch_open"] = True
        return save_transform_state(self.transform, state)

    def load_state_dict(self, state):
        """Resumes from :meth:`state_dict`: the next ``iter()`` continues that epoch after the
        batches already consumed (the source is loaded with its saved state)."""
        missing = {"epoch", "batches_consumed", "source"} - set(state)
        if missing:
            raise KeyError("prefetch: the state lacks %s; expected Prefetcher.state_dict()'s output"
                           % sorted(missing))
        self._pipeline.stop()
        # The transform's seed first: it refuses a state of another explicit seed.
        load_transform_state(self.transform, state)
        self.source.load_state_dict(state["source"])
        self._cursor.load(state["epoch"], state["batches_consumed"], state["source"],
                          state.get("source_epoch_open", False))
