"""DataLoader helpers.

``prefetch.collate.samples`` is a ``collate_fn`` with ``default_collate``'s structure handling (a
batch of tuples becomes a list of fields, dicts go by key, namedtuples stay namedtuples, numbers
become tensors) that leaves every tensor/ndarray field as a :class:`prefetch.Samples` instead of
stacking it. The Prefetcher then stacks those samples once, in C++ threads with the GIL released,
straight into its pinned ring, instead of into fresh memory that is copied again to be pinned.
"""
from __future__ import annotations

import collections.abc
import os
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils import collate as _torch_collate

from ._core.samples_to_tensors import ndarrays_to_tensors, numbers_to_tensor
from ._core.errors import CollateError
from ._core.samples import Samples

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
    from ._core.errors import SharedMemoryError

    asked = sum(t.numel() * t.element_size() for t in tensors)
    if isinstance(e, OSError):
        return SharedMemoryError("prefetch: a DataLoader worker could not put a batch's %d samples "
                                 "(%d bytes) into shared memory: %s" % (len(tensors), asked, e))
    return RuntimeError("prefetch: a DataLoader worker could not send a batch's %d samples: %s: %s"
                        % (len(tensors), type(e).__name__, e))


def _raise(error):
    try:
        raise error
    finally:
        # The exception's traceback holds this frame: with `error` still one of its locals the
        # two would form a cycle, freed only by a garbage collection.
        del error


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
        from ._core.errors import SharedMemoryError, shared_memory_advice

        raise SharedMemoryError("prefetch: a DataLoader worker could not put a batch's %d samples "
                                "into shared memory (%s): %s"
                                % (len(tensors), e, shared_memory_advice(asked))) from None


def _ndarray_samples(batch, *, collate_fn_map=None):
    # default_collate's torch.as_tensor per sample, without its Python per sample: one map of
    # torch.from_numpy (shared memory), then the tensors' own path (in a DataLoader worker: one
    # shared block for the field instead of pickling every array by value).
    elem = batch[0]
    if _torch_collate.np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise _FieldFailure(batch, CollateError(
            "prefetch: cannot collate %s: sample 0 is a numpy array of dtype %s (strings or "
            "objects), which no tensor holds" % (_FIELD, elem.dtype)))
    try:
        tensors = ndarrays_to_tensors(batch, _FIELD)
    except CollateError as e:
        raise _FieldFailure(batch, e) from None
    return _tensor_samples(tensors)


class _FieldFailure(Exception):
    """A field's samples that make no tensor: `samples` finds the field (``values`` are its
    samples' own objects) and raises ``error`` naming it where ``_FIELD`` stands."""

    def __init__(self, values, error):
        super().__init__(str(error))
        self.values, self.error = values, error


_FIELD = "\x00field\x00"  # stands for the field's name in an error until `samples` knows it


def _number_samples(batch, *, collate_fn_map=None):
    # default_collate's tensor of numbers; its failures (an int beyond int64: "Overflow when
    # unpacking long long", which names nothing) are reported with the field, sample and value.
    try:
        return numbers_to_tensor(batch, _FIELD)
    except CollateError as e:
        raise _FieldFailure(batch, e) from None


# Same dispatch as default_collate's map, with stacking replaced by Samples; numbers go through
# the conversion Samples of numbers use (default_collate's dtypes, errors naming the field), and
# strings keep default_collate's own handling (they stay lists).
_SAMPLES_FN_MAP = dict(_torch_collate.default_collate_fn_map)
_SAMPLES_FN_MAP[torch.Tensor] = _tensor_samples
_SAMPLES_FN_MAP[np.ndarray] = _ndarray_samples
_SAMPLES_FN_MAP[(np.bool_, np.number, np.object_)] = _number_samples
_SAMPLES_FN_MAP[float] = _number_samples
_SAMPLES_FN_MAP[int] = _number_samples
_SAMPLES_FN_MAP[complex] = _number_samples  # default_collate has no rule: torch.tensor's, as Samples


def _columns(batch, path=""):
    """``(path, [each sample's value there])`` for every position of the samples' structure, as
    default_collate walks it (mappings by the first sample's keys, sequences by position)."""
    yield path, batch
    first = batch[0]
    if isinstance(first, collections.abc.Mapping):
        try:
            for key in first:
                yield from _columns([s[key] for s in batch], path + "[%r]" % (key,))
        except (KeyError, TypeError):
            return
    elif isinstance(first, collections.abc.Sequence) and not isinstance(first, (str, bytes)):
        for i, column in enumerate(zip(*batch)):
            yield from _columns(list(column), path + "[%d]" % i)


def _field_of(batch, values):
    for path, column in _columns(batch):
        if len(column) == len(values) and all(a is b for a, b in zip(column, values)):
            return "the field %s" % path if path else "the field (the sample itself)"
    return "a field"


def samples(batch: Sequence[Any]) -> Any:
    """``collate_fn`` for ``DataLoader(..., collate_fn=prefetch.collate.samples)``.

    Iterating ``Prefetcher(DataLoader(ds, collate_fn=prefetch.collate.samples))`` yields exactly
    what ``DataLoader(ds)`` yields, with every tensor on the Prefetcher's device. Numpy arrays
    become tensors sharing their memory (``torch.from_numpy``; a copy only for negative strides
    or another byte order), as ``default_collate``'s ``torch.as_tensor`` does
    (torch/utils/data/_utils/collate.py).

    Args:
        batch (sequence): the samples a DataLoader's sampler picked, each a tensor, ndarray,
            number, string, or a tuple/list/dict/namedtuple of them.

    Returns:
        The batch's structure as ``default_collate`` builds it, with every tensor or ndarray
        field a :class:`prefetch.Samples` of per-sample tensors (stacked later, by the
        Prefetcher's C++ threads) and numbers as tensors.

    Raises:
        CollateError: a field that makes no tensor — an int beyond int64, numbers torch cannot
            stack, arrays of strings, objects or a dtype torch lacks — naming the field, and for
            an int the sample and the value.
        SharedMemoryError: in a DataLoader worker, the samples do not fit in shared memory.
        TypeError: what ``default_collate`` raises for a type it does not know.
    """
    try:
        return _torch_collate.collate(batch, collate_fn_map=_SAMPLES_FN_MAP)
    except _FieldFailure as failure:
        raise CollateError(str(failure.error).replace(_FIELD, _field_of(batch, failure.values))) from None
