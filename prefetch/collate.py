"""DataLoader helpers.

``prefetch.collate.samples`` is a ``collate_fn`` with ``default_collate``'s structure handling (a
batch of tuples becomes a list of fields, dicts go by key, namedtuples stay namedtuples, numbers
become tensors) that leaves every tensor/ndarray field as a :class:`prefetch.Samples` instead of
stacking it. The Prefetcher then stacks those samples once, in C++ threads with the GIL released,
straight into its pinned ring, instead of into fresh memory that is copied again to be pinned.
"""
import os

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils import collate as _torch_collate

from .samples import Samples

__all__ = ["samples"]


def _tensor_samples(batch, *, collate_fn_map=None):
    if get_worker_info() is not None:
        if hasattr(os, "memfd_create") and all(_plain(t) for t in batch):
            return _WorkerSamples(batch)
        _share(batch)
    return Samples(batch)


def _plain(t):
    # Plain strided CPU tensors only: anything else keeps torch's own path (and the engine's checks).
    return (type(t) is torch.Tensor and t.device.type == "cpu" and t.layout == torch.strided
            and not t.is_nested and not t.is_quantized)


_ALIGN = 64  # each sample's offset in the block: any dtype's view, and cache lines apart


class _WorkerSamples(Samples):
    """A field's samples in a DataLoader worker. Sent to the main process, they are copied into
    one SharedBlock (memfd_create: not bounded by /dev/shm, one descriptor for the whole field
    instead of torch's one /dev/shm file per sample) and arrive as an ordinary Samples of views
    into it. The copy happens when the batch is pickled — never for a batch the worker ring
    places in a slot, which is not pickled."""

    __slots__ = ()

    def __reduce__(self):
        # This runs in the queue's feeder thread: an exception here would lose the batch and
        # leave the main process waiting for it, so a failure travels as an error it raises.
        try:
            block, layout = _into_block(self)
        except Exception as e:  # noqa: BLE001 - re-raised in the main process
            return _raise, (_sending_error(e, self),)
        return _samples_from_block, (block, layout)


def _into_block(tensors):
    from .sources.shared_block import SharedBlock

    layout, end = [], 0
    for t in tensors:
        layout.append((end, t.dtype, tuple(t.shape)))
        end += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    block = SharedBlock(end, name="prefetch-samples")
    with torch.no_grad():
        for view, t in zip(_views(block, layout), tensors):
            view.copy_(t)  # resolves conjugate and negative views, as stacking them would
    return block, layout


def _views(block, layout):
    out = []
    for offset, dtype, shape in layout:
        count = 1
        for d in shape:
            count *= d
        size = torch.empty((), dtype=dtype).element_size()
        out.append(block.tensor[offset:offset + count * size].view(dtype).view(shape))
    return out


def _samples_from_block(block, layout):
    return Samples(_views(block, layout))


def _sending_error(e, tensors):
    from .errors import SharedMemoryError

    asked = sum(t.numel() * t.element_size() for t in tensors)
    if isinstance(e, OSError):
        return SharedMemoryError("prefetch: a DataLoader worker could not put a batch's %d samples "
                                 "(%d bytes) into shared memory: %s" % (len(tensors), asked, e))
    return RuntimeError("prefetch: a DataLoader worker could not send a batch's %d samples: %s: %s"
                        % (len(tensors), type(e).__name__, e))


def _raise(error):
    raise error


def _share(tensors):
    """In a DataLoader worker: the samples' storages into shared memory now, as default_collate
    puts its stacked batch there, instead of in the queue's feeder thread at pickling time — where
    a full /dev/shm kills the feeder thread and the batch never arrives (the main process would
    wait forever). Here the error reaches the main process as the worker's exception."""
    pending = [t for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "cpu"
               and not t.is_shared() and not t.is_nested and t.layout == torch.strided]
    asked = sum(t.untyped_storage().nbytes() for t in pending)
    try:
        for t in pending:
            t.share_memory_()
    except RuntimeError as e:
        if "shared memory" not in str(e) and "No space left" not in str(e):
            raise
        from .errors import SharedMemoryError, shared_memory_advice

        raise SharedMemoryError("prefetch: a DataLoader worker could not put a batch's %d samples "
                                "into shared memory (%s): %s"
                                % (len(tensors), e, shared_memory_advice(asked))) from None


def _ndarray_samples(batch, *, collate_fn_map=None):
    elem = batch[0]
    if _torch_collate.np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(_torch_collate.default_collate_err_msg_format.format(elem.dtype))
    return Samples(batch)


_INT64 = (-(1 << 63), (1 << 63) - 1)


class _IntOutOfRange(Exception):
    """An int field default_collate cannot make an int64 tensor of; `samples` names the field."""


def _int_samples(batch, *, collate_fn_map=None):
    # default_collate's tensor of ints, whose overflow (a ValueError from torch.tensor that names
    # nothing) is reported with the field, the sample and the value by `samples`.
    if any(not _INT64[0] <= v <= _INT64[1] for v in batch):
        raise _IntOutOfRange()
    return torch.tensor(batch)


# Same dispatch as default_collate's map, with stacking replaced by Samples; numbers and strings
# keep default_collate's own handling (numbers become small tensors, strings stay lists).
_SAMPLES_FN_MAP = dict(_torch_collate.default_collate_fn_map)
_SAMPLES_FN_MAP[torch.Tensor] = _tensor_samples
_SAMPLES_FN_MAP[np.ndarray] = _ndarray_samples
_SAMPLES_FN_MAP[int] = _int_samples


def _out_of_range(sample, path=""):
    """(path, value) of the first int beyond int64 in one sample's structure, or None."""
    if isinstance(sample, bool):
        return None
    if isinstance(sample, int):
        return (path, sample) if not _INT64[0] <= sample <= _INT64[1] else None
    if isinstance(sample, dict):
        items = ((path + "[%r]" % k, v) for k, v in sample.items())
    elif isinstance(sample, (list, tuple)):
        items = ((path + "[%d]" % i, v) for i, v in enumerate(sample))
    else:
        return None
    for p, v in items:
        found = _out_of_range(v, p)
        if found is not None:
            return found
    return None


def samples(batch):
    """``collate_fn`` for ``DataLoader(..., collate_fn=prefetch.collate.samples)``.

    Iterating ``Prefetcher(DataLoader(ds, collate_fn=prefetch.collate.samples))`` yields exactly
    what ``DataLoader(ds)`` yields, with every tensor on the Prefetcher's device. An int field
    beyond int64 (which no tensor holds) raises :class:`prefetch.CollateError` naming the field,
    the sample and the value.
    """
    try:
        return _torch_collate.collate(batch, collate_fn_map=_SAMPLES_FN_MAP)
    except _IntOutOfRange:
        from .errors import CollateError

        for n, sample in enumerate(batch):
            found = _out_of_range(sample)
            if found is not None:
                field, value = found
                raise CollateError(
                    "prefetch: cannot collate the field %s: sample %d of the batch holds the int %d, "
                    "beyond int64 [-2**63, 2**63), which no tensor holds; store it as a float, a "
                    "string or a smaller int" % (field or "(the sample itself)", n, value)) from None
        raise
