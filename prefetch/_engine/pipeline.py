"""The one internal engine interface every loader runs on.

    pipeline = Pipeline(device, depth=3, num_threads=4, transform=t)
    for batch in pipeline.run(source, epoch=e, first_index=i):   # one epoch
        ...
    pipeline.close()

:meth:`Pipeline.run` is "run this source for epoch ``e`` from batch ``i``, with this transform,
on this device": a producer thread iterates ``source`` and sends every batch down one path —

    next(source) → flatten → engine.stage (C++ threads collate into the pinned ring, the copy is
    enqueued on the copy stream; GIL released) → unflatten on the device → the transform at
    BatchPosition(e, i + k, rank), then device_transform, on the copy stream → engine.publish

— and the returned :class:`EpochRun` hands the finished batches to the consumer in order, its
stream made to wait for each (no host synchronisation). The engine (ring, thread pool, copy
stream) lives as long as the Pipeline and serves every run; one run is live at a time, and
starting one stops the previous. docs/engine.md draws this interface and its contract.
:class:`prefetch.Prefetcher` and :class:`prefetch.ArrayLoader` (host residency) are built on it;
resume bookkeeping is not its job (prefetch._engine.resume).
"""
import atexit
import ctypes
import dataclasses
import numbers
import os
import re
import threading
import time
import weakref

import torch

from .checks import distributed_rank
from .resume import AT_END, MORE, UNKNOWN
from .extension import _C
from .tree import PreparedBatch, flatten, host_batch, unflatten
from ..errors import CollateError, PrefetchTimeout
from ..ragged import Ragged
from ..sources.abandoned import release_workers
from ..sources.sampling import finish_sampling
from ..transforms.contract import BatchPosition, has_host_stage, run_transform

__all__ = ["Pipeline", "EpochRun", "ClosesOnExit", "default_num_threads"]

# What the engine's next() returns first (see _C.NextStatus), looked up once.
_BATCH, _END, _FAILED, _TIMEOUT = (int(_C.NextStatus.BATCH), int(_C.NextStatus.END),
                                   int(_C.NextStatus.FAILED), int(_C.NextStatus.TIMEOUT))

# How long close() waits for a producer thread that is stuck inside the source's own next().
# At interpreter exit this is the bound for all Pipelines together, not for each (_at_exit).
_JOIN_TIMEOUT_S = 5.0
# How long a state_dict() taken after an epoch's last batch waits for the producer to find the
# source's end (normally one next() that raises at once); past it, the position is saved with
# the source's epoch open, which resumes exactly too, at the cost of that epoch's empty rest.
_END_WAIT_S = 10.0
_exit_deadline = [None]  # set by _at_exit: every join from then on shares this one deadline
_LIVE = weakref.WeakSet()  # Pipelines not closed yet, for _at_exit


def default_num_threads():
    """Collation threads when none are asked for: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _join(thread, until_gone=False):
    """Joins a producer thread for at most _JOIN_TIMEOUT_S (at exit: until the shared deadline);
    a thread stuck inside the source's own next() is a daemon and is left behind. With
    ``until_gone`` (close()), also waits until the OS thread has finished exiting."""
    if thread is None or thread is threading.current_thread() or thread.ident is None:
        return  # not started (close() raced run()), or the caller is that thread
    deadline = _exit_deadline[0]
    thread.join(_JOIN_TIMEOUT_S if deadline is None else max(0.0, deadline - time.monotonic()))
    if until_gone and not thread.is_alive():
        _wait_gone(thread.native_id)


def _wait_gone(native_id, limit_s=1.0):
    """Python's join() returns before the OS thread has finished exiting (the producer's C++
    thread-local state, torch's included, is torn down after it): wait, briefly, until the
    thread is gone from /proc, so that "close() joined every thread" holds for anyone counting
    the process's threads. Not Linux: nothing to wait on."""
    path = "/proc/self/task/%d" % native_id
    end = time.monotonic() + limit_s
    while os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.0002)


