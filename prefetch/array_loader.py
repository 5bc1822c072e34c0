"""ArrayLoader: batches straight out of uint8 arrays in RAM, in a memmap or on the GPU.

No Python runs per sample. With ``resident="host"`` the engine's C++ threads gather each batch's
rows from the arrays into the pinned ring (a memmap's pages are read there, with the GIL
released), then the copy and the transform run as in a :class:`Prefetcher`. With
``resident="device"`` the arrays are uploaded once, as they are, and every batch is gathered on
the device — by the transform itself when it declares ``gathers`` (FusedAugment's fused gather +
crop + flip + normalize kernel; see :mod:`prefetch.transforms`) — so no batch data crosses PCIe
during the epoch (one upload of the epoch's indices, and each batch's few bytes of draws).

The order of an epoch is a function of ``(seed, epoch)`` sharded across ranks as in
:mod:`prefetch._engine.sharding`; the augmentation draws are a function of ``(seed, rank, epoch,
batch index)``. So both paths yield the same batches, and a run resumed from :meth:`state_dict` yields
exactly the batches the interrupted run had not consumed.

Length: over 500 lines because the public class documents every argument and error (about 140
lines of docstrings; under 450 of code).
"""
from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from ._core.checks import check_seed, resolve_device
from ._engine.lazy_epoch import LatestEpoch, LazyEpoch
from ._engine.pipeline import ClosesOnExit, Pipeline
from ._engine.resume import ResumeCursor
from ._core.tree import (Leaf, PreparedBatch, flatten, ndarray_to_tensor, ragged_fields,
                           unflatten)
from ._engine.sharding import distributed_rank_and_size, epoch_indices, shard_size
from .errors import PrefetchTimeout
from .ragged import Ragged
from .store.format import StoreError
from .store.mapped import mapped_file, mapped_files
from .transforms.arguments import flag, number
from .transforms.contract import (BatchPosition, gathered_keys, get_leaf, load_transform_state,
                         run_transform, save_transform_state)

__all__ = ["ArrayLoader"]

logger = logging.getLogger("prefetch")

_RESIDENCIES = ("host", "device", "auto")
# State keys that must match between the saving and the loading loader for a resume to be exact.
_LAYOUT_KEYS = ("num_samples", "batch_size", "world_size", "seed", "shuffle", "drop_last")


def _as_tensor(array, name):
    if isinstance(array, torch.Tensor):
        if array.device.type == "cpu" or array.device.type == "meta" or array.is_nested \
                or array.layout != torch.strided:
            # The engine's own check, once: a CollateError naming the array for anything without
            # ordinary strided CPU memory (subclasses, meta, nested, sparse, resized storages);
            # zero tensors materialised, conj/neg views resolved.
            from ._core.extension import C as _C

            return _C.readable(array, name)
        return array
    if isinstance(array, np.ndarray):  # np.memmap included: from_numpy maps, it does not read
        return ndarray_to_tensor(array, name)
    raise TypeError("prefetch: %s is a %s; ArrayLoader takes numpy arrays (memmaps too), "
                    "tensors and prefetch.Ragged fields" % (name, type(array).__name__))


def _as_field(value, name):
    """An array as a tensor, or a ragged field (samples of different lengths: a
    :class:`prefetch.Ragged`, e.g. a store's encoded images) with its values as a tensor and its
    tables on the CPU."""
    if isinstance(value, Ragged):
        values = _as_tensor(value.values, name + ".values")
        if values.dim() != 1:
            raise ValueError("prefetch: %s.values must be 1-D, got shape %s"
                             % (name, tuple(values.shape)))
        # Checked again (a Ragged made with check=False may not be): every sample inside values.
        return Ragged(values, value.offsets.cpu(), value.sizes.cpu())
    return _as_tensor(value, name)


