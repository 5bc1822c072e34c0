"""`Samples`: per-sample tensors that the engine collates, once, straight into pinned memory
(defined in :mod:`prefetch._core.samples`, the bottom layer, where the batch tree reaches it)."""
from ._core.samples import Samples

__all__ = ["Samples"]
