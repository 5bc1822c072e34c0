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
import numbers
import os
import threading
import typing
import weakref

import torch

from .._core.extension import C as _C
from .counters import Counters, derived_fractions
from .device_stage import DeviceStage
from .epoch_run import EpochRun
from .lifecycle import LIVE, ClosesOnExit, shutdown, stop_run
from .producer import RunState, produce

__all__ = ["Pipeline", "EpochRun", "ClosesOnExit", "default_num_threads", "derived_fractions"]


def default_num_threads():
    """Collation threads when none are asked for: the cores this process may use, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


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
        abandon: ``abandon(iterator, source)``, called on the producer thread when a run ends
            before its source did (a ``break``, an error, a newer run): the source's clean-up,
            which the engine, knowing no source, is given (the Prefetcher passes
            :func:`prefetch.sources.abandon`); None: nothing.

    Raises:
        ValueError: ``depth`` or ``num_threads`` not an int >= 1, ``timeout`` not > 0 seconds,
            ``max_batch_bytes`` not an int >= 1.

    ``engine`` is the ``_C.Engine`` of this process (a forked CPU child gets its own at its
    first run); tests and debugging reach it there, loaders never need to.
    """

    def __init__(self, device: torch.device, *, depth: int = 3,
                 num_threads: typing.Optional[int] = None,
                 max_batch_bytes: typing.Optional[int] = None,
                 transform: typing.Optional[typing.Callable] = None,
                 device_transform: typing.Optional[typing.Callable] = None,
                 rank: typing.Optional[int] = None, timeout: typing.Optional[float] = None,
                 owner: str = "Prefetcher",
                 abandon: typing.Optional[typing.Callable] = None) -> None:
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
        self._abandon_source = abandon
        self._counters = Counters()
        self._open_engine()

    def _open_engine(self):
        """The engine, its device stage and the finalizer that closes them, for this process."""
        self.engine = _C.Engine(*self._engine_args)
        self._stage = DeviceStage(self.device, self.engine.stream_handle, *self._stage_args)
        self._pid = os.getpid()
        self._lock = threading.RLock()  # run() against close(): a run starts whole or not
        self._current = [None]  # the live run's state, shared with the finalizer
        # Not at exit: _at_exit closes every live Pipeline there, within one deadline for all.
        self._finalizer = weakref.finalize(self, shutdown, self.engine, self._current,
                                           self._lock, self._pid)
        self._finalizer.atexit = False
        LIVE.add(self)

    def _after_fork(self):
        """In a forked child the inherited engine's threads do not exist and its locks may be
        held: it is abandoned, never waited on, and (CPU) a fresh engine takes its place."""
        if self._pid == os.getpid():
            return
        closed = not self._finalizer.alive
        self._finalizer()  # shutdown in the child: abandons the parent's engine
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

    def run(self, source: typing.Iterable, *, epoch: int, first_index: int = 0,
            track_source_state: bool = False,
            length: typing.Optional[typing.Callable[[], int]] = None,
            on_batch: typing.Optional[typing.Callable] = None,
            on_end: typing.Optional[typing.Callable] = None) -> EpochRun:
        """Starts a run of ``source`` (stopping the live one) and returns its :class:`EpochRun`.

        Args:
            source: any iterable of batches, or of ``prefetch.sources.PreparedBatch``.
            epoch, first_index: the positions the transform sees are
                ``BatchPosition(epoch, first_index + k, rank)`` for the run's k-th batch.
            track_source_state: take ``source.state_dict()`` before the first batch and after
                each (what resumes after exactly the batches the consumer received).
            length: ``len()`` of the EpochRun (a zero-argument callable).
            on_batch(epoch, index_after, source_state): called on the consumer's thread for each
                delivered batch: ``index_after`` is the index of the batch after it.
            on_end(epoch, source_state): called on the consumer's thread when the source is
                exhausted, with its ``state_dict()`` after its end (None: not tracked).

        Returns:
            EpochRun: the consumer's iterator of the run's finished batches.

        Raises:
            RuntimeError: the Pipeline is closed, or is a CUDA Pipeline inherited by a forked
                child.
        """
        self._after_fork()
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("prefetch: this %s is closed" % self.owner)
            stop_run(self.engine, self._current[0])
            state = RunState(self.engine.start_epoch(), epoch, first_index, track_source_state)
            self._current[0] = state
            run = EpochRun(self, state, self._timeout, length, on_batch, on_end)
            state.thread = threading.Thread(
                target=produce, args=(self.engine, source, state, self._counters, self._stage,
                                            self._abandon_source),
                name="prefetch-producer", daemon=True)
            state.thread.start()
        self._counters.add(epochs=1)
        return run

    def stop(self):
        """Stops the live run, if any (its EpochRun then ends)."""
        stop_run(self.engine, self._current[0])

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
