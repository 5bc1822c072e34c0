"""The Pipeline's counters (written by the producer and the consumer threads) and the fractions
``stats()`` derives from them."""
import threading

__all__ = ["Counters", "derived_fractions"]


class Counters:
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
