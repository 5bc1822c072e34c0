"""Ragged batches: samples of one dtype and rank whose sizes differ, packed with no padding
(defined in :mod:`prefetch._core.ragged`, the bottom layer, where the batch tree reaches it)."""
from ._core.ragged import Ragged, check_samples

__all__ = ["Ragged", "check_samples"]
