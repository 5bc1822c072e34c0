"""An epoch that starts at its first ``next()``, as a DataLoader's (without workers) does.

``iter(loader)`` alone must not start an epoch: Lightning calls ``iter()`` on any loader that is
not a torch DataLoader just to check that it is iterable, and drops the iterator. An epoch
started there would count (every later epoch's transform draws one epoch late, an ArrayLoader's
order one epoch ahead), prefetch ``depth`` batches for nothing, and draw a permutation from the
source's sampler that a plain DataLoader would not have drawn. So a loader's ``iter()`` checks
what it can check at once (closed, forked) and returns a :class:`LazyEpoch`; the epoch — its
number, its run on the Pipeline, its source state — is taken at the first ``next()``.

A newer ``iter()`` supersedes an older one: the loader remembers its latest LazyEpoch, and an
older one that was never started ends at once (``StopIteration``) rather than stopping the
newer epoch, as a started one is stopped by a newer start.
"""
import weakref

__all__ = ["LazyEpoch", "LatestEpoch"]


class LazyEpoch:
    """The iterator ``iter(loader)`` returns: ``start()`` (a zero-argument callable returning the
    epoch's iterator) runs at the first ``next()`` — or when the loader needs the epoch started
    (``ensure_started``: a ``state_dict()`` taken between ``iter()`` and the first batch) —
    unless ``superseded()`` says a newer ``iter()`` came first. ``length()``: ``len()``."""

    def __init__(self, start, length, superseded):
        self._start, self._length, self._superseded = start, length, superseded
        self._it = None
        self._ended = False

    def __iter__(self):
        return self

    def __len__(self):
        if self._it is not None:
            return len(self._it)
        if self._length is None:
            raise TypeError("prefetch: this epoch is over; len() of the loader gives its length")
        return self._length()

    @property
    def started(self):
        return self._it is not None

    def ensure_started(self):
        """The epoch's iterator, started now if it was not (None once superseded)."""
        if self._it is None and not self._ended:
            if self._superseded(self):
                self._ended = True
            else:
                start = self._start
                self._it = start()
            # Only the epoch's iterator from here on: a traceback the consumer keeps holds this
            # object (the frame of __next__), and must not hold the loader through it.
            self._start = self._length = self._superseded = None
        return self._it

    def __next__(self):
        it = self.ensure_started()
        if it is None:
            raise StopIteration
        return next(it)

    def close(self):
        """Stops the epoch if it started; one not started never will."""
        self._ended = True
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class LatestEpoch:
    """A loader's latest LazyEpoch, held weakly (a dropped iterator is no epoch)."""

    def __init__(self):
        self._ref = lambda: None

    def set(self, epoch):
        self._ref = weakref.ref(epoch)

    def get(self):
        return self._ref()

    def superseded(self, epoch):
        """True when ``epoch`` is not the latest ``iter()``'s."""
        return self._ref() is not epoch

    def pending(self):
        """The latest LazyEpoch while it lives and has not started, else None."""
        epoch = self._ref()
        return epoch if epoch is not None and not epoch.started else None
