"""Exceptions prefetch raises to users."""
from ._engine.extension import _C

#: A batch cannot be collated: ragged samples, mixed dtypes, unsupported leaves, a size cap.
#: A subclass of ValueError; the message names the leaf, the sample and both shapes/dtypes.
CollateError = _C.CollateError


class PrefetchTimeout(TimeoutError):
    """No batch arrived within the Prefetcher's ``timeout``; the source is stalled or too slow."""
