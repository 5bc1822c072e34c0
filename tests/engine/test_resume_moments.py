"""A loader's state saved at any moment resumes exactly what the uninterrupted run would have
produced next — for every resumable source, at every moment of an epoch.

Sources: a minimal stateful source with torchdata's end-of-epoch semantics (tests/helpers.py),
with and without ``len()``, torchdata's StatefulDataLoader with 0 and 2 workers, the worker ring (a StatefulDataLoader with
workers and ``collate_fn=prefetch.collate.samples``), the ArrayLoader, and the ArrayLoader over
a packed store. Moments: before ``iter()``, between ``iter()`` and the first batch, mid-epoch,
right after the last batch (before the ``StopIteration``), after the epoch ended, twice in one
epoch (each state resumes), after a ``break``, after a ``break`` at the last batch, once the next
epoch's ``iter()`` was called, and mid-way through a later epoch.

Every batch is tagged with the position the transform saw (epoch, index), so a resumed run that
keyed its draws to the wrong epoch fails as surely as one that delivered the wrong samples.

The reference is the uninterrupted run: the same loader iterated epoch after epoch. Torchdata's
StatefulDataLoader without workers does not itself resume its *later* epochs' orders as its
uninterrupted run gives them (its generator is drawn once more when it loads a state; shown
below on the bare loader), so for it the epochs after the resumed one are compared with the bare
StatefulDataLoader resumed from the same state: the Prefetcher must resume as its source does.
"""
import os

import pytest
import torch

import prefetch
from prefetch.transforms import Transform

from ..helpers import ROOT, StatefulSource

EPOCHS = 3


class Tag(Transform):
    """Records where the loader says a batch sits: the batch's sample ids and (epoch, index)."""

    def __init__(self, ids):
        self.ids = ids  # batch -> the tuple of its sample ids

    def apply(self, batch, position):
        return (self.ids(batch), position.epoch, position.index)


# ---- the sources ---------------------------------------------------------------------------------
# Each maker returns a fresh loader (a Prefetcher or an ArrayLoader) over a fresh source, the
# same every call, and its batches per epoch.


def _stateful_source():
    source = StatefulSource(lambda i: torch.tensor([i, 100 + i]), batches=5)
    return prefetch.Prefetcher(source, device="cpu", depth=2,
                               transform=Tag(lambda b: tuple(b.tolist())))


class _NoLen(StatefulSource):
    """A StatefulSource without len(): the Prefetcher learns an epoch's end only from the end."""

    __len__ = None


def _stateful_source_without_len():
    return prefetch.Prefetcher(_NoLen(lambda i: torch.tensor([i, 100 + i]), batches=5),
                               device="cpu", depth=2, transform=Tag(lambda b: tuple(b.tolist())))


def _dataset(n=20):
    return torch.utils.data.TensorDataset(torch.arange(n))


def _sdl(num_workers, collate_fn=None):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
    return sdl.StatefulDataLoader(_dataset(), batch_size=4, shuffle=True, num_workers=num_workers,
                                  generator=torch.Generator().manual_seed(7), **kwargs)


def _sdl_maker(num_workers):
    def make():
        return prefetch.Prefetcher(_sdl(num_workers), device="cpu", depth=2,
                                   transform=Tag(lambda b: tuple(b[0].tolist())))
    return make


def _worker_ring():
    loader = _sdl(2, collate_fn=prefetch.collate.samples)
    return prefetch.Prefetcher(loader, device="cpu", depth=2,
                               transform=Tag(lambda b: tuple(b[0].tolist())))


def _array_loader():
    return prefetch.ArrayLoader((torch.arange(18),), 4, shuffle=True, seed=5,
                                transform=Tag(lambda b: tuple(b[0].tolist())))


def _store():
    store = prefetch.open_store(os.path.join(ROOT, "tests", "data", "store_v1"))  # 3 JPEGs

    def ids(batch):  # (the encoded bytes' first and last bytes name the sample) and its label
        images, labels = batch[0], batch[1]
        return tuple((int(images.sizes[i]), int(labels[i])) for i in range(len(labels)))

    return prefetch.ArrayLoader(store, 1, shuffle=True, seed=2, transform=Tag(ids))


SOURCES = {
    "stateful_source": _stateful_source,
    "stateful_source_without_len": _stateful_source_without_len,
    "sdl_0_workers": _sdl_maker(0),
    "sdl_2_workers": _sdl_maker(2),
    "worker_ring": _worker_ring,
    "array_loader": _array_loader,
    "store": _store,
}
# Sources whose own resume gives the uninterrupted run's later epochs (see the module docstring).
EXACT_LATER_EPOCHS = set(SOURCES) - {"sdl_0_workers"}
WITHOUT_LEN = {"stateful_source_without_len"}


