"""Resume bookkeeping: where a loader's consumer stands, for ``state_dict()``/``load_state_dict()``.

One class for every loader. The position counts batches the consumer *received* — batches
prefetched but not consumed are not counted — so a resumed run yields exactly the batches the
interrupted one had not delivered, at the same positions (the same transform draws).

An epoch's end needs care with a stateful source. A position at the start of epoch ``e + 1``
must carry the source's state *after its epoch ``e`` ended* (its ``StopIteration``): a
``StatefulDataLoader``'s state taken after its last batch but before that says "epoch ``e``,
nothing left", and loaded, its next ``iter()`` yields that empty remainder, not epoch ``e + 1``
(torchdata issue 1437; every later epoch then arrives one ``iter()`` late). The producer takes
the source's state when the source ends (``EpochRun.end_source_state``); where no such state
exists — the run was stopped after its last batch, before the producer saw the end — the
position says so (``source_epoch_open``) and the resumed loader first runs the source's
remainder of that epoch, which must be empty, before the epoch it resumes.
"""
from .._core.checks import whole

__all__ = ["ResumeCursor", "AT_END", "MORE", "UNKNOWN"]

# What a run's end_state(index) answers about the source after the batch before ``index``.
AT_END = "end"          # the source ended there: (AT_END, its state after StopIteration)
MORE = "more"           # it yielded another batch: the epoch was not over (a len() too small)
UNKNOWN = "unknown"     # the run stopped before the producer found out


class ResumeCursor:
    """The epoch the next ``iter()`` runs and the batch it starts from, and — once an epoch
    runs — where its consumer stands: ``(epoch, batches consumed, the source's state there)``.

    The source's state is optional (an ArrayLoader has none: its order is a function of the
    epoch); it may be a zero-argument callable, resolved when a state is asked for (the source's
    state before an epoch's first batch is taken by the producer thread).
    """

    def __init__(self):
        self.next_epoch = 0
        self.resume_index = 0
        self._loaded_source_state = None
        # The loaded source state was taken after its epoch's last batch, before its end: the
        # next run must first finish that epoch of the source (see the module docstring).
        self.source_epoch_open = False
        self._loaded_open = False
        self._at = None  # (epoch, consumed, source state) once an epoch started
        self._end_state = None  # the live run's end_state(index), see start()

    def set_epoch(self, epoch):
        """The epoch the next ``start()`` runs; the resume index is kept only for the epoch a
        loaded state stopped in. ``epoch``: a whole number >= 0 (TypeError, ValueError), never
        truncated as ``int()`` would truncate 1.5."""
        epoch = whole(epoch, "epoch")
        if epoch < 0:
            raise ValueError("prefetch: epoch must be >= 0, got %d" % epoch)
        if epoch != self.next_epoch:
            self.resume_index = 0
        self.next_epoch = epoch

    def start(self, source_state=None, end_state=None):
        """An epoch starts: returns its ``(epoch, first batch index)``; epochs then count on.
        ``end_state(index)``: what the run knows of the source after the batch before ``index``
        — ``(AT_END, state)``, ``(MORE, None)`` or ``(UNKNOWN, None)`` (it may wait for the
        producer to find out)."""
        epoch, first = self.next_epoch, self.resume_index
        self.next_epoch, self.resume_index = epoch + 1, 0
        self.source_epoch_open = False  # the run that starts now drains it (its loader's job)
        self._at = (epoch, first, source_state)
        self._end_state = end_state
        return epoch, first

    def consumed(self, epoch, index_after, source_state=None):
        """The consumer received the batch before ``index_after`` of ``epoch``."""
        self._at = (epoch, index_after, source_state)

    def ended(self, epoch, source_state=None):
        """``epoch`` ran out; the position moves to the next epoch's start (unless a newer epoch
        started meanwhile), with the source's state after its end when it is tracked."""
        if self._at is not None and self._at[0] == epoch:
            self._at = (epoch + 1, 0, source_state if source_state is not None else self._at[2])

    def load(self, epoch, consumed, source_state=None, source_epoch_open=False):
        """A saved position: the next ``start()`` resumes it."""
        self.next_epoch, self.resume_index = int(epoch), int(consumed)
        self._loaded_source_state = source_state
        self.source_epoch_open = self._loaded_open = bool(source_epoch_open)
        self._at = None
        self._end_state = None

    def position(self, length=None, current_source_state=None):
        """``(epoch, consumed, source_state)`` to save: :meth:`save_point` without its last
        item (for loaders whose source state is not a source's, the ArrayLoader's)."""
        return self.save_point(length, current_source_state)[:3]

    def save_point(self, length=None, current_source_state=None):
        """``(epoch, consumed, source_state, source_epoch_open)`` to save. ``length``: batches per
        epoch (None when unknown); an epoch consumed whole but not yet ended saves the next
        epoch's start, with the source's state after its end where the run can tell it.
        ``current_source_state`` (a callable) fills a missing source state."""
        source_open = False
        if self._at is None:  # nothing iterated since construction or load()
            epoch, consumed, source_state = (self.next_epoch, self.resume_index,
                                             self._loaded_source_state)
            source_open = self._loaded_open
        else:
            epoch, consumed, source_state = self._at
            if callable(source_state):
                source_state = source_state()
            if length is not None and consumed >= length > 0:
                # Consumed the whole epoch without reaching its end: resume with the next one.
                kind, end = (UNKNOWN, None) if self._end_state is None else self._end_state(consumed)
                if kind == AT_END:
                    epoch, consumed, source_state = epoch + 1, 0, end
                elif kind == UNKNOWN:
                    # The source's state after its last batch: its epoch is still open there.
                    epoch, consumed, source_open = epoch + 1, 0, source_state is not None
                # MORE: the source had more batches than its len(): the epoch goes on.
        if source_state is None and current_source_state is not None:
            source_state = current_source_state()
        return epoch, consumed, source_state, source_open


class FinishOpenEpoch:
    """A stateful source loaded with a state taken after its epoch's last batch but before its
    ``StopIteration`` (``source_epoch_open``): ``iter()`` first runs that epoch's remainder,
    which must be empty, so that the batches it returns are the next epoch's. A remainder that
    is not empty means the saved position was wrong (the source's ``len()`` counted fewer
    batches than it yields): refused rather than skipped or delivered under the wrong epoch."""

    def __init__(self, source):
        self.source = source
        self.dataloader = getattr(source, "dataloader", source)  # for the errors' notes

    def __iter__(self):
        rest = iter(self.source)
        for _ in rest:
            raise RuntimeError(
                "prefetch: the loaded state was saved after the last of len(source) batches of "
                "its epoch, but the source (%s) yields more batches there: its len() is smaller "
                "than what it yields, so the position cannot be resumed exactly"
                % type(self.source).__name__)
        return iter(self.source)

    def state_dict(self):
        return self.source.state_dict()

    def load_state_dict(self, state):
        self.source.load_state_dict(state)
