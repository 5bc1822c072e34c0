"""The part of the transform contract the engine runs by: a batch's :class:`BatchPosition`, the
:class:`Transform` base class, and how a loader runs a transform (:func:`run_transform`,
:func:`has_host_stage`). The contract itself (what a loader hands a transform, when, and what the
transform may do) is :mod:`prefetch.transforms.contract`'s docstring; it re-exports these names,
which live here, below the transforms, so that the engine imports no transform.
"""
import threading
import typing

import torch

from .._core.checks import distributed_rank, mix64

__all__ = ["DIRECT_EPOCH", "BatchPosition", "Transform", "run_transform", "has_host_stage"]

# The epoch of a direct call's position (no epoch/index given): never an epoch a loader passes.
DIRECT_EPOCH = -1


class BatchPosition(typing.NamedTuple):
    """Where a batch sits: the epoch, its index in the epoch (counting the batches of a resumed
    epoch from the epoch's start, not from the resume) and the DDP rank that loads it."""

    epoch: int
    index: int
    rank: int = 0

    def seed(self, seed):
        """A 63-bit seed for this position, a pure function of ``(seed, rank, epoch, index)``:
        neighbouring positions get independent seeds (splitmix64)."""
        return mix64(seed, self.rank, self.epoch, self.index)

    def generator(self, seed):
        """A CPU ``torch.Generator`` seeded with :meth:`seed`: the batch's own random stream."""
        return torch.Generator().manual_seed(self.seed(seed))


_DIRECT_CALLS_LOCK = threading.Lock()


class Transform:
    """Base class of transforms that receive the batch's :class:`BatchPosition` (see
    :mod:`prefetch.transforms.contract`'s docstring for when and where loaders run them).

    Subclasses implement :meth:`apply`; those that can gather samples from a dataset resident on
    the device list the keys of those leaves in ``gathers`` and implement :meth:`gather`.
    """

    #: Keys of the leaves that :meth:`gather` reads whole and gathers itself; empty: the loader
    #: gathers every leaf and calls :meth:`apply`.
    gathers = ()

    #: True: a loader's ``load_state_dict()`` calls ``load_state_dict(None)`` when the saved state
    #: has no ``"transform"`` entry, so the transform can refuse a state it cannot resume from.
    state_required = False

    #: Direct calls so far (calls without a position); the next one's batch index.
    direct_calls = 0

    def apply(self, batch, position):
        """Transforms one batch at ``position`` and returns the result."""
        raise NotImplementedError("%s must implement apply(batch, position)" % type(self).__name__)

    def host_apply(self, batch, position, device):
        """The host stage (see :mod:`prefetch.transforms.contract`): the batch at ``position``
        on the host, before it is collated and copied to ``device``; returns what the loader
        copies. The base class defines none (loaders skip it unless a subclass overrides it)."""
        return batch

    def gather(self, batch, indices, position):
        """Gathers and transforms one batch of a device-resident dataset
        (``ArrayLoader(resident="device")``): the leaves named in ``gathers`` are the whole
        dataset's tensors, every other leaf already holds rows ``indices`` (a 1-D int64 tensor on
        the device); returns what :meth:`apply` would return for the gathered batch."""
        raise NotImplementedError("%s declares gathers=%r but does not implement gather()"
                                  % (type(self).__name__, self.gathers))

    def direct_position(self, epoch=None, index=None, rank=None):
        """The position of a direct call: the given parts; without ``index`` call ``k`` of this
        transform (counting from 0) is batch ``k`` of epoch ``DIRECT_EPOCH`` (or ``epoch``), so
        successive calls draw afresh and as reproducibly as the seed; ``rank`` defaults to
        torch.distributed's (0 when not initialised)."""
        if index is None:
            with _DIRECT_CALLS_LOCK:
                index = self.direct_calls
                self.direct_calls = index + 1
            if epoch is None:
                epoch = DIRECT_EPOCH
        elif epoch is None:
            epoch = 0
        return BatchPosition(int(epoch), int(index), distributed_rank() if rank is None else int(rank))

    def __call__(self, batch, position=None, *, epoch=None, index=None, rank=None):
        """Applies the transform outside a loader: at ``position``, or at
        :meth:`direct_position` of the parts given."""
        if position is None:
            position = self.direct_position(epoch, index, rank)
        return self.apply(batch, position)


def run_transform(transform, batch, position):
    """What every loader does with its transform for one batch at ``position``."""
    if isinstance(transform, Transform):
        return transform.apply(batch, position)
    return transform(batch)


def has_host_stage(transform, device=None):
    """Whether a loader calls ``transform.host_apply`` before the copy (to ``device``, when
    given): a Transform whose ``host_stage_for(device)`` says so, else whose ``host_stage`` says
    so, else whose class overrides ``host_apply``. Without a host stage a loader hands the batch
    to the engine as the source made it (an ArrayLoader's gathers stay in C++)."""
    if not isinstance(transform, Transform):
        return False
    for_device = getattr(transform, "host_stage_for", None)
    if device is not None and for_device is not None:
        return bool(for_device(torch.device(device)))
    stage = getattr(transform, "host_stage", None)  # a Compose says whether any member has one
    if stage is not None:
        return bool(stage)
    return type(transform).host_apply is not Transform.host_apply