# ---- the moments ---------------------------------------------------------------------------------
# Each takes a fresh loader, consumes some batches, and returns [(label, state, expected save
# point)] — the save point is (epoch, batches of it consumed) as the uninterrupted run counts.


def _take(it, k):
    return [next(it) for _ in range(k)]


def before_iter(loader, n):
    return [("", loader.state_dict(), (0, 0))]


def before_first_batch(loader, n):
    it = iter(loader)  # noqa: F841 - held: the epoch is pending
    return [("", loader.state_dict(), (0, 0))]


def mid_epoch(loader, n):
    _take(iter(loader), 2)
    return [("", loader.state_dict(), (0, 2))]


def after_last_batch(loader, n):
    it = iter(loader)
    _take(it, n)  # every batch, no StopIteration asked for
    return [("", loader.state_dict(), (1, 0))]


def epoch_ended(loader, n):
    list(loader)
    return [("", loader.state_dict(), (1, 0))]


def twice(loader, n):
    it = iter(loader)
    _take(it, 1)
    first = loader.state_dict()
    _take(it, 1)
    return [("first", first, (0, 1)), ("second", loader.state_dict(), (0, 2))]


def after_break(loader, n):
    for i, _ in enumerate(loader):
        if i == 1:
            break
    return [("", loader.state_dict(), (0, 2))]


def break_at_last_batch(loader, n):
    for i, _ in enumerate(loader):
        if i == n - 1:
            break
    return [("", loader.state_dict(), (1, 0))]


def next_epoch_iter_called(loader, n):
    list(loader)
    it = iter(loader)  # noqa: F841 - held: epoch 1 is pending
    return [("", loader.state_dict(), (1, 0))]


def later_epoch_mid(loader, n):
    list(loader)
    _take(iter(loader), 1)
    return [("", loader.state_dict(), (1, 1))]


MOMENTS = [before_iter, before_first_batch, mid_epoch, after_last_batch, epoch_ended, twice,
           after_break, break_at_last_batch, next_epoch_iter_called, later_epoch_mid]


def _epochs(loader, count):
    """``count`` epochs of ``loader``: per epoch, its batches' tags."""
    return [list(loader) for _ in range(count)]


def _bare_sdl_resumed(source_state, open_epoch, count):
    """The bare StatefulDataLoader (no prefetch) loaded with ``source_state``: its next ``count``
    epochs' sample ids (after the empty remainder an open epoch leaves, as the Prefetcher does)."""
    bare = _sdl(0)
    bare.load_state_dict(source_state)
    if open_epoch:
        assert list(bare) == []
    return [[tuple(b[0].tolist()) for b in bare] for _ in range(count)]