class _RaggedField:
    """One ragged field's tables, for gathering batches of it: its values leaf, its offsets and
    each sample's element count, and the leaf indices its three batch leaves take."""

    def __init__(self, leaves, indices):
        self.values_at, self.offsets_at, self.sizes_at = indices
        self.values = leaves[self.values_at].value
        self.offsets = leaves[self.offsets_at].value
        self.counts = leaves[self.sizes_at].value.prod(1)  # 1 for rank-0 samples
        self.guard = _leaf_guard(self.values)  # a store's values.bin: checked before each read

    def leaves(self, leaves, idx):
        """The batch's three leaves for samples ``idx``: the values as element ranges (the engine's
        threads copy them), the offsets of the samples packed from 0, their sizes' rows."""
        counts = self.counts[idx]
        spans = torch.stack((self.offsets[idx], counts), 1)
        return {self.values_at: Leaf(leaves[self.values_at].name, self.values, spans, self.guard),
                self.offsets_at: Leaf(leaves[self.offsets_at].name, torch.cumsum(counts, 0) - counts),
                self.sizes_at: Leaf(leaves[self.sizes_at].name, leaves[self.sizes_at].value, idx)}


def _leaf_guard(tensor):
    """A Leaf's ``mapped`` for a tensor over a store's mapped values.bin, else None."""
    mapped = mapped_file(tensor)
    return None if mapped is None else mapped.leaf_guard()


class _GatherBatches:
    """The source the host path's Pipeline runs: one epoch's batches, already split. It
    holds the arrays, never the loader: the producer thread keeps its source alive, and a loader
    it kept alive could never be collected (and so never stop that thread)."""

    def __init__(self, spec, leaves, ragged, order, start, batch_size, count):
        self.spec, self.leaves, self.ragged, self.order = spec, leaves, ragged, order
        self.start, self.batch_size, self.count = start, batch_size, count

    def __iter__(self):
        bs = self.batch_size
        # A leaf that maps a file (a store's values.bin) carries it: the engine checks the
        # file's size once it has room for the batch, right before its threads read it (pages
        # past a truncated end fault: SIGBUS). Checked here, the producer's wait for room would
        # lie between the check and the reads.
        guards = [_leaf_guard(leaf.value) for leaf in self.leaves]
        for b in range(self.start, self.count):
            idx = self.order[b * bs:(b + 1) * bs]
            # Gather leaves: rows `idx` of each array, copied by the engine's pool.
            leaves = [Leaf(leaf.name, leaf.value, idx, guard)
                      for leaf, guard in zip(self.leaves, guards)]
            for field in self.ragged:  # a few torch ops a batch, none a sample
                for k, leaf in field.leaves(self.leaves, idx).items():
                    leaves[k] = leaf
            yield PreparedBatch(self.spec, leaves, [])


class _IndexNotes:
    """An epoch's batches (either path); an exception raised while making one (gathering,
    decoding, a transform) gets a note naming the samples by their index in the arrays (a
    store's index), whatever the order: the sample its message names ("sample k" is the k-th of
    the batch), or else the batch's samples."""

    def __init__(self, batches, order, batch_size, start, host):
        self._batches, self._order, self._batch_size = batches, order, batch_size
        self._index = start  # the epoch index of the next batch
        self._host = host  # the host path's errors from making a batch carry the pipeline's note

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._batches)
        except (StopIteration, PrefetchTimeout, StoreError):  # not about any sample
            raise
        except Exception as exc:
            self._note(exc)
            raise
        self._index += 1
        return batch

    def _note(self, exc):
        notes = getattr(exc, "__notes__", ())
        if self._host and not any("producer thread" in n for n in notes):
            return  # not raised making a batch (a closed loader, a fork)
        b, bs = self._index, self._batch_size
        indices = self._order[b * bs:(b + 1) * bs].tolist()
        match = re.search(r"\bsample (\d+)\b", str(exc))
        if match is not None and int(match.group(1)) < len(indices):
            k = int(match.group(1))
            note = ("[prefetch] sample %d of batch %d is sample %d of the ArrayLoader's arrays "
                    "(its index in the store or arrays)" % (k, b, indices[k]))
        else:
            shown = ", ".join(map(str, indices[:16])) + (
                ", ... (%d in all)" % len(indices) if len(indices) > 16 else "")
            note = ("[prefetch] batch %d holds samples %s of the ArrayLoader's arrays (their "
                    "indices in the store or arrays)" % (b, shown))
        if note not in notes:
            exc.add_note(note)

    def close(self):
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


