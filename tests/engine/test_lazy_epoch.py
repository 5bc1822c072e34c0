"""An epoch starts at its first ``next()``, for the Prefetcher and the ArrayLoader, as a
DataLoader's does: ``iter()`` alone (Lightning's check that a loader is iterable) starts nothing,
counts no epoch and draws no order; a newer ``iter()`` supersedes an older one; a closed loader's
``iter()`` raises at once."""
import pytest
import torch

import prefetch
from prefetch.transforms import Transform


class Positions(Transform):
    """The batch and the (epoch, index) the loader passed."""

    def apply(self, batch, position):
        return batch, (position.epoch, position.index)


class CountingSource:
    """Batches 0..n-1; counts the iter() calls it got."""

    def __init__(self, n=4):
        self.n, self.iters = n, 0

    def __len__(self):
        return self.n

    def __iter__(self):
        self.iters += 1
        return iter([torch.tensor([i]) for i in range(self.n)])


def prefetcher():
    source = CountingSource()
    return prefetch.Prefetcher(source, device="cpu", transform=Positions()), source


def array_loader():
    loader = prefetch.ArrayLoader(torch.arange(8), 2, shuffle=True, seed=1, transform=Positions())
    return loader, None


LOADERS = {"prefetcher": prefetcher, "array_loader": array_loader}


def positions(batches):
    return [p for _, p in batches]


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_an_iterator_made_and_dropped_unused_is_no_epoch(kind):
    loader, source = LOADERS[kind]()
    with loader:
        for _ in range(3):
            iter(loader)  # dropped at once, as Lightning's check drops it
        held = iter(loader)  # held, never asked for a batch
        assert source is None or source.iters == 0
        del held
        got = list(loader)
        assert positions(got) == [(0, i) for i in range(4)]
        if kind == "array_loader":  # the order of epoch 0, not of a later epoch
            order = loader.epoch_indices(0).tolist()
            assert [b.tolist() for b, _ in got] == [order[i:i + 2] for i in range(0, 8, 2)]
        else:
            assert source.iters == 1


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_newer_iter_ends_the_live_epoch_and_an_older_unstarted_one(kind):
    loader, _ = LOADERS[kind]()
    with loader:
        a = iter(loader)
        assert positions([next(a)]) == [(0, 0)]
        b = iter(loader)  # ends a's epoch (the host path stops it)
        if kind == "prefetcher":
            with pytest.raises(StopIteration):
                next(a)
        assert positions(list(b)) == [(1, i) for i in range(4)]
        c, d = iter(loader), iter(loader)
        with pytest.raises(StopIteration):  # c was superseded before it started
            next(c)
        assert positions(list(d)) == [(2, i) for i in range(4)]


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_iter_on_a_closed_loader_raises_at_once(kind):
    loader, _ = LOADERS[kind]()
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        iter(loader)
