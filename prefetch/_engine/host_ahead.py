"""The host stage one batch ahead: a thread of the producer's own that takes the source's next batch
and runs the transform's host stage on it (a JPEG decode, a crop), while the producer collates,
transforms and publishes the batch before it.

Why: on the CPU device the host stage's kernels and the transform's kernels each use every core,
but between them the producer runs Python (the transform's plan, the draws, small torch ops) on one
core while the others wait (on the timm recipe, 2 cores: 82% of two cores busy in process).
With the next batch's host stage in flight, its kernels (which release the GIL) fill those gaps.

What stays as it was: the source is read by one thread, in order; ``state.snapshots[seq]`` is the
source's state right after it yielded batch ``seq``; an error is raised by the producer for the
batch it belongs to, after every batch before it was published; the transform's draws are a
function of (epoch, index), never of timing."""
import collections
import threading
import time

from .._core.tree import flatten, host_batch

__all__ = ["HostAhead", "Fetched", "HELD_AHEAD"]

# How many of the source's batches the host-stage thread may hold beyond the one the producer
# works on: one waiting in the queue (depth 1) and one it has finished and waits to queue. A
# worker ring counts them in its slots (docs/engine.md, "The bound").
HELD_AHEAD = 2

# How often a waiting side looks at the run's stop flag (a threading.Event cannot wake a
# Condition): the bound on how long a stopped run's threads take to notice.
_POLL_S = 0.05


class Fetched:
    """One batch (or the end, or an error) as the host-stage thread hands it over, in order."""

    __slots__ = ("seq", "flat", "error", "step", "source_s", "host_s")

    def __init__(self, seq, flat=None, error=None, step=None, source_s=0.0, host_s=0.0):
        self.seq, self.flat, self.error, self.step = seq, flat, error, step
        self.source_s, self.host_s = source_s, host_s

    @property
    def end(self):
        return self.flat is None and self.error is None


class HostAhead:
    """Runs ``next(iterator)`` and the host stage on a thread of its own, at most ``depth`` batches
    ahead of the producer's :meth:`get`. ``steps`` = (fetching, transforming, collating): the
    producer's notes for an error in each."""

    def __init__(self, iterator, source, state, stage, steps, depth=HELD_AHEAD - 1):
        self._it, self._source, self._state, self._stage = iterator, source, state, stage
        self._fetching, self._transforming, self._collating = steps
        self._depth = depth
        self._items = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.ended = False  # the source said StopIteration
        self.thread = threading.Thread(target=self._run, name="prefetch-host-stage", daemon=True)
        self.thread.start()

    def get(self):
        """The next batch's :class:`Fetched`, in order; None when the run was stopped first."""
        with self._cond:
            while not self._items:
                if self._state.stop.is_set():
                    return None
                self._cond.wait(_POLL_S)
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def close(self, timeout):
        """Stops the thread after its current step and joins it for at most ``timeout`` seconds.
        Returns whether it has exited (a thread inside the source's own next() may not have)."""
        with self._cond:
            self._closed = True
            self._items.clear()  # (a batch that will not be published: its host buffers go)
            self._cond.notify_all()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _put(self, item):
        with self._cond:
            while len(self._items) >= self._depth and not self._closed:
                if self._state.stop.is_set():
                    return False
                self._cond.wait(_POLL_S)
            if self._closed:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def _stopping(self):
        return self._closed or self._state.stop.is_set()

    def _run(self):
        from . import device_stage

        state, stage, snapshots = self._state, self._stage, self._state.snapshots
        seq = 0
        try:
            device_stage.bind_thread_to(stage.device)
            while not self._stopping():
                step = self._fetching
                t0 = time.perf_counter()
                try:
                    try:
                        batch = next(self._it)
                    except StopIteration:
                        self.ended = True
                        # The state that starts the next epoch (see produce()).
                        end = self._source.state_dict() if snapshots is not None else None
                        state.noted(end_state=end, source_ended=True)
                        self._put(Fetched(seq))
                        return
                    source_s = time.perf_counter() - t0
                    if snapshots is not None:
                        snapshots[seq] = self._source.state_dict()
                        state.noted(yielded=seq + 1)
                    t_host = time.perf_counter()
                    # (A packed batch's host views hold its slot until the engine has collated
                    # what the stage kept and they are gone: the queue holds at most `depth`.)
                    step = self._transforming
                    batch = stage.host(host_batch(batch), state.epoch, state.first_index + seq)
                    step = self._collating
                    flat = flatten(batch)
                    batch = None
                    item = Fetched(seq, flat, source_s=source_s,
                                   host_s=time.perf_counter() - t_host)
                except BaseException as exc:  # noqa: BLE001 - raised by the producer, in order
                    self._put(Fetched(seq, error=exc, step=step))
                    return
                if not self._put(item):
                    return
                item = None
                seq += 1
        finally:
            self._it = self._source = self._state = self._stage = None
