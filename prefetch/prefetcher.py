"""The Prefetcher: wraps any iterable of batches and yields them on the device, ahead of time.

One producer thread per epoch pulls batches from the source and submits them to the C++ engine
(collation into the pinned ring and the copy run there, with the GIL released); the consumer
takes them in order. The engine (ring, pool, copy stream) lives as long as the Prefetcher and is
reused by every epoch.
"""
import atexit
import contextlib
import ctypes
import dataclasses
import numbers
import os
import re
import threading
import time
import weakref

import torch

from ._extension import _C
from ._tree import flatten, unflatten
from .errors import CollateError, PrefetchTimeout
from .transforms import _whole, distributed_rank, load_transform_state, save_transform_state

__all__ = ["Prefetcher"]

# What the engine's next() returns first (see _C.NextStatus), looked up once.
_BATCH, _END, _FAILED, _TIMEOUT = (_C.NextStatus.BATCH, _C.NextStatus.END, _C.NextStatus.FAILED,
                                   _C.NextStatus.TIMEOUT)

# How long close() waits for a producer thread that is stuck inside the source's own next().
# At interpreter exit this is the bound for all Prefetchers together, not for each (_at_exit).
_JOIN_TIMEOUT_S = 5.0
_exit_deadline = [None]  # set by _at_exit: every join from then on shares this one deadline
_LIVE = weakref.WeakSet()  # Prefetchers not closed yet, for _at_exit


def _join(thread):
    """Joins a producer thread for at most _JOIN_TIMEOUT_S (at exit: until the shared deadline);
    a thread stuck inside the source's own next() is a daemon and is left behind."""
    if thread is None or thread is threading.current_thread() or thread.ident is None:
        return  # not started (close() raced iter()), or the caller is that thread
    deadline = _exit_deadline[0]
    thread.join(_JOIN_TIMEOUT_S if deadline is None else max(0.0, deadline - time.monotonic()))


def _abandon(engine):
    """Keeps an engine inherited across fork() from ever being destroyed: its threads do not
    exist in this process and its mutexes may be held by them, so cancelling, closing or
    destroying it (which joins those threads) could block forever. It is leaked on purpose."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))


def _at_exit():
    """Interpreter exit (also after Ctrl-C): stops every live Prefetcher's epoch first, so all
    their producers wind down at once, then closes each, all within one _JOIN_TIMEOUT_S."""
    _exit_deadline[0] = time.monotonic() + _JOIN_TIMEOUT_S
    live = list(_LIVE)
    pid = os.getpid()
    for pf in live:
        state = pf._current[0]
        if state is not None and not state.done and state.pid == pid:
            state.stop.set()
            try:
                pf._engine.cancel(state.token)
            except Exception:  # noqa: BLE001 - closed meanwhile
                pass
    for pf in live:
        pf._finalizer()


atexit.register(_at_exit)


def _default_num_threads():
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _resolve_device(device):
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise ValueError("prefetch: device must be a CPU or CUDA device, got %r" % (device,))
    return device


class _Counters:
    """Per-Prefetcher totals; written by the producer and consumer threads under a lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches = 0
        self.epochs = 0
        self.wait_s = 0.0
        self.produce_s = 0.0

    def add(self, **deltas):
        with self.lock:
            for key, value in deltas.items():
                setattr(self, key, getattr(self, key) + value)


class PreparedBatch:
    """A batch already split for the engine (``flatten``'s output; ``leaves`` is a list of
    ``_tree.Leaf``); sources inside prefetch (the ArrayLoader) yield these so no Python walks a
    structure or touches a sample."""

    __slots__ = ("spec", "leaves", "moves")

    def __init__(self, spec, leaves, moves):
        self.spec, self.leaves, self.moves = spec, leaves, moves


def _is_stateful(source):
    return callable(getattr(source, "state_dict", None)) and callable(
        getattr(source, "load_state_dict", None))


