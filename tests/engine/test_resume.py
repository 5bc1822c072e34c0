"""Prefetcher.state_dict()/load_state_dict() over stateful sources: a run stopped after k batches
and resumed yields exactly the batches it had not consumed, with the same transform draws —
whatever the Prefetcher had prefetched beyond k. The transform's state travels with the loader's
(Prefetcher and ArrayLoader): a FusedAugment whose seed was drawn adopts the saved seed, and one
built with another seed refuses the state. The ArrayLoader's own position: loaders/test_array_loader.py."""
import pytest
import torch

from prefetch import ArrayLoader, FusedAugment, Prefetcher

from ..helpers import StatefulSource

MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]


def _images_and_index(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (4, 9, 9, 3), dtype=torch.uint8, generator=g), torch.tensor([i] * 4)


def StatefulRange(batches=12):
    """Batch i is (images_i, i)."""
    return StatefulSource(_images_and_index, batches)


def run(prefetcher, epochs):
    out = []
    for _ in range(epochs):
        out.extend(prefetcher)
    return out


def assert_runs_equal(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]), i


def aug():
    return FusedAugment(MEAN, STD, crop=7, padding=1, hflip=0.5, seed=3)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 11, 12])
def test_resume_with_a_stateful_source(k):
    full = run(Prefetcher(StatefulRange(), depth=4, transform=aug()), 1)
    first = Prefetcher(StatefulRange(), depth=4, transform=aug())
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = first.state_dict()
    assert state["batches_consumed"] == (k if k < 12 else 0)
    first.close()
    second = Prefetcher(StatefulRange(), depth=4, transform=aug())
    second.load_state_dict(state)
    rest = run(second, 1) if k < 12 else []
    assert second.state_dict()["epoch"] == 1
    # The epoch after: the same batches with the next epoch's draws.
    nxt = run(second, 1)
    second.close()
    assert_runs_equal(head + rest, full)
    assert [int(b[1][0]) for b in nxt] == list(range(12))
    with Prefetcher(StatefulRange(), depth=4, transform=aug()) as ref:
        ref.set_epoch(1)
        assert_runs_equal(nxt, run(ref, 1))


def test_state_before_any_batch_and_without_a_stateful_source():
    p = Prefetcher(StatefulRange())
    assert p.state_dict() == {"epoch": 0, "batches_consumed": 0,
                            "source": {"pos": 0, "finished": False}}
    p.close()
    with Prefetcher([torch.zeros(2)]) as plain:  # no position to save: no methods for one
        assert not hasattr(plain, "state_dict") and not hasattr(plain, "load_state_dict")
        with pytest.raises(AttributeError, match="needs a source with state_dict"):
            plain.state_dict()
    with pytest.raises(KeyError, match="lacks"):
        Prefetcher(StatefulRange()).load_state_dict({"epoch": 0})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_with_torchdata_stateful_dataloader(num_workers):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    data = torch.randint(0, 256, (60, 8, 8, 3), dtype=torch.uint8)
    dataset = torch.utils.data.TensorDataset(data, torch.arange(60))

    def make():
        loader = sdl.StatefulDataLoader(dataset, batch_size=5, shuffle=True, num_workers=num_workers,
                                        generator=torch.Generator().manual_seed(0))
        return Prefetcher(loader, depth=3, transform=aug())

    with make() as p:
        full = run(p, 1)
    for k in (1, 3, 7):
        with make() as first:
            it = iter(first)
            head = [next(it) for _ in range(k)]
            state = first.state_dict()
        with make() as second:
            second.load_state_dict(state)
            rest = run(second, 1)
        assert_runs_equal(head + rest, full)


# ---- the transform's seed travels with the state -------------------------------------------------


def _image_batch(i, n=4):
    """Batch i of a source of uint8 images alone: 10 x 8, where a crop of 6 with padding 2 fits."""
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (n, 10, 8, 3), dtype=torch.uint8, generator=g)


def StatefulBatches(batches=8):
    """A stateful source of uint8 image batches (its state: the next batch)."""
    return StatefulSource(_image_batch, batches)


def seeded(seed):
    return FusedAugment(MEAN, STD, crop=6, padding=2, hflip=0.5, vflip=0.5, seed=seed)


def unseeded():
    return seeded(None)  # the seed is drawn


