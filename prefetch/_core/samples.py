"""`Samples`: per-sample tensors that the engine collates, once, straight into pinned memory."""


class Samples(list):
    """A list of equal-shaped per-sample tensors, ndarrays or numbers, to be stacked along a new
    first dimension by the Prefetcher's C++ pool (as ``default_collate`` would stack them).

    Produced by :func:`prefetch.collate.samples`; outside a Prefetcher it is an ordinary list.
    """

    __slots__ = ()

    def __repr__(self):
        return "Samples(%d items)" % len(self)