def _abandon(engine):
    """Keeps an engine inherited across fork() from ever being destroyed: its threads do not
    exist in this process and its mutexes may be held by them, so cancelling, closing or
    destroying it (which joins those threads) could block forever. It is leaked on purpose."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))


def _at_exit():
    """Interpreter exit (also after Ctrl-C): stops every live Pipeline's run first, so all their
    producers wind down at once, then closes each, all within one _JOIN_TIMEOUT_S."""
    _exit_deadline[0] = time.monotonic() + _JOIN_TIMEOUT_S
    live = list(_LIVE)
    pid = os.getpid()
    for pipeline in live:
        state = pipeline._current[0]
        if state is not None and not state.done and state.pid == pid:
            state.stop.set()
            try:
                pipeline.engine.cancel(state.token)
            except Exception:  # noqa: BLE001 - closed meanwhile
                pass
    for pipeline in live:
        pipeline._finalizer()


atexit.register(_at_exit)


class ClosesOnExit:
    """``with loader:`` closes the loader (every loader has ``close()``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Counters:
    """Per-Pipeline totals; written by the producer and consumer threads under a lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches = 0
        self.epochs = 0
        self.wait_s = 0.0
        self.consumer_s = 0.0   # the consumer's wall time from its first next() to its last return
        self.produce_s = 0.0
        self.source_s = 0.0     # of produce_s: in the source's next() (a DataLoader's hand-off)
        self.transform_s = 0.0  # of produce_s: in the transforms (CPU: the work; CUDA: launches)

    def add(self, **deltas):
        with self.lock:
            for key, value in deltas.items():
                setattr(self, key, getattr(self, key) + value)


def _ratio(part, whole):
    return part / whole if whole > 0 else 0.0


def derived_fractions(counters):
    """The fractions ``stats()`` derives from its counters (0.0 while a denominator is 0).

    - ``wait_fraction`` = ``wait_s / consumer_s``: of the consumer's wall time (from each
      epoch's first ``next()`` call to its last return: its own work between batches plus its
      waits), the part spent inside ``next()`` waiting for a batch. 0: the data was always
      ready; near 1: the consumer (the training step) mostly waits for data.
    - the producer's shares of ``produce_s`` (its whole time per batch, summed), stage by stage:
      ``source_share`` (``source_s``), ``collate_share`` (``collate_s``: collation, and on the
      CPU device the copy), ``slot_wait_share`` (``slot_wait_s``: waiting for a ring slot's
      last copy, i.e. for the copy engine), ``blocked_share`` (``producer_blocked_s``: waiting
      because ``depth`` batches were ready, the consumer being slower), ``transform_share``
      (``transform_s``) and ``handoff_share``, the rest (flattening the batch, allocating the
      destination, enqueuing the device copy, publishing); they sum to 1. ``collate_s``,
      ``slot_wait_s`` and ``producer_blocked_s`` are the engine's; without them (a closed
      Prefetcher) only ``source_share`` and ``transform_share`` are given.
    """
    # No batch delivered (an empty epoch): the only next() call waited for the end, which says
    # nothing about the consumer waiting for data.
    delivered = counters.get("batches", 1)
    out = {"wait_fraction": _ratio(counters["wait_s"], counters["consumer_s"]) if delivered else 0.0}
    produce = counters["produce_s"]
    out["source_share"] = _ratio(counters["source_s"], produce)
    out["transform_share"] = _ratio(counters["transform_s"], produce)
    if "collate_s" in counters and "producer_blocked_s" in counters:
        slot_wait = counters.get("slot_wait_s", 0.0)
        out["collate_share"] = _ratio(counters["collate_s"], produce)
        out["slot_wait_share"] = _ratio(slot_wait, produce)
        out["blocked_share"] = _ratio(counters["producer_blocked_s"], produce)
        rest = produce - counters["source_s"] - counters["transform_s"] - counters["collate_s"] \
            - slot_wait - counters["producer_blocked_s"]
        out["handoff_share"] = _ratio(max(0.0, rest), produce)
    return out


class _RunState:
    """What the producer thread and the consumer share for one run. The producer holds this,
    never the EpochRun, so dropping the iterator (``break``) lets it be collected and cleaned up."""

    def __init__(self, token, epoch, first_index, track_source_state):
        self.token = token
        self.epoch = epoch
        self.first_index = first_index  # the index of the run's first batch in its epoch
        # seq -> the source's state_dict() right after it yielded batch seq (-1: before any):
        # the state that resumes after exactly the batches the consumer has had.
        self.snapshots = {} if track_source_state else None
        self.started = threading.Event()  # set once snapshots[-1] is there (or the producer ended)
        # The source's state_dict() right after its StopIteration (tracked sources only): what
        # resumes at the next epoch's start (prefetch._engine.resume). `progress` is notified at
        # every snapshot and when the producer exits, for end_source_state().
        self.end_state = None
        self.source_ended = False
        self.producer_exited = False
        self.progress = threading.Condition()
        self.results = {}  # seq -> the finished batch, set before the engine publishes it
        self.yielded = 0  # batches the source has yielded (counted for tracked sources only)
        self.error = None
        self.error_batch = None
        self.error_stage = None  # _FETCHING, _COLLATING or _TRANSFORMING
        self.stop = threading.Event()
        self.thread = None
        self.done = False
        self.pid = os.getpid()  # a forked child must not touch this run's engine or thread

    def initial_source_state(self):
        """The source's state before its first batch (waits for the producer to take it)."""
        self.started.wait()
        return self.snapshots.get(-1) if self.snapshots else None

    def noted(self, **changes):
        """The producer's progress, for end_source_state(): sets ``changes`` and wakes it."""
        with self.progress:
            for name, value in changes.items():
                setattr(self, name, value)
            self.progress.notify_all()

    def end_source_state(self, seq, timeout=None):
        """What follows the run's batch ``seq - 1`` at the source: ``(AT_END, the source's state
        after its StopIteration)``, ``(MORE, None)`` when the source yielded batch ``seq``, or
        ``(UNKNOWN, None)`` when the producer stopped before it found out (or ``timeout``
        seconds passed). Waits for the producer's next step: one ``next()`` of the source."""
        with self.progress:
            self.progress.wait_for(
                lambda: self.source_ended or self.producer_exited or seq < self.yielded,
                timeout=timeout)
            if seq < self.yielded:  # (checked first: the source may have ended since)
                return MORE, None
            if self.source_ended:
                return AT_END, self.end_state
            return UNKNOWN, None


