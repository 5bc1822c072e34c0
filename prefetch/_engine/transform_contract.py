"""The part of the transform contract the engine runs by: a batch's :class:`BatchPosition`, the
:class:`Transform` base class, and how a loader runs a transform (:func:`run_transform`,
:func:`has_host_stage`). The contract itself (what a loader hands a transform, when, and what the
transform may do) is :mod:`prefetch.transforms.contract`'s docstring; it re-exports these names,
which live here, below the transforms, so that the engine imports no transform.
"""
import threading
import typing
from typing import Any, Callable, Hashable, Optional, Union

import torch

from .._core.checks import distributed_rank, mix64

__all__ = ["DIRECT_EPOCH", "Batch", "LeafKey", "BatchPosition", "Transform", "run_transform",
           "has_host_stage"]

# The epoch of a direct call's position (no epoch/index given): never an epoch a loader passes.
DIRECT_EPOCH = -1

#: A batch: a tensor, a :class:`~prefetch.Ragged`, or a tuple/list/dict (namedtuples and dict
#: subclasses included) of such leaves, as a loader hands it over.
Batch = Any
#: A leaf's key (:func:`get_leaf`): an index of a tuple/list batch, a key of a mapping batch.
LeafKey = Hashable


class BatchPosition(typing.NamedTuple):
    """Where a batch sits: the epoch, its index in the epoch (counting the batches of a resumed
    epoch from the epoch's start, not from the resume) and the DDP rank that loads it.

    Args:
        epoch (int): the epoch (:data:`DIRECT_EPOCH`, -1, for a direct call without one).
        index (int): the batch's index in the epoch, from 0.
        rank (int): the DDP rank that loads the batch (default 0).
    """

    epoch: int
    index: int
    rank: int = 0

    def seed(self, seed: int) -> int:
        """A 63-bit seed for this position, a pure function of ``(seed, rank, epoch, index)``:
        neighbouring positions get independent seeds (splitmix64, Steele, Lea and Flood,
        "Fast splittable pseudorandom number generators", OOPSLA 2014, folded over the four
        values: :func:`prefetch._core.checks.mix64`).

        Args:
            seed (int): the transform's seed.

        Returns:
            int: a seed in ``[0, 2**63)``.
        """
        return mix64(seed, self.rank, self.epoch, self.index)

    def generator(self, seed: int) -> torch.Generator:
        """The batch's own random stream.

        Args:
            seed (int): the transform's seed.

        Returns:
            torch.Generator: a CPU generator seeded with :meth:`seed`.
        """
        return torch.Generator().manual_seed(self.seed(seed))


_DIRECT_CALLS_LOCK = threading.Lock()


