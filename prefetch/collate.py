"""DataLoader helpers.

``prefetch.collate.samples`` is a ``collate_fn`` with ``default_collate``'s structure handling (a
batch of tuples becomes a list of fields, dicts go by key, namedtuples stay namedtuples, numbers
become tensors) that leaves every tensor/ndarray field as a :class:`prefetch.Samples` instead of
stacking it. The Prefetcher then stacks those samples once, in C++ threads with the GIL released,
straight into its pinned ring, instead of into fresh memory that is copied again to be pinned.
"""
import numpy as np
import torch
from torch.utils.data._utils import collate as _torch_collate

from .samples import Samples

__all__ = ["samples"]


def _tensor_samples(batch, *, collate_fn_map=None):
    return Samples(batch)


def _ndarray_samples(batch, *, collate_fn_map=None):
    elem = batch[0]
    if _torch_collate.np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(_torch_collate.default_collate_err_msg_format.format(elem.dtype))
    return Samples(batch)


# Same dispatch as default_collate's map, with stacking replaced by Samples; numbers and strings
# keep default_collate's own handling (numbers become small tensors, strings stay lists).
_SAMPLES_FN_MAP = dict(_torch_collate.default_collate_fn_map)
_SAMPLES_FN_MAP[torch.Tensor] = _tensor_samples
_SAMPLES_FN_MAP[np.ndarray] = _ndarray_samples


def samples(batch):
    """``collate_fn`` for ``DataLoader(..., collate_fn=prefetch.collate.samples)``.

    Iterating ``Prefetcher(DataLoader(ds, collate_fn=prefetch.collate.samples))`` yields exactly
    what ``DataLoader(ds)`` yields, with every tensor on the Prefetcher's device.
    """
    return _torch_collate.collate(batch, collate_fn_map=_SAMPLES_FN_MAP)