class _EpochState:
    """What the producer thread and the consumer share for one epoch. The producer holds this,
    never the iterator, so dropping the iterator (``break``) lets it be collected and cleaned up."""

    def __init__(self, token, epoch, first_index=0, stateful=False):
        self.token = token
        self.epoch = epoch
        self.first_index = first_index  # the epoch's first batch index (> 0 after a resume)
        # seq -> the source's state_dict() right after it yielded batch seq (-1: before any):
        # the state that resumes after exactly the batches the consumer has had.
        self.snapshots = {} if stateful else None
        self.started = threading.Event()  # set once snapshots[-1] is there (or the producer ended)
        self.specs = {}  # seq -> (spec, moves), filled before the batch becomes visible
        self.results = {}  # seq -> finished batch, for batches that went through a transform
        self.error = None
        self.error_batch = None
        self.stop = threading.Event()
        self.thread = None
        self.done = False
        self.pid = os.getpid()  # a forked child must not touch this epoch's engine or thread


class _DeviceWork:
    """What the producer runs on a batch once it is on the device, on the copy stream."""

    def __init__(self, transform, device_transform, device, stream_handle, rank=None):
        self.transform, self.device_transform, self.device = transform, device_transform, device
        self.rank = rank  # None: torch.distributed's, read at every batch
        self.stream = (torch.cuda.ExternalStream(stream_handle, device=device)
                       if device.type == "cuda" else None)

    def __call__(self, batch, epoch, index):
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            if self.transform is not None:
                if getattr(self.transform, "ranked_draws", False):
                    rank = self.rank if self.rank is not None else distributed_rank()
                    batch = self.transform(batch, epoch=epoch, index=index, rank=rank)
                elif getattr(self.transform, "positional_draws", False):
                    batch = self.transform(batch, epoch=epoch, index=index)
                else:
                    batch = self.transform(batch)
            if self.device_transform is not None:
                batch = self.device_transform(batch)
        return batch


def _produce(engine, source, state, counters, device, work):
    it = batch = leaves = None
    seq = 0
    snapshots = state.snapshots
    try:
        it = iter(source)
        if snapshots is not None:
            snapshots[-1] = source.state_dict()
        state.started.set()
        while not state.stop.is_set():
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            if snapshots is not None:
                snapshots[seq] = source.state_dict()
            if isinstance(batch, PreparedBatch):
                spec, leaves, moves = batch.spec, batch.leaves, batch.moves
            else:
                spec, leaves, moves = flatten(batch)
            batch = None
            if work is None:
                state.specs[seq] = (spec, moves)
                engine.submit(state.token, leaves)  # GIL released while collating and copying
            else:
                # Collate and copy, run the transforms on the copy stream, then publish: the
                # consumer's stream waits for all of it, the host for none of it.
                staged_seq, tensors = engine.stage(state.token, leaves)
                leaves = None
                state.results[staged_seq] = work(unflatten(spec, tensors, moves, device),
                                                 state.epoch, state.first_index + staged_seq)
                tensors = None
                engine.publish(state.token)
            leaves = None
            seq += 1
            counters.add(produce_s=time.perf_counter() - t0)
        engine.finish(state.token, False)
    except _C.Cancelled:
        pass
    except BaseException as exc:  # noqa: BLE001 - everything goes to the consumer
        if isinstance(exc, CollateError):
            _note_dataset_index(exc, source, seq)
        state.error, state.error_batch = exc, seq
        try:
            engine.finish(state.token, True)
        except RuntimeError:
            pass  # the Prefetcher was closed meanwhile; nobody is waiting
    finally:
        state.started.set()
        # Drop the source iterator here (a DataLoader shuts its workers down), and keep it and
        # the batch out of the traceback that travels to the consumer.
        it = batch = leaves = None


def _in_order_batch_size(source):
    """The batch size when batch k of a fresh iteration of ``source`` holds exactly dataset
    indices k*b .. k*b+b-1: a torch DataLoader itself (a subclass may resume mid-epoch) whose
    batch sampler is the plain BatchSampler over a SequentialSampler, delivering in order (with
    workers too). None when the indices cannot be known for certain."""
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    if type(source) is not DataLoader or not getattr(source, "in_order", True):
        return None
    batch_sampler = source.batch_sampler
    if (type(batch_sampler) is not BatchSampler
            or type(batch_sampler.sampler) is not SequentialSampler):
        return None
    return batch_sampler.batch_size


