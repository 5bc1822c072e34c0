"""The consumer's side of one run: :class:`EpochRun`, an iterator of finished batches."""
import os
import time
import weakref

import torch

from .._core.errors import PrefetchTimeout
from .._core.extension import C as _C
from .device_stage import protect
from .lifecycle import join, stop_run

__all__ = ["EpochRun"]

# What the engine's next() returns first (see _C.NextStatus), looked up once.
_BATCH, _END, _FAILED, _TIMEOUT = (int(_C.NextStatus.BATCH), int(_C.NextStatus.END),
                                   int(_C.NextStatus.FAILED), int(_C.NextStatus.TIMEOUT))
# How long a state_dict() taken after an epoch's last batch waits for the producer to find the
# source's end (normally one next() that raises at once); past it, the position is saved with
# the source's epoch open, which resumes exactly too, at the cost of that epoch's empty rest.
_END_WAIT_S = 10.0


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
        weakref.finalize(self, stop_run, self._engine, state).atexit = False

    @property
    def epoch(self):
        return self._state.epoch

    def initial_source_state(self):
        """The source's ``state_dict()`` before the run's first batch (None: not tracked)."""
        return self._state.initial_source_state()

    def end_source_state(self, index_after):
        """After the consumer received the batch before epoch index ``index_after``: whether the
        source ended there, and its state after the end (``RunState.end_source_state``; waits
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
            batch, to_protect = state.results.pop(seq)
            if to_protect is not None:  # the packed block itself was protected by next()
                protect(to_protect, torch.cuda.current_stream(self._device))
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
        join(state.thread)
        self._let_go()

    def _let_go(self):
        """The run is over: drop what reaches the loader (its ``len()``, its cursor). A traceback
        the consumer keeps holds this iterator through the frame of ``__next__``, and must not
        keep the loader, its source and its workers alive with it."""
        self._length = self._on_batch = self._on_end = None

    def close(self):
        """Stops the run (its producer thread is joined)."""
        stop_run(self._engine, self._state)
