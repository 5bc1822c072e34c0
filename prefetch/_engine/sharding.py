"""Which samples a rank reads in an epoch: a permutation keyed by ``(seed, epoch)``, split across
ranks exactly as ``torch.utils.data.DistributedSampler`` splits it.

Every rank computes the same permutation (no communication), pads it by repeating its head
(``drop_last=False``) or cuts its tail (``drop_last=True``) to a multiple of ``world_size``, and
takes every ``world_size``-th index starting at its rank. So with ``drop_last=False`` the shards
together cover the dataset and at most ``world_size - 1`` samples appear twice in an epoch; with
``drop_last=True`` they are disjoint and at most ``world_size - 1`` samples are skipped.
"""
import torch

from .._core.checks import mix64, whole

__all__ = ["shard_size", "epoch_indices", "distributed_rank_and_size"]


def shard_size(num_samples, world_size, drop_last):
    """Samples per rank per epoch."""
    if drop_last:
        return num_samples // world_size
    return -(-num_samples // world_size)


def epoch_indices(num_samples, *, epoch, seed=0, shuffle=True, rank=0, world_size=1,
                  drop_last=False):
    """The int64 indices rank ``rank`` reads in ``epoch``, in order."""
    if shuffle:
        g = torch.Generator().manual_seed(mix64(seed, epoch))
        order = torch.randperm(num_samples, generator=g)
    else:
        order = torch.arange(num_samples)
    per_rank = shard_size(num_samples, world_size, drop_last)
    total = per_rank * world_size
    if total > num_samples:  # pad with the head, repeated if the dataset is tiny
        repeats = -(-(total - num_samples) // num_samples)
        order = torch.cat([order] + [order] * repeats)
    order = order[:total]
    return order[rank:total:world_size].contiguous()


def distributed_rank_and_size(rank=None, world_size=None):
    """(rank, world_size): the arguments where given, else torch.distributed's when initialised,
    else (0, 1)."""
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    world_size, rank = whole(world_size, "world_size"), whole(rank, "rank")
    if world_size < 1:
        raise ValueError("prefetch: world_size must be >= 1, got %d" % world_size)
    if not 0 <= rank < world_size:
        raise ValueError("prefetch: rank must be in [0, world_size) = [0, %d), got %d"
                         % (world_size, rank))
    return rank, world_size