class Transform:
    """Base class of transforms that receive the batch's :class:`BatchPosition` (see the module
    docstring for when and where loaders run them).

    Subclasses implement :meth:`apply`; those that can gather samples from a dataset resident on
    the device list the keys of those leaves in ``gathers`` and implement :meth:`gather`. The
    base class takes no constructor argument.
    """

    #: Keys of the leaves that :meth:`gather` reads whole and gathers itself; empty: the loader
    #: gathers every leaf and calls :meth:`apply`.
    gathers = ()

    #: True: a loader's ``load_state_dict()`` calls ``load_state_dict(None)`` when the saved state
    #: has no ``"transform"`` entry, so the transform can refuse a state it cannot resume from.
    state_required = False

    #: Direct calls so far (calls without a position); the next one's batch index.
    direct_calls = 0

    def apply(self, batch: Batch, position: BatchPosition) -> Batch:
        """Transforms one batch.

        Args:
            batch: the batch on the loader's device (tensors, :class:`~prefetch.Ragged`, a
                tuple/list/dict of them); the transform may modify its tensors in place.
            position (BatchPosition): where the batch sits; random draws are a function of it.

        Returns:
            The transformed batch, what the consumer receives.

        Raises:
            NotImplementedError: the base class has no ``apply``; subclasses define it.
        """
        raise NotImplementedError("%s must implement apply(batch, position)" % type(self).__name__)

    def host_apply(self, batch: Batch, position: BatchPosition,
                   device: Union[torch.device, str]) -> Batch:
        """The host stage (see the module docstring): the batch before it is collated and copied.
        The base class defines none (it returns the batch; loaders skip it unless a subclass
        overrides it).

        Args:
            batch: the batch on the host, as the source gave it.
            position (BatchPosition): the position :meth:`apply` will get for this batch.
            device (torch.device or str): where the loader copies the batch.

        Returns:
            What the loader collates, copies and hands to :meth:`apply`.
        """
        return batch

    def gather(self, batch: Batch, indices: torch.Tensor, position: BatchPosition) -> Batch:
        """Gathers and transforms one batch of a device-resident dataset
        (``ArrayLoader(resident="device")``).

        Args:
            batch: the leaves named in ``gathers`` are the whole dataset's tensors; every other
                leaf already holds rows ``indices``.
            indices (Tensor[B], int64): the batch's rows of the dataset, on the device.
            position (BatchPosition): where the batch sits.

        Returns:
            What :meth:`apply` would return for the gathered batch.

        Raises:
            NotImplementedError: a subclass declares ``gathers`` without defining ``gather``.
        """
        raise NotImplementedError("%s declares gathers=%r but does not implement gather()"
                                  % (type(self).__name__, self.gathers))

    def direct_position(self, epoch: Optional[int] = None, index: Optional[int] = None,
                        rank: Optional[int] = None) -> BatchPosition:
        """The position of a direct call (a call outside a loader).

        Args:
            epoch (int, optional): the epoch; default :data:`DIRECT_EPOCH` without ``index``,
                0 with one.
            index (int, optional): the batch index; None: call ``k`` of this transform
                (counting from 0, thread-safe) is batch ``k``, so successive calls draw afresh
                and as reproducibly as the seed.
            rank (int, optional): default torch.distributed's rank (0 when not initialised).

        Returns:
            BatchPosition: the position.
        """
        if index is None:
            with _DIRECT_CALLS_LOCK:
                index = self.direct_calls
                self.direct_calls = index + 1
            if epoch is None:
                epoch = DIRECT_EPOCH
        elif epoch is None:
            epoch = 0
        return BatchPosition(int(epoch), int(index), distributed_rank() if rank is None else int(rank))

    def __call__(self, batch: Batch, position: Optional[BatchPosition] = None, *,
                 epoch: Optional[int] = None, index: Optional[int] = None,
                 rank: Optional[int] = None) -> Batch:
        """Applies the transform outside a loader.

        Args:
            batch: the batch, as :meth:`apply` takes it.
            position (BatchPosition, optional): where the batch sits; None: the
                :meth:`direct_position` of ``epoch``, ``index`` and ``rank``.
            epoch, index, rank (int, optional): the parts of a position, as
                :meth:`direct_position` takes them.

        Returns:
            What :meth:`apply` returns.
        """
        if position is None:
            position = self.direct_position(epoch, index, rank)
        return self.apply(batch, position)


def run_transform(transform: Callable, batch: Batch, position: BatchPosition) -> Batch:
    """What every loader does with its transform for one batch.

    Args:
        transform: a :class:`Transform` (called as ``apply(batch, position)``) or any callable
            ``fn(batch) -> batch``.
        batch: the batch on the device.
        position (BatchPosition): where the batch sits.

    Returns:
        The transformed batch.
    """
    if isinstance(transform, Transform):
        return transform.apply(batch, position)
    return transform(batch)


def has_host_stage(transform: Any, device: Union[torch.device, str, None] = None) -> bool:
    """Whether a loader calls ``transform.host_apply`` before the copy. Without a host stage a
    loader hands the batch to the engine as the source made it (an ArrayLoader's gathers stay in
    C++).

    Args:
        transform: the loader's transform (a callable that is not a :class:`Transform` has none).
        device (torch.device or str, optional): where the loader copies; given, a Transform's
            ``host_stage_for(device)`` decides.

    Returns:
        bool: what ``host_stage_for(device)`` says, else what ``host_stage`` says, else whether
        the transform's class overrides ``host_apply``.
    """
    if not isinstance(transform, Transform):
        return False
    for_device = getattr(transform, "host_stage_for", None)
    if device is not None and for_device is not None:
        return bool(for_device(torch.device(device)))
    stage = getattr(transform, "host_stage", None)  # a Compose says whether any member has one
    if stage is not None:
        return bool(stage)
    return type(transform).host_apply is not Transform.host_apply
