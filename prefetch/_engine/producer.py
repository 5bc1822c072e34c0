"""The producer thread of one run: ``next(source)`` → the host stage → flatten →
``engine.stage`` → the device stage → ``engine.publish``, once per batch, with what it was doing
noted for an error; and the state it shares with the consumer (:class:`RunState`)."""
import os
import re
import threading
import time

from .._core.errors import CollateError
from .._core.extension import C as _C
from .._core.tree import PreparedBatch, flatten, host_batch
from . import device_stage
from .resume import AT_END, MORE, UNKNOWN

__all__ = ["RunState", "produce"]


class RunState:
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


# What the producer was doing when an error was raised, as the consumer's note says it.
_FETCHING = "while fetching batch %d of the epoch from the source"
_COLLATING = "while collating and copying batch %d of the epoch"
_TRANSFORMING = "in the transform, on batch %d of the epoch"


def produce(engine, source, state, counters, stage, abandon=None):
    """The producer thread's body for one run (see the module docstring): every error goes to the
    consumer through ``state``. ``abandon(iterator, source)``, when given, is called when the run
    ends before the source did (a ``break``, an error, a newer run): the source's clean-up."""
    it = batch = leaves = tensors = None
    seq = 0
    ended = False  # the source said StopIteration
    step = _FETCHING  # what the producer is doing, for the note on an error
    snapshots = state.snapshots
    try:
        device_stage.bind_thread_to(stage.device)
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
        if it is not None and not ended and abandon is not None and state.pid == os.getpid():
            try:  # broken off: the source's own clean-up (a Prefetcher's: prefetch.sources.abandon)
                abandon(it, source)
            except Exception:  # noqa: BLE001 - at stake: later epochs' order, when workers go
                pass
        state.started.set()
        state.noted(producer_exited=True)
        # Drop the source iterator here (a DataLoader shuts its workers down), and keep it, the
        # batch (its tensors, moves, spec and packed buffer: a worker-ring batch holds its slot),
        # the source, the run's state, the engine and the transforms out of the traceback that
        # travels to the consumer: it holds this frame with the locals it has at its end.
        it = batch = leaves = tensors = spec = moves = packed = None
        source = state = engine = stage = counters = snapshots = abandon = None


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