class _Epoch:
    """One epoch's iterator, either path; tells the loader's cursor what the consumer received."""

    def __init__(self, loader, epoch, start, batches):
        self._loader, self._epoch, self._count = loader, epoch, start
        self._batches = batches

    def __iter__(self):
        return self

    def __len__(self):
        if self._loader is None:
            raise TypeError("prefetch: this epoch failed; len() of the loader gives its length")
        return len(self._loader)

    def __next__(self):
        loader = self._loader
        if loader is None:  # the epoch failed: over, as a Prefetcher's
            raise StopIteration
        # Only the loader's live epoch moves its position: not one that a newer iter() or a
        # load_state_dict() replaced (the device path's can still be iterated).
        live = loader._live_epoch is self
        try:
            batch = next(self._batches)
        except StopIteration:
            if live:
                loader._cursor.ended(self._epoch)
            raise
        except PrefetchTimeout:
            raise  # next() may be called again
        except Exception:
            # The epoch is over (its run failed, its generator finished). The exception's
            # traceback holds this frame and this object: neither may hold the loader.
            loader = self._loader = None
            raise
        self._count += 1
        if live:
            loader._cursor.consumed(self._epoch, self._count)
        return batch

    def close(self):
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


class ArrayLoader(ClosesOnExit):
    """Batches of arrays that share their first dimension, shuffled, sharded, augmented, on the
    device, with no Python per sample.

    Args:
        arrays (tuple, list, dict, array, Ragged or Store): a tuple/list or dict of numpy arrays
            (memmaps work without reading the whole file) or tensors, e.g. ``(images [N, H, W, C]
            uint8, labels [N])``; a single array works too. Batches have the same structure. A
            field whose samples differ in size is a :class:`prefetch.Ragged` (its ``values`` may be
            a memmap too: only each batch's samples are read, by the engine's threads) and arrives
            as a Ragged of the batch's samples; a :class:`prefetch.Store` (see
            :func:`prefetch.pack`) stands for its ``as_arrays()``: ``(encoded images, labels,
            ...)``, for ``FusedAugment(decode=True)`` or ``prefetch.transforms.v2``'s
            ``decode=True``.
        batch_size (int): samples per batch, >= 1.
        shuffle (bool): a new order every epoch, a function of ``(seed, epoch)``; otherwise in
            order.
        seed (int): the shuffling order's seed (a transform's draws use the transform's own seed).
        drop_last (bool): drop the partial last batch, and cut the dataset to a multiple of
            ``world_size`` instead of padding it (see :mod:`prefetch._engine.sharding`).
        rank, world_size (int, optional): this process's shard; default from ``torch.distributed``
            when it is initialised, else one shard.
        resident (str): ``"host"`` (gather in C++ threads into the pinned ring, then copy),
            ``"device"`` (upload once, gather on the device) or ``"auto"``: on CUDA the device when
            the arrays fit in ``memory_fraction`` of its free memory, else the host; on the CPU the
            host (the arrays are in host memory already, and the host path runs ahead of the
            consumer in threads). The choice is logged (logger ``"prefetch"``, INFO) and kept in
            ``.resident``.
        device (torch.device or str, optional): where batches go; default the current CUDA device
            (each DDP rank's own, once it called ``torch.cuda.set_device``), else the CPU.
        depth (int), num_threads (int, optional), timeout (float, optional, seconds): the host
            path's, as in :class:`Prefetcher`.
        transform (callable, optional): applied to every batch on the device — typically a
            :class:`prefetch.FusedAugment`, whose draws are keyed by ``(seed, rank, epoch, batch
            index)`` (this loader's rank: ranks with the same seed draw differently) and which the
            device path fuses with the gather; any :class:`prefetch.transforms.Transform` receives
            the same positions, and one that declares ``gathers`` gathers its leaves itself on the
            device path. Its seed is saved by :meth:`state_dict`.
        memory_fraction (float): the share of free device memory ``resident="auto"`` may fill, in
            (0, 1].

    Raises:
        ValueError: a bad ``batch_size``, ``resident``, ``memory_fraction``, ``seed`` (outside
            ``[-2**63, 2**64)``), ``rank``/``world_size`` or ``device`` (neither CPU nor CUDA);
            empty or 0-D arrays, arrays of different lengths, a ragged field whose ``values`` is
            not 1-D; ``resident="host"`` with arrays off the host.
        TypeError: a field that is not a numpy array, tensor or Ragged; a transform that is not
            callable; a ``seed`` that is not a whole number; ``shuffle``/``drop_last`` not a
            bool (an :class:`~prefetch.transforms.arguments.ArgumentTypeError`).
        CollateError: a tensor without ordinary strided CPU memory (naming it).
    """

    def __init__(self, arrays: Any, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, rank: Optional[int] = None,
                 world_size: Optional[int] = None, resident: str = "host",
                 device: Union[torch.device, str, None] = None, depth: int = 3,
                 num_threads: Optional[int] = None, transform: Optional[Callable] = None,
                 timeout: Optional[float] = None, memory_fraction: float = 0.5) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError("prefetch: ArrayLoader batch_size must be an int >= 1, got %r"
                             % (batch_size,))
        if not isinstance(resident, str) or resident not in _RESIDENCIES:
            raise ValueError("prefetch: ArrayLoader resident must be 'host', 'device' or 'auto', "
                             "got %r" % (resident,))
        if transform is not None and not callable(transform):
            raise TypeError("prefetch: ArrayLoader transform must be callable, got %r" % (transform,))
        number("ArrayLoader", "memory_fraction", memory_fraction, low=0.0, high=1.0, low_open=True)
        self.batch_size, self.seed = batch_size, check_seed(seed, "ArrayLoader seed")
        # True or False only: bool("no") would be True.
        self.shuffle = flag("ArrayLoader", "shuffle", shuffle)
        self.drop_last, self.transform = flag("ArrayLoader", "drop_last", drop_last), transform
        self.rank, self.world_size = distributed_rank_and_size(rank, world_size)
        self.device = resolve_device(device)
        self._structure = self._convert(arrays)
        spec, self._leaves, moves = flatten(self._structure, "arrays")
        assert not moves  # every leaf is a tensor, by _convert
        self._spec, groups = ragged_fields(spec)
        self._ragged = [_RaggedField(self._leaves, g) for g in groups]
        self.num_samples = self._check_lengths()
        self.resident = self._choose_residency(resident, memory_fraction)
        self._cursor = ResumeCursor()
        self._latest = LatestEpoch()  # the latest iter()'s epoch (prefetch._engine.lazy_epoch)
        self._live_epoch = None  # the _Epoch whose batches move the cursor
        self._pipeline = None
        self._closed = False  # the device path's; the host path's is its Pipeline's
        if self.resident == "host":
            off_host = [leaf.name for leaf in self._leaves if leaf.value.device.type != "cpu"]
            if off_host:
                raise ValueError("prefetch: resident='host' needs host arrays; %s on %s"
                                 % (", ".join(off_host), self._leaves[0].value.device))
            self._pipeline = Pipeline(self.device, depth=depth, num_threads=num_threads,
                                      transform=transform, rank=self.rank, timeout=timeout,
                                      owner="ArrayLoader")
        else:
            for m in mapped_files(leaf.value for leaf in self._leaves):
                m.check()  # the upload reads them all
            self._device_leaves = [leaf.value.to(self.device) for leaf in self._leaves]
            self._device_structure = unflatten(self._spec, self._device_leaves, [], self.device)

    # -- construction helpers ------------------------------------------------------------------

    def _convert(self, arrays):
        as_arrays = getattr(arrays, "as_arrays", None)
        if callable(as_arrays):  # a prefetch.Store
            arrays = as_arrays()
        if isinstance(arrays, dict):
            if not arrays:
                raise ValueError("prefetch: ArrayLoader got an empty dict of arrays")
            return {k: _as_field(v, "arrays[%r]" % (k,)) for k, v in arrays.items()}
        if isinstance(arrays, (tuple, list)):
            if not arrays:
                raise ValueError("prefetch: ArrayLoader got an empty %s of arrays"
                                 % type(arrays).__name__)
            return type(arrays)(_as_field(v, "arrays[%d]" % i) for i, v in enumerate(arrays))
        return _as_field(arrays, "arrays")

    def _check_lengths(self):
        zero_d = [leaf.name for leaf in self._leaves if leaf.value.dim() == 0]
        if zero_d:
            raise ValueError("prefetch: %s is 0-D; every array needs a first (sample) dimension"
                             % ", ".join(zero_d))
        values = {field.values_at for field in self._ragged}  # not one element a sample
        lengths = [(leaf.name, leaf.value.shape[0]) for k, leaf in enumerate(self._leaves)
                   if k not in values]
        if len({n for _, n in lengths}) > 1:
            raise ValueError("prefetch: ArrayLoader's arrays must share their first dimension; got "
                             + ", ".join("%s: %d" % pair for pair in lengths))
        n = lengths[0][1]
        if n == 0:
            raise ValueError("prefetch: ArrayLoader's arrays are empty (0 samples)")
        return n

    def _choose_residency(self, resident, memory_fraction):
        if resident != "auto":
            return resident
        nbytes = sum(leaf.value.numel() * leaf.value.element_size() for leaf in self._leaves)
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            choice = "device" if nbytes <= memory_fraction * free else "host"
            why = "%.1f MiB of arrays, %.1f MiB free on %s, fraction %g" % (
                nbytes / 2**20, free / 2**20, self.device, memory_fraction)
        else:
            choice = "host"
            why = "the device is the CPU: the arrays are in host memory already"
        logger.info("prefetch: ArrayLoader resident='auto' picked %r (%s)", choice, why)
        return choice

    # -- epochs ----------------------------------------------------------------------------------

    def _batches_in(self, order):
        n = order.numel()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __len__(self):
        per_rank = shard_size(self.num_samples, self.world_size, self.drop_last)
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def epoch_indices(self, epoch: int) -> torch.Tensor:
        """The sample indices this rank reads in an epoch, in order (before batching): a
        function of ``(seed, epoch)`` sharded as :func:`prefetch._engine.sharding.epoch_indices`
        shards it.

        Args:
            epoch (int): the epoch.

        Returns:
            Tensor[M], int64: indices into the arrays' first dimension.
        """
        return epoch_indices(self.num_samples, epoch=epoch, seed=self.seed, shuffle=self.shuffle,
                             rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next ``iter()`` runs (otherwise they count from 0, one per
        ``iter()``). Setting the epoch a loaded state stopped in keeps its resume position.

        Args:
            epoch (int): the epoch.
        """
        self._cursor.set_epoch(epoch)

    def __iter__(self):
        """This epoch's batches. The epoch starts at the first ``next()`` (its number, its
        order, its run), as a DataLoader's does: an iterator made and dropped unused (Lightning's
        check that a loader is iterable) is no epoch. A newer ``iter()`` ends the live epoch
        (host path) and stops it from moving the position (either path). Raises
        ``RuntimeError`` at once when the loader is closed."""
        if self.closed:
            raise RuntimeError("prefetch: this ArrayLoader is closed")
        if self._pipeline is not None:
            self._pipeline.check_runnable()
            self._pipeline.stop()
        self._live_epoch = None
        epoch = LazyEpoch(self._start_epoch, self.__len__, self._latest.superseded)
        self._latest.set(epoch)
        return epoch

    def _start_epoch(self):
        """Starts the next epoch and returns its iterator (the live ``_Epoch``)."""
        epoch, start = self._cursor.next_epoch, self._cursor.resume_index
        order = self.epoch_indices(epoch)
        if self._pipeline is not None:
            source = _GatherBatches(self._spec, self._leaves, self._ragged, order, start,
                                    self.batch_size, self._batches_in(order))
            batches = self._pipeline.run(source, epoch=epoch, first_index=start,
                                         length=self.__len__)
        else:
            batches = self._device_batches(order, epoch, start)
        batches = _IndexNotes(batches, order, self.batch_size, start, self._pipeline is not None)
        self._cursor.start()
        self._live_epoch = _Epoch(self, epoch, start, batches)
        return self._live_epoch

    def _upload(self, t):
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def _device_batches(self, order, epoch, start):
        bs, count = self.batch_size, self._batches_in(order)
        if start >= count:
            return
        order = self._upload(order)
        transform = self.transform
        # The leaves the transform gathers itself (fused with its kernels) stay whole; a ragged
        # field is gathered here (its three leaves are not one tensor a kernel can index).
        whole = {id(leaf) for leaf in (get_leaf(self._device_structure, key)
                                       for key in gathered_keys(transform))
                 if isinstance(leaf, torch.Tensor)}
        ragged = [(field, Ragged(*(self._device_leaves[k] for k in (
            field.values_at, field.offsets_at, field.sizes_at)), check=False))
            for field in self._ragged]
        parts = {k for field in self._ragged
                 for k in (field.values_at, field.offsets_at, field.sizes_at)}
        mapped = mapped_files(self._device_leaves)  # on the CPU, a store's mapping is read here
        device_leaves, spec, device, rank = self._device_leaves, self._spec, self.device, self.rank
        # Not the loader from here on: an error's traceback holds this frame, and must not keep
        # the loader alive (tests/engine/test_failed_epoch_release.py).
        del self
        for b in range(start, count):
            for m in mapped:
                m.check()
            idx = order[b * bs:(b + 1) * bs]
            leaves = [t if id(t) in whole or k in parts else t.index_select(0, idx)
                      for k, t in enumerate(device_leaves)]
            for field, whole_field in ragged:
                r = whole_field.index_select(0, idx)
                leaves[field.values_at], leaves[field.offsets_at], leaves[field.sizes_at] = \
                    r.values, r.offsets, r.sizes
            batch = unflatten(spec, leaves, [], device)
            if transform is not None:
                position = BatchPosition(epoch, b, rank)
                batch = (transform.gather(batch, idx, position) if whole
                         else run_transform(transform, batch, position))
            yield batch

    # -- resume ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The consumer's position, for an exact resume.

        Returns:
            dict: ``epoch`` and ``batches_consumed`` (batches received by the consumer; those
            prefetched but not consumed are not counted), the layout it applies to
            (``num_samples``, ``batch_size``, ``world_size``, ``seed``, ``shuffle``,
            ``drop_last``), and the transform's state under ``"transform"`` when it has one.
        """
        pending = self._latest.pending()
        if pending is not None:  # iter() was called, no batch asked for: that epoch starts now
            pending.ensure_started()
        epoch, consumed, _ = self._cursor.position(len(self))
        state = {"epoch": epoch, "batches_consumed": consumed}
        state.update({k: getattr(self, k) for k in _LAYOUT_KEYS})
        return save_transform_state(self.transform, state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes from :meth:`state_dict`: the next ``iter()`` continues that epoch after the
        batches already consumed, with the same order and augmentation draws (a FusedAugment
        built with ``seed=None`` adopts the saved seed; one with another explicit seed refuses).
        An epoch still running is stopped (host) and no longer moves the position (either path).

        Args:
            state (dict): what :meth:`state_dict` returned.

        Raises:
            ValueError: the state was saved by a loader of another layout (``num_samples``,
                ``batch_size``, ``world_size``, ``seed``, ``shuffle`` or ``drop_last``), its
                ``batches_consumed`` is outside ``[0, len(self)]``, or the transform refuses its
                state (another explicit seed).
            KeyError: the state lacks ``epoch`` or ``batches_consumed``.
        """
        mismatched = ["%s: saved %r, this loader %r" % (k, state[k], getattr(self, k))
                      for k in _LAYOUT_KEYS if k in state and state[k] != getattr(self, k)]
        if mismatched:
            raise ValueError("prefetch: the state was saved by a differently configured "
                             "ArrayLoader; a resume would not be exact (" + "; ".join(mismatched) + ")")
        consumed = int(state["batches_consumed"])
        if not 0 <= consumed <= len(self):
            raise ValueError("prefetch: batches_consumed=%d is outside [0, %d]" % (consumed, len(self)))
        load_transform_state(self.transform, state)
        self._live_epoch = None
        if self._pipeline is not None:
            self._pipeline.stop()  # the running epoch is not the one to resume
        self._cursor.load(state["epoch"], consumed)

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the current epoch and joins the host path's threads. Iterating a closed loader
        raises RuntimeError."""
        self._closed = True
        if self._pipeline is not None:
            self._pipeline.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the host path's pipeline closed)."""
        return self._closed or (self._pipeline is not None and self._pipeline.closed)

    def stats(self) -> dict:
        """The loader's counters.

        Returns:
            dict: the host path's :meth:`Prefetcher.stats`, plus ``"resident"``; on the device
            path only ``"resident"``.
        """
        out = self._pipeline.stats() if self._pipeline is not None else {}
        out["resident"] = self.resident
        return out

    def __repr__(self):
        return ("ArrayLoader(num_samples=%d, batch_size=%d, shuffle=%s, rank=%d/%d, resident=%r, "
                "device=%s)" % (self.num_samples, self.batch_size, self.shuffle, self.rank,
                                self.world_size, self.resident, self.device))
