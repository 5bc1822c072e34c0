"""The sampler's state after an epoch the consumer broke off, so that the same seed gives the same
orders run to run.

torch's samplers draw from their generator lazily: ``RandomSampler`` draws its permutation when
its iteration starts and, at the end of an epoch, one more (the empty remainder of
``num_samples % n``), and with ``replacement=True`` it draws 32 indices at a time. A Prefetcher
reads ahead of its consumer by as much as timing allows, so when an epoch is broken off (a
``break``, Lightning's ``limit_train_batches``) the sampler has sometimes reached its end and
sometimes not, and every later epoch's order would depend on that timing. :func:`finish_sampling`
reads the rest of the epoch's indices — indices only: no sample is loaded — so after any epoch,
completed or broken off, the generator stands where a completed epoch leaves it.
"""
from torch.utils.data import (BatchSampler, DistributedSampler, RandomSampler, SequentialSampler,
                              SubsetRandomSampler, WeightedRandomSampler)
from torch.utils.data.dataloader import _BaseDataLoaderIter

# Samplers whose iteration is known to end (len() of them), so reading it to the end is bounded.
# A subclass or a user's sampler may be endless or have side effects: it is left as it is.
_FINITE = (SequentialSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler,
           DistributedSampler)


def _bounded(sampler):
    if type(sampler) is BatchSampler:
        sampler = sampler.sampler
    return type(sampler) in _FINITE


def finish_sampling(iterator):
    """Reads the rest of the epoch's indices from the sampler behind ``iterator`` (a torch
    DataLoader iterator, or an epoch iterator naming one in ``dataloader_iterator``) when that
    sampler is one of torch's finite samplers; anything else is left untouched. Returns the
    number of index batches read."""
    inner = getattr(iterator, "dataloader_iterator", iterator)
    if not isinstance(inner, _BaseDataLoaderIter):
        return 0
    sampler_iter = getattr(inner, "_sampler_iter", None)
    if sampler_iter is None or not _bounded(getattr(inner, "_index_sampler", None)):
        return 0
    read = 0
    for _ in sampler_iter:
        read += 1
    return read