def _note_dataset_index(exc, source, seq):
    """Adds the dataset index of the sample a CollateError names, where it is known exactly."""
    try:
        batch_size = _in_order_batch_size(source)
    except Exception:  # noqa: BLE001 - an exotic DataLoader: say nothing rather than guess
        return
    if batch_size is None:
        return
    first = seq * batch_size
    match = re.search(r"\bsample (\d+)\b", str(exc))
    if match is not None and int(match.group(1)) < batch_size:
        position = int(match.group(1))
        exc.add_note("[prefetch] sample %d of batch %d is dataset index %d (the DataLoader reads "
                     "its dataset in order, batch_size=%d)" % (position, seq, first + position,
                                                                batch_size))
    else:
        exc.add_note("[prefetch] batch %d holds dataset indices %d to %d (the DataLoader reads "
                     "its dataset in order, batch_size=%d)" % (seq, first, first + batch_size - 1,
                                                                batch_size))


def _protect(obj, stream):
    """record_stream every CUDA tensor of a transformed batch for the consumer's stream."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, dict):
        for v in obj.values():
            _protect(v, stream)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _protect(v, stream)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            _protect(getattr(obj, field.name, None), stream)


def _stop_epoch(engine, state):
    if state is None or state.done:
        return
    state.done = True
    state.stop.set()
    if state.pid != os.getpid():
        return  # started before a fork: its engine and producer thread are the parent's
    engine.cancel(state.token)
    _join(state.thread)


def _shutdown(engine, current, lock, pid):
    if pid != os.getpid():  # a forked child: never wait on the parent's threads or locks
        current[0] = None
        _abandon(engine)
        return
    with lock:  # not while iter() is between starting an epoch and starting its thread
        _stop_epoch(engine, current[0])
        current[0] = None
        engine.close()


class _EpochIterator:
    def __init__(self, owner, state):
        self._owner = owner
        self._state = state
        self._engine = owner._engine
        self._counters = owner._counters
        self._timeout = owner._timeout
        self._device = owner.device
        self._delivered = 0
        # Not at exit: _at_exit stops every epoch there, within one deadline for all.
        weakref.finalize(self, _stop_epoch, self._engine, state).atexit = False

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._owner)

    def __next__(self):
        state = self._state
        if state.pid != os.getpid():
            raise RuntimeError(
                "prefetch: this epoch was started in process %d, before a fork; its producer "
                "thread does not exist in this process (%d). Call iter() on the Prefetcher again "
                "here to start a new epoch in this process." % (state.pid, os.getpid()))
        if state.done:
            raise StopIteration
        t0 = time.perf_counter()
        timeout = -1.0 if self._timeout is None else float(self._timeout)
        status, seq, tensors = self._engine.next(state.token, timeout)
        self._counters.add(wait_s=time.perf_counter() - t0)
        if status == _BATCH:
            self._delivered += 1
            self._counters.add(batches=1)
            self._owner._consumed(state, seq, self._delivered)
            if seq in state.results:
                batch = state.results.pop(seq)
                if self._device.type == "cuda":
                    _protect(batch, torch.cuda.current_stream(self._device))
                return batch
            spec, moves = state.specs.pop(seq)
            return unflatten(spec, tensors, moves, self._device)
        if status == _END:
            self._finish()
            self._owner._epoch_ended(state)
            raise StopIteration
        if status == _FAILED:
            self._finish()
            # Hand the exception over and forget it: the epoch's finalizer keeps `state` alive,
            # and the exception's traceback holds this iterator (and so the Prefetcher, its
            # engine and threads); kept in `state`, it would leak all of them for good.
            error, state.error = state.error, None
            note = (
                "[prefetch] raised in the Prefetcher's producer thread while fetching batch %d "
                "of the epoch from the source; %d batches were delivered before it"
                % (state.error_batch, self._delivered)
            )
            if note not in getattr(error, "__notes__", ()):
                error.add_note(note)
            raise error
        if status == _TIMEOUT:
            raise PrefetchTimeout(
                "prefetch: no batch arrived within timeout=%ss (after %d batches of this epoch); "
                "the source is stalled or slower than that. next() can be called again."
                % (self._timeout, self._delivered)
            )
        # CANCELLED: this epoch was stopped (close(), or a new epoch started with iter()).
        state.done = True
        raise StopIteration

    def _finish(self):
        state = self._state
        state.done = True
        _join(state.thread)

    def close(self):
        _stop_epoch(self._engine, self._state)


class Prefetcher:
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

    ``dataset``, ``sampler``, ``batch_sampler`` and ``batch_size`` are the source's (a
    DataLoader's), so ``loader.sampler.set_epoch(e)`` reaches its sampler. A forked child (CPU)
    iterates an inherited Prefetcher with an engine of its own.
    """

    def __init__(self, source, *, device=None, depth=3, num_threads=None, transform=None,
                 device_transform=None, timeout=None, max_batch_bytes=None, rank=None):
        for name, fn in (("transform", transform), ("device_transform", device_transform)):
            if fn is not None and not callable(fn):
                raise TypeError("prefetch: %s must be callable, got %r" % (name, fn))
        if not isinstance(depth, int) or depth < 1:
            raise ValueError("prefetch: depth must be an int >= 1, got %r" % (depth,))
        if num_threads is None:
            num_threads = _default_num_threads()
        if not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError("prefetch: num_threads must be an int >= 1, got %r" % (num_threads,))
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout > 0):  # NaN too; inf means wait forever
            raise ValueError("prefetch: timeout must be > 0 seconds or None, got %r" % (timeout,))
        if max_batch_bytes is not None and max_batch_bytes < 1:
            raise ValueError("prefetch: max_batch_bytes must be >= 1 or None, got %r" % (max_batch_bytes,))
        if type(source).__module__.startswith("ray.data"):
            from .ray import RaySource, is_ray_dataset  # no Ray import: the dataset brings it

            if is_ray_dataset(source):
                source = RaySource(source)
        self.source = source
        self.device = _resolve_device(device)
        self.depth = depth
        self._timeout = timeout
        self.transform, self.device_transform = transform, device_transform
        if rank is not None:
            rank = _whole(rank, "rank")
            if rank < 0:
                raise ValueError("prefetch: rank must be an int >= 0, got %r" % (rank,))
        self.rank = rank
        self._engine_args = (self.device.type,
                             self.device.index if self.device.index is not None else -1,
                             depth, num_threads, int(max_batch_bytes or 0))
        self._open_engine()
        self._next_epoch = 0
        self._resume_index = 0  # the next epoch's first batch index, after load_state_dict()
        # Where the consumer stands: (epoch, batches consumed, the source's state there).
        self._position = None
        self._loaded_source_state = None
        self._counters = _Counters()

    def _open_engine(self):
        """The engine, its transform runner and the finalizer that closes them, for this process."""
        self._engine = _C.Engine(*self._engine_args)
        self._work = None
        if self.transform is not None or self.device_transform is not None:
            self._work = _DeviceWork(self.transform, self.device_transform, self.device,
                                     self._engine.stream_handle, self.rank)
        self._pid = os.getpid()
        self._lock = threading.RLock()  # iter() against close(): an epoch starts whole or not
        self._current = [None]  # the live epoch's state, shared with the finalizer
        # Not at exit: _at_exit closes every live Prefetcher there, within one deadline for all.
        self._finalizer = weakref.finalize(self, _shutdown, self._engine, self._current,
                                           self._lock, self._pid)
        self._finalizer.atexit = False
        _LIVE.add(self)

    def _after_fork(self):
        """In a forked child the inherited engine's threads do not exist and its locks may be
        held: it is abandoned, never waited on, and (CPU) a fresh engine takes its place."""
        if self._pid == os.getpid():
            return
        closed = not self._finalizer.alive
        self._finalizer()  # _shutdown in the child: abandons the parent's engine
        if self.device.type == "cuda":  # (at every iter() in the child, not only the first)
            raise RuntimeError(
                "prefetch: this Prefetcher (on %s) was created in process %d and this process "
                "(%d) is a fork of it; CUDA cannot be used in a forked child (as torch says). "
                "Create the Prefetcher in the child, or start it with the 'spawn' or "
                "'forkserver' method." % (self.device, self._pid, os.getpid()))
        if closed:
            return  # closed before the fork: iter() says so
        self._counters.lock = threading.Lock()  # a parent's thread may have held it at the fork
        self._open_engine()

    def __iter__(self):
        self._after_fork()
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("prefetch: this Prefetcher is closed")
            _stop_epoch(self._engine, self._current[0])
            state = _EpochState(self._engine.start_epoch(), self._next_epoch, self._resume_index,
                                _is_stateful(self.source))
            self._next_epoch += 1
            self._resume_index = 0
            self._position = state  # until its first batch: "at the start of this epoch"
            self._current[0] = state
            iterator = _EpochIterator(self, state)
            state.thread = threading.Thread(
                target=_produce,
                args=(self._engine, self.source, state, self._counters, self.device, self._work),
                name="prefetch-producer", daemon=True,
            )
            state.thread.start()
        self._counters.add(epochs=1)
        return iterator

    def _start(self, epoch, first_index):
        """iter() for epoch ``epoch`` starting at batch index ``first_index`` (the ArrayLoader)."""
        self._next_epoch, self._resume_index = int(epoch), int(first_index)
        return iter(self)

    def __len__(self):
        try:
            return len(self.source)
        except TypeError:
            raise TypeError(
                "prefetch: the source (%s) has no len()" % type(self.source).__name__
            ) from None

    # The source's DataLoader attributes, for training scripts that read them off the loader
    # (``loader.sampler.set_epoch(epoch)`` reaches the DataLoader's own sampler).
    def _source_attribute(self, name):
        try:
            return getattr(self.source, name)
        except AttributeError:
            raise AttributeError("prefetch: the source (%s) has no %r"
                                 % (type(self.source).__name__, name)) from None

    dataset = property(lambda self: self._source_attribute("dataset"),
                       doc="The source's ``dataset`` (AttributeError if it has none).")
    sampler = property(lambda self: self._source_attribute("sampler"),
                       doc="The source's ``sampler`` (AttributeError if it has none).")
    batch_sampler = property(lambda self: self._source_attribute("batch_sampler"),
                             doc="The source's ``batch_sampler`` (AttributeError if it has none).")
    batch_size = property(lambda self: self._source_attribute("batch_size"),
                          doc="The source's ``batch_size`` (AttributeError if it has none).")

    def set_epoch(self, epoch):
        """Sets the epoch number the next ``iter()`` passes to the transform's draws (epochs
        otherwise count from 0, one per ``iter()``), as ``DistributedSampler.set_epoch``.
        Setting the epoch a loaded state stopped in keeps its resume position; any other epoch
        starts from its first batch."""
        epoch = int(epoch)
        if epoch != self._next_epoch:
            self._resume_index = 0
        self._next_epoch = epoch

    # Called by the epoch iterator (consumer thread) for every delivered batch and at the end.
    def _consumed(self, state, seq, delivered):
        source_state = None
        if state.snapshots is not None:
            source_state = state.snapshots.pop(seq, None)
            if seq == 0:
                state.snapshots.pop(-1, None)
        self._position = (state.epoch, state.first_index + delivered, source_state)

    def _epoch_ended(self, state):
        if isinstance(self._position, tuple) and self._position[0] == state.epoch:
            source_state = self._position[2]
        elif state.snapshots is not None:  # an epoch with no batches
            source_state = state.snapshots.get(-1)
        else:
            source_state = None
        self._position = (state.epoch + 1, 0, source_state)

    def state_dict(self):
        """Where the consumer stands, for :meth:`load_state_dict`: the epoch, the batches of it
        the consumer has received, and the source's own ``state_dict()`` as it was right after
        yielding the last of those — batches prefetched but not consumed are not counted, so a
        resumed run yields exactly the batches this one had not delivered, with the same
        transform draws. Needs a stateful source (e.g. torchdata's ``StatefulDataLoader``)."""
        if not _is_stateful(self.source):
            raise TypeError(
                "prefetch: state_dict() needs a source with state_dict() and load_state_dict() "
                "(e.g. torchdata.stateful_dataloader.StatefulDataLoader, or prefetch.ArrayLoader); "
                "the source is a %s" % type(self.source).__name__)
        position = self._position
        if position is None:  # nothing iterated since construction or load_state_dict()
            return save_transform_state(self.transform, {
                "epoch": self._next_epoch, "batches_consumed": self._resume_index,
                "source": self._loaded_source_state if self._loaded_source_state is not None
                else self.source.state_dict()})
        if isinstance(position, _EpochState):  # an epoch started, none of its batches consumed
            position.started.wait()
            source_state = position.snapshots.get(-1) if position.snapshots else None
            position = (position.epoch, position.first_index, source_state)
        epoch, consumed, source_state = position
        try:
            if consumed >= len(self.source) > 0:
                # Consumed the whole epoch without reaching its end: resume with the next one
                # (a stateful source saved at its end starts a new epoch, as StatefulDataLoader).
                epoch, consumed = epoch + 1, 0
        except TypeError:
            pass  # no len(): the resumed epoch ends at once and the next one follows
        if source_state is None:
            source_state = self.source.state_dict()
        return save_transform_state(
            self.transform, {"epoch": epoch, "batches_consumed": consumed, "source": source_state})

    def load_state_dict(self, state):
        """Resumes from :meth:`state_dict`: the next ``iter()`` continues that epoch after the
        batches already consumed (the source is loaded with its saved state)."""
        if not _is_stateful(self.source):
            raise TypeError("prefetch: load_state_dict() needs a source with state_dict() and "
                            "load_state_dict(); the source is a %s" % type(self.source).__name__)
        missing = {"epoch", "batches_consumed", "source"} - set(state)
        if missing:
            raise KeyError("prefetch: the state lacks %s; expected Prefetcher.state_dict()'s output"
                           % sorted(missing))
        _stop_epoch(self._engine, self._current[0])
        # The transform's seed first: it refuses a state of another explicit seed.
        load_transform_state(self.transform, state)
        self.source.load_state_dict(state["source"])
        self._next_epoch = int(state["epoch"])
        self._resume_index = int(state["batches_consumed"])
        self._position = None
        self._loaded_source_state = state["source"]

    def close(self):
        """Stops the current epoch and joins every thread the Prefetcher started."""
        self._finalizer()

    @property
    def closed(self):
        return not self._finalizer.alive

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "prefetch: a Prefetcher cannot be pickled or copied: it owns threads, a pinned ring "
            "and (CUDA) a stream of this process. Pickle its source instead and build the "
            "Prefetcher where it is iterated (e.g. not inside a Dataset that DataLoader workers "
            "receive).")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def stats(self):
        """Counters since construction: batches delivered, epochs, seconds the consumer waited
        for data (``wait_s``), seconds the producer spent fetching and submitting
        (``produce_s``), and the engine's own: collation time and bytes, producer time blocked
        on a full ring, ring growths."""
        c = self._counters
        with c.lock:
            out = {"batches": c.batches, "epochs": c.epochs, "wait_s": c.wait_s,
                   "produce_s": c.produce_s}
        if not self.closed and self._pid == os.getpid():  # (not the engine a fork inherited)
            out.update(self._engine.stats())
            out["collate_gbps"] = (
                out["bytes_collated"] / out["collate_s"] / 1e9 if out["collate_s"] > 0 else 0.0
            )
        return out

    def __repr__(self):
        return "Prefetcher(device=%s, depth=%d%s)" % (
            self.device, self.depth, ", closed" if self.closed else "")