@pytest.mark.parametrize("k", [0, 3, 8])
def test_prefetcher_resume_with_a_drawn_seed_equals_the_uninterrupted_run(k):
    aug = unseeded()
    with Prefetcher(StatefulBatches(), device="cpu", transform=aug) as pf:
        full = list(pf) + list(pf)
    first = Prefetcher(StatefulBatches(), device="cpu", depth=4, transform=aug)
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = first.state_dict()
    first.close()
    fresh = unseeded()  # a restarted process: another drawn seed
    assert fresh.seed != aug.seed
    with Prefetcher(StatefulBatches(), device="cpu", depth=4, transform=fresh) as second:
        second.load_state_dict(state)
        tail = list(second) + (list(second) if k < 8 else [])  # to the end of epoch 1
    assert fresh.seed == aug.seed
    got = head + tail
    assert len(got) == len(full) == 16
    assert all(torch.equal(a, b) for a, b in zip(got, full))


@pytest.mark.parametrize("resident", ["host", "device"])
def test_array_loader_resume_with_a_drawn_seed_equals_the_uninterrupted_run(resident):
    images, labels = _image_batch(0, n=30), torch.arange(30)
    aug = unseeded()

    def make(transform):
        return ArrayLoader((images, labels), 4, seed=3, resident=resident, transform=transform)

    with make(aug) as loader:
        full = list(loader)
    with make(aug) as first:
        it = iter(first)
        head = [next(it) for _ in range(3)]
        state = first.state_dict()
    fresh = unseeded()
    with make(fresh) as second:
        second.load_state_dict(state)
        tail = list(second)
    assert fresh.seed == aug.seed
    got = head + tail
    assert len(got) == len(full)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, full))


def test_loading_a_state_of_another_explicit_seed_is_refused_naming_both():
    images, labels = _image_batch(0, n=30), torch.arange(30)
    with Prefetcher(StatefulBatches(), device="cpu", transform=seeded(5)) as pf:
        state = pf.state_dict()
    with Prefetcher(StatefulBatches(), device="cpu", transform=seeded(6)) as pf:
        with pytest.raises(ValueError, match=r"saved with FusedAugment seed 5, this one was built with seed=6"):
            pf.load_state_dict(state)
    with Prefetcher(StatefulBatches(), device="cpu", transform=seeded(5)) as pf:
        pf.load_state_dict(state)  # the same seed: fine
    with ArrayLoader((images, labels), 4, transform=seeded(5)) as loader:
        state = loader.state_dict()
    with ArrayLoader((images, labels), 4, transform=seeded(6)) as loader:
        with pytest.raises(ValueError, match=r"saved with FusedAugment seed 5, this one was built with seed=6"):
            loader.load_state_dict(state)


def test_a_state_without_the_seed_is_refused_by_a_drawn_seed():
    with Prefetcher(StatefulBatches(), device="cpu") as pf:  # saved with no transform
        state = pf.state_dict()
    with Prefetcher(StatefulBatches(), device="cpu", transform=unseeded()) as pf:
        with pytest.raises(ValueError, match=r"no seed.*seed="):
            pf.load_state_dict(state)
    with Prefetcher(StatefulBatches(), device="cpu", transform=seeded(5)) as pf:
        pf.load_state_dict(state)  # an explicit seed needs nothing from the state


def test_state_methods_exist_exactly_when_the_source_has_a_state_for_subclasses_too():
    """A Prefetcher (or a user's subclass of it) has state_dict()/load_state_dict() over a
    stateful source and none over another (Lightning saves the state of whatever has them, and
    on Python >= 3.12 asks the class). A subclass's own state_dict() wins over ours."""

    class Mine(Prefetcher):
        pass

    class Own(Prefetcher):
        def state_dict(self):
            return {"own": True}

    for cls in (Prefetcher, Mine):
        with cls(StatefulRange(), device="cpu") as stateful, cls([torch.zeros(1)]) as plain:
            assert isinstance(stateful, cls) and isinstance(plain, cls)
            assert type(stateful).__name__ == type(plain).__name__ == cls.__name__
            assert callable(stateful.state_dict) and callable(stateful.load_state_dict)
            assert stateful.state_dict()["batches_consumed"] == 0
            assert not hasattr(plain, "state_dict") and not hasattr(plain, "load_state_dict")
            assert not hasattr(type(plain), "state_dict")  # (what Python 3.12's Protocol reads)
    with Own(StatefulRange(), device="cpu") as own:
        assert own.state_dict() == {"own": True} and callable(own.load_state_dict)