@pytest.mark.parametrize("moment", MOMENTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_state_saved_at_any_moment_resumes_what_the_uninterrupted_run_produces_next(source, moment):
    make = SOURCES[source]
    with make() as loader:
        full = _epochs(loader, EPOCHS)
        n = len(full[0])
        if source == "worker_ring":  # the ring carried the later epochs' batches but for the
            # W * P each epoch's workers prime before the ring opens, which may go the usual way
            # (docs/engine.md, "Memory"; the first epoch's first batches find no block yet). A
            # bound of (EPOCHS - 1) * n held on an idle machine only: CI's loaded one saw 7 of 10.
            workers, prefetch_factor = 2, 2  # (_sdl's: 2 workers, torch's default prefetch)
            assert loader.stats()["worker_ring_batches"] >= (EPOCHS - 1) * (n - workers * prefetch_factor) > 0
    assert all(len(e) == n for e in full)
    # Each batch knows its place: the draws of epoch e, batch i are keyed (e, i).
    assert [[(t[1], t[2]) for t in e] for e in full] == [[(e, i) for i in range(n)]
                                                          for e in range(EPOCHS)]
    with make() as first:
        saves = moment(first, n)
    for label, state, (epoch, consumed) in saves:
        if source in WITHOUT_LEN and moment in (after_last_batch, break_at_last_batch):
            # All its batches received, its end not: without len() that is still the epoch (its
            # rest, empty, comes first), as an uninterrupted loop's next next() ends it.
            epoch, consumed = 0, n
        assert (state["epoch"], state["batches_consumed"]) == (epoch, consumed), label
        with make() as resumed:
            resumed.load_state_dict(state)
            got = _epochs(resumed, EPOCHS - epoch)
            # Saved again before anything runs: the same position.
            again = resumed.state_dict()
        expected = [full[epoch][consumed:]] + full[epoch + 1:]
        assert [[(t[1], t[2]) for t in e] for e in got] == [[(t[1], t[2]) for t in e]
                                                            for e in expected], label
        if source in EXACT_LATER_EPOCHS:
            assert got == expected, label
        else:
            if consumed:  # the rest of an epoch begun is exact for this source too
                assert [t[0] for t in got[0]] == [t[0] for t in expected[0]], label
            bare = _bare_sdl_resumed(state["source"], state.get("source_epoch_open", False),
                                     EPOCHS - epoch)
            assert [[t[0] for t in e] for e in got] == bare, label
        assert again["epoch"] == EPOCHS and again["batches_consumed"] == 0, label


def test_the_bare_stateful_dataloader_without_workers_resumes_its_later_epochs_differently():
    """Why the module compares sdl_0_workers' later epochs with its bare resume: torchdata's own
    StatefulDataLoader (num_workers=0) resumed mid-epoch finishes that epoch exactly, but its
    next epoch's order is not the uninterrupted run's. If torchdata changes this, the exception
    in EXACT_LATER_EPOCHS can go."""
    uninterrupted = _sdl(0)
    orders = [[b[0].tolist() for b in uninterrupted] for _ in range(2)]
    first = _sdl(0)
    it = iter(first)
    head = [next(it)[0].tolist() for _ in range(2)]
    resumed = _sdl(0)
    resumed.load_state_dict(first.state_dict())
    rest = [b[0].tolist() for b in resumed]
    assert head + rest == orders[0]
    assert [b[0].tolist() for b in resumed] != orders[1]


# ---- the paths the moments above reach only by timing --------------------------------------------


class SlowToEnd(StatefulSource):
    """A StatefulSource whose end (the ``next()`` that raises StopIteration) waits for ``release``."""

    def __init__(self, release, batches=4):
        super().__init__(lambda i: torch.tensor([i]), batches)
        self.release = release

    def __iter__(self):
        for batch in super().__iter__():
            yield batch
            if self.pos == self.batches:
                self.release.wait()


def test_a_source_slow_to_end_saves_its_epoch_open_and_the_resume_starts_the_next_epoch():
    """The producer had not seen the source's end when the state was taken (it waits for it at
    most the timeout): the state says the source's epoch is open, and the resumed Prefetcher
    first runs that epoch's empty remainder, then yields the next epoch whole."""
    import threading

    release = threading.Event()
    tag = Tag(lambda b: tuple(b.tolist()))
    with prefetch.Prefetcher(SlowToEnd(release), device="cpu", transform=tag, timeout=0.3) as first:
        it = iter(first)
        head = [next(it) for _ in range(4)]
        state = first.state_dict()
        release.set()
    assert [t[1:] for t in head] == [(0, i) for i in range(4)]
    assert state["source_epoch_open"] is True and state["source"] == {"pos": 4, "finished": False}
    assert (state["epoch"], state["batches_consumed"]) == (1, 0)
    done = threading.Event()
    done.set()
    with prefetch.Prefetcher(SlowToEnd(done), device="cpu", transform=tag) as resumed:
        resumed.load_state_dict(state)
        assert resumed.state_dict() == state  # unchanged until it runs
        got = list(resumed)
        assert got == [((i,), 1, i) for i in range(4)]
        assert "source_epoch_open" not in resumed.state_dict()


def test_an_open_epoch_whose_source_yields_more_is_refused_naming_the_problem():
    """A state that says the source's epoch is open where the source still has batches (its
    len() counted fewer than it yields): refused, not skipped nor delivered as the next epoch;
    the epoch after works."""
    tag = Tag(lambda b: tuple(b.tolist()))
    with prefetch.Prefetcher(StatefulSource(lambda i: torch.tensor([i]), 5), device="cpu",
                             transform=tag) as loader:
        loader.load_state_dict({"epoch": 1, "batches_consumed": 0, "source_epoch_open": True,
                                "source": {"pos": 3, "finished": False}})
        with pytest.raises(RuntimeError, match="yields more batches there"):
            list(loader)
        assert [t[0] for t in list(loader)] == [(i,) for i in range(5)]


class ShortLen(StatefulSource):
    def __len__(self):
        return self.batches - 1


def test_a_source_longer_than_its_len_resumes_the_rest_of_its_epoch():
    """All len() batches consumed but the source had one more: the position stays in the epoch
    (the uninterrupted run's next batch is that one), not at the next epoch's start."""
    tag = Tag(lambda b: tuple(b.tolist()))
    with prefetch.Prefetcher(ShortLen(lambda i: torch.tensor([i]), 5), device="cpu",
                             transform=tag) as first:
        it = iter(first)
        [next(it) for _ in range(4)]
        state = first.state_dict()
    assert (state["epoch"], state["batches_consumed"]) == (0, 4)
    with prefetch.Prefetcher(ShortLen(lambda i: torch.tensor([i]), 5), device="cpu",
                             transform=tag) as resumed:
        resumed.load_state_dict(state)
        assert list(resumed) == [((4,), 0, 4)]
        assert [t[1:] for t in list(resumed)] == [(1, i) for i in range(5)]
