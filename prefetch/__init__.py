"""prefetch: takes the input pipeline off the GPU's critical path.

Wrap any DataLoader (or iterable of batches) in :class:`Prefetcher`; batches are collated by C++
threads into a reused ring of pinned buffers, copied on a side stream and handed over on the
device while the previous training step still runs.
"""
from ._core.extension import C as _C  # noqa: F401  (prefetch._C, loaded or explained)
from ._core.extension import built_with_cuda, built_with_jpeg
from . import collate, ops, ray, sources, transforms  # prefetch.ray imports no Ray (a Ray dataset brings it)
from .errors import CollateError, PrefetchTimeout, SharedMemoryError
from .prefetcher import Prefetcher
from .array_loader import ArrayLoader
from .samples import Samples
from .ragged import Ragged
# prefetch.pack (the module) is an alias of prefetch.store's writer; imported before the name is
# bound to the function below, so that a user's later `import prefetch.pack` finds it loaded and
# leaves prefetch.pack the function.
from . import pack as _pack_alias  # noqa: F401
from .store import Store, open_store, pack
from ._core.tree import PassThroughWarning
from .transforms import FusedAugment

__version__ = "0.1.0"

__all__ = ["Prefetcher", "ArrayLoader", "FusedAugment", "Samples", "Ragged", "Store", "open_store", "pack", "CollateError", "PrefetchTimeout", "SharedMemoryError", "PassThroughWarning", "collate", "built_with_cuda",
           "built_with_jpeg"]
