"""Ragged batches: samples of one dtype and rank whose sizes differ (decoded images of their own
height and width), packed one after another with no padding, and a table of where each lies.

A :class:`prefetch.Samples` of such tensors crosses to the device as one ``Ragged`` — one copy of
the packed values and the table — and the transform receives it; ``Ragged.from_tensors`` makes
one from a list of tensors (what a user or a test has), ``tensors()`` gives the samples back as
views. ``prefetch.ops.resized_crop`` takes it directly.
"""
from __future__ import annotations

import math
import operator
from typing import List, Optional, Sequence, Tuple, Union

import torch

from .checks import describe
from .errors import CollateError
from .spans import gather_spans

__all__ = ["Ragged"]


class Ragged:
    """``len(sizes)`` samples packed in ``values``.

    Args:
        values (Tensor[M]): every sample's elements (attribute below).
        offsets (Tensor[N], int64): each sample's element offset in ``values``.
        sizes (Tensor[N, rank], int64): each sample's shape.
        shapes (sequence of tuples, optional): the same shapes as host tuples, when the maker
            has them (then :meth:`shapes` reads no device memory).
        dense (bool): the samples lie one after another from element 0 (taken only with
            ``shapes``; the offsets are then known on the host).
        check (bool): read host tables to check every sample lies inside ``values``; False for
            tables still being written by an asynchronous copy (the engine's own).

    Raises:
        TypeError: ``values`` is not a 1-D tensor, or ``offsets``/``sizes`` not 1-D/2-D int64.
        ValueError: ``offsets``, ``sizes`` and ``shapes`` disagree on the number of samples, a
            size is negative, or a sample does not lie inside ``values``.

    Attributes:
        values: 1-D tensor, every sample's elements in row-major order, sample after sample
            (gaps between samples are allowed: each is found through ``offsets``).
        offsets: int64 ``[N]``, the element offset of each sample in ``values``.
        sizes: int64 ``[N, rank]``, each sample's shape.

    Every sample has ``values``' dtype and the same rank; any dimension may differ ([H, W]
    masks of different widths, HWC images of different channel counts: an op that needs one
    channel count checks each sample's). ``offsets`` and ``sizes`` live on the CPU or
    on ``values``' device (the Prefetcher delivers all three on the device, in one copy).
    """

    __slots__ = ("values", "offsets", "sizes", "_shapes", "_dense")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor, sizes: torch.Tensor,
                 shapes: Optional[Sequence[Sequence[int]]] = None, dense: bool = False, *,
                 check: bool = True) -> None:
        if not isinstance(values, torch.Tensor) or values.dim() != 1:
            raise TypeError("prefetch: Ragged values must be a 1-D tensor, got %s" % describe(values))
        for name, t, dim in (("offsets", offsets, 1), ("sizes", sizes, 2)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != dim:
                raise TypeError("prefetch: Ragged %s must be a %d-D int64 tensor, got %s"
                                % (name, dim, describe(t)))
        if offsets.shape[0] != sizes.shape[0]:
            raise ValueError("prefetch: Ragged has %d offsets but %d sizes"
                             % (offsets.shape[0], sizes.shape[0]))
        if check and offsets.device.type == "cpu" and sizes.device.type == "cpu" and offsets.numel():
            _check_extents(values.numel(), offsets, sizes)
        self.values, self.offsets, self.sizes = values, offsets, sizes
        # The sizes as host tuples, when the maker had them (the Prefetcher and from_tensors do):
        # shapes() then reads no device memory, so a transform drawing per-image geometry does
        # not wait for the batch's copy.
        if shapes is not None:
            shapes = tuple(tuple(int(d) for d in s) for s in shapes)
            if len(shapes) != sizes.shape[0]:
                raise ValueError("prefetch: Ragged has %d sizes but %d shapes"
                                 % (sizes.shape[0], len(shapes)))
        self._shapes = shapes
        # The samples lie one after another from element 0 (offsets are the running sum of
        # their sizes): the Prefetcher's and from_tensors' packing. With the shapes, the offsets
        # are then known on the host too.
        self._dense = bool(dense) and shapes is not None

    @classmethod
    def from_tensors(cls, tensors: Sequence[torch.Tensor], *,
                     device: Union[torch.device, str, None] = None) -> "Ragged":
        """Packs tensors of one dtype and rank into one Ragged, dense from element 0.

        Args:
            tensors (sequence of Tensor[*S_i]): the samples, any shapes of one rank.
            device (torch.device or str, optional): where the Ragged lives (default: the first
                tensor's device).

        Returns:
            Ragged: ``len(tensors)`` samples, with their shapes known on the host.

        Raises:
            ValueError: ``tensors`` is empty.
            prefetch.CollateError: a sample is not a tensor, or has another dtype or rank than
                sample 0 (naming the sample).
        """
        tensors = list(tensors)
        if not tensors:
            raise ValueError("prefetch: Ragged.from_tensors needs at least one tensor")
        check_samples(tensors, "tensors")
        first = tensors[0]
        device = torch.device(device) if device is not None else first.device
        sizes = torch.tensor([list(t.shape) for t in tensors], dtype=torch.int64).reshape(
            len(tensors), first.dim())
        counts = [t.numel() for t in tensors]
        offsets = torch.tensor([0] + counts[:-1], dtype=torch.int64).cumsum(0)
        values = torch.cat([t.reshape(-1) for t in tensors]).to(device) if sum(counts) else \
            torch.empty(0, dtype=first.dtype, device=device)
        return cls(values, offsets.to(device), sizes.to(device),
                   shapes=[tuple(t.shape) for t in tensors], dense=True)

    def __len__(self) -> int:
        return self.sizes.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def rank(self) -> int:
        """The rank of every sample."""
        return self.sizes.shape[1]

    def shapes(self) -> List[Tuple[int, ...]]:
        """Each sample's shape: known on the host when the Ragged came from the Prefetcher or
        ``from_tensors``; otherwise read from ``sizes`` (a device sync when ``sizes`` is on a GPU).

        Returns:
            list of tuples: ``N`` shapes of ``rank`` ints each.
        """
        if self._shapes is None:
            self._shapes = tuple(tuple(s) for s in self.sizes.cpu().tolist())
        return list(self._shapes)

    def host_tables(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The tables on the host, made from what the host knows when it can (no device read, no
        synchronisation), else copied from the device.

        Returns:
            tuple: ``(offsets, sizes)``, CPU int64 tensors ``[N]`` and ``[N, rank]``.
        """
        if self._dense:
            shapes = self._shapes
            counts = [math.prod(s) for s in shapes]
            offsets = torch.tensor(([0] + counts[:-1]) if shapes else [], dtype=torch.int64).cumsum_(0)
            sizes = torch.tensor(shapes, dtype=torch.int64).view(len(shapes), self.rank)
            return offsets, sizes
        return self.offsets.cpu(), self.sizes.cpu()

    def tensors(self) -> List[torch.Tensor]:
        """The samples, as views of ``values``.

        Returns:
            list of Tensor[*S_i]: ``N`` views, each of its sample's shape.
        """
        offsets = self.offsets.cpu().tolist()
        return [self.values.narrow(0, o, math.prod(s)).view(s)
                for o, s in zip(offsets, self.shapes())]

    def __getitem__(self, i):
        """Sample ``i`` (a view of ``values``), or, for a slice, a Ragged of those samples that
        shares ``values``."""
        if isinstance(i, slice):
            index = range(*i.indices(len(self)))
            rows = torch.tensor(list(index), dtype=torch.int64)
            shapes = [self.shapes()[k] for k in index] if self._shapes is not None else None
            return Ragged(self.values, self.offsets[rows.to(self.offsets.device)],
                          self.sizes[rows.to(self.sizes.device)], shapes=shapes,
                          dense=index.start == 0 and index.step == 1 and self._dense, check=False)
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError("prefetch: a Ragged is indexed by an int or a slice, got %s"
                            % type(i).__name__) from None
        n = len(self)
        if not -n <= i < n:
            raise IndexError("prefetch: sample %d of a Ragged of %d" % (i, n))
        i %= n
        shape = self.shapes()[i]
        offset = int(self.offsets[i])
        if offset < 0 or offset + math.prod(shape) > self.values.numel():
            raise IndexError("prefetch: sample %d of the Ragged (offset %d, shape %s) does not lie "
                             "inside its %d values" % (i, offset, list(shape), self.values.numel()))
        return self.values.narrow(0, offset, math.prod(shape)).view(shape)

    def index_select(self, dim: int, index: torch.Tensor) -> "Ragged":
        """Some samples, as ``Tensor.index_select`` along the sample dimension, gathered on
        ``values``' device (the ArrayLoader's device path; its host path gathers in C++).

        Args:
            dim (int): must be 0 (the sample dimension).
            index (Tensor[K], int64): the samples to take, in order; negative counts from the end.

        Returns:
            Ragged: ``K`` samples packed from element 0 in new ``values``.

        Raises:
            ValueError: ``dim`` is not 0.
            TypeError: ``index`` is not a 1-D int64 tensor.
            IndexError: an index is out of range.
        """
        if dim != 0:
            raise ValueError("prefetch: a Ragged selects samples (dim 0), got dim=%r" % (dim,))
        if not isinstance(index, torch.Tensor) or index.dim() != 1 or index.dtype != torch.int64:
            raise TypeError("prefetch: Ragged.index_select takes a 1-D int64 index, got %s"
                            % describe(index))
        n = len(self)
        if index.numel() and (int(index.min()) < -n or int(index.max()) >= n):
            raise IndexError("prefetch: index %d is out of range for a Ragged of %d samples"
                             % (int(index.max()) if int(index.max()) >= n else int(index.min()), n))
        index = index.remainder(n) if n else index
        sizes = self.sizes[index.to(self.sizes.device)]
        counts = sizes.prod(1)  # 1 for rank-0 samples
        starts = self.offsets[index.to(self.offsets.device)].to(self.values.device)
        values = gather_spans(self.values, torch.stack((starts, counts.to(starts.device)), 1))
        offsets = torch.cumsum(counts, 0) - counts
        shapes = None if self._shapes is None else [self._shapes[k] for k in index.tolist()]
        return Ragged(values, offsets, sizes, shapes=shapes, dense=shapes is not None, check=False)

    def to(self, device: Union[torch.device, str], non_blocking: bool = False) -> "Ragged":
        """The same samples on another device.

        Args:
            device (torch.device or str): the destination.
            non_blocking (bool): as ``Tensor.to``'s (asynchronous from pinned host memory).

        Returns:
            Ragged: ``values``, ``offsets`` and ``sizes`` on ``device``, the host shapes kept.
        """
        return Ragged(*(t.to(device, non_blocking=non_blocking)
                        for t in (self.values, self.offsets, self.sizes)), shapes=self._shapes,
                      dense=self._dense, check=False)

    def __repr__(self) -> str:
        return "Ragged(%d samples of %s, %s, on %s)" % (
            len(self), "rank %d" % self.rank, str(self.dtype).replace("torch.", ""), self.device)


def _check_extents(numel, offsets, sizes):
    """Every sample of host tables inside ``numel`` values: a negative offset would wrap in
    ``narrow`` and read another sample's elements."""
    counts = sizes.prod(dim=1) if sizes.shape[1] else torch.ones_like(offsets)
    if bool((sizes < 0).any()):
        n = int((sizes < 0).any(dim=1).nonzero()[0])
        raise ValueError("prefetch: Ragged sizes[%d] = %s has a negative size" % (n, sizes[n].tolist()))
    bad = (offsets < 0) | (offsets + counts > numel)
    if bool(bad.any()):
        n = int(bad.nonzero()[0])
        raise ValueError("prefetch: Ragged sample %d (offsets[%d] = %d, sizes[%d] = %s) does not lie "
                         "inside the %d values" % (n, n, int(offsets[n]), n, sizes[n].tolist(), numel))


def check_samples(tensors, name):
    """Raises ``prefetch.CollateError`` naming the first sample that cannot join sample 0 in a
    Ragged: another dtype or another rank."""
    first = tensors[0]
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise CollateError("prefetch: %s: sample %d is a %s, expected a tensor"
                               % (name, i, type(t).__name__))
        if t.dtype != first.dtype or t.dim() != first.dim():
            raise CollateError(
                "prefetch: cannot collate %s: sample %d is %s of shape %s, and sample 0 %s of "
                "shape %s; samples of different sizes collate into a Ragged only with the same "
                "dtype and the same rank"
                % (name, i, _dtype(t), list(t.shape), _dtype(first), list(first.shape)))


def _dtype(t):
    return str(t.dtype).replace("torch.", "")
