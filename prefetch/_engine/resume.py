"""Resume bookkeeping: where a loader's consumer stands, for ``state_dict()``/``load_state_dict()``.

One class for every loader. The position counts batches the consumer *received* — batches
prefetched but not consumed are not counted — so a resumed run yields exactly the batches the
interrupted one had not delivered, at the same positions (the same transform draws).
"""

__all__ = ["ResumeCursor"]


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
        self._at = None  # (epoch, consumed, source state) once an epoch started

    def set_epoch(self, epoch):
        """The epoch the next ``start()`` runs; the resume index is kept only for the epoch a
        loaded state stopped in."""
        epoch = int(epoch)
        if epoch != self.next_epoch:
            self.resume_index = 0
        self.next_epoch = epoch

    def start(self, source_state=None):
        """An epoch starts: returns its ``(epoch, first batch index)``; epochs then count on."""
        epoch, first = self.next_epoch, self.resume_index
        self.next_epoch, self.resume_index = epoch + 1, 0
        self._at = (epoch, first, source_state)
        return epoch, first

    def consumed(self, epoch, index_after, source_state=None):
        """The consumer received the batch before ``index_after`` of ``epoch``."""
        self._at = (epoch, index_after, source_state)

    def ended(self, epoch):
        """``epoch`` ran out; the position moves to the next epoch's start (unless a newer epoch
        started meanwhile)."""
        if self._at is not None and self._at[0] == epoch:
            self._at = (epoch + 1, 0, self._at[2])

    def load(self, epoch, consumed, source_state=None):
        """A saved position: the next ``start()`` resumes it."""
        self.next_epoch, self.resume_index = int(epoch), int(consumed)
        self._loaded_source_state = source_state
        self._at = None

    def position(self, length=None, current_source_state=None):
        """``(epoch, consumed, source_state)`` to save. ``length``: batches per epoch (None when
        unknown); an epoch consumed whole but not yet ended saves the next epoch's start.
        ``current_source_state`` (a callable) fills a missing source state."""
        if self._at is None:  # nothing iterated since construction or load()
            epoch, consumed, source_state = (self.next_epoch, self.resume_index,
                                             self._loaded_source_state)
        else:
            epoch, consumed, source_state = self._at
            if callable(source_state):
                source_state = source_state()
            if length is not None and consumed >= length > 0:
                # Consumed the whole epoch without reaching its end: resume with the next one
                # (a stateful source saved at its end starts a new epoch, as StatefulDataLoader).
                epoch, consumed = epoch + 1, 0
        if source_state is None and current_source_state is not None:
            source_state = current_source_state()
        return epoch, consumed, source_state