def bind_thread_to(device):
    """Makes ``device`` the calling thread's current CUDA device (nothing for a CPU device). A new
    thread starts on device 0: without this, the first CUDA call the producer makes (a stream
    lookup, an allocation, a transform's kernel) would create a context on GPU 0 in every DDP
    rank, ~0.5 GB each."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def order_moves(moves, device, copy_stream, current_stream):
    """Orders the batch's tensors already on a device (the "moves") with the copy stream, which is
    non-blocking, so nothing else would: it waits for the stream current on the producer thread
    for each one's device (its default stream unless the source chose another), where the source
    made them. And their memory is kept from reuse until the streams that read them are done: a
    move on ``device`` is read on the copy stream (by the transform), one on another device by
    torch's copy on that device's current stream. ``current_stream(device)`` is
    torch.cuda.current_stream; a parameter so that the CPU tests can count the calls."""
    waited = set()
    for m in moves:
        if not m.is_cuda:
            continue
        if m.device not in waited:
            waited.add(m.device)
            copy_stream.wait_stream(current_stream(m.device))
        m.record_stream(copy_stream if m.device == device else current_stream(m.device))


class _DeviceStage:
    """What the producer does to a batch once it is on the device: rebuild its structure (the
    moves copied or taken as they are, ordered after the source's work), then the transforms,
    all on the copy stream. Returns the batch and what the consumer's stream must be protected
    for beyond the packed block: None, the moved tensors, or (with transforms) the transformed
    batch itself."""

    def __init__(self, device, stream_handle, transform, device_transform, rank):
        self.device, self.transform, self.device_transform = device, transform, device_transform
        self.rank = rank  # None: torch.distributed's, read at every batch
        self.stream = (torch.cuda.ExternalStream(stream_handle, device=device)
                       if device.type == "cuda" else None)
        self.transforms = transform is not None or device_transform is not None
        self.host_stage = has_host_stage(transform, device)

    def position(self, epoch, index):
        rank = self.rank if self.rank is not None else distributed_rank()
        return BatchPosition(epoch, index, rank)

    def host(self, batch, epoch, index):
        """The transform's host stage (Transform.host_apply) on the batch as the source gave it,
        before it is collated: nothing of it has crossed to the device yet."""
        return self.transform.host_apply(batch, self.position(epoch, index), self.device)

    def _transform(self, batch, epoch, index):
        if self.transform is not None:
            batch = run_transform(self.transform, batch, self.position(epoch, index))
        if self.device_transform is not None:
            batch = self.device_transform(batch)
        return batch

    def __call__(self, spec, tensors, moves, epoch, index):
        if self.stream is None:  # the host backend: everything is ordered on this thread
            batch = unflatten(spec, tensors, moves, self.device)
            return (self._transform(batch, epoch, index) if self.transforms else batch), None
        if moves:
            order_moves(moves, self.device, self.stream, torch.cuda.current_stream)
        with torch.cuda.stream(self.stream):
            # A move to this device is the tensor itself; to another, a copy torch runs on the
            # source device's current stream and orders before the copy stream (two-way).
            moved = [m.to(self.device, non_blocking=True) for m in moves]
            batch = unflatten(spec, tensors, moved, self.device)
            if not self.transforms:
                return batch, (moved or None)
            # The consumer reads what the transform made (allocated on the copy stream): without
            # record_stream for its stream, a block the consumer drops before its queued work
            # has read it goes back to the copy stream's pool, and the next batch's copy
            # overwrites it (seen on an H200: a slow consumer read another batch's bytes). The
            # transform's inputs are read on the copy stream only (the packed block is protected
            # by next(), the moves by order_moves).
            out = self._transform(batch, epoch, index)
            return out, out


# What the producer was doing when an error was raised, as the consumer's note says it.
_FETCHING = "while fetching batch %d of the epoch from the source"
_COLLATING = "while collating and copying batch %d of the epoch"
_TRANSFORMING = "in the transform, on batch %d of the epoch"


def _produce(engine, source, state, counters, stage):
    it = batch = leaves = tensors = None
    seq = 0
    ended = False  # the source said StopIteration
    step = _FETCHING  # what the producer is doing, for the note on an error
    snapshots = state.snapshots
    try:
        bind_thread_to(stage.device)
        it = iter(source)
        if snapshots is not None:
            snapshots[-1] = source.state_dict()
        state.started.set()
        while not state.stop.is_set():
            t0 = time.perf_counter()
            step = _FETCHING
            try:
                batch = next(it)
            except StopIteration:
                ended = True
                # The state that starts the next epoch (a StatefulDataLoader's "finished"), not
                # the one after the last batch, which resumes into this epoch's empty remainder.
                end = source.state_dict() if snapshots is not None else None
                state.noted(end_state=end, source_ended=True)
                break
            t_source = time.perf_counter() - t0
            if snapshots is not None:
                snapshots[seq] = source.state_dict()
                state.noted(yielded=seq + 1)
            packed = host_s = None
            if stage.host_stage:
                t_host = time.perf_counter()
                # (A packed batch's host views hold its slot until the engine has collated what
                # the stage kept and they are gone.)
                step = _TRANSFORMING
                batch = stage.host(host_batch(batch), state.epoch, state.first_index + seq)
                step = _COLLATING
                spec, leaves, moves = flatten(batch)
                host_s = time.perf_counter() - t_host
            elif isinstance(batch, PreparedBatch):
                spec, leaves, moves, packed = batch
            else:
                step = _COLLATING
                spec, leaves, moves = flatten(batch)
            batch = None
            # Collate and copy (GIL released), finish the batch on the copy stream, then
            # publish: the consumer's stream waits for all of it, the host for none of it.
            # (On the host backend only a transform reads the batch before it is published.)
            step = _COLLATING
            if packed is None:
                staged_seq, tensors = engine.stage(state.token, leaves, stage.transforms)
            else:  # one copy of the packed buffer; the engine frees its slot once that has run
                staged_seq, tensors = engine.stage_packed(state.token, packed.data, packed.layout,
                                                          packed.pin, packed.slot, stage.transforms)
            leaves = packed = None
            t_stage = time.perf_counter()
            step = _TRANSFORMING if stage.transforms else _COLLATING
            state.results[staged_seq] = stage(spec, tensors, moves, state.epoch,
                                              state.first_index + staged_seq)
            t_transform = time.perf_counter() - t_stage + (host_s or 0.0)
            tensors = spec = moves = None  # held by the batch now, not by this frame
            engine.publish(state.token)
            seq += 1
            counters.add(produce_s=time.perf_counter() - t0, source_s=t_source,
                         transform_s=t_transform)
        engine.finish(state.token, False)
    except _C.Cancelled:
        pass
    except BaseException as exc:  # noqa: BLE001 - everything goes to the consumer
        if isinstance(exc, CollateError) or step == _TRANSFORMING:
            _note_dataset_index(exc, source, seq)
        state.error, state.error_batch, state.error_stage = exc, seq, step
        try:
            engine.finish(state.token, True)
        except RuntimeError:
            pass  # the Pipeline was closed meanwhile; nobody is waiting
    finally:
        if it is not None and not ended and state.pid == os.getpid():
            try:  # broken off: leave the sampler where a whole epoch leaves it (sources.sampling)
                finish_sampling(it)
            except Exception:  # noqa: BLE001 - the order of later epochs is all that is at stake
                pass
            try:  # its workers go now, not when a kept traceback lets go of it (sources.abandoned)
                release_workers(it, getattr(source, "dataloader", source))
            except Exception:  # noqa: BLE001 - the workers then go when the iterator does
                pass
        state.started.set()
        state.noted(producer_exited=True)
        # Drop the source iterator here (a DataLoader shuts its workers down), and keep it, the
        # batch (its tensors, moves, spec and packed buffer: a worker-ring batch holds its slot),
        # the source, the run's state, the engine and the transforms out of the traceback that
        # travels to the consumer: it holds this frame with the locals it has at its end.
        it = batch = leaves = tensors = spec = moves = packed = None
        source = state = engine = stage = counters = snapshots = None


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
    source = getattr(source, "dataloader", source)  # a source over a DataLoader names it there
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
    elif isinstance(obj, Ragged):
        for t in (obj.values, obj.offsets, obj.sizes):
            _protect(t, stream)


def _stop_run(engine, state):
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
    with lock:  # not while run() is between starting an epoch and starting its thread
        state = current[0]
        _stop_run(engine, state)
        if state is not None and state.pid == pid:  # also a run that had ended by itself
            _join(state.thread, until_gone=True)
        current[0] = None
        engine.close()


class EpochRun:
    """The consumer's side of one :meth:`Pipeline.run`: an iterator of finished batches.

    ``next()`` waits (GIL released) for the next batch, makes the current CUDA stream wait for
    it, and returns it; an exception raised by the source or the transform is re-raised here
    with a note naming the batch; ``timeout`` expiring raises :class:`PrefetchTimeout` (``next()``
    may be called again); the end of the source, ``close()``, or a newer run ends it.
    """

    def __init__(self, pipeline, state, timeout, length, on_batch, on_end):
        self._state = state
        self._engine = pipeline.engine
        self._counters = pipeline._counters
        self._device, self._owner = pipeline.device, pipeline.owner
        self._timeout = -1.0 if timeout is None else float(timeout)
        self._timeout_arg = timeout
        self._length, self._on_batch, self._on_end = length, on_batch, on_end
        self.delivered = 0  # batches this run handed to the consumer
        self._last_return = None  # perf_counter() when next() last returned or raised
        # Not at exit: _at_exit stops every run there, within one deadline for all.
        weakref.finalize(self, _stop_run, self._engine, state).atexit = False

    @property
    def epoch(self):
        return self._state.epoch

    def initial_source_state(self):
        """The source's ``state_dict()`` before the run's first batch (None: not tracked)."""
        return self._state.initial_source_state()

    def end_source_state(self, index_after):
        """After the consumer received the batch before epoch index ``index_after``: whether the
        source ended there, and its state after the end (``_RunState.end_source_state``; waits
        for the producer's next step at most the Pipeline's timeout, and at most _END_WAIT_S)."""
        state = self._state
        timeout = min(_END_WAIT_S, self._timeout if self._timeout >= 0 else _END_WAIT_S)
        return state.end_source_state(index_after - state.first_index, timeout)

    def __iter__(self):
        return self

    def __len__(self):
        if self._length is None:
            raise TypeError("prefetch: this run's length is not known (or the run is over)")
        return self._length()

    def __next__(self):
        state = self._state
        if state.pid != os.getpid():
            raise RuntimeError(
                "prefetch: this epoch was started in process %d, before a fork; its producer "
                "thread does not exist in this process (%d). Call iter() on the %s again "
                "here to start a new epoch in this process." % (state.pid, os.getpid(), self._owner))
        if state.done:
            raise StopIteration
        t0 = time.perf_counter()
        status, seq, _ = self._engine.next(state.token, self._timeout, False)
        t1 = time.perf_counter()
        waited = t1 - t0
        # The consumer's wall time: from this run's first next() call, every interval between
        # two returns of next() (the consumer's own work, then its wait).
        span = t1 - (t0 if self._last_return is None else self._last_return)
        self._last_return = t1
        if status == _BATCH:
            self.delivered += 1
            self._counters.add(wait_s=waited, consumer_s=span, batches=1)  # one lock a batch
            batch, protect = state.results.pop(seq)
            if protect is not None:  # the packed block itself was protected by next()
                _protect(protect, torch.cuda.current_stream(self._device))
            if self._on_batch is not None:
                source_state = None
                if state.snapshots is not None:
                    source_state = state.snapshots.pop(seq, None)
                    if seq == 0:
                        state.snapshots.pop(-1, None)
                self._on_batch(state.epoch, state.first_index + self.delivered, source_state)
            return batch
        self._counters.add(wait_s=waited, consumer_s=span)
        if status == _END:
            on_end = self._on_end  # (_finish lets go of it)
            self._finish()
            if on_end is not None:
                on_end(state.epoch, state.end_state)
            raise StopIteration
        if status == _FAILED:
            self._finish()
            # Hand the exception over and forget it: the run's finalizer keeps `state` alive,
            # and the exception's traceback holds this iterator (and so the Pipeline, its
            # engine and threads); kept in `state`, it would leak all of them for good.
            error, state.error = state.error, None
            note = (
                "[prefetch] raised in the %s's producer thread %s; %d batches were delivered "
                "before it" % (self._owner, state.error_stage % state.error_batch, self.delivered)
            )
            if note not in getattr(error, "__notes__", ()):
                error.add_note(note)
            try:
                raise error
            finally:
                # The exception's traceback holds this frame: were `error` still one of its
                # locals, the two would form a cycle, and the exception, this iterator, the
                # source (a DataLoader, its dead iterator, its workers' handles, queues and
                # pipes) would live until a garbage collection — which may come in a forked
                # worker of a later DataLoader, which then frees the parent's process handles.
                del error
        if status == _TIMEOUT:
            raise PrefetchTimeout(
                "prefetch: no batch arrived within timeout=%ss (after %d batches of this epoch); "
                "the source is stalled or slower than that. next() can be called again."
                % (self._timeout_arg, self.delivered)
            )
        # CANCELLED: this run was stopped (close(), or a newer run started).
        state.done = True
        self._let_go()
        raise StopIteration

    def _finish(self):
        state = self._state
        state.done = True
        _join(state.thread)
        self._let_go()

    def _let_go(self):
        """The run is over: drop what reaches the loader (its ``len()``, its cursor). A traceback
        the consumer keeps holds this iterator through the frame of ``__next__``, and must not
        keep the loader, its source and its workers alive with it."""
        self._length = self._on_batch = self._on_end = None

    def close(self):
        """Stops the run (its producer thread is joined)."""
        _stop_run(self._engine, self._state)


class Pipeline:
    """One engine (pinned ring, collation threads, copy stream) and what runs on it; see the
    module docstring.

    Args:
        device: a resolved ``torch.device`` (CPU or CUDA with an index).
        depth, num_threads, max_batch_bytes: the engine's (see :class:`prefetch.Prefetcher`);
            checked here, for every loader.
        transform: a :class:`prefetch.transforms.Transform` or any ``fn(batch)``, run on the
            copy stream at each batch's :class:`~prefetch.transforms.BatchPosition`.
        device_transform: any ``fn(batch)``, run after ``transform``.
        rank: the rank in the positions; None: torch.distributed's, read at every batch.
        timeout: seconds an :class:`EpochRun`'s ``next()`` waits (None: forever).
        owner: what the user built ("Prefetcher", "ArrayLoader"), for the messages.

    ``engine`` is the ``_C.Engine`` of this process (a forked CPU child gets its own at its
    first run); tests and debugging reach it there, loaders never need to.
    """

    def __init__(self, device, *, depth=3, num_threads=None, max_batch_bytes=None, transform=None,
                 device_transform=None, rank=None, timeout=None, owner="Prefetcher"):
        # (bool is an int to Python: depth=True would be a depth of 1.)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError("prefetch: %s depth must be an int >= 1, got %r" % (owner, depth))
        if num_threads is None:
            num_threads = default_num_threads()
        if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
            raise ValueError("prefetch: %s num_threads must be an int >= 1, got %r"
                             % (owner, num_threads))
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout > 0):  # NaN too; inf means wait forever
            raise ValueError("prefetch: %s timeout must be > 0 seconds or None, got %r"
                             % (owner, timeout))
        if max_batch_bytes is not None and (
                not isinstance(max_batch_bytes, numbers.Integral) or isinstance(max_batch_bytes, bool)
                or max_batch_bytes < 1):  # (a float: 1.5 was truncated, NaN and inf raised int()'s)
            raise ValueError("prefetch: %s max_batch_bytes must be an int >= 1 (bytes) or None, "
                             "got %r" % (owner, max_batch_bytes))
        self.device, self.owner = device, owner
        self._timeout = timeout
        self._stage_args = (transform, device_transform, rank)
        self._engine_args = (device.type, device.index if device.index is not None else -1,
                             depth, num_threads, int(max_batch_bytes or 0))
        self._counters = _Counters()
        self._open_engine()

    def _open_engine(self):
        """The engine, its device stage and the finalizer that closes them, for this process."""
        self.engine = _C.Engine(*self._engine_args)
        self._stage = _DeviceStage(self.device, self.engine.stream_handle, *self._stage_args)
        self._pid = os.getpid()
        self._lock = threading.RLock()  # run() against close(): a run starts whole or not
        self._current = [None]  # the live run's state, shared with the finalizer
        # Not at exit: _at_exit closes every live Pipeline there, within one deadline for all.
        self._finalizer = weakref.finalize(self, _shutdown, self.engine, self._current,
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
        if self.device.type == "cuda":  # (at every run in the child, not only the first)
            raise RuntimeError(
                "prefetch: this %s (on %s) was created in process %d and this process "
                "(%d) is a fork of it; CUDA cannot be used in a forked child (as torch says). "
                "Create the %s in the child, or start it with the 'spawn' or "
                "'forkserver' method." % (self.owner, self.device, self._pid, os.getpid(),
                                          self.owner))
        if closed:
            return  # closed before the fork: run() says so
        self._counters.lock = threading.Lock()  # a parent's thread may have held it at the fork
        self._open_engine()

    def check_runnable(self):
        """Raises now what :meth:`run` would raise: this Pipeline is closed, or it is a CUDA
        Pipeline inherited by a forked child (a CPU one gets a fresh engine here)."""
        self._after_fork()
        if not self._finalizer.alive:
            raise RuntimeError("prefetch: this %s is closed" % self.owner)

    def run(self, source, *, epoch, first_index=0, track_source_state=False, length=None,
            on_batch=None, on_end=None):
        """Starts a run of ``source`` (stopping the live one) and returns its :class:`EpochRun`.

        Args:
            source: any iterable of batches, or of ``_tree.PreparedBatch``.
            epoch, first_index: the positions the transform sees are
                ``BatchPosition(epoch, first_index + k, rank)`` for the run's k-th batch.
            track_source_state: take ``source.state_dict()`` before the first batch and after
                each (what resumes after exactly the batches the consumer received).
            length: ``len()`` of the EpochRun (a zero-argument callable).
            on_batch(epoch, index_after, source_state): called on the consumer's thread for each
                delivered batch: ``index_after`` is the index of the batch after it.
            on_end(epoch, source_state): called on the consumer's thread when the source is
                exhausted, with its ``state_dict()`` after its end (None: not tracked).
        """
        self._after_fork()
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("prefetch: this %s is closed" % self.owner)
            _stop_run(self.engine, self._current[0])
            state = _RunState(self.engine.start_epoch(), epoch, first_index, track_source_state)
            self._current[0] = state
            run = EpochRun(self, state, self._timeout, length, on_batch, on_end)
            state.thread = threading.Thread(
                target=_produce, args=(self.engine, source, state, self._counters, self._stage),
                name="prefetch-producer", daemon=True)
            state.thread.start()
        self._counters.add(epochs=1)
        return run

    def stop(self):
        """Stops the live run, if any (its EpochRun then ends)."""
        _stop_run(self.engine, self._current[0])

    def close(self):
        """Stops the live run and joins every thread the Pipeline started."""
        self._finalizer()

    @property
    def closed(self):
        return not self._finalizer.alive

    @property
    def owned_by_this_process(self):
        return self._pid == os.getpid()

    def stats(self):
        """The consumer's and producer's counters and the engine's own (see Prefetcher.stats)."""
        c = self._counters
        with c.lock:
            out = {"batches": c.batches, "epochs": c.epochs, "wait_s": c.wait_s,
                   "consumer_s": c.consumer_s, "produce_s": c.produce_s,
                   "source_s": c.source_s, "transform_s": c.transform_s}
        if not self.closed and self.owned_by_this_process:  # (not the engine a fork inherited)
            out.update(self.engine.stats())
            out["collate_gbps"] = (
                out["bytes_collated"] / out["collate_s"] / 1e9 if out["collate_s"] > 0 else 0.0
            )
        out.update(derived_fractions(out))
        return out
